"""PullConsumer as RocketMQ's lite pull consumer and Kafka's consumer work (issue 18, item 13):
start needs no subscription, queues are fetched from a started consumer, and an
assignment is usable at once (seek and poll right after assign)."""

from __future__ import annotations

import asyncio

import pytest
from clusterkit import QUEUES, create_topic

from pocketmq.client import Message, MessageExt, Producer, PullConsumer
from pocketmq.client.errors import ClientStateError

FAST = {"rebalance_interval_s": 30.0, "commit_interval_s": 0.2, "pull_suspend_ms": 1000}


async def test_fetch_queues_after_start_without_a_subscription(cluster, eventually):
    await create_topic(cluster, "bare", eventually)
    consumer = PullConsumer(group="g-bare", namesrv=cluster.addr, **FAST)
    await consumer.start()
    try:
        queues = await consumer.fetch_message_queues("bare")
        assert len(queues) == 2 * QUEUES
        assert await consumer.poll(timeout_s=0.1) == []
    finally:
        await consumer.shutdown()


async def test_seek_right_after_assign_and_start_reads_from_there(cluster, eventually):
    await create_topic(cluster, "seeky", eventually)
    async with Producer(group="pg", namesrv=cluster.addr) as producer:
        results = [await producer.send(Message(topic="seeky", body=b"m%d" % i)) for i in range(12)]
    queue = results[0].queue
    on_queue = sorted(r.queue_offset for r in results if r.queue == queue)
    assert len(on_queue) >= 2
    consumer = PullConsumer(group="g-seek", namesrv=cluster.addr, auto_commit=False, **FAST)
    await consumer.start()
    try:
        consumer.assign([queue])  # the rebalance interval is 30 s: nothing waits on it
        await consumer.seek(queue, on_queue[1])
        got: list[MessageExt] = []

        async def polled() -> bool:
            got.extend(await consumer.poll(timeout_s=0.2))
            return len(got) >= len(on_queue) - 1

        await eventually(polled, timeout_s=10, what="the queue read from the seek")
        assert [m.queue_offset for m in got] == on_queue[1:]
        assert await consumer.end_offset(queue) == on_queue[-1] + 1
        with pytest.raises(ClientStateError):
            await consumer.seek(results[-1].queue._replace(queue_id=99), 0)
    finally:
        await consumer.shutdown()


async def test_assign_after_start_polls_at_once(cluster, eventually):
    await create_topic(cluster, "late", eventually)
    async with Producer(group="pg", namesrv=cluster.addr) as producer:
        await asyncio.gather(
            *(producer.send(Message(topic="late", body=b"x%d" % i)) for i in range(4))
        )
    consumer = PullConsumer(group="g-late", namesrv=cluster.addr, consume_from="first", **FAST)
    await consumer.start()
    try:
        consumer.assign(await consumer.fetch_message_queues("late"))
        got: list[MessageExt] = []

        async def polled() -> bool:
            got.extend(await consumer.poll(timeout_s=0.2))
            return len(got) >= 4

        await eventually(polled, timeout_s=10, what="the four messages")
    finally:
        await consumer.shutdown()
