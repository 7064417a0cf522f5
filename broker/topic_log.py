"""TopicLog: the append-only change log of the topic table, ``config/topics.log``.

Rewriting the whole ``topics.json`` on every change made one change cost as
much as the table (quadratic over 100,000 creates). Now each change, a single
topic or a batch of thousands, is one record appended to ``topics.log`` and
fsynced before it is answered; ``topics.json`` is a snapshot of the table at
some data version, rewritten only by a compaction. One record::

    0               4               8
    +---------------+---------------+----------------------------------------+
    | length  u32   | crc32   u32   | payload: ``length`` bytes of JSON       |
    +---------------+---------------+----------------------------------------+
                     zlib.crc32 of the payload

    payload = {"version": [timestamp_ms, counter],
               "put": [{"topicName": ..., "readQueueNums": ...}, ...],   # created or changed
               "delete": ["TopicA", ...]}                                 # deleted

A batch is one record, so after a crash a batch is either all there or all
absent. Loading reads records up to the first whose header is short, whose
length runs past the end of the file, or whose CRC does not match (a write torn
by a crash or a flipped byte): the file is cut there, and :class:`LogLoad`
says how many bytes were cut, so the caller can report them.

Compaction (driven by the owner, see
:class:`~pocketmq.broker.topic_config.TopicConfigManager`)::

    rename topics.log -> topics.log.compacting      (new changes go to a fresh topics.log)
    write topics.json at version V                   (JsonFile: tmp, fsync, rename)
    unlink topics.log.compacting

A crash at any step leaves ``topics.json`` at some version S plus the records
of ``topics.log.compacting`` and ``topics.log``; the loader applies those with a
counter above S, in order, so replaying twice is harmless.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["HEADER", "LogLoad", "LogRecord", "TopicLog", "decode_records", "encode_record"]

log = logging.getLogger(__name__)

#: Record header: payload ``length`` u32, ``crc32`` of the payload u32, big-endian.
HEADER = struct.Struct(">II")
HEADER_SIZE = HEADER.size  # 8
MAX_RECORD_BYTES = 256 * 1024 * 1024  # a longer length can only be a torn or damaged header


@dataclass(frozen=True, slots=True, kw_only=True)
class LogRecord:
    """One change: the data version it made, topics created or changed, topics deleted."""

    timestamp_ms: int
    counter: int
    put: list[dict[str, Any]] = field(default_factory=list)  # TopicConfig.to_json() dicts
    delete: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class LogLoad:
    records: list[LogRecord]
    valid_bytes: int  # where the last good record ends
    cut_bytes: int  # bytes past it, removed (0 when the file was whole)
    problem: str = ""  # why reading stopped early ("" when it did not)


def encode_record(record: LogRecord) -> bytes:
    payload = json.dumps(
        {
            "version": [record.timestamp_ms, record.counter],
            "put": record.put,
            "delete": record.delete,
        },
        separators=(",", ":"),
    ).encode()
    return HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def decode_records(data: bytes) -> LogLoad:
    """Every whole record of *data* (pure: cuts nothing itself)."""
    view = memoryview(data)
    records: list[LogRecord] = []
    pos, end = 0, len(data)
    problem = ""
    while pos < end:
        if end - pos < HEADER_SIZE:
            problem = f"a {end - pos}-byte header fragment"
            break
        length, crc = HEADER.unpack_from(view, pos)
        if length > MAX_RECORD_BYTES or pos + HEADER_SIZE + length > end:
            problem = f"a record of {length} bytes with {end - pos - HEADER_SIZE} left"
            break
        payload = view[pos + HEADER_SIZE : pos + HEADER_SIZE + length]
        if zlib.crc32(payload) != crc:
            problem = f"a record whose CRC does not match (stored {crc:#010x})"
            break
        try:
            raw = json.loads(bytes(payload))
            ts, counter = raw["version"]
            records.append(
                LogRecord(
                    timestamp_ms=int(ts),
                    counter=int(counter),
                    put=list(raw.get("put", ())),
                    delete=[str(n) for n in raw.get("delete", ())],
                )
            )
        except (ValueError, KeyError, TypeError) as exc:
            problem = f"a record that is not a topic change ({exc})"
            break
        pos += HEADER_SIZE + length
    return LogLoad(records=records, valid_bytes=pos, cut_bytes=end - pos, problem=problem)


class TopicLog:
    """``topics.log`` and, during a compaction, ``topics.log.compacting``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.compacting_path = path + ".compacting"
        self._fd: int | None = None
        self.size_bytes = 0  # bytes of topics.log (records appended since the rotation)

    # -- load --------------------------------------------------------------------------
    def load(self) -> tuple[list[LogRecord], int]:
        """Records of ``.compacting`` then ``topics.log``, each cut at its first bad
        record; returns them and the total bytes cut. Opens topics.log for appends."""
        records: list[LogRecord] = []
        cut_total = 0
        for path in (self.compacting_path, self.path):
            loaded = self._load_file(path)
            records.extend(loaded.records)
            cut_total += loaded.cut_bytes
        self._open()
        return records, cut_total

    @staticmethod
    def _load_file(path: str) -> LogLoad:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return LogLoad(records=[], valid_bytes=0, cut_bytes=0)
        loaded = decode_records(data)
        if loaded.cut_bytes:
            log.warning(
                "%s: cut %d bytes at offset %d (%s): a change torn by a crash or a "
                "damaged record; the %d whole records before it are kept",
                path,
                loaded.cut_bytes,
                loaded.valid_bytes,
                loaded.problem,
                len(loaded.records),
            )
            with open(path, "r+b") as f:
                f.truncate(loaded.valid_bytes)
                f.flush()
                os.fsync(f.fileno())
        return loaded

    def _open(self) -> None:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.size_bytes = os.fstat(self._fd).st_size

    # -- append ------------------------------------------------------------------------
    def append(self, record: LogRecord) -> int:
        """Append and fsync one record; returns its size. On an OSError the file is cut
        back, so a half-written record never sits before later ones."""
        if self._fd is None:
            self._open()
        assert self._fd is not None
        data = encode_record(record)
        try:
            written = os.write(self._fd, data)
            if written != len(data):
                raise OSError(28, "No space left on device (short write)")
            os.fdatasync(self._fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self.size_bytes)
            raise
        self.size_bytes += len(data)
        return len(data)

    # -- compaction ----------------------------------------------------------------------
    @property
    def compacting(self) -> bool:
        return os.path.exists(self.compacting_path)

    def rotate(self) -> None:
        """Move topics.log aside as ``.compacting`` and start an empty topics.log."""
        if self.compacting:
            raise RuntimeError(f"{self.compacting_path} exists: a compaction is unfinished")
        self.close()
        if os.path.exists(self.path):
            os.replace(self.path, self.compacting_path)
        self._open()
        _fsync_dir(self.path)

    def finish_compaction(self) -> None:
        """The snapshot holds everything ``.compacting`` had: drop it."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.compacting_path)
        _fsync_dir(self.path)

    def reset(self, records: Iterable[LogRecord] = ()) -> None:
        """Empty both files (the snapshot was just replaced wholesale), then append
        *records*."""
        self.close()
        for path in (self.compacting_path, self.path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        self._open()
        for record in records:
            self.append(record)
        _fsync_dir(self.path)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _fsync_dir(path: str) -> None:
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
