"""ReplicationMaster: a master's side of replication (RocketMQ's HAService and HAConnection).

Each replica keeps one ``Replicate`` stream open. The master answers its Hello
with where the replica's log must end (:func:`~pocketmq.broker.store.epochs.consistent_point`)
and then sends the log from there in frames of whole records, one sender per
stream, woken by every put and at least every heartbeat interval::

    replica ─ Hello{epochs, max} ─▶ handshake ─ Welcome{truncate_to, start} ─▶ replica
                                    sender: read_for_replica(offset, batch, epoch end)
    replica ─ Ack{max, flushed} ──▶ ack_offset of the replica ─▶ SYNC waiters

Acks cost both sides a gRPC message each. A frame says ``lazy_ack`` unless it
completes what a SYNC send waits for (or reads are gated, or, in controller
mode, the replica is not in the in-sync set yet): the replica then
acknowledges on a short timer or every few MiB instead of after each frame.
A SYNC send that comes to wait for records already sent lazily gets them
acknowledged at once: the sender follows up with an empty frame without
``lazy_ack``.

A lazy frame that would go out short (less than ``batch_bytes`` written past
its start, and neither a segment's nor an epoch's end in reach) waits up to
``linger_s`` for more records first (Kafka's ``linger.ms``): under a steady
ASYNC load a replica then gets about half as many frames, each of them full,
and spends less per message reading and applying them. A frame someone waits
for (it asks for an Ack) never lingers, and a SYNC send that arrives meanwhile
ends the wait::

    written past offset < batch_bytes ─ lazy ─▶ wait(wake or linger_s) ─▶ frame
                                      └ an Ack wanted ─────────────────▶ frame

A SYNC_MASTER send waits (:meth:`ReplicationMaster.wait_replicated`) until
``min_sync_replicas`` replicas acknowledged an offset at or past the end of
its records: one heap of waiters ordered by offset, released by each ack up
to the *commit point* (the k-th largest acknowledged offset). Too few
replicas in sync (connected, and less than ``ha_slave_fallbehind_max_bytes``
behind) is answered at once, as RocketMQ's ``SLAVE_NOT_AVAILABLE``.

No gRPC here: the servicer (:mod:`.servicer`) turns frames into these calls.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, TypeVar

from pocketmq.broker.store.epochs import EpochEntry, consistent_point
from pocketmq.broker.store.replication import replica_frame
from pocketmq.common.errors import PocketMQError

if TYPE_CHECKING:
    from pocketmq.broker.store.mapped_file import MappedFile
    from pocketmq.broker.store.message_store import DefaultMessageStore

__all__ = ["HandshakeRefusedError", "ReplicaState", "ReplicationMaster", "SyncOutcome", "Welcome"]

log = logging.getLogger(__name__)

_Frame = TypeVar("_Frame")


class SyncOutcome(Enum):
    OK = "OK"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


class HandshakeRefusedError(PocketMQError):
    """A replica's Hello the master cannot serve; ``reason`` is the Refuse.Reason name."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason  # the Refuse.Reason name
        self.message = message


@dataclass(frozen=True, slots=True, kw_only=True)
class Welcome:
    truncate_to: int  # -1 = drop the whole log
    start_offset: int
    master_epoch: int
    epochs: list[EpochEntry]
    min_offset: int
    max_offset: int


@dataclass(slots=True)
class ReplicaState:
    """What the master knows of one connected replica."""

    replica_id: int
    addr: str
    ack_offset: int
    flushed_offset: int = 0
    connected_at: float = field(default_factory=time.monotonic)
    last_frame_at: float = field(default_factory=time.monotonic)
    sent_offset: int = 0  # end of the last frame sent
    prompt_offset: int = 0  # end of the last frame sent without lazy_ack
    caught_up_target: int = 0  # an ack at or past this means caught up
    last_caught_up_at: float = 0.0  # monotonic s (0 = never)

    def lag(self, master_max: int) -> int:
        return max(0, master_max - self.ack_offset)


class ReplicationMaster:
    def __init__(
        self,
        store: DefaultMessageStore,
        *,
        broker_name: str,
        batch_bytes: int,
        heartbeat_s: float,
        housekeeping_s: float,
        fallbehind_max_bytes: int,
        min_sync_replicas: int,
        is_master: Callable[[], bool],
        on_replica_ahead: Callable[[str], None] | None = None,
        linger_s: float = 0.0,
    ) -> None:
        self._store = store
        self.store = store
        self.broker_name = broker_name
        self._batch_bytes = batch_bytes
        self._linger_s = linger_s
        self._heartbeat_s = heartbeat_s
        self._housekeeping_s = housekeeping_s
        self._fallbehind_max = fallbehind_max_bytes
        self._is_master = is_master
        self._on_replica_ahead = on_replica_ahead
        self.min_sync_replicas = min_sync_replicas
        self.replicas: dict[int, ReplicaState] = {}
        # Controller mode: the replica ids of the in-sync set the controller holds, and
        # of a change asked for and not yet confirmed. A SYNC send waits for all of both
        # (the union); None = no controller, min_sync_replicas of the live replicas.
        self.sync_state_set: frozenset[int] | None = None
        self.pending_set: frozenset[int] = frozenset()
        self.gated = False  # SYNC in controller mode: reads stop at the confirm offset
        # one event per sender: a sender that clears its own cannot swallow another's wake-up
        self._wakes: set[asyncio.Event] = set()
        self._waiters: list[tuple[int, int, asyncio.Future[SyncOutcome]]] = []
        self._seq = itertools.count()
        self.closed = False

    # -- the store's side ---------------------------------------------------------------
    @property
    def _epochs(self) -> list[EpochEntry]:
        return list(self._store.epochs.entries)

    @property
    def current_epoch(self) -> int:
        return self._store.epochs.last_epoch

    def on_append(self, end: int) -> None:
        """The commit log grew to *end* (an append listener of the store)."""
        self._wake_senders()

    def handshake(
        self,
        *,
        broker_name: str,
        replica_id: int,
        max_offset: int,
        epochs: list[EpochEntry],
        highest_epoch_seen: int,
    ) -> Welcome:
        """Where a joining replica's log must end, and where its copy starts."""
        store = self._store
        if broker_name != self.broker_name:
            raise HandshakeRefusedError(
                "WRONG_BROKER_NAME",
                f"this master serves broker name {self.broker_name!r}, not {broker_name!r}",
            )
        if not self._is_master():
            raise HandshakeRefusedError(
                "NOT_MASTER", f"this broker of {self.broker_name!r} is not its master any more"
            )
        mine = self._epochs
        my_epoch = mine[-1].epoch if mine else 0
        if highest_epoch_seen > my_epoch:
            raise HandshakeRefusedError(
                "STALE_EPOCH",
                f"the replica knows master epoch {highest_epoch_seen}; this "
                f"master holds epoch {my_epoch} and was replaced",
            )
        old = self.replicas.get(replica_id)
        if old is not None and time.monotonic() - old.last_frame_at < self._housekeeping_s:
            raise HandshakeRefusedError(
                "DUPLICATE_REPLICA",
                f"replica id {replica_id} of {self.broker_name!r} is already "
                f"connected from {old.addr}; give each replica its own "
                "broker_id",
            )
        my_min = store.commitlog.min_offset
        my_max = store.commitlog.max_offset
        if mine and max_offset > my_max and mine[-1] in epochs:
            # The replica holds records of this master's own term past its end: this
            # master lost them (a power loss under ASYNC_FLUSH) and, SYNC, may have
            # acknowledged them. Cutting them from the replica would lose them for
            # good, and writing on would give one term two different tails: refuse
            # and stop taking writes (RocketMQ #2706); promote the replica instead.
            why = (
                f"replica {replica_id} of {self.broker_name} holds epoch {my_epoch} up to "
                f"commit-log offset {max_offset}, past this master's end {my_max}: this "
                f"master lost {max_offset - my_max} bytes it wrote; promote that replica "
                "and restart this broker as its replica"
            )
            if self._on_replica_ahead is not None:
                self._on_replica_ahead(why)
            raise HandshakeRefusedError("REPLICA_AHEAD", why)
        point = consistent_point(epochs, max_offset, mine, my_max)
        if point is None or point < my_min:
            truncate, start = -1, my_min
        else:
            truncate, start = point, point
        if truncate != -1 and truncate < max_offset:
            log.warning(
                "replica %d of %s diverged: its log ends at %d, the shared history at "
                "%d; it cuts %d bytes",
                replica_id,
                self.broker_name,
                max_offset,
                point,
                max_offset - truncate,
            )
        return Welcome(
            truncate_to=truncate,
            start_offset=start,
            master_epoch=my_epoch,
            epochs=mine,
            min_offset=my_min,
            max_offset=my_max,
        )

    # -- a stream -----------------------------------------------------------------------
    def connected(self, replica_id: int, addr: str, start_offset: int) -> ReplicaState:
        state = ReplicaState(
            replica_id=replica_id,
            addr=addr,
            ack_offset=start_offset,
            sent_offset=start_offset,
            prompt_offset=start_offset,
            caught_up_target=start_offset,
        )
        self.replicas[replica_id] = state
        log.info(
            "replica %d of %s connected from %s, copying from offset %d",
            replica_id,
            self.broker_name,
            addr,
            start_offset,
        )
        self._release()
        return state

    def disconnected(self, state: ReplicaState) -> None:
        if self.replicas.get(state.replica_id) is state:
            del self.replicas[state.replica_id]
            log.info(
                "replica %d of %s disconnected at offset %d",
                state.replica_id,
                self.broker_name,
                state.ack_offset,
            )

    def on_ack(self, state: ReplicaState, max_offset: int, flushed_offset: int) -> None:
        state.last_frame_at = time.monotonic()
        if max_offset > state.ack_offset:
            state.ack_offset = max_offset
        if state.ack_offset >= state.caught_up_target:
            # caught up with what was sent before: RocketMQ's lastCaughtUpTime
            state.last_caught_up_at = state.last_frame_at
            state.caught_up_target = state.sent_offset
        state.flushed_offset = max(state.flushed_offset, flushed_offset)
        self._release()

    async def frames(
        self,
        state: ReplicaState,
        start_offset: int,
        encode: Callable[[int, int, int, memoryview | bytes, bool], _Frame],
    ) -> AsyncIterator[_Frame]:
        """The frames to send, as *encode* (offset, epoch, epoch start, records, lazy_ack)
        makes them; heartbeats have no records. *records* is a view into the mapped
        log, valid only during the call: *encode* copies it."""
        wake = asyncio.Event()
        self._wakes.add(wake)
        try:
            async for frame in self._frames(state, start_offset, wake, encode):
                yield frame
        finally:
            self._wakes.discard(wake)

    async def _frames(
        self,
        state: ReplicaState,
        start_offset: int,
        wake: asyncio.Event,
        encode: Callable[[int, int, int, memoryview | bytes, bool], _Frame],
    ) -> AsyncIterator[_Frame]:
        store = self._store
        offset = start_offset
        lingered = False
        while not self.closed:
            entries = self._epochs
            if time.monotonic() - state.last_frame_at > self._housekeeping_s:
                raise TimeoutError(
                    f"replica {state.replica_id} of {self.broker_name} sent "
                    f"nothing for {self._housekeeping_s:.0f} s"
                )
            epoch, start, stop = _epoch_at(entries, offset)
            span = replica_frame(store, offset, self._batch_bytes, stop)
            if span is not None:
                segment, lo, hi = span
                prompt = self.ack_wanted_by(state, offset + hi - lo)
                if not prompt and not lingered and self._may_grow(segment, lo, hi, offset, stop):
                    lingered = True  # once per frame: then it goes out as it is
                    await self._linger(state, offset, wake)
                    continue
                lingered = False
                with memoryview(segment.buffer) as whole, whole[lo:hi] as records:
                    frame = encode(offset, epoch, start, records, not prompt)
                offset += hi - lo
                state.sent_offset = offset
                if prompt:
                    state.prompt_offset = offset
                yield frame
                continue
            if state.prompt_offset < state.sent_offset and self.ack_wanted_by(
                state, state.sent_offset
            ):
                # a SYNC send waits for records that went out as lazy_ack: ask for the Ack
                state.prompt_offset = state.sent_offset
                yield encode(offset, epoch, start, b"", False)
                continue
            wake.clear()
            if store.commitlog.max_offset > offset:
                continue
            try:
                async with asyncio.timeout(self._heartbeat_s):  # never swallows a cancel
                    await wake.wait()
            except TimeoutError:
                yield encode(offset, epoch, start, b"", False)

    def _may_grow(
        self, segment: MappedFile, lo: int, hi: int, offset: int, stop: int | None
    ) -> bool:
        """Whether the frame [lo, hi) of *segment* at *offset* could take more records:
        lingering is on, it is short of ``batch_bytes``, and neither the segment's end
        nor the epoch's (*stop*) ended it."""
        return (
            self._linger_s > 0
            and hi - lo < self._batch_bytes
            and hi < segment.file_size
            and (stop is None or offset + hi - lo < stop)
        )

    async def _linger(self, state: ReplicaState, offset: int, wake: asyncio.Event) -> None:
        """Until ``batch_bytes`` are written past *offset*, an Ack is wanted of what is
        there, the master closes, or ``linger_s`` passed. A frame stopped short by a
        segment's or an epoch's end never comes here: more records would not join it."""
        commitlog = self._store.commitlog
        deadline = asyncio.get_running_loop().time() + self._linger_s
        while not self.closed:
            end = commitlog.max_offset
            if end - offset >= self._batch_bytes or self.ack_wanted_by(state, end):
                return
            wake.clear()
            try:
                async with asyncio.timeout_at(deadline):  # never swallows a cancel
                    await wake.wait()
            except TimeoutError:
                return

    def ack_wanted_by(self, state: ReplicaState, end: int) -> bool:
        """Whether the replica of *state* should acknowledge at once a frame that ends
        at *end*: it completes what a SYNC send waits for (the waiter with the lowest
        end offset is at the heap's top), or reads on this master stop at the confirm
        offset, or (controller mode) the replica is outside the in-sync set, which it
        joins once an Ack of it reaches the master's end. Else the frame goes out as
        ``lazy_ack``: a frame with the first part of a large batch releases nobody,
        and the one that ends the batch asks for the Ack."""
        if self.gated or (
            self.sync_state_set is not None and state.replica_id not in self.sync_state_set
        ):
            return True
        waiters = self._waiters
        while waiters and waiters[0][2].done():
            heapq.heappop(waiters)
        return bool(waiters) and waiters[0][0] <= end

    # -- SYNC_MASTER ----------------------------------------------------------------------
    def _live(self) -> list[ReplicaState]:
        """Replicas heard from within the housekeeping interval: a stream whose peer went
        silent (a partition, a frozen process) counts for nothing, even before it is
        dropped, so SYNC sends answer SLAVE_NOT_AVAILABLE at once instead of timing out."""
        since = time.monotonic() - self._housekeeping_s
        return [r for r in self.replicas.values() if r.last_frame_at >= since]

    def in_sync(self) -> int:
        master_max = self._store.commitlog.max_offset
        return sum(1 for r in self._live() if r.lag(master_max) < self._fallbehind_max)

    def members(self) -> frozenset[int]:
        """Replica ids a SYNC send waits for in controller mode: the set and a pending change."""
        return (self.sync_state_set or frozenset()) | self.pending_set

    def commit_point(self, need: int) -> int:
        """The offset *need* replicas have all acknowledged (-1 when fewer are connected);
        in controller mode the offset every member of the in-sync set acknowledged."""
        if self.sync_state_set is not None:
            point = self._store.commitlog.max_offset
            for member in self.members():
                state = self.replicas.get(member)
                if state is None:
                    return -1  # a member away: nothing more is committed (#6662)
                point = min(point, state.ack_offset)
            return point
        if need <= 0:
            return 1 << 62
        acks = sorted((r.ack_offset for r in self._live()), reverse=True)
        return acks[need - 1] if len(acks) >= need else -1

    async def wait_replicated(self, end_offset: int, timeout_s: float) -> SyncOutcome:
        """Until min_sync_replicas replicas hold the log up to *end_offset*, or the timeout."""
        need = self.min_sync_replicas
        if need <= 0:
            return SyncOutcome.OK
        if self.sync_state_set is not None:
            if len(self.members()) < need:
                return SyncOutcome.SLAVE_NOT_AVAILABLE
        elif self.in_sync() < need:
            return SyncOutcome.SLAVE_NOT_AVAILABLE
        if self.commit_point(need) >= end_offset:
            return SyncOutcome.OK
        loop = asyncio.get_running_loop()
        future: asyncio.Future[SyncOutcome] = loop.create_future()
        heapq.heappush(self._waiters, (end_offset, next(self._seq), future))
        self._wake_senders()
        # the future and one timer that answers it: no wait_for(shield(...)) helper
        # futures, and no timeout context (a SYNC send pays this once per call)
        timer = loop.call_later(timeout_s, _time_out, future)
        try:
            return await future
        finally:
            timer.cancel()
            if not future.done():
                future.cancel()

    def _release(self) -> None:
        waiters = self._waiters
        if self.gated:
            self.update_confirm()
        if not waiters:
            return
        point = self.commit_point(self.min_sync_replicas)
        while waiters and waiters[0][0] <= point:
            _end, _seq, future = heapq.heappop(waiters)
            if not future.done():
                future.set_result(SyncOutcome.OK)
        while waiters and waiters[0][2].done():
            heapq.heappop(waiters)

    def set_sync_state_set(
        self, members: frozenset[int] | None, *, gated: bool, gate_at: int = -1
    ) -> None:
        """The controller's in-sync set (replica ids); *gated*: reads stop at the
        confirm offset (SYNC with replicas in the set or joining it), else everything
        is visible. A closed gate opens at *gate_at* (default: the log's end)."""
        self.sync_state_set = members
        gate = self._store.gate
        self.gated = gated and bool(self.members())
        if self.gated:
            if not gate.on:
                gate.turn_on(gate_at if gate_at >= 0 else self._store.commitlog.max_offset)
            self.update_confirm()
        else:
            gate.turn_off()
        self._release()

    def set_pending(self, joining: frozenset[int], *, gated: bool, gate_at: int = -1) -> None:
        """An in-sync set change adding *joining* is asked of the controller (or settled,
        with an empty *joining*). Until it is settled a SYNC send waits for them too, and
        a SYNC master alone in its set gates its reads at *gate_at* (the offset every
        joiner already holds): the controller may write the change before this broker
        hears of it, and from then on may elect a joiner, so a record appended meanwhile
        must stay unread until the joiners hold it, or its queue offset could be given
        to another message after a failover."""
        self.pending_set = joining
        self.set_sync_state_set(self.sync_state_set, gated=gated, gate_at=gate_at)

    def update_confirm(self) -> None:
        """Move the confirm offset to what every member of the set acknowledged."""
        point = self.commit_point(self.min_sync_replicas)
        if point >= 0:
            self._store.gate.advance(point)

    def _wake_senders(self) -> None:
        for wake in self._wakes:
            wake.set()

    def close(self) -> None:
        """Stop every sender and fail every waiter (the broker stops or steps down)."""
        self.closed = True
        self.pending_set = frozenset()
        self._wake_senders()
        for _end, _seq, future in self._waiters:
            if not future.done():
                future.set_result(SyncOutcome.FLUSH_SLAVE_TIMEOUT)
        self._waiters.clear()

    def lag_table(self) -> dict[int, int]:
        master_max = self._store.commitlog.max_offset
        return {rid: r.lag(master_max) for rid, r in sorted(self.replicas.items())}


def _time_out(future: asyncio.Future[SyncOutcome]) -> None:
    if not future.done():
        future.set_result(SyncOutcome.FLUSH_SLAVE_TIMEOUT)


def _epoch_at(entries: list[EpochEntry], offset: int) -> tuple[int, int, int | None]:
    """(epoch, its start, the next term's start or None) of the term holding *offset*."""
    for i in range(len(entries) - 1, -1, -1):
        if entries[i].start_offset <= offset:
            nxt = entries[i + 1].start_offset if i + 1 < len(entries) else None
            return entries[i].epoch, entries[i].start_offset, nxt
    return 0, 0, entries[0].start_offset if entries else None
