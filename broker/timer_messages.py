"""Timer messages on the send path: the property contract and the detour.

RocketMQ 5's timer messages (RIP-43). A message asks for a delivery time with
one of these properties, in a normal topic::

    TIMER_DELIVER_MS   absolute: ms since the epoch (the broker's clock decides)
    TIMER_DELAY_MS     relative: ms after the broker receives it
    TIMER_DELAY_SEC    relative: seconds after the broker receives it

A relative one wins over ``TIMER_DELIVER_MS`` (RocketMQ's order), so a
delivered message, which keeps ``TIMER_DELIVER_MS``, can be sent on with a
new delay. :func:`rewrite_timed` (the send path) turns a relative delay into
an absolute time, then::

    time at or before now              stored as sent: delivered at once
    later, up to timer_max_delay_ms    moved to rmq_sys_wheel_timer, queue 0, with
                                       REAL_TOPIC / REAL_QID and TIMER_DELIVER_MS
                                       (relative properties removed; a UNIQ_KEY
                                       made if the producer set none)
    further ahead, or malformed        refused: INVALID_ARGUMENT, WHEEL_TIMER_MSG_ILLEGAL
    timer_wheel_enable off             refused: INVALID_ARGUMENT, WHEEL_TIMER_NOT_ENABLE

The 18 delay levels come first: a record with ``DELAY`` above 0 is the level
path's (:mod:`.delay_levels`), and records of ``SCHEDULE_TOPIC_XXXX``, whose
``TIMER_DELIVER_MS`` is the level path's own marker, are left alone. So are
prepared and rolled-back transaction records (RocketMQ's rule, as for levels).

The parked record is delivered by :mod:`.timer_service`, into the topic and
queue it was sent to, not before its time and normally within a few ms of it,
carrying ``TIMER_DELIVER_MS`` (the time asked for), its ``UNIQ_KEY`` and every
other property as sent; ``REAL_*``, ``TIMER_DELAY_*`` and ``TIMER_ROLL_TIMES``
are gone.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pocketmq.broker.delay_levels import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DELIVER_MS,
    wants_delay,
)
from pocketmq.broker.errors import IllegalArgumentError
from pocketmq.broker.topic_config import SCHEDULE_TOPIC, TIMER_TOPIC
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.message import (
    check_record,
    decode_properties,
    decode_record,
    encode_record,
    pack_host,
)
from pocketmq.common.msgid import UniqueIdGenerator

__all__ = [
    "DEFAULT_TIMER_MAX_DELAY_MS",
    "PROPERTY_TIMER_DELAY_MS",
    "PROPERTY_TIMER_DELAY_SEC",
    "PROPERTY_TIMER_DELIVER_MS",
    "PROPERTY_TIMER_ROLL_TIMES",
    "TIMER_TOPIC",
    "TimerPolicy",
    "deliver_time_ms",
    "rewrite_timed",
]

PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
DEFAULT_TIMER_MAX_DELAY_MS = 3 * 86_400_000  # timerMaxDelaySec = 3 days

_UNIQ_KEY = "UNIQ_KEY"
_uniq_ids: dict[str, UniqueIdGenerator] = {}  # per store IP: ids for keyless timer messages
_TIMER_MARKER = b"TIMER_DEL"  # starts TIMER_DELIVER_MS, TIMER_DELAY_MS and TIMER_DELAY_SEC
_I32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True, kw_only=True)
class TimerPolicy:
    enabled: bool = True  # timer_wheel_enable
    max_delay_ms: int = DEFAULT_TIMER_MAX_DELAY_MS  # timer_max_delay_ms


def deliver_time_ms(properties: dict[str, str], now_ms: int) -> int | None:
    """The delivery time a message asks for (ms), or None; ValueError names a bad value."""
    for name, unit_ms in ((PROPERTY_TIMER_DELAY_SEC, 1000), (PROPERTY_TIMER_DELAY_MS, 1)):
        raw = properties.get(name)
        if raw is not None:
            if not raw.isdigit():
                raise ValueError(
                    f"{name} is {raw!r}; give a whole number of "
                    f"{'seconds' if unit_ms == 1000 else 'ms'} >= 0"
                )
            return now_ms + int(raw) * unit_ms
    raw = properties.get(PROPERTY_TIMER_DELIVER_MS)
    if raw is None:
        return None
    if not raw.isdigit():
        raise ValueError(
            f"{PROPERTY_TIMER_DELIVER_MS} is {raw!r}; give the delivery time in ms since the epoch"
        )
    return int(raw)


def rewrite_timed(
    blob: bytes | bytearray | memoryview,
    *,
    policy: TimerPolicy,
    now_ms: int,
    store_host: tuple[str, int],
) -> bytes | None:
    """*blob* with every record due later than *now_ms* moved to the timer topic; None if none is.

    The records were checked by the send path's scan. The common case, no
    timer property anywhere, costs one search of the blob.
    """
    raw = blob if isinstance(blob, bytes | bytearray) else bytes(blob)
    if raw.find(_TIMER_MARKER) < 0:
        return None
    parts: list[bytes | bytearray] = []
    changed = False
    packed_store_host = pack_host(store_host)
    pos = 0
    while pos < len(raw):
        end = pos + _I32.unpack_from(raw, pos)[0]
        moved = _park_one(raw, pos, end, policy, now_ms, store_host[0], packed_store_host)
        parts.append(raw[pos:end] if moved is None else moved)
        changed = changed or moved is not None
        pos = end
    return b"".join(parts) if changed else None


def _park_one(
    raw: bytes | bytearray,
    pos: int,
    end: int,
    policy: TimerPolicy,
    now_ms: int,
    store_ip: str,
    packed_store_host: bytes,
) -> bytes | None:
    """The record at ``raw[pos:end]`` re-encoded for TIMER_TOPIC, or None to store it as is."""
    deliver_ms = _future_deliver_ms(raw, pos, end, now_ms)
    if deliver_ms is None:
        return None
    _check_timer_policy(pos, deliver_ms, now_ms, policy)
    return _encode_parked(raw, pos, end, deliver_ms, store_ip, packed_store_host)


def _future_deliver_ms(raw: bytes | bytearray, pos: int, end: int, now_ms: int) -> int | None:
    """The delivery time the record at ``raw[pos:end]`` asks for, when that is a timer
    message's and still ahead of *now_ms*; else None (delay levels, transaction records,
    the schedule topic's records and times already past are stored as they are)."""
    try:
        layout = check_record(raw, pos, end, check_crc=False)
    except CorruptRecordError as exc:
        raise _illegal(pos, exc.reason, "MESSAGE_ILLEGAL") from None
    props_raw = bytes(raw[layout.props_pos : layout.props_pos + layout.props_len])
    topic = bytes(raw[layout.topic_pos : layout.topic_pos + layout.topic_len])
    if _TIMER_MARKER not in props_raw or topic == SCHEDULE_TOPIC.encode():
        return None
    properties = decode_properties(props_raw.decode("utf-8", "replace"))
    delay_level = properties.get(PROPERTY_DELAY, "0").strip()
    if (delay_level.isdigit() and int(delay_level) > 0) or not wants_delay(layout.sysflag):
        return None  # the delay-level path's, or a transaction record's
    try:
        deliver_ms = deliver_time_ms(properties, now_ms)
    except ValueError as exc:
        raise _illegal(pos, str(exc)) from None
    if deliver_ms is None or deliver_ms <= now_ms:
        return None
    return deliver_ms


def _check_timer_policy(pos: int, deliver_ms: int, now_ms: int, policy: TimerPolicy) -> None:
    """Refuse a timer message when the wheel is off or its time is too far ahead."""
    if not policy.enabled:
        raise _illegal(
            pos,
            "asks for a delivery time, but timer messages are off on this "
            "broker (timer_wheel_enable)",
            "WHEEL_TIMER_NOT_ENABLE",
        )
    if deliver_ms - now_ms > policy.max_delay_ms:
        raise _illegal(
            pos,
            f"delivery time {deliver_ms} is {deliver_ms - now_ms} ms ahead; "
            f"this broker delivers at most {policy.max_delay_ms} ms ahead "
            f"(timer_max_delay_ms)",
        )


def _encode_parked(
    raw: bytes | bytearray,
    pos: int,
    end: int,
    deliver_ms: int,
    store_ip: str,
    packed_store_host: bytes,
) -> bytes:
    """The record at ``raw[pos:end]`` for TIMER_TOPIC: its real topic, queue and
    delivery time in properties, and a UNIQ_KEY if it had none."""
    msg = decode_record(raw, pos, limit=end, check_crc=True)
    parked = {
        k: v
        for k, v in msg.properties.items()
        if k not in (PROPERTY_TIMER_DELAY_MS, PROPERTY_TIMER_DELAY_SEC)
    }
    parked[PROPERTY_REAL_TOPIC] = msg.topic
    parked[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    parked[PROPERTY_TIMER_DELIVER_MS] = str(deliver_ms)
    if not parked.get(_UNIQ_KEY):
        # Delivery is recognised by UNIQ_KEY after a crash (TimerService._already_put).
        ids = _uniq_ids.get(store_ip) or _uniq_ids.setdefault(store_ip, UniqueIdGenerator(store_ip))
        parked[_UNIQ_KEY] = ids.next_id()
    try:
        return encode_record(
            topic=TIMER_TOPIC,
            body=msg.body,
            queue_id=0,
            flag=msg.flag,
            properties=parked,
            sysflag=msg.sysflag,
            born_timestamp_ms=msg.born_timestamp_ms,
            born_host=pack_host(msg.born_host),
            store_host=packed_store_host,
            reconsume_times=msg.reconsume_times,
            prepared_transaction_offset=msg.prepared_transaction_offset,
        )
    except ValueError as exc:
        raise _illegal(
            pos, f"cannot park it for its delivery time: {exc}", "PROPERTIES_SIZE_EXCEEDED"
        ) from None


def _illegal(pos: int, what: str, reason: str = "WHEEL_TIMER_MSG_ILLEGAL") -> IllegalArgumentError:
    return IllegalArgumentError(f"record at batch offset {pos}: {what}", reason=reason)
