"""`pocketmq cluster up` as a real process: children up, traffic through them, Ctrl-C.

The cluster runs on free ports with its data in tmp_path; the test talks to it
with the client SDK and stops it with SIGINT, as a terminal's Ctrl-C would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import sys
from pathlib import Path

import pytest
from clikit import pocketmq_main
from processkit import free_port_run

from pocketmq.client import (
    ClientError,
    ConsumeResult,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    SendStatus,
)
from pocketmq.client.remoting import Remoting
from pocketmq.common.msgid import decode_offset_msg_id

UP_TIMEOUT_S = 60.0


async def start_cluster_up(
    data_dir: Path,
    *,
    namesrv_port: int,
    broker_port: int,
    v2_port: int,
    brokers: int = 2,
    replicas: int = 0,
    extra_config: str = "",
    controller: bool | None = None,
) -> asyncio.subprocess.Process:
    small = data_dir.parent / "small-segments.toml"  # 16 MiB, not 1 GiB, of disk a broker
    small.write_text(f"commitlog_file_size_bytes = 16777216\n{extra_config}")
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pocketmq",
        "cluster",
        "up",
        "--brokers",
        str(brokers),
        "--replicas",
        str(replicas),
        *([] if controller is None else ["--controller" if controller else "--no-controller"]),
        "--data-dir",
        str(data_dir),
        "--namesrv-port",
        str(namesrv_port),
        "--broker-port",
        str(broker_port),
        "--v2-port",
        str(v2_port),
        "--config",
        str(small),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "POCKETMQ_NAMESRV": "127.0.0.1:1"},
    )  # flags must win over it


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
    tmp_path, stop_on_teardown, eventually
):
    namesrv_port, broker_port, v2_port = (free_port_run(1), free_port_run(4), free_port_run(2))
    proc = await start_cluster_up(
        tmp_path / "cluster", namesrv_port=namesrv_port, broker_port=broker_port, v2_port=v2_port
    )
    stop_on_teardown(proc)
    assert proc.stdout is not None and proc.stderr is not None
    banner = await read_until(proc.stdout, "Ctrl-C stops the cluster.", UP_TIMEOUT_S)
    namesrv = f"127.0.0.1:{namesrv_port}"
    for role, name, addr in (
        ("nameserver", "-", namesrv),
        ("ASYNC_MASTER", "broker-a", f"127.0.0.1:{broker_port}"),
        ("ASYNC_MASTER", "broker-b", f"127.0.0.1:{broker_port + 2}"),
    ):
        assert re.search(rf"{role}\s+{re.escape(name)}\s+(-|0)\s+{re.escape(addr)}\s", banner), (
            banner
        )
    assert f"export POCKETMQ_NAMESRV={namesrv}" in banner

    received: set[bytes] = set()
    consumer = PushConsumer(
        group="cluster-up-test", namesrv=namesrv, consume_from="first", rebalance_interval_s=1.0
    )
    consumer.subscribe("up-topic")

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        received.update(m.body for m in messages)
        return ConsumeResult.CONSUME_SUCCESS

    async with Producer(group="cluster-up-pg", namesrv=namesrv) as producer:
        results = await asyncio.gather(
            *(producer.send(Message(topic="up-topic", body=f"m{i}".encode())) for i in range(20))
        )
    brokers = {r.queue.broker_name for r in results}
    assert brokers <= {"broker-a", "broker-b"}
    # Each broker registers the topic it auto-created; a consumer that read the route
    # before the second did would see that broker's queues only at its next route
    # refresh (30 s, RocketMQ's too), so the route is awaited first.
    await eventually(
        lambda: routed(namesrv, "up-topic", brokers),
        timeout_s=20,
        what="the route of up-topic on every broker that stored some",
    )
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
    assert segments and {s.stat().st_size for s in segments} == {16 * 1024 * 1024}, (
        "--config reaches every broker"
    )


async def test_cluster_up_reports_a_broker_that_dies_and_stops_the_rest(tmp_path, stop_on_teardown):
    namesrv_port, broker_port = free_port_run(1), free_port_run(4)
    with socket.socket() as squatter:  # broker-a's port is taken
        squatter.bind(("127.0.0.1", broker_port))
        squatter.listen()
        proc = await start_cluster_up(
            tmp_path / "cluster", namesrv_port=namesrv_port, broker_port=broker_port, v2_port=-1
        )
        stop_on_teardown(proc)
        out, err = await asyncio.wait_for(proc.communicate(), UP_TIMEOUT_S)
    assert proc.returncode == 1
    assert "broker-a exited with code 1" in err.decode()
    assert f"127.0.0.1:{broker_port}" in err.decode()  # the end of its log
    assert "nameserver exited with code 0" in out.decode()


async def test_cluster_up_with_a_replica_copies_the_master_and_promote_fails_over_to_it(
    tmp_path, stop_on_teardown, eventually, capsys
):
    namesrv_port, broker_port = free_port_run(1), free_port_run(4)
    proc = await start_cluster_up(
        tmp_path / "cluster",
        namesrv_port=namesrv_port,
        broker_port=broker_port,
        v2_port=-1,
        brokers=1,
        replicas=1,
        extra_config="register_interval_seconds = 1\n",
        controller=False,
    )
    stop_on_teardown(proc)
    assert proc.stdout is not None
    banner = await read_until(proc.stdout, "Ctrl-C stops the cluster.", UP_TIMEOUT_S)
    namesrv = f"127.0.0.1:{namesrv_port}"
    master, replica = f"127.0.0.1:{broker_port}", f"127.0.0.1:{broker_port + 2}"
    assert re.search(rf"SYNC_MASTER\s+broker-a\s+0\s+{re.escape(master)}\s", banner), banner
    assert re.search(rf"SLAVE\s+broker-a\s+1\s+{re.escape(replica)}\s", banner), banner

    async def listing() -> dict[tuple[int, str], dict]:
        code, out, err = await pocketmq_main(
            capsys, "cluster", "list", "--namesrv", namesrv, "--json"
        )
        assert code == 0, err
        return {(b["broker_id"], b["addr"]): b for b in json.loads(out)}

    async def replica_in_sync() -> bool:
        rows = await listing()
        m, r = rows.get((0, master)), rows.get((1, replica))
        return bool(m and r and m["in_sync_replicas"] == 1 and r["replication_lag_bytes"] == 0)

    await eventually(replica_in_sync, timeout_s=20, interval_s=0.2, what="the replica in sync")
    async with Producer(group="ha-pg", namesrv=namesrv) as producer:
        results = [
            await producer.send(Message(topic="ha-topic", body=f"m{i}".encode())) for i in range(10)
        ]
    assert {r.status for r in results} == {SendStatus.SEND_OK}  # the replica has them too

    async def caught_up() -> dict | None:
        rows = await listing()
        r = rows.get((1, replica))
        return rows if r and r["replication_lag_bytes"] == 0 else None

    rows = await eventually(caught_up, timeout_s=10, interval_s=0.2, what="no lag")
    assert [(b["broker_id"], b["broker_role"], b["master_epoch"]) for b in rows.values()] == [
        (0, "SYNC_MASTER", 1),
        (1, "SLAVE", 1),
    ]
    code, table, _ = await pocketmq_main(capsys, "cluster", "list", "--namesrv", namesrv)
    assert code == 0
    assert table.splitlines()[0].split()[:9] == [
        "CLUSTER",
        "BROKER",
        "ID",
        "ROLE",
        "ADDRESS",
        "EPOCH",
        "LAG",
        "BYTES",
        "IN",
    ]
    assert re.search(rf"broker-a\s+1\s+SLAVE\s+{re.escape(replica)}\s+1\s+0\s", table), table

    code, out, err = await pocketmq_main(capsys, "broker", "promote", replica, "--namesrv", namesrv)
    assert code == 0, err
    promoted = re.search(
        r"promoted broker-a at \S+ to ASYNC_MASTER: master epoch 2, starting "
        r"at commit-log offset (\d+)",
        out,
    )
    assert promoted and int(promoted.group(1)) > 0, out

    async def replica_is_master() -> dict | None:
        rows = await listing()
        r = rows.get((0, replica))
        return rows if r and (r["broker_role"], r["master_epoch"]) == ("ASYNC_MASTER", 2) else None

    rows = await eventually(
        replica_is_master, timeout_s=10, interval_s=0.2, what="the replica listed as master"
    )
    assert (0, master) not in rows, "the old master is no longer routed"
    async with Producer(group="ha-pg", namesrv=namesrv) as producer:
        after = await producer.send(Message(topic="ha-topic", body=b"after the failover"))
    assert after.status is SendStatus.SEND_OK
    assert decode_offset_msg_id(after.offset_msg_id).port == broker_port + 2

    async def old_master_fenced() -> bool:
        code, out, _ = await pocketmq_main(
            capsys, "broker", "status", master, "--namesrv", namesrv, "--json"
        )
        return code == 0 and "fenced" in json.loads(out)[master]

    await eventually(
        old_master_fenced,
        timeout_s=10,
        interval_s=0.2,
        what="the old master fenced by the nameserver",
    )

    proc.send_signal(signal.SIGINT)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    for name in ("broker-a", "broker-a-1", "nameserver"):
        assert f"{name} exited with code 0" in out.decode()

    # Up again on the same data: the promotion holds, and the old master is fenced.
    proc = await start_cluster_up(
        tmp_path / "cluster",
        namesrv_port=namesrv_port,
        broker_port=broker_port,
        v2_port=-1,
        brokers=1,
        replicas=1,
        extra_config="register_interval_seconds = 1\n",
        controller=False,
    )
    stop_on_teardown(proc)
    assert proc.stdout is not None
    banner = await read_until(proc.stdout, "Ctrl-C stops the cluster.", UP_TIMEOUT_S)
    assert re.search(rf"ASYNC_MASTER\s+broker-a\s+0\s+{re.escape(replica)}\s", banner), banner
    assert re.search(rf"SYNC_MASTER \(fenced\)\s+broker-a\s+0\s+{re.escape(master)}\s", banner), (
        banner
    )
    assert f"broker-a at {master} takes no writes" in banner
    proc.send_signal(signal.SIGINT)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()


async def test_cluster_up_with_replicas_runs_the_controller_and_broker_elect_moves_the_master(
    tmp_path, stop_on_teardown, eventually, capsys
):
    namesrv_port, broker_port = free_port_run(1), free_port_run(4)
    proc = await start_cluster_up(
        tmp_path / "cluster",
        namesrv_port=namesrv_port,
        broker_port=broker_port,
        v2_port=-1,
        brokers=1,
        replicas=1,
        extra_config="register_interval_seconds = 1\nha_max_time_replica_not_catchup_ms = 3000\n",
    )
    stop_on_teardown(proc)
    assert proc.stdout is not None
    banner = await read_until(proc.stdout, "Ctrl-C stops the cluster.", UP_TIMEOUT_S)
    namesrv = f"127.0.0.1:{namesrv_port}"
    first, second = f"127.0.0.1:{broker_port}", f"127.0.0.1:{broker_port + 2}"
    # The controller named the first member master; the other is its replica (id 2).
    assert re.search(rf"SYNC_MASTER\s+broker-a\s+0\s+{re.escape(first)}\s", banner), banner
    assert re.search(rf"SLAVE\s+broker-a\s+2\s+{re.escape(second)}\s", banner), banner

    async def listing() -> dict[str, dict]:
        code, out, err = await pocketmq_main(
            capsys, "cluster", "list", "--namesrv", namesrv, "--json"
        )
        assert code == 0, err
        return {b["addr"]: b for b in json.loads(out)}

    async def both_in_sync() -> dict | None:
        rows = await listing()
        m = rows.get(first)
        return rows if m and m["sync_state_set"] == "1 2" else None

    rows = await eventually(
        both_in_sync,
        timeout_s=30,
        interval_s=0.3,
        what="the replica in the controller's in-sync set",
    )
    assert rows[first]["controller_broker_id"] == 1 and rows[second]["controller_broker_id"] == 2

    code, out, err = await pocketmq_main(
        capsys, "broker", "elect", "broker-a", "--broker-id", "2", "--namesrv", namesrv
    )
    assert code == 0, err
    assert re.search(rf"elected broker-a id 2 at {re.escape(second)} master in epoch 2", out), out

    async def second_is_master() -> bool:
        rows = await listing()
        r = rows.get(second)
        return bool(
            r
            and r["broker_role"] == "SYNC_MASTER"
            and r["broker_id"] == 0
            and r["master_epoch"] == 2
        )

    await eventually(
        second_is_master, timeout_s=15, interval_s=0.3, what="the elected broker listed as master"
    )
    async with Producer(group="elect-pg", namesrv=namesrv) as producer:
        sent = await producer.send(Message(topic="elect-topic", body=b"after the election"))
    assert decode_offset_msg_id(sent.offset_msg_id).port == broker_port + 2

    # Refusals: an id the controller does not know, a name it does not know, bad usage.
    code, _, err = await pocketmq_main(
        capsys, "broker", "elect", "broker-a", "--broker-id", "9", "--namesrv", namesrv
    )
    assert code == 1 and "NOT_ELIGIBLE" in err, err
    code, _, err = await pocketmq_main(capsys, "broker", "elect", "broker-z", "--namesrv", namesrv)
    assert code == 1 and "UNKNOWN_BROKER_NAME" in err, err
    code, _, err = await pocketmq_main(capsys, "broker", "elect", "broker-a", "--broker-id", "x")
    assert code == 2 and "broker id" in err

    proc.send_signal(signal.SIGINT)
    _out, err_b = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err_b.decode()
