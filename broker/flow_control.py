"""Flow control: bounded requests in progress and response bytes queued, per connection
and in all.

RocketMQ bounds each request kind with a thread pool and a queue of fixed
capacity (``sendThreadPoolQueueCapacity`` 10,000 ...) and answers a request it
cannot queue with ``SYSTEM_BUSY`` ("[TOO_MANY_REQUESTS_AND_SYSTEM_THREAD_POOL_BUSY]
...", "[TIMEOUT_CLEAN_QUEUE] broker busy"), which clients retry after a pause.
Here every request is a task on one event loop, so the bound is a count::

    RPC ─▶ FlowControlInterceptor
             ├─ in progress on its connection < max_in_flight_requests_per_connection
             │  and on the whole broker       < max_in_flight_requests
             │      → counted, served, uncounted when it ends
             └─ else → RESOURCE_EXHAUSTED, reason SYSTEM_BUSY, at once, the message
                       naming the limit and its config key

A request is in progress until its call has ended: until grpc has handed its
response to the transport and sent its status (``context.add_done_callback``),
not merely until the servicer returned. A client that never reads its
responses (an HTTP/2 window of zero, a socket never read) thus keeps its
requests counted, and their responses' bytes too::

    servicer returns ─▶ response serialized here (its size known) ─▶ grpc sends it
                        bytes counted per connection and in all  ◀── uncounted when the
                                                                     call ends (sent,
                                                                     cancelled, closed)

and new requests on that connection are refused once it has
``max_queued_response_bytes_per_connection`` waiting to be sent, or once all
connections together have ``max_queued_response_bytes``. One response is
always admitted whatever its size: the bound is checked before a request runs.

A connection is a client's channel (``context.peer()``: ``ipv4:10.0.0.7:52344``).
A pull parked by long polling waits for a message without working, as a
suspended RocketMQ pull holds no thread: :func:`parked` takes it out of both
counts while it waits (parked pulls have their own bound, ``max_parked_pulls``).
Server-streaming calls (``ClientChannel``, one per client) are not counted.

The interceptor only counts and refuses; it composes with any other
interceptor on the same server (authentication, ...), in either order.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

import grpc

from pocketmq.broker.errors import SystemBusyError
from pocketmq.broker.grpc_status import REASON_METADATA_KEY, grpc_code

if TYPE_CHECKING:
    from pocketmq.broker.config import BrokerConfig

__all__ = ["FlowControlInterceptor", "parked", "server_limits"]

log = logging.getLogger(__name__)

Behavior = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]
LOG_EVERY_REFUSALS = 1_000  # a warning for the first refusal and every 1,000th after it


class _Slot:
    """One admitted request: its connection, whether it is counted now, its response bytes."""

    __slots__ = ("counted", "limiter", "peer", "queued_bytes")

    def __init__(self, limiter: FlowControlInterceptor, peer: str) -> None:
        self.limiter = limiter
        self.peer = peer
        self.counted = True
        self.queued_bytes = 0

    def call_ended(self, _context: object) -> None:
        """grpc's done callback: the response is sent, or the call is over anyway."""
        limiter = self.limiter
        if self.counted:
            limiter._release(self)
        if self.queued_bytes:
            limiter._unqueue(self)


_current: contextvars.ContextVar[_Slot | None] = contextvars.ContextVar(
    "pocketmq_flow_control_slot", default=None
)


@contextlib.contextmanager
def parked() -> Iterator[None]:
    """Uncount the current request while it waits without working (a parked pull)."""
    slot = _current.get()
    if slot is None or not slot.counted:
        yield
        return
    slot.limiter._release(slot)
    try:
        yield
    finally:
        slot.limiter._admit_again(slot)


class FlowControlInterceptor(grpc.aio.ServerInterceptor):
    """Refuses requests beyond the per-connection and total in-progress limits."""

    def __init__(
        self,
        *,
        max_per_connection: int,
        max_total: int,
        max_bytes_per_connection: int = 64 * 1024 * 1024,
        max_bytes_total: int = 256 * 1024 * 1024,
    ) -> None:
        limits = (max_per_connection, max_total, max_bytes_per_connection, max_bytes_total)
        if min(limits) <= 0:
            raise ValueError(
                f"limits must be positive, got {max_per_connection} requests per "
                f"connection, {max_total} in all, {max_bytes_per_connection} "
                f"response bytes per connection, {max_bytes_total} in all"
            )
        self.max_per_connection = max_per_connection
        self.max_total = max_total
        self.max_bytes_per_connection = max_bytes_per_connection
        self.max_bytes_total = max_bytes_total
        self._by_peer: dict[str, int] = {}
        self._total = 0
        self._bytes_by_peer: dict[str, int] = {}
        self._bytes_total = 0
        self.refused_total = 0  # requests answered SYSTEM_BUSY since start
        # method -> (handler seen, handler wrapped): one wrapping per method, redone only
        # when the continuation hands out another handler (another interceptor's doing).
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    @property
    def in_flight(self) -> int:
        """Requests counted now, over every connection."""
        return self._total

    @property
    def queued_bytes(self) -> int:
        """Response bytes produced but not yet sent, over every connection."""
        return self._bytes_total

    def figures(self) -> dict[str, str]:
        """Rows of GetBrokerRuntimeInfo."""
        return {
            "requests_in_flight": str(self._total),
            "requests_refused_busy_total": str(self.refused_total),
            "response_bytes_queued": str(self._bytes_total),
            "max_in_flight_requests": str(self.max_total),
            "max_in_flight_requests_per_connection": str(self.max_per_connection),
            "max_queued_response_bytes": str(self.max_bytes_total),
            "max_queued_response_bytes_per_connection": str(self.max_bytes_per_connection),
        }

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler  # unknown methods and streams pass as they are
        method = handler_call_details.method
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        # The response is serialized here, to count its bytes; grpc sends them as they are.
        wrapped = grpc.unary_unary_rpc_method_handler(
            self._guard(handler.unary_unary, handler.response_serializer),
            request_deserializer=handler.request_deserializer,
            response_serializer=None,
        )
        self._wrapped[method] = (handler, wrapped)
        return wrapped

    def _guard(self, behavior: Behavior, serialize: Callable[[Any], bytes] | None) -> Behavior:
        async def guarded(request: Any, context: grpc.aio.ServicerContext) -> Any:
            peer = context.peer() or "unknown"
            refusal = self._refusal(peer)
            if refusal is not None:
                self.refused_total += 1
                if self.refused_total % LOG_EVERY_REFUSALS == 1:
                    log.warning(
                        "%s (%d requests refused busy since start)",
                        refusal.message,
                        self.refused_total,
                    )
                context.set_trailing_metadata(((REASON_METADATA_KEY, refusal.reason),))
                await context.abort(grpc_code(refusal), refusal.message)
            slot = _Slot(self, peer)
            self._admit_again(slot)
            # Uncounted when the call ends, its response sent: not when this returns.
            context.add_done_callback(slot.call_ended)
            token = _current.set(slot)
            try:
                response = await behavior(request, context)
            finally:
                _current.reset(token)
            if response is None or serialize is None:
                return response
            raw = serialize(response)
            self._queue(slot, len(raw))
            return raw

        return guarded

    @contextlib.contextmanager
    def serving(self, peer: str) -> Iterator[None]:
        """Count one request of *peer* that is no call of its own (one SendStream
        request, broker/v1_send_stream.py) while the block runs, refused as a call would
        be (SystemBusyError); :func:`parked` uncounts it while it waits, as a call."""
        slot = self.admit(peer)
        token = _current.set(slot)
        try:
            yield
        finally:
            _current.reset(token)
            slot.call_ended(None)

    def admit(self, peer: str) -> _Slot:
        """Count one request of *peer*, refused as a call would be: SystemBusyError.
        ``slot.call_ended(None)`` uncounts it once it is answered."""
        refusal = self._refusal(peer)
        if refusal is not None:
            self.refused_total += 1
            if self.refused_total % LOG_EVERY_REFUSALS == 1:
                log.warning(
                    "%s (%d requests refused busy since start)", refusal.message, self.refused_total
                )
            raise refusal
        slot = _Slot(self, peer)
        self._admit_again(slot)
        return slot

    def _refusal(self, peer: str) -> SystemBusyError | None:
        on_peer = self._by_peer.get(peer, 0)
        if on_peer >= self.max_per_connection:
            return SystemBusyError(
                f"[TOO_MANY_REQUESTS] broker busy: {on_peer} requests are already in progress "
                f"on this connection ({peer}); the limit is {self.max_per_connection} "
                "(max_in_flight_requests_per_connection); back off and retry"
            )
        if self._total >= self.max_total:
            return SystemBusyError(
                f"[TOO_MANY_REQUESTS] broker busy: {self._total} requests are already in "
                f"progress on this broker; the limit is {self.max_total} "
                "(max_in_flight_requests); back off and retry"
            )
        queued = self._bytes_by_peer.get(peer, 0)
        if queued >= self.max_bytes_per_connection:
            return SystemBusyError(
                f"[TOO_MANY_REQUESTS] broker busy: {queued} response bytes wait to be sent on "
                f"this connection ({peer}), which reads slower than it asks; the limit is "
                f"{self.max_bytes_per_connection} (max_queued_response_bytes_per_connection); "
                "read the responses, back off and retry"
            )
        if self._bytes_total >= self.max_bytes_total:
            return SystemBusyError(
                f"[TOO_MANY_REQUESTS] broker busy: {self._bytes_total} response bytes wait to "
                f"be sent on this broker; the limit is {self.max_bytes_total} "
                "(max_queued_response_bytes); back off and retry"
            )
        return None

    def _admit_again(self, slot: _Slot) -> None:
        self._by_peer[slot.peer] = self._by_peer.get(slot.peer, 0) + 1
        self._total += 1
        slot.counted = True

    def _queue(self, slot: _Slot, size: int) -> None:
        slot.queued_bytes = size
        self._bytes_by_peer[slot.peer] = self._bytes_by_peer.get(slot.peer, 0) + size
        self._bytes_total += size

    def _unqueue(self, slot: _Slot) -> None:
        self._bytes_total -= slot.queued_bytes
        left = self._bytes_by_peer[slot.peer] - slot.queued_bytes
        slot.queued_bytes = 0
        if left:
            self._bytes_by_peer[slot.peer] = left
        else:
            del self._bytes_by_peer[slot.peer]

    def _release(self, slot: _Slot) -> None:
        slot.counted = False
        self._total -= 1
        left = self._by_peer[slot.peer] - 1
        if left:
            self._by_peer[slot.peer] = left
        else:
            del self._by_peer[slot.peer]


def server_limits(cfg: BrokerConfig) -> list[tuple[str, int]]:
    """grpc server options that keep hostile or slow connections bounded.

    grpc core queues a call that arrives while the server has no request for
    it outstanding (grpc.aio asks for one call per method at a time and asks
    again once it took one). Past ``grpc.server.max_pending_requests`` (1,000)
    queued calls core refuses new ones at random, more as the queue nears the
    hard limit (3,000), by killing them unseen: the client gets ``CANCELLED``.
    A burst of 10,500 long polls thus lost about half of them before the
    broker could count them. The queue may hold what the broker itself bounds,
    requests in flight and parked pulls, so that refusals are the broker's
    (SYSTEM_BUSY, naming the key) and never core's.
    """
    pending = cfg.max_in_flight_requests + cfg.max_parked_pulls
    return [
        ("grpc.server.max_pending_requests", pending),
        ("grpc.server.max_pending_requests_hard_limit", 2 * pending),
        # A stream that never sends its request is counted nowhere else.
        ("grpc.max_concurrent_streams", cfg.streams_per_connection),
        # Ping every connection, idle or not; one that leaves a ping unanswered (it
        # stopped reading its socket) is closed and its calls end, freeing their bytes.
        ("grpc.keepalive_time_ms", cfg.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", cfg.keepalive_timeout_ms),
        # A ping stuck behind unwritten bytes is never sent, so keepalive's own timer
        # never starts: this one counts from when the ping was queued (60 s unless set).
        ("grpc.http2.ping_timeout_ms", cfg.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
    ]
