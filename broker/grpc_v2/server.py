"""GrpcV2Server: the broker's second gRPC server, for RocketMQ 5 clients.

Owned by :class:`~pocketmq.broker.broker.Broker` unless ``grpc_v2_port`` is
negative (:attr:`BrokerConfig.v2_port`: 8081 unless set, any free port when the
broker's own port is 0). Two steps, because the broker registers its v2 address with the
nameservers before it serves::

    bind()    create the server, listen on grpc_v2_port (0 = any) -> the port; with
              the broker's tls_* options over TLS, as its own port (client
              certificates required when tls_require_client_auth)
    start()   replay DATA/pop/popJournal, build the servicer, serve
    stop()    answer waiting receives, stop taking calls and let those in
              flight finish (grace), compact and close the journal

The servicer gets the broker's own services; nothing here keeps messages of
its own.
"""

from __future__ import annotations

import logging
import os

import grpc

from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.flow_control import server_limits
from pocketmq.broker.grpc_v2.client_trace import V2ClientTrace
from pocketmq.broker.grpc_v2.pop_journal import PopJournal
from pocketmq.broker.grpc_v2.pop_processor import PopMessageProcessor
from pocketmq.broker.grpc_v2.route import RouteResolver
from pocketmq.broker.grpc_v2.servicer import Authenticator, MessagingServicer, add_to_server
from pocketmq.broker.grpc_v2.telemetry import TelemetryService
from pocketmq.broker.property_filter import FilterCompiler
from pocketmq.broker.services import BrokerServices
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.security.grpc_guard import MalformedRequestInterceptor
from pocketmq.security.tls import server_credentials

__all__ = ["BrokerParts", "GrpcV2Server"]

log = logging.getLogger(__name__)

POP_DIR = "pop"


# The broker services the v2 API translates to (the name before BrokerServices).
BrokerParts = BrokerServices


class GrpcV2Server:
    def __init__(
        self,
        config: BrokerConfig,
        *,
        authenticate: Authenticator | None = None,
        clock: Clock | None = None,
        interceptors: list[grpc.aio.ServerInterceptor] | None = None,
    ) -> None:
        self.config = config
        # Before the servicer: malformed bytes answered INVALID_ARGUMENT, and the broker's
        # flow control (one budget for both APIs) unless the caller gives its own list.
        self._interceptors = (
            [MalformedRequestInterceptor()] if interceptors is None else interceptors
        )
        self._authenticate = authenticate
        self._clock = clock or SystemClock()
        self._server: grpc.aio.Server | None = None
        self.port = 0
        self.pop: PopMessageProcessor | None = None
        self.telemetry: TelemetryService | None = None
        self._routes: RouteResolver | None = None

    @property
    def address(self) -> str:
        """``ip:port`` RocketMQ 5 clients reach this broker at (after bind)."""
        ip = self.config.advertised_ip
        return f"[{ip}]:{self.port}" if ":" in ip else f"{ip}:{self.port}"

    def bind(self) -> int:
        cfg = self.config
        self._server = grpc.aio.server(
            interceptors=self._interceptors,
            options=[
                ("grpc.max_receive_message_length", cfg.max_message_size_bytes + 1024 * 1024),
                ("grpc.max_send_message_length", -1),
                ("grpc.so_reuseport", 0),
                *server_limits(cfg),  # the v1 port's bounds on slow and hostile connections
            ],
        )
        address = f"{cfg.host}:{cfg.v2_port}"
        try:
            if cfg.tls_enabled:
                self.port = self._server.add_secure_port(
                    address,
                    server_credentials(
                        cfg.tls_cert_file,
                        cfg.tls_key_file,
                        cfg.tls_ca_file,
                        cfg.tls_require_client_auth,
                    ),
                )
            else:
                self.port = self._server.add_insecure_port(address)
        except RuntimeError as exc:
            raise OSError(
                f"cannot listen on {cfg.host}:{cfg.v2_port} (grpc_v2_port) for "
                f"RocketMQ 5 clients: {exc}; pick another port, 0 for any, or -1 to "
                "turn the v2 API off"
            ) from None
        return self.port

    async def start(self, services: BrokerServices) -> None:
        cfg = self.config
        assert self._server is not None, "bind() first"
        self.pop = PopMessageProcessor(
            services.store,
            services.topics,
            services.offsets,
            services.send_back,
            PopJournal(os.path.join(cfg.data_dir, POP_DIR)),
            broker_name=cfg.broker_name,
            max_delivery_attempts=cfg.grpc_v2_max_delivery_attempts,
            max_batch_bytes=cfg.max_pull_bytes,
            max_waiting=cfg.max_parked_pulls,
            clock=self._clock,
            filters=FilterCompiler(enable_property_filter=cfg.enable_property_filter),
        )
        self.pop.load()
        services.store.add_arrival_listener(self.pop.on_arrival)
        self.telemetry = TelemetryService(
            services.clients,
            services.topics,
            delay_levels=cfg.delay_levels,
            max_body_bytes=cfg.max_message_size_bytes,
            max_delivery_attempts=cfg.grpc_v2_max_delivery_attempts,
        )
        self._routes = RouteResolver(
            cfg.namesrv_addr_list,
            services.topics,
            broker_name=cfg.broker_name,
            v2_host=cfg.advertised_ip,
            v2_port=self.port,
            tls_ca_file=cfg.namesrv_tls_ca_file,
            credentials=cfg.credentials,
        )
        add_to_server(
            MessagingServicer(
                send=services.send,
                pop=self.pop,
                routes=self._routes,
                telemetry=self.telemetry,
                transactions=services.transactions,
                topics=services.topics,
                store_host=services.store_host,
                max_body_bytes=cfg.max_message_size_bytes,
                max_batch=cfg.max_pull_messages,
                authenticate=self._authenticate,
                clock=self._clock,
                trace=(
                    V2ClientTrace(services.trace, clock=self._clock)
                    if services.trace is not None
                    else None
                ),
            ),
            self._server,
        )
        await self._server.start()
        log.info("RocketMQ 5 MessagingService of broker %s on %s", cfg.broker_name, self.address)

    async def stop(self, grace_s: float | None) -> None:
        if self.pop is not None:
            self.pop.release_waiting()
        if self.telemetry is not None:
            self.telemetry.release_all()
        if self._server is not None:
            await self._server.stop(grace_s)
            self._server = None
        if self._routes is not None:
            await self._routes.close()
            self._routes = None
        if self.pop is not None:
            self.pop.stop()
            self.pop = None
