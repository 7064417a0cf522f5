"""SendStream: SendBatch over one long-lived bidirectional stream.

A unary call costs the broker a call object, its metadata and a task per RPC; on
an open stream one SendBatch is one message. Each request on the stream is served
as the unary SendBatch serves it (the same checks, authorization, busy refusal,
role check, limits, idempotence, statistics), and answered by its id::

    client ── SendStreamRequest(id 7) ─▶ read in order ─▶ task 7: checks, put ─┐
           ── SendStreamRequest(id 8) ─▶ read in order ─▶ task 8: checks, put ─┤ (puts in
                                                                              │ arrival order)
           ◀── SendStreamResponse(id 8) ◀── answers as they complete ◀─────────┘ flush or
           ◀── SendStreamResponse(id 7)                                        replica waits
                                                                               overlap

Requests are stored in arrival order: each one's task is created as it is read,
tasks start in creation order, and a send does not yield between its checks and
its put (``SendMessageProcessor.send``). What may overlap is the wait after the
put (SYNC_FLUSH, a SYNC_MASTER's replicas): answers may leave out of order.

Envelope (``pocketmq.v1.SendStreamRequest`` as protobuf lays it out; read here by
hand, the batch as a view of the received bytes, never copied)::

    ┌──────┬──────────────┬──────┬──────────────┬──────┬──────────┬───────────────────────┐
    │ 0x08 │ request_id   │ 0x10 │ deadline_ms  │ 0x1A │ length   │ SendBatchRequest      │
    │      │ varint (u64) │      │ varint (u64) │      │ varint   │ (length bytes)        │
    └──────┴──────────────┴──────┴──────────────┴──────┴──────────┴───────────────────────┘
     fields 1 and 2 are left out when 0;    SendBatchRequest: 0x0A len records,
     field 3 is last and ends the envelope  0x12 len producer_group, 0x18 omit_sent_columns

``deadline_ms`` counts from the stream's opening, on both sides: a request that
waited in the transport past it is answered DEADLINE_EXCEEDED and not stored.

With the ACL on, the interceptor lets the call in with :data:`stream_acl` set, and
each request is checked on its own before anything else is done with it: fields 4-7
(access key, signing time, nonce, signature over the batch's bytes, after the batch)
go through :meth:`AclInterceptor.check_stream_request` (known key, allowed address,
replay window, HMAC, never seen before), and the account it returns is the request's
``current_account``, so the send processor authorizes PUB on each record's topic as
for SendBatch. A request without a valid signature is answered UNAUTHENTICATED by id.

Bounds: ``max_send_streams`` open streams per broker and
``max_send_streams_per_connection`` per connection (one more is refused
RESOURCE_EXHAUSTED, reason ``SEND_STREAM_LIMIT``, before any request is read; the
SDK then sends with SendBatch), ``max_send_stream_in_flight`` requests in progress
per stream (the stream is not read meanwhile), and every request counted by flow
control as a unary call is. An envelope that is no protobuf message (or whose id does
not read) ends the stream with INVALID_ARGUMENT, as a unary request that does not
decode is refused; one that is a message but not a usable one (no batch, a field of
the wrong type) is answered INVALID_ARGUMENT by its id, and the stream goes on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import grpc

from pocketmq.broker.errors import (
    BrokerError,
    BrokerNotMasterError,
    IllegalArgumentError,
)
from pocketmq.broker.flow_control import FlowControlInterceptor
from pocketmq.broker.grpc_status import grpc_code
from pocketmq.broker.send_processor import SendMessageProcessor
from pocketmq.broker.v1_rpc import _check_given, _send_response, not_master_detail
from pocketmq.security.interceptor import (
    AclError,
    AclInterceptor,
    current_account,
    peer_ip,
    stream_acl,
)
from pocketmq.v1 import broker_pb2 as pb

__all__ = [
    "SEND_STREAM_LIMIT",
    "Envelope",
    "SendStreamLimits",
    "SendStreamService",
    "parse_envelope",
]

log = logging.getLogger(__name__)

SEND_STREAM_LIMIT = "SEND_STREAM_LIMIT"  # reason of a stream refused at max_send_streams


class _MalformedEnvelope(ValueError):
    """An envelope that does not parse; ``request_id`` when its id was read."""

    def __init__(self, message: str, request_id: int | None = None) -> None:
        super().__init__(message)
        self.request_id = request_id


@dataclass(frozen=True, slots=True)
class Envelope:
    """One SendStreamRequest: the SendBatch fields, *records* a view into the message."""

    request_id: int
    deadline_ms: int  # after the stream opened; 0 = none
    records: memoryview
    producer_group: str
    omit_sent_columns: bool
    batch: memoryview  # the SendBatchRequest's bytes, which a signature covers
    # (access key, timestamp ms, nonce, signature) of a signed request, else None
    signed: tuple[str, int, str, str] | None = None


def _varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while pos < end:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if shift > 63 or value >> 64:
                raise _MalformedEnvelope(f"a varint ending at byte {pos} exceeds 64 bits")
            return value, pos
        shift += 7
        if shift > 63:
            raise _MalformedEnvelope(f"a varint ending at byte {pos} exceeds 64 bits")
    raise _MalformedEnvelope(f"the message ends inside a varint at byte {pos}")


def _field(buf: memoryview, pos: int, end: int) -> tuple[int, int, int | memoryview, int]:
    """(field number, wire type, value, next position) of the field at *pos*."""
    key, pos = _varint(buf, pos, end)
    number, wire = key >> 3, key & 7
    if wire == 0:
        value, pos = _varint(buf, pos, end)
        return number, wire, value, pos
    if wire == 2:
        size, pos = _varint(buf, pos, end)
        if size > end - pos:
            raise _MalformedEnvelope(
                f"field {number} says {size} bytes; only {end - pos} follow (a cut message)"
            )
        return number, wire, buf[pos : pos + size], pos + size
    if wire in (1, 5):
        size = 8 if wire == 1 else 4
        if size > end - pos:
            raise _MalformedEnvelope(f"field {number} is cut short")
        return number, wire, 0, pos + size
    raise _MalformedEnvelope(f"field {number} has wire type {wire}, which protobuf 3 never writes")


def parse_envelope(raw: bytes) -> Envelope:
    """The SendStreamRequest in *raw*; _MalformedEnvelope when it does not parse."""
    buf = memoryview(raw)
    end = len(buf)
    request_id: int | None = None
    deadline_ms = 0
    batch: memoryview | None = None
    auth: dict[int, int | str] = {}
    pos = 0
    while pos < end:
        try:
            number, wire, value, pos = _field(buf, pos, end)
        except _MalformedEnvelope as exc:
            raise _MalformedEnvelope(f"SendStreamRequest: {exc}", request_id) from None
        if number == 1 and wire == 0:
            request_id = int(value)
        elif number == 2 and wire == 0:
            deadline_ms = int(value)
        elif number == 3 and wire == 2 and batch is None:
            batch = value  # type: ignore[assignment]
        elif number == 5 and wire == 0:
            auth[number] = value  # type: ignore[assignment]
        elif number in (4, 6, 7) and wire == 2:
            try:
                auth[number] = bytes(value).decode()
            except UnicodeDecodeError:
                raise _MalformedEnvelope(
                    f"SendStreamRequest field {number} (a signature field) is not UTF-8",
                    request_id,
                ) from None
        elif number in (1, 2, 3):
            raise _MalformedEnvelope(
                f"SendStreamRequest field {number} has wire type {wire} or comes twice",
                request_id,
            )
    if batch is None:
        raise _MalformedEnvelope(
            "the SendStreamRequest carries no batch (field 3, a SendBatchRequest)", request_id
        )
    records, group, omit = _batch_fields(batch, request_id or 0)
    return Envelope(request_id or 0, deadline_ms, records, group, omit, batch, _signed(auth))


def _signed(auth: dict[int, int | str]) -> tuple[str, int, str, str] | None:
    """(access key, timestamp ms, nonce, signature) of fields 4-7, None when all absent."""
    if not auth:
        return None
    key, nonce, signature = (str(auth.get(n, "")) for n in (4, 6, 7))
    ts = int(auth.get(5, 0))
    return key, ts - (1 << 64) if ts >> 63 else ts, nonce, signature


def _batch_fields(buf: memoryview, request_id: int) -> tuple[memoryview, str, bool]:
    """(records, producer group, omit_sent_columns) of a SendBatchRequest's bytes."""
    records = buf[0:0]
    group = b""
    omit = False
    pos, end = 0, len(buf)
    try:
        while pos < end:
            number, wire, value, pos = _field(buf, pos, end)
            if number == 1 and wire == 2:
                records = value  # type: ignore[assignment]
            elif number == 2 and wire == 2:
                group = bytes(value)
            elif number == 3 and wire == 0:
                omit = bool(value)
            elif number in (1, 2, 3):
                raise _MalformedEnvelope(f"SendBatchRequest field {number} has wire type {wire}")
        return records, group.decode(), omit
    except _MalformedEnvelope as exc:
        raise _MalformedEnvelope(f"the batch of request {request_id}: {exc}", request_id) from None
    except UnicodeDecodeError:
        raise _MalformedEnvelope(
            f"the batch of request {request_id}: producer_group is not UTF-8", request_id
        ) from None


@dataclass(frozen=True, slots=True, kw_only=True)
class SendStreamLimits:
    max_streams: int = 1_024  # max_send_streams
    max_streams_per_connection: int = 4  # max_send_streams_per_connection
    max_in_flight: int = 64  # max_send_stream_in_flight

    def __post_init__(self) -> None:
        if min(self.max_streams, self.max_streams_per_connection, self.max_in_flight) <= 0:
            raise ValueError(f"SendStream limits must be positive, got {self}")


def _error(request_id: int, code: grpc.StatusCode, message: str, reason: str = "") -> bytes:
    return pb.SendStreamResponse(
        request_id=request_id,
        error_code=code.value[0],
        error_message=message,
        error_reason=reason,
    ).SerializeToString()


def _refusal(request_id: int, error: BrokerError) -> bytes:
    """A refused request, as the unary SendBatch's status and trailers would say it."""
    return pb.SendStreamResponse(
        request_id=request_id,
        error_code=grpc_code(error).value[0],
        error_message=error.message,
        error_reason=error.reason,
        not_master=(not_master_detail(error) if isinstance(error, BrokerNotMasterError) else b""),
    ).SerializeToString()


class SendStreamService:
    """Serves SendStream calls over one broker's :class:`SendMessageProcessor`."""

    def __init__(
        self,
        send: SendMessageProcessor,
        limits: SendStreamLimits,
        *,
        flow_control: FlowControlInterceptor | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._send = send
        self._limits = limits
        self._flow = flow_control
        self._monotonic = monotonic
        self._open_total = 0
        self._open_by_peer: dict[str, int] = {}
        self.requests_total = 0  # requests read from every stream since start
        self._streams: set[_Stream] = set()
        self._stopping = False

    @property
    def open_streams(self) -> int:
        return self._open_total

    def figures(self) -> dict[str, str]:
        """Rows of GetBrokerRuntimeInfo."""
        return {
            "send_streams_open": str(self._open_total),
            "send_stream_requests_total": str(self.requests_total),
        }

    def _stream_refusal(self, peer: str) -> str | None:
        on_peer = self._open_by_peer.get(peer, 0)
        limits = self._limits
        if on_peer >= limits.max_streams_per_connection:
            return (
                f"{on_peer} SendStream calls are already open on this connection ({peer}); "
                f"the limit is {limits.max_streams_per_connection} "
                "(max_send_streams_per_connection); send with SendBatch"
            )
        if self._open_total >= limits.max_streams:
            return (
                f"{self._open_total} SendStream calls are already open on this broker; the "
                f"limit is {limits.max_streams} (max_send_streams); send with SendBatch"
            )
        return None

    async def serve(self, context: grpc.aio.ServicerContext) -> None:
        """One SendStream call, from its first request to its end."""
        peer = context.peer() or "unknown"
        if self._stopping:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the broker is stopping")
        refusal = self._stream_refusal(peer)
        if refusal is not None:
            context.set_trailing_metadata((("pocketmq-reason", SEND_STREAM_LIMIT),))
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal)
        self._open_total += 1
        self._open_by_peer[peer] = self._open_by_peer.get(peer, 0) + 1
        stream = _Stream(self, context, peer)
        self._streams.add(stream)
        try:
            fatal = await stream.run()
        finally:
            self._streams.discard(stream)
            self._open_total -= 1
            left = self._open_by_peer[peer] - 1
            if left:
                self._open_by_peer[peer] = left
            else:
                del self._open_by_peer[peer]
        if fatal is not None:
            await context.abort(*fatal)

    def stop(self) -> None:
        """The broker is stopping: no new stream, and the open ones end once they answered
        what they read (ahead of the server's own stop, which waits for open calls)."""
        self._stopping = True
        for stream in list(self._streams):
            stream.stop_reading()

    async def answer(
        self, envelope: Envelope, opened_s: float, peer: str, acl: AclInterceptor | None = None
    ) -> bytes:
        """The serialized answer to one request, as the unary SendBatch would answer;
        *acl*: the ACL that must pass it (its own task's context holds the account)."""
        rid = envelope.request_id
        if envelope.deadline_ms and self._monotonic() > opened_s + envelope.deadline_ms / 1000:
            return _error(
                rid,
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"SendStream request {rid} reached its deadline ({envelope.deadline_ms} ms "
                "after the stream opened) before the broker read it; it was not stored",
            )
        try:
            if acl is not None:  # the ACL is on: this request's own signature
                signed = envelope.signed or ("", 0, "", "")
                current_account.set(
                    acl.check_stream_request(
                        access_key=signed[0],
                        timestamp_ms=signed[1],
                        nonce=signed[2],
                        signature=signed[3],
                        batch=envelope.batch,
                        ip=peer_ip(peer),
                    )
                )
            with self._flow.serving(peer) if self._flow is not None else nullcontext():
                _check_given(groups=(envelope.producer_group,))
                outcome = await self._send.send(
                    envelope.records, producer_group=envelope.producer_group
                )
        except BrokerError as exc:
            return _refusal(rid, exc)
        except AclError as exc:
            return _error(rid, exc.code, exc.message)
        except Exception as exc:
            log.exception("SendStream request %d failed on an unexpected error", rid)
            return _error(
                rid,
                grpc.StatusCode.INTERNAL,
                f"internal broker error in SendStream: {type(exc).__name__}: {exc}; "
                "see the broker log",
            )
        response = _send_response(outcome, sent_columns=not envelope.omit_sent_columns)
        return pb.SendStreamResponse(request_id=rid, response=response).SerializeToString()


def _decodes(raw: bytes) -> bool:
    """Whether protobuf reads *raw* (only asked of an envelope refused here already)."""
    try:
        pb.SendStreamRequest.FromString(raw)
    except Exception:
        return False
    return True


class _Stream:
    """One open SendStream: a reader that starts each request's task in arrival order,
    and this call's coroutine writing the answers as they complete."""

    def __init__(
        self, service: SendStreamService, context: grpc.aio.ServicerContext, peer: str
    ) -> None:
        self._service = service
        self._context = context
        self._peer = peer
        self._opened_s = service._monotonic()
        self._room = asyncio.Semaphore(service._limits.max_in_flight)
        self._answers: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._tasks: set[asyncio.Task[None]] = set()
        self.fatal: tuple[grpc.StatusCode, str] | None = None  # the status to end with
        self._stopping = False
        self._reading = False  # waiting for room or for the next request
        self._reader: asyncio.Task[None] | None = None
        self._acl = stream_acl.get()  # set by the ACL's interceptor when it is on

    def stop_reading(self) -> None:
        """The broker is stopping: read no more; answer what was read, then end UNAVAILABLE
        (what the client did send and the broker did not read is sent again elsewhere)."""
        self._stopping = True
        if self._reading and self._reader is not None:
            self._reader.cancel()

    async def run(self) -> tuple[grpc.StatusCode, str] | None:
        """Serve until the client ends its side; the status to end the call with when an
        envelope was no message or the broker is stopping, else None."""
        reader = self._reader = asyncio.create_task(self._read())
        try:
            while True:
                answer = await self._answers.get()
                if answer is None:
                    break
                await self._context.write(answer)
                self._room.release()
        finally:
            reader.cancel()
            for task in list(self._tasks):
                task.cancel()
        return self.fatal

    async def _read(self) -> None:
        try:
            while self.fatal is None:
                raw = await self._next()
                if raw is grpc.aio.EOF:
                    break
                if raw is not None:
                    self._start(raw)
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
        finally:
            self._answers.put_nowait(None)

    async def _next(self) -> Any:
        """The next request, EOF, or None once the broker stopped reading this stream."""
        self._reading = True
        try:
            if self._stopping:
                raise asyncio.CancelledError
            await self._room.acquire()
            return await self._context.read()
        except asyncio.CancelledError:
            if not self._stopping:
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            self.fatal = (
                grpc.StatusCode.UNAVAILABLE,
                "the broker is stopping; the requests it answered on this SendStream are "
                "done, send the others again",
            )
            return None
        finally:
            self._reading = False

    def _start(self, raw: bytes) -> None:
        try:
            envelope = parse_envelope(raw)
        except _MalformedEnvelope as exc:
            if exc.request_id is None or not _decodes(raw):
                self.fatal = (
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "SendStream: the request bytes are not a valid message of this RPC "
                    f"({exc}); the client must send what the server's .proto defines; the "
                    "stream is ended",
                )
                self._room.release()
                return
            self._answers.put_nowait(
                _refusal(exc.request_id, IllegalArgumentError(str(exc), reason="MALFORMED"))
            )
            return
        self._service.requests_total += 1
        task = asyncio.create_task(self._serve_one(envelope))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve_one(self, envelope: Envelope) -> None:
        self._answers.put_nowait(
            await self._service.answer(envelope, self._opened_s, self._peer, self._acl)
        )
