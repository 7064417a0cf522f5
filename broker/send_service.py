"""SendMessageService: checks a send, creates topics on demand, stores, acknowledges.

RocketMQ's ``SendMessageProcessor`` for SEND_MESSAGE and SEND_BATCH_MESSAGE.
A send carries records already in the commit-log layout; one batch may feed
several topics and queues. Before anything reaches the store every record's
head is walked once (no CRC, no decode: the store checks those) and the
request is refused, whole, when a record

* is cut short or has lengths that disagree with its TOTALSIZE,
* names a topic that is malformed, reserved for the broker, not writable, or
  unknown while ``auto_create_topic_enable`` is off,
* names a queue id outside ``0 .. write_queue_nums - 1``,
* has an empty body or one above ``max_message_size_bytes``, or properties
  above 32767 bytes.

Only then are unknown topics created. A record whose ``DELAY`` property names
a delay level is moved to ``SCHEDULE_TOPIC_XXXX`` on the way
(:func:`~pocketmq.broker.delay_levels.rewrite_delayed`), and its
acknowledgement still names the topic and queue it was sent to. The blob goes
to the store, which stores it whole or not at all. With synchronous flush the acknowledgement
waits for the group commit; a flush that times out still stored the message
and is answered ``FLUSH_DISK_TIMEOUT``, as RocketMQ does.
"""

from __future__ import annotations

import asyncio
import enum
import struct
from dataclasses import dataclass, field

from pocketmq.broker.delay_levels import DelayLevels, rewrite_delayed
from pocketmq.broker.errors import (
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
    PutRejectedError,
)
from pocketmq.broker.store.api import MessageStore
from pocketmq.broker.store.results import PutStatus
from pocketmq.broker.topic_config import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    NOT_ALLOWED_SEND_TOPICS,
    TopicConfig,
    TopicConfigManager,
)
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.message import (
    HEAD,
    MAX_PROPERTIES_LENGTH,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    POS_BORNHOST,
    host_sizes,
)
from pocketmq.common.msgid import encode_offset_msg_id
from pocketmq.common.validation import check_topic

__all__ = ["SendMessageService", "SendOutcome", "SendStatus", "WalkedRecords", "walk_records"]

_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")
# RECONSUMETIMES i32 + PREPAREDTRANSACTIONOFFSET i64 lie between STOREHOST and BODYLEN.
_AFTER_STOREHOST = 4 + 8


class SendStatus(enum.Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"


@dataclass(frozen=True, slots=True, kw_only=True)
class SendOutcome:
    """What the producer learns; lists are parallel, one entry per record as sent.

    One flush covers the whole request, so ``status`` holds for every record.
    """

    status: SendStatus
    store_timestamp_ms: int
    msg_ids: list[str]          # UNIQ_KEY, made by the client ("" if none)
    offset_msg_ids: list[str]   # store host + port + commit-log offset
    topics: list[str]
    queue_ids: list[int]
    queue_offsets: list[int]

    def __len__(self) -> int:
        return len(self.msg_ids)


@dataclass(slots=True)
class WalkedRecords:
    """Per record of a request, in order: where it starts, its topic and queue id."""

    positions: list[int] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    queue_ids: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.positions)


def walk_records(blob: bytes | bytearray | memoryview, *,
                 max_body_bytes: int) -> WalkedRecords:
    """Walk the records' heads; raise InvalidRequestError naming the first bad one."""
    mv = memoryview(blob)
    end = len(mv)
    if end == 0:
        raise InvalidRequestError("the request holds no records", reason="MESSAGE_ILLEGAL")
    out = WalkedRecords()
    topic_names: dict[bytes, str] = {}   # raw topic -> checked name; topics are few
    pos = 0
    while pos < end:
        total, topic, queue_id = _walk_one(mv, pos, end, max_body_bytes, topic_names)
        out.positions.append(pos)
        out.topics.append(topic)
        out.queue_ids.append(queue_id)
        pos += total
    return out


def _walk_one(mv: memoryview, pos: int, end: int, max_body_bytes: int,
              topic_names: dict[bytes, str]) -> tuple[int, str, int]:
    """(TOTALSIZE, topic, queue id) of the record at *pos*, after checking its lengths."""
    if end - pos < HEAD.size:
        raise _illegal(pos, f"cut short: {end - pos} bytes left, a record head is {HEAD.size}")
    total, magic, _crc, queue_id, _flag, _qo, _po, sysflag, _born = HEAD.unpack_from(mv, pos)
    if magic != MESSAGE_MAGIC_CODE and magic != MESSAGE_MAGIC_CODE_V2:
        raise _illegal(pos, f"magic code is 0x{magic:08X}; expected 0x{MESSAGE_MAGIC_CODE:08X}")
    if total < HEAD.size or total > end - pos:
        raise _illegal(pos, f"TOTALSIZE is {total} but {end - pos} bytes are left")
    record_end = pos + total
    born_size, store_size = host_sizes(sysflag)
    p = pos + POS_BORNHOST + born_size + 8 + store_size + _AFTER_STOREHOST
    if p + 4 > record_end:
        raise _illegal(pos, f"TOTALSIZE {total} is smaller than the fixed fields")
    body_len = _I32.unpack_from(mv, p)[0]
    p += 4 + body_len
    if body_len < 0 or p > record_end:
        raise _illegal(pos, f"BODYLEN {body_len} does not fit TOTALSIZE {total}")
    if body_len == 0:
        raise _illegal(pos, "message body is empty; a message needs a body")
    if body_len > max_body_bytes:
        raise _illegal(pos, f"message body is {body_len} bytes; this broker accepts at most "
                            f"{max_body_bytes} (max_message_size)", "MESSAGE_BODY_TOO_LARGE")
    if magic == MESSAGE_MAGIC_CODE:
        topic_len = mv[p] if p < record_end else -1
        p += 1
    else:
        topic_len = _U16.unpack_from(mv, p)[0] if p + 2 <= record_end else -1
        p += 2
    if topic_len < 0 or p + topic_len + 2 > record_end:
        raise _illegal(pos, f"topic length {topic_len} does not fit TOTALSIZE {total}")
    raw_topic = bytes(mv[p:p + topic_len])
    topic = topic_names.get(raw_topic)
    if topic is None:
        topic = topic_names[raw_topic] = _decode_topic(raw_topic, pos)
    p += topic_len
    props_len = _U16.unpack_from(mv, p)[0]
    if props_len > MAX_PROPERTIES_LENGTH:
        raise _illegal(pos, f"properties are {props_len} bytes; at most "
                            f"{MAX_PROPERTIES_LENGTH} are allowed", "PROPERTIES_SIZE_EXCEEDED")
    if p + 2 + props_len != record_end:
        raise _illegal(pos, f"TOTALSIZE is {total} but the parts add up to "
                            f"{p + 2 + props_len - pos}")
    return total, topic, queue_id


def _illegal(pos: int, what: str, reason: str = "MESSAGE_ILLEGAL") -> InvalidRequestError:
    return InvalidRequestError(f"record at batch offset {pos}: {what}", reason=reason)


def _decode_topic(raw: bytes, pos: int) -> str:
    try:
        topic = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _illegal(pos, f"topic {raw!r} is not valid UTF-8") from None
    problem = check_topic(topic)
    if problem:
        raise _illegal(pos, problem)
    return topic


class SendMessageService:
    def __init__(self, store: MessageStore, topics: TopicConfigManager, *,
                 store_host: tuple[str, int], max_body_bytes: int,
                 delay_levels: DelayLevels | None = None, clock: Clock | None = None) -> None:
        self._store = store
        self._topics = topics
        self._max_body_bytes = max_body_bytes
        self._store_host = store_host
        self._delay_levels = delay_levels or DelayLevels.parse()
        self._clock = clock or SystemClock()
        # Every offset msg id of this broker starts with the same IP and port.
        self._msg_id_prefix = encode_offset_msg_id(store_host[0], store_host[1], 0)[:-16]

    async def send(self, blob: bytes | bytearray | memoryview, *,
                   single: bool = False) -> SendOutcome:
        """Store the records of *blob* and say where each went.

        *single* refuses a blob of more than one record (SEND_MESSAGE).
        """
        walked = walk_records(blob, max_body_bytes=self._max_body_bytes)
        if single and len(walked) != 1:
            raise InvalidRequestError(f"SendMessage carries one record; this request carries "
                                      f"{len(walked)}; send them with SendBatch",
                                      reason="MESSAGE_ILLEGAL")
        self._check_queues(walked)
        delayed = rewrite_delayed(blob, walked.positions, self._delay_levels,
                                  now_ms=self._clock.now_ms(), store_host=self._store_host)
        result = self._store.put_batch(blob if delayed is None else delayed)
        if result.status is not PutStatus.PUT_OK:
            raise PutRejectedError(result.status, result.error or result.status.value)
        status = SendStatus.SEND_OK
        if result.flush_future is not None:
            flushed = await asyncio.wrap_future(result.flush_future)
            if flushed is not PutStatus.PUT_OK:
                status = SendStatus.FLUSH_DISK_TIMEOUT
        prefix = self._msg_id_prefix
        return SendOutcome(status=status, store_timestamp_ms=result.store_timestamp_ms,
                           msg_ids=result.uniq_keys,
                           offset_msg_ids=[f"{prefix}{phys:016X}" for phys in result.phys_offsets],
                           # as sent: a delayed record is stored under the schedule topic
                           topics=walked.topics, queue_ids=walked.queue_ids,
                           queue_offsets=result.queue_offsets)

    def _check_queues(self, walked: WalkedRecords) -> None:
        """Topic permissions and queue ranges; creates unknown topics last."""
        to_create: list[str] = []
        queue_nums: dict[str, int] = {}
        for i, (topic, queue_id) in enumerate(zip(walked.topics, walked.queue_ids, strict=True)):
            limit = queue_nums.get(topic)
            if limit is None:
                limit = queue_nums[topic] = self._write_queue_nums(topic, to_create)
            if not 0 <= queue_id < limit:
                raise _illegal(walked.positions[i], f"queue id {queue_id} is out of range; "
                                                    f"topic {topic!r} has {limit} write queues "
                                                    f"(0..{limit - 1})")
        for topic in to_create:
            self._topics.get_or_auto_create(topic)

    def _write_queue_nums(self, topic: str, to_create: list[str]) -> int:
        config = self._check_topic(topic, to_create)
        return config.write_queue_nums if config is not None else self._auto_create_queue_nums()

    def _check_topic(self, topic: str, to_create: list[str]) -> TopicConfig | None:
        if topic in NOT_ALLOWED_SEND_TOPICS:
            raise PermissionDeniedError(f"topic {topic!r} is written by the broker only; "
                                        "producers may not send to it")
        config = self._topics.get(topic)
        if config is None:
            if not self._topics.auto_create_enable:
                # Raises NotFoundError with how to create it.
                self._topics.get_or_auto_create(topic)
            to_create.append(topic)
            return None
        if not config.writable:
            raise PermissionDeniedError(f"topic {topic!r} is not writable on this broker "
                                        f"(perm {config.perm}); UpdateTopic with perm 6 to "
                                        "allow sends")
        return config

    def _auto_create_queue_nums(self) -> int:
        template = self._topics.get(AUTO_CREATE_TOPIC_KEY_TOPIC)
        if template is None:
            raise NotFoundError(f"the auto-create template topic {AUTO_CREATE_TOPIC_KEY_TOPIC} "
                                "is missing from topics.json",
                                reason="TOPIC_NOT_EXIST")
        return template.write_queue_nums
