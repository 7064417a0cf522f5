"""RocketMQ 5's request signature: the ``authorization`` header (MQv2-HMAC-SHA1).

Every call of an official 5.x client carries, among its headers::

    x-mq-date-time: 20261122T053045Z
    authorization:  MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time,
                    Signature=<hex of HMAC-SHA1(secret key, value of x-mq-date-time)>

(``Credential`` may go on with ``/...`` scope parts, which are ignored.)
:class:`HeaderAuthenticator` checks it: it looks the access key's secret up,
signs the date-time header with it and compares, in constant time and without
regard to hex case. The date-time is not held to a clock window: the Python
client writes its *local* time with a literal ``Z``. A ``Telemetry`` stream is
checked once, when it opens. A refusal is ``UNAUTHORIZED`` (40100) with the
reason; the client then reports "failed to fetch topic route".

The secrets come from a lookup function, so the broker's ACL (or a test's
table) decides who exists; *authorize* may further refuse a known caller a
method on a topic or group by raising
:class:`~pocketmq.broker.errors.PermissionDeniedError` (``FORBIDDEN``).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable

import grpc

from pocketmq.broker.errors import PermissionDeniedError
from pocketmq.broker.grpc_v2.convert import V2Error
from pocketmq.rmqv2 import definition_pb2 as d
from pocketmq.security.acl import PUB, SUB, AclStore

__all__ = ["ALGORITHM", "HeaderAuthenticator", "acl_authenticator", "parse_authorization", "sign"]

ALGORITHM = "MQv2-HMAC-SHA1"
AUTHORIZATION_HEADER = "authorization"
DATE_TIME_HEADER = "x-mq-date-time"

#: access key -> its secret key, or None when there is no such user
SecretLookup = Callable[[str], "str | None"]
#: (access key, method, topic, group) -> None, or raise PermissionDeniedError
Authorize = Callable[[str, str, str, str], None]


def sign(secret_key: str, date_time: str) -> str:
    """The signature a client with *secret_key* sends for *date_time* (lowercase hex)."""
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def _unauthorized(why: str) -> V2Error:
    return V2Error(d.UNAUTHORIZED, f"{why}; sign requests with the access key and secret key "
                                   "of a user this broker knows (ClientConfiguration "
                                   "credentials)")


def parse_authorization(value: str) -> tuple[str, str, str]:
    """(access key, signed headers, signature) of an ``authorization`` header value."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise _unauthorized(f"authorization uses {algorithm[:40]!r}, not {ALGORITHM}")
    fields = {}
    for part in rest.split(","):
        key, sep, val = part.strip().partition("=")
        if sep:
            fields[key.strip()] = val.strip()
    credential = fields.get("Credential", "").split("/", 1)[0]
    if not credential or "Signature" not in fields:
        raise _unauthorized("authorization names no Credential or no Signature")
    return credential, fields.get("SignedHeaders", ""), fields["Signature"]


class HeaderAuthenticator:
    """Checks the signature of every v2 call (the servicer's ``authenticate`` hook)."""

    def __init__(self, secret_of: SecretLookup, *, authorize: Authorize | None = None) -> None:
        self._secret_of = secret_of
        self._authorize = authorize

    def __call__(self, context: grpc.aio.ServicerContext, method: str, topic: str,
                 group: str) -> None:
        headers = {k: str(v) for k, v in context.invocation_metadata() or ()}
        access_key = self.check(headers)
        if self._authorize is not None:
            self._authorize(access_key, method, topic, group)

    def check(self, headers: dict[str, str]) -> str:
        """The caller's access key; V2Error(UNAUTHORIZED) when the signature does not hold."""
        value = headers.get(AUTHORIZATION_HEADER)
        if not value:
            raise _unauthorized("the authorization header is missing")
        access_key, signed, signature = parse_authorization(value)
        if DATE_TIME_HEADER not in signed.split(";"):
            raise _unauthorized(f"SignedHeaders is {signed!r}; it must include "
                                f"{DATE_TIME_HEADER}")
        date_time = headers.get(DATE_TIME_HEADER)
        if not date_time:
            raise _unauthorized(f"the {DATE_TIME_HEADER} header is missing")
        secret = self._secret_of(access_key)
        if secret is None:
            raise _unauthorized(f"access key {access_key[:64]!r} is unknown")
        if not signature.isascii() or not hmac.compare_digest(sign(secret, date_time),
                                                              signature.lower()):
            raise _unauthorized(f"the signature of access key {access_key[:64]!r} does not "
                                "match its secret key")
        return access_key


# RocketMQ 5 method -> the permission it needs on its topic and group (None: a known user)
_V2_NEEDS = {"SendMessage": PUB, "EndTransaction": PUB, "RecallMessage": PUB,
             "ReceiveMessage": SUB, "AckMessage": SUB, "ChangeInvisibleDuration": SUB,
             "ForwardMessageToDeadLetterQueue": SUB, "QueryAssignment": SUB}


def acl_authenticator(store: AclStore) -> HeaderAuthenticator:
    """A :class:`HeaderAuthenticator` whose users and permissions are the broker's ACL."""

    def secret_of(access_key: str) -> str | None:
        account = store.acl.accounts.get(access_key)
        return account.secret_key if account is not None else None

    def authorize(access_key: str, method: str, topic: str, group: str) -> None:
        account = store.acl.accounts.get(access_key)
        need = _V2_NEEDS.get(method)
        if account is None or account.admin or need is None:
            return
        if topic and not account.topic_perm(topic) & need:
            raise PermissionDeniedError(
                f"access key {access_key!r} has no {'PUB' if need == PUB else 'SUB'} "
                f"permission on topic {topic!r}")
        if group and need == SUB and not account.group_perm(group) & SUB:
            raise PermissionDeniedError(
                f"access key {access_key!r} has no SUB permission on group {group!r}")

    return HeaderAuthenticator(secret_of, authorize=authorize)
