"""NameServer: one nameserver component — gRPC server, route table, liveness scan.

``await NameServer(config).start()`` binds ``config.host:config.port`` (port 0
picks a free one, read back from :attr:`NameServer.port`) and starts the
liveness scan; ``await stop(grace)`` stops taking requests, lets in-flight ones
finish for *grace* seconds and cancels the scan. Nameservers share nothing, so
any number of them can run in one process. With ``metrics_port`` >= 0 it also
serves Prometheus' ``/metrics`` (:mod:`.metrics`; :attr:`NameServer.metrics_port`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import grpc

from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.errors import ConfigError
from pocketmq.common.logsetup import security_summary
from pocketmq.common.runtime import tune_malloc
from pocketmq.nameserver.config import NamesrvConfig
from pocketmq.nameserver.errors import ServerBindError
from pocketmq.nameserver.liveness import BrokerLivenessService
from pocketmq.nameserver.route_table import BrokerLiveInfo, RouteTable
from pocketmq.nameserver.servicer import NameServerServicer
from pocketmq.security.acl import AclStore
from pocketmq.security.grpc_guard import MalformedRequestInterceptor
from pocketmq.security.interceptor import AclInterceptor
from pocketmq.security.tls import server_credentials
from pocketmq.v1 import nameserver_pb2_grpc

if TYPE_CHECKING:
    from pocketmq.common.metrics_http import MetricsHttpServer
    from pocketmq.controller.service import ControllerService

__all__ = ["NameServer"]

logger = logging.getLogger(__name__)

# Wildcard listen hosts, and the loopback address a local client dials instead.
_LOCAL_FOR_WILDCARD = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def _join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class NameServer:
    """A running nameserver: ``start()``, then ``stop()``."""

    def __init__(self, config: NamesrvConfig, *, clock: Clock | None = None) -> None:
        self._config = config
        self.route_table = RouteTable(
            clock=clock or SystemClock(), default_heartbeat_timeout_ms=config.broker_expire_ms
        )
        self._liveness = BrokerLivenessService(
            self.route_table, scan_interval_seconds=config.scan_interval_seconds
        )
        self._server: grpc.aio.Server | None = None
        self._port: int | None = None
        self._metrics: MetricsHttpServer | None = None
        self.controller: ControllerService | None = None

    @property
    def config(self) -> NamesrvConfig:
        return self._config

    @property
    def port(self) -> int:
        """The bound port (the real one when the config asked for port 0)."""
        if self._port is None:
            raise RuntimeError("NameServer is not started; call `await start()` first")
        return self._port

    @property
    def address(self) -> str:
        """``host:port`` a client on this machine dials (loopback for a wildcard host)."""
        host = _LOCAL_FOR_WILDCARD.get(self._config.host, self._config.host)
        return _join_host_port(host, self.port)

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("NameServer is already started")
        tune_malloc()
        interceptors: list[grpc.aio.ServerInterceptor] = [MalformedRequestInterceptor()]
        if self._config.acl_enable:
            if not self._config.acl_file:
                raise ConfigError(
                    "acl_enable needs acl_file: the ACL the nameserver checks signatures against"
                )
            interceptors.append(
                AclInterceptor(AclStore(self._config.acl_file), server_kind="nameserver")
            )
        # No SO_REUSEPORT: a second nameserver on a held port must fail, not share it.
        server = grpc.aio.server(interceptors=interceptors, options=[("grpc.so_reuseport", 0)])
        nameserver_pb2_grpc.add_NameServerServicer_to_server(
            NameServerServicer(self.route_table), server
        )
        listen = _join_host_port(self._config.host, self._config.port)
        cfg = self._config
        if cfg.controller_enable:
            self._build_controller(server)
        port = self._bind(server, listen)
        await server.start()
        if self._config.metrics_port >= 0:
            from pocketmq.nameserver.metrics import start_nameserver_metrics

            self._port = port
            try:
                self._metrics = await start_nameserver_metrics(self, self._config.metrics_port)
            except OSError as exc:
                self._port = None
                await server.stop(None)
                raise ServerBindError(str(exc)) from None
        self._server, self._port = server, port
        self._liveness.start()
        if self.controller is not None:
            self.controller.set_address(cfg.controller_advertise_addr or self.address)
            await self.controller.start()
        logger.info(
            "nameserver listening on %s (broker expiry %.1f s, scan every %.1f s); %s",
            _join_host_port(self._config.host, port),
            self._config.broker_expire_seconds,
            self._config.scan_interval_seconds,
            security_summary(
                tls=bool(cfg.tls_cert_file),
                client_auth=cfg.tls_require_client_auth,
                acl_file=cfg.acl_file if cfg.acl_enable else None,
            ),
        )

    def _bind(self, server: grpc.aio.Server, listen: str) -> int:
        """Bind *listen* (TLS when a certificate is configured); the port bound."""
        cfg = self._config
        try:
            if cfg.tls_cert_file or cfg.tls_key_file:
                port = server.add_secure_port(
                    listen,
                    server_credentials(
                        cfg.tls_cert_file,
                        cfg.tls_key_file,
                        cfg.tls_ca_file,
                        cfg.tls_require_client_auth,
                    ),
                )
            else:
                port = server.add_insecure_port(listen)
        except RuntimeError as exc:
            raise ServerBindError(
                f"nameserver cannot listen on {listen}: {exc}; is another process using the port?"
            ) from None
        if port == 0:  # older grpcio reports a failed bind this way
            raise ServerBindError(
                f"nameserver cannot listen on {listen}; is another process using the port?"
            )
        return port

    async def stop(self, grace: float | None = None) -> None:
        """Stop taking requests; in-flight ones get *grace* seconds (default from config)."""
        server, self._server = self._server, None
        if self._metrics is not None:
            await self._metrics.stop()
            self._metrics = None
        await self._liveness.stop()
        if self.controller is not None:
            await self.controller.stop()
            self.controller = None
        if server is None:
            return
        grace_s = self._config.shutdown_grace_seconds if grace is None else grace
        await server.stop(grace_s)
        logger.info("nameserver on port %s stopped", self._port)

    def _build_controller(self, server: grpc.aio.Server) -> None:
        from pocketmq.controller.etcd import parse_endpoints
        from pocketmq.controller.service import ControllerService
        from pocketmq.v1 import controller_pb2_grpc

        cfg = self._config
        try:
            endpoints = parse_endpoints(cfg.controller_etcd) if cfg.controller_etcd else None
        except ValueError as exc:
            raise ConfigError(f"controller_etcd: {exc}") from None
        self.controller = ControllerService(
            data_dir=cfg.controller_data_dir,
            etcd_endpoints=endpoints,
            etcd_prefix=cfg.controller_etcd_prefix,
            broker_inactive_ms=cfg.controller_broker_inactive_ms,
            scan_interval_ms=cfg.controller_scan_interval_ms,
            lease_ttl_s=cfg.controller_lease_ttl_s,
            elect_unclean_master=cfg.controller_elect_unclean_master,
        )
        controller_pb2_grpc.add_ControllerServicer_to_server(self.controller.build(), server)

    @property
    def metrics_port(self) -> int | None:
        """The bound port of /metrics, or None when it is off."""
        return self._metrics.port if self._metrics is not None else None

    def run_once(self) -> list[BrokerLiveInfo]:
        """Run one liveness scan now; returns the brokers dropped."""
        return self._liveness.run_once()

    async def __aenter__(self) -> NameServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
