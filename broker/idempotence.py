"""IdempotenceProcessor: producer ids for idempotent producers, and the send path's
de-duplication (Kafka's idempotent producer, on PocketMQ's records).

``InitProducerId`` hands out a producer id: a fresh random one at epoch 0, or,
for a named identity, the id derived from (ACL user, identity) with its epoch
raised by one. Raising an epoch is written to the commit log as a small record
in :data:`PRODUCER_EPOCH_TOPIC` (body: the identity; ``PMQ_IDEM`` =
``<pid>.<epoch>.-1``), so the fence survives a restart and reaches replicas
with the log. Fresh ids are random in [1, 2**62); named ones have bit 62 set,
so the two never meet.

Before a put, :meth:`IdempotenceProcessor.check` takes the records' ``PMQ_IDEM``
stamps as the store's scan parsed them (``ScannedBatch.idem_runs``, see
:mod:`pocketmq.broker.store.producer_state`) and asks the store's
:class:`ProducerStateTable` which records are retries of stored ones; those are
answered with their original offsets (:class:`DuplicateAnswer`) and left out of
the put. A request whose runs are all new and in order (the usual one) costs
one look per run; a request without stamps, none. The table itself is advanced
by the store as it appends, from the same runs.

A request that arrives ahead of its queue's earlier ones (an idempotent producer
keeps up to ``max_in_flight_requests_per_queue`` of a queue's requests in
flight, and the server may run concurrent calls in any order) waits for them
(:meth:`IdempotenceProcessor.after_predecessors`): a future per waiting request,
keyed by (producer id, topic, queue id), woken by every put that advances that
queue (:meth:`IdempotenceProcessor.wake`); at most ``max_waiters_per_queue`` per
queue and ``max_waiters`` (holding at most ``max_waiting_bytes`` of requests) in
all wait, each at most ``wait_ms``; past that, OUT_OF_ORDER_SEQUENCE as before.
A waiting request is out of the broker's in-progress counts, as a parked pull
is (:func:`~pocketmq.broker.flow_control.parked`): were it counted, requests
held for an earlier one could fill ``max_in_flight_requests`` and get that
earlier one refused SYSTEM_BUSY until they time out. Refusals::

    PRODUCER_FENCED        FAILED_PRECONDITION  an epoch older than the id's
    OUT_OF_ORDER_SEQUENCE  OUT_OF_RANGE         a gap before the record's sequence
    SEQUENCE_REPEATED      INVALID_ARGUMENT     one request repeats a sequence
    PRODUCER_ID_LIMIT      RESOURCE_EXHAUSTED   max_producer_ids ids, none expired
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import struct
from collections.abc import Callable
from dataclasses import dataclass

from pocketmq.broker.durability import OK, ReplicaWait, wait_durable
from pocketmq.broker.errors import (
    BrokerError,
    BrokerNotMasterError,
    FailedPreconditionError,
    IllegalArgumentError,
    NoPermissionError,
    PutRejectedError,
    SequenceGapError,
    SystemBusyError,
)
from pocketmq.broker.flow_control import parked
from pocketmq.broker.store.api import MessageStore
from pocketmq.broker.store.batch import ScannedBatch
from pocketmq.broker.store.producer_state import (
    PROPERTY_IDEMPOTENCE,
    ProducerStateError,
    ProducerStateTable,
    StateErrorKind,
    idents_of_runs,
)
from pocketmq.broker.store.results import PutStatus
from pocketmq.broker.topic_config import PRODUCER_EPOCH_TOPIC
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.errors import PocketMQError
from pocketmq.common.message import HEAD, POS_QUEUEOFFSET
from pocketmq.common.record_layout import POS_SYSFLAG, STORE_TIMESTAMP, store_timestamp_pos
from pocketmq.common.validation import check_group, check_topic
from pocketmq.security.interceptor import AclError, authorize_publish, current_account

__all__ = [
    "PRODUCER_EPOCH_TOPIC",
    "DuplicateAnswer",
    "IdempotenceProcessor",
    "ProducerInit",
    "SequenceAhead",
    "named_producer_id",
]

MAX_IDENTITY_LENGTH = 255
MAX_INIT_TOPICS = 1024
_NAMED_BIT = 1 << 62
_QUEUE_OFFSET = struct.Struct(">q")
_SYSFLAG = struct.Struct(">i")
_QUEUE_OFFSET_POS = POS_QUEUEOFFSET


_ERRORS: dict[StateErrorKind, Callable[[str], BrokerError]] = {
    StateErrorKind.FENCED: lambda m: FailedPreconditionError(m, reason="PRODUCER_FENCED"),
    StateErrorKind.OUT_OF_ORDER: SequenceGapError,
    StateErrorKind.REPEATED: lambda m: IllegalArgumentError(m, reason="SEQUENCE_REPEATED"),
    StateErrorKind.FULL: lambda m: SystemBusyError(m, reason="PRODUCER_ID_LIMIT"),
}


log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerInit:
    producer_id: int
    epoch: int
    sequences: list[tuple[str, int, int]]  # (topic, queue id, last seq) of a named id


@dataclass(frozen=True, slots=True, kw_only=True)
class DuplicateAnswer:
    """What the original put answered for a retried record (-1 offsets: not kept)."""

    queue_offset: int
    phys_offset: int
    store_timestamp_ms: int
    end_phys_offset: int = -1  # where the stored record ends: what a replica must hold


def named_producer_id(owner: str, identity: str, secret: str = "") -> int:
    """The id of a named producer: the same for the same account and identity on every
    broker of a group (the ACL file is the same there), so a promoted replica fences
    by epoch as its master did. Keyed with the account's secret key: from an access
    key and an identity alone (neither is secret) nobody can compute another
    account's id and stamp records with it, which would have the owner's next records
    answered as duplicates and dropped. Without the ACL (no secret) it is a plain hash."""
    digest = hashlib.blake2b(
        f"{owner}\0{identity}".encode(), digest_size=8, key=secret.encode()[:64]
    ).digest()
    return (int.from_bytes(digest, "big") & (_NAMED_BIT - 1)) | _NAMED_BIT


#: how long a request ahead of its queue waits for the earlier ones (ms): a server that
#: ran two calls in the other order starts the earlier one within a millisecond or so;
#: an earlier one refused (SYSTEM_BUSY, ...) is not coming sooner for a longer wait
WAIT_MS = 50
#: requests that may wait at once, per (producer id, topic, queue id) and in all
MAX_WAITERS_PER_QUEUE = 8
MAX_WAITERS = 4096
#: bytes of requests that may wait at once (each is held in memory, uncounted)
MAX_WAITING_BYTES = 64 * 1024 * 1024

WaitKey = tuple[int, str, int]  # (producer id, topic, queue id)


class SequenceAhead(PocketMQError):
    """A request ahead of its queue: its record numbered *seq* in *key* waits for the
    earlier ones; *error* is the refusal to answer if they do not come."""

    def __init__(self, key: WaitKey, seq: int, error: BrokerError) -> None:
        super().__init__(str(error))
        self.key = key
        self.seq = seq
        self.error = error


class IdempotenceProcessor:
    def __init__(
        self,
        store: MessageStore,
        *,
        clock: Clock | None = None,
        not_master: Callable[[], BrokerNotMasterError | None] | None = None,
        replica_wait: ReplicaWait | None = None,
        wait_ms: int = WAIT_MS,
        max_waiters_per_queue: int = MAX_WAITERS_PER_QUEUE,
        max_waiters: int = MAX_WAITERS,
        max_waiting_bytes: int = MAX_WAITING_BYTES,
    ) -> None:
        self._store = store
        self._table: ProducerStateTable = store.producers
        self._clock = clock or SystemClock()
        self._not_master = not_master
        self._replica_wait = replica_wait
        self._wait_s = wait_ms / 1000
        self._max_waiters_per_queue = max_waiters_per_queue
        self._max_waiters = max_waiters
        self._max_waiting_bytes = max_waiting_bytes
        self._waiting_bytes = 0
        #: requests ahead of their queue: key -> [(the sequence waiting, its future)]
        self._waiters: dict[WaitKey, list[tuple[int, asyncio.Future[None]]]] = {}
        self._waiting = 0
        self.waited = 0  # requests that waited for earlier ones (and were then checked again)

    # -- InitProducerId -----------------------------------------------------------------
    async def init_producer_id(
        self, *, producer_group: str, identity: str, topics: list[str]
    ) -> ProducerInit:
        """A producer id: a fresh one, or a named identity's with its epoch raised by a
        record in the log, answered once that record is as durable as a send would be
        (flushed on SYNC_FLUSH, replicated on a SYNC_MASTER), so that a replica promoted
        after the answer fences the older instances too. When it cannot be (no replica
        in sync, a timeout), the id is answered all the same, as a send is stored and
        answered SLAVE_NOT_AVAILABLE: refusing would stop every named producer while a
        replica is away."""
        if self._not_master is not None:
            refusal = self._not_master()
            if refusal is not None:
                raise refusal
        _check_init(producer_group, identity, topics)
        try:
            authorize_publish(set(topics))
        except AclError as exc:
            raise NoPermissionError(exc.message) from None
        now = self._clock.now_ms()
        table = self._table
        if not identity:
            self._admit(now)
            pid = secrets.randbelow(_NAMED_BIT - 1) + 1
            while pid in table.producers:
                pid = secrets.randbelow(_NAMED_BIT - 1) + 1
            table.register(pid, 0, now)
            return ProducerInit(producer_id=pid, epoch=0, sequences=[])
        account = current_account.get()
        pid = (
            named_producer_id("", identity)
            if account is None
            else named_producer_id(account.access_key, identity, account.secret_key)
        )
        entry = table.producers.get(pid)
        if entry is None:
            self._admit(now)
        epoch = 0 if entry is None else entry.epoch + 1
        result = self._store.put_message(
            topic=PRODUCER_EPOCH_TOPIC,
            queue_id=0,
            body=identity.encode(),
            # The stamp is a record's last property and the scanners find it behind the
            # separator of the one before: alone it went unseen by a replica's dispatch
            # (only recovery's parse saw it), so a promoted replica did not fence. (Not
            # the identity here: any text may be one, separators too; it is the body.)
            properties={"PMQ_EPOCH": str(epoch), PROPERTY_IDEMPOTENCE: f"{pid}.{epoch}.-1"},
        )
        if result.status is not PutStatus.PUT_OK:
            raise PutRejectedError(result.status, result.error or result.status.value)
        entry = table.register(pid, epoch, now)
        reached = await wait_durable(result.flush_future, result.end_offset, self._replica_wait)
        if reached != OK:
            log.info(
                "epoch %d of producer identity %r is stored but not durable yet (%s): a "
                "replica promoted before it gets the record does not fence older instances",
                epoch,
                identity,
                reached,
            )
        return ProducerInit(
            producer_id=pid,
            epoch=epoch,
            sequences=sorted(
                (topic, queue_id, q.last_seq) for (topic, queue_id), q in entry.queues.items()
            ),
        )

    def _admit(self, now_ms: int) -> None:
        try:
            self._table.admit_check(now_ms)
        except ProducerStateError as exc:
            raise _ERRORS[exc.kind](exc.message) from None

    # -- the send path ---------------------------------------------------------------------
    def check(
        self, blob: bytes | bytearray | memoryview, scanned: ScannedBatch
    ) -> dict[int, DuplicateAnswer] | None:
        """None for a request without producer ids, or whose records are all new and in
        order; else the records already stored, each with its original answer. Raises
        :class:`SequenceAhead` when earlier records of a queue may still come."""
        runs = scanned.idem_runs
        if not runs:
            return None
        now = self._clock.now_ms()
        table = self._table
        if table.in_order(runs, now):
            return None
        idents = idents_of_runs(runs, len(scanned))
        queues = list(zip(scanned.topics, scanned.queue_ids, strict=True))
        try:
            dups = table.check(idents, queues, now)
        except ProducerStateError as exc:
            error = _ERRORS[exc.kind](exc.message)
            if exc.ahead is not None:
                pid, topic, queue_id, seq = exc.ahead
                raise SequenceAhead((pid, topic, queue_id), seq, error) from None
            raise error from None
        return {i: self._answer(phys) for i, phys in dups.items()}

    async def after_predecessors(
        self, ahead: SequenceAhead, blob: bytes | bytearray | memoryview, scanned: ScannedBatch
    ) -> dict[int, DuplicateAnswer] | None:
        """:meth:`check` again once the earlier records of the queue *ahead* names are
        stored (or refuse with its error after ``wait_ms``, or at once when too many
        wait)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait_s
        while True:
            waiters = self._waiters.get(ahead.key)
            if (
                self._waiting >= self._max_waiters
                or (waiters is not None and len(waiters) >= self._max_waiters_per_queue)
                or self._waiting_bytes + len(blob) > self._max_waiting_bytes
                or loop.time() >= deadline
            ):
                raise ahead.error
            future: asyncio.Future[None] = loop.create_future()
            if waiters is None:
                waiters = self._waiters[ahead.key] = []
            waiters.append((ahead.seq, future))
            self._waiting += 1
            self._waiting_bytes += len(blob)
            self.waited += 1
            try:
                with parked():  # held, not working: out of the in-progress counts
                    await asyncio.wait((future,), timeout=deadline - loop.time())
            finally:
                self._waiting_bytes -= len(blob)
                self._forget(ahead.key, future)
            try:
                return self.check(blob, scanned)
            except SequenceAhead as again:
                ahead = again

    def _forget(self, key: WaitKey, future: asyncio.Future[None]) -> None:
        waiters = self._waiters.get(key)
        if waiters is None:
            return
        for i, (_seq, waiting) in enumerate(waiters):
            if waiting is future:
                del waiters[i]
                self._waiting -= 1
                break
        if not waiters:
            del self._waiters[key]

    def wake(self, scanned: ScannedBatch) -> None:
        """After a put of *scanned*: wake the requests waiting for its queues that can
        now be in order (call only when :attr:`has_waiters`)."""
        waiters = self._waiters
        producers = self._table.producers
        for pid, _epoch, topic, queue_id, _first, _indices in scanned.idem_runs:
            waiting = waiters.get((pid, topic, queue_id))
            if not waiting:
                continue
            entry = producers.get(pid)
            q = entry.queues.get((topic, queue_id)) if entry is not None else None
            if q is None:
                continue
            for seq, future in waiting:
                if seq <= q.last_seq + 1 and not future.done():
                    future.set_result(None)

    @property
    def has_waiters(self) -> bool:
        return self._waiting > 0

    def _answer(self, phys: int) -> DuplicateAnswer:
        record = self._store.read_record(phys) if phys >= 0 else None
        if not record or len(record) < HEAD.size:  # gone with its segment
            return DuplicateAnswer(queue_offset=-1, phys_offset=-1, store_timestamp_ms=0)
        sysflag = _SYSFLAG.unpack_from(record, POS_SYSFLAG)[0]
        return DuplicateAnswer(
            queue_offset=_QUEUE_OFFSET.unpack_from(record, _QUEUE_OFFSET_POS)[0],
            phys_offset=phys,
            store_timestamp_ms=STORE_TIMESTAMP.unpack_from(record, store_timestamp_pos(sysflag))[0],
            end_phys_offset=phys + len(record),
        )


def _check_init(producer_group: str, identity: str, topics: list[str]) -> None:
    if producer_group:
        problem = check_group(producer_group)
        if problem:
            raise IllegalArgumentError(f"producer_group: {problem}")
    if len(identity) > MAX_IDENTITY_LENGTH:
        raise IllegalArgumentError(
            f"identity is {len(identity)} characters; at most {MAX_IDENTITY_LENGTH} are allowed"
        )
    if not topics:
        raise IllegalArgumentError(
            "InitProducerId names no topic; give the topics the "
            "producer writes to (the ACL checks PUB on each)"
        )
    if len(topics) > MAX_INIT_TOPICS:
        raise IllegalArgumentError(
            f"InitProducerId names {len(topics)} topics; at most {MAX_INIT_TOPICS} are allowed"
        )
    for topic in topics:
        problem = check_topic(topic)
        if problem:
            raise IllegalArgumentError(f"topics: {problem}")
