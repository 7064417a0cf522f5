"""ReplicasManager: the active controller's logic (RocketMQ's ReplicasInfoManager and
BrokerHeartbeatManager), over a :class:`~pocketmq.controller.store.ControllerStore`.

::

    heartbeat(b) ──▶ register b if new (CAS) ─▶ liveness[b] = now ─▶ master restarted?
                     (new incarnation) ─▶ elect ─▶ ReplicaInfo
    run_once()   ──▶ every master silent for broker_inactive_ms ─▶ elect
    elect(name)  ──▶ state.elect() ─▶ CAS ─▶ watchers told
    alter(...)   ──▶ state.alter_sync_state_set() ─▶ CAS ─▶ watchers told

Liveness is memory only: :meth:`reset` (a controller that became active)
reloads the state and gives every known broker a fresh clock, so a takeover
never elects just because the new controller has not heard anyone yet. A
CAS that loses (another controller wrote first) reloads and answers with the
stored truth. Time comes from an injected monotonic clock in milliseconds,
so the rules are unit-tested without sleeping.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from pocketmq.controller.state import (
    BrokerLive,
    ControllerRefusalError,
    GroupState,
    alter_sync_state_set,
    elect,
    register,
)
from pocketmq.controller.store import ControllerStore

__all__ = ["ControllerConfigView", "Heartbeat", "ReplicasManager"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerConfigView:
    broker_inactive_ms: int = 3000  # a master silent this long is replaced
    elect_unclean_master: bool = False  # elect outside the in-sync set (may lose data)


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat:
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    ha_addr: str
    incarnation: str
    epoch: int
    max_offset: int
    confirm_offset: int = 0
    priority: int = 0


class ReplicasManager:
    def __init__(
        self, store: ControllerStore, config: ControllerConfigView, *, now_ms: Callable[[], int]
    ) -> None:
        self._store = store
        self._config = config
        self._now_ms = now_ms
        self._groups: dict[str, tuple[GroupState, int]] = {}
        self._live: dict[str, dict[int, BrokerLive]] = {}
        self._watchers: set[asyncio.Queue[GroupState]] = set()
        self._lock = asyncio.Lock()
        self.elections = 0

    # -- state --------------------------------------------------------------------------
    async def reset(self) -> None:
        """Reload the stored state; every registered broker counts as just heard from."""
        async with self._lock:
            self._groups = await self._store.load_all()
            now = self._now_ms()
            self._live = {
                name: {
                    i: BrokerLive(last_heartbeat_ms=now, incarnation="", epoch=0, max_offset=0)
                    for i in state.replicas
                }
                for name, (state, _v) in self._groups.items()
            }
        for state, _v in self._groups.values():
            self._tell(state)

    def get(self, broker_name: str) -> GroupState | None:
        held = self._groups.get(broker_name)
        return held[0] if held else None

    def groups(self) -> list[GroupState]:
        return [s for s, _v in self._groups.values()]

    def live(self, broker_name: str) -> dict[int, BrokerLive]:
        """Brokers of *broker_name* heard from within broker_inactive_ms."""
        since = self._now_ms() - self._config.broker_inactive_ms
        return {
            i: b for i, b in self._live.get(broker_name, {}).items() if b.last_heartbeat_ms >= since
        }

    async def _write(self, name: str, state: GroupState) -> GroupState:
        """CAS *state* over the version we hold; on a lost race reload and refuse."""
        held = self._groups.get(name)
        if held is not None and held[0] == state:
            return state
        version = await self._store.compare_and_set(name, state, held[1] if held else 0)
        if version is None:
            self._groups = await self._store.load_all()
            raise ControllerRefusalError(
                "CONCURRENT_UPDATE", f"the state of {name} changed under this controller; retry"
            )
        self._groups[name] = (state, version)
        self._tell(state)
        return state

    # -- watchers -----------------------------------------------------------------------
    def watch(self) -> asyncio.Queue[GroupState]:
        queue: asyncio.Queue[GroupState] = asyncio.Queue(maxsize=256)
        self._watchers.add(queue)
        return queue

    def unwatch(self, queue: asyncio.Queue[GroupState]) -> None:
        self._watchers.discard(queue)

    def _tell(self, state: GroupState) -> None:
        for queue in list(self._watchers):
            if queue.full():  # a watcher that does not read: drop it, it reconnects
                self._watchers.discard(queue)
                continue
            queue.put_nowait(state)

    # -- requests -----------------------------------------------------------------------
    async def heartbeat(self, hb: Heartbeat) -> tuple[GroupState, int]:
        """Record *hb*; returns the state and the broker's (possibly new) id."""
        async with self._lock:
            name = hb.broker_name
            held = self.get(name)
            state, broker_id = register(
                held,
                cluster_name=hb.cluster_name,
                broker_name=name,
                broker_id=hb.broker_id,
                addr=hb.broker_addr,
                ha_addr=hb.ha_addr,
            )
            before = self._live.setdefault(name, {}).get(broker_id)
            self._live[name][broker_id] = BrokerLive(
                last_heartbeat_ms=self._now_ms(),
                incarnation=hb.incarnation,
                epoch=hb.epoch,
                max_offset=hb.max_offset,
                confirm_offset=hb.confirm_offset,
                priority=hb.priority,
            )
            if state.master_id == 0 and not state.sync_state_set:
                # The first broker of a new group is its master at once.
                epoch = max(state.master_epoch, hb.epoch) + 1
                state = replace(
                    state,
                    master_id=broker_id,
                    master_epoch=epoch,
                    sync_state_set=frozenset({broker_id}),
                    sss_epoch=state.sss_epoch + 1,
                )
                log.warning(
                    "controller: %s id %d at %s is the first master of %s (epoch %d)",
                    name,
                    broker_id,
                    hb.broker_addr,
                    name,
                    epoch,
                )
            state = await self._write(name, state)
            restarted = (
                state.master_id == broker_id
                and before is not None
                and before.incarnation
                and before.incarnation != hb.incarnation
            )
            if restarted or state.master_id == 0:
                why = "its master restarted" if restarted else "it has no master"
                state = await self._elect_locked(
                    name, why, exclude=broker_id if restarted else 0, quiet=state.master_id == 0
                )
            return state, broker_id

    async def run_once(self) -> list[str]:
        """Elect for every broker name whose master stopped heartbeating; names elected."""
        elected = []
        async with self._lock:
            for name, (state, _v) in list(self._groups.items()):
                if state.master_id and state.master_id not in self.live(name):
                    try:
                        await self._elect_locked(
                            name, f"master id {state.master_id} stopped heartbeating"
                        )
                        elected.append(name)
                    except ControllerRefusalError as exc:
                        log.debug("controller: %s", exc)
        return elected

    async def elect_master(self, broker_name: str, designated: int = 0) -> GroupState:
        async with self._lock:
            if self.get(broker_name) is None:
                raise ControllerRefusalError(
                    "UNKNOWN_BROKER_NAME",
                    f"the controller knows no broker name {broker_name!r}; known: "
                    f"{sorted(self._groups) or 'none'}",
                )
            return await self._elect_locked(broker_name, "an admin asked", designated=designated)

    async def _elect_locked(
        self, name: str, why: str, *, designated: int = 0, exclude: int = 0, quiet: bool = False
    ) -> GroupState:
        state = self.get(name)
        assert state is not None
        try:
            new = elect(
                state,
                self.live(name),
                unclean=self._config.elect_unclean_master,
                designated=designated,
                exclude=exclude,
            )
        except ControllerRefusalError:
            if state.master_id and state.master_id not in self.live(name):
                # No replacement: the group has no master until one returns.
                await self._write(name, replace(state, master_id=0))
            if quiet:
                return self.get(name) or state
            raise
        new = await self._write(name, new)
        self.elections += 1
        log.warning(
            "controller: %s elected id %d (%s) master of %s in epoch %d: %s",
            name,
            new.master_id,
            new.replicas[new.master_id].addr,
            name,
            new.master_epoch,
            why,
        )
        return new

    async def alter_sync_state_set(
        self,
        broker_name: str,
        *,
        master_id: int,
        master_epoch: int,
        sss_epoch: int,
        new_set: frozenset[int],
    ) -> GroupState:
        async with self._lock:
            state = self.get(broker_name)
            if state is None:
                raise ControllerRefusalError(
                    "UNKNOWN_BROKER_NAME", f"the controller knows no broker name {broker_name!r}"
                )
            new = alter_sync_state_set(
                state,
                self.live(broker_name),
                master_id=master_id,
                master_epoch=master_epoch,
                sss_epoch=sss_epoch,
                new_set=new_set,
            )
            if new != state:
                log.info(
                    "controller: in-sync set of %s is now %s (epoch %d)",
                    broker_name,
                    sorted(new.sync_state_set),
                    new.sss_epoch,
                )
            return await self._write(broker_name, new)
