"""Offline checks of a data directory: ``pocketmq store verify`` and ``store dump``.

Nothing here writes: segments are mapped read-only and no recovery runs, so
the verdict is about the files exactly as they lie. The checks:

- every commit-log record from the head: magic, lengths, body CRC, and
  PHYSICALOFFSET equal to where it lies; BLANK records fill exactly their
  segment's tail; nothing but zeros follows the end of the log;
- every consume-queue unit points at a record of its topic and queue whose
  QUEUEOFFSET is the unit's offset, with the same size and tag code; every
  dispatched record of the log has its unit;
- every index entry points at a record of the log holding a key with the
  entry's hash.

Records of deleted topics and queues (``deletedQueues.json``, see
:mod:`.deleted_queues`) are in the log but have no unit, and need none. The
slot count of index files is never guessed from their contents: it comes
from the caller (the broker's ``index_slots``), else from the geometry the
store recorded (``storeGeometry.json``), else from the file's size with the
default geometry.
"""

from __future__ import annotations

import logging
import mmap
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from pocketmq.broker.store.batch import consume_queue_tags_code
from pocketmq.broker.store.commitlog import CommitLog, ScannedRecord, is_dispatched_to_queue
from pocketmq.broker.store.config import StoreConfig
from pocketmq.broker.store.consume_queue import CQ_UNIT
from pocketmq.broker.store.data_dir import DataDirectory
from pocketmq.broker.store.deleted_queues import DeletedQueues
from pocketmq.broker.store.index_file import IndexFile, iter_index_entries
from pocketmq.broker.store.io import StoreIO
from pocketmq.common.errors import CorruptRecordError, StoreError
from pocketmq.common.hashing import java_string_hash
from pocketmq.common.message import decode_properties, decode_record

__all__ = ["VerifyReport", "iter_stored_messages", "open_commitlog_read_only", "verify_store"]

log = logging.getLogger(__name__)

_SEGMENT = re.compile(r"^\d{20}$")
_BLANK_UNIT = (0, 0x7FFFFFFF, 0)
MAX_PROBLEMS = 1000


@dataclass(slots=True)
class VerifyReport:
    log_min_offset: int = 0
    log_end_offset: int = 0
    records: int = 0
    bytes: int = 0
    queues: int = 0
    units: int = 0
    index_entries: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def problem(self, text: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)


def open_commitlog_read_only(data_dir: str) -> CommitLog:
    """The commit log of *data_dir*, mapped read-only (segment size taken from the files)."""
    dirs = DataDirectory(data_dir)
    names = sorted(n for n in os.listdir(dirs.commitlog) if _SEGMENT.match(n)) \
        if os.path.isdir(dirs.commitlog) else []
    sizes = sorted({os.path.getsize(os.path.join(dirs.commitlog, n)) for n in names})
    file_size = sizes[-1] if sizes else 1 << 30
    commitlog = CommitLog(dirs.commitlog, file_size, io=StoreIO(), store_host=b"\0" * 8)
    commitlog.queue.load(read_only=True)
    return commitlog


def iter_stored_messages(data_dir: str) -> Iterator[ScannedRecord]:
    """Every valid record of the log, in order (stops quietly at damage)."""
    commitlog = open_commitlog_read_only(data_dir)
    try:
        yield from commitlog.scan(commitlog.min_offset, check_crc=False)
    except CorruptRecordError as exc:
        log.warning("stopped at damaged record: %s", exc)
    finally:
        commitlog.queue.close()


def iter_stored_records(data_dir: str) -> Iterator[tuple[ScannedRecord, bytes]]:
    """Every valid record of the log with its stored bytes (``store dump --body``)."""
    commitlog = open_commitlog_read_only(data_dir)
    try:
        for record in commitlog.scan(commitlog.min_offset, check_crc=False):
            yield record, commitlog.read(record.phys_offset, record.size) or b""
    except CorruptRecordError as exc:
        log.warning("stopped at damaged record: %s", exc)
    finally:
        commitlog.queue.close()


class _QueueFiles:
    """The units of one consume queue, read-only, addressed by queue offset."""

    def __init__(self, directory: str) -> None:
        self.maps: dict[int, mmap.mmap] = {}
        self.file_units = 0
        for name in sorted(os.listdir(directory)):
            if not _SEGMENT.match(name):
                continue
            path = os.path.join(directory, name)
            size = os.path.getsize(path)
            if not size:
                continue
            with open(path, "rb") as f:
                self.maps[int(name) // CQ_UNIT.size] = mmap.mmap(f.fileno(), size,
                                                                   access=mmap.ACCESS_READ)
            self.file_units = max(self.file_units, size // CQ_UNIT.size)

    def unit(self, queue_offset: int) -> tuple[int, int, int] | None:
        if not self.file_units:
            return None
        first = queue_offset - queue_offset % self.file_units
        mm = self.maps.get(first)
        pos = (queue_offset - first) * CQ_UNIT.size
        if mm is None or pos + CQ_UNIT.size > len(mm):
            return None
        unit = CQ_UNIT.unpack_from(mm, pos)
        return None if unit[0] < 0 or unit[1] <= 0 else unit

    def units(self) -> Iterator[tuple[int, tuple[int, int, int]]]:
        for first, mm in sorted(self.maps.items()):
            for i, unit in enumerate(CQ_UNIT.iter_unpack(mm[:len(mm) - len(mm) % 20])):
                if unit[0] == 0 and unit[1] == 0 and unit[2] == 0:
                    break
                yield first + i, unit

    def close(self) -> None:
        for mm in self.maps.values():
            mm.close()


def _load_queues(root: str) -> dict[tuple[str, int], _QueueFiles]:
    queues: dict[tuple[str, int], _QueueFiles] = {}
    if not os.path.isdir(root):
        return queues
    for topic in sorted(os.listdir(root)):
        for qid in sorted(os.listdir(os.path.join(root, topic))):
            if qid.isdigit():
                queues[(topic, int(qid))] = _QueueFiles(os.path.join(root, topic, qid))
    return queues


def verify_store(data_dir: str, *, index_slots: int | None = None,
                 progress: Callable[[int, int], None] | None = None) -> VerifyReport:
    """Check *data_dir* as described in the module docstring; never writes.

    *index_slots* is the broker's ``index_slots``, when the caller knows it.
    """
    report = VerifyReport()
    dirs = DataDirectory(data_dir)
    try:
        deleted = DeletedQueues(dirs.deleted_queues).load()
    except StoreError as exc:
        report.problem(str(exc))
        deleted = DeletedQueues(dirs.deleted_queues)
    commitlog = open_commitlog_read_only(data_dir)
    queues = _load_queues(dirs.consumequeue)
    matched: dict[tuple[str, int], int] = {}
    slots = index_slots or dirs.read_geometry().get("index_slots")
    try:
        report.log_min_offset = commitlog.min_offset
        _verify_log(commitlog, queues, matched, report, progress, deleted)
        _verify_units(commitlog, queues, matched, report)
        _verify_index(dirs.index, commitlog, report, slots)
    finally:
        for q in queues.values():
            q.close()
        commitlog.queue.close()
    report.queues = len(queues)
    return report


def _verify_log(commitlog: CommitLog, queues: dict[tuple[str, int], _QueueFiles],
                matched: dict[tuple[str, int], int], report: VerifyReport,
                progress: Callable[[int, int], None] | None, deleted: DeletedQueues) -> None:
    end = commitlog.min_offset
    extent = commitlog.queue.max_offset
    try:
        for rec in commitlog.scan(commitlog.min_offset, check_crc=True):
            end = rec.phys_offset + rec.size
            report.records += 1
            report.bytes += rec.size
            if progress is not None and report.records % 100_000 == 0:
                progress(end - commitlog.min_offset, extent - commitlog.min_offset)
            if not is_dispatched_to_queue(rec.sysflag):
                continue
            if deleted and deleted.is_dead(rec.topic, rec.queue_id, rec.phys_offset):
                continue   # of a topic (or queue) deleted since: no unit, by design
            key = (rec.topic, rec.queue_id)
            q = queues.get(key)
            unit = q.unit(rec.queue_offset) if q is not None else None
            props = decode_properties(rec.properties.decode("utf-8", "replace"))
            want = (rec.phys_offset, rec.size, consume_queue_tags_code(rec.topic, props))
            if unit is None:
                report.problem(f"record at {rec.phys_offset} ({rec.topic}:{rec.queue_id} "
                               f"offset {rec.queue_offset}) has no consume-queue unit")
            elif unit != want:
                report.problem(f"unit {rec.topic}:{rec.queue_id}@{rec.queue_offset} is {unit}, "
                               f"the record at {rec.phys_offset} needs {want}")
            else:
                matched[key] = matched.get(key, 0) + 1
    except CorruptRecordError as exc:
        report.problem(f"commit log: {exc}")
        end = exc.offset
    report.log_end_offset = end
    _check_zero_tail(commitlog, end, report)


def _check_zero_tail(commitlog: CommitLog, end: int, report: VerifyReport) -> None:
    mf = commitlog.queue.find(end)
    if mf is None:
        return
    pos = end - mf.file_from_offset
    tail = mf.buffer[pos:mf.file_size]
    stripped = tail.rstrip(b"\0")
    if stripped:
        report.problem(f"{len(stripped)} bytes of data follow the end of the log at {end} "
                       f"in {mf.path}")


def _verify_units(commitlog: CommitLog, queues: dict[tuple[str, int], _QueueFiles],
                  matched: dict[tuple[str, int], int], report: VerifyReport) -> None:
    log_min, log_end = commitlog.min_offset, report.log_end_offset
    for (topic, queue_id), q in queues.items():
        live = 0
        for queue_offset, unit in q.units():
            report.units += 1
            if unit == _BLANK_UNIT or unit[0] < log_min:
                continue
            live += 1
            if unit[0] + unit[1] > log_end:
                report.problem(f"unit {topic}:{queue_id}@{queue_offset} points at "
                               f"{unit[0]}, past the end of the log ({log_end})")
        if live != matched.get((topic, queue_id), 0):
            report.problem(f"queue {topic}:{queue_id} has {live} live units but "
                           f"{matched.get((topic, queue_id), 0)} match records of the log")


def _slots_by_size(size: int) -> int | None:
    """The slot count of an index file of *size* bytes under the default geometry
    (default slots and entries, or default entries and any slots), else None."""
    defaults = StoreConfig(data_dir=".")
    if size == IndexFile.size_for(defaults.index_slots, defaults.index_entries):
        return defaults.index_slots
    slot_bytes = size - IndexFile.size_for(0, defaults.index_entries)
    return slot_bytes // 4 if slot_bytes > 0 and slot_bytes % 4 == 0 else None


def _verify_index(index_dir: str, commitlog: CommitLog, report: VerifyReport,
                  slots: int | None) -> None:
    if not os.path.isdir(index_dir):
        return
    for name in sorted(os.listdir(index_dir)):
        path = os.path.join(index_dir, name)
        file_slots = slots or _slots_by_size(os.path.getsize(path))
        if file_slots is None:
            report.problem(f"index {name}: cannot tell its slot count from its size "
                           f"({os.path.getsize(path)} bytes) and the store recorded none "
                           "(storeGeometry.json); pass the broker's index_slots "
                           "(--index-slots)")
            continue
        try:
            entries = list(iter_index_entries(path, slots=file_slots))
        except StoreError as exc:
            report.problem(f"index {name}: {exc}")
            continue
        for key_hash, phys_offset in entries:
            report.index_entries += 1
            if phys_offset < commitlog.min_offset:
                continue
            if phys_offset >= report.log_end_offset:
                report.problem(f"index {name}: entry points at {phys_offset}, past the end "
                               f"of the log ({report.log_end_offset})")
                continue
            raw = commitlog.read_record(phys_offset)
            try:
                msg = decode_record(raw or b"", check_crc=False)
            except CorruptRecordError:
                report.problem(f"index {name}: entry points at {phys_offset}, not a record")
                continue
            keys = [*msg.keys, msg.uniq_key]
            hashes = {abs(java_string_hash(f"{msg.topic}#{k}")) for k in keys if k}
            hashes |= {java_string_hash(f"{msg.topic}#{k}") for k in keys if k}
            if key_hash not in hashes:
                report.problem(f"index {name}: entry hash {key_hash} matches no key of the "
                               f"record at {phys_offset}")
