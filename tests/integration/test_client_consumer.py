"""Push and pull consumers against a real nameserver and two real brokers (gRPC, port 0).

Intervals are shortened through options (rebalance 1 s, commit 0.2 s); every
wait polls a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict

from clusterkit import QUEUES, Cluster, create_topic

from pocketmq.client import (
    ConsumeResult,
    Message,
    MessageExt,
    Producer,
    PullConsumer,
    PushConsumer,
    dlq_topic,
)

FAST = {"rebalance_interval_s": 1.0, "commit_interval_s": 0.2, "pull_suspend_ms": 2000}


async def send_all(cluster: Cluster, topic: str, bodies: list[bytes], **fields) -> None:
    async with Producer(group="pg", namesrv=cluster.addr) as producer:
        await asyncio.gather(
            *(producer.send(Message(topic=topic, body=b, **fields)) for b in bodies)
        )


def recording_consumer(
    cluster: Cluster, group: str, topic: str, seen: dict, expression: str = "*", **options
) -> PushConsumer:
    consumer = PushConsumer(
        group=group,
        namesrv=cluster.addr,
        consume_from=options.pop("consume_from", "first"),
        **{**FAST, **options},
    )
    consumer.subscribe(topic, expression)

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        for m in messages:
            seen.setdefault(m.body, []).append(consumer.client_id)
        return ConsumeResult.CONSUME_SUCCESS

    return consumer


def owners_are_exclusive(consumers: list[PushConsumer], total: int, topic: str) -> bool:
    """Every queue of *topic* has one owner (the group's retry queues are not counted)."""
    owned = [q for c in consumers for q in c.assigned_queues() if q.topic == topic]
    return len(owned) == total and len(set(owned)) == total


async def test_three_consumers_share_eight_queues_and_consume_everything(cluster, eventually):
    await create_topic(cluster, "share", eventually)
    seen: dict[bytes, list[str]] = {}
    consumers = [recording_consumer(cluster, "g3", "share", seen) for _ in range(3)]
    for consumer in consumers:
        await consumer.start()
    try:
        await eventually(
            lambda: owners_are_exclusive(consumers, 2 * QUEUES, "share"),
            timeout_s=10,
            what="8 queues owned by exactly one member each",
        )
        bodies = [b"m%d" % i for i in range(400)]
        await send_all(cluster, "share", bodies)
        await eventually(
            lambda: set(bodies) <= set(seen), timeout_s=10, what="every message consumed"
        )
        assert all(c.assigned_queues() for c in consumers)
        assert owners_are_exclusive(consumers, 2 * QUEUES, "share")
    finally:
        for consumer in consumers:
            await consumer.shutdown()


async def test_queues_of_a_member_that_leaves_move_and_nothing_is_lost(cluster, eventually):
    await create_topic(cluster, "leave", eventually)
    seen: dict[bytes, list[str]] = {}
    consumers = [recording_consumer(cluster, "gl", "leave", seen) for _ in range(3)]
    for consumer in consumers:
        await consumer.start()
    try:
        await eventually(
            lambda: owners_are_exclusive(consumers, 2 * QUEUES, "leave"),
            timeout_s=10,
            what="initial assignment",
        )
        first = [b"a%d" % i for i in range(200)]
        await send_all(cluster, "leave", first)
        await eventually(lambda: set(first) <= set(seen), timeout_s=10, what="first half")
        leaving = consumers.pop()
        await leaving.shutdown()
        await eventually(
            lambda: owners_are_exclusive(consumers, 2 * QUEUES, "leave"),
            timeout_s=10,
            what="the leaver's queues taken over",
        )
        second = [b"b%d" % i for i in range(200)]
        await send_all(cluster, "leave", second)
        await eventually(lambda: set(second) <= set(seen), timeout_s=10, what="second half")
        assert not any(leaving.client_id in seen[b] for b in second)
    finally:
        for consumer in consumers:
            await consumer.shutdown()


async def test_a_restarted_group_resumes_from_its_committed_offset(cluster, eventually):
    await create_topic(cluster, "resume", eventually)
    first = [b"old%d" % i for i in range(100)]
    await send_all(cluster, "resume", first)
    seen: dict[bytes, list[str]] = {}
    consumer = recording_consumer(cluster, "gr", "resume", seen)
    await consumer.start()
    await eventually(lambda: set(first) <= set(seen), timeout_s=10, what="first batch")
    await consumer.shutdown()  # commits at shutdown

    second = [b"new%d" % i for i in range(50)]
    await send_all(cluster, "resume", second)
    seen_again: dict[bytes, list[str]] = {}
    restarted = recording_consumer(cluster, "gr", "resume", seen_again)
    await restarted.start()
    try:
        await eventually(
            lambda: set(second) <= set(seen_again), timeout_s=10, what="the new messages"
        )
        assert not set(first) & set(seen_again)
    finally:
        await restarted.shutdown()


async def test_consume_from_last_skips_what_was_sent_before_the_group_existed(cluster, eventually):
    await create_topic(cluster, "last", eventually)
    await send_all(cluster, "last", [b"before%d" % i for i in range(20)])
    seen: dict[bytes, list[str]] = {}
    consumer = recording_consumer(cluster, "glast", "last", seen, consume_from="last")
    await consumer.start()
    try:
        await eventually(
            lambda: len({q for q in consumer.assigned_queues() if q.topic == "last"}) == 2 * QUEUES,
            what="all queues assigned",
        )
        await send_all(cluster, "last", [b"after%d" % i for i in range(20)])
        await eventually(lambda: len(seen) >= 20, what="the new messages")
        assert all(body.startswith(b"after") for body in seen)
    finally:
        await consumer.shutdown()


async def test_broadcasting_delivers_every_message_to_every_member(cluster, eventually, tmp_path):
    await create_topic(cluster, "bc", eventually)
    seen = [dict(), dict()]
    consumers = [
        recording_consumer(
            cluster,
            "gb",
            "bc",
            seen[i],
            message_model="broadcasting",
            offset_store_dir=str(tmp_path / f"offsets{i}"),
        )
        for i in range(2)
    ]
    for consumer in consumers:
        await consumer.start()
    try:
        bodies = [b"all%d" % i for i in range(100)]
        await send_all(cluster, "bc", bodies)
        for i in range(2):
            await eventually(
                lambda i=i: set(bodies) <= set(seen[i]),
                timeout_s=10,
                what=f"member {i} got everything",
            )
    finally:
        for consumer in consumers:
            await consumer.shutdown()
    with open(tmp_path / "offsets0" / "gb" / "offsets.json") as f:
        table = json.load(f)["offsetTable"]
    assert sum(entry["offset"] for entry in table) == 100


async def test_orderly_consumption_keeps_per_queue_order_under_load(cluster, eventually):
    await create_topic(cluster, "fifo", eventually)
    order: dict[str, list[int]] = defaultdict(list)
    consumer = PushConsumer(
        group="gfifo",
        namesrv=cluster.addr,
        consume_from="first",
        orderly=True,
        consume_batch_max_size=4,
        **FAST,
    )
    consumer.subscribe("fifo")

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        await asyncio.sleep(0)  # let other queues interleave
        for m in messages:
            order[m.keys[0]].append(int(m.body))
        return ConsumeResult.SUCCESS

    await consumer.start()
    try:
        async with Producer(group="pg", namesrv=cluster.addr) as producer:

            def by_key(queues, msg, key):
                return queues[hash(key) % len(queues)]

            async def send_key(key: str) -> None:
                for seq in range(100):
                    await producer.send(
                        Message(topic="fifo", body=b"%d" % seq, keys=[key]),
                        selector=by_key,
                        arg=key,
                    )

            keys = [f"order-{i}" for i in range(6)]
            await asyncio.gather(*(send_key(k) for k in keys))
        await eventually(
            lambda: all(len(order[k]) >= 100 for k in keys),
            timeout_s=10,
            what="every ordered message",
        )
        for key in keys:
            assert order[key] == list(range(100)), key
    finally:
        await consumer.shutdown()


async def test_tag_filters_deliver_only_the_subscribed_tags(cluster, eventually):
    await create_topic(cluster, "tags", eventually)
    seen: dict[bytes, list[str]] = {}
    consumer = recording_consumer(cluster, "gt", "tags", seen, expression="paid || refunded")
    await consumer.start()
    try:
        async with Producer(group="pg", namesrv=cluster.addr) as producer:
            for i in range(30):
                tag = ("paid", "refunded", "created")[i % 3]
                await producer.send(Message(topic="tags", body=f"{tag}-{i}".encode(), tags=tag))
        await eventually(lambda: len(seen) >= 20, what="paid and refunded messages")
        await consumer.commit_offsets()
        assert all(not body.startswith(b"created") for body in seen)
    finally:
        await consumer.shutdown()


async def test_reconsume_later_redelivers_with_reconsume_times_then_dead_letters(
    cluster, eventually
):
    await create_topic(cluster, "retry", eventually)
    attempts: list[int] = []
    consumer = PushConsumer(
        group="gretry", namesrv=cluster.addr, consume_from="first", max_reconsume_times=1, **FAST
    )
    consumer.subscribe("retry")

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        attempts.extend(m.reconsume_times for m in messages)
        if len(attempts) > 1:
            raise RuntimeError("an exception counts as RECONSUME_LATER")
        return ConsumeResult.RECONSUME_LATER

    await consumer.start()
    try:
        await send_all(cluster, "retry", [b"poison"])
        await eventually(lambda: len(attempts) >= 2, timeout_s=30, what="a redelivery")
        assert attempts[:2] == [0, 1]
        await eventually(
            lambda: cluster.namesrv.route_table.get_route(dlq_topic("gretry")),
            timeout_s=30,
            what="the dead-letter topic",
        )
    finally:
        await consumer.shutdown()


async def test_orderly_queues_are_locked_by_exactly_one_member(cluster, eventually):
    await create_topic(cluster, "locks", eventually)
    consumers = []
    for _ in range(2):
        consumer = PushConsumer(group="glock", namesrv=cluster.addr, orderly=True, **FAST)
        consumer.subscribe("locks")
        consumer.listener(lambda msgs: ConsumeResult.SUCCESS)
        consumers.append(consumer)
        await consumer.start()
    try:
        await eventually(
            lambda: owners_are_exclusive(consumers, 2 * QUEUES, "locks"),
            timeout_s=10,
            what="exclusive orderly assignment",
        )
        for consumer in consumers:
            await consumer.lock_all()
        locked = [
            pq.queue
            for c in consumers
            for pq in c._pqs.values()
            if pq.locked and pq.queue.topic == "locks"
        ]
        assert len(locked) == len(set(locked)) == 2 * QUEUES
    finally:
        for consumer in consumers:
            await consumer.shutdown()


async def test_pull_consumer_polls_seeks_and_commits(cluster, eventually):
    await create_topic(cluster, "lite", eventually)
    bodies = [b"p%d" % i for i in range(40)]
    await send_all(cluster, "lite", bodies)
    consumer = PullConsumer(
        group="glite", namesrv=cluster.addr, consume_from="first", auto_commit=False, **FAST
    )
    consumer.assign([])
    await consumer.start()
    try:
        queues = await consumer.fetch_message_queues("lite")
        assert len(queues) == 2 * QUEUES
        consumer.assign(queues)
        got: list[MessageExt] = []

        async def polled_all():
            got.extend(await consumer.poll(timeout_s=0.2))
            return len(got) >= len(bodies)

        await eventually(polled_all, timeout_s=10, what="every message polled")
        assert sorted(m.body for m in got) == sorted(bodies)
        queue = got[0]
        mq = next(
            q for q in queues if (q.broker_name, q.queue_id) == (queue.broker_name, queue.queue_id)
        )
        await consumer.seek_to_begin(mq)
        again: list[MessageExt] = []

        async def polled_queue_again():
            again.extend(await consumer.poll(timeout_s=0.2))
            return any(m.queue_offset == 0 for m in again)

        await eventually(polled_queue_again, what="the queue read again from offset 0")
        assert await consumer.commit() > 0
        assert consumer.committed(mq) >= 1
    finally:
        await consumer.shutdown()


async def test_pull_consumer_subscribe_rebalances_and_auto_commits(cluster, eventually):
    await create_topic(cluster, "lite2", eventually)
    bodies = [b"s%d" % i for i in range(30)]
    await send_all(cluster, "lite2", bodies)
    consumer = PullConsumer(group="glite2", namesrv=cluster.addr, consume_from="first", **FAST)
    consumer.subscribe("lite2")
    await consumer.start()
    got: list[bytes] = []
    try:

        async def polled_all():
            got.extend(m.body for m in await consumer.poll(timeout_s=0.2))
            return len(got) >= len(bodies)

        await eventually(polled_all, timeout_s=10, what="every message polled")
    finally:
        await consumer.shutdown()
    again = PullConsumer(group="glite2", namesrv=cluster.addr, consume_from="first", **FAST)
    again.subscribe("lite2")
    await again.start()
    try:
        assert await again.poll(timeout_s=0.3) == []
    finally:
        await again.shutdown()


async def test_a_consumers_queue_pulls_to_one_broker_share_pull_batch_calls(cluster, eventually):
    await create_topic(cluster, "merged", eventually)
    seen: dict[bytes, list[str]] = {}
    consumer = recording_consumer(cluster, "gm", "merged", seen)
    await consumer.start()
    try:
        await eventually(
            lambda: len(consumer.assigned_queues()) >= 2 * QUEUES,
            timeout_s=10,
            what="every queue assigned",
        )
        bodies = [b"m%d" % i for i in range(300)]
        await send_all(cluster, "merged", bodies)
        await eventually(
            lambda: set(bodies) <= set(seen), timeout_s=10, what="every message consumed"
        )
        stats = consumer.pull_stats()
        assert len(stats) == 2, "one coalescer per broker"
        calls = sum(c for c, _ in stats.values())
        pulls = sum(p for _, p in stats.values())
        assert pulls >= 2 * calls, f"{pulls} queue pulls in {calls} calls: not merged"
        assert all(len(owners) == 1 for owners in seen.values()), "each message once"
    finally:
        await consumer.shutdown()
