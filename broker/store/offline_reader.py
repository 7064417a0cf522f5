"""Read-only access to a data directory's commit log, for readers outside the broker.

The offline Spark source (``format("pocketmq-store")``), audits and exports read
the commit-log segment files of a data directory without opening the store: no
``lock`` is taken, no recovery runs and nothing is written, so a stopped broker's
directory and a live one's work alike (as ``pocketmq store verify`` does)::

    if not is_data_directory(path): ...           # it has a commitlog/ folder
    for segment in commitlog_segments(path):      # oldest first
        with open_segment(segment) as buf:        # the file mapped read-only
            ...                                   # records back to back from byte 0

    DATA/commitlog/00000000000000000000  -> CommitLogSegment(path, file_from_offset=0, ...)
    DATA/commitlog/00000000001073741824  -> CommitLogSegment(path, 1073741824, ...)

A segment holds records back to back in the layout of :mod:`pocketmq.common.message`
(``TOTALSIZE`` first; a record's PHYSICALOFFSET is ``file_from_offset`` plus where it
lies), then either a BLANK record (magic ``0xCBD43194``, the unusable tail of a full
segment) or zeros (the unwritten rest of the newest one). The newest segment of a
live broker may hold a record still being written; retention may delete the oldest
between listing and opening, and :func:`open_segment` then raises
``FileNotFoundError``.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass

from pocketmq.broker.store.data_dir import DataDirectory
from pocketmq.broker.store.io import StoreIO
from pocketmq.broker.store.mapped_file import MappedFile
from pocketmq.broker.store.verify import open_commitlog_read_only

__all__ = ["CommitLogSegment", "commitlog_segments", "is_data_directory", "open_segment"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitLogSegment:
    """One commit-log segment file, as listed by :func:`commitlog_segments`."""

    path: str  # DATA/commitlog/<20-digit file_from_offset>
    file_from_offset: int  # commit-log offset of the segment's byte 0 (its name)
    file_size: int  # the log's segment size in bytes (a file may be shorter)


def is_data_directory(path: str) -> bool:
    """Whether *path* looks like a broker's data directory (it has ``commitlog/``)."""
    return os.path.isdir(DataDirectory(path).commitlog)


def commitlog_segments(data_dir: str) -> list[CommitLogSegment]:
    """The commit-log segments of *data_dir*, oldest first ([] when it has none).

    The segment size is the largest file's size. Raises ``StoreError`` when the
    segment files do not form one log (a missing segment, a name that is not a
    multiple of the segment size).
    """
    commitlog = open_commitlog_read_only(data_dir)
    try:
        return [
            CommitLogSegment(
                path=mf.path, file_from_offset=mf.file_from_offset, file_size=commitlog.file_size
            )
            for mf in commitlog.queue.files
        ]
    finally:
        commitlog.queue.close()


@contextlib.contextmanager
def open_segment(segment: CommitLogSegment) -> Iterator[mmap.mmap | bytes]:
    """The bytes of *segment* (up to its ``file_size``), mapped read-only for the block.

    The mapping is valid only inside the ``with`` block (no view of it may outlive
    it); an empty file gives ``b""``. Raises ``FileNotFoundError`` when the file is
    gone (retention deleted it).
    """
    mf = MappedFile(segment.path, segment.file_size, io=StoreIO(), create=False, read_only=True)
    try:
        yield mf.buffer if mf.file_size else b""
    finally:
        mf.close()
