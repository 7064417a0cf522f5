"""PullConsumer: lite pull — the application asks for messages when it wants them.

::

    consumer = PullConsumer(group="cg", namesrv="127.0.0.1:9876", consume_from="first")
    consumer.subscribe("orders", "*")          # queues divided by rebalance, or:
    await consumer.start()
    messages = await consumer.poll(timeout_s=1.0)

    consumer = PullConsumer(group="cg", namesrv="127.0.0.1:9876")   # assigned queues
    await consumer.start()                     # nothing to read yet: that is fine
    queues = await consumer.fetch_message_queues("orders")
    consumer.assign(queues[:2], "TagA || TagB")  # usable at once (a selector: optional):
    await consumer.seek(queues[0], 42)
    messages = await consumer.poll(timeout_s=1.0)

As in RocketMQ's lite pull consumer and Kafka's consumer, ``start()`` needs
neither a subscription nor an assignment, ``fetch_message_queues`` works on a
started consumer, and an assignment takes effect at once: ``seek`` and
``poll`` right after ``assign`` find the queues there. ``start()`` raises
PermissionDeniedError when every broker's ACL refuses the group.

Assigned queues are pulled in the background into per-queue buffers (the
same long-polling loops and flow control as the push consumer); ``poll``
takes up to ``max_poll_messages`` of what has arrived. A polled message
counts as consumed: its queue's offset moves past it, and is committed every
``commit_interval_s`` (``auto_commit=True``, default) or by ``commit()``.
``seek(queue, offset)``, ``seek_to_begin`` and ``seek_to_end`` move a queue;
messages buffered from before are discarded.

The consumer is assembled from parts (:mod:`.consumer_base`), as the push
consumer is: what it hands them is where pulled messages go (the ready list
``poll`` takes from) and whether offsets are committed automatically.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from pocketmq.client.config import PullConsumerConfig, build, parse_namesrv
from pocketmq.client.consumer_base import ConsumerParts, ConsumerWiring, assemble
from pocketmq.client.errors import ClientError, ClientStateError
from pocketmq.client.heartbeat import make_client_id
from pocketmq.client.model import ClientState, MessageExt, MessageModel, MessageQueue
from pocketmq.client.process_queue import ProcessQueue
from pocketmq.client.remoting import BrokerClient
from pocketmq.client.subscription import SubscriptionState
from pocketmq.client.trace import TraceDispatcher, close_trace, start_trace
from pocketmq.common.aio import wait_event
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.filter import MessageSelector
from pocketmq.common.validation import check_group

__all__ = ["PullConsumer"]

log = logging.getLogger(__name__)


class PullConsumer:
    """A consumer the application asks for messages (RocketMQ's lite pull consumer).

    Construct it with the group, the nameservers and options (``PullConsumerConfig``
    fields as keywords, or ``config=``); then either subscribe (queues divided
    among the group's members) or assign queues (exactly those), start, poll::

        consumer = PullConsumer(group="cg", namesrv="127.0.0.1:9876", consume_from="first")
        consumer.subscribe("orders", "*")
        async with consumer:
            messages = await consumer.poll(timeout_s=1.0)

    Main methods: :meth:`subscribe` or :meth:`assign` (with
    :meth:`fetch_message_queues`), :meth:`start`, :meth:`poll`, :meth:`commit`
    (``auto_commit=False``) and :meth:`committed`, :meth:`seek`,
    :meth:`seek_to_begin`, :meth:`seek_to_end`, :meth:`offset_for_time`,
    :meth:`beginning_offset`, :meth:`end_offset`, :meth:`shutdown`;
    :attr:`state` (a :class:`~pocketmq.client.model.ClientState`).
    """

    def __init__(
        self,
        *,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        config: PullConsumerConfig | None = None,
        clock: Clock | None = None,
        instance_name: str | None = None,
        **options: Any,
    ) -> None:
        cfg: PullConsumerConfig = build(PullConsumerConfig, config, options)
        problem = check_group(group)
        if problem:
            raise ValueError(f"consumer group: {problem}")
        self.group = group
        self.namesrv = parse_namesrv(namesrv)
        self.config: PullConsumerConfig = cfg
        self.client_id = make_client_id(instance_name)
        self._clock = clock or SystemClock()
        self._state = ClientState.CREATED
        self._subscription = SubscriptionState()
        self._parts: ConsumerParts | None = None
        self._ready: deque[tuple[ProcessQueue, list[MessageExt]]] = deque()
        self._has_ready = asyncio.Event()
        self.trace: TraceDispatcher | None = None  # enable_trace: client/trace.py

    @property
    def state(self) -> ClientState:
        """created, starting, running, shutting down or shut down."""
        return self._state

    @property
    def broadcasting(self) -> bool:
        return self.config.message_model is MessageModel.BROADCASTING

    # -- assignment ---------------------------------------------------------------------
    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Read *topic*'s messages that *expression* selects (tags, or
        ``MessageSelector.by_sql``), the queues divided among the group's members."""
        self._subscription.subscribe(topic, expression)

    def unsubscribe(self, topic: str) -> None:
        self._subscription.unsubscribe(topic)

    def assign(
        self, queues: Iterable[MessageQueue], expression: str | MessageSelector = "*"
    ) -> None:
        """Read exactly these queues (no rebalance), the messages *expression* selects:
        tags (``"A || B"``) or ``MessageSelector.by_sql(...)``, as :meth:`subscribe`
        takes; replaces any earlier assignment and its selector."""
        self._subscription.assign(queues, expression)

    def assigned_queues(self) -> set[MessageQueue]:
        """The queues this member reads now."""
        return self._parts.fetcher.assigned() if self._parts is not None else set()

    def pull_stats(self) -> dict[str, tuple[int, int]]:
        """Broker address -> (PullBatch calls made, queue pulls they carried)."""
        return self._parts.fetcher.pull_stats() if self._parts is not None else {}

    async def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """Every readable queue of *topic*, sorted (a started consumer; no subscription or
        assignment needed). RouteNotFoundError when no broker serves the topic."""
        parts = self._running()
        return (await parts.routes.get(topic)).read_queues()

    async def rebalance_once(self) -> None:
        """One rebalance round (subscribed), or the assignment applied (assigned)."""
        if self._parts is not None:
            await self._parts.coordinator.rebalance_once()

    # -- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        """Join the group and start reading; PermissionDeniedError when every broker's
        ACL refuses the group, ClientStateError when started before."""
        self.trace = await start_trace(self)
        if self._state is not ClientState.CREATED:
            raise ClientStateError(f"consumer {self.group} is {self._state}; start it once")
        self._state = ClientState.STARTING
        self._parts = parts = assemble(
            group=self.group,
            client_id=self.client_id,
            namesrv=self.namesrv,
            config=self.config,
            clock=self._clock,
            subscription=self._subscription,
            wiring=ConsumerWiring(
                push=False,
                is_running=lambda: self._state is ClientState.RUNNING,
                on_messages=self._on_messages,
                auto_commit=self.config.auto_commit,
            ),
        )
        await parts.connect(list(self._subscription.all()))
        self._state = ClientState.RUNNING
        await parts.run()
        refused = parts.refusal()
        if refused is not None:
            await self.shutdown()
            raise refused
        log.info("pull consumer %s (%s) started", self.group, self.client_id)

    async def shutdown(self) -> None:
        if self._state in (ClientState.CREATED, ClientState.SHUT_DOWN):
            self._state = ClientState.SHUT_DOWN
            return
        self._state = ClientState.SHUTTING_DOWN
        if self._parts is not None:
            await self._parts.stop()
        await close_trace(self.trace, self.config.rpc_timeout_s)
        if self._parts is not None:
            await self._parts.close()
        self._ready.clear()
        self._has_ready.set()
        self._state = ClientState.SHUT_DOWN
        log.info("pull consumer %s (%s) shut down", self.group, self.client_id)

    async def __aenter__(self) -> PullConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    def _running(self) -> ConsumerParts:
        if self._state is not ClientState.RUNNING or self._parts is None:
            raise ClientStateError(f"consumer {self.group} is {self._state}; call start() first")
        return self._parts

    # -- reading ------------------------------------------------------------------------
    def _on_messages(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        self._ready.append((pq, messages))
        self._has_ready.set()

    async def poll(self, timeout_s: float = 5.0) -> list[MessageExt]:
        """Up to ``max_poll_messages`` messages; waits up to *timeout_s* for the first."""
        parts = self._running()
        await parts.coordinator.take_assignment()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            out = self._take(parts, self.config.max_poll_messages)
            remaining = deadline - loop.time()
            if out or remaining <= 0 or self._state is not ClientState.RUNNING:
                if out and self.trace is not None:
                    self.trace.polled(out)
                return out
            self._has_ready.clear()
            await wait_event(self._has_ready, remaining)

    def _take(self, parts: ConsumerParts, limit: int) -> list[MessageExt]:
        out: list[MessageExt] = []
        pqs = parts.fetcher.pqs
        while self._ready and len(out) < limit:
            pq, msgs = self._ready[0]
            if pq.dropped or pqs.get(pq.queue) is not pq:
                self._ready.popleft()
                continue
            take = msgs[: limit - len(out)]
            if len(take) < len(msgs):
                self._ready[0] = (pq, msgs[len(take) :])
            else:
                self._ready.popleft()
            out.extend(take)
            committed = pq.remove(m.queue_offset for m in take)
            parts.offsets.store.update(pq.queue, committed)
        return out

    # -- positions ----------------------------------------------------------------------
    async def commit(self) -> int:
        """Commit the offsets of everything polled so far; returns queues written."""
        return await self._running().offsets.commit()

    async def commit_offsets(self) -> int:
        """Write every changed offset now; returns how many were written."""
        return await self._parts.offsets.commit() if self._parts is not None else 0

    def committed(self, queue: MessageQueue) -> int | None:
        """The offset this consumer will commit for *queue* (its position)."""
        return self._parts.offsets.store.get(queue) if self._parts is not None else None

    async def seek(self, queue: MessageQueue, offset: int) -> None:
        """Continue *queue* at *offset*; messages buffered but not polled are dropped."""
        parts = self._running()
        await parts.coordinator.take_assignment(queue)
        pq = parts.fetcher.pqs.get(queue)
        if pq is None:
            raise ClientStateError(f"{queue} is not assigned to this consumer")
        broker = parts.brokers.read(queue.broker_name)
        if broker is None:
            raise ClientError(f"no address for broker {queue.broker_name}")
        low = await broker.min_offset(queue, timeout_s=self.config.rpc_timeout_s)
        high = await broker.max_offset(queue, timeout_s=self.config.rpc_timeout_s)
        if not low <= offset <= high:
            raise ValueError(f"offset {offset} of {queue} is outside [{low}, {high}]")
        await parts.fetcher.seek(pq, offset)
        parts.offsets.store.update(queue, offset, increase_only=False)

    async def beginning_offset(self, queue: MessageQueue) -> int:
        """The first offset *queue* still holds (Kafka's beginning_offsets)."""
        return await self._queue_broker(queue).min_offset(
            queue, timeout_s=self.config.rpc_timeout_s
        )

    async def end_offset(self, queue: MessageQueue) -> int:
        """The offset the next message of *queue* will take (Kafka's end_offsets)."""
        return await self._queue_broker(queue).max_offset(
            queue, timeout_s=self.config.rpc_timeout_s
        )

    async def offset_for_time(self, queue: MessageQueue, timestamp_ms: int) -> int:
        """The offset of the first message of *queue* stored at or after *timestamp_ms*
        (Kafka's offsets_for_times); the end offset when there is none."""
        return await self._queue_broker(queue).offset_by_timestamp(
            queue, timestamp_ms, timeout_s=self.config.rpc_timeout_s
        )

    def _queue_broker(self, queue: MessageQueue) -> BrokerClient:
        broker = self._running().brokers.read(queue.broker_name)
        if broker is None:
            raise ClientError(
                f"no address for broker {queue.broker_name}; is "
                f"{queue.topic!r} fetched (fetch_message_queues)?"
            )
        return broker

    async def seek_to_begin(self, queue: MessageQueue) -> None:
        parts = self._running()
        await parts.coordinator.take_assignment(queue)
        broker = parts.brokers.read(queue.broker_name)
        if broker is None:
            raise ClientError(f"no address for broker {queue.broker_name}")
        await self.seek(queue, await broker.min_offset(queue))

    async def seek_to_end(self, queue: MessageQueue) -> None:
        parts = self._running()
        await parts.coordinator.take_assignment(queue)
        broker = parts.brokers.read(queue.broker_name)
        if broker is None:
            raise ClientError(f"no address for broker {queue.broker_name}")
        await self.seek(queue, await broker.max_offset(queue))

    # -- for tests and benchmarks: the parts' state ---------------------------------------
    @property
    def _pqs(self) -> dict[MessageQueue, ProcessQueue]:
        return self._parts.fetcher.pqs if self._parts is not None else {}

    def _broker(self, broker_name: str) -> BrokerClient | None:
        return self._parts.brokers.read(broker_name) if self._parts is not None else None
