"""IndexFile: one file of the key index, an on-disk hash table from ``topic#key`` to phys offsets.

The layout is RocketMQ's (``IndexHeader`` / ``IndexFile``), byte for byte::

    0          40                       40 + 4*slots                  40 + 4*slots + 20*entries
    +----------+------------------------+--------------------------------------------+
    |  header  |  slot table: i32 each  |  entries: 20 bytes each; entry 0 unused    |
    +----------+------------------------+--------------------------------------------+

Header, 40 bytes (:data:`INDEX_HEADER`)::

    0                 8                 16                24                32        36        40
    +-----------------+-----------------+-----------------+-----------------+---------+---------+
    | beginTimestamp  | endTimestamp    | beginPhyOffset  | endPhyOffset    | hashSlot| index   |
    |   i64 ms        |   i64 ms        |   i64           |   i64           | Count   | Count   |
    +-----------------+-----------------+-----------------+-----------------+---------+---------+

Slot, 4 bytes (:data:`HASH_SLOT`): the number of the newest entry whose key falls
in the slot, 0 when none. Entry, 20 bytes (:data:`INDEX_ENTRY`)::

    0          4                              12           16           20
    +----------+------------------------------+------------+------------+
    | keyHash  | phyOffset                i64 | timeDiff   | prevIndex  |
    |   i32    |                              | i32 s      |   i32      |
    +----------+------------------------------+------------+------------+

* ``keyHash`` is RocketMQ's ``indexKeyHashMethod``: ``abs(String.hashCode(key))``,
  with ``Integer.MIN_VALUE`` (whose Java ``abs`` stays negative) stored as 0. The
  slot is ``keyHash % slots``, which equals ``index_slot(hashCode, slots)``.
* ``timeDiff`` is whole seconds from ``beginTimestamp`` to the record's store
  time, clamped to ``[0, 2**31 - 1]``.
* ``prevIndex`` chains the entries of one slot, newest first; 0 ends a chain.
* Entries are numbered from 1 (number 0 ends a chain), so ``indexCount`` is one
  more than the entries written and a file holds ``entries - 1`` keys. A new
  file is written with ``indexCount`` 1; RocketMQ leaves 0 there until its first
  key and reads 0 as 1, as :meth:`IndexFile.open` does.
* ``hashSlotCount`` counts the slots in use (RocketMQ 4.9+; older versions
  counted keys). Nothing reads it back.

The file is sparse. The default geometry is 420,000,040 bytes, nearly all of
it entries that a quiet broker never reaches, so it is created with
``ftruncate`` and not ``fallocate``. Blocks are still reserved through
:class:`StoreIO` before they are written, the slot table at creation and the
entries a chunk ahead of the writer, so a full disk is an ``OSError(ENOSPC)``
from a put and never a ``SIGBUS`` from a store into an unbacked page.
"""

from __future__ import annotations

import array
import contextlib
import logging
import mmap
import os
import struct
import sys
import threading
from collections.abc import Iterator

from pocketmq.broker.store import speedups
from pocketmq.broker.store.io import StoreIO
from pocketmq.common.errors import StoreError

__all__ = [
    "HASH_SLOT",
    "INDEX_ENTRY",
    "INDEX_HEADER",
    "IndexFile",
    "index_key_hash",
    "insert_entries",
    "iter_index_entries",
    "py_insert_entries",
]

log = logging.getLogger(__name__)

#: beginTimestamp, endTimestamp (ms), beginPhyOffset, endPhyOffset, hashSlotCount, indexCount.
INDEX_HEADER = struct.Struct(">qqqqii")
#: Number of the newest entry of a slot (0: none).
HASH_SLOT = struct.Struct(">i")
#: keyHash, phyOffset, timeDiff (s since beginTimestamp), prevIndex (0 ends the chain).
INDEX_ENTRY = struct.Struct(">iqii")

_INT32_MAX = 0x7FFFFFFF
_INT32_MIN = -(1 << 31)
_RESERVE_CHUNK_BYTES = 1 << 20  # entry blocks reserved ahead of the writer (52,428 entries)


def index_key_hash(java_hash: int) -> int:
    """RocketMQ's stored keyHash: ``abs(hashCode)``, and 0 for ``Integer.MIN_VALUE``."""
    return 0 if java_hash == _INT32_MIN else abs(java_hash)


def py_insert_entries(
    mm: mmap.mmap | bytearray,
    slots: int,
    entry_base: int,
    count: int,
    hashes: list[int],
    phys_offsets: list[int],
    first: int,
    todo: int,
    time_diff_s: int,
) -> int:
    """Write entries ``count, count + 1, ...`` for ``hashes[first:first + todo]``.

    Each entry (``phys_offsets`` alongside) is linked in front of its slot's
    chain and the slot points at it. Returns how many of the slots were empty
    before, the increase of ``hashSlotCount``; the header is the caller's.
    """
    slot_unpack, slot_pack, entry_pack = (
        HASH_SLOT.unpack_from,
        HASH_SLOT.pack_into,
        INDEX_ENTRY.pack_into,
    )
    slot_base, slot_size, entry_size = INDEX_HEADER.size, HASH_SLOT.size, INDEX_ENTRY.size
    new_slots = 0
    for i in range(first, first + todo):
        key_hash = hashes[i]
        slot_pos = slot_base + (key_hash % slots) * slot_size
        prev = slot_unpack(mm, slot_pos)[0]
        if prev <= 0 or prev >= count:  # empty, or stale past the entries written
            prev = 0
            new_slots += 1
        entry_pack(
            mm, entry_base + count * entry_size, key_hash, phys_offsets[i], time_diff_s, prev
        )
        slot_pack(mm, slot_pos, count)
        count += 1
    return new_slots


insert_entries = speedups.pick("insert_entries", py_insert_entries)


def iter_index_entries(path: str, *, slots: int) -> Iterator[tuple[int, int]]:
    """``(keyHash, phyOffset)`` of every entry of the file at *path*, oldest first, read-only.

    For offline tools (``store verify``). *slots* is the store's ``index_slots``:
    the contents cannot tell it (a file whose only key is at phys offset 0 looks
    like many geometries), so it is never guessed.
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < INDEX_HEADER.size:
            raise StoreError(f"index file {path} is {size} bytes, shorter than its header")
        with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mm:
            header = INDEX_HEADER.unpack_from(mm, 0)
            count = header[5]
            if count <= 1:
                return
            base = INDEX_HEADER.size + slots * HASH_SLOT.size
            if base + count * INDEX_ENTRY.size > size:
                raise StoreError(
                    f"index file {path}: indexCount {count} with {slots} slots "
                    f"needs more than its {size} bytes"
                )
            entries = mm[base + INDEX_ENTRY.size : base + count * INDEX_ENTRY.size]
    for key_hash, phys_offset, _time_diff_s, _prev in INDEX_ENTRY.iter_unpack(entries):
        yield key_hash, phys_offset


class IndexFile:
    """One index file, mapped whole. The owner thread puts and selects; :meth:`flush`
    may run in a worker thread at the same time."""

    def __init__(self, path: str, fd: int, *, slots: int, entries: int, io: StoreIO) -> None:
        self.path = path
        self.slots = slots
        self.max_entries = entries
        self.file_size = self.size_for(slots, entries)
        self._entry_base = INDEX_HEADER.size + slots * HASH_SLOT.size
        self._fd = fd
        self._io = io
        self._mm = mmap.mmap(fd, self.file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        (
            self.begin_timestamp_ms,
            self.end_timestamp_ms,
            self.begin_phys_offset,
            self.end_phys_offset,
            self.hash_slot_count,
            self.index_count,
        ) = INDEX_HEADER.unpack_from(self._mm, 0)
        self.index_count = max(self.index_count, 1)
        self._reserved_end = 0  # file bytes known to have disk blocks
        self._flushed_count = self.index_count
        self._lock = threading.Lock()  # flush (worker thread) against close
        self.closed = False

    @staticmethod
    def size_for(slots: int, entries: int) -> int:
        return INDEX_HEADER.size + slots * HASH_SLOT.size + entries * INDEX_ENTRY.size

    # -- opening -----------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: str,
        *,
        slots: int,
        entries: int,
        io: StoreIO,
        begin_phys_offset: int = 0,
        begin_timestamp_ms: int = 0,
    ) -> IndexFile:
        """A new, empty file; a file that follows a full one starts at its end (RocketMQ)."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.ftruncate(fd, cls.size_for(slots, entries))
            f = cls(path, fd, slots=slots, entries=entries, io=io)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        try:
            f._reserve(f._entry_base + INDEX_ENTRY.size)
        except BaseException:
            f.destroy()
            raise
        f.begin_phys_offset = f.end_phys_offset = begin_phys_offset
        f.begin_timestamp_ms = f.end_timestamp_ms = begin_timestamp_ms
        f._write_header()
        f._flushed_count = 0  # the header is not on disk yet
        return f

    @classmethod
    def open(cls, path: str, *, slots: int, entries: int, io: StoreIO) -> IndexFile:
        """Map an existing file; :class:`StoreError` when its size or header do not fit."""
        fd = os.open(path, os.O_RDWR)
        try:
            expected = cls.size_for(slots, entries)
            actual = os.fstat(fd).st_size
            if actual != expected:
                raise StoreError(
                    f"index file {path} is {actual} bytes; {slots} slots and "
                    f"{entries} entries make {expected} (were index_slots or "
                    "index_entries changed?)"
                )
            f = cls(path, fd, slots=slots, entries=entries, io=io)
        except BaseException:
            os.close(fd)
            raise
        if not (0 <= f.hash_slot_count <= slots and f.index_count <= entries):
            count, used = f.index_count, f.hash_slot_count
            f.close()
            raise StoreError(
                f"index file {path} has a corrupt header: indexCount {count} "
                f"(max {entries}), hashSlotCount {used} (max {slots})"
            )
        return f

    # -- writing -----------------------------------------------------------------------
    @property
    def is_full(self) -> bool:
        return self.index_count >= self.max_entries

    @property
    def key_count(self) -> int:
        return self.index_count - 1

    def put_entries(
        self, key_hashes: list[int], phys_offsets: list[int], first: int, store_timestamp_ms: int
    ) -> int:
        """Add ``key_hashes[first:]`` (``phys_offsets`` alongside) until the file is full;
        return how many. All were stored at *store_timestamp_ms*.

        Each key is one entry linked in front of its slot's chain; the header is
        written once, after the entries.
        """
        count = self.index_count
        todo = len(key_hashes) - first
        if todo > self.max_entries - count:
            todo = self.max_entries - count
        if todo <= 0:
            return 0
        end = self._entry_base + (count + todo) * INDEX_ENTRY.size
        if end > self._reserved_end:
            self._reserve(end)
        if count == 1:
            # RocketMQ sets the begin fields after computing the first timeDiff from the
            # previous file's end; setting them first gives the first entry its true time.
            self.begin_timestamp_ms = store_timestamp_ms
            self.begin_phys_offset = phys_offsets[first]
        time_diff_s = (store_timestamp_ms - self.begin_timestamp_ms) // 1000
        if not 0 <= time_diff_s <= _INT32_MAX:
            time_diff_s = 0 if time_diff_s < 0 else _INT32_MAX
        self.hash_slot_count += insert_entries(
            self._mm,
            self.slots,
            self._entry_base,
            count,
            key_hashes,
            phys_offsets,
            first,
            todo,
            time_diff_s,
        )
        self.index_count = count + todo
        self.end_phys_offset = phys_offsets[first + todo - 1]
        self.end_timestamp_ms = store_timestamp_ms
        self._write_header()
        return todo

    def reserve_entries(self, count: int) -> None:
        """Give the next *count* entries (at most what the file has left) disk blocks now."""
        count = min(count, self.max_entries - self.index_count)
        end = self._entry_base + (self.index_count + count) * INDEX_ENTRY.size
        if count > 0 and end > self._reserved_end:
            self._reserve(end)

    def _write_header(self) -> None:
        INDEX_HEADER.pack_into(
            self._mm,
            0,
            self.begin_timestamp_ms,
            self.end_timestamp_ms,
            self.begin_phys_offset,
            self.end_phys_offset,
            self.hash_slot_count,
            self.index_count,
        )

    def _reserve(self, end: int) -> None:
        """Give bytes ``[0, end)`` (and a chunk beyond) disk blocks before they are written."""
        target = min(self.file_size, max(end, self._reserved_end + _RESERVE_CHUNK_BYTES))
        self._io.allocate(self._fd, target)
        if os.fstat(self._fd).st_size < self.file_size:
            # StoreIO.allocate may fall back to ftruncate(target), which shrinks a sparse
            # file; only never-written bytes past target were cut, so re-extend.
            os.ftruncate(self._fd, self.file_size)
        self._reserved_end = target

    # -- reading -----------------------------------------------------------------------
    def time_overlaps(self, begin_timestamp_ms: int, end_timestamp_ms: int) -> bool:
        """Whether [begin, end] meets this file's [beginTimestamp, endTimestamp]."""
        return (
            begin_timestamp_ms <= self.end_timestamp_ms
            and end_timestamp_ms >= self.begin_timestamp_ms
        )

    def select(
        self,
        key_hash: int,
        max_count: int,
        begin_timestamp_ms: int,
        end_timestamp_ms: int,
        out: list[int],
    ) -> None:
        """Append to *out* the phys offsets of entries of *key_hash* in the time range, newest
        first, until *out* holds *max_count*.

        An entry's time is known to the second below its store time, so it
        matches when ``[time, time + 999 ms]`` meets the range: a candidate too
        many, which the caller's check of the record drops, rather than one too
        few (RocketMQ compares the truncated time and can miss a record stored
        in the first second of the range).
        """
        count = self.index_count
        mm, entry_base, begin_ms = self._mm, self._entry_base, self.begin_timestamp_ms
        slot_pos = INDEX_HEADER.size + (key_hash % self.slots) * HASH_SLOT.size
        index = HASH_SLOT.unpack_from(mm, slot_pos)[0]
        while 0 < index < count and len(out) < max_count:
            hash_read, phys_offset, time_diff_s, prev = INDEX_ENTRY.unpack_from(
                mm, entry_base + index * INDEX_ENTRY.size
            )
            if time_diff_s < 0:
                break
            time_ms = begin_ms + time_diff_s * 1000
            if (
                hash_read == key_hash
                and time_ms <= end_timestamp_ms
                and time_ms + 999 >= begin_timestamp_ms
            ):
                out.append(phys_offset)
            if time_ms + 999 < begin_timestamp_ms or prev >= index:
                break  # older entries are older still; a chain only goes back (a loop is damage)
            index = prev

    # -- crash repair ------------------------------------------------------------------
    def repair_slots(self) -> bool:
        """Rebuild the slot table from the entries when a slot points past ``indexCount``.

        After a crash the header on disk may be older than slot pages written
        back later. A put would read such a slot as empty and cut the older
        entries of its chain off; rebuilding the slots from entries ``1 ..
        indexCount - 1`` restores every chain. Returns whether it repaired.
        """
        table = array.array("i")
        table.frombytes(self._mm[INDEX_HEADER.size : self._entry_base])
        if sys.byteorder == "little":
            table.byteswap()
        count = self.index_count
        if not table or (max(table) < count and min(table) >= 0):
            return False
        table = array.array("i", bytes(4 * self.slots))
        entries = self._mm[
            self._entry_base + INDEX_ENTRY.size : self._entry_base + count * INDEX_ENTRY.size
        ]
        slots = self.slots
        for number, (key_hash, _phys, _diff, _prev) in enumerate(
            INDEX_ENTRY.iter_unpack(entries), start=1
        ):
            table[key_hash % slots] = number
        used = len(table) - table.count(0)
        if sys.byteorder == "little":
            table.byteswap()
        self._mm[INDEX_HEADER.size : self._entry_base] = table.tobytes()
        self.hash_slot_count = used
        self._write_header()
        self._flushed_count = 0
        log.warning(
            "index file %s: slots pointed past indexCount %d after a crash; rebuilt "
            "%d slots from %d entries",
            self.path,
            count,
            used,
            count - 1,
        )
        return True

    # -- durability --------------------------------------------------------------------
    def flush(self) -> None:
        """Sync what is written (worker-thread safe)."""
        with self._lock:
            if self.closed:
                return
            count = self.index_count
            if count != self._flushed_count:
                self._io.sync(self._fd)
                self._flushed_count = count

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._mm.close()
            os.close(self._fd)

    def destroy(self) -> None:
        self.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        log.info(
            "deleted index file %s (%d keys, phys offsets %d..%d)",
            self.path,
            self.key_count,
            self.begin_phys_offset,
            self.end_phys_offset,
        )

    def __repr__(self) -> str:
        return (
            f"IndexFile({self.path!r}, keys={self.key_count}, phys="
            f"{self.begin_phys_offset}..{self.end_phys_offset}, time="
            f"{self.begin_timestamp_ms}..{self.end_timestamp_ms})"
        )
