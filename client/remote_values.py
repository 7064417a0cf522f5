"""The plain values the typed calls take and return, and their protobuf twins.

:class:`~pocketmq.client.broker_client.BrokerClient` and
:class:`~pocketmq.client.nameserver_client.NameserverClient` speak protobuf to
the servers and plain frozen values to the rest of the client; the
conversions both ways are here, so that no other module sees protobuf.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from pocketmq.client.model import MessageQueue, SendStatus, _positional_builder
from pocketmq.client.route import QueueData, TopicRoute
from pocketmq.common.filter import TAG, MessageSelector
from pocketmq.v1 import broker_pb2 as bpb

__all__ = [
    "ChannelOpened",
    "CheckTransactionState",
    "ConsumerIdsChanged",
    "ConsumerInfo",
    "HeartbeatAnswer",
    "PullReply",
    "PullStatus",
    "QueuePull",
    "ResetConsumerOffset",
    "SendReceipt",
    "ServerCommand",
]


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
