"""The plain values :class:`~pocketmq.client.admin.AdminClient` returns.

They mirror the rows of RocketMQ's admin tools (``clusterList``, ``topicStatus``,
``consumerProgress``, ``resetOffsetByTime``, and the replication ones: a broker
name's members as promotion compares them, a promotion's outcome): one frozen
dataclass per row,
with the broker it came from, so that a caller can print, sort or sum them
without knowing the wire. :mod:`.remoting` builds them from the protobuf replies.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "BrokerFailure",
    "BrokerInfo",
    "ClusterInfo",
    "ConsumerConnection",
    "ConsumerGroup",
    "GroupDeleted",
    "OffsetMove",
    "PromoteResult",
    "QueueProgress",
    "QueueReset",
    "QueueStatus",
    "ReplicaPosition",
    "ResetPlan",
    "ResetResult",
    "TopicBatchOutcome",
    "TopicConfig",
]

PERM_READ_WRITE = 6


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicBatchOutcome:
    """What a batch of topic creates or deletes did on one broker, in topics."""

    created: int
    updated: int
    unchanged: int
    deleted: int


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
    broker_id: int  # 0 = master
    addr: str
    last_update_timestamp_ms: int = 0

    @property
    def role(self) -> str:
        return "master" if self.broker_id == 0 else "slave"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterInfo:
    brokers: list[BrokerInfo]  # by cluster, name, id
    clusters: dict[str, list[str]] = field(default_factory=dict)  # cluster -> broker names

    def masters(self, cluster: str | None = None) -> dict[str, str]:
        """Broker name -> master address, of *cluster* or of every cluster."""
        return {
            b.broker_name: b.addr
            for b in self.brokers
            if b.broker_id == 0 and cluster in (None, b.cluster)
        }

    def name_of(self, addr: str) -> str | None:
        return next((b.broker_name for b in self.brokers if b.addr == addr), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueStatus:
    """``topicStatus``: one queue's offsets on one broker."""

    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_store_timestamp_ms: int  # 0 when the queue is empty


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueProgress:
    """``consumerProgress``: where a group stands on one queue."""

    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int  # the queue's max offset
    consumer_offset: int  # -1 when the group has none
    lag: int
    last_timestamp_ms: int  # store time of the last consumed message, 0 if none


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroup:
    """A consumer group as the brokers know it, merged over every broker."""

    group: str
    client_ids: list[str]  # online members
    consume_type: str  # "push", "pull" or "" when offline
    message_model: str  # "clustering", "broadcasting" or "" when offline
    subscribed_topics: list[str]
    offset_topics: list[str]  # topics with stored offsets
    brokers: list[str] = field(default_factory=list)  # broker names that know the group


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueReset:
    broker_name: str
    queue_id: int
    previous_offset: int  # -1 when the group had none
    offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ResetResult:
    """``resetOffsetByTime``: every queue moved, and the online consumers told."""

    topic: str
    group: str
    queues: list[QueueReset]
    notified_client_ids: list[str]  # over every broker, sorted, without repeats


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaPosition:
    """How far one member of a broker name has its commit log (from its runtime info).

    Logs are compared by (``master_epoch``, ``max_offset``): a later epoch wins
    whatever its length, since a replica cuts whatever it holds beyond the
    point where its epoch history parts from the master's.
    """

    broker_name: str
    broker_id: int  # as the broker reports it (a promoted replica: 0); -1 unknown
    addr: str
    role: str  # SYNC_MASTER, ASYNC_MASTER or SLAVE; "" when unreachable
    master_epoch: int  # the last epoch in its log; -1 when unreachable
    max_offset: int  # its commit log's max offset; -1 when unreachable
    fenced: bool = False  # a master the nameserver refused: a newer one replaced it
    error: str = ""  # why its runtime info could not be read

    @property
    def reachable(self) -> bool:
        return not self.error

    def ahead_of(self, other: ReplicaPosition) -> bool:
        """Whether this log goes further than *other*'s: a higher epoch, then more bytes."""
        return (self.master_epoch, self.max_offset) > (other.master_epoch, other.max_offset)

    def describe(self) -> str:
        where = f"{self.broker_name} id {self.broker_id} at {self.addr}"
        if not self.reachable:
            return f"{where}: unreachable ({self.error})"
        fenced = ", fenced" if self.fenced else ""
        return (
            f"{where} ({self.role}{fenced}): epoch {self.master_epoch}, commit-log offset "
            f"{self.max_offset}"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PromoteResult:
    """``PromoteToMaster``: the replica at ``addr`` is now the master of its broker name."""

    broker_name: str
    addr: str
    epoch: int  # the new master epoch
    start_offset: int  # commit-log offset where the new epoch begins
    role: str  # SYNC_MASTER or ASYNC_MASTER
    previous: ReplicaPosition  # the target before the promotion
    members: list[ReplicaPosition]  # the others of the broker name, as compared
    forced: bool = False  # promoted although a member was ahead
    namesrv_error: str = ""  # the nameserver could not list the members


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerFailure:
    """A broker that did not answer an admin question another broker answered."""

    broker_name: str
    addr: str
    error: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerConnection:
    """``consumerConnection``: one online member of a group, as one broker sees it."""

    broker_name: str
    client_id: str
    consume_type: str  # "push" or "pull"
    message_model: str  # "clustering" or "broadcasting"
    subscriptions: list[str]  # "topic: expression"
    silent_ms: int  # since its last heartbeat to that broker


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupDeleted:
    """``deleteSubGroup``: what one broker forgot of a group."""

    broker_name: str
    offset_topics: list[str]
    retry_topic_deleted: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetMove:
    """One queue of a reset plan: where the group is, and where it would go."""

    broker_name: str
    queue_id: int
    current_offset: int  # -1 when the group has none
    new_offset: int  # clamped into [min_offset, max_offset]
    min_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ResetPlan:
    """What ``group reset-offset`` would do (shown by default; applied with --execute)."""

    group: str
    topic: str
    moves: list[OffsetMove]
    group_known: bool  # some broker has offsets or members of the group
