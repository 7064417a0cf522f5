"""Request signatures: who sends a request, proven with a shared secret (RocketMQ's ACL).

A user holds an access key (public, names the user) and a secret key (shared
with the broker's ACL file, never sent). Each RPC carries four gRPC metadata
entries::

    x-pocketmq-access-key:  AK123
    x-pocketmq-timestamp:   1763800000123                   (ms since the epoch)
    x-pocketmq-nonce:       9f1c0a7e5b2d4c3a8e6f1b0d2c4a6e8f (16 random bytes, hex)
    x-pocketmq-signature:   base64(HMAC-SHA256(secret key, canonical string))

    canonical string = "\\n".join([full method name, timestamp, access key,
                                   *identifying fields of the request,
                                   nonce, hex(SHA-256(request body))])

    e.g. "/pocketmq.v1.Broker/PullMessage\\n1763800000123\\nAK123\\norders\\nbilling
          \\n9f1c...\\n5e88..."

The request body is the message serialized with ``deterministic=True`` on both
sides (:func:`body_digest`; the broker re-serializes what it deserialized,
which gives the same bytes for a message the same protobuf library wrote), so
a signature covers every field: the records of a send, the offset of a commit,
the queues of a batch pull. The identifying fields (:data:`SIGNED_FIELDS`) are
in the digest as well; they stay in the string so that a mismatch is easy to
read in a log. A signature holds for :data:`REPLAY_WINDOW_MS` either side of the
verifier's clock, and the verifier refuses the same signature twice within it
(``security/interceptor.py``); the nonce keeps two identical requests signed in
the same millisecond distinct. SHA-256 rather than RocketMQ 4's SHA-1: same
cost here, no known weakness.

Pure Python, no gRPC: the client signs with it, the broker verifies with it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ACCESS_KEY_HEADER",
    "NONCE_HEADER",
    "REPLAY_WINDOW_MS",
    "SEND_STREAM_METHOD",
    "SIGNATURE_HEADER",
    "SIGNED_FIELDS",
    "TIMESTAMP_HEADER",
    "Credentials",
    "body_digest",
    "canonical_string",
    "identifying_fields",
    "sign",
    "sign_stream_request",
    "signed_fields",
    "signed_metadata",
]

ACCESS_KEY_HEADER = "x-pocketmq-access-key"
TIMESTAMP_HEADER = "x-pocketmq-timestamp"
SIGNATURE_HEADER = "x-pocketmq-signature"
NONCE_HEADER = "x-pocketmq-nonce"
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


def body_digest(request: Any) -> str:
    """Hex SHA-256 of the request's deterministic serialization ("" for a non-message)."""
    serialize = getattr(request, "SerializeToString", None)
    if serialize is None:
        return ""
    return hashlib.sha256(serialize(deterministic=True)).hexdigest()


def signed_fields(request: Any, nonce: str) -> list[str]:
    """What follows method, timestamp and access key in the canonical string."""
    return [*identifying_fields(request), nonce, body_digest(request)]


def canonical_string(
    method: str, timestamp_ms: int, access_key: str, fields: Sequence[str]
) -> bytes:
    return "\n".join([method, str(timestamp_ms), access_key, *fields]).encode()


def sign(
    secret_key: str, method: str, timestamp_ms: int, access_key: str, fields: Sequence[str]
) -> str:
    digest = hmac.new(
        secret_key.encode(),
        canonical_string(method, timestamp_ms, access_key, fields),
        hashlib.sha256,
    ).digest()
    return base64.b64encode(digest).decode()


#: the method a SendStream request's own signature names (see broker.proto)
SEND_STREAM_METHOD = "/pocketmq.v1.Broker/SendStream"


def sign_stream_request(
    secret_key: str, timestamp_ms: int, access_key: str, nonce: str, batch: bytes | memoryview
) -> str:
    """The signature of one SendStream request: :func:`sign` over its nonce and the hex
    SHA-256 of its batch's bytes (a stream's call metadata is signed once, not per
    request, so each request carries its own)."""
    digest = hashlib.sha256(batch).hexdigest()
    return sign(secret_key, SEND_STREAM_METHOD, timestamp_ms, access_key, [nonce, digest])


def signed_metadata(
    credentials: Credentials, method: str, request: Any, now_ms: int | None = None
) -> tuple[tuple[str, str], ...]:
    """The four metadata entries that sign *request* (its whole body) for *method*."""
    ts = int(time.time() * 1000) if now_ms is None else now_ms
    nonce = os.urandom(16).hex()
    signature = sign(
        credentials.secret_key, method, ts, credentials.access_key, signed_fields(request, nonce)
    )
    return (
        (ACCESS_KEY_HEADER, credentials.access_key),
        (TIMESTAMP_HEADER, str(ts)),
        (NONCE_HEADER, nonce),
        (SIGNATURE_HEADER, signature),
    )
