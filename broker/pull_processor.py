"""PullMessageProcessor: reads a queue for a consumer, long-polling when it is empty.

RocketMQ's ``PullMessageProcessor``. A pull names a group, a queue, an offset,
a tag expression and how long it may wait. The store answers with one of its
``GetStatus`` values and the next offset to read; the consumer is told
RocketMQ's client-side ``PullStatus`` (here :class:`PullOutcomeStatus`), mapped in
:data:`PULL_STATUS`::

    FOUND                                     -> FOUND
    NO_MATCHED_MESSAGE, MESSAGE_WAS_REMOVING  -> NO_MATCHED_MSG   (pull again at once)
    OFFSET_OVERFLOW_ONE, OFFSET_FOUND_NULL    -> NO_NEW_MSG
    NO_MESSAGE_IN_QUEUE, NO_MATCHED_LOGIC_QUEUE  -> NO_NEW_MSG at offset 0, else OFFSET_ILLEGAL
    OFFSET_TOO_SMALL, OFFSET_OVERFLOW_BADLY   -> OFFSET_ILLEGAL   (continue at next_begin_offset)

Tags are filtered on the consume queue's tag codes (Java ``String.hashCode``),
never by decoding the commit log; the client re-checks tag strings, since
codes can collide. A subscription of expression type ``SQL92`` is filtered on
the properties of each record read (:mod:`pocketmq.broker.property_filter`),
before anything leaves the broker; a pull without one takes the path above
untouched.

A pull that finds nothing new (``NO_NEW_MSG``, or ``NO_MATCHED_MSG`` having
read to the end of the queue) is parked in the
:class:`~pocketmq.broker.long_polling.PullRequestHolder` for its suspend
time, re-executed when a message is dispatched to its queue, and parked again
from the advanced offset when what arrived does not match its tags.

A ``PullBatch`` (:meth:`PullMessageProcessor.pull_batch`) reads several queues
of one group the same way and parks one future under all of them: the first
arrival on any wakes it, and then every queue is read and answered. A
``PullMessage`` is a batch of one. A consumer
with eight queues on a broker thus waits in one call rather than eight, and
one arrival of a batch that touched five queues is answered in one reply.

A PullBatch marked ``bulk`` (a reader of known ranges, the Spark source) may ask
each queue for up to :data:`MAX_BULK_PULL_MESSAGES` messages, and each queue's
reply may take what remains of the call's :data:`PULL_BATCH_REPLY_BYTES` rather
than ``max_pull_bytes``: one store read and one reply per 1,024 messages, not
per 32 (every per-queue step of the broker, paid ~30 times less often). The
bounds and checks are the same: the reply stops at 4 MiB, each topic is
authorized and checked as before. Any other pull keeps RocketMQ's per-queue
caps (``max_pull_messages``, 32, and ``max_pull_bytes``).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from pocketmq.broker.consumer_offsets import ConsumerOffsetManager
from pocketmq.broker.errors import (
    BrokerError,
    IllegalArgumentError,
    NoPermissionError,
    ResourceNotFoundError,
)
from pocketmq.broker.long_polling import HoldOutcome, PullRequestHolder
from pocketmq.broker.property_filter import FilterCompiler, read_filtered
from pocketmq.broker.stats import BrokerStatsManager
from pocketmq.broker.store.api import MessageStore
from pocketmq.broker.store.results import GetResult, GetStatus
from pocketmq.broker.topic_config import BrokerTopicConfig, TopicConfigManager
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.filter import TAG, SqlFilter
from pocketmq.common.filter.tags import SUB_ALL, TagExpressionError, parse_tag_expression
from pocketmq.common.hashing import tags_code
from pocketmq.common.validation import check_group, check_topic

__all__ = [
    "MAX_BATCH_QUEUES",
    "MAX_BULK_PULL_MESSAGES",
    "PULL_BATCH_REPLY_BYTES",
    "PULL_STATUS",
    "BatchResult",
    "PullMessageProcessor",
    "PullOutcome",
    "PullOutcomeStatus",
    "PullRequest",
    "subscription_tags",
]

MAX_BATCH_QUEUES = 1_000  # queues one PullBatch may name
PULL_BATCH_REPLY_BYTES = 4 * 1024 * 1024  # a PullBatch stops reading queues past this
MAX_BULK_PULL_MESSAGES = 1_024  # messages per queue of a bulk PullBatch, at most


class PullOutcomeStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


PULL_STATUS: dict[GetStatus, PullOutcomeStatus] = {
    GetStatus.FOUND: PullOutcomeStatus.FOUND,
    GetStatus.NO_MATCHED_MESSAGE: PullOutcomeStatus.NO_MATCHED_MSG,
    GetStatus.MESSAGE_WAS_REMOVING: PullOutcomeStatus.NO_MATCHED_MSG,
    GetStatus.OFFSET_OVERFLOW_ONE: PullOutcomeStatus.NO_NEW_MSG,
    GetStatus.OFFSET_FOUND_NULL: PullOutcomeStatus.NO_NEW_MSG,
    GetStatus.NO_MESSAGE_IN_QUEUE: PullOutcomeStatus.OFFSET_ILLEGAL,  # NO_NEW_MSG at offset 0
    GetStatus.NO_MATCHED_LOGIC_QUEUE: PullOutcomeStatus.OFFSET_ILLEGAL,  # NO_NEW_MSG at offset 0
    GetStatus.OFFSET_TOO_SMALL: PullOutcomeStatus.OFFSET_ILLEGAL,
    GetStatus.OFFSET_OVERFLOW_BADLY: PullOutcomeStatus.OFFSET_ILLEGAL,
}


def pull_status(result: GetResult, requested_offset: int) -> PullOutcomeStatus:
    if (
        result.status in (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.NO_MATCHED_LOGIC_QUEUE)
        and requested_offset == 0
    ):
        return PullOutcomeStatus.NO_NEW_MSG
    return PULL_STATUS[result.status]


def subscription_tags(expression: str) -> frozenset[str] | None:
    """The tags a pull's subscription names (None: every tag), or INVALID_ARGUMENT."""
    try:
        return parse_tag_expression(expression, what="subscription")
    except TagExpressionError as exc:
        raise IllegalArgumentError(str(exc), reason="SUBSCRIPTION_PARSE_FAILED") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class PullRequest:
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int = 0  # 0 = the broker's default
    subscription: str = SUB_ALL
    suspend_timeout_ms: int | None = None  # None = the broker's default, 0 = no wait
    expression_type: str = TAG  # TAG: `subscription` is tags; SQL92: a filter
    commit_offset: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PullOutcome:
    status: PullOutcomeStatus
    get_status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    records: list[bytes]  # empty when the store answered with a blob
    blob: bytes | None = None  # the records back to back (the usual answer)
    message_count: int = 0

    @property
    def records_blob(self) -> bytes:
        """What the reply carries: the records back to back."""
        return self.blob if self.blob is not None else b"".join(self.records)


@dataclass(frozen=True, slots=True)
class BatchResult:
    """One queue of a PullBatch: its outcome, or why it was refused."""

    index: int  # position in the request
    outcome: PullOutcome | None
    error: BrokerError | None


@dataclass(slots=True)
class _QueueRead:
    request: PullRequest
    max_count: int
    tag_codes: frozenset[int] | None
    sql: SqlFilter | None = None
    outcome: PullOutcome | None = None
    park_offset: int | None = None


class PullMessageProcessor:
    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        hold: PullRequestHolder,
        *,
        max_pull_messages: int = 32,
        max_pull_bytes: int = 256 * 1024,
        long_polling_enable: bool = True,
        suspend_default_ms: int = 15_000,
        suspend_max_ms: int = 60_000,
        clock: Clock | None = None,
        stats: BrokerStatsManager | None = None,
        filters: FilterCompiler | None = None,
    ) -> None:
        self._store = store
        self.filters = filters or FilterCompiler()
        self._topics = topics
        self._offsets = offsets
        self._hold = hold
        self._max_messages = max_pull_messages
        self._max_bytes = max_pull_bytes
        self._long_polling = long_polling_enable
        self._suspend_default_ms = suspend_default_ms
        self._suspend_max_ms = suspend_max_ms
        self._clock = clock or SystemClock()
        self._stats = stats or BrokerStatsManager(clock=self._clock)
        self._tag_codes: dict[str, frozenset[int] | None] = {}
        self._rotation = 0

    async def pull(self, request: PullRequest) -> PullOutcome:
        """One queue: a :meth:`pull_batch` of one, its refusal raised."""
        (result,) = await self.pull_batch(
            request.consumer_group, [request], request.suspend_timeout_ms
        )
        if result.error is not None:
            raise result.error
        assert result.outcome is not None  # the first queue is always read
        return result.outcome

    @staticmethod
    def _park_offset(result: GetResult, requested_offset: int) -> int | None:
        """The offset to wait beyond, or None when the result must be answered now."""
        status = result.status
        if status is GetStatus.OFFSET_OVERFLOW_ONE:
            return result.next_begin_offset
        if (
            status in (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.NO_MATCHED_LOGIC_QUEUE)
            and requested_offset == 0
        ):
            return 0
        if status is GetStatus.NO_MATCHED_MESSAGE and result.next_begin_offset >= result.max_offset:
            return result.next_begin_offset
        return None

    # -- several queues -----------------------------------------------------------------
    async def pull_batch(
        self,
        group: str,
        requests: Sequence[PullRequest],
        suspend_timeout_ms: int | None,
        *,
        bulk: bool = False,
    ) -> list[BatchResult]:
        """Read several queues of *group*, waiting while every one is at its end.

        Each request's own ``consumer_group`` and ``suspend_timeout_ms`` are
        ignored: the call's are used. A queue refused (bad field, topic gone)
        is answered with its :class:`~pocketmq.broker.errors.BrokerError` and
        does not hold the call. Queues are read from a rotating start, until the
        reply holds :data:`PULL_BATCH_REPLY_BYTES`; the ones not reached are
        missing from the result and the client pulls them again. *bulk*: each
        queue may be read up to :data:`MAX_BULK_PULL_MESSAGES` messages and what
        remains of the reply's bytes (see the module's doc).
        """
        problem = check_group(group)
        if problem:
            raise IllegalArgumentError(problem)
        if len(requests) > MAX_BATCH_QUEUES:
            raise IllegalArgumentError(
                f"PullBatch names {len(requests)} queues; at most "
                f"{MAX_BATCH_QUEUES} are allowed per call"
            )
        suspend_ms = self._suspend_ms(suspend_timeout_ms)
        plans: list[_QueueRead | BrokerError] = []
        for request in requests:
            try:
                max_count, tag_codes, sql = self._check_queue(request, bulk)
            except BrokerError as exc:
                plans.append(exc)
                continue
            plans.append(_QueueRead(request, max_count, tag_codes, sql))
            if request.commit_offset is not None:
                self._offsets.commit(group, request.topic, request.queue_id, request.commit_offset)
        reads = [p for p in plans if isinstance(p, _QueueRead)]
        refused = len(reads) < len(plans)
        self._read_all(reads, bulk=bulk)
        if suspend_ms > 0 and self._long_polling and not refused:
            deadline = self._clock.monotonic() + suspend_ms / 1000
            while True:
                targets = [
                    (r.request.topic, r.request.queue_id, r.park_offset)
                    for r in reads
                    if r.park_offset is not None
                ]
                remaining = deadline - self._clock.monotonic()
                if len(targets) < len(reads) or not targets or remaining <= 0:
                    break
                if await self._hold.wait_for_any(targets, remaining) is not HoldOutcome.ARRIVED:
                    break
                self._read_all(reads, parked=True, bulk=bulk)
        out: list[BatchResult] = []
        for index, plan in enumerate(plans):
            if isinstance(plan, BrokerError):
                out.append(BatchResult(index, None, plan))
            elif plan.outcome is not None:
                self._stats.on_get_totals(
                    plan.request.topic, plan.outcome.message_count, len(plan.outcome.records_blob)
                )
                out.append(BatchResult(index, plan.outcome, None))
        return out

    def _read_all(
        self, reads: list[_QueueRead], *, parked: bool = False, bulk: bool = False
    ) -> None:
        """Read each queue (from its park offset when *parked*) within the byte budget;
        *bulk*: a queue's read may take the whole budget left, not ``max_pull_bytes``."""
        budget = PULL_BATCH_REPLY_BYTES  # the first queue is read whatever its size
        if not reads:
            return
        start = self._rotation % len(reads)
        self._rotation += 1
        for read in reads[start:] + reads[:start]:
            if budget <= 0:
                read.outcome = None
                read.park_offset = None  # not read: answered by its absence
                continue
            req = read.request
            offset = (
                read.park_offset if parked and read.park_offset is not None else req.queue_offset
            )
            max_bytes = max(self._max_bytes, budget) if bulk else self._max_bytes
            if read.sql is None:
                result = self._store.get_message_blob(
                    req.topic,
                    req.queue_id,
                    offset,
                    max_count=read.max_count,
                    max_bytes=max_bytes,
                    tag_codes=read.tag_codes,
                )
            else:
                result = read_filtered(
                    self._store,
                    req.topic,
                    req.queue_id,
                    offset,
                    max_count=read.max_count,
                    max_bytes=max_bytes,
                    tag_codes=None,
                    sql=read.sql,
                )
            budget -= result.total_bytes
            read.park_offset = self._park_offset(result, req.queue_offset)
            read.outcome = PullOutcome(
                status=pull_status(result, req.queue_offset),
                get_status=result.status,
                next_begin_offset=result.next_begin_offset,
                min_offset=result.min_offset,
                max_offset=result.max_offset,
                records=result.records,
                blob=result.blob,
                message_count=result.message_count,
            )

    # -- validation ---------------------------------------------------------------------
    def _check_queue(
        self, request: PullRequest, bulk: bool = False
    ) -> tuple[int, frozenset[int] | None, SqlFilter | None]:
        """(max messages, tag codes, SQL92 filter) after checking the fields of one queue
        (of a *bulk* PullBatch: up to :data:`MAX_BULK_PULL_MESSAGES` messages)."""
        problem = check_topic(request.topic)
        if problem:
            raise IllegalArgumentError(problem)
        config = self._readable_topic(request.topic)
        if not 0 <= request.queue_id < config.read_queue_nums:
            raise IllegalArgumentError(
                f"queue id {request.queue_id} is out of range; topic {request.topic!r} has "
                f"{config.read_queue_nums} read queues (0..{config.read_queue_nums - 1})"
            )
        if request.queue_offset < 0:
            raise IllegalArgumentError(f"queue_offset is {request.queue_offset}; offsets are >= 0")
        cap = max(MAX_BULK_PULL_MESSAGES, self._max_messages) if bulk else self._max_messages
        if request.max_msg_nums < 0:
            raise IllegalArgumentError(
                f"max_msg_nums is {request.max_msg_nums}; give 1..{cap}, or 0 for the default"
            )
        if request.commit_offset is not None and request.commit_offset < 0:
            raise IllegalArgumentError(
                f"commit_offset is {request.commit_offset}; offsets are >= 0"
            )
        max_count = min(request.max_msg_nums or self._max_messages, cap)
        sql = self.filters.compile(request.expression_type, request.subscription)
        if sql is not None:
            return max_count, None, sql
        return max_count, self._codes(request.subscription), None

    def _suspend_ms(self, suspend_ms: int | None) -> int:
        if suspend_ms is None:
            return self._suspend_default_ms
        if suspend_ms < 0:
            raise IllegalArgumentError(
                f"suspend_timeout_ms is {suspend_ms}; give 0 (answer at "
                f"once) .. {self._suspend_max_ms}"
            )
        return min(suspend_ms, self._suspend_max_ms)

    def _readable_topic(self, topic: str) -> BrokerTopicConfig:
        config = self._topics.get(topic)
        if config is None:
            raise ResourceNotFoundError(
                f"topic {topic!r} does not exist on this broker; send to it or create it first",
                reason="TOPIC_NOT_EXIST",
            )
        if not config.readable:
            raise NoPermissionError(
                f"topic {topic!r} is not readable on this broker (perm {config.perm})"
            )
        return config

    def _codes(self, expression: str) -> frozenset[int] | None:
        try:
            return self._tag_codes[expression]
        except KeyError:
            tags = subscription_tags(expression)
            codes = None if tags is None else frozenset(tags_code(t) for t in tags)
            if len(self._tag_codes) < 10_000:
                self._tag_codes[expression] = codes
            return codes
