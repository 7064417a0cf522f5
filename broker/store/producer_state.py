"""ProducerStateTable: the de-duplication state of idempotent producers.

An idempotent producer stamps each record with one reserved property, its
last::

    ... UNIQ_KEY \\x01 <key> \\x02 PMQ_IDEM \\x01 <pid>.<epoch>.<seq> \\x02   (end of record)

* ``pid``   producer id, from ``InitProducerId`` (1 .. 2**63-1, decimal)
* ``epoch`` the id's epoch; a higher one fences the instances that hold a lower
* ``seq``   the record's number in its (topic, queue id) *as sent* (a delayed or
            half message is numbered in the queue it was sent to), from 0 up
            without gaps; -1 marks an epoch record (``InitProducerId`` of a
            named producer) that numbers nothing

The property must be the record's last (the broker reads it from the record's
last :data:`TAIL_WINDOW` bytes); a record without it is not de-duplicated.

Per producer id the table keeps the epoch, the last activity (store time of
its newest record, or the time of its ``InitProducerId``) and, per queue, the
last sequence and the commit-log offsets of the last ``window`` records
stored, so that a retried record is answered with the original result::

    pid ─┬─ epoch, last_active_ms
         └─ (topic, queue id) ─ last_seq, phys offsets of seqs last-n+1 .. last

Every record appended, by a put, a replica's frame or recovery's scan, goes
through :meth:`ProducerStateTable.observe` in log order: the state is a
function of the log, so a restarted broker and a promoted replica hold the
same state as the master that wrote it. ``observe`` takes a record whose
sequence is not new as a copy (a delayed message delivered, a transaction
committed): it changes nothing. The send path asks :meth:`check` before a put
which records are retries (answered from the table), and refuses a fenced
epoch or a sequence with a gap.

Bounds: ids idle for ``expiration_ms`` are dropped; at most ``max_producers``
ids are kept: ``check`` refuses a new id when the table is full of ids that
have not expired (``ProducerStateError`` kind ``"full"``), while ``observe``
(which must follow the log) drops the least recently active id.
"""

from __future__ import annotations

import enum
import logging
import re
from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pocketmq.common.errors import StoreError
from pocketmq.common.message import check_record

if TYPE_CHECKING:
    from pocketmq.broker.store.batch import ScannedBatch

__all__ = [
    "PROPERTY_IDEMPOTENCE",
    "RUN_SEARCH",
    "TAIL_WINDOW",
    "ProducerEntry",
    "ProducerStateError",
    "ProducerStateTable",
    "QueueSeq",
    "StateErrorKind",
    "idempotence_of",
    "idempotence_of_props",
    "py_idem_runs",
    "sent_queue",
]

log = logging.getLogger(__name__)

PROPERTY_IDEMPOTENCE = "PMQ_IDEM"
_NEEDLE = b"\x02PMQ_IDEM\x01"
#: the record's last bytes the property is looked for in: needle + 3 numbers + separators
TAIL_WINDOW = len(_NEEDLE) + 19 + 1 + 10 + 1 + 20 + 1
_MAX_PID = (1 << 63) - 1
_MAX_EPOCH = (1 << 31) - 1
#: topics where the broker parks a record sent to another queue (REAL_TOPIC / REAL_QID)
PARKING_TOPICS = frozenset(
    {"SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer", "RMQ_SYS_TRANS_HALF_TOPIC"}
)

Ident = tuple[int, int, int]  # (pid, epoch, seq)
#: stamped records of one producer id, epoch and queue (as stored) with consecutive
#: sequences: (pid, epoch, topic, queue id, first seq, the records' indices in the batch)
Run = tuple[int, int, str, int, int, list[int]]
#: how many of the newest runs a record may extend (see :func:`py_idem_runs`)
RUN_SEARCH = 16
_NUMBER = re.compile(rb"-?[0-9]{1,20}")


class StateErrorKind(enum.Enum):
    FENCED = "PRODUCER_FENCED"  # an epoch lower than the id's
    OUT_OF_ORDER = "OUT_OF_ORDER_SEQUENCE"  # a gap before the record's sequence
    FULL = "PRODUCER_ID_LIMIT"  # max_producers ids, none expired
    REPEATED = "SEQUENCE_REPEATED"  # one request carries a sequence twice


class ProducerStateError(StoreError):
    """A producer-state update the table refuses; ``kind`` says which rule."""

    """*ahead*: for OUT_OF_ORDER, (pid, topic, queue id, the record's sequence) when
    the table's state (not the request itself) is behind it: earlier records of that
    queue may still be on their way."""

    def __init__(
        self,
        kind: StateErrorKind,
        message: str,
        ahead: tuple[int, str, int, int] | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.ahead = ahead


def _parse_value(raw: bytes) -> Ident | None:
    """Three ASCII decimals (``-?[0-9]{1,20}``) joined by dots, each in its range."""
    parts = raw.split(b".")
    if len(parts) != 3 or not all(_NUMBER.fullmatch(part) for part in parts):
        return None
    pid, epoch, seq = int(parts[0]), int(parts[1]), int(parts[2])
    if not (0 < pid <= _MAX_PID and 0 <= epoch <= _MAX_EPOCH and -1 <= seq < 1 << 62):
        return None
    return pid, epoch, seq


def idempotence_of(blob: bytes | bytearray | memoryview, end: int) -> Ident | None:
    """(pid, epoch, seq) of the record ending at *end* in *blob*, or None.

    The stamp is found behind the separator of the property before it, or, as the
    record's only property, right behind its 2-byte PROPERTIES_LENGTH, which then
    counts exactly the bytes from it to *end* (an epoch record written before it got
    a property ahead of the stamp)."""
    start = max(end - TAIL_WINDOW, 0)
    tail = bytes(blob[start:end])
    if not tail.endswith(b"\x02"):
        return None
    i = tail.rfind(_NEEDLE)
    if i >= 0:
        return _parse_value(tail[i + len(_NEEDLE) : -1])
    lo = max(start - 1, 2)
    wide = bytes(blob[lo - 2 : end])  # absolute position k is wide[k - lo + 2]
    alone = _NEEDLE[1:]
    j = wide.rfind(alone)
    while j >= 2:
        if int.from_bytes(wide[j - 2 : j], "big") == len(wide) - j:
            return _parse_value(wide[j + len(alone) : -1])
        j = wide.rfind(alone, 0, j)
    return None


def idempotence_of_props(props: bytes) -> Ident | None:
    """The same, from a record's properties (a recovery scan's ScannedRecord)."""
    return (
        idempotence_of(b"\x02" + props[-TAIL_WINDOW:], TAIL_WINDOW + 1)
        if len(props) < TAIL_WINDOW
        else idempotence_of(props, len(props))
    )


def py_idem_runs(
    blob: bytes | bytearray | memoryview,
    positions: Sequence[int],
    sizes: Sequence[int],
    topics: Sequence[str],
    queue_ids: Sequence[int],
) -> list[Run]:
    """The stamped records of a scanned batch as runs (the reference of the compiled
    scanner's ``idem_runs``; an empty list when no record is stamped).

    Records are taken in order; a record extends the newest of the last
    :data:`RUN_SEARCH` runs with its producer id, topic and queue id when that run
    has its epoch and ends just before its sequence, else it starts a run. An epoch
    record (sequence -1) is a run of its own. So the records of one (id, queue)
    lie in its runs in batch order, and one update per run is one per record."""
    runs: list[Run] = []
    for i, (pos, size) in enumerate(zip(positions, sizes, strict=True)):
        ident = idempotence_of(blob, pos + size)
        if ident is None:
            continue
        pid, epoch, seq = ident
        topic, queue_id = topics[i], queue_ids[i]
        for j in range(len(runs) - 1, max(len(runs) - RUN_SEARCH, 0) - 1, -1):
            run = runs[j]
            if run[0] == pid and run[3] == queue_id and run[2] == topic:
                if run[1] == epoch and run[4] >= 0 and run[4] + len(run[5]) == seq:
                    run[5].append(i)
                    ident = None
                break
        if ident is not None:
            runs.append((pid, epoch, topic, queue_id, seq, [i]))
    return runs


def idents_of_runs(runs: Sequence[Run], count: int) -> list[Ident | None]:
    """Per record of a batch of *count*: its (pid, epoch, seq), None if unstamped."""
    idents: list[Ident | None] = [None] * count
    for pid, epoch, _topic, _queue_id, first, indices in runs:
        for k, i in enumerate(indices):
            idents[i] = (pid, epoch, first + k if first >= 0 else first)
    return idents


def sent_queue(topic: str, queue_id: int, props: bytes) -> tuple[str, int]:
    """The queue a record was sent to: its own, or REAL_TOPIC / REAL_QID when parked."""
    if topic not in PARKING_TOPICS:
        return topic, queue_id
    real_topic, real_qid = "", -1
    for pair in props.decode("utf-8", "replace").split("\x02"):
        name, _sep, value = pair.partition("\x01")
        if name == "REAL_TOPIC":
            real_topic = value
        elif name == "REAL_QID" and value.isdigit():
            real_qid = int(value)
    return (real_topic, real_qid) if real_topic and real_qid >= 0 else (topic, queue_id)


class QueueSeq:
    """One queue of one producer: its last sequence and the newest records' offsets."""

    __slots__ = ("last_seq", "phys")

    def __init__(self, last_seq: int, window: int) -> None:
        self.last_seq = last_seq
        self.phys: deque[int] = deque(maxlen=window)  # offsets of seqs last-len+1 .. last

    def phys_of(self, seq: int) -> int:
        """The commit-log offset of *seq* if still kept, else -1."""
        back = self.last_seq - seq
        return self.phys[-1 - back] if 0 <= back < len(self.phys) else -1


class ProducerEntry:
    __slots__ = ("epoch", "last_active_ms", "pid", "queues")

    def __init__(self, pid: int, epoch: int, last_active_ms: int) -> None:
        self.pid = pid
        self.epoch = epoch
        self.last_active_ms = last_active_ms
        self.queues: dict[tuple[str, int], QueueSeq] = {}


class ProducerStateTable:
    """The state of every producer id, in order of last activity (oldest first)."""

    def __init__(
        self, *, window: int = 256, max_producers: int = 10_000, expiration_ms: int = 86_400_000
    ) -> None:
        if window < 1 or max_producers < 1 or expiration_ms < 1:
            raise ValueError(
                f"window ({window}), max_producers ({max_producers}) and "
                f"expiration_ms ({expiration_ms}) must be >= 1"
            )
        self.window = window
        self.max_producers = max_producers
        self.expiration_ms = expiration_ms
        self.producers: OrderedDict[int, ProducerEntry] = OrderedDict()
        self.evicted = 0  # ids dropped to stay within max_producers
        self.expired = 0  # ids dropped after expiration_ms idle

    def __len__(self) -> int:
        return len(self.producers)

    def clear(self) -> None:
        self.producers.clear()

    # -- the log's side: every appended record, in order -----------------------------------
    def _touch(self, pid: int, epoch: int, timestamp_ms: int) -> ProducerEntry:
        """The entry of *pid*, made (evicting the oldest when full) or refreshed: most
        recently used, its epoch and last activity advanced to the record's."""
        producers = self.producers
        entry = producers.get(pid)
        if entry is None:
            if len(producers) >= self.max_producers:
                self._evict_oldest()
            entry = producers[pid] = ProducerEntry(pid, epoch, timestamp_ms)
            return entry
        producers.move_to_end(pid)
        if epoch > entry.epoch:
            entry.epoch = epoch
        if timestamp_ms > entry.last_active_ms:
            entry.last_active_ms = timestamp_ms
        return entry

    def observe(
        self, ident: Ident, topic: str, queue_id: int, phys_offset: int, timestamp_ms: int
    ) -> None:
        """Take in an appended record stamped *ident*, sent to (*topic*, *queue_id*)."""
        pid, epoch, seq = ident
        entry = self._touch(pid, epoch, timestamp_ms)
        if seq < 0:
            return  # an epoch record
        key = (topic, queue_id)
        q = entry.queues.get(key)
        if q is None:
            q = entry.queues[key] = QueueSeq(seq, self.window)
        elif seq == q.last_seq + 1:
            q.last_seq = seq
        elif seq > q.last_seq + 1:
            # a re-admitted id (expired, then back): the log holds its records as taken
            q.last_seq = seq
            q.phys.clear()
        else:
            return  # a copy of a stored record (delivered, committed): changes nothing
        q.phys.append(phys_offset)

    def observe_batch(
        self, batch: ScannedBatch, phys_offsets: Sequence[int], timestamp_ms: int
    ) -> None:
        """:meth:`observe` for each stamped record of an appended batch, one update per
        run of its ``idem_runs`` (nothing at all for a batch without stamps)."""
        runs = batch.idem_runs
        touched: ProducerEntry | None = None  # the entry of the run before, fresh
        mixed = False  # runs of more than one id
        for pid, epoch, topic, queue_id, first, indices in runs:
            if topic in PARKING_TOPICS:
                self._observe_parked(batch, pid, epoch, first, indices, phys_offsets, timestamp_ms)
                touched, mixed = None, True
                continue
            if touched is not None and touched.pid == pid and epoch <= touched.epoch:
                entry = touched  # the id of the run before (a coalesced batch's usual case)
            else:
                mixed = mixed or touched is not None
                entry = touched = self._touch(pid, epoch, timestamp_ms)
            if first < 0:
                continue  # an epoch record
            count = len(indices)
            q = entry.queues.get((topic, queue_id))
            skip = 0
            if q is None:
                q = entry.queues[(topic, queue_id)] = QueueSeq(first, self.window)
            elif first > q.last_seq + 1:
                q.phys.clear()  # a re-admitted id (expired, then back), as observe
            else:
                skip = q.last_seq + 1 - first  # copies of stored records change nothing
                if skip >= count:
                    continue
            q.last_seq = first + count - 1
            lo, hi = indices[skip], indices[-1]
            if hi - lo == count - 1 - skip:  # adjacent in the batch: one slice
                q.phys.extend(phys_offsets[lo : hi + 1])
            else:  # interleaved with other queues' records (a coalesced batch)
                q.phys.extend(map(phys_offsets.__getitem__, indices[skip:] if skip else indices))
        if mixed:
            self._reorder(runs)

    def _reorder(self, runs: Sequence[Run]) -> None:
        """Ids in order of their last record in the batch, as observing record by record
        leaves them (the order evictions and expiry walk)."""
        last: dict[int, int] = {}
        for run in runs:
            pid, end = run[0], run[5][-1]
            if end > last.get(pid, -1):
                last[pid] = end
        if len(last) > 1:
            producers = self.producers
            for pid in sorted(last, key=last.__getitem__):
                if pid in producers:
                    producers.move_to_end(pid)

    def _observe_parked(
        self,
        batch: ScannedBatch,
        pid: int,
        epoch: int,
        first: int,
        indices: list[int],
        phys_offsets: Sequence[int],
        timestamp_ms: int,
    ) -> None:
        """A run stored in a parking topic: each record counts in the queue it was sent to."""
        blob, positions, sizes, topics, queue_ids = (
            batch.blob,
            batch.positions,
            batch.sizes,
            batch.topics,
            batch.queue_ids,
        )
        for k, i in enumerate(indices):
            pos = positions[i]
            topic, queue_id = sent_queue(
                topics[i], queue_ids[i], _props_of(blob, pos, pos + sizes[i])
            )
            seq = first + k if first >= 0 else first
            self.observe((pid, epoch, seq), topic, queue_id, phys_offsets[i], timestamp_ms)

    def _evict_oldest(self) -> None:
        pid, entry = self.producers.popitem(last=False)
        self.evicted += 1
        log.warning(
            "producer id table is full (%d ids, max_producer_ids); dropped id %d, "
            "idle since %d ms: its retries are no longer recognised",
            self.max_producers,
            pid,
            entry.last_active_ms,
        )

    def expire(self, now_ms: int) -> int:
        """Drop ids idle for expiration_ms or more; returns how many."""
        producers, cutoff, dropped = self.producers, now_ms - self.expiration_ms, 0
        while producers:
            pid, entry = next(iter(producers.items()))
            if entry.last_active_ms > cutoff:
                break
            del producers[pid]
            dropped += 1
        self.expired += dropped
        return dropped

    # -- the send path's side: before a put ------------------------------------------------
    def check(
        self, idents: Sequence[Ident | None], queues: Sequence[tuple[str, int]], now_ms: int
    ) -> dict[int, int]:
        """Which records of a request were stored already: {index: phys offset, or -1
        when that result is no longer kept}. Raises :class:`ProducerStateError` for a
        fenced epoch, a gap, a sequence repeated within the request, or a full table."""
        self.expire(now_ms)
        dups: dict[int, int] = {}
        seen: dict[tuple[int, str, int], int] = {}  # last seq as of this request's records
        admitted: set[int] = set()
        for i, ident in enumerate(idents):
            if ident is None:
                continue
            pid, epoch, seq = ident
            topic, queue_id = queues[i]
            entry = self.producers.get(pid)
            q = None
            if entry is not None:
                if epoch < entry.epoch:
                    raise ProducerStateError(
                        StateErrorKind.FENCED,
                        (
                            f"producer id {pid} has epoch {entry.epoch}; this record carries "
                            f"epoch {epoch}: a newer instance of this producer took over, so this "
                            "one may not write any more"
                        ),
                    )
                q = entry.queues.get((topic, queue_id))
            elif pid not in admitted:
                self.admit_check(now_ms)
                admitted.add(pid)
            key = (pid, topic, queue_id)
            last = seen.get(key)
            ahead = None
            if last is not None:
                if seq <= last:
                    raise ProducerStateError(
                        StateErrorKind.REPEATED,
                        (
                            f"record {i} repeats sequence {seq} of producer id {pid} in "
                            f"{topic}:{queue_id} within one request"
                        ),
                    )
            elif q is not None:
                last = q.last_seq
                if seq <= last:
                    dups[i] = q.phys_of(seq)
                    continue
                ahead = (pid, topic, queue_id, seq)
            elif entry is not None:
                last = -1  # a known id, a queue it has not written: starts at 0
                ahead = (pid, topic, queue_id, seq)
            else:
                last = seq - 1  # an unknown (expired, never seen) id starts anywhere
            if seq != last + 1:
                raise ProducerStateError(
                    StateErrorKind.OUT_OF_ORDER,
                    (
                        f"producer id {pid} sent sequence {seq} to {topic}:{queue_id}, but the "
                        f"next one there is {last + 1}: {seq - last - 1} earlier record(s) are "
                        "missing (sent out of order, or lost); retry them first"
                    ),
                    ahead,
                )
            seen[key] = seq
        return dups

    def in_order(self, runs: Sequence[Run], now_ms: int) -> bool:
        """True when every run of a request is new and in order, from a known id at its
        epoch, each (id, queue) once: nothing to de-duplicate or refuse, one look per
        run. False: ask :meth:`check`, which looks record by record and says why."""
        self.expire(now_ms)
        producers = self.producers
        seen: set[tuple[int, str, int]] = set()
        for pid, epoch, topic, queue_id, first, _indices in runs:
            entry = producers.get(pid)
            if entry is None or epoch < entry.epoch or first < 0:
                return False
            key = (pid, topic, queue_id)
            if key in seen:
                return False
            seen.add(key)
            q = entry.queues.get((topic, queue_id))
            if first != (q.last_seq + 1 if q is not None else 0):
                return False
        return True

    def admit_check(self, now_ms: int) -> None:
        """Room for one more id, or a clear refusal."""
        if len(self.producers) < self.max_producers:
            return
        self.expire(now_ms)
        if len(self.producers) >= self.max_producers:
            oldest = next(iter(self.producers.values()))
            raise ProducerStateError(
                StateErrorKind.FULL,
                (
                    f"the broker keeps the state of at most {self.max_producers} idempotent "
                    f"producer ids (max_producer_ids) and none has been idle for "
                    f"{self.expiration_ms} ms (producer_id_expiration_ms; the oldest was active "
                    f"{now_ms - oldest.last_active_ms} ms ago); raise either setting, or send "
                    "with idempotent=False"
                ),
            )

    def register(self, pid: int, epoch: int, now_ms: int) -> ProducerEntry:
        """An id handed out by InitProducerId (already admitted)."""
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid, epoch, now_ms)
        else:
            self.producers.move_to_end(pid)
            entry.epoch = max(entry.epoch, epoch)
            entry.last_active_ms = max(entry.last_active_ms, now_ms)
        return entry


def _props_of(blob: bytes | bytearray | memoryview, pos: int, end: int) -> bytes:
    """The properties of the (checked) record at [pos, end)."""
    lay = check_record(blob, pos, end, check_crc=False)
    return bytes(memoryview(blob)[lay.props_pos : lay.props_pos + lay.props_len])
