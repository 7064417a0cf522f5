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

The frame functions themselves (bounds, checks, dispatch columns) are pure and
live in :mod:`.replica_frames`; this module applies them to a store.
"""

from __future__ import annotations

import logging
import struct
from functools import partial
from typing import TYPE_CHECKING

from pocketmq.broker.store.batch import (
    SCHEDULE_TOPIC,
    BatchError,
    apply_schedule_tags_codes,
    consume_queue_tags_code,
    queue_units,
)
from pocketmq.broker.store.commitlog import (
    ScannedRecord,
    is_dispatched_to_queue,
)
from pocketmq.broker.store.consume_queue import ConsumeQueue
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
from pocketmq.broker.store.replica_frames import (
    FrameDispatch,
    ScannedFrame,
    frame_dispatch,
    frame_end,
    records_end,
    runs_consecutive,
    scan_frame,
)
from pocketmq.common.errors import CorruptRecordError, StoreError
from pocketmq.common.message import (
    HOST_V4_SIZE,
    HOST_V6_SIZE,
    POS_SYSFLAG,
    SysFlag,
)

if TYPE_CHECKING:
    from pocketmq.broker.store.message_store import DefaultMessageStore

__all__ = [
    "ReplicationError",
    "append_replicated",
    "dispatch_appended",
    "frame_dispatch",
    "frame_end",
    "read_for_replica",
    "records_end",
    "replica_frame",
    "scan_frame",
    "truncate_to",
    "wipe",
]

log = logging.getLogger(__name__)


_I32 = struct.Struct(">i")


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


def append_replicated(
    store: DefaultMessageStore, offset: int, data: bytes, *, dispatch: bool = True
) -> int:
    """Append a master's frame at *offset*; dispatch it; return the new max offset.

    With ``dispatch=False`` the checked, appended frame's dispatch is left to
    :func:`dispatch_appended` (a replica acknowledges the append first, as
    RocketMQ's slave reports its commit-log offset before its reput); whatever
    comes next to the store (the next frame, a cut, a promotion, a put, a
    shutdown) dispatches it first, and a restart's recovery re-dispatches the log
    from the checkpoint's dispatched offset, which never passes an undispatched
    frame.

    The frame is checked before a byte of it is written (the store's batch
    scanner's checks, compiled when built: framing, body CRC, topic, properties;
    then every PHYSICALOFFSET) and dispatched in runs, as a put is. The common
    frame goes through :func:`frame_dispatch`, one C pass that also makes its
    consume-queue units and index entries; a frame with idempotence stamps,
    schedule-topic records or a queue deleted and created again goes through
    :func:`scan_frame` and the put's dispatch helpers. The reference,
    :func:`append_checked` (``FAST_DISPATCH = False``), appends, scans the log
    record by record with CRC checks and cuts a bad frame off again; both leave
    the same files (``tests/unit/test_replica_dispatch.py``).
    """
    dispatch_appended(store)
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
        store.undispatched = partial(_dispatch_lean, store, lean, end)
    else:
        assert checked is not None
        store.undispatched = partial(_dispatch_batch, store, checked, offset, end)
    if dispatch:
        dispatch_appended(store)
    return commitlog.max_offset


def dispatch_appended(store: DefaultMessageStore) -> None:
    """Dispatch the frame :func:`append_replicated` left undispatched, if any (once).

    A dispatch that fails with an I/O error is the put's case: the records stay in
    the log, :class:`DispatchCatchUp` re-dispatches from the dispatched offset, and
    no frame is appended (nor a put taken) before it has caught up."""
    pending = store.undispatched
    if pending is not None:
        store.undispatched = None
        try:
            pending()
        except OSError as exc:
            store.catch_up.stopped(exc)
    if store.catch_up.behind and not store.catch_up.run_once(force=True):
        raise ReplicationError(store.catch_up.behind_reason)


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


def _frame_records(data: bytes, offset: int, ends_segment: bool) -> memoryview | None:
    """The frame's records (None: it holds only a segment's filler); a frame that does
    not end with a whole record or a segment's filler is refused."""
    end = records_end(data, ends_segment)
    if end is None:
        raise ReplicationError(
            f"frame at {offset} of {len(data)} bytes does not end with "
            "a whole record or a segment's filler; nothing of it was kept"
        )
    return memoryview(data)[:end] if end else None


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
    if runs is not None and not runs_consecutive(batch, queue_offsets, runs):
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
    dispatch_appended(store)
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
    store.undispatched = None  # all of it goes
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
