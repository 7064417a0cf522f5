"""Translation between RocketMQ 5's v2 messages and PocketMQ's stored records.

Pure functions, no I/O. A v2 ``Message`` becomes one commit-log record the
send path takes like any other; a stored record becomes the v2 ``Message`` a
consumer receives. The two property contracts meet here::

    v2 SystemProperties              record property (RocketMQ's names)
    -------------------------------  -----------------------------------------
    tag                              TAGS
    keys                             KEYS (space separated)
    message_id                       UNIQ_KEY
    message_group                    __SHARDINGKEY
    delivery_timestamp               TIMER_DELIVER_MS (ms; RocketMQ 5's timer)
    message_type TRANSACTION         sysflag TRANSACTION_PREPARED, TRAN_MSG=true,
                                     PGROUP={topic} (the v2 producer group)
    orphaned_transaction_recovery_   CHECK_IMMUNITY_TIME_IN_SECONDS
      duration
    user_properties                  every other property

The official Python client 5.1.2 sends the delivery timestamp in milliseconds
in the ``seconds`` field; a value above :data:`MS_THRESHOLD` is taken as
milliseconds, below as seconds, so both spellings work.

Refusals are :class:`V2Error` with a v2 status code; :func:`status_of` maps
the broker's own errors (:mod:`pocketmq.broker.errors`) to codes in one table.
"""

from __future__ import annotations

import gzip
import hashlib
import ipaddress
import struct
import zlib
from collections.abc import Mapping

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from pocketmq.broker.errors import (
    BrokerError,
    FailedPreconditionError,
    IllegalArgumentError,
    NoPermissionError,
    PutRejectedError,
    ResourceNotFoundError,
    SystemBusyError,
)
from pocketmq.broker.grpc_v2.pop_processor import PROPERTY_MESSAGE_GROUP
from pocketmq.broker.store.results import PutStatus
from pocketmq.common.errors import PocketMQError
from pocketmq.common.message import (
    PROPERTY_IDEMPOTENCE,
    StoredMessage,
    SysFlag,
    encode_record,
    pack_host,
)
from pocketmq.common.validation import check_topic
from pocketmq.rmqv2 import definition_pb2 as d

__all__ = [
    "MS_THRESHOLD",
    "SYSTEM_PROPERTIES",
    "V2Error",
    "accepted_types",
    "duration_ms",
    "encode_message",
    "message_pb",
    "status",
    "status_of",
]

MS_THRESHOLD = 100_000_000_000  # 1e11: as seconds, year 5138; as ms, 1973
MAX_MESSAGE_GROUP_LENGTH = 64  # RocketMQ proxy's maxMessageGroupSize
MAX_TAG_LENGTH = 255

PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_DELAY = "DELAY"

# RocketMQ's reserved property names (MessageConst.STRING_HASH_SET, those PocketMQ
# writes) and PocketMQ's own (PMQ_IDEM, an idempotent producer's stamp): never user
# properties, in either direction.
SYSTEM_PROPERTIES = frozenset(
    {
        PROPERTY_IDEMPOTENCE,
        PROPERTY_TAGS,
        PROPERTY_KEYS,
        PROPERTY_UNIQ_KEY,
        "WAIT",
        PROPERTY_DELAY,
        "RETRY_TOPIC",
        "REAL_TOPIC",
        "REAL_QID",
        PROPERTY_TRANSACTION_PREPARED,
        PROPERTY_PRODUCER_GROUP,
        "MIN_OFFSET",
        "MAX_OFFSET",
        "BUYER_ID",
        "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG",
        "CORRECTION_FLAG",
        "MQ2_FLAG",
        "RECONSUME_TIME",
        "MSG_REGION",
        "TRACE_ON",
        "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME",
        PROPERTY_MESSAGE_GROUP,
        PROPERTY_TIMER_DELIVER_MS,
        "TIMER_DELAY_MS",
        "TIMER_DELAY_SEC",
        "TIMER_ROLL_TIMES",
        PROPERTY_CHECK_IMMUNITY,
        "TRAN_RESOLUTION",
        "DLQ_ORIGIN_TOPIC",
        "DLQ_ORIGIN_MESSAGE_ID",
        "CLUSTER",
    }
)
_NORMAL_TYPES = (d.NORMAL, d.FIFO, d.DELAY, d.TRANSACTION)


class V2Error(PocketMQError):
    """A request refused with a v2 status code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def status(code: int = d.OK, message: str = "OK") -> d.Status:
    return d.Status(code=code, message=message)


_REASON_CODES = {
    "INVALID_RECEIPT_HANDLE": d.INVALID_RECEIPT_HANDLE,
    "TOPIC_NOT_EXIST": d.TOPIC_NOT_FOUND,
    "MESSAGE_BODY_TOO_LARGE": d.MESSAGE_BODY_TOO_LARGE,
    "PROPERTIES_SIZE_EXCEEDED": d.MESSAGE_PROPERTIES_TOO_LARGE,
    "WHEEL_TIMER_MSG_ILLEGAL": d.ILLEGAL_DELIVERY_TIME,
    "WHEEL_TIMER_NOT_ENABLE": d.ILLEGAL_DELIVERY_TIME,
    "SUBSCRIPTION_PARSE_FAILED": d.ILLEGAL_FILTER_EXPRESSION,
    "TRANSACTION_NOT_FOUND": d.INVALID_TRANSACTION_ID,
    # NotDurableError: stored here, not yet as durable as the broker's role asks
    "FLUSH_DISK_TIMEOUT": d.MASTER_PERSISTENCE_TIMEOUT,
    "FLUSH_SLAVE_TIMEOUT": d.SLAVE_PERSISTENCE_TIMEOUT,
    "SLAVE_NOT_AVAILABLE": d.HA_NOT_AVAILABLE,
}
_CLASS_CODES: tuple[tuple[type[BrokerError], int], ...] = (
    (IllegalArgumentError, d.BAD_REQUEST),
    (ResourceNotFoundError, d.NOT_FOUND),
    (NoPermissionError, d.FORBIDDEN),
    (SystemBusyError, d.TOO_MANY_REQUESTS),
    (FailedPreconditionError, d.PRECONDITION_FAILED),
)
_PUT_CODES = {
    PutStatus.MESSAGE_ILLEGAL: d.BAD_REQUEST,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: d.MESSAGE_PROPERTIES_TOO_LARGE,
    PutStatus.FLUSH_DISK_TIMEOUT: d.MASTER_PERSISTENCE_TIMEOUT,
}


def status_of(error: Exception) -> d.Status:
    """The v2 status for a refusal: V2Error as is, BrokerError by reason, then by class."""
    if isinstance(error, V2Error):
        return status(error.code, error.message)
    if isinstance(error, BrokerError):
        code = _REASON_CODES.get(error.reason)
        if code is None and isinstance(error, PutRejectedError):
            code = _PUT_CODES.get(error.status, d.INTERNAL_SERVER_ERROR)
        if code is None:
            code = next(
                (c for cls, c in _CLASS_CODES if isinstance(error, cls)), d.INTERNAL_SERVER_ERROR
            )
        return status(code, error.message)
    return status(
        d.INTERNAL_SERVER_ERROR,
        f"internal broker error: {type(error).__name__}: {error}; see the broker log",
    )


# -- times ---------------------------------------------------------------------------------
def timestamp_ms(ts: Timestamp) -> int:
    """A v2 timestamp in ms; a ``seconds`` value above MS_THRESHOLD already is ms."""
    if ts.seconds > MS_THRESHOLD:
        return ts.seconds
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def timestamp_pb(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def duration_ms(duration: Duration) -> int:
    return duration.seconds * 1000 + duration.nanos // 1_000_000


def duration_pb(ms: int) -> Duration:
    return Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


# -- sending -------------------------------------------------------------------------------
def accepted_types(order: bool) -> tuple[int, ...]:
    """Message types a topic takes: a FIFO (order) topic FIFO only, others every type."""
    return (d.FIFO,) if order else _NORMAL_TYPES


def _check_text(
    value: str, what: str, code: int, *, limit: int = MAX_TAG_LENGTH, spaces: bool = True
) -> None:
    if not value.strip():
        raise V2Error(code, f"{what} is blank; leave it unset or give a value")
    if len(value) > limit:
        raise V2Error(code, f"{what} is {len(value)} characters; at most {limit} are allowed")
    if any(not c.isprintable() or (not spaces and c.isspace()) for c in value):
        raise V2Error(
            code,
            f"{what} {value[:40]!r} contains "
            f"{'control' if spaces else 'whitespace or control'} characters",
        )


def message_type_of(msg: d.Message) -> int:
    """The declared type, or the one its properties imply when unspecified."""
    sp = msg.system_properties
    if sp.message_type:
        return sp.message_type
    if sp.HasField("message_group"):
        return d.FIFO
    if sp.HasField("delivery_timestamp"):
        return d.DELAY
    return d.NORMAL


def _check_type(msg: d.Message, kind: int, accepted: tuple[int, ...]) -> None:
    sp = msg.system_properties
    if kind not in d.MessageType.values():
        raise V2Error(
            d.BAD_REQUEST, f"message_type is {kind}; it is one of {dict(d.MessageType.items())}"
        )
    name = d.MessageType.Name(kind)
    if kind not in accepted:
        raise V2Error(
            d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"topic {msg.topic.name!r} takes "
            f"{', '.join(d.MessageType.Name(t) for t in accepted)} messages, "
            f"not {name}; send to another topic or change the message",
        )
    has_group, has_time = sp.HasField("message_group"), sp.HasField("delivery_timestamp")
    wanted = {
        d.FIFO: (True, False),
        d.DELAY: (False, True),
        d.NORMAL: (False, False),
        d.TRANSACTION: (False, False),
    }.get(kind)
    if wanted is None:
        raise V2Error(d.UNSUPPORTED, f"message type {name} is not supported by PocketMQ")
    if (has_group, has_time) != wanted:
        raise V2Error(
            d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"a {name} message {'needs' if wanted[0] else 'has no'} message_group "
            f"and {'needs' if wanted[1] else 'has no'} delivery_timestamp; this one "
            f"has{'' if has_group else ' no'} message_group and"
            f"{'' if has_time else ' no'} delivery_timestamp",
        )


def _properties(msg: d.Message, kind: int) -> dict[str, str]:
    sp = msg.system_properties
    props: dict[str, str] = {}
    for key, value in msg.user_properties.items():
        if key in SYSTEM_PROPERTIES:
            raise V2Error(
                d.ILLEGAL_MESSAGE_PROPERTY_KEY,
                f"user property {key!r} is a name RocketMQ reserves; rename it",
            )
        _check_text(key, "user property name", d.ILLEGAL_MESSAGE_PROPERTY_KEY)
        if "\x01" in value or "\x02" in value:
            raise V2Error(
                d.ILLEGAL_MESSAGE_PROPERTY_KEY,
                f"user property {key!r} holds \\x01 or \\x02, which separate stored properties",
            )
        props[key] = value
    if sp.HasField("tag"):
        _check_text(sp.tag, "tag", d.ILLEGAL_MESSAGE_TAG)
        if "|" in sp.tag:
            raise V2Error(
                d.ILLEGAL_MESSAGE_TAG,
                f"tag {sp.tag!r} contains '|', which separates tags in filter expressions",
            )
        props[PROPERTY_TAGS] = sp.tag
    for key in sp.keys:
        _check_text(key, "key", d.ILLEGAL_MESSAGE_KEY, spaces=False)
    if sp.keys:
        props[PROPERTY_KEYS] = " ".join(sp.keys)
    props[PROPERTY_UNIQ_KEY] = sp.message_id
    if sp.HasField("message_group"):
        _check_text(
            sp.message_group,
            "message_group",
            d.ILLEGAL_MESSAGE_GROUP,
            limit=MAX_MESSAGE_GROUP_LENGTH,
        )
        props[PROPERTY_MESSAGE_GROUP] = sp.message_group
    if sp.HasField("delivery_timestamp"):
        props[PROPERTY_TIMER_DELIVER_MS] = str(timestamp_ms(sp.delivery_timestamp))
    if kind == d.TRANSACTION:
        props[PROPERTY_TRANSACTION_PREPARED] = "true"
        props[PROPERTY_PRODUCER_GROUP] = msg.topic.name
        if sp.HasField("orphaned_transaction_recovery_duration"):
            seconds = sp.orphaned_transaction_recovery_duration.seconds
            if seconds > 0:
                props[PROPERTY_CHECK_IMMUNITY] = str(seconds)
    return props


def _body(msg: d.Message, max_body_bytes: int) -> bytes:
    body = msg.body
    if msg.system_properties.body_encoding == d.GZIP:
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError, zlib.error) as exc:
            raise V2Error(
                d.MESSAGE_CORRUPTED,
                f"body_encoding is GZIP but the body does not decompress: {exc}",
            ) from None
    if not body:
        raise V2Error(
            d.MESSAGE_BODY_EMPTY, "message body is empty; RocketMQ stores only messages with a body"
        )
    if len(body) > max_body_bytes:
        raise V2Error(
            d.MESSAGE_BODY_TOO_LARGE,
            f"message body is {len(body)} bytes; this broker accepts at most "
            f"{max_body_bytes} (max_message_size_bytes)",
        )
    return body


def encode_message(
    msg: d.Message, *, queue_id: int, accepted: tuple[int, ...], max_body_bytes: int
) -> tuple[bytes, int]:
    """(the record to store, the message type) for one sent v2 message."""
    problem = check_topic(msg.topic.name)
    if problem:
        raise V2Error(d.ILLEGAL_TOPIC, problem)
    sp = msg.system_properties
    if not sp.message_id:
        raise V2Error(
            d.ILLEGAL_MESSAGE_ID,
            "system_properties.message_id is empty; the client names each message",
        )
    kind = message_type_of(msg)
    _check_type(msg, kind, accepted)
    body = _body(msg, max_body_bytes)
    properties = _properties(msg, kind)
    born_ms = timestamp_ms(sp.born_timestamp) if sp.HasField("born_timestamp") else 0
    try:
        born_host = pack_host((str(ipaddress.ip_address(sp.born_host)), 0))
    except ValueError:
        born_host = pack_host(("127.0.0.1", 0))
    sysflag = SysFlag.TRANSACTION_PREPARED if kind == d.TRANSACTION else 0
    try:
        record = encode_record(
            topic=msg.topic.name,
            body=body,
            queue_id=queue_id,
            properties=properties,
            sysflag=sysflag,
            born_timestamp_ms=born_ms,
            born_host=born_host,
        )
    except ValueError as exc:
        raise V2Error(d.MESSAGE_PROPERTIES_TOO_LARGE, str(exc)) from None
    return record, kind


# -- receiving -----------------------------------------------------------------------------
def received_type(msg: StoredMessage) -> int:
    props = msg.properties
    if (
        props.get(PROPERTY_TRANSACTION_PREPARED) == "true"
        or SysFlag.transaction_type(msg.sysflag) == SysFlag.TRANSACTION_COMMIT
    ):
        return d.TRANSACTION
    if PROPERTY_MESSAGE_GROUP in props:
        return d.FIFO
    if PROPERTY_TIMER_DELIVER_MS in props or props.get(PROPERTY_DELAY, "0") not in ("", "0"):
        return d.DELAY
    return d.NORMAL


def _host_text(host: tuple[str, int], with_port: bool) -> str:
    ip, port = host
    if not with_port:
        return ip
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def user_properties(properties: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in properties.items() if k not in SYSTEM_PROPERTIES}


GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # RFC 1952: deflate, no name, OS unknown


def body_for_clients(msg: StoredMessage) -> tuple[bytes, int]:
    """The stored body as the v2 clients read it, and its ``body_encoding``.

    A compressed body is stored the way RocketMQ compresses, as a zlib stream
    (RFC 1950); the v2 API's GZIP is a gzip member (RFC 1952), the only form
    the Node.js client inflates. The deflate data are re-framed, never
    recompressed::

        zlib   | 78 9c | deflate data | Adler-32 |
        gzip   | GZIP_HEADER (10 B) | deflate data | CRC-32 (LE) | size mod 2^32 (LE) |

    A body that is no complete zlib stream goes out as stored.
    """
    body = msg.body
    if not msg.sysflag & SysFlag.COMPRESSED:
        return body, d.IDENTITY
    if body[:2] == GZIP_HEADER[:2]:
        return body, d.GZIP
    inflater = zlib.decompressobj()
    try:
        plain = inflater.decompress(body)
    except zlib.error:
        return body, d.GZIP  # the client finds it corrupted, as before
    if not inflater.eof or inflater.unused_data:
        return body, d.GZIP
    trailer = struct.pack("<II", zlib.crc32(plain), len(plain) & 0xFFFFFFFF)
    return GZIP_HEADER + body[2:-4] + trailer, d.GZIP


def message_pb(
    msg: StoredMessage,
    *,
    topic: str | None = None,
    receipt_handle: str = "",
    attempt: int = 0,
    invisible_ms: int = 0,
    message_id: str = "",
) -> d.Message:
    """The v2 Message for a stored record.

    Its body digest is the MD5 of the body as sent, in uppercase hex, like
    RocketMQ's proxy: the clients agree on MD5, not on CRC32 (the Node.js
    client writes a CRC32 in decimal, the Python client in hex, and each takes
    the other form for a corrupted body).
    """
    props = msg.properties
    body, encoding = body_for_clients(msg)
    sp = d.SystemProperties(
        message_id=message_id or msg.uniq_key,
        body_digest=d.Digest(
            type=d.MD5, checksum=hashlib.md5(body, usedforsecurity=False).hexdigest().upper()
        ),
        body_encoding=encoding,
        message_type=received_type(msg),
        born_timestamp=timestamp_pb(msg.born_timestamp_ms),
        born_host=_host_text(msg.born_host, False),
        store_timestamp=timestamp_pb(msg.store_timestamp_ms),
        store_host=_host_text(msg.store_host, True),
        queue_id=msg.queue_id,
        queue_offset=msg.queue_offset,
        keys=msg.keys,
    )
    if msg.tags:
        sp.tag = msg.tags
    if PROPERTY_MESSAGE_GROUP in props:
        sp.message_group = props[PROPERTY_MESSAGE_GROUP]
    deliver = props.get(PROPERTY_TIMER_DELIVER_MS, "")
    if deliver.isdigit():
        sp.delivery_timestamp.CopyFrom(timestamp_pb(int(deliver)))
    if receipt_handle:
        sp.receipt_handle = receipt_handle
        sp.delivery_attempt = attempt
        sp.invisible_duration.CopyFrom(duration_pb(invisible_ms))
    return d.Message(
        topic=d.Resource(name=topic or msg.topic),
        user_properties=user_properties(props),
        system_properties=sp,
        body=body,
    )
