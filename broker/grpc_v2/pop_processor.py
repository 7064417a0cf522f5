"""PopMessageProcessor: RocketMQ 5's POP consumption over a broker's queues.

What ``ReceiveMessage``, ``AckMessage``, ``ChangeInvisibleDuration`` and
``ForwardMessageToDeadLetterQueue`` do, without protobuf (the servicer
translates). A consumer group *pops* messages instead of tracking offsets:

* A receive takes up to ``batch`` messages of a topic from this broker's read
  queues, starting at a different queue each time: first messages whose
  invisible time has passed (delivered again, ``attempt`` + 1), then messages
  never delivered, filtered by the request's tag expression (a message that
  does not match is skipped for the group, as RocketMQ does). Each is
  invisible to the group for the request's invisible time and named by a
  receipt handle. An empty receive waits (long polling) until a message
  arrives in the topic, an invisible time runs out, or its poll time ends.
* An ack with the current handle ends the message for the group; acking twice
  is fine; a handle outdated by a later delivery or change of invisible time
  is refused (``INVALID_RECEIPT_HANDLE``).
* A change of invisible time gives the message a new deadline and a new
  handle (the old one stops working); a nack is a change to a short time.
* A message whose invisible time runs out after ``max_delivery_attempts``
  deliveries goes to ``%DLQ%{group}`` (:class:`~pocketmq.broker.send_back.SendBackProcessor`)
  instead of being delivered again; ForwardMessageToDeadLetterQueue does the
  same at once.

FIFO: in a topic whose config says ``order`` (RocketMQ 5's FIFO topic), a
queue serves a group one message group at a time: a receive takes only
consecutive messages of one message group from a queue, and the queue gives
the group nothing more until every message taken is acked or dead-lettered
(or, after the invisible time, it gives the same ones again, in order).
Producers put a message group in one queue, so its order holds under any
number of concurrent consumers.

Every state change goes through :class:`~.pop_journal.PopJournal` and is on
disk before it is answered. The consumer offset of each queue (the first
message not yet done with) is also committed to the
:class:`~pocketmq.broker.consumer_offsets.ConsumerOffsetManager`, so progress
shows as for any group, and a group new to POP starts where its offset is,
else at the queue's first retained message.

Receipt handle: ``"{queue id} {queue offset} {serial} {broker name}"``; it and the
other values of POP live in :mod:`.pop_model` (re-exported here).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from pocketmq.broker.consumer_offsets import ConsumerOffsetManager
from pocketmq.broker.errors import (
    IllegalArgumentError,
    NotDurableError,
    ResourceNotFoundError,
    SystemBusyError,
)
from pocketmq.broker.grpc_v2.pop_journal import (
    InFlight,
    PopJournal,
    QueueKey,
    QueueState,
    encode_delta,
)
from pocketmq.broker.grpc_v2.pop_model import (
    INVALID_HANDLE,
    PROPERTY_MESSAGE_GROUP,
    Delivery,
    ReceiptHandle,
    ReceiveRequest,
    Selector,
    message_group,
)
from pocketmq.broker.property_filter import CHUNK_UNITS, FilterCompiler, scan_units
from pocketmq.broker.pull_processor import subscription_tags
from pocketmq.broker.send_back import SendBackProcessor
from pocketmq.broker.store.api import MessageStore
from pocketmq.broker.store.results import GetStatus
from pocketmq.broker.topic_config import TopicConfigManager
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.filter import SqlFilter
from pocketmq.common.hashing import tags_code
from pocketmq.common.message import StoredMessage, decode_record
from pocketmq.common.validation import check_group, check_topic

__all__ = [
    "PROPERTY_MESSAGE_GROUP",
    "Delivery",
    "PopMessageProcessor",
    "ReceiptHandle",
    "ReceiveRequest",
    "Selector",
    "message_group",
]

log = logging.getLogger(__name__)

# Statuses after which a read's next_begin_offset is where the queue goes on.
_MOVE_ON = frozenset(
    {
        GetStatus.FOUND,
        GetStatus.NO_MATCHED_MESSAGE,
        GetStatus.MESSAGE_WAS_REMOVING,
        GetStatus.OFFSET_FOUND_NULL,
        GetStatus.OFFSET_TOO_SMALL,
        GetStatus.OFFSET_OVERFLOW_BADLY,
    }
)


@dataclass(slots=True)
class _Pick:
    offset: int
    attempt: int
    message: StoredMessage


class PopMessageProcessor:
    """POP state of every group on this broker. Event-loop thread only."""

    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        send_back: SendBackProcessor,
        journal: PopJournal,
        *,
        broker_name: str,
        max_delivery_attempts: int = 17,
        max_batch_bytes: int = 256 * 1024,
        max_waiting: int = 10_000,
        clock: Clock | None = None,
        filters: FilterCompiler | None = None,
    ) -> None:
        self._store = store
        self._filters = filters or FilterCompiler()
        self._topics = topics
        self._offsets = offsets
        self._send_back = send_back
        self._journal = journal
        self._broker_name = broker_name
        self.max_delivery_attempts = max_delivery_attempts
        self._max_batch_bytes = max_batch_bytes
        self._max_waiting = max_waiting
        self._clock = clock or SystemClock()
        self._states: dict[QueueKey, QueueState] = {}
        self._by_topic: dict[tuple[str, str], dict[int, QueueState]] = {}  # (group, topic)
        self._serial = 0
        self._turn: dict[tuple[str, str], int] = {}
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._waiting = 0
        self._moving: set[tuple[QueueKey, int]] = set()  # being dead-lettered now
        self._stopping = False

    # -- lifecycle ----------------------------------------------------------------------
    def load(self) -> None:
        self._states, self._serial = self._journal.load()
        for (group, topic, queue_id), state in self._states.items():
            self._by_topic.setdefault((group, topic), {})[queue_id] = state

    def release_waiting(self) -> None:
        """Answer waiting receives now and wait no more (the broker is stopping)."""
        self._stopping = True
        for topic in list(self._waiters):
            self._wake(topic)

    def stop(self) -> None:
        """Compact and close the journal; call once no receive or ack runs."""
        self.release_waiting()
        try:
            self._journal.compact(self._states)
        except OSError as exc:
            log.error(
                "cannot compact %s at shutdown: %s; it is replayed as is at start",
                self._journal.path,
                exc,
            )
        self._journal.close()

    def on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Store arrival listener: wake receives waiting on *topic*."""
        if topic in self._waiters:
            self._wake(topic)

    # -- receive ------------------------------------------------------------------------
    async def receive(self, request: ReceiveRequest) -> list[Delivery]:
        tags = self._check(
            request.group, request.topic, request.expression, request.expression_type
        )
        codes = (
            None
            if tags is None or isinstance(tags, SqlFilter)
            else frozenset(tags_code(t) for t in tags)
        )
        deadline_s = self._clock.monotonic() + request.poll_ms / 1000
        while True:
            await self._dead_letter_exhausted(request.group, request.topic)
            deliveries = self._pop(request, tags, codes)
            if deliveries:
                await self._journal.sync()
                self._maybe_compact()
                return deliveries
            remaining_s = deadline_s - self._clock.monotonic()
            if remaining_s <= 0 or self._stopping:
                return []
            due_ms = self._next_deadline_ms(request.group, request.topic)
            if due_ms is not None:
                remaining_s = min(remaining_s, max(due_ms - self._clock.now_ms(), 1) / 1000)
            await self._wait(request.topic, remaining_s)

    def _check(self, group: str, topic: str, expression: str, expression_type: str) -> Selector:
        for problem in (check_group(group), check_topic(topic)):
            if problem:
                raise IllegalArgumentError(problem)
        if self._topics.get(topic) is None and not self._topics.auto_create_enable:
            raise ResourceNotFoundError(
                f"topic {topic!r} does not exist on this broker; create it first",
                reason="TOPIC_NOT_EXIST",
            )
        return self._filters.compile(expression_type, expression) or subscription_tags(expression)

    def _pop(
        self, request: ReceiveRequest, tags: Selector, codes: frozenset[int] | None
    ) -> list[Delivery]:
        config = self._topics.get(request.topic)
        if config is None or not config.readable or config.read_queue_nums <= 0:
            return []
        turn_key = (request.group, request.topic)
        start = self._turn.get(turn_key, 0)
        self._turn[turn_key] = start + 1
        now = self._clock.now_ms()
        out: list[Delivery] = []
        for i in range(config.read_queue_nums):
            if len(out) >= request.batch_size:
                break
            key = (request.group, request.topic, (start + i) % config.read_queue_nums)
            out.extend(
                self._pop_queue(
                    key,
                    tags,
                    codes,
                    request.batch_size - len(out),
                    request.invisible_ms,
                    now,
                    fifo=config.order,
                )
            )
        return out

    def _pop_queue(
        self,
        key: QueueKey,
        tags: Selector,
        codes: frozenset[int] | None,
        limit: int,
        invisible_ms: int,
        now: int,
        *,
        fifo: bool,
    ) -> list[Delivery]:
        state = self._state(key)
        if fifo and any(e.deadline_ms > now for e in state.in_flight.values()):
            return []  # the queue is busy for the group
        picks: list[_Pick] = []
        removes: list[int] = []
        blocked = self._take_redeliveries(key, state, tags, limit, now, fifo, picks, removes)
        next_offset = state.next_offset
        if not blocked and len(picks) < limit:
            next_offset = self._take_new(key, state, codes, tags, limit, fifo, picks)
        if not picks and not removes and next_offset == state.next_offset:
            return []
        deliveries, upserts = [], []
        for pick in picks:
            self._serial += 1
            entry = InFlight(pick.attempt, self._serial, now + invisible_ms)
            state.in_flight[pick.offset] = entry
            upserts.append((pick.offset, entry))
            handle = ReceiptHandle(key[2], pick.offset, entry.serial, self._broker_name)
            deliveries.append(
                Delivery(
                    message=pick.message,
                    receipt_handle=handle.encode(),
                    attempt=pick.attempt,
                    invisible_ms=invisible_ms,
                )
            )
        for offset in removes:
            state.in_flight.pop(offset, None)
        state.next_offset = next_offset
        self._record(
            key, state, encode_delta(key, next_offset=next_offset, upserts=upserts, removes=removes)
        )
        return deliveries

    def _take_redeliveries(
        self,
        key: QueueKey,
        state: QueueState,
        tags: Selector,
        limit: int,
        now: int,
        fifo: bool,
        picks: list[_Pick],
        removes: list[int],
    ) -> bool:
        """Pick messages whose invisible time ran out; True if FIFO must stop here."""
        for offset in sorted(o for o, e in state.in_flight.items() if e.deadline_ms <= now):
            if len(picks) >= limit:
                return True
            entry = state.in_flight[offset]
            if (key, offset) in self._moving or entry.attempt >= self.max_delivery_attempts:
                if fifo:
                    return True  # its dead-lettering comes first
                continue
            msg = self._read(key, offset)
            if msg is None or not _matches(msg, tags):
                removes.append(offset)  # gone by retention, or no longer subscribed
                continue
            if fifo and picks and message_group(msg) != message_group(picks[0].message):
                return True
            picks.append(_Pick(offset, entry.attempt + 1, msg))
        return False

    def _take_new(
        self,
        key: QueueKey,
        state: QueueState,
        codes: frozenset[int] | None,
        tags: Selector,
        limit: int,
        fifo: bool,
        picks: list[_Pick],
    ) -> int:
        """Pick messages never delivered; returns the queue's new next offset."""
        _, topic, queue_id = key
        next_offset = state.next_offset
        # SQL92: read on past what does not match, up to a bound (tags: the store does)
        budget = scan_units(limit) if isinstance(tags, SqlFilter) else 0
        while True:
            want = limit - len(picks)
            result = self._store.get_messages(
                topic,
                queue_id,
                next_offset,
                max_count=min(CHUNK_UNITS, budget) if budget else want,
                max_bytes=self._max_batch_bytes,
                tag_codes=codes,
            )
            if result.status not in _MOVE_ON:
                return next_offset
            for raw, offset in zip(result.records, result.queue_offsets, strict=True):
                if len(picks) >= limit:
                    return offset
                msg = _decode(raw, key, offset)
                if msg is not None and _matches(msg, tags):
                    if fifo and picks and message_group(msg) != message_group(picks[0].message):
                        return offset
                    picks.append(_Pick(offset, 1, msg))
            if (
                not budget
                or len(picks) >= limit
                or result.next_begin_offset <= next_offset
                or result.next_begin_offset >= result.max_offset
                or result.next_begin_offset - state.next_offset >= budget
            ):
                return result.next_begin_offset
            next_offset = result.next_begin_offset

    def _read(self, key: QueueKey, offset: int) -> StoredMessage | None:
        _, topic, queue_id = key
        result = self._store.get_messages(topic, queue_id, offset, max_count=1)
        if result.status is not GetStatus.FOUND or result.queue_offsets[0] != offset:
            return None
        return _decode(result.records[0], key, offset)

    # -- ack, change, dead letters ------------------------------------------------------
    def _in_flight(
        self,
        group: str,
        topic: str,
        receipt_handle: str,
    ) -> tuple[QueueKey, QueueState, ReceiptHandle, InFlight | None]:
        """The entry a handle names; None when the message is already done with."""
        for problem in (check_group(group), check_topic(topic)):
            if problem:
                raise IllegalArgumentError(problem)
        handle = ReceiptHandle.decode(receipt_handle)
        if handle.broker_name != self._broker_name:
            raise IllegalArgumentError(
                f"receipt handle was issued by broker "
                f"{handle.broker_name!r}, not {self._broker_name!r}; "
                "send it to the broker the message came from",
                reason=INVALID_HANDLE,
            )
        key = (group, topic, handle.queue_id)
        state = self._states.get(key)
        entry = state.in_flight.get(handle.queue_offset) if state is not None else None
        if state is None or (entry is None and handle.queue_offset >= state.next_offset):
            raise IllegalArgumentError(
                f"group {group!r} was never given message "
                f"{topic}:{handle.queue_id}:{handle.queue_offset}; check "
                "the group and topic of the request",
                reason=INVALID_HANDLE,
            )
        if entry is not None and entry.serial != handle.serial:
            raise IllegalArgumentError(
                f"receipt handle of {topic}:{handle.queue_id}:{handle.queue_offset} is "
                f"outdated: the message was delivered again or its invisible time changed "
                f"since (delivery {handle.serial}, now {entry.serial}); use the newest handle",
                reason=INVALID_HANDLE,
            )
        return key, state, handle, entry

    def delivered(
        self, *, group: str, topic: str, receipt_handle: str
    ) -> tuple[StoredMessage, int] | None:
        """The message a current handle names and its delivery attempt, changing nothing
        (for its trace); None for a handle ack would refuse or a message done with."""
        try:
            key, _, handle, entry = self._in_flight(group, topic, receipt_handle)
        except IllegalArgumentError:
            return None
        msg = self._read(key, handle.queue_offset) if entry is not None else None
        return None if msg is None or entry is None else (msg, entry.attempt)

    async def ack(self, *, group: str, topic: str, receipt_handle: str) -> bool:
        """End the message for the group; False when it already was (acked twice)."""
        key, state, handle, entry = self._in_flight(group, topic, receipt_handle)
        if entry is None:
            return False
        self._remove(key, state, handle.queue_offset)
        await self._journal.sync()
        return True

    async def change_invisible_duration(
        self, *, group: str, topic: str, receipt_handle: str, invisible_ms: int
    ) -> str:
        """Hide the message for *invisible_ms* from now on; returns its new handle."""
        key, state, handle, entry = self._in_flight(group, topic, receipt_handle)
        if entry is None:
            raise IllegalArgumentError(
                f"message {topic}:{handle.queue_id}:{handle.queue_offset} was already acked",
                reason=INVALID_HANDLE,
            )
        self._serial += 1
        entry = InFlight(entry.attempt, self._serial, self._clock.now_ms() + invisible_ms)
        state.in_flight[handle.queue_offset] = entry
        self._record(key, state, encode_delta(key, upserts=[(handle.queue_offset, entry)]))
        self._wake(topic)  # waiting receives re-plan for the new deadline
        await self._journal.sync()
        return handle._replace(serial=entry.serial).encode()

    async def forward_to_dead_letter_queue(
        self, *, group: str, topic: str, receipt_handle: str
    ) -> None:
        key, _, handle, entry = self._in_flight(group, topic, receipt_handle)
        if entry is not None:
            await self._dead_letter(key, handle.queue_offset, entry)

    async def _dead_letter_exhausted(self, group: str, topic: str) -> None:
        now = self._clock.now_ms()
        for queue_id, state in list(self._by_topic.get((group, topic), {}).items()):
            for offset, entry in sorted(state.in_flight.items()):
                key = (group, topic, queue_id)
                if (
                    entry.deadline_ms <= now
                    and entry.attempt >= self.max_delivery_attempts
                    and (key, offset) not in self._moving
                ):
                    await self._dead_letter(key, offset, entry)

    async def _dead_letter(self, key: QueueKey, offset: int, entry: InFlight) -> None:
        """Store the message in %DLQ%{group}, then end it for the group. A copy stored
        here but not yet flushed or replicated as the broker's role asks ends it too:
        moving it again would store another copy at each receive, and a dead letter is
        the end of its delivery anyway (logged)."""
        group, topic, _ = key
        self._moving.add((key, offset))
        try:
            msg = self._read(key, offset)
            if msg is not None:
                try:
                    await self._send_back.send_back(
                        group=group,
                        phys_offset=msg.phys_offset,
                        delay_level=-1,
                        origin_topic=topic,
                        origin_msg_id=msg.uniq_key,
                        max_reconsume_times=self.max_delivery_attempts - 1,
                    )
                except NotDurableError as exc:
                    log.warning(
                        "the dead-letter copy of message %s (%s:%d:%d) is stored but not "
                        "durable yet (%s); it is ended for group %s all the same",
                        msg.uniq_key or "?",
                        topic,
                        key[2],
                        offset,
                        exc.reason,
                        group,
                    )
                log.info(
                    "message %s (%s:%d:%d) of group %s -> %%DLQ%%%s after %d deliveries",
                    msg.uniq_key or "?",
                    topic,
                    key[2],
                    offset,
                    group,
                    group,
                    entry.attempt,
                )
        finally:
            self._moving.discard((key, offset))
        state = self._states.get(key)
        if state is not None and state.in_flight.get(offset) is entry:
            self._remove(key, state, offset)
            await self._journal.sync()

    def _remove(self, key: QueueKey, state: QueueState, offset: int) -> None:
        del state.in_flight[offset]
        self._record(key, state, encode_delta(key, removes=[offset]))
        self._wake(key[1])  # a FIFO queue may be free again

    # -- state --------------------------------------------------------------------------
    def _state(self, key: QueueKey) -> QueueState:
        state = self._states.get(key)
        if state is None:
            group, topic, queue_id = key
            committed = self._offsets.query(group, topic, queue_id)
            start = committed if committed is not None else self._store.min_offset(topic, queue_id)
            state = self._states[key] = QueueState(next_offset=start)
            self._by_topic.setdefault((group, topic), {})[queue_id] = state
        return state

    def _record(self, key: QueueKey, state: QueueState, record: bytes) -> None:
        self._journal.append(record)
        self._offsets.commit(key[0], key[1], key[2], state.commit_offset())

    def _maybe_compact(self) -> None:
        if self._journal.needs_compaction:
            self._journal.compact(self._states)

    def _next_deadline_ms(self, group: str, topic: str) -> int | None:
        deadlines = [
            e.deadline_ms
            for s in self._by_topic.get((group, topic), {}).values()
            for e in s.in_flight.values()
        ]
        return min(deadlines) if deadlines else None

    def in_flight_count(self, group: str, topic: str) -> int:
        return sum(len(s.in_flight) for s in self._by_topic.get((group, topic), {}).values())

    # -- waiting ------------------------------------------------------------------------
    async def _wait(self, topic: str, timeout_s: float) -> None:
        if self._waiting >= self._max_waiting:
            raise SystemBusyError(
                f"{self._waiting} receives already wait for messages on this "
                f"broker (max_parked_pulls = {self._max_waiting}); retry later"
            )
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiters.setdefault(topic, set())
        waiters.add(future)
        self._waiting += 1
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await future
        finally:
            self._waiting -= 1
            waiters.discard(future)
            if not waiters and self._waiters.get(topic) is waiters:
                del self._waiters[topic]

    def _wake(self, topic: str) -> None:
        for future in self._waiters.get(topic, ()):
            if not future.done():
                future.set_result(None)


def _matches(msg: StoredMessage, tags: Selector) -> bool:
    if isinstance(tags, SqlFilter):
        return tags.matches(msg.properties)
    return tags is None or msg.tags in tags


def _decode(raw: bytes, key: QueueKey, offset: int) -> StoredMessage | None:
    try:
        return decode_record(raw, check_crc=False)
    except CorruptRecordError as exc:
        log.error(
            "skipping the damaged message at %s:%d:%d for group %s: %s",
            key[1],
            key[2],
            offset,
            key[0],
            exc,
        )
        return None
