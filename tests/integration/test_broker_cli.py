"""``pocketmq standalone`` as a real process: serves, routes, and stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys

import grpc
from waitkit import eventually

from pocketmq.common.message import encode_record, pack_host
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc, nameserver_pb2, nameserver_pb2_grpc

READY = re.compile(rb"standalone: nameserver on (\S+), broker broker-a on (\S+)")


async def registered_route(stub, topic: str, timeout_s: float = 10.0):
    """The topic's route once the broker's registration (run on topic change) lands."""

    async def route():
        try:
            request = nameserver_pb2.GetRouteInfoByTopicRequest(topic=topic)
            return (await stub.GetRouteInfoByTopic(request)).route
        except grpc.aio.AioRpcError as exc:
            if exc.code() is not grpc.StatusCode.NOT_FOUND:
                raise
            return None

    return await eventually(route, timeout_s=timeout_s, what=f"{topic} registered")


async def test_standalone_serves_and_stops_gracefully_on_sigterm(tmp_path):
    data_dir = tmp_path / "data"
    small = tmp_path / "small-segments.toml"  # 16 MiB, not 1 GiB, of disk
    small.write_text("commitlog_file_size_bytes = 16777216\n")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pocketmq",
        "standalone",
        "--data-dir",
        str(data_dir),
        "--namesrv-port",
        "0",
        "--broker-port",
        "0",
        "--config",
        str(small),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        log = b""
        while not (match := READY.search(log)):
            line = await asyncio.wait_for(proc.stderr.readline(), 30)
            assert line, f"standalone exited before it was ready:\n{log.decode()}"
            log += line
        namesrv_addr, broker_addr = (m.decode() for m in match.groups())
        async with grpc.aio.insecure_channel(broker_addr) as channel:
            record = encode_record(
                topic="CliTopic", body=b"hi", store_host=pack_host(("127.0.0.1", 0))
            )
            reply = await broker_pb2_grpc.BrokerStub(channel).SendMessage(
                pb.SendMessageRequest(record=record)
            )
            assert reply.status == pb.SEND_OK
        async with grpc.aio.insecure_channel(namesrv_addr) as channel:
            stub = nameserver_pb2_grpc.NameServerStub(channel)
            route = await registered_route(stub, "CliTopic")
            assert dict(route.broker_datas[0].broker_addrs) == {0: broker_addr}
        assert (data_dir / "abort").exists()
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert not os.path.exists(data_dir / "abort")
    assert (data_dir / "config" / "topics.json").exists()


async def test_a_bad_flag_value_exits_2_naming_the_key(tmp_path):
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pocketmq",
        "broker",
        "--data-dir",
        str(tmp_path),
        "--namesrv",
        "no-port-here",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert b"namesrv_addrs" in err


def test_standalone_takes_broker_keys_from_config_and_its_flags_win(tmp_path):
    from pocketmq.cli import build_parser
    from pocketmq.cli.broker_cmd import _standalone_broker_config

    toml = tmp_path / "broker.toml"
    toml.write_text('[broker]\nmax_pull_messages = 256\nport = 1\ndata_dir = "elsewhere"\n')
    args = build_parser().parse_args(
        [
            "standalone",
            "--config",
            str(toml),
            "--broker-port",
            "10999",
            "--data-dir",
            str(tmp_path / "d"),
        ]
    )
    config = _standalone_broker_config(args, namesrv_addrs="127.0.0.1:9876")
    assert config.max_pull_messages == 256
    assert (config.port, config.data_dir) == (10999, str(tmp_path / "d"))
    assert config.namesrv_addr_list == ["127.0.0.1:9876"]
