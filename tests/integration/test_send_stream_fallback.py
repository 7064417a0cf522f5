"""SendStream against a broker without the method (older: the same batches as unary
SendBatch calls) and with the ACL on (each request signed and authorized on its own;
no stream lets an unsigned request in)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from aclmode import APP_ACL

from pocketmq.broker.topic_config import BrokerTopicConfig
from pocketmq.client import Message, MessageQueue, Producer, SendStatus
from pocketmq.client.config import Transport
from pocketmq.client.errors import PermissionDeniedError
from pocketmq.client.remoting import Remoting
from pocketmq.client.send_stream import signature_fields
from pocketmq.common.auth import Credentials
from pocketmq.common.message import encode_record, pack_host
from pocketmq.v1 import broker_pb2 as pb

HOST = pack_host(("127.0.0.1", 1))
SEND_STREAM = "/pocketmq.v1.Broker/SendStream"
APP = {"access_key": "app", "secret_key": "app-secret"}  # APP_ACL's application


def record(topic: str, body: bytes) -> bytes:
    return encode_record(topic=topic, body=body, queue_id=0, born_timestamp_ms=1, born_host=HOST)


@pytest.fixture
async def old_broker() -> AsyncIterator[tuple[str, list[bytes]]]:
    """A server of the Broker service that serves SendBatch only, as brokers did before
    SendStream: (its address, the records it received)."""
    received: list[bytes] = []

    async def send_batch(request: pb.SendBatchRequest, context: object) -> pb.SendMessageResponse:
        received.append(request.records)
        return pb.SendMessageResponse(
            status=pb.SEND_OK,
            msg_ids=[""],
            queue_ids=[0],
            queue_offsets=[len(received) - 1],
            phys_offsets=[0],
        )

    handler = grpc.unary_unary_rpc_method_handler(
        send_batch,
        request_deserializer=pb.SendBatchRequest.FromString,
        response_serializer=pb.SendMessageResponse.SerializeToString,
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("pocketmq.v1.Broker", {"SendBatch": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}", received
    finally:
        await server.stop(0)


async def test_a_broker_without_send_stream_gets_unary_calls_from_then_on(old_broker) -> None:
    addr, received = old_broker
    remoting = Remoting(Transport(send_stream=True))
    client = remoting.broker(addr)
    try:
        first = await client.send_batch(record("t", b"first"), producer_group="pg")
        assert client._stream is not None and client._stream.unsupported
        second = await client.send_batch(record("t", b"second"), producer_group="pg")
    finally:
        await remoting.close()
    assert [r.queue_offset for r in first + second] == [0, 1]
    assert received == [record("t", b"first"), record("t", b"second")]


@pytest.fixture
async def secured(tmp_path, start_broker, nameserver, eventually):
    acl = tmp_path / "acl.toml"
    acl.write_text(APP_ACL)
    broker = await start_broker(
        namesrv_addrs=nameserver.address, acl_enable=True, acl_file=str(acl)
    )
    for topic in ("orders", "audit"):
        broker.topics.create(
            BrokerTopicConfig(topic_name=topic, read_queue_nums=2, write_queue_nums=2)
        )
    await eventually(lambda: nameserver.route_table.get_route("audit") is not None, what="route")
    return broker


def signed(request: pb.SendStreamRequest, access_key: str, secret_key: str) -> bytes:
    """*request* serialized with its own signature fields (what the SDK appends)."""
    batch = request.batch.SerializeToString()
    return request.SerializeToString() + signature_fields(
        Credentials(access_key, secret_key), batch
    )


async def test_with_the_acl_on_each_stream_request_is_checked_on_its_own(secured) -> None:
    def request(rid: int, topic: str) -> pb.SendStreamRequest:
        return pb.SendStreamRequest(
            request_id=rid,
            batch=pb.SendBatchRequest(records=record(topic, b"r%d" % rid), producer_group="pg"),
        )

    replayed = signed(request(3, "orders"), APP["access_key"], APP["secret_key"])
    async with grpc.aio.insecure_channel(secured.address) as channel:
        call = channel.stream_stream(SEND_STREAM)()
        sent = [
            request(1, "orders").SerializeToString(),  # unsigned
            signed(request(2, "orders"), APP["access_key"], "wrong-secret"),
            replayed,
            replayed,  # the same signature again
            signed(request(5, "audit"), APP["access_key"], APP["secret_key"]),  # SUB only
        ]
        answers = []
        for raw in sent:
            await call.write(raw)
            answers.append(pb.SendStreamResponse.FromString(await call.read()))
        await call.done_writing()
    code = grpc.StatusCode
    got = [(a.request_id, a.error_code) for a in answers]
    assert got == [
        (1, code.UNAUTHENTICATED.value[0]),
        (2, code.UNAUTHENTICATED.value[0]),
        (3, 0),
        (3, code.UNAUTHENTICATED.value[0]),
        (5, code.PERMISSION_DENIED.value[0]),
    ]
    assert "requires signed requests" in answers[0].error_message
    assert "does not match" in answers[1].error_message
    assert "a replay is refused" in answers[3].error_message
    assert "no PUB permission on topic 'audit'" in answers[4].error_message
    assert secured.servicer.send_streams.requests_total == 5
    assert secured.store.max_offset("orders", 0) == 1  # request 3, once


async def test_with_the_acl_on_an_unsigned_client_is_refused_as_unary_calls_are(secured) -> None:
    remoting = Remoting(Transport(send_stream=True))
    client = remoting.broker(secured.address)
    try:
        with pytest.raises(PermissionDeniedError) as refused:
            await client.send_batch(record("orders", b"x"), producer_group="pg")
        assert client._stream is not None and not client._stream.unsupported
    finally:
        await remoting.close()
    assert "UNAUTHENTICATED" in str(refused.value)
    assert secured.store.max_offset("orders", 0) == 0


async def test_with_the_acl_on_a_signed_producer_sends_its_batches_on_the_stream(
    secured, nameserver
) -> None:
    async with Producer(group="pg", namesrv=nameserver.address, **APP) as producer:
        queue = MessageQueue("orders", secured.config.broker_name, 0)
        results = await producer.send_batch(
            [Message(topic="orders", body=b"b%d" % i) for i in range(5)], queue=queue
        )
        with pytest.raises(PermissionDeniedError) as denied:
            await producer.send_batch(
                [Message(topic="audit", body=b"no")],
                queue=MessageQueue("audit", secured.config.broker_name, 0),
            )
    assert [r.status for r in results] == [SendStatus.SEND_OK] * 5
    assert "no PUB permission on topic 'audit'" in str(denied.value)
    assert secured.servicer.send_streams.requests_total >= 2
    assert secured.store.max_offset("orders", 0) == 5
    assert secured.store.max_offset("audit", 0) == 0


async def test_with_the_acl_on_a_trusted_address_is_served_on_the_stream(
    tmp_path, start_broker
) -> None:
    acl = tmp_path / "acl.toml"
    acl.write_text('global_white_remote_addresses = ["127.0.0.1"]\n' + APP_ACL)
    broker = await start_broker(acl_enable=True, acl_file=str(acl))
    broker.topics.create(BrokerTopicConfig(topic_name="t", read_queue_nums=1, write_queue_nums=1))
    remoting = Remoting(Transport(send_stream=True))
    try:
        receipts = await remoting.broker(broker.address).send_batch(
            record("t", b"trusted"), producer_group="pg"
        )
    finally:
        await remoting.close()
    assert [r.queue_offset for r in receipts] == [0]
    assert broker.servicer.send_streams.requests_total == 1
