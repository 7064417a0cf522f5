"""The values of RocketMQ 5's POP consumption (:mod:`.pop_processor`): a receive's
request, a delivery, the receipt handle that names it, and a message's group.

Receipt handle: ``"{queue id} {queue offset} {serial} {broker name}"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, TypeAlias

from pocketmq.broker.errors import IllegalArgumentError
from pocketmq.common.filter import SqlFilter
from pocketmq.common.message import StoredMessage

__all__ = [
    "INVALID_HANDLE",
    "PROPERTY_MESSAGE_GROUP",
    "Delivery",
    "ReceiptHandle",
    "ReceiveRequest",
    "Selector",
    "message_group",
]

PROPERTY_MESSAGE_GROUP = "__SHARDINGKEY"  # RocketMQ's MessageConst.PROPERTY_SHARDING_KEY
INVALID_HANDLE = "INVALID_RECEIPT_HANDLE"


class ReceiptHandle(NamedTuple):
    queue_id: int
    queue_offset: int
    serial: int
    broker_name: str

    def encode(self) -> str:
        return f"{self.queue_id} {self.queue_offset} {self.serial} {self.broker_name}"

    @classmethod
    def decode(cls, text: str) -> ReceiptHandle:
        parts = text.split(" ", 3)
        try:
            handle = cls(int(parts[0]), int(parts[1]), int(parts[2]), parts[3])
        except (ValueError, IndexError):
            raise IllegalArgumentError(
                f"receipt handle {text[:80]!r} is not one this broker "
                "issued; pass the handle of the received message "
                "unchanged",
                reason=INVALID_HANDLE,
            ) from None
        if handle.queue_id < 0 or handle.queue_offset < 0:
            raise IllegalArgumentError(
                f"receipt handle {text[:80]!r} names a negative queue id or offset",
                reason=INVALID_HANDLE,
            )
        return handle


#: what a receive reads: every message (None), these tags, or an SQL92 filter
Selector: TypeAlias = frozenset[str] | SqlFilter | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReceiveRequest:
    group: str
    topic: str
    expression: str = "*"  # tags: "*" or "TagA || TagB"; or an SQL92 filter
    expression_type: str = "TAG"  # TAG or SQL92 (RocketMQ 5's FilterType TAG / SQL)
    batch_size: int = 32
    invisible_ms: int = 60_000
    poll_ms: int = 0  # 0 = answer at once


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    message: StoredMessage
    receipt_handle: str
    attempt: int  # 1 on the first delivery
    invisible_ms: int


def message_group(msg: StoredMessage) -> str:
    return msg.properties.get(PROPERTY_MESSAGE_GROUP, "")
