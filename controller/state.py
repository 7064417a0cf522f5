"""The controller's state per broker name, and the pure rules that change it.

One record per broker name, stored as JSON (a file or one etcd key)::

    {"cluster_name": "c", "broker_name": "broker-a",
     "master_id": 2, "master_epoch": 3,            master_id 0 = no master
     "sync_state_set": [1, 2], "sss_epoch": 5,     the master and its in-sync replicas
     "replicas": {"1": {"addr": "h:10911", "ha_addr": "h:10912"}, ...},
     "next_id": 3}

Liveness (heartbeat times, incarnations, offsets) is not stored: the active
controller keeps it in memory (RocketMQ's ``DefaultBrokerHeartbeatManager``)
and a controller that takes over starts every broker's clock afresh.

Every function here is pure and returns a new :class:`GroupState` (or an
:class:`ControllerRefusalError`); the caller writes it with compare-and-set::

    election  candidates = live members of the SyncStateSet (all live replicas
              when unclean election is on), sorted by
              (epoch desc, max_offset desc, priority asc, broker id asc)
              -> master_epoch + 1, sss_epoch + 1, sync_state_set = {new master}
    alter     only from the current master with the current master_epoch and
              sss_epoch; the master stays in the set; added members are live
              -> sss_epoch + 1
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from pocketmq.controller.errors import ControllerError

__all__ = [
    "BrokerLive",
    "ControllerRefusalError",
    "GroupState",
    "ReplicaAddr",
    "alter_sync_state_set",
    "elect",
    "register",
]


class ControllerRefusalError(ControllerError):
    """A request the state does not allow; ``reason`` names the rule (gRPC detail)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaAddr:
    addr: str  # where clients reach the broker
    ha_addr: str = ""  # its replication service


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerLive:
    """What the active controller heard last from one broker (memory only)."""

    last_heartbeat_ms: int  # monotonic ms of the controller
    incarnation: str
    epoch: int
    max_offset: int
    confirm_offset: int = 0
    priority: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupState:
    cluster_name: str
    broker_name: str
    master_id: int = 0  # 0 = no master
    master_epoch: int = 0
    sync_state_set: frozenset[int] = frozenset()
    sss_epoch: int = 0
    replicas: Mapping[int, ReplicaAddr] = field(default_factory=dict)
    next_id: int = 1

    @property
    def master(self) -> ReplicaAddr | None:
        return self.replicas.get(self.master_id) if self.master_id else None

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "cluster_name": self.cluster_name,
                "broker_name": self.broker_name,
                "master_id": self.master_id,
                "master_epoch": self.master_epoch,
                "sync_state_set": sorted(self.sync_state_set),
                "sss_epoch": self.sss_epoch,
                "replicas": {
                    str(i): {"addr": r.addr, "ha_addr": r.ha_addr}
                    for i, r in sorted(self.replicas.items())
                },
                "next_id": self.next_id,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes | str) -> GroupState:
        d = json.loads(raw)
        return cls(
            cluster_name=d["cluster_name"],
            broker_name=d["broker_name"],
            master_id=int(d["master_id"]),
            master_epoch=int(d["master_epoch"]),
            sync_state_set=frozenset(int(i) for i in d["sync_state_set"]),
            sss_epoch=int(d["sss_epoch"]),
            replicas={
                int(i): ReplicaAddr(addr=r["addr"], ha_addr=r.get("ha_addr", ""))
                for i, r in d["replicas"].items()
            },
            next_id=int(d["next_id"]),
        )


def register(
    state: GroupState | None,
    *,
    cluster_name: str,
    broker_name: str,
    broker_id: int,
    addr: str,
    ha_addr: str,
) -> tuple[GroupState, int]:
    """*state* knowing the broker at *addr* (a new id when *broker_id* is 0 or unknown
    to a fresh state); returns (state, the broker's id). Unchanged when nothing is new."""
    if state is None:
        state = GroupState(cluster_name=cluster_name, broker_name=broker_name)
    if broker_id <= 0:
        broker_id = (
            next((i for i, r in state.replicas.items() if r.addr == addr), 0) or state.next_id
        )
    known = state.replicas.get(broker_id)
    if known == ReplicaAddr(addr=addr, ha_addr=ha_addr):
        return state, broker_id
    replicas = dict(state.replicas)
    replicas[broker_id] = ReplicaAddr(addr=addr, ha_addr=ha_addr)
    return replace(state, replicas=replicas, next_id=max(state.next_id, broker_id + 1)), broker_id


def elect(
    state: GroupState,
    live: Mapping[int, BrokerLive],
    *,
    unclean: bool = False,
    designated: int = 0,
    exclude: int = 0,
) -> GroupState:
    """A new master term, among the live in-sync replicas (:class:`ControllerRefusalError` if none).

    *live* holds only brokers heard from within the inactivity timeout; *exclude*
    (a master that restarted) competes only when nobody else can take over."""
    pool = set(state.replicas) if unclean else set(state.sync_state_set)
    candidates = [i for i in pool if i in live and i in state.replicas]
    if designated:
        if designated not in candidates:
            raise ControllerRefusalError(
                "NOT_ELIGIBLE",
                f"broker id {designated} of {state.broker_name} cannot be master: "
                + (
                    "it is not live"
                    if designated not in live
                    else f"it is not in the in-sync replica set {sorted(state.sync_state_set)}"
                ),
            )
        winner = designated
    else:
        if not candidates:
            raise ControllerRefusalError(
                "NO_ELIGIBLE_REPLICA",
                f"no live in-sync replica of {state.broker_name} can be master "
                f"(in-sync set {sorted(state.sync_state_set)}, live "
                f"{sorted(live)}); it stays without one until one returns",
            )
        others = [i for i in candidates if i != exclude] or candidates
        winner = min(
            others, key=lambda i: (-live[i].epoch, -live[i].max_offset, live[i].priority, i)
        )
    epoch = max(state.master_epoch, max((b.epoch for b in live.values()), default=0)) + 1
    return replace(
        state,
        master_id=winner,
        master_epoch=epoch,
        sync_state_set=frozenset({winner}),
        sss_epoch=state.sss_epoch + 1,
    )


def alter_sync_state_set(
    state: GroupState,
    live: Mapping[int, BrokerLive],
    *,
    master_id: int,
    master_epoch: int,
    sss_epoch: int,
    new_set: frozenset[int],
) -> GroupState:
    """The master's shrink or expand of its in-sync set, checked (CAS on epochs)."""
    name = state.broker_name
    if master_id != state.master_id or master_epoch != state.master_epoch:
        raise ControllerRefusalError(
            "FENCED_MASTER_EPOCH",
            f"broker id {master_id} in epoch {master_epoch} is not the master of "
            f"{name}; the master is id {state.master_id} in epoch "
            f"{state.master_epoch}",
        )
    if sss_epoch != state.sss_epoch:
        raise ControllerRefusalError(
            "FENCED_SYNC_STATE_SET_EPOCH",
            f"in-sync set epoch {sss_epoch} of {name} is stale; the controller "
            f"holds {state.sss_epoch}",
        )
    if master_id not in new_set:
        raise ControllerRefusalError(
            "MASTER_NOT_IN_SET",
            f"the new in-sync set {sorted(new_set)} of {name} lacks its master {master_id}",
        )
    unknown = sorted(new_set - set(state.replicas))
    if unknown:
        raise ControllerRefusalError(
            "UNKNOWN_REPLICA", f"broker ids {unknown} are not registered members of {name}"
        )
    dead = sorted(i for i in new_set - state.sync_state_set if i not in live)
    if dead:
        raise ControllerRefusalError(
            "REPLICA_NOT_LIVE",
            f"broker ids {dead} of {name} have not heartbeated the controller "
            "recently; they cannot join the in-sync set",
        )
    if new_set == state.sync_state_set:
        return state
    return replace(state, sync_state_set=frozenset(new_set), sss_epoch=state.sss_epoch + 1)
