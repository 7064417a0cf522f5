"""Commit-log records to Arrow record batches and Arrow columns to records, without a
Python object per row.

Both readers (a pull reply, a mapped commit-log segment) call
:func:`decode_block`; the sink calls :func:`encode_chunks`. Each exists twice,
as :mod:`pocketmq.broker.store.speedups` does for the store: compiled in
``_arrowcodec.c`` (an optional extension, built by ``pip install`` when a C
compiler and zlib's headers are there), and as a pure-Python reference built
on the SDK's own codec (``decode_messages`` + :func:`.schema.record_batch`,
``encode_message``), which defines the result and is used when the extension
is missing, stale, or ``POCKETMQ_NO_SPEEDUPS=1`` is set.
``tests/spark/test_arrowcodec.py`` checks that both agree::

    decode_block(buf, pos, limit)            records -> Arrow buffers -> RecordBatch
        topic, body, tags, msg_id            int32 offsets + UTF-8/bytes data (+ validity)
        queue_id, queue_offset, timestamps   fixed-width little-endian values
        keys (list), properties (map)        offsets of offsets, then the strings
    encode_chunks(columns, rows)             Arrow C data interface -> SendBatch blobs

*buf* is one buffer (a mapped segment, a reply's records) or a list of them
(the replies of several pulls), read as their concatenation without making it:
``pos``, ``limit`` and ``stop_pos`` count bytes of the concatenation, and a
record must lie within one buffer. A block stops (:class:`Stop`) at ``limit``,
when ``max_rows`` rows or ``max_bytes`` body bytes are decoded (``FULL``: call again from
``stop_pos``), at the end of a segment's records (``END``: a BLANK record or
zeros, segment mode only), or at a damaged record (``DAMAGED``, with the
reason; the rows before it are in the batch).
"""

from __future__ import annotations

import enum
import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final

import pyarrow as pa

from pocketmq.client import (
    InvalidMessageError,
    Message,
    MessageExt,
    check_message,
    decode_messages,
    encode_message,
    stamp,
)
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.extensions import load_extension
from pocketmq.common.message import (
    BLANK_MAGIC_CODE,
    HEAD,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
)
from pocketmq.common.record_layout import POS_FLAG, POS_MAGIC, POS_QUEUEID
from pocketmq.spark.schema import ARROW_SCHEMA, record_batch

__all__ = [
    "IMPLEMENTATION",
    "MODE_DISPATCHED",
    "MODE_SEGMENT",
    "NATIVE",
    "Block",
    "Stop",
    "decode_block",
    "encode_chunks",
    "py_decode_block",
    "py_encode_chunks",
    "py_record_starts",
    "py_set_queue_id",
    "record_starts",
    "set_queue_id",
]

log = logging.getLogger(__name__)

_EXPECTED_VERSION: Final = 4
MAX_QUEUE_OFFSET: Final = 2**63 - 1
_MAX_TIMESTAMP_MS: Final = (2**63 - 1) // 1000  # what fits Arrow's timestamp[us]

MODE_SEGMENT: Final = 1  # a segment: BLANK or zeros end it; PHYSICALOFFSET is checked
MODE_DISPATCHED: Final = 2  # leave out prepared and rolled-back transaction records


class Stop(enum.IntEnum):
    LIMIT = 0  # every byte up to limit was decoded
    FULL = 1  # max_rows or max_bytes reached; more may follow from stop_pos
    END = 2  # a BLANK record or zeros: the segment's records end (segment mode)
    DAMAGED = 3  # the record at stop_pos is damaged (reason)


@dataclass(frozen=True, slots=True)
class Block:
    """What one :func:`decode_block` call decoded, and where and why it stopped."""

    batch: pa.RecordBatch
    stop_pos: int
    stop: Stop
    reason: str


TopicFilter = Callable[[bytes], bool]


def _load() -> tuple[ModuleType | None, str]:
    return load_extension("pocketmq.spark._arrowcodec", _EXPECTED_VERSION)


#: The compiled module in use, or None when the pure-Python references run.
NATIVE, _REASON = _load()
#: ``"c"`` or ``"python"``.
IMPLEMENTATION: Final[str] = "c" if NATIVE is not None else "python"
log.debug("spark arrow codec: %s (%s)", IMPLEMENTATION, _REASON)

_TYPES = {f.name: f.type for f in ARROW_SCHEMA}
_KEYS_TYPE: pa.ListType = _TYPES["keys"]
_PROPS_TYPE: pa.MapType = _TYPES["properties"]
_ENTRY_FIELDS = [_PROPS_TYPE.key_field, _PROPS_TYPE.item_field]
_TS_TYPE = _TYPES["store_timestamp"]
_STRING = pa.string()


# -- decoding ---------------------------------------------------------------------------------
def _strings(
    n: int,
    offsets: bytes,
    data: bytes,
    validity: bytes | None = None,
    null_count: int = 0,
    kind: pa.DataType = _STRING,
) -> pa.Array:
    return pa.Array.from_buffers(
        kind,
        n,
        [
            None if validity is None else pa.py_buffer(validity),
            pa.py_buffer(offsets),
            pa.py_buffer(data),
        ],
        null_count=null_count,
    )


def _assemble(
    n: int,
    b: tuple[bytes, ...],
    tags_valid: bytes | None,
    msg_id_valid: bytes | None,
    broker: str | None,
) -> pa.RecordBatch:
    (
        topic_o,
        topic_d,
        queue_id,
        queue_offset,
        body_o,
        body_d,
        key_lists,
        key_o,
        key_d,
        tags_o,
        tags_d,
        prop_lists,
        pk_o,
        pk_d,
        pv_o,
        pv_d,
        store_us,
        born_us,
        mid_o,
        mid_d,
    ) = b
    n_keys = len(key_o) // 4 - 1
    n_props = len(pk_o) // 4 - 1
    keys = pa.Array.from_buffers(
        _KEYS_TYPE, n, [None, pa.py_buffer(key_lists)], children=[_strings(n_keys, key_o, key_d)]
    )
    entries = pa.StructArray.from_arrays(
        [_strings(n_props, pk_o, pk_d), _strings(n_props, pv_o, pv_d)], fields=_ENTRY_FIELDS
    )
    props = pa.Array.from_buffers(
        _PROPS_TYPE, n, [None, pa.py_buffer(prop_lists)], children=[entries]
    )
    tags_nulls = n - _count_bits(tags_valid, n) if tags_valid is not None else 0
    mid_nulls = n - _count_bits(msg_id_valid, n) if msg_id_valid is not None else 0
    columns = [
        _strings(n, topic_o, topic_d),
        pa.nulls(n, pa.string())
        if broker is None
        else pa.repeat(pa.scalar(broker, pa.string()), n),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(queue_id)]),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(queue_offset)]),
        _strings(n, body_o, body_d, kind=pa.binary()),
        keys,
        _strings(n, tags_o, tags_d, tags_valid, tags_nulls),
        props,
        pa.Array.from_buffers(_TS_TYPE, n, [None, pa.py_buffer(store_us)]),
        pa.Array.from_buffers(_TS_TYPE, n, [None, pa.py_buffer(born_us)]),
        _strings(n, mid_o, mid_d, msg_id_valid, mid_nulls),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def _count_bits(bitmap: bytes, n: int) -> int:
    full, rest = divmod(n, 8)
    count = int.from_bytes(bitmap[:full], "little").bit_count()
    if rest:
        count += (bitmap[full] & ((1 << rest) - 1)).bit_count()
    return count


def _native_decode_block(
    buf: Any,
    pos: int,
    limit: int,
    *,
    broker: str | None,
    end_pos: int | None = None,
    mode: int = 0,
    base_phys: int = 0,
    max_queue_offset: int = MAX_QUEUE_OFFSET,
    check_crc: bool = False,
    max_rows: int = 8192,
    max_bytes: int = 64 << 20,
    topic_filter: TopicFilter | None = None,
) -> Block:
    assert NATIVE is not None
    n, stop_pos, stop, reason, buffers, tags_valid, mid_valid = NATIVE.decode_block(
        buf,
        pos,
        limit,
        limit if end_pos is None else end_pos,
        mode,
        base_phys,
        max_queue_offset,
        check_crc,
        max_rows,
        max_bytes,
        topic_filter,
    )
    return Block(_assemble(n, buffers, tags_valid, mid_valid, broker), stop_pos, Stop(stop), reason)


def py_decode_block(
    buf: Any,
    pos: int,
    limit: int,
    *,
    broker: str | None,
    end_pos: int | None = None,
    mode: int = 0,
    base_phys: int = 0,
    max_queue_offset: int = MAX_QUEUE_OFFSET,
    check_crc: bool = False,
    max_rows: int = 8192,
    max_bytes: int = 64 << 20,
    topic_filter: TopicFilter | None = None,
) -> Block:
    """The reference: each record decoded by the SDK, the rows built by ``record_batch``."""
    view = memoryview(b"".join(buf) if isinstance(buf, list) else buf)
    limit = min(limit, len(view))
    messages: list[MessageExt] = []
    body_bytes = 0
    stop, reason = Stop.LIMIT, ""
    cache: dict[str, bool] = {}
    segment = bool(mode & MODE_SEGMENT)
    end_pos = limit if end_pos is None else end_pos
    while pos < limit and pos < end_pos:
        if len(messages) >= max(max_rows, 1) or body_bytes >= max_bytes:
            stop = Stop.FULL
            break
        left = limit - pos
        if left < HEAD.size:
            if segment:
                stop = Stop.END
                break
            stop, reason = Stop.DAMAGED, f"{left} bytes left; a record head is {HEAD.size}"
            break
        total, magic, _crc, _qid, _flag, _qo, phys, sysflag, _born = HEAD.unpack_from(view, pos)
        if magic == BLANK_MAGIC_CODE and (segment or total > 0):
            if segment:
                stop = Stop.END
                break
            pos += total
            continue
        if segment and total == 0 and magic == 0:
            stop = Stop.END
            break
        if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
            stop, reason = Stop.DAMAGED, f"magic code is 0x{magic:08X}"
            break
        if total < HEAD.size or total > left:
            stop, reason = Stop.DAMAGED, f"TOTALSIZE is {total}; {left} bytes are left"
            break
        if segment and phys != base_phys + pos:
            stop, reason = Stop.DAMAGED, f"PHYSICALOFFSET says {phys} (unfinished or stale record)"
            break
        try:
            (m,) = decode_messages(view[pos : pos + total], broker or "", check_crc=check_crc)
        except CorruptRecordError as exc:
            stop, reason = Stop.DAMAGED, exc.reason
            break
        except (struct.error, IndexError) as exc:  # the SDK trips on some bad lengths
            stop, reason = Stop.DAMAGED, f"the record does not parse: {exc}"
            break
        if not (
            abs(m.born_timestamp_ms) <= _MAX_TIMESTAMP_MS
            and abs(m.store_timestamp_ms) <= _MAX_TIMESTAMP_MS
        ):
            stop, reason = (
                Stop.DAMAGED,
                (f"a timestamp is out of range ({m.born_timestamp_ms}, {m.store_timestamp_ms} ms)"),
            )
            break
        pos += total
        kind = sysflag & 0xC
        if (mode & MODE_DISPATCHED and kind in (0x4, 0xC)) or m.queue_offset >= max_queue_offset:
            continue
        if topic_filter is not None:
            wanted = cache.get(m.topic)
            if wanted is None:
                wanted = cache[m.topic] = bool(topic_filter(m.topic.encode()))
            if not wanted:
                continue
        messages.append(m)
        body_bytes += len(m.body)
    return Block(record_batch(messages, broker), pos, stop, reason)


def py_record_starts(buf: Any, limit: int, base_phys: int, every: int) -> list[int]:
    """Where a segment's records start, one every *every* bytes or more: 0, then the first
    start at or past each mark, until the records end (BLANK, zeros or damage)."""
    view = memoryview(buf)
    limit = min(limit, len(view))
    out, pos, mark = [0], 0, max(every, 1)
    while limit - pos >= HEAD.size:
        total, magic, _c, _q, _f, _qo, phys, _s, _b = HEAD.unpack_from(view, pos)
        if (
            magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2)
            or total < HEAD.size
            or total > limit - pos
            or phys != base_phys + pos
        ):
            break
        pos += total
        if pos >= mark:
            out.append(pos)
            mark = pos + max(every, 1)
    return out


# -- encoding ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SinkArrays:
    """The sink's columns of one batch, as Arrow arrays (None: the DataFrame has none)."""

    body: pa.Array  # binary or string
    tags: pa.Array | None = None  # string
    keys: pa.Array | None = None  # list<string> or string (space-separated)
    properties: pa.Array | None = None  # map<string, string>


@dataclass(frozen=True, slots=True)
class EncodeSettings:
    """What every record of one encode call shares."""

    topic: str
    born_host: bytes  # packed, 8 (IPv4) or 20 (IPv6) bytes
    born_timestamp_ms: int
    id_prefix: str  # 28 hex digits: IP, pid, random, ms in the month
    compress_over_bytes: int
    max_body_bytes: int
    chunk_rows: int  # records per blob, at most
    chunk_body_bytes: int  # body bytes per blob, at most (one record always fits)
    stamped: bool = False  # idempotent: see :data:`StampedQueueOf`


#: Without stamps the callback of :func:`encode_chunks` takes nothing and returns the next
#: chunk's queue id; with ``stamped`` it takes the rows of the previous chunk (0 for the
#: first) and returns (queue id, producer id, epoch, first sequence): the chunk's records
#: are numbered from there and end in ``PMQ_IDEM=<pid>.<epoch>.<seq>``, as the SDK's
#: idempotent producer stamps them (:func:`pocketmq.client.stamp`).
StampedQueueOf = Callable[[int], tuple[int, int, int, int]]


def _capsule(array: pa.Array | None) -> Any:
    return None if array is None else array.__arrow_c_array__()[1]


def _native_encode_chunks(
    cols: SinkArrays,
    start: int,
    stop: int,
    s: EncodeSettings,
    counter: int,
    next_queue_id: Callable[..., Any],
) -> tuple[list[tuple[bytes, int]], int]:
    assert NATIVE is not None
    keys_is_list = cols.keys is not None and pa.types.is_list(cols.keys.type)
    chunks, counter = NATIVE.encode_chunks(
        _capsule(cols.body),
        _capsule(cols.tags),
        _capsule(cols.keys),
        keys_is_list,
        _capsule(cols.properties),
        start,
        stop,
        s.topic.encode(),
        s.born_host,
        s.born_timestamp_ms,
        s.id_prefix.encode(),
        counter,
        s.compress_over_bytes,
        s.max_body_bytes,
        s.chunk_rows,
        s.chunk_body_bytes,
        next_queue_id,
        s.stamped,
    )
    return chunks, counter


def py_encode_chunks(
    cols: SinkArrays,
    start: int,
    stop: int,
    s: EncodeSettings,
    counter: int,
    next_queue_id: Callable[..., Any],
) -> tuple[list[tuple[bytes, int]], int]:
    """The reference: a :class:`Message` per row, checked and encoded by the SDK."""
    bodies = cols.body.to_pylist()
    tags = cols.tags.to_pylist() if cols.tags is not None else None
    keys = cols.keys.to_pylist() if cols.keys is not None else None
    props = cols.properties.to_pylist() if cols.properties is not None else None
    chunks: list[tuple[bytes, int]] = []
    records: list[bytes] = []
    body_bytes = 0
    queue_id = pid = epoch = seq = 0
    for i in range(start, stop):
        body = bodies[i]
        if body is None:
            raise ValueError(f"row {i}: the body is null; every message needs a body")
        body = body.encode() if isinstance(body, str) else body
        key = keys[i] if keys is not None else None
        msg = Message(
            topic=s.topic,
            body=body,
            tags=(tags[i] if tags is not None else None) or "",
            keys=() if key is None else (key.split(" ") if isinstance(key, str) else tuple(key)),
            properties=dict(props[i]) if props is not None and props[i] else {},
        )
        try:
            if any(k is None for k in msg.keys) or any(v is None for v in msg.properties.values()):
                raise InvalidMessageError("a key or a property value is null")
            check_message(msg, max_body_bytes=s.max_body_bytes, topic_checked=True)
        except InvalidMessageError as exc:
            raise ValueError(f"row {i}: {exc}") from None
        if records and (len(records) >= s.chunk_rows or body_bytes >= s.chunk_body_bytes):
            chunks.append((b"".join(records), len(records)))
            records, body_bytes = [], 0
        if not records:
            if s.stamped:
                queue_id, pid, epoch, seq = next_queue_id(chunks[-1][1] if chunks else 0)
            else:
                queue_id = next_queue_id()
        uniq_key = f"{s.id_prefix}{counter & 0xFFFF:04X}"
        if s.stamped:
            uniq_key = stamp(uniq_key, pid, epoch, seq + len(records))
        records.append(
            encode_message(
                msg,
                queue_id=queue_id,
                uniq_key=uniq_key,
                born_host=s.born_host,
                born_timestamp_ms=s.born_timestamp_ms,
                compress_over_bytes=s.compress_over_bytes,
            )
        )
        counter += 1
        body_bytes += len(body)
    if records:
        chunks.append((b"".join(records), len(records)))
    return chunks, counter


def py_set_queue_id(blob: bytes, queue_id: int) -> bytes:
    """The records of *blob* with QUEUEID *queue_id* (a chunk sent to another queue)."""
    out = bytearray(blob)
    pos = 0
    while pos + POS_FLAG <= len(out):  # QUEUEID ends where FLAG starts
        total = int.from_bytes(out[pos : pos + POS_MAGIC], "big", signed=True)
        if total < HEAD.size or pos + total > len(out):
            raise ValueError(f"record at {pos} has TOTALSIZE {total}")
        out[pos + POS_QUEUEID : pos + POS_FLAG] = queue_id.to_bytes(
            POS_FLAG - POS_QUEUEID, "big", signed=True
        )
        pos += total
    return bytes(out)


decode_block = _native_decode_block if NATIVE is not None else py_decode_block
encode_chunks = _native_encode_chunks if NATIVE is not None else py_encode_chunks
set_queue_id: Callable[[bytes, int], bytes] = (
    NATIVE.set_queue_id if NATIVE is not None else py_set_queue_id
)
record_starts: Callable[[Any, int, int, int], list[int]] = (
    NATIVE.record_starts if NATIVE is not None else py_record_starts
)
