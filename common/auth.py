"""Request signatures: who sends a request, proven with a shared secret (RocketMQ's ACL).

A user holds an access key (public, names the user) and a secret key (shared
with the broker's ACL file, never sent). Each RPC carries three gRPC metadata
entries::

    x-pocketmq-access-key:  AK123
    x-pocketmq-timestamp:   1763800000123                   (ms since the epoch)
    x-pocketmq-signature:   base64(HMAC-SHA256(secret key, canonical string))

    canonical string = "\\n".join([full method name, timestamp, access key,
                                   *identifying fields of the request])

    e.g. "/pocketmq.v1.Broker/PullMessage\\n1763800000123\\nAK123\\norders\\nbilling"

The identifying fields are the names the permission check reads (topic,
consumer group, producer group; :data:`SIGNED_FIELDS`), so a signature cannot
be replayed against another topic or group, nor after the replay window
(:data:`REPLAY_WINDOW_MS` either side of the broker's clock). Bodies are not
signed: RocketMQ 5's own scheme signs only a date header, and a payload's
integrity on the wire is TLS's job. SHA-256 rather than RocketMQ 4's SHA-1:
same cost here, no known weakness.

Pure Python, no gRPC: the client signs with it, the broker verifies with it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ACCESS_KEY_HEADER",
    "REPLAY_WINDOW_MS",
    "SIGNATURE_HEADER",
    "SIGNED_FIELDS",
    "TIMESTAMP_HEADER",
    "Credentials",
    "canonical_string",
    "identifying_fields",
    "sign",
    "signed_metadata",
]

ACCESS_KEY_HEADER = "x-pocketmq-access-key"
TIMESTAMP_HEADER = "x-pocketmq-timestamp"
SIGNATURE_HEADER = "x-pocketmq-signature"
REPLAY_WINDOW_MS = 300_000

#: request fields, in signing order, that name what a request touches
SIGNED_FIELDS = ("topic", "consumer_group", "producer_group", "group")


@dataclass(frozen=True, slots=True)
class Credentials:
    """An access key and its secret key; the secret never appears in a repr."""

    access_key: str
    secret_key: str = field(repr=False)

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("credentials need both an access key and a secret key")


def identifying_fields(request: Any) -> list[str]:
    """The :data:`SIGNED_FIELDS` a request message has, in order (absent ones skipped)."""
    out = []
    for name in SIGNED_FIELDS:
        value = getattr(request, name, None)
        if isinstance(value, str):
            out.append(value)
    return out


def canonical_string(method: str, timestamp_ms: int, access_key: str,
                     fields: Sequence[str]) -> bytes:
    return "\n".join([method, str(timestamp_ms), access_key, *fields]).encode()


def sign(secret_key: str, method: str, timestamp_ms: int, access_key: str,
         fields: Sequence[str]) -> str:
    digest = hmac.new(secret_key.encode(), canonical_string(method, timestamp_ms, access_key,
                                                            fields), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def signed_metadata(credentials: Credentials, method: str, request: Any,
                    now_ms: int | None = None) -> tuple[tuple[str, str], ...]:
    """The three metadata entries that sign *request* for *method*."""
    ts = int(time.time() * 1000) if now_ms is None else now_ms
    signature = sign(credentials.secret_key, method, ts, credentials.access_key,
                     identifying_fields(request))
    return ((ACCESS_KEY_HEADER, credentials.access_key), (TIMESTAMP_HEADER, str(ts)),
            (SIGNATURE_HEADER, signature))
