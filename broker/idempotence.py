"""IdempotenceProcessor: producer ids for idempotent producers, and the send path's
de-duplication (Kafka's idempotent producer, on PocketMQ's records).

``InitProducerId`` hands out a producer id: a fresh random one at epoch 0, or,
for a named identity, the id derived from (ACL user, identity) with its epoch
raised by one. Raising an epoch is written to the commit log as a small record
in :data:`PRODUCER_EPOCH_TOPIC` (body: the identity; ``PMQ_IDEM`` =
``<pid>.<epoch>.-1``), so the fence survives a restart and reaches replicas
with the log. Fresh ids are random in [1, 2**62); named ones have bit 62 set,
so the two never meet.

Before a put, :meth:`IdempotenceProcessor.check` reads each record's ``PMQ_IDEM``
(see :mod:`pocketmq.broker.store.producer_state`) and asks the store's
:class:`ProducerStateTable` which records are retries of stored ones; those are
answered with their original offsets (:func:`duplicate_answer`) and left out
of the put. The table itself is advanced by the store as it appends. Refusals::

    PRODUCER_FENCED        FAILED_PRECONDITION  an epoch older than the id's
    OUT_OF_ORDER_SEQUENCE  OUT_OF_RANGE         a gap before the record's sequence
    SEQUENCE_REPEATED      INVALID_ARGUMENT     one request repeats a sequence
    PRODUCER_ID_LIMIT      RESOURCE_EXHAUSTED   max_producer_ids ids, none expired
"""

from __future__ import annotations

import hashlib
import secrets
import struct
from collections.abc import Callable
from dataclasses import dataclass

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
from pocketmq.broker.store.batch import ScannedBatch
from pocketmq.broker.store.producer_state import (
    PROPERTY_IDEMPOTENCE,
    ProducerStateError,
    ProducerStateTable,
    StateErrorKind,
    idempotence_of,
)
from pocketmq.broker.store.results import PutStatus
from pocketmq.broker.topic_config import PRODUCER_EPOCH_TOPIC
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.message import HEAD
from pocketmq.common.validation import check_group, check_topic
from pocketmq.security.interceptor import AclError, authorize_publish, current_owner

__all__ = [
    "PRODUCER_EPOCH_TOPIC",
    "DuplicateAnswer",
    "IdempotenceProcessor",
    "ProducerInit",
    "named_producer_id",
]

MAX_IDENTITY_LENGTH = 255
MAX_INIT_TOPICS = 1024
_NAMED_BIT = 1 << 62
_QUEUE_OFFSET = struct.Struct(">q")
_TOTAL_SIZE = struct.Struct(">i")  # TOTALSIZE, a record's first field
_QUEUE_OFFSET_POS = 20  # TOTALSIZE MAGIC BODYCRC QUEUEID FLAG | QUEUEOFFSET


_ERRORS: dict[StateErrorKind, Callable[[str], BrokerError]] = {
    StateErrorKind.FENCED: lambda m: FailedPreconditionError(m, reason="PRODUCER_FENCED"),
    StateErrorKind.OUT_OF_ORDER: SequenceGapError,
    StateErrorKind.REPEATED: lambda m: IllegalArgumentError(m, reason="SEQUENCE_REPEATED"),
    StateErrorKind.FULL: lambda m: SystemBusyError(m, reason="PRODUCER_ID_LIMIT"),
}


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


def named_producer_id(owner: str, identity: str) -> int:
    digest = hashlib.blake2b(f"{owner}\0{identity}".encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") & (_NAMED_BIT - 1)) | _NAMED_BIT


class IdempotenceProcessor:
    def __init__(
        self,
        store: object,
        *,
        clock: Clock | None = None,
        not_master: Callable[[], BrokerNotMasterError | None] | None = None,
    ) -> None:
        self._store = store
        self._table: ProducerStateTable = store.producers  # type: ignore[attr-defined]
        self._clock = clock or SystemClock()
        self._not_master = not_master

    # -- InitProducerId -----------------------------------------------------------------
    def init_producer_id(
        self, *, producer_group: str, identity: str, topics: list[str]
    ) -> ProducerInit:
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
        pid = named_producer_id(current_owner() or "", identity)
        entry = table.producers.get(pid)
        if entry is None:
            self._admit(now)
        epoch = 0 if entry is None else entry.epoch + 1
        result = self._store.put_message(  # type: ignore[attr-defined]
            topic=PRODUCER_EPOCH_TOPIC,
            queue_id=0,
            body=identity.encode(),
            properties={PROPERTY_IDEMPOTENCE: f"{pid}.{epoch}.-1"},
        )
        if result.status is not PutStatus.PUT_OK:
            raise PutRejectedError(result.status, result.error or result.status.value)
        entry = table.register(pid, epoch, now)
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
        """None for a request without producer ids (one look at its first and last
        record); else the records already stored, each with its original answer."""
        positions, sizes = scanned.positions, scanned.sizes
        first = idempotence_of(blob, positions[0] + sizes[0])
        if first is None and idempotence_of(blob, positions[-1] + sizes[-1]) is None:
            return None
        idents = [first] + [
            idempotence_of(blob, positions[i] + sizes[i]) for i in range(1, len(positions))
        ]
        queues = list(zip(scanned.topics, scanned.queue_ids, strict=True))
        try:
            dups = self._table.check(idents, queues, self._clock.now_ms())
        except ProducerStateError as exc:
            raise _ERRORS[exc.kind](exc.message) from None
        return {i: self._answer(phys) for i, phys in dups.items()}

    def _answer(self, phys: int) -> DuplicateAnswer:
        commitlog = self._store.commitlog  # type: ignore[attr-defined]
        head = commitlog.read(phys, HEAD.size) if phys >= 0 else None
        if not head or len(head) < HEAD.size:
            return DuplicateAnswer(queue_offset=-1, phys_offset=-1, store_timestamp_ms=0)
        return DuplicateAnswer(
            queue_offset=_QUEUE_OFFSET.unpack_from(head, _QUEUE_OFFSET_POS)[0],
            phys_offset=phys,
            store_timestamp_ms=commitlog.store_timestamp(phys) or 0,
            end_phys_offset=phys + _TOTAL_SIZE.unpack_from(head, 0)[0],
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
