"""BrokerStatsManager: what a broker has taken from producers and served to consumers.

RocketMQ's ``BrokerStatsManager`` (``TOPIC_PUT_NUMS``, ``TOPIC_PUT_SIZE``,
``GROUP_GET_NUMS`` ...) kept cheap. The counting is per request, never per
message: a send adds its record count and blob length to its topic (a batch
of several topics, which the producer's coalescing makes, walks its topics
once); a pull adds what it returned. Put latency goes into a
:class:`~pocketmq.broker.store.flush.DurationHistogram`, and put and get
counts into a :class:`MovingRate`, a ring of one-second buckets. That gives
RocketMQ's moving TPS over the last 10 s and minute for one clock read per
request, with no background task::

    second:   … │ t-3 │ t-2 │ t-1 │ t (filling) │
    rate(10) = sum of the 10 complete seconds before t / 10

It is read on the event loop thread by GetBrokerRuntimeInfo (:meth:`figures`:
``put_tps``, ``get_tps`` …) and by the Prometheus collector
(:mod:`pocketmq.broker.metrics`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pocketmq.broker.store.batch import ScannedBatch
from pocketmq.broker.store.flush import DurationHistogram
from pocketmq.common.clock import Clock, SystemClock

__all__ = ["BrokerStatsManager", "MovingRate", "TopicStats"]

TPS_WINDOW_S = 10  # put_tps / get_tps: RocketMQ's 10-second figure
TPS_WINDOW_LONG_S = 60  # put_tps_1m / get_tps_1m


class MovingRate:
    """A running total and its rate over the last *window* complete seconds
    (up to *horizon_s*), from a ring of one-second buckets."""

    __slots__ = ("_born", "_buckets", "_clock", "_second", "total")

    def __init__(self, clock: Clock, *, horizon_s: int = TPS_WINDOW_LONG_S) -> None:
        self._clock = clock
        self._buckets = [0] * (horizon_s + 1)  # + the second being filled
        self._second = self._born = int(clock.monotonic())
        self.total = 0

    def add(self, n: int, now: float | None = None) -> None:
        second = int(self._clock.monotonic() if now is None else now)
        if second != self._second:
            self._advance(second)
        self._buckets[second % len(self._buckets)] += n
        self.total += n

    def rate(self, window_s: int) -> float:
        """Per second over the *window_s* complete seconds before this one (fewer
        right after the start)."""
        size = len(self._buckets)
        if not 0 < window_s < size:
            raise ValueError(f"window_s is {window_s}; give 1..{size - 1}")
        second = int(self._clock.monotonic())
        if second != self._second:
            self._advance(second)
        span = min(window_s, second - self._born)
        if span <= 0:
            return 0.0
        return sum(self._buckets[s % size] for s in range(second - span, second)) / span

    def _advance(self, second: int) -> None:
        """Empty the buckets of the seconds between the last one counted and *second*."""
        size = len(self._buckets)
        for s in range(max(self._second + 1, second - size + 1), second + 1):
            self._buckets[s % size] = 0
        self._second = second


@dataclass(slots=True)
class TopicStats:
    put_messages: int = 0
    put_bytes: int = 0  # stored record bytes, as sent
    get_messages: int = 0
    get_bytes: int = 0


class BrokerStatsManager:
    def __init__(self, *, clock: Clock | None = None) -> None:
        self._clock = clock or SystemClock()
        self.topics: dict[str, TopicStats] = {}
        self.put_rate = MovingRate(self._clock)  # messages
        self.get_rate = MovingRate(self._clock)
        self.put_bytes = 0
        self.get_bytes = 0
        self.put_latency = DurationHistogram()  # send received -> acknowledged (flush incl.)

    def _topic(self, topic: str) -> TopicStats:
        stats = self.topics.get(topic)
        if stats is None:
            stats = self.topics[topic] = TopicStats()
        return stats

    # -- hot path: one call per request ------------------------------------------------
    def on_put(self, scanned: ScannedBatch, started_s: float) -> None:
        """A send of *scanned* was stored; it arrived at ``clock.monotonic()`` *started_s*."""
        now = self._clock.monotonic()
        self.put_latency.observe(now - started_s)
        topics = scanned.topics
        count, size = len(topics), len(scanned.blob)
        self.put_rate.add(count, now)
        self.put_bytes += size
        if topics.count(topics[0]) == count:  # one topic: the usual batch
            stats = self._topic(topics[0])
            stats.put_messages += count
            stats.put_bytes += size
            return
        for topic, record_size in zip(topics, scanned.sizes, strict=True):
            stats = self._topic(topic)
            stats.put_messages += 1
            stats.put_bytes += record_size

    def on_get(self, topic: str, records: Sequence[bytes]) -> None:
        """A pull of *topic* returned *records*."""
        self.on_get_totals(topic, len(records), sum(map(len, records)))

    def on_get_totals(self, topic: str, messages: int, size: int) -> None:
        """A pull of *topic* returned *messages* records of *size* bytes in all."""
        if not messages:
            return
        self.get_rate.add(messages)
        self.get_bytes += size
        stats = self._topic(topic)
        stats.get_messages += messages
        stats.get_bytes += size

    # -- readers --------------------------------------------------------------------------
    def figures(self) -> dict[str, str]:
        """GetBrokerRuntimeInfo rows (RocketMQ's ``putTps`` / ``getTransferedTps`` …).

        The put totals are the store's rows (``put_messages_total``,
        ``put_bytes_total``: every record appended, retries and delayed
        deliveries included); these add the producer side as ``sent_*``."""
        latency = self.put_latency
        return {
            "put_tps": f"{self.put_rate.rate(TPS_WINDOW_S):.2f}",
            "get_tps": f"{self.get_rate.rate(TPS_WINDOW_S):.2f}",
            "put_tps_1m": f"{self.put_rate.rate(TPS_WINDOW_LONG_S):.2f}",
            "get_tps_1m": f"{self.get_rate.rate(TPS_WINDOW_LONG_S):.2f}",
            "sent_messages_total": str(self.put_rate.total),
            "sent_bytes_total": str(self.put_bytes),
            "get_messages_total": str(self.get_rate.total),
            "get_bytes_total": str(self.get_bytes),
            "put_latency_avg_ms": f"{latency.sum_s * 1000 / max(latency.count, 1):.3f}",
        }
