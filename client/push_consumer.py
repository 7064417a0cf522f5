"""PushConsumer: the SDK pulls, the user's listener is called.

::

    consumer = PushConsumer(group="cg", namesrv="127.0.0.1:9876", consume_from="first")
    consumer.subscribe("orders", "paid || refunded")

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        return ConsumeResult.CONSUME_SUCCESS

    await consumer.start(); ...; await consumer.shutdown()

Clustering (default) divides the queues among the group's members;
broadcasting gives every member every queue, with offsets in a local file.
Each assigned queue has one long-polling pull loop (:mod:`.consumer_base`);
messages go to a :mod:`.consume_service`, concurrent by default or orderly
(``orderly=True``: the queue is locked on its broker, renewed every 20 s,
and its messages are handled one batch at a time, in offset order).
Offsets are committed every 5 s and at shutdown.

While a broker name's master is away, reads go to a replica
(:mod:`.consumer_base`). Locks exist only on the master, so an orderly
consumer pauses that broker's queues — no pull, no handler call — until the
master answers again and the lock is taken anew (RocketMQ 4's behaviour).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

from pocketmq.client.config import ConsumerConfig, build
from pocketmq.client.consume_service import (
    ConcurrentConsumeService,
    Listener,
    OrderlyConsumeService,
)
from pocketmq.client.consumer_base import ConsumerBase, _cancel
from pocketmq.client.dedup import DedupWindow, dedup_listener
from pocketmq.client.errors import ClientError, ClientStateError, UnsupportedError
from pocketmq.client.model import MessageExt, MessageQueue
from pocketmq.client.process_queue import ProcessQueue
from pocketmq.client.remoting import BrokerClient
from pocketmq.client.trace import (
    TraceDispatcher,
    close_trace,
    dead_letter_rule,
    start_trace,
    trace_listener,
)
from pocketmq.common.clock import Clock

__all__ = ["PushConsumer"]

log = logging.getLogger(__name__)

LOCK_TTL_S = 30.0  # a lock the client has not renewed for this long is not trusted
DEFAULT_MAX_RECONSUME_TIMES = 16  # concurrent consumers, when max_reconsume_times is -1


class PushConsumer(ConsumerBase):
    _push = True

    def __init__(
        self,
        *,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        config: ConsumerConfig | None = None,
        clock: Clock | None = None,
        instance_name: str | None = None,
        **options: Any,
    ) -> None:
        cfg: ConsumerConfig = build(ConsumerConfig, config, options)
        super().__init__(
            group=group, namesrv=namesrv, config=cfg, clock=clock, instance_name=instance_name
        )
        self.config: ConsumerConfig = cfg
        self._listener: Listener | None = None
        self._consume: ConcurrentConsumeService | OrderlyConsumeService | None = None
        self._lock_task: asyncio.Task[None] | None = None
        self._warned: set[str] = set()
        self.trace: TraceDispatcher | None = None  # enable_trace: client/trace.py
        self.dedup: DedupWindow | None = None
        if cfg.dedup_window or cfg.dedup_window_count:
            self.dedup = DedupWindow(
                window_s=cfg.dedup_window,
                max_ids=cfg.dedup_window_count or 100_000,
                monotonic=self._clock.monotonic,
            )

    # -- listener -----------------------------------------------------------------------
    def listener(self, fn: Listener) -> Listener:
        """Decorator: ``@consumer.listener`` registers the message handler."""
        self.register_listener(fn)
        return fn

    def register_listener(self, fn: Listener) -> None:
        if self._state != "created":
            raise ClientStateError("register the listener before start()")
        self._listener = fn

    # -- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        if self._listener is None:
            raise ClientStateError(
                f"consumer {self.group} has no listener; decorate a "
                "handler with @consumer.listener before start()"
            )
        if not self._subscriptions:
            raise ClientStateError(
                f"consumer {self.group} subscribes to nothing; call "
                "subscribe(topic, expression) before start()"
            )
        cfg = self.config
        listener = self._listener
        self.trace = await start_trace(self)
        if self.trace is not None:
            listener = trace_listener(listener, self.trace, dead_letter_rule(cfg))
        if self.dedup is not None:
            listener = dedup_listener(listener, self.dedup)
        if cfg.orderly:
            max_reconsume = cfg.max_reconsume_times  # -1: no limit for orderly
            self._consume = OrderlyConsumeService(
                listener,
                on_done=self._handled,
                send_back=self._send_back,
                batch_max_size=cfg.consume_batch_max_size,
                suspend_s=cfg.suspend_current_queue_ms / 1000,
                max_reconsume_times=max_reconsume,
                is_locked=self._is_locked,
            )
        else:
            self._consume = ConcurrentConsumeService(
                listener,
                on_done=self._handled,
                send_back=self._send_back,
                concurrency=cfg.consume_concurrency,
                batch_max_size=cfg.consume_batch_max_size,
                broadcasting=self.broadcasting,
            )
        self._consume.start()
        await self._start_services()
        if self._needs_locks:
            self._lock_task = asyncio.get_running_loop().create_task(
                self._lock_loop(), name=f"LockRenewService {self.group}"
            )
        log.info(
            "push consumer %s (%s) started: %s, %s, subscriptions %s",
            self.group,
            self.client_id,
            cfg.message_model,
            "orderly" if cfg.orderly else "concurrent",
            self._subscriptions,
        )

    async def shutdown(self) -> None:
        """Stop pulling, let handlers finish, commit offsets, leave the group."""
        if self.state in ("created", "shut down"):
            self._state = "shut down"
            return
        await self._stop_services()
        await _cancel(self._lock_task)
        if self._consume is not None:
            await self._consume.stop(self.config.shutdown_timeout_s)
        await close_trace(self.trace, self.config.rpc_timeout_s)
        await self._close_services()
        self._state = "shut down"
        log.info("push consumer %s (%s) shut down", self.group, self.client_id)

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    @property
    def consumed(self) -> int:
        """Messages the listener has handled successfully so far."""
        return self._consume.consumed if self._consume is not None else 0

    @property
    def deduplicated(self) -> int:
        """Messages acknowledged from the de-duplication window, listener not called."""
        return self.dedup.dropped if self.dedup is not None else 0

    # -- messages -----------------------------------------------------------------------
    def _new_process_queue(self, mq: MessageQueue, offset: int) -> ProcessQueue:
        cfg = self.config
        return ProcessQueue(
            mq,
            next_offset=offset,
            max_messages=cfg.pull_threshold_for_queue,
            max_bytes=cfg.pull_threshold_size_for_queue_bytes,
            max_span=None if cfg.orderly else cfg.consume_concurrently_max_span,
        )

    def _on_messages(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        assert self._consume is not None
        self._consume.submit(pq, messages)

    def _handled(self, pq: ProcessQueue, offsets: list[int]) -> None:
        committed = pq.remove(offsets)
        if not pq.dropped and self._offsets is not None:
            self._offsets.update(pq.queue, committed)

    async def _send_back(self, pq: ProcessQueue, msg: MessageExt) -> bool:
        broker = self._master(pq.queue.broker_name)  # a write: never to a replica
        if broker is None:
            return False
        cfg = self.config
        max_times = cfg.max_reconsume_times
        if max_times < 0:
            max_times = 2**31 - 1 if cfg.orderly else DEFAULT_MAX_RECONSUME_TIMES
        past_max = cfg.orderly and msg.reconsume_times >= max_times
        try:
            await broker.consumer_send_msg_back(
                group=self.group,
                phys_offset=msg.phys_offset,
                delay_level=-1 if past_max else 0,
                origin_topic=msg.topic,
                origin_msg_id=msg.msg_id,
                max_reconsume_times=max_times,
                timeout_s=cfg.rpc_timeout_s,
            )
        except UnsupportedError as exc:
            self._warn_once(
                "send-back",
                "the broker cannot take messages back (%s); failed messages are retried locally",
                exc,
            )
            return False
        except ClientError as exc:
            log.warning(
                "cannot send message %s back to %s: %s; retrying it locally",
                msg.msg_id,
                pq.queue.broker_name,
                exc,
            )
            return False
        return True

    def _warn_once(self, key: str, text: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(text, *args)

    # -- orderly: broker locks ----------------------------------------------------------
    @property
    def _needs_locks(self) -> bool:
        return self.config.orderly and not self.broadcasting

    def _is_locked(self, pq: ProcessQueue) -> bool:
        if not self._needs_locks:
            return True
        return (
            pq.locked
            and time.monotonic() < pq.lock_expires_at_s
            and self._master_usable(pq.queue.broker_name)
        )

    def _master_usable(self, broker_name: str) -> bool:
        return self._routes is not None and self._routes.members.master_usable(broker_name)

    def _pull_broker(self, broker_name: str) -> BrokerClient | None:
        if self._needs_locks:
            return self._master(broker_name)  # the lock holder reads where it locked
        return self._broker(broker_name)

    async def _may_add(self, mq: MessageQueue) -> bool:
        if not self._needs_locks:
            return True
        locked = await self._lock(mq.broker_name, [mq])
        if mq not in locked:
            log.info(
                "group %s: %s is still locked by another member; next rebalance retries",
                self.group,
                mq,
            )
            return False
        return True

    def _start_pulling(self, pq: ProcessQueue) -> None:
        if self._needs_locks:
            pq.locked = True
            pq.lock_expires_at_s = time.monotonic() + LOCK_TTL_S
        super()._start_pulling(pq)

    async def _ready_to_pull(self, pq: ProcessQueue) -> bool:
        if self._is_locked(pq):
            return True
        if self._master_usable(pq.queue.broker_name):
            # The master is back (or the lock lapsed): take the lock again now rather
            # than at the next renewal round.
            locked = pq.queue in await self._lock(pq.queue.broker_name, [pq.queue])
            if locked and not pq.dropped:
                pq.locked = True
                pq.lock_expires_at_s = time.monotonic() + LOCK_TTL_S
                return True
        await asyncio.sleep(self.config.suspend_current_queue_ms / 1000)
        return False

    async def _lock(self, broker_name: str, queues: list[MessageQueue]) -> set[MessageQueue]:
        broker = self._master(broker_name)
        if broker is None:
            return set()
        try:
            return await broker.lock_batch(
                self.group, self.client_id, queues, timeout_s=self.config.rpc_timeout_s
            )
        except UnsupportedError as exc:
            self._warn_once(
                "lock",
                "the broker cannot lock queues (%s); orderly consumption "
                "relies on the rebalance alone",
                exc,
            )
            return set(queues)
        except ClientError as exc:
            log.warning("group %s: cannot lock queues on %s: %s", self.group, broker_name, exc)
            return set()

    async def lock_all(self) -> None:
        """Renew the broker locks of every orderly queue (run every 20 s)."""
        by_broker: dict[str, list[ProcessQueue]] = {}
        for pq in self._pqs.values():
            if not pq.dropped:
                by_broker.setdefault(pq.queue.broker_name, []).append(pq)
        for broker_name, pqs in by_broker.items():
            locked = await self._lock(broker_name, [pq.queue for pq in pqs])
            now = time.monotonic()
            for pq in pqs:
                pq.locked = pq.queue in locked
                if pq.locked:
                    pq.lock_expires_at_s = now + LOCK_TTL_S

    async def _lock_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.lock_renew_interval_s)
            await self.lock_all()

    def _restart_queue(self, pq: ProcessQueue, offset: int) -> ProcessQueue:
        if isinstance(self._consume, OrderlyConsumeService):
            self._consume.forget(pq)
        return super()._restart_queue(pq, offset)

    async def _queue_removed(self, pq: ProcessQueue) -> None:
        if isinstance(self._consume, OrderlyConsumeService):
            self._consume.forget(pq)
        if self._needs_locks:
            await self._unlock(pq.queue.broker_name, [pq.queue])

    async def _release_queues(self, pqs: list[ProcessQueue]) -> None:
        if not self._needs_locks:
            return
        by_broker: dict[str, list[MessageQueue]] = {}
        for pq in pqs:
            by_broker.setdefault(pq.queue.broker_name, []).append(pq.queue)
        for broker_name, queues in by_broker.items():
            await self._unlock(broker_name, queues)

    async def _unlock(self, broker_name: str, queues: list[MessageQueue]) -> None:
        broker = self._master(broker_name)
        if broker is None:
            return
        try:
            await broker.unlock_batch(
                self.group, self.client_id, queues, timeout_s=self.config.rpc_timeout_s
            )
        except ClientError as exc:
            log.debug("unlock of %d queue(s) on %s failed: %s", len(queues), broker_name, exc)
