"""SmallServer: the lifecycle the project's small asyncio TCP servers share.

The metrics endpoint (:mod:`pocketmq.common.metrics_http`) and the dashboard
(:mod:`pocketmq.dashboard.http`) each answer requests in their own ``_serve``;
this base binds, reads back the port, tracks open connections and closes them
all on :meth:`stop`, so a stopping server never leaves a client hanging.
"""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["SmallServer"]


class SmallServer:
    """``await start()`` binds *host*:*port* (0 = any free port, read back from
    :attr:`port`); ``await stop()`` closes it and every open connection.
    Subclasses implement ``_serve`` and add each writer to ``_connections``."""

    #: what a failed bind names: "<who> cannot <what> on host:port: ... (<flag>)"
    _bind_error = ("server", "listen", "port")

    def __init__(self, *, host: str, port: int, limit: int) -> None:
        self._host = host
        self._requested_port = port
        self._limit = limit
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        who, what, flag = self._bind_error
        try:
            self._server = await asyncio.start_server(
                self._serve, self._host, self._requested_port, limit=self._limit
            )
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"{who} cannot {what} on {self._host}:"
                f"{self._requested_port}: {exc.strerror}; is another "
                f"process using the port? ({flag})",
            ) from None
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for writer in list(self._connections):
            writer.close()
        with contextlib.suppress(Exception):
            await server.wait_closed()
