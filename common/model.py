"""Small value types the broker, the nameserver and the client share.

Each is one idea on both sides of the wire, so it is defined once here; the client
re-exports its public ones (``pocketmq.client.MessageQueue``, ``SendStatus``,
``MessageModel``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["DataVersion", "MessageModel", "MessageQueue", "QueueData", "SendStatus"]


class MessageQueue(NamedTuple):
    """One queue: sorts by topic, broker name, queue id (as RocketMQ's rebalance)."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}#{self.queue_id}"


class SendStatus(enum.Enum):
    """RocketMQ's SendStatus: anything but SEND_OK still stored the message."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"  # SYNC_FLUSH: fsync did not finish in time
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"  # SYNC_MASTER: replicas did not ack in time
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"  # SYNC_MASTER: too few replicas in sync


class MessageModel(enum.StrEnum):
    """How a consumer group shares a topic's queues (RocketMQ's MessageModel)."""

    CLUSTERING = "clustering"  # each queue has one owner in the group
    BROADCASTING = "broadcasting"  # every member reads every queue


@dataclass(frozen=True, slots=True)
class DataVersion:
    """RocketMQ's ``DataVersion`` of a broker's topic table: changes whenever the table
    does; the nameserver compares the one a registration carries with the one it holds."""

    timestamp_ms: int = 0
    counter: int = 0

    def next(self, now_ms: int) -> DataVersion:
        return DataVersion(now_ms, self.counter + 1)

    def __iter__(self) -> Iterator[int]:
        """``(timestamp_ms, counter)``, as the nameserver logs and unpacks it."""
        return iter((self.timestamp_ms, self.counter))


@dataclass(frozen=True, slots=True)
class QueueData:
    """How one broker name serves one topic (RocketMQ's ``QueueData``)."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
