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
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from pocketmq.client.model import PROPERTY_IDEMPOTENCE, PROPERTY_UNIQ_KEY

__all__ = ["PROPERTY_IDEMPOTENCE", "ProducerSession", "SessionManager", "stamp"]

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


class ProducerSession:
    """One producer id at one epoch on one broker name, and its queues' numbering."""

    __slots__ = ("broker_name", "epoch", "next_seq", "producer_id", "retired")

    def __init__(self, broker_name: str, producer_id: int, epoch: int,
                 sequences: Iterable[tuple[str, int, int]] = ()) -> None:
        self.broker_name = broker_name
        self.producer_id = producer_id
        self.epoch = epoch
        #: (topic, queue id) -> the sequence the next record there gets
        self.next_seq: dict[tuple[str, int], int] = {(t, q): s + 1 for t, q, s in sequences}
        self.retired = False

    def take(self, topic: str, queue_id: int, count: int = 1) -> int:
        """The first of *count* consecutive sequences for the queue."""
        key = (topic, queue_id)
        first = self.next_seq.get(key, 0)
        self.next_seq[key] = first + count
        return first

    def stamp(self, uniq_key: str, topic: str, queue_id: int) -> str:
        return stamp(uniq_key, self.producer_id, self.epoch, self.take(topic, queue_id))

    def stamps(self, uniq_keys: list[str], topic: str, queue_id: int) -> list[str]:
        first = self.take(topic, queue_id, len(uniq_keys))
        pid, epoch = self.producer_id, self.epoch
        return [f"{key}{_SLOT_SUFFIX}{pid}.{epoch}.{first + i}" for i, key in
                enumerate(uniq_keys)]


class SessionManager:
    """The current session of each broker name; opens one on first use."""

    def __init__(self, init: InitFn, *, identity: str = "") -> None:
        self._init = init
        self.identity = identity
        self._sessions: dict[str, ProducerSession] = {}
        self._opening: dict[str, asyncio.Future[ProducerSession]] = {}
        self.opened = 0

    def current(self, broker_name: str) -> ProducerSession | None:
        return self._sessions.get(broker_name)

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
            pid, epoch, sequences = await self._init(addr, self.identity, [topic])
            session = ProducerSession(broker_name, pid, epoch, sequences)
            self._sessions[broker_name] = session
            self.opened += 1
            future.set_result(session)
            log.debug("producer id %d epoch %d from %s (%s)", pid, epoch, broker_name, addr)
            return session
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()   # retrieved: waiters re-raise it, nobody logs it unretrieved
            raise
        finally:
            del self._opening[broker_name]

    def retire(self, session: ProducerSession) -> None:
        """Stop numbering in *session* (a record of it was given up); idempotent."""
        if session.retired:
            return
        session.retired = True
        if self._sessions.get(session.broker_name) is session:
            del self._sessions[session.broker_name]
            log.debug("retired producer id %d epoch %d on %s", session.producer_id,
                      session.epoch, session.broker_name)
