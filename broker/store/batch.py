"""Checking a blob of records before it is appended, and what dispatch needs of it.

A batch arrives as records already in the commit-log layout
(:mod:`pocketmq.common.message`). :func:`scan_batch` walks it once, checks
every record (magic, lengths against TOTALSIZE, body CRC, topic name, body and
properties limits, host sizes) and extracts, per record, what the append and the
dispatch need: position, size, topic, queue id, sysflag, tag code, keys. It
never builds a message object: one ``unpack_from`` for the head, one CRC over a
memoryview of the body, one split of the properties. After the append,
:func:`queue_units` turns the batch into consume-queue units, one run per queue.

These are the hottest loops of the broker. Each is a pure function with a
pure-Python reference here (``py_*``) and a compiled twin in ``_speedups.c``;
:mod:`.speedups` binds the public names to one or the other.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from pocketmq.broker.store import speedups
from pocketmq.broker.store.consume_queue import CQ_UNIT
from pocketmq.broker.store.producer_state import Run, py_idem_runs
from pocketmq.common.errors import StoreError
from pocketmq.common.hashing import tags_code
from pocketmq.common.message import check_record, decode_properties
from pocketmq.common.record_layout import (
    FIELD_STRUCT,
    HEAD,
    HOST_V4_SIZE,
    HOST_V6_SIZE,
    MAX_PROPERTIES_LENGTH,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    PROPS_LEN,
    TOPIC_LEN,
    SysFlag,
    host_positions,
)
from pocketmq.common.validation import check_topic

__all__ = [
    "MARK_DELAY",
    "MARK_TIMER",
    "BatchError",
    "ScannedBatch",
    "is_dispatched_to_queue",
    "py_queue_units",
    "py_scan_batch",
    "queue_units",
    "scan_batch",
]

_BODY_LEN = FIELD_STRUCT["BODYLEN"]

# ScannedBatch.markers: which properties the broker acts on appear in the batch, so
# the send path skips its rewrites for the common batch that has none of them.
MARK_DELAY = 1  # DELAY: a delay level (broker/delay_levels.py)
MARK_TIMER = 2  # TIMER_DELIVER_MS / TIMER_DELAY_MS / TIMER_DELAY_SEC (broker/timer_messages.py)


class BatchError(StoreError):
    """A record of the batch is unacceptable; ``kind`` picks the put status."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind  # "illegal" | "properties" | "body_too_large" | "empty_body"


@dataclass(slots=True)
class ScannedBatch:
    """Parallel per-record lists, in blob order."""

    positions: list[int] = field(default_factory=list)  # offset of each record in the blob
    sizes: list[int] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    queue_ids: list[int] = field(default_factory=list)
    sysflags: list[int] = field(default_factory=list)
    store_ts_positions: list[int] = field(default_factory=list)  # STORETIMESTAMP, in-record
    tags_codes: list[int] = field(default_factory=list)
    keys: list[list[str]] = field(default_factory=list)  # KEYS split, UNIQ_KEY last
    uniq_keys: list[str] = field(default_factory=list)
    blob: bytes | bytearray | memoryview = b""  # what was scanned
    markers: int = 0  # MARK_* bits: properties the broker acts on, in any record
    # idempotent producers' stamps (PMQ_IDEM) as runs; empty when no record has one
    idem_runs: list[Run] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def properties(self) -> list[dict[str, str]]:
        """Each record's property map, parsed from :attr:`blob` when asked for: the
        write path needs only TAGS, KEYS and UNIQ_KEY, which the scan extracted."""
        out = []
        for pos in self.positions:
            lay = check_record(self.blob, pos, len(self.blob), check_crc=False)
            raw = bytes(memoryview(self.blob)[lay.props_pos : lay.props_pos + lay.props_len])
            out.append(decode_properties(raw.decode("utf-8")))
        return out


#: Scheduled messages wait here; their consume-queue tag code is the delivery time.
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
PROPERTY_DELIVER_MS = "TIMER_DELIVER_MS"


def consume_queue_tags_code(topic: str, properties: dict[str, str]) -> int:
    """The tag code a record's consume-queue unit carries (RocketMQ invariant 14):
    the hash of ``TAGS``, except in the schedule topic, where it is the delivery
    time in ms, so the schedule service finds due messages without reading the log."""
    if topic == SCHEDULE_TOPIC:
        deliver = properties.get(PROPERTY_DELIVER_MS, "")
        if deliver.isdigit():
            return int(deliver)
    tags = properties.get("TAGS", "")
    return tags_code(tags) if tags else 0


def apply_schedule_tags_codes(batch: ScannedBatch) -> None:
    """Replace the tag codes of schedule-topic records by their delivery times.

    Called only when the batch holds such a record, so the usual path pays one
    list membership test."""
    props = batch.properties
    for i, topic in enumerate(batch.topics):
        if topic == SCHEDULE_TOPIC:
            batch.tags_codes[i] = consume_queue_tags_code(topic, props[i])


def is_dispatched_to_queue(sysflag: int) -> bool:
    """Prepared and rolled-back transaction records get no consume-queue unit."""
    kind = sysflag & SysFlag.TRANSACTION_MASK
    return kind != SysFlag.TRANSACTION_PREPARED and kind != SysFlag.TRANSACTION_ROLLBACK


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


def py_scan_batch(
    blob: bytes | bytearray | memoryview,
    *,
    max_body_size: int,
    store_host_size: int = HOST_V4_SIZE,
    allow_empty_body: bool = True,
) -> ScannedBatch:
    """Check every record of *blob*; raise :class:`BatchError` on the first bad one.

    *allow_empty_body* False refuses a record without a body (producers' sends;
    the broker's own puts may carry none).
    *store_host_size* is the size of this broker's STOREHOST field (8 for IPv4,
    20 for IPv6); records must reserve exactly that much, since it is patched in
    place.
    """
    mv = memoryview(blob)
    end = len(mv)
    if end == 0:
        raise BatchError("illegal", "the batch holds no records")
    positions: list[int] = []
    sizes: list[int] = []
    topics: list[str] = []
    queue_ids: list[int] = []
    sysflags: list[int] = []
    store_ts_positions: list[int] = []
    tags_codes: list[int] = []
    keys_lists: list[list[str]] = []
    uniq_keys: list[str] = []
    unpack_head = HEAD.unpack_from
    unpack_body_len = _BODY_LEN.unpack_from
    unpack_props_len = PROPS_LEN.unpack_from
    crc32 = zlib.crc32
    store_v6 = store_host_size == HOST_V6_SIZE
    markers = 0
    pos = 0
    while pos < end:
        if end - pos < HEAD.size:
            raise BatchError(
                "illegal",
                f"record at batch offset {pos} is cut short: "
                f"{end - pos} bytes left, a head is {HEAD.size}",
            )
        total, magic, crc, queue_id, _flag, _qo, _po, sysflag, _born = unpack_head(mv, pos)
        if magic != MESSAGE_MAGIC_CODE and magic != MESSAGE_MAGIC_CODE_V2:
            raise BatchError(
                "illegal",
                f"record at batch offset {pos} has magic code "
                f"0x{magic:08X}; expected 0x{MESSAGE_MAGIC_CODE:08X}",
            )
        if total < HEAD.size or total > end - pos:
            raise BatchError(
                "illegal",
                f"record at batch offset {pos} has TOTALSIZE {total}, "
                f"but {end - pos} bytes are left in the batch",
            )
        if bool(sysflag & SysFlag.STOREHOST_V6) != store_v6:
            raise BatchError(
                "illegal",
                f"record at batch offset {pos} reserves "
                f"{HOST_V6_SIZE if not store_v6 else HOST_V4_SIZE} bytes "
                f"for STOREHOST; this broker writes {store_host_size}",
            )
        at = host_positions(sysflag)
        store_ts_pos = at.store_timestamp
        p = pos + at.body_len
        record_end = pos + total
        if p + _BODY_LEN.size > record_end:
            raise BatchError(
                "illegal",
                f"record at batch offset {pos}: TOTALSIZE {total} is smaller than its fixed fields",
            )
        body_len = unpack_body_len(mv, p)[0]
        body_pos = pos + at.body
        p = body_pos + body_len
        if body_len < 0 or p > record_end:
            raise BatchError(
                "illegal",
                f"record at batch offset {pos}: BODYLEN {body_len} does not fit TOTALSIZE {total}",
            )
        if body_len > max_body_size:
            raise BatchError(
                "body_too_large",
                f"message body is {body_len} bytes; this "
                f"broker accepts at most {max_body_size} "
                "(max_message_size_bytes)",
            )
        if body_len == 0 and not allow_empty_body:
            raise BatchError(
                "empty_body",
                f"record at batch offset {pos}: message body is empty; a message needs a body",
            )
        topic_len_field = TOPIC_LEN[magic]
        topic_len = (
            topic_len_field.unpack_from(mv, p)[0] if p + topic_len_field.size <= record_end else -1
        )
        p += topic_len_field.size
        if topic_len < 0 or p + topic_len + PROPS_LEN.size > record_end:
            raise BatchError(
                "illegal",
                f"record at batch offset {pos}: topic length "
                f"{topic_len} does not fit TOTALSIZE {total}",
            )
        topic = _check_topic_raw(bytes(mv[p : p + topic_len]), pos)
        p += topic_len
        props_len = unpack_props_len(mv, p)[0]
        p += PROPS_LEN.size
        if p + props_len != record_end:
            raise BatchError(
                "illegal",
                f"record at batch offset {pos}: TOTALSIZE is {total} "
                f"but its parts add up to {p + props_len - pos}",
            )
        if props_len > MAX_PROPERTIES_LENGTH:
            raise BatchError(
                "properties",
                f"properties are {props_len} bytes; at most {MAX_PROPERTIES_LENGTH} are allowed",
            )
        actual_crc = crc32(mv[body_pos : body_pos + body_len]) & 0x7FFFFFFF
        if actual_crc != crc:
            raise BatchError(
                "illegal",
                f"record at batch offset {pos}: body CRC is {actual_crc}, the record says {crc}",
            )
        tags, keys, uniq, marks = _dispatch_properties(mv[p:record_end], pos)
        markers |= marks
        positions.append(pos)
        sizes.append(total)
        topics.append(topic)
        queue_ids.append(queue_id)
        sysflags.append(sysflag)
        store_ts_positions.append(store_ts_pos)
        tags_codes.append(tags_code(tags) if tags else 0)
        keys_lists.append(keys)
        uniq_keys.append(uniq)
        pos = record_end
    return ScannedBatch(
        positions,
        sizes,
        topics,
        queue_ids,
        sysflags,
        store_ts_positions,
        tags_codes,
        keys_lists,
        uniq_keys,
        blob,
        markers,
        py_idem_runs(blob, positions, sizes, topics, queue_ids),
    )


def _dispatch_properties(raw: memoryview, offset: int) -> tuple[str, list[str], str, int]:
    """TAGS, the index keys (KEYS split on spaces, then UNIQ_KEY), UNIQ_KEY and
    the MARK_* bits of the property names seen.

    The pairs are read as :func:`~pocketmq.common.message.decode_properties`
    reads them (a pair without a name or a value does not count; the last pair
    of a name wins), without building the map.
    """
    try:
        text = str(raw, "utf-8")
    except UnicodeDecodeError as exc:
        raise BatchError(
            "illegal",
            f"record at batch offset {offset}: properties are not "
            f"valid UTF-8 ({exc.reason} at byte {exc.start})",
        ) from None
    tags = keys = uniq = ""
    markers = 0
    for pair in text.split("\x02"):
        name, _sep, value = pair.partition("\x01")
        if value:  # a value implies the separator
            if name == "TAGS":
                tags = value
            elif name == "KEYS":
                keys = value
            elif name == "UNIQ_KEY":
                uniq = value
            elif name == "DELAY":
                markers |= MARK_DELAY
            elif name.startswith("TIMER_DEL") and len(name) > 9:
                markers |= MARK_TIMER
    key_list = [k for k in keys.split(" ") if k] if keys else []
    if uniq:
        key_list.append(uniq)
    return tags, key_list, uniq, markers


def py_queue_units(
    batch: ScannedBatch, phys_offsets: list[int], queue_offsets: list[int]
) -> list[tuple[str, int, int, bytes]]:
    """Consume-queue units of a stored batch: ``(topic, queue_id, first_queue_offset,
    units)`` per queue, in the order the queues first appear.

    The queue offsets of one queue's records are consecutive (the commit log
    assigned them in blob order), so its units are one run for
    ``ConsumeQueue.append_many``. Prepared and rolled-back transaction records
    get no unit.
    """
    runs: dict[tuple[str, int], tuple[int, list[bytes]]] = {}
    pack = CQ_UNIT.pack
    for topic, queue_id, sysflag, phys, size, tags, queue_offset in zip(
        batch.topics,
        batch.queue_ids,
        batch.sysflags,
        phys_offsets,
        batch.sizes,
        batch.tags_codes,
        queue_offsets,
        strict=True,
    ):
        if not is_dispatched_to_queue(sysflag):
            continue
        run = runs.get((topic, queue_id))
        if run is None:
            runs[(topic, queue_id)] = (queue_offset, [pack(phys, size, tags)])
        else:
            run[1].append(pack(phys, size, tags))
    return [
        (topic, queue_id, first, b"".join(units))
        for (topic, queue_id), (first, units) in runs.items()
    ]


scan_batch = speedups.pick("scan_batch", py_scan_batch)
queue_units = speedups.pick("queue_units", py_queue_units)
