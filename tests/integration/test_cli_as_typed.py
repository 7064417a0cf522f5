"""`pocketmq send|produce|consume` run as a user types them (issue 18): ``.venv/bin/pocketmq``
as a subprocess against a real nameserver and broker on port 0.

Exit codes as the README says: 0 worked, 1 refused or unreachable, 2 bad usage.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

from clikit import POCKETMQ, pocketmq


async def peek(namesrv: str, topic: str, *extra: str) -> list[dict]:
    code, out, err = await pocketmq(
        "consume", topic, "--peek", "--json", "--namesrv", namesrv, *extra
    )
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


# -- produce -------------------------------------------------------------------------------
async def test_produce_sends_each_line_as_it_arrives_and_ctrl_c_loses_nothing_read(
    namesrv_addr, eventually
):
    proc = await asyncio.create_subprocess_exec(
        POCKETMQ,
        "--log-level",
        "WARNING",
        "produce",
        "tail-f",
        "--namesrv",
        namesrv_addr,
        "--key",
        "k1",
        "--property",
        "source=tail",
        stdin=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write(b"first line\n")
        await proc.stdin.drain()  # stdin stays open, as under `tail -f`

        async def sent() -> list[dict]:  # [] until the first send created the topic
            code, out, _ = await pocketmq(
                "consume", "tail-f", "--peek", "--json", "--namesrv", namesrv_addr
            )
            return [json.loads(line) for line in out.splitlines()] if code == 0 else []

        got = await eventually(sent, timeout_s=30, interval_s=0.5)
        assert [m["body"] for m in got] == ["first line"]
        assert got[0]["keys"] == ["k1"] and got[0]["properties"]["source"] == "tail"
        proc.stdin.write(b"second line\n")
        await proc.stdin.drain()
        proc.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
    text = err.decode()
    assert proc.returncode == 0, text
    assert "sent 2, failed 0" in text and "Traceback" not in text
    assert sorted(m["body"] for m in await peek(namesrv_addr, "tail-f")) == [
        "first line",
        "second line",
    ]


async def test_produce_counts_failures_with_their_reason_and_exits_1():
    code, _out, err = await pocketmq("produce", "t", "--namesrv", "127.0.0.1:1", stdin=b"a\nb\n")
    assert code == 1
    assert "sent 0, failed 2" in err
    assert "2 x " in err  # the reason, once, with its count
    assert "Traceback" not in err and "never retrieved" not in err


# -- consume -------------------------------------------------------------------------------
async def test_consume_n_with_fewer_messages_stops_after_the_idle_timeout(namesrv_addr):
    code, _out, err = await pocketmq("send", "few", "only one", "--namesrv", namesrv_addr)
    assert code == 0, err
    code, out, err = await pocketmq(
        "consume",
        "few",
        "--group",
        "g-few",
        "--from",
        "first",
        "-n",
        "10",
        "--idle-timeout",
        "2",
        "--namesrv",
        namesrv_addr,
    )
    assert code == 0, err
    assert out.splitlines() == ["only one"]
    assert "consumed 1 message(s); nothing more arrived for 2 s" in err


async def test_consume_of_an_unknown_topic_exits_1(namesrv_addr):
    code, _out, err = await pocketmq(
        "consume", "no-such-topic", "--group", "g", "-n", "1", "--namesrv", namesrv_addr
    )
    assert code == 1
    assert "no-such-topic" in err


async def test_consume_from_an_unreachable_nameserver_exits_1():
    code, _out, err = await pocketmq(
        "consume", "t", "--group", "g", "-n", "1", "--namesrv", "127.0.0.1:1"
    )
    assert code == 1, err
    assert "pocketmq consume:" in err


async def test_consume_usage_errors_exit_2():
    code, _out, err = await pocketmq("consume", "t")
    assert code == 2 and "--group" in err
    code, _out, err = await pocketmq("consume", "t", "--peek", "--group", "g")
    assert code == 2 and "--peek" in err


async def test_peek_reads_without_a_group_and_stops_at_the_end(namesrv_addr):
    for i in range(3):
        code, _out, err = await pocketmq(
            "send", "peeked", f"m{i}", "--tag", f"t{i % 2}", "--namesrv", namesrv_addr
        )
        assert code == 0, err
    assert sorted(m["body"] for m in await peek(namesrv_addr, "peeked")) == ["m0", "m1", "m2"]
    assert sorted(m["body"] for m in await peek(namesrv_addr, "peeked", "--expr", "t1")) == ["m1"]
    code, out, _ = await pocketmq("group", "list", "--json", "--namesrv", namesrv_addr)
    assert code == 0 and not any(g["offset_topics"] for g in json.loads(out))


async def test_consume_from_a_time_a_queue_and_an_offset_with_a_format(namesrv_addr, eventually):
    code, out, err = await pocketmq(
        "send", "positions", "old", "--queue", "0", "--json", "--namesrv", namesrv_addr
    )
    assert code == 0, err
    first = json.loads(out)
    assert first["queue_id"] == 0 and isinstance(first["queue_offset"], int)
    [old] = await peek(namesrv_addr, "positions")
    since = old["store_timestamp_ms"] + 1
    await eventually(lambda: time.time() * 1000 > since, what="the clock passes `since`")
    for body in ("new-1", "new-2"):
        assert (
            await pocketmq("send", "positions", body, "--queue", "0", "--namesrv", namesrv_addr)
        )[0] == 0
    code, out, err = await pocketmq(
        "consume",
        "positions",
        "--peek",
        "--from",
        str(since),
        "--format",
        "{queue_id}:{queue_offset} {body}",
        "--namesrv",
        namesrv_addr,
    )
    assert code == 0, err
    assert out.splitlines() == ["0:1 new-1", "0:2 new-2"]
    code, out, err = await pocketmq(
        "consume", "positions", "--peek", "--until", str(since), "--namesrv", namesrv_addr
    )
    assert (code, out.split()) == (0, ["old"]), err
    code, out, err = await pocketmq(
        "consume",
        "positions",
        "--group",
        "g-pos",
        "--queue",
        "0",
        "--offset",
        "2",
        "-n",
        "1",
        "--namesrv",
        namesrv_addr,
    )
    assert (code, out.strip()) == (0, "new-2"), err
    code, out, _ = await pocketmq("cluster", "list", "--json", "--namesrv", namesrv_addr)
    [broker] = json.loads(out)
    code, out, err = await pocketmq(
        "consume",
        "positions",
        "--peek",
        "--queue",
        "0",
        "--broker",
        broker["addr"],
        "--offset",
        "1",
        "--namesrv",
        namesrv_addr,
    )  # --broker as host:port, or a name
    assert (code, out.split()) == (0, ["new-1", "new-2"]), err


async def test_send_with_a_delay_level_and_a_bad_property(namesrv_addr):
    code, out, err = await pocketmq(
        "send", "later", "x", "--delay-level", "1", "--json", "--namesrv", namesrv_addr
    )
    assert code == 0, err
    assert json.loads(out)["status"] == "SEND_OK"
    in_a_minute = str(int(time.time() * 1000) + 60_000)
    code, out, err = await pocketmq(
        "send", "later", "y", "--deliver-at", in_a_minute, "--namesrv", namesrv_addr
    )
    assert code == 0 and out.startswith("SEND_OK"), err
    assert "y" not in {m["body"] for m in await peek(namesrv_addr, "later")}  # in a minute
    code, _out, err = await pocketmq(
        "send", "later", "x", "--property", "novalue", "--namesrv", namesrv_addr
    )
    assert code == 2 and "NAME=VALUE" in err
    code, _out, err = await pocketmq(
        "send", "later", "x", "--delay-level", "1", "--deliver-at", "1", "--namesrv", namesrv_addr
    )
    assert code == 2


async def test_version_and_sub_command_usage():
    code, out, _ = await pocketmq("--version")
    assert code == 0 and out.startswith("pocketmq ")
    code, _out, err = await pocketmq("topic", "list", "--no-such-flag")
    assert code == 2
    assert "usage: pocketmq topic list" in err


def test_cli_entry_point_exists():
    assert os.access(POCKETMQ, os.X_OK)


async def test_store_dump_with_bodies(tmp_path):
    from storekit import open_store, record, small_config

    store = open_store(small_config(tmp_path))
    store.put_batch(record(body=b"hello", queue_id=0, tags="t", keys="k0", uniq="U0"))
    store.put_batch(record(body=b"\xff\x00", queue_id=0, tags="t", keys="k1", uniq="U1"))
    store.shutdown()
    code, out, err = await pocketmq("store", "dump", str(tmp_path), "--body", "--json")
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["body"], r["body_encoding"]) for r in rows] == [
        ("hello", "utf-8"),
        ("/wA=", "base64"),
    ]
    code, out, err = await pocketmq("store", "dump", str(tmp_path), "--body", "--limit", "1")
    assert code == 0 and out.rstrip().endswith("body='hello'"), err


async def test_ctrl_c_stops_consume_with_what_it_printed_committed(namesrv_addr):
    assert (await pocketmq("send", "endless", "one", "--namesrv", namesrv_addr))[0] == 0
    proc = await asyncio.create_subprocess_exec(
        POCKETMQ,
        "--log-level",
        "WARNING",
        "consume",
        "endless",
        "--group",
        "g-end",
        "--from",
        "first",
        "--namesrv",
        namesrv_addr,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        assert line == b"one\n"
        proc.send_signal(signal.SIGINT)
        _out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert b"interrupted after 1 message(s)" in err and b"Traceback" not in err
    code, out, err = await pocketmq(
        "group", "progress", "g-end", "--json", "--namesrv", namesrv_addr
    )
    assert code == 0 and json.loads(out)["total_lag"] == 0, err


async def test_produce_of_a_few_thousand_piped_lines_sends_each_once(namesrv_addr):
    lines = b"".join(b"line %d\n" % i for i in range(3000))
    code, _out, err = await pocketmq("produce", "bulk", "--namesrv", namesrv_addr, stdin=lines)
    assert code == 0, err
    assert "sent 3000, failed 0" in err
    bodies = [m["body"] for m in await peek(namesrv_addr, "bulk")]
    assert sorted(bodies) == sorted(f"line {i}" for i in range(3000))
