"""Producer-state snapshots, and rebuilding the state from the commit log.

``DATA/producers/<log offset, 20 digits>.snapshot`` holds the
:class:`~.producer_state.ProducerStateTable` as it was after every record
before that commit-log offset. Recovery loads the newest snapshot whose
offset the recovered log still reaches and replays the records from there
(:func:`rebuild`), so it reads at most ``producer_snapshot_interval_bytes``
of log, not all of it. A snapshot past the recovered end (its records were
cut from a torn tail) is deleted, as is any but the newest two. Layout, big
endian::

    ┌──────── header (_HEAD) ─────────┐
    │ magic "PMQP" u32 │ version u16 │ reserved u16 │ log_offset i64 │ producers u32 │
    └─────────────────────────────────┘
    per producer (_PRODUCER):   pid i64 │ epoch i32 │ last_active_ms i64 │ queues u32
      per queue (_QUEUE):       topic_len u16 │ topic bytes │ queue_id i32 │ last_seq i64 │ kept u32
                                kept x phys_offset i64            (seqs last-kept+1 .. last)
    crc32 u32 of everything before it

A snapshot that is short or fails its CRC is ignored (the next older one, or
the whole log, is used instead).
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import time
import zlib
from typing import TYPE_CHECKING

from pocketmq.broker.store.producer_state import (
    PARKING_TOPICS,
    ProducerEntry,
    ProducerStateTable,
    QueueSeq,
    idempotence_of_props,
    sent_queue,
)

if TYPE_CHECKING:
    from pocketmq.broker.store.message_store import DefaultMessageStore

__all__ = ["decode_snapshot", "encode_snapshot", "rebuild", "snapshot_offsets", "write_snapshot"]

log = logging.getLogger(__name__)

MAGIC = 0x504D5150  # "PMQP"
VERSION = 1
_HEAD = struct.Struct(">IHHqI")
_PRODUCER = struct.Struct(">qiqI")
_QUEUE_HEAD = struct.Struct(">H")
_QUEUE = struct.Struct(">iqI")
_CRC = struct.Struct(">I")
SUFFIX = ".snapshot"
KEEP = 2


def encode_snapshot(table: ProducerStateTable, log_offset: int) -> bytes:
    parts = [_HEAD.pack(MAGIC, VERSION, 0, log_offset, len(table.producers))]
    for entry in table.producers.values():
        parts.append(
            _PRODUCER.pack(entry.pid, entry.epoch, entry.last_active_ms, len(entry.queues))
        )
        for (topic, queue_id), q in entry.queues.items():
            raw = topic.encode()
            parts.append(_QUEUE_HEAD.pack(len(raw)) + raw)
            parts.append(_QUEUE.pack(queue_id, q.last_seq, len(q.phys)))
            parts.append(struct.pack(f">{len(q.phys)}q", *q.phys))
    body = b"".join(parts)
    return body + _CRC.pack(zlib.crc32(body))


def decode_snapshot(raw: bytes, table: ProducerStateTable) -> int:
    """Fill *table* from *raw*; returns the snapshot's log offset. ValueError if damaged."""
    if len(raw) < _HEAD.size + _CRC.size or _CRC.unpack_from(raw, len(raw) - _CRC.size)[
        0
    ] != zlib.crc32(raw[: -_CRC.size]):
        raise ValueError("short, or its CRC does not match")
    magic, version, _r, log_offset, count = _HEAD.unpack_from(raw, 0)
    if magic != MAGIC or version != VERSION:
        raise ValueError(
            f"magic 0x{magic:08X} version {version}; expected 0x{MAGIC:08X} version {VERSION}"
        )
    pos = _HEAD.size
    table.clear()
    for _ in range(count):
        pid, epoch, active, queues = _PRODUCER.unpack_from(raw, pos)
        pos += _PRODUCER.size
        entry = table.producers[pid] = ProducerEntry(pid, epoch, active)
        for _q in range(queues):
            (n,) = _QUEUE_HEAD.unpack_from(raw, pos)
            pos += _QUEUE_HEAD.size
            topic = raw[pos : pos + n].decode()
            pos += n
            queue_id, last_seq, kept = _QUEUE.unpack_from(raw, pos)
            pos += _QUEUE.size
            q = entry.queues[(topic, queue_id)] = QueueSeq(last_seq, table.window)
            q.phys.extend(struct.unpack_from(f">{kept}q", raw, pos))
            pos += 8 * kept
    if pos != len(raw) - _CRC.size:
        raise ValueError(f"{len(raw) - _CRC.size - pos} bytes left over after the producers")
    return int(log_offset)


def snapshot_offsets(directory: str) -> list[int]:
    """Log offsets of the snapshots in *directory*, newest first."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(
        (
            int(n[: -len(SUFFIX)])
            for n in names
            if n.endswith(SUFFIX) and n[: -len(SUFFIX)].isdigit()
        ),
        reverse=True,
    )


def _path(directory: str, offset: int) -> str:
    return os.path.join(directory, f"{offset:020d}{SUFFIX}")


def write_snapshot(directory: str, table: ProducerStateTable, log_offset: int) -> str:
    """Write the snapshot for *log_offset* (tmp file, fsync, rename); keep the newest two."""
    os.makedirs(directory, exist_ok=True)
    path = _path(directory, log_offset)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(encode_snapshot(table, log_offset))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    for old in snapshot_offsets(directory)[KEEP:]:
        _remove(_path(directory, old))
    return path


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


def rebuild(store: DefaultMessageStore, end: int) -> tuple[int, int, float]:
    """Fill ``store.producers`` from the newest usable snapshot and the log up to *end*.

    Returns (the offset replay started from, records replayed, seconds).
    """
    started = time.monotonic()
    table: ProducerStateTable = store.producers
    directory = store.dirs.producers
    log_min = store.commitlog.min_offset
    start = log_min
    table.clear()
    for offset in snapshot_offsets(directory):
        path = _path(directory, offset)
        if offset > end:
            log.info("producer snapshot %s lies past the recovered log end %d; deleted", path, end)
            _remove(path)
            continue
        if offset < log_min:
            break  # the log no longer holds what follows it; older ones neither
        try:
            with open(path, "rb") as f:
                start = decode_snapshot(f.read(), table)
            break
        except (OSError, ValueError, struct.error, UnicodeDecodeError) as exc:
            log.warning("producer snapshot %s is unusable (%s); trying an older one", path, exc)
            table.clear()
    count = 0
    observe = table.observe
    for rec in store.commitlog.scan(start, check_crc=False, stop=end):
        ident = idempotence_of_props(rec.properties)
        if ident is None:
            continue
        topic, queue_id = rec.topic, rec.queue_id
        if topic in PARKING_TOPICS:
            topic, queue_id = sent_queue(topic, queue_id, rec.properties)
        observe(ident, topic, queue_id, rec.phys_offset, rec.store_timestamp_ms)
        count += 1
    store.producers_snapshot_offset = start
    seconds = time.monotonic() - started
    log.info(
        "producer state: %d ids, rebuilt from log offset %d to %d (%d stamped records) in %.3f s",
        len(table),
        start,
        end,
        count,
        seconds,
    )
    return start, count, seconds
