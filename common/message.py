"""The stored message layout: one commit-log record, encoded and decoded.

A record is what the broker appends to the commit log, what a batch carries on
the wire, and what a pull returns, byte for byte. All integers big-endian::

    offset  size  field
    ------  ----  -------------------------------------------------------
         0     4  TOTALSIZE        whole record, this field included
         4     4  MAGICCODE        0xDAA320A7 (V1: 1-byte topic length)
                                   0xDAA320AB (V2: 2-byte topic length)
         8     4  BODYCRC          zlib.crc32(body) & 0x7FFFFFFF
        12     4  QUEUEID
        16     4  FLAG             user flag, opaque
        20     8  QUEUEOFFSET      logical offset in the consume queue  (broker)
        28     8  PHYSICALOFFSET   byte position in the commit log      (broker)
        36     4  SYSFLAG          bits below
        40     8  BORNTIMESTAMP    ms
        48   8|20 BORNHOST         IPv4 4 + port i32 | IPv6 16 + port i32
     48+B     8  STORETIMESTAMP   ms                                    (broker)
     56+B  8|20 STOREHOST        as BORNHOST                            (broker)
    56+B+S    4  RECONSUMETIMES
    60+B+S    8  PREPAREDTRANSACTIONOFFSET
    68+B+S    4  BODYLEN, then BODY
         .  1|2  TOPICLEN, then TOPIC (UTF-8)
         .    2  PROPLEN,  then PROPERTIES: "k\\x01v\\x02" pairs (UTF-8)

B and S are the born and store host sizes (8 or 20). With IPv4 hosts the fixed
part is 91 bytes. A segment's unusable tail is a BLANK record: TOTALSIZE =
bytes left in the segment, MAGICCODE = 0xCBD43194, nothing else meaningful.

Fields marked (broker) are patched in place when the record is stored; the
rest is written once by the producer.
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from pocketmq.common.errors import CorruptRecordError

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

MESSAGE_MAGIC_CODE = 0xDAA320A7
MESSAGE_MAGIC_CODE_V2 = 0xDAA320AB
BLANK_MAGIC_CODE = 0xCBD43194

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


class SysFlag:
    """Bits of the SYSFLAG field (RocketMQ's ``MessageSysFlag``)."""

    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_MASK = 0xC
    TRANSACTION_NOT_TYPE = 0x0
    TRANSACTION_PREPARED = 0x4
    TRANSACTION_COMMIT = 0x8
    TRANSACTION_ROLLBACK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20

    @staticmethod
    def transaction_type(sysflag: int) -> int:
        return sysflag & SysFlag.TRANSACTION_MASK


# Fixed head, TOTALSIZE .. BORNTIMESTAMP.
HEAD = struct.Struct(">iIiiiqqiq")
#                     │││││││││
#    TOTALSIZE ───────┘││││││││
#    MAGICCODE ────────┘│││││││
#    BODYCRC ───────────┘││││││
#    QUEUEID ────────────┘│││││
#    FLAG ────────────────┘││││
#    QUEUEOFFSET ──────────┘│││
#    PHYSICALOFFSET ────────┘││
#    SYSFLAG ────────────────┘│
#    BORNTIMESTAMP ───────────┘
POS_TOTALSIZE = 0
POS_MAGIC = 4
POS_BODYCRC = 8
POS_QUEUEID = 12
POS_QUEUEOFFSET = 20
POS_PHYSICALOFFSET = 28
POS_SYSFLAG = 36
POS_BORNHOST = HEAD.size  # 48

_I32 = struct.Struct(">i")
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_I64 = struct.Struct(">q")
QUEUE_AND_PHYS_OFFSET = struct.Struct(">qq")  # QUEUEOFFSET, PHYSICALOFFSET (adjacent)
_TAIL_AFTER_STOREHOST = struct.Struct(">iqi")  # RECONSUMETIMES, PREPARED.., BODYLEN
BLANK_HEAD = struct.Struct(">iI")  # TOTALSIZE, MAGICCODE of a BLANK record

HOST_V4_SIZE = 8
HOST_V6_SIZE = 20
MAX_TOPIC_LENGTH_V1 = 127
MAX_PROPERTIES_LENGTH = 32767


def body_crc(body: bytes | memoryview) -> int:
    """CRC stored in BODYCRC: ``zlib.crc32(body) & 0x7FFFFFFF``."""
    return zlib.crc32(body) & 0x7FFFFFFF


HostAddress = tuple[str, int]


@lru_cache(maxsize=1024)
def pack_host(host: HostAddress) -> bytes:
    """Pack ``(ip, port)`` as 4-byte IPv4 or 16-byte IPv6 plus an i32 port."""
    ip, port = host
    packed = ipaddress.ip_address(ip).packed
    return packed + _I32.pack(port)


def unpack_host(raw: bytes | memoryview) -> HostAddress:
    ip = ipaddress.ip_address(bytes(raw[:-4]))
    return (str(ip), _I32.unpack_from(raw, len(raw) - 4)[0])


def host_sysflag(born_host: bytes, store_host: bytes) -> int:
    """Sysflag bits telling a decoder the size of the two host fields."""
    flags = 0
    if len(born_host) == HOST_V6_SIZE:
        flags |= SysFlag.BORNHOST_V6
    if len(store_host) == HOST_V6_SIZE:
        flags |= SysFlag.STOREHOST_V6
    return flags


def host_sizes(sysflag: int) -> tuple[int, int]:
    born = HOST_V6_SIZE if sysflag & SysFlag.BORNHOST_V6 else HOST_V4_SIZE
    store = HOST_V6_SIZE if sysflag & SysFlag.STOREHOST_V6 else HOST_V4_SIZE
    return born, store


def record_size(
    body_len: int,
    topic_len: int,
    props_len: int,
    *,
    born_host_size: int = HOST_V4_SIZE,
    store_host_size: int = HOST_V4_SIZE,
    magic: int = MESSAGE_MAGIC_CODE,
) -> int:
    """TOTALSIZE of a record with these variable parts (RocketMQ's calMsgLength)."""
    topic_len_size = 2 if magic == MESSAGE_MAGIC_CODE_V2 else 1
    return (
        HEAD.size
        + born_host_size
        + 8
        + store_host_size
        + _TAIL_AFTER_STOREHOST.size
        + body_len
        + topic_len_size
        + topic_len
        + 2
        + props_len
    )


def store_timestamp_pos(sysflag: int) -> int:
    """Offset of STORETIMESTAMP inside a record (STOREHOST follows it)."""
    return POS_BORNHOST + (HOST_V6_SIZE if sysflag & SysFlag.BORNHOST_V6 else HOST_V4_SIZE)


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


@lru_cache(maxsize=16)
def fixed_part(born_host_size: int, store_host_size: int) -> struct.Struct:
    """TOTALSIZE .. BODYLEN in one struct, for hosts of these sizes (8 or 20).

    HEAD, BORNHOST, STORETIMESTAMP, STOREHOST, then RECONSUMETIMES,
    PREPAREDTRANSACTIONOFFSET and BODYLEN: everything before BODY, so that an
    encoder packs it with one call instead of six.
    """
    return struct.Struct(
        f"{HEAD.format}{born_host_size}sq{store_host_size}s{_TAIL_AFTER_STOREHOST.format[1:]}"
    )


_FIXED_V4 = fixed_part(HOST_V4_SIZE, HOST_V4_SIZE)
_HOST_BITS = SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6
_TOPIC_LEN_SIZE_V1 = 1
_PROPS_LEN_SIZE = _U16.size
# TOTALSIZE with IPv4 hosts, less the variable parts: 91 bytes (see the table above).
FIXED_SIZE_V4 = _FIXED_V4.size + _TOPIC_LEN_SIZE_V1 + _PROPS_LEN_SIZE


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
    sysflag &= ~_HOST_BITS
    if born_size == HOST_V6_SIZE:
        sysflag |= SysFlag.BORNHOST_V6
    if store_size == HOST_V6_SIZE:
        sysflag |= SysFlag.STOREHOST_V6
    fixed = (
        _FIXED_V4
        if born_size == HOST_V4_SIZE and store_size == HOST_V4_SIZE
        else fixed_part(born_size, store_size)
    )
    body_len = len(body)
    total = fixed.size + body_len + _TOPIC_LEN_SIZE_V1 + topic_len + _PROPS_LEN_SIZE + props_len
    return b"".join(
        (
            fixed.pack(
                total,
                MESSAGE_MAGIC_CODE,
                zlib.crc32(body) & 0x7FFFFFFF,
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
            topic_len.to_bytes(1, "big") + topic_raw + props_len.to_bytes(2, "big"),
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
    born_size, store_size = host_sizes(sysflag)
    p = pos + POS_BORNHOST + born_size + 8 + store_size + 12
    body_len = _I32.unpack_from(buf, p)[0]
    end = pos + total
    if body_len < 0 or p + 4 + body_len > end:
        raise CorruptRecordError(pos, f"BODYLEN {body_len} does not fit TOTALSIZE {total}")
    body_pos = p + 4
    p = body_pos + body_len
    if magic == MESSAGE_MAGIC_CODE:
        if p + 1 > end:
            raise CorruptRecordError(pos, f"topic length lies past TOTALSIZE {total}")
        topic_len = buf[p]
        topic_pos = p + 1
    else:
        if p + 2 > end:
            raise CorruptRecordError(pos, f"topic length lies past TOTALSIZE {total}")
        topic_len = _U16.unpack_from(buf, p)[0]
        topic_pos = p + 2
    p = topic_pos + topic_len
    if p + 2 > end:
        raise CorruptRecordError(pos, f"properties length lies past TOTALSIZE {total}")
    props_len = _U16.unpack_from(buf, p)[0]
    props_pos = p + 2
    if props_pos + props_len != end:
        raise CorruptRecordError(
            pos, f"TOTALSIZE is {total} but the parts add up to {props_pos + props_len - pos}"
        )
    if check_crc:
        actual = zlib.crc32(memoryview(buf)[body_pos : body_pos + body_len]) & 0x7FFFFFFF
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
    total, _magic, crc, queue_id, flag, queue_offset, phys_offset, sysflag, born_ts = (
        HEAD.unpack_from(buf, pos)
    )
    born_size, store_size = host_sizes(sysflag)
    p = pos + POS_BORNHOST
    born_host = unpack_host(bytes(buf[p : p + born_size]))
    p += born_size
    store_ts = _I64.unpack_from(buf, p)[0]
    p += 8
    store_host = unpack_host(bytes(buf[p : p + store_size]))
    p += store_size
    reconsume, prepared, _body_len = _TAIL_AFTER_STOREHOST.unpack_from(buf, p)
    mv = memoryview(buf)
    return StoredMessage(
        total_size=total,
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        phys_offset=phys_offset,
        sysflag=sysflag,
        born_timestamp_ms=born_ts,
        born_host=born_host,
        store_timestamp_ms=store_ts,
        store_host=store_host,
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
