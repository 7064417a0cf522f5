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

import errno
import fcntl
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
from pocketmq.broker.store.index_file_set import index_key_hashes
from pocketmq.broker.store.io import StoreIO
from pocketmq.common.errors import CorruptRecordError, StoreError
from pocketmq.common.hashing import java_string_hash
from pocketmq.common.message import check_record, decode_properties

__all__ = [
    "VerifyReport",
    "data_extent",
    "held_by_a_broker",
    "iter_stored_messages",
    "open_commitlog_read_only",
    "verify_store",
]

log = logging.getLogger(__name__)

_SEGMENT = re.compile(r"^\d{20}$")
_BLANK_UNIT = (0, 0x7FFFFFFF, 0)
MAX_PROBLEMS = 1000
PROGRESS_EVERY_RECORDS = 4096
_ZERO_CHUNK_BYTES = 4 << 20
_ZERO_CHUNK = bytes(_ZERO_CHUNK_BYTES)


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
    names = (
        sorted(n for n in os.listdir(dirs.commitlog) if _SEGMENT.match(n))
        if os.path.isdir(dirs.commitlog)
        else []
    )
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
                self.maps[int(name) // CQ_UNIT.size] = mmap.mmap(
                    f.fileno(), size, access=mmap.ACCESS_READ
                )
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

    def last_unit_end(self) -> int:
        """``phys_offset + size`` of the queue's last unit (0 when it has none): a binary
        search of its newest file for the first all-zero unit."""
        if not self.maps:
            return 0
        mm = self.maps[max(self.maps)]
        lo, hi = 0, len(mm) // CQ_UNIT.size  # units [0, lo) are set, [hi, ..) zero
        while lo < hi:
            mid = (lo + hi) // 2
            if CQ_UNIT.unpack_from(mm, mid * CQ_UNIT.size) == (0, 0, 0):
                hi = mid
            else:
                lo = mid + 1
        if lo == 0:
            return 0
        phys_offset, size, _tags = CQ_UNIT.unpack_from(mm, (lo - 1) * CQ_UNIT.size)
        return phys_offset + size if phys_offset >= 0 and size > 0 else 0

    def units(self) -> Iterator[tuple[int, tuple[int, int, int]]]:
        """Every unit up to the first all-zero one of each file (read a slice at a time:
        a file is 6 MB of mostly zeros)."""
        step = CQ_UNIT.size * 4096
        for first, mm in sorted(self.maps.items()):
            usable = len(mm) - len(mm) % CQ_UNIT.size
            i = 0
            for at in range(0, usable, step):
                for unit in CQ_UNIT.iter_unpack(mm[at : min(at + step, usable)]):
                    if unit[0] == 0 and unit[1] == 0 and unit[2] == 0:
                        break
                    yield first + i, unit
                    i += 1
                else:
                    continue
                break

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


def held_by_a_broker(data_dir: str) -> bool:
    """Whether a running broker holds *data_dir*'s ``lock`` (see :mod:`.data_dir`)."""
    path = DataDirectory(data_dir).lock
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops a lock taken here
    return False


def verify_store(
    data_dir: str,
    *,
    index_slots: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> VerifyReport:
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


def _verify_log(
    commitlog: CommitLog,
    queues: dict[tuple[str, int], _QueueFiles],
    matched: dict[tuple[str, int], int],
    report: VerifyReport,
    progress: Callable[[int, int], None] | None,
    deleted: DeletedQueues,
) -> None:
    end = commitlog.min_offset
    extent = data_extent(commitlog, queues) if progress is not None else 0
    try:
        for rec in commitlog.scan(commitlog.min_offset, check_crc=True):
            end = rec.phys_offset + rec.size
            report.records += 1
            report.bytes += rec.size
            if progress is not None and report.records % PROGRESS_EVERY_RECORDS == 0:
                done = end - commitlog.min_offset
                progress(done, max(extent, done))
            if not is_dispatched_to_queue(rec.sysflag):
                continue
            if deleted and deleted.is_dead(rec.topic, rec.queue_id, rec.phys_offset):
                continue  # of a topic (or queue) deleted since: no unit, by design
            key = (rec.topic, rec.queue_id)
            q = queues.get(key)
            unit = q.unit(rec.queue_offset) if q is not None else None
            props = decode_properties(rec.properties.decode("utf-8", "replace"))
            want = (rec.phys_offset, rec.size, consume_queue_tags_code(rec.topic, props))
            if unit is None:
                report.problem(
                    f"record at {rec.phys_offset} ({rec.topic}:{rec.queue_id} "
                    f"offset {rec.queue_offset}) has no consume-queue unit"
                )
            elif unit != want:
                report.problem(
                    f"unit {rec.topic}:{rec.queue_id}@{rec.queue_offset} is {unit}, "
                    f"the record at {rec.phys_offset} needs {want}"
                )
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
    nonzero = _nonzero_bytes(mf.path, mf.buffer, pos, mf.file_size)
    if nonzero:
        report.problem(f"{nonzero} bytes of data follow the end of the log at {end} in {mf.path}")


def _data_regions(path: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """The ``[from, to)`` ranges of ``[start, end)`` that may hold data: the file's holes
    (sparse, or reserved by ``fallocate`` and never written) are skipped unread."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        yield start, end
        return
    try:
        pos = start
        while pos < end:
            try:
                data = os.lseek(fd, pos, os.SEEK_DATA)
                hole = os.lseek(fd, data, os.SEEK_HOLE)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no data from pos to the end of the file
                    return
                yield pos, end  # no SEEK_DATA here: read it all
                return
            if data >= end:
                return
            yield data, min(hole, end)
            pos = hole
    finally:
        os.close(fd)


def _nonzero_bytes(path: str, buffer: mmap.mmap | memoryview, start: int, end: int) -> int:
    """How many bytes of ``buffer[start:end]`` lie from the first non-zero byte to the last;
    0 when all are zero. Reads only the file's data regions, a chunk at a time (a whole
    1 GiB segment copied and stripped took seconds for a store of a few KiB)."""
    first = last = -1
    for lo, hi in _data_regions(path, start, end):
        for at in range(lo, hi, _ZERO_CHUNK_BYTES):
            chunk = buffer[at : min(at + _ZERO_CHUNK_BYTES, hi)]
            if chunk == _ZERO_CHUNK[: len(chunk)]:
                continue
            stripped = bytes(chunk).lstrip(b"\0")
            if first < 0:
                first = at + len(chunk) - len(stripped)
            last = at + len(bytes(chunk).rstrip(b"\0"))
    return 0 if first < 0 else last - first


def data_extent(commitlog: CommitLog, queues: dict[tuple[str, int], _QueueFiles]) -> int:
    """Bytes of the log that hold data, as far as the consume queues know: from its head
    to the end of the furthest record a unit points at (0 = unknown). Segments are
    pre-allocated whole, so their size says nothing; for progress, not for truth."""
    end = max((q.last_unit_end() for q in queues.values()), default=0)
    return max(end - commitlog.min_offset, 0)


def _verify_units(
    commitlog: CommitLog,
    queues: dict[tuple[str, int], _QueueFiles],
    matched: dict[tuple[str, int], int],
    report: VerifyReport,
) -> None:
    log_min, log_end = commitlog.min_offset, report.log_end_offset
    for (topic, queue_id), q in queues.items():
        live = 0
        for queue_offset, unit in q.units():
            report.units += 1
            if unit == _BLANK_UNIT or unit[0] < log_min:
                continue
            live += 1
            if unit[0] + unit[1] > log_end:
                report.problem(
                    f"unit {topic}:{queue_id}@{queue_offset} points at "
                    f"{unit[0]}, past the end of the log ({log_end})"
                )
        if live != matched.get((topic, queue_id), 0):
            report.problem(
                f"queue {topic}:{queue_id} has {live} live units but "
                f"{matched.get((topic, queue_id), 0)} match records of the log"
            )


def _slots_by_size(size: int) -> int | None:
    """The slot count of an index file of *size* bytes under the default geometry
    (default slots and entries, or default entries and any slots), else None."""
    defaults = StoreConfig(data_dir=".")
    if size == IndexFile.size_for(defaults.index_slots, defaults.index_entries):
        return defaults.index_slots
    slot_bytes = size - IndexFile.size_for(0, defaults.index_entries)
    return slot_bytes // 4 if slot_bytes > 0 and slot_bytes % 4 == 0 else None


def _verify_index(
    index_dir: str, commitlog: CommitLog, report: VerifyReport, slots: int | None
) -> None:
    if not os.path.isdir(index_dir):
        return
    for name in sorted(os.listdir(index_dir)):
        path = os.path.join(index_dir, name)
        file_slots = slots or _slots_by_size(os.path.getsize(path))
        if file_slots is None:
            report.problem(
                f"index {name}: cannot tell its slot count from its size "
                f"({os.path.getsize(path)} bytes) and the store recorded none "
                "(storeGeometry.json); pass the broker's index_slots "
                "(--index-slots)"
            )
            continue
        try:
            entries = list(iter_index_entries(path, slots=file_slots))
        except StoreError as exc:
            report.problem(f"index {name}: {exc}")
            continue
        last_phys, last_hashes = -1, None
        for key_hash, phys_offset in entries:
            report.index_entries += 1
            if phys_offset < commitlog.min_offset:
                continue
            if phys_offset >= report.log_end_offset:
                report.problem(
                    f"index {name}: entry points at {phys_offset}, past the end "
                    f"of the log ({report.log_end_offset})"
                )
                continue
            if phys_offset != last_phys:  # a record's keys lie in a row: hash them once
                last_phys, last_hashes = phys_offset, _stored_key_hashes(commitlog, phys_offset)
            if last_hashes is None:
                report.problem(f"index {name}: entry points at {phys_offset}, not a record")
            elif key_hash not in last_hashes and not (
                key_hash < 0 and key_hash in _signed_key_hashes(commitlog, phys_offset)
            ):
                report.problem(
                    f"index {name}: entry hash {key_hash} matches no key of the "
                    f"record at {phys_offset}"
                )


def _record_keys(commitlog: CommitLog, phys_offset: int) -> tuple[str, list[str]] | None:
    """The topic and index keys (``KEYS`` and ``UNIQ_KEY``) of the record at *phys_offset*,
    or None when no record lies there."""
    raw = commitlog.read_record(phys_offset) or b""
    try:
        lay = check_record(raw, 0, len(raw), check_crc=False)
    except CorruptRecordError:
        return None
    topic = raw[lay.topic_pos : lay.topic_pos + lay.topic_len].decode("utf-8", "replace")
    props = decode_properties(
        raw[lay.props_pos : lay.props_pos + lay.props_len].decode("utf-8", "replace")
    )
    keys = [k for k in props.get("KEYS", "").split(" ") if k]
    keys.append(props.get("UNIQ_KEY", ""))
    return topic, [k for k in keys if k]


def _stored_key_hashes(commitlog: CommitLog, phys_offset: int) -> set[int] | None:
    """The keyHashes a writer stores for the record at *phys_offset* (the store's own
    hashing: compiled when the accelerator is built), or None when no record lies there."""
    found = _record_keys(commitlog, phys_offset)
    if found is None:
        return None
    topic, keys = found
    hashes, _phys = index_key_hashes([topic], [keys], [phys_offset], -1)
    return set(hashes)


def _signed_key_hashes(commitlog: CommitLog, phys_offset: int) -> set[int]:
    """Java's signed hashCodes of the record's ``topic#key``s: an entry may hold one
    (negative) where the writer kept the sign."""
    found = _record_keys(commitlog, phys_offset)
    if found is None:
        return set()
    topic, keys = found
    return {java_string_hash(f"{topic}#{k}") for k in keys}
