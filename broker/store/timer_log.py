"""TimerLog: the append-only log of timer units, ``DATA/timerlog/``.

RocketMQ 5's ``TimerLog``. Every message parked in the timer topic (and every
roll of one) gets one fixed-size unit here; the timing wheel
(:mod:`.timer_wheel`) links the units of one wheel second into a chain
through ``prev_pos``, newest first. Segments are :class:`MappedFile` s named
by the 20-digit log position of their first byte; a segment's size is a
multiple of the unit size, so a unit never crosses a segment and no blank
filler is needed::

    DATA/timerlog/00000000000000000000   timer_log_file_size_bytes each
    DATA/timerlog/00000000000104857600   ...

One unit, 64 bytes, big-endian (``UNIT``)::

    ┌───────┬───────┬──────────┬────────┬────────────┬────────────┐
    │ magic │ crc   │ prev_pos │ second │ deliver_ms │ enqueue_ms │
    │ i32   │ u32   │ i64      │ i64    │ i64        │ i64        │
    └───────┴───────┴──────────┴────────┴────────────┴────────────┘
     0       4       8          16       24           32           40
    ┌─────────────┬──────┬──────────────┬────────────┐
    │ phys_offset │ size │ queue_offset │ roll_times │
    │ i64         │ i32  │ i64          │ i32        │
    └─────────────┴──────┴──────────────┴────────────┘
     40            48     52             60           64

    magic         UNIT_MAGIC; zero where the log ends
    crc           zlib CRC-32 of bytes 8..64: a torn or stale unit fails it
    prev_pos      log position of the previous unit of the same wheel second; -1 ends the chain
    second        the wheel second (ms // 1000) the unit is linked into: its delivery second,
                  the cursor's second when that was already past, or the roll horizon when
                  the delivery lies beyond it
    deliver_ms    the delivery time the message asked for (ms since the epoch)
    enqueue_ms    broker clock when the unit was written
    phys_offset   commit-log offset of the parked record (topic rmq_sys_wheel_timer) ...
    size          ... and its size in bytes
    queue_offset  its offset in rmq_sys_wheel_timer queue 0: units are appended in this order,
                  so recovery knows how far the timer topic was turned into units
    roll_times    how often the message was re-parked at the horizon before this unit

RocketMQ's unit is 52 bytes (size, prev pos, magic, enqueue time, delay as an
i32 offset, commit-log offset and size, topic hash, reserved); ours carries a
CRC instead of the size and hash, the delivery time whole, and the queue
offset, which recovery needs.

Guarantees: a unit is appended into the mapping by the owning thread and
durable after :meth:`TimerLog.flush`. :meth:`TimerLog.recover` scans from a
known-good position, stops at the first unit that is zero or fails its magic
or CRC, and zeroes everything after it, so that a later scan can never take
a stale unit from an earlier life of the file for a new one.
"""

from __future__ import annotations

import logging
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from pocketmq.broker.store.io import StoreIO
from pocketmq.broker.store.mapped_file_queue import MappedFileQueue

__all__ = [
    "NO_PREV",
    "UNIT",
    "UNIT_MAGIC",
    "UNIT_SIZE",
    "TimerLog",
    "TimerUnit",
    "decode_unit",
    "encode_unit",
]

log = logging.getLogger(__name__)

# magic, crc, prev_pos, second, deliver_ms, enqueue_ms, phys_offset, size, queue_offset,
# roll_times (the diagram above)
UNIT = struct.Struct(">iIqqqqqiqi")
UNIT_SIZE = UNIT.size  # 64
_HEAD = struct.Struct(">iI")  # magic, crc
_BODY = struct.Struct(">" + UNIT.format[3:])  # the fields the CRC covers
_BODY_POS = _HEAD.size  # 8
UNIT_MAGIC = 0x54494D52  # "TIMR"
NO_PREV = -1
_ZERO_CHUNK = bytes(1 << 20)

assert UNIT_SIZE == 64 and _HEAD.size + _BODY.size == UNIT_SIZE


@dataclass(frozen=True, slots=True, kw_only=True)
class TimerUnit:
    """One decoded unit; ``pos`` is where it lies in the log."""

    pos: int
    prev_pos: int
    second: int
    deliver_ms: int
    enqueue_ms: int
    phys_offset: int
    size: int
    queue_offset: int
    roll_times: int = 0

    @property
    def parked(self) -> bool:
        """Linked before its delivery second: it waits at the roll horizon."""
        return self.deliver_ms // 1000 > self.second


def encode_unit(
    *,
    prev_pos: int,
    second: int,
    deliver_ms: int,
    enqueue_ms: int,
    phys_offset: int,
    size: int,
    queue_offset: int,
    roll_times: int = 0,
) -> bytes:
    body = _BODY.pack(
        prev_pos, second, deliver_ms, enqueue_ms, phys_offset, size, queue_offset, roll_times
    )
    return _HEAD.pack(UNIT_MAGIC, zlib.crc32(body)) + body


def decode_unit(buf: bytes | bytearray | memoryview, offset: int, pos: int) -> TimerUnit | None:
    """The unit at *offset* of *buf* (lying at log position *pos*); None if it is not valid."""
    if len(buf) - offset < UNIT_SIZE:
        return None
    magic, crc = _HEAD.unpack_from(buf, offset)
    if magic != UNIT_MAGIC:
        return None
    body = bytes(buf[offset + _BODY_POS : offset + UNIT_SIZE])
    if zlib.crc32(body) != crc:
        return None
    (prev_pos, second, deliver_ms, enqueue_ms, phys_offset, size, queue_offset, roll_times) = (
        _BODY.unpack(body)
    )
    return TimerUnit(
        pos=pos,
        prev_pos=prev_pos,
        second=second,
        deliver_ms=deliver_ms,
        enqueue_ms=enqueue_ms,
        phys_offset=phys_offset,
        size=size,
        queue_offset=queue_offset,
        roll_times=roll_times,
    )


class TimerLog:
    """The segments of ``DATA/timerlog``. Appends and reads on the owner's thread;
    :meth:`flush` may run in a worker thread meanwhile."""

    def __init__(self, directory: str, file_size: int, *, io: StoreIO | None = None) -> None:
        if file_size < UNIT_SIZE or file_size % UNIT_SIZE:
            raise ValueError(
                f"timer-log segment size {file_size} is not a positive multiple "
                f"of the {UNIT_SIZE}-byte unit"
            )
        self.directory = directory
        self.file_size = file_size
        self.queue = MappedFileQueue(directory, file_size, io=io)

    # -- lifecycle -------------------------------------------------------------------
    def load(self) -> None:
        """Map the existing segments; positions are set by :meth:`recover`."""
        self.queue.load()

    def recover(self, start: int) -> tuple[int, int]:
        """Scan valid units from *start* on; cut the log after the last one.

        Returns ``(end, bytes_zeroed)``: where the log now ends, and how many
        bytes past it were not zero (a torn unit or stale ones) and were cut.
        """
        if not self.queue.files:
            return 0, 0
        pos = self.align(start)
        for _unit in self.scan(pos):
            pos += UNIT_SIZE
        zeroed = self._bytes_after(pos)
        if zeroed:
            log.warning(
                "timer log %s: cutting %d bytes after position %d (a torn or stale "
                "unit follows the last valid one)",
                self.directory,
                zeroed,
                pos,
            )
            self.queue.truncate(pos)
        self.queue.set_write_position(pos)
        return pos, zeroed

    def truncate(self, pos: int) -> None:
        """Drop every unit from *pos* on (they point at records the commit log lost)."""
        self.queue.truncate(pos)
        self.queue.set_write_position(pos)

    def close(self) -> None:
        self.queue.close()

    # -- positions -------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        return self.queue.min_offset

    @property
    def max_offset(self) -> int:
        """One past the last unit written."""
        return self.queue.max_offset

    # -- units ---------------------------------------------------------------------------
    def append(self, unit: bytes) -> int:
        """Write one encoded unit; return its log position."""
        mf = self.queue.last_file(0)
        assert mf is not None
        return mf.file_from_offset + mf.append(unit)

    def read(self, pos: int) -> TimerUnit | None:
        """The valid unit at *pos*, or None (nothing written there, deleted, or damaged)."""
        mf = self.queue.find(pos)
        if mf is None:
            return None
        offset = pos - mf.file_from_offset
        if offset % UNIT_SIZE or offset + UNIT_SIZE > mf.wrote_position:
            return None
        return decode_unit(mf.buffer[offset : offset + UNIT_SIZE], 0, pos)

    def align(self, pos: int) -> int:
        """*pos* moved into the files and down to a unit boundary."""
        if not self.queue.files:
            return 0
        first = self.queue.min_offset
        files_end = self.queue.files[-1].file_from_offset + self.file_size
        pos = min(max(pos, first), files_end)
        return pos - (pos - first) % UNIT_SIZE

    def scan(
        self, start: int, end: int | None = None, *, skip_invalid: bool = False
    ) -> Iterator[TimerUnit]:
        """Valid units from *start* (a unit boundary) to *end*.

        The scan stops at the first invalid unit, or with *skip_invalid* steps
        over it (a rebuild reading a log whose end is already known).
        """
        pos = start
        while end is None or pos < end:
            mf = self.queue.find(pos)
            if mf is None:
                return
            offset = pos - mf.file_from_offset
            chunk_end = (
                self.file_size if end is None else min(self.file_size, end - mf.file_from_offset)
            )
            chunk = mf.buffer[offset:chunk_end]
            for at in range(0, len(chunk) - UNIT_SIZE + 1, UNIT_SIZE):
                unit = decode_unit(chunk, at, pos + at)
                if unit is not None:
                    yield unit
                elif not skip_invalid:
                    return
            pos = mf.file_from_offset + chunk_end
            if chunk_end < self.file_size:
                return

    # -- durability and cleanup ------------------------------------------------------------
    def flush(self) -> int:
        """Sync what is written; return the durable log position (worker-thread safe)."""
        return self.queue.flush()

    def delete_below(self, pos: int, *, max_files: int = 10) -> int:
        """Delete head segments lying wholly below *pos*; the last is kept. Returns the count."""
        size = self.file_size
        return len(
            self.queue.delete_head(
                lambda mf: mf.file_from_offset + size <= pos, max_files=max_files
            )
        )

    def _bytes_after(self, pos: int) -> int:
        """Non-zero bytes from *pos* to the end of the files (0 when the tail is clean)."""
        dirty = 0
        for mf in self.queue.files:
            begin = max(pos - mf.file_from_offset, 0)
            if begin >= self.file_size:
                continue
            buf = mf.buffer
            for at in range(begin, self.file_size, len(_ZERO_CHUNK)):
                stop = min(at + len(_ZERO_CHUNK), self.file_size)
                if buf[at:stop] != _ZERO_CHUNK[: stop - at]:
                    dirty += (stop - at) - buf[at:stop].count(0)
        return dirty
