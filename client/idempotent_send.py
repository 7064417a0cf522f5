"""The sends of an idempotent :class:`~pocketmq.client.producer.Producer`.

A request is numbered in its broker's :class:`~.idempotence.ProducerSession`
when it is encoded for a queue (a :class:`~.idempotence.Ticket` of that
queue's lane; a coalesced one-record ``send`` holds a bare sequence there instead,
made a ticket only if its first call fails: :func:`number`, :func:`first_failed`);
from then on it is retried as those very bytes on that very queue for as long as
its outcome is unknown::

    encode for mq (pid, epoch, seq) ──► [admitted] ──► call ──► answer ───► result
                                                        │  (a retry the broker had stored
                                                        │   is answered with the original
                                                        │   offsets)
        OUT_OF_ORDER_SEQUENCE, an earlier request of the queue still open: wait for its
        outcome, then the same bytes again at once (no back-off)
        OUT_OF_ORDER_SEQUENCE, nothing earlier open (an earlier one was given up, a gap
        nothing will fill): not stored; retire the session, number the request afresh
        in a new one (a new producer id, or the next epoch), the same queue
        OUT_OF_ORDER_SEQUENCE naming another queue (a coalesced call mixes queues): the
        same bytes again at once
        unknown outcome: no answer in request_timeout_ms, connection lost, the broker's
        INTERNAL, SYSTEM_BUSY, NOT_MASTER naming the new master
                                                        └──► back off, the same bytes again,
                                                             until send_timeout_ms runs out
        refused, not stored (no permission, a queue the broker lacks, a broker that says
        it cannot store now): retire the session, number the request afresh for another
        queue (RocketMQ's retry on another broker), up to retry_times_when_send_failed
        times

The broker itself holds a request that arrives ahead of its queue's earlier ones
(the server may run concurrent calls in any order) for a moment until they are
stored, so OUT_OF_ORDER_SEQUENCE mostly means a real gap or a long delay.

*admitted*: a caller that issues its own calls (``send_batch``) passes
``max_in_flight``: a request waits until fewer than that many of its queue's
earlier requests are open, so that a queue's requests leave in sequence order,
a bounded number at a time (Kafka's ``max.in.flight.requests.per.connection``
= 5). Coalesced sends need no gate: the accumulator keeps at most
``max_in_flight_per_broker`` calls to a broker in flight and fills them in order.

A request given up retires its session (:meth:`ProducerSessionManager.retire`), so that
its possible gap does not block the queue.
"""

from __future__ import annotations

import asyncio
import logging
import re
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
from pocketmq.client.idempotence import Lane, ProducerSession, ProducerSessionManager, Ticket
from pocketmq.client.message_codec import encode_messages
from pocketmq.client.model import Message, MessageQueue, SendResult, SendStatus
from pocketmq.client.send_retry import (
    _back_off,
    _result,
    _retry_elsewhere,
    _retry_while_busy,
    _stored_ok,
)

if TYPE_CHECKING:
    from pocketmq.client.producer import Producer
    from pocketmq.client.remoting import SendReceipt

__all__ = [
    "FirstTry",
    "answered",
    "first_failed",
    "not_stored_ok",
    "number",
    "record_encoder",
    "send_coalesced",
    "send_idempotent",
]

log = logging.getLogger(__name__)

#: (queue, the ticket numbering the record(s)) -> the record(s) to send
Encode = Callable[[MessageQueue, Ticket], bytes]
#: (queue, records, deadline) -> the result(s) of one call
Call = Callable[[MessageQueue, bytes, float], Awaitable[Any]]


def never_sent(exc: ClientError) -> bool:
    """No connection could be made: the broker did not see the call."""
    return (
        isinstance(exc, UnavailableError)
        and exc.unreachable
        and ("failed to connect" in str(exc) or "Connection refused" in str(exc))
    )


def outcome_unknown(exc: ClientError) -> bool:
    """The records may or may not be stored (no answer, the connection lost)."""
    if isinstance(exc, UnavailableError):
        return exc.unreachable and not never_sent(exc)  # a reason: refused on purpose
    return isinstance(exc, ServerError)


def try_again_here(exc: ClientError) -> bool:
    """Not stored, and the broker asks for the same records again later."""
    return (isinstance(exc, BusyError) and exc.flow_control) or isinstance(exc, NotMasterError)


_OUT_OF_ORDER = re.compile(r"producer id (\d+) sent sequence (-?\d+) to (\S+):(\d+),")


def out_of_order_subject(exc: OutOfOrderSequenceError) -> tuple[int, str, int, int] | None:
    """(producer id, topic, queue id, sequence) of the record the broker named as out
    of order (the first of the request), if it named one."""
    match = _OUT_OF_ORDER.search(str(exc))
    if match is None:
        return None
    return int(match.group(1)), match.group(3), int(match.group(4)), int(match.group(2))


class _Elsewhere(Exception):
    """The request was refused, not stored: number it afresh on another queue."""

    def __init__(self, error: ClientError) -> None:
        super().__init__(str(error))
        self.error = error


async def send_idempotent(
    producer: Producer,
    topic: str,
    encode: Encode,
    call: Call,
    deadline: float,
    budget_s: float,
    *,
    queue: MessageQueue | None = None,
    count: int = 1,
    max_in_flight: int = 0,
    avoid: ClientError | None = None,
    avoid_broker: str | None = None,
    not_ok: Any = None,
) -> Any:
    """Send what *encode* makes (*count* records) for a queue (*queue*, or one picked
    from the route); *max_in_flight* > 0: at most that many of a queue's requests
    in flight at once (see the module docstring)."""
    routes, _acc = producer._running()
    sessions = producer._sessions
    assert sessions is not None
    attempts = 1 + (0 if queue is not None else producer.config.retry_times_when_send_failed)
    # *avoid* / *not_ok*: a first try on *avoid_broker* was refused, or stored but not as
    # its status promises (send_coalesced): one try less
    tried = 0 if avoid is None and not_ok is None else 1
    last_broker: str | None = avoid_broker
    last_error: ClientError | None = avoid
    if queue is not None and routes.addr_of(queue.broker_name) is None:
        await routes.write_queues(topic)  # a queue named before this producer routed it
    while tried < attempts and producer._clock.monotonic() < deadline:
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
            producer._attempt_failed(topic, mq, producer._clock.monotonic(), exc, tried)
            last_error = exc
            continue
        try:
            req = _Request(sessions, mq, session.open(mq.topic, mq.queue_id, count), encode, call)
            result = await _on_queue(producer, req, deadline, budget_s, max_in_flight, tried)
        except _Elsewhere as refused:
            last_error = refused.error
            continue
        if not (
            queue is None
            and producer.config.retry_another_broker_when_not_store_ok
            and tried < attempts
            and not _stored_ok(result)
        ):
            return result
        # RocketMQ's retryAnotherBrokerWhenNotStoreOK, asked for: stored here, but not as
        # the status promises; store it on another broker too (numbered there afresh)
        not_ok = result
    if not_ok is not None:
        return not_ok
    if isinstance(last_error, RouteNotFoundError) or (
        last_error is not None and (not last_error.retriable or queue is not None)
    ):
        raise last_error  # a named queue has one attempt: its error, as a plain send
    raise SendTimeoutError(
        f"send to topic {topic!r} failed after {tried} attempt(s) within "
        f"{budget_s * 1000:.0f} ms (send_timeout_ms); last error: "
        f"{last_error}"
    ) from last_error


class _Request:
    """One request on its queue: its ticket and its bytes (re-made when renumbered)."""

    __slots__ = ("call", "encode", "mq", "record", "sessions", "ticket")

    def __init__(
        self,
        sessions: ProducerSessionManager,
        mq: MessageQueue,
        ticket: Ticket,
        encode: Encode,
        call: Call,
        record: bytes | None = None,  # made already (by encode for this ticket)
    ) -> None:
        self.sessions = sessions
        self.mq = mq
        self.encode = encode
        self.call = call
        self.ticket = ticket
        self.record = self._encode(ticket) if record is None else record

    def _encode(self, ticket: Ticket) -> bytes:
        try:
            return self.encode(self.mq, ticket)
        except BaseException:
            if not ticket.withdraw():  # numbered, never sent: a gap unless handed back
                self.sessions.retire(ticket.session)
            raise

    def renumber(self, session: ProducerSession) -> None:
        self.ticket.close()
        self.ticket = session.open(self.mq.topic, self.mq.queue_id, self.ticket.count)
        self.record = self._encode(self.ticket)


async def _on_queue(
    producer: Producer,
    req: _Request,
    deadline: float,
    budget_s: float,
    max_in_flight: int,
    tried: int,
    *,
    first_error: ClientError | None = None,
    started: float | None = None,
) -> Any:
    """The request's calls on its queue until an answer, or it is refused or given up;
    *first_error*: the answer of a first call already made (:func:`send_coalesced`)."""
    mq = req.mq
    if started is None:
        started = producer._clock.monotonic()
    state = _Tries()
    try:
        if max_in_flight and first_error is None and req.ticket.behind(max_in_flight):
            try:
                await req.ticket.admitted(
                    max_in_flight, max(deadline - producer._clock.monotonic(), 0)
                )
            except TimeoutError:
                raise SendTimeoutError(
                    "no time left (send_timeout_ms) while waiting for the queue's earlier requests"
                ) from None
        exc = first_error
        while True:
            if exc is None:
                try:
                    result = await req.call(mq, req.record, deadline)
                except ClientError as failed:
                    exc = failed
                else:
                    producer.fault.update(
                        mq.broker_name, (producer._clock.monotonic() - started) * 1000
                    )
                    return result
            await _after_failure(producer, req, exc, state, deadline, budget_s, started, tried)
            exc = None
    finally:
        req.ticket.close()


class _Tries:
    __slots__ = ("busy", "uncertain")

    def __init__(self) -> None:
        self.busy = 0
        self.uncertain = False  # once it may be stored, the record never leaves its queue


async def _after_failure(
    producer: Producer,
    req: _Request,
    exc: ClientError,
    state: _Tries,
    deadline: float,
    budget_s: float,
    started: float,
    tried: int,
) -> None:
    """Returns when the request is to be sent again; raises when it is given up
    (:class:`SendTimeoutError`, the broker's refusal) or refused here (:class:`_Elsewhere`)."""
    mq = req.mq
    sessions = req.sessions
    if isinstance(exc, OutOfOrderSequenceError) and await _out_of_order(
        producer, req, exc, deadline
    ):
        return
    if isinstance(exc, NotMasterError):
        producer._attempt_failed(mq.topic, mq, started, exc, tried)
        if _moved(producer._running()[0], mq, exc):
            return  # the same record at the broker name's new master
    state.uncertain = state.uncertain or outcome_unknown(exc)
    if state.uncertain or try_again_here(exc) or isinstance(exc, OutOfOrderSequenceError):
        state.busy += 1
        if await _back_off(state.busy, deadline, producer._clock.monotonic):
            return
        sessions.retire(req.ticket.session)
        raise SendTimeoutError(
            f"send to {mq} gave no answer within {budget_s * 1000:.0f} ms "
            f"(send_timeout_ms) after {state.busy} tries of the same record; it may or "
            f"may not be stored; last error: {exc}"
        ) from exc
    sessions.retire(req.ticket.session)
    if not _retry_elsewhere(exc):
        raise exc
    producer._attempt_failed(mq.topic, mq, started, exc, tried)
    raise _Elsewhere(exc) from exc


async def send_coalesced(
    producer: Producer,
    msg: Message,
    uniq_key: str,
    deadline: float,
    budget_s: float,
    mq: MessageQueue | None = None,
) -> SendResult:
    """:func:`send_idempotent` of one message to a queue of the route's choosing (*mq*,
    when chosen already), through the accumulator, its first try inline (no closure, no
    request object while all goes well: the retry machinery starts after a failure).
    ``Producer.send`` runs the same steps itself while the queue's lane is open
    (:func:`number` and :func:`answered` inline, then :func:`first_failed`)."""
    routes, accumulator = producer._running()
    sessions = producer._sessions
    assert sessions is not None
    topic = msg.topic
    if mq is None:
        queues = routes.cached_write_queues(topic)
        if not queues or producer._clock.monotonic() >= deadline:
            return await send_idempotent(
                producer,
                topic,
                record_encoder(producer, msg, uniq_key),
                producer._attempt_idempotent,
                deadline,
                budget_s,
            )
        mq = producer._selector.select(queues)
    lane = sessions.lane_of(mq)
    addr = routes.addr_of(mq.broker_name)
    started = producer._clock.monotonic()
    if lane is None or addr is None:
        try:
            session = await _session(producer, sessions, mq, deadline)
        except ClientError as exc:
            if not _retry_elsewhere(exc):
                raise
            producer._attempt_failed(topic, mq, started, exc, 1)
            return await send_idempotent(
                producer,
                topic,
                record_encoder(producer, msg, uniq_key),
                producer._attempt_idempotent,
                deadline,
                budget_s,
                avoid=exc,
                avoid_broker=mq.broker_name,
            )
        addr = routes.addr_of(mq.broker_name)
        if addr is None:
            raise RouteNotFoundError(topic, f"broker {mq.broker_name} has no known address")
        lane = session.lane(topic, mq.queue_id)
    seq, record = number(producer, lane, mq, msg, uniq_key)
    try:
        receipt = await accumulator.add(addr, record, deadline)
    except ClientError as exc:
        return await first_failed(
            producer, msg, uniq_key, (mq, lane, seq, record, started), exc, deadline, budget_s
        )
    except BaseException:
        lane.close_one(seq)
        raise
    result = answered(producer, mq, lane, seq, receipt, started)
    if result.status is SendStatus.SEND_OK:
        return result
    return await not_stored_ok(producer, msg, uniq_key, mq, result, deadline, budget_s)


def number(
    producer: Producer, lane: Lane, mq: MessageQueue, msg: Message, uniq_key: str
) -> tuple[int, bytes]:
    """The next sequence of *lane* (a bare one, :meth:`~.idempotence.Lane.take_one`: a
    ticket is made of it on a failure only) and the record of *msg* stamped with it."""
    session = lane.session
    seq = lane.next_seq  # lane.take_one(), inline: this runs per message
    lane.next_seq = seq + 1
    lane.open.append(seq)
    pid = session.producer_id
    try:
        record = encode_messages(
            (msg,),
            (uniq_key,),
            mq.queue_id,
            producer._born_host,
            producer._clock.now_ms(),
            producer.config.compress_over_bytes,
            0,
            (pid, session.epoch, seq) if pid else None,
        )
    except BaseException:
        if not lane.withdraw_one(seq):  # numbered, never sent: a gap unless handed back
            assert producer._sessions is not None
            producer._sessions.retire(session)
        raise
    return seq, record


#: a first try that failed: (queue, lane, sequence, record, when it started)
FirstTry = tuple[MessageQueue, Lane, int, bytes, float]


async def first_failed(
    producer: Producer,
    msg: Message,
    uniq_key: str,
    first: FirstTry,
    exc: ClientError,
    deadline: float,
    budget_s: float,
) -> SendResult:
    """The rest of a coalesced send whose first call failed with *exc*: the same record
    on its queue while its outcome is unknown, or numbered afresh elsewhere when refused."""
    mq, lane, seq, record, started = first
    ticket = lane.ticket_of(seq)
    sessions = producer._sessions
    assert sessions is not None
    encode = record_encoder(producer, msg, uniq_key)
    req = _Request(sessions, mq, ticket, encode, producer._attempt_idempotent, record)
    try:
        result: SendResult = await _on_queue(
            producer, req, deadline, budget_s, 0, 1, first_error=exc, started=started
        )
        return result
    except _Elsewhere as refused:
        return await send_idempotent(
            producer,
            mq.topic,
            encode,
            producer._attempt_idempotent,
            deadline,
            budget_s,
            avoid=refused.error,
            avoid_broker=mq.broker_name,
        )
    finally:
        req.ticket.close()
        ticket.close()


def answered(
    producer: Producer,
    mq: MessageQueue,
    lane: Lane,
    seq: int,
    receipt: SendReceipt,
    started: float,
) -> SendResult:
    """The result of a first try the broker answered; its sequence is settled."""
    lane.close_one(seq)
    producer.fault.update(mq.broker_name, (producer._clock.monotonic() - started) * 1000)
    return _result(receipt, mq)


async def not_stored_ok(
    producer: Producer,
    msg: Message,
    uniq_key: str,
    mq: MessageQueue,
    result: SendResult,
    deadline: float,
    budget_s: float,
) -> SendResult:
    """*result*, stored but not as SEND_OK promises; or, when the producer asks for it
    (RocketMQ's retryAnotherBrokerWhenNotStoreOK), a copy stored on another broker."""
    cfg = producer.config
    if not (cfg.retry_another_broker_when_not_store_ok and cfg.retry_times_when_send_failed):
        return result
    return await send_idempotent(
        producer,
        mq.topic,
        record_encoder(producer, msg, uniq_key),
        producer._attempt_idempotent,
        deadline,
        budget_s,
        avoid_broker=mq.broker_name,
        not_ok=result,
    )


def record_encoder(producer: Producer, msg: Message, uniq_key: str) -> Encode:
    """The record of *msg* for a queue, numbered by a ticket (a send's every try)."""

    def encode(mq: MessageQueue, ticket: Ticket) -> bytes:
        return encode_messages(
            (msg,),
            (uniq_key,),
            mq.queue_id,
            producer._born_host,
            producer._clock.now_ms(),
            producer.config.compress_over_bytes,
            0,
            ticket.stamp_args(),
        )

    return encode


async def _out_of_order(
    producer: Producer, req: _Request, exc: OutOfOrderSequenceError, deadline: float
) -> bool:
    """Make an out-of-order refusal good; True: send the (same or renumbered) request
    again now; False: no time left (the caller gives up)."""
    if producer._clock.monotonic() >= deadline:
        return False
    ticket = req.ticket
    session = ticket.session
    sessions = req.sessions
    sessions.out_of_order += 1
    if ticket.earlier():
        # Sent ahead of an earlier request of its queue (or held back with others in a
        # coalesced call): wait for the earlier ones' outcome, so as not to overtake them.
        try:
            await _until(ticket.wait_earlier(), deadline, producer._clock.monotonic)
        except SendTimeoutError:
            return False
        return True
    subject = out_of_order_subject(exc)
    if subject is not None and (
        subject[:3] != (session.producer_id, req.mq.topic, req.mq.queue_id)
        or subject[3] >= ticket.first + ticket.count
    ):
        # A coalesced call mixes queues and requests: another one's record held this one
        # back, which is in order itself.
        await asyncio.sleep(0)
        return True
    # Nothing earlier is open: an earlier request was given up and left a gap nothing
    # will fill. This one is not stored (the broker stores nothing of a refused
    # request): number it afresh in a new session, on the same queue.
    sessions.retire(session)
    sessions.renumbered += 1
    try:
        fresh = await _session(producer, sessions, req.mq, deadline)
    except ClientError:
        return False
    log.debug(
        "%s: a gap before sequence %d of producer id %d; renumbered in producer id %d epoch %d",
        req.mq,
        ticket.first,
        session.producer_id,
        fresh.producer_id,
        fresh.epoch,
    )
    req.renumber(fresh)
    return True


async def _until(waiting: Awaitable[None], deadline: float, monotonic: Callable[[], float]) -> None:
    remaining = deadline - monotonic()
    try:
        async with asyncio.timeout(max(remaining, 0)):  # no task per wait, as wait_for
            await waiting
    except TimeoutError:
        raise SendTimeoutError(
            "no time left (send_timeout_ms) while waiting for the queue's earlier requests"
        ) from None


async def _session(
    producer: Producer, sessions: ProducerSessionManager, mq: MessageQueue, deadline: float
) -> ProducerSession:
    session = sessions.current(mq.broker_name)
    if session is not None:
        return session
    routes, _acc = producer._running()
    addr = routes.addr_of(mq.broker_name)
    if addr is None:
        raise RouteNotFoundError(mq.topic, f"broker {mq.broker_name} has no known address")
    if deadline <= producer._clock.monotonic():
        raise SendTimeoutError(f"no time left to open a producer session on {mq.broker_name}")
    # A busy broker is backed off from, as a send to it is: not a try spent elsewhere
    # (three InitProducerId calls refused busy within a millisecond ended a send).
    return await _retry_while_busy(
        lambda: sessions.get(mq.broker_name, addr, mq.topic), deadline, producer._clock.monotonic
    )


def _moved(routes: Any, mq: MessageQueue, exc: NotMasterError) -> bool:
    addr = routes.addr_of(mq.broker_name)
    return addr is not None and addr != exc.addr
