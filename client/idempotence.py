"""Producer sessions: the client half of idempotent producing.

An idempotent producer holds one :class:`ProducerSession` per broker name:
the producer id and epoch that broker handed out (``InitProducerId``) and the
next sequence of each queue. Each record gets the next sequence of its queue
when it is encoded, in the property ``PMQ_IDEM = <pid>.<epoch>.<seq>``,
written as the record's last (:func:`stamp`); a retry resends the very same
bytes to the very same queue, and the broker stores it once.

A record that is given up (its send raised) may leave a gap in its queue's
numbering, which would make the broker refuse every later record there
(OUT_OF_ORDER_SEQUENCE). So the session it was numbered in is *retired*: the
next record to that broker opens a new session: a fresh producer id, or, for
a named identity, the same id at the next epoch (which fences records still in
flight from the retired one). Records already numbered in a retired session
keep their numbers; the broker still de-duplicates them.

Each queue of a session is a :class:`Lane`: its next sequence and the
:class:`Ticket` of every request numbered there that is not settled yet, in
sequence order. A sender opens a ticket when it numbers its records and closes
it once it knows the outcome (or gives up); a request refused as out of order
waits for the tickets before its own (:meth:`Ticket.wait_earlier`) instead of
backing off blindly, and a sender that issues its own calls keeps at most *n*
of a lane's requests in flight (:meth:`Ticket.admitted`, Kafka's
``max.in.flight.requests.per.connection``)::

    lane (orders, 3):  next_seq 42
        open: [seq 30..31] 32 33 [34..39] 40 41   <- oldest first; closed ones leave

A coalesced ``send`` of one record, the hot path, opens no ticket: its lane
holds the bare sequence (an ``int``, :meth:`Lane.take_one`) until it settles
(:meth:`Lane.close_one`), and it becomes a :class:`Ticket` in its place only
when its first call fails and the retry machinery needs one
(:meth:`Lane.ticket_of`). Tickets treat such an entry as a ticket of one record.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable

from pocketmq.client.errors import InvalidRequestError, UnsupportedError
from pocketmq.client.model import PROPERTY_IDEMPOTENCE, PROPERTY_UNIQ_KEY, MessageQueue

__all__ = [
    "PROPERTY_IDEMPOTENCE",
    "Lane",
    "ProducerSession",
    "ProducerSessionManager",
    "Ticket",
    "stamp",
]

log = logging.getLogger(__name__)

_SLOT_SUFFIX = f"\x02{PROPERTY_IDEMPOTENCE}\x01"

# (addr, identity, topics) -> (producer id, epoch, [(topic, queue id, last seq)])
InitFn = Callable[[str, str, list[str]], Awaitable[tuple[int, int, list[tuple[str, int, int]]]]]


def stamp(uniq_key: str, producer_id: int, epoch: int, seq: int) -> str:
    """The ``UNIQ_KEY`` slot of a stamped record: the encoders write the slot verbatim
    between ``UNIQ_KEY\\x01`` and the closing ``\\x02``, so this makes the record end in
    ``UNIQ_KEY\\x01<key>\\x02PMQ_IDEM\\x01<pid>.<epoch>.<seq>\\x02`` (both encoders alike)."""
    return f"{uniq_key}{_SLOT_SUFFIX}{producer_id}.{epoch}.{seq}"


assert PROPERTY_UNIQ_KEY == "UNIQ_KEY"


class Ticket:
    """*count* records numbered from *first* in one lane, until their outcome is known."""

    __slots__ = ("_closed", "_waiters", "count", "first", "lane")

    def __init__(self, lane: Lane, first: int, count: int) -> None:
        self.lane = lane
        self.first = first
        self.count = count
        self._closed = False
        #: one future per task waiting for this ticket's close (made when someone waits)
        self._waiters: list[asyncio.Future[None]] | None = None

    @property
    def session(self) -> ProducerSession:
        return self.lane.session

    def stamp_args(self) -> tuple[int, int, int] | None:
        """``encode_messages``'s *stamp*: (producer id, epoch, first sequence), or None
        when the broker hands out no producer ids (the records go unstamped)."""
        session = self.lane.session
        if not session.producer_id:
            return None
        return session.producer_id, session.epoch, self.first

    def stamp(self, uniq_key: str) -> str:
        """The ``UNIQ_KEY`` slot of the ticket's one record."""
        session = self.lane.session
        if not session.producer_id:
            return uniq_key
        return stamp(uniq_key, session.producer_id, session.epoch, self.first)

    def stamps(self, uniq_keys: list[str]) -> list[str]:
        """The slots of the ticket's records, in order."""
        if len(uniq_keys) != self.count:
            raise ValueError(f"ticket numbers {self.count} records, got {len(uniq_keys)} keys")
        session = self.lane.session
        if not session.producer_id:
            return uniq_keys
        head = f"{_SLOT_SUFFIX}{session.producer_id}.{session.epoch}."
        first = self.first
        return [f"{key}{head}{first + i}" for i, key in enumerate(uniq_keys)]

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """The outcome is known (or given up): later tickets stop waiting for this one."""
        if self._closed:
            return
        self._closed = True
        self.lane.open.remove(self)
        waiters = self._waiters
        if waiters:
            self._waiters = None
            _wake(waiters)

    def withdraw(self) -> bool:
        """Close a ticket whose records were never sent; True if its numbers were handed
        back (nothing was numbered after them), False if they leave a gap."""
        lane = self.lane
        self.close()
        if lane.next_seq == self.first + self.count:
            lane.next_seq = self.first
            return True
        return False

    def earlier(self) -> list[Ticket | int]:
        """The lane's open tickets (and bare sequences, :meth:`Lane.take_one`) numbered
        before this one, oldest first."""
        out: list[Ticket | int] = []
        first = self.first
        for entry in self.lane.open:
            if entry is self or _first(entry) > first:
                break
            out.append(entry)
        return out

    def behind(self, n: int) -> bool:
        """Whether at least *n* of the lane's open tickets are numbered before this one
        (looks at no more than *n* of them)."""
        if n <= 0:
            return True
        first = self.first
        for count, entry in enumerate(self.lane.open, 1):
            if entry is self or _first(entry) > first:
                return False
            if count >= n:
                return True
        return False

    def _waiter(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        """A future done when this (open) ticket closes; each waiting task has its own,
        so that one given up (cancelled, timed out) leaves the others waiting."""
        waiter = loop.create_future()
        if self._waiters is None:
            self._waiters = [waiter]
        else:
            self._waiters.append(waiter)
        return waiter

    async def settled(self) -> None:
        if not self._closed:
            await self._waiter(asyncio.get_running_loop())

    async def wait_earlier(self) -> None:
        """Until every ticket numbered before this one in its lane is closed."""
        while True:
            earlier = self.earlier()
            if not earlier:
                return
            await self.lane.settled(earlier[-1])

    async def admitted(self, max_in_flight: int, timeout_s: float | None = None) -> None:
        """Until fewer than *max_in_flight* tickets before this one are open; raises
        TimeoutError after *timeout_s* (one timer, no task: this runs per request)."""
        loop = asyncio.get_running_loop()
        when = None if timeout_s is None else loop.time() + timeout_s
        opened = self.lane.open
        while True:
            # the lane's open tickets are in sequence order: this one's index is how
            # many earlier ones are open (a scan in C, not a list built in Python)
            if self._closed:
                return
            before = opened.index(self)
            if before < max_in_flight:
                return
            waiter = self.lane.waiter(opened[before - max_in_flight], loop)
            expiry = None if when is None else loop.call_at(when, _expire, waiter)
            try:
                await waiter
            finally:
                if expiry is not None:
                    expiry.cancel()


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


def _first(entry: Ticket | int) -> int:
    """The first sequence of a lane's open entry."""
    return entry if isinstance(entry, int) else entry.first


class Lane:
    """One queue of a session: its next sequence and its open entries, oldest first:
    tickets, and the bare sequences of one-record sends (:meth:`take_one`)."""

    __slots__ = ("_waiting", "next_seq", "open", "session")

    def __init__(self, session: ProducerSession, next_seq: int) -> None:
        self.session = session
        self.next_seq = next_seq
        self.open: deque[Ticket | int] = deque()
        #: bare sequence -> the futures of the tasks waiting for it to settle
        self._waiting: dict[int, list[asyncio.Future[None]]] | None = None

    def take(self, count: int) -> Ticket:
        ticket = Ticket(self, self.next_seq, count)
        self.next_seq += count
        self.open.append(ticket)
        return ticket

    def take_one(self) -> int:
        """The next sequence, open in the lane as itself (no ticket: the hot path's
        numbering); settle it with :meth:`close_one`, or make it a ticket."""
        seq = self.next_seq
        self.next_seq = seq + 1
        self.open.append(seq)
        return seq

    def close_one(self, seq: int) -> None:
        """:meth:`Ticket.close` of a bare sequence (once)."""
        self.open.remove(seq)
        if self._waiting is not None:
            self.woken(seq)

    def woken(self, seq: int) -> None:
        """Wake the tasks waiting for the bare sequence *seq*, just closed (the second
        half of :meth:`close_one`, when some wait)."""
        waiting = self._waiting
        if waiting is not None:
            _wake(waiting.pop(seq, None))
            if not waiting:
                self._waiting = None

    def withdraw_one(self, seq: int) -> bool:
        """:meth:`Ticket.withdraw` of a bare sequence never sent."""
        self.close_one(seq)
        if self.next_seq == seq + 1:
            self.next_seq = seq
            return True
        return False

    def ticket_of(self, seq: int) -> Ticket:
        """The open bare sequence *seq* as a ticket of one record, in its place (its
        waiters then wait for the ticket)."""
        ticket = Ticket(self, seq, 1)
        opened = self.open
        opened[opened.index(seq)] = ticket
        if self._waiting is not None:
            ticket._waiters = self._waiting.pop(seq, None)
            if not self._waiting:
                self._waiting = None
        return ticket

    def waiter(self, entry: Ticket | int, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        """A future done when the open *entry* settles (one per waiting task)."""
        if not isinstance(entry, int):
            return entry._waiter(loop)
        waiter = loop.create_future()
        if self._waiting is None:
            self._waiting = {}
        self._waiting.setdefault(entry, []).append(waiter)
        return waiter

    async def settled(self, entry: Ticket | int) -> None:
        """Until *entry*, open or not, is settled."""
        if not isinstance(entry, int):
            await entry.settled()
        elif entry in self.open:
            await self.waiter(entry, asyncio.get_running_loop())


def _wake(waiters: list[asyncio.Future[None]] | None) -> None:
    for waiter in waiters or ():
        if not waiter.done():
            waiter.set_result(None)


class ProducerSession:
    """One producer id at one epoch on one broker name, and its queues' numbering;
    producer id 0: the broker hands out none, and records go unstamped."""

    __slots__ = ("broker_name", "epoch", "lanes", "producer_id", "retired")

    def __init__(
        self,
        broker_name: str,
        producer_id: int,
        epoch: int,
        sequences: Iterable[tuple[str, int, int]] = (),
    ) -> None:
        self.broker_name = broker_name
        self.producer_id = producer_id
        self.epoch = epoch
        #: (topic, queue id) -> its lane (the sequence the next record there gets)
        self.lanes: dict[tuple[str, int], Lane] = {
            (t, q): Lane(self, s + 1) for t, q, s in sequences
        }
        self.retired = False

    def lane(self, topic: str, queue_id: int) -> Lane:
        key = (topic, queue_id)
        lane = self.lanes.get(key)
        if lane is None:
            lane = self.lanes[key] = Lane(self, 0)
        return lane

    def open(self, topic: str, queue_id: int, count: int = 1) -> Ticket:
        """A ticket for the next *count* sequences of the queue; close it when settled."""
        return self.lane(topic, queue_id).take(count)

    def take(self, topic: str, queue_id: int, count: int = 1) -> int:
        """The first of *count* consecutive sequences for the queue, tracked by no
        ticket (one-way sends, whose outcome nobody waits for)."""
        lane = self.lane(topic, queue_id)
        first = lane.next_seq
        lane.next_seq = first + count
        return first

    def stamp(self, uniq_key: str, topic: str, queue_id: int) -> str:
        if not self.producer_id:
            return uniq_key
        return stamp(uniq_key, self.producer_id, self.epoch, self.take(topic, queue_id))

    def stamps(self, uniq_keys: list[str], topic: str, queue_id: int) -> list[str]:
        if not self.producer_id:
            return uniq_keys
        first = self.take(topic, queue_id, len(uniq_keys))
        pid, epoch = self.producer_id, self.epoch
        return [f"{key}{_SLOT_SUFFIX}{pid}.{epoch}.{first + i}" for i, key in enumerate(uniq_keys)]


class ProducerSessionManager:
    """The current session of each broker name; opens one on first use."""

    def __init__(self, init: InitFn, *, identity: str = "") -> None:
        self._init = init
        self.identity = identity
        self._sessions: dict[str, ProducerSession] = {}
        #: queue -> its lane in its broker's current session (the hot path's one look;
        #: emptied when a session retires)
        self.lanes: dict[MessageQueue, Lane] = {}
        self._opening: dict[str, asyncio.Future[ProducerSession]] = {}
        self.opened = 0
        self.out_of_order = 0  # OUT_OF_ORDER_SEQUENCE answers met (each made good)
        self.renumbered = 0  # requests numbered afresh after a gap

    def current(self, broker_name: str) -> ProducerSession | None:
        return self._sessions.get(broker_name)

    def lane_of(self, mq: MessageQueue) -> Lane | None:
        """The lane of *mq* in its broker's current session (None: no session open);
        :attr:`lanes` holds it for the next look."""
        lane = self.lanes.get(mq)
        if lane is None:
            session = self._sessions.get(mq.broker_name)
            if session is None:
                return None
            lane = self.lanes[mq] = session.lane(mq.topic, mq.queue_id)
        return lane

    async def get(self, broker_name: str, addr: str, topic: str) -> ProducerSession:
        session = self._sessions.get(broker_name)
        if session is not None:
            return session
        pending = self._opening.get(broker_name)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[ProducerSession] = asyncio.get_running_loop().create_future()
        self._opening[broker_name] = future
        try:
            try:
                pid, epoch, sequences = await self._init(addr, self.identity, [topic])
            except (UnsupportedError, InvalidRequestError) as exc:
                if self.identity or not (
                    isinstance(exc, UnsupportedError) or exc.reason == "UNSUPPORTED"
                ):
                    raise
                # A broker without producer ids (an older build, or idempotence off there):
                # on by default must not mean "cannot send"; its records go unstamped.
                log.warning(
                    "broker %s (%s) hands out no producer ids (%s); sends to it are "
                    "not idempotent (a retry may store a message twice)",
                    broker_name,
                    addr,
                    exc,
                )
                pid, epoch, sequences = 0, 0, []
            session = ProducerSession(broker_name, pid, epoch, sequences)
            self._sessions[broker_name] = session
            self.opened += 1
            future.set_result(session)
            log.debug("producer id %d epoch %d from %s (%s)", pid, epoch, broker_name, addr)
            return session
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters re-raise it, nobody logs it unretrieved
            raise
        finally:
            del self._opening[broker_name]

    def retire(self, session: ProducerSession) -> None:
        """Stop numbering in *session* (a record of it was given up); idempotent."""
        if session.retired:
            return
        session.retired = True
        self.lanes.clear()
        if self._sessions.get(session.broker_name) is session:
            del self._sessions[session.broker_name]
            log.debug(
                "retired producer id %d epoch %d on %s",
                session.producer_id,
                session.epoch,
                session.broker_name,
            )
