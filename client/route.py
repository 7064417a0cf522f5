"""Topic routes: which brokers serve a topic, with how many queues, at which address.

:class:`TopicRoute` is the nameserver's answer as plain values; it derives
the writable queues a producer round-robins over and the readable queues a
consumer group divides. :class:`RouteService` caches routes per topic,
refreshes every cached topic every ``refresh_interval_s`` (30 s) in its
background task (``run_once()`` steps it), refetches a topic at once after a
failed call (:meth:`RouteService.invalidate`), and knows every member of
every broker name any route mentioned (:class:`~pocketmq.client.members.MemberTable`):
writes go to a name's master (:meth:`RouteService.addr_of`), reads to its
master while live, else to a replica (:meth:`RouteService.read_addr`). A call
that finds an address unreachable reports it (:meth:`RouteService.mark_unreachable`):
reads avoid it for ``suspect_s`` and the routes naming it are refetched at
once, at most once per ``failure_refresh_interval_s`` per broker name.

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
from dataclasses import dataclass, field, replace

from pocketmq.client.errors import ClientError, RouteNotFoundError
from pocketmq.client.members import DEFAULT_SUSPECT_S, MASTER_ID, MemberTable
from pocketmq.client.model import MessageQueue
from pocketmq.client.tasks import cancel_and_wait
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.model import QueueData

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
FAILURE_REFRESH_INTERVAL_S = 1.0  # least time between two failure-driven route refetches


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicRoute:
    topic: str
    queue_datas: tuple[QueueData, ...]
    broker_addrs: dict[str, dict[int, str]] = field(default_factory=dict)  # name -> id -> addr
    provisional: bool = False  # borrowed from the auto-create template topic
    master_epochs: dict[str, int] = field(default_factory=dict)  # name -> master epoch (if known)

    def master_addr(self, broker_name: str) -> str | None:
        return self.broker_addrs.get(broker_name, {}).get(MASTER_ID)

    def write_queues(self) -> list[MessageQueue]:
        """Queues a producer may send to: writable, with a live master."""
        return [
            MessageQueue(self.topic, qd.broker_name, i)
            for qd in sorted(self.queue_datas, key=lambda q: q.broker_name)
            if qd.perm & PERM_WRITE and self.master_addr(qd.broker_name)
            for i in range(qd.write_queue_nums)
        ]

    def read_queues(self) -> list[MessageQueue]:
        """Queues a consumer group divides among its members, sorted: those of every
        broker name with a live member (a replica serves reads while the master is away)."""
        return sorted(
            MessageQueue(self.topic, qd.broker_name, i)
            for qd in self.queue_datas
            if qd.perm & PERM_READ and self.broker_addrs.get(qd.broker_name)
            for i in range(qd.read_queue_nums)
        )

    def for_topic(self, topic: str) -> TopicRoute:
        """This route lent to another topic (the auto-create template case)."""
        return TopicRoute(
            topic=topic,
            queue_datas=self.queue_datas,
            broker_addrs=self.broker_addrs,
            provisional=True,
            master_epochs=self.master_epochs,
        )

    def with_members(
        self, broker_name: str, members: dict[int, str], master_epoch: int
    ) -> TopicRoute:
        """This route with *broker_name*'s members (and epoch) replaced."""
        return replace(
            self,
            broker_addrs={**self.broker_addrs, broker_name: members},
            master_epochs={**self.master_epochs, broker_name: master_epoch},
        )


RouteFetcher = Callable[[str], Awaitable[TopicRoute]]
# Many routes in one call: (routes found, topics nobody serves).
ManyRouteFetcher = Callable[[list[str]], Awaitable[tuple[dict[str, TopicRoute], list[str]]]]
ROUTES_PER_CALL = 1_000  # the nameserver's bound on GetTopicRoutes by names


@dataclass(slots=True)
class _Entry:
    route: TopicRoute
    fetched_at_s: float
    stale: bool = False
    write_queues: list[MessageQueue] = field(default_factory=list)


class RouteService:
    """Per-topic route cache with periodic and on-failure refresh."""

    def __init__(
        self,
        fetch: RouteFetcher,
        *,
        refresh_interval_s: float = 30.0,
        provisional_ttl_s: float = 1.0,
        clock: Clock | None = None,
        suspect_s: float = DEFAULT_SUSPECT_S,
        failure_refresh_interval_s: float = FAILURE_REFRESH_INTERVAL_S,
        fetch_many: ManyRouteFetcher | None = None,
    ) -> None:
        self._fetch = fetch
        self._fetch_many = fetch_many
        self._refresh_interval_s = refresh_interval_s
        self._provisional_ttl_s = provisional_ttl_s
        self._clock = clock or SystemClock()
        self.members = MemberTable(suspect_s=suspect_s, clock=self._clock)
        self._failure_refresh_interval_s = failure_refresh_interval_s
        self._failure_refreshed_at: dict[str, float] = {}  # broker name -> monotonic s
        self._refreshes: set[asyncio.Task[None]] = set()
        self._routes: dict[str, _Entry] = {}
        self._inflight: dict[str, asyncio.Future[TopicRoute]] = {}
        self._task: asyncio.Task[None] | None = None
        self._listeners: list[Callable[[TopicRoute], None]] = []

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="RouteRefreshService"
            )

    async def stop(self) -> None:
        await cancel_and_wait(self._task, *self._refreshes)
        self._task = None
        self._refreshes.clear()

    async def _run(self) -> None:
        """Every cached topic each ``refresh_interval_s``; more often (every suspect
        period) the topics of a broker name read from a replica, so that reads return
        to the master soon after the route shows it again."""
        tick_s = min(
            self._refresh_interval_s, max(self.members.suspect_s, self._failure_refresh_interval_s)
        )
        last_full_s = self._clock.monotonic()
        while True:
            await asyncio.sleep(tick_s)
            if self._clock.monotonic() - last_full_s >= self._refresh_interval_s - tick_s / 2:
                last_full_s = self._clock.monotonic()
                await self.run_once()
            else:
                await self._refresh_quietly(self.degraded_topics())

    def degraded_topics(self) -> list[str]:
        """Cached topics with a broker name whose master is absent or suspect."""
        return [
            t
            for t, e in self._routes.items()
            if any(not self.members.master_usable(name) for name in e.route.broker_addrs)
        ]

    async def run_once(self) -> None:
        """Refetch every cached topic, a thousand a call when the fetcher can (a client of
        thousands of topics costs the nameserver a few calls, not one per topic); failures
        keep the old route. A topic nobody serves any more is asked alone (a template
        route may stand for it)."""
        topics = list(self._routes)
        alone = topics
        if self._fetch_many is not None:
            alone = []
            for i in range(0, len(topics), ROUTES_PER_CALL):
                chunk = topics[i : i + ROUTES_PER_CALL]
                try:
                    routes, missing = await self._fetch_many(chunk)
                except ClientError as exc:
                    log.debug("route refresh of %d topics failed: %s", len(chunk), exc)
                    continue
                for topic, route in routes.items():
                    if topic in self._routes:
                        self._keep(route)
                alone.extend(missing)
        for topic in alone:
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
        return self.members.masters()

    def addr_of(self, broker_name: str) -> str | None:
        """The master's address: where writes (and queue locks) go."""
        return self.members.master(broker_name)

    def read_addr(self, broker_name: str) -> str | None:
        """Where a read goes now: the master, or a replica while it is away."""
        return self.members.read_addr(broker_name)

    def member_addrs(self) -> set[str]:
        """Every master and replica address over every route fetched so far."""
        return self.members.all_addrs()

    # -- failures -----------------------------------------------------------------------
    def mark_unreachable(self, addr: str) -> None:
        """A call found *addr* unreachable: reads avoid it for a while, and the routes
        naming it are refetched now (a promotion or expiry shows at once)."""
        if self.members.mark_suspect(addr):
            log.info(
                "broker %s did not answer; reads avoid it for %.1f s", addr, self.members.suspect_s
            )
        now = self._clock.monotonic()
        names = set()
        for name in self.members.names_at(addr):
            last = self._failure_refreshed_at.get(name)
            if last is None or now - last >= self._failure_refresh_interval_s:
                self._failure_refreshed_at[name] = now
                names.add(name)
        topics = [t for t, e in self._routes.items() if names & e.route.broker_addrs.keys()]
        if not topics:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a unit test's plain call): refetch on next use
            for topic in topics:
                self.invalidate(topic)
            return
        task = loop.create_task(self._refresh_quietly(topics), name="RouteRefreshOnFailure")
        self._refreshes.add(task)
        task.add_done_callback(self._refreshes.discard)

    def redirect(self, broker_name: str, master_addr: str, master_epoch: int) -> bool:
        """A NOT_MASTER answer: *master_addr* is *broker_name*'s master in *master_epoch*.
        Taken (True) only for an epoch newer than the one held; every cached route naming
        the broker name then sends there at once."""
        if not self.members.redirect(broker_name, master_addr, master_epoch):
            return False
        log.info(
            "broker %s: master is now %s (epoch %d), told by a NOT_MASTER answer",
            broker_name,
            master_addr,
            master_epoch,
        )
        members = self.members.members(broker_name)
        for entry in self._routes.values():
            if broker_name in entry.route.broker_addrs:
                entry.route = entry.route.with_members(broker_name, members, master_epoch)
                entry.write_queues = entry.route.write_queues()
        return True

    async def _refresh_quietly(self, topics: list[str]) -> None:
        for topic in topics:
            try:
                await self.refresh(topic)
            except ClientError as exc:
                log.debug("route refresh for %s after a failure failed: %s", topic, exc)

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
        """The writable queues of *topic*, from the cached route (fetched when missing or stale)."""
        route = await self.get(topic, allow_template=True)
        entry = self._routes.get(topic)
        queues = (
            entry.write_queues
            if entry is not None and entry.route is route
            else route.write_queues()
        )
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
                raise RouteNotFoundError(
                    topic, "no broker serves it and none auto-creates topics; create it first"
                ) from None
        return self._keep(route)

    def _keep(self, route: TopicRoute) -> TopicRoute:
        """Cache a fetched route (its members merged with newer ones already seen)."""
        topic = route.topic
        stale = self.members.update(route.broker_addrs, route.master_epochs)
        for name in stale:
            # An older master term than one already seen (a lagging nameserver): keep ours.
            log.info(
                "route of %s names master epoch %d for %s, older than %d; kept the newer",
                topic,
                route.master_epochs.get(name, 0),
                name,
                self.members.master_epoch(name),
            )
            route = route.with_members(
                name, self.members.members(name), self.members.master_epoch(name)
            )
        self._routes[topic] = _Entry(
            route, self._clock.monotonic(), write_queues=route.write_queues()
        )
        for listener in self._listeners:
            listener(route)
        return route
