"""What every view module shares: the request context, JSON shaping of SDK rows, input checks.

A view is ``async def view(request, ctx, **path_params) -> JSON value``; it raises
:class:`~pocketmq.dashboard.http.HttpError` for bad input and lets the SDK's
errors through, which :mod:`.app` turns into a status and ``{"error": ...}``.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pocketmq.client.admin import AdminClient
from pocketmq.client.model import MessageExt
from pocketmq.dashboard.history import HistoryService
from pocketmq.dashboard.http import HttpError, Request
from pocketmq.dashboard.sessions import Session

__all__ = [
    "Ctx",
    "View",
    "body_view",
    "int_arg",
    "message_row",
    "parse_time_ms",
    "str_arg",
    "topic_kind",
]

MAX_HEX_BYTES = 64 * 1024  # the hex view of a body shows at most this much
SYSTEM_TOPICS = frozenset(
    {
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "SELF_TEST_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "OFFSET_MOVED_EVENT",
        "DefaultCluster",
    }
)


@dataclass(slots=True)
class Ctx:
    """What a view acts with: the user's session and the dashboard's shared parts."""

    session: Session
    history: HistoryService
    namesrv: list[str]
    tls_ca: str
    prometheus_url: str = ""
    brokers_config: dict[str, dict[str, str]] | None = None  # addr -> config, cached

    @property
    def admin(self) -> AdminClient:
        return self.session.admin


View = Callable[..., Awaitable[Any]]


def str_arg(
    source: dict[str, Any],
    name: str,
    *,
    required: bool = True,
    default: str = "",
    max_len: int = 4096,
) -> str:
    value = source.get(name, default)
    if value is None:
        value = default
    if not isinstance(value, str):
        raise HttpError(400, f"{name} must be a string, got {type(value).__name__}")
    value = value.strip()
    if required and not value:
        raise HttpError(400, f"give {name}")
    if len(value) > max_len:
        raise HttpError(400, f"{name} is {len(value)} characters; the limit is {max_len}")
    return value


def int_arg(source: dict[str, Any], name: str, *, default: int, low: int, high: int) -> int:
    raw = source.get(name, default)
    if raw in ("", None):
        return default
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise HttpError(400, f"{name} must be a whole number, got {raw!r}") from None
    if not low <= value <= high:
        raise HttpError(400, f"{name} is {value}; give {low}..{high}")
    return value


def parse_time_ms(text: str, name: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 time (local time without a zone)."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise HttpError(
            400,
            f"{name} {text!r} is neither ms since the epoch nor an ISO 8601 "
            "time such as 2026-11-26T08:30",
        ) from None
    return int(moment.timestamp() * 1000)


def topic_kind(topic: str, cluster_names: set[str] | None = None) -> str:
    """user, retry, dlq or system (RocketMQ Dashboard's filters)."""
    if topic.startswith("%RETRY%"):
        return "retry"
    if topic.startswith("%DLQ%"):
        return "dlq"
    if (
        topic in SYSTEM_TOPICS
        or topic.lower().startswith("rmq_sys_")
        or topic in (cluster_names or ())
    ):
        return "system"
    return "user"


def message_row(msg: MessageExt) -> dict[str, Any]:
    """A message in a list: where it is, when, and its first bytes."""
    return {
        "topic": msg.topic,
        "msg_id": msg.msg_id,
        "offset_msg_id": msg.offset_msg_id,
        "tags": msg.tags,
        "keys": list(msg.keys),
        "broker_name": msg.broker_name,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "store_timestamp_ms": msg.store_timestamp_ms,
        "born_timestamp_ms": msg.born_timestamp_ms,
        "size_bytes": len(msg.body),
        "reconsume_times": msg.reconsume_times,
        "preview": msg.body[:80].decode("utf-8", "replace"),
    }


def body_view(body: bytes) -> dict[str, Any]:
    """The body as text (when it is UTF-8), hex (its first 64 KiB), JSON (when it parses),
    and base64 (whole, for export)."""
    try:
        text: str | None = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    pretty = None
    if text is not None:
        try:
            pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pretty = None
    shown = body[:MAX_HEX_BYTES]
    hex_lines = [
        f"{i:08x}  {shown[i : i + 16].hex(' '):<47}  "
        + "".join(chr(b) if 32 <= b < 127 else "." for b in shown[i : i + 16])
        for i in range(0, len(shown), 16)
    ]
    return {
        "text": text,
        "json": pretty,
        "hex": "\n".join(hex_lines),
        "hex_truncated": len(body) > MAX_HEX_BYTES,
        "size_bytes": len(body),
        "base64": base64.b64encode(body).decode(),
    }


def decode_body(data: dict[str, Any]) -> bytes:
    """The send form's body: ``body`` as text, or base64 with ``encoding: base64``."""
    body = data.get("body", "")
    if not isinstance(body, str):
        raise HttpError(400, "body must be a string")
    if data.get("encoding") == "base64":
        try:
            return base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise HttpError(400, "body is not valid base64") from None
    return body.encode()


def request_args(request: Request) -> dict[str, Any]:
    """Query parameters for GET, the JSON body for the others."""
    return dict(request.query) if request.method in ("GET", "HEAD") else request.json()
