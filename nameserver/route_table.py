"""The route table: which brokers serve which topics, and which brokers are alive.

This is RocketMQ's ``RouteInfoManager``, pure: no gRPC, no I/O, no event loop;
time comes from an injected :class:`~pocketmq.common.clock.Clock`, so tests
step it by hand. It is used from one event loop and takes no locks. Its
tables, in RocketMQ's names::

    topic_queue_table   topic        -> {broker name -> QueueData}
    broker_addr_table   broker name  -> cluster, {broker id -> "host:port"}   (id 0 = master)
    cluster_addr_table  cluster      -> {broker name}
    broker_live_table   "host:port"  -> BrokerLiveInfo (last registration, timeout, data version)

Rules, as in RocketMQ:

* Only a master's (broker id 0) registration carries the topic routes of its
  broker name; slaves add their address and their liveness.
* A registration whose data version equals the one held for that broker only
  refreshes liveness (``counters.liveness_refreshes``); a new version, or the
  broker's first registration, replaces the routes of its broker name with the
  topic configs it sent (``counters.topic_config_updates``). Topics missing
  from the new set stop being routed to that broker name.
* A broker silent longer than its heartbeat timeout is removed by
  :meth:`RouteTable.scan_not_active_brokers`. When the last address of a
  broker name goes, its routes go too; a topic left with no broker name is no
  longer routable.

Its values (who a broker is, a route, a registration's answer) live in
:mod:`.route_model` and are re-exported here.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pocketmq.common.clock import Clock
from pocketmq.nameserver.errors import RegistrationConflictError
from pocketmq.nameserver.route_model import (
    FULL_TABLE,
    MASTER_ID,
    PERM_INHERIT,
    PERM_PRIORITY,
    PERM_READ,
    PERM_WRITE,
    BrokerData,
    BrokerIdentity,
    BrokerLiveInfo,
    DataVersion,
    QueueData,
    RegisterResult,
    TopicRouteData,
    TopicUpdate,
)
from pocketmq.nameserver.topic_staging import TopicStaging

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
    "ClusterSnapshot",
    "DataVersion",
    "QueueData",
    "RegisterResult",
    "RegisteredTopicConfig",
    "RouteTable",
    "RouteTableCounters",
    "TopicRouteData",
    "TopicUpdate",
]

logger = logging.getLogger(__name__)

# -------------------------------------------------------------------------- values


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisteredTopicConfig:
    """One topic as a broker configures it."""

    topic_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_READ | PERM_WRITE
    order: bool = False
    topic_sys_flag: int = 0


# Held for a broker whose routes this table does not have (it registered without
# them): never equal to a broker's version, so its next full table is taken.
_NO_VERSION = DataVersion(-1, -1)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSnapshot:
    broker_addr_table: Mapping[str, BrokerData]  # broker name -> members
    cluster_addr_table: Mapping[str, tuple[str, ...]]  # cluster -> sorted broker names
    live_brokers: tuple[BrokerLiveInfo, ...]  # by cluster, broker name, id


@dataclass(slots=True)
class RouteTableCounters:
    """What the table has done, for tests and runtime stats."""

    registrations: int = 0  # RegisterBroker calls accepted
    topic_config_updates: int = 0  # registrations that rebuilt a broker name's routes
    liveness_refreshes: int = 0  # registrations that only refreshed liveness
    unregistrations: int = 0  # brokers removed by UnregisterBroker
    expirations: int = 0  # brokers removed for silence


@dataclass(slots=True)
class _BrokerEntry:
    cluster: str
    addrs: dict[int, str] = field(default_factory=dict)  # broker id -> address


# --------------------------------------------------------------------------- table


class RouteTable:
    """Topic routes and broker liveness (RocketMQ RouteInfoManager)."""

    def __init__(self, *, clock: Clock, default_heartbeat_timeout_ms: int) -> None:
        if default_heartbeat_timeout_ms <= 0:
            raise ValueError(
                f"default_heartbeat_timeout_ms must be positive, got {default_heartbeat_timeout_ms}"
            )
        self._clock = clock
        self._default_heartbeat_timeout_ms = default_heartbeat_timeout_ms
        self._topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self._topics_by_broker_name: dict[str, set[str]] = {}  # reverse of the above
        self._broker_addr_table: dict[str, _BrokerEntry] = {}
        self._cluster_addr_table: dict[str, set[str]] = {}
        self._broker_live_table: dict[str, BrokerLiveInfo] = {}
        self._grpc_v2_addrs: dict[str, str] = {}  # broker address -> its v2 MessagingService
        self._ha_addrs: dict[str, str] = {}  # broker address -> its replication service
        self._master_epochs: dict[str, int] = {}  # broker name -> highest master epoch seen
        self._staging = TopicStaging()  # chunks of full tables until the last arrives
        self._sorted_topics: list[str] | None = None  # topics() index; None = rebuild
        self.counters = RouteTableCounters()

    # ---------------------------------------------------------------- registration

    def register_broker(
        self,
        broker: BrokerIdentity,
        data_version: DataVersion,
        topic_configs: Iterable[RegisteredTopicConfig],
        *,
        heartbeat_timeout_ms: int | None = None,
        grpc_v2_addr: str = "",
        ha_addr: str = "",
        master_epoch: int = 0,
        update: TopicUpdate = FULL_TABLE,
    ) -> RegisterResult:
        """Record a broker's registration (REGISTER_BROKER).

        *topic_configs* is iterated only when the configs are taken (a master's
        first registration or a new *data_version*), and completely before
        anything changes: an exception it raises leaves the table untouched.
        Raises :class:`RegistrationConflictError` when the broker name is live
        in another cluster. *update* says whether *topic_configs* is the whole
        table (or a chunk of it) or a delta; a delta on a version other than the
        one held changes no route and answers ``full_table_needed``.
        """
        addr = broker.broker_addr
        known_epoch = self._master_epochs.get(broker.broker_name, 0)
        if broker.broker_id == MASTER_ID and master_epoch < known_epoch:
            return self._refuse_stale_master(broker, master_epoch, known_epoch)
        if broker.broker_id == MASTER_ID:
            self._master_epochs[broker.broker_name] = master_epoch
        live = self._broker_live_table.get(addr)
        known = live is not None and live.broker == broker
        held = live.data_version if known and live is not None else _NO_VERSION
        mode, configs = self._staging.topic_mode(broker, held, data_version, topic_configs, update)
        take_configs = mode in ("full", "delta")
        full_needed = mode == "need_full"
        if mode in ("none", "need_full") and broker.broker_id == MASTER_ID and data_version != held:
            data_version = held  # what it holds stays what it says it holds
        self._check_cluster(broker)

        if live is not None and not known:
            self._forget_previous(live.broker, broker)
        self._add_member(broker)
        self._take_topics(broker, mode, configs, update, data_version, known=known)
        self._mark_alive(
            broker,
            data_version,
            heartbeat_timeout_ms=heartbeat_timeout_ms,
            grpc_v2_addr=grpc_v2_addr,
            ha_addr=ha_addr,
        )
        self.counters.registrations += 1
        master = self._live_master_of(broker)
        return RegisterResult(
            master_addr=master,
            topic_configs_accepted=take_configs,
            master_ha_addr=self._ha_addrs.get(master, "") if master else "",
            master_epoch=self._master_epochs.get(broker.broker_name, 0),
            full_table_needed=full_needed,
        )

    def _forget_previous(self, previous: BrokerIdentity, broker: BrokerIdentity) -> None:
        """An address registers as another broker than it was: the old one goes."""
        logger.info(
            "broker %s re-registers as %s/%s id %d (was %s/%s id %d)",
            broker.broker_addr,
            broker.cluster,
            broker.broker_name,
            broker.broker_id,
            previous.cluster,
            previous.broker_name,
            previous.broker_id,
        )
        self._remove(previous)

    def _take_topics(
        self,
        broker: BrokerIdentity,
        mode: str,
        configs: tuple[RegisteredTopicConfig, ...],
        update: TopicUpdate,
        data_version: DataVersion,
        *,
        known: bool,
    ) -> None:
        """Apply what :meth:`TopicStaging.topic_mode` decided to the broker name's routes."""
        addr = broker.broker_addr
        if mode == "delta":
            self._apply_delta(broker.broker_name, configs, update.deleted)
            self.counters.topic_config_updates += 1
            logger.debug(
                "broker %s (%s/%s) changed %d topics and deleted %d, data version %s",
                addr,
                broker.cluster,
                broker.broker_name,
                len(configs),
                len(update.deleted),
                tuple(data_version),
            )
        elif mode == "full":
            self._replace_routes(broker.broker_name, configs)
            self.counters.topic_config_updates += 1
            logger.info(
                "broker %s (%s/%s id %d) registered %d topics, data version %s",
                addr,
                broker.cluster,
                broker.broker_name,
                broker.broker_id,
                len(configs),
                tuple(data_version),
            )
        else:
            self.counters.liveness_refreshes += 1
            if not known:
                logger.info(
                    "broker %s (%s/%s id %d) registered",
                    addr,
                    broker.cluster,
                    broker.broker_name,
                    broker.broker_id,
                )

    def _mark_alive(
        self,
        broker: BrokerIdentity,
        data_version: DataVersion,
        *,
        heartbeat_timeout_ms: int | None,
        grpc_v2_addr: str,
        ha_addr: str,
    ) -> None:
        """The broker's liveness, and where it serves v2 clients and replication."""
        addr = broker.broker_addr
        self._broker_live_table[addr] = BrokerLiveInfo(
            broker=broker,
            last_update_timestamp_ms=self._clock.now_ms(),
            last_update_monotonic_s=self._clock.monotonic(),
            heartbeat_timeout_ms=heartbeat_timeout_ms or self._default_heartbeat_timeout_ms,
            data_version=data_version,
        )
        if grpc_v2_addr:
            self._grpc_v2_addrs[addr] = grpc_v2_addr
        else:
            self._grpc_v2_addrs.pop(addr, None)
        if ha_addr:
            self._ha_addrs[addr] = ha_addr
        else:
            self._ha_addrs.pop(addr, None)

    def _refuse_stale_master(
        self, broker: BrokerIdentity, epoch: int, known_epoch: int
    ) -> RegisterResult:
        """A master of an older term (replaced by a promotion): not routed any more."""
        live = self._broker_live_table.get(broker.broker_addr)
        if live is not None and live.broker.broker_name == broker.broker_name:
            self._remove(live.broker)
        logger.warning(
            "refused broker %s as master of %s/%s: its epoch %d is older than %d; "
            "it was replaced and must rejoin as a replica",
            broker.broker_addr,
            broker.cluster,
            broker.broker_name,
            epoch,
            known_epoch,
        )
        entry = self._broker_addr_table.get(broker.broker_name)
        master = entry.addrs.get(MASTER_ID, "") if entry is not None else ""
        if master not in self._broker_live_table:
            master = ""
        return RegisterResult(
            master_addr=master,
            topic_configs_accepted=False,
            master_ha_addr=self._ha_addrs.get(master, "") if master else "",
            master_epoch=known_epoch,
            stale_master=True,
        )

    def unregister_broker(self, broker: BrokerIdentity) -> bool:
        """Remove a broker at once (UNREGISTER_BROKER); False if it was not known."""
        removed = self._remove(broker)
        if removed:
            self.counters.unregistrations += 1
            logger.info(
                "broker %s (%s/%s id %d) unregistered",
                broker.broker_addr,
                broker.cluster,
                broker.broker_name,
                broker.broker_id,
            )
        return removed

    def scan_not_active_brokers(self) -> list[BrokerLiveInfo]:
        """Remove every broker silent past its heartbeat timeout; returns them."""
        now_s = self._clock.monotonic()
        expired = [
            info
            for info in self._broker_live_table.values()
            if now_s - info.last_update_monotonic_s > info.heartbeat_timeout_ms / 1000
        ]
        for info in expired:
            self._remove(info.broker)
            self.counters.expirations += 1
            logger.warning(
                "broker %s (%s/%s id %d) expired: silent for %.1f s, timeout %d ms",
                info.broker.broker_addr,
                info.broker.cluster,
                info.broker.broker_name,
                info.broker.broker_id,
                now_s - info.last_update_monotonic_s,
                info.heartbeat_timeout_ms,
            )
        return expired

    # ---------------------------------------------------------------------- queries

    def get_route(self, topic: str) -> TopicRouteData | None:
        """The topic's route (GET_ROUTEINFO_BY_TOPIC), or None when nobody serves it."""
        queue_map = self._topic_queue_table.get(topic)
        if not queue_map:
            return None
        names = sorted(queue_map)
        broker_datas = tuple(self._broker_data(n) for n in names if n in self._broker_addr_table)
        if not broker_datas:
            return None
        v2_addrs = {
            a: self._grpc_v2_addrs[a]
            for b in broker_datas
            for a in b.broker_addrs.values()
            if a in self._grpc_v2_addrs
        }
        return TopicRouteData(
            queue_datas=tuple(queue_map[n] for n in names),
            broker_datas=broker_datas,
            grpc_v2_addrs=v2_addrs,
        )

    def topics(self) -> list[str]:
        """Every routable topic, sorted (GET_ALL_TOPIC_LIST_FROM_NAMESERVER)."""
        return list(self._topic_index())

    def topic_page(
        self,
        start_after: str,
        limit: int,
    ) -> tuple[list[tuple[str, tuple[QueueData, ...]]], dict[str, BrokerData], str]:
        """Up to *limit* topics after *start_after*, each with its queue data, the
        brokers they name, and the name to continue after ("" at the end). Costs the
        page, plus one sort of the names after the table changed."""
        index = self._topic_index()
        start = bisect.bisect_right(index, start_after) if start_after else 0
        names = index[start : start + limit]
        rows = []
        brokers: dict[str, BrokerData] = {}
        for topic in names:
            queue_map = self._topic_queue_table[topic]
            rows.append((topic, tuple(queue_map[n] for n in sorted(queue_map))))
            for name in queue_map:
                if name not in brokers and name in self._broker_addr_table:
                    brokers[name] = self._broker_data(name)
        more = start + limit < len(index)
        return rows, brokers, names[-1] if more and names else ""

    def routes_of(
        self,
        names: Iterable[str],
    ) -> tuple[list[tuple[str, tuple[QueueData, ...]]], dict[str, BrokerData], list[str]]:
        """The queue data of each topic in *names* that a live broker serves, the brokers
        they name, and the names nobody serves. Costs the names asked, not the table."""
        rows = []
        brokers: dict[str, BrokerData] = {}
        missing = []
        for topic in names:
            queue_map = self._topic_queue_table.get(topic) or {}
            served = sorted(n for n in queue_map if n in self._broker_addr_table)
            if not served:
                missing.append(topic)
                continue
            rows.append((topic, tuple(queue_map[n] for n in served)))
            for name in served:
                if name not in brokers:
                    brokers[name] = self._broker_data(name)
        return rows, brokers, missing

    def _topic_index(self) -> list[str]:
        if self._sorted_topics is None:
            self._sorted_topics = sorted(self._topic_queue_table)
        return self._sorted_topics

    @property
    def topic_count(self) -> int:
        return len(self._topic_queue_table)

    def cluster_info(self) -> ClusterSnapshot:
        """Brokers by name, broker names by cluster, and liveness (GET_BROKER_CLUSTER_INFO)."""
        return ClusterSnapshot(
            broker_addr_table={n: self._broker_data(n) for n in sorted(self._broker_addr_table)},
            cluster_addr_table={
                c: tuple(sorted(names)) for c, names in sorted(self._cluster_addr_table.items())
            },
            live_brokers=tuple(
                sorted(
                    self._broker_live_table.values(),
                    key=lambda i: (i.broker.cluster, i.broker.broker_name, i.broker.broker_id),
                )
            ),
        )

    def live_broker(self, broker_addr: str) -> BrokerLiveInfo | None:
        return self._broker_live_table.get(broker_addr)

    # ---------------------------------------------------------------------- helpers

    def _check_cluster(self, broker: BrokerIdentity) -> None:
        entry = self._broker_addr_table.get(broker.broker_name)
        if entry is None or entry.cluster == broker.cluster:
            return
        others = {i: a for i, a in entry.addrs.items() if a != broker.broker_addr}
        if others:
            members = ", ".join(f"id {i} at {a}" for i, a in sorted(others.items()))
            raise RegistrationConflictError(
                f"broker name {broker.broker_name!r} is registered in cluster "
                f"{entry.cluster!r} ({members}); {broker.broker_addr} registers it in cluster "
                f"{broker.cluster!r}. Give this broker another name, or stop the others first"
            )

    def _add_member(self, broker: BrokerIdentity) -> None:
        name = broker.broker_name
        entry = self._broker_addr_table.get(name)
        if entry is None:
            entry = self._broker_addr_table[name] = _BrokerEntry(cluster=broker.cluster)
        elif entry.cluster != broker.cluster:
            # Only this address was left in the old cluster (_check_cluster): move it.
            self._discard_from_cluster(entry.cluster, name)
            entry.cluster = broker.cluster
        self._cluster_addr_table.setdefault(broker.cluster, set()).add(name)
        previous = entry.addrs.get(broker.broker_id)
        if previous is not None and previous != broker.broker_addr:
            logger.warning(
                "broker %s/%s id %d moves from %s to %s; dropping %s",
                broker.cluster,
                name,
                broker.broker_id,
                previous,
                broker.broker_addr,
                previous,
            )
            self._broker_live_table.pop(previous, None)
        entry.addrs[broker.broker_id] = broker.broker_addr

    def _remove(self, broker: BrokerIdentity) -> bool:
        # Members and live entries correspond one to one; remove both or neither,
        # so a stale request naming the wrong broker cannot orphan a member.
        addr = broker.broker_addr
        live = self._broker_live_table.get(addr)
        removed = False
        if (
            live is not None
            and live.broker.broker_name == broker.broker_name
            and live.broker.broker_id == broker.broker_id
        ):
            del self._broker_live_table[addr]
            self._staging.forget(addr)
            self._grpc_v2_addrs.pop(addr, None)
            self._ha_addrs.pop(addr, None)
            removed = True
        entry = self._broker_addr_table.get(broker.broker_name)
        if entry is None or entry.addrs.get(broker.broker_id) != addr:
            return removed
        del entry.addrs[broker.broker_id]
        if not entry.addrs:
            del self._broker_addr_table[broker.broker_name]
            self._discard_from_cluster(entry.cluster, broker.broker_name)
            self._replace_routes(broker.broker_name, ())
        return True

    def _discard_from_cluster(self, cluster: str, broker_name: str) -> None:
        names = self._cluster_addr_table.get(cluster)
        if names is not None:
            names.discard(broker_name)
            if not names:
                del self._cluster_addr_table[cluster]

    def _replace_routes(self, broker_name: str, configs: Iterable[RegisteredTopicConfig]) -> None:
        new = {
            c.topic_name: QueueData(
                broker_name=broker_name,
                read_queue_nums=c.read_queue_nums,
                write_queue_nums=c.write_queue_nums,
                perm=c.perm,
            )
            for c in configs
        }
        for topic in self._topics_by_broker_name.pop(broker_name, set()) - new.keys():
            queue_map = self._topic_queue_table[topic]
            del queue_map[broker_name]
            if not queue_map:
                del self._topic_queue_table[topic]
                self._sorted_topics = None
        for topic, queue_data in new.items():
            if topic not in self._topic_queue_table:
                self._sorted_topics = None
            self._topic_queue_table.setdefault(topic, {})[broker_name] = queue_data
        if new:
            self._topics_by_broker_name[broker_name] = set(new)

    def _apply_delta(
        self, broker_name: str, configs: Iterable[RegisteredTopicConfig], deleted: Iterable[str]
    ) -> None:
        """Routes of *broker_name*: *configs* added or changed, *deleted* removed."""
        mine = self._topics_by_broker_name.setdefault(broker_name, set())
        for topic in deleted:
            if topic in mine:
                mine.discard(topic)
                queue_map = self._topic_queue_table[topic]
                del queue_map[broker_name]
                if not queue_map:
                    del self._topic_queue_table[topic]
                    self._sorted_topics = None
        for c in configs:
            if c.topic_name not in self._topic_queue_table:
                self._sorted_topics = None
            self._topic_queue_table.setdefault(c.topic_name, {})[broker_name] = QueueData(
                broker_name=broker_name,
                read_queue_nums=c.read_queue_nums,
                write_queue_nums=c.write_queue_nums,
                perm=c.perm,
            )
            mine.add(c.topic_name)
        if not mine:
            del self._topics_by_broker_name[broker_name]

    def _broker_data(self, broker_name: str) -> BrokerData:
        entry = self._broker_addr_table[broker_name]
        return BrokerData(
            cluster=entry.cluster,
            broker_name=broker_name,
            broker_addrs=dict(sorted(entry.addrs.items())),
            master_epoch=self._master_epochs.get(broker_name, 0),
        )

    def _live_master_of(self, broker: BrokerIdentity) -> str:
        if broker.broker_id == MASTER_ID:
            return ""
        master = self._broker_addr_table[broker.broker_name].addrs.get(MASTER_ID)
        return master if master is not None and master in self._broker_live_table else ""
