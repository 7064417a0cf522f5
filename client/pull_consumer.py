"""PullConsumer: lite pull — the application asks for messages when it wants them.

::

    consumer = PullConsumer(group="cg", namesrv="127.0.0.1:9876", consume_from="first")
    consumer.subscribe("orders", "*")          # queues divided by rebalance, or:
    await consumer.start()
    messages = await consumer.poll(timeout_s=1.0)

    consumer = PullConsumer(group="cg", namesrv="127.0.0.1:9876")   # assigned queues
    await consumer.start()                     # nothing to read yet: that is fine
    queues = await consumer.fetch_message_queues("orders")
    consumer.assign(queues[:2])                # usable at once:
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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from pocketmq.client.config import PullConsumerConfig, build
from pocketmq.client.consumer_base import ConsumerBase, _cancel
from pocketmq.client.errors import ClientError, ClientStateError, PermissionDeniedError
from pocketmq.client.model import MessageExt, MessageQueue
from pocketmq.client.process_queue import ProcessQueue
from pocketmq.client.trace import TraceDispatcher, close_trace, start_trace
from pocketmq.common.aio import wait_event
from pocketmq.common.clock import Clock
from pocketmq.common.filter import MessageSelector

__all__ = ["PullConsumer"]

log = logging.getLogger(__name__)


class PullConsumer(ConsumerBase):
    _push = False

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
        super().__init__(
            group=group, namesrv=namesrv, config=cfg, clock=clock, instance_name=instance_name
        )
        self.config: PullConsumerConfig = cfg
        self._assigned: set[MessageQueue] | None = None
        self._ready: deque[tuple[ProcessQueue, list[MessageExt]]] = deque()
        self._has_ready = asyncio.Event()
        self.trace: TraceDispatcher | None = None  # enable_trace: client/trace.py

    # -- assignment ---------------------------------------------------------------------
    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        if self._assigned is not None:
            raise ClientStateError(
                "this consumer uses assign(); subscribe() and assign() do not mix"
            )
        super().subscribe(topic, expression)

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Read exactly these queues (no rebalance); replaces any earlier assignment."""
        if self._subscriptions:
            raise ClientStateError(
                "this consumer uses subscribe(); subscribe() and assign() do not mix"
            )
        self._assigned = set(queues)
        if self._rebalance is not None:
            self._rebalance.wakeup()

    async def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """Every readable queue of *topic*, sorted (a started consumer; no subscription or
        assignment needed). RouteNotFoundError when no broker serves the topic."""
        self._running()
        assert self._routes is not None
        return (await self._routes.get(topic)).read_queues()

    async def _take_assignment(self, queue: MessageQueue | None = None) -> None:
        """Apply a pending assign() now, so that *queue* is pulled before it is used."""
        if self._assigned is None or (queue is not None and queue in self._pqs):
            return
        if queue is None and set(self._pqs) == self._assigned:
            return
        await self.rebalance_once()

    async def rebalance_once(self) -> None:
        if self._assigned is None:
            await super().rebalance_once()
            return
        if self._state != "running" or self._routes is None:
            return
        async with self._rebalance_lock:
            topics = {mq.topic for mq in self._assigned} | {mq.topic for mq in self._pqs}
            for topic in sorted(topics):
                if any(mq.topic == topic for mq in self._assigned):
                    with contextlib.suppress(ClientError):
                        await self._routes.get(topic)
                await self._apply(topic, {mq for mq in self._assigned if mq.topic == topic})

    # -- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        self.trace = await start_trace(self)
        await self._start_services()
        refused = self._heartbeat.refused_everywhere() if self._heartbeat else None
        if refused is not None:
            await self.shutdown()
            raise PermissionDeniedError(
                f"consumer group {self.group!r} may not consume here: {refused}", code=refused.code
            )
        log.info("pull consumer %s (%s) started", self.group, self.client_id)

    async def shutdown(self) -> None:
        if self.state in ("created", "shut down"):
            self._state = "shut down"
            return
        await self._stop_services()
        await close_trace(self.trace, self.config.rpc_timeout_s)
        await self._close_services()
        self._ready.clear()
        self._has_ready.set()
        self._state = "shut down"
        log.info("pull consumer %s (%s) shut down", self.group, self.client_id)

    async def __aenter__(self) -> PullConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    @property
    def _auto_commit(self) -> bool:
        return self.config.auto_commit

    # -- reading ------------------------------------------------------------------------
    def _on_messages(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        self._ready.append((pq, messages))
        self._has_ready.set()

    async def poll(self, timeout_s: float = 5.0) -> list[MessageExt]:
        """Up to ``max_poll_messages`` messages; waits up to *timeout_s* for the first."""
        self._running()
        await self._take_assignment()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            out = self._take(self.config.max_poll_messages)
            remaining = deadline - loop.time()
            if out or remaining <= 0 or self._state != "running":
                if out and self.trace is not None:
                    self.trace.polled(out)
                return out
            self._has_ready.clear()
            await wait_event(self._has_ready, remaining)

    def _take(self, limit: int) -> list[MessageExt]:
        out: list[MessageExt] = []
        while self._ready and len(out) < limit:
            pq, msgs = self._ready[0]
            if pq.dropped or self._pqs.get(pq.queue) is not pq:
                self._ready.popleft()
                continue
            take = msgs[: limit - len(out)]
            if len(take) < len(msgs):
                self._ready[0] = (pq, msgs[len(take) :])
            else:
                self._ready.popleft()
            out.extend(take)
            committed = pq.remove(m.queue_offset for m in take)
            if self._offsets is not None:
                self._offsets.update(pq.queue, committed)
        return out

    # -- positions ----------------------------------------------------------------------
    async def commit(self) -> int:
        """Commit the offsets of everything polled so far; returns queues written."""
        self._running()
        return await self.commit_offsets()

    def committed(self, queue: MessageQueue) -> int | None:
        """The offset this consumer will commit for *queue* (its position)."""
        return self._offsets.get(queue) if self._offsets is not None else None

    async def seek(self, queue: MessageQueue, offset: int) -> None:
        """Continue *queue* at *offset*; messages buffered but not polled are dropped."""
        self._running()
        await self._take_assignment(queue)
        pq = self._pqs.get(queue)
        if pq is None:
            raise ClientStateError(f"{queue} is not assigned to this consumer")
        broker = self._broker(queue.broker_name)
        if broker is None:
            raise ClientError(f"no address for broker {queue.broker_name}")
        low = await broker.min_offset(queue, timeout_s=self.config.rpc_timeout_s)
        high = await broker.max_offset(queue, timeout_s=self.config.rpc_timeout_s)
        if not low <= offset <= high:
            raise ValueError(f"offset {offset} of {queue} is outside [{low}, {high}]")
        pq.drop()
        await _cancel(self._pull_tasks.pop(queue, None))
        fresh = self._new_process_queue(queue, offset)
        self._pqs[queue] = fresh
        if self._offsets is not None:
            self._offsets.update(queue, offset, increase_only=False)
        self._start_pulling(fresh)

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

    def _queue_broker(self, queue: MessageQueue) -> Any:
        self._running()
        broker = self._broker(queue.broker_name)
        if broker is None:
            raise ClientError(
                f"no address for broker {queue.broker_name}; is "
                f"{queue.topic!r} fetched (fetch_message_queues)?"
            )
        return broker

    async def seek_to_begin(self, queue: MessageQueue) -> None:
        self._running()
        await self._take_assignment(queue)
        broker = self._broker(queue.broker_name)
        if broker is None:
            raise ClientError(f"no address for broker {queue.broker_name}")
        await self.seek(queue, await broker.min_offset(queue))

    async def seek_to_end(self, queue: MessageQueue) -> None:
        self._running()
        await self._take_assignment(queue)
        broker = self._broker(queue.broker_name)
        if broker is None:
            raise ClientError(f"no address for broker {queue.broker_name}")
        await self.seek(queue, await broker.max_offset(queue))
