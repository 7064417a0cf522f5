"""V2ClientTrace: message trace for RocketMQ 5 clients, written by the broker for them.

The official RocketMQ 5 clients trace nothing themselves; RocketMQ 5's proxy
records what they do. With ``trace_topic_enable`` the v2 endpoint does the same,
in the format traced PocketMQ clients write (:mod:`pocketmq.common.trace`), into
the broker's trace queue (:class:`~pocketmq.broker.trace.BrokerTraceService`)::

    SendMessage                  Pub        per message: its id, where stored and the
                                            status (SEND_OK, or FAILED: the refusal)
    ReceiveMessage               SubBefore  per message delivered: group, attempt
                                            (retry_times = attempt - 1), queue, offset
    AckMessage                   SubAfter   status success
    ChangeInvisibleDuration      SubAfter   status retry_later (how a push consumer
                                            nacks; a later ack of the same delivery
                                            gives another SubAfter: success)
    ForwardMessageToDeadLetter   SubAfter   status dlq

Each record has ``source`` ``proxy``, the client's id (``x-mq-client-id``) and
host. A SubBefore and its SubAfter share ``request_id`` (made from the group,
queue, offset and attempt); the SubAfter's ``cost_ms`` is the time since that
delivery while this broker remembers it (the last ``MAX_REMEMBERED`` deliveries),
a Pub's the broker's part of the send. Messages of the trace topic itself are not
traced. The hooks only queue records; nothing here waits on the store.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import NamedTuple

from pocketmq.broker.grpc_v2.convert import message_type_of, timestamp_ms
from pocketmq.broker.grpc_v2.pop_model import Delivery
from pocketmq.broker.send_processor import SendOutcome
from pocketmq.broker.trace import BrokerTraceService
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.message import StoredMessage
from pocketmq.common.trace import TraceType
from pocketmq.common.validation import check_topic
from pocketmq.rmqv2 import definition_pb2 as d

__all__ = ["MAX_REMEMBERED", "Settling", "TracedClient", "V2ClientTrace"]

MAX_REMEMBERED = 65_536  # deliveries whose time is kept for their SubAfter's cost
MAX_FIELD_CHARS = 256  # of an id, tag or key a Pub record repeats
MAX_KEYS = 32  # keys a Pub record repeats

_MSG_TYPES = {d.NORMAL: "Normal", d.FIFO: "FIFO", d.DELAY: "Delay", d.TRANSACTION: "Trans_Half"}


class TracedClient(NamedTuple):
    """Who called: the client id its header gives, and its IP."""

    client_id: str
    host: str


class Settling(NamedTuple):
    """A delivered message about to be acked, nacked or dead-lettered (looked up first)."""

    group: str
    message: StoredMessage
    attempt: int


class V2ClientTrace:
    """Turns the v2 endpoint's sends and POP consumption into trace records."""

    def __init__(
        self,
        trace: BrokerTraceService,
        *,
        clock: Clock | None = None,
        max_remembered: int = MAX_REMEMBERED,
    ) -> None:
        self._trace = trace
        self._clock = clock or SystemClock()
        self._max_remembered = max_remembered
        self._delivered_ms: OrderedDict[str, int] = OrderedDict()  # request id -> when

    def sent(
        self,
        msg: d.Message,
        client: TracedClient,
        *,
        started: float,
        outcome: SendOutcome | None,
        failure: str = "",
    ) -> None:
        """*msg* was stored as *outcome* says, or refused (*failure*: why); *started*
        is ``time.perf_counter()`` when the broker began storing it."""
        topic = msg.topic.name
        if topic == self._trace.topic or check_topic(topic):
            return  # a name refused as such is not traced under it
        sp = msg.system_properties
        born_ms = timestamp_ms(sp.born_timestamp) if sp.HasField("born_timestamp") else 0
        now_ms = self._clock.now_ms()
        fields: dict[str, object] = {}
        if outcome is not None:
            fields = {
                "offset_msg_id": outcome.offset_msg_ids[0],
                "queue_id": outcome.queue_ids[0],
                "queue_offset": outcome.queue_offsets[0],
                "store_time": outcome.store_timestamp_ms,
                "status": outcome.status.value,
            }
        self._trace.add_for_client(
            TraceType.PUB,
            born_ms or now_ms,
            # what a refused message says is bounded here (a stored one's already is)
            msg_id=sp.message_id[:MAX_FIELD_CHARS],
            topic=topic,
            tags=sp.tag[:MAX_FIELD_CHARS] if sp.HasField("tag") else "",
            keys=[k[:MAX_FIELD_CHARS] for k in sp.keys[:MAX_KEYS] if k],
            client_id=client.client_id,
            client_host=client.host,
            born_time=born_ms,
            cost_ms=round((time.perf_counter() - started) * 1000, 3),
            body_bytes=len(msg.body),
            msg_type=_MSG_TYPES.get(message_type_of(msg), "Normal"),
            **(fields or {"status": f"FAILED: {failure}"[:500]}),
        )

    def received(self, deliveries: Sequence[Delivery], group: str, client: TracedClient) -> None:
        """A ReceiveMessage handed *deliveries* to *client* of *group*."""
        now_ms = self._clock.now_ms()
        for delivery in deliveries:
            msg = delivery.message
            if msg.topic == self._trace.topic:
                continue
            request_id = _request_id(group, msg, delivery.attempt)
            self._remember(request_id, now_ms)
            self._trace.add_for_client(
                TraceType.SUB_BEFORE,
                now_ms,
                request_id=request_id,
                group=group,
                client_id=client.client_id,
                client_host=client.host,
                retry_times=delivery.attempt - 1,
                queue_id=msg.queue_id,
                queue_offset=msg.queue_offset,
                store_time=msg.store_timestamp_ms,
                born_time=msg.born_timestamp_ms,
                body_bytes=len(msg.body),
                **self._message_fields(msg),
            )

    def settled(self, settling: Settling | None, status: str, client: TracedClient) -> None:
        """The delivery *settling* looked up ended with *status* (success, retry_later,
        dlq); None (an unknown or outdated handle) records nothing."""
        if settling is None or settling.message.topic == self._trace.topic:
            return
        msg = settling.message
        now_ms = self._clock.now_ms()
        request_id = _request_id(settling.group, msg, settling.attempt)
        delivered_ms = self._delivered_ms.get(request_id)
        self._trace.add_for_client(
            TraceType.SUB_AFTER,
            now_ms,
            request_id=request_id,
            group=settling.group,
            client_id=client.client_id,
            client_host=client.host,
            retry_times=settling.attempt - 1,
            cost_ms=float(now_ms - delivered_ms) if delivered_ms is not None else 0.0,
            status=status,
            **self._message_fields(msg),
        )

    def _message_fields(self, msg: StoredMessage) -> dict[str, object]:
        return {
            "msg_id": msg.uniq_key,
            "offset_msg_id": self._trace.offset_msg_id(msg.phys_offset),
            "topic": msg.topic,
            "tags": msg.tags,
            "keys": msg.keys,
        }

    def _remember(self, request_id: str, now_ms: int) -> None:
        self._delivered_ms[request_id] = now_ms
        self._delivered_ms.move_to_end(request_id)
        while len(self._delivered_ms) > self._max_remembered:
            self._delivered_ms.popitem(last=False)


def _request_id(group: str, msg: StoredMessage, attempt: int) -> str:
    """The id a delivery's SubBefore and SubAfter share: one per group, message and attempt."""
    text = f"{group}\0{msg.topic}\0{msg.queue_id}\0{msg.queue_offset}\0{attempt}"
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
