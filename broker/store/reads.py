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

from typing import TYPE_CHECKING

from pocketmq.broker.store.consume_queue import CQ_UNIT
from pocketmq.broker.store.results import GetResult, GetStatus
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.message import decode_record

if TYPE_CHECKING:
    from pocketmq.broker.store.message_store import DefaultMessageStore

__all__ = ["StoreReader"]

MIN_FILTER_UNITS = 800


class StoreReader:
    def __init__(self, store: DefaultMessageStore) -> None:
        self._store = store

    def get_messages(self, topic: str, queue_id: int, offset: int, *,
                     max_count: int | None = None, max_bytes: int | None = None,
                     tag_codes: frozenset[int] | None = None) -> GetResult:
        cfg = self._store.config
        max_count = min(max_count or cfg.max_transfer_count, cfg.max_transfer_count * 50)
        max_bytes = max_bytes or cfg.max_transfer_bytes
        cq = self._store.consume_queues.get(topic, queue_id)
        if cq is None:
            return GetResult(status=GetStatus.NO_MATCHED_LOGIC_QUEUE, next_begin_offset=0,
                             min_offset=0, max_offset=0)
        min_offset = cq.min_offset
        max_offset = self._store.gate.visible_max(cq)   # units below the confirm offset

        def answer(status: GetStatus, next_offset: int) -> GetResult:
            return GetResult(status=status, next_begin_offset=next_offset,
                             min_offset=min_offset, max_offset=max_offset)

        if max_offset == 0:
            return answer(GetStatus.NO_MESSAGE_IN_QUEUE, 0)
        if offset < min_offset:
            return answer(GetStatus.OFFSET_TOO_SMALL, min_offset)
        if offset == max_offset:
            return answer(GetStatus.OFFSET_OVERFLOW_ONE, offset)
        if offset > max_offset:
            return answer(GetStatus.OFFSET_OVERFLOW_BADLY, max_offset)
        return self._read_range(cq, offset, min_offset, max_offset, max_count, max_bytes,
                                tag_codes)

    def _read_range(self, cq, offset: int, min_offset: int, max_offset: int,  # type: ignore[no-untyped-def]
                    max_count: int, max_bytes: int,
                    tag_codes: frozenset[int] | None) -> GetResult:
        commitlog = self._store.commitlog
        log_min = commitlog.min_offset
        scan_budget = max(MIN_FILTER_UNITS, max_count * 20) if tag_codes is not None else max_count
        records: list[bytes] = []
        queue_offsets: list[int] = []
        total_bytes = 0
        next_offset = offset
        removed = False
        while len(records) < max_count and next_offset < max_offset and scan_budget > 0:
            raw = cq.read_units(next_offset, min(scan_budget, max_offset - next_offset))
            if not raw:
                break
            for phys, size, tags in CQ_UNIT.iter_unpack(raw):
                if len(records) >= max_count or (records and total_bytes + size > max_bytes):
                    scan_budget = 0
                    break
                scan_budget -= 1
                current = next_offset
                next_offset += 1
                if phys < log_min:
                    removed = True
                    continue
                if tag_codes is not None and tags not in tag_codes:
                    continue
                data = commitlog.read(phys, size)
                if data is None:
                    removed = True
                    continue
                records.append(data)
                queue_offsets.append(current)
                total_bytes += size
        if records:
            status = GetStatus.FOUND
        elif next_offset == offset:
            # The unit file of this offset is gone: move to where the queue resumes.
            status, next_offset = GetStatus.OFFSET_FOUND_NULL, max(offset + 1, min_offset)
        elif removed:
            status = GetStatus.MESSAGE_WAS_REMOVING
        else:
            status = GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status=status, next_begin_offset=next_offset, min_offset=min_offset,
                         max_offset=max_offset, records=records, queue_offsets=queue_offsets)

    def store_time_of_unit(self, phys_offset: int, size: int) -> int | None:
        return self._store.commitlog.store_timestamp(phys_offset)

    def store_timestamp(self, topic: str, queue_id: int, offset: int) -> int | None:
        cq = self._store.consume_queues.get(topic, queue_id)
        unit = cq.get(offset) if cq is not None else None
        if unit is None:
            return None
        return self._store.commitlog.store_timestamp(unit[0])

    def query_by_key(self, topic: str, key: str, *, max_count: int | None = None,
                     begin_timestamp_ms: int = 0,
                     end_timestamp_ms: int | None = None) -> list[bytes]:
        """Records whose KEYS or UNIQ_KEY hold *key*; index hits are verified."""
        limit = max_count or self._store.config.default_query_max
        candidates = self._store.index.query(topic, key, max_count=limit * 2,
                                             begin_timestamp_ms=begin_timestamp_ms,
                                             end_timestamp_ms=end_timestamp_ms)
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
                continue   # a record of the topic before it was deleted (and created again)
            if msg.topic == topic and (key in msg.keys or msg.uniq_key == key):
                out.append(raw)
                if len(out) >= limit:
                    break
        return out
