"""The commit-log record layout, declared once: every offset and size derives from here.

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
        36     4  SYSFLAG          bits in SysFlag
        40     8  BORNTIMESTAMP    ms
        48   8|20 BORNHOST         IPv4 4 + port i32 | IPv6 16 + port i32
      48+B     8  STORETIMESTAMP   ms                                    (broker)
      56+B  8|20  STOREHOST        as BORNHOST                           (broker)
    56+B+S     4  RECONSUMETIMES
    60+B+S     8  PREPAREDTRANSACTIONOFFSET
    68+B+S     4  BODYLEN, then BODY
         .   1|2  TOPICLEN, then TOPIC (UTF-8)
         .     2  PROPLEN,  then PROPERTIES: "k\\x01v\\x02" pairs (UTF-8)

B and S are the born and store host sizes (8 or 20; SYSFLAG's ``BORNHOST_V6`` and
``STOREHOST_V6`` bits say which). With IPv4 hosts the fixed part is 91 bytes. A
segment's unusable tail is a BLANK record: TOTALSIZE = bytes left in the segment,
MAGICCODE = 0xCBD43194, nothing else meaningful. Fields marked (broker) are patched
in place when the record is stored; the rest is written once by the producer.

The fields up to BODYLEN are declared once, in :data:`FIXED_FIELDS`, as struct
codes; the structs and positions below are computed from that table with
``struct.calcsize``, never typed. ``tests/unit/test_record_layout.py`` checks the
drawing above against the table and the ``#define`` blocks of the C accelerators
(``broker/store/_speedups.c``, ``client/_codec.c``, ``spark/_arrowcodec.c``)
against this module.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

__all__ = [
    "BLANK_HEAD",
    "BLANK_MAGIC_CODE",
    "FIELD_STRUCT",
    "FIXED_FIELDS",
    "FIXED_SIZE_V4",
    "FIXED_V4",
    "HEAD",
    "HOST_BITS",
    "HOST_PORT",
    "HOST_V4_SIZE",
    "HOST_V6_SIZE",
    "MAX_PROPERTIES_LENGTH",
    "MAX_TOPIC_LENGTH_V1",
    "MESSAGE_MAGIC_CODE",
    "MESSAGE_MAGIC_CODE_V2",
    "POS_BODYCRC",
    "POS_BORNHOST",
    "POS_BORNTIMESTAMP",
    "POS_FLAG",
    "POS_MAGIC",
    "POS_PHYSICALOFFSET",
    "POS_QUEUEID",
    "POS_QUEUEOFFSET",
    "POS_SYSFLAG",
    "POS_TOTALSIZE",
    "PROPS_LEN",
    "QUEUE_AND_PHYS_OFFSET",
    "STORE_TIMESTAMP",
    "TAIL_AFTER_STOREHOST",
    "TOPIC_LEN",
    "TOPIC_LEN_V1",
    "TOPIC_LEN_V2",
    "Field",
    "HostPositions",
    "SysFlag",
    "field_offset",
    "fixed_part",
    "host_positions",
    "host_sysflag",
    "record_size",
    "store_timestamp_pos",
]

MESSAGE_MAGIC_CODE: Final = 0xDAA320A7
MESSAGE_MAGIC_CODE_V2: Final = 0xDAA320AB
BLANK_MAGIC_CODE: Final = 0xCBD43194


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


#: a host field's struct code: the packed IP, then the port as i32
HOST = "host"
#: the port that ends a host field, after the packed IP
HOST_PORT: Final = struct.Struct(">i")
HOST_V4_SIZE: Final = 4 + HOST_PORT.size  # IPv4: 8
HOST_V6_SIZE: Final = 16 + HOST_PORT.size  # IPv6: 20
#: the SYSFLAG bits that say the host sizes
HOST_BITS: Final = SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6


@dataclass(frozen=True, slots=True)
class Field:
    """One field of the fixed part: its name as RocketMQ spells it and its struct code."""

    name: str
    code: str  # a struct code, or HOST (8 or 20 bytes, see SysFlag)


#: TOTALSIZE .. BODYLEN: everything before BODY, in record order.
FIXED_FIELDS: Final = (
    Field("TOTALSIZE", "i"),
    Field("MAGICCODE", "I"),
    Field("BODYCRC", "i"),
    Field("QUEUEID", "i"),
    Field("FLAG", "i"),
    Field("QUEUEOFFSET", "q"),
    Field("PHYSICALOFFSET", "q"),
    Field("SYSFLAG", "i"),
    Field("BORNTIMESTAMP", "q"),
    Field("BORNHOST", HOST),
    Field("STORETIMESTAMP", "q"),
    Field("STOREHOST", HOST),
    Field("RECONSUMETIMES", "i"),
    Field("PREPAREDTRANSACTIONOFFSET", "q"),
    Field("BODYLEN", "i"),
)
_NAMES = [f.name for f in FIXED_FIELDS]
#: the struct of each field that is a number, by name
FIELD_STRUCT: Final = {f.name: struct.Struct(f">{f.code}") for f in FIXED_FIELDS if f.code != HOST}
#: TOPICLEN by MAGICCODE (V1: u8, V2: u16); PROPLEN is u16
TOPIC_LEN_V1: Final = struct.Struct(">B")
TOPIC_LEN_V2: Final = struct.Struct(">H")
TOPIC_LEN: Final = {MESSAGE_MAGIC_CODE: TOPIC_LEN_V1, MESSAGE_MAGIC_CODE_V2: TOPIC_LEN_V2}
PROPS_LEN: Final = struct.Struct(">H")
# Java writes both lengths as signed numbers: a byte and a short.
MAX_TOPIC_LENGTH_V1: Final = (1 << (8 * TOPIC_LEN_V1.size - 1)) - 1  # 127
MAX_PROPERTIES_LENGTH: Final = (1 << (8 * PROPS_LEN.size - 1)) - 1  # 32767


def _format(
    first: str, last: str, born_size: int = HOST_V4_SIZE, store_size: int = HOST_V4_SIZE
) -> str:
    """The struct format of the fields *first* .. *last*, hosts as byte strings."""
    sizes = {"BORNHOST": born_size, "STOREHOST": store_size}
    fields = FIXED_FIELDS[_NAMES.index(first) : _NAMES.index(last) + 1]
    return ">" + "".join(f"{sizes[f.name]}s" if f.code == HOST else f.code for f in fields)


def field_offset(name: str, born_size: int = HOST_V4_SIZE, store_size: int = HOST_V4_SIZE) -> int:
    """Offset of field *name* in a record whose hosts have these sizes."""
    i = _NAMES.index(name)
    return (
        0 if i == 0 else struct.calcsize(_format("TOTALSIZE", _NAMES[i - 1], born_size, store_size))
    )


#: TOTALSIZE .. BORNTIMESTAMP: the part every record has at the same offsets
HEAD: Final = struct.Struct(_format("TOTALSIZE", "BORNTIMESTAMP"))
POS_TOTALSIZE: Final = field_offset("TOTALSIZE")
POS_MAGIC: Final = field_offset("MAGICCODE")
POS_BODYCRC: Final = field_offset("BODYCRC")
POS_QUEUEID: Final = field_offset("QUEUEID")
POS_FLAG: Final = field_offset("FLAG")
POS_QUEUEOFFSET: Final = field_offset("QUEUEOFFSET")
POS_PHYSICALOFFSET: Final = field_offset("PHYSICALOFFSET")
POS_SYSFLAG: Final = field_offset("SYSFLAG")
POS_BORNTIMESTAMP: Final = field_offset("BORNTIMESTAMP")
POS_BORNHOST: Final = field_offset("BORNHOST")  # == HEAD.size

#: TOTALSIZE, MAGICCODE: all a BLANK record has
BLANK_HEAD: Final = struct.Struct(_format("TOTALSIZE", "MAGICCODE"))
#: QUEUEOFFSET, PHYSICALOFFSET: adjacent, patched together
QUEUE_AND_PHYS_OFFSET: Final = struct.Struct(_format("QUEUEOFFSET", "PHYSICALOFFSET"))
STORE_TIMESTAMP: Final = FIELD_STRUCT["STORETIMESTAMP"]
#: RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET, BODYLEN: after STOREHOST, before BODY
TAIL_AFTER_STOREHOST: Final = struct.Struct(_format("RECONSUMETIMES", "BODYLEN"))


@lru_cache(maxsize=16)
def fixed_part(born_host_size: int, store_host_size: int) -> struct.Struct:
    """TOTALSIZE .. BODYLEN in one struct, for hosts of these sizes (8 or 20): everything
    before BODY, so an encoder packs it (and a decoder unpacks it) with one call."""
    return struct.Struct(_format("TOTALSIZE", "BODYLEN", born_host_size, store_host_size))


FIXED_V4: Final = fixed_part(HOST_V4_SIZE, HOST_V4_SIZE)
#: TOTALSIZE with IPv4 hosts, less the variable parts (BODY, TOPIC, PROPERTIES): 91
FIXED_SIZE_V4: Final = FIXED_V4.size + TOPIC_LEN_V1.size + PROPS_LEN.size


@dataclass(frozen=True, slots=True)
class HostPositions:
    """Offsets in a record of the fields that move with the host sizes, and its fixed part."""

    born_host_size: int
    store_host_size: int
    store_timestamp: int
    store_host: int
    reconsume_times: int  # TAIL_AFTER_STOREHOST starts here
    body_len: int
    body: int  # one past BODYLEN: where BODY starts
    fixed: struct.Struct  # TOTALSIZE .. BODYLEN


def _host_positions(born: int, store: int) -> HostPositions:
    fixed = fixed_part(born, store)
    return HostPositions(
        born_host_size=born,
        store_host_size=store,
        store_timestamp=field_offset("STORETIMESTAMP", born, store),
        store_host=field_offset("STOREHOST", born, store),
        reconsume_times=field_offset("RECONSUMETIMES", born, store),
        body_len=field_offset("BODYLEN", born, store),
        body=fixed.size,
        fixed=fixed,
    )


def host_sysflag(born_host: bytes, store_host: bytes) -> int:
    """Sysflag bits telling a decoder the size of the two (packed) host fields."""
    flags = 0
    if len(born_host) == HOST_V6_SIZE:
        flags |= SysFlag.BORNHOST_V6
    if len(store_host) == HOST_V6_SIZE:
        flags |= SysFlag.STOREHOST_V6
    return flags


_POSITIONS = {
    host_sysflag(b"\0" * born, b"\0" * store): _host_positions(born, store)
    for born in (HOST_V4_SIZE, HOST_V6_SIZE)
    for store in (HOST_V4_SIZE, HOST_V6_SIZE)
}


def host_positions(sysflag: int) -> HostPositions:
    """Where the fields after BORNHOST lie in a record with this SYSFLAG."""
    return _POSITIONS[sysflag & HOST_BITS]


def store_timestamp_pos(sysflag: int) -> int:
    """Offset of STORETIMESTAMP inside a record (STOREHOST follows it)."""
    return _POSITIONS[sysflag & HOST_BITS].store_timestamp


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
    return (
        fixed_part(born_host_size, store_host_size).size
        + body_len
        + (TOPIC_LEN_V2 if magic == MESSAGE_MAGIC_CODE_V2 else TOPIC_LEN_V1).size
        + topic_len
        + PROPS_LEN.size
        + props_len
    )
