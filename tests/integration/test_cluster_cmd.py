"""`pocketmq cluster up` as a real process: children up, traffic through them, Ctrl-C.

The cluster runs on free ports with its data in tmp_path; the test talks to it
with the client SDK and stops it with SIGINT, as a terminal's Ctrl-C would.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import sys
from pathlib import Path

import pytest

from pocketmq.client import (
    ClientError,
    ConsumeResult,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
)
from pocketmq.client.remoting import Remoting

UP_TIMEOUT_S = 60.0


def free_port_run(count: int) -> int:
    """The first of *count* consecutive ports that are free now."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = probe.getsockname()[1]
        if first + count > 65535:
            continue
        held = []
        try:
            for port in range(first, first + count):
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
    raise RuntimeError(f"no run of {count} free ports found")


async def start_cluster_up(data_dir: Path, *, namesrv_port: int, broker_port: int,
                           v2_port: int) -> asyncio.subprocess.Process:
    small = data_dir.parent / "small-segments.toml"   # 16 MiB, not 1 GiB, of disk a broker
    small.write_text("commitlog_file_size_bytes = 16777216\n")
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pocketmq", "cluster", "up", "--brokers", "2",
        "--data-dir", str(data_dir), "--namesrv-port", str(namesrv_port),
        "--broker-port", str(broker_port), "--v2-port", str(v2_port), "--config", str(small),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "POCKETMQ_NAMESRV": "127.0.0.1:1"})  # flags must win over it


async def routed(namesrv: str, topic: str, brokers: set[str]) -> bool:
    remoting = Remoting()
    try:
        route = await remoting.nameserver([namesrv]).get_route(topic)
    except ClientError:
        return False
    finally:
        await remoting.close()
    return brokers <= {q.broker_name for q in route.queue_datas}


async def read_until(stream: asyncio.StreamReader, marker: str, timeout_s: float) -> str:
    text = ""
    async with asyncio.timeout(timeout_s):
        while marker not in text:
            line = await stream.readline()
            if not line:
                raise AssertionError(f"output ended before {marker!r}:\n{text}")
            text += line.decode()
    return text


@pytest.fixture
async def stop_on_teardown():
    procs: list[asyncio.subprocess.Process] = []
    yield procs.append
    for proc in procs:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 30)


async def test_cluster_up_serves_two_brokers_and_stops_every_child_on_sigint(
        tmp_path, stop_on_teardown, eventually):
    namesrv_port, broker_port, v2_port = (free_port_run(1), free_port_run(2),
                                          free_port_run(2))
    proc = await start_cluster_up(tmp_path / "cluster", namesrv_port=namesrv_port,
                                  broker_port=broker_port, v2_port=v2_port)
    stop_on_teardown(proc)
    assert proc.stdout is not None and proc.stderr is not None
    banner = await read_until(proc.stdout, "Ctrl-C stops the cluster.", UP_TIMEOUT_S)
    namesrv = f"127.0.0.1:{namesrv_port}"
    for name, addr in (("-", namesrv), ("broker-a", f"127.0.0.1:{broker_port}"),
                       ("broker-b", f"127.0.0.1:{broker_port + 1}")):
        assert re.search(rf"\s{re.escape(name)}\s+{re.escape(addr)}\s", banner), banner
    assert f"export POCKETMQ_NAMESRV={namesrv}" in banner

    received: set[bytes] = set()
    consumer = PushConsumer(group="cluster-up-test", namesrv=namesrv, consume_from="first",
                            rebalance_interval_s=1.0)
    consumer.subscribe("up-topic")

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        received.update(m.body for m in messages)
        return ConsumeResult.CONSUME_SUCCESS

    async with Producer(group="cluster-up-pg", namesrv=namesrv) as producer:
        results = await asyncio.gather(*(producer.send(Message(topic="up-topic",
                                                               body=f"m{i}".encode()))
                                         for i in range(20)))
    brokers = {r.queue.broker_name for r in results}
    assert brokers <= {"broker-a", "broker-b"}
    # Each broker registers the topic it auto-created; a consumer that read the route
    # before the second did would see that broker's queues only at its next route
    # refresh (30 s, RocketMQ's too), so the route is awaited first.
    await eventually(lambda: routed(namesrv, "up-topic", brokers), timeout_s=20,
                     what="the route of up-topic on every broker that stored some")
    await consumer.start()
    try:
        await eventually(lambda: len(received) == 20, timeout_s=30, what="20 messages consumed")
    finally:
        await consumer.shutdown()

    proc.send_signal(signal.SIGINT)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    for name in ("broker-a", "broker-b", "nameserver"):
        assert f"{name} exited with code 0" in out.decode()
    data = tmp_path / "cluster"
    assert not list(data.glob("*/abort")), "a broker did not shut down cleanly"
    assert (data / "broker-a" / "commitlog").is_dir() and (data / "logs" / "broker-b.log").exists()
    segments = list(data.glob("broker-*/commitlog/*"))
    assert segments and {s.stat().st_size for s in segments} == {16 * 1024 * 1024}, \
        "--config reaches every broker"


async def test_cluster_up_reports_a_broker_that_dies_and_stops_the_rest(tmp_path,
                                                                      stop_on_teardown):
    namesrv_port, broker_port = free_port_run(1), free_port_run(2)
    with socket.socket() as squatter:   # broker-a's port is taken
        squatter.bind(("127.0.0.1", broker_port))
        squatter.listen()
        proc = await start_cluster_up(tmp_path / "cluster", namesrv_port=namesrv_port,
                                      broker_port=broker_port, v2_port=-1)
        stop_on_teardown(proc)
        out, err = await asyncio.wait_for(proc.communicate(), UP_TIMEOUT_S)
    assert proc.returncode == 1
    assert "broker-a exited with code 1" in err.decode()
    assert f"127.0.0.1:{broker_port}" in err.decode()           # the end of its log
    assert "nameserver exited with code 0" in out.decode()
