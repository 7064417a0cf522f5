"""Producer: sends messages to the brokers serving their topic.

::

    async with Producer(group="pg", namesrv="127.0.0.1:9876") as producer:
        result = await producer.send(Message(topic="orders", body=b"..."))

* ``send(msg)`` picks a queue round robin over the writable queues of every
  broker serving the topic, steered away from slow or failed brokers
  (:mod:`.fault_strategy`). A retriable failure is retried up to
  ``retry_times_when_send_failed`` (2) more times, each preferring another
  broker, all within ``send_timeout_ms`` (3 s).
* ``send(msg, queue=mq)`` and ``send(msg, selector=fn, arg=x)`` (``fn(queues,
  msg, arg) -> MessageQueue``) choose the queue, for ordered messages; they
  make one attempt, since another queue would break the order.
* ``send_batch(msgs)`` sends messages of one topic to one queue in one call.
* ``send_oneway(msg)`` hands the message over and does not wait for the broker.
* A broker at a limit answers SYSTEM_BUSY (RESOURCE_EXHAUSTED): the send is
  tried again after an exponential back-off (20 ms doubling to 1 s), for as
  long as the budget lasts, and the broker is not avoided for it.

Concurrent ``send`` calls to one broker are coalesced into SendBatch calls
(:mod:`.accumulator`); every caller still gets its own :class:`SendResult`.

Idempotent by default (``idempotent=False``: RocketMQ's plain producer): records
are numbered per queue under a producer id from each broker, kept in order per
queue, and a retry is stored once (:mod:`.idempotence`, :mod:`.idempotent_send`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from pocketmq.client.accumulator import BrokerBatcher, RecordAccumulator
from pocketmq.client.broker_client import BrokerClient
from pocketmq.client.config import ProducerConfig, build, parse_namesrv, transport
from pocketmq.client.errors import (
    ClientError,
    ClientStateError,
    InvalidMessageError,
    NotMasterError,
    RouteNotFoundError,
    SendTimeoutError,
)
from pocketmq.client.fault_strategy import LatencyFaultTolerance, QueueSelector
from pocketmq.client.heartbeat import HeartbeatService, local_ip, make_client_id
from pocketmq.client.idempotence import ProducerSessionManager
from pocketmq.client.idempotent_send import (
    first_failed,
    not_stored_ok,
    record_encoder,
    send_coalesced,
    send_idempotent,
)
from pocketmq.client.message_codec import (
    check_batch,
    check_message,
    encode_message,
    encode_messages,
    framed_records_size,
)
from pocketmq.client.model import ClientState, Message, MessageQueue, SendResult, SendStatus
from pocketmq.client.remoting import Remoting, SendReceipt
from pocketmq.client.route import RouteService
from pocketmq.client.send_retry import _back_off as _back_off
from pocketmq.client.send_retry import (
    _flow_controlled,
    _NotStoredOk,
    _redirected,
    _result,
    _retry_elsewhere,
    _retry_while_busy,
    send_with_retries,
)
from pocketmq.client.send_retry import _stored_ok as _stored_ok  # idempotent_send imports
from pocketmq.client.trace import TraceDispatcher, close_trace, install_producer_trace, start_trace
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.message import pack_host
from pocketmq.common.msgid import UniqueIdGenerator
from pocketmq.common.validation import check_group

__all__ = ["MessageQueueSelector", "Producer"]

log = logging.getLogger(__name__)

MessageQueueSelector = Callable[[list[MessageQueue], Message, Any], MessageQueue]


class Producer:
    """Sends messages to the brokers serving their topic (RocketMQ's DefaultMQProducer).

    Construct it with a producer group, the nameservers and options (``ProducerConfig``
    fields as keywords, or ``config=``); start it, or use ``async with``::

        async with Producer(group="pg", namesrv="127.0.0.1:9876", send_timeout_ms=5000) as p:
            result = await p.send(Message(topic="orders", body=b"...", tags="paid"))

    Main methods: :meth:`send` (``queue=``/``selector=`` for ordered messages),
    :meth:`send_batch`, :meth:`send_oneway`, :meth:`fetch_publish_queues`, :meth:`start`,
    :meth:`shutdown`; :attr:`state` (a :class:`~pocketmq.client.model.ClientState`).
    """

    def __init__(
        self,
        *,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        config: ProducerConfig | None = None,
        clock: Clock | None = None,
        instance_name: str | None = None,
        **options: Any,
    ) -> None:
        problem = check_group(group)
        if problem:
            raise ValueError(f"producer group: {problem}")
        self.group = group
        self.namesrv = parse_namesrv(namesrv)
        self.config: ProducerConfig = build(ProducerConfig, config, options)
        self._transport = transport(self.config)  # refuses half a key pair now
        self.client_id = make_client_id(instance_name)
        self._clock = clock or SystemClock()
        self.fault = LatencyFaultTolerance(
            clock=self._clock, enabled=self.config.latency_fault_enable
        )
        self._selector = QueueSelector(self.fault)
        ip = local_ip()
        self._ids = UniqueIdGenerator(ip)
        self._born_host = pack_host((ip, 0))
        #: send_batch's requests: the records, then this (the group, omit_sent_columns)
        self._batch_tail = BrokerClient.send_batch_tail(group)
        self._remoting: Remoting | None = None
        self._routes: RouteService | None = None
        self._heartbeat: HeartbeatService | None = None
        self._accumulator: RecordAccumulator | None = None
        self._oneway: set[asyncio.Future[SendReceipt]] = set()
        #: idempotent: the producer id, epoch and numbering per broker name
        self._sessions: ProducerSessionManager | None = None
        self.trace: TraceDispatcher | None = None  # enable_trace: client/trace.py
        self.trace_oneway: Callable[..., None] | None = None  # set with self.trace
        self._state = ClientState.CREATED

    @property
    def state(self) -> ClientState:
        """``created``, ``running``, ``shutting down`` or ``shut down``."""
        return self._state

    # -- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        if self._state is not ClientState.CREATED:
            raise ClientStateError(f"producer {self.group} is {self._state}; start it once")
        cfg = self.config
        self._remoting = Remoting(self._transport)
        nameserver = self._remoting.nameserver(self.namesrv)
        self._routes = RouteService(
            nameserver.get_route,
            fetch_many=nameserver.get_routes,
            refresh_interval_s=cfg.route_refresh_interval_s,
            clock=self._clock,
        )
        self._heartbeat = HeartbeatService(
            self._remoting,
            self._routes,
            self.client_id,
            producer_groups=[self.group],
            interval_s=cfg.heartbeat_interval_s,
        )
        self._accumulator = RecordAccumulator(self._new_batcher)
        if cfg.idempotent:
            self._sessions = ProducerSessionManager(
                self._init_producer_id, identity=cfg.producer_identity
            )
        self._routes.start()
        await self._heartbeat.start()
        self._state = ClientState.RUNNING
        self.trace = await start_trace(self)
        if self.trace is not None:
            install_producer_trace(self, self.trace)
        log.info(
            "producer %s (%s) started, nameservers %s", self.group, self.client_id, self.namesrv
        )

    def _new_batcher(self, addr: str) -> BrokerBatcher:
        assert self._remoting is not None
        broker = self._remoting.broker(addr)
        cfg = self.config

        async def one(record: bytes, timeout_s: float) -> list[SendReceipt]:
            return await broker.send_message(record, producer_group=self.group, timeout_s=timeout_s)

        async def batch(records: bytes, timeout_s: float) -> list[SendReceipt]:
            return await broker.send_batch(records, producer_group=self.group, timeout_s=timeout_s)

        return BrokerBatcher(
            addr,
            one,
            batch,
            linger_s=cfg.linger_ms / 1000,
            max_messages=cfg.batch_max_messages,
            max_bytes=cfg.batch_max_bytes,
            max_in_flight=cfg.max_in_flight_per_broker,
            call_timeout_s=(cfg.request_timeout_ms if cfg.idempotent else cfg.send_timeout_ms)
            / 1000,
            monotonic=self._clock.monotonic,
        )

    async def _init_producer_id(
        self,
        addr: str,
        identity: str,
        topics: list[str],
    ) -> tuple[int, int, list[tuple[str, int, int]]]:
        assert self._remoting is not None
        return await self._remoting.broker(addr).init_producer_id(
            identity=identity,
            topics=topics,
            producer_group=self.group,
            timeout_s=self.config.request_timeout_ms / 1000,
        )

    async def shutdown(self) -> None:
        """Send what is pending (up to send_timeout_ms), leave the brokers, close."""
        if self._state is not ClientState.RUNNING:
            self._state = ClientState.SHUT_DOWN
            return
        self._state = ClientState.SHUTTING_DOWN
        timeout_s = self.config.send_timeout_ms / 1000
        if self._accumulator is not None:
            await self._accumulator.close(timeout_s)
        await close_trace(self.trace, timeout_s)  # after the last traced send ended
        if self._heartbeat is not None:
            # Leave first, then close the command streams (a closed stream would
            # also make the broker drop this client, but logged as a vanished one).
            await self._heartbeat.unregister(producer_group=self.group)
            await self._heartbeat.stop()
        if self._routes is not None:
            await self._routes.stop()
        if self._remoting is not None:
            await self._remoting.close()
        self._state = ClientState.SHUT_DOWN
        log.info("producer %s (%s) shut down", self.group, self.client_id)

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    def _running(self) -> tuple[RouteService, RecordAccumulator]:
        routes, accumulator = self._routes, self._accumulator
        if self._state is not ClientState.RUNNING or routes is None or accumulator is None:
            raise ClientStateError(
                f"producer {self.group} is {self._state}; call start() "
                "(or use 'async with') before sending"
            )
        return routes, accumulator

    # -- sending ------------------------------------------------------------------------
    async def send(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
        timeout_ms: int | None = None,
    ) -> SendResult:
        """Send one message and wait for the broker's answer."""
        routes, accumulator = self._running()
        cfg = self.config
        check_message(msg, max_body_bytes=cfg.max_message_size_bytes)
        budget_s = (timeout_ms or cfg.send_timeout_ms) / 1000
        deadline = self._clock.monotonic() + budget_s
        uniq_key = self._ids.next_id()
        sessions = self._sessions
        if sessions is not None:
            if queue is not None or selector is not None:
                return await self._send_one_idempotent(
                    msg, uniq_key, deadline, budget_s, queue, selector, arg
                )
            # The first try inline while its queue's lane is open (as the plain one below);
            # send_coalesced opens what is missing, and is the same steps.
            queues = routes.cached_write_queues(msg.topic)
            started = self._clock.monotonic()
            if not queues or started >= deadline:
                return await send_coalesced(self, msg, uniq_key, deadline, budget_s)
            mq = self._selector.select(queues)
            lane = sessions.lanes.get(mq)
            addr = routes.addr_of(mq.broker_name)
            if lane is None or addr is None:
                return await send_coalesced(self, msg, uniq_key, deadline, budget_s, mq)
            # number() and answered() inline, with Lane.take_one / close_one: per message,
            # each call layer costs as much as the numbering itself
            seq = lane.next_seq
            lane.next_seq = seq + 1
            opened = lane.open
            opened.append(seq)
            session = lane.session
            pid = session.producer_id
            try:
                record = encode_messages(
                    (msg,),
                    (uniq_key,),
                    mq.queue_id,
                    self._born_host,
                    self._clock.now_ms(),
                    cfg.compress_over_bytes,
                    0,
                    (pid, session.epoch, seq) if pid else None,
                )
            except BaseException:
                if not lane.withdraw_one(seq):  # numbered, never sent: a gap unless handed back
                    sessions.retire(session)
                raise
            try:
                receipt = await accumulator.add(addr, record, deadline)
            except ClientError as exc:
                first = (mq, lane, seq, record, started)
                return await first_failed(self, msg, uniq_key, first, exc, deadline, budget_s)
            except BaseException:
                lane.close_one(seq)
                raise
            opened.remove(seq)
            if lane._waiting is not None:  # a failed request waits for this one
                lane.woken(seq)
            self.fault.update(mq.broker_name, (self._clock.monotonic() - started) * 1000)
            result = _result(receipt, mq)
            if result.status is SendStatus.SEND_OK:
                return result
            return await not_stored_ok(self, msg, uniq_key, mq, result, deadline, budget_s)
        if queue is not None or selector is not None:
            return await self._send_to_queue(msg, uniq_key, deadline, queue, selector, arg)
        # The first attempt runs inline, in this one coroutine: the same steps as the
        # first round of send_with_retries with _attempt, whose extra coroutine layers
        # are a good part of a send's cost. The retry machinery starts after a failure.
        topic = msg.topic
        if self._clock.monotonic() >= deadline:
            return await send_with_retries(
                self,
                topic,
                deadline,
                budget_s,
                lambda mq, rec: self._attempt(mq, rec, deadline),
                lambda mq: self._encode(msg, mq.queue_id, uniq_key),
            )
        queues = routes.cached_write_queues(topic) or await routes.write_queues(
            topic
        )  # RouteNotFoundError ends the send
        mq = self._selector.select(queues)
        record = encode_messages(
            (msg,),
            (uniq_key,),
            mq.queue_id,
            self._born_host,
            self._clock.now_ms(),
            cfg.compress_over_bytes,
            0,
        )
        started = self._clock.monotonic()
        try:
            if self._state is not ClientState.RUNNING:
                self._running()
            addr = routes.addr_of(mq.broker_name)
            if addr is None:
                raise RouteNotFoundError(topic, f"broker {mq.broker_name} has no known address")
            if deadline <= started:
                raise SendTimeoutError(f"no time left to send to {mq}")
            # The batcher fails the future past the deadline, and the call has it as timeout.
            receipt = await accumulator.add(addr, record, deadline)
        except ClientError as exc:
            if not _retry_elsewhere(exc):
                raise
            return await send_with_retries(
                self,
                topic,
                deadline,
                budget_s,
                lambda mq, rec: self._attempt(mq, rec, deadline),
                lambda mq: self._encode(msg, mq.queue_id, uniq_key),
                after_first=(self._attempt_failed(topic, mq, started, exc, 1), mq, record),
            )
        self.fault.update(mq.broker_name, (self._clock.monotonic() - started) * 1000)
        result = _result(receipt, mq)
        if (
            cfg.retry_another_broker_when_not_store_ok
            and cfg.retry_times_when_send_failed
            and result.status is not SendStatus.SEND_OK
        ):
            try:
                again = await send_with_retries(
                    self,
                    topic,
                    deadline,
                    budget_s,
                    lambda mq, rec: self._attempt(mq, rec, deadline),
                    lambda mq: self._encode(msg, mq.queue_id, uniq_key),
                    after_first=(_NotStoredOk(result), mq, record),
                )
            except ClientError:
                return result  # stored once already: that answer stands
            return again if again.status is SendStatus.SEND_OK else result
        return result

    async def _send_one_idempotent(
        self,
        msg: Message,
        uniq_key: str,
        deadline: float,
        budget_s: float,
        queue: MessageQueue | None,
        selector: MessageQueueSelector | None,
        arg: Any,
    ) -> SendResult:
        if selector is not None and queue is None:
            routes, _acc = self._running()
            queue = selector(list(await routes.write_queues(msg.topic)), msg, arg)
        if queue is not None and queue.topic != msg.topic:
            raise InvalidMessageError(
                f"queue {queue} belongs to topic {queue.topic!r}, the message to {msg.topic!r}"
            )
        if queue is None:
            return await send_coalesced(self, msg, uniq_key, deadline, budget_s)
        return await send_idempotent(
            self,
            msg.topic,
            record_encoder(self, msg, uniq_key),
            self._attempt_idempotent,
            deadline,
            budget_s,
            queue=queue,
        )

    async def _attempt_idempotent(
        self, mq: MessageQueue, record: bytes, deadline: float
    ) -> SendResult:
        routes, accumulator = self._running()
        addr = routes.addr_of(mq.broker_name)
        if addr is None:
            raise RouteNotFoundError(mq.topic, f"broker {mq.broker_name} has no known address")
        if deadline <= self._clock.monotonic():
            raise SendTimeoutError(f"no time left to send to {mq}")
        return _result(await accumulator.add(addr, record, deadline), mq)

    async def _send_to_queue(
        self,
        msg: Message,
        uniq_key: str,
        deadline: float,
        queue: MessageQueue | None,
        selector: MessageQueueSelector | None,
        arg: Any,
    ) -> SendResult:
        """One attempt to the queue the caller named or its selector chose."""
        if queue is None:
            assert selector is not None
            routes, _acc = self._running()
            queues = await routes.write_queues(msg.topic)
            queue = selector(list(queues), msg, arg)
        if queue.topic != msg.topic:
            raise InvalidMessageError(
                f"queue {queue} belongs to topic {queue.topic!r}, the message to {msg.topic!r}"
            )
        record = self._encode(msg, queue.queue_id, uniq_key)
        return await _retry_while_busy(
            lambda: self._attempt(queue, record, deadline), deadline, self._clock.monotonic
        )

    def _attempt_failed(
        self, topic: str, mq: MessageQueue, started: float, exc: ClientError, tried: int
    ) -> ClientError:
        assert self._routes is not None
        if isinstance(exc, NotMasterError):
            self._routes.redirect(
                exc.broker_name or mq.broker_name, exc.master_addr, exc.master_epoch
            )
            if _redirected(exc, self._routes, mq):
                # The broker name lives on at a newer master: nothing to avoid.
                log.debug(
                    "send to %s: %s; retrying at %s", mq, exc, self._routes.addr_of(mq.broker_name)
                )
                return exc
        if _flow_controlled(exc):
            # A busy broker is alive and routed: keep both, only back off (see below).
            self.fault.update(mq.broker_name, (self._clock.monotonic() - started) * 1000)
            return exc
        self.fault.update(
            mq.broker_name, (self._clock.monotonic() - started) * 1000, isolation=True
        )
        self._routes.invalidate(topic)
        log.debug(
            "send to %s failed (attempt %d of %d): %s",
            mq,
            tried,
            1 + self.config.retry_times_when_send_failed,
            exc,
        )
        return exc

    async def _attempt(self, mq: MessageQueue, record: bytes, deadline: float) -> SendResult:
        routes, accumulator = self._running()
        addr = routes.addr_of(mq.broker_name)
        if addr is None:
            raise RouteNotFoundError(mq.topic, f"broker {mq.broker_name} has no known address")
        remaining = deadline - self._clock.monotonic()
        if remaining <= 0:
            raise SendTimeoutError(f"no time left to send to {mq}")
        # The batcher fails the future past the deadline, and the call has it as timeout.
        receipt = await accumulator.add(addr, record, deadline)
        return _result(receipt, mq)

    async def send_batch(
        self,
        msgs: Sequence[Message],
        *,
        queue: MessageQueue | None = None,
        timeout_ms: int | None = None,
    ) -> Sequence[SendResult]:
        """Send messages of one topic to one queue in one call; one result per message
        (a :class:`~pocketmq.client.model.SendResults`, each made when read)."""
        self._running()
        # Checked, numbered and encoded as a whole, each in one call: no Python per message.
        check_batch(msgs, self.config.max_message_size_bytes)
        topic = msgs[0].topic
        budget_s = (timeout_ms or self.config.send_timeout_ms) / 1000
        deadline = self._clock.monotonic() + budget_s
        keys = self._ids.next_block(len(msgs))

        def encode(queue_id: int, stamp: tuple[int, int, int] | None = None) -> bytes:
            # The whole SendBatchRequest at once: the records framed as protobuf would
            request = encode_messages(
                msgs,
                keys,
                queue_id,
                self._born_host,
                self._clock.now_ms(),
                self.config.compress_over_bytes,
                0,
                stamp,
                self._batch_tail,
            )
            limit = self.config.max_batch_size_bytes
            if len(request) > limit and (size := framed_records_size(request)) > limit:
                raise InvalidMessageError(
                    f"batch of {len(msgs)} messages is {size} bytes; the limit is "
                    f"{limit} (max_batch_size_bytes); split it"
                )
            return request

        if self._sessions is not None:
            return await send_idempotent(
                self,
                topic,
                lambda mq, ticket: encode(mq.queue_id, ticket.stamp_args()),
                lambda mq, recs, dl: self._attempt_batch(mq, recs, dl, keys, idempotent=True),
                deadline,
                budget_s,
                queue=queue,
                count=len(msgs),
                max_in_flight=self.config.max_in_flight_requests_per_queue,
            )
        if queue is not None:
            records = encode(queue.queue_id)
            return await _retry_while_busy(
                lambda: self._attempt_batch(queue, records, deadline, keys),
                deadline,
                self._clock.monotonic,
            )
        return await send_with_retries(
            self,
            topic,
            deadline,
            budget_s,
            lambda mq, recs: self._attempt_batch(mq, recs, deadline, keys),
            lambda mq: encode(mq.queue_id),
            retarget=lambda _records, queue_id: encode(queue_id),
        )

    async def _attempt_batch(
        self,
        mq: MessageQueue,
        request: bytes,
        deadline: float,
        msg_ids: Sequence[str],
        *,
        idempotent: bool = False,
    ) -> Sequence[SendResult]:
        routes, _acc = self._running()
        assert self._remoting is not None
        addr = routes.addr_of(mq.broker_name)
        if addr is None:
            raise RouteNotFoundError(mq.topic, f"broker {mq.broker_name} has no known address")
        remaining = deadline - self._clock.monotonic()
        if remaining <= 0:
            raise SendTimeoutError(f"no time left to send to {mq}")
        if idempotent:
            remaining = min(remaining, self.config.request_timeout_ms / 1000)
        return await self._remoting.broker(addr).send_batch_request(
            request, mq, msg_ids=msg_ids, timeout_s=remaining
        )

    async def send_oneway(self, msg: Message) -> None:
        """Hand the message to the sender and return; failures are only logged (and traced)."""
        routes, accumulator = self._running()
        check_message(msg, max_body_bytes=self.config.max_message_size_bytes)
        mq = self._selector.select(await routes.write_queues(msg.topic))
        addr = routes.addr_of(mq.broker_name)
        if addr is None:
            raise RouteNotFoundError(msg.topic, f"broker {mq.broker_name} has no known address")
        uniq_key = self._ids.next_id()
        session = None
        if self._sessions is not None:
            session = await self._sessions.get(mq.broker_name, addr, mq.topic)
            uniq_key = session.stamp(uniq_key, mq.topic, mq.queue_id)
        future = accumulator.add(
            addr,
            self._encode(msg, mq.queue_id, uniq_key),
            self._clock.monotonic() + self.config.send_timeout_ms / 1000,
        )
        self._oneway.add(future)
        future.add_done_callback(self._oneway_done)
        if self.trace_oneway is not None:  # enable_trace: client/trace.py
            self.trace_oneway(msg, mq, uniq_key, future)
        if session is not None:
            sessions = self._sessions
            future.add_done_callback(
                lambda f: (
                    None
                    if not f.cancelled() and f.exception() is None
                    else sessions.retire(session)  # type: ignore[union-attr]
                )
            )

    def _oneway_done(self, future: asyncio.Future[SendReceipt]) -> None:
        self._oneway.discard(future)
        if not future.cancelled() and future.exception() is not None:
            log.debug("one-way send failed: %s", future.exception())

    def _encode(self, msg: Message, queue_id: int, uniq_key: str) -> bytes:
        return encode_message(
            msg,
            queue_id=queue_id,
            uniq_key=uniq_key,
            born_host=self._born_host,
            born_timestamp_ms=self._clock.now_ms(),
            compress_over_bytes=self.config.compress_over_bytes,
        )

    # -- introspection ------------------------------------------------------------------
    async def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        """The writable queues of *topic* (for a selector, or to pick a queue)."""
        routes, _acc = self._running()
        return list(await routes.write_queues(topic))

    def batch_stats(self) -> dict[str, tuple[int, int]]:
        """Broker address -> (calls made, records sent) by the coalescing sender."""
        if self._accumulator is None:
            return {}
        return {addr: (b.calls, b.records_sent) for addr, b in self._accumulator.batchers().items()}
