"""A small HTTP/1.1 server on asyncio: the dashboard's pages and its JSON API.

One request per connection (``Connection: close``), as
:class:`~pocketmq.common.metrics_http.MetricsHttpServer` serves ``/metrics``: a
dashboard is a handful of browsers, and this keeps the server free of a web
framework. Every buffer is bounded::

    request line + headers   <= MAX_HEADER_BYTES, within HEADER_TIMEOUT_S
    body (Content-Length)    <= MAX_BODY_BYTES, within BODY_TIMEOUT_S
    chunked bodies           refused (411): browsers and fetch() send a length

The handler takes a :class:`Request` and returns a :class:`Response`; an
:class:`HttpError` it raises becomes ``{"error": message}`` with its status, and
anything else a 500 with the same shape (logged), never a dropped connection.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from pocketmq.common.small_server import SmallServer
from pocketmq.dashboard.errors import DashboardError

__all__ = ["HttpError", "HttpServer", "Request", "Response", "json_response"]

log = logging.getLogger(__name__)

HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0
MAX_HEADER_BYTES = 32 * 1024
MAX_BODY_BYTES = 8 * 1024 * 1024  # a message body from the send form, base64'd and more

_REASONS = {
    200: "OK",
    204: "No Content",
    302: "Found",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    411: "Length Required",
    413: "Payload Too Large",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


class HttpError(DashboardError):
    """Answered as ``{"error": message}`` with *status*."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(slots=True)
class Request:
    method: str
    path: str  # percent-decoded, without the query
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    body: bytes = b""
    peer: str = ""

    @property
    def cookies(self) -> dict[str, str]:
        jar: dict[str, str] = {}
        for part in self.headers.get("cookie", "").split(";"):
            name, sep, value = part.strip().partition("=")
            if sep:
                jar[name] = value
        return jar

    def json(self) -> dict[str, Any]:
        """The body as a JSON object; HttpError 400 when it is not one."""
        if not self.body:
            return {}
        try:
            value = json.loads(self.body)
        except ValueError as exc:
            raise HttpError(400, f"the request body is not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise HttpError(400, "the request body must be a JSON object")
        return value


@dataclass(slots=True)
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


def json_response(value: Any, status: int = 200, **headers: str) -> Response:
    return Response(
        status=status,
        body=json.dumps(value, default=str).encode(),
        content_type="application/json",
        headers=headers,
    )


Handler = Callable[[Request], Awaitable[Response]]


class HttpServer(SmallServer):
    """``await start()`` binds *host*:*port* (0 = any free port, read back from
    :attr:`port`); ``await stop()`` closes it and every open connection."""

    _bind_error = ("the dashboard", "listen", "--port")

    def __init__(self, handler: Handler, *, host: str, port: int) -> None:
        super().__init__(host=host, port=port, limit=MAX_HEADER_BYTES)
        self._handler = handler

    @property
    def url(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        peer = writer.get_extra_info("peername")
        try:
            request: Request | None = None
            try:
                request = await self._read(reader, str(peer[0]) if peer else "")
            except HttpError as exc:
                response = json_response({"error": exc.message}, exc.status)
            else:
                response = await self._answer(request)
            head = [
                f"HTTP/1.1 {response.status} {_REASONS.get(response.status, 'Status')}",
                f"Content-Type: {response.content_type}",
                f"Content-Length: {len(response.body)}",
                "Connection: close",
                "X-Content-Type-Options: nosniff",
                "Referrer-Policy: no-referrer",
            ]
            head += [f"{k}: {v}" for k, v in response.headers.items()]
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
            if request is None or request.method != "HEAD":
                writer.write(response.body)
            await writer.drain()
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            TimeoutError,
            ConnectionError,
        ):
            pass  # the client went away or was too slow to send its request
        finally:
            self._connections.discard(writer)
            writer.close()

    async def _answer(self, request: Request) -> Response:
        try:
            return await self._handler(request)
        except HttpError as exc:
            return json_response({"error": exc.message}, exc.status)
        except Exception as exc:
            log.exception("dashboard: %s %s failed", request.method, request.path)
            return json_response(
                {"error": f"the dashboard failed: {type(exc).__name__}: {exc}"}, 500
            )

    async def _read(self, reader: asyncio.StreamReader, peer: str) -> Request:
        try:
            raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEADER_TIMEOUT_S)
        except asyncio.LimitOverrunError:
            raise HttpError(413, f"request head over {MAX_HEADER_BYTES} bytes") from None
        request_line, *lines = raw.decode("latin-1").split("\r\n")
        parts = request_line.split(" ")
        if len(parts) != 3:
            raise HttpError(400, "malformed request line")
        method, target, _version = parts
        headers: dict[str, str] = {}
        for line in lines:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raise HttpError(411, "send a Content-Length, not a chunked body")
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            raise HttpError(400, "Content-Length is not a number") from None
        if length < 0:
            raise HttpError(400, f"Content-Length is {length}")
        if length > MAX_BODY_BYTES:
            raise HttpError(413, f"request body of {length} bytes; the limit is {MAX_BODY_BYTES}")
        body = await asyncio.wait_for(reader.readexactly(length), BODY_TIMEOUT_S) if length else b""
        url = urlsplit(target)
        return Request(
            method=method.upper(),
            path=unquote(url.path),
            query=dict(parse_qsl(url.query, keep_blank_values=True)),
            headers=headers,
            body=body,
            peer=peer,
        )
