"""Outcomes of store calls: status enums and frozen result records.

Expected outcomes are statuses, never exceptions (``PutStatus.DISK_FULL`` is an
answer, not a crash); the gRPC layer maps each to a status code in one table.
"""

from __future__ import annotations

import enum
from concurrent.futures import Future
from dataclasses import dataclass, field

__all__ = ["GetResult", "GetStatus", "PutResult", "PutStatus", "RecoveryReport"]


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"  # stored, not yet durable after the timeout
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"  # bad size, CRC, topic, layout
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    DISK_FULL = "DISK_FULL"  # above disk_space_warning_level_ratio
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"  # read-only after an I/O error, or stopped


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(frozen=True, slots=True, kw_only=True)
class PutResult:
    """Outcome of a put. Per-record lists are parallel and in the order sent.

    With synchronous flush ``flush_future`` resolves to ``PUT_OK`` once every
    byte of the put is durable, or ``FLUSH_DISK_TIMEOUT``; it is resolved by a
    worker thread (wrap it with ``asyncio.wrap_future``).
    """

    status: PutStatus
    error: str = ""
    store_timestamp_ms: int = 0
    topics: list[str] = field(default_factory=list)
    queue_ids: list[int] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)
    phys_offsets: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    uniq_keys: list[str] = field(default_factory=list)
    flush_future: Future[PutStatus] | None = None

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK

    @property
    def end_offset(self) -> int:
        """Where the put ends in the commit log (a put is appended whole, in order: its
        last record ends it); what a flush or a replica must reach for it."""
        return self.phys_offsets[-1] + self.sizes[-1]


@dataclass(frozen=True, slots=True, kw_only=True)
class GetResult:
    """Outcome of a read by queue offset.

    ``records`` are the stored bytes of each matching record, as on disk; a
    read made ``as_blob`` leaves it empty and has them back to back in
    ``blob`` instead (what a pull sends, with no object per record).
    ``queue_offsets`` has one entry per record either way.
    ``next_begin_offset`` is where the next read of this queue should start.
    """

    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    records: list[bytes] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)
    blob: bytes | None = None

    @property
    def message_count(self) -> int:
        return len(self.queue_offsets) if self.blob is not None else len(self.records)

    @property
    def total_bytes(self) -> int:
        return len(self.blob) if self.blob is not None else sum(map(len, self.records))

    @property
    def records_blob(self) -> bytes:
        """The records back to back, whichever way they were read."""
        return self.blob if self.blob is not None else b"".join(self.records)


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveryReport:
    """What recovery found and did; logged and returned by ``MessageStore.start``."""

    clean_shutdown: bool
    scanned_from: int  # commit-log offset the scan started at
    max_phys_offset: int  # end of the valid log after recovery
    truncated_bytes: int  # commit-log bytes cut past the first bad record
    first_bad_offset: int | None  # where the scan stopped on damage, if it did
    reason: str  # why it stopped there ("" when the log simply ended)
    redispatched: int  # records re-dispatched to consume queues / index
    consume_queue_units_trimmed: int
    index_rebuilt_from: int | None
    seconds: float
