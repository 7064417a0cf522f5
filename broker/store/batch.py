"""Checking a blob of records before it is appended, and what dispatch needs of it.

A batch arrives as records already in the commit-log layout
(:mod:`pocketmq.common.message`). :func:`scan_batch` walks it once, checks
every record (magic, lengths against TOTALSIZE, body CRC, topic name, body and
properties limits, host sizes) and extracts, per record, what the append and the
dispatch need: position, size, topic, queue id, sysflag, tag code, keys. It
never builds a message object: one ``unpack_from`` for the head, one CRC over a
memoryview of the body, one split of the properties.

This is the hottest loop of the broker; it is a pure function so that it can be
tested against a model and replaced by a compiled one without touching callers.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

from pocketmq.common.hashing import tags_code
from pocketmq.common.message import (
    HEAD,
    HOST_V4_SIZE,
    HOST_V6_SIZE,
    MAX_PROPERTIES_LENGTH,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    SysFlag,
)
from pocketmq.common.validation import check_topic

__all__ = ["BatchError", "ScannedBatch", "scan_batch"]

_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")


class BatchError(Exception):
    """A record of the batch is unacceptable; ``kind`` picks the put status."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind  # "illegal" | "properties"


@dataclass(slots=True)
class ScannedBatch:
    """Parallel per-record lists, in blob order."""

    positions: list[int] = field(default_factory=list)     # offset of each record in the blob
    sizes: list[int] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    queue_ids: list[int] = field(default_factory=list)
    sysflags: list[int] = field(default_factory=list)
    store_ts_positions: list[int] = field(default_factory=list)  # STORETIMESTAMP, in-record
    tags_codes: list[int] = field(default_factory=list)
    keys: list[list[str]] = field(default_factory=list)   # KEYS split, UNIQ_KEY last
    uniq_keys: list[str] = field(default_factory=list)
    properties: list[dict[str, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.positions)


_topic_ok: set[bytes] = set()  # topics already checked; names are few, records many


def _check_topic_raw(raw: bytes, offset: int) -> str:
    topic = raw.decode("utf-8", "replace")
    if raw not in _topic_ok:
        problem = check_topic(topic)
        if problem:
            raise BatchError("illegal", f"record at batch offset {offset}: {problem}")
        if len(_topic_ok) < 100_000:
            _topic_ok.add(raw)
    return topic


def scan_batch(blob: bytes | bytearray | memoryview, *, max_body_size: int,
               store_host_size: int = HOST_V4_SIZE) -> ScannedBatch:
    """Check every record of *blob*; raise :class:`BatchError` on the first bad one.

    *store_host_size* is the size of this broker's STOREHOST field (8 for IPv4,
    20 for IPv6); records must reserve exactly that much, since it is patched in
    place.
    """
    mv = memoryview(blob)
    end = len(mv)
    if end == 0:
        raise BatchError("illegal", "the batch holds no records")
    out = ScannedBatch()
    unpack_head = HEAD.unpack_from
    unpack_i32 = _I32.unpack_from
    unpack_u16 = _U16.unpack_from
    crc32 = zlib.crc32
    store_v6 = store_host_size == HOST_V6_SIZE
    pos = 0
    while pos < end:
        if end - pos < HEAD.size:
            raise BatchError("illegal", f"record at batch offset {pos} is cut short: "
                                        f"{end - pos} bytes left, a head is {HEAD.size}")
        total, magic, crc, queue_id, _flag, _qo, _po, sysflag, _born = unpack_head(mv, pos)
        if magic != MESSAGE_MAGIC_CODE and magic != MESSAGE_MAGIC_CODE_V2:
            raise BatchError("illegal", f"record at batch offset {pos} has magic code "
                                        f"0x{magic:08X}; expected 0x{MESSAGE_MAGIC_CODE:08X}")
        if total < HEAD.size or total > end - pos:
            raise BatchError("illegal", f"record at batch offset {pos} has TOTALSIZE {total}, "
                                        f"but {end - pos} bytes are left in the batch")
        if bool(sysflag & SysFlag.STOREHOST_V6) != store_v6:
            raise BatchError("illegal", f"record at batch offset {pos} reserves "
                                        f"{HOST_V6_SIZE if not store_v6 else HOST_V4_SIZE} bytes "
                                        f"for STOREHOST; this broker writes {store_host_size}")
        born_size = HOST_V6_SIZE if sysflag & SysFlag.BORNHOST_V6 else HOST_V4_SIZE
        store_ts_pos = 48 + born_size
        p = pos + store_ts_pos + 8 + store_host_size + 12
        record_end = pos + total
        if p + 4 > record_end:
            raise BatchError("illegal", f"record at batch offset {pos}: TOTALSIZE {total} is "
                                        "smaller than its fixed fields")
        body_len = unpack_i32(mv, p)[0]
        body_pos = p + 4
        p = body_pos + body_len
        if body_len < 0 or p > record_end:
            raise BatchError("illegal", f"record at batch offset {pos}: BODYLEN {body_len} "
                                        f"does not fit TOTALSIZE {total}")
        if body_len > max_body_size:
            raise BatchError("illegal", f"message body is {body_len} bytes; this broker "
                                        f"accepts at most {max_body_size} (max_message_size)")
        if magic == MESSAGE_MAGIC_CODE:
            topic_len = mv[p] if p < record_end else -1
            p += 1
        else:
            topic_len = unpack_u16(mv, p)[0] if p + 2 <= record_end else -1
            p += 2
        if topic_len < 0 or p + topic_len + 2 > record_end:
            raise BatchError("illegal", f"record at batch offset {pos}: topic length "
                                        f"{topic_len} does not fit TOTALSIZE {total}")
        topic = _check_topic_raw(bytes(mv[p:p + topic_len]), pos)
        p += topic_len
        props_len = unpack_u16(mv, p)[0]
        p += 2
        if p + props_len != record_end:
            raise BatchError("illegal", f"record at batch offset {pos}: TOTALSIZE is {total} "
                                        f"but its parts add up to {p + props_len - pos}")
        if props_len > MAX_PROPERTIES_LENGTH:
            raise BatchError("properties", f"properties are {props_len} bytes; at most "
                                           f"{MAX_PROPERTIES_LENGTH} are allowed")
        actual_crc = crc32(mv[body_pos:body_pos + body_len]) & 0x7FFFFFFF
        if actual_crc != crc:
            raise BatchError("illegal", f"record at batch offset {pos}: body CRC is "
                                        f"{actual_crc}, the record says {crc}")
        props = _parse_properties(bytes(mv[p:record_end]), pos)
        tags = props.get("TAGS", "")
        keys = [k for k in props.get("KEYS", "").split(" ") if k]
        uniq = props.get("UNIQ_KEY", "")
        if uniq:
            keys.append(uniq)
        out.positions.append(pos)
        out.sizes.append(total)
        out.topics.append(topic)
        out.queue_ids.append(queue_id)
        out.sysflags.append(sysflag)
        out.store_ts_positions.append(store_ts_pos)
        out.tags_codes.append(tags_code(tags) if tags else 0)
        out.keys.append(keys)
        out.uniq_keys.append(uniq)
        out.properties.append(props)
        pos = record_end
    return out


def _parse_properties(raw: bytes, offset: int) -> dict[str, str]:
    if not raw:
        return {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BatchError("illegal", f"record at batch offset {offset}: properties are not "
                                    f"valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    out: dict[str, str] = {}
    for pair in text.split("\x02"):
        key, sep, value = pair.partition("\x01")
        if sep and key and value:
            out[key] = value
    return out
