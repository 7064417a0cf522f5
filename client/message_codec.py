"""Messages to and from the commit-log record layout (:mod:`pocketmq.common.message`).

Sending: :func:`check_message` refuses what the broker would refuse (topic
name, empty or oversized body, properties too long), :func:`check_batch` the same
of a whole ``send_batch`` (one topic, no delay levels), then
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

Both directions work on blocks: :func:`check_batch` checks a list of messages
and :func:`encode_messages` turns it into one blob of records, each in one call
(the unique keys may be a :class:`~pocketmq.common.msgid.UniqueIdBlock`, formatted
into the records without a str per key; given a *tail*, the blob is framed as a whole
``SendBatchRequest``, :func:`frame_records`, which ``send_batch`` sends as it is),
:func:`decode_messages` a pulled blob into a list of messages. Each exists twice: the pure-Python
reference (``py_check_batch`` and ``py_encode_messages`` here, ``py_decode_messages`` in
:mod:`pocketmq.client.message_decode`), which defines
the result byte for byte and error for error, and the compiled ``_codec.c``,
an optional extension that ``pip install`` builds when a C compiler is there
(``tests/unit/test_client_codec.py`` checks that the two agree). The compiled
one is used when it is built and is the version this source expects, unless
``POCKETMQ_NO_SPEEDUPS=1``; :data:`IMPLEMENTATION` says which runs.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Sequence
from functools import lru_cache
from types import ModuleType
from typing import Final

from pocketmq.client.errors import InvalidMessageError
from pocketmq.client.message_decode import inflate, py_decode_messages
from pocketmq.client.model import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_KEY,
    RETRY_GROUP_TOPIC_PREFIX,
    SYSTEM_PROPERTIES,
    Message,
    MessageExt,
)
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.extensions import load_extension
from pocketmq.common.message import body_crc
from pocketmq.common.msgid import UniqueIdBlock
from pocketmq.common.record_layout import (
    FIELD_STRUCT,
    FIXED_V4,
    HOST_V4_SIZE,
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH_V1,
    MESSAGE_MAGIC_CODE,
    POS_QUEUEID,
    PROPS_LEN,
    TOPIC_LEN_V1,
    SysFlag,
    fixed_part,
    host_sysflag,
)
from pocketmq.common.validation import check_topic

__all__ = [
    "COMPRESS_OVER_BYTES",
    "DEFAULT_MAX_BODY_BYTES",
    "IMPLEMENTATION",
    "check_batch",
    "check_message",
    "decode_messages",
    "encode_message",
    "encode_messages",
]

log = logging.getLogger(__name__)

COMPRESS_OVER_BYTES = 4 * 1024  # compressMsgBodyOverHowmuch
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024  # maxMessageSize
ZLIB_LEVEL = 5  # RocketMQ's default zlib level
MAX_DELAY_LEVEL = 18
STORE_HOST_PLACEHOLDER = b"\0" * HOST_V4_SIZE  # IPv4 STOREHOST, patched by the broker

_QUEUEID = FIELD_STRUCT["QUEUEID"]


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


def py_check_batch(msgs: Sequence[Message], max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
    """Raise :class:`InvalidMessageError` naming the first thing of a ``send_batch`` the
    broker would refuse: no messages, two topics, a delay level, or what
    :func:`check_message` refuses, message by message."""
    if not msgs:
        raise InvalidMessageError("send_batch got no messages")
    topic = msgs[0].topic
    check_topic_of(msgs[0])
    for msg in msgs:
        if msg.topic != topic:
            raise InvalidMessageError(f"a batch goes to one topic; got {topic!r} and {msg.topic!r}")
        if msg.delay_level:
            raise InvalidMessageError("a batch cannot carry delayed messages")
        check_message(msg, max_body_bytes=max_body_bytes, topic_checked=True)


def _timer_properties(msg: Message) -> str:
    """``TIMER_DELIVER_MS`` or ``TIMER_DELAY_MS`` when the message asks for a time."""
    if msg.deliver_at_ms:
        return f"{PROPERTY_TIMER_DELIVER_MS}\x01{msg.deliver_at_ms}\x02"
    if msg.delay_ms:
        return f"{PROPERTY_TIMER_DELAY_MS}\x01{msg.delay_ms}\x02"
    return ""


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
    return TOPIC_LEN_V1.pack(len(topic_raw)) + topic_raw, own.encode()


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
    tail: bytes | None = None,
) -> bytes:
    """The records of *msgs* (checked with :func:`check_message`) back to back, the
    i-th with ``uniq_keys[i]``, all in queue *queue_id* (a SendBatch payload);
    *stamp* ``(producer id, epoch, seq)``: the i-th also ends in ``PMQ_IDEM`` =
    ``<producer id>.<epoch>.<seq + i>`` (an idempotent producer's, written after
    the ``UNIQ_KEY`` value as :func:`pocketmq.client.idempotence.stamp` does).

    *tail*: the records framed as a whole request instead, :func:`frame_records`
    (the records as protobuf writes a message's field 1, then *tail*)."""
    if len(msgs) != len(uniq_keys):
        raise ValueError(f"{len(msgs)} messages but {len(uniq_keys)} unique keys")
    if stamp is not None:
        pid, epoch, seq = stamp
        uniq_keys = [
            f"{key}\x02PMQ_IDEM\x01{pid}.{epoch}.{seq + i}" for i, key in enumerate(uniq_keys)
        ]
    records = b"".join(
        [
            _py_encode_one(
                m, queue_id, k, born_host, born_timestamp_ms, compress_over_bytes, reconsume_times
            )
            for m, k in zip(msgs, uniq_keys, strict=True)
        ]
    )
    return records if tail is None else frame_records(records, bytes(tail))


def frame_records(records: bytes, tail: bytes) -> bytes:
    """*records* as protobuf serializes a message's ``bytes`` field number 1, then *tail*
    (the message's later fields, serialized: ``SendBatchRequest(records=r, ...)``'s
    bytes are ``frame_records(r, SendBatchRequest(...).SerializeToString())``)::

        0x0A (field 1, length-delimited) | varint len(records) | records | tail

    (proto3 writes no field 1 at all for empty records)."""
    if not records:
        return tail
    return b"".join((b"\x0a", _varint(len(records)), records, tail))


def framed_records_size(request: bytes) -> int:
    """The length of the records in *request* (made by :func:`frame_records`)."""
    if request[:1] != b"\x0a":
        return 0
    size = shift = 0
    for byte in request[1:11]:
        size |= (byte & 0x7F) << shift
        if byte < 0x80:
            return size
        shift += 7
    raise ValueError("a request whose records length is not a varint")


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


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
    with the properties user pairs, then the timer's, ``TAGS``, ``KEYS``, ``DELAY`` and
    ``UNIQ_KEY``, built with one struct call and the per-shape parts cached."""
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
        fixed = FIXED_V4
    else:
        fixed = fixed_part(len(born_host), len(STORE_HOST_PLACEHOLDER))
        sysflag |= host_sysflag(born_host, STORE_HOST_PLACEHOLDER)
    total = fixed.size + body_len + len(topic_part) + PROPS_LEN.size + props_len
    return b"".join(
        (
            fixed.pack(
                total,
                MESSAGE_MAGIC_CODE,
                body_crc(body),
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
            PROPS_LEN.pack(props_len),
            user,
            own,
            uniq_raw,
            b"\x02",
        )
    )


def set_queue_id(record: bytes, queue_id: int) -> bytes:
    """The same record aimed at another queue (a retry picks a new queue)."""
    end = POS_QUEUEID + _QUEUEID.size
    return (
        record[:POS_QUEUEID] + queue_id.to_bytes(_QUEUEID.size, "big", signed=True) + record[end:]
    )


def decode_messages(
    buf: bytes | memoryview, broker_name: str, *, check_crc: bool = False
) -> list[MessageExt]:
    """Decode a pull reply into messages; BLANK records are skipped.

    Raises :class:`CorruptRecordError` naming the offset of a damaged record.
    """
    return _decode_messages(buf, broker_name, check_crc)


# -- which implementation runs ---------------------------------------------------------
#: ``_codec.VERSION`` this source was written with; another build is stale.
_EXPECTED_VERSION: Final = 7


def _load() -> tuple[ModuleType | None, str]:
    module, reason = load_extension("pocketmq.client._codec", _EXPECTED_VERSION)
    if module is not None:
        module.setup(
            MessageExt,
            CorruptRecordError,
            InvalidMessageError,
            inflate,
            Message,
            UniqueIdBlock,
            SYSTEM_PROPERTIES,
            check_topic_of,
            py_check_batch,
        )
    return module, reason


#: The compiled module in use, or None when the pure-Python references run.
NATIVE, _REASON = _load()
#: ``"c"`` or ``"python"``: what the client's codec runs on.
IMPLEMENTATION: Final[str] = "c" if NATIVE is not None else "python"
log.debug("client codec: %s (%s)", IMPLEMENTATION, _REASON)

#: ``encode_messages(msgs, uniq_keys, queue_id, born_host, born_timestamp_ms,
#: compress_over_bytes, reconsume_times, stamp=None, tail=None) -> bytes``: the records
#: of *msgs* in one blob (framed as a request with *tail*).
encode_messages: Callable[..., bytes] = (
    py_encode_messages if NATIVE is None else NATIVE.encode_messages
)
#: ``check_batch(msgs, max_body_bytes) -> None``: raises what a ``send_batch`` breaks.
check_batch: Callable[[Sequence[Message], int], None] = (
    py_check_batch if NATIVE is None else NATIVE.check_batch
)
_decode_messages: Callable[[bytes | memoryview, str, bool], list[MessageExt]] = (
    py_decode_messages if NATIVE is None else NATIVE.decode_messages
)
