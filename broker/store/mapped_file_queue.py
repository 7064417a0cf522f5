"""MappedFileQueue: a directory of contiguous segments forming one logical log.

Segment ``k`` covers log offsets ``[start_k, start_k + file_size)`` and is named
by ``start_k``; segments are contiguous except that whole segments may be
deleted from the head. Only the last segment is written to, through its
mapping or, with *write_without_mmap*, through ``pwrite`` (:class:`MappedFile`).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable

from pocketmq.broker.store.io import StoreIO
from pocketmq.broker.store.mapped_file import MappedFile, offset_to_file_name
from pocketmq.common.errors import StoreError

__all__ = ["MappedFileQueue"]

log = logging.getLogger(__name__)

_SEGMENT_NAME = re.compile(r"^\d{20}$")


class MappedFileQueue:
    def __init__(
        self,
        directory: str,
        file_size: int,
        *,
        io: StoreIO | None = None,
        sparse: bool = False,
        write_without_mmap: bool = False,
    ) -> None:
        if file_size <= 0:
            raise ValueError(f"segment size must be positive, got {file_size}")
        self.directory = directory
        self.file_size = file_size
        self.io = io or StoreIO()
        self.sparse = sparse
        self.write_without_mmap = write_without_mmap
        self.files: list[MappedFile] = []
        # The next segment, created ahead of need by prepare(); not in files until used,
        # so positions never see it. After a crash it loads as an empty last segment.
        self._next: MappedFile | None = None

    # -- lifecycle -------------------------------------------------------------
    def load(self, *, read_only: bool = False) -> None:
        """Map every segment in the directory; positions are set by recovery.

        *read_only* maps the files for inspection only: nothing is resized or written.
        """
        if not read_only:
            os.makedirs(self.directory, exist_ok=True)
        elif not os.path.isdir(self.directory):
            return
        names = sorted(n for n in os.listdir(self.directory) if _SEGMENT_NAME.match(n))
        expected: int | None = None
        for name in names:
            start = int(name)
            if start % self.file_size:
                raise StoreError(
                    f"segment {os.path.join(self.directory, name)} starts at "
                    f"{start}, not a multiple of the segment size "
                    f"{self.file_size}; was the segment size changed?"
                )
            if expected is not None and start != expected:
                raise StoreError(
                    f"segments in {self.directory} are not contiguous: "
                    f"{offset_to_file_name(expected)} is missing before {name}"
                )
            # A sparse segment is mapped on its first use (consume queues: most stay idle).
            mf = MappedFile(
                os.path.join(self.directory, name),
                self.file_size,
                io=self.io,
                create=False,
                read_only=read_only,
                sparse=self.sparse,
                mapped=read_only or not self.sparse,
                write_without_mmap=self.write_without_mmap,
            )
            # Until recovery says otherwise every loaded segment counts as full.
            mf.wrote_position = mf.flushed_position = mf.file_size
            self.files.append(mf)
            expected = start + self.file_size

    def close(self) -> None:
        for mf in self.files:
            mf.close()
        if self._next is not None:
            self._next.close()

    def unmap(self) -> bool:
        """Unmap every sparse segment, keeping positions; False if one is in use."""
        done = True
        for mf in [*self.files, *([self._next] if self._next is not None else [])]:
            done = mf.unmap() and done
        return done

    def segment_count(self) -> int:
        return len(self.files) + (1 if self._next is not None else 0)

    def mapped_count(self) -> int:
        count = sum(1 for mf in self.files if mf.mapped)
        return count + (1 if self._next is not None and self._next.mapped else 0)

    def destroy(self) -> None:
        for mf in self.files:
            mf.destroy()
        self.files.clear()
        if self._next is not None:
            self._next.destroy()
            self._next = None

    # -- positions -------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        return self.files[0].file_from_offset if self.files else 0

    @property
    def max_offset(self) -> int:
        """Log offset one past the last written byte."""
        if not self.files:
            return 0
        last = self.files[-1]
        return last.file_from_offset + last.wrote_position

    @property
    def flushed_offset(self) -> int:
        for mf in reversed(self.files):
            if mf.flushed_position:
                return mf.file_from_offset + mf.flushed_position
        return self.min_offset

    def set_write_position(self, offset: int) -> None:
        """Place the write (and flushed) position at *offset* after recovery."""
        for mf in self.files:
            if mf.file_from_offset + self.file_size <= offset:
                mf.wrote_position = mf.flushed_position = mf.file_size
            elif mf.file_from_offset <= offset:
                mf.wrote_position = mf.flushed_position = offset - mf.file_from_offset
            else:
                mf.wrote_position = mf.flushed_position = 0

    # -- segments --------------------------------------------------------------
    def last_file(self, start_offset: int = 0, *, create: bool = True) -> MappedFile | None:
        """The segment being written; a new one is created when the last is full."""
        last = self.files[-1] if self.files else None
        if last is not None and not last.is_full:
            return last
        if not create:
            return last
        mf = self._next if self._next is not None and last is not None else None
        if mf is None:
            mf = self._create(self._next_start(start_offset))
        self._next = None
        self.files.append(mf)
        return mf

    def prepare(self, start_offset: int, end_offset: int) -> None:
        """Create and reserve what appending log bytes up to *end_offset* needs, now.

        *start_offset* places the first segment of an empty queue. At most the
        last segment and the one after it are prepared (a put never spans more).
        Raises ``OSError`` (ENOSPC) and changes no position when the disk is full.
        """
        last = self.files[-1] if self.files else None
        if last is None or last.is_full:
            last = self.last_file(start_offset)
            assert last is not None
        last.reserve(min(end_offset - last.file_from_offset, last.file_size))
        if end_offset > last.file_from_offset + last.file_size:
            if self._next is None:
                self._next = self._create(last.file_from_offset + self.file_size)
            self._next.reserve(min(end_offset - self._next.file_from_offset, self._next.file_size))

    def _next_start(self, start_offset: int) -> int:
        last = self.files[-1] if self.files else None
        if last is None:
            return start_offset - start_offset % self.file_size
        return last.file_from_offset + self.file_size

    def _create(self, start: int) -> MappedFile:
        path = os.path.join(self.directory, offset_to_file_name(start))
        os.makedirs(self.directory, exist_ok=True)
        mf = MappedFile(
            path,
            self.file_size,
            io=self.io,
            create=True,
            sparse=self.sparse,
            write_without_mmap=self.write_without_mmap,
        )
        log.info("created segment %s", path)
        return mf

    def find(self, offset: int) -> MappedFile | None:
        """The segment holding log *offset*, or None when none does."""
        if not self.files:
            return None
        first = self.files[0].file_from_offset
        index = (offset - first) // self.file_size
        if 0 <= index < len(self.files):
            return self.files[index]
        return None

    def flush(self) -> int:
        """Sync every segment with unsynced bytes; return the flushed log offset."""
        for mf in list(self.files):
            if mf.wrote_position > mf.flushed_position:
                mf.flush()
        return self.flushed_offset

    def dirty_bytes(self) -> int:
        return sum(mf.wrote_position - mf.flushed_position for mf in self.files)

    def truncate(self, offset: int) -> int:
        """Discard everything from log *offset* on; return the bytes discarded."""
        if self._next is not None:
            self._next.destroy()
            self._next = None
        discarded = 0
        for mf in list(self.files):
            end = mf.file_from_offset + self.file_size
            if end <= offset:
                continue
            if mf.file_from_offset >= offset:
                discarded += mf.wrote_position
                self.files.remove(mf)
                mf.destroy()
            else:
                cut = offset - mf.file_from_offset
                discarded += max(0, mf.wrote_position - cut)
                mf.truncate(cut)
        return discarded

    def delete_head(
        self, should_delete: Callable[[MappedFile], bool], *, max_files: int
    ) -> list[MappedFile]:
        """Delete whole segments from the head while *should_delete* says so.

        The last segment (being written) is never deleted.
        """
        deleted: list[MappedFile] = []
        while len(self.files) > 1 and len(deleted) < max_files:
            head = self.files[0]
            if not should_delete(head):
                break
            self.files.pop(0)
            head.destroy()
            deleted.append(head)
        return deleted
