"""The store's side of replication: whole records out to a replica, appended verbatim, tails cut.

A master sends its commit log as it lies on disk, in frames of whole records::

    master log   ...|rec|rec|rec|rec|BLANK......|  next segment: |rec|rec|...
    frame 1          [rec rec rec]                 never crosses a segment end,
    frame 2                      [rec BLANK.....]  an epoch end or max_bytes
    frame 3                                         [rec rec]     (one record at least)

and the replica appends each frame at the very same offset. Every record
already carries its QUEUEOFFSET and PHYSICALOFFSET, so the replica's consume
queues and index, built from the appended bytes by recovery's dispatch, hold
the master's queue offsets: a consumer moves between the two without any
translation. A frame is checked (framing, CRC, PHYSICALOFFSET) after it is
copied and before anything is dispatched; a bad one is cut off again and
refused, so a replica's log never holds a record it did not verify.

:func:`truncate_to` cuts a log back to a record boundary (a replica whose
tail diverged from its new master's, found by epoch): the same steps as
recovery's truncation, and the epoch file forgets the terms that were cut.
"""

from __future__ import annotations

import logging
import mmap
import struct
from typing import TYPE_CHECKING

from pocketmq.broker.store import speedups
from pocketmq.broker.store.batch import (
    SCHEDULE_TOPIC,
    BatchError,
    ScannedBatch,
    apply_schedule_tags_codes,
    consume_queue_tags_code,
    py_queue_units,
    py_scan_batch,
    queue_units,
)
from pocketmq.broker.store.commitlog import (
    END_FILE_MIN_BLANK_LENGTH,
    ScannedRecord,
    is_dispatched_to_queue,
)
from pocketmq.broker.store.consume_queue import CQ_UNIT_SIZE, ConsumeQueue
from pocketmq.broker.store.index_file_set import py_index_key_hashes
from pocketmq.broker.store.mapped_file import MappedFile
from pocketmq.broker.store.producer_snapshot import rebuild as rebuild_producers
from pocketmq.broker.store.producer_state import (
    PARKING_TOPICS,
    idempotence_of_props,
    sent_queue,
)
from pocketmq.broker.store.recovery import (
    parse_props,
    record_boundary_at_or_before,
    redispatch_range,
)
from pocketmq.common.errors import CorruptRecordError, StoreError
from pocketmq.common.message import (
    BLANK_HEAD,
    BLANK_MAGIC_CODE,
    HOST_V4_SIZE,
    HOST_V6_SIZE,
    POS_QUEUEOFFSET,
    POS_SYSFLAG,
    QUEUE_AND_PHYS_OFFSET,
    SysFlag,
)
from pocketmq.common.record_layout import FIELD_STRUCT, STORE_TIMESTAMP

if TYPE_CHECKING:
    from pocketmq.broker.store.message_store import DefaultMessageStore

__all__ = [
    "ReplicationError",
    "append_replicated",
    "frame_columns",
    "frame_dispatch",
    "frame_end",
    "py_frame_columns",
    "py_frame_dispatch",
    "py_frame_end",
    "py_scan_frame",
    "read_for_replica",
    "replica_frame",
    "scan_frame",
    "truncate_to",
    "wipe",
]

log = logging.getLogger(__name__)


_I32 = struct.Struct(">i")
_QUEUEOFFSET = FIELD_STRUCT["QUEUEOFFSET"]


class ReplicationError(StoreError):
    """A frame that cannot be appended: wrong offset, damaged, or no room."""


def read_for_replica(
    store: DefaultMessageStore, offset: int, max_bytes: int, stop: int | None = None
) -> bytes:
    """Whole records from *offset* (a record boundary): at most *max_bytes* (but at least
    one record), never past the segment end, *stop* or the log's end. ``b""`` when
    there is nothing to send yet."""
    span = replica_frame(store, offset, max_bytes, stop)
    if span is None:
        return b""
    segment, start, end = span
    return segment.read(start, end - start)


def replica_frame(
    store: DefaultMessageStore, offset: int, max_bytes: int, stop: int | None = None
) -> tuple[MappedFile, int, int] | None:
    """Where :func:`read_for_replica`'s frame lies: (segment, file-relative start, end),
    for a sender that copies it straight from the mapping; None when there is nothing
    to send yet."""
    commitlog = store.commitlog
    end = commitlog.max_offset if stop is None else min(stop, commitlog.max_offset)
    if offset >= end:
        return None
    mf = commitlog.queue.find(offset)
    if mf is None:
        raise ReplicationError(
            f"commit-log offset {offset} is not in this log "
            f"[{commitlog.min_offset}, {commitlog.max_offset})"
        )
    base = mf.file_from_offset
    limit = min(end, base + mf.file_size)
    if limit - offset <= max_bytes:
        # the usual frame of a replica that keeps up: all there is, no walk. The limit
        # is a record boundary: the log's end, an epoch's start, or a segment's end
        # (past its BLANK filler, which the frame then carries)
        frame_stop = limit - base
    else:
        frame_stop = frame_end(mf.buffer, offset - base, limit - base, max_bytes)
    frame_stop = min(frame_stop, mf.wrote_position)
    if frame_stop <= offset - base:
        return None
    return mf, offset - base, frame_stop


def py_frame_end(
    segment: bytes | bytearray | memoryview | mmap.mmap, start: int, limit: int, max_bytes: int
) -> int:
    """Where a frame of whole records from record boundary *start* of a *segment*
    (the whole segment's buffer; positions relative to it) ends: at most
    *max_bytes* (one record at least), never past *limit*, and the segment's end
    once its BLANK filler is reached; *start* when nothing can be sent. The
    reference of the compiled ``frame_end``."""
    size = len(segment)
    if not 0 <= start <= limit <= size:
        raise ValueError(f"frame [{start}, {limit}) is not inside a segment of {size} bytes")
    pos = start
    while pos < limit:
        if size - pos < END_FILE_MIN_BLANK_LENGTH:
            nxt = size  # too little left for a head: all filler
        else:
            total, magic = BLANK_HEAD.unpack_from(segment, pos)
            if magic == BLANK_MAGIC_CODE:
                nxt = size
            elif total <= 0:
                break  # written position reached mid-segment
            else:
                nxt = pos + total
        if nxt > limit and not (nxt == size and limit == size):
            break
        if nxt - start > max_bytes and pos > start:
            break
        pos = nxt
    return pos


def py_frame_columns(
    frame: bytes | bytearray | memoryview,
    positions: list[int],
    store_ts_positions: list[int],
    base_offset: int,
) -> tuple[list[int], list[int], list[int], list[int]]:
    """What a replica's dispatch reads of each record of a checked frame:
    (phys_offsets, queue_offsets, store_timestamps_ms, cuts), *cuts* being the
    indices i > 0 whose store timestamp differs from record i - 1's (one index
    ``put_many`` per run). The reference of the compiled ``frame_columns``."""
    if len(positions) != len(store_ts_positions):
        raise ValueError(
            f"{len(positions)} positions but {len(store_ts_positions)} store timestamp positions"
        )
    size = len(frame)
    for i, (pos, ts) in enumerate(zip(positions, store_ts_positions, strict=True)):
        if (
            pos < 0
            or ts < 0
            or pos > size - (POS_QUEUEOFFSET + _QUEUEOFFSET.size)
            or ts > size - STORE_TIMESTAMP.size - pos
        ):
            raise ValueError(
                f"record {i} at {pos} (store timestamp at +{ts}) is not inside "
                f"the frame of {size} bytes"
            )
    phys_offsets = [base_offset + pos for pos in positions]
    queue_offsets = [_QUEUEOFFSET.unpack_from(frame, pos + POS_QUEUEOFFSET)[0] for pos in positions]
    stamps = [
        STORE_TIMESTAMP.unpack_from(frame, pos + ts)[0]
        for pos, ts in zip(positions, store_ts_positions, strict=True)
    ]
    cuts = [i for i in range(1, len(stamps)) if stamps[i] != stamps[i - 1]]
    return phys_offsets, queue_offsets, stamps, cuts


# The compiled twins when the store's extension is built and has them (an older build
# of the same VERSION lacks them and runs the references).
frame_end = getattr(speedups.NATIVE, "frame_end", None) or py_frame_end
frame_columns = getattr(speedups.NATIVE, "frame_columns", None) or py_frame_columns


_ANY_SIZE = (1 << 31) - 1  # the master checked sizes against its own limits

#: What :func:`scan_frame` returns: the batch, then :func:`frame_columns`' columns
#: (phys_offsets, queue_offsets, store_timestamps_ms, cuts).
ScannedFrame = tuple[ScannedBatch, list[int], list[int], list[int], list[int]]


def py_scan_frame(
    frame: bytes | bytearray | memoryview, base_offset: int, store_host_size: int
) -> ScannedFrame:
    """Check every record of a master's *frame* bound for commit-log offset
    *base_offset*, and read what the replica's dispatch needs, in one pass: the
    batch scanner's checks and lists (any body size; empty bodies allowed), the
    columns of :func:`frame_columns`, then :class:`BatchError` for the first
    record whose PHYSICALOFFSET is not *base_offset* plus its position. The
    reference of the compiled ``scan_frame`` (whose body CRC is folded with
    PCLMULQDQ where the CPU has it)."""
    if store_host_size not in (HOST_V4_SIZE, HOST_V6_SIZE):
        raise ValueError(
            f"store_host_size is {store_host_size}; a STOREHOST is {HOST_V4_SIZE} or "
            f"{HOST_V6_SIZE} bytes"
        )
    batch = py_scan_batch(frame, max_body_size=_ANY_SIZE, store_host_size=store_host_size)
    phys_offsets, queue_offsets, stamps, cuts = py_frame_columns(
        frame, batch.positions, batch.store_ts_positions, base_offset
    )
    unpack = QUEUE_AND_PHYS_OFFSET.unpack_from
    for pos, phys in zip(batch.positions, phys_offsets, strict=True):
        said = unpack(frame, pos + POS_QUEUEOFFSET)[1]
        if said != phys:
            raise BatchError(
                "illegal",
                f"record at batch offset {pos} says PHYSICALOFFSET {said}; it lies at "
                f"commit-log offset {phys}",
            )
    return batch, phys_offsets, queue_offsets, stamps, cuts


scan_frame = getattr(speedups.NATIVE, "scan_frame", None) or py_scan_frame

#: What :func:`frame_dispatch` returns: (records, consume-queue runs as ``queue_units``
#: makes them, index runs of (store_timestamp_ms, hashes, phys_offsets), the last
#: record's store timestamp); None when the frame needs :func:`scan_frame`'s way.
FrameDispatch = tuple[
    int, list[tuple[str, int, int, bytes]], list[tuple[int, list[int], list[int]]], int
]


def py_frame_dispatch(
    frame: bytes | bytearray | memoryview,
    base_offset: int,
    store_host_size: int,
    after_phys: int,
    index: bool,
) -> FrameDispatch | None:
    """Check a master's *frame* as :func:`py_scan_frame` does (the same errors), then
    what a replica's dispatch writes of it: the consume-queue runs and, with
    *index*, the index entries of records past *after_phys*, in runs of one store
    timestamp. None for a frame that needs :func:`scan_frame`'s way: a record with
    an idempotence stamp or of the schedule topic, or a queue whose offsets in the
    frame are not one run. The reference of the compiled ``frame_dispatch``, which
    makes two objects per index entry instead of about ten per record."""
    batch, phys_offsets, queue_offsets, stamps, _cuts = py_scan_frame(
        frame, base_offset, store_host_size
    )
    if batch.idem_runs or SCHEDULE_TOPIC in batch.topics:
        return None
    runs = py_queue_units(batch, phys_offsets, queue_offsets)
    if not _runs_consecutive(batch, queue_offsets, runs):
        return None
    index_runs: list[tuple[int, list[int], list[int]]] = []
    if index:
        keys = [
            k if is_dispatched_to_queue(flag) else []
            for k, flag in zip(batch.keys, batch.sysflags, strict=True)
        ]
        hashes, entry_phys = py_index_key_hashes(batch.topics, keys, phys_offsets, after_phys)
        stamp_at = dict(zip(phys_offsets, stamps, strict=True))
        for key_hash, phys in zip(hashes, entry_phys, strict=True):
            stamp = stamp_at[phys]
            if not index_runs or index_runs[-1][0] != stamp:
                index_runs.append((stamp, [], []))
            index_runs[-1][1].append(key_hash)
            index_runs[-1][2].append(phys)
    return len(batch), runs, index_runs, stamps[-1]


frame_dispatch = getattr(speedups.NATIVE, "frame_dispatch", None) or py_frame_dispatch


def append_replicated(store: DefaultMessageStore, offset: int, data: bytes) -> int:
    """Append a master's frame at *offset*; dispatch it; return the new max offset.

    The frame is checked before a byte of it is written (the store's batch
    scanner, compiled when built: framing, body CRC, topic, properties; then
    every PHYSICALOFFSET) and dispatched in runs, as a put is: one C scan and a
    few list passes per frame instead of Python work per record. The reference,
    :func:`append_checked` (``FAST_DISPATCH = False``), appends, scans the log
    record by record with CRC checks and cuts a bad frame off again; both leave
    the same files (``tests/unit/test_replica_dispatch.py``).
    """
    commitlog = store.commitlog
    queue = commitlog.queue
    empty = not queue.files or commitlog.max_offset == commitlog.min_offset == 0
    if empty and offset % commitlog.file_size == 0 and offset > 0:
        queue.truncate(0)  # an empty replica starts at the master's first segment
        queue.last_file(offset)
    elif offset != commitlog.max_offset:
        raise ReplicationError(
            f"frame starts at commit-log offset {offset}, but this log "
            f"ends at {commitlog.max_offset}"
        )
    if not data:
        return offset
    last = queue.files[-1] if queue.files else None
    if last is None or last.is_full:
        last = queue.last_file(offset)
        assert last is not None
    if last.file_from_offset + last.wrote_position != offset:
        raise ReplicationError(
            f"frame at {offset} does not continue segment "
            f"{last.path} (written to {last.wrote_position})"
        )
    if len(data) > last.remaining:
        raise ReplicationError(
            f"frame of {len(data)} bytes at {offset} crosses the end of "
            f"segment {last.path} ({last.remaining} bytes left)"
        )
    ends_segment = len(data) == last.remaining
    if not FAST_DISPATCH:
        return append_checked(store, last, offset, data)
    records = _frame_records(data, offset, ends_segment)
    if records is None:  # a segment's last frame of filler only
        last.append(data)
        store.dispatched_offset = offset + len(data)
        return commitlog.max_offset
    lean = None if store.deleted else _check_lean(store, records, offset)
    checked = _check_frame(records, offset) if lean is None else None
    last.append(data)  # a frame that ends a segment carries its filler: now full
    if commitlog.warm is not None:
        commitlog.warm.notify(last)  # fault the next pages in ahead of the next frame
    end = offset + len(data)
    if lean is not None:
        _dispatch_lean(store, lean, end)
    else:
        assert checked is not None
        _dispatch_batch(store, checked, offset, end)
    return commitlog.max_offset


#: False runs only the reference path (tests compare the two).
FAST_DISPATCH = True


def append_checked(store: DefaultMessageStore, last: MappedFile, offset: int, data: bytes) -> int:
    """The reference path: append, then check by scanning the log, then dispatch."""
    commitlog = store.commitlog
    queue = commitlog.queue
    last.append(data)
    end = offset + len(data)
    try:
        records = list(commitlog.scan(offset, check_crc=True, stop=end))
    except CorruptRecordError as exc:
        queue.truncate(offset)
        queue.set_write_position(offset)
        raise ReplicationError(
            f"frame at {offset} holds a damaged record at {exc.offset}: "
            f"{exc.reason}; nothing of it was kept"
        ) from None
    if records and records[-1].phys_offset + records[-1].size != end and not last.is_full:
        queue.truncate(offset)
        queue.set_write_position(offset)
        raise ReplicationError(f"frame at {offset} of {len(data)} bytes ends inside a record")
    _dispatch(store, records, end)
    return commitlog.max_offset


def _records_end(data: bytes, ends_segment: bool) -> int | None:
    """Where the frame's records end: its length, or where the BLANK filler of a
    segment's last frame begins; None when the chain does not add up."""
    if not ends_segment:
        return len(data)
    pos, size = 0, len(data)
    while pos < size:
        if size - pos < END_FILE_MIN_BLANK_LENGTH:
            return pos  # too little left for a head: all filler
        total, magic = BLANK_HEAD.unpack_from(data, pos)
        if magic == BLANK_MAGIC_CODE:
            return pos if total == size - pos else None
        if total <= 0:
            return None
        pos += total
    return pos if pos == size else None


def _frame_records(data: bytes, offset: int, ends_segment: bool) -> memoryview | None:
    """The frame's records (None: it holds only a segment's filler); a frame that does
    not end with a whole record or a segment's filler is refused."""
    records_end = _records_end(data, ends_segment)
    if records_end is None:
        raise ReplicationError(
            f"frame at {offset} of {len(data)} bytes does not end with "
            "a whole record or a segment's filler; nothing of it was kept"
        )
    return memoryview(data)[:records_end] if records_end else None


def _store_host_size(records: memoryview) -> int:
    sysflag = _I32.unpack_from(records, POS_SYSFLAG)[0]
    return HOST_V6_SIZE if sysflag & SysFlag.STOREHOST_V6 else HOST_V4_SIZE


def _check_lean(
    store: DefaultMessageStore, records: memoryview, offset: int
) -> FrameDispatch | None:
    """:func:`frame_dispatch` of the frame's records (None: scan_frame's way); raises
    :class:`ReplicationError` for anything wrong, as :func:`_check_frame` does."""
    try:
        return frame_dispatch(
            records,
            offset,
            _store_host_size(records),
            store.index.last_indexed_phys,
            store.config.message_index_enable,
        )
    except BatchError as exc:
        raise ReplicationError(
            f"frame at {offset} holds a damaged record: {exc}; nothing of it was kept"
        ) from None


def _check_frame(records: memoryview, offset: int) -> ScannedFrame:
    """The frame's records scanned and checked. Raises :class:`ReplicationError` for
    anything wrong: framing, a body CRC, a topic or properties that are not what the
    master's scan let in, or a PHYSICALOFFSET that is not where the record lies in
    this log."""
    try:
        return scan_frame(records, offset, _store_host_size(records))
    except BatchError as exc:
        raise ReplicationError(
            f"frame at {offset} holds a damaged record: {exc}; nothing of it was kept"
        ) from None


def _dispatch_lean(store: DefaultMessageStore, lean: FrameDispatch, end: int) -> None:
    """Consume-queue units and index entries of a frame :func:`frame_dispatch` made
    ready: what :func:`_dispatch_batch` writes of a frame without idempotence stamps,
    schedule-topic records or broken queue runs."""
    count, runs, index_runs, last_stamp = lean
    store.after_producer_records(end)
    index = store.index
    for stamp, hashes, entry_phys in index_runs:
        index.put_hashes(hashes, entry_phys, stamp)
    find_or_create = store.consume_queues.find_or_create
    touched = []
    for topic, queue_id, first, units in runs:
        cq = find_or_create(topic, queue_id)
        cq.append_many(first, units)
        touched.append((topic, queue_id, cq))
    store.dispatched_offset = end
    store.last_store_timestamp_ms = last_stamp
    store.stats_put_messages += count
    table = store.commitlog.queue_offsets
    for topic, queue_id, cq in touched:
        table[(topic, queue_id)] = cq.max_offset
        store.notify_arrival(topic, queue_id, cq.max_offset)


def _dispatch_batch(
    store: DefaultMessageStore, checked: ScannedFrame, offset: int, end: int
) -> None:
    """Consume-queue units and index entries of a checked, appended frame: what
    :func:`_dispatch` makes record by record, made as a put makes them (one
    ``append_many`` per queue, one ``put_many`` per store timestamp).

    Rare frames go the reference way: records of deleted queues, or a queue whose
    offsets in the frame are not one consecutive run (deleted and created again).
    """
    batch, phys_offsets, queue_offsets, stamps, cuts = checked
    runs = queue_units(batch, phys_offsets, queue_offsets) if not store.deleted else None
    if runs is not None and not _runs_consecutive(batch, queue_offsets, runs):
        runs = None
    if runs is None:
        _dispatch(store, list(store.commitlog.scan(offset, check_crc=False, stop=end)), end)
        return
    if SCHEDULE_TOPIC in batch.topics:
        apply_schedule_tags_codes(batch)
        runs = queue_units(batch, phys_offsets, queue_offsets)
    if batch.idem_runs:
        # the master observed these records at its put, with its store time
        store.producers.observe_batch(batch, phys_offsets, stamps[-1])
    store.after_producer_records(end)
    if store.config.message_index_enable:
        topics, keys = batch.topics, batch.keys
        if not all(is_dispatched_to_queue(flag) for flag in set(batch.sysflags)):
            keys = [
                k if is_dispatched_to_queue(flag) else []
                for k, flag in zip(keys, batch.sysflags, strict=True)
            ]
        if not cuts:
            store.index.put_many(topics, keys, phys_offsets, stamps[0])
        else:
            for lo, hi in zip([0, *cuts], [*cuts, len(stamps)], strict=True):
                store.index.put_many(topics[lo:hi], keys[lo:hi], phys_offsets[lo:hi], stamps[lo])
    touched = []
    for topic, queue_id, first, units in runs:
        cq = store.consume_queues.find_or_create(topic, queue_id)
        cq.append_many(first, units)
        touched.append((topic, queue_id, cq))
    store.dispatched_offset = end
    store.last_store_timestamp_ms = stamps[-1]
    store.stats_put_messages += len(batch)
    table = store.commitlog.queue_offsets
    for topic, queue_id, cq in touched:
        table[(topic, queue_id)] = cq.max_offset
        store.notify_arrival(topic, queue_id, cq.max_offset)


def _runs_consecutive(
    batch: ScannedBatch, queue_offsets: list[int], runs: list[tuple[str, int, int, bytes]]
) -> bool:
    """Whether each queue's units are one consecutive run of queue offsets: its last
    record in the frame (any record: a prepared one too) says the offset its run
    ends at. Looked for from the frame's end, so a frame over a few queues costs a
    few steps, not one per record."""
    want = {
        (topic, queue_id): first + len(units) // CQ_UNIT_SIZE - 1
        for topic, queue_id, first, units in runs
    }
    topics, queue_ids = batch.topics, batch.queue_ids
    seen: set[tuple[str, int]] = set()
    for i in range(len(topics) - 1, -1, -1):
        key = (topics[i], queue_ids[i])
        if key in seen:
            continue
        seen.add(key)
        last = want.get(key)
        if last is not None and queue_offsets[i] != last:
            return False
        if len(seen) >= len(want) and all(k in seen for k in want):
            return True
    return True


def _dispatch(store: DefaultMessageStore, records: list[ScannedRecord], end: int) -> None:
    """Consume-queue units and index entries of appended records, as the master made them
    (the reference, record by record).

    The queue offset is the record's own; an empty queue starts wherever its first
    record says (the master's earlier records of it may be gone by retention).
    """
    index_enabled = store.config.message_index_enable
    deleted = store.deleted
    touched: dict[tuple[str, int], ConsumeQueue] = {}
    last_ts = 0
    observe = store.producers.observe
    for rec in records:
        last_ts = rec.store_timestamp_ms
        ident = idempotence_of_props(rec.properties)
        if ident is not None:
            topic, queue_id = (
                sent_queue(rec.topic, rec.queue_id, rec.properties)
                if rec.topic in PARKING_TOPICS
                else (rec.topic, rec.queue_id)
            )
            observe(ident, topic, queue_id, rec.phys_offset, rec.store_timestamp_ms)
        if deleted and deleted.is_dead(rec.topic, rec.queue_id, rec.phys_offset):
            continue
        if not is_dispatched_to_queue(rec.sysflag):
            continue
        props, keys = parse_props(rec.properties)
        key = (rec.topic, rec.queue_id)
        cq = touched.get(key)
        if cq is None:
            cq = touched[key] = store.consume_queues.find_or_create(rec.topic, rec.queue_id)
        cq.append(
            rec.queue_offset, rec.phys_offset, rec.size, consume_queue_tags_code(rec.topic, props)
        )
        if index_enabled and keys:
            store.index.put(rec.topic, keys, rec.phys_offset, rec.store_timestamp_ms)
    store.dispatched_offset = end
    store.after_producer_records(end)
    if last_ts:
        store.last_store_timestamp_ms = last_ts
    store.stats_put_messages += len(records)
    queue_offsets = store.commitlog.queue_offsets
    for (topic, queue_id), cq in touched.items():
        queue_offsets[(topic, queue_id)] = cq.max_offset
        store.notify_arrival(topic, queue_id, cq.max_offset)


def truncate_to(store: DefaultMessageStore, point: int) -> int:
    """Cut the log back to *point* (a record boundary); return the bytes cut."""
    commitlog = store.commitlog
    end = commitlog.max_offset
    if point >= end:
        return 0
    if point < commitlog.min_offset:
        raise ReplicationError(
            f"cannot cut the log to {point}: it begins at {commitlog.min_offset}"
        )
    if record_boundary_at_or_before(commitlog, point) != point:
        raise ReplicationError(f"commit-log offset {point} is not a record boundary")
    cut = end - point
    commitlog.queue.truncate(point)
    commitlog.queue.set_write_position(point)
    store.consume_queues.truncate_phys(point)
    store.index.truncate_phys(point)
    # index files past the point went whole; index what lies before the point again
    redispatch_range(store, max(commitlog.min_offset, store.index.last_indexed_phys), point)
    commitlog.queue_offsets = {
        (cq.topic, cq.queue_id): cq.max_offset for cq in store.consume_queues.all_queues()
    }
    store.dispatched_offset = point
    store.epochs.truncate(point)
    store.gate.cut(point)
    commitlog.queue.flush()
    store.flush_round()
    rebuild_producers(store, point)  # the cut records may have advanced sequences
    log.warning(
        "store %s: cut the commit log back from %d to %d (%d bytes) to match the master's log",
        store.dirs.root,
        end,
        point,
        cut,
    )
    return cut


def wipe(store: DefaultMessageStore) -> int:
    """Drop the whole log, its queues, index and epochs (a replica with no history in
    common with its master copies it afresh); return the bytes dropped."""
    commitlog = store.commitlog
    dropped = commitlog.max_offset - commitlog.min_offset
    commitlog.queue.truncate(commitlog.min_offset)
    for cq in list(store.consume_queues.all_queues()):
        store.consume_queues.delete_queue(cq.topic, cq.queue_id)
    store.index.truncate_phys(0)
    commitlog.queue_offsets = {}
    store.dispatched_offset = 0
    store.epochs.replace([])
    store.gate.cut(0)
    store.flush_round()
    rebuild_producers(store, 0)
    log.warning(
        "store %s: dropped the whole commit log (%d bytes): it shares no history with the master's",
        store.dirs.root,
        dropped,
    )
    return dropped
