"""Restarts of a real broker: offsets and topics survive, a damaged offsets file falls back
to its ``.bak``, a graceful stop leaves no ``abort``, in-flight pulls are answered."""

from __future__ import annotations

import asyncio
import os

import grpc
from wirekit import record

from pocketmq.broker.broker import Broker
from pocketmq.common.message import iter_records
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc, common_pb2


async def with_stub(broker, fn):
    async with grpc.aio.insecure_channel(broker.address) as channel:
        return await fn(broker_pb2_grpc.BrokerStub(channel))


async def commit(stub, queue_id, offset):
    await stub.UpdateConsumerOffset(
        pb.UpdateConsumerOffsetRequest(
            consumer_group="GroupA", topic="TopicA", queue_id=queue_id, offset=offset
        )
    )


async def query(broker, queue_id):
    async def q(stub):
        reply = await stub.QueryConsumerOffset(
            pb.QueryConsumerOffsetRequest(
                consumer_group="GroupA", topic="TopicA", queue_id=queue_id
            )
        )
        return reply.offset if reply.HasField("offset") else None

    return await with_stub(broker, q)


async def test_offsets_topics_and_messages_survive_a_restart(tmp_path, broker_config):
    broker = Broker(broker_config())
    await broker.start()

    async def load(stub):
        await stub.CreateTopic(
            pb.CreateTopicRequest(
                topic_config=common_pb2.TopicConfig(
                    topic_name="TopicA", read_queue_nums=2, write_queue_nums=2, perm=6
                )
            )
        )
        await stub.SendBatch(pb.SendBatchRequest(records=record(body=b"a") + record(body=b"b")))
        await commit(stub, 0, 1)
        await commit(stub, 1, 0)

    await with_stub(broker, load)
    await broker.stop()
    assert not os.path.exists(tmp_path / "data" / "abort")

    broker = Broker(broker_config())
    await broker.start()
    try:
        assert broker.recovery.clean_shutdown
        assert await query(broker, 0) == 1
        assert await query(broker, 1) == 0

        async def read(stub):
            topics = await stub.GetAllTopicConfig(pb.GetAllTopicConfigRequest())
            assert "TopicA" in {tc.topic_name for tc in topics.topic_configs}
            reply = await stub.PullMessage(
                pb.PullMessageRequest(
                    consumer_group="GroupA",
                    topic="TopicA",
                    queue_id=0,
                    queue_offset=1,
                    suspend_timeout_ms=0,
                )
            )
            return [m.body for m in iter_records(reply.records)]

        assert await with_stub(broker, read) == [b"b"]
    finally:
        await broker.stop()


async def test_a_corrupted_offsets_file_falls_back_to_the_previous_version(
    tmp_path, broker_config, caplog
):
    broker = Broker(broker_config(consumer_offset_persist_interval_seconds=3600))
    await broker.start()
    try:
        await with_stub(
            broker,
            lambda stub: stub.SendBatch(  # offsets up to 9 exist
                pb.SendBatchRequest(records=record(body=b"x") * 9)
            ),
        )
        await with_stub(broker, lambda stub: commit(stub, 0, 5))
        await broker.offsets.run_once()  # consumerOffset.json: 5
        await with_stub(broker, lambda stub: commit(stub, 0, 9))
    finally:
        await broker.stop()  # consumerOffset.json: 9, .bak: 5
    path = tmp_path / "data" / "config" / "consumerOffset.json"
    path.write_bytes(path.read_bytes()[:7])  # torn by a bad disk
    broker = Broker(broker_config())
    await broker.start()
    try:
        assert await query(broker, 0) == 5
        assert "consumerOffset.json is unreadable" in caplog.text
    finally:
        await broker.stop()


async def test_a_stop_answers_parked_pulls_instead_of_dropping_them(
    tmp_path, broker_config, eventually
):
    broker = Broker(broker_config())
    await broker.start()
    channel = grpc.aio.insecure_channel(broker.address)
    stub = broker_pb2_grpc.BrokerStub(channel)
    await stub.SendMessage(pb.SendMessageRequest(record=record(body=b"x")))
    parked = asyncio.ensure_future(
        stub.PullMessage(
            pb.PullMessageRequest(
                consumer_group="GroupA",
                topic="TopicA",
                queue_id=0,
                queue_offset=1,
                suspend_timeout_ms=30_000,
            )
        )
    )
    await eventually(lambda: broker.hold.parked_count, what="the pull parked")
    started = asyncio.get_running_loop().time()
    await broker.stop(grace_s=10)
    reply = await asyncio.wait_for(parked, 5)
    assert reply.status == pb.NO_NEW_MSG
    assert asyncio.get_running_loop().time() - started < 5
    await channel.close()
    assert not os.path.exists(tmp_path / "data" / "abort")


async def test_a_second_broker_on_the_same_directory_is_refused(tmp_path, broker_config):
    first = Broker(broker_config())
    await first.start()
    try:
        second = Broker(broker_config())
        try:
            await second.start()
        except Exception as exc:  # the store's lock error, raised from start()
            assert "lock" in str(exc).lower() or "locked" in type(exc).__name__.lower()
        else:
            await second.stop()
            raise AssertionError("a second broker started on a locked data directory")
    finally:
        await first.stop()
