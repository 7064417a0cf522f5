"""AclInterceptor: the broker's authentication and authorization, before any servicer code.

Per call (unary and server-streaming; SendStream's calls are checked per request,
each request carrying its own signature, :meth:`AclInterceptor.check_stream_request`,
as a call's metadata is signed once; any other call streaming requests is served to
trusted addresses only and refused FAILED_PRECONDITION to anyone else)::

    peer ip in global_white_remote_addresses? ─ yes ─▶ served (RocketMQ's trusted hosts)
    x-pocketmq-access-key known?                no ─▶ UNAUTHENTICATED  "access key ... is unknown"
    account allowed from this ip?               no ─▶ PERMISSION_DENIED naming the address
    timestamp within ±300 s of the broker?      no ─▶ UNAUTHENTICATED  "... 412 s off"
    signature = HMAC(secret, canonical string)? no ─▶ UNAUTHENTICATED  (common/auth.py; it
                                                                        covers the whole body)
    signature not seen in the last 300 s?       no ─▶ UNAUTHENTICATED  "... a replay"
    the method's rule (RULES) holds?            no ─▶ PERMISSION_DENIED naming user, resource,
                                                                        permission
    ──▶ served, with the account in :data:`current_account` for the servicer's own checks

RULES check what the request's own fields name. What a request names inside
(the topics of a send's records, of each queue of a PullBatch or LockBatchMQ,
the record at a send-back's or EndTransaction's offset, the groups and
subscriptions of a heartbeat, the client id a caller registered) is checked by
the broker's servicer with :func:`authorize_publish`, :func:`authorize_subscribe`
and :func:`authorize_group` once it has read them. An admin account may do
everything. Methods not in :data:`RULES` need admin.
"""

from __future__ import annotations

import contextlib
import contextvars
import hmac
import inspect
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc

from pocketmq.common.auth import (
    ACCESS_KEY_HEADER,
    NONCE_HEADER,
    REPLAY_WINDOW_MS,
    SEND_STREAM_METHOD,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    sign,
    sign_stream_request,
    signed_fields,
)
from pocketmq.security.acl import PUB, SUB, Account, Acl, AclStore
from pocketmq.security.errors import SecurityError
from pocketmq.security.replay import DEFAULT_MAX_SIGNATURES, RecentSignatures

__all__ = [
    "ANY",
    "RULES",
    "AclError",
    "AclInterceptor",
    "authorize_group",
    "authorize_publish",
    "authorize_subscribe",
    "current_account",
    "current_owner",
    "peer_ip",
    "stream_acl",
]

REASON_METADATA_KEY = "pocketmq-reason"  # as broker/grpc_status.py names it
#: the reason of a request stream refused while the ACL is on (clients fall back to unary)
STREAM_REFUSED_REASON = "SEND_STREAM_UNSUPPORTED"

#: in a SendStream call: the ACL that must pass each of its requests (None: ACL off)
stream_acl: contextvars.ContextVar[AclInterceptor | None] = contextvars.ContextVar(
    "pocketmq_stream_acl", default=None
)
#: the request-streaming methods whose requests carry their own signatures
SIGNED_PER_REQUEST = frozenset({"SendStream"})

#: the account of the call being served; None when the ACL is off or the peer is trusted
current_account: contextvars.ContextVar[Account | None] = contextvars.ContextVar(
    "pocketmq_acl_account", default=None
)

AUTH = "authenticated"  # any known user
GROUP = "GROUP"  # PUB or SUB on the group (a producer group's own)
ANY = PUB | SUB
# method name -> (what it needs, the topic field, the group field)
RULES: dict[str, tuple[str, str, str]] = {
    "SendMessage": (AUTH, "", ""),
    "SendBatch": (AUTH, "", ""),  # PUB: authorize_publish
    "InitProducerId": (AUTH, "", ""),  # PUB on each topic named: authorize_publish
    # PUB on the half's topic: the servicer, once it has read the half
    "EndTransaction": (GROUP, "", "producer_group"),
    "PullMessage": ("SUB", "topic", "consumer_group"),
    "PullBatch": ("SUB", "", "consumer_group"),  # each queue's topic: authorize_subscribe
    "QueryConsumerOffset": ("SUB", "topic", "consumer_group"),
    "UpdateConsumerOffset": ("SUB", "topic", "consumer_group"),
    "GetMinOffset": ("SUB", "topic", ""),
    "GetMaxOffset": ("SUB", "topic", ""),
    "SearchOffsetByTimestamp": ("SUB", "topic", ""),
    "QueryMessage": ("SUB", "topic", ""),
    # the record's topics: the servicer, once it has read the record
    "ConsumerSendMsgBack": ("SUB", "", "group"),
    # each queue's topic: the servicer
    "LockBatchMQ": ("SUB", "", "group"),
    "UnlockBatchMQ": ("SUB", "", "group"),
    "GetConsumerListByGroup": ("SUB", "", "consumer_group"),
    # groups, subscriptions and the client id's owner: the servicer
    "HeartBeat": (AUTH, "", ""),
    "UnregisterClient": (AUTH, "", ""),
    "ClientChannel": (AUTH, "", ""),
    # the nameserver: routes are for any user; RegisterBroker/UnregisterBroker need admin
    "GetRouteInfoByTopic": (AUTH, "", ""),
    "GetAllTopicList": (AUTH, "", ""),
    "GetBrokerClusterInfo": (AUTH, "", ""),
    "GetTopicRoutes": (AUTH, "", ""),
}


class AclError(SecurityError):
    """A call the ACL refuses; ``code`` is the gRPC status it is answered with."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def peer_ip(peer: str) -> str:
    """``ipv4:10.0.0.7:52344`` -> ``10.0.0.7``; ``ipv6:[::1]:5`` -> ``::1``."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6":
        return rest.rsplit(":", 1)[0].strip("[]")
    return rest.rsplit(":", 1)[0]


def _perm_name(perm: int) -> str:
    return {PUB: "PUB", SUB: "SUB"}.get(perm, "PUB or SUB")


def _denied(account: Account, what: str, name: str, perm: int) -> AclError:
    return AclError(
        grpc.StatusCode.PERMISSION_DENIED,
        f"access key {account.access_key!r} has no {_perm_name(perm)} permission on "
        f"{what} {name!r}; grant it in the ACL file (topic_perms / group_perms)",
    )


def current_owner() -> str | None:
    """The access key of the call being served; None without an ACL or from a trusted host."""
    account = current_account.get()
    return None if account is None else account.access_key


def authorize_group(group: str, perm: int = SUB) -> None:
    """*perm* on *group* (:data:`ANY`: either permission) for the account being served."""
    account = current_account.get()
    if account is None or account.admin:
        return
    if not account.group_perm(group) & perm:
        raise _denied(account, "group", group, perm)


def authorize_publish(topics: Iterable[str]) -> None:
    """PUB on every topic for the account being served; no-op without an ACL."""
    account = current_account.get()
    if account is None or account.admin:
        return
    for topic in topics:
        if not account.topic_perm(topic) & PUB:
            raise _denied(account, "topic", topic, PUB)


def authorize_subscribe(topic: str) -> None:
    """SUB on *topic* for the account being served (each queue of a PullBatch)."""
    account = current_account.get()
    if account is None or account.admin:
        return
    if not account.topic_perm(topic) & SUB:
        raise _denied(account, "topic", topic, SUB)


def _request_stream_handler(handler: grpc.RpcMethodHandler, behavior: Any) -> Any:
    make = (
        grpc.stream_stream_rpc_method_handler
        if handler.response_streaming
        else grpc.stream_unary_rpc_method_handler
    )
    return make(
        behavior,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


class AclInterceptor(grpc.aio.ServerInterceptor):
    def __init__(
        self,
        store: AclStore,
        *,
        clock_ms: Callable[[], int] | None = None,
        max_signatures: int = DEFAULT_MAX_SIGNATURES,
        server_kind: str = "broker",
    ) -> None:
        self._store = store
        self._kind = server_kind  # "broker" or "nameserver", for the refusals
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._seen = RecentSignatures(REPLAY_WINDOW_MS, max_entries=max_signatures)
        self._wrapped: dict[str, tuple[Any, Any]] = {}
        self.refused_total = 0

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None:
            return handler
        method = details.method
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        if handler.unary_unary is not None:
            wrapped = grpc.unary_unary_rpc_method_handler(
                self._guard_unary(method, handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        elif handler.unary_stream is not None:
            wrapped = grpc.unary_stream_rpc_method_handler(
                self._guard_stream(method, handler.unary_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        elif handler.request_streaming:
            # A signature covers one request's body; a stream's requests come later, unsigned.
            wrapped = _request_stream_handler(handler, self._guard_request_stream(method, handler))
        else:
            return handler
        self._wrapped[method] = (handler, wrapped)
        return wrapped

    def _guard_unary(self, method: str, behavior: Any) -> Any:
        async def guarded(request: Any, context: grpc.aio.ServicerContext) -> Any:
            token = await self._admit(method, request, context)
            try:
                return await behavior(request, context)
            finally:
                current_account.reset(token)

        return guarded

    def _guard_stream(self, method: str, behavior: Any) -> Any:
        async def guarded(request: Any, context: grpc.aio.ServicerContext) -> Any:
            token = await self._admit(method, request, context)
            try:
                async for item in behavior(request, context):
                    yield item
            finally:
                # A stream the client closed is finalized (aclose) from another context,
                # where the token cannot be reset; that context dies with the call anyway.
                with contextlib.suppress(ValueError):
                    current_account.reset(token)

        return guarded

    def _guard_request_stream(self, method: str, handler: grpc.RpcMethodHandler) -> Any:
        """SendStream (:data:`SIGNED_PER_REQUEST`) is served with :data:`stream_acl` set,
        and its servicer checks each request (:meth:`check_stream_request`). Any other
        stream of requests is served to trusted addresses only (RocketMQ's
        global_white_remote_addresses); to anyone else FAILED_PRECONDITION, reason
        SEND_STREAM_UNSUPPORTED: its requests would pass unsigned."""
        behavior = handler.stream_stream or handler.stream_unary
        name = method.rsplit("/", 1)[-1]

        async def refuse_untrusted(context: grpc.aio.ServicerContext) -> Any:
            if name in SIGNED_PER_REQUEST:  # the servicer checks each request
                return stream_acl.set(self)
            if self._store.acl.trusted(peer_ip(context.peer() or "")):
                return current_account.set(None)
            self.refused_total += 1
            context.set_trailing_metadata(((REASON_METADATA_KEY, STREAM_REFUSED_REASON),))
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{name} is not served while the ACL is on (a signature covers one request, "
                "a stream's requests would pass unsigned); send its requests one by one",
            )
            raise AssertionError("abort returned")  # pragma: no cover

        if inspect.isasyncgenfunction(behavior):

            async def guarded_gen(requests: Any, context: grpc.aio.ServicerContext) -> Any:
                await refuse_untrusted(context)
                async for item in behavior(requests, context):
                    yield item

            return guarded_gen

        async def guarded(requests: Any, context: grpc.aio.ServicerContext) -> Any:
            await refuse_untrusted(context)
            return await behavior(requests, context)

        return guarded

    def check_stream_request(
        self,
        *,
        access_key: str,
        timestamp_ms: int,
        nonce: str,
        signature: str,
        batch: bytes | memoryview,
        ip: str,
    ) -> Account | None:
        """The account of one SendStream request, checked as a signed call is (known
        key, allowed address, replay window, signature, never seen before); None from a
        trusted address; AclError when refused."""
        acl = self._store.acl
        if acl.trusted(ip):
            return None
        method = SEND_STREAM_METHOD
        headers = {ACCESS_KEY_HEADER: access_key, TIMESTAMP_HEADER: str(timestamp_ms)}
        try:
            account = self._account_of(acl, method, headers, ip)
            ts, now_ms = self._fresh_timestamp_ms(headers)
            if not nonce:
                raise AclError(
                    grpc.StatusCode.UNAUTHENTICATED,
                    f"a {method} request carries no nonce; sign each request (common/auth.py)",
                )
            expected = sign_stream_request(account.secret_key, ts, access_key, nonce[:64], batch)
            self._admit_signature(access_key, expected, signature, ts, now_ms)
        except AclError:
            self.refused_total += 1
            raise
        return account

    async def _admit(
        self, method: str, request: Any, context: grpc.aio.ServicerContext
    ) -> contextvars.Token[Account | None]:
        try:
            account = self.check(
                method,
                request,
                dict(context.invocation_metadata() or ()),
                peer_ip(context.peer() or ""),
            )
        except AclError as exc:
            self.refused_total += 1
            await context.abort(exc.code, exc.message)
            raise AssertionError("abort returned") from None  # pragma: no cover
        return current_account.set(account)

    def check(self, method: str, request: Any, headers: dict[str, Any], ip: str) -> Account | None:
        """The caller's account (None for a trusted address); AclError when refused."""
        acl = self._store.acl
        if acl.trusted(ip):
            return None
        account = self._account_of(acl, method, headers, ip)
        ts, now_ms = self._fresh_timestamp_ms(headers)
        self._verify_signature(method, request, headers, account, ts, now_ms)
        self._authorize(account, method.rsplit("/", 1)[-1], request)
        return account

    def _account_of(self, acl: Acl, method: str, headers: dict[str, Any], ip: str) -> Account:
        """*acl*'s account of the request's access key, if it may connect from *ip*."""
        access_key = str(headers.get(ACCESS_KEY_HEADER, ""))
        if not access_key:
            raise AclError(
                grpc.StatusCode.UNAUTHENTICATED,
                f"{method} carries no {ACCESS_KEY_HEADER}; this {self._kind} requires "
                "signed requests (give the client access_key and secret_key)",
            )
        account = acl.accounts.get(access_key)
        if account is None:
            raise AclError(
                grpc.StatusCode.UNAUTHENTICATED,
                f"access key {access_key[:64]!r} is unknown to this {self._kind}'s ACL",
            )
        if not account.may_connect_from(ip):
            raise AclError(
                grpc.StatusCode.PERMISSION_DENIED,
                f"access key {access_key!r} may not be used from {ip}; its "
                f"white_remote_address is {account.white_remote_address!r}",
            )
        return account

    def _fresh_timestamp_ms(self, headers: dict[str, Any]) -> tuple[int, int]:
        """``(signed timestamp, now)`` in ms; refused outside the replay window."""
        try:
            ts = int(str(headers.get(TIMESTAMP_HEADER, "")))
        except ValueError:
            raise AclError(
                grpc.StatusCode.UNAUTHENTICATED,
                f"{TIMESTAMP_HEADER} is missing or not milliseconds",
            ) from None
        now_ms = self._clock_ms()
        skew_ms = ts - now_ms
        if abs(skew_ms) > REPLAY_WINDOW_MS:
            raise AclError(
                grpc.StatusCode.UNAUTHENTICATED,
                f"the request was signed {abs(skew_ms) / 1000:.0f} s "
                f"{'ahead of' if skew_ms > 0 else 'behind'} this {self._kind}'s clock; "
                f"at most {REPLAY_WINDOW_MS // 1000} s are accepted (check NTP)",
            )
        return ts, now_ms

    def _verify_signature(
        self,
        method: str,
        request: Any,
        headers: dict[str, Any],
        account: Account,
        ts: int,
        now_ms: int,
    ) -> None:
        """Refuse a request without a nonce, with a wrong signature, or seen before."""
        access_key = str(headers.get(ACCESS_KEY_HEADER, ""))
        nonce = str(headers.get(NONCE_HEADER, ""))
        if not nonce:
            raise AclError(
                grpc.StatusCode.UNAUTHENTICATED,
                f"{method} carries no {NONCE_HEADER}; the client signs with an older "
                "scheme than this server's (upgrade the client)",
            )
        signature = str(headers.get(SIGNATURE_HEADER, ""))
        expected = sign(
            account.secret_key, method, ts, access_key, signed_fields(request, nonce[:64])
        )
        self._admit_signature(access_key, expected, signature, ts, now_ms)

    def _admit_signature(
        self, access_key: str, expected: str, signature: str, ts: int, now_ms: int
    ) -> None:
        """Refuse a *signature* that is not *expected*, or was accepted before."""
        if not hmac.compare_digest(expected, signature):
            raise AclError(
                grpc.StatusCode.UNAUTHENTICATED,
                f"the signature of access key {access_key!r} does not match; the "
                "secret key differs from the ACL's, or the request was altered",
            )
        if not self._seen.admit(signature, ts, now_ms):
            raise AclError(
                grpc.StatusCode.UNAUTHENTICATED,
                f"this request of access key {access_key!r} was already received "
                f"with the same signature; a replay is refused (each request is "
                f"signed anew, and a signature is accepted once within "
                f"{REPLAY_WINDOW_MS // 1000} s)",
            )

    @staticmethod
    def _authorize(account: Account, name: str, request: Any) -> None:
        if account.admin:
            return
        rule = RULES.get(name)
        if rule is None:
            raise AclError(
                grpc.StatusCode.PERMISSION_DENIED,
                f"{name} is an admin request; access key {account.access_key!r} "
                "is not an admin (admin = true in the ACL file)",
            )
        need, topic_field, group_field = rule
        if need == AUTH:
            return
        topic = getattr(request, topic_field, "") if topic_field else ""
        if topic and not account.topic_perm(topic) & SUB:
            raise _denied(account, "topic", topic, SUB)
        group = getattr(request, group_field, "") if group_field else ""
        group_need = ANY if need == GROUP else SUB
        if group and not account.group_perm(group) & group_need:
            raise _denied(account, "group", group, group_need)
