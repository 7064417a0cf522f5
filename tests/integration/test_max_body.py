"""The documented largest body (max_message_size_bytes, 4 MiB) is sendable with default keys.

A broker process with the default body and batch limits; a body of exactly the
limit goes through SendMessage, SendBatch (a batch of one), the SDK's send and
RocketMQ 5's SendMessage, and is read back whole; one byte more is refused with
both numbers in the message.
"""

from __future__ import annotations

import dataclasses
import random
import re

import grpc
import pytest
from processkit import ProcessKit
from wirekit import record

from pocketmq.broker.config import BrokerConfig
from pocketmq.client import Message, Producer
from pocketmq.client.errors import InvalidMessageError
from pocketmq.common.message import decode_record
from pocketmq.rmqv2 import definition_pb2 as d
from pocketmq.rmqv2 import service_pb2 as s
from pocketmq.rmqv2 import service_pb2_grpc
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc, common_pb2

DEFAULTS = {f.name: f.default for f in dataclasses.fields(BrokerConfig)}
LIMIT = DEFAULTS["max_message_size_bytes"]
TOPIC = "TopicMax"
UNLIMITED = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
V2_META = (("x-mq-client-id", "test-host@1@0@max"),)
_V2_SERVING = re.compile(r"MessagingService of broker \S+ on (\S+)")


@pytest.fixture
async def servers(tmp_path):
    kit = ProcessKit(tmp_path)
    try:
        namesrv = await kit.nameserver()
        broker = await kit.broker(
            namesrv=namesrv.addr,
            commitlog_file_size_bytes=64 * 1024 * 1024,
            max_message_size_bytes=LIMIT,
            max_batch_size_bytes=DEFAULTS["max_batch_size_bytes"],
        )
        async with grpc.aio.insecure_channel(broker.addr, options=UNLIMITED) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            await stub.CreateTopic(
                pb.CreateTopicRequest(
                    topic_config=common_pb2.TopicConfig(
                        topic_name=TOPIC, read_queue_nums=1, write_queue_nums=1
                    )
                )
            )
            yield namesrv, broker, stub
        assert await broker.stop() == 0
    finally:
        await kit.close()


def body_of(size: int, seed: int) -> bytes:
    """Incompressible, so that the SDK sends it as it is (it compresses what shrinks)."""
    return random.Random(seed).randbytes(size)


async def read_back(stub, offset: int) -> bytes:
    reply = await stub.PullMessage(
        pb.PullMessageRequest(
            consumer_group="max-reader",
            topic=TOPIC,
            queue_id=0,
            queue_offset=offset,
            max_msg_nums=1,
            suspend_timeout_ms=0,
        )
    )
    assert reply.status == pb.FOUND and reply.message_count == 1, reply.status
    return bytes(decode_record(reply.records).body)


async def test_a_body_of_exactly_the_limit_is_stored_and_read_back_by_every_send_path(servers):
    namesrv, _broker, stub = servers
    sent = await stub.SendMessage(
        pb.SendMessageRequest(record=record(TOPIC, body=body_of(LIMIT, 1)))
    )
    batch = await stub.SendBatch(pb.SendBatchRequest(records=record(TOPIC, body=body_of(LIMIT, 2))))
    async with Producer(group="max-producer", namesrv=namesrv.addr) as producer:
        via_sdk = await producer.send(Message(topic=TOPIC, body=body_of(LIMIT, 3)))
    assert sent.status == batch.status == pb.SEND_OK
    assert via_sdk.queue_offset == 2
    for offset, fill in ((0, 1), (1, 2), (2, 3)):
        assert await read_back(stub, offset) == body_of(LIMIT, fill)


async def test_a_body_one_byte_over_the_limit_is_refused_naming_both_numbers(servers):
    namesrv, _broker, stub = servers
    for call in (
        stub.SendMessage(pb.SendMessageRequest(record=record(TOPIC, body=body_of(LIMIT + 1, 1)))),
        stub.SendBatch(pb.SendBatchRequest(records=record(TOPIC, body=body_of(LIMIT + 1, 1)))),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert f"{LIMIT + 1} bytes" in refused.value.details()
        assert f"{LIMIT} (max_message_size_bytes)" in refused.value.details()
    async with Producer(group="max-producer", namesrv=namesrv.addr) as producer:
        with pytest.raises(InvalidMessageError, match=f"{LIMIT + 1} bytes.*{LIMIT}"):
            await producer.send(Message(topic=TOPIC, body=body_of(LIMIT + 1, 1)))


async def test_rocketmq5_send_takes_a_body_of_exactly_the_limit_and_refuses_one_more(servers):
    _namesrv, broker, stub = servers
    v2_addr = _V2_SERVING.search(broker.log_text()).group(1)

    def message(size: int, n: int) -> d.Message:
        return d.Message(
            topic=d.Resource(name=TOPIC),
            body=body_of(size, 4),
            system_properties=d.SystemProperties(
                message_id=f"ID{n:030d}", body_encoding=d.IDENTITY
            ),
        )

    async with grpc.aio.insecure_channel(v2_addr, options=UNLIMITED) as channel:
        v2 = service_pb2_grpc.MessagingServiceStub(channel)
        accepted = await v2.SendMessage(
            s.SendMessageRequest(messages=[message(LIMIT, 1)]), metadata=V2_META
        )
        refused = await v2.SendMessage(
            s.SendMessageRequest(messages=[message(LIMIT + 1, 2)]), metadata=V2_META
        )
    assert accepted.status.code == d.OK, accepted.status
    assert refused.status.code != d.OK
    assert str(LIMIT + 1) in refused.status.message and str(LIMIT) in refused.status.message
    assert await read_back(stub, 0) == body_of(LIMIT, 4)
