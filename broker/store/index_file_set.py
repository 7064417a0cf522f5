"""IndexFileSet: the key index of a store, a time-ordered run of index files in ``DATA/index``.

RocketMQ calls it ``IndexService``; it runs no task of its own, so it is not a service here.

It owns the directory of :class:`~pocketmq.broker.store.index_file.IndexFile`\\ s:
putting a record's keys (each key is indexed as ``topic#key``), rolling to a new
file when one is full, querying a key across the files whose time range
overlaps, flushing, and throwing files away: newer than the checkpoint after
a crash, past a commit-log truncation, or below the commit log's head.

Files are named by their creation time, ``yyyyMMddHHmmssSSS`` (UTC here, so that
names sort in creation order across daylight-saving changes; RocketMQ uses
local time), and the newest is the one written::

    DATA/index/20240501093015123   full      phys offsets      0 .. 81,920,311
    DATA/index/20240501101502007   written   phys offsets 81,920,311 ..

The index is derived data. Throwing a file away is always safe as long as
every newer one goes with it: :attr:`IndexFileSet.last_indexed_phys` falls
back to what the remaining files hold, and the store re-dispatches the commit
log from there. :meth:`IndexFileSet.put` skips records at or below it, so that
re-dispatch after recovery never indexes a record twice.
"""

from __future__ import annotations

import calendar
import logging
import os
import re
import time
from collections.abc import Iterable
from functools import lru_cache

from pocketmq.broker.store import speedups
from pocketmq.broker.store.index_file import IndexFile, index_key_hash
from pocketmq.broker.store.io import StoreIO
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.errors import StoreError
from pocketmq.common.hashing import java_string_hash

__all__ = ["IndexFileSet", "index_key_hashes", "key_hash_of", "py_index_key_hashes"]

log = logging.getLogger(__name__)

_FILE_NAME = re.compile(r"^\d{17}$")
_INT64_MAX = (1 << 63) - 1
_MASK32 = 0xFFFFFFFF
_POW31 = tuple(pow(31, n, 1 << 32) for n in range(256))  # 31**n mod 2**32


@lru_cache(maxsize=4096)
def _prefix_hash(topic: str) -> int:
    return java_string_hash(topic + "#")


def key_hash_of(topic: str, key: str) -> int:
    """The stored keyHash of ``topic#key`` (:func:`index_key_hash` of its Java hash).

    Java's hash is a polynomial in 31, so ``hash(p + k) = hash(p) * 31**len(k) +
    hash(k)`` (mod 2**32, len in UTF-16 code units): the ``topic#`` part is
    hashed once per topic, not once per key, which saves a fifth of a put.
    """
    units = len(key) if key.isascii() else len(key.encode("utf-16-le")) // 2
    power = _POW31[units] if units < len(_POW31) else pow(31, units, 1 << 32)
    java_hash = (_prefix_hash(topic) * power + java_string_hash(key)) & _MASK32
    return index_key_hash(java_hash - (1 << 32) if java_hash & 0x80000000 else java_hash)


def py_index_key_hashes(
    topics: list[str], keys: list[list[str]], phys_offsets: list[int], after_phys: int
) -> tuple[list[int], list[int]]:
    """:func:`key_hash_of` every non-empty key of every record past *after_phys*.

    The records are parallel lists; the result is flat, one item per index
    entry: ``(hashes, phys_offsets)``.
    """
    hashes: list[int] = []
    entry_phys: list[int] = []
    for topic, record_keys, phys_offset in zip(topics, keys, phys_offsets, strict=True):
        if phys_offset <= after_phys:
            continue
        for key in record_keys:
            if key:
                hashes.append(key_hash_of(topic, key))
                entry_phys.append(phys_offset)
    return hashes, entry_phys


index_key_hashes = speedups.pick("index_key_hashes", py_index_key_hashes)


def _file_name(timestamp_ms: int) -> str:
    seconds, millis = divmod(timestamp_ms, 1000)
    return time.strftime("%Y%m%d%H%M%S", time.gmtime(seconds)) + f"{millis:03d}"


def _file_time_ms(name: str) -> int:
    return calendar.timegm(time.strptime(name[:14], "%Y%m%d%H%M%S")) * 1000 + int(name[14:])


class IndexFileSet:
    """The index files of one store. The owner thread puts, queries and deletes;
    :meth:`flush` may run in a worker thread at the same time."""

    def __init__(
        self,
        directory: str,
        *,
        slots: int = 5_000_000,
        entries: int = 20_000_000,
        io: StoreIO | None = None,
        clock: Clock | None = None,
    ) -> None:
        if slots <= 0 or entries <= 1:
            raise ValueError(
                f"an index file needs slots > 0 and entries > 1 (entry 0 is "
                f"unused); got slots={slots}, entries={entries}"
            )
        self.directory = directory
        self.slots = slots
        self.entries = entries
        self._io = io or StoreIO()
        self._clock = clock or SystemClock()
        self._files: list[IndexFile] = []
        self._last_indexed_phys = -1

    # -- lifecycle -------------------------------------------------------------------
    def load(self, *, clean_shutdown: bool, checkpoint_timestamp_ms: int) -> None:
        """Map the index files, oldest first.

        After a crash, files whose ``endTimestamp`` is past the checkpoint hold
        keys that may never have reached the disk: as RocketMQ's
        ``IndexFileSet.load``, they are deleted (the first of them and every
        newer one, so that no hole is left behind). A file that cannot be
        mapped (wrong size, corrupt header) is deleted the same way. The newest
        file kept after a crash has its slot table checked (:meth:`IndexFile.repair_slots`).
        """
        os.makedirs(self.directory, exist_ok=True)
        names = []
        for name in sorted(os.listdir(self.directory)):
            if _FILE_NAME.match(name):
                names.append(name)
            else:
                log.warning(
                    "ignoring %s: not an index file name (yyyyMMddHHmmssSSS)",
                    os.path.join(self.directory, name),
                )
        for position, name in enumerate(names):
            path = os.path.join(self.directory, name)
            try:
                f = IndexFile.open(path, slots=self.slots, entries=self.entries, io=self._io)
            except StoreError as exc:
                log.error(
                    "%s; deleting it and the %d newer index files, which re-dispatch rebuilds",
                    exc,
                    len(names) - position - 1,
                )
                self._delete_names(names[position:])
                break
            if not clean_shutdown and f.end_timestamp_ms > checkpoint_timestamp_ms:
                log.warning(
                    "index file %s ends at %d ms, past the checkpoint's %d ms, after a "
                    "crash: deleting it and the %d newer index files",
                    path,
                    f.end_timestamp_ms,
                    checkpoint_timestamp_ms,
                    len(names) - position - 1,
                )
                f.close()
                self._delete_names(names[position:])
                break
            self._files.append(f)
        if not clean_shutdown and self._files:
            self._files[-1].repair_slots()
        self._last_indexed_phys = self._newest_indexed_phys()
        log.info(
            "loaded %d index files from %s; last indexed phys offset %d",
            len(self._files),
            self.directory,
            self._last_indexed_phys,
        )

    def flush(self) -> int:
        """Sync every file; return the timestamp the checkpoint may record.

        That is the newest file's ``endTimestamp`` as it was before the sync
        started: every key stored up to then is durable once this returns.
        Safe in a worker thread while the owner puts.
        """
        files = list(self._files)
        if not files:
            return 0
        checkpoint_timestamp_ms = files[-1].end_timestamp_ms
        for f in files:
            f.flush()
        return checkpoint_timestamp_ms

    def close(self) -> None:
        for f in self._files:
            f.close()

    def destroy(self) -> None:
        """Delete every index file."""
        files, self._files = self._files, []
        for f in files:
            f.destroy()
        self._last_indexed_phys = -1

    # -- writing -----------------------------------------------------------------------
    @property
    def last_indexed_phys(self) -> int:
        """Phys offset of the newest indexed record, -1 when none; put skips up to it."""
        return self._last_indexed_phys

    def put(
        self, topic: str, keys: Iterable[str], phys_offset: int, store_timestamp_ms: int
    ) -> None:
        """Index the record at *phys_offset* under each non-empty key of *keys*."""
        self.put_many([topic], [list(keys)], [phys_offset], store_timestamp_ms)

    def put_many(
        self,
        topics: list[str],
        keys: list[list[str]],
        phys_offsets: list[int],
        store_timestamp_ms: int,
    ) -> None:
        """Index records stored together: parallel lists, phys offsets increasing.

        Records at or below :attr:`last_indexed_phys` are skipped (re-dispatch).
        The same entries, in the same order, as :meth:`put` of each record.
        """
        if not phys_offsets or phys_offsets[-1] <= self._last_indexed_phys:
            return
        hashes, entry_phys = index_key_hashes(topics, keys, phys_offsets, self._last_indexed_phys)
        self.put_hashes(hashes, entry_phys, store_timestamp_ms)

    def put_hashes(self, hashes: list[int], entry_phys: list[int], store_timestamp_ms: int) -> None:
        """Index entries already hashed (:func:`index_key_hashes`' lists, phys offsets
        increasing and past :attr:`last_indexed_phys`), all stored at one time."""
        done = 0
        while done < len(hashes):
            f = self._files[-1] if self._files and not self._files[-1].is_full else self._roll()
            done += f.put_entries(hashes, entry_phys, done, store_timestamp_ms)
        if entry_phys:
            self._last_indexed_phys = entry_phys[-1]

    def prepare(self, key_count: int) -> None:
        """Create and reserve what indexing *key_count* more keys needs, before their
        records go into the commit log; raises ``OSError`` (ENOSPC) when the disk is full.

        When the keys do not fit the current file, the next one is started now and
        the current one keeps its unused entries (a batch's keys then share one file).
        """
        if key_count <= 0:
            return
        f = self._files[-1] if self._files and not self._files[-1].is_full else self._roll()
        if key_count > f.max_entries - f.index_count and f.index_count > 1:
            f = self._roll()
        f.reserve_entries(key_count)

    def _roll(self) -> IndexFile:
        """Create the next file; it starts where the previous one ended (RocketMQ)."""
        previous = self._files[-1] if self._files else None
        path = os.path.join(self.directory, self._next_file_name())
        os.makedirs(self.directory, exist_ok=True)
        f = IndexFile.create(
            path,
            slots=self.slots,
            entries=self.entries,
            io=self._io,
            begin_phys_offset=previous.end_phys_offset if previous else 0,
            begin_timestamp_ms=previous.end_timestamp_ms if previous else 0,
        )
        self._files.append(f)
        if previous is None:
            log.info("created index file %s", path)
        else:
            log.info(
                "created index file %s: %s is full at phys offset %d",
                path,
                previous.path,
                previous.end_phys_offset,
            )
        return f

    def _next_file_name(self) -> str:
        name = _file_name(self._clock.now_ms())
        if self._files:
            newest = os.path.basename(self._files[-1].path)
            if name <= newest:  # same millisecond, or the clock went back
                name = _file_name(_file_time_ms(newest) + 1)
        return name

    # -- reading -----------------------------------------------------------------------
    def query(
        self,
        topic: str,
        key: str,
        *,
        max_count: int,
        begin_timestamp_ms: int = 0,
        end_timestamp_ms: int | None = None,
    ) -> list[int]:
        """Phys offsets of records that may carry *key* in *topic*, newest first.

        Candidates only: two keys can share a hash, so the caller reads each
        record and checks its keys (and its exact store time).
        """
        end_ms = _INT64_MAX if end_timestamp_ms is None else end_timestamp_ms
        found: list[int] = []
        if max_count <= 0:
            return found
        key_hash = key_hash_of(topic, key)
        for f in reversed(self._files):
            if f.time_overlaps(begin_timestamp_ms, end_ms):
                f.select(key_hash, max_count, begin_timestamp_ms, end_ms, found)
            if len(found) >= max_count or f.begin_timestamp_ms < begin_timestamp_ms:
                break
        return found

    # -- deletion ----------------------------------------------------------------------
    def truncate_phys(self, phys_offset: int) -> None:
        """Delete every file holding an entry at or past commit-log *phys_offset*.

        Those are the newest files; the records they held below *phys_offset*
        are indexed again by re-dispatch from :attr:`last_indexed_phys`.
        """
        position = next(
            (i for i, f in enumerate(self._files) if f.end_phys_offset >= phys_offset),
            len(self._files),
        )
        doomed, self._files = self._files[position:], self._files[:position]
        for f in doomed:
            log.info(
                "deleting index file %s: it reaches phys offset %d, past the commit "
                "log's truncation at %d",
                f.path,
                f.end_phys_offset,
                phys_offset,
            )
            f.destroy()
        self._last_indexed_phys = self._newest_indexed_phys()

    def delete_below(self, commitlog_min_phys: int) -> int:
        """Delete the oldest files that end below *commitlog_min_phys* (never the newest)."""
        deleted = 0
        while len(self._files) > 1 and self._files[0].end_phys_offset < commitlog_min_phys:
            f = self._files.pop(0)
            log.info(
                "deleting index file %s: it ends at phys offset %d, below the commit "
                "log's first offset %d",
                f.path,
                f.end_phys_offset,
                commitlog_min_phys,
            )
            f.destroy()
            deleted += 1
        return deleted

    # -- internals ---------------------------------------------------------------------
    def _newest_indexed_phys(self) -> int:
        for f in reversed(self._files):
            # An empty file that follows a full one carries that file's end.
            if f.key_count > 0 or f.end_phys_offset > 0:
                return f.end_phys_offset
        return -1

    def _delete_names(self, names: list[str]) -> None:
        for name in names:
            path = os.path.join(self.directory, name)
            try:
                os.unlink(path)
            except FileNotFoundError:
                continue
            log.info("deleted index file %s", path)
