"""Message trace records and how they travel: RocketMQ's trace model, as JSON lines.

A traced client (``enable_trace=True``) and a broker with ``trace_topic_enable``
describe what they did with each message as :class:`TraceRecord` objects and
store them, many to a message, in the trace topic (``RMQ_SYS_TRACE_TOPIC`` by
default). The types are RocketMQ's (``TraceType``), plus the broker's own::

    Pub             a producer sent it: group, client, cost, status, where stored
    SubBefore       a consumer is about to hand it to its listener (retry count)
    SubAfter        the listener answered: cost, status (success, retry_later,
                    failed, dlq); ``request_id`` pairs it with its SubBefore
    EndTransaction  a transactional producer committed / rolled back its half
    Store           broker: stored it (store time, queue, offset; delayed ones parked)
    Delivered       broker: a delayed (or timed, or retry) message came due and was
                    put into its topic
    SendBack        broker: a consumer group handed it back: to retry, or dead-lettered
    EndTransaction  also written by the broker (source "broker"): what it applied

One trace message::

    body        one JSON object per line, UTF-8:
                {"type":"Pub","ts":1700000000000,"msg_id":"7F00...","topic":"orders",...}
                {"type":"SubBefore",...}
    KEYS        the unique id (UNIQ_KEY) and the user keys of every message the records
                in the body trace, space separated: the broker's index finds a
                message's trace records by its id (QueryMessage on the trace topic)

RocketMQ encodes the same fields with \\u0001/\\u0002 delimiters; JSON keeps each
record self-describing and readable by the Spark source without a custom parser.
Fields absent from a record are left out of its line. Pure: no I/O here.
"""

from __future__ import annotations

import dataclasses
import json
import json.encoder as _json_encoder
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEFAULT_TRACE_TOPIC",
    "MAX_TRACE_BODY_BYTES",
    "MAX_TRACE_KEYS_CHARS",
    "TraceRecord",
    "TraceType",
    "decode_trace_body",
    "encode_trace_line",
    "json_string",
    "pack_trace_lines",
    "pack_trace_messages",
]

DEFAULT_TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"  # RocketMQ's TopicValidator.RMQ_SYS_TRACE_TOPIC
MAX_TRACE_BODY_BYTES = 128_000  # RocketMQ's trace maxMsgSize
MAX_TRACE_KEYS_CHARS = 16_000  # well under the 32767-byte properties limit


class TraceType:
    """The ``type`` of a record (RocketMQ's TraceType names, then the broker's)."""

    PUB = "Pub"
    SUB_BEFORE = "SubBefore"
    SUB_AFTER = "SubAfter"
    END_TRANSACTION = "EndTransaction"
    STORE = "Store"
    DELIVERED = "Delivered"
    SEND_BACK = "SendBack"


@dataclass(slots=True, kw_only=True)
class TraceRecord:
    """One thing that happened to one message (RocketMQ's TraceContext + TraceBean).

    ``ts`` is when it happened (ms since the epoch); ``cost_ms`` how long the send
    or the listener call took; ``status`` says how it ended (``SEND_OK``,
    ``FAILED: ...``, ``success``, ``retry_later``, ``failed``, ``dlq``,
    ``COMMIT``, ``ROLLBACK``...). ``source`` is ``client``, ``broker``, or ``proxy``
    (a RocketMQ 5 client's Pub/SubBefore/SubAfter, written by the broker for it).
    """

    type: str
    ts: int
    msg_id: str = ""
    offset_msg_id: str = ""
    topic: str = ""
    tags: str = ""
    keys: list[str] = field(default_factory=list)
    group: str = ""
    client_id: str = ""
    client_host: str = ""
    broker: str = ""
    queue_id: int = -1
    queue_offset: int = -1
    store_host: str = ""
    store_time: int = 0
    born_time: int = 0
    cost_ms: float = 0.0
    status: str = ""
    retry_times: int = 0
    body_bytes: int = 0
    # Normal, Delay, FIFO, Trans_Half, Trans_Commit, Trans_Rollback; Normal_Oneway, Delay_Oneway
    msg_type: str = ""
    request_id: str = ""  # pairs a SubBefore with its SubAfter
    transaction_state: str = ""  # EndTransaction: COMMIT, ROLLBACK, UNKNOWN
    from_transaction_check: bool = False
    stored_topic: str = ""  # Store/Delivered: where it lies (SCHEDULE_TOPIC_XXXX ...)
    source: str = "client"

    def index_keys(self) -> list[str]:
        """What the trace message's KEYS carry for this record: its unique id and keys,
        as RocketMQ's (not the offset id: a reader resolves that to the unique id)."""
        out = [self.msg_id] if self.msg_id else []
        out.extend(k for k in self.keys if k and " " not in k)
        return out

    def to_json(self) -> dict[str, Any]:
        """The record as a dict without its empty fields."""
        out: dict[str, Any] = {"type": self.type, "ts": self.ts}
        for name, default in _OPTIONAL:
            value = getattr(self, name)
            if value != default:
                out[name] = value
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> TraceRecord:
        """A record from :meth:`to_json`'s dict; unknown keys (a newer writer's) are ignored."""
        known = {k: v for k, v in raw.items() if k in _DEFAULTS}
        if not isinstance(known.get("type"), str) or not isinstance(known.get("ts"), int):
            raise ValueError(f"a trace record needs a string 'type' and an integer 'ts': {raw!r}")
        keys = known.get("keys", [])
        if not isinstance(keys, list):
            raise ValueError(f"trace record 'keys' is not a list: {raw!r}")
        return cls(**known)


_DEFAULTS: dict[str, Any] = {
    f.name: (
        f.default_factory()
        if f.default_factory is not dataclasses.MISSING
        else f.default
        if f.default is not dataclasses.MISSING
        else None
    )
    for f in dataclasses.fields(TraceRecord)
}
_OPTIONAL = tuple(
    (name, default) for name, default in _DEFAULTS.items() if name not in ("type", "ts")
)


def encode_trace_line(record: TraceRecord) -> tuple[str, list[str]]:
    """(the JSON line of *record*, its index keys): what :func:`pack_trace_lines` packs.

    Hot paths may format their lines themselves (client/trace.py formats Pub
    records with :func:`json_string`); the line must decode to the same record.
    """
    return (
        json.dumps(record.to_json(), separators=(",", ":"), ensure_ascii=False),
        record.index_keys(),
    )


#: a str as a JSON string literal, quotes included (the C encoder json.dumps uses)
json_string = _json_encoder.encode_basestring


def pack_trace_lines(
    lines: Iterable[tuple[str, list[str]]],
    *,
    max_body_bytes: int = MAX_TRACE_BODY_BYTES,
    max_keys_chars: int = MAX_TRACE_KEYS_CHARS,
) -> Iterator[tuple[bytes, list[str]]]:
    """(body, KEYS) of the trace messages that carry *lines* ((line, keys) pairs), in order.

    A message is closed before a line would take its body past *max_body_bytes*
    or its KEYS past *max_keys_chars*; a line larger than that alone still
    travels, alone.
    """
    parts: list[bytes] = []
    keys: dict[str, None] = {}
    size = keys_chars = 0
    for text, line_keys in lines:
        line = text.encode()
        fresh = [k for k in dict.fromkeys(line_keys) if k not in keys]
        fresh_chars = sum(len(k) + 1 for k in fresh)
        if parts and (
            size + len(line) + 1 > max_body_bytes or keys_chars + fresh_chars > max_keys_chars
        ):
            yield b"\n".join(parts), list(keys)
            parts, keys, size, keys_chars = [], {}, 0, 0
            fresh = list(dict.fromkeys(line_keys))
            fresh_chars = sum(len(k) + 1 for k in fresh)
        parts.append(line)
        size += len(line) + 1
        keys.update(dict.fromkeys(fresh))
        keys_chars += fresh_chars
    if parts:
        yield b"\n".join(parts), list(keys)


def pack_trace_messages(
    records: Iterable[TraceRecord],
    *,
    max_body_bytes: int = MAX_TRACE_BODY_BYTES,
    max_keys_chars: int = MAX_TRACE_KEYS_CHARS,
) -> Iterator[tuple[bytes, list[str]]]:
    """:func:`pack_trace_lines` of *records*."""
    return pack_trace_lines(
        (encode_trace_line(r) for r in records),
        max_body_bytes=max_body_bytes,
        max_keys_chars=max_keys_chars,
    )


def decode_trace_body(body: bytes) -> list[TraceRecord]:
    """The records of one trace message; lines that are not records are skipped."""
    out = []
    for line in body.split(b"\n"):  # not splitlines(): JSON leaves U+0085, U+2028 raw
        if not line.strip():
            continue
        try:
            raw = json.loads(line.decode("utf-8", errors="replace"))
            if isinstance(raw, dict):
                out.append(TraceRecord.from_json(raw))
        except (ValueError, TypeError):
            continue
    return out
