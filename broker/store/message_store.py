"""DefaultMessageStore: the file-backed :class:`~pocketmq.broker.store.api.MessageStore`.

It wires the parts together and owns the write path::

    put_batch(blob) ─ scan_batch (check every record) ─ CommitLog.append_batch
        └─ dispatch, right after the append, on the same thread:
             ConsumeQueue units (grouped per queue, one copy each)
             IndexFileSet entries (KEYS and UNIQ_KEY)
             arrival listeners (long polling)
        └─ synchronous flush: a GroupCommitService future on the result

and the read path (consume queue → commit-log bytes, never decoded here).
Recovery is in :mod:`.recovery`, retention in :mod:`.cleanup`, the flush and
warm-up threads in :mod:`.services`, what refuses writes in :mod:`.health`.

All methods are called from one thread (the broker's event loop); the flush
services run in worker threads and touch only flush positions.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future

from pocketmq.broker.store.api import ArrivalListener
from pocketmq.broker.store.batch import (
    SCHEDULE_TOPIC,
    BatchError,
    ScannedBatch,
    apply_schedule_tags_codes,
    queue_units,
    scan_batch,
)
from pocketmq.broker.store.checkpoint import StoreCheckpoint
from pocketmq.broker.store.cleanup import CommitLogCleaner
from pocketmq.broker.store.commitlog import CommitLog, is_dispatched_to_queue
from pocketmq.broker.store.config import StoreConfig
from pocketmq.broker.store.consume_queue import CQ_UNIT_SIZE
from pocketmq.broker.store.consume_queue_store import ConsumeQueueStore
from pocketmq.broker.store.data_dir import DataDirectory
from pocketmq.broker.store.deleted_queues import DeletedQueues
from pocketmq.broker.store.dispatch import DispatchCatchUp, prepare_batch
from pocketmq.broker.store.epochs import EpochFile
from pocketmq.broker.store.flush import DurationHistogram
from pocketmq.broker.store.health import StoreHealth
from pocketmq.broker.store.index_file_set import IndexFileSet
from pocketmq.broker.store.io import StoreIO
from pocketmq.broker.store.producer_snapshot import write_snapshot
from pocketmq.broker.store.producer_state import ProducerStateTable
from pocketmq.broker.store.reads import StoreReader
from pocketmq.broker.store.recovery import recover
from pocketmq.broker.store.replication import (
    ReplicationError,
    append_replicated,
    dispatch_appended,
    read_for_replica,
    truncate_to,
    wipe,
)
from pocketmq.broker.store.results import GetResult, PutResult, PutStatus, RecoveryReport
from pocketmq.broker.store.services import StoreServices
from pocketmq.broker.store.visibility import VisibilityGate
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.message import encode_record, pack_host
from pocketmq.common.progress import ProgressCallback

__all__ = ["DefaultMessageStore"]

log = logging.getLogger(__name__)


class DefaultMessageStore:
    """One broker's message store in one data directory (RocketMQ's ``DefaultMessageStore``).

    Usage::

        store = DefaultMessageStore(StoreConfig(data_dir="/var/lib/pocketmq"))
        report = store.start()              # lock, recover, start the flush threads
        result = store.put_batch(blob)      # PutResult: status, queue offsets, error text
        got = store.get_messages("T", 0, offset, max_count=32)  # GetResult: raw records
        store.shutdown()                    # flush, checkpoint, remove abort, unlock

    Files under ``config.data_dir``: ``commitlog/`` (segments of
    ``commitlog_file_size_bytes``), ``consumequeue/TOPIC/QUEUE/`` (20-byte units),
    ``index/``, ``checkpoint``, ``epochs``, ``producers/`` (producer-state snapshots),
    ``storeGeometry.json`` (the sizes the directory was made with), ``lock`` (held
    while running) and ``abort`` (present while running: found at start, recovery
    distrusts the log's tail). :meth:`start` returns what recovery kept and cut.

    Outcomes are values, not exceptions: a put answers a :class:`PutResult` whose
    ``status`` says why nothing was stored (``MESSAGE_ILLEGAL``, ``DISK_FULL``,
    ``SERVICE_NOT_AVAILABLE``...) and whose ``error`` names the figure and the key to
    change; a read answers a :class:`GetResult` with a ``GetStatus``. What raises is a
    broken invariant, and :meth:`start` on a directory another process holds
    (``StoreLockedError``).

    Failures: the first I/O error of a write or flush makes the store read-only for
    the rest of its run (reads go on; puts answer ``SERVICE_NOT_AVAILABLE`` with the
    error); a full disk (``ENOSPC``, or below ``disk_min_free_bytes``) refuses puts with
    ``DISK_FULL`` until the periodic check (:meth:`run_cleanup_once`) sees space again.
    A replica's store (``replica_of`` set) refuses puts and takes the master's frames
    through :meth:`append_replicated`.

    Threads: every method is called from one thread (the broker's event loop); the
    flush and warm-up services (:mod:`.services`) run in threads of their own, started
    by :meth:`start` and stopped by :meth:`shutdown`, and touch only flush positions.
    """

    def __init__(
        self, config: StoreConfig, *, clock: Clock | None = None, io: StoreIO | None = None
    ) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self.io = io or StoreIO()
        self.dirs = DataDirectory(config.data_dir)
        self.store_host = config.store_host
        self.commitlog = CommitLog(
            self.dirs.commitlog,
            config.commitlog_file_size_bytes,
            io=self.io,
            store_host=pack_host(config.store_host),
            write_without_mmap=config.write_without_mmap,
        )
        self.consume_queues = ConsumeQueueStore(
            self.dirs.consumequeue,
            units_per_file=config.consume_queue_units_per_file,
            io=self.io,
            max_open_files=config.max_open_consume_queue_files,
        )
        self.index = IndexFileSet(
            self.dirs.index, slots=config.index_slots, entries=config.index_entries, io=self.io
        )
        self.checkpoint = StoreCheckpoint(self.dirs.checkpoint)
        self.deleted = DeletedQueues(self.dirs.deleted_queues)
        self.epochs = EpochFile(self.dirs.epochs)
        # reads stop at the confirm offset (replication with a controller; off = -1)
        self.gate = VisibilityGate(os.path.join(self.dirs.root, "confirm_offset"), self._notify_now)
        self.reader = StoreReader(self)
        self.cleanup = CommitLogCleaner(self)
        self.catch_up = DispatchCatchUp(self)
        #: idempotent producers' de-duplication state, a function of the log (recovery
        #: rebuilds it; every append, a put's or a replica frame's, goes through observe)
        self.producers = ProducerStateTable(
            window=config.producer_dedup_window,
            max_producers=config.max_producer_ids,
            expiration_ms=config.producer_id_expiration_ms,
        )
        self.producers_snapshot_offset = 0  # log offset of the newest producer snapshot
        self.health = StoreHealth(self.dirs.root)
        self._listeners: list[ArrivalListener] = []
        # told the new end of the commit log after every put (the replication service)
        self._append_listeners: list[Callable[[int], None]] = []
        #: set while this store is a replica's: puts are refused, frames appended
        self.replica_of = ""
        self.dispatched_offset = 0  # commit-log offset dispatched so far
        #: a replica's frame appended and acknowledged, its dispatch still to run
        self.undispatched: Callable[[], None] | None = None
        self.last_store_timestamp_ms = 0  # of the newest record appended
        self.stats_put_messages = 0
        # how long syncs take, filled by the flush services, read by the broker's metrics
        self.flush_durations = {
            "commitlog": DurationHistogram(),
            "consume_queue": DurationHistogram(),
        }
        self._started_at = time.monotonic()
        self.stats_put_bytes = 0
        self.services = StoreServices(self)

    # -- lifecycle ---------------------------------------------------------------------
    def start(self, *, progress: ProgressCallback | None = None) -> RecoveryReport:
        """Lock the directory, recover, and start the flush services.

        *progress* is told how far recovery's long phases are (verifying and
        re-dispatching the commit log, in bytes)."""
        self.dirs.create()
        self.dirs.acquire_lock()
        try:
            cfg = self.config
            self.dirs.record_geometry(
                {
                    "commitlog_file_size": cfg.commitlog_file_size_bytes,
                    "consume_queue_units_per_file": cfg.consume_queue_units_per_file,
                    "index_slots": cfg.index_slots,
                    "index_entries": cfg.index_entries,
                }
            )
            self.epochs.load()
            report = recover(self, progress=progress)
            self.epochs.truncate(self.commitlog.max_offset + 1)  # terms whose bytes were cut
        except BaseException:
            self.dirs.release_lock()
            raise
        self.dirs.mark_running()
        self.services.start()
        self.health.running = True
        return report

    def shutdown(self) -> None:
        """Flush everything, write the checkpoint, remove ``abort``, unlock."""
        if not self.health.running:
            return
        self.dispatch_replicated()
        self.health.running = False
        self.services.stop()
        clean = not self.health.read_only_reason
        try:
            self.commitlog.queue.flush()
            self.flush_round()
        except OSError as exc:
            log.error("final flush failed: %s; the next start will recover", exc)
            clean = False
        if clean:
            self.snapshot_producers(self.commitlog.max_offset)
        self.commitlog.queue.close()
        self.consume_queues.close()
        self.index.close()
        if clean:
            self.dirs.mark_clean_shutdown()
        self.dirs.release_lock()
        log.info(
            "store %s shut down (clean=%s) at commit-log offset %d",
            self.dirs.root,
            clean,
            self.commitlog.max_offset,
        )

    def flush_round(self) -> None:
        """Sync consume queues and index, then write the checkpoint (:mod:`.services`)."""
        self.services.flush_round()

    # -- writes ------------------------------------------------------------------------
    def scan(
        self, blob: bytes | bytearray | memoryview, *, allow_empty_body: bool = True
    ) -> ScannedBatch:
        """Check every record of *blob* as :meth:`put_batch` would; raise BatchError.

        A caller that must look at the records before storing them (the broker's
        send path) scans once and hands the result to ``put_batch(scanned=...)``.
        """
        return scan_batch(
            blob,
            max_body_size=self.config.max_message_size_bytes,
            store_host_size=len(self.commitlog.store_host),
            allow_empty_body=allow_empty_body,
        )

    def put_batch(
        self, blob: bytes | bytearray | memoryview, *, scanned: ScannedBatch | None = None
    ) -> PutResult:
        refused = self._refuse_writes()
        if refused is not None:
            return refused
        if len(blob) > self.config.max_batch_size_bytes:
            return PutResult(
                status=PutStatus.MESSAGE_ILLEGAL,
                error=f"batch is {len(blob)} bytes; this broker accepts at most "
                f"{self.config.max_batch_size_bytes} (max_batch_size_bytes)",
            )
        if scanned is not None:
            if scanned.blob is not blob:
                raise ValueError("scanned= must be the scan of this very blob")
            batch = scanned
        else:
            try:
                batch = self.scan(blob)
            except BatchError as exc:
                status = (
                    PutStatus.PROPERTIES_SIZE_EXCEEDED
                    if exc.kind == "properties"
                    else PutStatus.MESSAGE_ILLEGAL
                )
                return PutResult(status=status, error=str(exc))
        return self._append(blob, batch)

    def put_message(
        self,
        *,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: dict[str, str] | None = None,
        flag: int = 0,
        sysflag: int = 0,
        born_timestamp_ms: int = 0,
        born_host: tuple[str, int] = ("127.0.0.1", 0),
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
    ) -> PutResult:
        try:
            record = encode_record(
                topic=topic,
                body=body,
                queue_id=queue_id,
                flag=flag,
                properties=properties or {},
                sysflag=sysflag,
                born_timestamp_ms=born_timestamp_ms or self.clock.now_ms(),
                born_host=pack_host(born_host),
                store_host=self.commitlog.store_host,
                reconsume_times=reconsume_times,
                prepared_transaction_offset=prepared_transaction_offset,
            )
        except ValueError as exc:
            return PutResult(status=PutStatus.MESSAGE_ILLEGAL, error=str(exc))
        return self.put_batch(record)

    def _refuse_writes(self) -> PutResult | None:
        if not self.health.running:
            return PutResult(
                status=PutStatus.SERVICE_NOT_AVAILABLE, error="the message store is not running"
            )
        if self.replica_of:
            return PutResult(
                status=PutStatus.SERVICE_NOT_AVAILABLE,
                error=f"this broker is a replica (SLAVE) of {self.replica_of} and "
                "takes no writes; send to the master of its broker name",
            )
        if self.health.read_only_reason:
            return PutResult(
                status=PutStatus.SERVICE_NOT_AVAILABLE,
                error=f"the message store is read-only after an I/O error: "
                f"{self.health.read_only_reason}",
            )
        if self.health.disk_full:
            return PutResult(
                status=PutStatus.DISK_FULL,
                error=self.health.disk_full_reason or self.cleanup.disk_full_message(),
            )
        if self.undispatched is not None:  # a replica's last frame, before its promotion
            self.dispatch_replicated()
        if self.catch_up.behind and not self.catch_up.run_once():
            return PutResult(status=PutStatus.DISK_FULL, error=self.catch_up.behind_reason)
        return None

    def _append(self, blob: bytes | bytearray | memoryview, batch: ScannedBatch) -> PutResult:
        now = self.clock.now_ms()
        try:
            # Space for the dispatch first: a full disk refuses the batch whole.
            unprepared = prepare_batch(self, batch)
            if unprepared is not None:
                return self.health.refuse_disk_full(unprepared)
            appended = self.commitlog.append_batch(blob, batch, now)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                return self.health.refuse_disk_full(
                    f"disk full: cannot create a commit-log segment in "
                    f"{self.dirs.commitlog} ({exc.strerror})"
                )
            self.health.on_io_error(exc)
            return PutResult(status=PutStatus.SERVICE_NOT_AVAILABLE, error=str(exc))
        self.last_store_timestamp_ms = now
        if batch.idem_runs:
            self.producers.observe_batch(batch, appended.phys_offsets, now)
        self.after_producer_records(appended.wrote_end)
        if SCHEDULE_TOPIC in batch.topics:
            apply_schedule_tags_codes(batch)
        try:
            self._dispatch(batch, appended.phys_offsets, appended.queue_offsets, now)
        except OSError as exc:
            # The batch is whole in the commit log: acknowledged, and readable once the
            # catch-up has dispatched it; no later put is accepted before that.
            self.catch_up.stopped(exc)
        else:
            self.dispatched_offset = appended.wrote_end
        self.stats_put_messages += len(batch)
        self.stats_put_bytes += len(blob)
        flush_future = None
        group_commit = self.services.group_commit
        if group_commit is not None:
            flush_future = group_commit.request(appended.wrote_end)
        for listener in self._append_listeners:
            listener(appended.wrote_end)
        return PutResult(
            status=PutStatus.PUT_OK,
            store_timestamp_ms=now,
            topics=batch.topics,
            queue_ids=batch.queue_ids,
            queue_offsets=appended.queue_offsets,
            phys_offsets=appended.phys_offsets,
            sizes=batch.sizes,
            uniq_keys=batch.uniq_keys,
            flush_future=flush_future,
        )

    def after_producer_records(self, end: int) -> None:
        """Snapshot the producer state every producer_snapshot_interval_bytes of log."""
        if end - self.producers_snapshot_offset >= self.config.producer_snapshot_interval_bytes:
            self.snapshot_producers(end)

    def snapshot_producers(self, end: int) -> None:
        """Write the producer state as of log offset *end* (all records before it seen)."""
        try:
            write_snapshot(self.dirs.producers, self.producers, end)
        except OSError as exc:
            log.error(
                "cannot write a producer-state snapshot at log offset %d in %s: %s; "
                "recovery will replay more log",
                end,
                self.dirs.producers,
                exc,
            )
        self.producers_snapshot_offset = end

    def _dispatch(
        self,
        batch: ScannedBatch,
        phys_offsets: list[int],
        queue_offsets: list[int],
        store_timestamp_ms: int,
    ) -> None:
        """Index entries, consume-queue units (one run per queue), then listeners."""
        runs = queue_units(batch, phys_offsets, queue_offsets)
        if self.config.message_index_enable:
            # Index first: a key found before its unit exists is harmless (a query reads
            # the commit log), a unit a consumer reads before a failed put is a duplicate.
            unit_bytes = 0
            for run in runs:
                unit_bytes += len(run[3])
            if unit_bytes == CQ_UNIT_SIZE * len(phys_offsets):
                self.index.put_many(batch.topics, batch.keys, phys_offsets, store_timestamp_ms)
            else:
                self._index_dispatched(batch, phys_offsets, store_timestamp_ms)
        listeners = self._listeners
        for topic, queue_id, first_offset, units in runs:
            cq = self.consume_queues.find_or_create(topic, queue_id)
            cq.append_many(first_offset, units)
            if listeners:
                self.notify_arrival(topic, queue_id, cq.max_offset)

    def notify_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """New records in a queue: listeners hear it now, or once the gate passes them."""
        if self.gate.on:
            cq = self.consume_queues.get(topic, queue_id)
            if cq is not None and not self.gate.arrived(topic, queue_id, cq):
                return
        self._notify_now(topic, queue_id, max_offset)

    def _notify_now(self, topic: str, queue_id: int, max_offset: int) -> None:
        for listener in self._listeners:
            try:
                listener(topic, queue_id, max_offset)
            except Exception:
                log.exception("arrival listener failed for %s:%d", topic, queue_id)

    def _index_dispatched(
        self, batch: ScannedBatch, phys_offsets: list[int], store_timestamp_ms: int
    ) -> None:
        """Index the keys of the records that got a consume-queue unit: prepared and
        rolled-back transaction records did not."""
        kept = [i for i, sysflag in enumerate(batch.sysflags) if is_dispatched_to_queue(sysflag)]
        self.index.put_many(
            [batch.topics[i] for i in kept],
            [batch.keys[i] for i in kept],
            [phys_offsets[i] for i in kept],
            store_timestamp_ms,
        )

    def add_arrival_listener(self, listener: ArrivalListener) -> None:
        self._listeners.append(listener)

    def add_append_listener(self, listener: Callable[[int], None]) -> None:
        """*listener(end)* after every put, with the commit log's new end (replication)."""
        self._append_listeners.append(listener)

    # -- reads (delegated; see reads.py) -------------------------------------------------
    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_count: int | None = None,
        max_bytes: int | None = None,
        tag_codes: frozenset[int] | None = None,
    ) -> GetResult:
        return self.reader.get_messages(
            topic, queue_id, offset, max_count=max_count, max_bytes=max_bytes, tag_codes=tag_codes
        )

    def get_message_blob(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_count: int | None = None,
        max_bytes: int | None = None,
        tag_codes: frozenset[int] | None = None,
    ) -> GetResult:
        return self.reader.get_messages(
            topic,
            queue_id,
            offset,
            max_count=max_count,
            max_bytes=max_bytes,
            tag_codes=tag_codes,
            as_blob=True,
        )

    def read_record(self, phys_offset: int) -> bytes | None:
        return self.commitlog.read_record(phys_offset)

    def log_end_offset(self) -> int:
        return self.commitlog.max_offset

    def flush_request(self, end_offset: int) -> Future[PutStatus] | None:
        group_commit = self.services.group_commit
        return None if group_commit is None else group_commit.request(end_offset)

    def query_by_key(
        self,
        topic: str,
        key: str,
        *,
        max_count: int | None = None,
        begin_timestamp_ms: int = 0,
        end_timestamp_ms: int | None = None,
    ) -> list[bytes]:
        return self.reader.query_by_key(
            topic,
            key,
            max_count=max_count,
            begin_timestamp_ms=begin_timestamp_ms,
            end_timestamp_ms=end_timestamp_ms,
        )

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.get(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The queue's max offset a consumer may read to (below the confirm offset)."""
        cq = self.consume_queues.get(topic, queue_id)
        return self.gate.visible_max(cq) if cq is not None else 0

    def end_offset(self, topic: str, queue_id: int) -> int:
        """The queue's real end, records above the confirm offset included (a bound for
        offset commits: right after an election the gate may stand below what a consumer
        read on the old master, which this broker holds)."""
        cq = self.consume_queues.get(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def store_timestamp(self, topic: str, queue_id: int, offset: int) -> int | None:
        return self.reader.store_timestamp(topic, queue_id, offset)

    def offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        cq = self.consume_queues.get(topic, queue_id)
        if cq is None:
            return 0
        return cq.offset_by_timestamp(timestamp_ms, self.reader.store_time_of_unit)

    def queue_ids(self, topic: str) -> list[int]:
        return self.consume_queues.queue_ids(topic)

    def topics(self) -> list[str]:
        return self.consume_queues.topics()

    def delete_topics(self, topics: Iterable[str]) -> None:
        """Delete the topics' queues; their records stay dead in the commit log.

        The deletion is recorded durably first (:mod:`.deleted_queues`), so that no
        crash afterwards lets recovery dispatch the records again. Raises
        ``OSError`` (ENOSPC on a full disk) when it cannot be recorded; then
        nothing was deleted.
        """
        doomed = set(topics)
        if not doomed:
            return
        self.deleted.delete_topics(doomed, self.commitlog.max_offset)  # one durable write
        for topic in doomed:
            self.consume_queues.delete_topic(topic)
        for key in [k for k in self.commitlog.queue_offsets if k[0] in doomed]:
            del self.commitlog.queue_offsets[key]

    def delete_queues(self, topic: str, queue_ids: Iterable[int]) -> None:
        """Delete some queues of a topic (UpdateTopic to fewer queues), as delete_topics."""
        queue_ids = sorted(set(queue_ids))
        if not queue_ids:
            return
        self.deleted.delete_queues(topic, queue_ids, self.commitlog.max_offset)
        for queue_id in queue_ids:
            self.consume_queues.delete_queue(topic, queue_id)
            self.commitlog.queue_offsets.pop((topic, queue_id), None)

    # -- replication (see replication.py) -------------------------------------------------
    def read_for_replica(self, offset: int, max_bytes: int, stop: int | None = None) -> bytes:
        return read_for_replica(self, offset, max_bytes, stop)

    def append_replicated(self, offset: int, data: bytes, *, dispatch: bool = True) -> int:
        """Append a master's frame of whole records at *offset* (a replica's write path);
        ``dispatch=False`` leaves its dispatch to :meth:`dispatch_replicated`."""
        if not self.health.running or self.health.read_only_reason:
            raise ReplicationError(
                f"the message store takes no writes: "
                f"{self.health.read_only_reason or 'not running'}"
            )
        return append_replicated(self, offset, data, dispatch=dispatch)

    def dispatch_replicated(self) -> None:
        """Dispatch a replicated frame appended without its dispatch, if there is one."""
        if self.undispatched is not None:
            try:
                dispatch_appended(self)
            except ReplicationError as exc:  # the catch-up's reason; it retries at a put
                log.error("%s", exc)

    def truncate_to(self, point: int) -> int:
        """Cut the log back to record boundary *point*; return the bytes cut."""
        return truncate_to(self, point)

    def wipe(self) -> int:
        """Drop the whole log (no history in common with the master); the bytes dropped."""
        return wipe(self)

    # -- housekeeping ---------------------------------------------------------------------
    def run_cleanup_once(self) -> int:
        """Retention and disk-space checks; call periodically from the owner's thread.

        Returns the number of commit-log segments deleted.
        """
        self.catch_up.run_once(force=True)
        return self.cleanup.run_once()

    @property
    def is_read_only(self) -> bool:
        return bool(self.health.read_only_reason)

    def runtime_info(self) -> dict[str, str]:
        return {
            "commitlog_min_offset": str(self.commitlog.min_offset),
            "commitlog_max_offset": str(self.commitlog.max_offset),
            "commitlog_flushed_offset": str(self.commitlog.queue.flushed_offset),
            "dispatched_offset": str(self.dispatched_offset),
            "put_messages_total": str(self.stats_put_messages),
            "put_bytes_total": str(self.stats_put_bytes),
            "disk_full": str(self.health.disk_full).lower(),
            "read_only": self.health.read_only_reason or "false",
            "flush_disk_type": self.config.flush_disk_type.value,
            "disk_used_ratio": f"{self.cleanup.last_disk_ratio:.4f}",
            "uptime_s": f"{time.monotonic() - self._started_at:.0f}",
        }
