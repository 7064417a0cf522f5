"""Recovery: bring the commit log, consume queues and index back to one consistent state.

Runs at every start, clean or not::

    1. load segments; recover each consume queue (scan to its first empty unit);
       load the index (after a crash, drop files newer than the checkpoint)
    2. VERIFY the commit log from the checkpoint's flushed offset (bytes before it
       were durable when the checkpoint was written): magic, lengths, CRC and
       PHYSICALOFFSET of every record; stop at the first bad one -> end E
    3. TRUNCATE the log at E (the tail is zeroed, later segments deleted); trim
       consume-queue units and index files that point at or past E
    4. RE-DISPATCH records in [D, E), D = min(checkpoint's dispatched offset,
       index progress): consume-queue units and index entries that are missing
       (dispatch is idempotent: what exists is skipped)
    5. a queue whose units cannot line up with the log (a damaged or deleted
       consume-queue file) is rebuilt from the start of the log
    6. sync everything; the queue-offset table comes from the consume queues
    7. the idempotent producers' state: the newest snapshot the log still
       reaches, then the records after it (:mod:`.producer_snapshot`)

Without a checkpoint (first start, or a damaged one) the whole log is verified.
The :class:`RecoveryReport` says what was cut and rebuilt, and is logged. Steps
2 and 4 tell an optional :data:`~pocketmq.common.progress.ProgressCallback` how
many bytes of the log they have covered (the broker logs it when recovery is long).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pocketmq.broker.store.batch import consume_queue_tags_code
from pocketmq.broker.store.commitlog import CommitLog, ScannedRecord, is_dispatched_to_queue
from pocketmq.broker.store.producer_snapshot import rebuild as rebuild_producers
from pocketmq.broker.store.results import RecoveryReport
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.message import decode_properties
from pocketmq.common.progress import ProgressCallback

if TYPE_CHECKING:
    from pocketmq.broker.store.checkpoint import Checkpoint
    from pocketmq.broker.store.message_store import DefaultMessageStore

__all__ = ["parse_props", "record_boundary_at_or_before", "recover", "redispatch_range"]

log = logging.getLogger(__name__)

_CHUNK = 1 << 20
_PROGRESS_EVERY = 1 << 14  # records between two progress reports
PHASE_VERIFY = "verifying the commit log"
PHASE_REDISPATCH = "re-dispatching to consume queues and index"


def recover(
    store: DefaultMessageStore, *, progress: ProgressCallback | None = None
) -> RecoveryReport:
    started = time.monotonic()
    clean = store.dirs.was_clean_shutdown()
    cp = store.checkpoint.read()
    commitlog = store.commitlog
    _load_files(store, clean_shutdown=clean, cp=cp)
    log_min = commitlog.min_offset
    store.consume_queues.delete_expired(log_min)

    # 2-3. verify from what the checkpoint vouches for, truncate at the first bad record
    trusted = min(max(cp.physic_flushed_offset, log_min), _log_extent(commitlog)) if cp else log_min
    verify_from = record_boundary_at_or_before(commitlog, trusted)
    end, bad_offset, reason, truncated, trimmed = _verify_and_truncate(store, verify_from, progress)

    # 4-5. re-dispatch what the consume queues and index miss; rebuild damaged queues
    index_enabled = store.config.message_index_enable
    start = _redispatch_start(store, cp, log_min, end)
    redispatched = _redispatch_and_rebuild(store, start, end, index_enabled, progress)

    _sync_and_rebuild_producers(store, end)
    report = RecoveryReport(
        clean_shutdown=clean,
        scanned_from=verify_from,
        max_phys_offset=end,
        truncated_bytes=truncated,
        first_bad_offset=bad_offset,
        reason=reason,
        redispatched=redispatched,
        consume_queue_units_trimmed=trimmed,
        index_rebuilt_from=start if index_enabled and start < end else None,
        seconds=time.monotonic() - started,
    )
    _log_report(store, report)
    return report


def _load_files(store: DefaultMessageStore, *, clean_shutdown: bool, cp: Checkpoint | None) -> None:
    """Step 1: load the segments, recover each consume queue, load the index."""
    store.deleted.load()
    store.commitlog.queue.load()
    store.consume_queues.load()
    store.consume_queues.recover()
    _drop_deleted_queues(store)
    store.index.load(
        clean_shutdown=clean_shutdown and cp is not None,
        checkpoint_timestamp_ms=cp.index_msg_timestamp_ms if cp else 0,
    )


def _redispatch_start(
    store: DefaultMessageStore, cp: Checkpoint | None, log_min: int, end: int
) -> int:
    """D of step 4: the checkpoint's dispatched offset or the index's progress, whichever
    is earlier, moved onto a record boundary within ``[log_min, end]``."""
    dispatch_from = cp.logics_dispatched_offset if cp else log_min
    if store.config.message_index_enable:
        dispatch_from = min(dispatch_from, _index_progress(store, log_min))
    return record_boundary_at_or_before(store.commitlog, min(max(dispatch_from, log_min), end))


def _sync_and_rebuild_producers(store: DefaultMessageStore, end: int) -> None:
    """Steps 6-7: sync; the queue-offset table from the consume queues; producers' state."""
    commitlog = store.commitlog
    commitlog.queue.flush()
    store.consume_queues.flush()
    store.index.flush()
    commitlog.queue_offsets = {
        (cq.topic, cq.queue_id): cq.max_offset for cq in store.consume_queues.all_queues()
    }
    store.dispatched_offset = end
    store.flush_round()
    # the idempotent producers' state: the newest snapshot, then the log after it
    rebuild_producers(store, end)


def _log_report(store: DefaultMessageStore, report: RecoveryReport) -> None:
    log.info(
        "recovered %s: %s shutdown, verified from %d, log ends at %d, truncated %d "
        "bytes, re-dispatched %d records, trimmed %d queue units, %.3f s",
        store.dirs.root,
        "clean" if report.clean_shutdown else "unclean",
        report.scanned_from,
        report.max_phys_offset,
        report.truncated_bytes,
        report.redispatched,
        report.consume_queue_units_trimmed,
        report.seconds,
    )


def _verify_and_truncate(
    store: DefaultMessageStore,
    verify_from: int,
    progress: ProgressCallback | None = None,
) -> tuple[int, int | None, str, int, int]:
    """Return (end of the valid log, bad offset, reason, bytes cut, queue units trimmed)."""
    commitlog = store.commitlog
    end, bad_offset, reason, _ = _scan(
        commitlog, verify_from, check_crc=store.config.check_crc_on_recover, progress=progress
    )
    truncated = _garbage_extent(commitlog, end)
    commitlog.queue.truncate(end)
    commitlog.queue.set_write_position(end)
    if bad_offset is not None:
        log.warning(
            "commit log damaged at offset %d (%s); truncated %d bytes from there",
            bad_offset,
            reason,
            truncated,
        )
    trimmed = store.consume_queues.truncate_phys(end)
    store.index.truncate_phys(end)
    return end, bad_offset, reason, truncated, trimmed


def _redispatch_and_rebuild(
    store: DefaultMessageStore,
    start: int,
    end: int,
    index_enabled: bool,
    progress: ProgressCallback | None = None,
) -> int:
    damaged = set(_damaged_queues(store))
    count = _redispatch(store, start, end, damaged, index_enabled, progress=progress)
    if damaged:
        log.warning(
            "rebuilding %d consume queue(s) from the start of the commit log: %s",
            len(damaged),
            ", ".join(f"{t}:{q}" for t, q in sorted(damaged)),
        )
        for topic, queue_id in damaged:
            store.consume_queues.delete_queue(topic, queue_id)
        count += _redispatch(store, store.commitlog.min_offset, end, set(), False, only=damaged)
    return count


def redispatch_range(store: DefaultMessageStore, start: int, end: int) -> int:
    """Dispatch what is missing of [start, end) again (after a failed dispatch)."""
    start = record_boundary_at_or_before(store.commitlog, start)
    return _redispatch(store, start, end, set(), store.config.message_index_enable)


def _drop_deleted_queues(store: DefaultMessageStore) -> None:
    """Delete queues still holding units of records deleted with their topic (a crash
    between recording a deletion and removing the queue's files)."""
    deleted = store.deleted
    if not deleted:
        return
    for cq in store.consume_queues.all_queues():
        dead_below = deleted.dead_below(cq.topic, cq.queue_id)
        unit = cq.get(cq.min_offset) if dead_below else None
        if unit is not None and unit[0] < dead_below:
            log.warning(
                "consume queue %s:%d holds records of before its deletion (commit-log "
                "offset %d); deleting it",
                cq.topic,
                cq.queue_id,
                dead_below,
            )
            store.consume_queues.delete_queue(cq.topic, cq.queue_id)


def _index_progress(store: DefaultMessageStore, log_min: int) -> int:
    """Commit-log offset up to which every record is indexed (end of the last indexed one)."""
    last = store.index.last_indexed_phys
    if last < log_min:
        return log_min
    raw = store.commitlog.read(last, 4)
    size = int.from_bytes(raw, "big", signed=True) if raw else 0
    return last + size if size > 0 else last


def _log_extent(commitlog: CommitLog) -> int:
    files = commitlog.queue.files
    return files[-1].file_from_offset + files[-1].file_size if files else 0


def record_boundary_at_or_before(commitlog: CommitLog, offset: int) -> int:
    """*offset* if the record chain of its segment lands on it, else the segment start."""
    mf = commitlog.queue.find(offset)
    if mf is None:
        files = commitlog.queue.files
        return (
            files[-1].file_from_offset
            if files and offset >= _log_extent(commitlog)
            else commitlog.min_offset
        )
    if commitlog.skip_to(mf.file_from_offset, offset) == offset:
        return offset
    return mf.file_from_offset


def _reported(
    records: Iterator[ScannedRecord],
    progress: ProgressCallback | None,
    phase: str,
    start: int,
    end: int,
) -> Iterator[ScannedRecord]:
    """*records*, telling *progress* every few thousand how far past *start* they are
    (the total is *end* - *start*; at most, when *end* is the extent of the files)."""
    if progress is None:
        return records

    def reporting() -> Iterator[ScannedRecord]:
        total, done = max(end - start, 0), 0
        progress(phase, 0, total)
        for n, rec in enumerate(records, 1):
            done = rec.phys_offset + rec.size - start
            if not n % _PROGRESS_EVERY:
                progress(phase, done, total)
            yield rec
        progress(phase, done, done)  # the end: what there was, which *end* may overstate

    return reporting()


def _scan(
    commitlog: CommitLog, start: int, *, check_crc: bool, progress: ProgressCallback | None = None
) -> tuple[int, int | None, str, int]:
    """Scan from *start*; return (end of valid log, bad offset, reason, records)."""
    end, count = start, 0
    try:
        for rec in _reported(
            commitlog.scan(start, check_crc=check_crc),
            progress,
            PHASE_VERIFY,
            start,
            _log_extent(commitlog),
        ):
            end = rec.phys_offset + rec.size
            count += 1
    except CorruptRecordError as exc:
        return exc.offset, exc.offset, exc.reason, count
    return end, None, "", count


def _garbage_extent(commitlog: CommitLog, offset: int) -> int:
    """Non-zero bytes from *offset* to the end of the written region (what truncation cuts)."""
    total = 0
    for mf in commitlog.queue.files:
        seg_end = mf.file_from_offset + mf.file_size
        if seg_end <= offset:
            continue
        pos = max(offset - mf.file_from_offset, 0)
        last_nonzero = pos
        while pos < mf.file_size:
            chunk = mf.buffer[pos : pos + _CHUNK]
            stripped = chunk.rstrip(b"\0")
            if stripped:
                last_nonzero = pos + len(stripped)
            elif chunk.count(0) == len(chunk):
                break
            pos += len(chunk)
        total += last_nonzero - max(offset - mf.file_from_offset, 0)
    return total


def parse_props(raw: bytes) -> tuple[dict[str, str], list[str]]:
    """The property map and the index keys (KEYS split, then UNIQ_KEY)."""
    props = decode_properties(raw.decode("utf-8", "replace"))
    keys = [k for k in props.get("KEYS", "").split(" ") if k]
    if props.get("UNIQ_KEY"):
        keys.append(props["UNIQ_KEY"])
    return props, keys


def _damaged_queues(store: DefaultMessageStore) -> list[tuple[str, int]]:
    return [(cq.topic, cq.queue_id) for cq in store.consume_queues.all_queues() if cq.damaged]


def _redispatch(
    store: DefaultMessageStore,
    start: int,
    end: int,
    damaged: set[tuple[str, int]],
    index_enabled: bool,
    *,
    only: set[tuple[str, int]] | None = None,
    progress: ProgressCallback | None = None,
) -> int:
    """Dispatch records in [start, end); queues that do not line up go into *damaged*.

    A queue does not line up when a record's queue offset lies past the queue's
    end, since the units between were lost. An empty queue is exempt only when the
    scan starts at the head of the log (no earlier record of it can exist).
    """
    count = 0
    from_head = start <= store.commitlog.min_offset
    deleted = store.deleted
    for rec in _reported(
        store.commitlog.scan(start, check_crc=False, stop=end),
        progress,
        PHASE_REDISPATCH,
        start,
        end,
    ):
        key = (rec.topic, rec.queue_id)
        if only is not None and key not in only:
            continue
        if deleted and deleted.is_dead(rec.topic, rec.queue_id, rec.phys_offset):
            continue  # its topic (or queue) was deleted after it was written
        count += 1
        if not is_dispatched_to_queue(rec.sysflag):
            continue  # prepared and rolled-back transaction records: no unit, no index entry
        props, keys = parse_props(rec.properties)
        if key not in damaged:
            cq = store.consume_queues.find_or_create(rec.topic, rec.queue_id)
            expected = cq.max_offset
            empty = expected == 0 and cq.min_offset == 0
            if rec.queue_offset > expected and not (empty and from_head):
                damaged.add(key)
            else:
                cq.append(
                    rec.queue_offset,
                    rec.phys_offset,
                    rec.size,
                    consume_queue_tags_code(rec.topic, props),
                )
        if index_enabled and keys:
            store.index.put(rec.topic, keys, rec.phys_offset, rec.store_timestamp_ms)
    return count
