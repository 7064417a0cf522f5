"""PullCoalescer: the pulls a consumer's queue loops start together go out as one PullBatch.

A consumer runs one long-polling pull loop per assigned queue (RocketMQ's
``PullMessageProcessor`` model). Made one RPC each, eight queues on a broker
cost eight calls per arrival; on a two-core machine a gRPC call costs the
broker about as much CPU as storing a message, so at a few thousand messages a
second the calls, not the messages, fill the processor. Here every loop still
pulls its own queue and gets its own reply, but the pulls started in one
event-loop turn travel to the broker in one ``PullBatch``::

    queue loop A ─┐                     ┌─▶ A's reply (FOUND, 3 msgs)
    queue loop B ─┼─▶ one PullBatch ────┼─▶ B's reply (NO_NEW_MSG)
    queue loop C ─┘   (one long poll)   └─▶ C's reply (a refusal of C alone)

The broker answers as soon as any of the queues has something, with a reply
for each, so the loops that were answered pull again in the same turn and
meet in the next call: in a steady state one call per broker is parked, and
each arrival (a batch that touched five queues) costs one reply. A queue the
broker did not reach (its reply was full) is answered ``None``: pull again.

Merged loops move in lockstep: the broker reads while the client waits, and
the client decodes while the broker waits. When a reply shows a backlog (a
queue answered FOUND has more beyond ``next_begin_offset``), the coalescer
therefore sends that queue's next pull at once, before the loops even see the
reply, and the loop's next pull from that offset is answered by it (a
prefetch, as Kafka's fetcher does). While no other read-ahead is in flight,
one is split over two calls, so that the broker reads one while the other
travels or is decoded (measured: a backlog of 8 queues at 32 a pull went from
90k to 165-180k msgs/s). With no backlog nothing is prefetched, so a trickle of
messages still costs one call per arrival. A prefetch is at most one
batch per queue beyond the consumer's flow-control limit; one the loop does not
want (its queue was dropped or moved to another offset) is cancelled.

A call carries at most :data:`MAX_QUEUES_PER_CALL` (16) queues, so that a
consumer of hundreds of queues, one of them busy, does not read and answer all
of them for each message of the busy one. Queues whose calls drifted apart (a
backlog ended on one queue before the others) come back together: a call about
to go out takes over the pulls of any other call that has waited at the broker
for :data:`MERGE_AFTER_S` (parked: no message yet), cancelling it, as long as
the merged call stays within that size. Rebalance starts its new queues' loops
in one turn, so their first pulls already share a call.

If every loop waiting on a call stops (its queue was rebalanced away, the
consumer shuts down), the call is cancelled, so the broker releases the parked
pull at once rather than at its suspend timeout.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools

from pocketmq.client.errors import ClientError
from pocketmq.client.model import MessageQueue
from pocketmq.client.remoting import BrokerClient, PullReply, PullStatus, QueuePull

__all__ = ["MAX_QUEUES_PER_CALL", "MERGE_AFTER_S", "PullCoalescer"]

# Queues per call. A call is answered when any of its queues has a message, and then
# every one of its queues is read, answered and pulled again: with hundreds of queues
# and one busy, each message would cost that work hundreds of times. Calls of at most
# 16 queues bound it near the cost of the one RPC a per-queue pull would make.
MAX_QUEUES_PER_CALL = 16
MERGE_AFTER_S = 0.002  # a call unanswered this long is parked; merge it into the next

_Waiter = tuple[QueuePull, "asyncio.Future[PullReply | None]"]


class PullCoalescer:
    """Merges the pulls of one consumer group to one broker. Event-loop thread only."""

    def __init__(
        self, broker: BrokerClient, group: str, *, suspend_ms: int, timeout_s: float
    ) -> None:
        self.broker = broker
        self._group = group
        self._suspend_ms = suspend_ms
        self._timeout_s = timeout_s
        self._pending: list[_Waiter] = []
        self._prefetched: dict[MessageQueue, _Waiter] = {}
        self._calls: set[_Call] = set()
        self.calls_total = 0  # PullBatch calls made
        self.pulls_total = 0  # queue pulls they carried
        self.prefetch_hits = 0  # loop pulls answered by a prefetch
        self.merges_total = 0  # parked calls taken over by a newer one

    async def pull(self, pull: QueuePull) -> PullReply | None:
        """This queue's reply; raises the call's failure or this queue's refusal."""
        ahead = self._prefetched.pop(pull.queue, None)
        if ahead is not None:
            if _same_read(ahead[0], pull):
                self.prefetch_hits += 1
                return await ahead[1]
            ahead[1].cancel()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[PullReply | None] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._flush)
        self._pending.append((pull, future))
        return await future

    def forget(self, queue: MessageQueue) -> None:
        """*queue* left the consumer: drop what was fetched ahead for it."""
        ahead = self._prefetched.pop(queue, None)
        if ahead is not None:
            ahead[1].cancel()

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        waiters = [w for w in pending if not w[1].done()]
        if not waiters:
            return
        now = asyncio.get_running_loop().time()
        for call in list(self._calls):
            if len(waiters) >= MAX_QUEUES_PER_CALL:
                break
            if call.prefetch or call.merged or now - call.started < MERGE_AFTER_S:
                continue
            live = [w for w in call.waiters if not w[1].done()]
            if len(waiters) + len(live) > MAX_QUEUES_PER_CALL:
                continue  # merging would only split it again
            call.merged = True
            call.task.cancel()
            self._calls.discard(call)
            self.merges_total += 1
            waiters.extend(live)
        self._start(waiters, prefetch=False)

    def _forget(self, call: _Call, _task: asyncio.Task[None]) -> None:
        self._calls.discard(call)

    def _start(self, waiters: list[_Waiter], *, prefetch: bool) -> None:
        loop = asyncio.get_running_loop()
        for start in range(0, len(waiters), MAX_QUEUES_PER_CALL):
            call = _Call(waiters[start : start + MAX_QUEUES_PER_CALL], loop.time(), prefetch)
            call.task = loop.create_task(
                self._call(call), name=f"PullBatch {self.broker.addr} {self._group}"
            )
            self._calls.add(call)
            call.task.add_done_callback(functools.partial(self._forget, call))
            for _, future in call.waiters:
                future.add_done_callback(call.one_done)

    def _prefetch(
        self,
        waiters: list[_Waiter],
        replies: list[PullReply | ClientError | None],
    ) -> None:
        """Send the next pull now for each queue whose reply shows a backlog."""
        loop = asyncio.get_running_loop()
        ahead: list[_Waiter] = []
        for (pull, future), reply in zip(waiters, replies, strict=True):
            if (
                future.done()
                or not isinstance(reply, PullReply)
                or reply.status is not PullStatus.FOUND
                or reply.next_begin_offset >= reply.max_offset
            ):
                continue
            nxt = dataclasses.replace(pull, offset=reply.next_begin_offset, commit_offset=None)
            fut: asyncio.Future[PullReply | None] = loop.create_future()
            fut.add_done_callback(_retrieve)
            old = self._prefetched.get(pull.queue)
            if old is not None:
                old[1].cancel()
            self._prefetched[pull.queue] = (nxt, fut)
            ahead.append((nxt, fut))
        if not ahead:
            return
        if len(ahead) >= 2 and not any(c.prefetch for c in self._calls):
            # The only read ahead: two calls, so that the broker reads one while the
            # other is on the wire or being decoded (a pipeline two deep).
            half = len(ahead) // 2
            self._start(ahead[:half], prefetch=True)
            self._start(ahead[half:], prefetch=True)
        else:
            self._start(ahead, prefetch=True)

    async def _call(self, call: _Call) -> None:
        self.calls_total += 1
        self.pulls_total += len(call.waiters)
        waiters = call.waiters
        try:
            replies = await self.broker.pull_batch(
                group=self._group,
                pulls=[pull for pull, _ in waiters],
                suspend_ms=self._suspend_ms,
                timeout_s=self._timeout_s,
            )
        except ClientError as exc:
            if not call.merged:
                for _, future in waiters:
                    if not future.done():
                        future.set_exception(exc)
            return
        except BaseException:
            if not call.merged:  # merged: its waiters wait on the call that took them
                for _, future in waiters:
                    future.cancel()
            raise
        if call.merged:  # answered as it was cancelled: the newer call answers
            return
        self._prefetch(waiters, replies)
        for (_, future), reply in zip(waiters, replies, strict=True):
            if future.done():
                continue
            if isinstance(reply, ClientError):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    async def close(self) -> None:
        """Cancel the calls in flight (their waiters are cancelled too)."""
        for _, future in self._pending:
            future.cancel()
        self._pending.clear()
        for _, future in self._prefetched.values():
            future.cancel()
        self._prefetched.clear()
        tasks = [call.task for call in self._calls]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


def _same_read(a: QueuePull, b: QueuePull) -> bool:
    return (
        a.offset == b.offset
        and a.max_messages == b.max_messages
        and a.subscription == b.subscription
        and a.expression_type == b.expression_type
    )


def _retrieve(future: asyncio.Future[PullReply | None]) -> None:
    """A prefetch may end in an error no loop asks for; mark it seen (no warning)."""
    if not future.cancelled():
        future.exception()


class _Call:
    """One PullBatch in flight; cancelled once none of its waiters waits any more."""

    __slots__ = ("_waiting", "merged", "prefetch", "started", "task", "waiters")

    def __init__(self, waiters: list[_Waiter], started: float, prefetch: bool) -> None:
        self.waiters = waiters
        self.started = started
        self.prefetch = prefetch
        self.merged = False
        self.task: asyncio.Task[None]
        self._waiting = len(waiters)

    def one_done(self, _future: asyncio.Future[PullReply | None]) -> None:
        self._waiting -= 1
        if self._waiting == 0 and not self.task.done():
            self.task.cancel()
