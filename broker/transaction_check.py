"""TransactionalMessageCheckService: asks producers about half messages left unresolved.

RocketMQ's ``TransactionalMessageCheckService``. A half message without
EndTransaction ``transaction_timeout_ms`` (6 s) after it was stored (or after
its ``CHECK_IMMUNITY_TIME_IN_SECONDS``) is *checked*: a ``CheckTransactionStateCommand``
command goes to one live producer of its group (``PGROUP``) over that
producer's server-to-client stream, the group's producers taking turns, so a
producer that died mid-transaction is stood in for by another one of its group.
The producer answers with EndTransaction. Unanswered, the half is checked again
every ``transaction_check_interval_ms`` (30 s), at most ``transaction_check_max``
(15) times; at the next turn after the last check it is discarded: an op
DISCARD is written, a copy goes to ``TRANS_CHECK_MAX_TIME_TOPIC``, and the
loss is logged. A check that finds no producer of the group connected counts
as made (RocketMQ's rule), and is logged once per round and group.

The service walks the half queue (``RMQ_SYS_TRANS_HALF_TOPIC``, queue 0) in
order from the progress offset::

    scan offset ──▶ resolved half                   skip it
                    unresolved, first check due     keep it in *pending*
                    unresolved, not yet due         stop: later halves are younger

and checks what is due among the pending halves. The progress offset
(:meth:`TransactionResolver.advance`) becomes the first pending half,
or the scan offset when none is pending; it is saved with the check counts in
``config/transactionProgress.json`` every ``PERSIST_INTERVAL_S`` and at stop.

The task sleeps until the next check falls due; an arrival in the half queue
wakes it when it had nothing to wait for. :meth:`run_once` takes the time as an
argument, so tests step it with a manual clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from pocketmq.broker.client_manager import CheckTransactionStateCommand, ServerCommand
from pocketmq.broker.delay_levels import PROPERTY_REAL_TOPIC
from pocketmq.broker.errors import BrokerError
from pocketmq.broker.store.api import MessageStore
from pocketmq.broker.store.results import GetStatus
from pocketmq.broker.topic_config import TRANS_HALF_TOPIC
from pocketmq.broker.transaction import TransactionResolver
from pocketmq.broker.transaction_ops import (
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    PROPERTY_PRODUCER_GROUP,
    Resolution,
)
from pocketmq.common.aio import cancel_and_wait, wait_event
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.message import StoredMessage, decode_record
from pocketmq.common.msgid import encode_offset_msg_id

__all__ = ["CheckRound", "SendCheck", "TransactionalMessageCheckService"]

log = logging.getLogger(__name__)

READ_BATCH = 64  # half records read per store call
MAX_LOAD_PER_ROUND = 4096  # halves taken into pending per round before checking
MAX_SLEEP_S = 1.0  # longest sleep while something waits; catches clock steps
MIN_SLEEP_S = 0.05  # shortest: halves falling due one by one share a round
IDLE_SLEEP_S = 10.0  # with nothing to wait for (an arrival wakes the task sooner)
PERSIST_INTERVAL_S = 5.0  # between saves of the progress when it changed
RETRY_DELAY_MS = 1_000  # after a round failed

#: (producer group, command) -> the client id it went to, or None if no producer is there.
SendCheck = Callable[[str, ServerCommand], "str | None"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckRound:
    """What one :meth:`TransactionalMessageCheckService.run_once` did."""

    checked: int  # commands handed to a producer
    unanswerable: int  # checks due while no producer of the group was connected
    discarded: int
    pending: int  # unresolved halves taken in, after the round
    next_due_ms: int | None  # when the next check falls due; None = nothing waits


@dataclass(slots=True)
class _Pending:
    phys_offset: int
    group: str
    next_check_ms: int
    checks: int


class TransactionalMessageCheckService:
    def __init__(
        self,
        service: TransactionResolver,
        store: MessageStore,
        *,
        send_check: SendCheck,
        store_host: tuple[str, int],
        timeout_ms: int = 6_000,
        check_interval_ms: int = 30_000,
        check_max: int = 15,
        clock: Clock | None = None,
    ) -> None:
        self._service = service
        self._store = store
        self._send_check = send_check
        self._timeout_ms = timeout_ms
        self._interval_ms = check_interval_ms
        self._check_max = check_max
        self._clock = clock or SystemClock()
        self._msg_id_prefix = encode_offset_msg_id(store_host[0], store_host[1], 0)[:-16]
        self._pending: dict[int, _Pending] = {}  # half queue offset -> state
        self._scan_offset = service.progress.half_offset
        self._head_due_ms: int | None = None  # first half not taken in yet
        self._behind = False  # a round stopped at its budget
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last_persist_s = self._clock.monotonic()

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        self._scan_offset = max(self._scan_offset, self._service.progress.half_offset)
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="TransactionalMessageCheckService"
        )

    async def stop(self) -> None:
        """Cancel the task and save progress."""
        await cancel_and_wait(self._task)
        self._task = None
        self._service.persist()

    def on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Store arrival listener: a new half wakes a task that waits for nothing."""
        if topic == TRANS_HALF_TOPIC and self._head_due_ms is None:
            self._wake.set()

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                due_ms = (await self.run_once()).next_due_ms
            except Exception:
                log.exception("transaction check round failed; retrying in %d ms", RETRY_DELAY_MS)
                due_ms = self._clock.now_ms() + RETRY_DELAY_MS
            if self._clock.monotonic() - self._last_persist_s >= PERSIST_INTERVAL_S:
                self._last_persist_s = self._clock.monotonic()
                self._service.persist()
            if due_ms is None:
                await wait_event(self._wake, IDLE_SLEEP_S)
                continue
            wait_s = min(max(due_ms - self._clock.now_ms(), 0) / 1000, MAX_SLEEP_S)
            if wait_s <= 0 and self._behind:
                await asyncio.sleep(0)  # more is due than a round takes; let others run
                continue
            await wait_event(self._wake, max(wait_s, MIN_SLEEP_S))

    # -- one round ----------------------------------------------------------------------
    async def run_once(self, now_ms: int | None = None) -> CheckRound:
        """Take in new halves, check or discard what is due, move the progress."""
        now = self._clock.now_ms() if now_ms is None else now_ms
        self._service.run_repairs()
        self._take_in(now)
        checked, unanswerable, discarded, next_check = self._check_due(now)
        self._service.advance(min(self._pending) if self._pending else self._scan_offset)
        due = [t for t in (self._head_due_ms, next_check) if t is not None]
        return CheckRound(
            checked=checked,
            unanswerable=unanswerable,
            discarded=discarded,
            pending=len(self._pending),
            next_due_ms=min(due) if due else None,
        )

    def _take_in(self, now: int) -> None:
        """Walk the half queue from the scan offset up to the first half not yet due."""
        self._head_due_ms = None
        self._behind = False
        budget = MAX_LOAD_PER_ROUND
        while budget > 0:
            result = self._store.get_messages(
                TRANS_HALF_TOPIC, 0, self._scan_offset, max_count=min(READ_BATCH, budget)
            )
            if result.status is not GetStatus.FOUND:
                if result.next_begin_offset > self._scan_offset and result.status in (
                    GetStatus.OFFSET_TOO_SMALL,
                    GetStatus.OFFSET_FOUND_NULL,
                ):
                    log.warning(
                        "transactions: half messages %d..%d are gone (cleaned up); "
                        "they are no longer checked",
                        self._scan_offset,
                        result.next_begin_offset - 1,
                    )
                    self._scan_offset = result.next_begin_offset
                    continue
                return
            for raw, queue_offset in zip(result.records, result.queue_offsets, strict=True):
                first_check_ms = self._take(raw, queue_offset, now)
                if first_check_ms is not None:
                    self._head_due_ms = first_check_ms
                    return
                self._scan_offset = queue_offset + 1
            self._scan_offset = max(self._scan_offset, result.next_begin_offset)
            budget -= len(result.records)
        self._head_due_ms = now  # more to take in than one round takes
        self._behind = True

    def _take(self, raw: bytes, queue_offset: int, now: int) -> int | None:
        """Take one half in (or skip it); its first check time if that is still ahead."""
        if self._service.resolution_of(queue_offset) is not None:
            return None
        try:
            half = decode_record(raw, check_crc=False)
        except CorruptRecordError as exc:
            log.error(
                "transactions: skipping the damaged half message at queue offset %d: %s",
                queue_offset,
                exc,
            )
            return None
        first_check_ms = half.store_timestamp_ms + self._first_check_delay_ms(half)
        if first_check_ms > now:
            return first_check_ms
        checks = self._service.progress.check_times.get(queue_offset, 0)
        self._pending[queue_offset] = _Pending(
            phys_offset=half.phys_offset,
            group=half.properties.get(PROPERTY_PRODUCER_GROUP, ""),
            next_check_ms=first_check_ms if checks == 0 else now,
            checks=checks,
        )
        return None

    def _first_check_delay_ms(self, half: StoredMessage) -> int:
        raw = half.properties.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS, "")
        return int(raw) * 1000 if raw.isdigit() else self._timeout_ms

    def _check_due(self, now: int) -> tuple[int, int, int, int | None]:
        checked = unanswerable = discarded = 0
        next_check: int | None = None
        missing: dict[str, int] = {}
        for queue_offset, pending in sorted(self._pending.items()):
            if self._service.resolution_of(queue_offset) is not None:
                del self._pending[queue_offset]
                continue
            if pending.next_check_ms > now:
                next_check = _earliest(next_check, pending.next_check_ms)
                continue
            half = self._service.half_message(pending.phys_offset)
            if half is None:
                log.warning(
                    "transactions: half message at commit-log offset %d is gone "
                    "(cleaned up); no longer checked",
                    pending.phys_offset,
                )
                del self._pending[queue_offset]
                continue
            if pending.checks >= self._check_max:
                discarded += self._discard(queue_offset, half, pending, now)
                continue
            pending.checks += 1
            pending.next_check_ms = now + self._interval_ms
            next_check = _earliest(next_check, pending.next_check_ms)
            self._service.progress.check_times[queue_offset] = pending.checks
            self._service.progress.dirty = True
            if self._check(half, pending):
                checked += 1
            else:
                unanswerable += 1
                missing[pending.group] = missing.get(pending.group, 0) + 1
        for group, count in sorted(missing.items()):
            log.warning(
                "transactions: %d half message(s) of producer group %r are due for a "
                "check, but no producer of the group is connected; the checks count "
                "(at most %d before a half message is discarded)",
                count,
                group,
                self._check_max,
            )
        return checked, unanswerable, discarded, next_check

    def _check(self, half: StoredMessage, pending: _Pending) -> bool:
        raw = self._store.read_record(pending.phys_offset)
        if raw is None:
            return False
        command = CheckTransactionStateCommand(
            producer_group=pending.group,
            record=raw,
            commit_log_offset=pending.phys_offset,
            offset_msg_id=f"{self._msg_id_prefix}{pending.phys_offset:016X}",
            msg_id=half.uniq_key,
            check_times=pending.checks,
        )
        client_id = self._send_check(pending.group, command)
        if client_id is None:
            return False
        self._service.checks_total += 1
        log.debug(
            "transactions: check %d of half message %s sent to %s",
            pending.checks,
            half.uniq_key,
            client_id,
        )
        return True

    def _discard(self, queue_offset: int, half: StoredMessage, pending: _Pending, now: int) -> int:
        try:
            self._service.resolve(half, Resolution.DISCARD)
        except BrokerError as exc:
            log.error(
                "transactions: cannot discard half message at %d yet: %s",
                pending.phys_offset,
                exc.message,
            )
            pending.next_check_ms = now + RETRY_DELAY_MS
            return 0
        del self._pending[queue_offset]
        log.warning(
            "transactions: half message %s of producer group %r for topic %s "
            "(commit-log offset %d) is still unresolved after %d checks; discarded "
            "as rolled back, a copy is in TRANS_CHECK_MAX_TIME_TOPIC",
            half.uniq_key,
            pending.group,
            half.properties.get(PROPERTY_REAL_TOPIC, "?"),
            pending.phys_offset,
            pending.checks,
        )
        return 1

    # -- figures ------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Unresolved halves already due for checks."""
        return len(self._pending)


def _earliest(current: int | None, candidate: int) -> int:
    return candidate if current is None else min(current, candidate)
