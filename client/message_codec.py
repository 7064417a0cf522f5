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
An idempotent producer's stamp (``PMQ_IDEM``) is the broker's business: a
decoded message's properties never show it.

Both directions work on blocks: :func:`encode_messages` turns a list of
messages into one blob of records in one call, :func:`decode_messages` a
pulled blob into a list of messages. Each exists twice: the pure-Python
reference here (``py_encode_messages``, ``py_decode_messages``), which defines
the result byte for byte and error for error, and the compiled ``_codec.c``,
an optional extension that ``pip install`` builds when a C compiler is there
(``tests/unit/test_client_codec.py`` checks that the two agree). The compiled
one is used when it is built and is the version this source expects, unless
``POCKETMQ_NO_SPEEDUPS=1``; :data:`IMPLEMENTATION` says which runs.
"""

from __future__ import annotations

import logging
import struct
import zlib
from collections.abc import Callable, Sequence
from functools import lru_cache
from types import ModuleType
from typing import Final

from pocketmq.client.errors import InvalidMessageError
from pocketmq.client.model import (
    PROPERTY_DELAY,
    PROPERTY_IDEMPOTENCE,
    PROPERTY_KEYS,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_KEY,
    RETRY_GROUP_TOPIC_PREFIX,
    SYSTEM_PROPERTIES,
    Message,
    MessageExt,
    _new_message_ext,
)
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.extensions import load_extension
from pocketmq.common.message import (
    BLANK_MAGIC_CODE,
    HEAD,
    HOST_V4_SIZE,
    HOST_V6_SIZE,
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH_V1,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    SysFlag,
    decode_properties,
    fixed_part,
)
from pocketmq.common.validation import check_topic

__all__ = [
    "COMPRESS_OVER_BYTES",
    "DEFAULT_MAX_BODY_BYTES",
    "IMPLEMENTATION",
    "check_message",
    "decode_messages",
    "encode_message",
    "encode_messages",
    "message_properties",
]

log = logging.getLogger(__name__)

COMPRESS_OVER_BYTES = 4 * 1024  # compressMsgBodyOverHowmuch
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024  # maxMessageSize
ZLIB_LEVEL = 5  # RocketMQ's default zlib level
MAX_DELAY_LEVEL = 18
STORE_HOST_PLACEHOLDER = b"\0" * 8  # IPv4 STOREHOST, patched by the broker

_I64 = struct.Struct(">q")
_TAIL = struct.Struct(">iqi")  # RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET, BODYLEN
_U16 = struct.Struct(">H")
_HEAD_UNPACK = HEAD.unpack_from
_HEAD_SIZE = HEAD.size
_FIXED_V4 = fixed_part(HOST_V4_SIZE, HOST_V4_SIZE)  # TOTALSIZE .. BODYLEN, IPv4 hosts
_HOST_V6_BITS = SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6


@lru_cache(maxsize=4096)
def _topic_problem(topic: str) -> str | None:
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return (
            f"topic {topic!r} is a consumer group's retry topic; producers send to ordinary topics"
        )
    return check_topic(topic)


def check_topic_of(msg: Message) -> None:
    """Raise :class:`InvalidMessageError` if the broker would refuse *msg*'s topic."""
    problem = _topic_problem(msg.topic)
    if problem:
        raise InvalidMessageError(problem)


def check_message(
    msg: Message, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, topic_checked: bool = False
) -> None:
    """Raise :class:`InvalidMessageError` naming what the broker would refuse.

    *topic_checked*: :func:`check_topic_of` passed for this topic already (a batch).
    """
    if not topic_checked:
        check_topic_of(msg)
    if not isinstance(msg.body, bytes | bytearray | memoryview):
        raise InvalidMessageError(f"message body must be bytes, got {type(msg.body).__name__}")
    size = len(msg.body)
    if size == 0:
        raise InvalidMessageError("message body is empty; a message needs a body")
    if size > max_body_bytes:
        raise InvalidMessageError(
            f"message body is {size} bytes; the limit is {max_body_bytes} (max_message_size_bytes)"
        )
    if not 0 <= msg.delay_level <= MAX_DELAY_LEVEL:
        raise InvalidMessageError(
            f"delay_level is {msg.delay_level}; give 0 (none) or 1..{MAX_DELAY_LEVEL}"
        )
    if msg.deliver_at_ms < 0 or msg.delay_ms < 0:
        raise InvalidMessageError(
            f"deliver_at_ms ({msg.deliver_at_ms}) and delay_ms ({msg.delay_ms}) must be >= 0"
        )
    if sum(1 for v in (msg.delay_level, msg.deliver_at_ms, msg.delay_ms) if v) > 1:
        raise InvalidMessageError("give at most one of delay_level, deliver_at_ms and delay_ms")
    for key in msg.keys:
        if not key or " " in key:
            raise InvalidMessageError(
                f"message key {key!r} is empty or contains a space; "
                "keys are space-joined on the wire"
            )
    for name, value in msg.properties.items():
        bad = next((c for c in f"{name}{value}" if c in "\x01\x02"), None)
        if bad is not None or not name or not value:
            raise InvalidMessageError(
                f"property {name!r}={value!r} is empty or contains a \\x01/\\x02 separator"
            )
        if name in SYSTEM_PROPERTIES:
            raise InvalidMessageError(
                f"property {name!r} is set by the client; use Message.tags / Message.keys"
            )


def _timer_properties(msg: Message) -> str:
    """``TIMER_DELIVER_MS`` or ``TIMER_DELAY_MS`` when the message asks for a time."""
    if msg.deliver_at_ms:
        return f"{PROPERTY_TIMER_DELIVER_MS}\x01{msg.deliver_at_ms}\x02"
    if msg.delay_ms:
        return f"{PROPERTY_TIMER_DELAY_MS}\x01{msg.delay_ms}\x02"
    return ""


def message_properties(msg: Message, uniq_key: str) -> str:
    """The properties string of *msg*: user properties, then the client's own."""
    parts = [f"{k}\x01{v}\x02" for k, v in msg.properties.items()]
    parts.append(_timer_properties(msg))
    parts.append(_client_properties(msg.tags, tuple(msg.keys), msg.delay_level))
    parts.append(f"{PROPERTY_UNIQ_KEY}\x01{uniq_key}\x02")
    return "".join(parts)


@lru_cache(maxsize=1024)
def _client_properties(tags: str, keys: tuple[str, ...], delay_level: int) -> str:
    """``TAGS``, ``KEYS`` and ``DELAY`` pairs: the same for every message of one shape."""
    parts = []
    if tags:
        parts.append(f"{PROPERTY_TAGS}\x01{tags}\x02")
    if keys:
        parts.append(f"{PROPERTY_KEYS}\x01{' '.join(keys)}\x02")
    if delay_level:
        parts.append(f"{PROPERTY_DELAY}\x01{delay_level}\x02")
    return "".join(parts)


@lru_cache(maxsize=1024)
def _shape(topic: str, tags: str, keys: tuple[str, ...], delay_level: int) -> tuple[bytes, bytes]:
    """(TOPICLEN + TOPIC, the client's properties then ``UNIQ_KEY\x01``), UTF-8.

    Messages of one shape share all of the record after BODY but the unique key,
    so each distinct (topic, tags, keys, delay) is encoded once.
    """
    topic_raw = topic.encode()
    if len(topic_raw) > MAX_TOPIC_LENGTH_V1:
        raise InvalidMessageError(
            f"topic is {len(topic_raw)} bytes; at most {MAX_TOPIC_LENGTH_V1} fit a record"
        )
    own = _client_properties(tags, keys, delay_level) + f"{PROPERTY_UNIQ_KEY}\x01"
    return len(topic_raw).to_bytes(1, "big") + topic_raw, own.encode()


def encode_message(
    msg: Message,
    *,
    queue_id: int,
    uniq_key: str,
    born_host: bytes,
    born_timestamp_ms: int,
    compress_over_bytes: int = COMPRESS_OVER_BYTES,
    reconsume_times: int = 0,
) -> bytes:
    """One record for *msg* in queue *queue_id*; call :func:`check_message` first."""
    return encode_messages(
        (msg,),
        (uniq_key,),
        queue_id,
        born_host,
        born_timestamp_ms,
        compress_over_bytes,
        reconsume_times,
    )


def py_encode_messages(
    msgs: Sequence[Message],
    uniq_keys: Sequence[str],
    queue_id: int,
    born_host: bytes,
    born_timestamp_ms: int,
    compress_over_bytes: int = COMPRESS_OVER_BYTES,
    reconsume_times: int = 0,
    stamp: tuple[int, int, int] | None = None,
) -> bytes:
    """The records of *msgs* (checked with :func:`check_message`) back to back, the
    i-th with ``uniq_keys[i]``, all in queue *queue_id* (a SendBatch payload);
    *stamp* ``(producer id, epoch, seq)``: the i-th also ends in ``PMQ_IDEM`` =
    ``<producer id>.<epoch>.<seq + i>`` (an idempotent producer's, written after
    the ``UNIQ_KEY`` value as :func:`pocketmq.client.idempotence.stamp` does)."""
    if len(msgs) != len(uniq_keys):
        raise ValueError(f"{len(msgs)} messages but {len(uniq_keys)} unique keys")
    if stamp is not None:
        pid, epoch, seq = stamp
        uniq_keys = [
            f"{key}\x02PMQ_IDEM\x01{pid}.{epoch}.{seq + i}" for i, key in enumerate(uniq_keys)
        ]
    return b"".join(
        [
            _py_encode_one(
                m, queue_id, k, born_host, born_timestamp_ms, compress_over_bytes, reconsume_times
            )
            for m, k in zip(msgs, uniq_keys, strict=True)
        ]
    )


def _py_encode_one(
    msg: Message,
    queue_id: int,
    uniq_key: str,
    born_host: bytes,
    born_timestamp_ms: int,
    compress_over_bytes: int,
    reconsume_times: int,
) -> bytes:
    """One record: the same bytes as :func:`~pocketmq.common.message.encode_record`
    with :func:`message_properties`, built with one struct call and the per-shape
    parts cached."""
    body = msg.body
    if type(body) is not bytes:
        body = bytes(body)
    sysflag = 0
    body_len = len(body)
    if body_len > compress_over_bytes:
        packed = zlib.compress(body, ZLIB_LEVEL)
        if len(packed) < body_len:
            body, sysflag, body_len = packed, SysFlag.COMPRESSED, len(packed)
    if msg.properties:
        user = "".join([f"{k}\x01{v}\x02" for k, v in msg.properties.items()]).encode()
    else:
        user = b""
    if msg.deliver_at_ms or msg.delay_ms:
        user += _timer_properties(msg).encode()
    keys = msg.keys
    topic_part, own = _shape(
        msg.topic, msg.tags, keys if type(keys) is tuple else tuple(keys), msg.delay_level
    )
    uniq_raw = uniq_key.encode()
    props_len = len(user) + len(own) + len(uniq_raw) + 1
    if props_len > MAX_PROPERTIES_LENGTH:
        raise InvalidMessageError(
            f"properties are {props_len} bytes; at most {MAX_PROPERTIES_LENGTH} fit a record"
        )
    if len(born_host) == HOST_V4_SIZE:
        fixed = _FIXED_V4
    else:
        fixed = fixed_part(len(born_host), HOST_V4_SIZE)
        if len(born_host) == HOST_V6_SIZE:
            sysflag |= SysFlag.BORNHOST_V6
    total = fixed.size + body_len + len(topic_part) + 2 + props_len
    return b"".join(
        (
            fixed.pack(
                total,
                MESSAGE_MAGIC_CODE,
                zlib.crc32(body) & 0x7FFFFFFF,
                queue_id,
                msg.flag,
                0,
                0,
                sysflag,
                born_timestamp_ms,
                born_host,
                0,
                STORE_HOST_PLACEHOLDER,
                reconsume_times,
                0,
                body_len,
            ),
            body,
            topic_part,
            props_len.to_bytes(2, "big"),
            user,
            own,
            uniq_raw,
            b"\x02",
        )
    )


def set_queue_id(record: bytes, queue_id: int) -> bytes:
    """The same record aimed at another queue (a retry picks a new queue)."""
    return record[:12] + queue_id.to_bytes(4, "big", signed=True) + record[16:]


def decode_messages(
    buf: bytes | memoryview, broker_name: str, *, check_crc: bool = False
) -> list[MessageExt]:
    """Decode a pull reply into messages; BLANK records are skipped.

    Raises :class:`CorruptRecordError` naming the offset of a damaged record.
    """
    return _decode_messages(buf, broker_name, check_crc)


def py_decode_messages(
    buf: bytes | memoryview, broker_name: str, check_crc: bool = False
) -> list[MessageExt]:
    """The reference of :func:`decode_messages`. A record with IPv4 hosts (all but a
    few) is read with one struct call up to BODY; topic names and store-host hex
    are decoded once per reply."""
    raw = bytes(buf)
    out: list[MessageExt] = []
    append = out.append
    topics: dict[bytes, tuple[str, bool]] = {}
    hosts: dict[bytes, str] = {}
    fixed_unpack, fixed_size = _FIXED_V4.unpack_from, _FIXED_V4.size
    pos, end = 0, len(raw)
    while pos < end:
        if end - pos < fixed_size:  # a short tail: the general path says what is wrong
            pos = _decode_general(raw, pos, end, broker_name, topics, check_crc, append)
            continue
        (
            total,
            magic,
            crc,
            queue_id,
            flag,
            queue_offset,
            phys_offset,
            sysflag,
            born_ts,
            _born_host,
            store_ts,
            store_host,
            reconsume,
            _prepared,
            body_len,
        ) = fixed_unpack(raw, pos)
        if sysflag & _HOST_V6_BITS or magic == BLANK_MAGIC_CODE or total < fixed_size:
            pos = _decode_general(raw, pos, end, broker_name, topics, check_crc, append)
            continue
        if magic != MESSAGE_MAGIC_CODE and magic != MESSAGE_MAGIC_CODE_V2:
            raise CorruptRecordError(pos, f"magic code is 0x{magic:08X}")
        record_end = pos + total
        if record_end > end:
            raise CorruptRecordError(pos, f"TOTALSIZE is {total}; {end - pos} bytes are left")
        body, (topic, is_retry), props = _decode_tail(
            raw,
            pos,
            pos + fixed_size,
            record_end,
            total,
            magic,
            crc,
            sysflag,
            body_len,
            topics,
            check_crc,
        )
        if is_retry:
            topic = props.get(PROPERTY_RETRY_TOPIC, topic)
        host_hex = hosts.get(store_host)
        if host_hex is None:
            host_hex = hosts[store_host] = store_host.hex().upper()
        keys = props.get(PROPERTY_KEYS)
        append(
            _new_message_ext(
                topic,
                body,
                props.get(PROPERTY_TAGS, ""),
                keys.split(" ") if keys else [],
                props,
                props.get(PROPERTY_UNIQ_KEY, ""),
                f"{host_hex}{phys_offset:016X}"
                if phys_offset >= 0
                else (store_host + phys_offset.to_bytes(8, "big", signed=True)).hex().upper(),
                broker_name,
                queue_id,
                queue_offset,
                store_ts,
                born_ts,
                reconsume,
                phys_offset,
                flag,
                sysflag,
                total,
            )
        )
        pos = record_end
    return out


def _decode_tail(
    raw: bytes,
    pos: int,
    p: int,
    record_end: int,
    total: int,
    magic: int,
    crc: int,
    sysflag: int,
    body_len: int,
    topics: dict[bytes, tuple[str, bool]],
    check_crc: bool,
) -> tuple[bytes, tuple[str, bool], dict[str, str]]:
    """BODY (inflated), the (topic, is-retry) entry and the properties of the record at
    *pos*, whose BODY starts at *p*; every length is checked against TOTALSIZE."""
    if body_len < 0 or p + body_len > record_end:
        raise CorruptRecordError(pos, f"BODYLEN {body_len} does not fit TOTALSIZE {total}")
    body = raw[p : p + body_len]
    if check_crc and zlib.crc32(body) & 0x7FFFFFFF != crc:
        raise CorruptRecordError(pos, "body CRC mismatch")
    p += body_len
    if sysflag & SysFlag.COMPRESSED:
        body = _inflate(body, pos)
    if p + (1 if magic == MESSAGE_MAGIC_CODE else 2) > record_end:
        raise CorruptRecordError(pos, f"topic length lies past TOTALSIZE {total}")
    if magic == MESSAGE_MAGIC_CODE:
        topic_len = raw[p]
        p += 1
    else:
        topic_len = _U16.unpack_from(raw, p)[0]
        p += 2
    if p + topic_len + 2 > record_end:
        raise CorruptRecordError(pos, f"properties length lies past TOTALSIZE {total}")
    raw_topic = raw[p : p + topic_len]
    topic_entry = topics.get(raw_topic)
    if topic_entry is None:
        topic_entry = topics[raw_topic] = _topic_entry(raw_topic)
    p += topic_len
    props_len = _U16.unpack_from(raw, p)[0]
    p += 2
    if p + props_len != record_end:
        raise CorruptRecordError(
            pos, f"TOTALSIZE is {total} but the parts add up to {p + props_len - pos}"
        )
    if props_len:
        props = decode_properties(raw[p : p + props_len].decode("utf-8", "replace"))
        props.pop(PROPERTY_IDEMPOTENCE, None)  # the broker's business, not the user's
    else:
        props = {}
    return body, topic_entry, props


def _topic_entry(raw_topic: bytes) -> tuple[str, bool]:
    topic = raw_topic.decode("utf-8", "replace")
    return topic, topic.startswith(RETRY_GROUP_TOPIC_PREFIX)


def _inflate(body: bytes, pos: int) -> bytes:
    try:
        return zlib.decompress(body)
    except zlib.error as exc:
        raise CorruptRecordError(pos, f"compressed body does not inflate: {exc}") from None


def _decode_general(
    raw: bytes,
    pos: int,
    end: int,
    broker_name: str,
    topics: dict[bytes, tuple[str, bool]],
    check_crc: bool,
    append: Callable[[MessageExt], None],
) -> int:
    """One record of any host size (or a BLANK, or a damaged tail); returns the next pos."""
    if end - pos < _HEAD_SIZE:
        raise CorruptRecordError(pos, f"{end - pos} bytes left; a record head is {_HEAD_SIZE}")
    (total, magic, crc, queue_id, flag, queue_offset, phys_offset, sysflag, born_ts) = _HEAD_UNPACK(
        raw, pos
    )
    if magic == BLANK_MAGIC_CODE and total > 0:
        return pos + total
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        raise CorruptRecordError(pos, f"magic code is 0x{magic:08X}")
    if total < _HEAD_SIZE or pos + total > end:
        raise CorruptRecordError(pos, f"TOTALSIZE is {total}; {end - pos} bytes are left")
    append(
        _decode_one(
            raw,
            pos,
            total,
            magic,
            crc,
            queue_id,
            flag,
            queue_offset,
            phys_offset,
            sysflag,
            born_ts,
            broker_name,
            topics,
            check_crc,
        )
    )
    return pos + total


def _decode_one(
    raw: bytes,
    pos: int,
    total: int,
    magic: int,
    crc: int,
    queue_id: int,
    flag: int,
    queue_offset: int,
    phys_offset: int,
    sysflag: int,
    born_ts: int,
    broker_name: str,
    topics: dict[bytes, tuple[str, bool]],
    check_crc: bool,
) -> MessageExt:
    p = pos + _HEAD_SIZE + (20 if sysflag & SysFlag.BORNHOST_V6 else 8)
    store_size = 20 if sysflag & SysFlag.STOREHOST_V6 else 8
    body_pos = p + 8 + store_size + _TAIL.size  # STORETIMESTAMP STOREHOST, _TAIL
    if body_pos > pos + total:
        raise CorruptRecordError(
            pos, f"TOTALSIZE is {total}; the fields before BODY need {body_pos - pos}"
        )
    store_ts = _I64.unpack_from(raw, p)[0]
    p += 8
    store_host = raw[p : p + store_size]
    p += store_size
    reconsume, _prepared, body_len = _TAIL.unpack_from(raw, p)
    p += 12 + 4
    body, (topic, is_retry), props = _decode_tail(
        raw, pos, p, pos + total, total, magic, crc, sysflag, body_len, topics, check_crc
    )
    if is_retry:
        topic = props.get(PROPERTY_RETRY_TOPIC, topic)
    keys = props.get(PROPERTY_KEYS)
    return _new_message_ext(
        topic,
        body,
        props.get(PROPERTY_TAGS, ""),
        keys.split(" ") if keys else [],
        props,
        props.get(PROPERTY_UNIQ_KEY, ""),
        (store_host + phys_offset.to_bytes(8, "big", signed=True)).hex().upper(),
        broker_name,
        queue_id,
        queue_offset,
        store_ts,
        born_ts,
        reconsume,
        phys_offset,
        flag,
        sysflag,
        total,
    )


# -- which implementation runs ---------------------------------------------------------
#: ``_codec.VERSION`` this source was written with; another build is stale.
_EXPECTED_VERSION: Final = 3


def _load() -> tuple[ModuleType | None, str]:
    module, reason = load_extension("pocketmq.client._codec", _EXPECTED_VERSION)
    if module is not None:
        module.setup(MessageExt, CorruptRecordError, InvalidMessageError, _inflate)
    return module, reason


#: The compiled module in use, or None when the pure-Python references run.
NATIVE, _REASON = _load()
#: ``"c"`` or ``"python"``: what the client's codec runs on.
IMPLEMENTATION: Final[str] = "c" if NATIVE is not None else "python"
log.debug("client codec: %s (%s)", IMPLEMENTATION, _REASON)

#: ``encode_messages(msgs, uniq_keys, queue_id, born_host, born_timestamp_ms,
#: compress_over_bytes, reconsume_times, stamp=None) -> bytes``: the records of *msgs*
#: in one blob.
encode_messages: Callable[..., bytes] = (
    py_encode_messages if NATIVE is None else NATIVE.encode_messages
)
_decode_messages: Callable[[bytes | memoryview, str, bool], list[MessageExt]] = (
    py_decode_messages if NATIVE is None else NATIVE.decode_messages
)
