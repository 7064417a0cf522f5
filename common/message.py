"""The stored message: one commit-log record, encoded and decoded.

A record is what the broker appends to the commit log, what a batch carries on
the wire, and what a pull returns, byte for byte. Its layout (drawn, and declared
once as a table of fields) is :mod:`pocketmq.common.record_layout`; this module
builds records (:func:`encode_record`), checks them (:func:`check_record`) and
decodes them (:func:`decode_record`, :func:`iter_records`) with the structs and
positions derived there, and owns the properties string: ``key \\x01 value \\x02``
pairs with RocketMQ's names.
"""

from __future__ import annotations

import ipaddress
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.record_layout import (
    BLANK_HEAD,
    BLANK_MAGIC_CODE,
    FIELD_STRUCT,
    FIXED_SIZE_V4,
    FIXED_V4,
    HEAD,
    HOST_BITS,
    HOST_PORT,
    HOST_V4_SIZE,
    HOST_V6_SIZE,
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH_V1,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    POS_BODYCRC,
    POS_BORNHOST,
    POS_MAGIC,
    POS_PHYSICALOFFSET,
    POS_QUEUEID,
    POS_QUEUEOFFSET,
    POS_SYSFLAG,
    POS_TOTALSIZE,
    PROPS_LEN,
    QUEUE_AND_PHYS_OFFSET,
    TOPIC_LEN,
    TOPIC_LEN_V1,
    SysFlag,
    fixed_part,
    host_positions,
    host_sysflag,
    record_size,
    store_timestamp_pos,
)

__all__ = [
    "BLANK_MAGIC_CODE",
    "HEAD",
    "MESSAGE_MAGIC_CODE",
    "MESSAGE_MAGIC_CODE_V2",
    "HostAddress",
    "StoredMessage",
    "SysFlag",
    "body_crc",
    "decode_properties",
    "decode_record",
    "encode_properties",
    "encode_record",
    "iter_records",
    "pack_host",
    "record_size",
    "unpack_host",
]
# The layout's names that readers have always imported from here: the same objects,
# re-exported (record_layout.py defines them).
__all__ += [
    "BLANK_HEAD",
    "FIXED_SIZE_V4",
    "HOST_V4_SIZE",
    "HOST_V6_SIZE",
    "MAX_PROPERTIES_LENGTH",
    "MAX_TOPIC_LENGTH_V1",
    "POS_BODYCRC",
    "POS_BORNHOST",
    "POS_MAGIC",
    "POS_PHYSICALOFFSET",
    "POS_QUEUEID",
    "POS_QUEUEOFFSET",
    "POS_SYSFLAG",
    "POS_TOTALSIZE",
    "QUEUE_AND_PHYS_OFFSET",
    "fixed_part",
    "host_sysflag",
    "store_timestamp_pos",
]

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

_BODY_LEN = FIELD_STRUCT["BODYLEN"]


def body_crc(body: bytes | memoryview) -> int:
    """CRC stored in BODYCRC: ``zlib.crc32(body) & 0x7FFFFFFF``."""
    return zlib.crc32(body) & 0x7FFFFFFF


HostAddress = tuple[str, int]


@lru_cache(maxsize=1024)
def pack_host(host: HostAddress) -> bytes:
    """Pack ``(ip, port)`` as 4-byte IPv4 or 16-byte IPv6 plus an i32 port."""
    ip, port = host
    packed = ipaddress.ip_address(ip).packed
    return packed + HOST_PORT.pack(port)


def unpack_host(raw: bytes | memoryview) -> HostAddress:
    ip = ipaddress.ip_address(bytes(raw[: -HOST_PORT.size]))
    return (str(ip), HOST_PORT.unpack_from(raw, len(raw) - HOST_PORT.size)[0])


#: an idempotent producer's id, epoch and sequence: always a record's last property
#: (broker/store/producer_state.py)
PROPERTY_IDEMPOTENCE = "PMQ_IDEM"


def encode_properties(properties: Mapping[str, str]) -> str:
    """``k\\x01v\\x02`` pairs with RocketMQ's trailing separator; empty pairs dropped."""
    text = "".join(
        f"{k}\x01{v}\x02" for k, v in properties.items() if k and v and k != PROPERTY_IDEMPOTENCE
    )
    idem = properties.get(PROPERTY_IDEMPOTENCE)
    # an idempotent producer's stamp stays last, where the broker reads it
    return f"{text}{PROPERTY_IDEMPOTENCE}\x01{idem}\x02" if idem else text


def decode_properties(text: str) -> dict[str, str]:
    """Parse the properties string; pairs with an empty key or value are dropped."""
    out: dict[str, str] = {}
    for pair in text.split(PROPERTY_SEPARATOR):
        key, sep, value = pair.partition(NAME_VALUE_SEPARATOR)
        if sep and key and value:
            out[key] = value
    return out


def encode_record(
    *,
    topic: str,
    body: bytes,
    queue_id: int = 0,
    flag: int = 0,
    properties: str | Mapping[str, str] = "",
    sysflag: int = 0,
    born_timestamp_ms: int = 0,
    born_host: bytes = b"\0" * 8,
    store_timestamp_ms: int = 0,
    store_host: bytes = b"\0" * 8,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    queue_offset: int = 0,
    phys_offset: int = 0,
) -> bytes:
    """Build one record in the commit-log layout.

    *born_host* and *store_host* are already packed (see :func:`pack_host`);
    their sizes set the host bits of SYSFLAG. Callers validate limits first;
    this function raises ``ValueError`` only on lengths the layout cannot hold.
    """
    topic_raw = topic.encode()
    if not isinstance(properties, str):
        properties = encode_properties(properties)
    props_raw = properties.encode()
    topic_len = len(topic_raw)
    props_len = len(props_raw)
    if topic_len > MAX_TOPIC_LENGTH_V1:
        raise ValueError(
            f"topic is {topic_len} bytes; a record holds at most {MAX_TOPIC_LENGTH_V1}"
        )
    if props_len > MAX_PROPERTIES_LENGTH:
        raise ValueError(
            f"properties are {props_len} bytes; a record holds at most {MAX_PROPERTIES_LENGTH}"
        )
    born_size, store_size = len(born_host), len(store_host)
    sysflag = sysflag & ~HOST_BITS | host_sysflag(born_host, store_host)
    fixed = (
        FIXED_V4
        if born_size == HOST_V4_SIZE and store_size == HOST_V4_SIZE
        else fixed_part(born_size, store_size)
    )
    body_len = len(body)
    total = fixed.size + body_len + TOPIC_LEN_V1.size + topic_len + PROPS_LEN.size + props_len
    return b"".join(
        (
            fixed.pack(
                total,
                MESSAGE_MAGIC_CODE,
                body_crc(body),
                queue_id,
                flag,
                queue_offset,
                phys_offset,
                sysflag,
                born_timestamp_ms,
                born_host,
                store_timestamp_ms,
                store_host,
                reconsume_times,
                prepared_transaction_offset,
                body_len,
            ),
            body,
            TOPIC_LEN_V1.pack(topic_len) + topic_raw + PROPS_LEN.pack(props_len),
            props_raw,
        )
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredMessage:
    """One decoded record. ``properties`` is the parsed property map."""

    total_size: int
    queue_id: int
    flag: int
    queue_offset: int
    phys_offset: int
    sysflag: int
    born_timestamp_ms: int
    born_host: HostAddress
    store_timestamp_ms: int
    store_host: HostAddress
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str] = field(default_factory=dict)
    body_crc: int = 0

    @property
    def tags(self) -> str:
        return self.properties.get("TAGS", "")

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get("KEYS", "")
        return [k for k in raw.split(" ") if k]

    @property
    def uniq_key(self) -> str:
        return self.properties.get("UNIQ_KEY", "")


@dataclass(frozen=True, slots=True)
class RecordLayout:
    """Where the variable parts of one record lie, as checked by :func:`check_record`."""

    total_size: int
    sysflag: int
    queue_id: int
    body_pos: int
    body_len: int
    topic_pos: int
    topic_len: int
    props_pos: int
    props_len: int


def check_record(
    buf: bytes | bytearray | memoryview, pos: int, limit: int, *, check_crc: bool = True
) -> RecordLayout:
    """Validate the record at *pos* (not BLANK) and return where its parts lie.

    Raises :class:`CorruptRecordError` naming the offset and what is wrong:
    a record shorter than its head, an unknown magic, lengths that disagree
    with TOTALSIZE, or a body CRC mismatch.
    """
    if limit - pos < HEAD.size:
        raise CorruptRecordError(
            pos, f"only {limit - pos} bytes left; a record head is {HEAD.size}"
        )
    total, magic, crc, queue_id, _flag, _qo, _po, sysflag, _born = HEAD.unpack_from(buf, pos)
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        raise CorruptRecordError(
            pos, f"magic code is 0x{magic:08X}, expected 0x{MESSAGE_MAGIC_CODE:08X}"
        )
    if total < HEAD.size or total > limit - pos:
        raise CorruptRecordError(pos, f"TOTALSIZE is {total}; {limit - pos} bytes are left")
    at = host_positions(sysflag)
    end = pos + total
    body_len = _BODY_LEN.unpack_from(buf, pos + at.body_len)[0]
    body_pos = pos + at.body
    if body_len < 0 or body_pos + body_len > end:
        raise CorruptRecordError(pos, f"BODYLEN {body_len} does not fit TOTALSIZE {total}")
    p = body_pos + body_len
    topic_len_field = TOPIC_LEN[magic]
    if p + topic_len_field.size > end:
        raise CorruptRecordError(pos, f"topic length lies past TOTALSIZE {total}")
    topic_len = topic_len_field.unpack_from(buf, p)[0]
    topic_pos = p + topic_len_field.size
    p = topic_pos + topic_len
    if p + PROPS_LEN.size > end:
        raise CorruptRecordError(pos, f"properties length lies past TOTALSIZE {total}")
    props_len = PROPS_LEN.unpack_from(buf, p)[0]
    props_pos = p + PROPS_LEN.size
    if props_pos + props_len != end:
        raise CorruptRecordError(
            pos, f"TOTALSIZE is {total} but the parts add up to {props_pos + props_len - pos}"
        )
    if check_crc:
        actual = body_crc(memoryview(buf)[body_pos : body_pos + body_len])
        if actual != crc:
            raise CorruptRecordError(pos, f"body CRC is {actual}, the record says {crc}")
    return RecordLayout(
        total, sysflag, queue_id, body_pos, body_len, topic_pos, topic_len, props_pos, props_len
    )


def decode_record(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    check_crc: bool = True,
    limit: int | None = None,
) -> StoredMessage:
    """Decode the record at *pos*; raises :class:`CorruptRecordError` if it is damaged."""
    limit = len(buf) if limit is None else limit
    lay = check_record(buf, pos, limit, check_crc=check_crc)
    (
        total,
        _magic,
        crc,
        queue_id,
        flag,
        queue_offset,
        phys_offset,
        sysflag,
        born_ts,
        born_host,
        store_ts,
        store_host,
        reconsume,
        prepared,
        _body_len,
    ) = host_positions(lay.sysflag).fixed.unpack_from(buf, pos)
    mv = memoryview(buf)
    return StoredMessage(
        total_size=total,
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        phys_offset=phys_offset,
        sysflag=sysflag,
        born_timestamp_ms=born_ts,
        born_host=unpack_host(born_host),
        store_timestamp_ms=store_ts,
        store_host=unpack_host(store_host),
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        body=bytes(mv[lay.body_pos : lay.body_pos + lay.body_len]),
        topic=bytes(mv[lay.topic_pos : lay.topic_pos + lay.topic_len]).decode("utf-8", "replace"),
        properties=decode_properties(
            bytes(mv[lay.props_pos : lay.props_pos + lay.props_len]).decode("utf-8", "replace")
        ),
        body_crc=crc,
    )


def iter_records(
    buf: bytes | bytearray | memoryview, *, check_crc: bool = True
) -> Iterator[StoredMessage]:
    """Decode concatenated records (a pull reply or a batch); BLANK records are skipped."""
    pos, end = 0, len(buf)
    while pos < end:
        if end - pos >= BLANK_HEAD.size:
            total, magic = BLANK_HEAD.unpack_from(buf, pos)
            if magic == BLANK_MAGIC_CODE and total > 0:
                pos += total
                continue
        msg = decode_record(buf, pos, check_crc=check_crc, limit=end)
        yield msg
        pos += msg.total_size
