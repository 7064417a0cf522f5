"""StoreReader: reads by queue offset, by key, by time — RocketMQ's getMessage rules.

A read by queue offset answers, for the queue's ``[min, max)``::

    queue unknown               NO_MATCHED_LOGIC_QUEUE  next = 0
    max == 0                    NO_MESSAGE_IN_QUEUE     next = 0
    offset < min                OFFSET_TOO_SMALL        next = min
    offset == max               OFFSET_OVERFLOW_ONE     next = offset
    offset > max                OFFSET_OVERFLOW_BADLY   next = max
    else                        FOUND | NO_MATCHED_MESSAGE | OFFSET_FOUND_NULL

Tag filtering uses the consume queue's tag codes only; the commit log is read
as stored bytes and never decoded. A filtered read scans at most
``max(800, 20 * max_count)`` units (RocketMQ's 16,000 bytes) so that a queue of
non-matching messages cannot hold a pull forever.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from pocketmq.broker.store import speedups
from pocketmq.broker.store.consume_queue import CQ_UNIT, CQ_UNIT_SIZE
from pocketmq.broker.store.results import GetResult, GetStatus
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.message import decode_record

if TYPE_CHECKING:
    from pocketmq.broker.store.message_store import DefaultMessageStore

__all__ = [
    "GATHER_LIMIT",
    "GATHER_OTHER_SEGMENT",
    "GATHER_UNITS_DONE",
    "StoreReader",
    "gather_records",
    "py_gather_records",
]

MIN_FILTER_UNITS = 800
_PHYS = struct.Struct(">q")  # a unit's phys_offset, its first field

#: Why :func:`gather_records` returned: its units ran out; a count, byte or gate
#: limit was reached; the next unit lies in another commit-log segment.
GATHER_UNITS_DONE, GATHER_LIMIT, GATHER_OTHER_SEGMENT = 0, 1, 2


def py_gather_records(
    units: Any,
    upos: int,
    n_units: int,
    first_queue_offset: int,
    log: Any,
    log_base: int,
    log_span: int,
    log_wrote: int,
    log_min: int,
    max_count: int,
    max_bytes: int,
    have_count: int,
    have_bytes: int,
    tag_codes: frozenset[int] | None,
    gate_end: int,
    split: bool,
) -> tuple[Any, list[int], int, int, bool, int]:
    """Copy the records of consume-queue units out of one commit-log segment.

    The units are ``units[upos:upos + 20 * n_units]``; unit ``i`` has queue
    offset ``first_queue_offset + i``. *log* is a segment whose byte 0 is log
    offset *log_base*, spanning *log_span* bytes of which *log_wrote* are
    written. For each unit, in order:

    1. stop (limit) once *max_count* records are held, counting *have_count*
       from earlier calls, or when the unit would take the bytes past
       *max_bytes* (counting *have_bytes*) and a record is held already;
    2. stop (limit) when the record ends past *gate_end* (the confirm offset;
       -1: no gate);
    3. skip it as removed when ``phys < log_min``;
    4. skip it when *tag_codes* is not None and holds not its tag code;
    5. stop (other segment), not consuming it, when ``phys`` is outside the segment;
    6. skip it as removed when ``size <= 0`` or the record is not wholly written
       (a unit of a damaged store names any bytes; only written bytes are read);
    7. take it.

    Returns ``(out, queue_offsets, consumed, taken_bytes, removed, stop)``:
    *out* is the records back to back, or a list of them when *split*.
    """
    if upos < 0 or n_units < 0 or upos > len(units) or n_units > (len(units) - upos) // 20:
        raise ValueError(
            f"{n_units} units at byte {upos} do not fit a buffer of {len(units)} bytes"
        )
    end = min(log_wrote, len(log))
    taken: list[bytes] = []
    queue_offsets: list[int] = []
    count, total, taken_bytes = have_count, have_bytes, 0
    removed = False
    stop = GATHER_UNITS_DONE
    consumed = 0
    for phys, size, tags in CQ_UNIT.iter_unpack(units[upos : upos + n_units * CQ_UNIT_SIZE]):
        if count >= max_count or (count > 0 and total + size > max_bytes):
            stop = GATHER_LIMIT
            break
        if gate_end >= 0 and phys + size > gate_end:
            stop = GATHER_LIMIT
            break
        if phys < log_min:
            removed = True
        elif tag_codes is not None and tags not in tag_codes:
            pass
        elif not log_base <= phys < log_base + log_span:
            stop = GATHER_OTHER_SEGMENT
            break
        elif size <= 0 or phys - log_base + size > end:
            removed = True
        else:
            rel = phys - log_base
            taken.append(bytes(log[rel : rel + size]))
            queue_offsets.append(first_queue_offset + consumed)
            count += 1
            total += size
            taken_bytes += size
        consumed += 1
    out = taken if split else b"".join(taken)
    return out, queue_offsets, consumed, taken_bytes, removed, stop


gather_records = speedups.pick("gather_records", py_gather_records)


class StoreReader:
    def __init__(self, store: DefaultMessageStore) -> None:
        self._store = store

    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_count: int | None = None,
        max_bytes: int | None = None,
        tag_codes: frozenset[int] | None = None,
        as_blob: bool = False,
    ) -> GetResult:
        """RocketMQ's getMessage. The records come as a list of ``bytes``, or with
        *as_blob* as one ``bytes`` of them back to back (``GetResult.blob``)."""
        cfg = self._store.config
        max_count = min(max_count or cfg.max_pull_messages, cfg.max_pull_messages * 50)
        max_bytes = max_bytes or cfg.max_pull_bytes
        cq = self._store.consume_queues.get(topic, queue_id)
        if cq is None:
            return GetResult(
                status=GetStatus.NO_MATCHED_LOGIC_QUEUE,
                next_begin_offset=0,
                min_offset=0,
                max_offset=0,
            )
        min_offset = cq.min_offset
        max_offset = self._store.gate.visible_max(cq)  # units below the confirm offset

        def answer(status: GetStatus, next_offset: int) -> GetResult:
            return GetResult(
                status=status,
                next_begin_offset=next_offset,
                min_offset=min_offset,
                max_offset=max_offset,
            )

        if max_offset == 0:
            return answer(GetStatus.NO_MESSAGE_IN_QUEUE, 0)
        if offset < min_offset:
            return answer(GetStatus.OFFSET_TOO_SMALL, min_offset)
        if offset == max_offset:
            return answer(GetStatus.OFFSET_OVERFLOW_ONE, offset)
        if offset > max_offset:
            return answer(GetStatus.OFFSET_OVERFLOW_BADLY, max_offset)
        return self._read_range(
            cq, offset, min_offset, max_offset, max_count, max_bytes, tag_codes, split=not as_blob
        )

    def _read_range(
        self,
        cq,
        offset: int,
        min_offset: int,
        max_offset: int,
        max_count: int,
        max_bytes: int,
        tag_codes: frozenset[int] | None,
        *,
        split: bool,
    ) -> GetResult:
        """Gather the records of units ``[offset, max_offset)`` a segment at a time.

        The per-unit work is one :func:`gather_records` call per consume-queue
        segment and commit-log segment crossed (usually one), over the units
        in the queue's own mapping: no Python object per unit.
        """
        read = _RangeRead(  # positional: this runs once per pull
            self._store.commitlog.min_offset,
            self._store.gate.confirm_offset,
            max_count,
            max_bytes,
            tag_codes,
            split,
        )
        scan_budget = max(MIN_FILTER_UNITS, max_count * 20) if tag_codes is not None else max_count
        next_offset = offset
        segment: tuple[object, int, int, int] | None = None
        while len(read.queue_offsets) < max_count and next_offset < max_offset and scan_budget > 0:
            span = cq.unit_span(next_offset, min(scan_budget, max_offset - next_offset))
            if span is None:
                break
            consumed, limited, segment = self._gather_span(read, span, next_offset, segment)
            next_offset += consumed
            scan_budget = 0 if limited else scan_budget - consumed
        status, next_offset = _range_status(read, offset, next_offset, min_offset)
        return GetResult(
            status=status,
            next_begin_offset=next_offset,
            min_offset=min_offset,
            max_offset=max_offset,
            records=read.out if split else [],
            queue_offsets=read.queue_offsets,
            blob=read.blob(),
        )

    def _gather_span(
        self,
        read: _RangeRead,
        span: tuple[Any, int, int],
        next_offset: int,
        segment: tuple[object, int, int, int] | None,
    ) -> tuple[int, bool, tuple[object, int, int, int] | None]:
        """Gather one consume-queue span ``(units, upos, n_units)`` whose first unit is
        *next_offset*, crossing commit-log segments as the units do (*segment*: the
        one the previous span ended in, or None).

        Returns ``(units consumed, whether a limit stopped it, the segment it ended in)``.
        """
        units, upos, n_units = span
        done = 0
        while done < n_units:
            at = upos + done * CQ_UNIT_SIZE
            if segment is None:
                segment = self._segment_of(_PHYS.unpack_from(units, at)[0])
            log_buf, log_base, log_span, log_wrote = segment
            out, offsets, consumed, taken, was_removed, stop = gather_records(
                units,
                at,
                n_units - done,
                next_offset + done,
                log_buf,
                log_base,
                log_span,
                log_wrote,
                read.log_min,
                read.max_count,
                read.max_bytes,
                len(read.queue_offsets),
                read.total_bytes,
                read.tag_codes,
                read.gate_end,
                read.split,
            )
            read.add(out, offsets, taken, was_removed)
            done += consumed
            if stop == GATHER_LIMIT:
                return done, True, segment
            if stop == GATHER_OTHER_SEGMENT:
                segment = None
        return done, False, segment

    def _segment_of(self, phys_offset: int) -> tuple[object, int, int, int]:
        """``(mapping, base, span, written)`` of the commit-log segment holding *phys_offset*.

        Where there is none (deleted, not yet created, closed), a one-byte span
        with nothing written, so the unit there reads as removed.
        """
        mf = self._store.commitlog.queue.find(phys_offset)
        if mf is None or mf.closed or not 0 <= phys_offset - mf.file_from_offset < mf.file_size:
            return (b"", phys_offset, 1, 0)
        return (mf.buffer, mf.file_from_offset, mf.file_size, mf.wrote_position)

    def store_time_of_unit(self, phys_offset: int, size: int) -> int | None:
        return self._store.commitlog.store_timestamp(phys_offset)

    def store_timestamp(self, topic: str, queue_id: int, offset: int) -> int | None:
        cq = self._store.consume_queues.get(topic, queue_id)
        unit = cq.get(offset) if cq is not None else None
        if unit is None:
            return None
        return self._store.commitlog.store_timestamp(unit[0])

    def query_by_key(
        self,
        topic: str,
        key: str,
        *,
        max_count: int | None = None,
        begin_timestamp_ms: int = 0,
        end_timestamp_ms: int | None = None,
    ) -> list[bytes]:
        """Records whose KEYS or UNIQ_KEY hold *key*; index hits are verified."""
        limit = max_count or self._store.config.default_query_max
        candidates = self._store.index.query(
            topic,
            key,
            max_count=limit * 2,
            begin_timestamp_ms=begin_timestamp_ms,
            end_timestamp_ms=end_timestamp_ms,
        )
        out: list[bytes] = []
        for phys in candidates:
            raw = self._store.commitlog.read_record(phys)
            if raw is None:
                continue
            try:
                msg = decode_record(raw, check_crc=False)
            except CorruptRecordError:
                continue
            if self._store.deleted.is_dead(msg.topic, msg.queue_id, phys):
                continue  # a record of the topic before it was deleted (and created again)
            if msg.topic == topic and (key in msg.keys or msg.uniq_key == key):
                out.append(raw)
                if len(out) >= limit:
                    break
        return out


class _RangeRead:
    """One :meth:`StoreReader._read_range` call: its limits and what it gathered so far."""

    __slots__ = (
        "gate_end",
        "log_min",
        "max_bytes",
        "max_count",
        "out",
        "queue_offsets",
        "removed",
        "split",
        "tag_codes",
        "total_bytes",
    )

    def __init__(
        self,
        log_min: int,
        gate_end: int,
        max_count: int,
        max_bytes: int,
        tag_codes: frozenset[int] | None,
        split: bool,
    ) -> None:
        self.log_min = log_min
        self.gate_end = gate_end
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.tag_codes = tag_codes
        self.split = split
        # split: one record each; else the blob of each gather_records call
        self.out: list[bytes] = []
        self.queue_offsets: list[int] = []
        self.total_bytes = 0
        self.removed = False

    def add(self, out: Any, offsets: list[int], taken: int, was_removed: bool) -> None:
        """Keep what one :func:`gather_records` call returned."""
        if offsets:
            if self.split:
                self.out.extend(out)
            else:
                self.out.append(out)
            self.queue_offsets.extend(offsets)
            self.total_bytes += taken
        self.removed = self.removed or was_removed

    def blob(self) -> bytes | None:
        """The records back to back (None when split)."""
        if self.split:
            return None
        return self.out[0] if len(self.out) == 1 else b"".join(self.out)


def _range_status(
    read: _RangeRead, offset: int, next_offset: int, min_offset: int
) -> tuple[GetStatus, int]:
    """The status of a range read from *offset* that stopped at *next_offset*, and the
    offset to read next."""
    if read.queue_offsets:
        return GetStatus.FOUND, next_offset
    if next_offset == offset:
        # The unit file of this offset is gone: move to where the queue resumes.
        return GetStatus.OFFSET_FOUND_NULL, max(offset + 1, min_offset)
    if read.removed:
        return GetStatus.MESSAGE_WAS_REMOVING, next_offset
    return GetStatus.NO_MATCHED_MESSAGE, next_offset
