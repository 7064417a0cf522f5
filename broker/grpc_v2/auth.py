"""Who calls the v2 endpoint and what each call may touch.

**Authentication**: RocketMQ 5's request signature, the ``authorization``
header (MQv2-HMAC-SHA1). Every call of an official 5.x client carries, among
its headers::

    x-mq-date-time: 20261122T053045Z
    authorization:  MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time,
                    Signature=<hex of HMAC-SHA1(secret key, value of x-mq-date-time)>

(``Credential`` may go on with ``/...`` scope parts, which are ignored.)
:class:`HeaderAuthenticator` checks it: it looks the access key's secret up,
signs the date-time header with it and compares, in constant time and without
regard to hex case. The date-time is held to the v1 API's clock window
(:data:`~pocketmq.common.auth.REPLAY_WINDOW_MS`, ±300 s of the broker's clock,
in UTC): the official Python client (5.1.2) writes ``datetime.now()``, its
*local* time, with a literal ``Z``, so it must run on a UTC clock. Only the
date is signed, so a captured header can be replayed for the window's length:
TLS keeps it from being captured. An account's ``white_remote_address``
restricts where its key is used from, as on the broker's own port. A
``Telemetry`` stream is checked once, when it opens. A refusal is
``UNAUTHORIZED`` (40100) with the reason.

**Authorization**: every call is served for a :class:`Caller`, and the
servicer asks it about each topic and group the call names or touches
(:meth:`Caller.need`), under the rule of the RPC that stands for the action:
declaring a publishing topic in ``Telemetry`` settings needs what
``SendMessage`` needs, receiving a transaction check what ``EndTransaction``
needs. The authenticator's *authorize* decides (``acl_authenticator``: the
broker's ACL, :data:`V2_RULES`) and refuses by raising
:class:`~pocketmq.broker.errors.NoPermissionError` (``FORBIDDEN``).

System topics (``NOT_ALLOWED_READ_TOPICS``, ``NOT_ALLOWED_SEND_TOPICS``) are
refused to every v2 client with or without the ACL: none sends to them, and
only an admin account (ACL on) reads them (:meth:`Caller.read`, :meth:`Caller.write`).
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import grpc

from pocketmq.broker.errors import NoPermissionError
from pocketmq.broker.grpc_v2.convert import V2Error
from pocketmq.broker.topic_config import NOT_ALLOWED_READ_TOPICS, NOT_ALLOWED_SEND_TOPICS
from pocketmq.common.auth import REPLAY_WINDOW_MS
from pocketmq.rmqv2 import definition_pb2 as d
from pocketmq.security.acl import PUB, SUB, AclStore
from pocketmq.security.interceptor import peer_ip

__all__ = [
    "ALGORITHM",
    "V2_RULES",
    "Authenticator",
    "Caller",
    "HeaderAuthenticator",
    "acl_authenticator",
    "parse_authorization",
    "sign",
]

ALGORITHM = "MQv2-HMAC-SHA1"
AUTHORIZATION_HEADER = "authorization"
DATE_TIME_HEADER = "x-mq-date-time"
DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"

#: access key -> its secret key, or None when there is no such user
SecretLookup = Callable[[str], "str | None"]
#: (access key, method, topic, group) -> None, or raise NoPermissionError. Called once
#: for each topic/group pair a call touches; "" where the pair names none.
Authorize = Callable[[str, str, str, str], None]


class Authenticator(Protocol):
    """What the servicer needs to know about a caller."""

    def authenticate(self, context: grpc.aio.ServicerContext) -> str:
        """The caller's access key; raise V2Error(UNAUTHORIZED) to refuse the call."""

    def authorize(self, access_key: str, method: str, topic: str, group: str) -> None:
        """Raise NoPermissionError when *method* may not touch *topic* / *group*."""

    def is_admin(self, access_key: str) -> bool:
        """An admin reads system topics."""


@dataclass(frozen=True, slots=True)
class Caller:
    """The one who makes a call: an access key ("" when no signature is checked)."""

    access_key: str
    method: str
    authenticator: Authenticator | None = None

    @property
    def admin(self) -> bool:
        return self.authenticator is not None and self.authenticator.is_admin(self.access_key)

    def need(self, topic: str = "", group: str = "", *, as_method: str = "") -> None:
        """Refuse unless the caller may do *as_method* (this call's RPC) on topic/group."""
        if self.authenticator is not None and (topic or group):
            self.authenticator.authorize(self.access_key, as_method or self.method, topic, group)

    def read(self, topic: str, group: str = "", *, as_method: str = "") -> None:
        """:meth:`need`, and *topic* is not a system topic (unless the caller is an admin)."""
        if topic in NOT_ALLOWED_READ_TOPICS and not self.admin:
            raise NoPermissionError(
                f"topic {topic!r} is a system topic of the broker; no client reads it"
            )
        self.need(topic, group, as_method=as_method)

    def write(self, topic: str, *, as_method: str = "") -> None:
        """:meth:`need`, and *topic* is not a topic only the broker writes."""
        if topic in NOT_ALLOWED_SEND_TOPICS:
            raise NoPermissionError(
                f"topic {topic!r} is a system topic only the broker "
                "writes; send to a topic of your own"
            )
        self.need(topic, as_method=as_method)


def sign(secret_key: str, date_time: str) -> str:
    """The signature a client with *secret_key* sends for *date_time* (lowercase hex)."""
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def _unauthorized(why: str) -> V2Error:
    return V2Error(
        d.UNAUTHORIZED,
        f"{why}; sign requests with the access key and secret key "
        "of a user this broker knows (ClientConfiguration "
        "credentials)",
    )


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


def date_time_ms(value: str) -> int:
    """``20261122T053045Z`` -> ms since the epoch (UTC); V2Error when it is not one."""
    try:
        parsed = time.strptime(value, DATE_TIME_FORMAT)
    except (ValueError, OverflowError):
        raise V2Error(
            d.UNAUTHORIZED,
            f"{DATE_TIME_HEADER} is {value[:40]!r}, not a UTC time as yyyyMMddTHHmmssZ",
        ) from None
    return calendar.timegm(parsed) * 1000


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


class HeaderAuthenticator:
    """Checks the signature of every v2 call; *authorize* and *is_admin* from the caller."""

    def __init__(
        self,
        secret_of: SecretLookup,
        *,
        authorize: Authorize | None = None,
        admin_of: Callable[[str], bool] | None = None,
        allowed_from: Callable[[str, str], bool] | None = None,
        clock_ms: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        self._secret_of = secret_of
        self._allowed_from = allowed_from  # (access key, peer ip) -> may it call from there
        self._authorize = authorize
        self._admin_of = admin_of
        self._clock_ms = clock_ms

    def authenticate(self, context: grpc.aio.ServicerContext) -> str:
        headers = {k: str(v) for k, v in context.invocation_metadata() or ()}
        access_key = self.check(headers)
        if self._allowed_from is not None:
            ip = peer_ip(context.peer() or "")
            if not self._allowed_from(access_key, ip):
                raise _unauthorized(
                    f"access key {access_key[:64]!r} may not be used from "
                    f"{ip} (its white_remote_address)"
                )
        return access_key

    def authorize(self, access_key: str, method: str, topic: str, group: str) -> None:
        if self._authorize is not None:
            self._authorize(access_key, method, topic, group)

    def is_admin(self, access_key: str) -> bool:
        return self._admin_of is not None and self._admin_of(access_key)

    def check(self, headers: dict[str, str]) -> str:
        """The caller's access key; V2Error(UNAUTHORIZED) when the signature does not hold."""
        value = headers.get(AUTHORIZATION_HEADER)
        if not value:
            raise _unauthorized("the authorization header is missing")
        access_key, signed, signature = parse_authorization(value)
        if DATE_TIME_HEADER not in signed.split(";"):
            raise _unauthorized(f"SignedHeaders is {signed!r}; it must include {DATE_TIME_HEADER}")
        date_time = headers.get(DATE_TIME_HEADER)
        if not date_time:
            raise _unauthorized(f"the {DATE_TIME_HEADER} header is missing")
        self._check_clock(date_time)
        secret = self._secret_of(access_key)
        if secret is None:
            raise _unauthorized(f"access key {access_key[:64]!r} is unknown")
        if not signature.isascii() or not hmac.compare_digest(
            sign(secret, date_time), signature.lower()
        ):
            raise _unauthorized(
                f"the signature of access key {access_key[:64]!r} does not match its secret key"
            )
        return access_key

    def _check_clock(self, date_time: str) -> None:
        signed_ms = date_time_ms(date_time)
        skew_ms = self._clock_ms() - signed_ms
        # The header has whole seconds: a request signed at x.999 s reads as x.000.
        if -REPLAY_WINDOW_MS <= skew_ms <= REPLAY_WINDOW_MS + 999:
            return
        where = "behind" if skew_ms > 0 else "ahead of"
        raise V2Error(
            d.UNAUTHORIZED,
            f"{DATE_TIME_HEADER} {date_time[:40]} is "
            f"{abs(skew_ms) // 1000} s {where} the broker's clock "
            f"(UTC); signatures are accepted within "
            f"±{REPLAY_WINDOW_MS // 1000} s: sync the client's "
            "clock (the official Python client signs with its local "
            "time, so run it in UTC)",
        )


# RocketMQ 5 method -> the permission it needs on the topic it touches. A group it touches
# always needs SUB (groups are consumers'). QueryRoute serves producers and consumers
# alike: PUB or SUB. Methods not listed need an admin.
V2_RULES: dict[str, int] = {
    "QueryRoute": PUB | SUB,
    "SendMessage": PUB,
    "EndTransaction": PUB,
    "RecallMessage": PUB,
    "ReceiveMessage": SUB,
    "AckMessage": SUB,
    "ChangeInvisibleDuration": SUB,
    "ForwardMessageToDeadLetterQueue": SUB,
    "QueryAssignment": SUB,
    "PullMessage": SUB,
    "UpdateOffset": SUB,
    "GetOffset": SUB,
    "QueryOffset": SUB,
    "SyncLiteSubscription": SUB,
    "Heartbeat": SUB,
    "NotifyClientTermination": SUB,
    "Telemetry": SUB,
}
_PERM_NAMES = {PUB: "PUB", SUB: "SUB", PUB | SUB: "PUB or SUB"}


def acl_authenticator(
    store: AclStore, *, clock_ms: Callable[[], int] = _wall_clock_ms
) -> HeaderAuthenticator:
    """A :class:`HeaderAuthenticator` whose users and permissions are the broker's ACL."""

    def secret_of(access_key: str) -> str | None:
        account = store.acl.accounts.get(access_key)
        return account.secret_key if account is not None else None

    def admin_of(access_key: str) -> bool:
        account = store.acl.accounts.get(access_key)
        return account is not None and account.admin

    def allowed_from(access_key: str, ip: str) -> bool:
        account = store.acl.accounts.get(access_key)
        return account is not None and account.may_connect_from(ip)

    def authorize(access_key: str, method: str, topic: str, group: str) -> None:
        account = store.acl.accounts.get(access_key)
        if account is None:
            raise NoPermissionError(f"access key {access_key[:64]!r} is no longer in the ACL")
        if account.admin:
            return
        need = V2_RULES.get(method)
        if need is None:
            raise NoPermissionError(
                f"{method} needs an admin; access key {access_key!r} is not one"
            )
        if topic and not account.topic_perm(topic) & need:
            raise NoPermissionError(
                f"access key {access_key!r} has no {_PERM_NAMES[need]} permission on topic "
                f"{topic!r}"
            )
        if group and not account.group_perm(group) & SUB:
            raise NoPermissionError(
                f"access key {access_key!r} has no SUB permission on group {group!r}"
            )

    return HeaderAuthenticator(
        secret_of,
        authorize=authorize,
        admin_of=admin_of,
        allowed_from=allowed_from,
        clock_ms=clock_ms,
    )
