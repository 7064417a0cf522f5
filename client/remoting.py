"""The client's only contact with gRPC and protobuf: channels, and the typed clients.

:class:`Remoting` owns one channel per server address (TLS and ACL signing as
the :class:`~pocketmq.client.config.Transport` says) and hands out
:class:`~pocketmq.client.nameserver_client.NameserverClient` and
:class:`~pocketmq.client.broker_client.BrokerClient`, whose typed methods take
and return plain values (:mod:`.remote_values`). A failed call becomes a
:class:`~pocketmq.client.errors.RemoteError` subclass chosen by
:data:`STATUS_ERRORS` (:mod:`.remote_errors`), naming the server, the RPC and
what the server said (the broker's reason code comes from the
``pocketmq-reason`` trailer).

Modules by role: this one (channels, signing), :mod:`.nameserver_client`,
:mod:`.broker_client` with :mod:`.broker_admin_calls`, :mod:`.remote_values`,
:mod:`.remote_errors`. Every name below stays importable from here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import grpc

from pocketmq.client.broker_client import BrokerClient
from pocketmq.client.config import Transport
from pocketmq.client.errors import ClientError
from pocketmq.client.nameserver_client import NameserverClient
from pocketmq.client.remote_errors import STATUS_ERRORS
from pocketmq.client.remote_values import (
    ChannelOpened,
    CheckTransactionState,
    ConsumerIdsChanged,
    ConsumerInfo,
    HeartbeatAnswer,
    PullReply,
    PullStatus,
    QueuePull,
    ResetConsumerOffset,
    SendReceipt,
    ServerCommand,
)
from pocketmq.common.auth import Credentials, signed_metadata
from pocketmq.common.runtime import tune_malloc

__all__ = [
    "STATUS_ERRORS",
    "BrokerClient",
    "ChannelOpened",
    "CheckTransactionState",
    "ConsumerIdsChanged",
    "ConsumerInfo",
    "HeartbeatAnswer",
    "NameserverClient",
    "PullReply",
    "PullStatus",
    "QueuePull",
    "Remoting",
    "ResetConsumerOffset",
    "SendReceipt",
    "ServerCommand",
    "signers",
]

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
MAX_RECONNECT_BACKOFF_MS = 2000


def signers(credentials: Credentials) -> list[Any]:
    """The interceptors that sign every unary and server-streaming call with *credentials*."""
    return [_SignerUnary(credentials), _SignerStream(credentials)]


class _SigningBase:
    """Adds the ACL signature (common/auth.py) to every call: one HMAC per RPC.

    grpc.aio files an interceptor under the first call kind it implements only, so
    unary and server-streaming calls each need an object of their own (:func:`signers`).
    """

    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials

    def _signed(self, details: Any, request: Any) -> Any:
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        metadata = grpc.aio.Metadata(
            *(details.metadata or ()), *signed_metadata(self._credentials, method, request)
        )
        return grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )


class _SignerUnary(_SigningBase, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._signed(details, request), request)


class _SignerStream(_SigningBase, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._signed(details, request), request)


def _read_pem(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise ClientError(f"cannot read {path}: {exc.strerror}") from None


class Remoting:
    """One gRPC channel per address, shared by every call of one client.

    ``on_unreachable(addr)``, when set, hears of every broker call that got no
    answer (consumers point it at their route cache's suspect marking).
    """

    def __init__(self, transport: Transport | None = None) -> None:
        tune_malloc()  # big replies recycled from the heap, not mmap'd each time
        self.on_unreachable: Callable[[str], None] | None = None
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._brokers: dict[str, BrokerClient] = {}
        self._transport = transport or Transport()
        creds = self._transport.credentials
        self._interceptors = signers(creds) if creds is not None else None
        self._tls: grpc.ChannelCredentials | None = None
        t = self._transport
        if t.tls_ca_file or t.tls_cert_file:
            self._tls = grpc.ssl_channel_credentials(
                root_certificates=_read_pem(t.tls_ca_file) if t.tls_ca_file else None,
                private_key=_read_pem(t.tls_key_file) if t.tls_key_file else None,
                certificate_chain=_read_pem(t.tls_cert_file) if t.tls_cert_file else None,
            )

    def channel(self, addr: str) -> grpc.aio.Channel:
        """The channel to *addr*, made on first use and kept until :meth:`close`."""
        channel = self._channels.get(addr)
        if channel is None:
            options = [
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.enable_retries", 0),
                # A broker back after an outage is reconnected to within 2 s
                # (gRPC's default backoff grows to 120 s), so reads return to it.
                ("grpc.initial_reconnect_backoff_ms", 500),
                ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
                # Connections of their own: a fresh client must not inherit the
                # reconnect backoff of another client's failed connection to the
                # same address (gRPC shares subchannels process-wide otherwise).
                ("grpc.use_local_subchannel_pool", 1),
            ]
            if self._tls is not None:
                channel = grpc.aio.secure_channel(
                    addr, self._tls, options=options, interceptors=self._interceptors
                )
            else:
                channel = grpc.aio.insecure_channel(
                    addr, options=options, interceptors=self._interceptors
                )
            self._channels[addr] = channel
        return channel

    def broker(self, addr: str) -> BrokerClient:
        """Typed calls to the broker at *addr*, over :meth:`channel`."""
        client = self._brokers.get(addr)
        if client is None:
            client = self._brokers[addr] = BrokerClient(
                addr,
                self.channel(addr),
                on_unreachable=self._unreachable,
                signed=self._interceptors is not None,
                send_stream=self._transport.send_stream,
                credentials=self._transport.credentials,
            )
        return client

    def _unreachable(self, addr: str) -> None:
        if self.on_unreachable is not None:
            self.on_unreachable(addr)

    def nameserver(self, addrs: Sequence[str], *, timeout_s: float = 3.0) -> NameserverClient:
        """Calls to the nameservers *addrs*, the next one tried when one fails."""
        return NameserverClient(self, addrs, timeout_s=timeout_s)

    async def close(self) -> None:
        """Close every channel."""
        channels, self._channels = self._channels, {}
        brokers, self._brokers = self._brokers, {}
        for broker in brokers.values():
            await broker.close()
        for channel in channels.values():
            await channel.close()
