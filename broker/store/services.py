"""StoreServices: a message store's background threads, and the flush round they end in.

One store runs two or three threads, started after recovery and stopped at
shutdown::

    commit log     GroupCommitService      flush_disk_type sync: a put's future,
                                           one fsync for every put waiting on it
               or  FlushRealTimeService    async: every flush_interval_commitlog_ms,
                                           once flush_commitlog_least_pages are dirty
                   WarmMappedFileService   warm_mapped_file_enable, mmap write mode
    the rest       FlushConsumeQueueService ─▶ flush_round: consume queues, index,
                                               then the checkpoint

The flush round syncs the consume queues and the index, and then records in
the checkpoint how far the commit log is flushed and dispatched and the store
times each part holds; recovery starts from it. The dispatched offset is read
*before* the consume queues are synced, so the checkpoint never claims more
than what is on disk.

The threads touch only flush positions (the store's owner thread appends);
an I/O error one of them meets goes to the store's health.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pocketmq.broker.store.checkpoint import Checkpoint
from pocketmq.broker.store.config import FlushDiskType
from pocketmq.broker.store.flush import (
    FlushConsumeQueueService,
    FlushRealTimeService,
    GroupCommitService,
    ServiceThread,
)
from pocketmq.broker.store.warm import WarmMappedFileService

if TYPE_CHECKING:
    from pocketmq.broker.store.message_store import DefaultMessageStore

__all__ = ["StoreServices"]


class StoreServices:
    """The flush and warm-up threads of *store*; :meth:`flush_round` is theirs to call
    (and recovery's, and a replica's after it cut its log)."""

    def __init__(self, store: DefaultMessageStore) -> None:
        self._store = store
        #: the running threads, in start order (the consume-queue flusher last)
        self.threads: list[ServiceThread] = []
        #: the commit log's group commit (flush_disk_type sync), None otherwise
        self.group_commit: GroupCommitService | None = None
        self._flushed = Checkpoint()  # the checkpoint last written

    def start(self) -> None:
        store = self._store
        cfg = store.config
        queue = store.commitlog.queue
        durations = store.flush_durations["commitlog"]
        if cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self.group_commit = GroupCommitService(
                queue,
                timeout_s=cfg.sync_flush_timeout_ms / 1000,
                on_io_error=store.health.on_io_error,
                durations=durations,
            )
            self.threads.append(self.group_commit)
        else:
            self.threads.append(
                FlushRealTimeService(
                    queue,
                    interval_s=cfg.flush_interval_commitlog_ms / 1000,
                    least_pages=cfg.flush_commitlog_least_pages,
                    thorough_interval_s=cfg.flush_commitlog_thorough_interval_ms / 1000,
                    on_io_error=store.health.on_io_error,
                    durations=durations,
                )
            )
        if cfg.warm_mapped_file_enable and not cfg.write_without_mmap:
            # pwrite needs no warm pages: a write that covers a page whole is never zeroed
            store.commitlog.warm = WarmMappedFileService(
                queue, ahead_bytes=cfg.warm_ahead_bytes, populate_write=cfg.warm_populate_write
            )
            self.threads.append(store.commitlog.warm)
        self.threads.append(
            FlushConsumeQueueService(
                self.flush_round,
                interval_s=cfg.flush_interval_consume_queue_ms / 1000,
                on_io_error=store.health.on_io_error,
                durations=store.flush_durations["consume_queue"],
            )
        )
        for thread in self.threads:
            thread.start()
        if store.commitlog.warm is not None:
            store.commitlog.warm.wakeup()

    def stop(self) -> None:
        """Stop every thread (each runs its last round first)."""
        for thread in self.threads:
            thread.stop()
        self.threads.clear()
        self._store.commitlog.warm = None

    def flush_round(self) -> None:
        """Sync consume queues and index, then record how far everything is durable."""
        store = self._store
        dispatched = store.dispatched_offset
        last_ts = store.last_store_timestamp_ms
        store.consume_queues.flush()
        index_ts = store.index.flush()
        physic = store.commitlog.queue.flushed_offset
        prev = self._flushed
        cp = Checkpoint(
            physic_msg_timestamp_ms=max(
                prev.physic_msg_timestamp_ms, last_ts if physic >= dispatched else 0
            ),
            logics_msg_timestamp_ms=max(prev.logics_msg_timestamp_ms, last_ts),
            index_msg_timestamp_ms=max(prev.index_msg_timestamp_ms, index_ts),
            physic_flushed_offset=max(prev.physic_flushed_offset, physic),
            logics_dispatched_offset=max(prev.logics_dispatched_offset, dispatched),
        )
        if cp != prev:
            store.checkpoint.write(cp)
            self._flushed = cp
        store.gate.save()
