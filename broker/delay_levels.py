"""Delay levels: RocketMQ's fixed delays, and a delayed message's detour through them.

RocketMQ 4.x delays a message by *level*, not by time. The broker's
``message_delay_level`` string lists one delay per level, 1-based::

    "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
      1  2  3   4   5  6 ...                                  18

(units ``ms``, ``s``, ``m``, ``h``, ``d``). A message whose ``DELAY`` property
is a level above 0 is not stored in its topic but in ``SCHEDULE_TOPIC_XXXX``,
one queue per level; a level above the last is the last::

                    as sent                     as stored
    topic           TopicA                      SCHEDULE_TOPIC_XXXX
    queue id        3                           level - 1
    properties      DELAY=3, TAGS, UNIQ_KEY, …  the same, plus
                                                REAL_TOPIC=TopicA, REAL_QID=3,
                                                TIMER_DELIVER_MS=now + level delay

Everything else (body, flag, born time and host, reconsume times, UNIQ_KEY)
is kept. ``TIMER_DELIVER_MS`` is the delivery time in ms since the epoch; the
consume queue's tag code for these records is meant to hold it too (RocketMQ
keeps the delivery time there), so that due-ness can be read without the
commit log. When the time comes, the ScheduleMessageService
(:mod:`.schedule`) puts the message back into ``REAL_TOPIC`` / ``REAL_QID``
with :func:`restore_properties`: ``DELAY``, ``REAL_*`` and ``TIMER_DELIVER_MS``
removed, every other property as sent.

Prepared and rolled-back transaction records are never delayed (RocketMQ's
rule); their ``DELAY`` waits for the commit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from pocketmq.broker.errors import IllegalArgumentError
from pocketmq.broker.topic_config import SCHEDULE_TOPIC
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.message import (
    SysFlag,
    check_record,
    decode_properties,
    decode_record,
    encode_record,
    pack_host,
)

__all__ = [
    "DEFAULT_MESSAGE_DELAY_LEVEL",
    "PROPERTY_DELAY",
    "PROPERTY_REAL_QUEUE_ID",
    "PROPERTY_REAL_TOPIC",
    "PROPERTY_TIMER_DELIVER_MS",
    "SCHEDULE_TOPIC",
    "DelayLevels",
    "delay_level_of",
    "parse_delay_levels",
    "restore_properties",
    "rewrite_delayed",
    "schedule_properties",
]

DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

PROPERTY_DELAY = "DELAY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"

_SCHEDULE_ONLY = (
    PROPERTY_DELAY,
    PROPERTY_REAL_TOPIC,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_TIMER_DELIVER_MS,
)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DELAY_TOKEN = re.compile(r"^(\d+)(ms|s|m|h|d)$")
_DELAY_MARKER = (PROPERTY_DELAY + "\x01").encode()
MAX_LEVELS = 1024  # the schedule topic has one queue per level


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """``"1s 5s 500ms"`` -> ``(1000, 5000, 500)``; ValueError naming a bad token."""
    tokens = text.split()
    if not tokens:
        raise ValueError("message_delay_level is empty; give delays such as '1s 5s 10s 30s 1m'")
    if len(tokens) > MAX_LEVELS:
        raise ValueError(
            f"message_delay_level lists {len(tokens)} delays; at most "
            f"{MAX_LEVELS} levels are allowed"
        )
    delays = []
    for number, token in enumerate(tokens, 1):
        match = _DELAY_TOKEN.match(token)
        if match is None or int(match.group(1)) == 0:
            raise ValueError(
                f"message_delay_level: level {number} is {token!r}; write a "
                f"positive whole number with a unit of ms, s, m, h or d "
                f"(e.g. '500ms', '10s', '2h')"
            )
        delays.append(int(match.group(1)) * _UNIT_MS[match.group(2)])
    return tuple(delays)


@dataclass(frozen=True, slots=True)
class DelayLevels:
    """The delay of each level in ms; level 1 is ``delays_ms[0]``."""

    delays_ms: tuple[int, ...]

    @classmethod
    def parse(cls, text: str = DEFAULT_MESSAGE_DELAY_LEVEL) -> DelayLevels:
        return cls(parse_delay_levels(text))

    @property
    def max_level(self) -> int:
        return len(self.delays_ms)

    def clamp(self, level: int) -> int:
        """A requested level as stored: above the last level means the last."""
        return min(level, self.max_level)

    def delay_ms(self, level: int) -> int:
        return self.delays_ms[self.clamp(level) - 1]


def delay_level_of(properties: Mapping[str, str]) -> int:
    """The ``DELAY`` level asked for; 0 when absent. ValueError when not a number."""
    raw = properties.get(PROPERTY_DELAY)
    if raw is None:
        return 0
    return int(raw.strip())


def schedule_properties(
    properties: Mapping[str, str],
    *,
    real_topic: str,
    real_queue_id: int,
    level: int,
    deliver_ms: int,
) -> dict[str, str]:
    """The properties of a message parked in the schedule topic (``level`` already clamped)."""
    out = dict(properties)
    out[PROPERTY_DELAY] = str(level)
    out[PROPERTY_REAL_TOPIC] = real_topic
    out[PROPERTY_REAL_QUEUE_ID] = str(real_queue_id)
    out[PROPERTY_TIMER_DELIVER_MS] = str(deliver_ms)
    return out


def restore_properties(properties: Mapping[str, str]) -> tuple[str, int, dict[str, str]]:
    """(real topic, real queue id, properties to deliver with) of a parked message.

    ValueError when ``REAL_TOPIC`` or ``REAL_QID`` is missing or malformed.
    """
    topic = properties.get(PROPERTY_REAL_TOPIC, "")
    raw_queue_id = properties.get(PROPERTY_REAL_QUEUE_ID, "")
    if not topic or not raw_queue_id.isdigit():
        raise ValueError(f"REAL_TOPIC {topic!r} / REAL_QID {raw_queue_id!r} do not name a queue")
    restored = {k: v for k, v in properties.items() if k not in _SCHEDULE_ONLY}
    return topic, int(raw_queue_id), restored


def wants_delay(sysflag: int) -> bool:
    """Only plain and committed messages are delayed; prepared ones wait for the commit."""
    kind = SysFlag.transaction_type(sysflag)
    return kind in (SysFlag.TRANSACTION_NOT_TYPE, SysFlag.TRANSACTION_COMMIT)


def rewrite_delayed(
    blob: bytes | bytearray | memoryview,
    positions: list[int],
    levels: DelayLevels,
    *,
    now_ms: int,
    store_host: tuple[str, int],
) -> bytes | None:
    """*blob* with every delayed record moved to the schedule topic; None if none is.

    *positions* are where the records start (already walked and checked by the
    send path). The common case, no ``DELAY`` property anywhere, costs one scan
    of the blob for the property name. A record that is rewritten has its CRC
    checked first, since re-encoding computes a fresh one.
    """
    raw = blob if isinstance(blob, bytes | bytearray) else bytes(blob)
    if raw.find(_DELAY_MARKER) < 0:
        return None
    ends = [*positions[1:], len(raw)]
    parts: list[bytes | bytearray] = []
    changed = False
    packed_store_host = pack_host(store_host)
    for pos, end in zip(positions, ends, strict=True):
        moved = _rewrite_one(raw, pos, end, levels, now_ms, packed_store_host)
        if moved is None:
            parts.append(raw[pos:end])
        else:
            parts.append(moved)
            changed = True
    return b"".join(parts) if changed else None


def _rewrite_one(
    raw: bytes | bytearray,
    pos: int,
    end: int,
    levels: DelayLevels,
    now_ms: int,
    packed_store_host: bytes,
) -> bytes | None:
    try:
        layout = check_record(raw, pos, end, check_crc=False)
    except CorruptRecordError as exc:
        raise _illegal(pos, exc.reason) from None
    props_raw = bytes(raw[layout.props_pos : layout.props_pos + layout.props_len])
    if _DELAY_MARKER not in props_raw:
        return None
    properties = decode_properties(props_raw.decode("utf-8", "replace"))
    try:
        level = delay_level_of(properties)
    except ValueError:
        raise _illegal(
            pos,
            f"DELAY property is {properties[PROPERTY_DELAY]!r}; give a delay "
            f"level 1..{levels.max_level}",
        ) from None
    if level <= 0 or not wants_delay(layout.sysflag):
        return None
    try:
        msg = decode_record(raw, pos, limit=end, check_crc=True)
    except CorruptRecordError as exc:
        raise _illegal(pos, exc.reason) from None
    level = levels.clamp(level)
    props = schedule_properties(
        msg.properties,
        real_topic=msg.topic,
        real_queue_id=msg.queue_id,
        level=level,
        deliver_ms=now_ms + levels.delay_ms(level),
    )
    try:
        return encode_record(
            topic=SCHEDULE_TOPIC,
            body=msg.body,
            queue_id=level - 1,
            flag=msg.flag,
            properties=props,
            sysflag=msg.sysflag,
            born_timestamp_ms=msg.born_timestamp_ms,
            born_host=pack_host(msg.born_host),
            store_host=packed_store_host,
            reconsume_times=msg.reconsume_times,
            prepared_transaction_offset=msg.prepared_transaction_offset,
        )
    except ValueError as exc:
        raise IllegalArgumentError(
            f"record at batch offset {pos}: cannot delay it: {exc}",
            reason="PROPERTIES_SIZE_EXCEEDED",
        ) from None


def _illegal(pos: int, what: str) -> IllegalArgumentError:
    return IllegalArgumentError(f"record at batch offset {pos}: {what}", reason="MESSAGE_ILLEGAL")
