"""Pulled records to messages: the pure-Python reference of ``decode_messages``.

:func:`py_decode_messages` walks a pull reply (records back to back, layout in
:mod:`pocketmq.common.record_layout`) once, straight from the buffer into
:class:`MessageExt` values. A record with IPv4 hosts takes one struct call up to
BODY; any other record (IPv6 hosts, a BLANK, a damaged tail) the general path,
which reads the fields after BORNHOST at the positions its SYSFLAG announces.
Every length is checked against TOTALSIZE before anything is read through it.
:mod:`pocketmq.client.message_codec` picks this or the compiled ``_codec.c``,
which must agree with it byte for byte and error for error.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

from pocketmq.client.model import (
    PROPERTY_IDEMPOTENCE,
    PROPERTY_KEYS,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    RETRY_GROUP_TOPIC_PREFIX,
    MessageExt,
    _new_message_ext,
)
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.message import body_crc, decode_properties
from pocketmq.common.record_layout import (
    BLANK_MAGIC_CODE,
    FIXED_V4,
    HEAD,
    HOST_BITS,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    PROPS_LEN,
    STORE_TIMESTAMP,
    TAIL_AFTER_STOREHOST,
    TOPIC_LEN,
    SysFlag,
    host_positions,
)

__all__ = ["inflate", "py_decode_messages"]

_HEAD_UNPACK = HEAD.unpack_from
_HEAD_SIZE = HEAD.size


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
    fixed_unpack, fixed_size = FIXED_V4.unpack_from, FIXED_V4.size
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
        if sysflag & HOST_BITS or magic == BLANK_MAGIC_CODE or total < fixed_size:
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
    if check_crc and body_crc(body) != crc:
        raise CorruptRecordError(pos, "body CRC mismatch")
    p += body_len
    if sysflag & SysFlag.COMPRESSED:
        body = inflate(body, pos)
    topic_len_field = TOPIC_LEN[magic]
    if p + topic_len_field.size > record_end:
        raise CorruptRecordError(pos, f"topic length lies past TOTALSIZE {total}")
    topic_len = topic_len_field.unpack_from(raw, p)[0]
    p += topic_len_field.size
    if p + topic_len + PROPS_LEN.size > record_end:
        raise CorruptRecordError(pos, f"properties length lies past TOTALSIZE {total}")
    raw_topic = raw[p : p + topic_len]
    topic_entry = topics.get(raw_topic)
    if topic_entry is None:
        topic_entry = topics[raw_topic] = _topic_entry(raw_topic)
    p += topic_len
    props_len = PROPS_LEN.unpack_from(raw, p)[0]
    p += PROPS_LEN.size
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


def inflate(body: bytes, pos: int) -> bytes:
    """A COMPRESSED body inflated; :class:`CorruptRecordError` if it does not inflate."""
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
    at = host_positions(sysflag)
    if at.body > total:
        raise CorruptRecordError(
            pos, f"TOTALSIZE is {total}; the fields before BODY need {at.body}"
        )
    store_ts = STORE_TIMESTAMP.unpack_from(raw, pos + at.store_timestamp)[0]
    store_host = raw[pos + at.store_host : pos + at.reconsume_times]
    reconsume, _prepared, body_len = TAIL_AFTER_STOREHOST.unpack_from(raw, pos + at.reconsume_times)
    body, (topic, is_retry), props = _decode_tail(
        raw,
        pos,
        pos + at.body,
        pos + total,
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
