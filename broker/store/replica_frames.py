"""The frame functions of replication: a master's frame bounds, a replica's checks.

Pure functions over bytes, each with its compiled twin in ``_speedups.c``
(taken when the store's extension is built and has it)::

    master   frame_end        where a frame of whole records ends in a segment
    replica  scan_frame       every record checked (framing, body CRC, topic,
                              properties, PHYSICALOFFSET) and its dispatch columns
             frame_dispatch   the same checks, then the consume-queue runs and
                              index entries the replica writes (the common frame)
             frame_columns    the dispatch columns of a checked frame

:mod:`.replication` applies them to a store.
"""

from __future__ import annotations

import mmap

from pocketmq.broker.store import speedups
from pocketmq.broker.store.batch import (
    SCHEDULE_TOPIC,
    BatchError,
    ScannedBatch,
    py_queue_units,
    py_scan_batch,
)
from pocketmq.broker.store.commitlog import END_FILE_MIN_BLANK_LENGTH, is_dispatched_to_queue
from pocketmq.broker.store.consume_queue import CQ_UNIT_SIZE
from pocketmq.broker.store.index_file_set import py_index_key_hashes
from pocketmq.common.message import (
    BLANK_HEAD,
    BLANK_MAGIC_CODE,
    HOST_V4_SIZE,
    HOST_V6_SIZE,
    POS_QUEUEOFFSET,
    QUEUE_AND_PHYS_OFFSET,
)
from pocketmq.common.record_layout import FIELD_STRUCT, STORE_TIMESTAMP

__all__ = [
    "FrameDispatch",
    "ScannedFrame",
    "frame_columns",
    "frame_dispatch",
    "frame_end",
    "py_frame_columns",
    "py_frame_dispatch",
    "py_frame_end",
    "py_scan_frame",
    "records_end",
    "runs_consecutive",
    "scan_frame",
]

_QUEUEOFFSET = FIELD_STRUCT["QUEUEOFFSET"]


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
    if not runs_consecutive(batch, queue_offsets, runs):
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


def records_end(data: bytes, ends_segment: bool) -> int | None:
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


def runs_consecutive(
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
