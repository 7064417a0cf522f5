"""PullConsumer as RocketMQ's lite pull consumer and Kafka's consumer work (issue 18, item 13):
start needs no subscription, queues are fetched from a started consumer, and an
assignment is usable at once (seek and poll right after assign)."""

from __future__ import annotations

import asyncio

import pytest
from clusterkit import QUEUES, create_topic

from pocketmq.client import (
    Message,
    MessageExt,
    MessageSelector,
    Producer,
    PullConsumer,
    SendResult,
    SqlFilterError,
)
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


async def send_tagged(cluster, topic: str) -> list[SendResult]:  # type: ignore[no-untyped-def]
    """Six messages on *topic*: tags A, B, C twice over, property n = 0..5."""
    async with Producer(group="pg", namesrv=cluster.addr) as producer:
        return [
            await producer.send(
                Message(topic=topic, body=b"m%d" % n, tags="ABC"[n % 3], properties={"n": str(n)})
            )
            for n in range(6)
        ]


async def poll_until(consumer: PullConsumer, count: int, eventually) -> list[MessageExt]:  # type: ignore[no-untyped-def]
    got: list[MessageExt] = []

    async def polled() -> bool:
        got.extend(await consumer.poll(timeout_s=0.2))
        return len(got) >= count

    await eventually(polled, timeout_s=10, what=f"{count} messages")
    return got


@pytest.mark.parametrize(
    ("selector", "wanted"),
    [
        ("A || C", {0, 2, 3, 5}),
        (MessageSelector.by_tag("B"), {1, 4}),
        (MessageSelector.by_sql("n >= 3 AND TAGS <> 'C'"), {3, 4}),
    ],
)
async def test_assigned_queues_are_read_with_the_selector_given_to_assign(
    cluster, eventually, selector, wanted
):
    await create_topic(cluster, "picky", eventually)
    sent = await send_tagged(cluster, "picky")
    consumer = PullConsumer(group="g-picky", namesrv=cluster.addr, consume_from="first", **FAST)
    await consumer.start()
    try:
        queues = await consumer.fetch_message_queues("picky")
        consumer.assign(queues, selector)
        got = await poll_until(consumer, len(wanted), eventually)
        # the last wanted one arrived; whatever else is in flight arrives within a poll
        got += await consumer.poll(timeout_s=0.5)
    finally:
        await consumer.shutdown()
    by_id = {r.msg_id: n for n, r in enumerate(sent)}
    assert sorted(by_id[m.msg_id] for m in got) == sorted(wanted)


async def test_assign_refuses_a_bad_tag_expression_and_keeps_the_assignment(cluster, eventually):
    await create_topic(cluster, "strict", eventually)
    consumer = PullConsumer(group="g-strict", namesrv=cluster.addr, **FAST)
    await consumer.start()
    try:
        queues = await consumer.fetch_message_queues("strict")
        consumer.assign(queues[:1], "A")
        with pytest.raises(ValueError, match="names no tags"):
            consumer.assign(queues, " || ")
        with pytest.raises(SqlFilterError):
            consumer.assign(queues, MessageSelector.by_sql("n >"))
        await consumer.rebalance_once()
        assert consumer.assigned_queues() == set(queues[:1])
        subscriber = PullConsumer(group="g-strict-sub", namesrv=cluster.addr)
        with pytest.raises(ValueError, match="names no tags"):
            subscriber.subscribe("strict", " || ")  # the same refusal as subscribe's
    finally:
        await consumer.shutdown()
