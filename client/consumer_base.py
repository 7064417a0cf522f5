"""What push and pull consumers share: the parts they are assembled from.

A consumer is composed of small parts, each owning one role, wired together by
:func:`assemble` with explicit callbacks (no subclass hooks)::

    SubscriptionState ─┐        topics and selectors, or assigned queues
    OffsetKeeper ──────┤        the offset store, start offsets, the commit task
    Fetcher ───────────┤        the queue table, one pull loop per queue (PullBatch)
    RebalanceCoordinator        rounds of the Rebalancer applied to the fetcher
    QueueLocks (orderly push)   broker locks: taken, renewed, released
    RouteService, HeartbeatService, Remoting: routes, membership, channels

and owns, cancelling them in :meth:`ConsumerParts.stop`: the route refresh
(every 30 s), the heartbeat (membership on every broker; the broker's
``NotifyConsumerIdsChangedCommand`` wakes the rebalance), the rebalance rounds (every
20 s), the offset commit task (every ``commit_interval_s``, 5 s), the pull
loops, and an orderly consumer's lock renewal.

The consumers (:class:`~pocketmq.client.push_consumer.PushConsumer`,
:class:`~pocketmq.client.pull_consumer.PullConsumer`) hold a
:class:`SubscriptionState` from construction and a :class:`ConsumerParts`
while started; what each does differently is what it passes to
:func:`assemble`. Reads go to a broker name's master while it answers, else a
replica (:mod:`.fetcher`); writes (send-back) and queue locks go to the master
only. A rebalance adds queues (starting at the stored offset or the
consume-from policy) and drops queues (their pull loop stops, their committed
offset is written at once, late handler results for them are ignored).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pocketmq.client.config import ConsumerConfig, transport
from pocketmq.client.config import _ConsumerCommon as ConsumerCommonConfig
from pocketmq.client.coordinator import RebalanceCoordinator
from pocketmq.client.errors import ClientError, PermissionDeniedError
from pocketmq.client.fetcher import Fetcher
from pocketmq.client.heartbeat import HeartbeatService
from pocketmq.client.model import MessageExt, MessageModel, MessageQueue
from pocketmq.client.offset_keeper import OffsetKeeper
from pocketmq.client.process_queue import ProcessQueue
from pocketmq.client.queue_locks import QueueLocks
from pocketmq.client.remoting import (
    BrokerClient,
    ChannelOpened,
    ConsumerIdsChanged,
    ConsumerInfo,
    Remoting,
    ResetConsumerOffset,
    ServerCommand,
)
from pocketmq.client.route import RouteService
from pocketmq.common.clock import Clock
from pocketmq.common.filter.tags import parse_tag_expression

if TYPE_CHECKING:
    from pocketmq.client.subscription import SubscriptionState

__all__ = [
    "BrokerLookup",
    "ConsumerParts",
    "ConsumerWiring",
    "assemble",
    "consumer_info",
    "parse_subscription",
]

log = logging.getLogger(__name__)


def parse_subscription(expression: str) -> frozenset[str] | None:
    """``"*"``/``""`` -> None (every tag); ``"A || B"`` -> {"A", "B"}; a ValueError else."""
    return parse_tag_expression(expression, what="subscription")


def consumer_info(
    group: str, config: ConsumerCommonConfig, subscription: SubscriptionState, *, push: bool
) -> ConsumerInfo:
    """What heartbeats tell brokers about this consumer group."""
    return ConsumerInfo(
        group=group,
        push=push,
        broadcasting=config.message_model is MessageModel.BROADCASTING,
        consume_from=str(config.consume_from),
        subscriptions=dict(subscription.all()),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerParts:
    """The parts of one started consumer (built by :func:`assemble`)."""

    group: str
    remoting: Remoting
    routes: RouteService
    brokers: BrokerLookup
    heartbeat: HeartbeatService
    offsets: OffsetKeeper
    fetcher: Fetcher
    coordinator: RebalanceCoordinator
    locks: QueueLocks | None = None  # orderly push consumers in clustering mode

    async def connect(self, topics: Sequence[str]) -> None:
        """Load the offsets, fetch the routes of *topics*, join the group on every broker."""
        await self.offsets.load()
        for topic in topics:
            with contextlib.suppress(ClientError):
                await self.routes.get(topic)
        self.routes.start()
        await self.heartbeat.start()

    async def run(self) -> None:
        """The first rebalance round, then the background tasks (the consumer is running)."""
        await self.coordinator.start()
        self.offsets.start()
        if self.locks is not None:
            self.locks.start()

    def refusal(self) -> PermissionDeniedError | None:
        """Why this consumer may not consume at all: the ACL refused the group (or a
        subscribed topic) on every broker the last heartbeat reached; None otherwise."""
        refused = self.heartbeat.refused_everywhere()
        if refused is None:
            return None
        return PermissionDeniedError(
            f"consumer group {self.group!r} may not consume here: {refused}", code=refused.code
        )

    async def stop(self) -> None:
        """Stop rebalancing and pulling; handlers in progress may still finish."""
        await self.coordinator.stop()
        await self.offsets.stop()
        await self.fetcher.stop()
        if self.locks is not None:
            await self.locks.stop()

    async def close(self) -> None:
        """Write offsets, release locks, leave the group on every broker, close channels."""
        pqs = self.fetcher.drop_all()
        await self.offsets.close()
        if self.locks is not None:
            await self.locks.release(pqs)
        # Leave first, then close the command streams (a closed stream would
        # also make the broker drop this client, but logged as a vanished one).
        await self.heartbeat.unregister(consumer_group=self.group)
        await self.heartbeat.stop()
        await self.routes.stop()
        await self.remoting.close()
        self.fetcher.pqs.clear()
        self.coordinator.clear()


class _BrokerCommands:
    """What a broker's command stream asks of a consumer: rebalance now, or continue
    elsewhere (an admin reset the group's offsets)."""

    def __init__(
        self,
        group: str,
        is_running: Callable[[], bool],
        forget: Callable[[ProcessQueue], None] | None,
    ) -> None:
        self._group = group
        self._is_running = is_running
        self._forget = forget
        self.parts: ConsumerParts | None = None  # set once assembled

    def __call__(self, command: ServerCommand) -> None:
        parts = self.parts
        if parts is None:
            return
        if isinstance(command, ConsumerIdsChanged) and command.group == self._group:
            log.info("group %s changed on a broker; rebalancing now", self._group)
            parts.coordinator.wakeup()
        elif isinstance(command, ChannelOpened):
            parts.coordinator.wakeup()
        elif isinstance(command, ResetConsumerOffset) and command.group == self._group:
            self._reset_offsets(parts, command)

    def _reset_offsets(self, parts: ConsumerParts, command: ResetConsumerOffset) -> None:
        """An admin moved the group (RESET_CONSUMER_CLIENT_OFFSET): each of those queues
        this member reads drops what it buffered and continues at its new offset."""
        if not self._is_running():
            return
        moved = {}
        for queue_id, offset in sorted(command.offsets.items()):
            pq = parts.fetcher.pqs.get(MessageQueue(command.topic, command.broker_name, queue_id))
            if pq is not None and not pq.dropped:
                parts.offsets.store.reset(pq.queue, offset)
                if self._forget is not None:
                    self._forget(pq)
                parts.fetcher.restart(pq, offset)
                moved[queue_id] = offset
        log.info(
            "group %s: an admin reset %s on %s; this member continues at %s",
            self._group,
            command.topic,
            command.broker_name,
            moved or "no queue it reads",
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerWiring:
    """What a consumer plugs into its parts (:func:`assemble`): each a value or a callback
    the parts call, never a method they expect overridden."""

    push: bool  # heartbeats say CONSUME_PASSIVELY (push) or CONSUME_ACTIVELY (pull)
    is_running: Callable[[], bool]  # rebalances and offset resets happen only then
    on_messages: Callable[[ProcessQueue, list[MessageExt]], None]  # what each pull found
    auto_commit: bool = True  # commit task, offsets on pulls, last write at shutdown
    max_span: int | None = None  # a process queue's offset span (concurrent push)
    orderly_locks: bool = False  # read only queues locked on their master (orderly push)
    forget: Callable[[ProcessQueue], None] | None = None  # a process queue replaced or gone
    warn_once: Callable[..., None] = log.warning  # (key, text, *args): a missing feature


def assemble(
    *,
    group: str,
    client_id: str,
    namesrv: Sequence[str],
    config: ConsumerCommonConfig,
    clock: Clock,
    subscription: SubscriptionState,
    wiring: ConsumerWiring,
) -> ConsumerParts:
    """Build a consumer's parts, wired (nothing started: :meth:`ConsumerParts.connect`).
    *config* is a ConsumerConfig when ``wiring.orderly_locks``."""
    remoting, routes, brokers = _connections(namesrv, config, clock)
    offsets = OffsetKeeper(group, config, brokers.read, clock=clock, auto_commit=wiring.auto_commit)
    fetcher, coordinator, locks = _readers(
        group, client_id, config, clock, routes, brokers, subscription, offsets, wiring
    )
    commands = _BrokerCommands(group, wiring.is_running, wiring.forget)
    heartbeat = HeartbeatService(
        remoting,
        routes,
        client_id,
        consumers=lambda: [consumer_info(group, config, subscription, push=wiring.push)],
        interval_s=config.heartbeat_interval_s,
        on_command=commands,
        timeout_s=config.rpc_timeout_s,
        replicas=True,
    )
    commands.parts = parts = ConsumerParts(
        group=group,
        remoting=remoting,
        routes=routes,
        brokers=brokers,
        heartbeat=heartbeat,
        offsets=offsets,
        fetcher=fetcher,
        coordinator=coordinator,
        locks=locks,
    )
    subscription.on_change = coordinator.wakeup
    return parts


def _readers(
    group: str,
    client_id: str,
    config: ConsumerCommonConfig,
    clock: Clock,
    routes: RouteService,
    brokers: BrokerLookup,
    subscription: SubscriptionState,
    offsets: OffsetKeeper,
    wiring: ConsumerWiring,
) -> tuple[Fetcher, RebalanceCoordinator, QueueLocks | None]:
    """The fetcher and the rebalance coordinator, with an orderly consumer's locks
    plugged into both."""
    fetcher: Fetcher  # the locks renew the fetcher's queues; built below
    locks = None
    if wiring.orderly_locks:
        assert isinstance(config, ConsumerConfig)
        locks = QueueLocks(
            group=group,
            client_id=client_id,
            config=config,
            routes=routes,
            master=brokers.master,
            queues=lambda: fetcher.pqs.values(),
            clock=clock,
            warn_once=wiring.warn_once,
        )
    fetcher = Fetcher(
        group=group,
        config=config,
        routes=routes,
        subscription=subscription,
        offsets=offsets,
        pull_broker=brokers.master if locks else brokers.read,  # the lock holder reads there
        on_messages=wiring.on_messages,
        ready_to_pull=locks.ready_to_pull if locks else None,
        on_pull_start=locks.mark_locked if locks else None,
        max_span=wiring.max_span,
    )
    coordinator = RebalanceCoordinator(
        group=group,
        client_id=client_id,
        config=config,
        routes=routes,
        broker_of=brokers.read,
        subscription=subscription,
        offsets=offsets,
        fetcher=fetcher,
        is_running=wiring.is_running,
        may_add=locks.may_add if locks else None,
        on_removed=_on_removed(wiring.forget, locks),
    )
    return fetcher, coordinator, locks


def _connections(
    namesrv: Sequence[str], config: ConsumerCommonConfig, clock: Clock
) -> tuple[Remoting, RouteService, BrokerLookup]:
    """Channels and routes; a broker call that gets no answer makes its route suspect."""
    remoting = Remoting(transport(config))
    nameserver = remoting.nameserver(namesrv)
    routes = RouteService(
        nameserver.get_route,
        fetch_many=nameserver.get_routes,
        refresh_interval_s=config.route_refresh_interval_s,
        clock=clock,
        suspect_s=config.unreachable_suspect_s,
    )
    remoting.on_unreachable = routes.mark_unreachable
    return remoting, routes, BrokerLookup(remoting, routes)


class BrokerLookup:
    """Broker name -> the client its reads go to (the master while it answers, else a
    replica), or its writes and locks (the master only); None while the route has none."""

    def __init__(self, remoting: Remoting, routes: RouteService) -> None:
        self._remoting = remoting
        self._routes = routes

    def read(self, broker_name: str) -> BrokerClient | None:
        addr = self._routes.read_addr(broker_name)
        return self._remoting.broker(addr) if addr else None

    def master(self, broker_name: str) -> BrokerClient | None:
        addr = self._routes.addr_of(broker_name)
        return self._remoting.broker(addr) if addr else None


def _on_removed(
    forget: Callable[[ProcessQueue], None] | None, locks: QueueLocks | None
) -> Callable[[ProcessQueue], Any] | None:
    """A queue left this member: the consume service forgets it, its lock is released."""
    if forget is None and locks is None:
        return None

    async def removed(pq: ProcessQueue) -> None:
        if forget is not None:
            forget(pq)
        if locks is not None:
            await locks.unlock(pq.queue.broker_name, [pq.queue])

    return removed
