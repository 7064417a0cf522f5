"""TransactionResolver: EndTransaction, and what the op topic remembers.

RocketMQ's ``EndTransactionProcessor`` and ``TransactionalMessageServiceImpl``.
How half messages, op records and commits look is in :mod:`.transaction_ops`;
who asks producers about forgotten halves is :mod:`.transaction_check`.

It owns the *resolutions* of half messages: for each half queue offset at or
past the check progress, how it was resolved (COMMIT, ROLLBACK, DISCARD) and
by which op record. It is rebuilt at start the way RocketMQ rebuilds its
remove map, by reading the op queue from the saved op progress on, and kept
as EndTransaction and the check service resolve more. A resolution is written
(:meth:`resolve`) before it is remembered and both happen without an await
between the lookup and the put, so two EndTransactions for one half cannot
both commit it.

Progress survives restarts in ``config/transactionProgress.json``::

    {"halfOffset": 120,        every half below this queue offset is resolved
     "opOffset": 98,           every op below this one is about a half below halfOffset
     "checkTimes": {"121": 2}} checks already sent, per unresolved half

A half below ``halfOffset`` is no longer in memory; a late EndTransaction for
one finds its op through the key index (op ``KEYS`` = the half's commit-log
offset). Saved progress lags the truth (saved every few seconds and at stop):
after a kill -9 more ops are replayed, never fewer.

A crash between the op and the committed message of one commit (the two are
one batch, op first, so only a torn tail can split them) is repaired by the
replay: an op COMMIT whose committed message is neither right after it nor
found by the half's UNIQ_KEY gets the message put again.
"""

from __future__ import annotations

import heapq
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pocketmq.broker.delay_levels import PROPERTY_REAL_TOPIC
from pocketmq.broker.durability import OK, ReplicaWait, wait_durable
from pocketmq.broker.errors import (
    FailedPreconditionError,
    IllegalArgumentError,
    NoPermissionError,
    PutRejectedError,
    ResourceNotFoundError,
)
from pocketmq.broker.json_file import JsonFile
from pocketmq.broker.store.api import MessageStore
from pocketmq.broker.store.results import GetStatus, PutStatus
from pocketmq.broker.topic_config import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from pocketmq.broker.transaction_ops import (
    PROPERTY_PRODUCER_GROUP,
    Resolution,
    Verdict,
    commit_record,
    discard_record,
    is_commit_of,
    judge,
    op_record,
    parse_op,
)
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.message import StoredMessage, decode_record

if TYPE_CHECKING:
    from pocketmq.broker.trace import BrokerTraceService

__all__ = [
    "EndTransactionOutcome",
    "EndTransactionRequest",
    "ReplayReport",
    "TransactionProgress",
    "TransactionResolver",
]

log = logging.getLogger(__name__)

READ_BATCH = 256  # op records read per store call during the replay
KEY_QUERY_MAX = 64  # records a key lookup reads


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTransactionRequest:
    producer_group: str
    commit_log_offset: int  # of the half message
    resolution: Resolution  # COMMIT or ROLLBACK
    msg_id: str = ""  # the half's UNIQ_KEY; "" = unchecked
    from_transaction_check: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTransactionOutcome:
    resolution: Resolution
    already_resolved: bool  # the same decision came before; nothing was done
    half_queue_offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayReport:
    """What :meth:`TransactionResolver.load` found."""

    half_offset: int
    op_offset_from: int
    op_offset_to: int
    resolved: int  # halves at or past half_offset with an op
    repaired_commits: int


@dataclass(slots=True)
class _Resolved:
    resolution: Resolution
    op_queue_offset: int


class TransactionProgress:
    """``config/transactionProgress.json`` (see the module docstring)."""

    def __init__(self, path: str) -> None:
        self._file = JsonFile(path)
        self.half_offset = 0
        self.op_offset = 0
        self.check_times: dict[int, int] = {}
        self.dirty = False

    @property
    def path(self) -> str:
        return self._file.path

    def load(self) -> None:
        data = self._file.load() or {}
        try:
            self.half_offset = max(0, int(data.get("halfOffset", 0)))
            self.op_offset = max(0, int(data.get("opOffset", 0)))
            raw_times = data.get("checkTimes", {})
            self.check_times = {int(k): int(v) for k, v in dict(raw_times).items()}
        except (TypeError, ValueError) as exc:
            log.warning(
                "%s: unreadable progress (%s); replaying every op and checking every "
                "half message from the start",
                self.path,
                exc,
            )
            self.half_offset, self.op_offset, self.check_times = 0, 0, {}

    def persist(self) -> None:
        self.dirty = False
        try:
            self._file.save(
                {
                    "halfOffset": self.half_offset,
                    "opOffset": self.op_offset,
                    "checkTimes": {str(k): v for k, v in sorted(self.check_times.items())},
                }
            )
        except OSError:
            self.dirty = True
            raise


@dataclass(slots=True)
class _Repair:
    """A commit whose op is written but whose message could not be put yet."""

    half: StoredMessage
    attempts: int = 0


class TransactionResolver:
    """Resolutions of half messages. Event-loop thread only."""

    def __init__(
        self,
        store: MessageStore,
        config_dir: str,
        *,
        store_host: tuple[str, int],
        max_batch_size_bytes: int = 4 * 1024 * 1024,
        clock: Clock | None = None,
        replica_wait: ReplicaWait | None = None,
    ) -> None:
        """*replica_wait*: a SYNC_MASTER's wait for its replicas to hold the log up to an
        offset (:mod:`pocketmq.broker.durability`), which EndTransaction awaits."""
        self._store = store
        self._replica_wait = replica_wait
        self._store_host = store_host
        self._max_batch = max_batch_size_bytes
        self._clock = clock or SystemClock()
        self.progress = TransactionProgress(os.path.join(config_dir, "transactionProgress.json"))
        # half queue offset -> how; inserted in op order, so the first entry has the
        # smallest op offset; the heap finds the entries progress leaves behind.
        self._resolved: dict[int, _Resolved] = {}
        self._resolved_heap: list[int] = []
        self._repairs: dict[int, _Repair] = {}  # half queue offset -> unfinished commit
        self.committed_total = 0
        self.rolled_back_total = 0
        self.discarded_total = 0
        self.checks_total = 0  # counted by the check service
        self.trace: BrokerTraceService | None = None  # trace_topic_enable (broker/trace.py)

    # -- start ----------------------------------------------------------------------------
    def load(self) -> ReplayReport:
        """Read the progress file and replay the op queue from its op offset on."""
        progress = self.progress
        progress.load()
        half_max = self._store.max_offset(TRANS_HALF_TOPIC, 0)
        op_min = self._store.min_offset(TRANS_OP_HALF_TOPIC, 0)
        op_max = self._store.max_offset(TRANS_OP_HALF_TOPIC, 0)
        if progress.half_offset > half_max or progress.op_offset > op_max:
            # The log lost its tail (a power loss with async flush): never skip new halves.
            log.warning(
                "%s says half offset %d / op offset %d, but the queues end at %d / %d; "
                "using the queue ends",
                progress.path,
                progress.half_offset,
                progress.op_offset,
                half_max,
                op_max,
            )
            progress.half_offset = min(progress.half_offset, half_max)
            progress.op_offset = min(progress.op_offset, op_max)
        start = max(progress.op_offset, op_min)
        repaired = self._replay(start)
        progress.check_times = {
            k: v for k, v in progress.check_times.items() if k >= progress.half_offset
        }
        report = ReplayReport(
            half_offset=progress.half_offset,
            op_offset_from=start,
            op_offset_to=self._store.max_offset(TRANS_OP_HALF_TOPIC, 0),
            resolved=len(self._resolved),
            repaired_commits=repaired,
        )
        log.info(
            "transactions: half messages resolved below queue offset %d; replayed ops "
            "%d..%d: %d later halves already resolved%s",
            report.half_offset,
            report.op_offset_from,
            report.op_offset_to,
            report.resolved,
            f", {repaired} commits repaired" if repaired else "",
        )
        return report

    def _replay(self, offset: int) -> int:
        repaired = 0
        while True:
            result = self._store.get_messages(TRANS_OP_HALF_TOPIC, 0, offset, max_count=READ_BATCH)
            if result.status is not GetStatus.FOUND:
                if (
                    result.status is GetStatus.OFFSET_TOO_SMALL
                    and result.next_begin_offset > offset
                ):
                    offset = result.next_begin_offset
                    continue
                return repaired
            for raw, op_queue_offset in zip(result.records, result.queue_offsets, strict=True):
                repaired += self._replay_one(raw, op_queue_offset)
            offset = result.next_begin_offset

    def _replay_one(self, raw: bytes, op_queue_offset: int) -> int:
        try:
            msg = decode_record(raw, check_crc=False)
        except CorruptRecordError as exc:
            log.error(
                "transactions: skipping the damaged op at queue offset %d: %s", op_queue_offset, exc
            )
            return 0
        entry = parse_op(msg)
        if entry is None:
            log.warning(
                "transactions: the record at op queue offset %d is not an op; skipped",
                op_queue_offset,
            )
            return 0
        for half_queue_offset in entry.half_queue_offsets:
            if half_queue_offset >= self.progress.half_offset:
                self._remember(half_queue_offset, _Resolved(entry.resolution, op_queue_offset))
        if entry.resolution is Resolution.COMMIT and entry.half_phys_offset is not None:
            return self._repair_if_missing(msg, entry.half_phys_offset)
        return 0

    def _repair_if_missing(self, op: StoredMessage, half_phys_offset: int) -> int:
        """Put the committed message of a COMMIT op again if a crash lost it; 1 if put."""
        following = self._store.read_record(op.phys_offset + op.total_size)
        if following is not None and is_commit_of(following, half_phys_offset):
            return 0
        half = self._half_at(half_phys_offset)
        if half is None:
            return 0  # cleaned up with its commit, if any
        uniq_key = half.uniq_key
        topic = half.properties.get(PROPERTY_REAL_TOPIC, "")
        if uniq_key and topic:
            for raw in self._store.query_by_key(topic, uniq_key, max_count=KEY_QUERY_MAX):
                if is_commit_of(raw, half_phys_offset):
                    return 0
        log.warning(
            "transactions: the commit of half message %s (commit-log offset %d) was "
            "recorded but its message is missing (a crash cut the log); putting it "
            "again",
            uniq_key or "?",
            half_phys_offset,
        )
        self._repairs[half.queue_offset] = _Repair(half)
        self.run_repairs()
        return 1

    def _remember(self, half_queue_offset: int, resolved: _Resolved) -> None:
        if half_queue_offset not in self._resolved:  # the first op of a half counts
            self._resolved[half_queue_offset] = resolved
            heapq.heappush(self._resolved_heap, half_queue_offset)

    # -- queries --------------------------------------------------------------------------
    def resolution_of(self, half_queue_offset: int) -> Resolution | None:
        """How a half at or past the progress offset was resolved; None = not yet."""
        resolved = self._resolved.get(half_queue_offset)
        return resolved.resolution if resolved is not None else None

    def _earlier(self, half: StoredMessage) -> Resolution | None:
        if half.queue_offset >= self.progress.half_offset:
            return self.resolution_of(half.queue_offset)
        key = str(half.phys_offset)
        for raw in self._store.query_by_key(TRANS_OP_HALF_TOPIC, key, max_count=KEY_QUERY_MAX):
            try:
                entry = parse_op(decode_record(raw, check_crc=False))
            except CorruptRecordError:
                continue
            if entry is not None and entry.half_phys_offset == half.phys_offset:
                return entry.resolution
        return Resolution.RESOLVED

    def _half_at(self, phys_offset: int) -> StoredMessage | None:
        raw = self._store.read_record(phys_offset) if phys_offset >= 0 else None
        if raw is None:
            return None
        try:
            msg = decode_record(raw, check_crc=False)
        except CorruptRecordError:
            return None
        return msg if msg.topic == TRANS_HALF_TOPIC else None

    def half_message(self, phys_offset: int) -> StoredMessage | None:
        """The half message stored at *phys_offset*, or None."""
        return self._half_at(phys_offset)

    # -- EndTransaction -------------------------------------------------------------------
    async def end_transaction(self, request: EndTransactionRequest) -> EndTransactionOutcome:
        """Commit or roll back; idempotent. Answers once the op (and the committed message)
        is as durable as the role promises a send: flushed with synchronous flush, held by
        the replicas of a SYNC_MASTER (RocketMQ's EndTransactionProcessor puts the final
        message as a send is put). A shortfall is logged and answered all the same, as
        RocketMQ answers it: the resolution is stored here, and should this broker be lost
        before a replica holds it, the half it resolves is still there and is checked with
        the producer group again. A repeated EndTransaction waits the same way for the log
        as it is, which holds the first one's op."""
        if request.resolution not in (Resolution.COMMIT, Resolution.ROLLBACK):
            raise IllegalArgumentError(
                f"a transaction ends with COMMIT or ROLLBACK, not {request.resolution.value}"
            )
        half = self._find_half(request)
        earlier = self._earlier(half)
        verdict = judge(earlier, request.resolution)
        if verdict is Verdict.CONFLICT:
            assert earlier is not None
            raise FailedPreconditionError(
                f"half message {half.uniq_key or '?'} (commit-log offset {half.phys_offset}) "
                f"was already {earlier.describe()}; it cannot be "
                f"{request.resolution.describe()} now",
                reason=f"TRANSACTION_{earlier.value}",
            )
        if verdict is Verdict.ALREADY:
            log.debug(
                "half message at %d: %s again; already done",
                half.phys_offset,
                request.resolution.value,
            )
            await self._durable(self._store.log_end_offset(), half, request)
            return EndTransactionOutcome(
                resolution=request.resolution,
                already_resolved=True,
                half_queue_offset=half.queue_offset,
            )
        self.resolve(half, request.resolution)
        end = self._store.log_end_offset()  # no await since the put: the op's end, or past
        if self.trace is not None:
            self.trace.on_transaction_end(
                half,
                resolution=request.resolution.value,
                producer_group=request.producer_group,
                from_check=request.from_transaction_check,
            )
        log.debug(
            "half message %s of %s (commit-log offset %d) %s%s",
            half.uniq_key,
            request.producer_group,
            half.phys_offset,
            request.resolution.describe(),
            " on a check" if request.from_transaction_check else "",
        )
        await self._durable(end, half, request)
        return EndTransactionOutcome(
            resolution=request.resolution,
            already_resolved=False,
            half_queue_offset=half.queue_offset,
        )

    async def _durable(self, end: int, half: StoredMessage, request: EndTransactionRequest) -> None:
        """Until the log up to *end* is as durable as a send's (one wait for either path:
        the op just put, or the earlier op a repeated EndTransaction finds)."""
        reached = await wait_durable(self._store.flush_request(end), end, self._replica_wait)
        if reached != OK:
            log.warning(
                "the %s of half message at %d is stored but not yet durable (%s); "
                "answered all the same: the half stays checkable until a replica holds it",
                request.resolution.value,
                half.phys_offset,
                reached,
            )

    def _find_half(self, request: EndTransactionRequest) -> StoredMessage:
        offset = request.commit_log_offset
        if offset < 0:
            raise IllegalArgumentError(f"commit_log_offset is {offset}; offsets are >= 0")
        raw = self._store.read_record(offset)
        if raw is None:
            raise ResourceNotFoundError(
                f"no message starts at commit-log offset {offset} on this "
                "broker; give the offset (or offset_msg_id) the half "
                "message's send answered",
                reason="TRANSACTION_NOT_FOUND",
            )
        try:
            half = decode_record(raw, check_crc=False)
        except CorruptRecordError as exc:
            raise ResourceNotFoundError(
                f"the record at commit-log offset {offset} is damaged: {exc.reason}",
                reason="TRANSACTION_NOT_FOUND",
            ) from None
        # Refusals name only what the request named: the record may be another group's.
        if half.topic != TRANS_HALF_TOPIC:
            raise ResourceNotFoundError(
                f"the message at commit-log offset {offset} is not a half message",
                reason="TRANSACTION_NOT_FOUND",
            )
        group = half.properties.get(PROPERTY_PRODUCER_GROUP, "")
        if group != request.producer_group:
            raise NoPermissionError(
                f"the half message at commit-log offset {offset} is not "
                f"one of producer group {request.producer_group!r}; a "
                "producer ends only its own group's transactions",
                reason="TRANSACTION_OF_ANOTHER_GROUP",
            )
        if request.msg_id and request.msg_id != half.uniq_key:
            raise IllegalArgumentError(
                f"half message at commit-log offset {offset} has msg id "
                f"{half.uniq_key!r}, not {request.msg_id!r}"
            )
        return half

    # -- writing resolutions ----------------------------------------------------------------
    def resolve(self, half: StoredMessage, resolution: Resolution) -> None:
        """Write the op (and the committed message or discard copy) and remember it.

        Raises PutRejectedError when the store refuses; then nothing is remembered.
        The caller waits for durability up to the log's end (``_durable``).
        """
        op = op_record(
            half_queue_offset=half.queue_offset,
            half_phys_offset=half.phys_offset,
            resolution=resolution,
            now_ms=self._clock.now_ms(),
            store_host=self._store_host,
        )
        extra = self._companion(half, resolution)
        together = extra is not None and len(op) + len(extra) <= self._max_batch
        result = self._store.put_batch(op + extra if together and extra else op)
        if result.status is not PutStatus.PUT_OK:
            raise PutRejectedError(
                result.status,
                f"cannot record the {resolution.value} of "
                f"half message at {half.phys_offset}: "
                f"{result.error or result.status.value}",
            )
        self._remember(half.queue_offset, _Resolved(resolution, result.queue_offsets[0]))
        self.progress.check_times.pop(half.queue_offset, None)
        self._count(resolution)
        if extra is not None and not together:
            # Too big for one batch with its op: the op is written, the message follows.
            self._repairs[half.queue_offset] = _Repair(half)
            self.run_repairs()

    def _companion(self, half: StoredMessage, resolution: Resolution) -> bytes | None:
        try:
            if resolution is Resolution.COMMIT:
                return commit_record(half, store_host=self._store_host)
            if resolution is Resolution.DISCARD:
                return discard_record(half, store_host=self._store_host)
        except ValueError as exc:
            if resolution is Resolution.COMMIT:
                raise IllegalArgumentError(
                    f"half message at commit-log offset "
                    f"{half.phys_offset} cannot be committed: {exc}",
                    reason="MESSAGE_ILLEGAL",
                ) from None
            log.error("cannot copy discarded half message at %d: %s", half.phys_offset, exc)
        return None

    def _count(self, resolution: Resolution) -> None:
        if resolution is Resolution.COMMIT:
            self.committed_total += 1
        elif resolution is Resolution.ROLLBACK:
            self.rolled_back_total += 1
        else:
            self.discarded_total += 1

    def run_repairs(self) -> int:
        """Put committed messages still owed (see :meth:`resolve`); returns how many remain."""
        for queue_offset, repair in list(self._repairs.items()):
            try:
                record = commit_record(repair.half, store_host=self._store_host)
            except ValueError:
                del self._repairs[queue_offset]
                continue
            result = self._store.put_batch(record)
            if result.status is PutStatus.PUT_OK:
                del self._repairs[queue_offset]
                continue
            repair.attempts += 1
            if repair.attempts in (1, 10, 100) or repair.attempts % 1000 == 0:
                log.error(
                    "cannot put the committed message of half message at %d (attempt "
                    "%d): %s; retrying",
                    repair.half.phys_offset,
                    repair.attempts,
                    result.error or result.status.value,
                )
        return len(self._repairs)

    # -- progress -------------------------------------------------------------------------
    def advance(self, half_offset: int) -> None:
        """Every half below *half_offset* is resolved: forget them, move the op offset."""
        progress = self.progress
        if half_offset > progress.half_offset:
            progress.half_offset = half_offset
            heap = self._resolved_heap
            while heap and heap[0] < half_offset:
                self._resolved.pop(heapq.heappop(heap), None)
            for key in [k for k in progress.check_times if k < half_offset]:
                del progress.check_times[key]
            progress.dirty = True
        op_offset = (
            next(iter(self._resolved.values())).op_queue_offset
            if self._resolved
            else self._store.max_offset(TRANS_OP_HALF_TOPIC, 0)
        )
        if op_offset > progress.op_offset:
            progress.op_offset = op_offset
            progress.dirty = True

    def persist(self) -> None:
        """Save progress if it changed; an I/O error is logged and retried next time."""
        if not self.progress.dirty:
            return
        try:
            self.progress.persist()
        except OSError as exc:
            log.error(
                "cannot save transaction progress to %s: %s (errno %s)",
                self.progress.path,
                exc.strerror,
                exc.errno,
            )

    def figures(self) -> dict[str, str]:
        return {
            "transaction_committed_total": str(self.committed_total),
            "transaction_rolled_back_total": str(self.rolled_back_total),
            "transaction_discarded_total": str(self.discarded_total),
            "transaction_checks_total": str(self.checks_total),
            "transaction_half_offset": str(self.progress.half_offset),
            "transaction_op_offset": str(self.progress.op_offset),
        }
