"""The producer's retries: when a failed send is tried again, where, and for how long.

:func:`send_with_retries` makes attempts until one succeeds, or the attempts
(``1 + retry_times_when_send_failed``) or the time budget (``send_timeout_ms``)
run out, each preferring another broker than the last failure's. A broker's
SYSTEM_BUSY is no failed attempt: the next try waits an exponential back-off
(:func:`_back_off`: 20 ms doubling to 1 s, jittered) and only the time budget
bounds them. A NOT_MASTER answer that moved the broker name's master is tried
again at the new master, same queue. Which errors may succeed elsewhere is
:func:`_retry_elsewhere`'s decision, read from the error type.

Deadlines are seconds on the producer's clock (``Clock.monotonic``); the
functions here take it as ``now``.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from pocketmq.client.errors import (
    BusyError,
    ClientError,
    InvalidRequestError,
    NotMasterError,
    PermissionDeniedError,
    RouteNotFoundError,
    SendTimeoutError,
)
from pocketmq.client.message_codec import set_queue_id
from pocketmq.client.model import MessageQueue, SendResult, SendStatus, _new_send_result
from pocketmq.client.remoting import SendReceipt
from pocketmq.client.route import RouteService

if TYPE_CHECKING:
    from pocketmq.client.producer import Producer

__all__ = ["send_with_retries"]

T = TypeVar("T")

BUSY_BACKOFF_INITIAL_S = 0.02  # first pause after a broker's SYSTEM_BUSY; doubles each time
BUSY_BACKOFF_MAX_S = 1.0  # longest pause between two tries


async def send_with_retries(
    producer: Producer,
    topic: str,
    deadline: float,
    budget_s: float,
    attempt: Callable[[MessageQueue, Any], Any],
    encode: Callable[[MessageQueue], Any],
    *,
    after_first: tuple[ClientError, MessageQueue, Any] | None = None,
    retarget: Callable[[Any, int], Any] | None = None,
) -> Any:
    """Attempts until one succeeds, the attempts or the time run out.

    *after_first* is (error, queue, payload) of a first attempt that
    already failed (``Producer.send``'s inline first try); the attempts continue from the second.
    A NOT_MASTER answer that moved the broker name's master (a newer epoch) is
    retried on the same queue at the new master, within the same budget.
    A broker's SYSTEM_BUSY is no failed attempt: the next try waits an
    exponential back-off first, and only the time budget bounds them.
    *retarget* (payload, queue id) aims a payload at another queue (default:
    :func:`set_queue_id` on the one record).
    """
    routes, _acc = producer._running()
    now = producer._clock.monotonic
    attempts = 1 + producer.config.retry_times_when_send_failed
    last_error: ClientError | None = None
    last_broker: str | None = None
    last_mq: MessageQueue | None = None
    payload: Any = None
    first = 1
    if after_first is not None:
        last_error, last_mq, payload = after_first
        last_broker = last_mq.broker_name
        first = 2
    tried = first - 1
    busy = 0
    not_ok: Any = None
    while True:
        if _flow_controlled(last_error):
            busy += 1
            if not await _back_off(busy, deadline, now):
                break
        elif tried >= attempts:
            break
        else:
            tried += 1
        if now() >= deadline:
            break
        try:
            queues = await routes.write_queues(topic)
        except RouteNotFoundError as exc:
            last_error = exc
            break
        mq = (
            last_mq
            if last_mq is not None
            and _redirected(last_error, routes, last_mq)
            and last_mq in queues
            else producer._selector.select(queues, last_broker_name=last_broker)
        )
        payload = (
            encode(mq) if payload is None else (retarget or set_queue_id)(payload, mq.queue_id)
        )
        started = now()
        try:
            result = await attempt(mq, payload)
        except ClientError as exc:
            if not _retry_elsewhere(exc):
                raise
            last_error = producer._attempt_failed(topic, mq, started, exc, tried)
            last_broker, last_mq = mq.broker_name, mq
            continue
        producer.fault.update(mq.broker_name, (now() - started) * 1000)
        if (
            producer.config.retry_another_broker_when_not_store_ok
            and tried < attempts
            and not _stored_ok(result)
        ):
            # RocketMQ's retryAnotherBrokerWhenNotStoreOK: stored there, but not as the
            # status promises (a SYNC_MASTER's replicas did not ack); store it elsewhere too
            not_ok, last_broker = result, mq.broker_name
            continue
        return result
    if not_ok is not None:
        return not_ok  # attempts ran out: the last stored-but-not-OK answer
    if isinstance(last_error, RouteNotFoundError | PermissionDeniedError):
        raise last_error  # says more than "attempts ran out" (a refusal, no route)
    raise SendTimeoutError(
        f"send to topic {topic!r} failed after {tried} attempt(s)"
        f"{f' and {busy} busy answer(s)' if busy else ''} within "
        f"{budget_s * 1000:.0f} ms (send_timeout_ms); last error: {last_error}"
    ) from last_error


class _NotStoredOk(ClientError):
    """A first attempt that stored the message, but not as its status promises."""

    def __init__(self, result: SendResult) -> None:
        super().__init__(f"{result.queue.broker_name} answered {result.status.value}")
        self.result = result


def _stored_ok(result: Any) -> bool:
    """SEND_OK for a send, or for every record of a batch."""
    if isinstance(result, list):
        return all(r.status is SendStatus.SEND_OK for r in result)
    return bool(result.status is SendStatus.SEND_OK)


def _retry_elsewhere(exc: ClientError) -> bool:
    """Whether another attempt, on another broker, may succeed. A broker that refuses
    the topic (not writable there, say, while the route still says it is) is one:
    RocketMQ's producer retries NO_PERMISSION on another broker too. So is a queue id
    the broker does not have: the route was stale, and the retry takes a fresh one
    (RocketMQ answers that SYSTEM_ERROR, which its producer retries)."""
    return (
        exc.retriable
        or isinstance(exc, PermissionDeniedError)
        or (isinstance(exc, InvalidRequestError) and exc.reason == "QUEUE_OUT_OF_RANGE")
    )


def _redirected(exc: BaseException | None, routes: RouteService, mq: MessageQueue) -> bool:
    """A NOT_MASTER answer after which *mq*'s broker name has another master address."""
    if not isinstance(exc, NotMasterError):
        return False
    addr = routes.addr_of(mq.broker_name)
    return addr is not None and addr != exc.addr


def _flow_controlled(exc: BaseException | None) -> bool:
    return isinstance(exc, BusyError) and exc.flow_control


async def _back_off(busy: int, deadline: float, now: Callable[[], float] = time.monotonic) -> bool:
    """Wait before the *busy*-th retry of a SYSTEM_BUSY answer; False if it would overrun.

    Exponential with jitter, as RocketMQ 5 clients back off on TOO_MANY_REQUESTS:
    20, 40, 80 ... ms up to 1 s, each scaled by a random factor in [0.5, 1).
    """
    pause_s = min(BUSY_BACKOFF_INITIAL_S * 2 ** (busy - 1), BUSY_BACKOFF_MAX_S)
    pause_s *= 0.5 + random.random() / 2
    if now() + pause_s >= deadline:
        return False
    await asyncio.sleep(pause_s)
    return True


async def _retry_while_busy(
    call: Callable[[], Awaitable[T]], deadline: float, now: Callable[[], float] = time.monotonic
) -> T:
    """One attempt to a chosen queue, repeated after a back-off while the broker is busy."""
    busy = 0
    while True:
        try:
            return await call()
        except BusyError as exc:
            busy += 1
            if not exc.flow_control or not await _back_off(busy, deadline, now):
                raise


def _result(receipt: SendReceipt, mq: MessageQueue) -> SendResult:
    queue = mq
    if (receipt.topic and receipt.topic != mq.topic) or receipt.queue_id != mq.queue_id:
        queue = MessageQueue(receipt.topic or mq.topic, mq.broker_name, receipt.queue_id)
    return _new_send_result(
        receipt.status, receipt.msg_id, receipt.offset_msg_id, queue, receipt.queue_offset
    )
