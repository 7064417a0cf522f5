"""kill -9 of a broker process while producers send through the SDK, then a restart.

With synchronous flush every acknowledged message is read back at the offset
its acknowledgement named, exactly once; with asynchronous flush whatever is
lost lies after everything kept, queue by queue. Both stores pass
``pocketmq store verify`` after the restart. A third test kills the broker
the moment a new commit-log segment appears, i.e. during a segment roll.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from faultkit import SendLoad, check_acks, create_topic, read_topic, routed_brokers, wait_for
from processkit import ProcessKit, store_verify

from pocketmq.client import Producer

pytestmark = pytest.mark.timeout(90)

TOPIC, QUEUES = "TopicKill", 4
KiB = 1024


async def start_cluster(kit: ProcessKit, **broker_options):
    namesrv = await kit.nameserver()
    broker = await kit.broker("broker-a", namesrv=namesrv.addr, **broker_options)
    await create_topic(broker.addr, TOPIC, QUEUES)
    await wait_for(
        lambda: routed_brokers(namesrv.addr, TOPIC), timeout_s=20, what=f"the route of {TOPIC}"
    )
    return namesrv, broker


async def kill_under_load(
    kit: ProcessKit, *, acks_wanted: int, producer_options=None, kill_when=None, **broker_options
):
    """Start a cluster, load it, kill -9 the broker, restart it; returns what is needed."""
    namesrv, broker = await start_cluster(kit, **broker_options)
    data_dir = kit.work_dir / "broker-a"
    async with Producer(
        group="kill-producer", namesrv=namesrv.addr, **(producer_options or {})
    ) as producer:
        load = SendLoad(producer, TOPIC, tasks=8)
        try:
            await wait_for(
                lambda: len(load.acks) >= acks_wanted,
                timeout_s=40,
                what=f"{acks_wanted} acknowledged sends",
                interval_s=0.005,
            )
            if kill_when is not None:
                await kill_when(data_dir)
            broker.signal(signal.SIGKILL)
            await broker.proc.wait()
        finally:
            await load.stop()
    started = time.monotonic()
    restarted = await kit.broker(
        "broker-a", namesrv=namesrv.addr, data_dir=data_dir, **broker_options
    )
    stored = await read_topic(restarted.addr, TOPIC, QUEUES)
    recover_s = time.monotonic() - started
    assert "ABNORMAL" in restarted.log_text(), "the restart did not see a crash"
    assert await restarted.stop() == 0
    code, report = await store_verify(data_dir)
    assert code == 0, report
    return load.acks, stored, recover_s


async def test_sync_flush_kill_9_loses_no_acknowledged_message(kit, fault_report):
    acks, stored, recover_s = await kill_under_load(kit, acks_wanted=2500, flush_disk_type="sync")
    check = check_acks(acks, stored)
    fault_report.add(
        "kill -9 broker, sync flush, 8 senders",
        acknowledged=len(acks),
        lost=len(check.lost) + len(check.misplaced),
        recover_s=recover_s,
    )
    assert not check.misplaced, check.misplaced[:5]
    assert not check.lost, f"{len(check.lost)} acknowledged messages lost: {check.lost[:5]}"
    assert check.kept == len(acks) >= 2500


async def test_async_flush_kill_9_keeps_a_consistent_prefix(kit, fault_report):
    acks, stored, recover_s = await kill_under_load(kit, acks_wanted=2500, flush_disk_type="async")
    check = check_acks(acks, stored)
    fault_report.add(
        "kill -9 broker, async flush, 8 senders",
        acknowledged=len(acks),
        lost=len(check.lost) + len(check.misplaced),
        promised="tail of the flush window",
        recover_s=recover_s,
    )
    assert not check.misplaced, check.misplaced[:5]
    assert not check.lost_before_kept, check.lost_before_kept[:5]


async def test_kill_9_during_a_segment_roll_loses_no_acknowledged_message(kit, fault_report):
    async def at_a_new_segment(data_dir: Path) -> None:
        commitlog = data_dir / "commitlog"
        segments = len(list(commitlog.iterdir()))
        await wait_for(
            lambda: len(list(commitlog.iterdir())) > segments,
            timeout_s=20,
            what="a new commit-log segment",
            interval_s=0.001,
        )

    acks, stored, recover_s = await kill_under_load(
        kit,
        acks_wanted=400,
        kill_when=at_a_new_segment,
        flush_disk_type="sync",
        commitlog_file_size_bytes=64 * KiB,
        max_message_size_bytes=16 * KiB,
        max_batch_size_bytes=32 * KiB,
        producer_options=dict(
            batch_max_bytes=16 * KiB, max_message_size_bytes=16 * KiB, max_batch_size_bytes=16 * KiB
        ),
    )
    check = check_acks(acks, stored)
    fault_report.add(
        "kill -9 broker at a segment roll, sync",
        acknowledged=len(acks),
        lost=len(check.lost) + len(check.misplaced),
        recover_s=recover_s,
    )
    assert not check.misplaced and not check.lost, (check.lost[:5], check.misplaced[:5])
    assert check.kept == len(acks)
