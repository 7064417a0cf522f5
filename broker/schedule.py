"""ScheduleMessageService: puts delayed messages back into their topic when they are due.

RocketMQ's ``ScheduleMessageService``. It owns, per delay level, the progress
through that level's queue of ``SCHEDULE_TOPIC_XXXX`` (queue id = level - 1;
how messages get there is in :mod:`.delay_levels`), and the file that keeps
it, ``config/delayOffset.json`` in RocketMQ's shape::

    {"offsetTable": {"1": 12, "3": 40}}     level -> next queue offset to deliver

One level's queue holds messages in store order and every one of them waits
the same delay, so they fall due in queue order and the head decides what
the level's task does next::

    head is due      re-put it into REAL_TOPIC / REAL_QID, move on to the next
    head is not      sleep until its delivery time (at most MAX_SLEEP_S, so that
                     a wall-clock step forward is noticed)
    queue is empty   sleep until the store's arrival listener reports a message
                     in this level's queue

A message's delivery time is its ``TIMER_DELIVER_MS`` property, else its
store time plus the level's delay, and never later than now plus the level's
delay (RocketMQ's ``correctDeliverTimestamp``: a clock set back, or a level
made shorter, does not hold a message longer than its delay).

A message is re-put before the progress past it moves (with synchronous
flush, after the re-put is on disk), and progress is saved every
``persist_interval_s`` when it changed and at :meth:`stop`; none is lost.
After a kill -9, or on a replica promoted to master (its progress is the old
master's as of the last metadata sync), the messages re-put since that
progress would be re-put once more. So a message already due at that moment
is first looked up in the key index (:meth:`check_earlier_deliveries`): a
record of its real topic with its ``UNIQ_KEY`` stored after it means it went
out, and it is skipped. Delivery is then exactly once as long as the log kept
the earlier re-put (a replica: as long as it was copied) and the key index is
on (the store's default), and at least once otherwise.

A re-put the store refuses for the moment (disk full, read-only) is retried
after ``PUT_RETRY_DELAY_MS``; a parked message that cannot be put anywhere (no
``REAL_TOPIC``, properties too large) is logged with its offsets and skipped.

All methods run on the broker's event-loop thread. :meth:`run_once` delivers
what is due without any task, for tests with a manual clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pocketmq.broker.delay_levels import (
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DELIVER_MS,
    SCHEDULE_TOPIC,
    DelayLevels,
    restore_properties,
)
from pocketmq.broker.json_file import JsonFile
from pocketmq.broker.reput import copies_after, reput
from pocketmq.broker.store.api import MessageStore
from pocketmq.broker.store.results import GetStatus, PutStatus
from pocketmq.common.aio import wait_event
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.message import StoredMessage, decode_record

if TYPE_CHECKING:
    from pocketmq.broker.trace import BrokerTraceService

__all__ = ["DelayOffsetTable", "ScheduleMessageService"]

log = logging.getLogger(__name__)

MAX_SLEEP_S = 1.0  # longest sleep while a message waits; catches clock steps
PUT_RETRY_DELAY_MS = 1_000  # after the store refused a re-put for the moment
READ_BATCH = 32  # records read per store call
MAX_PER_ROUND = 512  # re-puts before a level's task yields to the loop

_RETRY_LATER = (PutStatus.DISK_FULL, PutStatus.SERVICE_NOT_AVAILABLE)
_END_OF_QUEUE = (
    GetStatus.OFFSET_OVERFLOW_ONE,
    GetStatus.NO_MESSAGE_IN_QUEUE,
    GetStatus.NO_MATCHED_LOGIC_QUEUE,
)


class DelayOffsetTable:
    """``config/delayOffset.json``: per level, the next queue offset to deliver."""

    def __init__(self, path: str) -> None:
        self._file = JsonFile(path)
        self._offsets: dict[int, int] = {}
        self.dirty = False

    @property
    def path(self) -> str:
        return self._file.path

    def load(self) -> None:
        data = self._file.load() or {}
        table = data.get("offsetTable", {})
        if not isinstance(table, dict):
            log.warning(
                "%s: offsetTable is a %s, not an object; starting every delay level "
                "from its queue's first message",
                self.path,
                type(table).__name__,
            )
            return
        for raw_level, raw_offset in table.items():
            try:
                level, offset = int(raw_level), int(raw_offset)
            except (TypeError, ValueError):
                log.warning(
                    "%s: skipping entry %r: %r (not a level and an offset)",
                    self.path,
                    raw_level,
                    raw_offset,
                )
                continue
            if level >= 1 and offset >= 0:
                self._offsets[level] = offset

    def get(self, level: int) -> int:
        return self._offsets.get(level, 0)

    def set(self, level: int, offset: int) -> None:
        if self._offsets.get(level, 0) != offset:
            self._offsets[level] = offset
            self.dirty = True

    def as_dict(self) -> dict[int, int]:
        return dict(self._offsets)

    def persist(self) -> None:
        self.dirty = False
        try:
            self._file.save(
                {
                    "offsetTable": {
                        str(level): offset for level, offset in sorted(self._offsets.items())
                    }
                }
            )
        except OSError:
            self.dirty = True
            raise


@dataclass(slots=True)
class _LevelState:
    level: int
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    next_due_ms: int | None = None  # of the head message; None = queue drained
    busy: bool = False  # inside a delivery round
    offset: int = 0  # progress within the current round
    flush: Future[PutStatus] | None = None  # of the last re-put, sync flush only


class ScheduleMessageService:
    def __init__(
        self,
        store: MessageStore,
        levels: DelayLevels,
        config_dir: str,
        *,
        persist_interval_s: float = 10.0,
        clock: Clock | None = None,
    ) -> None:
        self._store = store
        self._levels = levels
        self._clock = clock or SystemClock()
        self._persist_interval_s = persist_interval_s
        self.offsets = DelayOffsetTable(os.path.join(config_dir, "delayOffset.json"))
        self._states = {level: _LevelState(level) for level in range(1, levels.max_level + 1)}
        self._tasks: list[asyncio.Task[None]] = []
        self.delivered_total = 0
        self.duplicates_skipped_total = 0
        self._checked_due_ms = -1  # messages due up to this may have been re-put already
        self.trace: BrokerTraceService | None = None  # trace_topic_enable (broker/trace.py)

    # -- lifecycle ----------------------------------------------------------------------
    def load(self) -> None:
        """Read delayOffset.json (or its .bak)."""
        self.offsets.load()
        log.info(
            "delay levels %s; progress from %s: %s",
            " ".join(f"{ms}ms" for ms in self._levels.delays_ms),
            self.offsets.path,
            self.offsets.as_dict() or "none yet",
        )

    def check_earlier_deliveries(self) -> None:
        """The progress may be behind re-puts stored already (a crash before the save; a
        promoted replica's copy of its master's): every message due by now is looked up
        in the key index before it is re-put."""
        self._checked_due_ms = max(self._checked_due_ms, self._clock.now_ms())

    def start(self) -> None:
        """One task per delay level, and one saving progress."""
        loop = asyncio.get_running_loop()
        for state in self._states.values():
            self._tasks.append(
                loop.create_task(
                    self._run_level(state), name=f"ScheduleMessageService-level-{state.level}"
                )
            )
        self._tasks.append(
            loop.create_task(self._persist_periodically(), name="ScheduleMessageService-persist")
        )

    async def stop(self) -> None:
        """Cancel the tasks and save progress."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        self.persist()

    def persist(self) -> None:
        """Save progress if it changed; an I/O error is logged and retried next time."""
        if not self.offsets.dirty:
            return
        try:
            self.offsets.persist()
        except OSError as exc:
            log.error(
                "cannot save delay progress to %s: %s (errno %s); retrying in %.0f s",
                self.offsets.path,
                exc.strerror,
                exc.errno,
                self._persist_interval_s,
            )

    # -- notifications ------------------------------------------------------------------
    def on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Store arrival listener: wake a level whose queue was drained."""
        if topic != SCHEDULE_TOPIC:
            return
        state = self._states.get(queue_id + 1)
        if state is not None and (state.busy or state.next_due_ms is None):
            state.wake.set()

    # -- delivery -----------------------------------------------------------------------
    async def run_once(self, level: int | None = None) -> int | None:
        """Deliver what is due on one level (or all); the earliest next due time in ms.

        None means nothing is waiting. A time at or before now means more is due
        than one round delivers (``MAX_PER_ROUND``).
        """
        levels = [level] if level is not None else list(self._states)
        due = [d for d in [await self._deliver(lv) for lv in levels] if d is not None]
        return min(due) if due else None

    async def _run_level(self, state: _LevelState) -> None:
        while True:
            state.wake.clear()
            try:
                due_ms = await self._deliver(state.level)
            except Exception:
                log.exception(
                    "delay level %d: delivery round failed; retrying in %d ms",
                    state.level,
                    PUT_RETRY_DELAY_MS,
                )
                due_ms = self._clock.now_ms() + PUT_RETRY_DELAY_MS
            if due_ms is None:
                await state.wake.wait()
                continue
            wait_s = min(max(due_ms - self._clock.now_ms(), 0) / 1000, MAX_SLEEP_S)
            if wait_s <= 0:
                await asyncio.sleep(0)  # let other work run between rounds
                continue
            await wait_event(state.wake, wait_s)

    async def _persist_periodically(self) -> None:
        while True:
            await asyncio.sleep(self._persist_interval_s)
            self.persist()

    async def _deliver(self, level: int) -> int | None:
        """One round on *level*: re-put due messages; when the head is next due, or None."""
        state = self._states[level]
        state.busy = True
        state.offset = self.offsets.get(level)
        try:
            state.next_due_ms = self._deliver_due(state)
            return state.next_due_ms
        finally:
            flush, state.flush = state.flush, None
            try:
                if flush is not None and await asyncio.wrap_future(flush) is not PutStatus.PUT_OK:
                    log.warning(
                        "delay level %d: re-puts up to queue offset %d are stored but "
                        "not yet flushed",
                        level,
                        state.offset,
                    )
            finally:
                # Progress moves only now: past re-puts that are stored (and flushed).
                self.offsets.set(level, state.offset)
                state.busy = False

    def _deliver_due(self, state: _LevelState) -> int | None:
        """Re-put what is due from ``state.offset`` on; the head's due time, or None."""
        level, budget = state.level, MAX_PER_ROUND
        while budget > 0:
            result = self._store.get_messages(
                SCHEDULE_TOPIC, level - 1, state.offset, max_count=min(READ_BATCH, budget)
            )
            if result.status is GetStatus.FOUND:
                for raw, queue_offset in zip(result.records, result.queue_offsets, strict=True):
                    wait_until_ms = self._deliver_record(level, queue_offset, raw)
                    if wait_until_ms is not None:
                        state.offset = queue_offset
                        return wait_until_ms
                    state.offset = queue_offset + 1
                state.offset = max(state.offset, result.next_begin_offset)
                budget -= len(result.records)
            elif result.status in _END_OF_QUEUE:
                return None
            else:
                corrected = result.next_begin_offset
                log.warning(
                    "delay level %d: progress offset %d is unusable (%s; the queue "
                    "holds [%d, %d)); continuing at %d",
                    level,
                    state.offset,
                    result.status.value,
                    result.min_offset,
                    result.max_offset,
                    corrected,
                )
                if corrected == state.offset:
                    return self._clock.now_ms() + PUT_RETRY_DELAY_MS
                state.offset = corrected
                budget -= 1
        return self._clock.now_ms()

    def _deliver_record(self, level: int, queue_offset: int, raw: bytes) -> int | None:
        """Re-put the record if due; None when done with it, else when to try again (ms)."""
        try:
            msg = decode_record(raw, check_crc=False)
        except CorruptRecordError as exc:
            log.error(
                "delay level %d: skipping the damaged record at queue offset %d: %s",
                level,
                queue_offset,
                exc,
            )
            return None
        now_ms = self._clock.now_ms()
        due_ms = self.due_ms(msg, level, now_ms)
        if due_ms > now_ms:
            return due_ms
        if due_ms <= self._checked_due_ms and self._reput_before(msg):
            self.duplicates_skipped_total += 1
            return None
        return self._reput(level, queue_offset, msg, now_ms)

    def _reput_before(self, msg: StoredMessage) -> bool:
        """Is a record of *msg*'s real topic with its UNIQ_KEY stored after it?"""
        topic = msg.properties.get(PROPERTY_REAL_TOPIC, "")
        for found in copies_after(self._store, topic, msg) if topic else ():
            log.info(
                "delay: the message parked at commit-log offset %d went out before "
                "(at %d); not delivered again",
                msg.phys_offset,
                found.phys_offset,
            )
            return True
        return False

    def due_ms(self, msg: StoredMessage, level: int, now_ms: int) -> int:
        """When *msg*, parked on *level*, is to be delivered (see the module docstring)."""
        delay_ms = self._levels.delay_ms(level)
        raw = msg.properties.get(PROPERTY_TIMER_DELIVER_MS, "")
        deliver_ms = int(raw) if raw.isdigit() else msg.store_timestamp_ms + delay_ms
        return min(deliver_ms, now_ms + delay_ms)

    def _reput(self, level: int, queue_offset: int, msg: StoredMessage, now_ms: int) -> int | None:
        try:
            topic, queue_id, properties = restore_properties(msg.properties)
        except ValueError as exc:
            log.error(
                "delay level %d: skipping the message at queue offset %d (commit-log "
                "offset %d): %s",
                level,
                queue_offset,
                msg.phys_offset,
                exc,
            )
            return None
        result = reput(self._store, msg, topic=topic, queue_id=queue_id, properties=properties)
        if result.status is PutStatus.PUT_OK:
            self.delivered_total += 1
            if self.trace is not None:
                self.trace.on_delivered(
                    msg,
                    topic=topic,
                    queue_id=queue_id,
                    result=result,
                    via=f"delivered after delay level {level}",
                )
            if result.flush_future is not None:
                self._states[level].flush = result.flush_future
            return None
        if result.status in _RETRY_LATER:
            log.warning(
                "delay level %d: cannot deliver the message at queue offset %d to "
                "%s:%d yet (%s: %s); retrying in %d ms",
                level,
                queue_offset,
                topic,
                queue_id,
                result.status.value,
                result.error,
                PUT_RETRY_DELAY_MS,
            )
            return now_ms + PUT_RETRY_DELAY_MS
        log.error(
            "delay level %d: dropping the message at queue offset %d (commit-log offset "
            "%d) for %s:%d: the store refused it (%s: %s)",
            level,
            queue_offset,
            msg.phys_offset,
            topic,
            queue_id,
            result.status.value,
            result.error,
        )
        return None

    # -- figures ------------------------------------------------------------------------
    def figures(self) -> dict[str, str]:
        """Progress per level and re-puts since start, for the runtime table."""
        out = {
            "schedule_delivered_total": str(self.delivered_total),
            "schedule_duplicates_skipped_total": str(self.duplicates_skipped_total),
        }
        for level, offset in sorted(self.offsets.as_dict().items()):
            out[f"schedule_level_{level}_offset"] = str(offset)
        return out
