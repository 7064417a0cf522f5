"""HaClient: a replica's side of replication (RocketMQ's HAClient and SlaveSynchronize).

One task keeps a ``Replicate`` stream open to the master of the broker name
and reconnects with a back-off when it breaks::

    master address? ─ no ─▶ wait for it (the nameserver tells, or ha_master_address)
    Hello{epochs, max, highest epoch seen} ─▶ Welcome{truncate_to, start}
        truncate_to < max ─▶ store.truncate_to (a diverged tail, cut by epoch; logged)
        truncate_to = -1  ─▶ store.wipe (no history in common)
    Data{offset, epoch, records} ─▶ a new epoch goes into the epoch file first,
        then store.append_replicated (checked, appended) ─▶ Ack{max, flushed}
        (at once, or, for frames the master marks lazy_ack, on a timer: AckDue),
        then the frame's dispatch (consume queues, index) while the Ack travels

A Refuse ends the session: STALE_EPOCH means the address is a replaced master,
and the client waits for a newer one. Every ``metadata_interval_s``, once per
session, and soon after records of a topic it had no queue of (at most every
``METADATA_MIN_GAP_S``) it copies the master's topic configs, consumer offsets
and delay-level progress (``on_topics`` and ``on_progress`` apply them). Topic
configs apply at once. The offsets and the progress wait until this log reaches
the master's log end at the time of the snapshot (``log_end_offset``), in a
session past its Welcome (before it, this log may hold a tail the handshake cuts)::

    snapshot ─▶ topics now
             └▶ following, log_end_offset <= my max? ─ yes ─▶ progress now
                                                      └ no ─▶ held (one; a newer one
                                                              waits for the next sync)
    Welcome, each frame ─▶ held and log_end_offset <= my max? ─▶ progress now
    Welcome of another master epoch ─▶ held dropped

A replica whose handshake cut a diverged tail (or dropped its whole log) takes
the next progress as it is, not by maximum: its own offsets and delay progress
may count records of that tail, which the master never had, and kept by maximum
they would skip the master's records stored at the same queue offsets.

The metadata sync can overtake the records it describes. Taken at once, a
level's progress past a delayed message's re-put the replica never got loses
that message when the replica is promoted (no broker re-puts it), and a
consumer offset past the replica's queue makes a promoted replica's consumers
skip the new records stored at those queue offsets.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc

from pocketmq.broker.ha import metadata, wire
from pocketmq.broker.ha.wire import DataFrame
from pocketmq.broker.store.epochs import EpochEntry
from pocketmq.broker.store.replication import ReplicationError, dispatch_appended
from pocketmq.common.aio import cancel_and_wait, wait_event
from pocketmq.v1 import common_pb2, ha_pb2, ha_pb2_grpc

if TYPE_CHECKING:
    from pocketmq.broker.store.message_store import DefaultMessageStore

__all__ = ["AckDue", "HaClient", "ReplicaStatus"]

log = logging.getLogger(__name__)

METADATA_MIN_GAP_S = 0.2  # between metadata syncs a new topic asks for

REPLICATE = "/pocketmq.v1.HaService/Replicate"
GET_METADATA = "/pocketmq.v1.HaService/GetMetadata"
STREAM_METADATA = "/pocketmq.v1.HaService/StreamMetadata"
_BACKOFF_S = (0.05, 0.2, 0.5, 1.0, 2.0)
LAZY_ACK_S = 0.05  # a lazy_ack frame is acknowledged within this long
LAZY_ACK_BYTES = 4 << 20  # or once this many bytes of them are applied


class AckDue:
    """When a replica's next Ack is due (an Ack costs both sides a gRPC message).

    ``applied`` after each frame: a frame without ``lazy_ack`` (a SYNC send waits,
    a heartbeat, a master that never sets the flag) makes it due at once; lazy ones
    after *interval_s* or *max_bytes* of them. ``sent`` when an Ack goes out::

        frame (not lazy) ─────────────────────────▶ due()
        frame (lazy) ─ unacked += len ─ >= max_bytes ─▶ due()
                                      └ first since sent: timer(interval_s) ─▶ due()
    """

    def __init__(
        self,
        due: Callable[[], None],
        *,
        interval_s: float = LAZY_ACK_S,
        max_bytes: int = LAZY_ACK_BYTES,
    ) -> None:
        self._due = due
        self._interval_s = interval_s
        self._max_bytes = max_bytes
        self.unacked_bytes = 0
        self._timer: asyncio.TimerHandle | None = None

    def applied(self, size: int, *, lazy: bool) -> None:
        if not lazy:
            self._due()
            return
        self.unacked_bytes += size
        if self.unacked_bytes >= self._max_bytes:
            self._due()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._interval_s, self._due)

    def sent(self) -> None:
        self.unacked_bytes = 0
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


@dataclass(slots=True)
class ReplicaStatus:
    """What ``cluster list`` and the runtime info show of a replica."""

    master_ha_addr: str = ""
    connected: bool = False
    master_epoch: int = 0
    master_max_offset: int = 0
    last_error: str = ""
    sessions: int = 0
    truncated_bytes: int = 0

    def lag(self, my_max: int) -> int:
        return max(0, self.master_max_offset - my_max)


class HaClient:
    def __init__(
        self,
        store: DefaultMessageStore,
        *,
        cluster_name: str,
        broker_name: str,
        replica_id: int,
        replica_addr: str,
        master_ha_addr: Callable[[], str],
        channel_factory: Callable[[str], grpc.aio.Channel],
        sign: Callable[[str, Any], Any],
        heartbeat_s: float,
        housekeeping_s: float,
        topics_version: Callable[[], common_pb2.DataVersion],
        on_topics: Callable[[ha_pb2.MetadataSnapshot], None],
        on_progress: Callable[[ha_pb2.MetadataSnapshot, bool], None],
        metadata_interval_s: float = 5.0,
        max_metadata_bytes: int = 1 << 30,
    ) -> None:
        self._store = store
        self._cluster = cluster_name
        self._broker_name = broker_name
        self.replica_id = replica_id
        self._replica_addr = replica_addr
        self._master_ha_addr = master_ha_addr
        self._channel_factory = channel_factory
        self._sign = sign
        self._heartbeat_s = heartbeat_s
        self._housekeeping_s = housekeeping_s
        self._on_topics = on_topics
        self._on_progress = on_progress
        self._held: ha_pb2.MetadataSnapshot | None = None  # progress ahead of this log
        self._replace_progress = False  # a tail was cut: the next progress replaces ours
        self._metadata_interval_s = metadata_interval_s
        self._topics_version = topics_version
        self._max_metadata = max_metadata_bytes
        self._streamed_metadata = True  # False once a master answered UNIMPLEMENTED
        self.highest_epoch_seen = store.epochs.last_epoch
        self.status = ReplicaStatus()
        self._task: asyncio.Task[None] | None = None
        self._address_known = asyncio.Event()

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="HaClient")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        self.status.connected = False

    def master_changed(self) -> None:
        """The master's address may have changed (a registration reply): look again."""
        self._address_known.set()

    def saw_epoch(self, epoch: int) -> None:
        self.highest_epoch_seen = max(self.highest_epoch_seen, epoch)

    async def _run(self) -> None:
        failures = 0
        while True:
            addr = self._master_ha_addr()
            if not addr:
                self._address_known.clear()
                await wait_event(self._address_known, 1.0)
                continue
            started = time.monotonic()
            try:
                await self._session(addr)
                self.status.last_error = ""
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # every failure is retried; the reason is kept and logged
                why = (
                    f"{exc.code().name}: {exc.details()}"
                    if isinstance(exc, grpc.aio.AioRpcError)
                    else f"{type(exc).__name__}: {exc}"
                )
                if why != self.status.last_error:
                    log.warning("replication from %s stopped: %s; retrying", addr, why)
                self.status.last_error = why
            finally:
                self.status.connected = False
            failures = 0 if time.monotonic() - started > 5 else failures + 1
            self._address_known.clear()
            # wait_event, not wait_for: on Python 3.11 wait_for swallows a cancel that
            # comes as the event is set (a registration reply and a follow() at once),
            # and this loop went on copying beside the new client (DUPLICATE_REPLICA)
            await wait_event(self._address_known, _BACKOFF_S[min(failures, len(_BACKOFF_S) - 1)])

    # -- one session --------------------------------------------------------------------
    async def _session(self, addr: str) -> None:
        channel = self._channel_factory(addr)
        try:
            stub = ha_pb2_grpc.HaServiceStub(channel)
            await self._sync_metadata(stub)
            # Data frames decoded by hand: the records are a view into the received frame
            replicate = channel.stream_stream(
                REPLICATE,
                request_serializer=ha_pb2.ReplicaFrame.SerializeToString,
                response_deserializer=wire.decode_master_frame,
            )
            call = replicate(metadata=self._sign(REPLICATE, ha_pb2.ReplicaFrame()))
            await self._replicate(stub, call, addr)
        finally:
            await channel.close()

    async def _replicate(self, stub: ha_pb2_grpc.HaServiceStub, call: Any, addr: str) -> None:
        store = self._store
        await call.write(
            ha_pb2.ReplicaFrame(
                hello=ha_pb2.Hello(
                    cluster_name=self._cluster,
                    broker_name=self._broker_name,
                    replica_id=self.replica_id,
                    replica_addr=self._replica_addr,
                    max_offset=store.commitlog.max_offset,
                    epochs=[
                        ha_pb2.EpochEntry(epoch=e.epoch, start_offset=e.start_offset)
                        for e in store.epochs.entries
                    ],
                    highest_epoch_seen=self.highest_epoch_seen,
                )
            )
        )
        first = await self._read(call)  # the Welcome
        if isinstance(first, DataFrame):
            raise ReplicationError(f"master {addr} did not start with a Welcome")
        if first.HasField("refuse"):
            refuse = first.refuse
            if refuse.reason != ha_pb2.Refuse.STALE_EPOCH:
                self.saw_epoch(refuse.master_epoch)
            raise ReplicationError(
                f"master {addr} refused: "
                f"{ha_pb2.Refuse.Reason.Name(refuse.reason)}: {refuse.message}"
            )
        if not first.HasField("welcome"):
            raise ReplicationError(f"master {addr} did not start with a Welcome")
        welcome = first.welcome
        self._apply_welcome(welcome)
        self.status.connected = True
        self._release_held()
        self.status.master_ha_addr = addr
        self.status.sessions += 1
        log.info(
            "replicating %s from %s (epoch %d) at offset %d, master at %d",
            self._broker_name,
            addr,
            welcome.master_epoch,
            store.commitlog.max_offset,
            welcome.master_max_offset,
        )
        loop = asyncio.get_running_loop()
        self._acked = asyncio.Event()
        self._ack_due = AckDue(self._acked.set)
        self._metadata_wanted = asyncio.Event()
        acker = loop.create_task(self._ack_loop(call))
        syncer = loop.create_task(self._metadata_loop(stub))
        self._beat = loop.call_later(self._heartbeat_s, self._heartbeat, loop)
        try:
            await self._copy(call)
        finally:
            # never `suppress(CancelledError)` around an await here: it would swallow the
            # cancellation of this task itself (stop()), and the copy loop would go on
            self._store.dispatch_replicated()  # a frame acked, its dispatch cut short
            call.cancel()
            self._beat.cancel()
            self._ack_due.sent()
            await cancel_and_wait(acker, syncer)
            for task in (acker, syncer):
                if task.done() and not task.cancelled():
                    # an Ack written as the stream ended fails too ("RPC already
                    # finished"): the session's own end says why; retrieved, not logged
                    task.exception()

    def _heartbeat(self, loop: asyncio.AbstractEventLoop) -> None:
        """An Ack at least every heartbeat interval, idle or not (a timer, not a
        timeout per wait: the ack loop waits on its event alone)."""
        self._acked.set()
        self._beat = loop.call_later(self._heartbeat_s, self._heartbeat, loop)

    async def _copy(self, call: Any) -> None:
        """Apply Data frames until the stream ends. A master silent for the housekeeping
        interval ends the session: one deadline for the session, moved on at most every
        half second as frames come (a timeout per read cost more than decoding a frame)."""
        loop = asyncio.get_running_loop()
        limit = self._housekeeping_s
        slack = min(0.5, limit / 10)
        armed = loop.time()
        try:
            async with asyncio.timeout_at(armed + limit + slack) as deadline:
                while True:
                    frame = await call.read()
                    now = loop.time()
                    if now - armed >= slack:  # silent for [limit, limit + slack] s at most
                        armed = now
                        deadline.reschedule(now + limit + slack)
                    if frame is grpc.aio.EOF:
                        raise ReplicationError("the master closed the stream")
                    if isinstance(frame, DataFrame):
                        self._apply_data(frame)
                        self._ack_due.applied(len(frame.records), lazy=frame.lazy_ack)
                        if self._store.undispatched is not None:
                            if not frame.lazy_ack:
                                # one loop turn: the ack loop writes the Ack (a SYNC
                                # send's waiter) while this frame is dispatched
                                await asyncio.sleep(0)
                            self._dispatch()
                    elif frame.HasField("refuse"):
                        raise ReplicationError(f"master refused: {frame.refuse.message}")
        except TimeoutError:
            if not deadline.expired():
                raise
            raise ReplicationError(f"the master sent nothing for {limit:.0f} s") from None

    async def _read(self, call: Any) -> DataFrame | ha_pb2.MasterFrame:
        try:
            async with asyncio.timeout(self._housekeeping_s):  # never swallows a cancel
                frame = await call.read()
        except TimeoutError:
            raise ReplicationError(
                f"the master sent nothing for {self._housekeeping_s:.0f} s"
            ) from None
        if frame is grpc.aio.EOF:
            raise ReplicationError("the master closed the stream")
        return frame

    def _apply_welcome(self, welcome: ha_pb2.Welcome) -> None:
        store = self._store
        if self._held is not None and self._held.master_epoch != welcome.master_epoch:
            self._held = None  # its log_end_offset is a place in another master's log
        if welcome.truncate_to == -1 or welcome.truncate_to < store.commitlog.max_offset:
            self._replace_progress = True
        self.saw_epoch(welcome.master_epoch)
        self.status.master_epoch = welcome.master_epoch
        self.status.master_max_offset = welcome.master_max_offset
        mine = store.commitlog.max_offset
        if welcome.truncate_to == -1:
            dropped = store.wipe()
            self.status.truncated_bytes += dropped
            log.warning(
                "replica %s/%d shares no history with its master: dropped its log "
                "(%d bytes) and copies from %d",
                self._broker_name,
                self.replica_id,
                dropped,
                welcome.start_offset,
            )
        elif welcome.truncate_to < mine:
            cut = store.truncate_to(welcome.truncate_to)
            self.status.truncated_bytes += cut
            log.warning(
                "replica %s/%d: cut %d bytes of its log ([%d, %d)) that diverged from "
                "the master's, by epoch",
                self._broker_name,
                self.replica_id,
                cut,
                welcome.truncate_to,
                mine,
            )
        # the master's epochs up to where the copy starts become ours
        shared = [
            EpochEntry(e.epoch, e.start_offset)
            for e in welcome.epochs
            if e.start_offset <= welcome.start_offset
        ]
        if shared != store.epochs.entries[: len(shared)] or len(store.epochs.entries) > len(shared):
            store.epochs.replace(shared)

    def _apply_data(self, data: DataFrame) -> None:
        store = self._store
        self.status.master_max_offset = data.master_max_offset
        if data.records:
            self._append(data)
        if self._held is not None:
            self._release_held()
        gate = store.gate
        if data.confirm_offset is not None:
            confirm = min(data.confirm_offset, store.commitlog.max_offset)
            gate.turn_on(confirm)
            gate.advance(confirm)
        else:
            gate.turn_off()

    def _append(self, data: DataFrame) -> None:
        store = self._store
        epochs = store.epochs
        if data.epoch > epochs.last_epoch:
            epochs.begin(data.epoch, data.epoch_start_offset)
            self.saw_epoch(data.epoch)
            self.status.master_epoch = max(self.status.master_epoch, data.epoch)
        store.append_replicated(data.offset, data.records, dispatch=False)

    def _dispatch(self) -> None:
        """The appended frame's dispatch (after its Ack went out): consume queues, index."""
        store = self._store
        topics = store.consume_queues.topic_count
        dispatch_appended(store)
        if store.consume_queues.topic_count != topics:
            # a topic new here: its config now, not at the next round, or the replica (and
            # a master elected from it) refuses its pulls and offset commits meanwhile
            self._metadata_wanted.set()

    _acked: asyncio.Event
    _metadata_wanted: asyncio.Event
    _ack_due: AckDue
    _beat: asyncio.TimerHandle

    async def _ack_loop(self, call: Any) -> None:
        """An Ack when one is due (:class:`AckDue`; at most one in flight), and at least
        every heartbeat interval (:meth:`_heartbeat`)."""
        store = self._store
        acked = self._acked
        while True:
            self._ack_due.sent()
            await call.write(
                ha_pb2.ReplicaFrame(
                    ack=ha_pb2.Ack(
                        max_offset=store.commitlog.max_offset,
                        flushed_offset=store.commitlog.queue.flushed_offset,
                    )
                )
            )
            # frames applied while that write was under way are covered by the next one
            await acked.wait()
            acked.clear()

    # -- metadata (SlaveSynchronize) --------------------------------------------------------
    async def _sync_metadata(self, stub: ha_pb2_grpc.HaServiceStub) -> None:
        request = ha_pb2.GetMetadataRequest(
            broker_name=self._broker_name, known_data_version=self._topics_version()
        )
        snapshot = None
        if self._streamed_metadata:
            try:
                snapshot = await self._stream_metadata(stub, request)
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise
                self._streamed_metadata = False  # a master from before StreamMetadata
            except metadata.MetadataTooLargeError as exc:
                # the copy of records goes on; the topics and offsets stay as they are
                log.error("metadata sync from the master refused: %s", exc)
                return
        if snapshot is None:
            snapshot = await stub.GetMetadata(
                request, timeout=self._housekeeping_s, metadata=self._sign(GET_METADATA, request)
            )
        self._on_topics(snapshot)
        self.take_progress(snapshot)

    async def _stream_metadata(
        self, stub: ha_pb2_grpc.HaServiceStub, request: ha_pb2.GetMetadataRequest
    ) -> ha_pb2.MetadataSnapshot:
        """The master's snapshot, merged from its parts (:mod:`.metadata`)."""
        whole = metadata.Assembler(self._max_metadata)
        call = stub.StreamMetadata(
            request, timeout=self._housekeeping_s, metadata=self._sign(STREAM_METADATA, request)
        )
        try:
            async for part in call:
                whole.add(part)
        finally:
            call.cancel()  # a refused snapshot: the master stops sending it
        return whole.snapshot

    def take_progress(self, snapshot: ha_pb2.MetadataSnapshot) -> None:
        """Apply *snapshot*'s consumer offsets and delay progress now if this replica
        follows its master and its log holds every record below the snapshot's
        ``log_end_offset``, else hold them until it does."""
        if self.status.connected and snapshot.log_end_offset <= self._store.commitlog.max_offset:
            self._held = None  # an older held snapshot ends lower: this one covers it
            self._apply_progress(snapshot)
        elif self._held is None:
            self._held = snapshot
        # else the older one stays held: it is reached first; the next sync brings this

    def _release_held(self) -> None:
        held = self._held
        if held is not None and held.log_end_offset <= self._store.commitlog.max_offset:
            self._held = None
            self._apply_progress(held)

    def _apply_progress(self, snapshot: ha_pb2.MetadataSnapshot) -> None:
        replace, self._replace_progress = self._replace_progress, False
        self._on_progress(snapshot, replace)

    async def _metadata_loop(self, stub: ha_pb2_grpc.HaServiceStub) -> None:
        """Every ``metadata_interval_s``, and soon after records of a topic new here."""
        while True:
            await wait_event(self._metadata_wanted, self._metadata_interval_s)
            self._metadata_wanted.clear()
            await asyncio.sleep(METADATA_MIN_GAP_S)  # a burst of new topics: one sync
            try:
                await self._sync_metadata(stub)
            except grpc.aio.AioRpcError as exc:
                log.warning("metadata sync from the master failed: %s", exc.details())
