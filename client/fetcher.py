"""Fetcher: a consumer's queue table and one pull loop per queue.

The queue table maps each queue this member reads to its
:class:`~pocketmq.client.process_queue.ProcessQueue`. Each queue's pull loop
(``PullService {queue}``) long-polls the queue's broker from the process
queue's next offset, waits while the process queue is over its flow-control
limits, re-checks tags by string (tag codes can collide) and hands what it
found to ``on_messages``. The loops' pulls to one broker that start together
travel as one ``PullBatch``
(:class:`~pocketmq.client.pull_coalescer.PullCoalescer`).

Reads follow ``pull_broker``: by default :meth:`RouteService.read_addr`, a
broker name's master while it answers, else a replica (lowest id first). A
call that finds the master unreachable marks it suspect
(``unreachable_suspect_s``) through the
:class:`~pocketmq.client.remoting.Remoting` hook, so the very next pull goes to
the replica; when the suspicion ends and the master answers, reads return.
Queue offsets are the same on every member, so a queue keeps its next offset
across the switch; a replica that has not yet got as far as the consumer
(``OFFSET_ILLEGAL`` from a replica) moves nothing: the pull is simply tried
again a moment later.

What a consumer plugs in (constructor arguments, each called, never overridden):
``on_messages`` (required), ``pull_broker``, ``ready_to_pull`` (orderly
consumers wait for the queue's lock), ``on_pull_start`` (orderly consumers mark
a queue locked as its loop starts), ``max_span``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING

from pocketmq.client.config import _ConsumerCommon as ConsumerCommonConfig
from pocketmq.client.errors import BusyError, ClientError, UnavailableError
from pocketmq.client.message_codec import decode_messages
from pocketmq.client.model import MessageExt, MessageQueue
from pocketmq.client.offset_keeper import OffsetKeeper
from pocketmq.client.process_queue import ProcessQueue
from pocketmq.client.pull_coalescer import PullCoalescer
from pocketmq.client.remoting import BrokerClient, PullReply, PullStatus, QueuePull
from pocketmq.client.route import RouteService
from pocketmq.client.tasks import cancel_and_wait, raise_if_cancelling

if TYPE_CHECKING:  # subscription.py imports consumer_base, which imports this
    from pocketmq.client.subscription import SubscriptionState

__all__ = ["Fetcher"]

log = logging.getLogger(__name__)

PULL_RPC_MARGIN_S = 15.0  # a long poll's RPC deadline beyond its suspend time
REPLICA_BEHIND_RETRY_S = 0.1  # pause before asking a replica that is behind the consumer again


class Fetcher:
    """The queue table (:attr:`pqs`) and the pull loops of one consumer."""

    def __init__(
        self,
        *,
        group: str,
        config: ConsumerCommonConfig,
        routes: RouteService,
        subscription: SubscriptionState,
        offsets: OffsetKeeper,
        pull_broker: Callable[[str], BrokerClient | None],
        on_messages: Callable[[ProcessQueue, list[MessageExt]], None],
        ready_to_pull: Callable[[ProcessQueue], Awaitable[bool]] | None = None,
        on_pull_start: Callable[[ProcessQueue], None] | None = None,
        max_span: int | None = None,
    ) -> None:
        self._group = group
        self._config = config
        self._routes = routes
        self._subscription = subscription
        self._offsets = offsets
        self._pull_broker = pull_broker
        self._on_messages = on_messages
        self._ready_to_pull = ready_to_pull
        self._on_pull_start = on_pull_start
        self._max_span = max_span
        self.pqs: dict[MessageQueue, ProcessQueue] = {}
        self._tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        self._coalescers: dict[str, PullCoalescer] = {}
        self._deferred: list[ProcessQueue] | None = None

    # -- the queue table -------------------------------------------------------------------
    def assigned(self) -> set[MessageQueue]:
        """The queues this member reads now."""
        return {mq for mq, pq in self.pqs.items() if not pq.dropped}

    def pull_stats(self) -> dict[str, tuple[int, int]]:
        """Broker address -> (PullBatch calls made, queue pulls they carried)."""
        out: dict[str, tuple[int, int]] = {}
        for c in self._coalescers.values():
            calls, pulls = out.get(c.broker.addr, (0, 0))
            out[c.broker.addr] = (calls + c.calls_total, pulls + c.pulls_total)
        return out

    def add(self, mq: MessageQueue, offset: int) -> ProcessQueue:
        """Read *mq* from *offset* (a pull loop starts)."""
        pq = self._new_process_queue(mq, offset)
        self.pqs[mq] = pq
        self._start(pq)
        return pq

    @contextlib.contextmanager
    def starting_together(self) -> Iterator[None]:
        """Queues added inside start their loops together, so their first pulls share a
        PullBatch."""
        self._deferred = []
        try:
            yield
        finally:
            starts, self._deferred = self._deferred, None
            for pq in starts:
                if not pq.dropped:
                    self._spawn(pq)

    async def remove(self, mq: MessageQueue) -> ProcessQueue | None:
        """Stop reading *mq*; its process queue (dropped), or None when it was not read."""
        pq = self.pqs.pop(mq, None)
        if pq is None:
            return None
        pq.drop()
        await cancel_and_wait(self._tasks.pop(mq, None))
        for coalescer in self._coalescers.values():
            coalescer.forget(mq)
        return pq

    def restart(self, pq: ProcessQueue, offset: int) -> ProcessQueue:
        """Replace *pq* by an empty process queue reading from *offset* (the old loop is
        cancelled, not awaited)."""
        pq.drop()
        fresh = self._new_process_queue(pq.queue, offset)
        self.pqs[pq.queue] = fresh
        self._start(fresh)
        return fresh

    async def seek(self, pq: ProcessQueue, offset: int) -> ProcessQueue:
        """:meth:`restart`, once the old loop has ended."""
        pq.drop()
        await cancel_and_wait(self._tasks.pop(pq.queue, None))
        fresh = self._new_process_queue(pq.queue, offset)
        self.pqs[pq.queue] = fresh
        self._start(fresh)
        return fresh

    async def stop(self) -> None:
        """End every pull loop (the table stays, for the offsets written at shutdown)."""
        await asyncio.gather(*(cancel_and_wait(t) for t in self._tasks.values()))
        self._tasks.clear()
        await asyncio.gather(*(c.close() for c in self._coalescers.values()))
        self._coalescers.clear()

    def drop_all(self) -> list[ProcessQueue]:
        """Drop every process queue (late handler results are ignored); returns them."""
        for pq in self.pqs.values():
            pq.drop()
        return list(self.pqs.values())

    def _new_process_queue(self, mq: MessageQueue, offset: int) -> ProcessQueue:
        cfg = self._config
        return ProcessQueue(
            mq,
            next_offset=offset,
            max_messages=cfg.pull_threshold_for_queue,
            max_bytes=cfg.pull_threshold_size_for_queue_bytes,
            max_span=self._max_span,
        )

    def _start(self, pq: ProcessQueue) -> None:
        if self._on_pull_start is not None:
            self._on_pull_start(pq)
        if self._deferred is not None:
            self._deferred.append(pq)
            return
        self._spawn(pq)

    def _spawn(self, pq: ProcessQueue) -> None:
        old = self._tasks.get(pq.queue)
        if old is not None:
            old.cancel()
        self._tasks[pq.queue] = asyncio.get_running_loop().create_task(
            self._pull_loop(pq), name=f"PullService {pq.queue}"
        )

    # -- pulling ---------------------------------------------------------------------------
    async def _pull_loop(self, pq: ProcessQueue) -> None:
        mq = pq.queue
        cfg = self._config
        last: PullCoalescer | None = None
        while not pq.dropped:
            await pq.wait_for_room()
            if pq.dropped or (
                self._ready_to_pull is not None and not await self._ready_to_pull(pq)
            ):
                continue
            coalescer = self._coalescer(mq.broker_name)
            if last is not None and coalescer is not last:
                last.forget(mq)  # moved to another member: its read-ahead is not ours
                log.info(
                    "group %s: %s now reads from %s",
                    self._group,
                    mq,
                    coalescer.broker.addr if coalescer else "nowhere",
                )
            last = coalescer
            try:
                if coalescer is None:
                    raise ClientError(f"no address for broker {mq.broker_name}")
                selector = self._subscription.selector(mq.topic)
                reply = await coalescer.pull(
                    QueuePull(
                        queue=mq,
                        offset=pq.next_offset,
                        max_messages=cfg.pull_batch_size,
                        subscription=selector.expression,
                        expression_type=selector.type,
                        commit_offset=self._offsets.piggyback(mq),
                    )
                )
            except ClientError as exc:
                raise_if_cancelling()
                if pq.dropped:
                    return
                await self._pull_failed(pq, exc)
                continue
            if reply is None or pq.dropped:
                continue
            if self._replica_behind(mq, coalescer.broker.addr, reply):
                await asyncio.sleep(REPLICA_BEHIND_RETRY_S)
                continue
            self._on_pull_reply(pq, reply)

    def _replica_behind(self, mq: MessageQueue, addr: str, reply: PullReply) -> bool:
        """A replica's OFFSET_ILLEGAL moves nothing: it has not got as far as the consumer
        (or never corrects offsets, as RocketMQ's offsetCheckInSlave=false); only the
        master's answer may move a queue (4.x PULL_OFFSET_MOVED -> PULL_RETRY_IMMEDIATELY)."""
        if reply.status is not PullStatus.OFFSET_ILLEGAL:
            return False
        if self._routes.addr_of(mq.broker_name) == addr:
            return False
        log.debug(
            "replica %s answered OFFSET_ILLEGAL for %s (its range [%d, %d]); asking again",
            addr,
            mq,
            reply.min_offset,
            reply.max_offset,
        )
        return True

    def _coalescer(self, broker_name: str) -> PullCoalescer | None:
        """The PullBatch merger for this group on *broker_name*'s current address.

        A replica's long polls are held no longer than ``unreachable_suspect_s``:
        a loop parked there looks for the master again at least that often.
        """
        broker = self._pull_broker(broker_name)
        if broker is None:
            return None
        cfg = self._config
        suspend_ms = cfg.pull_suspend_ms
        if self._routes.addr_of(broker_name) != broker.addr:
            suspend_ms = min(suspend_ms, int(cfg.unreachable_suspect_s * 1000))
        key = f"{broker.addr}/{suspend_ms}"
        coalescer = self._coalescers.get(key)
        if coalescer is None or coalescer.broker is not broker:
            coalescer = self._coalescers[key] = PullCoalescer(
                broker,
                self._group,
                suspend_ms=suspend_ms,
                timeout_s=suspend_ms / 1000 + PULL_RPC_MARGIN_S,
            )
        return coalescer

    async def _pull_failed(self, pq: ProcessQueue, exc: ClientError) -> None:
        """Pause the queue's pull loop (pullTimeDelayMillsWhenException, 3 s).

        A busy broker (SYSTEM_BUSY) keeps its route, and the pause is spread by
        a random part so that the loops it refused do not come back together.
        """
        delay_s = self._config.pull_delay_on_error_s
        routes = self._routes
        if (
            isinstance(exc, UnavailableError)
            and exc.unreachable
            and routes.read_addr(pq.queue.broker_name) not in (None, exc.addr)
        ):
            # The member did not answer and another serves the queue: go there now.
            log.info(
                "pull from %s at %s failed (%s); continuing at offset %d on %s",
                pq.queue,
                exc.addr,
                exc.code,
                pq.next_offset,
                routes.read_addr(pq.queue.broker_name),
            )
            return
        if isinstance(exc, BusyError) and exc.flow_control:
            delay_s *= 0.75 + random.random() / 2
            log.info(
                "broker busy for a pull from %s: %s; retrying in %.1f s", pq.queue, exc, delay_s
            )
        else:
            log.warning(
                "pull from %s at offset %d failed: %s; retrying in %.1f s",
                pq.queue,
                pq.next_offset,
                exc,
                delay_s,
            )
            unreachable = isinstance(exc, UnavailableError) and exc.unreachable
            if not unreachable:  # unreachable: already refetching
                routes.invalidate(pq.queue.topic)
        await asyncio.sleep(delay_s)

    def _on_pull_reply(self, pq: ProcessQueue, reply: PullReply) -> None:
        mq = pq.queue
        store = self._offsets.store
        if reply.status is PullStatus.FOUND:
            messages = decode_messages(reply.records, mq.broker_name)
            tags = self._subscription.tags(mq.topic)
            if tags is not None:
                messages = [m for m in messages if m.tags in tags]
            pq.add(messages, reply.next_begin_offset)
            if messages:
                self._on_messages(pq, messages)
                return
        elif reply.status is PullStatus.OFFSET_ILLEGAL:
            log.warning(
                "offset %d of %s is outside [%d, %d]; continuing at %d",
                pq.next_offset,
                mq,
                reply.min_offset,
                reply.max_offset,
                reply.next_begin_offset,
            )
            pq.next_offset = reply.next_begin_offset
            if not len(pq):
                store.update(mq, reply.next_begin_offset, increase_only=False)
            return
        else:
            pq.next_offset = max(pq.next_offset, reply.next_begin_offset)
        if not len(pq):
            store.update(mq, pq.committed_offset)
