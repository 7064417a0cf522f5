"""A bulk PullBatch (``PullBatchRequest.bulk``, the Spark source's) on a real broker: up
to 1,024 messages of a queue in one reply, bounded by the call's reply bytes, checked
and authorized like any pull; every other pull keeps RocketMQ's caps."""

from __future__ import annotations

import grpc
import pytest
from aclmode import APP, app_acl_broker
from wirekit import create_topic, record

from pocketmq.broker import pull_processor
from pocketmq.client import MessageQueue, PermissionDeniedError
from pocketmq.client.config import Transport
from pocketmq.client.remoting import PullReply, QueuePull, Remoting
from pocketmq.common.message import iter_records
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc


async def fill(stub, queue_id: int, count: int, body_bytes: int = 100) -> None:
    for start in range(0, count, 500):
        records = [
            record(queue_id=queue_id, body=b"%06d" % i + b"x" * (body_bytes - 6))
            for i in range(start, min(start + 500, count))
        ]
        await stub.SendBatch(pb.SendBatchRequest(records=b"".join(records)))


def pull(stub, *pulls: pb.QueuePull, bulk: bool):
    return stub.PullBatch(
        pb.PullBatchRequest(consumer_group="GroupA", pulls=pulls, suspend_timeout_ms=0, bulk=bulk)
    )


def qp(queue_id: int, offset: int = 0, max_msg_nums: int = 0, topic: str = "TopicA"):
    return pb.QueuePull(
        topic=topic, queue_id=queue_id, queue_offset=offset, max_msg_nums=max_msg_nums
    )


def offsets(result: pb.QueuePullResult) -> list[int]:
    return [m.queue_offset for m in iter_records(result.reply.records)]


async def test_a_bulk_pull_reads_up_to_1024_messages_of_a_queue_in_one_reply(stub):
    await create_topic(stub)
    await fill(stub, 0, 1100)

    (result,) = (await pull(stub, qp(0, max_msg_nums=5000), bulk=True)).results

    assert offsets(result) == list(range(1024))
    assert (result.reply.message_count, result.reply.next_begin_offset) == (1024, 1024)
    (rest,) = (await pull(stub, qp(0, offset=1024, max_msg_nums=1024), bulk=True)).results
    assert offsets(rest) == list(range(1024, 1100))


async def test_a_pull_that_is_not_bulk_keeps_the_brokers_32_messages(stub):
    await create_topic(stub)
    await fill(stub, 0, 100)

    (plain,) = (await pull(stub, qp(0, max_msg_nums=1024), bulk=False)).results
    (default,) = (await pull(stub, qp(0), bulk=True)).results

    assert offsets(plain) == list(range(32))
    assert offsets(default) == list(range(32)), "no count asked: the broker's default"


async def test_a_bulk_queue_takes_the_reply_bytes_left_not_max_pull_bytes(start_broker):
    broker = await start_broker(max_pull_bytes=4096)
    async with grpc.aio.insecure_channel(broker.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        await create_topic(stub)
        await fill(stub, 0, 300, body_bytes=1000)

        (plain,) = (await pull(stub, qp(0, max_msg_nums=300), bulk=False)).results
        (bulk,) = (await pull(stub, qp(0, max_msg_nums=300), bulk=True)).results

    assert len(plain.reply.records) <= 4096
    assert plain.reply.message_count < 32
    assert offsets(bulk) == list(range(300))


async def test_a_bulk_reply_stops_at_the_reply_limit_and_leaves_the_rest_out(
    start_broker, monkeypatch
):
    monkeypatch.setattr(pull_processor, "PULL_BATCH_REPLY_BYTES", 50_000)
    broker = await start_broker(max_pull_bytes=4096)
    async with grpc.aio.insecure_channel(broker.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        await create_topic(stub)
        for queue_id in range(3):
            await fill(stub, queue_id, 200, body_bytes=1000)

        reply = await pull(stub, *(qp(q, max_msg_nums=1024) for q in range(3)), bulk=True)

    # the limit, plus at most one queue read within max_pull_bytes past it
    assert sum(len(r.reply.records) for r in reply.results) <= 50_000 + 4096
    counts = [r.reply.message_count for r in reply.results]
    assert 32 < max(counts) < 200, "a queue read past 32 messages, up to the limit"
    assert sum(counts) < 600, "the rest is left to be pulled again"
    assert all(offsets(r) == list(range(r.reply.message_count)) for r in reply.results)


async def test_a_bulk_pull_checks_each_queue_like_any_pull(stub):
    await create_topic(stub)
    await fill(stub, 1, 10)

    reply = await pull(stub, qp(0, topic="NoSuchTopic"), qp(9), qp(1, max_msg_nums=-1), bulk=True)

    codes = {r.index: r.error_code for r in reply.results}
    assert codes == {0: "NOT_FOUND", 1: "INVALID_ARGUMENT", 2: "INVALID_ARGUMENT"}
    (bad,) = [r for r in reply.results if r.index == 2]
    assert "give 1..1024" in bad.error_message


async def test_with_the_acl_a_bulk_pull_of_a_topic_without_sub_is_refused_alone(
    tmp_path, start_broker
):
    broker = await app_acl_broker(start_broker, tmp_path, ("orders", "secret"))
    remoting = Remoting(Transport(APP))
    try:
        client = remoting.broker(f"127.0.0.1:{broker.port}")
        pulls = [
            QueuePull(queue=MessageQueue(t, "b", 0), offset=0, max_messages=1024)
            for t in ("orders", "secret")
        ]
        allowed, denied = await client.pull_batch(
            group="billing", pulls=pulls, suspend_ms=0, timeout_s=5, bulk=True
        )
        assert isinstance(allowed, PullReply)
        assert isinstance(denied, PermissionDeniedError)
        assert "no SUB permission on topic 'secret'" in str(denied)
        with pytest.raises(PermissionDeniedError, match="group 'other'"):
            await client.pull_batch(
                group="other", pulls=pulls[:1], suspend_ms=0, timeout_s=5, bulk=True
            )
    finally:
        await remoting.close()
