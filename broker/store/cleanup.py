"""CommitLogCleaner: retention of commit-log segments and the disk-space guard.

RocketMQ's ``CleanCommitLogService``; the broker's periodic task calls :meth:`run_once`.

RocketMQ's rules, checked every ``clean_resource_interval_ms``:

- a segment is *expired* when its newest record is older than
  ``file_reserved_hours`` (the first record of the next segment is newer than
  every record of this one, so its store time dates the segment);
- expired segments are deleted at the ``delete_when`` hours, or at once when
  the disk is more than ``disk_max_used_space_ratio`` full;
- above ``disk_space_clean_forcibly_ratio`` the oldest segments go even if
  unexpired;
- above ``disk_space_warning_level_ratio``, or with less than
  ``disk_min_free_bytes`` available, writes are refused ("disk full") while
  reads go on; they are accepted again once both are fine. The ratio is
  ``df``'s and RocketMQ's: used / (used + available), available being what the
  broker's user can write (``statvfs`` ``f_bavail``); blocks reserved for root
  are in neither, so a filesystem with nothing left for the broker reads full;
- at most ``delete_files_batch_max`` segments go per run, never the last one;
  consume-queue and index files wholly below the log's new minimum go too.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from pocketmq.broker.store.mapped_file import MappedFile

if TYPE_CHECKING:
    from pocketmq.broker.store.message_store import DefaultMessageStore

__all__ = ["CommitLogCleaner"]

log = logging.getLogger(__name__)


class CommitLogCleaner:
    def __init__(self, store: DefaultMessageStore) -> None:
        self._store = store
        self.last_disk_ratio = 0.0
        self.last_available_bytes = -1
        self.deleted_segments = 0

    def run_once(self) -> int:
        """One check; returns the number of commit-log segments deleted."""
        store, cfg = self._store, self._store.config
        ratio = store.io.disk_used_ratio(store.dirs.commitlog)
        available = store.io.available_bytes(store.dirs.commitlog)
        self.last_disk_ratio, self.last_available_bytes = ratio, available
        was_full = store.health.disk_full
        store.health.disk_full = (
            ratio >= cfg.disk_space_warning_level_ratio or available < cfg.disk_min_free_bytes
        )
        store.health.disk_full_reason = ""  # from here on the figures are the reason
        if store.health.disk_full and not was_full:
            log.error("%s", self.disk_full_message())
        elif was_full and not store.health.disk_full:
            log.warning(
                "disk use is %.1f%% (%d bytes available); accepting writes again",
                ratio * 100,
                available,
            )
        now_ms = store.clock.now_ms()
        forcibly = ratio >= cfg.disk_space_clean_forcibly_ratio
        hour_ok = time.localtime(now_ms / 1000).tm_hour in cfg.delete_hours
        if not (forcibly or hour_ok or ratio >= cfg.disk_max_used_space_ratio):
            return 0
        reserved_ms = int(cfg.file_reserved_hours * 3600 * 1000)

        def should_delete(mf: MappedFile) -> bool:
            if forcibly:
                return True
            newest = store.commitlog.store_timestamp(mf.file_from_offset + mf.file_size)
            return newest is not None and now_ms - newest > reserved_ms

        deleted = store.commitlog.queue.delete_head(
            should_delete, max_files=cfg.delete_files_batch_max
        )
        if deleted:
            self.deleted_segments += len(deleted)
            log.info(
                "deleted %d commit-log segment(s) up to offset %d (disk %.1f%% used%s)",
                len(deleted),
                store.commitlog.min_offset,
                ratio * 100,
                ", forcibly" if forcibly else "",
            )
            store.consume_queues.delete_expired(store.commitlog.min_offset)
            store.index.delete_below(store.commitlog.min_offset)
        return len(deleted)

    def disk_full_message(self) -> str:
        cfg = self._store.config
        where = f"the filesystem holding {self._store.dirs.commitlog}"
        if 0 <= self.last_available_bytes < cfg.disk_min_free_bytes:
            return (
                f"disk full: {self.last_available_bytes} bytes are available on {where}; "
                f"writes are refused below {cfg.disk_min_free_bytes} "
                "(disk_min_free_bytes) until space is freed"
            )
        return (
            f"disk full: {self.last_disk_ratio * 100:.1f}% of {where} is used "
            f"({self.last_available_bytes} bytes available); writes are refused above "
            f"{cfg.disk_space_warning_level_ratio * 100:.0f}% "
            "(disk_space_warning_level_ratio) until space is freed"
        )
