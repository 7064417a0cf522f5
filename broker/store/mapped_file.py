"""MappedFile: one fixed-size, memory-mapped segment of an append-only log.

A segment is named by the 20-digit, zero-padded log offset of its first byte
(``00000000001073741824``) and has its full size. A commit-log segment has
its blocks reserved when it is created (``fallocate``); a *sparse* one (consume
queues) is created with ``ftruncate`` and gets blocks a few pages ahead of the
writer (:meth:`MappedFile.reserve`), as RocketMQ's mapped files do, so that a
thousand quiet queues take a page each and not 6 MB each. Either way a full
disk is an ``OSError(ENOSPC)`` and never a ``SIGBUS`` from a store into an
unbacked page. Three positions describe it::

    0                 flushed            wrote                       file_size
    |==== durable ====|=== in page cache ===|......... unused ..........|

Writes go through the mapping (one copy, no system call) or, with
*write_without_mmap* (RocketMQ's ``writeWithoutMmap``), through ``pwrite`` on
the segment's descriptor, the mapping then being read-only::

    mmap:    store into a hole ── fault ── kernel zeroes a fresh 4 KiB page ── copy over it
    pwrite:  copy into the page cache; a page the write covers whole is never zeroed

Readers see the bytes at once either way: the mapping and the descriptor share
the page cache. (Measured on a 2-core VM: a broker's CPU per stored 1 KiB
message fell by about a third, a replica's by a third to a half.)
:meth:`flush` syncs the file descriptor (``fdatasync`` makes both kinds of
write durable) from a worker thread, which releases the GIL, so the event loop
that appends never waits on the disk.

Bytes past ``wrote`` may be stale after a crash; :meth:`truncate` discards
them (the file is cut and re-extended, so they read as zeros) so that a scan
of the log can never mistake an old record for a new one.

A sparse segment (consume queues, by the hundred thousand) holds no file
descriptor: CPython's ``mmap`` keeps a ``dup`` of the descriptor it maps, so a
segment that kept its own as well cost two per mapping (3,000 busy queues held
6,027 descriptors). Its rare file calls (reserve, truncate, sync) open the path
for the call. It may also be *unmapped* while idle (:meth:`unmap`, chosen by
the consume-queue store's LRU) and is mapped again on its next use; the
positions stay in memory, and a sync of an unmapped segment opens the path, so
bytes written before the unmap become durable at the next flush like any other.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import mmap
import os
import threading
from collections.abc import Iterator

from pocketmq.broker.store import speedups
from pocketmq.broker.store.io import StoreIO

__all__ = ["MappedFile", "offset_to_file_name"]

log = logging.getLogger(__name__)

_PAGE = 4096
_MAX_RESERVE_STEP = 1 << 20
#: The compiled page warmer, when built (None after the kernel refused it once).
_populate_write = getattr(speedups.NATIVE, "populate_write", None)


def offset_to_file_name(offset: int) -> str:
    return f"{offset:020d}"


class MappedFile:
    """One segment. Appends and reads are made by the owning thread; :meth:`flush`
    may run in a worker thread at the same time."""

    def __init__(
        self,
        path: str,
        file_size: int,
        *,
        io: StoreIO,
        create: bool,
        read_only: bool = False,
        sparse: bool = False,
        mapped: bool = True,
        write_without_mmap: bool = False,
    ) -> None:
        if write_without_mmap and sparse:
            raise ValueError("a sparse segment holds no descriptor to pwrite through")
        self.path = path
        self.sparse = sparse
        #: appends pwrite through the descriptor; the mapping is read-only
        self.write_without_mmap = write_without_mmap and not read_only
        #: file bytes known to have disk blocks; a sparse file gets them ahead of the writer
        self.reserved_end = 0 if sparse else file_size
        self.file_size = file_size
        self._mm: mmap.mmap | None = None
        self.file_from_offset = int(os.path.basename(path))
        self.read_only = read_only
        self._io = io
        if read_only:
            # Inspection (verify, dump, offline readers): never change the file.
            self._fd = os.open(path, os.O_RDONLY)
            try:
                actual = os.fstat(self._fd).st_size
                self.file_size = min(actual, file_size)
                self._mm = (
                    mmap.mmap(self._fd, self.file_size, mmap.MAP_SHARED, mmap.PROT_READ)
                    if self.file_size
                    else None
                )
            except BaseException:
                os.close(self._fd)
                raise
            self.wrote_position = self.flushed_position = self.file_size
            self._flush_lock = threading.Lock()
            self._warm_lock = threading.Lock()
            self.closed = False
            return
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        self._fd = os.open(path, flags, 0o644)
        try:
            if create and sparse:
                os.ftruncate(self._fd, file_size)
            elif create:
                io.allocate(self._fd, file_size)
            else:
                actual = os.fstat(self._fd).st_size
                if actual != file_size:
                    log.warning(
                        "segment %s is %d bytes, expected %d; resizing (recovery "
                        "checks what it holds)",
                        path,
                        actual,
                        file_size,
                    )
                    os.ftruncate(self._fd, file_size)
            self._mm = None
            if mapped or not sparse:
                prot = mmap.PROT_READ | (0 if write_without_mmap else mmap.PROT_WRITE)
                self._mm = mmap.mmap(self._fd, file_size, mmap.MAP_SHARED, prot)
        except BaseException:
            os.close(self._fd)
            if create:
                os.unlink(path)
            raise
        if sparse:  # the mapping holds its own descriptor; see the module docstring
            os.close(self._fd)
            self._fd = -1
        self.wrote_position = 0
        self.flushed_position = 0
        self._flush_lock = threading.Lock()
        self._warm_lock = threading.Lock()
        self.closed = False

    # -- writing -------------------------------------------------------------
    @property
    def buffer(self) -> mmap.mmap:
        """The mapping, for reads and, unless *write_without_mmap*, in-place patching
        by the owner (mapped on demand)."""
        mm = self._mm
        return mm if mm is not None else self._map()

    @property
    def _mm_writable(self) -> bool:
        return not self.read_only and not self.write_without_mmap

    @property
    def mapped(self) -> bool:
        return self._mm is not None

    def _map(self) -> mmap.mmap:
        """Map an unmapped sparse segment again (owner thread)."""
        if self.closed:
            raise ValueError(f"segment {self.path} is closed")
        fd = os.open(self.path, os.O_RDWR)
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if self._mm_writable else 0)
        try:
            self._mm = mmap.mmap(fd, self.file_size, mmap.MAP_SHARED, prot)
        finally:
            os.close(fd)
        return self._mm

    def unmap(self) -> bool:
        """Drop the mapping of a sparse segment, keeping its positions (owner thread).

        Nothing is synced here: the written pages stay dirty in the page cache
        and the next :meth:`flush` syncs them through the path. False when the
        segment cannot be unmapped (not sparse, or a buffer of it is in use).
        """
        mm = self._mm
        if mm is None or not self.sparse:
            return mm is None
        try:
            mm.close()
        except BufferError:  # a memoryview of it is alive: try again later
            return False
        self._mm = None
        return True

    @contextlib.contextmanager
    def _file(self) -> Iterator[int]:
        """The segment's descriptor: its own, or one opened for the call (sparse)."""
        if self._fd >= 0:
            yield self._fd
            return
        fd = os.open(self.path, os.O_RDWR)
        try:
            yield fd
        finally:
            os.close(fd)

    @property
    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    @property
    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def reserve(self, end: int) -> None:
        """Make sure bytes ``[0, end)`` have disk blocks (a no-op unless sparse).

        The reservation grows by doubling (4 KiB, 8 KiB, ... at most 1 MiB a step),
        so a quiet file holds one page and a busy one few system calls. Raises
        ``OSError(ENOSPC)`` on a full disk, never a ``SIGBUS`` later.
        """
        if end <= self.reserved_end:
            return
        step = min(max(self.reserved_end, _PAGE), _MAX_RESERVE_STEP)
        target = max(end, self.reserved_end + step)
        target = min(self.file_size, -(-target // _PAGE) * _PAGE)
        with self._file() as fd:
            self._io.reserve(fd, target)
        self.reserved_end = target

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Copy *data* at the write position; return the file-relative position."""
        pos = self.wrote_position
        end = pos + len(data)
        if end > self.file_size:
            raise ValueError(f"{len(data)} bytes do not fit segment {self.path} at {pos}")
        if end > self.reserved_end:
            self.reserve(end)
        if self.write_without_mmap:
            self._pwrite(self._fd, data, pos)
        elif pos == 0:
            # A new file's first store through a mapping waits on the filesystem: ext4
            # here took 1.8-2.3 ms (median; p90 up to 16 ms) for the first page of a new
            # file, 5-12 us for the pages after it, and 8-20 us for a pwrite of the first
            # bytes. A topic's first message paid it per queue, on the event loop (2,000
            # new consume queues: 17.8 s of sends, now 0.9 s). The mapping shares the
            # page cache.
            with self._file() as fd:
                self._pwrite(fd, data, pos)
        else:
            (self._mm if self._mm is not None else self._map())[pos:end] = data
        self.wrote_position = end
        return pos

    def _pwrite(self, fd: int, data: bytes | bytearray | memoryview, pos: int) -> None:
        """Write all of *data* at *pos* through *fd* (short writes continue)."""
        done = os.pwrite(fd, data, pos)
        if done == len(data):
            return
        with memoryview(data) as view, view.cast("B") as whole:
            while done < len(whole):
                wrote = os.pwrite(fd, whole[done:], pos + done)
                if wrote <= 0:
                    raise OSError(errno.EIO, f"pwrite wrote nothing to {self.path} at {pos}")
                done += wrote

    def prefault(self, pos: int, buf: bytearray, *, populate_write: bool = False) -> int:
        """Fault up to ``len(buf)`` bytes at *pos* into the page cache; returns the
        bytes done (0 at the end or once closed).

        The bytes are read through the file into *buf*, which puts the pages in
        the page cache. With *populate_write*, where the compiled
        ``populate_write`` (Linux's ``MADV_POPULATE_WRITE``) works, the pages
        are instead faulted into this mapping writable, as the writer's first
        store would, without a byte being read or stored: the writer's store
        then costs no fault at all (measured here: 0.2 to 0.3 µs per KiB against
        0.7 to 0.9 after a read, 1.5 to 4 with neither), but the pages are
        dirty from then on and a flush before the writer reaches them writes
        them as zeros (about 35 % more bytes to the disk in a steady put).
        Neither way changes a byte, so any thread may call it beside the
        writer (both release the GIL); :mod:`.warm` does, ahead of the write
        position.
        """
        global _populate_write
        size = min(len(buf), self.file_size - pos)
        if self.closed or size <= 0:
            return 0
        if populate_write and _populate_write is not None and self._mm_writable:
            with self._warm_lock:  # close() waits for it: the mapping stays mapped
                if self.closed:
                    return 0
                done = _populate_write(self._mm, pos, size)
            if done >= 0:
                return done
            log.info(
                "MADV_POPULATE_WRITE is refused here; the page warmer reads ahead instead (%s)",
                self.path,
            )
            _populate_write = None
        try:
            return os.preadv(self._fd, [memoryview(buf)[:size]], pos)
        except OSError:  # closed by the owner meanwhile
            return 0

    # -- reading -------------------------------------------------------------
    def read(self, pos: int, size: int) -> bytes:
        """Copy *size* bytes at file-relative *pos* (never past the write position)."""
        end = min(pos + size, self.wrote_position)
        if pos >= end:
            return b""
        return (self._mm if self._mm is not None else self._map())[pos:end]

    # -- durability ------------------------------------------------------------
    def flush(self) -> int:
        """Sync what is written; return the new flushed position (worker-thread safe)."""
        with self._flush_lock:
            if self.closed:
                return self.flushed_position
            target = self.wrote_position
            if target > self.flushed_position:
                with self._file() as fd:
                    self._io.sync(fd)
                self.flushed_position = target
            return self.flushed_position

    def truncate(self, pos: int) -> None:
        """Discard everything from file-relative *pos* on; it reads as zeros after."""
        with self._flush_lock, self._warm_lock, self._file() as fd:
            os.ftruncate(fd, pos)
            os.ftruncate(fd, self.file_size)
            if self.sparse:
                self.reserved_end = min(self.reserved_end, pos)
            else:
                self._io.allocate(fd, self.file_size)
            self._io.sync(fd)
            self.wrote_position = pos
            self.flushed_position = min(self.flushed_position, pos)

    def is_zero_from(self, pos: int) -> bool:
        """Whether every byte from *pos* to the end is zero, reading only the extents
        that hold data: the holes of a sparse file are zeros without touching a page
        (a recovery that read whole sparse segments filled the page cache with them)."""
        with self._file() as fd:
            return self._is_zero_from(fd, pos)

    def _is_zero_from(self, fd: int, pos: int) -> bool:
        end = self.file_size
        mm = self.buffer
        while pos < end:
            try:
                data = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:
                    return True  # nothing but holes past pos
                data = pos  # no SEEK_DATA here: read it all
            if data >= end:
                return True
            try:
                hole = min(os.lseek(fd, data, os.SEEK_HOLE), end)
            except OSError:
                hole = end
            chunk = mm[data:hole]
            if chunk.count(0) != len(chunk):
                return False
            pos = hole
        return True

    def close(self) -> None:
        with self._flush_lock, self._warm_lock:
            if self.closed:
                return
            self.closed = True
            if self._mm is not None:
                self._mm.close()
                self._mm = None
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def destroy(self) -> None:
        """Close and delete the segment file."""
        self.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        log.info("deleted segment %s", self.path)

    def __repr__(self) -> str:
        return (
            f"MappedFile({self.path!r}, wrote={self.wrote_position}, "
            f"flushed={self.flushed_position})"
        )
