"""TimerMessageStore: the timer log, the timing wheel and their checkpoint, kept consistent.

RocketMQ 5's ``TimerMessageStore``, files part. The files, beside the commit log::

    DATA/timerlog/000…   units, one per parked message (timer_log.py)
    DATA/timerwheel      one entry per second: where its chain of units starts and ends
                         (timer_wheel.py)
    DATA/timercheck      cursor, flushed timer-log position, enqueued queue offset
                         (timer_checkpoint.py)

The commit log is the source of truth: a timer message is stored (and, with
synchronous flush, acknowledged durable) as a record of ``rmq_sys_wheel_timer``
before any of these files hears of it. The timer service turns that topic's
queue into units, in queue order, so every file here can be brought back
from the commit log and from each other.

Seconds and the cursor. A unit is linked into the wheel second
``clamp(deliver_ms // 1000, cursor, cursor + roll window)``: its own second,
the cursor's when that is already past (deliver now), or the roll horizon,
where it waits to be re-parked. The *cursor* is the oldest second not yet
fully delivered; it only moves forward, and every live unit lies in
``[cursor, cursor + roll window]``, so a wheel of more slots than the window
never holds two live seconds at one index, however long the broker was down.
A delivered second is *retired* (forgotten in memory) at once and its wheel
entry cleared once its re-puts are durable.

Recovery (:meth:`load`), from the checkpoint:

1. scan the timer log from ``timerlog_flushed_pos``; cut it after the last
   valid unit (a torn tail, zeroed so it can never be read again);
2. drop trailing units whose parked record is gone (the commit log lost its
   unflushed tail): their queue offset is at or past the queue's end;
3. link every unit of that tail into its wheel second if the wheel does not
   already reach it (a kill -9 between the unit and its entry), walking the
   unit's chain for the entry's first position and count;
4. read the wheel's live entries (seconds at or after the cursor). An entry
   that fails its CRC, or points outside the log, makes the wheel be rebuilt
   from every unit in the log (each second: first = lowest position, last =
   highest, count); so does a missing, resized or checkpoint-less wheel;
5. the next queue offset to enqueue is one past the last unit's, or the
   checkpoint's, whichever is later, kept inside the queue's range.

Calls are made on the owner's thread except :meth:`flush`, which a worker
thread may run; a lock keeps it from racing :meth:`close`.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass

from pocketmq.broker.store.io import StoreIO
from pocketmq.broker.store.timer_checkpoint import TimerCheckpoint, TimerCheckpointFile
from pocketmq.broker.store.timer_log import NO_PREV, UNIT_SIZE, TimerLog, TimerUnit, encode_unit
from pocketmq.broker.store.timer_wheel import TimerWheel

__all__ = [
    "DEFAULT_TIMER_LOG_FILE_SIZE",
    "DEFAULT_WHEEL_SLOTS",
    "TimerMessageStore",
    "TimerRecoveryReport",
]

log = logging.getLogger(__name__)

DEFAULT_WHEEL_SLOTS = 7 * 86_400  # RocketMQ's TIMER_WHEEL_TTL_DAY at 1 s
DEFAULT_TIMER_LOG_FILE_SIZE = 100 * 1024 * 1024  # mappedFileSizeTimerLog


@dataclass(frozen=True, slots=True, kw_only=True)
class TimerRecoveryReport:
    """What :meth:`TimerMessageStore.load` found and did."""

    fresh: bool  # no timer files yet: nothing to recover
    checkpoint_found: bool
    cursor_second: int
    enqueue_queue_offset: int
    log_end: int  # timer-log position after recovery
    replayed_units: int  # valid units past the checkpoint's flushed position
    cut_bytes: int  # non-zero bytes cut after the last valid unit
    dropped_units: int  # trailing units whose parked record the commit log lost
    wheel_rebuilt: str  # why the wheel was rebuilt from the log; "" if it was not
    pending_units: int  # units waiting in the wheel
    seconds: float


class TimerMessageStore:
    def __init__(
        self,
        root_dir: str,
        *,
        wheel_slots: int = DEFAULT_WHEEL_SLOTS,
        log_file_size: int = DEFAULT_TIMER_LOG_FILE_SIZE,
        io: StoreIO | None = None,
    ) -> None:
        self.root_dir = root_dir
        self.wheel_slots = wheel_slots
        self._io = io or StoreIO()
        self.log = TimerLog(os.path.join(root_dir, "timerlog"), log_file_size, io=self._io)
        self.wheel_path = os.path.join(root_dir, "timerwheel")
        self.checkpoint_file = TimerCheckpointFile(os.path.join(root_dir, "timercheck"))
        self.wheel: TimerWheel | None = None  # created with the first unit
        self.cursor_second = 0
        self.enqueue_queue_offset = 0
        self.pending_units = 0
        self._live: dict[int, list[int]] = {}  # second -> [first_pos, count]
        self._heap: list[int] = []  # live seconds (stale ones popped lazily)
        self._retired: list[int] = []  # delivered seconds whose entry is not cleared
        self._lock = threading.Lock()
        self._closed = False

    # -- recovery ---------------------------------------------------------------------
    def load(
        self, *, now_ms: int, queue_min_offset: int, queue_max_offset: int
    ) -> TimerRecoveryReport:
        """Open and recover the files; *queue_** are rmq_sys_wheel_timer queue 0's bounds."""
        started = time.monotonic()
        cp = self.checkpoint_file.read()
        if os.path.isdir(self.log.directory):
            self.log.load()
        if cp is None and not self.log.queue.files and not os.path.exists(self.wheel_path):
            self.cursor_second = now_ms // 1000
            self.enqueue_queue_offset = queue_min_offset
            return self._report(started, fresh=True, cp=None)
        start = self.log.align(cp.timerlog_flushed_pos if cp else self.log.min_offset)
        log_end, cut = self.log.recover(start)
        log_end, dropped = self._drop_units_past(queue_max_offset, log_end)
        tail = list(self.log.scan(min(start, log_end), log_end))
        if cp is not None:
            self.cursor_second = cp.cursor_second
        else:
            self.cursor_second = min((u.second for u in tail), default=now_ms // 1000)
            log.warning(
                "timer checkpoint %s is missing or damaged: starting the wheel at "
                "second %d, the oldest in the timer log; messages delivered since "
                "may be delivered again",
                self.checkpoint_file.path,
                self.cursor_second,
            )
        self.enqueue_queue_offset = self._enqueue_start(
            cp, tail, queue_min_offset, queue_max_offset
        )
        self.wheel = TimerWheel(self.wheel_path, self.wheel_slots, io=self._io)
        rebuild = ""
        if self.wheel.reset:
            rebuild = "the wheel file was missing or had another size"
        elif cp is None:
            rebuild = "there is no timer checkpoint"
        if not rebuild:
            rebuild = self._relink(tail) or self._read_live(log_end)
        if rebuild:
            log.warning(
                "timer wheel %s: rebuilding it from the timer log because %s",
                self.wheel_path,
                rebuild,
            )
            self._rebuild(log_end)
            problem = self._read_live(log_end)
            if problem:
                raise RuntimeError(f"timer wheel rebuilt from the log is inconsistent: {problem}")
        return self._report(
            started,
            fresh=False,
            cp=cp,
            log_end=log_end,
            replayed=len(tail),
            cut=cut,
            dropped=dropped,
            rebuilt=rebuild,
        )

    def _report(
        self,
        started: float,
        *,
        fresh: bool,
        cp: TimerCheckpoint | None,
        log_end: int = 0,
        replayed: int = 0,
        cut: int = 0,
        dropped: int = 0,
        rebuilt: str = "",
    ) -> TimerRecoveryReport:
        return TimerRecoveryReport(
            fresh=fresh,
            checkpoint_found=cp is not None,
            cursor_second=self.cursor_second,
            enqueue_queue_offset=self.enqueue_queue_offset,
            log_end=log_end,
            replayed_units=replayed,
            cut_bytes=cut,
            dropped_units=dropped,
            wheel_rebuilt=rebuilt,
            pending_units=self.pending_units,
            seconds=time.monotonic() - started,
        )

    def _drop_units_past(self, queue_max_offset: int, log_end: int) -> tuple[int, int]:
        """Cut trailing units naming queue offsets the timer topic no longer has."""
        pos = log_end
        while pos - UNIT_SIZE >= self.log.min_offset:
            unit = self.log.read(pos - UNIT_SIZE)
            if unit is None or unit.queue_offset < queue_max_offset:
                break
            pos -= UNIT_SIZE
        if pos == log_end:
            return log_end, 0
        dropped = (log_end - pos) // UNIT_SIZE
        log.warning(
            "timer log %s: dropping %d units from position %d: their parked records "
            "(queue offsets >= %d) are no longer in the commit log",
            self.log.directory,
            dropped,
            pos,
            queue_max_offset,
        )
        self.log.truncate(pos)
        return pos, dropped

    def _enqueue_start(
        self, cp: TimerCheckpoint | None, tail: list[TimerUnit], queue_min: int, queue_max: int
    ) -> int:
        offset = cp.enqueue_queue_offset if cp is not None else queue_min
        if tail:
            offset = max(offset, max(u.queue_offset for u in tail) + 1)
        if offset > queue_max:
            log.warning(
                "timer: enqueue offset %d is past the end %d of the timer topic's "
                "queue (the commit log lost its tail); continuing at %d",
                offset,
                queue_max,
                queue_max,
            )
            offset = queue_max
        if offset < queue_min:
            log.error(
                "timer: parked messages at queue offsets %d..%d were deleted from the "
                "commit log before the timer read them; they are lost",
                offset,
                queue_min - 1,
            )
            offset = queue_min
        return offset

    def _relink(self, tail: list[TimerUnit]) -> str:
        """Link the tail's units the wheel does not reach yet; a reason to rebuild, or ""."""
        assert self.wheel is not None
        newest: dict[int, int] = {}
        for unit in tail:
            if unit.second >= self.cursor_second:
                newest[unit.second] = unit.pos
        for second, last in newest.items():
            entry = self.wheel.get(second)
            if entry is not None and entry.last_pos >= last:
                continue
            chain = self._walk(second, last)
            if chain is None:
                return f"the chain of second {second} from position {last} is broken"
            first, count = chain
            self.wheel.put(second, first, last, count)
        return ""

    def _walk(self, second: int, last: int) -> tuple[int, int] | None:
        """(first position, count) of the chain ending at *last*; None if it is broken."""
        pos, first, count = last, last, 0
        while pos != NO_PREV and pos >= self.log.min_offset:
            unit = self.log.read(pos)
            if unit is None or unit.second != second or unit.prev_pos >= pos:
                return None
            first, count, pos = pos, count + 1, unit.prev_pos
        return first, count

    def _read_live(self, log_end: int) -> str:
        """Fill the live table from the wheel; a reason to rebuild, or ""."""
        assert self.wheel is not None
        self._live.clear()
        stale = []
        for index, entry in self.wheel.entries():
            if entry is None:
                return f"wheel entry {index} fails its CRC"
            if entry.second < self.cursor_second:
                stale.append(entry.second)
                continue
            if (
                index != self.wheel.index(entry.second)
                or entry.count <= 0
                or not self.log.min_offset <= entry.first_pos <= entry.last_pos < log_end
            ):
                return (
                    f"wheel entry {index} (second {entry.second}) names timer-log "
                    f"positions {entry.first_pos}..{entry.last_pos}; the log holds "
                    f"[{self.log.min_offset}, {log_end})"
                )
            self._live[entry.second] = [entry.first_pos, entry.count]
        for second in stale:  # delivered before the checkpoint; tidy them away
            self.wheel.clear(second)
        self._heap = list(self._live)
        heapq.heapify(self._heap)
        self.pending_units = sum(count for _first, count in self._live.values())
        return ""

    def _rebuild(self, log_end: int) -> None:
        assert self.wheel is not None
        self.wheel.wipe()
        seconds: dict[int, list[int]] = {}
        scanned = 0
        for unit in self.log.scan(self.log.min_offset, log_end, skip_invalid=True):
            scanned += 1
            if unit.second < self.cursor_second:
                continue
            entry = seconds.get(unit.second)
            if entry is None:
                seconds[unit.second] = [unit.pos, unit.pos, 1]
            else:
                entry[1] = unit.pos
                entry[2] += 1
        expected = (log_end - self.log.min_offset) // UNIT_SIZE
        if scanned != expected:
            log.error(
                "timer log %s: %d of %d units between %d and %d are damaged and were skipped",
                self.log.directory,
                expected - scanned,
                expected,
                self.log.min_offset,
                log_end,
            )
        for second, (first, last, count) in seconds.items():
            self.wheel.put(second, first, last, count)

    # -- units --------------------------------------------------------------------------
    def place(self, deliver_ms: int, roll_window_s: int) -> int:
        """The wheel second a message due at *deliver_ms* is linked into."""
        return min(max(deliver_ms // 1000, self.cursor_second), self.cursor_second + roll_window_s)

    def append(
        self,
        *,
        second: int,
        deliver_ms: int,
        enqueue_ms: int,
        phys_offset: int,
        size: int,
        queue_offset: int,
        roll_times: int = 0,
    ) -> int:
        """Write a unit and link it into *second*; return its timer-log position."""
        if second < self.cursor_second:
            raise ValueError(f"second {second} is before the cursor {self.cursor_second}")
        wheel = self._wheel()
        entry = wheel.get(second)
        prev = entry.last_pos if entry is not None else NO_PREV
        pos = self.log.append(
            encode_unit(
                prev_pos=prev,
                second=second,
                deliver_ms=deliver_ms,
                enqueue_ms=enqueue_ms,
                phys_offset=phys_offset,
                size=size,
                queue_offset=queue_offset,
                roll_times=roll_times,
            )
        )
        if entry is None:
            wheel.put(second, pos, pos, 1)
        else:
            wheel.put(second, entry.first_pos, pos, entry.count + 1)
        live = self._live.get(second)
        if live is None:
            self._live[second] = [pos, 1]
            heapq.heappush(self._heap, second)
        else:
            live[1] += 1
        self.pending_units += 1
        return pos

    def units_of(self, second: int, *, newer_than: int = NO_PREV) -> tuple[list[TimerUnit], int]:
        """Units of *second* lying above position *newer_than*, newest first, and the
        second's last position (pass it back as *newer_than* to read only new ones)."""
        entry = self.wheel.get(second) if self.wheel is not None else None
        if entry is None:
            return [], newer_than
        out: list[TimerUnit] = []
        pos = entry.last_pos
        while pos > newer_than:
            unit = self.log.read(pos)
            if unit is None or unit.second != second or unit.prev_pos >= pos:
                log.error(
                    "timer log %s: the chain of second %d is broken at position %d; "
                    "units older than it are not reachable",
                    self.log.directory,
                    second,
                    pos,
                )
                break
            out.append(unit)
            pos = unit.prev_pos
        return out, entry.last_pos

    def next_live_second(self) -> int | None:
        """The earliest second with units waiting, or None."""
        heap = self._heap
        while heap:
            if heap[0] in self._live:
                return heap[0]
            heapq.heappop(heap)
        return None

    def retire(self, second: int) -> None:
        """Every unit of *second* is delivered or re-parked: forget it. Its wheel entry
        is cleared by :meth:`clear_retired` once those re-puts are durable."""
        live = self._live.pop(second, None)
        if live is not None:
            self.pending_units -= live[1]
            self._retired.append(second)

    def clear_retired(self) -> None:
        if self.wheel is not None:
            for second in self._retired:
                self.wheel.clear(second)
        self._retired.clear()

    def advance_cursor(self, second: int) -> None:
        if second < self.cursor_second:
            raise ValueError(f"the cursor moves forward only: {self.cursor_second} -> {second}")
        self.cursor_second = second

    def _wheel(self) -> TimerWheel:
        if self.wheel is None:
            os.makedirs(self.root_dir, exist_ok=True)
            self.wheel = TimerWheel(self.wheel_path, self.wheel_slots, io=self._io)
        return self.wheel

    # -- durability -----------------------------------------------------------------------
    def snapshot(self, *, cursor_second: int, now_ms: int) -> TimerCheckpoint | None:
        """What a checkpoint may claim now (None before the first unit)."""
        if self.wheel is None:
            return None
        return TimerCheckpoint(
            cursor_second=cursor_second,
            timerlog_flushed_pos=self.log.max_offset,
            enqueue_queue_offset=self.enqueue_queue_offset,
            written_ms=now_ms,
            wheel_slots=self.wheel_slots,
        )

    def flush(self, cp: TimerCheckpoint) -> None:
        """Sync the log, then the wheel, then write *cp* (a :meth:`snapshot`); any thread."""
        with self._lock:
            if self._closed or self.wheel is None:
                return
            self.log.flush()
            self.wheel.flush()
            self.checkpoint_file.write(cp)

    def delete_delivered_segments(self, below: int) -> int:
        """Delete timer-log segments whose units are all delivered (and below *below*,
        the flushed position recovery starts from); returns how many."""
        floor = min((first for first, _count in self._live.values()), default=below)
        deleted = self.log.delete_below(min(floor, below))
        if deleted:
            log.info(
                "timer log %s: deleted %d delivered segment(s); it now starts at %d",
                self.log.directory,
                deleted,
                self.log.min_offset,
            )
        return deleted

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.log.close()
            if self.wheel is not None:
                self.wheel.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def fresh_copy(self) -> TimerMessageStore:
        """Close this store, delete its files (timer log, wheel, checkpoint) and return
        an empty store of the same settings, not loaded yet."""
        self.close()
        shutil.rmtree(self.log.directory, ignore_errors=True)
        for path in (self.wheel_path, self.checkpoint_file.path):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
        return TimerMessageStore(
            self.root_dir,
            wheel_slots=self.wheel_slots,
            log_file_size=self.log.file_size,
            io=self._io,
        )
