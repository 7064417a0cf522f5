"""StoreConfig: every knob of the message store, with RocketMQ's defaults.

A key the broker sets has the name of the :class:`~pocketmq.broker.config.BrokerConfig`
key it comes from (``max_message_size_bytes``, ``max_pull_messages``...), so a
:class:`ConfigError` raised here names the key a person sets, whether they configure a
broker or embed the store.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields

from pocketmq.common.errors import ConfigError

__all__ = ["FlushDiskType", "StoreConfig"]

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


def _help(text: str) -> dict[str, str]:
    return {"help": text}  # shown by docs/configuration.md (scripts/gen_config_docs.py)


class FlushDiskType(enum.Enum):
    ASYNC_FLUSH = "async"
    SYNC_FLUSH = "sync"


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreConfig:
    data_dir: str = field(
        metadata=_help("root of commitlog/, consumequeue/, index/, checkpoint and config/")
    )
    # -- commit log ----------------------------------------------------------------
    commitlog_file_size_bytes: int = field(
        default=1 * GiB, metadata=_help("bytes per commit-log segment")
    )
    max_message_size_bytes: int = field(
        default=4 * MiB, metadata=_help("largest message body accepted, in bytes")
    )
    max_batch_size_bytes: int = field(
        default=4 * MiB,
        metadata=_help("largest batch blob accepted, in bytes; must fit one segment"),
    )
    store_host: tuple[str, int] = field(
        default=("127.0.0.1", 10911),
        metadata=_help("address written into each record's STOREHOST and offset message ids"),
    )
    check_crc_on_recover: bool = field(
        default=True,
        metadata=_help(
            "recovery checks the body CRC of every record from the checkpoint on; off, it checks "
            "only each record's framing (faster, misses a torn body)"
        ),
    )
    # -- flush ---------------------------------------------------------------------
    flush_disk_type: FlushDiskType = field(
        default=FlushDiskType.ASYNC_FLUSH,
        metadata=_help("'async' acknowledges after the page-cache write, 'sync' after fsync"),
    )
    flush_interval_commitlog_ms: int = field(
        default=500, metadata=_help("ms between periodic flushes of the commit log (async flush)")
    )
    flush_commitlog_least_pages: int = field(
        default=4, metadata=_help("dirty 4 KiB pages a periodic flush waits for before it syncs")
    )
    flush_commitlog_thorough_interval_ms: int = field(
        default=10_000,
        metadata=_help("ms after which a periodic flush syncs however few pages are dirty"),
    )
    sync_flush_timeout_ms: int = field(
        default=5_000,
        metadata=_help("ms a sync-flush write waits for fsync before FLUSH_DISK_TIMEOUT"),
    )
    flush_interval_consume_queue_ms: int = field(
        default=1_000, metadata=_help("ms between flushes of consume-queue and index files")
    )
    # Write the commit log with pwrite on each segment's descriptor, keeping the mapping
    # for reads (RocketMQ 5's writeWithoutMmap; its transientStorePoolEnable avoids the same
    # cost through a FileChannel): a store into a fresh mapped page makes the kernel zero it
    # first, a write that covers the page whole does not. No page warmer runs then.
    write_without_mmap: bool = field(
        default=True,
        metadata=_help(
            "write the commit log with pwrite (reads stay on the mapping); off, stores go "
            "through the mapping and the page warmer runs ahead of them"
        ),
    )
    # Read the commit log's next pages into the page cache ahead of the writer (warm.py;
    # RocketMQ's warmMapedFileEnable, done by reading so it never races the writer).
    warm_mapped_file_enable: bool = field(
        default=True,
        metadata=_help(
            "read the commit log's next pages into the page cache ahead of the writer "
            "(with write_without_mmap off only)"
        ),
    )
    warm_ahead_bytes: int = field(
        default=32 * MiB, metadata=_help("bytes ahead of the write position kept warm")
    )
    # Fault the warm pages in writable (MADV_POPULATE_WRITE) instead of reading them: the
    # writer's first store costs no page fault, but the pages are dirty before they are
    # written, so a flush may write them as zeros first (measured: ~35 % more bytes sent to
    # the disk for 0.3 us less on the event loop per 1 KiB message). Off by default.
    warm_populate_write: bool = field(
        default=False,
        metadata=_help(
            "warm by faulting pages in writable (Linux 5.14+) rather than by reading them; "
            "less CPU on the writer, more bytes written to the disk"
        ),
    )
    # -- consume queue and index ------------------------------------------------------
    consume_queue_units_per_file: int = field(
        default=300_000, metadata=_help("20-byte units per consume-queue file")
    )
    max_open_consume_queue_files: int = field(
        default=16_384,
        metadata=_help(
            "consume-queue segments kept mapped at most (one mapping and one open file each); "
            "the least recently used queues are unmapped past it and mapped again on their next "
            "read or write. Keep it well under vm.max_map_count (Linux default 65,530) and "
            "ulimit -n"
        ),
    )
    message_index_enable: bool = field(
        default=True, metadata=_help("index messages by key and unique id (queries by key need it)")
    )
    index_slots: int = field(default=5_000_000, metadata=_help("hash slots per index file"))
    index_entries: int = field(default=20_000_000, metadata=_help("entries per index file"))
    default_query_max: int = field(
        default=32, metadata=_help("messages a key query returns when the caller does not say")
    )
    # -- idempotent producers (producer_state.py) ---------------------------------------
    max_producer_ids: int = field(
        default=10_000,
        metadata=_help(
            "idempotent producer ids whose de-duplication state the broker keeps; a new id is "
            "refused (RESOURCE_EXHAUSTED) while all of them are younger than "
            "producer_id_expiration_ms"
        ),
    )
    producer_id_expiration_ms: int = field(
        default=86_400_000,
        metadata=_help(
            "ms an idempotent producer id may stay idle before its state is dropped (then a "
            "retry of its older records is no longer recognised)"
        ),
    )
    producer_dedup_window: int = field(
        default=256,
        metadata=_help(
            "newest records per producer id and queue whose results a retry is answered with; "
            "older retries are still refused as duplicates, answered with offset -1"
        ),
    )
    producer_snapshot_interval_bytes: int = field(
        default=64 * MiB,
        metadata=_help(
            "commit-log bytes between two snapshots of the producer state; recovery replays at "
            "most about this much log to rebuild it"
        ),
    )
    # -- reads -----------------------------------------------------------------------
    max_pull_messages: int = field(default=32, metadata=_help("messages one read returns at most"))
    max_pull_bytes: int = field(default=256 * KiB, metadata=_help("bytes one read returns at most"))
    # -- retention ---------------------------------------------------------------------
    file_reserved_hours: float = field(
        default=72,
        metadata=_help(
            "hours commit-log segments are kept after their last write (fileReservedTime)"
        ),
    )
    delete_when: str = field(
        default="04", metadata=_help("hours of day expired segments are deleted, ';'-separated")
    )
    clean_resource_interval_ms: int = field(
        default=10_000, metadata=_help("ms between retention and disk-space checks")
    )
    delete_files_batch_max: int = field(
        default=10, metadata=_help("segments one check deletes at most")
    )
    disk_max_used_space_ratio: float = field(
        default=0.75,
        metadata=_help("disk use above which expired segments go at once, not only at delete_when"),
    )
    disk_space_clean_forcibly_ratio: float = field(
        default=0.85,
        metadata=_help("disk use above which the oldest segments go even if unexpired"),
    )
    disk_space_warning_level_ratio: float = field(
        default=0.90,
        metadata=_help(
            "disk use above which writes are refused as disk full, until space is freed"
        ),
    )
    disk_min_free_bytes: int = field(
        default=64 * MiB,
        metadata=_help(
            "bytes that must stay available to the broker's user on the data directory's "
            "filesystem (statvfs f_bavail); below it writes are refused as disk full, whatever "
            "the used ratio"
        ),
    )

    def __post_init__(self) -> None:
        def positive(name: str) -> None:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")

        for f in fields(self):
            if f.type in ("int", "float") and f.name not in ("file_reserved_hours",):
                positive(f.name)
        size = self.commitlog_file_size_bytes
        if size < 4 * KiB:
            raise ConfigError(
                f"commitlog_file_size_bytes is {size}; a commit-log segment needs at least 4096"
            )
        if self.max_message_size_bytes + 4 * KiB > size:
            raise ConfigError(
                f"max_message_size_bytes ({self.max_message_size_bytes}) must leave 4096 bytes "
                f"for a record's head inside one commit-log segment "
                f"(commitlog_file_size_bytes = {size})"
            )
        if self.max_batch_size_bytes > size - 8:
            raise ConfigError(
                f"max_batch_size_bytes ({self.max_batch_size_bytes}) must fit one commit-log "
                f"segment (commitlog_file_size_bytes = {size})"
            )
        if self.file_reserved_hours < 0:
            raise ConfigError(f"file_reserved_hours must be >= 0, got {self.file_reserved_hours}")
        for name in (
            "disk_max_used_space_ratio",
            "disk_space_clean_forcibly_ratio",
            "disk_space_warning_level_ratio",
        ):
            if not 0 < getattr(self, name) <= 1:
                raise ConfigError(f"{name} must be in (0, 1], got {getattr(self, name)}")
        try:
            hours = self.delete_hours
        except ValueError:
            raise ConfigError(
                f"delete_when must be hours like '04' or '01;04', got {self.delete_when!r}"
            ) from None
        if any(not 0 <= h < 24 for h in hours):
            raise ConfigError(f"delete_when hours must be 0..23, got {self.delete_when!r}")

    @property
    def delete_hours(self) -> frozenset[int]:
        return frozenset(int(h) for h in self.delete_when.split(";") if h.strip())
