"""The route table's values: who a broker is, how a broker name serves a topic,
a topic's route, a broker's liveness, what a registration answers and how its
topic configs are meant (:mod:`.route_table` holds the table; it re-exports these).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pocketmq.common.model import DataVersion, QueueData

__all__ = [
    "FULL_TABLE",
    "MASTER_ID",
    "PERM_INHERIT",
    "PERM_PRIORITY",
    "PERM_READ",
    "PERM_WRITE",
    "BrokerData",
    "BrokerIdentity",
    "BrokerLiveInfo",
    "DataVersion",
    "QueueData",
    "RegisterResult",
    "TopicRouteData",
    "TopicUpdate",
]

MASTER_ID = 0  # broker id of a master (RocketMQ MixAll.MASTER_ID)

# Permission bits of a topic on a broker (RocketMQ PermName).
PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1


# -------------------------------------------------------------------------- values


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerIdentity:
    """Who a broker process is: its cluster, name, id within the name, and address."""

    cluster: str
    broker_name: str
    broker_addr: str  # "host:port" where clients reach it
    broker_id: int  # MASTER_ID (0) or a slave id


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerData:
    """A broker name, its cluster, and the address of each member by broker id."""

    cluster: str
    broker_name: str
    broker_addrs: Mapping[int, str]  # broker id -> "host:port", sorted by id
    master_epoch: int = 0  # the highest master epoch known for the name (0: none)

    @property
    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicRouteData:
    """The route of one topic; both tuples are sorted by broker name."""

    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    # broker address -> where it serves RocketMQ 5's MessagingService, if it does
    grpc_v2_addrs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerLiveInfo:
    """The last registration heard from one broker address."""

    broker: BrokerIdentity
    last_update_timestamp_ms: int  # wall clock, for people
    last_update_monotonic_s: float  # monotonic clock, for expiry
    heartbeat_timeout_ms: int
    data_version: DataVersion


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterResult:
    master_addr: str  # live master of the same broker name, for a slave; else ""
    topic_configs_accepted: bool  # False: the data version was unchanged, only liveness refreshed
    master_ha_addr: str = ""  # that master's replication service, for a slave
    master_epoch: int = 0  # the highest master epoch known for the broker name
    stale_master: bool = False  # a master of an older epoch: refused, not routed
    full_table_needed: bool = False  # a delta on a base the table does not hold: send it all


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicUpdate:
    """How a registration's topic configs are meant (see :meth:`RouteTable.register_broker`).

    ``base_version=None``: the whole table (``chunk_count > 1``: chunk
    ``chunk_index`` of it); otherwise a delta on ``base_version``: the configs
    are topics created or changed since, ``deleted`` the topics deleted since.
    """

    base_version: DataVersion | None = None
    deleted: tuple[str, ...] = ()
    chunk_index: int = 0
    chunk_count: int = 1


FULL_TABLE = TopicUpdate()
