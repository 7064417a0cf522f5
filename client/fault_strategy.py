"""Queue selection for sends: round robin, steered away from slow or dead brokers.

RocketMQ 5's ``MQFaultStrategy`` with latency fault tolerance on. After every
send the broker's latency is recorded; a latency at or above a threshold
makes the broker *unavailable* for the matching duration::

    latency   >= 50   100   550   1800   3000   5000   15000  ms
    avoid for    0     0     2     5      6     10     30    s

A failed call counts as isolation, i.e. a latency of 10 s (avoid for 10 s),
so a dead broker is left alone from the very next send. Selection walks the
topic's writable queues round robin from a shared counter and takes the first
queue whose broker is available and (on a retry) not the broker that just
failed; when every broker is avoided it relaxes those filters one at a time
rather than fail, as RocketMQ does.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pocketmq.client.model import MessageQueue
from pocketmq.common.clock import Clock, SystemClock

__all__ = [
    "ISOLATION_LATENCY_MS",
    "LATENCY_MAX_MS",
    "NOT_AVAILABLE_DURATION_MS",
    "FaultItem",
    "LatencyFaultTolerance",
    "QueueSelector",
    "not_available_duration_ms",
]

LATENCY_MAX_MS = (50, 100, 550, 1800, 3000, 5000, 15000)
NOT_AVAILABLE_DURATION_MS = (0, 0, 2000, 5000, 6000, 10000, 30000)
ISOLATION_LATENCY_MS = 10_000
_FIRST_AVOIDING_LATENCY_MS = LATENCY_MAX_MS[
    NOT_AVAILABLE_DURATION_MS.index(next(d for d in NOT_AVAILABLE_DURATION_MS if d))
]  # 550


def not_available_duration_ms(latency_ms: float) -> int:
    """How long a broker with this latency is avoided (the highest threshold reached)."""
    for i in range(len(LATENCY_MAX_MS) - 1, -1, -1):
        if latency_ms >= LATENCY_MAX_MS[i]:
            return NOT_AVAILABLE_DURATION_MS[i]
    return 0


@dataclass(frozen=True, slots=True)
class FaultItem:
    broker_name: str
    latency_ms: float
    available_at_s: float  # monotonic seconds from which the broker may be used again


class LatencyFaultTolerance:
    """Which brokers to avoid for now, from the latencies of recent sends."""

    def __init__(self, *, clock: Clock | None = None, enabled: bool = True) -> None:
        self._clock = clock or SystemClock()
        self.enabled = enabled
        # broker name -> (latency_ms, available_at_s); a tuple, not a FaultItem, because
        # every send updates it and a frozen dataclass costs several times more to build.
        self._items: dict[str, tuple[float, float]] = {}

    def update(self, broker_name: str, latency_ms: float, *, isolation: bool = False) -> None:
        """Record one send's outcome; *isolation* for a call that failed."""
        if not self.enabled:
            return
        latency = ISOLATION_LATENCY_MS if isolation else latency_ms
        # Below the first threshold that avoids a broker (the common case) there is no
        # table to walk.
        duration_ms = (
            0 if latency < _FIRST_AVOIDING_LATENCY_MS else not_available_duration_ms(latency)
        )
        self._items[broker_name] = (latency, self._clock.monotonic() + duration_ms / 1000)

    def is_available(self, broker_name: str) -> bool:
        item = self._items.get(broker_name)
        return item is None or self._clock.monotonic() >= item[1]

    def first_available(self, queues: Sequence[MessageQueue], start: int) -> MessageQueue | None:
        """The first queue from *start* (round robin) whose broker is available."""
        items = self._items
        n = len(queues)
        now = self._clock.monotonic()
        for i in range(n):
            mq = queues[(start + i) % n]
            item = items.get(mq.broker_name)
            if item is None or now >= item[1]:
                return mq
        return None

    def remove(self, broker_name: str) -> None:
        self._items.pop(broker_name, None)

    def item(self, broker_name: str) -> FaultItem | None:
        item = self._items.get(broker_name)
        return None if item is None else FaultItem(broker_name, item[0], item[1])

    def unavailable(self) -> list[str]:
        return sorted(b for b in self._items if not self.is_available(b))


QueueFilter = Callable[[MessageQueue], bool]


class QueueSelector:
    """Round robin over queues with fault-avoiding filters (TopicPublishInfo + MQFaultStrategy)."""

    def __init__(self, fault: LatencyFaultTolerance) -> None:
        self._fault = fault
        # A random start so that many producers do not all hit queue 0 first.
        self._counter = itertools.count(random.randrange(1 << 16))

    def select(
        self, queues: Sequence[MessageQueue], *, last_broker_name: str | None = None
    ) -> MessageQueue:
        if not queues:
            raise ValueError("no queue to select from")
        if last_broker_name is None:  # a first attempt: the per-message path
            start = next(self._counter)
            if self._fault.enabled:
                mq = self._fault.first_available(queues, start)
                if mq is not None:
                    return mq
            return queues[start % len(queues)]
        available: QueueFilter = lambda mq: self._fault.is_available(mq.broker_name)  # noqa: E731
        other: QueueFilter = lambda mq: mq.broker_name != last_broker_name  # noqa: E731
        filter_sets: list[tuple[QueueFilter, ...]] = [
            (available, other),
            (available,),
            (other,),
            (),
        ]
        if not self._fault.enabled:
            filter_sets = [f for f in filter_sets if available not in f]
        start = next(self._counter)
        n = len(queues)
        for filters in filter_sets:
            for i in range(n):
                mq = queues[(start + i) % n]
                if all(f(mq) for f in filters):
                    return mq
        raise AssertionError("the unfiltered pass always returns")  # pragma: no cover
