"""What push and pull consumers share: services, the queue table, the pull loops.

A consumer owns, and cancels in :meth:`ConsumerBase.shutdown`:

* a :class:`~pocketmq.client.route.RouteService` (routes, refreshed every 30 s),
* a :class:`~pocketmq.client.heartbeat.HeartbeatService` (membership on every
  broker; the broker's ``NotifyConsumerIdsChanged`` wakes the rebalance),
* a :class:`~pocketmq.client.rebalance.RebalanceService` (every 20 s),
* the offset commit task (every ``commit_interval_s``, 5 s),
* one pull loop per assigned queue: it long-polls the queue's broker from the
  :class:`~pocketmq.client.process_queue.ProcessQueue`'s next offset, waits
  while the process queue is over its flow-control limits, re-checks tags by
  string (tag codes can collide) and hands what it found to the subclass.
  The loops' pulls to one broker that start together travel as one
  ``PullBatch`` (:class:`~pocketmq.client.pull_coalescer.PullCoalescer`).

Reads follow :meth:`RouteService.read_addr`: a broker name's master while it
answers, else a replica (lowest id first). A call that finds the master
unreachable marks it suspect (``unreachable_suspect_s``) through the
:class:`~pocketmq.client.remoting.Remoting` hook, so the very next pull goes to
the replica; when the suspicion ends and the master answers, reads return.
Queue offsets are the same on every member, so a queue keeps its next offset
across the switch; a replica that has not yet got as far as the consumer
(``OFFSET_ILLEGAL`` from a replica) moves nothing: the pull is simply tried
again a moment later. Writes (send-back) and queue locks go to the master only.

The queue table maps each assigned :class:`MessageQueue` to its process
queue. A rebalance adds queues (starting at the stored offset or the
consume-from policy) and drops queues (their pull loop stops, their committed
offset is written at once, late handler results for them are ignored).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
from collections.abc import Sequence
from typing import Any

from pocketmq.client.allocate import resolve_strategy
from pocketmq.client.config import _ConsumerCommon as ConsumerCommonConfig
from pocketmq.client.config import parse_namesrv, transport
from pocketmq.client.errors import BusyError, ClientError, ClientStateError, UnavailableError
from pocketmq.client.heartbeat import HeartbeatService, make_client_id
from pocketmq.client.message_codec import decode_messages
from pocketmq.client.model import (
    ConsumeFrom,
    MessageExt,
    MessageModel,
    MessageQueue,
    retry_topic,
)
from pocketmq.client.offset_store import LocalFileOffsetStore, OffsetStore, RemoteBrokerOffsetStore
from pocketmq.client.process_queue import ProcessQueue
from pocketmq.client.pull_coalescer import PullCoalescer
from pocketmq.client.rebalance import Rebalancer, RebalanceService, resolve_start_offset
from pocketmq.client.remoting import (
    BrokerClient,
    ChannelOpened,
    ConsumerIdsChanged,
    ConsumerInfo,
    PullReply,
    PullStatus,
    QueuePull,
    Remoting,
    ResetConsumerOffset,
    ServerCommand,
)
from pocketmq.client.route import RouteService
from pocketmq.client.tasks import cancel_and_wait, raise_if_cancelling
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.filter import MessageSelector
from pocketmq.common.filter.tags import parse_tag_expression
from pocketmq.common.validation import check_group, check_topic

__all__ = ["ConsumerBase", "parse_subscription"]

log = logging.getLogger(__name__)

PULL_RPC_MARGIN_S = 15.0  # a long poll's RPC deadline beyond its suspend time
REPLICA_BEHIND_RETRY_S = 0.1  # pause before asking a replica that is behind the consumer again
DEFAULT_TIMESTAMP_LOOKBACK_MS = 30 * 60 * 1000
_ALL = MessageSelector.by_tag("*")


def parse_subscription(expression: str) -> frozenset[str] | None:
    """``"*"``/``""`` -> None (every tag); ``"A || B"`` -> {"A", "B"}; a ValueError else."""
    return parse_tag_expression(expression, what="subscription")


class ConsumerBase:
    _push = True

    def __init__(
        self,
        *,
        group: str,
        namesrv: str | Sequence[str] | None,
        config: ConsumerCommonConfig,
        clock: Clock | None,
        instance_name: str | None,
    ) -> None:
        problem = check_group(group)
        if problem:
            raise ValueError(f"consumer group: {problem}")
        self.group = group
        self.namesrv = parse_namesrv(namesrv)
        self.config = config
        self.client_id = make_client_id(instance_name)
        self._clock = clock or SystemClock()
        self._subscriptions: dict[str, MessageSelector] = {}
        self._tag_sets: dict[str, frozenset[str] | None] = {}
        self._pqs: dict[MessageQueue, ProcessQueue] = {}
        self._pull_tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        self._coalescers: dict[str, PullCoalescer] = {}
        self._deferred_starts: list[ProcessQueue] | None = None
        self._remoting: Remoting | None = None
        self._routes: RouteService | None = None
        self._heartbeat: HeartbeatService | None = None
        self._rebalance: RebalanceService | None = None
        self._rebalancer: Rebalancer | None = None
        self._offsets: OffsetStore | None = None
        self._commit_task: asyncio.Task[None] | None = None
        self._rebalance_lock = asyncio.Lock()
        # topic -> the Rebalancer's assignment last applied whole (see rebalance_once)
        self._applied: dict[str, frozenset[MessageQueue]] = {}
        self._state: str = "created"

    # -- configuration ------------------------------------------------------------------
    @property
    def state(self) -> str:
        """created, starting, running, shutting down or shut down."""
        return self._state

    @property
    def broadcasting(self) -> bool:
        return self.config.message_model is MessageModel.BROADCASTING

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Read *topic*'s messages that *expression* selects: a tag expression (``*`` or
        ``A || B``, also ``MessageSelector.by_tag``) or ``MessageSelector.by_sql("a > 1")``,
        an SQL92 filter on the message properties that the broker applies."""
        problem = check_topic(topic)
        if problem:
            raise ValueError(problem)
        selector = MessageSelector.of(expression)
        self._tag_sets[topic] = None if selector.is_sql else parse_subscription(selector.expression)
        self._subscriptions[topic] = selector
        if self._rebalance is not None:
            self._rebalance.wakeup()

    def unsubscribe(self, topic: str) -> None:
        self._subscriptions.pop(topic, None)
        self._tag_sets.pop(topic, None)
        if self._rebalance is not None:
            self._rebalance.wakeup()

    def _all_subscriptions(self) -> dict[str, MessageSelector]:
        """User subscriptions, plus the group's retry topic when clustering (push)."""
        subs = dict(self._subscriptions)
        if self._push and not self.broadcasting and subs:
            subs.setdefault(retry_topic(self.group), MessageSelector.by_tag("*"))
        return subs

    def assigned_queues(self) -> set[MessageQueue]:
        """The queues this member reads now."""
        return {mq for mq, pq in self._pqs.items() if not pq.dropped}

    def pull_stats(self) -> dict[str, tuple[int, int]]:
        """Broker address -> (PullBatch calls made, queue pulls they carried)."""
        out: dict[str, tuple[int, int]] = {}
        for c in self._coalescers.values():
            calls, pulls = out.get(c.broker.addr, (0, 0))
            out[c.broker.addr] = (calls + c.calls_total, pulls + c.pulls_total)
        return out

    # -- lifecycle ----------------------------------------------------------------------
    async def _start_services(self) -> None:
        if self._state != "created":
            raise ClientStateError(f"consumer {self.group} is {self._state}; start it once")
        cfg = self.config
        self._state = "starting"
        self._remoting = Remoting(transport(self.config))
        nameserver = self._remoting.nameserver(self.namesrv)
        self._routes = RouteService(
            nameserver.get_route,
            fetch_many=nameserver.get_routes,
            refresh_interval_s=cfg.route_refresh_interval_s,
            clock=self._clock,
            suspect_s=cfg.unreachable_suspect_s,
        )
        self._remoting.on_unreachable = self._routes.mark_unreachable
        if self.broadcasting:
            self._offsets = LocalFileOffsetStore(
                self.group, os.path.expanduser(cfg.offset_store_dir)
            )
        else:
            self._offsets = RemoteBrokerOffsetStore(
                self.group, self._broker, timeout_s=cfg.rpc_timeout_s
            )
        await self._offsets.load()
        self._rebalancer = Rebalancer(
            group=self.group,
            client_id=self.client_id,
            routes=self._routes,
            broker_of=self._broker,
            strategy=resolve_strategy(cfg.allocate),
            broadcasting=self.broadcasting,
            timeout_s=cfg.rpc_timeout_s,
        )
        self._rebalance = RebalanceService(self.rebalance_once, interval_s=cfg.rebalance_interval_s)
        self._heartbeat = HeartbeatService(
            self._remoting,
            self._routes,
            self.client_id,
            consumers=self._consumer_infos,
            interval_s=cfg.heartbeat_interval_s,
            on_command=self._on_command,
            timeout_s=cfg.rpc_timeout_s,
            replicas=True,
        )
        for topic in self._all_subscriptions():
            with contextlib.suppress(ClientError):
                await self._routes.get(topic)
        self._routes.start()
        await self._heartbeat.start()
        self._state = "running"
        await self._rebalance.run_once()
        self._rebalance.start()
        if self._auto_commit:
            self._commit_task = asyncio.get_running_loop().create_task(
                self._commit_loop(), name=f"OffsetCommitService {self.group}"
            )

    async def _stop_services(self) -> None:
        """Stop rebalancing and pulling; handlers in progress may still finish."""
        self._state = "shutting down"
        if self._rebalance is not None:
            await self._rebalance.stop()
        await _cancel(self._commit_task)
        self._commit_task = None
        await asyncio.gather(*(_cancel(t) for t in self._pull_tasks.values()))
        self._pull_tasks.clear()
        await asyncio.gather(*(c.close() for c in self._coalescers.values()))
        self._coalescers.clear()

    async def _close_services(self) -> None:
        """Write offsets, leave the group on every broker, close the channels."""
        for pq in self._pqs.values():
            pq.drop()
        if self._offsets is not None and self._auto_commit:
            await self._offsets.persist()
        await self._release_queues(list(self._pqs.values()))
        if self._heartbeat is not None:
            # Leave first, then close the command streams (a closed stream would
            # also make the broker drop this client, but logged as a vanished one).
            await self._heartbeat.unregister(consumer_group=self.group)
            await self._heartbeat.stop()
        if self._routes is not None:
            await self._routes.stop()
        if self._remoting is not None:
            await self._remoting.close()
        self._pqs.clear()
        self._applied.clear()

    def _running(self) -> None:
        state: str = self._state
        if state != "running":
            raise ClientStateError(f"consumer {self.group} is {self._state}; call start() first")

    def _broker(self, broker_name: str) -> BrokerClient | None:
        """The member reads of *broker_name* go to now: its master, or a replica."""
        if self._routes is None or self._remoting is None:
            return None
        addr = self._routes.read_addr(broker_name)
        return self._remoting.broker(addr) if addr else None

    def _master(self, broker_name: str) -> BrokerClient | None:
        """*broker_name*'s master, for writes and locks; None while the route has none."""
        if self._routes is None or self._remoting is None:
            return None
        addr = self._routes.addr_of(broker_name)
        return self._remoting.broker(addr) if addr else None

    def _pull_broker(self, broker_name: str) -> BrokerClient | None:
        """Hook: where this consumer's pulls go (orderly consumers: the master only)."""
        return self._broker(broker_name)

    def _consumer_infos(self) -> list[ConsumerInfo]:
        return [
            ConsumerInfo(
                group=self.group,
                push=self._push,
                broadcasting=self.broadcasting,
                consume_from=str(self.config.consume_from),
                subscriptions=self._all_subscriptions(),
            )
        ]

    def _on_command(self, command: ServerCommand) -> None:
        if self._rebalance is None:
            return
        if isinstance(command, ConsumerIdsChanged) and command.group == self.group:
            log.info("group %s changed on a broker; rebalancing now", self.group)
            self._rebalance.wakeup()
        elif isinstance(command, ChannelOpened):
            self._rebalance.wakeup()
        elif isinstance(command, ResetConsumerOffset) and command.group == self.group:
            self._reset_offsets(command)

    def _reset_offsets(self, command: ResetConsumerOffset) -> None:
        """An admin moved the group (RESET_CONSUMER_CLIENT_OFFSET): each of those queues
        this member reads drops what it buffered and continues at its new offset."""
        if self._offsets is None or self._state != "running":
            return
        moved = {}
        for queue_id, offset in sorted(command.offsets.items()):
            pq = self._pqs.get(MessageQueue(command.topic, command.broker_name, queue_id))
            if pq is not None and not pq.dropped:
                self._offsets.reset(pq.queue, offset)
                self._restart_queue(pq, offset)
                moved[queue_id] = offset
        log.info(
            "group %s: an admin reset %s on %s; this member continues at %s",
            self.group,
            command.topic,
            command.broker_name,
            moved or "no queue it reads",
        )

    def _restart_queue(self, pq: ProcessQueue, offset: int) -> ProcessQueue:
        """Replace *pq* by an empty process queue reading from *offset*."""
        pq.drop()
        fresh = self._new_process_queue(pq.queue, offset)
        self._pqs[pq.queue] = fresh
        self._start_pulling(fresh)  # cancels the old pull loop
        return fresh

    async def _commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.commit_interval_s)
            await self.commit_offsets()

    async def commit_offsets(self) -> int:
        """Write every changed offset now; returns how many were written."""
        if self._offsets is None:
            return 0
        return await self._offsets.persist()

    # -- rebalance ----------------------------------------------------------------------
    async def rebalance_once(self) -> None:
        """One rebalance round over every subscribed topic."""
        if self._state != "running" or self._rebalancer is None:
            return
        async with self._rebalance_lock:
            self._rebalancer.begin_round()
            try:
                for topic in self._all_subscriptions():
                    target = await self._rebalancer.target(topic)
                    # The same assignment object as the one applied whole: nothing to do.
                    if target is not None and target is not self._applied.get(topic):
                        await self._apply(topic, target)
            finally:
                self._rebalancer.end_round()

    async def _apply(self, topic: str, target: set[MessageQueue] | frozenset[MessageQueue]) -> None:
        self._applied.pop(topic, None)
        current = {mq for mq in self._pqs if mq.topic == topic}
        removed = sorted(current - target)
        added = sorted(target - current)
        for mq in removed:
            await self._remove_queue(mq)
        # The new queues' loops start together, so their first pulls share a PullBatch.
        self._deferred_starts = []
        try:
            for mq in added:
                await self._add_queue(mq)
        finally:
            starts, self._deferred_starts = self._deferred_starts, None
            for pq in starts:
                if not pq.dropped:
                    self._start_pulling(pq)
        if {mq for mq in self._pqs if mq.topic == topic} == target:
            self._applied[topic] = frozenset(target) if isinstance(target, set) else target
        if removed or added:
            log.info(
                "group %s member %s: topic %s now %s (+%d -%d)",
                self.group,
                self.client_id,
                topic,
                sorted(f"{q.broker_name}#{q.queue_id}" for q in target),
                len(added),
                len(removed),
            )
            self._queues_changed(topic, target)

    def _queues_changed(
        self,
        topic: str,
        target: set[MessageQueue] | frozenset[MessageQueue],
    ) -> None:
        """Hook: the assignment of *topic* changed."""

    async def _add_queue(self, mq: MessageQueue) -> bool:
        broker = self._broker(mq.broker_name)
        if broker is None or self._offsets is None:
            return False
        if not await self._may_add(mq):
            return False
        try:
            offset = await resolve_start_offset(
                mq,
                broker,
                self._offsets,
                ConsumeFrom(self.config.consume_from),
                timestamp_ms=self._consume_timestamp_ms(),
                timeout_s=self.config.rpc_timeout_s,
            )
        except ClientError as exc:
            log.warning(
                "group %s: cannot find where %s starts: %s; next rebalance retries",
                self.group,
                mq,
                exc,
            )
            return False
        self._offsets.update(mq, offset, increase_only=False)
        pq = self._new_process_queue(mq, offset)
        self._pqs[mq] = pq
        self._start_pulling(pq)
        return True

    async def _may_add(self, mq: MessageQueue) -> bool:
        """Hook: orderly consumers lock the queue first."""
        return True

    async def _remove_queue(self, mq: MessageQueue) -> None:
        self._applied.pop(mq.topic, None)
        pq = self._pqs.pop(mq, None)
        if pq is None:
            return
        pq.drop()
        await _cancel(self._pull_tasks.pop(mq, None))
        for coalescer in self._coalescers.values():
            coalescer.forget(mq)
        if self._offsets is not None:
            self._offsets.update(mq, pq.committed_offset)
            if self._auto_commit:
                await self._offsets.persist([mq])
            self._offsets.remove(mq)
        await self._queue_removed(pq)

    async def _queue_removed(self, pq: ProcessQueue) -> None:
        """Hook: a queue left this member (orderly consumers unlock it)."""

    async def _release_queues(self, pqs: list[ProcessQueue]) -> None:
        """Hook: shutting down with these queues (orderly consumers unlock them)."""

    def _consume_timestamp_ms(self) -> int:
        ts = self.config.consume_timestamp_ms
        return ts if ts is not None else self._clock.now_ms() - DEFAULT_TIMESTAMP_LOOKBACK_MS

    def _new_process_queue(self, mq: MessageQueue, offset: int) -> ProcessQueue:
        cfg = self.config
        return ProcessQueue(
            mq,
            next_offset=offset,
            max_messages=cfg.pull_threshold_for_queue,
            max_bytes=cfg.pull_threshold_size_for_queue_bytes,
            max_span=None,
        )

    def _start_pulling(self, pq: ProcessQueue) -> None:
        if self._deferred_starts is not None:
            self._deferred_starts.append(pq)
            return
        old = self._pull_tasks.get(pq.queue)
        if old is not None:
            old.cancel()
        self._pull_tasks[pq.queue] = asyncio.get_running_loop().create_task(
            self._pull_loop(pq), name=f"PullService {pq.queue}"
        )

    # -- pulling ------------------------------------------------------------------------
    async def _pull_loop(self, pq: ProcessQueue) -> None:
        mq = pq.queue
        cfg = self.config
        last: PullCoalescer | None = None
        while not pq.dropped:
            await pq.wait_for_room()
            if pq.dropped or not await self._ready_to_pull(pq):
                continue
            coalescer = self._coalescer(mq.broker_name)
            if last is not None and coalescer is not last:
                last.forget(mq)  # moved to another member: its read-ahead is not ours
                log.info(
                    "group %s: %s now reads from %s",
                    self.group,
                    mq,
                    coalescer.broker.addr if coalescer else "nowhere",
                )
            last = coalescer
            try:
                if coalescer is None:
                    raise ClientError(f"no address for broker {mq.broker_name}")
                selector = self._all_subscriptions().get(mq.topic) or _ALL
                reply = await coalescer.pull(
                    QueuePull(
                        queue=mq,
                        offset=pq.next_offset,
                        max_messages=cfg.pull_batch_size,
                        subscription=selector.expression,
                        expression_type=selector.type,
                        commit_offset=self._commit_offset(mq),
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
        if reply.status is not PullStatus.OFFSET_ILLEGAL or self._routes is None:
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
        if broker is None or self._routes is None:
            return None
        cfg = self.config
        suspend_ms = cfg.pull_suspend_ms
        if self._routes.addr_of(broker_name) != broker.addr:
            suspend_ms = min(suspend_ms, int(cfg.unreachable_suspect_s * 1000))
        key = f"{broker.addr}/{suspend_ms}"
        coalescer = self._coalescers.get(key)
        if coalescer is None or coalescer.broker is not broker:
            coalescer = self._coalescers[key] = PullCoalescer(
                broker,
                self.group,
                suspend_ms=suspend_ms,
                timeout_s=suspend_ms / 1000 + PULL_RPC_MARGIN_S,
            )
        return coalescer

    async def _pull_failed(self, pq: ProcessQueue, exc: ClientError) -> None:
        """Pause the queue's pull loop (pullTimeDelayMillsWhenException, 3 s).

        A busy broker (SYSTEM_BUSY) keeps its route, and the pause is spread by
        a random part so that the loops it refused do not come back together.
        """
        delay_s = self.config.pull_delay_on_error_s
        if (
            isinstance(exc, UnavailableError)
            and exc.unreachable
            and self._routes is not None
            and self._routes.read_addr(pq.queue.broker_name) not in (None, exc.addr)
        ):
            # The member did not answer and another serves the queue: go there now.
            log.info(
                "pull from %s at %s failed (%s); continuing at offset %d on %s",
                pq.queue,
                exc.addr,
                exc.code,
                pq.next_offset,
                self._routes.read_addr(pq.queue.broker_name),
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
            if self._routes is not None and not unreachable:  # unreachable: already refetching
                self._routes.invalidate(pq.queue.topic)
        await asyncio.sleep(delay_s)

    async def _ready_to_pull(self, pq: ProcessQueue) -> bool:
        """Hook: orderly consumers wait for the queue lock."""
        return True

    @property
    def _auto_commit(self) -> bool:
        """Commit offsets every commit_interval_s, on pulls and at shutdown."""
        return True

    def _commit_offset(self, mq: MessageQueue) -> int | None:
        if self.broadcasting or self._offsets is None or not self._auto_commit:
            return None
        return self._offsets.get(mq)

    def _on_pull_reply(self, pq: ProcessQueue, reply: PullReply) -> None:
        mq = pq.queue
        if reply.status is PullStatus.FOUND:
            messages = decode_messages(reply.records, mq.broker_name)
            tags = self._tag_sets.get(mq.topic)
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
            if not len(pq) and self._offsets is not None:
                self._offsets.update(mq, reply.next_begin_offset, increase_only=False)
            return
        else:
            pq.next_offset = max(pq.next_offset, reply.next_begin_offset)
        if not len(pq) and self._offsets is not None:
            self._offsets.update(mq, pq.committed_offset)

    def _on_messages(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        raise NotImplementedError


async def _cancel(task: asyncio.Task[Any] | None) -> None:
    await cancel_and_wait(task)
