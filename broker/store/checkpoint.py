"""StoreCheckpoint: how far the commit log, consume queues and index are durable.

One 4 KiB file, ``DATA/checkpoint``, rewritten after every flush round::

    offset size field
         0    8 physic_msg_timestamp_ms    store time of the last flushed commit-log record
         8    8 logics_msg_timestamp_ms    same, for the last flushed consume-queue unit
        16    8 index_msg_timestamp_ms     endTimestamp of the last flushed index file
        24    8 physic_flushed_offset      commit-log bytes known durable
        32    8 logics_dispatched_offset   commit-log offset dispatched before the last CQ flush
        40    4 crc32 of bytes 0..40       a torn or damaged checkpoint is ignored
        44 4052 zero

Bytes 0..24 keep RocketMQ's ``StoreCheckpoint`` layout; 24..44 are PocketMQ's:
recovery starts from offsets rather than from timestamps minus a safety margin,
which is exact and needs no clock. Values only move forward, and each is
written after the data it describes is flushed.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from dataclasses import dataclass

__all__ = ["Checkpoint", "CrcPage", "StoreCheckpoint"]

log = logging.getLogger(__name__)

_LAYOUT = struct.Struct(">qqqqq")  # the five fields above
_CRC = struct.Struct(">I")
FILE_SIZE = 4096


@dataclass(frozen=True, slots=True)
class Checkpoint:
    physic_msg_timestamp_ms: int = 0
    logics_msg_timestamp_ms: int = 0
    index_msg_timestamp_ms: int = 0
    physic_flushed_offset: int = 0
    logics_dispatched_offset: int = 0


class CrcPage:
    """One page holding a struct of fields followed by their CRC32, rewritten in place.

    The page is written whole with one ``pwrite`` and synced; a page that is
    missing, short or fails its CRC reads as None, so a torn write is ignored
    rather than trusted.
    """

    def __init__(self, path: str, layout: struct.Struct, what: str) -> None:
        self.path = path
        self._layout = layout
        self._what = what

    def read(self) -> tuple[int, ...] | None:
        size = self._layout.size + _CRC.size
        try:
            with open(self.path, "rb") as f:
                raw = f.read(size)
        except FileNotFoundError:
            return None
        if len(raw) < size:
            log.warning(
                "%s %s is %d bytes, too short; ignoring it", self._what, self.path, len(raw)
            )
            return None
        (crc,) = _CRC.unpack_from(raw, self._layout.size)
        if zlib.crc32(raw[: self._layout.size]) != crc:
            log.warning("%s %s fails its CRC; ignoring it", self._what, self.path)
            return None
        return tuple(self._layout.unpack_from(raw, 0))

    def write(self, *values: int) -> None:
        body = self._layout.pack(*values)
        page = body + _CRC.pack(zlib.crc32(body))
        page += bytes(FILE_SIZE - len(page))
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, page, 0)
            os.fdatasync(fd)
        finally:
            os.close(fd)


class StoreCheckpoint:
    def __init__(self, path: str) -> None:
        self.path = path
        self._page = CrcPage(path, _LAYOUT, "checkpoint")

    def read(self) -> Checkpoint | None:
        """The stored checkpoint, or None if it is missing or fails its CRC."""
        fields = self._page.read()
        return Checkpoint(*fields) if fields is not None else None

    def write(self, cp: Checkpoint) -> None:
        """Write and sync *cp* in place (the file is one page: a write is atomic)."""
        self._page.write(
            cp.physic_msg_timestamp_ms,
            cp.logics_msg_timestamp_ms,
            cp.index_msg_timestamp_ms,
            cp.physic_flushed_offset,
            cp.logics_dispatched_offset,
        )
