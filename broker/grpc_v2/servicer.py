"""MessagingServicer: ``apache.rocketmq.v2.MessagingService`` as thin adapters.

The only module of the broker that answers v2 RPCs. Each handler reads its
request into plain values, calls a broker service (send, POP, transactions,
routes, telemetry) and writes the reply. RocketMQ 5 puts the outcome in the
reply's ``Status`` (gRPC itself answers OK): a refusal becomes the status
:func:`~.convert.status_of` gives it, a bug ``INTERNAL_SERVER_ERROR`` with the
traceback in the log, never a dead stream.

Every handler gets its :class:`~.auth.Caller` (authenticated first) and asks
it about each topic and group the request names or touches before acting:
all the topics of a send before anything is stored, the stored half
message's real topic of an ``EndTransaction``, the group and topic a receipt
handle is looked up under. ``Heartbeat``, ``NotifyClientTermination`` and
``Telemetry`` also check that the client id is the caller's own.

With the broker's ``trace_topic_enable``, sends, deliveries, acks, nacks
(``ChangeInvisibleDuration``) and dead-letter forwards are traced for the
client (:mod:`.client_trace`), as RocketMQ 5's proxy does.

The official clients' quirks handled here (as rocketmq-python-client 5.1.2, the
client tests/compat drives, behaves):
a ``ReceiveMessage`` stream answers ``status`` (OK, or MESSAGE_NOT_FOUND when
empty), the messages, then a ``delivery_timestamp`` frame, and closes a second
before the client's deadline; ``ChangeInvisibleDuration`` always answers a
handle (the client adopts it before reading the status); the client id comes
from the ``x-mq-client-id`` header.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator

import grpc

from pocketmq.broker.errors import BrokerError, NoPermissionError
from pocketmq.broker.grpc_v2.auth import Authenticator, Caller
from pocketmq.broker.grpc_v2.client_trace import Settling, TracedClient, V2ClientTrace
from pocketmq.broker.grpc_v2.convert import (
    V2Error,
    accepted_types,
    duration_ms,
    encode_message,
    message_pb,
    message_type_of,
    status,
    status_of,
    timestamp_pb,
)
from pocketmq.broker.grpc_v2.pop_processor import Delivery, PopMessageProcessor, ReceiveRequest
from pocketmq.broker.grpc_v2.route import RouteResolver
from pocketmq.broker.grpc_v2.rpc_support import (
    _PERMISSIONS,
    _RESOLUTIONS,
    CLIENT_ID_HEADER,
    DEADLINE_MARGIN_S,
    DEFAULT_INVISIBLE_MS,
    DEFAULT_POLL_MS,
    MAX_POLL_MS,
    MIN_INVISIBLE_MS,
    _check,
    _invisible_ms,
    _not_served,
    _overall,
    _queue,
    _unary,
)
from pocketmq.broker.grpc_v2.telemetry import PROPERTY_REAL_TOPIC, TelemetryService
from pocketmq.broker.send_processor import SendMessageProcessor, SendStatus
from pocketmq.broker.topic_config import AUTO_CREATE_TOPIC_KEY_TOPIC, Perm, TopicConfigManager
from pocketmq.broker.transaction import EndTransactionRequest, TransactionResolver
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.filter import SQL92, TAG
from pocketmq.common.hashing import java_string_hash
from pocketmq.common.msgid import decode_offset_msg_id, encode_offset_msg_id
from pocketmq.rmqv2 import definition_pb2 as d
from pocketmq.rmqv2 import service_pb2 as s
from pocketmq.rmqv2 import service_pb2_grpc
from pocketmq.security.interceptor import peer_ip

__all__ = ["Authenticator", "MessagingServicer"]

log = logging.getLogger(__name__)

#: How long a refused Telemetry stream waits for the client's opening command.
REFUSAL_WAIT_S = 1.0


#: a SendStatus other than SEND_OK as a v2 status: the message is stored on this broker,
#: not yet durable as its role asks (the RocketMQ proxy's mapping)
_NOT_DURABLE = {
    SendStatus.FLUSH_DISK_TIMEOUT: (
        d.MASTER_PERSISTENCE_TIMEOUT,
        "stored, but not on disk within sync_flush_timeout_ms (FLUSH_DISK_TIMEOUT)",
    ),
    SendStatus.FLUSH_SLAVE_TIMEOUT: (
        d.SLAVE_PERSISTENCE_TIMEOUT,
        "stored on the master, but its in-sync replicas did not acknowledge it within "
        "slave_timeout_ms (FLUSH_SLAVE_TIMEOUT)",
    ),
    SendStatus.SLAVE_NOT_AVAILABLE: (
        d.HA_NOT_AVAILABLE,
        "stored on the master, but fewer replicas than min_sync_replicas are in sync "
        "(SLAVE_NOT_AVAILABLE)",
    ),
}


class MessagingServicer(service_pb2_grpc.MessagingServiceServicer):
    def __init__(
        self,
        *,
        send: SendMessageProcessor,
        pop: PopMessageProcessor,
        routes: RouteResolver,
        telemetry: TelemetryService,
        transactions: TransactionResolver,
        topics: TopicConfigManager,
        store_host: tuple[str, int],
        max_body_bytes: int,
        max_batch: int,
        authenticate: Authenticator | None = None,
        clock: Clock | None = None,
        trace: V2ClientTrace | None = None,
    ) -> None:
        self._send = send
        self._trace = trace  # trace_topic_enable: client_trace.py
        self._pop = pop
        self._routes = routes
        self._telemetry = telemetry
        self._transactions = transactions
        self._topics = topics
        self._max_body = max_body_bytes
        self._max_batch = max_batch
        self._auth = authenticate
        self._clock = clock or SystemClock()
        self._round_robin = itertools.count()
        self._store_host = store_host

    def _caller(self, context: grpc.aio.ServicerContext, method: str) -> Caller:
        """Who calls (V2Error UNAUTHORIZED when the signature does not hold)."""
        if self._auth is None:
            return Caller("", method)
        return Caller(self._auth.authenticate(context), method, self._auth)

    @staticmethod
    def _client_id_or_none(context: grpc.aio.ServicerContext) -> str | None:
        for key, value in context.invocation_metadata() or ():
            if key == CLIENT_ID_HEADER:
                return str(value)
        return None

    @classmethod
    def _traced(cls, context: grpc.aio.ServicerContext) -> TracedClient:
        """The caller as its trace records name it."""
        return TracedClient(cls._client_id_or_none(context) or "", peer_ip(context.peer() or ""))

    @classmethod
    def _client_id(cls, context: grpc.aio.ServicerContext) -> str:
        if (client_id := cls._client_id_or_none(context)) is not None:
            return client_id
        raise V2Error(
            d.CLIENT_ID_REQUIRED,
            f"the {CLIENT_ID_HEADER} header is missing; RocketMQ 5 clients send it on every call",
        )

    # -- routes -------------------------------------------------------------------------
    @_unary(s.QueryRouteResponse)
    async def QueryRoute(
        self, request: s.QueryRouteRequest, context: grpc.aio.ServicerContext, caller: Caller
    ) -> s.QueryRouteResponse:
        try:
            return await self._query_route(request.topic.name, caller)
        finally:
            # answered (a refusal too): settings sent before now are sent again
            client_id = self._client_id_or_none(context)
            if client_id is not None:
                self._telemetry.route_answered(client_id, caller.access_key)

    async def _query_route(self, topic: str, caller: Caller) -> s.QueryRouteResponse:
        _check(topic=topic)
        caller.read(topic)  # a route is for sending or consuming: no system topic
        queues = []
        for route in await self._routes.route(topic):
            readable, writable = bool(route.perm & Perm.READ), bool(route.perm & Perm.WRITE)
            for queue_id in range(max(route.read_queue_nums, route.write_queue_nums)):
                permission = _PERMISSIONS[
                    (
                        readable and queue_id < route.read_queue_nums,
                        writable and queue_id < route.write_queue_nums,
                    )
                ]
                queues.append(_queue(topic, queue_id, permission, route))
        return s.QueryRouteResponse(status=status(), message_queues=queues)

    @_unary(s.QueryAssignmentResponse)
    async def QueryAssignment(
        self,
        request: s.QueryAssignmentRequest,
        context: grpc.aio.ServicerContext,
        caller: Caller,
    ) -> s.QueryAssignmentResponse:
        topic = request.topic.name
        _check(topic=topic, group=request.group.name)
        caller.read(topic, request.group.name)
        # Every consumer pops from every readable broker (queue id -1: any of its queues).
        assignments = [
            d.Assignment(message_queue=_queue(topic, -1, d.READ_WRITE, route))
            for route in await self._routes.route(topic)
            if route.perm & Perm.READ and route.read_queue_nums > 0
        ]
        return s.QueryAssignmentResponse(status=status(), assignments=assignments)

    # -- clients ------------------------------------------------------------------------
    @_unary(s.HeartbeatResponse)
    async def Heartbeat(
        self, request: s.HeartbeatRequest, context: grpc.aio.ServicerContext, caller: Caller
    ) -> s.HeartbeatResponse:
        client_id, group = self._client_id(context), request.group.name
        if group:
            _check(group=group)
            caller.need(group=group)
        self._telemetry.bind(client_id, caller.access_key)
        self._telemetry.heartbeat(client_id, request.client_type, group)
        return s.HeartbeatResponse(status=status())

    @_unary(s.NotifyClientTerminationResponse)
    async def NotifyClientTermination(
        self,
        request: s.NotifyClientTerminationRequest,
        context: grpc.aio.ServicerContext,
        caller: Caller,
    ) -> s.NotifyClientTerminationResponse:
        client_id = self._client_id(context)
        if request.group.name:
            _check(group=request.group.name)
            caller.need(group=request.group.name)
        self._telemetry.check_owner(client_id, caller.access_key)
        self._telemetry.terminate(client_id)
        return s.NotifyClientTerminationResponse(status=status())

    async def Telemetry(
        self, request_iterator: AsyncIterator[s.TelemetryCommand], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[s.TelemetryCommand]:
        try:
            caller = self._caller(context, "Telemetry")
            client_id = self._client_id(context)
            self._telemetry.bind(client_id, caller.access_key)
        except (V2Error, BrokerError) as exc:
            # A client opens the stream by writing its settings. Answered before that
            # write is in, the refusal ends the call under it and the client sees a
            # broken write instead of this status; a client that writes nothing is
            # answered after REFUSAL_WAIT_S all the same.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(REFUSAL_WAIT_S):
                    await anext(aiter(request_iterator), None)
            yield s.TelemetryCommand(status=status_of(exc))
            return
        async for command in self._telemetry.stream(client_id, request_iterator, caller):
            yield command

    # -- sending ------------------------------------------------------------------------
    @_unary(s.SendMessageResponse)
    async def SendMessage(
        self, request: s.SendMessageRequest, context: grpc.aio.ServicerContext, caller: Caller
    ) -> s.SendMessageResponse:
        if not request.messages:
            raise V2Error(d.BAD_REQUEST, "SendMessageRequest carries no message")
        client_id = self._client_id(context)
        # Every topic before anything is stored: one refused topic refuses the request.
        for topic in dict.fromkeys(msg.topic.name for msg in request.messages):
            caller.write(topic)
        if any(message_type_of(msg) == d.TRANSACTION for msg in request.messages):
            self._telemetry.check_owner(client_id, caller.access_key)
        traced = self._traced(context) if self._trace is not None else None
        entries = [await self._send_one(msg, client_id, caller, traced) for msg in request.messages]
        return s.SendMessageResponse(status=_overall([e.status for e in entries]), entries=entries)

    async def _send_one(
        self, msg: d.Message, client_id: str, caller: Caller, traced: TracedClient | None
    ) -> s.SendResultEntry:
        topic, started = msg.topic.name, time.perf_counter()
        try:
            _check(topic=topic)
            config = self._topics.get(topic) or self._topics.get(AUTO_CREATE_TOPIC_KEY_TOPIC)
            order = config is not None and config.order and config.topic_name == topic
            record, kind = encode_message(
                msg,
                queue_id=self._queue_for(msg),
                max_body_bytes=self._max_body,
                accepted=accepted_types(order),
            )
            transactional = kind == d.TRANSACTION
            outcome = await self._send.send(
                record, single=True, producer_group=topic if transactional else ""
            )
        except (V2Error, BrokerError) as exc:
            refusal = status_of(exc)
            if self._trace is not None and traced is not None:
                failure = f"{d.Code.Name(refusal.code)}: {refusal.message}"
                self._trace.sent(msg, traced, started=started, outcome=None, failure=failure)
            return s.SendResultEntry(status=refusal, message_id=msg.system_properties.message_id)
        if self._trace is not None and traced is not None:
            self._trace.sent(msg, traced, started=started, outcome=outcome)
        entry = s.SendResultEntry(
            status=status(*_NOT_DURABLE[outcome.status])
            if outcome.status in _NOT_DURABLE
            else status(),
            message_id=msg.system_properties.message_id,
            offset=outcome.queue_offsets[0],
        )
        if transactional:
            entry.transaction_id = outcome.offset_msg_ids[0]
            self._telemetry.note_publisher(client_id, topic, caller.access_key)
        return entry

    def _queue_for(self, msg: d.Message) -> int:
        """A message group's queue is fixed by its hash; others go round-robin."""
        config = self._topics.get(msg.topic.name) or self._topics.get(AUTO_CREATE_TOPIC_KEY_TOPIC)
        queues = config.write_queue_nums if config is not None else 1
        if queues <= 0:
            return 0
        group = msg.system_properties.message_group
        if group:
            return abs(java_string_hash(group)) % queues
        return next(self._round_robin) % queues

    @_unary(s.EndTransactionResponse)
    async def EndTransaction(
        self, request: s.EndTransactionRequest, context: grpc.aio.ServicerContext, caller: Caller
    ) -> s.EndTransactionResponse:
        topic = request.topic.name  # the v2 API's producer group: the topic
        _check(topic=topic)
        caller.write(topic)
        resolution = _RESOLUTIONS.get(request.resolution)
        if resolution is None:
            raise V2Error(
                d.BAD_REQUEST,
                f"resolution is {request.resolution}; a transaction "
                "ends with COMMIT (1) or ROLLBACK (2)",
            )
        try:
            phys_offset = decode_offset_msg_id(request.transaction_id).phys_offset
        except ValueError:
            raise V2Error(
                d.INVALID_TRANSACTION_ID,
                f"transaction id {request.transaction_id[:64]!r} is not one this "
                "broker gave; pass the transaction_id of the send's result",
            ) from None
        self._authorize_half(caller, topic, phys_offset)
        await self._transactions.end_transaction(
            EndTransactionRequest(
                producer_group=topic,
                commit_log_offset=phys_offset,
                resolution=resolution,
                msg_id=request.message_id,
                from_transaction_check=request.source == d.SOURCE_SERVER_CHECK,
            )
        )
        return s.EndTransactionResponse(status=status())

    def _authorize_half(self, caller: Caller, topic: str, phys_offset: int) -> None:
        """PUB on the topic the half message at *phys_offset* will be committed to."""
        half = self._transactions.half_message(phys_offset) if phys_offset >= 0 else None
        if half is None:
            return  # end_transaction says what is wrong with the offset
        real_topic = half.properties.get(PROPERTY_REAL_TOPIC, "")
        try:
            caller.write(real_topic)
        except NoPermissionError:
            # Name the half's topic only to one who named it.
            shown = repr(real_topic) if real_topic == topic else "its topic"
            raise NoPermissionError(
                f"access key {caller.access_key!r} may not end the transaction of this half "
                f"message: it has no PUB permission on {shown}"
            ) from None

    # -- consuming ----------------------------------------------------------------------
    async def ReceiveMessage(
        self,
        request: s.ReceiveMessageRequest,
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[s.ReceiveMessageResponse]:
        try:
            caller = self._caller(context, "ReceiveMessage")
            receive = self._receive_request(request, context)
            caller.read(receive.topic, receive.group)
            deliveries = await self._pop.receive(receive)
        except (V2Error, BrokerError) as exc:
            yield s.ReceiveMessageResponse(status=status_of(exc))
            return
        except Exception as exc:
            log.exception("v2 ReceiveMessage failed on an unexpected error")
            yield s.ReceiveMessageResponse(status=status_of(exc))
            return
        if not deliveries:
            yield s.ReceiveMessageResponse(
                status=status(d.MESSAGE_NOT_FOUND, "no new message for now")
            )
            return
        if self._trace is not None:
            self._trace.received(deliveries, receive.group, self._traced(context))
        yield s.ReceiveMessageResponse(status=status())
        for delivery in deliveries:
            yield s.ReceiveMessageResponse(message=self._message(delivery))
        yield s.ReceiveMessageResponse(delivery_timestamp=timestamp_pb(self._clock.now_ms()))

    def _receive_request(
        self, request: s.ReceiveMessageRequest, context: grpc.aio.ServicerContext
    ) -> ReceiveRequest:
        topic, group = request.message_queue.topic.name, request.group.name
        _check(topic=topic, group=group)
        expression = request.filter_expression
        expression_type = SQL92 if expression.type == d.SQL else TAG
        invisible_ms = DEFAULT_INVISIBLE_MS
        if request.HasField("invisible_duration"):
            invisible_ms = _invisible_ms(request.invisible_duration, floor_ms=MIN_INVISIBLE_MS)
        poll_ms = (
            duration_ms(request.long_polling_timeout)
            if request.HasField("long_polling_timeout")
            else DEFAULT_POLL_MS
        )
        if poll_ms < 0:
            raise V2Error(d.ILLEGAL_POLLING_TIME, f"long polling timeout is {poll_ms} ms")
        remaining_s = context.time_remaining()
        if remaining_s is not None:
            poll_ms = min(poll_ms, int((remaining_s - DEADLINE_MARGIN_S) * 1000))
        batch = request.batch_size if request.batch_size > 0 else self._max_batch
        return ReceiveRequest(
            group=group,
            topic=topic,
            expression=expression.expression,
            expression_type=expression_type,
            batch_size=min(batch, self._max_batch),
            invisible_ms=invisible_ms,
            poll_ms=max(0, min(poll_ms, MAX_POLL_MS)),
        )

    def _message(self, delivery: Delivery) -> d.Message:
        msg = delivery.message
        message_id = msg.uniq_key or encode_offset_msg_id(*self._store_host, msg.phys_offset)
        return message_pb(
            msg,
            receipt_handle=delivery.receipt_handle,
            attempt=delivery.attempt,
            invisible_ms=delivery.invisible_ms,
            message_id=message_id,
        )

    # A receipt handle names a message of the request's group and topic (PopMessageProcessor finds
    # it under that pair only), so authorizing the pair authorizes the message.
    @_unary(s.AckMessageResponse)
    async def AckMessage(
        self, request: s.AckMessageRequest, context: grpc.aio.ServicerContext, caller: Caller
    ) -> s.AckMessageResponse:
        topic, group = request.topic.name, request.group.name
        _check(topic=topic, group=group)
        caller.read(topic, group)
        if not request.entries:
            raise V2Error(d.BAD_REQUEST, "AckMessageRequest carries no entry")
        results = []
        for entry in request.entries:
            try:
                settling = self._settling(group, topic, entry.receipt_handle)
                await self._pop.ack(group=group, topic=topic, receipt_handle=entry.receipt_handle)
                self._settled(settling, "success", context)
                outcome = status()
            except (V2Error, BrokerError) as exc:
                outcome = status_of(exc)
            results.append(
                s.AckMessageResultEntry(
                    message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=outcome
                )
            )
        return s.AckMessageResponse(status=_overall([r.status for r in results]), entries=results)

    async def ChangeInvisibleDuration(
        self,
        request: s.ChangeInvisibleDurationRequest,
        context: grpc.aio.ServicerContext,
    ) -> s.ChangeInvisibleDurationResponse:
        # Answered with a handle even when refused: the client adopts it unconditionally.
        reply = await self._change_invisible(request, context)
        if not reply.receipt_handle:
            reply.receipt_handle = request.receipt_handle
        return reply

    @_unary(s.ChangeInvisibleDurationResponse, "ChangeInvisibleDuration")
    async def _change_invisible(
        self,
        request: s.ChangeInvisibleDurationRequest,
        context: grpc.aio.ServicerContext,
        caller: Caller,
    ) -> s.ChangeInvisibleDurationResponse:
        topic, group = request.topic.name, request.group.name
        _check(topic=topic, group=group)
        caller.read(topic, group)
        settling = self._settling(group, topic, request.receipt_handle)
        handle = await self._pop.change_invisible_duration(
            group=group,
            topic=topic,
            receipt_handle=request.receipt_handle,
            invisible_ms=_invisible_ms(request.invisible_duration, floor_ms=0),
        )
        self._settled(settling, "retry_later", context)
        return s.ChangeInvisibleDurationResponse(status=status(), receipt_handle=handle)

    @_unary(s.ForwardMessageToDeadLetterQueueResponse)
    async def ForwardMessageToDeadLetterQueue(
        self,
        request: s.ForwardMessageToDeadLetterQueueRequest,
        context: grpc.aio.ServicerContext,
        caller: Caller,
    ) -> s.ForwardMessageToDeadLetterQueueResponse:
        topic, group = request.topic.name, request.group.name
        _check(topic=topic, group=group)
        caller.read(topic, group)
        settling = self._settling(group, topic, request.receipt_handle)
        await self._pop.forward_to_dead_letter_queue(
            group=group, topic=topic, receipt_handle=request.receipt_handle
        )
        self._settled(settling, "dlq", context)
        return s.ForwardMessageToDeadLetterQueueResponse(status=status())

    # A delivery is looked up before it is settled (after, an ack has forgotten its attempt).
    def _settling(self, group: str, topic: str, receipt_handle: str) -> Settling | None:
        if self._trace is None:
            return None
        found = self._pop.delivered(group=group, topic=topic, receipt_handle=receipt_handle)
        return None if found is None else Settling(group, *found)

    def _settled(
        self, settling: Settling | None, outcome: str, context: grpc.aio.ServicerContext
    ) -> None:
        if self._trace is not None and settling is not None:
            self._trace.settled(settling, outcome, self._traced(context))

    # -- not served: refused after the same checks as a served call ---------------------
    @_unary(s.RecallMessageResponse)
    async def RecallMessage(
        self, request: s.RecallMessageRequest, context: grpc.aio.ServicerContext, caller: Caller
    ) -> s.RecallMessageResponse:
        caller.write(request.topic.name)
        raise V2Error(d.NOT_IMPLEMENTED, "PocketMQ does not recall messages")

    @_unary(s.UpdateOffsetResponse)
    async def UpdateOffset(
        self, request: s.UpdateOffsetRequest, context: grpc.aio.ServicerContext, caller: Caller
    ) -> s.UpdateOffsetResponse:
        caller.read(request.message_queue.topic.name, request.group.name)
        raise _not_served("UpdateOffset")

    @_unary(s.GetOffsetResponse)
    async def GetOffset(
        self, request: s.GetOffsetRequest, context: grpc.aio.ServicerContext, caller: Caller
    ) -> s.GetOffsetResponse:
        caller.read(request.message_queue.topic.name, request.group.name)
        raise _not_served("GetOffset")

    @_unary(s.QueryOffsetResponse)
    async def QueryOffset(
        self, request: s.QueryOffsetRequest, context: grpc.aio.ServicerContext, caller: Caller
    ) -> s.QueryOffsetResponse:
        caller.read(request.message_queue.topic.name)
        raise _not_served("QueryOffset")

    @_unary(s.SyncLiteSubscriptionResponse)
    async def SyncLiteSubscription(
        self,
        request: s.SyncLiteSubscriptionRequest,
        context: grpc.aio.ServicerContext,
        caller: Caller,
    ) -> s.SyncLiteSubscriptionResponse:
        caller.read(request.topic.name, request.group.name)
        raise V2Error(d.NOT_IMPLEMENTED, "PocketMQ has no lite topics")

    async def PullMessage(
        self,
        request: s.PullMessageRequest,
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[s.PullMessageResponse]:
        try:
            caller = self._caller(context, "PullMessage")
            caller.read(request.message_queue.topic.name, request.group.name)
            raise _not_served("PullMessage")
        except (V2Error, BrokerError) as exc:
            yield s.PullMessageResponse(status=status_of(exc))


def add_to_server(servicer: MessagingServicer, server: grpc.aio.Server) -> None:
    service_pb2_grpc.add_MessagingServiceServicer_to_server(servicer, server)
