"""ConsumeQueue: the per-(topic, queue id) log of where each message lies in the commit log.

A consume queue is what a consumer reads by *queue offset*: unit ``n`` says where
the ``n``-th message of the queue sits in the commit log, how long it is, and
its tag code, so a pull finds its messages and filters tags without decoding
the commit log. This module owns the unit format, the files of one queue,
appending (idempotently, so recovery may re-dispatch), reading, recovery,
truncation after the commit log was cut, search by time and head deletion.

One unit, 20 bytes, big-endian (:data:`CQ_UNIT`)::

    0                               8               12                              20
    +-------------------------------+---------------+-------------------------------+
    | phys_offset           i64     | size      i32 | tags_code               i64   |
    +-------------------------------+---------------+-------------------------------+
      commit-log byte offset          record bytes    Java hash of TAGS (0: none);
      of the record                                   delivery time for delay queues

Unit ``n`` sits at byte ``n * 20`` of the queue's logical log, which is cut into
segments of ``units_per_file`` units (300,000: 6,000,000 bytes) in
``DATA/consumequeue/{topic}/{queue_id}/``, each named by the 20-digit *byte*
offset of its first unit::

    00000000000000000000   units       0 .. 299,999
    00000000000006000000   units 300,000 .. 599,999

A unit is valid while ``phys_offset >= 0 and size > 0``; the first unit that is
not (a zeroed, never-written unit included) ends the queue on recovery. A queue
whose first message has a queue offset above 0 (RocketMQ ``fillPreBlank``) has
the units before it in its first segment filled with :data:`BLANK_UNIT`
``(0, 0x7FFFFFFF, 0)``: valid for recovery, never returned to a reader.

Units of a queue are in commit-log order, so ``phys_offset`` never decreases
along the queue (blank units have 0); truncation and head correction binary
search on that.

Segments are mapped on use: every entry point that reads or writes units calls
:attr:`ConsumeQueue.on_use` first (the store's LRU of open queues, which may
unmap idle ones), and a segment that was unmapped maps itself again. Positions
live in memory, so an unmapped queue still answers ``min_offset``,
``max_offset`` and ``dirty_bytes``, and the store-wide sweeps (truncation,
head deletion) skip a queue whose cached bounds show there is nothing to do
without mapping it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from collections.abc import Callable
from mmap import mmap

from pocketmq.broker.store.io import StoreIO
from pocketmq.broker.store.mapped_file import MappedFile
from pocketmq.broker.store.mapped_file_queue import MappedFileQueue
from pocketmq.common.errors import StoreError

__all__ = ["BLANK_UNIT", "CQ_UNIT", "CQ_UNIT_SIZE", "ConsumeQueue"]

log = logging.getLogger(__name__)

#: One consume-queue unit: commit-log ``phys_offset`` i64, record ``size`` i32, ``tags_code`` i64.
CQ_UNIT = struct.Struct(">qiq")
CQ_UNIT_SIZE = CQ_UNIT.size  # 20

# Integer.MAX_VALUE: no record is that long (max_message_size_bytes is 4 MiB by default).
_BLANK_SIZE = 0x7FFFFFFF
#: Filler before the first unit of a queue that starts above offset 0 (RocketMQ ``fillPreBlank``).
BLANK_UNIT = CQ_UNIT.pack(0, _BLANK_SIZE, 0)


def _is_blank(phys_offset: int, size: int) -> bool:
    return phys_offset == 0 and size == _BLANK_SIZE


def _count_valid_units(mf: MappedFile) -> int:
    """Units from the start of *mf* up to the first one with ``phys < 0 or size <= 0``."""
    for index, (phys_offset, size, _tags_code) in enumerate(CQ_UNIT.iter_unpack(mf.buffer)):
        if phys_offset < 0 or size <= 0:
            return index
    return mf.file_size // CQ_UNIT_SIZE


class ConsumeQueue:
    """The consume queue of one (topic, queue id), in *directory* (``.../{topic}/{queue_id}``).

    The owner thread appends, reads, truncates and deletes; :meth:`flush` may run
    in a worker thread at the same time. Every position in the API is a logical
    queue offset; byte positions stay inside.
    """

    def __init__(
        self,
        topic: str,
        queue_id: int,
        directory: str,
        *,
        units_per_file: int = 300_000,
        io: StoreIO | None = None,
        on_use: Callable[[ConsumeQueue], None] | None = None,
    ) -> None:
        if units_per_file <= 0:
            raise ValueError(f"units_per_file must be positive, got {units_per_file}")
        self.topic = topic
        self.queue_id = queue_id
        self.directory = directory
        self.units_per_file = units_per_file
        # Sparse: a queue's files get disk blocks a page or so ahead of its units.
        self._mfq = MappedFileQueue(directory, units_per_file * CQ_UNIT_SIZE, io=io, sparse=True)
        self._min_offset = 0  # first queue offset a reader may ask for
        self._max_phys_end = -1  # phys_offset + size of the newest real unit
        # phys_offset of the unit at min_offset while min_offset < max_offset (None:
        # unknown); lets delete_expired skip a live queue without mapping it.
        self._min_phys: int | None = None
        #: Called with the queue before its segments are used (owner thread only).
        self.on_use = on_use
        #: Set by :meth:`load` when segments are short or missing: units may be lost
        #: anywhere, so the owner rebuilds the queue from the commit log.
        self.damaged = False

    def __repr__(self) -> str:
        return (
            f"ConsumeQueue({self.topic!r}, {self.queue_id}, min={self._min_offset}, "
            f"max={self.max_offset})"
        )

    @property
    def _name(self) -> str:
        return f"{self.topic}:{self.queue_id}"

    # -- positions -------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        """Queue offset of the first unit a reader may ask for."""
        return self._min_offset

    @property
    def max_offset(self) -> int:
        """Queue offset of the next unit to write (units ever written, deleted head included)."""
        files = self._mfq.files
        if not files:
            return 0
        last = files[-1]
        return (last.file_from_offset + last.wrote_position) // CQ_UNIT_SIZE

    @property
    def max_phys_end(self) -> int:
        """``phys_offset + size`` of the newest unit, -1 when there is none (dispatch progress)."""
        return self._max_phys_end

    @property
    def dirty_bytes(self) -> int:
        return self._mfq.dirty_bytes()

    @property
    def segment_count(self) -> int:
        """Segments of the queue, the one prepared ahead included (what it may map)."""
        return self._mfq.segment_count()

    @property
    def mapped_count(self) -> int:
        return self._mfq.mapped_count()

    def unmap(self) -> bool:
        """Unmap the queue's segments, keeping its positions (owner thread; the LRU).
        Written bytes stay dirty in the page cache until the next flush syncs them."""
        return self._mfq.unmap()

    def _touch(self) -> None:
        if self.on_use is not None:
            self.on_use(self)

    # -- lifecycle -------------------------------------------------------------------
    def load(self) -> None:
        """Map the queue's segments; :meth:`recover` then finds where the units end.

        Segments are created at full size, so a shorter one lost units to damage
        and a missing one leaves a hole; recovery only scans the last three
        segments and would not notice either. Such a queue is marked
        :attr:`damaged` (and left unmapped when it has a hole).
        """
        short = self._short_segments()
        try:
            self._mfq.load()
        except StoreError as exc:
            self._mfq.close()
            self._mfq.files.clear()
            self.damaged = True
            log.error("consume queue %s cannot be loaded: %s", self._name, exc)
            return
        if short:
            self.damaged = True
            log.error(
                "consume queue %s: segments %s are shorter than %d bytes; units were lost",
                self._name,
                ", ".join(short),
                self._mfq.file_size,
            )

    def recover(self) -> None:
        """Find the end of the valid units and discard everything after it.

        As RocketMQ's ``ConsumeQueue.recover``: the scan starts at the third-last
        segment (earlier ones are taken as complete) and stops at the first unit
        with ``phys_offset < 0 or size <= 0``. Later segments are deleted and stale
        bytes after the end are zeroed, so that a second crash cannot revive them.
        """
        self._min_phys = None
        files = self._mfq.files
        if not files:
            self._min_offset, self._max_phys_end = 0, -1
            return
        self._touch()
        end_byte = files[max(0, len(files) - 3)].file_from_offset
        for mf in files[max(0, len(files) - 3) :]:
            valid_units = _count_valid_units(mf)
            end_byte = mf.file_from_offset + valid_units * CQ_UNIT_SIZE
            if valid_units < self.units_per_file:
                break
        self._discard_from(end_byte)
        self._min_offset = self._first_unit_after_blanks()
        self._max_phys_end = self._unit_end(self.max_offset - 1)
        log.debug(
            "recovered consume queue %s in %s: queue offsets [%d, %d), max phys end %d",
            self._name,
            self.directory,
            self._min_offset,
            self.max_offset,
            self._max_phys_end,
        )

    def flush(self) -> None:
        """Sync written units (safe in a worker thread while the owner appends)."""
        self._mfq.flush()

    def close(self) -> None:
        self._mfq.close()

    def destroy(self) -> None:
        """Close and delete every segment and the queue's directory."""
        self._mfq.destroy()
        self._min_offset, self._max_phys_end, self._min_phys = 0, -1, None
        # Already gone, or holding foreign files: those are left to a person.
        with contextlib.suppress(OSError):
            os.rmdir(self.directory)

    # -- writing ---------------------------------------------------------------------
    def append(self, queue_offset: int, phys_offset: int, size: int, tags_code: int) -> bool:
        """Write the unit of *queue_offset*; False when it is already there (re-dispatch).

        A unit beyond :attr:`max_offset` starts an empty queue there (the units
        before it become blanks); in a queue that holds units it is a gap, and a
        gap is a broken invariant: :class:`StoreError`.
        """
        max_offset = self.max_offset
        if queue_offset != max_offset:
            if queue_offset < max_offset:
                return False
            self._touch()
            self._start_at(queue_offset, max_offset)
        else:
            self._touch()
        mf = self._mfq.last_file()
        assert mf is not None
        mf.reserve(mf.wrote_position + CQ_UNIT_SIZE)
        CQ_UNIT.pack_into(mf.buffer, mf.wrote_position, phys_offset, size, tags_code)
        mf.wrote_position += CQ_UNIT_SIZE
        self._max_phys_end = phys_offset + size
        return True

    def prepare(self, first_queue_offset: int, count: int) -> None:
        """Create the files and reserve the blocks that *count* units from
        *first_queue_offset* need, before their records go into the commit log.

        Raises ``OSError`` (ENOSPC on a full disk) and writes no unit: the put is
        then refused whole, and the dispatch that follows a successful put has
        nothing left that can run out of space.
        """
        self._touch()
        start = max(first_queue_offset, self.max_offset) if self._mfq.files else first_queue_offset
        self._mfq.prepare(start * CQ_UNIT_SIZE, (start + count) * CQ_UNIT_SIZE)

    def append_many(self, first_queue_offset: int, units: bytes | memoryview) -> int:
        """Write packed units for consecutive queue offsets; return how many were new.

        The prefix already present is skipped; the rest is copied one slice per
        segment. The units are the caller's (dispatch builds them with :data:`CQ_UNIT`).
        """
        if len(units) % CQ_UNIT_SIZE:
            raise ValueError(f"{len(units)} bytes are not whole {CQ_UNIT_SIZE}-byte units")
        count = len(units) // CQ_UNIT_SIZE
        max_offset = self.max_offset
        skip = max_offset - first_queue_offset
        if skip >= count:
            return 0
        self._touch()
        if skip < 0:
            self._start_at(first_queue_offset, max_offset)
            skip = 0
        elif skip == 0:
            mf = self._mfq.last_file()
            assert mf is not None
            if mf.remaining >= len(units):  # the common case: one copy, no slicing
                mf.append(units)
                phys_offset, size, _tags_code = CQ_UNIT.unpack_from(
                    units, len(units) - CQ_UNIT_SIZE
                )
                self._max_phys_end = phys_offset + size
                return count
        view = memoryview(units)
        pos, total = skip * CQ_UNIT_SIZE, len(view)
        while pos < total:
            mf = self._mfq.last_file()
            assert mf is not None
            take = min(mf.remaining, total - pos)
            mf.append(view[pos : pos + take])
            pos += take
        phys_offset, size, _tags_code = CQ_UNIT.unpack_from(view, total - CQ_UNIT_SIZE)
        self._max_phys_end = phys_offset + size
        return count - skip

    def _start_at(self, queue_offset: int, max_offset: int) -> None:
        """Begin a queue that holds no unit at *queue_offset* (RocketMQ ``fillPreBlank``)."""
        if self._mfq.max_offset != self._mfq.min_offset:
            raise StoreError(
                f"consume queue {self._name}: unit for queue offset {queue_offset} would "
                f"leave a gap after max offset {max_offset}"
            )
        byte_offset = queue_offset * CQ_UNIT_SIZE
        files = self._mfq.files
        prepared = (
            len(files) == 1
            and files[0].wrote_position == 0
            and files[0].file_from_offset == byte_offset - byte_offset % self._mfq.file_size
        )
        if not prepared:  # keep the segment prepare() made for this very unit
            self._mfq.destroy()  # empty segments only (a crash right after creating one)
        self._min_phys = None
        mf = self._mfq.last_file(byte_offset)
        assert mf is not None
        blanks = (byte_offset - mf.file_from_offset) // CQ_UNIT_SIZE
        if blanks:
            mf.append(BLANK_UNIT * blanks)
        self._min_offset = queue_offset
        log.info(
            "consume queue %s starts at queue offset %d: %d blank units before it in %s",
            self._name,
            queue_offset,
            blanks,
            mf.path,
        )

    # -- reading ---------------------------------------------------------------------
    def get(self, queue_offset: int) -> tuple[int, int, int] | None:
        """``(phys_offset, size, tags_code)`` of *queue_offset*, None outside [min, max)."""
        if not self._min_offset <= queue_offset < self.max_offset:
            return None
        self._touch()
        byte_offset = queue_offset * CQ_UNIT_SIZE
        mf = self._mfq.find(byte_offset)
        if mf is None:
            return None
        return CQ_UNIT.unpack_from(mf.buffer, byte_offset - mf.file_from_offset)

    def read_units(self, queue_offset: int, max_units: int) -> bytes:
        """Packed units from *queue_offset*, at most *max_units*, never past max_offset.

        Stops early at the end of a segment (the caller loops); ``b""`` when
        *queue_offset* is outside [min_offset, max_offset).
        """
        if max_units <= 0 or not self._min_offset <= queue_offset < self.max_offset:
            return b""
        self._touch()
        byte_offset = queue_offset * CQ_UNIT_SIZE
        mf = self._mfq.find(byte_offset)
        if mf is None:
            return b""
        return mf.read(byte_offset - mf.file_from_offset, max_units * CQ_UNIT_SIZE)

    def unit_span(self, queue_offset: int, max_units: int) -> tuple[mmap, int, int] | None:
        """``(mapping, byte position, units)``: like :meth:`read_units`, without a copy.

        The units lie in the segment's mapping from the position on; at most
        *max_units*, never past max_offset or the segment's end. None when
        *queue_offset* is outside [min_offset, max_offset).
        """
        if max_units <= 0 or not self._min_offset <= queue_offset < self.max_offset:
            return None
        byte_offset = queue_offset * CQ_UNIT_SIZE
        mf = self._mfq.find(byte_offset)
        if mf is None or mf.closed:
            return None
        self._touch()  # a read maps the segment: the open-file LRU must know
        pos = byte_offset - mf.file_from_offset
        units = min(max_units, (mf.wrote_position - pos) // CQ_UNIT_SIZE)
        return (mf.buffer, pos, units) if units > 0 else None

    def offset_by_timestamp(
        self, timestamp_ms: int, store_time_of: Callable[[int, int], int | None]
    ) -> int:
        """First queue offset whose message was stored at or after *timestamp_ms*.

        ``store_time_of(phys_offset, size)`` reads a record's STORETIMESTAMP (None
        when the record is gone, which only happens below the commit log's head).
        Returns min_offset when every message is newer, max_offset when every one
        is older (RocketMQ ``getOffsetInQueueByTime``, lower boundary).
        """
        low, high = self._min_offset, self.max_offset
        while low < high:
            mid = (low + high) // 2
            unit = self.get(mid)
            store_timestamp_ms = None if unit is None else store_time_of(unit[0], unit[1])
            if store_timestamp_ms is None or store_timestamp_ms < timestamp_ms:
                low = mid + 1
            else:
                high = mid
        return low

    # -- truncation and deletion -------------------------------------------------------
    def truncate_phys(self, phys_offset: int) -> int:
        """Remove every unit pointing at or past commit-log *phys_offset*; return how many."""
        max_offset = self.max_offset
        if (
            0 <= self._max_phys_end <= phys_offset
            or max_offset == self._mfq.min_offset // CQ_UNIT_SIZE
        ):
            return 0  # the newest unit ends before the cut (or there is none): unmapped
        self._touch()
        cut = self._first_offset_with_phys_at_least(
            self._mfq.min_offset // CQ_UNIT_SIZE, phys_offset
        )
        if cut >= max_offset:
            return 0
        self._discard_from(cut * CQ_UNIT_SIZE)
        self._min_offset = min(self._min_offset, cut)
        self._max_phys_end = self._unit_end(cut - 1)
        log.info(
            "consume queue %s: removed queue offsets [%d, %d) at or past phys offset %d",
            self._name,
            cut,
            max_offset,
            phys_offset,
        )
        return max_offset - cut

    def delete_expired(self, commitlog_min_phys: int) -> int:
        """Delete head segments below the commit log's *commitlog_min_phys*; correct min_offset.

        A segment goes when its last unit points below the commit log's first
        byte; the last segment always stays. min_offset then moves to the first
        unit that points at a live record (max_offset when none does), as
        RocketMQ's ``correctMinOffset``. Returns the segments deleted.
        """
        if len(self._mfq.files) <= 1 and (
            self._min_offset >= self.max_offset
            or (self._min_phys is not None and self._min_phys >= commitlog_min_phys)
        ):
            return 0  # nothing below the head, known without mapping the queue
        self._touch()

        def expired(mf: MappedFile) -> bool:
            if mf.wrote_position < CQ_UNIT_SIZE:
                return True
            last_phys = CQ_UNIT.unpack_from(mf.buffer, mf.wrote_position - CQ_UNIT_SIZE)[0]
            return last_phys < commitlog_min_phys

        deleted = self._mfq.delete_head(expired, max_files=len(self._mfq.files))
        first_live = max(self._min_offset, self._mfq.min_offset // CQ_UNIT_SIZE)
        first_live = self._first_offset_with_phys_at_least(first_live, commitlog_min_phys)
        if deleted or first_live != self._min_offset:
            log.info(
                "consume queue %s: deleted %d segments below phys offset %d; min offset %d -> %d",
                self._name,
                len(deleted),
                commitlog_min_phys,
                self._min_offset,
                first_live,
            )
        self._min_offset = first_live
        self._min_phys = self._unit_at(first_live)[0] if first_live < self.max_offset else None
        return len(deleted)

    # -- internals ---------------------------------------------------------------------
    def _short_segments(self) -> list[str]:
        """Segments shorter than their size, except an empty last one: a crash between
        creating and sizing a segment, before any unit could be written to it."""
        if not os.path.isdir(self.directory):
            return []
        names = sorted(n for n in os.listdir(self.directory) if len(n) == 20 and n.isdigit())
        sizes = [os.path.getsize(os.path.join(self.directory, n)) for n in names]
        return [
            name
            for i, (name, size) in enumerate(zip(names, sizes, strict=True))
            if size < self._mfq.file_size and not (size == 0 and i == len(names) - 1)
        ]

    def _unit_at(self, queue_offset: int) -> tuple[int, int, int]:
        byte_offset = queue_offset * CQ_UNIT_SIZE
        mf = self._mfq.find(byte_offset)
        if mf is None:
            raise StoreError(
                f"consume queue {self._name}: no segment holds queue offset "
                f"{queue_offset} (byte {byte_offset}) in {self.directory}"
            )
        return CQ_UNIT.unpack_from(mf.buffer, byte_offset - mf.file_from_offset)

    def _unit_end(self, queue_offset: int) -> int:
        """``phys_offset + size`` of a real unit at *queue_offset*, else -1."""
        if queue_offset < self._mfq.min_offset // CQ_UNIT_SIZE:
            return -1
        phys_offset, size, _tags_code = self._unit_at(queue_offset)
        return -1 if _is_blank(phys_offset, size) else phys_offset + size

    def _first_offset_with_phys_at_least(self, low: int, phys_offset: int) -> int:
        """Binary search [low, max_offset) on the non-decreasing phys offsets of the units."""
        high = self.max_offset
        while low < high:
            mid = (low + high) // 2
            if self._unit_at(mid)[0] < phys_offset:
                low = mid + 1
            else:
                high = mid
        return low

    def _first_unit_after_blanks(self) -> int:
        """Queue offset of the first non-blank unit; blanks are a prefix of the first segment."""
        low, high = self._mfq.min_offset // CQ_UNIT_SIZE, self.max_offset
        while low < high:
            mid = (low + high) // 2
            phys_offset, size, _tags_code = self._unit_at(mid)
            if _is_blank(phys_offset, size):
                low = mid + 1
            else:
                high = mid
        return low

    def _discard_from(self, byte_offset: int) -> None:
        """Drop every unit from *byte_offset* on: later segments are deleted, the one
        holding it is cut there with its tail zeroed. The first segment always stays,
        so that max_offset keeps the queue's position when no unit is left."""
        self._min_phys = None
        files = self._mfq.files
        while len(files) > 1 and files[-1].file_from_offset >= byte_offset:
            mf = files.pop()
            log.info(
                "consume queue %s: deleting segment %s, past the end at byte %d",
                self._name,
                mf.path,
                byte_offset,
            )
            mf.destroy()
        last = files[-1]
        pos = byte_offset - last.file_from_offset
        if pos >= last.file_size:
            return
        if last.is_zero_from(pos):
            # Already clean: spare the ftruncate + fsync of MappedFile.truncate.
            last.wrote_position = pos
            last.flushed_position = min(last.flushed_position, pos)
        else:
            log.info("consume queue %s: zeroing %s from byte %d", self._name, last.path, pos)
            last.truncate(pos)
