"""The CLI round trip: `pocketmq send`, `produce` and `consume` as subprocesses."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest

from pocketmq.broker.broker import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.nameserver import NameServer, NamesrvConfig

CLI = [sys.executable, "-c", "import sys; from pocketmq.cli import main; sys.exit(main())"]


@pytest.fixture
async def namesrv_addr(tmp_path):
    namesrv = NameServer(NamesrvConfig(host="127.0.0.1", port=0))
    await namesrv.start()
    broker = Broker(
        BrokerConfig(
            port=0,
            data_dir=str(tmp_path / "broker"),
            namesrv_addrs=namesrv.address,
            commitlog_file_size_bytes=16 * 1024 * 1024,
            index_slots=1000,
            index_entries=4000,
            default_topic_queue_nums=2,
        )
    )
    await broker.start()
    yield namesrv.address
    await broker.stop(0)
    await namesrv.stop(0)


async def pocketmq(
    *args: str, stdin: bytes = b"", env: dict[str, str] | None = None, timeout_s: float = 30.0
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *CLI,
        "--log-level",
        "WARNING",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), timeout_s)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


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
        env={"POCKETMQ_NAMESRV": namesrv_addr},
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
