"""The charts' figures: sampled by the dashboard every few seconds, one hour in memory.

:class:`HistoryService` asks the cluster every ``interval_s`` (5 s) and appends
one point per series to a ring of ``retention_s / interval_s`` points (720 for
the hour), so memory stays bounded however long it runs. Series keys::

    broker/{name}/{id}/put_tps     the broker's runtime info (10-second TPS)
    broker/{name}/{id}/get_tps
    topic/{topic}/put_tps          sum of the queues' max offsets, per second
    topic/{topic}/get_tps          the brokers' pocketmq_get_messages_total{topic}, per
                                   second (brokers with a metrics_port; scrape.py)
    group/{group}/lag              messages behind, over every queue of the group
    group/{group}/consume_tps      sum of the group's consumer offsets, per second

Brokers are sampled always; topics and groups once a page has shown them
(:meth:`watch_topic`, :meth:`watch_group`), at most ``MAX_WATCHED`` of each (the
least recently shown is dropped), so a cluster of 10,000 topics costs a
dashboard nobody looks at nothing. A sample that fails keeps its error in
:attr:`errors` for the page to show; the next one tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable

from pocketmq.client.admin import AdminClient
from pocketmq.client.errors import ClientError
from pocketmq.dashboard.scrape import ScrapeError, topic_totals

__all__ = ["MAX_WATCHED", "History", "HistoryService"]

log = logging.getLogger(__name__)

MAX_WATCHED = 32
Point = tuple[int, float]  # (wall-clock ms, value)


class History:
    """Rings of points by series key."""

    def __init__(self, *, retention_s: float = 3600.0, interval_s: float = 5.0) -> None:
        self.retention_s = retention_s
        self.interval_s = interval_s
        self._maxlen = max(2, int(retention_s / interval_s) + 1)
        self._series: dict[str, deque[Point]] = {}

    def add(self, key: str, t_ms: int, value: float) -> None:
        ring = self._series.get(key)
        if ring is None:
            ring = self._series[key] = deque(maxlen=self._maxlen)
        ring.append((t_ms, round(value, 3)))

    def points(self, key: str) -> list[Point]:
        return list(self._series.get(key, ()))

    def with_prefix(self, prefix: str) -> dict[str, list[Point]]:
        return {k: list(v) for k, v in sorted(self._series.items()) if k.startswith(prefix)}

    def drop_prefix(self, prefix: str) -> None:
        for key in [k for k in self._series if k.startswith(prefix)]:
            del self._series[key]


class HistoryService:
    """Samples the cluster into a :class:`History`; ``run_once()`` is one round."""

    def __init__(
        self, admin: AdminClient, history: History, *, now_ms: Callable[[], int] | None = None
    ) -> None:
        self.admin = admin
        self.history = history
        self._now_ms = now_ms or (lambda: int(time.time() * 1000))
        self._topics: OrderedDict[str, None] = OrderedDict()
        self._groups: OrderedDict[str, None] = OrderedDict()
        self._last: dict[str, Point] = {}  # counter series -> last (t_ms, total)
        self.errors: dict[str, str] = {}  # what the last round could not sample
        self._metrics_ports: dict[str, int] = {}  # broker address -> its metrics_port
        self._task: asyncio.Task[None] | None = None

    def watch_topic(self, topic: str) -> None:
        _touch(self._topics, topic, lambda old: self._forget(f"topic/{old}/"))

    def watch_group(self, group: str) -> None:
        _touch(self._groups, group, lambda old: self._forget(f"group/{old}/"))

    def _forget(self, prefix: str) -> None:
        self.history.drop_prefix(prefix)
        for key in [k for k in self._last if k.startswith(prefix)]:
            del self._last[key]

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="dashboard-history")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception:  # one bad round must not end the charts
                log.exception("dashboard: sampling failed")
            await asyncio.sleep(self.history.interval_s)

    async def run_once(self) -> None:
        errors: dict[str, str] = {}
        await asyncio.gather(
            self._brokers(errors),
            *(self._topic(t, errors) for t in list(self._topics)),
            *(self._group(g, errors) for g in list(self._groups)),
        )
        self.errors = errors

    async def _brokers(self, errors: dict[str, str]) -> None:
        try:
            info = await self.admin.cluster_info()
        except ClientError as exc:
            errors["cluster"] = str(exc)
            return

        async def one(name: str, broker_id: int, addr: str) -> None:
            try:
                table = await self.admin.broker_runtime_info(addr)
            except ClientError as exc:
                errors[f"broker/{name}/{broker_id}"] = str(exc)
                return
            t_ms = self._now_ms()
            for figure in ("put_tps", "get_tps"):
                self.history.add(
                    f"broker/{name}/{broker_id}/{figure}", t_ms, _number(table.get(figure))
                )

        await asyncio.gather(*(one(b.broker_name, b.broker_id, b.addr) for b in info.brokers))
        if self._topics:
            await self._topic_gets(
                [(f"{b.broker_name}/{b.broker_id}", b.addr) for b in info.brokers], errors
            )

    async def _metrics_port(self, addr: str) -> int:
        """The broker's metrics_port (its configuration, asked once); -1 when it has none."""
        port = self._metrics_ports.get(addr)
        if port is None:
            table = await self.admin.broker_config(addr)
            port = self._metrics_ports[addr] = int(table.get("metrics_port") or -1)
        return port

    async def _topic_gets(self, brokers: list[tuple[str, str]], errors: dict[str, str]) -> None:
        """Get TPS of the watched topics, from the brokers' Prometheus counters: the one
        per-topic figure of pulls the brokers have (when they serve /metrics)."""

        async def one(label: str, addr: str) -> dict[str, float] | None:
            try:
                port = await self._metrics_port(addr)
                if port <= 0:
                    return None
                return (
                    await topic_totals(
                        addr.rpartition(":")[0].strip("[]"), port, timeout_s=self.admin.timeout_s
                    )
                ).get("get", {})
            except (ClientError, ScrapeError, ValueError) as exc:
                errors[f"metrics/{label}"] = str(exc)
                return None

        found = [t for t in await asyncio.gather(*(one(*b) for b in brokers)) if t is not None]
        if not found:
            return
        for topic in list(self._topics):
            self._rate(f"topic/{topic}/get_tps", int(sum(t.get(topic, 0) for t in found)))

    async def _topic(self, topic: str, errors: dict[str, str]) -> None:
        try:
            queues = await self.admin.topic_status(topic)
        except ClientError as exc:
            errors[f"topic/{topic}"] = str(exc)
            return
        self._rate(f"topic/{topic}/put_tps", sum(q.max_offset for q in queues))

    async def _group(self, group: str, errors: dict[str, str]) -> None:
        try:
            progress = await self.admin.consume_progress(group)
        except ClientError as exc:
            errors[f"group/{group}"] = str(exc)
            return
        self.history.add(f"group/{group}/lag", self._now_ms(), sum(q.lag for q in progress))
        self._rate(f"group/{group}/consume_tps", sum(max(q.consumer_offset, 0) for q in progress))

    def _rate(self, key: str, total: int) -> None:
        """A per-second rate from a growing total; a total that fell (offsets reset,
        a queue deleted) restarts the series' base instead of drawing a negative rate."""
        t_ms = self._now_ms()
        last = self._last.get(key)
        self._last[key] = (t_ms, total)
        if last is None or t_ms <= last[0]:
            return
        self.history.add(key, t_ms, max(0, total - last[1]) * 1000 / (t_ms - last[0]))


def _touch(watched: OrderedDict[str, None], name: str, dropped: Callable[[str], None]) -> None:
    watched[name] = None
    watched.move_to_end(name)
    while len(watched) > MAX_WATCHED:
        old, _ = watched.popitem(last=False)
        dropped(old)


def _number(text: str | None) -> float:
    try:
        return float(text or 0)
    except ValueError:
        return 0.0
