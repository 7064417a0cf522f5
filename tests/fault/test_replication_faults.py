"""Replication with real broker processes and real files: catch-up, kill -9, failover, rejoin.

Every test runs a nameserver and the brokers of one broker name as processes
(``hakit.HaGroup``), loads them, breaks something (SIGKILL, a restart, a
promotion) and then checks, with the brokers stopped:

* every acknowledged (``SEND_OK``) message is read back at the queue offset
  its acknowledgement named, exactly once (``check_acks``);
* master and replica hold byte-identical commit-log segment files;
* ``pocketmq store verify`` is clean on every data directory.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import time

import aclmode
import grpc
import pytest
from faultkit import SendLoad, check_acks, create_topic, read_topic, routed_brokers, wait_for
from hakit import (
    HaGroup,
    assert_same_logs,
    bulk_write,
    promote,
    runtime_info,
    send_raw,
)
from processkit import MiB, ServerProcess, store_verify

from pocketmq.client import Producer
from pocketmq.v1 import broker_pb2 as pb

pytestmark = pytest.mark.timeout(90)

TOPIC, QUEUES = "TopicHa", 4
GiB = 1024 * MiB


async def setup(
    group: HaGroup, *, replica: bool = True
) -> tuple[ServerProcess, ServerProcess | None]:
    ns = await group.start_namesrv()
    master = await group.start("m")
    await create_topic(master.addr, TOPIC, QUEUES)
    await wait_for(
        lambda: routed_brokers(ns.addr, TOPIC), timeout_s=20, what=f"the route of {TOPIC}"
    )
    rep = await group.start("r", broker_id=1) if replica else None
    return master, rep


async def stop_and_verify(group: HaGroup, brokers: dict[str, ServerProcess]) -> int:
    """Stop the brokers (SIGTERM), then: identical commit logs, ``store verify`` clean on
    each. Returns the number of segments compared."""
    for broker in brokers.values():
        assert await broker.stop() == 0, broker.log_text()[-2000:]
    names = list(brokers)
    segments = 0
    for other in names[1:]:
        segments = assert_same_logs(group.dir(names[0]), group.dir(other))
    verdicts = await asyncio.gather(*(store_verify(group.dir(name)) for name in names))
    for name, (code, report) in zip(names, verdicts, strict=True):
        assert code == 0, f"store verify of {name}: {report}"
    return segments


async def load_for(producer: Producer, acks: int, *, tasks: int = 8) -> SendLoad:
    load = SendLoad(producer, TOPIC, tasks=tasks)
    await wait_for(
        lambda: len(load.acks) >= acks,
        timeout_s=40,
        interval_s=0.01,
        what=f"{acks} acknowledged sends",
    )
    return load


# -- 1. catch-up ------------------------------------------------------------------------------


async def test_replica_catches_up_from_empty_and_after_its_restart(kit, fault_report):
    group = HaGroup(kit, "ASYNC_MASTER")
    master, _ = await setup(group, replica=False)
    written = await bulk_write(master.addr, TOPIC, total_bytes=24 * MiB)
    replica = await group.start("r", broker_id=1)  # from empty
    took = await group.wait_caught_up(master, replica)
    # the replica stops; the master writes on; the replica comes back and catches up
    assert await replica.stop() == 0
    written += await bulk_write(master.addr, TOPIC, total_bytes=20 * MiB)
    replica = await group.start("r", broker_id=1)
    took += await group.wait_caught_up(master, replica)
    async with Producer(group="ha-catchup", namesrv=group.namesrv.addr) as producer:
        load = await load_for(producer, 300, tasks=4)
        await load.stop()
    await group.wait_caught_up(master, replica)
    for broker in (master, replica):
        stored = await read_topic(broker.addr, TOPIC, QUEUES)
        assert len(stored) == written + load.statuses["SEND_OK"]
        check = check_acks(load.acks, stored)
        assert not check.lost and not check.misplaced
    segments = await stop_and_verify(group, {"m": master, "r": replica})
    assert segments >= 3
    fault_report.add(
        "replica from empty + restart, identical",
        acknowledged=len(load.acks),
        lost=0,
        recover_s=took,
    )


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.skipif(
    aclmode.enabled(),
    reason="bulk copy, nothing the ACL changes: the "
    "main run covers it, and the ACL re-run stays within the time budget",
)
async def test_replica_catches_up_from_a_gib_behind(kit, fault_report):
    """1 GiB written while the replica is away, in 64 MiB segments; it catches up at a
    measured speed and ends byte-identical. Data directories are removed at the end."""
    big = dict(
        commitlog_file_size_bytes=64 * MiB,
        max_batch_size_bytes=8 * MiB,
        index_slots=200_000,
        index_entries=2_000_000,
        consume_queue_units_per_file=300_000,
        ha_transfer_batch_bytes=1 * MiB,
    )
    group = HaGroup(kit, "ASYNC_MASTER", **big)
    try:
        master, _ = await setup(group, replica=False)
        written = await bulk_write(
            master.addr, TOPIC, total_bytes=GiB + 8 * MiB, batch_bytes=4 * MiB
        )
        end = int((await runtime_info(master.addr))["commitlog_max_offset"])
        assert end >= GiB
        replica = await group.start("r", broker_id=1)
        started = time.monotonic()
        first = 0.0
        while True:
            info = await runtime_info(replica.addr)
            at = int(info["commitlog_max_offset"])
            if at and not first:
                first = time.monotonic()
            if at == end:
                break
            assert time.monotonic() - started < 200, f"replica at {at} of {end}"
            await asyncio.sleep(0.02)
        took = time.monotonic() - first
        speed = end / took / MiB
        print(
            f"\ncatch-up of {end / MiB:.0f} MiB: {took:.2f} s, {speed:.0f} MiB/s "
            f"({time.monotonic() - started:.2f} s from the replica's start)"
        )
        stored = await read_topic(replica.addr, TOPIC, QUEUES)
        assert len(stored) == written
        segments = await stop_and_verify(group, {"m": master, "r": replica})
        assert segments >= 16
        fault_report.add(
            f"replica 1 GiB behind, {speed:.0f} MiB/s", acknowledged=written, lost=0, recover_s=took
        )
    finally:
        for name in ("m", "r"):
            shutil.rmtree(group.dir(name), ignore_errors=True)


# -- 2. kill -9 of a SYNC_MASTER, then promotion ------------------------------------------------


async def test_kill_9_sync_master_then_promoted_replica_holds_every_ack(kit, fault_report):
    group = HaGroup(kit, "SYNC_MASTER")
    master, replica = await setup(group)
    assert replica is not None
    await group.wait_caught_up(master, replica)
    async with Producer(
        group="ha-kill", namesrv=group.namesrv.addr, retry_times_when_send_failed=0
    ) as producer:
        load = await load_for(producer, 2500)
        master.signal(signal.SIGKILL)
        killed = time.monotonic()
        await master.proc.wait()
        await load.stop()
    reply = await promote(replica.addr, role="SYNC_MASTER")
    assert reply.epoch == 2
    stored = await read_topic(replica.addr, TOPIC, QUEUES)
    served_s = time.monotonic() - killed
    check = check_acks(load.acks, stored)
    fault_report.add(
        "kill -9 SYNC_MASTER, 8 senders, promote",
        acknowledged=len(load.acks),
        lost=len(check.lost) + len(check.misplaced),
        recover_s=served_s,
    )
    assert not check.misplaced, check.misplaced[:5]
    assert not check.lost, f"{len(check.lost)} acknowledged messages lost: {check.lost[:5]}"
    assert check.kept == len(load.acks) >= 2500
    assert await replica.stop() == 0
    code, report = await store_verify(group.dir("r"))
    assert code == 0, report


# -- 3. a diverged tail is cut by epoch; a returning master is fenced -----------------------------


async def test_old_master_is_fenced_then_rejoins_and_cuts_its_diverged_tail(kit, fault_report):
    group = HaGroup(kit, "ASYNC_MASTER")
    master, replica = await setup(group)
    assert replica is not None
    async with Producer(group="ha-diverge", namesrv=group.namesrv.addr) as producer:
        load = await load_for(producer, 500, tasks=4)
        await load.stop()
        await group.wait_caught_up(master, replica)
        # the replica goes away; the master writes records it never gets, and dies
        assert await replica.stop() == 0
        shared_end = int((await runtime_info(master.addr))["commitlog_max_offset"])
        for q in range(QUEUES):
            reply = await send_raw(
                master.addr, TOPIC, q, [b"lonely" * 50] * 20, uniq_prefix=f"lonely{q}"
            )
            assert reply.status == pb.SEND_OK
        old_end = int((await runtime_info(master.addr))["commitlog_max_offset"])
        master.signal(signal.SIGKILL)
        await master.proc.wait()
        # the replica comes back and is promoted: epoch 2 starts where its log ends
        replica = await group.start("r", broker_id=1)
        reply = await promote(replica.addr)
        assert (reply.epoch, reply.start_offset) == (2, shared_end)
        await wait_for(
            lambda: _routed_to(group, replica.addr),
            timeout_s=20,
            what="the route to the new master",
        )
        more = await load_for(producer, 300, tasks=4)
        await more.stop()
    # the old master restarted as master: the nameserver knows epoch 2; it is fenced
    fenced = await group.start("m", broker_id=0)
    await wait_for(
        lambda: _info_has(fenced.addr, "fenced"), timeout_s=20, what="the old master fenced"
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await send_raw(fenced.addr, TOPIC, 0, [b"zombie"], uniq_prefix="zombie")
    assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION, refused.value.details()
    assert dict(refused.value.trailing_metadata())["pocketmq-reason"] == "NOT_MASTER"
    assert await fenced.stop() == 0
    # restarted as a replica of the new master: its handshake cuts the diverged tail
    rejoined = await group.start("m", broker_id=2, role="SLAVE")
    await group.wait_caught_up(replica, rejoined)
    info = await runtime_info(rejoined.addr)
    assert int(info["ha_truncated_bytes"]) == old_end - shared_end, info
    assert "cut" in rejoined.log_text()
    for broker in (replica, rejoined):
        stored = await read_topic(broker.addr, TOPIC, QUEUES)
        for acks in (load.acks, more.acks):
            check = check_acks(acks, stored)
            assert not check.lost and not check.misplaced, (check.lost[:3], check.misplaced[:3])
        assert not any(uniq.startswith("lonely") for uniq in stored.values())
    await stop_and_verify(group, {"r": replica, "m": rejoined})
    fault_report.add(
        "diverged tail cut by epoch on rejoin",
        acknowledged=len(load.acks) + len(more.acks),
        lost=0,
        promised=f"{old_end - shared_end} B unreplicated (ASYNC)",
    )


async def _routed_to(group: HaGroup, addr: str) -> bool:
    from pocketmq.v1 import nameserver_pb2, nameserver_pb2_grpc

    assert group.namesrv is not None
    async with grpc.aio.insecure_channel(group.namesrv.addr) as channel:
        reply = await nameserver_pb2_grpc.NameServerStub(channel).GetRouteInfoByTopic(
            nameserver_pb2.GetRouteInfoByTopicRequest(topic=TOPIC), timeout=5
        )
    return any(b.broker_addrs.get(0) == addr for b in reply.route.broker_datas)


async def _info_has(addr: str, key: str) -> bool:
    return bool((await runtime_info(addr)).get(key))


# -- 4. restarts under load -----------------------------------------------------------------------


async def test_replica_kill_9_and_master_restart_under_load_lose_nothing(kit, fault_report):
    group = HaGroup(kit, "SYNC_MASTER")
    master, replica = await setup(group)
    assert replica is not None
    await group.wait_caught_up(master, replica)
    async with Producer(group="ha-restarts", namesrv=group.namesrv.addr) as producer:
        load = await load_for(producer, 800)
        replica.signal(signal.SIGKILL)
        await replica.proc.wait()
        acked = len(load.acks)
        await wait_for(
            lambda: load.statuses["SLAVE_NOT_AVAILABLE"] + load.statuses["FLUSH_SLAVE_TIMEOUT"] > 0,
            timeout_s=20,
            what="a SYNC send refused without its replica",
        )
        replica = await group.start("r", broker_id=1)
        await wait_for(
            lambda: len(load.acks) > acked + 500,
            timeout_s=30,
            what="acks again after the replica's restart",
        )
        # the master restarts (clean) while the replica runs
        assert await master.stop() == 0
        acked = len(load.acks)
        master = await group.start("m")
        await wait_for(
            lambda: len(load.acks) > acked + 500,
            timeout_s=30,
            what="acks again after the master's restart",
        )
        await load.stop()
    await group.wait_caught_up(master, replica)
    for broker in (master, replica):
        stored = await read_topic(broker.addr, TOPIC, QUEUES)
        check = check_acks(load.acks, stored)
        assert not check.misplaced, check.misplaced[:5]
        assert not check.lost, (
            f"{'master' if broker is master else 'replica'}: {len(check.lost)} "
            f"acknowledged messages lost: {check.lost[:5]}"
        )
    await stop_and_verify(group, {"m": master, "r": replica})
    fault_report.add("replica kill -9 + master restart, SYNC", acknowledged=len(load.acks), lost=0)


# -- 5. a network partition between master and replica ------------------------------------------


@pytest.mark.parametrize("fault", ["cut", "stall"])
async def test_partition_refuses_sync_acks_and_heals_to_identical_logs(kit, fault_report, fault):
    from partition_proxy import PartitionProxy

    group = HaGroup(kit, "SYNC_MASTER", slave_timeout_ms=500)
    master, _ = await setup(group, replica=False)
    async with PartitionProxy("127.0.0.1", group.ports["m"][1]) as proxy:
        replica = await group.start("r", broker_id=1, ha_master_address=proxy.addr)
        await group.wait_caught_up(master, replica)
        async with Producer(
            group="ha-partition", namesrv=group.namesrv.addr, retry_times_when_send_failed=0
        ) as producer:
            load = await load_for(producer, 500, tasks=4)
            getattr(proxy, fault)()
            parted = time.monotonic()
            await wait_for(
                lambda: (
                    load.statuses["FLUSH_SLAVE_TIMEOUT"] + load.statuses["SLAVE_NOT_AVAILABLE"] >= 8
                ),
                timeout_s=30,
                what="SYNC sends refused during the partition",
            )
            # nothing appended after the partition began is acknowledged (a send already
            # waiting when it began may still have been acked by the replica)
            late_ok = [t for t, s in load.status_at if s == "SEND_OK" and t > parted + 0.6]
            assert not late_ok, f"{len(late_ok)} SEND_OK during the partition"
            proxy.heal()
            healed = time.monotonic()
            acked = len(load.acks)
            await wait_for(
                lambda: len(load.acks) > acked + 200,
                timeout_s=30,
                what="SEND_OK again after the heal",
            )
            recover_s = time.monotonic() - healed
            await load.stop()
        await group.wait_caught_up(master, replica)
        for broker in (master, replica):
            stored = await read_topic(broker.addr, TOPIC, QUEUES)
            check = check_acks(load.acks, stored)
            assert not check.lost and not check.misplaced
        await stop_and_verify(group, {"m": master, "r": replica})
    fault_report.add(
        f"partition ({fault}) master-replica, SYNC",
        acknowledged=len(load.acks),
        lost=0,
        promised=f"{dict(load.statuses)}",
        recover_s=recover_s,
    )
