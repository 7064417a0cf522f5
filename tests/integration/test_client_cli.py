"""The CLI round trip: `pocketmq send`, `produce` and `consume` as subprocesses."""

from __future__ import annotations

import json
import os

from clikit import pocketmq


async def test_cli_send_produce_consume_round_trip(namesrv_addr):
    code, out, err = await pocketmq(
        "send",
        "cli-topic",
        "hello",
        "--tag",
        "greet",
        "--key",
        "k1",
        "--key",
        "k2",
        "--namesrv",
        namesrv_addr,
    )
    assert code == 0, err
    assert out.startswith("SEND_OK msg_id=")

    code, _out, err = await pocketmq(
        "produce",
        "cli-topic",
        stdin=b"line one\nline two\n",
        env={**os.environ, "POCKETMQ_NAMESRV": namesrv_addr},
    )
    assert code == 0, err
    assert "sent 2, failed 0 message(s)" in err

    code, out, err = await pocketmq(
        "consume",
        "cli-topic",
        "--group",
        "cli-g",
        "--from",
        "first",
        "-n",
        "2",
        "--json",
        "--namesrv",
        namesrv_addr,
    )
    assert code == 0, err
    first_two = [json.loads(line) for line in out.splitlines()]
    assert len(first_two) == 2

    code, out, err = await pocketmq(
        "consume", "cli-topic", "--group", "cli-g", "-n", "1", "--namesrv", namesrv_addr
    )
    assert code == 0, err
    bodies = {m["body"] for m in first_two} | {out.strip()}
    assert bodies == {"hello", "line one", "line two"}
    greeted = [m for m in first_two if m["body"] == "hello"]
    assert not greeted or (greeted[0]["tags"], greeted[0]["keys"]) == ("greet", ["k1", "k2"])


async def test_cli_consume_with_sql_prints_only_the_matching_messages(namesrv_addr):
    for body, region in (("to-eu", "eu"), ("to-us", "us"), ("no-region", "")):
        props = ["--property", f"region={region}"] if region else []
        code, _out, err = await pocketmq("send", "cli-sql", body, *props, "--namesrv", namesrv_addr)
        assert code == 0, err
    code, out, err = await pocketmq(
        "consume",
        "cli-sql",
        "--group",
        "cli-sql-g",
        "--from",
        "first",
        "--sql",
        "region = 'eu'",
        "--idle-timeout",
        "8",
        "--namesrv",
        namesrv_addr,
    )
    assert code == 0, err
    assert out.split() == ["to-eu"]


async def test_cli_consume_refuses_a_bad_sql_filter_with_its_position():
    code, _out, err = await pocketmq(
        "consume", "t", "--group", "g", "--sql", "a > 1 AND", "--namesrv", "127.0.0.1:1"
    )
    assert code == 2
    assert "line 1, column 10" in err


async def test_cli_reports_a_missing_nameserver_as_an_error():
    code, _out, err = await pocketmq("send", "t", "x", "--namesrv", "127.0.0.1:1", timeout_s=30)
    assert code == 1
    assert "pocketmq send:" in err
