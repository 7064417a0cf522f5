"""Producer against a real nameserver and two real brokers (gRPC, port 0)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest
from clusterkit import QUEUES, create_topic

from pocketmq.broker.topic_config import BrokerTopicConfig
from pocketmq.client import (
    InvalidMessageError,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    SendStatus,
)


async def test_round_robin_spreads_sends_over_every_queue_of_every_broker(cluster, eventually):
    await create_topic(cluster, "rr", eventually)
    async with Producer(group="pg", namesrv=cluster.addr) as producer:
        results = [
            await producer.send(Message(topic="rr", body=b"m%d" % i)) for i in range(16 * QUEUES)
        ]
    per_queue = Counter(r.queue for r in results)
    assert len(per_queue) == 2 * QUEUES
    assert set(per_queue.values()) == {8}
    assert {r.queue.broker_name for r in results} == {"broker-a", "broker-b"}
    assert all(r.status is SendStatus.SEND_OK for r in results)


async def test_sends_keep_succeeding_at_once_when_one_of_two_brokers_dies(cluster, eventually):
    await create_topic(cluster, "ha", eventually)
    async with Producer(group="pg", namesrv=cluster.addr) as producer:
        for i in range(8):
            await producer.send(Message(topic="ha", body=b"before %d" % i))
        dead = cluster.brokers[1]
        await dead.stop(0)
        started = time.monotonic()
        results = [
            await producer.send(Message(topic="ha", body=b"after %d" % i)) for i in range(40)
        ]
        elapsed_s = time.monotonic() - started
        assert {r.queue.broker_name for r in results} == {"broker-a"}
        assert not producer.fault.is_available(dead.config.broker_name)
    assert elapsed_s < 8.0, f"40 sends took {elapsed_s:.2f} s with one broker down"


async def test_a_broker_refusing_the_topic_is_retried_elsewhere_while_the_route_is_stale(
    cluster, eventually
):
    await create_topic(cluster, "ro", eventually)
    async with Producer(group="pg", namesrv=cluster.addr) as producer:
        await producer.send(Message(topic="ro", body=b"route cached"))
        read_only = cluster.brokers[0]
        read_only.topics.update(
            BrokerTopicConfig(
                topic_name="ro", read_queue_nums=QUEUES, write_queue_nums=QUEUES, perm=4
            )
        )
        results = [
            await producer.send(Message(topic="ro", body=b"m%d" % i)) for i in range(2 * QUEUES)
        ]
    assert {r.queue.broker_name for r in results} == {cluster.brokers[1].config.broker_name}


async def test_a_queue_the_broker_no_longer_has_is_retried_on_a_fresh_route(cluster, eventually):
    await create_topic(cluster, "shrunk", eventually)
    async with Producer(group="pg", namesrv=cluster.addr) as producer:
        await producer.send(Message(topic="shrunk", body=b"route cached"))
        for broker in cluster.brokers:  # each broker now has 1 write queue, not QUEUES
            broker.topics.update(
                BrokerTopicConfig(topic_name="shrunk", read_queue_nums=QUEUES, write_queue_nums=1)
            )
        await eventually(
            lambda: all(
                q.write_queue_nums == 1
                for q in cluster.namesrv.route_table.get_route("shrunk").queue_datas
            ),
            what="the nameserver's route to shrink",
        )
        results = [
            await producer.send(Message(topic="shrunk", body=b"m%d" % i)) for i in range(2 * QUEUES)
        ]
    assert {r.queue.queue_id for r in results} == {0}


async def test_concurrent_sends_are_coalesced_and_each_caller_gets_its_own_result(
    cluster, eventually
):
    await create_topic(cluster, "co", eventually)
    async with Producer(group="pg", namesrv=cluster.addr) as producer:
        results = await asyncio.gather(
            *(
                producer.send(Message(topic="co", body=b"%d" % i, keys=[f"k{i}"]))
                for i in range(600)
            )
        )
        calls = sum(c for c, _ in producer.batch_stats().values())
    assert len({(r.queue, r.queue_offset) for r in results}) == 600
    assert len({r.msg_id for r in results}) == 600
    assert len({r.offset_msg_id for r in results}) == 600
    assert calls < 600


async def test_ordered_sends_go_to_the_chosen_queue(cluster, eventually):
    await create_topic(cluster, "ord", eventually)
    async with Producer(group="pg", namesrv=cluster.addr) as producer:
        queues = await producer.fetch_publish_queues("ord")
        target = queues[5]
        direct = [
            await producer.send(Message(topic="ord", body=b"x"), queue=target) for _ in range(3)
        ]
        chosen = [
            await producer.send(
                Message(topic="ord", body=b"y"),
                selector=lambda qs, msg, arg: qs[arg % len(qs)],
                arg=2,
            )
            for _ in range(3)
        ]
    assert {r.queue for r in direct} == {target}
    assert [r.queue_offset for r in direct] == [0, 1, 2]
    assert {r.queue for r in chosen} == {queues[2]}


async def test_send_batch_returns_one_result_per_message_in_one_queue(cluster, eventually):
    await create_topic(cluster, "bt", eventually)
    async with Producer(group="pg", namesrv=cluster.addr) as producer:
        results = await producer.send_batch(
            [Message(topic="bt", body=b"b%d" % i) for i in range(10)]
        )
        with pytest.raises(InvalidMessageError, match="one topic"):
            await producer.send_batch(
                [Message(topic="bt", body=b"1"), Message(topic="other", body=b"2")]
            )
    assert len({r.queue for r in results}) == 1
    offsets = [r.queue_offset for r in results]
    assert offsets == list(range(offsets[0], offsets[0] + 10))


@pytest.mark.parametrize("idempotent", [True, False])
async def test_send_batch_refuses_records_past_max_batch_size_naming_their_size(
    cluster, eventually, idempotent
):
    await create_topic(cluster, "bl", eventually)
    async with Producer(
        group="pg", namesrv=cluster.addr, idempotent=idempotent, max_batch_size_bytes=2000
    ) as producer:
        with pytest.raises(InvalidMessageError, match=r"batch of 3 messages is (\d+) bytes") as err:
            await producer.send_batch([Message(topic="bl", body=b"x" * 1000)] * 3)
        # the records' bytes, not the request's: what the broker's max_batch_size counts
        size = int(err.value.args[0].split(" is ")[1].split(" ")[0])
        assert 3000 < size < 3600
        assert "the limit is 2000 (max_batch_size_bytes)" in str(err.value)
        fits = await producer.send_batch([Message(topic="bl", body=b"x" * 300)] * 3)
    assert [r.status for r in fits] == [SendStatus.SEND_OK] * 3


async def test_messages_round_trip_with_tags_keys_properties_and_compressed_body(
    cluster, eventually
):
    await create_topic(cluster, "rt", eventually)
    big = bytes(range(256)) * 64  # 16 KiB, compressed on the wire
    async with Producer(group="pg", namesrv=cluster.addr) as producer:
        sent = await producer.send(
            Message(
                topic="rt",
                body=big,
                tags="TagA",
                keys=["order-1", "user-7"],
                properties={"region": "eu"},
            )
        )
        await producer.send_oneway(Message(topic="rt", body=b"fire and forget"))
    consumer = PullConsumer(group="rt-reader", namesrv=cluster.addr)
    consumer.assign(
        [
            MessageQueue("rt", b.config.broker_name, q)
            for b in cluster.brokers
            for q in range(QUEUES)
        ]
    )
    await consumer.start()
    try:
        for queue in list(consumer.assigned_queues()):
            await consumer.seek_to_begin(queue)
        got = []

        async def both_arrived():
            got.extend(await consumer.poll(timeout_s=0.2))
            return len(got) >= 2

        await eventually(both_arrived, what="both messages polled")
    finally:
        await consumer.shutdown()
    by_body = {m.body: m for m in got}
    msg = by_body[big]
    assert msg.msg_id == sent.msg_id and msg.offset_msg_id == sent.offset_msg_id
    assert (msg.tags, msg.keys, msg.properties["region"]) == ("TagA", ["order-1", "user-7"], "eu")
    assert (msg.queue_id, msg.queue_offset) == (sent.queue.queue_id, sent.queue_offset)
    assert b"fire and forget" in by_body


async def test_send_to_an_unknown_topic_uses_the_auto_create_template(cluster):
    async with Producer(group="pg", namesrv=cluster.addr) as producer:
        result = await producer.send(Message(topic="brand-new", body=b"hello"))
    assert result.status is SendStatus.SEND_OK
    assert result.queue.topic == "brand-new"


async def test_oversized_and_empty_bodies_are_refused_before_sending(cluster):
    async with Producer(group="pg", namesrv=cluster.addr, max_message_size_bytes=1024) as producer:
        with pytest.raises(InvalidMessageError, match="2048 bytes; the limit is 1024"):
            await producer.send(Message(topic="x", body=b"z" * 2048))
        with pytest.raises(InvalidMessageError, match="empty"):
            await producer.send(Message(topic="x", body=b""))
