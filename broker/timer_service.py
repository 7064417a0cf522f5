"""TimerService: delivers messages parked for a delivery time (RocketMQ 5's timer).

How a message gets parked in ``rmq_sys_wheel_timer`` is in :mod:`.timer_messages`.

The :class:`TimerService` turns the timer topic's queue, in order, into units
of the timer store (:mod:`pocketmq.broker.store.timer_store`: timer log,
wheel, checkpoint), and walks the wheel second by second: each due message is
put back into ``REAL_TOPIC`` / ``REAL_QID`` with ``REAL_*`` and
``TIMER_ROLL_TIMES`` removed and ``TIMER_DELIVER_MS`` kept (what was asked
for; RocketMQ 5 keeps it too); body, flag, born time and host, reconsume
times and ``UNIQ_KEY`` as sent. A message beyond the roll window (2 days) is
linked at the window's last second and, when that comes, re-parked
("rolled": re-put into the timer topic with ``TIMER_ROLL_TIMES`` + 1), so its
record never outlives the commit log's retention.

Delivery guarantees:

* Nothing acknowledged is lost. The parked record is in the commit log
  (synchronous flush: on disk) before the send is acknowledged; a unit is
  made for every record of the timer topic's queue, in order, and the
  checkpoint never claims a queue offset whose unit is not durable; a second
  is counted delivered (cursor, cleared wheel entry) only after its re-puts
  are stored (synchronous flush: on disk).
* Duplicates. After a restart the seconds from the checkpoint's cursor on are
  walked again (those finished before the stop are not: their wheel entries
  were cleared), and a message re-put before the stop would be re-put again.
  So for those seconds (up to the restart's second after a crash; the
  checkpoint's own second after a clean stop) each message is first looked up
  in the key index: a record of its real topic with the same ``UNIQ_KEY`` and
  ``TIMER_DELIVER_MS`` stored after the parked record (for a roll: a timer
  topic record with ``TIMER_ROLL_TIMES`` + 1) means it went out already, and
  it is skipped. Every parked record has a ``UNIQ_KEY`` (the send path makes
  one when the producer set none), so a timer message is delivered exactly
  once across kill -9 as long as the commit log kept the earlier re-put
  (always after kill -9; after power loss, with synchronous flush) and the
  key index is on (the store's default). Power loss with asynchronous flush
  loses what the page cache held, as for any message.
* Promotion. A replica's timer does not run: its timer files stay empty while
  the copied log brings the parked records and the master's re-puts. Started
  with empty timer files and parked records in the queue (a promoted replica,
  or removed timer files), the service enqueues every parked record and checks
  each second up to its start against the key index as above: a message the
  previous master delivered, when its re-put reached this log, is not
  delivered again; one whose re-put did not is.
* Time. Never before ``TIMER_DELIVER_MS`` on the broker's clock; normally
  within a few ms after it (the task sleeps until the next message's ms, at
  most 1 s). A clock set back holds messages back by as much.

All methods run on the broker's event-loop thread, except the file flush,
which runs in a worker thread. :meth:`TimerService.run_once` does one round
without any task, for tests with a manual clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pocketmq.broker.delay_levels import PROPERTY_TIMER_DELIVER_MS, restore_properties
from pocketmq.broker.reput import copies_after, reput
from pocketmq.broker.store.api import MessageStore
from pocketmq.broker.store.results import GetStatus, PutResult, PutStatus
from pocketmq.broker.store.timer_log import NO_PREV, TimerUnit
from pocketmq.broker.store.timer_store import TimerMessageStore, TimerRecoveryReport
from pocketmq.broker.timer_messages import PROPERTY_TIMER_ROLL_TIMES, TIMER_TOPIC
from pocketmq.common.aio import cancel_and_wait
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.message import (
    POS_QUEUEOFFSET,
    QUEUE_AND_PHYS_OFFSET,
    StoredMessage,
    check_record,
    decode_properties,
    decode_record,
)

if TYPE_CHECKING:
    from pocketmq.broker.trace import BrokerTraceService

__all__ = ["TimerService"]

log = logging.getLogger(__name__)

MAX_SLEEP_S = 1.0  # longest sleep while messages wait: notices clock steps
PUT_RETRY_DELAY_MS = 1_000  # after the store refused a re-put for the moment
READ_BATCH = 1_024  # timer-topic records read per store call
READ_BYTES = 4 * 1024 * 1024
MAX_PER_ROUND = 2_048  # units enqueued, or messages re-put, before yielding
CLEANUP_EVERY = 60  # checkpoints between timer-log cleanups

_RETRY_LATER = (PutStatus.DISK_FULL, PutStatus.SERVICE_NOT_AVAILABLE)
_END_OF_QUEUE = (
    GetStatus.OFFSET_OVERFLOW_ONE,
    GetStatus.NO_MESSAGE_IN_QUEUE,
    GetStatus.NO_MATCHED_LOGIC_QUEUE,
)


# -- the service --------------------------------------------------------------------------
@dataclass(slots=True)
class _OpenSecond:
    """The second being delivered: units read from its chain and not yet delivered."""

    second: int
    read_down_to: int = NO_PREV  # chain positions above were read
    waiting: list[TimerUnit] = field(default_factory=list)  # by (deliver_ms, pos)
    fired: int = 0  # units delivered or re-parked


class TimerService:
    def __init__(
        self,
        store: MessageStore,
        timer: TimerMessageStore,
        *,
        roll_window_s: int = 2 * 86_400,
        flush_interval_s: float = 1.0,
        clock: Clock | None = None,
    ) -> None:
        self._store = store
        self.timer = timer
        self._roll_window_s = roll_window_s
        self._flush_interval_s = flush_interval_s
        self._clock = clock or SystemClock()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._open: _OpenSecond | None = None
        self._flush: Future[PutStatus] | None = None  # of the last re-put (sync flush)
        self._committed_cursor = 0  # cursor whose re-puts are stored (and flushed)
        self._suspect_until = -1  # messages due up to this second may have gone out before
        self._ran = False  # started in this process (a master's timer; it may step down)
        self._dirty = False
        self._last_checkpoint = 0.0
        self._checkpoints = 0
        self.recovery: TimerRecoveryReport | None = None
        self.enqueued_total = self.delivered_total = self.rolled_total = 0
        self.duplicates_skipped_total = self.dropped_total = 0
        self.trace: BrokerTraceService | None = None  # trace_topic_enable (broker/trace.py)

    # -- lifecycle ----------------------------------------------------------------------
    def load(self, *, clean_shutdown: bool) -> TimerRecoveryReport:
        """Recover the timer files; *clean_shutdown* is the message store's verdict."""
        now_ms = self._clock.now_ms()
        report = self.timer.load(
            now_ms=now_ms,
            queue_min_offset=self._store.min_offset(TIMER_TOPIC, 0),
            queue_max_offset=self._store.max_offset(TIMER_TOPIC, 0),
        )
        self.recovery = report
        self._committed_cursor = self.timer.cursor_second
        self._last_checkpoint = self._clock.monotonic()
        if not report.fresh:
            # The cursor's second may be partly delivered even after a clean stop.
            crashed = not clean_shutdown or not report.checkpoint_found
            self._suspect_until = now_ms // 1000 if crashed else self.timer.cursor_second
        log.info(
            "timer recovered in %.3f s: cursor at second %d, %d messages waiting, queue "
            "offset %d next, %d units replayed past the checkpoint%s",
            report.seconds,
            report.cursor_second,
            report.pending_units,
            report.enqueue_queue_offset,
            report.replayed_units,
            f"; wheel rebuilt because {report.wheel_rebuilt}" if report.wheel_rebuilt else "",
        )
        return report

    def forget_for_promotion(self) -> None:
        """Before this broker, a replica until now, starts its timer as master: drop
        timer files of an earlier master term (an old master that rejoined as a replica,
        or stepped down and was elected again, kept them; they may point into a tail its
        handshake cut and claim queue offsets the new master wrote other records at) and
        start from empty ones, which :meth:`start` treats as a promotion. A replica
        that never ran its timer has empty files already, and keeps them."""
        if self.recovery is None or (self.recovery.fresh and not self._ran):
            return
        log.warning(
            "timer: promoted; dropping this broker's timer files of an earlier master "
            "term (cursor at second %d, queue offset %d) to rebuild them from the log",
            self.timer.cursor_second,
            self.timer.enqueue_queue_offset,
        )
        self.timer = self.timer.fresh_copy()
        self._open = None
        self._flush = None
        self._suspect_until = -1
        self.load(clean_shutdown=True)

    def start(self) -> None:
        self._ran = True
        self.check_for_a_previous_master()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="TimerService")

    def check_for_a_previous_master(self) -> None:
        """Before the first round (:meth:`start` calls it; a test stepping
        :meth:`run_once` calls it itself): empty timer files beside parked records mean
        another broker's timer delivered from this log until now."""
        if (
            self.recovery is not None
            and self.recovery.fresh
            and self._store.max_offset(TIMER_TOPIC, 0) > self.timer.enqueue_queue_offset
        ):
            # Parked records this broker's timer never saw: it was a replica, promoted
            # (or its timer files were removed), and the master before it may have
            # delivered them; their re-puts came with the copied log. Every second up to
            # now is checked against the key index before its messages go out, or every
            # timer message of the retention window would be delivered again.
            now_s = self._clock.now_ms() // 1000
            self._suspect_until = max(self._suspect_until, now_s)
            log.warning(
                "timer: %d parked messages (queue offsets %d..) this broker's timer never "
                "enqueued: those due up to now go out only if the key index holds no "
                "earlier delivery of them",
                self._store.max_offset(TIMER_TOPIC, 0) - self.timer.enqueue_queue_offset,
                self.timer.enqueue_queue_offset,
            )

    async def stop(self) -> None:
        """Cancel the task, commit what was re-put, write the checkpoint, close the files
        (once: a master that stepped down stopped already)."""
        if self.timer.closed:
            return
        await cancel_and_wait(self._task)
        self._task = None
        await self._commit()
        self._dirty = True
        await self.checkpoint()
        self.timer.close()

    def on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Store arrival listener: a message was parked."""
        if topic == TIMER_TOPIC:
            self._wake.set()

    # -- rounds ---------------------------------------------------------------------------
    async def run_once(self, now_ms: int | None = None) -> int | None:
        """Enqueue what was parked and deliver what is due.

        Returns when to come back (ms): the next message's time, or now when
        more is ready than one round handles; None when nothing waits.
        """
        now_ms = self._clock.now_ms() if now_ms is None else now_ms
        self._catch_up(now_ms // 1000)
        more = self._enqueue(now_ms)
        next_ms = self._deliver_due(now_ms)
        await self._commit()
        # Re-parked messages (and sends meanwhile) are to be enqueued at once.
        more = more or self._store.max_offset(TIMER_TOPIC, 0) > self.timer.enqueue_queue_offset
        return now_ms if more else next_ms

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                next_ms = await self.run_once()
            except Exception:
                log.exception("timer round failed; retrying in %d ms", PUT_RETRY_DELAY_MS)
                next_ms = self._clock.now_ms() + PUT_RETRY_DELAY_MS
            if (
                self._dirty
                and self._clock.monotonic() - self._last_checkpoint >= self._flush_interval_s
            ):
                await self.checkpoint()
            now_ms = self._clock.now_ms()
            if next_ms is not None and next_ms <= now_ms:
                await asyncio.sleep(0)  # more is ready: let other work run first
                continue
            if next_ms is None and not self._dirty:
                await self._wake.wait()
                continue
            wait_s = MAX_SLEEP_S if next_ms is None else min((next_ms - now_ms) / 1000, MAX_SLEEP_S)
            if self._dirty:
                wait_s = min(wait_s, self._flush_interval_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait_s)

    async def checkpoint(self) -> None:
        """Sync the timer log and wheel, then record how far they and delivery are durable."""
        if not self._dirty:
            return
        cp = self.timer.snapshot(cursor_second=self._committed_cursor, now_ms=self._clock.now_ms())
        self._dirty = False
        self._last_checkpoint = self._clock.monotonic()
        if cp is None:
            return
        try:
            await asyncio.to_thread(self.timer.flush, cp)
        except OSError as exc:
            self._dirty = True
            log.error(
                "cannot flush the timer files in %s: %s (errno %s); retrying in %.1f s",
                self.timer.root_dir,
                exc.strerror,
                exc.errno,
                self._flush_interval_s,
            )
            return
        self._checkpoints += 1
        if self._checkpoints % CLEANUP_EVERY == 0:
            self.timer.delete_delivered_segments(cp.timerlog_flushed_pos)

    async def _commit(self) -> None:
        """After the round's re-puts are stored (and flushed): clear the delivered seconds'
        wheel entries and let the checkpoint claim the cursor."""
        flush = self._flush
        if flush is not None:
            # Shielded: the group commit shares one future among all waiters, and a
            # cancelled wrapper would cancel it for them. Taken only once resolved, so
            # a stop() cancelling this wait commits after it.
            if await asyncio.shield(asyncio.wrap_future(flush)) is not PutStatus.PUT_OK:
                log.warning(
                    "timer: re-puts up to second %d are stored but not yet flushed",
                    self.timer.cursor_second,
                )
            if self._flush is flush:
                self._flush = None
        self.timer.clear_retired()
        if self._committed_cursor != self.timer.cursor_second:
            self._committed_cursor = self.timer.cursor_second
            self._dirty = True

    # -- enqueue: timer topic -> timer log and wheel -----------------------------------------
    def _catch_up(self, now_second: int) -> None:
        """With nothing waiting before now, the cursor moves up to now (placing then
        needs no detour through the roll horizon after an idle spell)."""
        first = self.timer.next_live_second()
        target = now_second if first is None else min(first, now_second)
        if target > self.timer.cursor_second and (
            self._open is None or self._open.second >= target
        ):
            self._move_cursor(target)

    def _enqueue(self, now_ms: int) -> bool:
        """Turn parked records into units; True when more are left than one round takes."""
        budget = MAX_PER_ROUND
        while budget > 0:
            offset = self.timer.enqueue_queue_offset
            result = self._store.get_messages(
                TIMER_TOPIC, 0, offset, max_count=min(READ_BATCH, budget), max_bytes=READ_BYTES
            )
            if result.status is GetStatus.FOUND:
                for raw, queue_offset in zip(result.records, result.queue_offsets, strict=True):
                    self._enqueue_record(raw, queue_offset, now_ms)
                self.timer.enqueue_queue_offset = max(
                    self.timer.enqueue_queue_offset, result.next_begin_offset
                )
                budget -= max(len(result.records), 1)
                continue
            if result.status in _END_OF_QUEUE:
                return False
            if result.status is GetStatus.OFFSET_TOO_SMALL:
                log.error(
                    "timer: parked messages at queue offsets %d..%d were deleted before "
                    "the timer read them; they are lost",
                    offset,
                    result.next_begin_offset - 1,
                )
            else:
                log.warning(
                    "timer: reading the timer topic at offset %d gave %s; going on at %d",
                    offset,
                    result.status.value,
                    result.next_begin_offset,
                )
            if result.next_begin_offset <= offset:
                return False
            self.timer.enqueue_queue_offset = result.next_begin_offset
            budget -= 1
        return True

    def _enqueue_record(self, raw: bytes, queue_offset: int, now_ms: int) -> None:
        try:
            layout = check_record(raw, 0, len(raw), check_crc=False)
        except CorruptRecordError as exc:
            log.error(
                "timer: skipping the damaged parked record at queue offset %d: %s",
                queue_offset,
                exc,
            )
            return
        props = decode_properties(
            raw[layout.props_pos : layout.props_pos + layout.props_len].decode("utf-8", "replace")
        )
        deliver_raw = props.get(PROPERTY_TIMER_DELIVER_MS, "")
        if deliver_raw.isdigit():
            deliver_ms = int(deliver_raw)
        else:
            log.warning(
                "timer: the parked record at queue offset %d has TIMER_DELIVER_MS %r; "
                "delivering it now",
                queue_offset,
                deliver_raw,
            )
            deliver_ms = now_ms
        rolls = props.get(PROPERTY_TIMER_ROLL_TIMES, "0")
        _queue_offset, phys_offset = QUEUE_AND_PHYS_OFFSET.unpack_from(raw, POS_QUEUEOFFSET)
        self.timer.append(
            second=self.timer.place(deliver_ms, self._roll_window_s),
            deliver_ms=deliver_ms,
            enqueue_ms=now_ms,
            phys_offset=phys_offset,
            size=len(raw),
            queue_offset=queue_offset,
            roll_times=int(rolls) if rolls.isdigit() else 0,
        )
        self.timer.enqueue_queue_offset = queue_offset + 1
        self.enqueued_total += 1
        self._dirty = True

    # -- dequeue: wheel -> real topics ---------------------------------------------------
    def _move_cursor(self, second: int) -> None:
        if second != self.timer.cursor_second:
            self.timer.advance_cursor(second)
            self._dirty = True

    def _deliver_due(self, now_ms: int) -> int | None:
        """Walk the wheel up to now; when to come back (ms), or None."""
        now_second = now_ms // 1000
        budget = [MAX_PER_ROUND]
        while True:
            second = self.timer.next_live_second()
            if second is None or second > now_second:
                return None if second is None else second * 1000
            self._move_cursor(second)  # the seconds before it hold nothing
            wait_ms = self._deliver_second(second, now_ms, budget)
            if wait_ms is not None:
                return wait_ms
            if second == now_second:  # done for now; more may be linked into it
                return (second + 1) * 1000
            self.timer.retire(second)
            self._open = None
            self._move_cursor(second + 1)

    def _deliver_second(self, second: int, now_ms: int, budget: list[int]) -> int | None:
        """Deliver what is due in *second*; None when all of it is, else when to come back."""
        op = self._open
        if op is None or op.second != second:
            op = self._open = _OpenSecond(second)
        new, last = self.timer.units_of(second, newer_than=op.read_down_to)
        if new:
            op.read_down_to = last
            op.waiting.extend(new)
            op.waiting.sort(key=lambda u: (u.deliver_ms, u.pos))
        done = 0
        try:
            for unit in op.waiting:
                if budget[0] <= 0:
                    return now_ms
                if not unit.parked and unit.deliver_ms > now_ms:
                    return unit.deliver_ms
                if not self._fire(unit, now_ms):
                    return now_ms + PUT_RETRY_DELAY_MS
                done += 1
                budget[0] -= 1
        finally:
            del op.waiting[:done]
            op.fired += done
        return None

    def _fire(self, unit: TimerUnit, now_ms: int) -> bool:
        """Deliver or re-park one unit's message; False when the store says try later."""
        msg = self._parked_message(unit)
        if msg is None:
            self.dropped_total += 1
            return True
        self._dirty = True
        if unit.parked:
            properties = dict(msg.properties)
            properties[PROPERTY_TIMER_ROLL_TIMES] = str(unit.roll_times + 1)
            topic, queue_id, what = TIMER_TOPIC, 0, "re-park"
        else:
            try:
                topic, queue_id, properties = restore_properties(msg.properties)
            except ValueError as exc:
                log.error(
                    "timer: dropping the message parked at commit-log offset %d: %s",
                    unit.phys_offset,
                    exc,
                )
                self.dropped_total += 1
                return True
            properties[PROPERTY_TIMER_DELIVER_MS] = str(unit.deliver_ms)
            properties.pop(PROPERTY_TIMER_ROLL_TIMES, None)
            what = "deliver"
        if self._may_have_gone_out(unit) and self._already_put(topic, msg, unit):
            self.duplicates_skipped_total += 1
            return True
        result = reput(self._store, msg, topic=topic, queue_id=queue_id, properties=properties)
        if self.trace is not None and what == "deliver" and result.status is PutStatus.PUT_OK:
            self.trace.on_delivered(
                msg,
                topic=topic,
                queue_id=queue_id,
                result=result,
                via="delivered at its delivery time",
            )
        return self._after_put(result, unit, what, topic, queue_id)

    def _after_put(
        self, result: PutResult, unit: TimerUnit, what: str, topic: str, queue_id: int
    ) -> bool:
        if result.status is PutStatus.PUT_OK:
            if result.flush_future is not None:
                self._flush = result.flush_future
            if unit.parked:
                self.rolled_total += 1
            else:
                self.delivered_total += 1
            return True
        if result.status in _RETRY_LATER:
            log.warning(
                "timer: cannot %s the message parked at commit-log offset %d to %s:%d "
                "yet (%s: %s); retrying in %d ms",
                what,
                unit.phys_offset,
                topic,
                queue_id,
                result.status.value,
                result.error,
                PUT_RETRY_DELAY_MS,
            )
            return False
        log.error(
            "timer: dropping the message parked at commit-log offset %d for %s:%d: the "
            "store refused it (%s: %s)",
            unit.phys_offset,
            topic,
            queue_id,
            result.status.value,
            result.error,
        )
        self.dropped_total += 1
        return True

    def _parked_message(self, unit: TimerUnit) -> StoredMessage | None:
        raw = self._store.read_record(unit.phys_offset)
        problem = ""
        msg = None
        if raw is None or len(raw) != unit.size:
            problem = "is no longer in the commit log"
        else:
            try:
                msg = decode_record(raw, check_crc=False)
            except CorruptRecordError as exc:
                problem = f"is damaged: {exc}"
            else:
                if msg.topic != TIMER_TOPIC or msg.queue_offset != unit.queue_offset:
                    problem = (
                        f"is now {msg.topic}@{msg.queue_offset}, not the parked record "
                        f"at queue offset {unit.queue_offset}"
                    )
        if problem:
            log.error(
                "timer: the message due at %d parked at commit-log offset %d %s; it is lost",
                unit.deliver_ms,
                unit.phys_offset,
                problem,
            )
            return None
        return msg

    def _may_have_gone_out(self, unit: TimerUnit) -> bool:
        """Could a run before this one (before a crash, or the master before a promotion)
        have delivered or re-parked *unit* already? By its delivery time, not the second
        it is linked into here: the cursor may have moved past the suspect seconds before
        a backlog was enqueued, and links it later. A roll is checked whenever anything is
        suspect: the previous run rolled it at a second of its own wheel."""
        if self._suspect_until < 0:
            return False
        return unit.parked or unit.deliver_ms // 1000 <= self._suspect_until

    def _already_put(self, topic: str, msg: StoredMessage, unit: TimerUnit) -> bool:
        """Did a run before the restart re-put (or re-park) this very message?"""
        deliver = str(unit.deliver_ms)
        rolls = str(unit.roll_times + 1)
        for found in copies_after(self._store, topic, msg):
            if found.properties.get(PROPERTY_TIMER_DELIVER_MS) == deliver and (
                not unit.parked or found.properties.get(PROPERTY_TIMER_ROLL_TIMES) == rolls
            ):
                log.info(
                    "timer: %s (due %d) was already put into %s at commit-log offset %d "
                    "before the restart; not again",
                    msg.uniq_key,
                    unit.deliver_ms,
                    topic,
                    found.phys_offset,
                )
                return True
        return False

    # -- figures ------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Messages waiting in the wheel (not yet delivered or re-parked)."""
        return self.timer.pending_units - (self._open.fired if self._open is not None else 0)

    def figures(self) -> dict[str, str]:
        return {
            "timer_pending": str(self.pending),
            "timer_cursor_second": str(self.timer.cursor_second),
            "timer_enqueue_offset": str(self.timer.enqueue_queue_offset),
            "timer_enqueued_total": str(self.enqueued_total),
            "timer_delivered_total": str(self.delivered_total),
            "timer_rolled_total": str(self.rolled_total),
            "timer_duplicates_skipped_total": str(self.duplicates_skipped_total),
            "timer_dropped_total": str(self.dropped_total),
        }
