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
Each assigned queue has one long-polling pull loop (:mod:`.fetcher`);
messages go to a :mod:`.consume_service`, concurrent by default or orderly
(``orderly=True``: the queue is locked on its broker, renewed every 20 s,
and its messages are handled one batch at a time, in offset order).
Offsets are committed every 5 s and at shutdown. ``start()`` raises
PermissionDeniedError when every broker's ACL refuses the group or a subscribed
topic (as the pull consumer's), rather than pulling in vain.

While a broker name's master is away, reads go to a replica
(:mod:`.fetcher`). Locks exist only on the master, so an orderly
consumer pauses that broker's queues — no pull, no handler call — until the
master answers again and the lock is taken anew (RocketMQ 4's behaviour,
:mod:`.queue_locks`).

The consumer is assembled from parts (:mod:`.consumer_base`): this module
chooses the consume service and hands the parts its callbacks (messages to
the consume service, a queue gone or replaced to its ``forget``, the broker
locks when orderly).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from pocketmq.client.config import ConsumerConfig, build, parse_namesrv
from pocketmq.client.consume_service import (
    ConcurrentConsumeService,
    Listener,
    OrderlyConsumeService,
)
from pocketmq.client.consumer_base import ConsumerParts, ConsumerWiring, assemble, consumer_info
from pocketmq.client.dedup import DedupWindow, dedup_listener
from pocketmq.client.errors import ClientError, ClientStateError, UnsupportedError
from pocketmq.client.heartbeat import HeartbeatService, make_client_id
from pocketmq.client.model import ClientState, MessageExt, MessageModel, MessageQueue, retry_topic
from pocketmq.client.process_queue import ProcessQueue
from pocketmq.client.rebalance import Rebalancer
from pocketmq.client.remoting import ConsumerInfo, Remoting
from pocketmq.client.subscription import SubscriptionState
from pocketmq.client.trace import (
    TraceDispatcher,
    close_trace,
    dead_letter_rule,
    start_trace,
    trace_listener,
)
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.filter import MessageSelector
from pocketmq.common.validation import check_group

__all__ = ["PushConsumer"]

log = logging.getLogger(__name__)

DEFAULT_MAX_RECONSUME_TIMES = 16  # concurrent consumers, when max_reconsume_times is -1


class PushConsumer:
    """A consumer whose SDK pulls and calls your listener (RocketMQ's DefaultMQPushConsumer).

    Construct it with the group, the nameservers and options (``ConsumerConfig``
    fields as keywords, or ``config=``), subscribe, register a listener, start::

        consumer = PushConsumer(group="cg", namesrv="127.0.0.1:9876", consume_from="first")
        consumer.subscribe("orders", "paid || refunded")   # or MessageSelector.by_sql(...)

        @consumer.listener
        async def handle(messages: list[MessageExt]) -> ConsumeResult:
            return ConsumeResult.CONSUME_SUCCESS

        async with consumer: ...          # start() ... shutdown()

    Main methods: :meth:`subscribe` / :meth:`unsubscribe`, :meth:`listener` (or
    :meth:`register_listener`), :meth:`start`, :meth:`shutdown`,
    :meth:`commit_offsets`, :meth:`assigned_queues`; :attr:`state`
    (a :class:`~pocketmq.client.model.ClientState`), :attr:`consumed`.
    ``orderly=True`` handles each queue's messages one batch at a time, in order,
    under a broker lock; ``message_model=BROADCASTING`` gives every member every
    queue. The listener returns CONSUME_SUCCESS, or RECONSUME_LATER to have the
    messages redelivered later (``max_reconsume_times``, then the dead-letter topic).
    """

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
        problem = check_group(group)
        if problem:
            raise ValueError(f"consumer group: {problem}")
        self.group = group
        self.namesrv = parse_namesrv(namesrv)
        self.config: ConsumerConfig = cfg
        self.client_id = make_client_id(instance_name)
        self._clock = clock or SystemClock()
        self._state = ClientState.CREATED
        clustering = cfg.message_model is not MessageModel.BROADCASTING
        self._subscription = SubscriptionState(
            retry_topic=retry_topic(group) if clustering else None
        )
        self._parts: ConsumerParts | None = None
        self._listener: Listener | None = None
        self._consume: ConcurrentConsumeService | OrderlyConsumeService | None = None
        self._warned: set[str] = set()
        self.trace: TraceDispatcher | None = None  # enable_trace: client/trace.py
        self.dedup: DedupWindow | None = None
        if cfg.dedup_window or cfg.dedup_window_count:
            self.dedup = DedupWindow(
                window_s=cfg.dedup_window,
                max_ids=cfg.dedup_window_count or 100_000,
                monotonic=self._clock.monotonic,
            )

    # -- configuration ------------------------------------------------------------------
    @property
    def state(self) -> ClientState:
        """created, starting, running, shutting down or shut down."""
        return self._state

    @property
    def broadcasting(self) -> bool:
        return self.config.message_model is MessageModel.BROADCASTING

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Read *topic*'s messages that *expression* selects: a tag expression (``*`` or
        ``A || B``, also ``MessageSelector.by_tag``) or ``MessageSelector.by_sql("a > 1")``,
        an SQL92 filter on the message properties that the broker applies."""
        self._subscription.subscribe(topic, expression)

    def unsubscribe(self, topic: str) -> None:
        self._subscription.unsubscribe(topic)

    def assigned_queues(self) -> set[MessageQueue]:
        """The queues this member reads now."""
        return self._parts.fetcher.assigned() if self._parts is not None else set()

    def pull_stats(self) -> dict[str, tuple[int, int]]:
        """Broker address -> (PullBatch calls made, queue pulls they carried)."""
        return self._parts.fetcher.pull_stats() if self._parts is not None else {}

    async def commit_offsets(self) -> int:
        """Write every changed offset now; returns how many were written."""
        return await self._parts.offsets.commit() if self._parts is not None else 0

    async def rebalance_once(self) -> None:
        """One rebalance round over every subscribed topic."""
        if self._parts is not None:
            await self._parts.coordinator.rebalance_once()

    # -- listener -----------------------------------------------------------------------
    def listener(self, fn: Listener) -> Listener:
        """Decorator: ``@consumer.listener`` registers the message handler."""
        self.register_listener(fn)
        return fn

    def register_listener(self, fn: Listener) -> None:
        if self._state is not ClientState.CREATED:
            raise ClientStateError("register the listener before start()")
        self._listener = fn

    # -- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        """Join the group and start consuming; ClientStateError without a listener or a
        subscription, or when started before; PermissionDeniedError (naming the access
        key and the group or topic) when every broker's ACL refuses the group or one of
        its subscribed topics."""
        if self._listener is None:
            raise ClientStateError(
                f"consumer {self.group} has no listener; decorate a "
                "handler with @consumer.listener before start()"
            )
        if not self._subscription.subscriptions:
            raise ClientStateError(
                f"consumer {self.group} subscribes to nothing; call "
                "subscribe(topic, expression) before start()"
            )
        cfg = self.config
        self.trace = await start_trace(self)
        self._consume = self._consume_service(self._listener)
        self._consume.start()
        if self._state is not ClientState.CREATED:
            raise ClientStateError(f"consumer {self.group} is {self._state}; start it once")
        self._state = ClientState.STARTING
        consume = self._consume
        self._parts = parts = assemble(
            group=self.group,
            client_id=self.client_id,
            namesrv=self.namesrv,
            config=cfg,
            clock=self._clock,
            subscription=self._subscription,
            wiring=ConsumerWiring(
                push=True,
                is_running=lambda: self._state is ClientState.RUNNING,
                on_messages=consume.submit,
                max_span=None if cfg.orderly else cfg.consume_concurrently_max_span,
                orderly_locks=self._needs_locks,
                forget=consume.forget if isinstance(consume, OrderlyConsumeService) else None,
                warn_once=self._warn_once,
            ),
        )
        await parts.connect(list(self._subscription.all()))
        self._state = ClientState.RUNNING
        await parts.run()
        refused = parts.refusal()
        if refused is not None:  # retrying would be refused forever: say so now
            await self.shutdown()
            raise refused
        log.info(
            "push consumer %s (%s) started: %s, %s, subscriptions %s",
            self.group,
            self.client_id,
            cfg.message_model,
            "orderly" if cfg.orderly else "concurrent",
            self._subscription.subscriptions,
        )

    def _consume_service(
        self, listener: Listener
    ) -> ConcurrentConsumeService | OrderlyConsumeService:
        cfg = self.config
        if self.trace is not None:
            listener = trace_listener(listener, self.trace, dead_letter_rule(cfg))
        if self.dedup is not None:
            listener = dedup_listener(listener, self.dedup)
        if cfg.orderly:
            return OrderlyConsumeService(
                listener,
                on_done=self._handled,
                send_back=self._send_back,
                batch_max_size=cfg.consume_batch_max_size,
                suspend_s=cfg.suspend_current_queue_ms / 1000,
                max_reconsume_times=cfg.max_reconsume_times,  # -1: no limit for orderly
                is_locked=self._is_locked,
            )
        return ConcurrentConsumeService(
            listener,
            on_done=self._handled,
            send_back=self._send_back,
            concurrency=cfg.consume_concurrency,
            batch_max_size=cfg.consume_batch_max_size,
            broadcasting=self.broadcasting,
        )

    async def shutdown(self) -> None:
        """Stop pulling, let handlers finish, commit offsets, leave the group."""
        if self._state in (ClientState.CREATED, ClientState.SHUT_DOWN):
            self._state = ClientState.SHUT_DOWN
            return
        self._state = ClientState.SHUTTING_DOWN
        if self._parts is not None:
            await self._parts.stop()
        if self._consume is not None:
            await self._consume.stop(self.config.shutdown_timeout_s)
        await close_trace(self.trace, self.config.rpc_timeout_s)
        if self._parts is not None:
            await self._parts.close()
        self._state = ClientState.SHUT_DOWN
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
    def _handled(self, pq: ProcessQueue, offsets: list[int]) -> None:
        committed = pq.remove(offsets)
        if not pq.dropped and self._parts is not None:
            self._parts.offsets.store.update(pq.queue, committed)

    async def _send_back(self, pq: ProcessQueue, msg: MessageExt) -> bool:
        # a write: never to a replica
        broker = self._parts.brokers.master(pq.queue.broker_name) if self._parts else None
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

    # -- orderly: broker locks (client/queue_locks.py) ----------------------------------
    @property
    def _needs_locks(self) -> bool:
        return self.config.orderly and not self.broadcasting

    def _is_locked(self, pq: ProcessQueue) -> bool:
        locks = self._parts.locks if self._parts is not None else None
        return locks is None or locks.is_locked(pq)

    async def lock_all(self) -> None:
        """Renew the broker locks of every orderly queue (run every 20 s)."""
        if self._parts is not None and self._parts.locks is not None:
            await self._parts.locks.lock_all()

    # -- for tests and benchmarks: the parts' state ---------------------------------------
    @property
    def _pqs(self) -> dict[MessageQueue, ProcessQueue]:
        return self._parts.fetcher.pqs if self._parts is not None else {}

    def _consumer_infos(self) -> list[ConsumerInfo]:
        return [consumer_info(self.group, self.config, self._subscription, push=True)]

    @property
    def _remoting(self) -> Remoting | None:
        return self._parts.remoting if self._parts is not None else None

    @property
    def _heartbeat(self) -> HeartbeatService | None:
        return self._parts.heartbeat if self._parts is not None else None

    @property
    def _rebalancer(self) -> Rebalancer | None:
        return self._parts.coordinator.rebalancer if self._parts is not None else None
