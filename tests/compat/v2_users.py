"""Signed raw v2 calls as one ACL user: what an official client sends, or a hostile one.

``V2User(channel, "outsider", "secret-key")`` signs every call the way
RocketMQ 5 clients do (``authorization`` MQv2-HMAC-SHA1 over
``x-mq-date-time``, in UTC) and names its ``x-mq-client-id``. Each helper
returns the reply's v2 ``Status`` (and what else the test needs), never
raises on a refusal.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration

from pocketmq.broker.grpc_v2.auth import sign
from pocketmq.rmqv2 import definition_pb2 as d
from pocketmq.rmqv2 import service_pb2 as s
from pocketmq.rmqv2 import service_pb2_grpc

_serial = itertools.count(1)


def R(name: str) -> d.Resource:
    return d.Resource(name=name)


def signed(
    access_key: str, secret_key: str, client_id: str, *, at_s: float | None = None
) -> tuple[tuple[str, str], ...]:
    """Headers of a call signed at *at_s* (now when None), as the official client sends."""
    date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if at_s is None else at_s))
    return (
        ("x-mq-client-id", client_id),
        ("x-mq-date-time", date),
        (
            "authorization",
            f"MQv2-HMAC-SHA1 Credential={access_key}, "
            f"SignedHeaders=x-mq-date-time, "
            f"Signature={sign(secret_key, date)}",
        ),
    )


def message(topic: str, *, transactional: bool = False, body: bytes = b"x") -> d.Message:
    sp = d.SystemProperties(
        message_id=f"ID{next(_serial):030d}",
        body_encoding=d.IDENTITY,
        message_type=d.TRANSACTION if transactional else d.NORMAL,
    )
    return d.Message(topic=R(topic), body=body, system_properties=sp)


class V2User:
    """One user of one broker's v2 port over raw stubs."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        access_key: str,
        secret_key: str,
        client_id: str | None = None,
    ) -> None:
        self.stub = service_pb2_grpc.MessagingServiceStub(channel)
        self.access_key, self.secret_key = access_key, secret_key
        self.client_id = client_id or f"{access_key}-host@1@0@{next(_serial)}"

    def meta(
        self, client_id: str | None = None, at_s: float | None = None
    ) -> tuple[tuple[str, str], ...]:
        return signed(self.access_key, self.secret_key, client_id or self.client_id, at_s=at_s)

    async def send(
        self, *topics: str, transactional: bool = False, **kw: Any
    ) -> s.SendMessageResponse:
        request = s.SendMessageRequest(
            messages=[message(t, transactional=transactional) for t in topics]
        )
        return await self.stub.SendMessage(request, metadata=self.meta(**kw), timeout=10)

    async def receive(
        self, topic: str, group: str, *, invisible_s: int = 30, **kw: Any
    ) -> tuple[d.Status, list[d.Message]]:
        request = s.ReceiveMessageRequest(
            group=R(group),
            message_queue=d.MessageQueue(topic=R(topic), id=-1),
            filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
            batch_size=1,
            invisible_duration=Duration(seconds=invisible_s),
            long_polling_timeout=Duration(seconds=0),
        )
        status, messages = None, []
        async for frame in self.stub.ReceiveMessage(request, metadata=self.meta(**kw), timeout=10):
            if frame.HasField("status"):
                status = frame.status
            elif frame.HasField("message"):
                messages.append(frame.message)
        assert status is not None, "a ReceiveMessage stream without a status"
        return status, messages

    async def ack(self, topic: str, group: str, handle: str, **kw: Any) -> d.Status:
        reply = await self.stub.AckMessage(
            s.AckMessageRequest(
                group=R(group),
                topic=R(topic),
                entries=[s.AckMessageEntry(message_id="m", receipt_handle=handle)],
            ),
            metadata=self.meta(**kw),
            timeout=10,
        )
        return reply.status

    async def change(
        self, topic: str, group: str, handle: str, seconds: int = 30, **kw: Any
    ) -> d.Status:
        reply = await self.stub.ChangeInvisibleDuration(
            s.ChangeInvisibleDurationRequest(
                group=R(group),
                topic=R(topic),
                receipt_handle=handle,
                message_id="m",
                invisible_duration=Duration(seconds=seconds),
            ),
            metadata=self.meta(**kw),
            timeout=10,
        )
        return reply.status

    async def end(
        self, topic: str, transaction_id: str, resolution: int = d.COMMIT, **kw: Any
    ) -> d.Status:
        reply = await self.stub.EndTransaction(
            s.EndTransactionRequest(
                topic=R(topic),
                message_id="",
                transaction_id=transaction_id,
                resolution=resolution,
                source=d.SOURCE_CLIENT,
            ),
            metadata=self.meta(**kw),
            timeout=10,
        )
        return reply.status

    async def heartbeat(self, group: str = "", **kw: Any) -> d.Status:
        reply = await self.stub.Heartbeat(
            s.HeartbeatRequest(
                group=R(group) if group else None,
                client_type=d.SIMPLE_CONSUMER if group else d.PRODUCER,
            ),
            metadata=self.meta(**kw),
            timeout=10,
        )
        return reply.status

    async def terminate(self, group: str = "", **kw: Any) -> d.Status:
        reply = await self.stub.NotifyClientTermination(
            s.NotifyClientTerminationRequest(group=R(group) if group else None),
            metadata=self.meta(**kw),
            timeout=10,
        )
        return reply.status

    def telemetry(self, **kw: Any) -> TelemetryStream:
        return TelemetryStream(self, **kw)


def producer_settings(*topics: str) -> s.TelemetryCommand:
    return s.TelemetryCommand(
        settings=d.Settings(
            client_type=d.PRODUCER, publishing=d.Publishing(topics=[R(t) for t in topics])
        )
    )


def consumer_settings(group: str, *topics: str) -> s.TelemetryCommand:
    return s.TelemetryCommand(
        settings=d.Settings(
            client_type=d.SIMPLE_CONSUMER,
            subscription=d.Subscription(
                group=R(group),
                subscriptions=[
                    d.SubscriptionEntry(
                        topic=R(t), expression=d.FilterExpression(type=d.TAG, expression="*")
                    )
                    for t in topics
                ],
            ),
        )
    )


class TelemetryStream:
    """``async with user.telemetry() as t: await t.write(...); await t.read()``."""

    def __init__(self, user: V2User, **kw: Any) -> None:
        self._user, self._kw = user, kw
        self._call: Any = None

    async def __aenter__(self) -> TelemetryStream:
        self._call = self._user.stub.Telemetry(metadata=self._user.meta(**self._kw))
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._call.cancel()

    async def write(self, command: s.TelemetryCommand) -> None:
        await self._call.write(command)

    async def read(self) -> s.TelemetryCommand | None:
        """The next command from the broker; None when the stream ended."""
        reply = await self._call.read()
        return None if reply is grpc.aio.EOF else reply

    async def commands(self) -> AsyncIterator[s.TelemetryCommand]:
        while (reply := await self.read()) is not None:
            yield reply
