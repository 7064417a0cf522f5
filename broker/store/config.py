"""StoreConfig: every knob of the message store, with RocketMQ's defaults."""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields

from pocketmq.common.errors import ConfigError

__all__ = ["FlushDiskType", "StoreConfig"]

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


class FlushDiskType(enum.Enum):
    ASYNC_FLUSH = "async"
    SYNC_FLUSH = "sync"


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreConfig:
    data_dir: str
    # -- commit log ----------------------------------------------------------------
    commitlog_file_size: int = 1 * GiB              # bytes per segment (mappedFileSizeCommitLog)
    max_message_size: int = 4 * MiB                 # bytes of one body (maxMessageSize)
    max_batch_size: int = 4 * MiB                   # bytes of one batch blob
    store_host: tuple[str, int] = ("127.0.0.1", 10911)  # written into STOREHOST
    check_crc_on_recover: bool = True
    # -- flush ---------------------------------------------------------------------
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_commitlog_ms: int = 500          # async flush period
    flush_commitlog_least_pages: int = 4            # 4 KiB pages dirty before a periodic flush
    flush_commitlog_thorough_interval_ms: int = 10_000  # flush everything this often
    sync_flush_timeout_ms: int = 5_000              # FLUSH_DISK_TIMEOUT after this
    flush_interval_consume_queue_ms: int = 1_000
    # Read the commit log's next pages into the page cache ahead of the writer (warm.py;
    # RocketMQ's warmMapedFileEnable, done by reading so it never races the writer).
    warm_mapped_file_enable: bool = True
    warm_ahead_bytes: int = 32 * MiB
    # -- consume queue and index ------------------------------------------------------
    consume_queue_units_per_file: int = 300_000     # 20-byte units per file
    message_index_enable: bool = True
    index_slots: int = 5_000_000                    # hash slots per index file
    index_entries: int = 20_000_000                 # entries per index file
    default_query_max: int = 32                     # messages a key query returns by default
    # -- reads -----------------------------------------------------------------------
    max_transfer_count: int = 32                    # messages per pull (in memory)
    max_transfer_bytes: int = 256 * KiB             # bytes per pull (in memory)
    # -- retention ---------------------------------------------------------------------
    file_reserved_hours: float = 72                 # fileReservedTime
    delete_when: str = "04"                         # hours of day, ";"-separated
    clean_resource_interval_ms: int = 10_000
    delete_files_batch_max: int = 10
    disk_max_used_space_ratio: float = 0.75         # delete expired files outside delete_when
    disk_space_clean_forcibly_ratio: float = 0.85   # delete unexpired files too
    disk_space_warning_level_ratio: float = 0.90    # reject writes ("disk full")

    def __post_init__(self) -> None:
        def positive(name: str) -> None:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")

        for f in fields(self):
            if f.type in ("int", "float") and f.name not in ("file_reserved_hours",):
                positive(f.name)
        if self.commitlog_file_size < 4 * KiB:
            raise ConfigError(f"commitlog_file_size is {self.commitlog_file_size} bytes; "
                              "at least 4096 are needed")
        if self.max_message_size + 4 * KiB > self.commitlog_file_size:
            raise ConfigError(
                f"max_message_size ({self.max_message_size}) must leave room for a record's "
                f"head inside one commit-log segment ({self.commitlog_file_size} bytes)")
        if self.max_batch_size > self.commitlog_file_size - 8:
            raise ConfigError(f"max_batch_size ({self.max_batch_size}) must fit one commit-log "
                              f"segment ({self.commitlog_file_size} bytes)")
        if self.file_reserved_hours < 0:
            raise ConfigError(f"file_reserved_hours must be >= 0, got {self.file_reserved_hours}")
        for name in ("disk_max_used_space_ratio", "disk_space_clean_forcibly_ratio",
                     "disk_space_warning_level_ratio"):
            if not 0 < getattr(self, name) <= 1:
                raise ConfigError(f"{name} must be in (0, 1], got {getattr(self, name)}")
        try:
            hours = self.delete_hours
        except ValueError:
            raise ConfigError(f"delete_when must be hours like '04' or '01;04', got "
                              f"{self.delete_when!r}") from None
        if any(not 0 <= h < 24 for h in hours):
            raise ConfigError(f"delete_when hours must be 0..23, got {self.delete_when!r}")

    @property
    def delete_hours(self) -> frozenset[int]:
        return frozenset(int(h) for h in self.delete_when.split(";") if h.strip())
