"""Rebalance: which queues this member of a consumer group reads.

:class:`Rebalancer` computes the target assignment of one topic: all the
topic's readable queues (from the route) and all the group's member ids
(``GetConsumerListByGroup`` on a broker serving the topic), both sorted, fed
to the allocation strategy — or every queue when broadcasting. Members need
no coordinator; they agree because they see the same inputs.

:class:`Rebalancer` stays flat with many topics: within one round
(:meth:`Rebalancer.begin_round`) it asks each broker for the group's members
once, not once per topic, and a topic whose readable queues and member list
are what they were last round gets the same assignment object back without
running the strategy again, so the consumer skips applying it
(:attr:`Rebalancer.recomputed` counts the topics that were allocated anew).

:class:`RebalanceService` runs a consumer's rebalance every
``interval_s`` (20 s) and at once on :meth:`RebalanceService.wakeup` (the
broker's membership push); ``run_once()`` steps it.

:func:`resolve_start_offset` answers where a newly assigned queue starts: the
group's stored offset, else the consume-from policy (``last``: the queue's
end, ``first``: its beginning, ``timestamp``: the first message stored at or
after a time). A group's retry queue always starts at its beginning.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from pocketmq.client.allocate import AllocateStrategy
from pocketmq.client.errors import ClientError, RouteNotFoundError
from pocketmq.client.model import RETRY_GROUP_TOPIC_PREFIX, ConsumeFrom, MessageQueue
from pocketmq.client.remoting import BrokerClient
from pocketmq.client.route import RouteService
from pocketmq.client.tasks import cancel_and_wait, wait_event

__all__ = ["RebalanceService", "Rebalancer", "resolve_start_offset"]

log = logging.getLogger(__name__)


class _StoredOffsets(Protocol):
    async def read_stored(self, queue: MessageQueue) -> int | None: ...


class Rebalancer:
    def __init__(
        self,
        *,
        group: str,
        client_id: str,
        routes: RouteService,
        broker_of: Callable[[str], BrokerClient | None],
        strategy: AllocateStrategy,
        broadcasting: bool = False,
        timeout_s: float = 3.0,
    ) -> None:
        self.group = group
        self.client_id = client_id
        self._routes = routes
        self._broker_of = broker_of
        self._strategy = strategy
        self._broadcasting = broadcasting
        self._timeout_s = timeout_s
        # topic -> (readable queues, member ids, this member's queues) of its last allocation
        self._last: dict[
            str, tuple[tuple[MessageQueue, ...], tuple[str, ...], frozenset[MessageQueue]]
        ] = {}
        # broker name -> member ids, between begin_round and end_round
        self._ids_this_round: dict[str, list[str]] | None = None
        #: topics allocated anew (inputs changed); member-list calls made
        self.recomputed = 0
        self.member_list_calls = 0

    def begin_round(self) -> None:
        """Ask each broker for the member list once until :meth:`end_round`."""
        self._ids_this_round = {}

    def end_round(self) -> None:
        self._ids_this_round = None

    async def target(self, topic: str) -> frozenset[MessageQueue] | None:
        """This member's queues of *topic*; None when it cannot be known now."""
        try:
            route = await self._routes.get(topic)
        except RouteNotFoundError:
            if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                log.info("group %s: no route for topic %s yet", self.group, topic)
            return frozenset()
        except ClientError as exc:
            log.warning("group %s: cannot fetch the route of %s: %s", self.group, topic, exc)
            return None
        all_queues = route.read_queues()
        if self._broadcasting:
            return self._allocated(topic, all_queues, ())
        ids = await self.consumer_ids(sorted({q.broker_name for q in all_queues}))
        if ids is None:
            return None
        if self.client_id not in ids:
            # The broker has not heard this member yet (it restarted, or it is the
            # replica that took over the reads): keep what it reads until it has.
            log.info(
                "group %s: the broker's member list lacks %s; keeping its queues "
                "until its heartbeat arrives",
                self.group,
                self.client_id,
            )
            return None
        return self._allocated(topic, all_queues, sorted(ids))

    def _allocated(
        self, topic: str, all_queues: list[MessageQueue], ids: list[str] | tuple[()]
    ) -> frozenset[MessageQueue]:
        """This member's queues; the very object of last round when nothing changed."""
        queues_key, ids_key = tuple(all_queues), tuple(ids)
        last = self._last.get(topic)
        if last is not None and last[0] == queues_key and last[1] == ids_key:
            return last[2]
        self.recomputed += 1
        mine = frozenset(
            all_queues
            if self._broadcasting
            else self._strategy(self.group, self.client_id, all_queues, list(ids))
        )
        self._last[topic] = (queues_key, ids_key, mine)
        return mine

    async def consumer_ids(self, broker_names: list[str]) -> list[str] | None:
        """The group's members as one broker of the topic knows them."""
        for name in broker_names:
            cache = self._ids_this_round
            known = cache.get(name) if cache is not None else None
            if known is not None:
                return known
            broker = self._broker_of(name)
            if broker is None:
                continue
            try:
                self.member_list_calls += 1
                ids = await broker.consumer_ids(self.group, timeout_s=self._timeout_s)
                if cache is not None:
                    cache[name] = ids
                return ids
            except ClientError as exc:
                log.debug("group %s: member list from %s failed: %s", self.group, name, exc)
        log.warning("group %s: no broker answered for its member list", self.group)
        return None


class RebalanceService:
    """Calls *rebalance* every *interval_s* and whenever woken."""

    def __init__(
        self, rebalance: Callable[[], Awaitable[None]], *, interval_s: float = 20.0
    ) -> None:
        self._rebalance = rebalance
        self._interval_s = interval_s
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="RebalanceService")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    def wakeup(self) -> None:
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await wait_event(self._wake, self._interval_s)
            await self.run_once()

    async def run_once(self) -> None:
        self._wake.clear()
        self.rounds += 1
        try:
            await self._rebalance()
        except ClientError as exc:
            log.warning("rebalance failed: %s; retrying in %.0f s", exc, self._interval_s)


async def resolve_start_offset(
    queue: MessageQueue,
    broker: BrokerClient,
    offsets: _StoredOffsets,
    consume_from: ConsumeFrom,
    *,
    timestamp_ms: int,
    timeout_s: float = 3.0,
) -> int:
    stored = await offsets.read_stored(queue)
    if stored is not None and stored >= 0:
        return stored
    if queue.topic.startswith(RETRY_GROUP_TOPIC_PREFIX) or consume_from is ConsumeFrom.FIRST:
        return await broker.min_offset(queue, timeout_s=timeout_s)
    if consume_from is ConsumeFrom.LAST:
        return await broker.max_offset(queue, timeout_s=timeout_s)
    return await broker.offset_by_timestamp(queue, timestamp_ms, timeout_s=timeout_s)
