"""MessagingService on the wire: routes, refusals, handles and times, with raw v2 calls.

These tests speak ``apache.rocketmq.v2`` through PocketMQ's own generated stubs
(what the official client sends is covered by the tests that drive it,
tests/compat/rmq_agent.py), so they
can reach cases the official client checks away before sending.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from pocketmq.broker.broker import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.rmqv2 import definition_pb2 as d
from pocketmq.rmqv2 import service_pb2 as s
from pocketmq.rmqv2 import service_pb2_grpc

from .conftest import SMALL, V2Cluster

META = (("x-mq-client-id", "test-host@1@0@abc"),)


class V2:
    """A raw v2 client of one broker."""

    def __init__(self, stub: service_pb2_grpc.MessagingServiceStub) -> None:
        self.stub = stub
        self.sent = 0

    async def send(self, topic: str, body: bytes = b"x", **system: Any) -> s.SendMessageResponse:
        self.sent += 1
        user = system.pop("user_properties", None)
        sp = d.SystemProperties(
            message_id=f"ID{self.sent:030d}", body_encoding=d.IDENTITY, **system
        )
        msg = d.Message(
            topic=d.Resource(name=topic),
            body=body,
            system_properties=sp,
            user_properties=user or {},
        )
        return await self.stub.SendMessage(s.SendMessageRequest(messages=[msg]), metadata=META)

    async def receive(
        self,
        topic: str,
        group: str = "g",
        *,
        expression: str = "*",
        invisible_s: int = 10,
        poll_s: int = 0,
        filter_type: int = d.TAG,
    ) -> tuple[d.Status, list[d.Message]]:
        request = s.ReceiveMessageRequest(
            group=d.Resource(name=group),
            message_queue=d.MessageQueue(topic=d.Resource(name=topic), id=-1),
            filter_expression=d.FilterExpression(type=filter_type, expression=expression),
            batch_size=16,
            invisible_duration=Duration(seconds=invisible_s),
            long_polling_timeout=Duration(seconds=poll_s),
        )
        status, messages = None, []
        async for frame in self.stub.ReceiveMessage(request, metadata=META, timeout=poll_s + 5):
            if frame.HasField("status"):
                status = frame.status
            elif frame.HasField("message"):
                messages.append(frame.message)
        assert status is not None
        return status, messages

    async def ack(self, topic: str, handle: str, group: str = "g") -> d.Status:
        reply = await self.stub.AckMessage(
            s.AckMessageRequest(
                group=d.Resource(name=group),
                topic=d.Resource(name=topic),
                entries=[s.AckMessageEntry(message_id="m", receipt_handle=handle)],
            ),
            metadata=META,
        )
        return reply.status

    async def change(
        self, topic: str, handle: str, seconds: int, group: str = "g"
    ) -> s.ChangeInvisibleDurationResponse:
        return await self.stub.ChangeInvisibleDuration(
            s.ChangeInvisibleDurationRequest(
                group=d.Resource(name=group),
                topic=d.Resource(name=topic),
                receipt_handle=handle,
                invisible_duration=Duration(seconds=seconds),
                message_id="m",
            ),
            metadata=META,
        )


@pytest.fixture
async def v2(v2_cluster: V2Cluster) -> AsyncIterator[V2]:
    async with grpc.aio.insecure_channel(v2_cluster.endpoints) as channel:
        yield V2(service_pb2_grpc.MessagingServiceStub(channel))


async def test_query_route_lists_every_brokers_queues_at_its_own_v2_endpoint(
    v2_cluster, v2, tmp_path, eventually
):
    second = Broker(
        BrokerConfig(
            **{
                **SMALL,
                "broker_name": "broker-b",
                "data_dir": str(tmp_path / "broker-b"),
                "namesrv_addrs": v2_cluster.namesrv.address,
            }
        )
    )
    await second.start()
    v2_cluster.brokers.append(second)
    await v2_cluster.create_topic("Routed", eventually, queues=3)
    await v2_cluster.create_topic("Ordered", eventually, order=True)

    reply = await v2.stub.QueryRoute(
        s.QueryRouteRequest(topic=d.Resource(name="Routed")), metadata=META
    )

    assert reply.status.code == d.OK
    by_broker: dict[str, list[int]] = {}
    for queue in reply.message_queues:
        by_broker.setdefault(queue.broker.name, []).append(queue.id)
        assert queue.permission == d.READ_WRITE and queue.broker.id == 0
        assert list(queue.accept_message_types) == [d.NORMAL, d.FIFO, d.DELAY, d.TRANSACTION]
        broker = next(b for b in v2_cluster.brokers if b.config.broker_name == queue.broker.name)
        address = queue.broker.endpoints.addresses[0]
        assert queue.broker.endpoints.scheme == d.IPv4
        assert f"{address.host}:{address.port}" == broker.grpc_v2.address
    assert by_broker == {"broker-a": [0, 1, 2], "broker-b": [0, 1, 2]}
    ordered = await v2.stub.QueryRoute(
        s.QueryRouteRequest(topic=d.Resource(name="Ordered")), metadata=META
    )
    assert {tuple(q.accept_message_types) for q in ordered.message_queues} == {(d.FIFO,)}


async def test_a_topic_no_broker_has_yet_is_routed_like_the_auto_create_template(v2):
    reply = await v2.stub.QueryRoute(
        s.QueryRouteRequest(topic=d.Resource(name="Brandnew")), metadata=META
    )
    assert reply.status.code == d.OK
    assert len(reply.message_queues) == SMALL["default_topic_queue_nums"]
    sent = await v2.send("Brandnew", b"first")
    assert sent.status.code == d.OK


@pytest.mark.parametrize(
    ("system", "body", "code"),
    [
        ({}, b"", d.MESSAGE_BODY_EMPTY),
        ({"user_properties": {"TAGS": "x"}}, b"x", d.ILLEGAL_MESSAGE_PROPERTY_KEY),
        ({"tag": "a|b"}, b"x", d.ILLEGAL_MESSAGE_TAG),
        ({"keys": ["two words"]}, b"x", d.ILLEGAL_MESSAGE_KEY),
        ({"message_type": d.FIFO}, b"x", d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        (
            {"delivery_timestamp": Timestamp(seconds=int(time.time()) + 30 * 86_400)},
            b"x",
            d.ILLEGAL_DELIVERY_TIME,
        ),
    ],
    ids=[
        "empty-body",
        "reserved-property",
        "tag-with-bar",
        "key-with-space",
        "fifo-without-group",
        "delivery-beyond-max",
    ],
)
async def test_a_bad_send_is_answered_with_the_v2_code_that_names_it(v2, system, body, code):
    reply = await v2.send("Checked", body, **dict(system))
    assert reply.status.code == code, reply.status.message
    assert reply.status.message


async def test_a_normal_message_to_a_fifo_topic_is_refused(v2_cluster, v2, eventually):
    await v2_cluster.create_topic("FifoOnly", eventually, order=True)
    reply = await v2.send("FifoOnly", b"x")
    assert reply.status.code == d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert (await v2.send("FifoOnly", b"x", message_group="g1")).status.code == d.OK


async def test_delivery_timestamp_in_seconds_or_in_milliseconds_means_the_same_time(v2):
    due_ms = (int(time.time()) + 1) * 1000
    for spelled in (Timestamp(seconds=due_ms // 1000), Timestamp(seconds=due_ms)):
        reply = await v2.send("Timed", b"t", delivery_timestamp=spelled)
        assert reply.status.code == d.OK, reply.status.message
    messages: list[d.Message] = []
    deadline = time.monotonic() + 10
    while len(messages) < 2 and time.monotonic() < deadline:
        messages += (await v2.receive("Timed", poll_s=2))[1]
    assert [m.system_properties.delivery_timestamp.seconds for m in messages] == [
        due_ms // 1000
    ] * 2
    assert all(m.system_properties.message_type == d.DELAY for m in messages)
    assert time.time() * 1000 >= due_ms


async def test_a_stale_handle_is_refused_after_its_invisible_time_changed(v2):
    await v2.send("Handles", b"h")
    status, (msg,) = await v2.receive("Handles", poll_s=2)
    assert status.code == d.OK
    old = msg.system_properties.receipt_handle

    changed = await v2.change("Handles", old, 30)

    assert changed.status.code == d.OK and changed.receipt_handle != old
    assert (await v2.ack("Handles", old)).code == d.INVALID_RECEIPT_HANDLE
    assert (await v2.ack("Handles", changed.receipt_handle)).code == d.OK
    assert (await v2.ack("Handles", changed.receipt_handle)).code == d.OK  # twice is fine
    assert (await v2.ack("Handles", "not a handle")).code == d.INVALID_RECEIPT_HANDLE
    refused = await v2.change("Handles", "0 99 1 broker-a", 5)
    assert refused.status.code == d.INVALID_RECEIPT_HANDLE
    assert refused.receipt_handle == "0 99 1 broker-a"  # the client adopts it regardless


async def test_an_empty_receive_waits_and_answers_message_not_found(v2):
    started = time.monotonic()
    status, messages = await v2.receive("Quiet", poll_s=1)
    assert status.code == d.MESSAGE_NOT_FOUND and messages == []
    assert time.monotonic() - started >= 0.9


async def test_a_bad_sql_filter_or_a_bad_invisible_time_is_refused(v2):
    status, _ = await v2.receive("Filters", expression="a > 1 AND (b = 2", filter_type=d.SQL)
    assert status.code == d.ILLEGAL_FILTER_EXPRESSION
    assert "line 1, column 17: expected ')'" in status.message
    status, _ = await v2.receive("Filters", invisible_s=13 * 3600)
    assert status.code == d.ILLEGAL_INVISIBLE_TIME


async def test_calls_without_a_client_id_are_told_to_send_one(v2):
    reply = await v2.stub.Heartbeat(s.HeartbeatRequest(client_type=d.PRODUCER))
    assert reply.status.code == d.CLIENT_ID_REQUIRED


async def test_a_producer_registers_under_its_topics_through_telemetry(v2_cluster, v2):
    settings = d.Settings(
        client_type=d.PRODUCER,
        publishing=d.Publishing(
            topics=[d.Resource(name="TxTopic")], max_body_size=1, validate_message_type=True
        ),
    )

    async def commands() -> AsyncIterator[s.TelemetryCommand]:
        yield s.TelemetryCommand(settings=settings)

    replies = v2.stub.Telemetry(commands(), metadata=META)
    reply = await replies.read()
    replies.cancel()

    assert reply.status.code == d.OK
    assert reply.settings.publishing.max_body_size == SMALL["max_message_size_bytes"]
    assert reply.settings.backoff_policy.max_attempts == 3
    assert reply.settings.metric.on is False
    assert v2_cluster.broker.clients.producer_ids("TxTopic") == [META[0][1]]


async def test_bytes_that_are_not_the_rpcs_message_are_refused_as_invalid(v2_cluster):
    async with grpc.aio.insecure_channel(v2_cluster.endpoints) as channel:
        raw = channel.unary_unary(
            "/apache.rocketmq.v2.MessagingService/QueryRoute",
            request_serializer=None,
            response_deserializer=None,
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await raw(b"\xff\xff\xff\xff", metadata=META)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid message" in caught.value.details()


async def test_a_sync_master_without_an_in_sync_replica_answers_ha_not_available(
    v2_cluster, tmp_path
):
    """The RocketMQ proxy's codes for a message stored but not yet as durable as the
    broker's role asks: SLAVE_NOT_AVAILABLE is HA_NOT_AVAILABLE (not a flush timeout)."""
    broker = Broker(
        BrokerConfig(
            **SMALL,
            broker_name="broker-sync",
            broker_role="SYNC_MASTER",
            ha_port=0,
            data_dir=str(tmp_path / "broker-sync"),
            namesrv_addrs=v2_cluster.namesrv.address,
        )
    )
    await broker.start()
    try:
        assert broker.grpc_v2 is not None
        async with grpc.aio.insecure_channel(broker.grpc_v2.address) as channel:
            reply = await V2(service_pb2_grpc.MessagingServiceStub(channel)).send("TopicSync")
        (entry,) = reply.entries
        assert entry.status.code == d.HA_NOT_AVAILABLE, d.Code.Name(entry.status.code)
        assert "SLAVE_NOT_AVAILABLE" in entry.status.message
    finally:
        await broker.stop(0)
