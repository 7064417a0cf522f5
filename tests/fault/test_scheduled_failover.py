"""Delayed and timer messages across a kill -9 of their master and a promotion.

A delayed message (a delay level, RocketMQ 4) or a timer message (a delivery
time, RocketMQ 5) is parked in a system topic when it is sent and put into its
own topic when it falls due, by the master only. With real processes: a
SYNC_MASTER and its replica, producers sending both kinds with delays of 1-3 s,
the master killed -9 while some are due and re-put and others still wait; the
replica is promoted and every acknowledged message must reach its topic on it,
once: a re-put the replica already holds is recognised in its key index.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time

import pytest
from faultkit import create_topic, read_topic, routed_brokers, wait_for
from hakit import HaGroup, promote

from pocketmq.client import Message, Producer, SendStatus

pytestmark = pytest.mark.timeout(120)

TOPIC, QUEUES = "TopicLater", 2


async def test_delayed_and_timer_messages_sent_before_a_masters_kill_9_are_all_delivered(
    kit, fault_report
):
    group = HaGroup(kit, "SYNC_MASTER", message_delay_level="1s 2s 3s")
    ns = await group.start_namesrv()
    master = await group.start("m")
    await create_topic(master.addr, TOPIC, QUEUES)
    await wait_for(
        lambda: routed_brokers(ns.addr, TOPIC), timeout_s=20, what=f"the route of {TOPIC}"
    )
    replica = await group.start("r", broker_id=1)
    await group.wait_caught_up(master, replica)
    acked: dict[str, str] = {}  # UNIQ_KEY -> "delay" or "timer"
    rng = random.Random(7)
    stop = asyncio.Event()

    async def sender(producer: Producer, task: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            body = b"later %d %d" % (task, n)
            if n % 2:
                kind, msg = "delay", Message(topic=TOPIC, body=body, delay_level=rng.randint(1, 3))
            else:
                due = int(time.time() * 1000) + rng.randint(500, 3000)
                kind, msg = "timer", Message(topic=TOPIC, body=body, deliver_at_ms=due)
            try:
                result = await producer.send(msg)
            except Exception:  # the master is gone: what was acknowledged is what counts
                await asyncio.sleep(0.05)
                continue
            if result.status is SendStatus.SEND_OK:
                acked[result.msg_id] = kind

    async with Producer(group="later", namesrv=ns.addr, retry_times_when_send_failed=0) as producer:
        senders = [asyncio.create_task(sender(producer, t)) for t in range(4)]
        # 2.5 s of sends: the first are due and re-put, the last wait up to 3 s more
        await asyncio.sleep(2.5)
        master.signal(signal.SIGKILL)
        killed = time.monotonic()
        await master.proc.wait()
        stop.set()
        await asyncio.gather(*senders)
    assert len(acked) >= 200, f"only {len(acked)} acknowledged sends"
    reply = await promote(replica.addr, role="SYNC_MASTER")
    assert reply.epoch == 2

    delivered: dict[str, int] = {}

    async def all_delivered() -> bool:
        delivered.clear()
        for key in (await read_topic(replica.addr, TOPIC, QUEUES)).values():
            delivered[key] = delivered.get(key, 0) + 1
        return acked.keys() <= delivered.keys()

    try:
        await wait_for(all_delivered, timeout_s=30, interval_s=0.5, what="every message due")
    except AssertionError:
        missing = {key: kind for key, kind in acked.items() if key not in delivered}
        kinds = {kind: sum(1 for k in missing.values() if k == kind) for kind in ("delay", "timer")}
        raise AssertionError(
            f"{len(missing)} of {len(acked)} acknowledged messages never delivered "
            f"({kinds}): {list(missing)[:5]}"
        ) from None
    delivered_s = time.monotonic() - killed
    twice = {
        kind: sum(1 for key, k in acked.items() if k == kind and delivered[key] > 1)
        for kind in ("delay", "timer")
    }
    fault_report.add(
        "kill -9 SYNC_MASTER with delayed + timer messages waiting, promote",
        acknowledged=len(acked),
        lost=0,
        recover_s=delivered_s,
    )
    print(f"\n{len(acked)} acknowledged, delivered twice: {twice}, all by {delivered_s:.1f} s")
    # A re-put the replica holds is found in its key index and not made again (one it
    # does not hold is made once, by the new master): no message is there twice.
    assert twice == {"delay": 0, "timer": 0}
