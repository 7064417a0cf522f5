"""Messages to and from the commit-log record layout (:mod:`pocketmq.common.message`).

Sending: :func:`check_message` refuses what the broker would refuse (topic
name, empty or oversized body, properties too long), then
:func:`encode_message` builds one record with the properties the client owns
(``TAGS``, ``KEYS`` space-joined, ``UNIQ_KEY``, ``DELAY``), BORNHOST and
BORNTIMESTAMP, STOREHOST left as 8 zero bytes for the broker to patch, and the
body zlib-compressed (SYSFLAG ``COMPRESSED``) when it is larger than the
threshold (4 KiB) and compression pays.

Receiving: :func:`decode_messages` walks a pull reply (records back to back)
once, straight from the buffer into :class:`MessageExt` values, without an
intermediate object per record. A message redelivered from a group's retry
topic gets back the topic its producer sent it to (property ``RETRY_TOPIC``).
"""

from __future__ import annotations

import struct
import zlib
from functools import lru_cache

from pocketmq.client.errors import InvalidMessageError
from pocketmq.client.model import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    RETRY_GROUP_TOPIC_PREFIX,
    SYSTEM_PROPERTIES,
    Message,
    MessageExt,
)
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.message import (
    BLANK_MAGIC_CODE,
    HEAD,
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH_V1,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    SysFlag,
    decode_properties,
    encode_record,
)
from pocketmq.common.validation import check_topic

__all__ = [
    "COMPRESS_OVER_BYTES",
    "DEFAULT_MAX_BODY_BYTES",
    "check_message",
    "decode_messages",
    "encode_message",
    "message_properties",
]

COMPRESS_OVER_BYTES = 4 * 1024          # compressMsgBodyOverHowmuch
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024  # maxMessageSize
ZLIB_LEVEL = 5                          # RocketMQ's default zlib level
MAX_DELAY_LEVEL = 18
STORE_HOST_PLACEHOLDER = b"\0" * 8      # IPv4 STOREHOST, patched by the broker

_I64 = struct.Struct(">q")
_TAIL = struct.Struct(">iqi")  # RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET, BODYLEN
_U16 = struct.Struct(">H")
_HEAD_UNPACK = HEAD.unpack_from
_HEAD_SIZE = HEAD.size


@lru_cache(maxsize=4096)
def _topic_problem(topic: str) -> str | None:
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return (f"topic {topic!r} is a consumer group's retry topic; producers send to "
                "ordinary topics")
    return check_topic(topic)


def check_message(msg: Message, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
    """Raise :class:`InvalidMessageError` naming what the broker would refuse."""
    problem = _topic_problem(msg.topic)
    if problem:
        raise InvalidMessageError(problem)
    if not isinstance(msg.body, bytes | bytearray | memoryview):
        raise InvalidMessageError(f"message body must be bytes, got {type(msg.body).__name__}")
    size = len(msg.body)
    if size == 0:
        raise InvalidMessageError("message body is empty; a message needs a body")
    if size > max_body_bytes:
        raise InvalidMessageError(f"message body is {size} bytes; the limit is "
                                  f"{max_body_bytes} (max_message_size_bytes)")
    if not 0 <= msg.delay_level <= MAX_DELAY_LEVEL:
        raise InvalidMessageError(f"delay_level is {msg.delay_level}; give 0 (none) or "
                                  f"1..{MAX_DELAY_LEVEL}")
    for key in msg.keys:
        if not key or " " in key:
            raise InvalidMessageError(f"message key {key!r} is empty or contains a space; "
                                      "keys are space-joined on the wire")
    for name, value in msg.properties.items():
        bad = next((c for c in f"{name}{value}" if c in "\x01\x02"), None)
        if bad is not None or not name or not value:
            raise InvalidMessageError(f"property {name!r}={value!r} is empty or contains a "
                                      "\\x01/\\x02 separator")
        if name in SYSTEM_PROPERTIES:
            raise InvalidMessageError(f"property {name!r} is set by the client; use "
                                      "Message.tags / Message.keys")


def message_properties(msg: Message, uniq_key: str) -> str:
    """The properties string of *msg*: user properties, then the client's own."""
    parts = [f"{k}\x01{v}\x02" for k, v in msg.properties.items()]
    if msg.tags:
        parts.append(f"{PROPERTY_TAGS}\x01{msg.tags}\x02")
    if msg.keys:
        parts.append(f"{PROPERTY_KEYS}\x01{' '.join(msg.keys)}\x02")
    if msg.delay_level:
        parts.append(f"{PROPERTY_DELAY}\x01{msg.delay_level}\x02")
    parts.append(f"{PROPERTY_UNIQ_KEY}\x01{uniq_key}\x02")
    return "".join(parts)


def encode_message(msg: Message, *, queue_id: int, uniq_key: str, born_host: bytes,
                   born_timestamp_ms: int, compress_over_bytes: int = COMPRESS_OVER_BYTES,
                   reconsume_times: int = 0) -> bytes:
    """One record for *msg* in queue *queue_id*; call :func:`check_message` first."""
    body = bytes(msg.body)
    sysflag = 0
    if len(body) > compress_over_bytes:
        packed = zlib.compress(body, ZLIB_LEVEL)
        if len(packed) < len(body):
            body, sysflag = packed, SysFlag.COMPRESSED
    properties = message_properties(msg, uniq_key)
    if len(msg.topic.encode()) > MAX_TOPIC_LENGTH_V1:
        raise InvalidMessageError(f"topic is {len(msg.topic.encode())} bytes; at most "
                                  f"{MAX_TOPIC_LENGTH_V1} fit a record")
    props_len = len(properties.encode())
    if props_len > MAX_PROPERTIES_LENGTH:
        raise InvalidMessageError(f"properties are {props_len} bytes; at most "
                                  f"{MAX_PROPERTIES_LENGTH} fit a record")
    return encode_record(topic=msg.topic, body=body, queue_id=queue_id, flag=msg.flag,
                         properties=properties, sysflag=sysflag,
                         born_timestamp_ms=born_timestamp_ms, born_host=born_host,
                         store_host=STORE_HOST_PLACEHOLDER, reconsume_times=reconsume_times)


def set_queue_id(record: bytes, queue_id: int) -> bytes:
    """The same record aimed at another queue (a retry picks a new queue)."""
    return record[:12] + queue_id.to_bytes(4, "big", signed=True) + record[16:]


def decode_messages(buf: bytes | memoryview, broker_name: str, *,
                    check_crc: bool = False) -> list[MessageExt]:
    """Decode a pull reply into messages; BLANK records are skipped.

    Raises :class:`CorruptRecordError` naming the offset of a damaged record.
    """
    raw = bytes(buf)
    out: list[MessageExt] = []
    topics: dict[bytes, str] = {}
    pos, end = 0, len(raw)
    while pos < end:
        if end - pos < _HEAD_SIZE:
            raise CorruptRecordError(pos, f"{end - pos} bytes left; a record head is "
                                          f"{_HEAD_SIZE}")
        (total, magic, crc, queue_id, flag, queue_offset, phys_offset, sysflag,
         born_ts) = _HEAD_UNPACK(raw, pos)
        if magic == BLANK_MAGIC_CODE and total > 0:
            pos += total
            continue
        if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
            raise CorruptRecordError(pos, f"magic code is 0x{magic:08X}")
        if total < _HEAD_SIZE or pos + total > end:
            raise CorruptRecordError(pos, f"TOTALSIZE is {total}; {end - pos} bytes are left")
        out.append(_decode_one(raw, pos, total, magic, crc, queue_id, flag, queue_offset,
                               phys_offset, sysflag, born_ts, broker_name, topics, check_crc))
        pos += total
    return out


def _decode_one(raw: bytes, pos: int, total: int, magic: int, crc: int, queue_id: int, flag: int,
                queue_offset: int, phys_offset: int, sysflag: int, born_ts: int,
                broker_name: str, topics: dict[bytes, str], check_crc: bool) -> MessageExt:
    p = pos + _HEAD_SIZE + (20 if sysflag & SysFlag.BORNHOST_V6 else 8)
    store_ts = _I64.unpack_from(raw, p)[0]
    p += 8
    store_size = 20 if sysflag & SysFlag.STOREHOST_V6 else 8
    store_host = raw[p:p + store_size]
    p += store_size
    reconsume, _prepared, body_len = _TAIL.unpack_from(raw, p)
    p += 12 + 4
    record_end = pos + total
    if body_len < 0 or p + body_len > record_end:
        raise CorruptRecordError(pos, f"BODYLEN {body_len} does not fit TOTALSIZE {total}")
    body = raw[p:p + body_len]
    if check_crc and zlib.crc32(body) & 0x7FFFFFFF != crc:
        raise CorruptRecordError(pos, "body CRC mismatch")
    p += body_len
    if sysflag & SysFlag.COMPRESSED:
        try:
            body = zlib.decompress(body)
        except zlib.error as exc:
            raise CorruptRecordError(pos, f"compressed body does not inflate: {exc}") from None
    if magic == MESSAGE_MAGIC_CODE:
        topic_len = raw[p]
        p += 1
    else:
        topic_len = _U16.unpack_from(raw, p)[0]
        p += 2
    raw_topic = raw[p:p + topic_len]
    topic = topics.get(raw_topic)
    if topic is None:
        topic = topics[raw_topic] = raw_topic.decode("utf-8", "replace")
    p += topic_len
    props_len = _U16.unpack_from(raw, p)[0]
    p += 2
    if p + props_len != record_end:
        raise CorruptRecordError(pos, f"TOTALSIZE is {total} but the parts add up to "
                                      f"{p + props_len - pos}")
    props = decode_properties(raw[p:p + props_len].decode("utf-8", "replace")) if props_len \
        else {}
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        topic = props.get(PROPERTY_RETRY_TOPIC, topic)
    keys = props.get(PROPERTY_KEYS)
    return MessageExt(
        topic=topic, body=body, tags=props.get(PROPERTY_TAGS, ""),
        keys=keys.split(" ") if keys else [], properties=props,
        msg_id=props.get(PROPERTY_UNIQ_KEY, ""),
        offset_msg_id=(store_host + phys_offset.to_bytes(8, "big", signed=True)).hex().upper(),
        broker_name=broker_name, queue_id=queue_id, queue_offset=queue_offset,
        store_timestamp_ms=store_ts, born_timestamp_ms=born_ts, reconsume_times=reconsume,
        phys_offset=phys_offset, flag=flag, sysflag=sysflag, store_size_bytes=total)
