"""kill -9 of a broker while a push consumer's PullBatch long polls are parked on it.

The consumer runs in this process; the broker is a process of its own with
synchronous flush, killed under a send load and restarted in place (same
directory, same port). The consumer's calls fail, its queues pause and pull
again once the broker answers, from the offsets it had: every acknowledged
message, before and after the kill, is consumed.
"""

from __future__ import annotations

import signal
import time

import pytest
from faultkit import SendLoad, create_topic, recording_consumer, routed_brokers, wait_for
from processkit import ProcessKit

from pocketmq.client import Producer

pytestmark = pytest.mark.timeout(120)

TOPIC, GROUP, QUEUES = "TopicPullKill", "pull-kill-group", 4
FAST = dict(
    commit_interval_s=0.5,
    rebalance_interval_s=1,
    route_refresh_interval_s=1,
    heartbeat_interval_s=1,
    pull_delay_on_error_s=0.5,
)


async def test_a_consumer_parked_on_a_killed_broker_resumes_and_misses_nothing(
    kit: ProcessKit, fault_report
):
    namesrv = await kit.nameserver()
    broker = await kit.broker("broker-a", namesrv=namesrv.addr, flush_disk_type="sync")
    await create_topic(broker.addr, TOPIC, QUEUES)
    await wait_for(lambda: routed_brokers(namesrv.addr, TOPIC), timeout_s=20, what="the route")
    consumed: set[str] = set()
    consumer = recording_consumer(
        group=GROUP, namesrv=namesrv.addr, topics=[TOPIC], into=consumed, **FAST
    )
    await consumer.start()
    try:
        await wait_for(
            lambda: len(consumer.assigned_queues()) >= QUEUES,
            timeout_s=20,
            what="every queue assigned",
        )
        async with Producer(group="pull-kill-producer", namesrv=namesrv.addr) as producer:
            load = SendLoad(producer, TOPIC, tasks=2, pause_s=0.005)
            async with load:
                await wait_for(
                    lambda: len(consumed) >= 200, timeout_s=30, what="the consumer consuming"
                )
                port = int(broker.addr.rsplit(":", 1)[1])
                broker.signal(signal.SIGKILL)
                await broker.proc.wait()
                killed_at = time.monotonic()
                acked_before = len(load.acks)
                broker = await kit.broker(
                    "broker-a",
                    namesrv=namesrv.addr,
                    port=port,
                    data_dir=kit.work_dir / "broker-a",
                    flush_disk_type="sync",
                )
                await wait_for(
                    lambda: len(load.acks) >= acked_before + 200,
                    timeout_s=30,
                    what="sends acknowledged by the restarted broker",
                )
            acked = {a.msg_id for a in load.acks}
            await wait_for(
                lambda: acked <= consumed, timeout_s=30, what="every acknowledged message consumed"
            )
            resumed_s = time.monotonic() - killed_at
    finally:
        await consumer.shutdown()
    fault_report.add(
        "kill -9 broker under a parked consumer",
        acknowledged=len(acked),
        lost=len(acked - consumed),
        promised="0",
        recover_s=resumed_s,
    )
    assert not acked - consumed
