"""MetricsHttpServer: Prometheus' ``GET /metrics`` of one registry, on the event loop.

The broker and the nameserver each serve their own ``CollectorRegistry`` (so
several servers can run in one process, as the tests do) on the port of their
``metrics_port`` key. The collectors read live values when Prometheus scrapes;
serving from the server's own event loop means they read them on the thread
that owns them, never while a request is half way through changing them, and
need no background task or thread. A scrape is answered in the text format, or
in OpenMetrics when the scraper asks for it (``Accept``).

One request per connection (``Connection: close``); anything but ``GET`` or
``HEAD /metrics`` is answered 404 or 405.
"""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from pocketmq.common.small_server import SmallServer

__all__ = ["MetricsHttpServer"]

log = logging.getLogger(__name__)

HEADER_TIMEOUT_S = 5.0  # a client gets this long to send its request head
MAX_HEADER_BYTES = 16 * 1024


class MetricsHttpServer(SmallServer):
    """``await start()`` binds *host*:*port* (0 = any free port, read back from
    :attr:`port`); ``await stop()`` closes it and any open connection."""

    def __init__(
        self, registry: CollectorRegistry, *, host: str, port: int, name: str = "metrics"
    ) -> None:
        super().__init__(host=host, port=port, limit=MAX_HEADER_BYTES)
        self._registry = registry
        self._name = name
        self._bind_error = (name, "serve /metrics", "metrics_port")

    @property
    def address(self) -> str:
        host = self._host
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    async def start(self) -> None:
        await super().start()
        log.info("%s serving Prometheus metrics on http://%s/metrics", self._name, self.address)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEADER_TIMEOUT_S)
            status, content_type, body = self._answer(head.decode("latin-1"))
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("latin-1")
            )
            if not head.startswith(b"HEAD "):
                writer.write(body)
            await writer.drain()
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            TimeoutError,
            ConnectionError,
        ):
            pass  # the client went away or sent no request head in time
        finally:
            self._connections.discard(writer)
            writer.close()

    def _answer(self, head: str) -> tuple[str, str, bytes]:
        request_line, *header_lines = head.split("\r\n")
        parts = request_line.split(" ")
        if len(parts) != 3:
            return "400 Bad Request", "text/plain", b"malformed request line\n"
        method, target, _version = parts
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"only GET /metrics is served\n"
        if target.split("?", 1)[0] != "/metrics":
            return "404 Not Found", "text/plain", b"metrics are at /metrics\n"
        accept = ""
        for line in header_lines:
            name, _, value = line.partition(":")
            if name.strip().lower() == "accept":
                accept = value.strip()
        encoder, content_type = choose_encoder(accept)
        try:
            return "200 OK", content_type, encoder(self._registry)
        except Exception:
            log.exception("%s: a metrics collector failed", self._name)
            return "500 Internal Server Error", "text/plain", b"a collector failed; see the log\n"
