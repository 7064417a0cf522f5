"""TransactionProducer: a message sent if and only if a local transaction commits.

RocketMQ's ``TransactionMQProducer``::

    def check(msg: MessageExt) -> LocalTransactionState:       # the broker asks
        return LocalTransactionState.COMMIT if orders.exists(msg.keys[0]) else \\
            LocalTransactionState.ROLLBACK

    async def place_order(msg: Message, order) -> LocalTransactionState:
        await orders.insert(order)
        return LocalTransactionState.COMMIT

    async with TransactionProducer("tx-orders", "127.0.0.1:9876", checker=check) as p:
        result = await p.send_in_transaction(Message(topic="orders", body=b"...",
                                                     keys=[order.id]), place_order, order)

:meth:`TransactionProducer.send_in_transaction` goes in three steps:

1. a *half message* is sent as :meth:`Producer.send` sends (same queue choice,
   retries and fault tolerance), with sysflag ``TRANSACTION_PREPARED`` and
   properties ``TRAN_MSG=true`` and ``PGROUP={group}``; the broker keeps it
   where no consumer sees it;
2. ``execute_local(msg, arg)`` runs (sync or async); an exception, or anything
   but a :class:`LocalTransactionState`, counts as ``UNKNOWN``. A half the
   broker did not acknowledge with ``SEND_OK`` is rolled back without running it;
3. ``EndTransaction`` COMMIT or ROLLBACK goes to the broker holding the half;
   ``UNKNOWN`` sends nothing. A failed EndTransaction is logged, not raised:
   the broker's check resolves the half.

The broker *checks* a half left unresolved for ``transaction_timeout_ms`` (6 s)
by asking a live producer of the same group, not necessarily the one that sent
it, over the server-to-client stream. ``checker(msg)`` (sync or async) gets the
half as a :class:`MessageExt` of its real topic and answers; ``UNKNOWN`` (or an
exception) leaves the broker to ask again later (every 30 s, 15 times).
Sync callables run on the event loop: make them async when they block.

A producer that should answer for halves of topics it has not sent to yet
names them in ``topics=`` so that it reaches their brokers from the start.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import inspect
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pocketmq.client.config import ProducerConfig
from pocketmq.client.errors import ClientError, InvalidMessageError
from pocketmq.client.idempotent_send import send_idempotent
from pocketmq.client.message_codec import check_message, decode_messages
from pocketmq.client.model import Message, MessageExt, MessageQueue, SendResult, SendStatus
from pocketmq.client.producer import Producer
from pocketmq.client.remoting import ChannelOpened, CheckTransactionState, ServerCommand
from pocketmq.client.trace import trace_end_transaction, trace_half_message
from pocketmq.common.clock import Clock
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.message import POS_SYSFLAG, SysFlag
from pocketmq.common.msgid import decode_offset_msg_id

__all__ = [
    "LocalTransactionChecker",
    "LocalTransactionExecutor",
    "LocalTransactionState",
    "TransactionProducer",
    "TransactionSendResult",
]

log = logging.getLogger(__name__)

PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
MAX_CHECKS_IN_FLIGHT = 1000  # more are dropped; the broker asks again later
END_TRANSACTION_TIMEOUT_S = 3.0

_I32 = struct.Struct(">i")


class LocalTransactionState(enum.Enum):
    """How the local transaction ended (RocketMQ's COMMIT_MESSAGE, ROLLBACK_MESSAGE, UNKNOW)."""

    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    UNKNOWN = "UNKNOWN"


LocalTransactionExecutor = Callable[
    [Message, Any], "LocalTransactionState | Awaitable[LocalTransactionState]"
]
LocalTransactionChecker = Callable[
    [MessageExt], "LocalTransactionState | Awaitable[LocalTransactionState]"
]


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionSendResult:
    """The half message's send result and what the local transaction said."""

    send_result: SendResult
    local_state: LocalTransactionState

    @property
    def status(self) -> SendStatus:
        return self.send_result.status

    @property
    def msg_id(self) -> str:
        """The message's unique id, also RocketMQ's transaction id."""
        return self.send_result.msg_id

    @property
    def offset_msg_id(self) -> str:
        return self.send_result.offset_msg_id

    @property
    def queue(self) -> MessageQueue:
        return self.send_result.queue


class TransactionProducer(Producer):
    """A producer whose messages are stored if and only if a local transaction commits
    (RocketMQ's TransactionMQProducer).

    Construct it with the group, the nameservers and a *checker* (``checker(msg) ->
    LocalTransactionState``, sync or async: the broker asks it how a transaction left
    unresolved ended), plus ``topics=`` whose halves it answers for from the start::

        async with TransactionProducer("tx-orders", "127.0.0.1:9876", checker=check) as p:
            result = await p.send_in_transaction(msg, execute_local, arg)

    Main methods: :meth:`send_in_transaction` (half message, ``execute_local(msg, arg)``,
    then COMMIT or ROLLBACK), :meth:`start`, :meth:`shutdown`; every :class:`Producer`
    method too (plain sends).
    """

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        *,
        checker: LocalTransactionChecker,
        topics: Sequence[str] = (),
        config: ProducerConfig | None = None,
        clock: Clock | None = None,
        instance_name: str | None = None,
        **options: Any,
    ) -> None:
        super().__init__(
            group=group,
            namesrv=namesrv,
            config=config,
            clock=clock,
            instance_name=instance_name,
            **options,
        )
        if not callable(checker):
            raise TypeError(f"checker must be callable, got {checker!r}")
        self._checker = checker
        self._topics = list(topics)
        self._checks: dict[tuple[str, int], asyncio.Task[None]] = {}
        self.checks_answered = 0

    # -- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        await super().start()
        assert self._routes is not None and self._heartbeat is not None
        for topic in self._topics:
            try:
                await self._routes.get(topic)
            except ClientError as exc:
                log.warning(
                    "transaction producer %s: no route for topic %s yet (%s); checks "
                    "for it arrive once this producer sends to it",
                    self.group,
                    topic,
                    exc,
                )
        self._heartbeat.listen(self._on_command)
        await self._heartbeat.run_once()  # opens the command streams now

    async def shutdown(self) -> None:
        checks = list(self._checks.values())
        self._checks.clear()
        for task in checks:
            task.cancel()
        if checks:
            await asyncio.wait(checks, timeout=END_TRANSACTION_TIMEOUT_S)
        await super().shutdown()

    async def __aenter__(self) -> TransactionProducer:
        await self.start()
        return self

    # -- sending ------------------------------------------------------------------------
    async def send_in_transaction(
        self,
        msg: Message,
        execute_local: LocalTransactionExecutor,
        arg: Any = None,
        *,
        timeout_ms: int | None = None,
    ) -> TransactionSendResult:
        """Send *msg* as a half message, run the local transaction, commit or roll back."""
        self._running()
        half = self._half_of(msg)
        send_result = await self._send_half(msg, half, timeout_ms)
        if send_result.status is SendStatus.SEND_OK:
            state = await _ask(execute_local, "execute_local", send_result.msg_id, msg, arg)
        else:
            log.warning(
                "half message %s was stored with %s; rolling it back without running "
                "the local transaction",
                send_result.msg_id,
                send_result.status.value,
            )
            state = LocalTransactionState.ROLLBACK
        await self._end(send_result, state)
        trace_end_transaction(
            self.trace,
            msg_id=send_result.msg_id,
            offset_msg_id=send_result.offset_msg_id,
            topic=msg.topic,
            broker=send_result.queue.broker_name,
            state=state.value,
            from_check=False,
            tags=msg.tags,
            keys=msg.keys,
        )
        return TransactionSendResult(send_result=send_result, local_state=state)

    def _half_of(self, msg: Message) -> Message:
        """*msg* checked (no delay, a valid message) and marked prepared for this group."""
        if msg.delay_level or msg.deliver_at_ms or msg.delay_ms:
            raise InvalidMessageError(
                "a transactional message cannot be delayed (delay_level "
                f"{msg.delay_level}, deliver_at_ms {msg.deliver_at_ms}, delay_ms "
                f"{msg.delay_ms}); send it without a delay or delivery time"
            )
        check_message(msg, max_body_bytes=self.config.max_message_size_bytes)
        return dataclasses.replace(
            msg,
            properties={
                **msg.properties,
                PROPERTY_TRANSACTION_PREPARED: "true",
                PROPERTY_PRODUCER_GROUP: self.group,
            },
        )

    async def _send_half(self, msg: Message, half: Message, timeout_ms: int | None) -> SendResult:
        """Store *half* (numbered when idempotent, else with the usual retries); trace it."""
        budget_s = (timeout_ms or self.config.send_timeout_ms) / 1000
        deadline = time.monotonic() + budget_s
        uniq_key = self._ids.next_id()
        born_ms, started = self._clock.now_ms(), time.perf_counter()
        send_result: SendResult
        if self._sessions is not None:
            # numbered: a retried half is stored once (and answered with its offsets)
            send_result = await send_idempotent(
                self,
                msg.topic,
                lambda mq, ticket: _prepared(
                    self._encode(half, mq.queue_id, ticket.stamp(uniq_key))
                ),
                self._attempt_idempotent,
                deadline,
                budget_s,
            )
        else:
            send_result = await self._send_with_retries(
                msg.topic,
                deadline,
                budget_s,
                lambda mq, record: self._attempt(mq, record, deadline),
                lambda mq: _prepared(self._encode(half, mq.queue_id, uniq_key)),
            )
        trace_half_message(
            self.trace, msg, send_result, born_ms, (time.perf_counter() - started) * 1000
        )
        return send_result

    async def _end(self, send_result: SendResult, state: LocalTransactionState) -> None:
        if state is LocalTransactionState.UNKNOWN:
            log.info(
                "local transaction of %s is UNKNOWN; the broker will check it", send_result.msg_id
            )
            return
        assert self._routes is not None and self._remoting is not None
        addr = self._routes.addr_of(send_result.queue.broker_name)
        if addr is None:
            log.warning(
                "cannot end transaction %s: broker %s has no known address; its check "
                "will resolve it",
                send_result.msg_id,
                send_result.queue.broker_name,
            )
            return
        try:
            await self._remoting.broker(addr).end_transaction(
                producer_group=self.group,
                commit_log_offset=decode_offset_msg_id(send_result.offset_msg_id).phys_offset,
                offset_msg_id=send_result.offset_msg_id,
                msg_id=send_result.msg_id,
                commit=state is LocalTransactionState.COMMIT,
                timeout_s=END_TRANSACTION_TIMEOUT_S,
            )
        except (ClientError, ValueError) as exc:
            log.warning(
                "EndTransaction %s of %s failed: %s; the broker's check will resolve it",
                state.value,
                send_result.msg_id,
                exc,
            )

    # -- checks -------------------------------------------------------------------------
    def _on_command(self, command: ServerCommand) -> None:
        if isinstance(command, CheckTransactionState):
            self._schedule_check(command)
        elif isinstance(command, ChannelOpened) and self._heartbeat is not None:
            # A broker that restarted has forgotten this producer: tell it at once.
            self._heartbeat.wakeup()

    def _schedule_check(self, command: CheckTransactionState) -> None:
        if command.producer_group != self.group:
            log.warning(
                "check for producer group %r reached producer %s of %r; ignored",
                command.producer_group,
                self.client_id,
                self.group,
            )
            return
        key = (command.broker_addr, command.commit_log_offset)
        if key in self._checks:
            return
        if len(self._checks) >= MAX_CHECKS_IN_FLIGHT:
            log.warning(
                "%d transaction checks in flight; dropping the check of %s (the broker asks again)",
                len(self._checks),
                command.msg_id,
            )
            return
        task = asyncio.get_running_loop().create_task(
            self._answer(command), name=f"check {command.msg_id}"
        )
        self._checks[key] = task
        task.add_done_callback(lambda _t: self._checks.pop(key, None))

    async def _answer(self, command: CheckTransactionState) -> None:
        broker_name = (
            next(
                (
                    name
                    for name, addr in self._routes.broker_addrs().items()
                    if addr == command.broker_addr
                ),
                "",
            )
            if self._routes
            else ""
        )
        msg = _check_message(command, broker_name)
        if msg is None:
            return
        state = await _ask(self._checker, "checker", command.msg_id, msg)
        if state is LocalTransactionState.UNKNOWN:
            log.debug("check %d of %s: still UNKNOWN", command.check_times, command.msg_id)
            return
        if self._remoting is None:
            return
        try:
            await self._remoting.broker(command.broker_addr).end_transaction(
                producer_group=self.group,
                commit_log_offset=command.commit_log_offset,
                offset_msg_id=command.offset_msg_id,
                msg_id=command.msg_id,
                commit=state is LocalTransactionState.COMMIT,
                from_transaction_check=True,
                timeout_s=END_TRANSACTION_TIMEOUT_S,
            )
            self.checks_answered += 1
            trace_end_transaction(
                self.trace,
                msg_id=command.msg_id,
                offset_msg_id=command.offset_msg_id,
                topic=msg.topic,
                broker=broker_name,
                state=state.value,
                from_check=True,
                tags=msg.tags,
                keys=msg.keys,
            )
        except ClientError as exc:
            log.warning(
                "answering the check of %s with %s failed: %s", command.msg_id, state.value, exc
            )


def _prepared(record: bytes) -> bytes:
    """*record* with SYSFLAG marked TRANSACTION_PREPARED."""
    sysflag = _I32.unpack_from(record, POS_SYSFLAG)[0]
    sysflag = (sysflag & ~SysFlag.TRANSACTION_MASK) | SysFlag.TRANSACTION_PREPARED
    return record[:POS_SYSFLAG] + _I32.pack(sysflag) + record[POS_SYSFLAG + 4 :]


def _check_message(command: CheckTransactionState, broker_name: str) -> MessageExt | None:
    """The half of a check as the message the producer sent: real topic and queue."""
    try:
        decoded = decode_messages(command.record, broker_name)
    except CorruptRecordError as exc:
        log.error("check of %s carries a damaged record: %s", command.msg_id, exc)
        return None
    if len(decoded) != 1:
        log.error("check of %s carries %d records, expected 1", command.msg_id, len(decoded))
        return None
    msg = decoded[0]
    raw_queue_id = msg.properties.get(PROPERTY_REAL_QUEUE_ID, "")
    return dataclasses.replace(
        msg,
        topic=msg.properties.get(PROPERTY_REAL_TOPIC, msg.topic),
        queue_id=int(raw_queue_id) if raw_queue_id.isdigit() else msg.queue_id,
        offset_msg_id=command.offset_msg_id,
    )


async def _ask(fn: Callable[..., Any], what: str, msg_id: str, *args: Any) -> LocalTransactionState:
    """Call a user callback (sync or async); failures and odd answers are UNKNOWN."""
    try:
        state = fn(*args)
        if inspect.isawaitable(state):
            state = await state
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("%s failed for transaction %s; treating it as UNKNOWN", what, msg_id)
        return LocalTransactionState.UNKNOWN
    if not isinstance(state, LocalTransactionState):
        log.error(
            "%s returned %r for transaction %s; expected a LocalTransactionState, "
            "treating it as UNKNOWN",
            what,
            state,
            msg_id,
        )
        return LocalTransactionState.UNKNOWN
    return state
