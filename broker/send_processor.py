"""SendMessageProcessor: checks a send, creates topics on demand, stores, acknowledges.

RocketMQ's ``SendMessageProcessor`` for SEND_MESSAGE and SEND_BATCH_MESSAGE.
A send carries records already in the commit-log layout; one batch may feed
several topics and queues. The store's scan checks every record once (lengths,
CRC, names, sizes — the same pass the store would make) and the request is
refused, whole, when a record

* is cut short or has lengths that disagree with its TOTALSIZE,
* names a topic that is malformed, reserved for the broker, not writable, or
  unknown while ``auto_create_topic_enable`` is off,
* names a queue id outside ``0 .. write_queue_nums - 1``,
* has an empty body or one above ``max_message_size_bytes``, or properties
  above 32767 bytes.

Only then are unknown topics created. A record whose ``DELAY`` property names
a delay level is moved to ``SCHEDULE_TOPIC_XXXX`` on the way
(:func:`~pocketmq.broker.delay_levels.rewrite_delayed`); then one asking for a
later delivery time (``TIMER_DELIVER_MS``, ``TIMER_DELAY_MS``,
``TIMER_DELAY_SEC``) is moved to ``rmq_sys_wheel_timer``
(:func:`~pocketmq.broker.timer_messages.rewrite_timed`), or refused when that
time is malformed or too far ahead. Either way its acknowledgement still names
the topic and queue it was sent to. A record with
sysflag TRANSACTION_PREPARED is stored as a half message in
``RMQ_SYS_TRANS_HALF_TOPIC`` instead
(:func:`~pocketmq.broker.transaction_ops.rewrite_half_messages`), acknowledged
the same way, with the half's offsets. The blob goes
to the store, which stores it whole or not at all. With synchronous flush the acknowledgement
waits for the group commit; a flush that times out still stored the message
and is answered ``FLUSH_DISK_TIMEOUT``, as RocketMQ does.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pocketmq.broker.delay_levels import PROPERTY_DELAY, DelayLevels, rewrite_delayed
from pocketmq.broker.durability import OK, ReplicaWait, wait_durable
from pocketmq.broker.errors import (
    BrokerError,
    BrokerNotMasterError,
    IllegalArgumentError,
    NoPermissionError,
    PutRejectedError,
    ResourceNotFoundError,
)
from pocketmq.broker.idempotence import DuplicateAnswer, IdempotenceProcessor, SequenceAhead
from pocketmq.broker.stats import BrokerStatsManager
from pocketmq.broker.store.api import MessageStore
from pocketmq.broker.store.batch import MARK_DELAY, MARK_TIMER, BatchError, ScannedBatch
from pocketmq.broker.store.results import PutStatus
from pocketmq.broker.timer_messages import TimerPolicy, rewrite_timed
from pocketmq.broker.topic_config import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    NOT_ALLOWED_SEND_TOPICS,
    BrokerTopicConfig,
    TopicConfigManager,
)
from pocketmq.broker.transaction_ops import rewrite_half_messages
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.message import SysFlag
from pocketmq.common.model import SendStatus
from pocketmq.common.msgid import encode_offset_msg_id
from pocketmq.security.interceptor import AclError, authorize_publish, current_account

if TYPE_CHECKING:
    from pocketmq.broker.trace import BrokerTraceService

__all__ = ["SendMessageProcessor", "SendOutcome", "SendStatus"]

_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")
# RECONSUMETIMES i32 + PREPAREDTRANSACTIONOFFSET i64 lie between STOREHOST and BODYLEN.
_AFTER_STOREHOST = 4 + 8


#: wait_durable's shortfall as a send's status (a failed flush, too, is FLUSH_DISK_TIMEOUT)
_SHORT_OF = {
    s.value: s
    for s in (
        SendStatus.FLUSH_DISK_TIMEOUT,
        SendStatus.FLUSH_SLAVE_TIMEOUT,
        SendStatus.SLAVE_NOT_AVAILABLE,
    )
}


def _status_of(reached: str) -> SendStatus:
    """A stored send's status once :func:`wait_durable` answered *reached*."""
    return (
        SendStatus.SEND_OK
        if reached == OK
        else _SHORT_OF.get(reached, SendStatus.FLUSH_DISK_TIMEOUT)
    )


# BatchError kinds of the store's scan -> the reason a refusal carries.
_BATCH_REASONS = {
    "properties": "PROPERTIES_SIZE_EXCEEDED",
    "body_too_large": "MESSAGE_BODY_TOO_LARGE",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class SendOutcome:
    """What the producer learns; lists are parallel, one entry per record as sent.

    One flush covers the whole request, so ``status`` holds for every record.
    """

    status: SendStatus
    store_timestamp_ms: int
    msg_ids: list[str]  # UNIQ_KEY, made by the client ("" if none)
    topics: list[str]
    queue_ids: list[int]
    queue_offsets: list[int]
    phys_offsets: list[int]
    offset_msg_id_prefix: str  # store host + port; + 16 hex digits of phys = offset msg id
    # empty, or per record: answered from an idempotent producer's state (a retry)
    duplicates: list[bool] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.msg_ids)

    @property
    def offset_msg_ids(self) -> list[str]:
        return [f"{self.offset_msg_id_prefix}{phys:016X}" for phys in self.phys_offsets]


# A queue id past the topic's write queues: the sender's route is stale (it used the
# auto-create template's, or the topic shrank); the SDK refreshes it and retries.
QUEUE_OUT_OF_RANGE = "QUEUE_OUT_OF_RANGE"


def _illegal(pos: int, what: str, reason: str = "MESSAGE_ILLEGAL") -> IllegalArgumentError:
    return IllegalArgumentError(f"record at batch offset {pos}: {what}", reason=reason)


def _refuse_delayed_half_messages(scanned: ScannedBatch) -> None:
    """A half message may not ask for a later delivery: its commit would silently
    deliver it at once (RocketMQ does not delay transactional messages either)."""
    prepared = [
        i
        for i, flag in enumerate(scanned.sysflags)
        if SysFlag.transaction_type(flag) == SysFlag.TRANSACTION_PREPARED
    ]
    if not prepared:
        return
    properties = scanned.properties
    for i in prepared:
        timed = sorted(
            name for name in properties[i] if name == PROPERTY_DELAY or name.startswith("TIMER_DEL")
        )
        if timed:
            raise _illegal(
                scanned.positions[i],
                f"a transactional (prepared) message cannot "
                f"be delayed, but it carries {timed}; send it "
                "without a delay or delivery time",
            )


class SendMessageProcessor:
    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        *,
        store_host: tuple[str, int],
        delay_levels: DelayLevels | None = None,
        timer: TimerPolicy | None = None,
        clock: Clock | None = None,
        stats: BrokerStatsManager | None = None,
        replica_wait: ReplicaWait | None = None,
        not_master: Callable[[], BrokerNotMasterError | None] | None = None,
        idempotence: IdempotenceProcessor | None = None,
    ) -> None:
        self._store = store
        self._idempotence = idempotence
        self._not_master = not_master
        self._replica_wait = replica_wait
        self._topics = topics
        self._store_host = store_host
        self._delay_levels = delay_levels or DelayLevels.parse()
        self._timer = timer or TimerPolicy()
        self._clock = clock or SystemClock()
        self._stats = stats or BrokerStatsManager(clock=self._clock)
        # Every offset msg id of this broker starts with the same IP and port.
        self._msg_id_prefix = encode_offset_msg_id(store_host[0], store_host[1], 0)[:-16]
        self.trace: BrokerTraceService | None = None  # trace_topic_enable (broker/trace.py)

    async def send(
        self,
        blob: bytes | bytearray | memoryview,
        *,
        single: bool = False,
        producer_group: str = "",
    ) -> SendOutcome:
        """Store the records of *blob* and say where each went.

        *single* refuses a blob of more than one record (SEND_MESSAGE);
        *producer_group* is the group of a half message that lacks ``PGROUP``.
        """
        started_s = self._clock.monotonic()
        if self._not_master is not None:
            refusal = self._not_master()
            if refusal is not None:
                raise refusal
        try:
            scanned = self._store.scan(blob, allow_empty_body=False)
        except BatchError as exc:
            raise IllegalArgumentError(
                str(exc), reason=_BATCH_REASONS.get(exc.kind, "MESSAGE_ILLEGAL")
            ) from None
        if single and len(scanned) != 1:
            raise IllegalArgumentError(
                f"SendMessage carries one record; this request carries "
                f"{len(scanned)}; send them with SendBatch",
                reason="MESSAGE_ILLEGAL",
            )
        self._check_queues(scanned)
        if current_account.get() is not None:
            try:
                authorize_publish(set(scanned.topics))
            except AclError as exc:
                raise NoPermissionError(exc.message) from None
        if scanned.markers:
            _refuse_delayed_half_messages(scanned)
        # From the (last) check to the put nothing awaits: the two see one state.
        idempotence = self._idempotence
        if idempotence is not None and scanned.idem_runs:
            try:
                dups = idempotence.check(blob, scanned)
            except SequenceAhead as ahead:
                # sent ahead of earlier requests of its queue: wait (briefly) for them
                dups = await idempotence.after_predecessors(ahead, blob, scanned)
            if dups:
                return await self._send_rest(blob, scanned, dups, producer_group)
        # Each rewrite returns a new blob, or None when no record of it needed one.
        now_ms = self._clock.now_ms()
        rewritten = None
        if scanned.markers & MARK_DELAY:
            rewritten = rewrite_delayed(
                blob,
                scanned.positions,
                self._delay_levels,
                now_ms=now_ms,
                store_host=self._store_host,
            )
        if scanned.markers & MARK_TIMER or rewritten is not None:
            rewritten = (
                rewrite_timed(
                    rewritten or blob,
                    policy=self._timer,
                    now_ms=now_ms,
                    store_host=self._store_host,
                )
                or rewritten
            )
        # Last: the delay and timer rewrites leave prepared records alone, and a half
        # message waits in the half topic whatever delivery time it carries.
        rewritten = (
            rewrite_half_messages(
                rewritten or blob,
                scanned.sysflags,
                producer_group=producer_group,
                store_host=self._store_host,
            )
            or rewritten
        )
        result = (
            self._store.put_batch(blob, scanned=scanned)
            if rewritten is None
            else self._store.put_batch(rewritten)
        )
        if result.status is not PutStatus.PUT_OK:
            raise PutRejectedError(result.status, result.error or result.status.value)
        if scanned.idem_runs and idempotence is not None and idempotence.has_waiters:
            idempotence.wake(scanned)
        if self.trace is not None:
            self.trace.on_stored(scanned, result)
        status = _status_of(
            await wait_durable(result.flush_future, result.end_offset, self._replica_wait)
        )
        self._stats.on_put(scanned, started_s)
        return SendOutcome(
            status=status,
            store_timestamp_ms=result.store_timestamp_ms,
            msg_ids=result.uniq_keys,
            # as sent: a delayed record is stored under a system topic
            topics=scanned.topics,
            queue_ids=scanned.queue_ids,
            queue_offsets=result.queue_offsets,
            phys_offsets=result.phys_offsets,
            offset_msg_id_prefix=self._msg_id_prefix,
        )

    async def _send_rest(
        self,
        blob: bytes | bytearray | memoryview,
        scanned: ScannedBatch,
        dups: dict[int, DuplicateAnswer],
        producer_group: str,
    ) -> SendOutcome:
        """Store the records that are not retries; answer the retries as first stored."""
        fresh = [i for i in range(len(scanned)) if i not in dups]
        outcome = None
        if fresh:
            view = memoryview(blob)
            rest = b"".join(
                [
                    view[scanned.positions[i] : scanned.positions[i] + scanned.sizes[i]]
                    for i in fresh
                ]
            )
            outcome = await self.send(rest, producer_group=producer_group)
        at = {i: j for j, i in enumerate(fresh)}
        queue_offsets, phys_offsets = [], []
        stamp = 0
        for i in range(len(scanned)):
            dup = dups.get(i)
            if dup is not None:
                queue_offsets.append(dup.queue_offset)
                phys_offsets.append(dup.phys_offset)
                stamp = stamp or dup.store_timestamp_ms
            else:
                assert outcome is not None
                queue_offsets.append(outcome.queue_offsets[at[i]])
                phys_offsets.append(outcome.phys_offsets[at[i]])
        status = outcome.status if outcome is not None else SendStatus.SEND_OK
        # A retry is answered as its original would be now: on a SYNC_FLUSH store once it
        # is durable (its original may have timed out on the flush, or still wait for
        # it), on a SYNC_MASTER once the replicas hold it (an isolated master's tail is
        # not SEND_OK). An original whose place is no longer kept (-1) lies below the
        # log's end.
        ends = [d.end_phys_offset for d in dups.values()]
        end = self._store.log_end_offset() if min(ends) < 0 else max(ends)
        if status is SendStatus.SEND_OK:
            status = _status_of(
                await wait_durable(self._store.flush_request(end), end, self._replica_wait)
            )
        return SendOutcome(
            status=status,
            store_timestamp_ms=outcome.store_timestamp_ms if outcome is not None else stamp,
            msg_ids=list(scanned.uniq_keys),
            topics=list(scanned.topics),
            queue_ids=list(scanned.queue_ids),
            queue_offsets=queue_offsets,
            phys_offsets=phys_offsets,
            offset_msg_id_prefix=self._msg_id_prefix,
            duplicates=[i in dups for i in range(len(scanned))],
        )

    def _check_queues(self, scanned: ScannedBatch) -> None:
        """Topic permissions and queue ranges; creates unknown topics last.

        Checked per distinct topic and (topic, queue) pair, with no Python step
        per record; a batch that fails is checked again record by record, so the
        refusal names the first bad record.
        """
        topics, queue_ids = scanned.topics, scanned.queue_ids
        n = len(topics)
        to_create: list[str] = []
        # list.count compares by identity first: one topic or one queue (the usual
        # batch) is seen without hashing or comparing a value per record
        distinct = (topics[0],) if topics.count(topics[0]) == n else dict.fromkeys(topics)
        try:
            limits = {topic: self._write_queue_nums(topic, to_create) for topic in distinct}
        except BrokerError:
            limits = None
        if limits is not None:
            if len(limits) == 1:
                (limit,) = limits.values()
                first = queue_ids[0]
                if queue_ids.count(first) == n:
                    fits = 0 <= first < limit
                else:
                    fits = min(queue_ids) >= 0 and max(queue_ids) < limit
            else:
                fits = all(0 <= q < limits[t] for t, q in set(zip(topics, queue_ids, strict=True)))
            if fits:
                for topic in to_create:
                    self._topics.get_or_auto_create(topic)
                return
        self._check_queues_one_by_one(scanned)

    def _check_queues_one_by_one(self, scanned: ScannedBatch) -> None:
        to_create: list[str] = []
        queue_nums: dict[str, int] = {}
        for i, (topic, queue_id) in enumerate(zip(scanned.topics, scanned.queue_ids, strict=True)):
            limit = queue_nums.get(topic)
            if limit is None:
                limit = queue_nums[topic] = self._write_queue_nums(topic, to_create)
            if not 0 <= queue_id < limit:
                raise _illegal(
                    scanned.positions[i],
                    f"queue id {queue_id} is out of range; "
                    f"topic {topic!r} has {limit} write queues "
                    f"(0..{limit - 1})",
                    reason=QUEUE_OUT_OF_RANGE,
                )
        for topic in to_create:
            self._topics.get_or_auto_create(topic)

    def _write_queue_nums(self, topic: str, to_create: list[str]) -> int:
        config = self._check_topic(topic, to_create)
        return config.write_queue_nums if config is not None else self._auto_create_queue_nums()

    def _check_topic(self, topic: str, to_create: list[str]) -> BrokerTopicConfig | None:
        if topic in NOT_ALLOWED_SEND_TOPICS:
            raise NoPermissionError(
                f"topic {topic!r} is written by the broker only; producers may not send to it"
            )
        config = self._topics.get(topic)
        if config is None:
            if not self._topics.auto_create_enable:
                # Raises ResourceNotFoundError with how to create it.
                self._topics.get_or_auto_create(topic)
            to_create.append(topic)
            return None
        if not config.writable:
            raise NoPermissionError(
                f"topic {topic!r} is not writable on this broker "
                f"(perm {config.perm}); UpdateTopic with perm 6 to "
                "allow sends"
            )
        return config

    def _auto_create_queue_nums(self) -> int:
        template = self._topics.get(AUTO_CREATE_TOPIC_KEY_TOPIC)
        if template is None:
            raise ResourceNotFoundError(
                f"the auto-create template topic {AUTO_CREATE_TOPIC_KEY_TOPIC} "
                "is missing from topics.json",
                reason="TOPIC_NOT_EXIST",
            )
        return template.write_queue_nums
