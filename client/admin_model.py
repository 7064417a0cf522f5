"""The plain values :class:`~pocketmq.client.admin.AdminClient` returns.

They mirror the rows of RocketMQ's admin tools (``clusterList``, ``topicStatus``,
``consumerProgress``, ``resetOffsetByTime``): one frozen dataclass per row,
with the broker it came from, so that a caller can print, sort or sum them
without knowing the wire. :mod:`.remoting` builds them from the protobuf replies.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "BrokerInfo",
    "ClusterInfo",
    "ConsumerGroup",
    "QueueProgress",
    "QueueReset",
    "QueueStatus",
    "ResetResult",
    "TopicConfig",
]

PERM_READ_WRITE = 6


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicConfig:
    """One topic on one broker (RocketMQ TopicConfig); perm 6 = read and write."""

    topic: str
    read_queue_nums: int = 8
    write_queue_nums: int = 8
    perm: int = PERM_READ_WRITE
    order: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerInfo:
    """One live broker process, as the nameserver knows it."""

    cluster: str
    broker_name: str
    broker_id: int            # 0 = master
    addr: str
    last_update_timestamp_ms: int = 0

    @property
    def role(self) -> str:
        return "master" if self.broker_id == 0 else "slave"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterInfo:
    brokers: list[BrokerInfo]                                   # by cluster, name, id
    clusters: dict[str, list[str]] = field(default_factory=dict)  # cluster -> broker names

    def masters(self, cluster: str | None = None) -> dict[str, str]:
        """Broker name -> master address, of *cluster* or of every cluster."""
        return {b.broker_name: b.addr for b in self.brokers
                if b.broker_id == 0 and cluster in (None, b.cluster)}

    def name_of(self, addr: str) -> str | None:
        return next((b.broker_name for b in self.brokers if b.addr == addr), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueStatus:
    """``topicStatus``: one queue's offsets on one broker."""

    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_store_timestamp_ms: int      # 0 when the queue is empty


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueProgress:
    """``consumerProgress``: where a group stands on one queue."""

    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int                # the queue's max offset
    consumer_offset: int              # -1 when the group has none
    lag: int
    last_timestamp_ms: int            # store time of the last consumed message, 0 if none


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroup:
    """A consumer group as the brokers know it, merged over every broker."""

    group: str
    client_ids: list[str]             # online members
    consume_type: str                 # "push", "pull" or "" when offline
    message_model: str                # "clustering", "broadcasting" or "" when offline
    subscribed_topics: list[str]
    offset_topics: list[str]          # topics with stored offsets
    brokers: list[str] = field(default_factory=list)   # broker names that know the group


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueReset:
    broker_name: str
    queue_id: int
    previous_offset: int              # -1 when the group had none
    offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ResetResult:
    """``resetOffsetByTime``: every queue moved, and the online consumers told."""

    topic: str
    group: str
    queues: list[QueueReset]
    notified_client_ids: list[str]    # over every broker, sorted, without repeats
