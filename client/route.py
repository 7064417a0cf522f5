"""Topic routes: which brokers serve a topic, with how many queues, at which address.

:class:`TopicRoute` is the nameserver's answer as plain values; it derives
the writable queues a producer round-robins over and the readable queues a
consumer group divides. :class:`RouteService` caches routes per topic,
refreshes every cached topic every ``refresh_interval_s`` (30 s) in its
background task (``run_once()`` steps it), refetches a topic at once after a
failed call (:meth:`RouteService.invalidate`), and knows every broker address
any route mentioned.

A topic no broker knows yet may still be sent to: the route of the broker's
auto-create template topic ``TBW102`` stands in for it (as RocketMQ's
producer does); such a *provisional* route is refetched after
``provisional_ttl_s`` so the real route takes over once the broker created
the topic and re-registered.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from pocketmq.client.errors import ClientError, RouteNotFoundError
from pocketmq.client.model import MessageQueue
from pocketmq.client.tasks import cancel_and_wait
from pocketmq.common.clock import Clock, SystemClock

__all__ = [
    "AUTO_CREATE_TOPIC",
    "PERM_READ",
    "PERM_WRITE",
    "QueueData",
    "RouteService",
    "TopicRoute",
]

log = logging.getLogger(__name__)

AUTO_CREATE_TOPIC = "TBW102"
PERM_WRITE = 2
PERM_READ = 4
MASTER_ID = 0


@dataclass(frozen=True, slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicRoute:
    topic: str
    queue_datas: tuple[QueueData, ...]
    broker_addrs: dict[str, dict[int, str]] = field(default_factory=dict)  # name -> id -> addr
    provisional: bool = False   # borrowed from the auto-create template topic

    def master_addr(self, broker_name: str) -> str | None:
        return self.broker_addrs.get(broker_name, {}).get(MASTER_ID)

    def write_queues(self) -> list[MessageQueue]:
        """Queues a producer may send to: writable, with a live master."""
        return [MessageQueue(self.topic, qd.broker_name, i)
                for qd in sorted(self.queue_datas, key=lambda q: q.broker_name)
                if qd.perm & PERM_WRITE and self.master_addr(qd.broker_name)
                for i in range(qd.write_queue_nums)]

    def read_queues(self) -> list[MessageQueue]:
        """Queues a consumer group divides among its members, sorted."""
        return sorted(MessageQueue(self.topic, qd.broker_name, i)
                      for qd in self.queue_datas
                      if qd.perm & PERM_READ and self.master_addr(qd.broker_name)
                      for i in range(qd.read_queue_nums))

    def for_topic(self, topic: str) -> TopicRoute:
        """This route lent to another topic (the auto-create template case)."""
        return TopicRoute(topic=topic, queue_datas=self.queue_datas,
                          broker_addrs=self.broker_addrs, provisional=True)


RouteFetcher = Callable[[str], Awaitable[TopicRoute]]


@dataclass(slots=True)
class _Entry:
    route: TopicRoute
    fetched_at_s: float
    stale: bool = False
    write_queues: list[MessageQueue] = field(default_factory=list)


class RouteService:
    """Per-topic route cache with periodic and on-failure refresh."""

    def __init__(self, fetch: RouteFetcher, *, refresh_interval_s: float = 30.0,
                 provisional_ttl_s: float = 1.0, clock: Clock | None = None) -> None:
        self._fetch = fetch
        self._refresh_interval_s = refresh_interval_s
        self._provisional_ttl_s = provisional_ttl_s
        self._clock = clock or SystemClock()
        self._routes: dict[str, _Entry] = {}
        self._inflight: dict[str, asyncio.Future[TopicRoute]] = {}
        self._task: asyncio.Task[None] | None = None
        self._listeners: list[Callable[[TopicRoute], None]] = []
        self._addrs: dict[str, str] = {}   # broker name -> master address, every route

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="RouteRefreshService")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_interval_s)
            await self.run_once()

    async def run_once(self) -> None:
        """Refetch every cached topic; failures keep the old route."""
        for topic in list(self._routes):
            try:
                await self.refresh(topic)
            except ClientError as exc:
                log.debug("route refresh for %s failed: %s", topic, exc)

    # -- reads --------------------------------------------------------------------------
    def add_listener(self, listener: Callable[[TopicRoute], None]) -> None:
        """Called with each newly fetched route (heartbeats learn new brokers from it)."""
        self._listeners.append(listener)

    def cached(self, topic: str) -> TopicRoute | None:
        entry = self._routes.get(topic)
        return entry.route if entry else None

    def broker_addrs(self) -> dict[str, str]:
        """Broker name -> master address over every route fetched so far."""
        return dict(self._addrs)

    def addr_of(self, broker_name: str) -> str | None:
        return self._addrs.get(broker_name)

    async def get(self, topic: str, *, allow_template: bool = False) -> TopicRoute:
        """The route, fetched when missing, stale or expired."""
        entry = self._routes.get(topic)
        if entry is not None and not self._expired(entry):
            return entry.route
        try:
            return await self.refresh(topic, allow_template=allow_template)
        except ClientError:
            if entry is not None:  # a stale route beats none while the nameserver is away
                return entry.route
            raise

    def cached_write_queues(self, topic: str) -> list[MessageQueue] | None:
        """The writable queues of a fresh cached route, without a coroutine; None when
        :meth:`write_queues` must fetch or check (the per-send fast path)."""
        entry = self._routes.get(topic)
        if entry is None or self._expired(entry) or not entry.write_queues:
            return None
        return entry.write_queues

    async def write_queues(self, topic: str) -> list[MessageQueue]:
        route = await self.get(topic, allow_template=True)
        entry = self._routes.get(topic)
        queues = entry.write_queues if entry is not None and entry.route is route else \
            route.write_queues()
        if not queues:
            raise RouteNotFoundError(topic, "no broker has a writable queue for it")
        return queues

    def invalidate(self, topic: str) -> None:
        """Refetch on next use (a call to one of its brokers failed)."""
        entry = self._routes.get(topic)
        if entry is not None:
            entry.stale = True

    def _expired(self, entry: _Entry) -> bool:
        ttl = self._provisional_ttl_s if entry.route.provisional else self._refresh_interval_s
        return entry.stale or self._clock.monotonic() - entry.fetched_at_s >= ttl

    # -- fetch --------------------------------------------------------------------------
    async def refresh(self, topic: str, *, allow_template: bool = False) -> TopicRoute:
        """Fetch now; concurrent callers share one request per topic."""
        pending = self._inflight.get(topic)
        if pending is None:
            pending = asyncio.ensure_future(self._fetch_route(topic, allow_template))
            self._inflight[topic] = pending
            pending.add_done_callback(lambda _f: self._inflight.pop(topic, None))
        return await asyncio.shield(pending)

    async def _fetch_route(self, topic: str, allow_template: bool) -> TopicRoute:
        try:
            route = await self._fetch(topic)
        except RouteNotFoundError:
            entry = self._routes.get(topic)
            if not allow_template and not (entry and entry.route.provisional):
                raise
            try:
                route = (await self._fetch(AUTO_CREATE_TOPIC)).for_topic(topic)
            except RouteNotFoundError:
                raise RouteNotFoundError(topic, "no broker serves it and none auto-creates "
                                                "topics; create it first") from None
        self._routes[topic] = _Entry(route, self._clock.monotonic(),
                                     write_queues=route.write_queues())
        for name, members in route.broker_addrs.items():
            if MASTER_ID in members:
                self._addrs[name] = members[MASTER_ID]
        for listener in self._listeners:
            listener(route)
        return route
