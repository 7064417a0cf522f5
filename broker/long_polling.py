"""PullRequestHolder: where pulls that found nothing wait for a message.

RocketMQ's ``PullRequestHoldService`` thread parks an empty pull and re-checks it
every 5 s and on message arrival. Here a parked pull is an ``asyncio.Future`` filed
under its ``(topic, queue_id)``; the store calls :meth:`PullRequestHolder.on_arrival`
synchronously right after it dispatches records to a queue, which resolves
every future of that queue waiting for an offset below the new maximum. No
task polls: a pull wakes within one event-loop turn of the dispatch, or at
its own deadline (one ``call_later`` timer each).

The caller (:mod:`.pull_processor`) re-executes a woken pull; if what arrived
does not match its tag filter it parks again for the time left. At most
``max_parked`` pulls wait at once; beyond that a pull is refused with
``SystemBusyError`` so that the client backs off instead of re-pulling in a loop.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Sequence

from pocketmq.broker import flow_control
from pocketmq.broker.errors import SystemBusyError

__all__ = ["HoldOutcome", "PullRequestHolder"]

log = logging.getLogger(__name__)


class HoldOutcome(enum.Enum):
    ARRIVED = "ARRIVED"  # the queue grew past the offset waited on
    TIMED_OUT = "TIMED_OUT"  # the suspend time ran out
    RELEASED = "RELEASED"  # the broker is stopping; answer with what there is


class _Parked:
    __slots__ = ("future", "offset")

    def __init__(self, future: asyncio.Future[HoldOutcome], offset: int) -> None:
        self.future = future
        self.offset = offset


class PullRequestHolder:
    """Parked pulls by queue. Event-loop thread only."""

    def __init__(self, *, max_parked: int = 10_000) -> None:
        self._max_parked = max_parked
        self._parked: dict[tuple[str, int], list[_Parked]] = {}
        self._count = 0
        self._released = False

    @property
    def parked_count(self) -> int:
        return self._count

    async def wait_for_any(
        self, targets: Sequence[tuple[str, int, int]], timeout_s: float
    ) -> HoldOutcome:
        """Wait until any ``(topic, queue_id, offset)`` queue grows past its offset.

        One future is filed under every queue named (a PullBatch waits on all
        of its queues at once); each filing counts toward ``max_parked``.
        """
        if self._released:
            return HoldOutcome.RELEASED
        if self._count + len(targets) > self._max_parked:
            raise SystemBusyError(
                f"{self._count} pulls are already waiting for messages on this "
                f"broker and this call would add {len(targets)} "
                f"(max_parked_pulls = {self._max_parked}); retry later"
            )
        loop = asyncio.get_running_loop()
        future: asyncio.Future[HoldOutcome] = loop.create_future()
        filed = []
        for topic, queue_id, offset in targets:
            parked = _Parked(future, offset)
            key = (topic, queue_id)
            self._parked.setdefault(key, []).append(parked)
            filed.append((key, parked))
        self._count += len(filed)
        timer = loop.call_later(timeout_s, _resolve, future, HoldOutcome.TIMED_OUT)
        try:
            with flow_control.parked():  # no work while waiting: not counted in flight
                return await future
        finally:
            timer.cancel()
            for key, parked in filed:
                self._remove(key, parked)

    def _remove(self, key: tuple[str, int], parked: _Parked) -> None:
        waiting = self._parked.get(key)
        if waiting is None:
            return
        try:
            waiting.remove(parked)
        except ValueError:
            return
        self._count -= 1
        if not waiting:
            del self._parked[key]

    def on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """The store's arrival listener: wake the queue's pulls now below *max_offset*."""
        waiting = self._parked.get((topic, queue_id))
        if not waiting:
            return
        for parked in waiting:
            if parked.offset < max_offset:
                _resolve(parked.future, HoldOutcome.ARRIVED)

    def release_all(self) -> None:
        """Answer every parked pull now and park no more (broker shutdown)."""
        self._released = True
        for waiting in self._parked.values():
            for parked in waiting:
                _resolve(parked.future, HoldOutcome.RELEASED)
        if self._count:
            log.info("released %d parked pulls for shutdown", self._count)


def _resolve(future: asyncio.Future[HoldOutcome], outcome: HoldOutcome) -> None:
    if not future.done():
        future.set_result(outcome)
