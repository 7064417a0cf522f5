"""SQL92 property filters on a real broker: pulls filtered before records leave it, offsets
that move past what does not match, long polls that wake on a match, refusals with the
position of the error, the enable_property_filter switch, and consumers whose filters
outlive a broker restart and a rebalance."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import grpc
import pytest
from clusterkit import QUEUES, create_topic, two_broker_cluster
from wirekit import create_topic as create_wire_topic

from pocketmq.broker.broker import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.client import (
    ConsumeResult,
    Message,
    MessageExt,
    MessageSelector,
    Producer,
    PullConsumer,
    PushConsumer,
    SqlFilterError,
)
from pocketmq.common.message import encode_record, iter_records, pack_host
from pocketmq.nameserver import NameServer, NamesrvConfig
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc

FAST = {"rebalance_interval_s": 1.0, "commit_interval_s": 0.2, "pull_suspend_ms": 1000}


def rec(n: int, queue_id: int = 0, topic: str = "TopicA", **props: str) -> bytes:
    properties = {"n": str(n), "region": "eu" if n % 2 else "us", **props}
    return encode_record(
        topic=topic,
        body=b"m%d" % n,
        queue_id=queue_id,
        properties=properties,
        born_timestamp_ms=int(time.time() * 1000),
        born_host=pack_host(("127.0.0.1", 40000)),
        store_host=pack_host(("127.0.0.1", 0)),
    )


async def send(stub, records: list[bytes]) -> None:
    for i in range(0, len(records), 500):
        await stub.SendBatch(pb.SendBatchRequest(records=b"".join(records[i : i + 500])))


def pull(
    expression: str, offset: int = 0, *, queue_id: int = 0, suspend_ms: int = 0, max_msgs: int = 0
) -> pb.PullMessageRequest:
    return pb.PullMessageRequest(
        consumer_group="G",
        topic="TopicA",
        queue_id=queue_id,
        queue_offset=offset,
        subscription=expression,
        expression_type="SQL92",
        suspend_timeout_ms=suspend_ms,
        max_msg_nums=max_msgs,
    )


def bodies(reply: pb.PullMessageResponse) -> list[bytes]:
    return [m.body for m in iter_records(reply.records)]


async def drain(stub, expression: str, end: int, *, max_pulls: int = 100) -> tuple[list, int]:
    """Pull from 0 until the queue's end; (bodies, pulls made)."""
    got: list[bytes] = []
    offset = pulls = 0
    while offset < end:
        pulls += 1
        assert pulls <= max_pulls, f"still at offset {offset} of {end} after {max_pulls} pulls"
        reply = await stub.PullMessage(pull(expression, offset))
        assert reply.status in (pb.FOUND, pb.NO_MATCHED_MSG), reply
        assert reply.next_begin_offset > offset
        got += bodies(reply)
        offset = reply.next_begin_offset
    return got, pulls


async def test_a_pull_returns_only_records_whose_properties_match(stub):
    await create_wire_topic(stub)
    await send(stub, [rec(n) for n in range(100)])
    got, _ = await drain(stub, "region = 'eu' AND n >= 90", 100)
    assert got == [b"m%d" % n for n in range(91, 100, 2)]


async def test_the_count_limit_leaves_the_next_match_for_the_next_pull(stub):
    await create_wire_topic(stub)
    await send(stub, [rec(n) for n in range(50)])
    first = await stub.PullMessage(pull("region = 'us'", max_msgs=3))
    assert bodies(first) == [b"m0", b"m2", b"m4"]
    assert first.next_begin_offset == 5  # the pull was full: m5 is left unexamined
    second = await stub.PullMessage(pull("region = 'us'", first.next_begin_offset, max_msgs=3))
    assert bodies(second) == [b"m6", b"m8", b"m10"]


async def test_a_backlog_that_does_not_match_is_crossed_in_bounded_pulls(stub):
    await create_wire_topic(stub)
    await send(stub, [rec(n) for n in range(5000)] + [rec(5000, last="yes")])
    got, pulls = await drain(stub, "last = 'yes'", 5001)
    assert got == [b"m5000"]
    assert 2 <= pulls <= 10  # each pull examines at most 800 records


async def test_a_parked_filtered_pull_sleeps_through_non_matching_arrivals(stub):
    await create_wire_topic(stub)
    waiting = asyncio.ensure_future(stub.PullMessage(pull("n = 7", suspend_ms=20_000)))
    await send(stub, [rec(1), rec(2)])
    await send(stub, [rec(7)])
    reply = await asyncio.wait_for(waiting, 20)
    assert (reply.status, bodies(reply), reply.next_begin_offset) == (pb.FOUND, [b"m7"], 3)


async def test_an_unparsable_filter_is_refused_with_its_position(stub):
    await create_wire_topic(stub)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.PullMessage(pull("region = 'eu' AND (amount > 100"))
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "line 1, column 32: expected ')'" in err.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.HeartBeat(
            pb.HeartBeatRequest(
                client_id="10.0.0.1@1#x",
                consumers=[
                    pb.ConsumerData(
                        group="G",
                        subscriptions=[
                            pb.Subscription(
                                topic="TopicA", expression="a >", expression_type="SQL92"
                            )
                        ],
                    )
                ],
            )
        )
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "line 1, column 4" in err.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.PullMessage(
            pb.PullMessageRequest(
                consumer_group="G", topic="TopicA", subscription="a", expression_type="XPATH"
            )
        )
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "expression type 'XPATH' is unknown" in err.value.details()


async def test_a_pull_batch_filters_each_queue_by_its_own_expression(stub):
    await create_wire_topic(stub)
    await send(stub, [rec(n, queue_id=n % 2) for n in range(20)])
    reply = await stub.PullBatch(
        pb.PullBatchRequest(
            consumer_group="G",
            suspend_timeout_ms=0,
            pulls=[
                pb.QueuePull(
                    topic="TopicA", queue_id=0, subscription="n < 6", expression_type="SQL92"
                ),
                pb.QueuePull(topic="TopicA", queue_id=1, subscription="*"),
            ],
        )
    )
    results = {r.index: r.reply for r in reply.results}
    assert bodies(results[0]) == [b"m0", b"m2", b"m4"]
    assert len(bodies(results[1])) == 10


async def test_with_the_switch_off_sql_subscriptions_are_refused_and_tags_still_served(
    start_broker,
):
    broker = await start_broker(enable_property_filter=False)
    async with grpc.aio.insecure_channel(broker.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        await create_wire_topic(stub)
        await send(stub, [rec(1)])
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.PullMessage(pull("n = 1"))
        assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert "enable_property_filter" in err.value.details()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.HeartBeat(
                pb.HeartBeatRequest(
                    client_id="10.0.0.1@1#x",
                    consumers=[
                        pb.ConsumerData(
                            group="G",
                            subscriptions=[
                                pb.Subscription(
                                    topic="TopicA", expression="n = 1", expression_type="SQL92"
                                )
                            ],
                        )
                    ],
                )
            )
        assert "enable_property_filter" in err.value.details()
        tags = await stub.PullMessage(
            pb.PullMessageRequest(
                consumer_group="G",
                topic="TopicA",
                queue_id=0,
                subscription="*",
                suspend_timeout_ms=0,
            )
        )
        assert bodies(tags) == [b"m1"]


# -- through the client ---------------------------------------------------------------
def test_a_bad_sql_selector_fails_at_subscribe():
    consumer = PushConsumer(group="g", namesrv="127.0.0.1:1")
    with pytest.raises(SqlFilterError, match="line 1, column 9"):
        consumer.subscribe("orders", MessageSelector.by_sql("amount >"))


async def send_orders(namesrv: str, topic: str, start: int, count: int) -> None:
    async with Producer(group="pg", namesrv=namesrv) as producer:
        for i in range(start, start + count):
            await producer.send(
                Message(
                    topic=topic,
                    body=b"o%d" % i,
                    properties={"region": "eu" if i % 2 else "us", "amount": str(i * 10)},
                )
            )


def sql_consumer(namesrv: str, group: str, topic: str, seen: dict) -> PushConsumer:
    consumer = PushConsumer(group=group, namesrv=namesrv, consume_from="first", **FAST)
    consumer.subscribe(topic, MessageSelector.by_sql("region = 'eu' AND amount > 100"))

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        for m in messages:
            seen.setdefault(m.body, []).append(consumer.client_id)
        return ConsumeResult.CONSUME_SUCCESS

    return consumer


def wanted(start: int, count: int) -> set[bytes]:
    return {b"o%d" % i for i in range(start, start + count) if i % 2 and i * 10 > 100}


async def test_push_consumers_keep_their_filter_across_a_rebalance(tmp_path, eventually):
    async with two_broker_cluster(tmp_path) as cluster:
        await create_topic(cluster, "orders", eventually)
        seen: dict[bytes, list[str]] = {}
        consumers = [sql_consumer(cluster.addr, "gsql", "orders", seen) for _ in range(2)]
        for consumer in consumers:
            await consumer.start()
        try:
            await send_orders(cluster.addr, "orders", 0, 60)
            await eventually(
                lambda: wanted(0, 60) <= set(seen), timeout_s=15, what="the matching orders"
            )
            leaving = consumers.pop()
            await leaving.shutdown()
            await eventually(
                lambda: (
                    len([q for q in consumers[0].assigned_queues() if q.topic == "orders"])
                    == 2 * QUEUES
                ),
                timeout_s=15,
                what="the leaver's queues taken over",
            )
            await send_orders(cluster.addr, "orders", 60, 60)
            await eventually(
                lambda: wanted(60, 60) <= set(seen),
                timeout_s=15,
                what="the matching orders after the rebalance",
            )
            assert set(seen) == wanted(0, 120)
        finally:
            for consumer in consumers:
                await consumer.shutdown()


async def test_a_pull_consumers_filter_survives_a_broker_restart(tmp_path, eventually):
    namesrv = NameServer(NamesrvConfig(host="127.0.0.1", port=0))
    await namesrv.start()
    config = BrokerConfig(
        broker_name="broker-a",
        port=0,
        data_dir=str(tmp_path / "a"),
        grpc_v2_port=-1,
        namesrv_addrs=namesrv.address,
        default_topic_queue_nums=QUEUES,
        index_slots=1000,
        index_entries=4000,
        commitlog_file_size_bytes=16 * 1024 * 1024,
    )
    broker = Broker(config)
    await broker.start()
    consumer = PullConsumer(group="gpull", namesrv=namesrv.address, consume_from="first", **FAST)
    consumer.subscribe("orders", MessageSelector.by_sql("region = 'eu' AND amount > 100"))
    got: list[bytes] = []

    async def polled(expected: set[bytes]) -> bool:
        got.extend(m.body for m in await consumer.poll(timeout_s=0.2))
        return expected <= set(got)

    try:
        await send_orders(namesrv.address, "orders", 0, 40)
        await consumer.start()
        await eventually(lambda: polled(wanted(0, 40)), timeout_s=15, what="first orders")
        port = int(broker.address.rsplit(":", 1)[1])
        await broker.stop(0)
        broker = Broker(dataclasses.replace(config, port=port))
        await broker.start()
        await send_orders(namesrv.address, "orders", 40, 40)
        await eventually(
            lambda: polled(wanted(0, 80)), timeout_s=30, what="the orders sent after the restart"
        )
        assert set(got) == wanted(0, 80)
    finally:
        await consumer.shutdown()
        await broker.stop(0)
        await namesrv.stop(0)
