"""The sends of an idempotent :class:`~pocketmq.client.producer.Producer`.

A record is numbered in its broker's :class:`~.idempotence.ProducerSession`
when it is encoded for a queue; from then on it is retried as those very bytes
on that very queue for as long as its outcome is unknown::

    encode for mq (pid, epoch, seq) ──► call ──► answer ─────────────► result
                                         │   (a retry the broker had stored is
                                         │    answered with the original offsets)
        unknown outcome: no answer in request_timeout_ms, connection lost, the
        broker's INTERNAL, SYSTEM_BUSY, OUT_OF_ORDER_SEQUENCE (an earlier record
        still on its way), NOT_MASTER naming the new master
                                         └──► back off, the same record again, until
                                              send_timeout_ms runs out
        refused, not stored (no permission, a queue the broker lacks, a broker that
        says it cannot store now): retire the session, number the record afresh
        for another queue (RocketMQ's retry on another broker), up to
        retry_times_when_send_failed times

A record given up retires its session (:meth:`SessionManager.retire`), so that
its possible gap does not block the queue.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pocketmq.client.errors import (
    BusyError,
    ClientError,
    NotMasterError,
    OutOfOrderSequenceError,
    RouteNotFoundError,
    SendTimeoutError,
    ServerError,
    UnavailableError,
)
from pocketmq.client.idempotence import ProducerSession, SessionManager
from pocketmq.client.model import MessageQueue

if TYPE_CHECKING:
    from pocketmq.client.producer import Producer

__all__ = ["send_idempotent"]

#: (queue, the UNIQ_KEY slot, or the slots of a batch) -> the record(s) to send
Encode = Callable[[MessageQueue, ProducerSession], bytes]
#: (queue, records, deadline) -> the result(s) of one call
Call = Callable[[MessageQueue, bytes, float], Awaitable[Any]]


def never_sent(exc: ClientError) -> bool:
    """No connection could be made: the broker did not see the call."""
    return isinstance(exc, UnavailableError) and exc.unreachable and (
        "failed to connect" in str(exc) or "Connection refused" in str(exc))


def outcome_unknown(exc: ClientError) -> bool:
    """The records may or may not be stored (no answer, the connection lost)."""
    if isinstance(exc, UnavailableError):
        return exc.unreachable and not never_sent(exc)   # a reason: refused on purpose
    return isinstance(exc, ServerError)


def try_again_here(exc: ClientError) -> bool:
    """Not stored, and the broker asks for the same records again later."""
    return (isinstance(exc, BusyError) and exc.flow_control) or \
        isinstance(exc, OutOfOrderSequenceError | NotMasterError)


async def send_idempotent(producer: Producer, topic: str, encode: Encode, call: Call,
                          deadline: float, budget_s: float, *,
                          queue: MessageQueue | None = None) -> Any:
    """Send what *encode* makes for a queue (*queue*, or one picked from the route)."""
    from pocketmq.client.producer import _back_off, _retry_elsewhere

    routes, _acc = producer._running()
    sessions = producer._sessions
    assert sessions is not None
    attempts = 1 + (0 if queue is not None else producer.config.retry_times_when_send_failed)
    tried = 0
    last_broker: str | None = None
    last_error: ClientError | None = None
    if queue is not None and routes.addr_of(queue.broker_name) is None:
        await routes.write_queues(topic)     # a queue named before this producer routed it
    while tried < attempts and time.monotonic() < deadline:
        tried += 1
        mq = queue
        if mq is None:
            try:
                queues = await routes.write_queues(topic)
            except RouteNotFoundError as exc:
                last_error = exc
                break
            mq = producer._selector.select(queues, last_broker_name=last_broker)
        last_broker = mq.broker_name
        try:
            session = await _session(producer, sessions, mq, deadline)
        except ClientError as exc:
            if not _retry_elsewhere(exc):
                raise
            producer._attempt_failed(topic, mq, time.monotonic(), exc, tried)
            last_error = exc
            continue
        record = encode(mq, session)
        started = time.monotonic()
        busy = 0
        uncertain = False     # once it may be stored, the record never leaves its queue
        while True:
            try:
                result = await call(mq, record, deadline)
            except ClientError as exc:
                last_error = exc
                if isinstance(exc, NotMasterError):
                    producer._attempt_failed(topic, mq, started, exc, tried)
                    if _moved(routes, mq, exc):
                        continue     # the same record at the broker name's new master
                uncertain = uncertain or outcome_unknown(exc)
                if uncertain or try_again_here(exc):
                    busy += 1
                    if await _back_off(busy, deadline):
                        continue
                    sessions.retire(session)
                    raise SendTimeoutError(
                        f"send to {mq} gave no answer within {budget_s * 1000:.0f} ms "
                        f"(send_timeout_ms) after {busy} tries of the same record; it may or "
                        f"may not be stored; last error: {exc}") from exc
                sessions.retire(session)
                if not _retry_elsewhere(exc):
                    raise
                producer._attempt_failed(topic, mq, started, exc, tried)
                break
            producer.fault.update(mq.broker_name, (time.monotonic() - started) * 1000)
            return result
    if isinstance(last_error, RouteNotFoundError) or (
            last_error is not None and not last_error.retriable):
        raise last_error
    raise SendTimeoutError(f"send to topic {topic!r} failed after {tried} attempt(s) within "
                           f"{budget_s * 1000:.0f} ms (send_timeout_ms); last error: "
                           f"{last_error}") from last_error


async def _session(producer: Producer, sessions: SessionManager, mq: MessageQueue,
                   deadline: float) -> ProducerSession:
    session = sessions.current(mq.broker_name)
    if session is not None:
        return session
    routes, _acc = producer._running()
    addr = routes.addr_of(mq.broker_name)
    if addr is None:
        raise RouteNotFoundError(mq.topic, f"broker {mq.broker_name} has no known address")
    if deadline <= time.monotonic():
        raise SendTimeoutError(f"no time left to open a producer session on {mq.broker_name}")
    return await sessions.get(mq.broker_name, addr, mq.topic)


def _moved(routes: Any, mq: MessageQueue, exc: NotMasterError) -> bool:
    addr = routes.addr_of(mq.broker_name)
    return addr is not None and addr != exc.addr
