"""PartitionProxy: a TCP relay on loopback that a test cuts, stalls and heals.

Placed on one link (a replica's HA connection to its master, a client to a
broker), it makes network partitions a line of test code::

    proxy = PartitionProxy("127.0.0.1", master_ha_port)
    await proxy.start()                  # listens on proxy.addr (127.0.0.1, port 0)
    ...  # the replica dials proxy.addr (--ha-master-address)
    proxy.stall()    # silent partition: connections stay open, no byte moves either way
    proxy.cut()      # reset every connection; new ones are closed at once
    proxy.heal()     # bytes flow again (held bytes first); new connections pass
    proxy.drop_answers()  # requests reach the server, its answers are thrown away

A stall holds bytes instead of dropping them, as a real partition does
(TCP retransmits once the path is back): a connection that outlives the
stall resumes where it stopped. A cut is a peer reset: both sides see the
connection end. Dropping answers passes client bytes and discards the
server's: the server does the work, the client never hears of it (a lost
acknowledgement). A byte stream with a hole in it is broken, so :meth:`heal`
after dropping resets the connections that lost bytes: the client reconnects,
as it would after a real loss of the path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

__all__ = ["PartitionProxy"]

log = logging.getLogger(__name__)

_CHUNK = 256 * 1024


class _Link:
    """One accepted connection and its upstream twin."""

    def __init__(
        self,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> None:
        self.client = client
        self.upstream = upstream
        self.tasks: list[asyncio.Task[None]] = []

    def abort(self) -> None:
        for _reader, writer in (self.client, self.upstream):
            transport = writer.transport
            if transport is not None and not transport.is_closing():
                transport.abort()


class PartitionProxy:
    def __init__(self, target_host: str, target_port: int, *, listen_port: int = 0) -> None:
        self.target = (target_host, target_port)
        self._listen_port = listen_port
        self._server: asyncio.AbstractServer | None = None
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._cut = False
        self._dropping = False
        self._holed: set[_Link] = set()  # lost answer bytes while dropping
        self._links: set[_Link] = set()
        self.port = 0
        self.accepted = 0  # connections accepted (and relayed) so far
        self.bytes_relayed = 0
        self.answer_bytes_dropped = 0

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def mode(self) -> str:
        if self._dropping:
            return "drop answers"
        return "cut" if self._cut else "pass" if self._flowing.is_set() else "stall"

    async def start(self) -> PartitionProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self._listen_port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            link.abort()
            for task in link.tasks:
                task.cancel()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> PartitionProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- the test's controls ----------------------------------------------------------------
    def cut(self) -> None:
        """Reset every open connection; refuse (close) new ones until :meth:`heal`."""
        self._cut = True
        self._flowing.set()  # pumps wake and find their sockets gone
        for link in list(self._links):
            link.abort()

    def stall(self) -> None:
        """A silent partition: hold every byte, both ways, on open and new connections."""
        self._cut = False
        self._flowing.clear()

    def drop_answers(self) -> None:
        """Relay client bytes; discard every byte the server sends back."""
        self._cut = False
        self._dropping = True
        self._flowing.set()

    def heal(self) -> None:
        """Pass bytes again; bytes held by a stall go first. Connections that lost
        answers are reset (their streams have a hole)."""
        self._cut = False
        self._dropping = False
        for link in list(self._holed):
            link.abort()
        self._holed.clear()
        self._flowing.set()

    # -- relaying ------------------------------------------------------------------------------
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._cut:
            writer.transport.abort()
            return
        try:
            upstream = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        link = _Link((reader, writer), upstream)
        self._links.add(link)
        self.accepted += 1
        loop = asyncio.get_running_loop()
        link.tasks = [
            loop.create_task(self._pump(reader, upstream[1])),
            loop.create_task(self._pump(upstream[0], writer, answers_of=link)),
        ]
        try:
            await asyncio.wait(link.tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            link.abort()
            for task in link.tasks:
                task.cancel()
            self._links.discard(link)

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        answers_of: _Link | None = None,
    ) -> None:
        with contextlib.suppress(ConnectionError, OSError, asyncio.IncompleteReadError):
            while True:
                chunk = await reader.read(_CHUNK)
                if not chunk:
                    return
                if not self._flowing.is_set():
                    await self._flowing.wait()
                if self._cut:
                    return
                if answers_of is not None and self._dropping:
                    self._holed.add(answers_of)
                    self.answer_bytes_dropped += len(chunk)
                    continue
                writer.write(chunk)
                self.bytes_relayed += len(chunk)
                await writer.drain()
