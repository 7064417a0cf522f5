"""SendStream, the client side: SendBatch requests over one long-lived stream per broker.

A unary call costs both ends a call object, metadata and a task per request; on an
open stream a batch is one message. :class:`SendStreamSender` keeps one stream per
broker channel, opened on the first send (and again after it broke)::

    send() ─┬─▶ outbox ─▶ writer task ─▶ call.write(envelope)   (grpc.aio: one write at a
    send() ─┘   (FIFO)                                           time; a caller cancelled or
                                                                 timed out never cuts a write)
    future[id] ◀── reader task ◀── SendStreamResponse(id)       (answers come by id, possibly
                                                                 out of order)

The envelope is the ``SendBatchRequest`` bytes the codec framed already
(``encode_messages(..., tail=)``) behind a few header bytes, never re-encoded::

    0x08 varint(request_id)  0x10 varint(deadline_ms)  0x1A varint(len)  SendBatchRequest

``deadline_ms`` counts from the stream's opening (the broker counts from when it
saw it open, later, so it never drops a request the client still waits for).

What a caller sees is what the unary SendBatch gives: the broker's refusal of
one request as the same :class:`~pocketmq.client.errors.RemoteError`; a request
past its timeout as DEADLINE_EXCEEDED (its late answer dropped); a broken stream
(broker restart, connection reset) fails every request waiting on it with the
retriable error of its status (UNAVAILABLE), and the next send opens a new stream.
With the ACL's keys each request is signed on its own (fields 4-7 after the batch:
access key, time, nonce, signature over the batch's bytes), as a unary call's
metadata signs its body. A broker without the method (UNIMPLEMENTED), refusing
streams (SEND_STREAM_UNSUPPORTED) or at its stream limit (SEND_STREAM_LIMIT) read none
of the requests: they raise :class:`_StreamUnsupported`, and the caller sends them with
SendBatch, as it does from then on for that broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from collections.abc import Callable
from typing import Any

import grpc

from pocketmq.client.errors import RemoteError, UnavailableError
from pocketmq.client.remote_errors import REASON_METADATA_KEY, error_of
from pocketmq.common.auth import Credentials, sign_stream_request
from pocketmq.v1 import broker_pb2 as bpb

__all__ = ["DEFAULT_MAX_PENDING", "SendStreamSender", "envelope_header"]

#: SendStream's method path
SEND_STREAM_PATH = "/{}/SendStream".format(bpb.DESCRIPTOR.services_by_name["Broker"].full_name)
DEFAULT_MAX_PENDING = 1_024  # requests one stream has unanswered; more senders wait
#: stream refusals after which this broker is sent to with SendBatch for good
FALLBACK_REASONS = frozenset({"SEND_STREAM_UNSUPPORTED", "SEND_STREAM_LIMIT"})
_CODES = {code.value[0]: code for code in grpc.StatusCode}


class _StreamUnsupported(Exception):
    """The broker served none of this stream: send the request with SendBatch."""


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def envelope_header(request_id: int, deadline_ms: int, batch_size: int) -> bytes:
    """The bytes before a *batch_size*-byte SendBatchRequest in its SendStreamRequest."""
    return b"".join(
        (
            b"\x08",
            _varint(request_id),
            b"\x10",
            _varint(deadline_ms),
            b"\x1a",
            _varint(batch_size),
        )
    )


def _text(number: int, value: str) -> bytes:
    raw = value.encode()
    return bytes((number << 3 | 2,)) + _varint(len(raw)) + raw


def signature_fields(credentials: Credentials, batch: bytes) -> bytes:
    """Fields 4-7 of a signed SendStreamRequest (after its batch): access key, signing
    time, nonce and :func:`~pocketmq.common.auth.sign_stream_request` of *batch*."""
    ts = int(time.time() * 1000)
    nonce = os.urandom(16).hex()
    key = credentials.access_key
    signature = sign_stream_request(credentials.secret_key, ts, key, nonce, batch)
    return b"".join((_text(4, key), b"\x28", _varint(ts), _text(6, nonce), _text(7, signature)))


class _Call:
    """One open stream: its call, its unanswered requests and its two tasks."""

    def __init__(self, sender: SendStreamSender) -> None:
        self.sender = sender
        self.call: Any = sender._open()
        self.opened_s = time.monotonic()
        self.pending: dict[int, asyncio.Future[bpb.SendStreamResponse]] = {}
        self.outbox: asyncio.Queue[bytes] = asyncio.Queue()
        self.broken: BaseException | None = None
        self.writer = asyncio.create_task(self._write())
        self.reader = asyncio.create_task(self._read())

    async def _write(self) -> None:
        call, outbox = self.call, self.outbox
        try:
            while True:
                await call.write(await outbox.get())
        except asyncio.CancelledError:
            raise
        except BaseException:  # the call ended: the reader reports how
            return

    async def _read(self) -> None:
        error: BaseException
        try:
            async for answer in self.call:
                future = self.pending.pop(answer.request_id, None)
                if future is not None and not future.done():
                    future.set_result(answer)
            error = self.sender._stream_ended(None, len(self.pending))
        except asyncio.CancelledError:
            error = UnavailableError(
                f"SendBatch to {self.sender.addr} failed: the client closed its SendStream",
                addr=self.sender.addr,
                code="CANCELLED",
            )
        except grpc.aio.AioRpcError as exc:
            error = self.sender._stream_ended(exc, len(self.pending))
        self.fail(error)

    def fail(self, error: BaseException) -> None:
        """End this stream: every unanswered request raises *error*."""
        if self.broken is None:
            self.broken = error
        self.sender._forget(self)
        self.writer.cancel()
        pending, self.pending = self.pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(self.broken)
                future.exception()  # retrieved: a caller gone (timed out) leaves no warning

    async def close(self) -> None:
        self.call.cancel()
        self.reader.cancel()
        self.writer.cancel()
        for task in (self.reader, self.writer):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


class SendStreamSender:
    """SendBatch requests to one broker over one SendStream (see the module docstring).

    *failed* turns a stream's failure into the caller's error (and tells the route
    cache of an unreachable broker), as a unary call's failure is.
    """

    def __init__(
        self,
        addr: str,
        channel: grpc.aio.Channel,
        *,
        failed: Callable[[grpc.aio.AioRpcError], RemoteError],
        reported: Callable[[RemoteError], RemoteError],
        max_pending: int = DEFAULT_MAX_PENDING,
        credentials: Credentials | None = None,
    ) -> None:
        self.addr = addr
        self._credentials = credentials  # the ACL's keys: each request signed
        self.unsupported = False  # set for good once the broker refused streams
        self._open = channel.stream_stream(
            SEND_STREAM_PATH,
            request_serializer=None,
            response_deserializer=bpb.SendStreamResponse.FromString,
        )
        self._failed = failed
        self._reported = reported
        self._room = asyncio.Semaphore(max_pending)
        self._current: _Call | None = None
        self._next_id = 1

    def _forget(self, call: _Call) -> None:
        if self._current is call:
            self._current = None

    def _stream_ended(self, exc: grpc.aio.AioRpcError | None, unanswered: int) -> BaseException:
        if exc is None:
            return UnavailableError(
                f"SendBatch to {self.addr} failed: the broker ended its SendStream with "
                f"{unanswered} requests unanswered",
                addr=self.addr,
                code="UNAVAILABLE",
            )
        reason = dict(exc.trailing_metadata() or ()).get(REASON_METADATA_KEY, "")
        if exc.code() is grpc.StatusCode.UNIMPLEMENTED or reason in FALLBACK_REASONS:
            self.unsupported = True
            return _StreamUnsupported(f"{self.addr}: {exc.code().name}: {exc.details()}")
        return self._failed(exc)

    async def send(self, request: bytes, timeout_s: float) -> bpb.SendMessageResponse:
        """Send one serialized SendBatchRequest; its answer, or the unary call's error."""
        async with self._room:
            stream = self._current
            if stream is None:
                stream = self._current = _Call(self)
            rid = self._next_id
            self._next_id += 1
            future: asyncio.Future[bpb.SendStreamResponse] = (
                asyncio.get_running_loop().create_future()
            )
            stream.pending[rid] = future
            deadline_ms = max(1, math.ceil((time.monotonic() - stream.opened_s + timeout_s) * 1000))
            envelope = envelope_header(rid, deadline_ms, len(request)) + request
            if self._credentials is not None:
                envelope += signature_fields(self._credentials, request)
            stream.outbox.put_nowait(envelope)
            try:
                async with asyncio.timeout(timeout_s):
                    answer = await future
            except TimeoutError:
                raise self._reported(
                    error_of(
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        "Deadline Exceeded",
                        "",
                        b"",
                        self.addr,
                        "SendBatch",
                    )
                ) from None
            finally:
                stream.pending.pop(rid, None)
        if answer.error_code:
            code = _CODES.get(answer.error_code, grpc.StatusCode.UNKNOWN)
            raise self._reported(
                error_of(
                    code,
                    answer.error_message or "no details",
                    answer.error_reason,
                    answer.not_master,
                    self.addr,
                    "SendBatch",
                )
            )
        return answer.response

    async def close(self) -> None:
        stream, self._current = self._current, None
        if stream is not None:
            await stream.close()
