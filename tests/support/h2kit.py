"""Hostile gRPC clients on raw HTTP/2 (the ``h2`` package), for the back-pressure tests.

A real gRPC client reads every response it asks for. These do not:
:class:`StuckReader` opens one connection, sets its receive window to zero
(``SETTINGS_INITIAL_WINDOW_SIZE = 0``, never a ``WINDOW_UPDATE``) and fires
unary calls on it; the server may answer with headers and trailers (a refusal
needs no DATA frame) but can never send a response body. It reads the socket
and answers pings as a live peer would, so the connection stays open.
``StuckReader.connect(..., read=False)`` is a client that stops reading its
socket altogether: it answers no ping, and TCP's buffers fill::

    client = await StuckReader.connect("127.0.0.1", port)
    await client.call_many("/pocketmq.v1.Broker/PullMessage", request_bytes, count=5_000)
    client.statuses   # Counter of grpc-status values of the calls that ended

:func:`open_idle_connections` opens connections that send the HTTP/2 preface
and nothing else (a connection flood).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections import Counter
from urllib.parse import unquote

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

__all__ = ["StuckReader", "grpc_frame", "open_idle_connections"]

READ_CHUNK = 65_536


def grpc_frame(message: bytes) -> bytes:
    """One length-prefixed gRPC message: flag 0 (not compressed), 4-byte length."""
    return struct.pack(">BI", 0, len(message)) + message


class StuckReader:
    """One HTTP/2 connection that never opens its receive window."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, authority: str
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._authority = authority
        self._conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        self.statuses: Counter[str] = Counter()  # grpc-status of ended calls
        self.messages: Counter[str] = Counter()  # grpc-message of ended calls
        self.ended = 0
        self.opened = 0
        self.closed_by_server = False
        self._pump: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    @classmethod
    async def connect(cls, host: str, port: int, *, read: bool = True) -> StuckReader:
        reader, writer = await asyncio.open_connection(host, port)
        client = cls(reader, writer, f"{host}:{port}")
        conn = client._conn
        conn.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                # Not reading at all: let the server write until the socket's buffers are full.
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0 if read else 2**31 - 1,
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 2**31 - 1,
            },
        )
        conn.initiate_connection()
        client._flush()
        if read:
            client._pump = asyncio.get_running_loop().create_task(client._read_loop())
        return client

    def _flush(self) -> None:
        data = self._conn.data_to_send()
        if data:
            self._writer.write(data)

    async def _read_loop(self) -> None:
        try:
            while True:
                data = await self._reader.read(READ_CHUNK)
                if not data:
                    break
                for event in self._conn.receive_data(data):
                    self._on_event(event)
                self._flush()  # ping acks, settings acks
                self._changed.set()
        except (ConnectionError, h2.exceptions.ProtocolError):
            pass
        finally:
            self.closed_by_server = True
            self._changed.set()

    def _on_event(self, event: h2.events.Event) -> None:
        headers = getattr(event, "headers", None)
        if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived) and headers:
            fields = dict(headers)
            if "grpc-status" in fields:
                self.statuses[fields["grpc-status"]] += 1
                self.messages[unquote(fields.get("grpc-message", ""))] += 1
        elif isinstance(event, h2.events.StreamReset):
            self.statuses[f"RST_STREAM {event.error_code!s}"] += 1
        if isinstance(event, h2.events.StreamEnded | h2.events.StreamReset):
            self.ended += 1

    async def _wait_change(self, timeout_s: float) -> None:
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout_s)

    async def call_many(
        self, path: str, request: bytes, *, count: int, timeout_s: float = 30.0
    ) -> None:
        """Start *count* unary calls of *path*, within the server's stream limit and window."""
        body = grpc_frame(request)
        deadline = asyncio.get_running_loop().time() + timeout_s
        conn = self._conn
        while self.opened < count and not self.closed_by_server:
            if asyncio.get_running_loop().time() > deadline:
                return
            open_now = conn.open_outbound_streams
            if (
                open_now >= conn.remote_settings.max_concurrent_streams
                or conn.outbound_flow_control_window < len(body)
            ):
                if self._pump is None:
                    return  # not reading: no window update will ever come in
                await self._wait_change(0.5)
                continue
            stream_id = conn.get_next_available_stream_id()
            conn.send_headers(
                stream_id,
                [
                    (":method", "POST"),
                    (":scheme", "http"),
                    (":path", path),
                    (":authority", self._authority),
                    ("content-type", "application/grpc"),
                    ("te", "trailers"),
                ],
            )
            conn.send_data(stream_id, body, end_stream=True)
            self.opened += 1
            self._flush()
            if self.opened % 100 == 0:
                await self._writer.drain()

    async def close(self) -> None:
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump
        self._writer.close()
        with contextlib.suppress(ConnectionError):
            await self._writer.wait_closed()


async def open_idle_connections(host: str, port: int, count: int) -> list[asyncio.StreamWriter]:
    """*count* connections that send the HTTP/2 preface and SETTINGS, then nothing."""
    preface_conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    preface_conn.initiate_connection()
    preface = preface_conn.data_to_send()
    writers = []
    for _ in range(count):
        _reader, writer = await asyncio.open_connection(host, port)
        writer.write(preface)
        writers.append(writer)
    return writers
