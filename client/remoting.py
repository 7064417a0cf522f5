"""The client's only contact with gRPC and protobuf.

:class:`Remoting` owns one channel per server address and hands out
:class:`NameserverClient` and :class:`BrokerClient`, whose typed methods take
and return plain values. A failed call becomes a
:class:`~pocketmq.client.errors.RemoteError` subclass chosen by
:data:`STATUS_ERRORS`, naming the server, the RPC and what the server said
(the broker's reason code comes from the ``pocketmq-reason`` trailer).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from pocketmq.client.admin_model import (
    BrokerInfo,
    ClusterInfo,
    ConsumerGroup,
    QueueProgress,
    QueueReset,
    QueueStatus,
    TopicConfig,
)
from pocketmq.client.config import Transport
from pocketmq.client.errors import (
    BusyError,
    ClientError,
    InvalidRequestError,
    NotFoundError,
    NotMasterError,
    OutOfOrderSequenceError,
    PermissionDeniedError,
    ProducerFencedError,
    RemoteError,
    RouteNotFoundError,
    ServerError,
    UnavailableError,
    UnsupportedError,
)
from pocketmq.client.model import (
    MessageQueue,
    SendResult,
    SendStatus,
    _new_send_result,
    _positional_builder,
)
from pocketmq.client.route import QueueData, TopicRoute
from pocketmq.client.tls_hint import tls_mismatch_hint
from pocketmq.common.auth import Credentials, signed_metadata
from pocketmq.common.filter import TAG, MessageSelector
from pocketmq.common.runtime import tune_malloc
from pocketmq.v1 import broker_pb2 as bpb
from pocketmq.v1 import (
    broker_pb2_grpc,
    common_pb2,
    controller_pb2,
    nameserver_pb2,
    nameserver_pb2_grpc,
)

__all__ = [
    "STATUS_ERRORS",
    "BrokerClient",
    "ChannelOpened",
    "CheckTransactionState",
    "ConsumerIdsChanged",
    "ConsumerInfo",
    "HeartbeatAnswer",
    "NameserverClient",
    "PullReply",
    "PullStatus",
    "QueuePull",
    "Remoting",
    "ResetConsumerOffset",
    "SendReceipt",
]

log = logging.getLogger(__name__)

REASON_METADATA_KEY = "pocketmq-reason"
NOT_MASTER_METADATA_KEY = "pocketmq-not-master-bin"  # a pocketmq.v1.NotMaster, with NOT_MASTER
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
MAX_RECONNECT_BACKOFF_MS = 2000

Code = grpc.StatusCode
STATUS_ERRORS: dict[grpc.StatusCode, type[RemoteError]] = {
    Code.UNAVAILABLE: UnavailableError,
    Code.DEADLINE_EXCEEDED: UnavailableError,
    Code.CANCELLED: UnavailableError,
    Code.RESOURCE_EXHAUSTED: BusyError,
    Code.NOT_FOUND: NotFoundError,
    Code.PERMISSION_DENIED: PermissionDeniedError,
    Code.UNAUTHENTICATED: PermissionDeniedError,
    Code.INVALID_ARGUMENT: InvalidRequestError,
    Code.ALREADY_EXISTS: InvalidRequestError,
    Code.FAILED_PRECONDITION: InvalidRequestError,
    Code.OUT_OF_RANGE: InvalidRequestError,
    Code.UNIMPLEMENTED: UnsupportedError,
}


#: refusals told apart by the broker's reason rather than the status code
REASON_ERRORS: dict[str, type[RemoteError]] = {
    "PRODUCER_FENCED": ProducerFencedError,
    "OUT_OF_ORDER_SEQUENCE": OutOfOrderSequenceError,
}


def _remote_error(exc: grpc.aio.AioRpcError, addr: str, rpc: str) -> RemoteError:
    """The client error for a failed call; a call cancelled with its task stays a cancellation."""
    code = exc.code()
    task = asyncio.current_task()
    if code is Code.CANCELLED and task is not None and task.cancelling():
        raise asyncio.CancelledError
    reason = ""
    not_master = b""
    for key, value in exc.trailing_metadata() or ():
        if key == REASON_METADATA_KEY:
            reason = str(value)
        elif key == NOT_MASTER_METADATA_KEY:
            not_master = value if isinstance(value, bytes) else str(value).encode()
    details = exc.details() or "no details"
    if reason == "NOT_MASTER":
        return _not_master_error(
            f"{rpc} to {addr} failed: {code.name}: {details}", addr, code.name, not_master
        )
    cls = REASON_ERRORS.get(reason) or STATUS_ERRORS.get(code, ServerError)
    hint = tls_mismatch_hint(details, addr) if code is Code.UNAVAILABLE else ""
    return cls(
        f"{rpc} to {addr} failed: {code.name}: {details}" + (f" ({hint})" if hint else ""),
        addr=addr,
        code=code.name,
        reason=reason,
    )


def _not_master_error(message: str, addr: str, code: str, detail: bytes) -> NotMasterError:
    """NOT_MASTER with its detail; a detail that does not parse redirects nowhere."""
    hint = controller_pb2.NotMaster()
    try:
        hint.ParseFromString(detail)
    except DecodeError:
        hint = controller_pb2.NotMaster()
    return NotMasterError(
        message,
        addr=addr,
        code=code,
        broker_name=hint.broker_name,
        master_addr=hint.master_addr,
        master_epoch=hint.master_epoch,
    )


# -- plain values ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SendReceipt:
    status: SendStatus
    msg_id: str
    offset_msg_id: str
    topic: str  # "" when it is the topic the record named
    queue_id: int
    queue_offset: int


class PullStatus(enum.Enum):
    """What a pull found at its offset (RocketMQ's ``PullStatus``)."""

    FOUND = bpb.FOUND
    NO_NEW_MSG = bpb.NO_NEW_MSG
    NO_MATCHED_MSG = bpb.NO_MATCHED_MSG
    OFFSET_ILLEGAL = bpb.OFFSET_ILLEGAL


@dataclass(frozen=True, slots=True)
class PullReply:
    """A broker's answer to one queue's pull: *records* are stored records back to back
    (decode them with ``decode_messages``); ``next_begin_offset`` is where to go on."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    records: bytes
    message_count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class QueuePull:
    """One queue of a PullBatch: where to read and what."""

    queue: MessageQueue
    offset: int
    max_messages: int
    subscription: str = "*"
    expression_type: str = "TAG"  # TAG: `subscription` is tags; SQL92: a filter
    commit_offset: int | None = None


def _wire_type(expression_type: str) -> str:
    """ "" for tags (what brokers before SQL92 filters expect), else the type."""
    return "" if expression_type == TAG else expression_type


def _subscription_pb(topic: str, expression: str | MessageSelector) -> bpb.Subscription:
    selector = MessageSelector.of(expression)
    return bpb.Subscription(
        topic=topic, expression=selector.expression, expression_type=_wire_type(selector.type)
    )


def _pull_reply(resp: bpb.PullMessageResponse) -> PullReply:
    return PullReply(
        PullStatus(resp.status),
        resp.next_begin_offset,
        resp.min_offset,
        resp.max_offset,
        resp.records,
        resp.message_count,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerInfo:
    """What a heartbeat tells brokers about one consumer group of this client."""

    group: str
    push: bool = True
    broadcasting: bool = False
    consume_from: str = "last"
    # topic -> a tag expression, or a MessageSelector (tags or SQL92)
    subscriptions: dict[str, str | MessageSelector] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatAnswer:
    """What a broker answered a heartbeat, and the request's size."""

    unknown_groups: tuple[str, ...] = ()  # sent as a fingerprint, not known there
    keeps_fingerprints: bool = False  # False from brokers before fingerprints
    request_bytes: int = 0


@dataclass(frozen=True, slots=True)
class ChannelOpened:
    broker_name: str


@dataclass(frozen=True, slots=True)
class ConsumerIdsChanged:
    group: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckTransactionState:
    """The broker at *broker_addr* asks how the transaction of a half message ended."""

    broker_addr: str
    producer_group: str
    record: bytes  # the half message as stored (commit-log layout)
    commit_log_offset: int
    offset_msg_id: str
    msg_id: str
    check_times: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ResetConsumerOffset:
    """An admin moved *group*'s offsets of *topic* on *broker_name*: continue there."""

    group: str
    topic: str
    broker_name: str
    offsets: dict[int, int]  # queue id -> next offset to consume


ServerCommand = ChannelOpened | ConsumerIdsChanged | CheckTransactionState | ResetConsumerOffset

_SEND_STATUS = {
    bpb.SEND_OK: SendStatus.SEND_OK,
    bpb.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    bpb.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    bpb.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}
_CONSUME_FROM = {
    "last": bpb.CONSUME_FROM_LAST_OFFSET,
    "first": bpb.CONSUME_FROM_FIRST_OFFSET,
    "timestamp": bpb.CONSUME_FROM_TIMESTAMP,
}


_new_receipt = _positional_builder(
    SendReceipt, ("status", "msg_id", "offset_msg_id", "topic", "queue_id", "queue_offset")
)


def _receipts(resp: bpb.SendMessageResponse) -> list[SendReceipt]:
    """One receipt per record sent; the reply comes in columns (see broker.proto)."""
    status = _SEND_STATUS.get(resp.status, SendStatus.SEND_OK)
    prefix = resp.offset_msg_id_prefix
    return [
        _new_receipt(status, msg_id, f"{prefix}{phys:016X}", "", queue_id, queue_offset)
        for msg_id, queue_id, queue_offset, phys in zip(
            resp.msg_ids, resp.queue_ids, resp.queue_offsets, resp.phys_offsets, strict=True
        )
    ]


def _route(topic: str, pb_route: Any) -> TopicRoute:
    return TopicRoute(
        topic=topic,
        queue_datas=tuple(
            QueueData(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm)
            for q in pb_route.queue_datas
        ),
        broker_addrs={b.broker_name: dict(b.broker_addrs) for b in pb_route.broker_datas},
        master_epochs={
            b.broker_name: b.master_epoch for b in pb_route.broker_datas if b.master_epoch
        },
    )


# -- clients ------------------------------------------------------------------------------------
class NameserverClient:
    """Asks the nameservers, trying the next one when one does not answer."""

    def __init__(self, remoting: Remoting, addrs: Sequence[str], *, timeout_s: float = 3.0) -> None:
        if not addrs:
            raise ValueError("no nameserver address given")
        self._remoting = remoting
        self._addrs = list(addrs)
        self._timeout_s = timeout_s
        self._current = 0

    async def get_route(self, topic: str) -> TopicRoute:
        """The route of *topic*; raises ``RouteNotFoundError`` when nobody serves it."""
        last: ClientError | None = None
        for attempt in range(len(self._addrs)):
            addr = self._addrs[(self._current + attempt) % len(self._addrs)]
            stub = nameserver_pb2_grpc.NameServerStub(self._remoting.channel(addr))
            try:
                resp = await stub.GetRouteInfoByTopic(
                    nameserver_pb2.GetRouteInfoByTopicRequest(topic=topic), timeout=self._timeout_s
                )
            except grpc.aio.AioRpcError as exc:
                if exc.code() is Code.NOT_FOUND:
                    raise RouteNotFoundError(topic, f"nameserver {addr}: {exc.details()}") from None
                last = _remote_error(exc, addr, "GetRouteInfoByTopic")
                continue
            self._current = (self._current + attempt) % len(self._addrs)
            return _route(topic, resp.route)
        assert last is not None
        raise last

    async def get_routes(self, topics: Sequence[str]) -> tuple[dict[str, TopicRoute], list[str]]:
        """The routes of up to 1,000 *topics* in one call (GetTopicRoutes by names), and
        the topics nobody serves."""
        resp = await self._ask(
            "GetTopicRoutes", nameserver_pb2.GetTopicRoutesRequest(names=list(topics))
        )
        brokers = resp.brokers
        routes = {}
        for row in resp.topics:
            names = [q.broker_name for q in row.queue_datas]
            routes[row.topic] = TopicRoute(
                topic=row.topic,
                queue_datas=tuple(
                    QueueData(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm)
                    for q in row.queue_datas
                ),
                broker_addrs={n: dict(brokers[n].broker_addrs) for n in names if n in brokers},
                master_epochs={
                    n: brokers[n].master_epoch
                    for n in names
                    if n in brokers and brokers[n].master_epoch
                },
            )
        return routes, list(resp.missing)

    async def _ask(self, rpc: str, request: object) -> Any:
        """*rpc* answered by the first nameserver that answers."""
        last: ClientError | None = None
        for attempt in range(len(self._addrs)):
            addr = self._addrs[(self._current + attempt) % len(self._addrs)]
            stub = nameserver_pb2_grpc.NameServerStub(self._remoting.channel(addr))
            try:
                resp = await getattr(stub, rpc)(request, timeout=self._timeout_s)
            except grpc.aio.AioRpcError as exc:
                last = _remote_error(exc, addr, rpc)
                continue
            self._current = (self._current + attempt) % len(self._addrs)
            return resp
        assert last is not None
        raise last

    async def cluster_info(self) -> ClusterInfo:
        """Live brokers and clusters (GET_BROKER_CLUSTER_INFO)."""
        resp = await self._ask("GetBrokerClusterInfo", nameserver_pb2.GetBrokerClusterInfoRequest())
        return ClusterInfo(
            brokers=[
                BrokerInfo(
                    cluster=b.cluster_name,
                    broker_name=b.broker_name,
                    broker_id=b.broker_id,
                    addr=b.broker_addr,
                    last_update_timestamp_ms=b.last_update_timestamp_ms,
                )
                for b in resp.live_brokers
            ],
            clusters={
                c: list(names.broker_names) for c, names in sorted(resp.cluster_addr_table.items())
            },
        )

    async def topic_list(self) -> list[str]:
        """Every topic a live broker serves, sorted (GET_ALL_TOPIC_LIST_FROM_NAMESERVER)."""
        resp = await self._ask("GetAllTopicList", nameserver_pb2.GetAllTopicListRequest())
        return list(resp.topics)

    async def topic_routes_page(
        self,
        start_after: str = "",
        limit: int = 0,
    ) -> tuple[list[tuple[str, list[QueueData]]], str]:
        """One page of topics with their queue data (GetTopicRoutes), and the name to
        continue after ("" after the last page)."""
        resp = await self._ask(
            "GetTopicRoutes",
            nameserver_pb2.GetTopicRoutesRequest(start_after=start_after, limit=limit),
        )
        return (
            [
                (
                    t.topic,
                    [
                        QueueData(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm)
                        for q in t.queue_datas
                    ],
                )
                for t in resp.topics
            ],
            resp.next_start_after,
        )


class BrokerClient:
    """Typed calls to one broker. A call that finds it unreachable is reported to
    *on_unreachable* (the route cache stops reading from it for a while)."""

    def __init__(
        self,
        addr: str,
        channel: grpc.aio.Channel,
        *,
        on_unreachable: Callable[[str], None] | None = None,
    ) -> None:
        self.addr = addr
        self._stub = broker_pb2_grpc.BrokerStub(channel)
        self._channel = channel
        self._on_unreachable = on_unreachable

    def _failed(self, exc: grpc.aio.AioRpcError, rpc: str) -> RemoteError:
        error = _remote_error(exc, self.addr, rpc)
        if (
            self._on_unreachable is not None
            and isinstance(error, UnavailableError)
            and error.unreachable
        ):
            self._on_unreachable(self.addr)
        return error

    async def _call(self, rpc: str, request: object, timeout_s: float | None) -> Any:
        method = getattr(self._stub, rpc, None)
        if method is None:
            raise UnsupportedError(
                f"{rpc} is not in this build's broker.proto; the broker "
                f"at {self.addr} cannot be asked for it",
                addr=self.addr,
                code="UNIMPLEMENTED",
            )
        try:
            return await method(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as exc:
            raise self._failed(exc, rpc) from None

    # -- messages -----------------------------------------------------------------------
    async def send_message(
        self, record: bytes, *, producer_group: str = "", timeout_s: float = 3.0
    ) -> list[SendReceipt]:
        resp = await self._call(
            "SendMessage",
            bpb.SendMessageRequest(record=record, producer_group=producer_group),
            timeout_s,
        )
        return _receipts(resp)

    async def send_batch(
        self, records: bytes, *, producer_group: str = "", timeout_s: float = 3.0
    ) -> list[SendReceipt]:
        resp = await self._call(
            "SendBatch",
            bpb.SendBatchRequest(records=records, producer_group=producer_group),
            timeout_s,
        )
        return _receipts(resp)

    async def init_producer_id(
        self,
        *,
        identity: str,
        topics: list[str],
        producer_group: str = "",
        timeout_s: float = 3.0,
    ) -> tuple[int, int, list[tuple[str, int, int]]]:
        """(producer id, epoch, [(topic, queue id, last sequence)]) for an idempotent
        producer; *identity* "" asks for a fresh id."""
        resp = await self._call(
            "InitProducerId",
            bpb.InitProducerIdRequest(
                producer_group=producer_group, identity=identity, topics=topics
            ),
            timeout_s,
        )
        return (
            resp.producer_id,
            resp.epoch,
            [(q.topic, q.queue_id, q.last_seq) for q in resp.sequences],
        )

    async def send_batch_to(
        self,
        records: bytes,
        queue: MessageQueue,
        *,
        producer_group: str = "",
        timeout_s: float = 3.0,
    ) -> list[SendResult]:
        """Records all aimed at *queue*: a :class:`SendResult` each, built from the reply's
        columns without intermediate receipts (``Producer.send_batch``'s hot path)."""
        resp = await self._call(
            "SendBatch",
            bpb.SendBatchRequest(records=records, producer_group=producer_group),
            timeout_s,
        )
        status = _SEND_STATUS.get(resp.status, SendStatus.SEND_OK)
        prefix = resp.offset_msg_id_prefix
        same = queue.queue_id
        return [
            _new_send_result(
                status,
                msg_id,
                f"{prefix}{phys:016X}",
                queue
                if queue_id == same
                else MessageQueue(queue.topic, queue.broker_name, queue_id),
                queue_offset,
            )
            for msg_id, queue_id, queue_offset, phys in zip(
                resp.msg_ids, resp.queue_ids, resp.queue_offsets, resp.phys_offsets, strict=True
            )
        ]

    async def pull(
        self,
        *,
        group: str,
        queue: MessageQueue,
        offset: int,
        max_messages: int,
        subscription: str,
        suspend_ms: int,
        commit_offset: int | None = None,
        timeout_s: float,
        expression_type: str = TAG,
    ) -> PullReply:
        """One PullMessage of *queue* from *offset*, long-polling up to *suspend_ms*."""
        request = bpb.PullMessageRequest(
            consumer_group=group,
            topic=queue.topic,
            queue_id=queue.queue_id,
            queue_offset=offset,
            max_msg_nums=max_messages,
            subscription=subscription,
            suspend_timeout_ms=suspend_ms,
            expression_type=_wire_type(expression_type),
        )
        if commit_offset is not None:
            request.commit_offset = commit_offset
        return _pull_reply(await self._call("PullMessage", request, timeout_s))

    async def pull_batch(
        self, *, group: str, pulls: Sequence[QueuePull], suspend_ms: int, timeout_s: float
    ) -> list[PullReply | RemoteError | None]:
        """Long-poll several queues at once; per pull, in order: its reply, the
        refusal of that queue alone, or None when the broker did not read it this
        time (its reply was full): pull it again."""
        request = bpb.PullBatchRequest(consumer_group=group, suspend_timeout_ms=suspend_ms)
        for pull in pulls:
            entry = request.pulls.add(
                topic=pull.queue.topic,
                queue_id=pull.queue.queue_id,
                queue_offset=pull.offset,
                max_msg_nums=pull.max_messages,
                subscription=pull.subscription,
                expression_type=_wire_type(pull.expression_type),
            )
            if pull.commit_offset is not None:
                entry.commit_offset = pull.commit_offset
        resp = await self._call("PullBatch", request, timeout_s)
        out: list[PullReply | RemoteError | None] = [None] * len(pulls)
        for result in resp.results:
            if not 0 <= result.index < len(pulls):
                continue
            if result.error_code:
                code = Code.__members__.get(result.error_code, Code.UNKNOWN)
                cls = STATUS_ERRORS.get(code, ServerError)
                out[result.index] = cls(
                    f"PullBatch to {self.addr} refused {pulls[result.index].queue}: "
                    f"{result.error_code}: {result.error_message}",
                    addr=self.addr,
                    code=result.error_code,
                    reason=result.error_reason,
                )
            else:
                out[result.index] = _pull_reply(result.reply)
        return out

    # -- offsets ------------------------------------------------------------------------
    async def query_consumer_offset(
        self, group: str, queue: MessageQueue, *, timeout_s: float = 3.0
    ) -> int | None:
        resp = await self._call(
            "QueryConsumerOffset",
            bpb.QueryConsumerOffsetRequest(
                consumer_group=group, topic=queue.topic, queue_id=queue.queue_id
            ),
            timeout_s,
        )
        return resp.offset if resp.HasField("offset") else None

    async def update_consumer_offset(
        self, group: str, queue: MessageQueue, offset: int, *, timeout_s: float = 3.0
    ) -> None:
        await self._call(
            "UpdateConsumerOffset",
            bpb.UpdateConsumerOffsetRequest(
                consumer_group=group, topic=queue.topic, queue_id=queue.queue_id, offset=offset
            ),
            timeout_s,
        )

    async def min_offset(self, queue: MessageQueue, *, timeout_s: float = 3.0) -> int:
        """The first queue offset the broker still holds (GetMinOffset)."""
        resp = await self._call(
            "GetMinOffset",
            bpb.GetQueueOffsetRequest(topic=queue.topic, queue_id=queue.queue_id),
            timeout_s,
        )
        return resp.offset

    async def max_offset(self, queue: MessageQueue, *, timeout_s: float = 3.0) -> int:
        """The queue offset the next message will get (GetMaxOffset)."""
        resp = await self._call(
            "GetMaxOffset",
            bpb.GetQueueOffsetRequest(topic=queue.topic, queue_id=queue.queue_id),
            timeout_s,
        )
        return resp.offset

    async def offset_by_timestamp(
        self, queue: MessageQueue, timestamp_ms: int, *, timeout_s: float = 3.0
    ) -> int:
        """The first queue offset stored at or after *timestamp_ms*."""
        resp = await self._call(
            "SearchOffsetByTimestamp",
            bpb.SearchOffsetByTimestampRequest(
                topic=queue.topic, queue_id=queue.queue_id, timestamp_ms=timestamp_ms
            ),
            timeout_s,
        )
        return resp.offset

    # -- clients ------------------------------------------------------------------------
    async def heartbeat(
        self,
        client_id: str,
        *,
        producer_groups: Iterable[str] = (),
        consumers: Iterable[ConsumerInfo] = (),
        fingerprints: Mapping[str, str] | None = None,
        unchanged: Collection[str] = (),
        timeout_s: float = 3.0,
    ) -> HeartbeatAnswer:
        """Register the client; groups in *unchanged* (with a fingerprint) go as
        their fingerprint only, the rest whole with theirs."""
        fingerprints = fingerprints or {}
        data = []
        for c in consumers:
            fingerprint = fingerprints.get(c.group, "")
            if fingerprint and c.group in unchanged:
                data.append(
                    bpb.ConsumerData(group=c.group, fingerprint=fingerprint, unchanged=True)
                )
                continue
            data.append(
                bpb.ConsumerData(
                    group=c.group,
                    consume_type=bpb.CONSUME_PASSIVELY if c.push else bpb.CONSUME_ACTIVELY,
                    message_model=bpb.BROADCASTING if c.broadcasting else bpb.CLUSTERING,
                    consume_from_where=_CONSUME_FROM.get(
                        c.consume_from, bpb.CONSUME_FROM_LAST_OFFSET
                    ),
                    subscriptions=[
                        _subscription_pb(t, e) for t, e in sorted(c.subscriptions.items())
                    ],
                    fingerprint=fingerprint,
                )
            )
        request = bpb.HeartBeatRequest(
            client_id=client_id, producer_groups=list(producer_groups), consumers=data
        )
        resp = await self._call("HeartBeat", request, timeout_s)
        return HeartbeatAnswer(
            unknown_groups=tuple(resp.unknown_groups),
            keeps_fingerprints=resp.keeps_fingerprints,
            request_bytes=request.ByteSize(),
        )

    async def unregister_client(
        self,
        client_id: str,
        *,
        producer_group: str = "",
        consumer_group: str = "",
        timeout_s: float = 3.0,
    ) -> None:
        await self._call(
            "UnregisterClient",
            bpb.UnregisterClientRequest(
                client_id=client_id, producer_group=producer_group, consumer_group=consumer_group
            ),
            timeout_s,
        )

    async def consumer_ids(self, group: str, *, timeout_s: float = 3.0) -> list[str]:
        resp = await self._call(
            "GetConsumerListByGroup",
            bpb.GetConsumerListByGroupRequest(consumer_group=group),
            timeout_s,
        )
        return list(resp.consumer_ids)

    async def commands(self, client_id: str) -> AsyncIterator[ServerCommand]:
        """The broker's command stream for this client, until it ends or fails."""
        call = self._stub.ClientChannel(bpb.ClientChannelRequest(client_id=client_id))
        try:
            async for command in call:
                kind = command.WhichOneof("command")
                if kind == "channel_opened":
                    yield ChannelOpened(command.channel_opened.broker_name)
                elif kind == "notify_consumer_ids_changed":
                    yield ConsumerIdsChanged(command.notify_consumer_ids_changed.consumer_group)
                elif kind == "check_transaction_state":
                    check = command.check_transaction_state
                    yield CheckTransactionState(
                        broker_addr=self.addr,
                        producer_group=check.producer_group,
                        record=check.record,
                        commit_log_offset=check.commit_log_offset,
                        offset_msg_id=check.offset_msg_id,
                        msg_id=check.msg_id,
                        check_times=check.check_times,
                    )
                elif kind == "reset_consumer_client_offset":
                    reset = command.reset_consumer_client_offset
                    yield ResetConsumerOffset(
                        group=reset.consumer_group,
                        topic=reset.topic,
                        broker_name=reset.broker_name,
                        offsets=dict(reset.offsets),
                    )
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise asyncio.CancelledError
        except grpc.aio.AioRpcError as exc:
            raise self._failed(exc, "ClientChannel") from None
        finally:
            call.cancel()

    # -- transactions -------------------------------------------------------------------
    async def end_transaction(
        self,
        *,
        producer_group: str,
        commit_log_offset: int,
        offset_msg_id: str,
        msg_id: str,
        commit: bool,
        from_transaction_check: bool = False,
        timeout_s: float = 3.0,
    ) -> bool:
        """Commit or roll back a half message; True if it was already resolved so."""
        resp = await self._call(
            "EndTransaction",
            bpb.EndTransactionRequest(
                producer_group=producer_group,
                commit_log_offset=commit_log_offset,
                offset_msg_id=offset_msg_id,
                msg_id=msg_id,
                resolution=bpb.COMMIT if commit else bpb.ROLLBACK,
                from_transaction_check=from_transaction_check,
            ),
            timeout_s,
        )
        return bool(resp.already_resolved)

    # -- retries and ordered consumption (newer RPCs) -----------------------------------
    async def consumer_send_msg_back(
        self,
        *,
        group: str,
        phys_offset: int,
        delay_level: int,
        origin_topic: str,
        origin_msg_id: str,
        max_reconsume_times: int,
        timeout_s: float = 3.0,
    ) -> None:
        request_cls = getattr(bpb, "ConsumerSendMsgBackRequest", None)
        if request_cls is None:
            raise UnsupportedError(
                "ConsumerSendMsgBack is not in this build's broker.proto",
                addr=self.addr,
                code="UNIMPLEMENTED",
            )
        await self._call(
            "ConsumerSendMsgBack",
            request_cls(
                group=group,
                phys_offset=phys_offset,
                delay_level=delay_level,
                origin_topic=origin_topic,
                origin_msg_id=origin_msg_id,
                max_reconsume_times=max_reconsume_times,
            ),
            timeout_s,
        )

    async def lock_batch(
        self, group: str, client_id: str, queues: Sequence[MessageQueue], *, timeout_s: float = 3.0
    ) -> set[MessageQueue]:
        """Lock *queues* for this client; returns those it now holds."""
        request_cls = getattr(bpb, "LockBatchMQRequest", None)
        if request_cls is None:
            raise UnsupportedError(
                "LockBatchMQ is not in this build's broker.proto",
                addr=self.addr,
                code="UNIMPLEMENTED",
            )
        resp = await self._call(
            "LockBatchMQ",
            request_cls(group=group, client_id=client_id, queues=[_queue_ref(q) for q in queues]),
            timeout_s,
        )
        return {MessageQueue(r.topic, r.broker_name, r.queue_id) for r in resp.locked}

    async def unlock_batch(
        self, group: str, client_id: str, queues: Sequence[MessageQueue], *, timeout_s: float = 3.0
    ) -> None:
        request_cls = getattr(bpb, "UnlockBatchMQRequest", None)
        if request_cls is None:
            raise UnsupportedError(
                "UnlockBatchMQ is not in this build's broker.proto",
                addr=self.addr,
                code="UNIMPLEMENTED",
            )
        await self._call(
            "UnlockBatchMQ",
            request_cls(group=group, client_id=client_id, queues=[_queue_ref(q) for q in queues]),
            timeout_s,
        )

    # -- admin ----------------------------------------------------------------------------
    async def create_topic(self, config: TopicConfig, *, timeout_s: float = 5.0) -> None:
        await self._call(
            "CreateTopic", bpb.CreateTopicRequest(topic_config=_topic_config_pb(config)), timeout_s
        )

    async def update_topic(self, config: TopicConfig, *, timeout_s: float = 5.0) -> None:
        await self._call(
            "UpdateTopic", bpb.UpdateTopicRequest(topic_config=_topic_config_pb(config)), timeout_s
        )

    async def delete_topic(self, topic: str, *, timeout_s: float = 5.0) -> None:
        await self._call("DeleteTopic", bpb.DeleteTopicRequest(topic=topic), timeout_s)

    async def create_topics(
        self,
        configs: Sequence[TopicConfig],
        *,
        update_existing: bool = False,
        timeout_s: float = 30.0,
    ) -> tuple[int, int, int]:
        """Create many topics in one call, all or none; (created, updated, unchanged)."""
        resp = await self._call(
            "CreateTopics",
            bpb.CreateTopicsRequest(
                topic_configs=[_topic_config_pb(c) for c in configs],
                update_existing=update_existing,
            ),
            timeout_s,
        )
        return resp.created, resp.updated, resp.unchanged

    async def delete_topics(
        self, topics: Sequence[str], *, ignore_missing: bool = False, timeout_s: float = 30.0
    ) -> int:
        """Delete many topics in one call, all or none; how many were deleted."""
        resp = await self._call(
            "DeleteTopics",
            bpb.DeleteTopicsRequest(topics=list(topics), ignore_missing=ignore_missing),
            timeout_s,
        )
        return int(resp.deleted)

    async def topic_configs(self, *, timeout_s: float = 5.0) -> dict[str, TopicConfig]:
        resp = await self._call("GetAllTopicConfig", bpb.GetAllTopicConfigRequest(), timeout_s)
        return {
            tc.topic_name: TopicConfig(
                topic=tc.topic_name,
                read_queue_nums=tc.read_queue_nums,
                write_queue_nums=tc.write_queue_nums,
                perm=tc.perm,
                order=tc.order,
            )
            for tc in resp.topic_configs
        }

    async def topic_status(
        self, topic: str, *, broker_name: str, timeout_s: float = 5.0
    ) -> list[QueueStatus]:
        resp = await self._call("GetTopicStatus", bpb.GetTopicStatusRequest(topic=topic), timeout_s)
        return [
            QueueStatus(
                broker_name=broker_name,
                queue_id=q.queue_id,
                min_offset=q.min_offset,
                max_offset=q.max_offset,
                last_store_timestamp_ms=q.last_store_timestamp_ms,
            )
            for q in resp.queues
        ]

    async def consume_progress(
        self, group: str, topic: str = "", *, broker_name: str, timeout_s: float = 5.0
    ) -> list[QueueProgress]:
        resp = await self._call(
            "GetConsumeProgress",
            bpb.GetConsumeProgressRequest(consumer_group=group, topic=topic),
            timeout_s,
        )
        return [
            QueueProgress(
                topic=q.topic,
                broker_name=broker_name,
                queue_id=q.queue_id,
                broker_offset=q.broker_offset,
                consumer_offset=q.consumer_offset,
                lag=q.lag,
                last_timestamp_ms=q.last_timestamp_ms,
            )
            for q in resp.queues
        ]

    async def consumer_groups(
        self, *, broker_name: str, timeout_s: float = 5.0
    ) -> list[ConsumerGroup]:
        resp = await self._call(
            "GetAllConsumerGroups", bpb.GetAllConsumerGroupsRequest(), timeout_s
        )
        return [
            ConsumerGroup(
                group=g.group,
                client_ids=list(g.client_ids),
                consume_type=_CONSUME_TYPE_NAMES.get(g.consume_type, ""),
                message_model=_MESSAGE_MODEL_NAMES.get(g.message_model, ""),
                subscribed_topics=list(g.subscribed_topics),
                offset_topics=list(g.offset_topics),
                brokers=[broker_name],
            )
            for g in resp.groups
        ]

    async def reset_consumer_offset(
        self,
        group: str,
        topic: str,
        *,
        timestamp_ms: int | None,
        latest: bool = False,
        broker_name: str,
        timeout_s: float = 5.0,
    ) -> tuple[list[QueueReset], list[str]]:
        """Move *group* on *topic*: to *timestamp_ms*, or (None) the earliest or latest."""
        if timestamp_ms is not None:
            position = bpb.RESET_TO_TIMESTAMP
        else:
            position = bpb.RESET_TO_LATEST if latest else bpb.RESET_TO_EARLIEST
        resp = await self._call(
            "ResetConsumerOffset",
            bpb.ResetConsumerOffsetRequest(
                consumer_group=group, topic=topic, position=position, timestamp_ms=timestamp_ms or 0
            ),
            timeout_s,
        )
        return (
            [
                QueueReset(
                    broker_name=broker_name,
                    queue_id=q.queue_id,
                    previous_offset=q.previous_offset,
                    offset=q.offset,
                )
                for q in resp.queues
            ],
            list(resp.notified_client_ids),
        )

    async def query_message(
        self,
        topic: str,
        key: str,
        *,
        max_num: int = 0,
        begin_timestamp_ms: int = 0,
        end_timestamp_ms: int = 0,
        timeout_s: float = 5.0,
    ) -> bytes:
        """Stored records of *topic* indexed under *key* (KEYS or UNIQ_KEY), newest first."""
        resp = await self._call(
            "QueryMessage",
            bpb.QueryMessageRequest(
                topic=topic,
                key=key,
                max_num=max_num,
                begin_timestamp_ms=begin_timestamp_ms,
                end_timestamp_ms=end_timestamp_ms,
            ),
            timeout_s,
        )
        return bytes(resp.records)

    async def view_message(self, offset_msg_id: str, *, timeout_s: float = 5.0) -> bytes:
        """The stored record an offset message id names."""
        resp = await self._call(
            "ViewMessage", bpb.ViewMessageRequest(offset_msg_id=offset_msg_id), timeout_s
        )
        return bytes(resp.record)

    async def runtime_info(self, *, timeout_s: float = 5.0) -> dict[str, str]:
        resp = await self._call(
            "GetBrokerRuntimeInfo", bpb.GetBrokerRuntimeInfoRequest(), timeout_s
        )
        return dict(resp.table)

    async def broker_config(self, *, timeout_s: float = 5.0) -> dict[str, str]:
        resp = await self._call("GetBrokerConfig", bpb.GetBrokerConfigRequest(), timeout_s)
        return dict(resp.table)


_CONSUME_TYPE_NAMES = {bpb.CONSUME_PASSIVELY: "push", bpb.CONSUME_ACTIVELY: "pull"}
_MESSAGE_MODEL_NAMES = {bpb.CLUSTERING: "clustering", bpb.BROADCASTING: "broadcasting"}


def _topic_config_pb(config: TopicConfig) -> common_pb2.TopicConfig:
    return common_pb2.TopicConfig(
        topic_name=config.topic,
        read_queue_nums=config.read_queue_nums,
        write_queue_nums=config.write_queue_nums,
        perm=config.perm,
        order=config.order,
    )


def _queue_ref(queue: MessageQueue) -> object:
    return bpb.MessageQueueRef(
        topic=queue.topic, broker_name=queue.broker_name, queue_id=queue.queue_id
    )


def signers(credentials: Credentials) -> list[Any]:
    """The interceptors that sign every unary and server-streaming call with *credentials*."""
    return [_SignerUnary(credentials), _SignerStream(credentials)]


class _SigningBase:
    """Adds the ACL signature (common/auth.py) to every call: one HMAC per RPC.

    grpc.aio files an interceptor under the first call kind it implements only, so
    unary and server-streaming calls each need an object of their own (:func:`signers`).
    """

    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials

    def _signed(self, details: Any, request: Any) -> Any:
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        metadata = grpc.aio.Metadata(
            *(details.metadata or ()), *signed_metadata(self._credentials, method, request)
        )
        return grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )


class _SignerUnary(_SigningBase, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._signed(details, request), request)


class _SignerStream(_SigningBase, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._signed(details, request), request)


def _read_pem(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise ClientError(f"cannot read {path}: {exc.strerror}") from None


class Remoting:
    """One gRPC channel per address, shared by every call of one client.

    ``on_unreachable(addr)``, when set, hears of every broker call that got no
    answer (consumers point it at their route cache's suspect marking).
    """

    def __init__(self, transport: Transport | None = None) -> None:
        tune_malloc()  # big replies recycled from the heap, not mmap'd each time
        self.on_unreachable: Callable[[str], None] | None = None
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._brokers: dict[str, BrokerClient] = {}
        self._transport = transport or Transport()
        creds = self._transport.credentials
        self._interceptors = signers(creds) if creds is not None else None
        self._tls: grpc.ChannelCredentials | None = None
        t = self._transport
        if t.tls_ca_file or t.tls_cert_file:
            self._tls = grpc.ssl_channel_credentials(
                root_certificates=_read_pem(t.tls_ca_file) if t.tls_ca_file else None,
                private_key=_read_pem(t.tls_key_file) if t.tls_key_file else None,
                certificate_chain=_read_pem(t.tls_cert_file) if t.tls_cert_file else None,
            )

    def channel(self, addr: str) -> grpc.aio.Channel:
        """The channel to *addr*, made on first use and kept until :meth:`close`."""
        channel = self._channels.get(addr)
        if channel is None:
            options = [
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.enable_retries", 0),
                # A broker back after an outage is reconnected to within 2 s
                # (gRPC's default backoff grows to 120 s), so reads return to it.
                ("grpc.initial_reconnect_backoff_ms", 500),
                ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
                # Connections of their own: a fresh client must not inherit the
                # reconnect backoff of another client's failed connection to the
                # same address (gRPC shares subchannels process-wide otherwise).
                ("grpc.use_local_subchannel_pool", 1),
            ]
            if self._tls is not None:
                channel = grpc.aio.secure_channel(
                    addr, self._tls, options=options, interceptors=self._interceptors
                )
            else:
                channel = grpc.aio.insecure_channel(
                    addr, options=options, interceptors=self._interceptors
                )
            self._channels[addr] = channel
        return channel

    def broker(self, addr: str) -> BrokerClient:
        """Typed calls to the broker at *addr*, over :meth:`channel`."""
        client = self._brokers.get(addr)
        if client is None:
            client = self._brokers[addr] = BrokerClient(
                addr, self.channel(addr), on_unreachable=self._unreachable
            )
        return client

    def _unreachable(self, addr: str) -> None:
        if self.on_unreachable is not None:
            self.on_unreachable(addr)

    def nameserver(self, addrs: Sequence[str], *, timeout_s: float = 3.0) -> NameserverClient:
        """Calls to the nameservers *addrs*, the next one tried when one fails."""
        return NameserverClient(self, addrs, timeout_s=timeout_s)

    async def close(self) -> None:
        """Close every channel."""
        channels, self._channels = self._channels, {}
        self._brokers.clear()
        for channel in channels.values():
            await channel.close()
