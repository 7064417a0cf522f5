"""RebalanceCoordinator: which queues this member reads, applied to the fetcher.

Each round (``RebalanceService``: every ``rebalance_interval_s``, and at once
when a broker says the group changed or a subscription changes) computes the
target of every subscribed topic with the
:class:`~pocketmq.client.rebalance.Rebalancer` (the group's members, the
allocation strategy), or takes the queues given to ``assign()``, and applies
it: queues that left are stopped and their offsets written at once, queues
that joined start at their stored offset or the consume-from policy, their
pull loops together (one PullBatch).

What a consumer plugs in (constructor arguments, each called, never
overridden): ``may_add`` (orderly consumers lock a queue before reading it)
and ``on_removed`` (orderly consumers unlock it), ``is_running``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from pocketmq.client.allocate import resolve_strategy
from pocketmq.client.config import _ConsumerCommon as ConsumerCommonConfig
from pocketmq.client.errors import ClientError
from pocketmq.client.fetcher import Fetcher
from pocketmq.client.model import MessageModel, MessageQueue
from pocketmq.client.offset_keeper import OffsetKeeper
from pocketmq.client.process_queue import ProcessQueue
from pocketmq.client.rebalance import Rebalancer, RebalanceService
from pocketmq.client.remoting import BrokerClient
from pocketmq.client.route import RouteService

if TYPE_CHECKING:  # subscription.py imports consumer_base, which imports this
    from pocketmq.client.subscription import SubscriptionState

__all__ = ["RebalanceCoordinator"]

log = logging.getLogger(__name__)

QueueSet = set[MessageQueue] | frozenset[MessageQueue]


class RebalanceCoordinator:
    """Rebalance rounds of one consumer, applied to its :class:`Fetcher` and offsets."""

    def __init__(
        self,
        *,
        group: str,
        client_id: str,
        config: ConsumerCommonConfig,
        routes: RouteService,
        broker_of: Callable[[str], BrokerClient | None],
        subscription: SubscriptionState,
        offsets: OffsetKeeper,
        fetcher: Fetcher,
        is_running: Callable[[], bool],
        may_add: Callable[[MessageQueue], Awaitable[bool]] | None = None,
        on_removed: Callable[[ProcessQueue], Awaitable[None]] | None = None,
    ) -> None:
        self._group = group
        self._client_id = client_id
        self._routes = routes
        self._broker_of = broker_of
        self._subscription = subscription
        self._offsets = offsets
        self._fetcher = fetcher
        self._is_running = is_running
        self._may_add = may_add
        self._on_removed = on_removed
        self.rebalancer = Rebalancer(
            group=group,
            client_id=client_id,
            routes=routes,
            broker_of=broker_of,
            strategy=resolve_strategy(config.allocate),
            broadcasting=config.message_model is MessageModel.BROADCASTING,
            timeout_s=config.rpc_timeout_s,
        )
        self._service = RebalanceService(
            self.rebalance_once, interval_s=config.rebalance_interval_s
        )
        self._lock = asyncio.Lock()
        # topic -> the Rebalancer's assignment last applied whole (see rebalance_once)
        self._applied: dict[str, frozenset[MessageQueue]] = {}

    async def start(self) -> None:
        """One round now, then the periodic rounds."""
        await self._service.run_once()
        self._service.start()

    async def stop(self) -> None:
        await self._service.stop()

    def wakeup(self) -> None:
        self._service.wakeup()

    def clear(self) -> None:
        self._applied.clear()

    # -- rounds ----------------------------------------------------------------------------
    async def rebalance_once(self) -> None:
        """One rebalance round over every subscribed topic (or the assigned queues)."""
        if not self._is_running():
            return
        if self._subscription.assigned is not None:
            await self._assigned_round(self._subscription.assigned)
            return
        async with self._lock:
            self.rebalancer.begin_round()
            try:
                for topic in self._subscription.all():
                    target = await self.rebalancer.target(topic)
                    # The same assignment object as the one applied whole: nothing to do.
                    if target is not None and target is not self._applied.get(topic):
                        await self._apply(topic, target)
            finally:
                self.rebalancer.end_round()

    async def _assigned_round(self, assigned: set[MessageQueue]) -> None:
        """The queues given to assign(), exactly, every topic's route fetched first."""
        async with self._lock:
            topics = {mq.topic for mq in assigned} | {mq.topic for mq in self._fetcher.pqs}
            for topic in sorted(topics):
                if any(mq.topic == topic for mq in assigned):
                    with contextlib.suppress(ClientError):
                        await self._routes.get(topic)
                await self._apply(topic, {mq for mq in assigned if mq.topic == topic})

    async def take_assignment(self, queue: MessageQueue | None = None) -> None:
        """Apply a pending assign() now, so that *queue* is read before it is used."""
        assigned = self._subscription.assigned
        pqs = self._fetcher.pqs
        if assigned is None or (queue is not None and queue in pqs):
            return
        if queue is None and set(pqs) == assigned:
            return
        await self.rebalance_once()

    async def _apply(self, topic: str, target: QueueSet) -> None:
        self._applied.pop(topic, None)
        current = {mq for mq in self._fetcher.pqs if mq.topic == topic}
        removed = sorted(current - target)
        added = sorted(target - current)
        for mq in removed:
            await self._remove(mq)
        with self._fetcher.starting_together():
            for mq in added:
                await self._add(mq)
        if {mq for mq in self._fetcher.pqs if mq.topic == topic} == target:
            self._applied[topic] = frozenset(target) if isinstance(target, set) else target
        if removed or added:
            log.info(
                "group %s member %s: topic %s now %s (+%d -%d)",
                self._group,
                self._client_id,
                topic,
                sorted(f"{q.broker_name}#{q.queue_id}" for q in target),
                len(added),
                len(removed),
            )

    async def _add(self, mq: MessageQueue) -> bool:
        broker = self._broker_of(mq.broker_name)
        if broker is None:
            return False
        if self._may_add is not None and not await self._may_add(mq):
            return False
        try:
            offset = await self._offsets.start_offset(mq, broker)
        except ClientError as exc:
            log.warning(
                "group %s: cannot find where %s starts: %s; next rebalance retries",
                self._group,
                mq,
                exc,
            )
            return False
        self._offsets.store.update(mq, offset, increase_only=False)
        self._fetcher.add(mq, offset)
        return True

    async def _remove(self, mq: MessageQueue) -> None:
        self._applied.pop(mq.topic, None)
        pq = await self._fetcher.remove(mq)
        if pq is None:
            return
        await self._offsets.release(mq, pq.committed_offset)
        if self._on_removed is not None:
            await self._on_removed(pq)
