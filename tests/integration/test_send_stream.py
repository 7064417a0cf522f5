"""SendStream against real brokers: SendBatch requests over one bidirectional stream are
stored and answered as the unary SendBatch stores and answers them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import grpc
import pytest

from pocketmq.broker.broker import Broker
from pocketmq.broker.topic_config import BrokerTopicConfig
from pocketmq.client import Message, MessageQueue, Producer, SendStatus
from pocketmq.client.config import Transport
from pocketmq.client.errors import BusyError, NotMasterError
from pocketmq.client.idempotence import stamp
from pocketmq.client.message_codec import decode_messages, encode_message
from pocketmq.client.remoting import Remoting
from pocketmq.common.message import encode_record, pack_host
from pocketmq.nameserver import NameServer
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc

QUEUES = 4
HOST = pack_host(("127.0.0.1", 1))
SEND_STREAM = "/pocketmq.v1.Broker/SendStream"


@pytest.fixture
async def single(nameserver, start_broker, eventually) -> AsyncIterator[tuple[NameServer, Broker]]:
    """A nameserver and one broker with topics ``unary`` and ``stream``."""
    broker = await start_broker(
        broker_name="broker-a",
        port=0,
        grpc_v2_port=-1,
        namesrv_addrs=nameserver.address,
        default_topic_queue_nums=QUEUES,
    )
    for topic in ("unary", "stream"):
        broker.topics.create(
            BrokerTopicConfig(topic_name=topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        )
    route = nameserver.route_table.get_route
    await eventually(lambda: route("stream") is not None, what="routes")
    yield nameserver, broker


def stored(broker: Broker, topic: str, queue_id: int) -> list[bytes]:
    got = broker.store.get_messages(topic, queue_id, 0, max_count=10_000)
    return [m.body for m in decode_messages(b"".join(got.records), "broker-a")]


def streams(broker: Broker):  # type: ignore[no-untyped-def]
    assert broker.servicer is not None
    return broker.servicer.send_streams


def record(topic: str, body: bytes, queue_id: int = 0) -> bytes:
    return encode_record(
        topic=topic, body=body, queue_id=queue_id, born_timestamp_ms=1, born_host=HOST
    )


def envelope(request_id: int, records: bytes, deadline_ms: int = 0) -> pb.SendStreamRequest:
    return pb.SendStreamRequest(
        request_id=request_id,
        deadline_ms=deadline_ms,
        batch=pb.SendBatchRequest(records=records, producer_group="pg"),
    )


async def test_stream_batches_are_stored_and_answered_as_unary_batches_are(single) -> None:
    namesrv, broker = single
    bodies = [b"m%04d" % i for i in range(300)]
    answers = {}
    for topic, on in (("unary", False), ("stream", True)):
        async with Producer(group="pg", namesrv=namesrv.address, send_stream=on) as producer:
            queue = MessageQueue(topic, "broker-a", 1)
            answers[topic] = [
                await producer.send_batch(
                    [Message(topic=topic, body=b) for b in bodies[i : i + 100]], queue=queue
                )
                for i in range(0, len(bodies), 100)
            ]
    assert streams(broker).requests_total == 3  # the stream producer's, and only those
    for unary, stream in zip(answers["unary"], answers["stream"], strict=True):
        assert [r.queue_offset for r in stream] == [r.queue_offset for r in unary]
        assert [r.status for r in stream] == [r.status for r in unary] == [SendStatus.SEND_OK] * 100
        assert [r.queue.queue_id for r in stream] == [1] * 100
        assert len({r.msg_id for r in stream}) == 100
    assert stored(broker, "stream", 1) == stored(broker, "unary", 1) == bodies


async def test_many_concurrent_senders_share_one_stream_and_keep_each_senders_order(
    single,
) -> None:
    namesrv, broker = single
    async with Producer(group="pg", namesrv=namesrv.address) as producer:

        async def sender(n: int) -> None:
            queue = MessageQueue("stream", "broker-a", n % QUEUES)
            for i in range(8):
                await producer.send_batch(
                    [Message(topic="stream", body=b"s%02d-%d-%d" % (n, i, j)) for j in range(4)],
                    queue=queue,
                )

        await asyncio.gather(*(sender(n) for n in range(32)))
        assert streams(broker).open_streams == 1
    assert streams(broker).requests_total == 32 * 8
    for queue_id in range(QUEUES):
        got = stored(broker, "stream", queue_id)
        for n in range(queue_id, 32, QUEUES):
            mine = [b for b in got if b.startswith(b"s%02d-" % n)]
            assert mine == [b"s%02d-%d-%d" % (n, i, j) for i in range(8) for j in range(4)]


async def test_coalesced_single_sends_go_over_the_stream(single) -> None:
    namesrv, broker = single
    async with Producer(group="pg", namesrv=namesrv.address) as producer:
        results = await asyncio.gather(
            *(producer.send(Message(topic="stream", body=b"one %d" % i)) for i in range(200))
        )
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert streams(broker).requests_total >= 1
    got = [b for q in range(QUEUES) for b in stored(broker, "stream", q)]
    assert sorted(got) == sorted(b"one %d" % i for i in range(200))


async def test_a_request_read_past_its_deadline_is_refused_and_not_stored(single) -> None:
    _, broker = single
    async with grpc.aio.insecure_channel(broker.address) as channel:
        call = broker_pb2_grpc.BrokerStub(channel).SendStream()
        await call.write(envelope(1, record("stream", b"in time")))
        first = await call.read()
        assert first.request_id == 1 and first.error_code == 0
        answered = time.monotonic()
        while time.monotonic() - answered < 0.02:  # the stream is now > 20 ms old
            await asyncio.sleep(0.005)
        await call.write(envelope(2, record("stream", b"too late"), deadline_ms=1))
        late = await call.read()
        await call.done_writing()
    assert late.request_id == 2
    assert late.error_code == grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
    assert "not stored" in late.error_message
    assert stored(broker, "stream", 0) == [b"in time"]


async def test_a_busy_broker_refuses_one_request_as_the_unary_call_is_refused(
    tmp_path, start_broker
) -> None:
    broker = await start_broker(max_in_flight_requests=1)
    broker.topics.create(BrokerTopicConfig(topic_name="t", read_queue_nums=1, write_queue_nums=1))
    assert broker.flow_control is not None
    holder = broker.flow_control.admit("ipv4:10.0.0.1:1")  # the broker's one request slot
    remoting = Remoting(Transport(send_stream=True))
    client = remoting.broker(broker.address)
    try:
        with pytest.raises(BusyError) as busy:
            await client.send_batch(record("t", b"busy"), producer_group="pg")
        assert busy.value.flow_control  # SYSTEM_BUSY: the producer backs off and retries
        assert "max_in_flight_requests" in str(busy.value)
        holder.call_ended(None)
        receipts = await client.send_batch(record("t", b"served"), producer_group="pg")
    finally:
        await remoting.close()
    assert [r.queue_offset for r in receipts] == [0]
    assert streams(broker).requests_total == 2
    assert stored(broker, "t", 0) == [b"served"]


async def test_a_replica_refuses_stream_requests_naming_its_master(
    broker_config, nameserver, start_broker
) -> None:
    common = dict(
        broker_name="broker-a", ha_port=0, namesrv_addrs=nameserver.address, grpc_v2_port=-1
    )
    await start_broker(broker_config("master", broker_role="ASYNC_MASTER", broker_id=0, **common))
    replica = await start_broker(
        broker_config("replica", broker_role="SLAVE", broker_id=1, **common)
    )
    remoting = Remoting(Transport(send_stream=True))
    try:
        with pytest.raises(NotMasterError) as refused:
            await remoting.broker(replica.address).send_batch(
                record("t", b"x"), producer_group="pg"
            )
    finally:
        await remoting.close()
    assert refused.value.code == "FAILED_PRECONDITION"
    assert "replica (SLAVE)" in str(refused.value)
    assert streams(replica).requests_total == 1


async def test_an_envelope_without_a_batch_is_answered_by_its_id_and_the_stream_goes_on(
    single,
) -> None:
    _, broker = single
    async with grpc.aio.insecure_channel(broker.address) as channel:
        call = channel.stream_stream(SEND_STREAM)()
        await call.write(b"\x08\x05")  # id 5, a valid message without its batch
        empty = pb.SendStreamResponse.FromString(await call.read())
        await call.write(envelope(6, record("stream", b"fine")).SerializeToString())
        fine = pb.SendStreamResponse.FromString(await call.read())
        await call.done_writing()
    assert empty.request_id == 5
    assert empty.error_code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "carries no batch" in empty.error_message
    assert fine.request_id == 6 and fine.error_code == 0
    assert stored(broker, "stream", 0) == [b"fine"]


@pytest.mark.parametrize(
    ("raw", "words"),
    [(b"\x08", "ends inside a varint"), (b"\x08\x05\x1a\x05abc", "only 3 follow")],
    ids=["cut inside the id", "a batch cut short"],
)
async def test_an_envelope_that_is_no_message_ends_the_stream_invalid_argument(
    single, raw: bytes, words: str
) -> None:
    _, broker = single
    async with grpc.aio.insecure_channel(broker.address) as channel:
        call = channel.stream_stream(SEND_STREAM)()
        await call.write(raw)
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            await call.read()
    assert ended.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid message" in (ended.value.details() or "")
    assert words in (ended.value.details() or "")
    assert streams(broker).open_streams == 0
    assert stored(broker, "stream", 0) == []


async def test_streams_past_the_per_connection_limit_are_refused_and_the_client_sends_unary(
    start_broker,
) -> None:
    broker = await start_broker(max_send_streams_per_connection=1)
    broker.topics.create(BrokerTopicConfig(topic_name="t", read_queue_nums=1, write_queue_nums=1))
    remoting = Remoting(Transport(send_stream=True))
    client = remoting.broker(broker.address)
    try:
        await client.send_batch(record("t", b"on the stream"), producer_group="pg")
        extra = remoting.channel(broker.address).stream_stream(SEND_STREAM)()
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await extra.read()
        await client.send_batch(record("t", b"still on the stream"), producer_group="pg")
    finally:
        await remoting.close()
    assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max_send_streams_per_connection" in (refused.value.details() or "")
    assert dict(refused.value.trailing_metadata())["pocketmq-reason"] == "SEND_STREAM_LIMIT"
    assert stored(broker, "t", 0) == [b"on the stream", b"still on the stream"]


async def test_a_stream_at_its_in_flight_bound_is_not_read_until_a_request_is_answered(
    start_broker, eventually
) -> None:
    broker = await start_broker(max_send_stream_in_flight=1)
    broker.topics.create(BrokerTopicConfig(topic_name="t", read_queue_nums=1, write_queue_nums=1))

    def numbered(pid: int, seq: int) -> bytes:
        return encode_message(
            Message(topic="t", body=b"seq %d" % seq),
            queue_id=0,
            uniq_key=stamp(f"K{seq}", pid, 0, seq),
            born_host=HOST,
            born_timestamp_ms=1,
        )

    async with grpc.aio.insecure_channel(broker.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        pid = (await stub.InitProducerId(pb.InitProducerIdRequest(topics=["t"]))).producer_id
        call = stub.SendStream()
        await call.write(envelope(1, numbered(pid, 1)))  # ahead of seq 0: waits for it
        await call.write(envelope(2, record("t", b"behind the bound")))
        await eventually(lambda: broker.idempotence.waited == 1, what="request 1 waiting")
        assert streams(broker).requests_total == 1  # request 2 waits in the transport
        await stub.SendMessage(pb.SendMessageRequest(record=numbered(pid, 0)))
        answers = [await call.read(), await call.read()]
        await call.done_writing()
    assert [(a.request_id, a.error_code) for a in answers] == [(1, 0), (2, 0)]
    assert stored(broker, "t", 0) == [b"seq 0", b"seq 1", b"behind the bound"]


async def test_a_stopping_broker_ends_its_streams_unavailable_after_answering_what_it_read(
    start_broker,
) -> None:
    broker = await start_broker()
    broker.topics.create(BrokerTopicConfig(topic_name="t", read_queue_nums=1, write_queue_nums=1))
    async with grpc.aio.insecure_channel(broker.address) as channel:
        call = broker_pb2_grpc.BrokerStub(channel).SendStream()
        await call.write(envelope(1, record("t", b"before the stop")))
        first = await call.read()
        stopping = asyncio.create_task(broker.stop())
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            await call.read()
        await stopping
    assert first.request_id == 1 and first.error_code == 0
    assert ended.value.code() is grpc.StatusCode.UNAVAILABLE
    assert "the broker is stopping" in (ended.value.details() or "")
