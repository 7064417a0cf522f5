"""PopJournal: POP consumption state, durable in one append-only file.

RocketMQ 5 keeps POP state as checkpoint and ack messages in a revive topic
and a revive service that matches them. PocketMQ keeps the same facts in
``DATA/pop/popJournal``, written before any receive, ack or change of
invisible time is answered and fsync'd (group commit: one fsync covers every
waiting call), so a broker killed at any instant restarts with exactly the
state it acknowledged: no acked message comes back and no received-but-unacked
one is lost.

The state, per consumer group, topic and queue (:class:`QueueState`)::

    next_offset   first queue offset never delivered to the group
    in_flight     queue offset -> (attempt, serial, deadline_ms) of each message
                  delivered and neither acked nor dead-lettered; it is invisible
                  until deadline_ms, then delivered again with attempt + 1

``serial`` numbers every delivery and every change of invisible time; a
receipt handle names it, so a handle stops working once the message was
delivered again or its invisible time changed. Serials never repeat: the
next one follows the largest in the journal.

The file is a sequence of records, all integers big-endian::

    offset  size  field
    ------  ----  ---------------------------------------------------------
         0     4  TOTALSIZE   i32, the whole record
         4     4  CRC         u32, zlib.crc32 of the bytes after this field
         8     1  KIND        1 = DELTA (apply), 2 = SNAPSHOT (replace the queue's state)
         9     4  QUEUEID     i32
        13     8  NEXTOFFSET  i64; -1 = unchanged (DELTA only)
        21     2  GROUPLEN    u16, then GROUP (UTF-8)
         .     2  TOPICLEN    u16, then TOPIC (UTF-8)
         .     4  NUPSERT     u32
         .     4  NREMOVE     u32
         .  28*n  UPSERT      offset i64 · attempt i32 · serial i64 · deadline_ms i64
         .   8*m  REMOVE      offset i64 (acked, dead-lettered or dropped)

A receive writes one DELTA per queue it read (the deliveries as upserts, the
new next offset, filtered-out redeliveries as removes); an ack one remove; a
change of invisible time one upsert. Replay applies the records in order and
stops at the first one that is cut short or fails its CRC (a torn tail of a
crash); the file is truncated there and the loss logged. When the file grows
past :data:`COMPACT_AT_BYTES` it is rewritten as one SNAPSHOT per queue
(temp file, fsync, rename), also at load and at a clean stop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

__all__ = [
    "COMPACT_AT_BYTES",
    "InFlight",
    "PopJournal",
    "QueueKey",
    "QueueState",
    "encode_delta",
]

log = logging.getLogger(__name__)

COMPACT_AT_BYTES = 8 * 1024 * 1024
FILE_NAME = "popJournal"

KIND_DELTA = 1
KIND_SNAPSHOT = 2

# TOTALSIZE, CRC, KIND, QUEUEID, NEXTOFFSET, GROUPLEN
_HEAD = struct.Struct(">iIBiqH")
_CRC_FROM = 8  # the CRC covers KIND onwards
_U16 = struct.Struct(">H")
_COUNTS = struct.Struct(">II")  # NUPSERT, NREMOVE
_UPSERT = struct.Struct(">qiqq")  # offset, attempt, serial, deadline_ms
_REMOVE = struct.Struct(">q")
_TOTAL = struct.Struct(">i")
_CRC = struct.Struct(">I")

QueueKey = tuple[str, str, int]  # (group, topic, queue id)


@dataclass(slots=True)
class InFlight:
    attempt: int  # 1 on the first delivery
    serial: int  # of the delivery or change the current receipt handle names
    deadline_ms: int  # invisible until then


@dataclass(slots=True)
class QueueState:
    next_offset: int
    in_flight: dict[int, InFlight] = field(default_factory=dict)

    def commit_offset(self) -> int:
        """The group's consumer offset: the first message not yet done with."""
        return min(self.in_flight) if self.in_flight else self.next_offset


def _encode(
    kind: int,
    key: QueueKey,
    next_offset: int,
    upserts: Iterable[tuple[int, InFlight]],
    removes: Iterable[int],
) -> bytes:
    group, topic, queue_id = key
    group_raw, topic_raw = group.encode(), topic.encode()
    ups = [(o, e) for o, e in upserts]
    rems = list(removes)
    parts = [group_raw, _U16.pack(len(topic_raw)), topic_raw, _COUNTS.pack(len(ups), len(rems))]
    parts.extend(_UPSERT.pack(o, e.attempt, e.serial, e.deadline_ms) for o, e in ups)
    parts.extend(_REMOVE.pack(o) for o in rems)
    size = _HEAD.size + sum(len(p) for p in parts)
    head_tail = struct.pack(">BiqH", kind, queue_id, next_offset, len(group_raw))
    body = head_tail + b"".join(parts)
    return _TOTAL.pack(size) + _CRC.pack(zlib.crc32(body)) + body


def encode_delta(
    key: QueueKey,
    *,
    next_offset: int = -1,
    upserts: Iterable[tuple[int, InFlight]] = (),
    removes: Iterable[int] = (),
) -> bytes:
    """One DELTA record; *next_offset* -1 leaves it unchanged."""
    return _encode(KIND_DELTA, key, next_offset, upserts, removes)


def _encode_snapshot(key: QueueKey, state: QueueState) -> bytes:
    return _encode(KIND_SNAPSHOT, key, state.next_offset, sorted(state.in_flight.items()), ())


@dataclass(frozen=True, slots=True)
class _Record:
    kind: int
    key: QueueKey
    next_offset: int
    upserts: list[tuple[int, InFlight]]
    removes: list[int]


def _decode(buf: bytes, pos: int) -> tuple[_Record | None, int, str]:
    """(record, its size, why it is unreadable) at *pos*."""
    left = len(buf) - pos
    if left < _HEAD.size:
        return None, 0, f"{left} bytes left, a record head is {_HEAD.size}"
    size, crc, kind, queue_id, next_offset, group_len = _HEAD.unpack_from(buf, pos)
    if size < _HEAD.size or size > left:
        return None, 0, f"TOTALSIZE {size} does not fit the {left} bytes left"
    if zlib.crc32(memoryview(buf)[pos + _CRC_FROM : pos + size]) != crc:
        return None, 0, "CRC mismatch"
    try:
        at = pos + _HEAD.size
        group = buf[at : at + group_len].decode()
        at += group_len
        (topic_len,) = _U16.unpack_from(buf, at)
        topic = buf[at + 2 : at + 2 + topic_len].decode()
        at += 2 + topic_len
        n_up, n_rm = _COUNTS.unpack_from(buf, at)
        at += _COUNTS.size
        upserts = []
        for _ in range(n_up):
            offset, attempt, serial, deadline = _UPSERT.unpack_from(buf, at)
            upserts.append((offset, InFlight(attempt, serial, deadline)))
            at += _UPSERT.size
        removes = [_REMOVE.unpack_from(buf, at + i * _REMOVE.size)[0] for i in range(n_rm)]
        at += n_rm * _REMOVE.size
    except (struct.error, UnicodeDecodeError) as exc:
        return None, 0, f"malformed body: {exc}"
    if at != pos + size or kind not in (KIND_DELTA, KIND_SNAPSHOT):
        return None, 0, f"kind {kind} or lengths disagree with TOTALSIZE {size}"
    return _Record(kind, (group, topic, queue_id), next_offset, upserts, removes), size, ""


def _records(buf: bytes) -> Iterator[tuple[_Record | None, int, str]]:
    pos = 0
    while pos < len(buf):
        record, size, why = _decode(buf, pos)
        yield record, pos, why
        if record is None:
            return
        pos += size


class PopJournal:
    """The journal file and the group commit of its fsyncs. Event-loop thread only."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, FILE_NAME)
        self._fd = -1
        self._written = 0  # bytes appended since open
        self._synced = 0  # of those, bytes known durable
        self._sync_task: asyncio.Task[None] | None = None
        self.size_bytes = 0

    # -- load and compaction ------------------------------------------------------------
    def load(self) -> tuple[dict[QueueKey, QueueState], int]:
        """Replay the file: (state per queue, largest serial seen). Then compact it."""
        os.makedirs(self.directory, exist_ok=True)
        states: dict[QueueKey, QueueState] = {}
        max_serial = 0
        try:
            with open(self.path, "rb") as f:
                buf = f.read()
        except FileNotFoundError:
            buf = b""
        end = 0
        for record, pos, why in _records(buf):
            if record is None:
                log.warning(
                    "%s: cut %d bytes at offset %d (%s): a torn tail of a crash; the "
                    "receives, acks and changes in it were never answered",
                    self.path,
                    len(buf) - pos,
                    pos,
                    why,
                )
                break
            max_serial = max(max_serial, _apply(states, record))
            end = pos + _TOTAL.unpack_from(buf, pos)[0]
        self.compact(states)
        in_flight = sum(len(s.in_flight) for s in states.values())
        log.info(
            "POP state: %d queues of %d groups, %d messages in flight (replayed %d bytes of %s)",
            len(states),
            len({k[0] for k in states}),
            in_flight,
            end,
            self.path,
        )
        return states, max_serial

    def compact(self, states: dict[QueueKey, QueueState]) -> None:
        """Rewrite the file as one SNAPSHOT per queue and append from there."""
        tmp = self.path + ".tmp"
        data = b"".join(_encode_snapshot(k, s) for k, s in sorted(states.items()))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        _fsync_dir(self.directory)
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self._written = self._synced = 0
        self.size_bytes = len(data)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # -- appends ------------------------------------------------------------------------
    def append(self, record: bytes) -> None:
        """Write *record* (page cache); :meth:`sync` makes it durable."""
        if self._fd < 0:
            raise OSError(f"{self.path} is closed; the broker is stopping")
        view = memoryview(record)
        while view:
            view = view[os.write(self._fd, view) :]
        self._written += len(record)
        self.size_bytes += len(record)

    async def sync(self) -> None:
        """Return once everything appended before the call is on disk."""
        target = self._written
        while self._synced < target:
            task = self._sync_task
            if task is None or task.done():
                task = self._sync_task = asyncio.get_running_loop().create_task(
                    self._fsync(), name="PopJournalSync"
                )
            await asyncio.shield(task)

    async def _fsync(self) -> None:
        target, fd = self._written, self._fd
        await asyncio.to_thread(os.fdatasync, fd)
        if fd == self._fd:
            self._synced = max(self._synced, target)

    @property
    def needs_compaction(self) -> bool:
        return self.size_bytes > COMPACT_AT_BYTES and self._synced == self._written


def _apply(states: dict[QueueKey, QueueState], record: _Record) -> int:
    """Apply one replayed record; returns the largest serial in it."""
    state = states.get(record.key)
    if record.kind == KIND_SNAPSHOT or state is None:
        state = states[record.key] = QueueState(next_offset=max(record.next_offset, 0))
    if record.next_offset >= 0:
        state.next_offset = record.next_offset
    max_serial = 0
    for offset, entry in record.upserts:
        state.in_flight[offset] = entry
        max_serial = max(max_serial, entry.serial)
    for offset in record.removes:
        state.in_flight.pop(offset, None)
    return max_serial


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
