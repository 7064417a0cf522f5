"""Broker: one broker process's parts, started and stopped in order.

RocketMQ's ``BrokerController``. It owns the gRPC servers, the interceptors,
the background tasks and, once started, one frozen
:class:`~pocketmq.broker.services.BrokerServices` (the message store, the
metadata managers and the services, built by ``build_services``)::

    start():  bind the port (0 = any) ─ store.start() (recovery, logged) ─
              build_services: load topics.json, consumerOffset.json, delayOffset.json,
              transactionProgress.json and replay the transaction op queue ─
              serve gRPC (and RocketMQ 5's MessagingService on grpc_v2_port,
              grpc_v2/) and Prometheus /metrics on metrics_port (metrics.py) ─
              start offset persistence, client housekeeping, store
              cleanup, delayed-message delivery, transaction checks ─ register
              with every nameserver
    stop():   close /metrics ─ answer parked pulls, close client streams ─ stop taking requests
              and let those in flight finish (grace) ─ stop delivery and
              transaction checks and save their progress ─ persist offsets and
              topics ─ store.shutdown() (flush, checkpoint, remove ``abort``) ─
              unregister from every nameserver

Everything runs on one event loop; the store is called on its thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar, cast, overload

import grpc

from pocketmq.broker.admin_processor import AdminProcessor
from pocketmq.broker.client_manager import ClientManager
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.consumer_offsets import ConsumerOffsetManager
from pocketmq.broker.flow_control import FlowControlInterceptor, server_limits
from pocketmq.broker.grpc_v2.auth import acl_authenticator as v2_acl_authenticator
from pocketmq.broker.grpc_v2.server import GrpcV2Server
from pocketmq.broker.grpc_v2.servicer import Authenticator
from pocketmq.broker.idempotence import IdempotenceProcessor
from pocketmq.broker.limits import warn_if_low
from pocketmq.broker.long_polling import PullRequestHolder
from pocketmq.broker.pull_processor import PullMessageProcessor
from pocketmq.broker.rebalance_lock import RebalanceLockManager
from pocketmq.broker.registration import RegisterBrokerService, RegistrationClient
from pocketmq.broker.runtime_config import RuntimeConfig
from pocketmq.broker.schedule import ScheduleMessageService
from pocketmq.broker.send_back import SendBackProcessor
from pocketmq.broker.send_processor import SendMessageProcessor
from pocketmq.broker.servicer import BrokerServicer, MalformedRequestInterceptor, add_to_server
from pocketmq.broker.services import BrokerEdge, BrokerServices, build_services
from pocketmq.broker.stats import BrokerStatsManager
from pocketmq.broker.store.api import MessageStore
from pocketmq.broker.store.config import StoreConfig
from pocketmq.broker.store.results import RecoveryReport
from pocketmq.broker.timer_service import TimerService
from pocketmq.broker.topic_config import TopicConfigManager
from pocketmq.broker.trace import BrokerTraceService
from pocketmq.broker.transaction import TransactionResolver
from pocketmq.broker.transaction_check import TransactionalMessageCheckService
from pocketmq.broker.v1_send_stream import SendStreamLimits
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.logsetup import security_summary
from pocketmq.common.progress import log_sink, phase_progress
from pocketmq.common.runtime import tune_malloc
from pocketmq.security.acl import AclStore
from pocketmq.security.interceptor import AclInterceptor
from pocketmq.security.tls import server_credentials

if TYPE_CHECKING:
    from pocketmq.broker.ha.controller_client import ControllerClient
    from pocketmq.broker.ha.role import HaController
    from pocketmq.common.metrics_http import MetricsHttpServer

__all__ = ["Broker"]

log = logging.getLogger(__name__)

T = TypeVar("T")

StoreFactory = Callable[[StoreConfig, Clock], MessageStore]
RECOVERY_PROGRESS_INTERVAL_S = 5.0  # a long recovery logs how far it is this often


def _default_store(config: StoreConfig, clock: Clock) -> MessageStore:
    from pocketmq.broker.store.message_store import DefaultMessageStore

    return DefaultMessageStore(config, clock=clock)


class _FromServices(Generic[T]):
    """``broker.topics`` and the like: a part of the started broker's services."""

    def __init__(self, field: str = "") -> None:
        self._field = field

    def __set_name__(self, owner: type, name: str) -> None:
        self._field = self._field or name

    @overload
    def __get__(self, broker: None, owner: type) -> _FromServices[T]: ...
    @overload
    def __get__(self, broker: Broker, owner: type | None = None) -> T: ...
    def __get__(self, broker: Broker | None, owner: type | None = None) -> T | _FromServices[T]:
        if broker is None:  # on the class: help(Broker), introspection
            return self
        return cast(T, getattr(broker.services, self._field))


class Broker:
    """One broker: RocketMQ's ``BrokerController``, the process that stores and serves
    messages.

    Build it from a :class:`~pocketmq.broker.config.BrokerConfig` (and, for tests, an
    injected clock, store factory, nameserver client factory or v2 authenticator),
    then ``await broker.start()`` on the event loop it will run on and
    ``await broker.stop()`` to shut it down::

        broker = Broker(BrokerConfig(data_dir=..., namesrv_addrs="127.0.0.1:9876", port=0))
        await broker.start()      # binds, recovers the store, serves, registers
        broker.address            # "ip:port" clients reach it at
        await broker.stop()       # graceful; safe twice and after a failed start

    It owns the gRPC server of ``pocketmq.v1.Broker`` (and RocketMQ 5's
    MessagingService, ``grpc_v2``), its interceptors (malformed requests, the ACL,
    flow control), the Prometheus endpoint, replication's controller client and the
    store cleanup task; everything else it serves with (the store, the metadata
    managers, the send / pull / admin / transaction services, registration) is one
    frozen :class:`~pocketmq.broker.services.BrokerServices`, ``broker.services``,
    built once in ``start()``. ``broker.store``, ``broker.topics``... read its parts;
    before ``start()`` they raise ``RuntimeError``.
    """

    # The started broker's parts (broker/services.py), as the attributes they always were.
    store: _FromServices[MessageStore] = _FromServices()
    recovery: _FromServices[RecoveryReport] = _FromServices()
    topics: _FromServices[TopicConfigManager] = _FromServices()
    offsets: _FromServices[ConsumerOffsetManager] = _FromServices()
    clients: _FromServices[ClientManager] = _FromServices()
    hold: _FromServices[PullRequestHolder] = _FromServices()
    schedule: _FromServices[ScheduleMessageService] = _FromServices()
    timer: _FromServices[TimerService] = _FromServices()
    locks: _FromServices[RebalanceLockManager] = _FromServices()
    transactions: _FromServices[TransactionResolver] = _FromServices()
    transaction_check: _FromServices[TransactionalMessageCheckService] = _FromServices()
    registration: _FromServices[RegisterBrokerService] = _FromServices()
    idempotence: _FromServices[IdempotenceProcessor] = _FromServices()
    send: _FromServices[SendMessageProcessor] = _FromServices()
    send_back: _FromServices[SendBackProcessor] = _FromServices()
    pull_service: _FromServices[PullMessageProcessor] = _FromServices("pull")
    admin: _FromServices[AdminProcessor] = _FromServices()
    ha: _FromServices[HaController | None] = _FromServices()  # None: store without epochs
    trace: _FromServices[BrokerTraceService | None] = _FromServices()  # trace_topic_enable

    def __init__(
        self,
        config: BrokerConfig,
        *,
        clock: Clock | None = None,
        store_factory: StoreFactory = _default_store,
        namesrv_client_factory: Callable[[str], RegistrationClient] | None = None,
        v2_authenticator: Authenticator | None = None,
    ) -> None:
        self.config = config
        self._v2_authenticator = v2_authenticator  # checks RocketMQ 5 clients' signatures
        self.clock = clock or SystemClock()
        self._store_factory = store_factory
        self._namesrv_client_factory = namesrv_client_factory
        self._services: BrokerServices | None = None  # built by start()
        self._server: grpc.aio.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.port = 0
        self.flow_control: FlowControlInterceptor | None = None  # built by start()
        self.servicer: BrokerServicer | None = None  # built by start()
        self.acl: AclStore | None = None  # when acl_enable
        self.grpc_v2: GrpcV2Server | None = None  # RocketMQ 5's MessagingService
        self._stopping = False
        self.stats = BrokerStatsManager(clock=self.clock)  # put/get counts, TPS, latency
        self.metrics: MetricsHttpServer | None = None  # Prometheus, on metrics_port
        self.controller_client: ControllerClient | None = None  # controller mode
        self._acl_interceptor: AclInterceptor | None = None

    @property
    def services(self) -> BrokerServices:
        """The store and services this broker serves with (built by ``start()``)."""
        if self._services is None:
            raise RuntimeError(
                f"broker {self.config.broker_name} is not started: its store and services "
                "exist once start() has opened the store"
            )
        return self._services

    @property
    def address(self) -> str:
        """``ip:port`` clients reach this broker at (after start)."""
        ip = self.config.advertised_ip
        return f"[{ip}]:{self.port}" if ":" in ip else f"{ip}:{self.port}"

    @property
    def metrics_port(self) -> int | None:
        """The bound port of Prometheus' /metrics (after start), None when it is off."""
        return self.metrics.port if self.metrics is not None else None

    # -- start --------------------------------------------------------------------------
    async def start(self) -> None:
        cfg = self.config
        tune_malloc()
        # ulimit -n and vm.max_map_count against the mapped consume queues
        warn_if_low(cfg.max_queues_total, cfg.max_open_consume_queue_files)
        server = self._bind_server()
        store: MessageStore | None = None
        try:
            if cfg.v2_port >= 0:
                self.grpc_v2 = GrpcV2Server(
                    cfg,
                    authenticate=self._v2_authenticator,
                    clock=self.clock,
                    interceptors=[MalformedRequestInterceptor(), self.flow_control],
                )
                self.grpc_v2.bind()
            store, recovery = self._open_store()
            services = self._services = self._build_services(store, recovery)
            self.servicer = self._servicer(services)
            add_to_server(self.servicer, server)
            await self._start_ha(services)
            await server.start()
            if self.grpc_v2 is not None:
                await self.grpc_v2.start(services)
            if cfg.metrics_port >= 0:
                from pocketmq.broker.metrics import start_broker_metrics

                self.metrics = await start_broker_metrics(self, cfg.metrics_port)
        except BaseException:
            await server.stop(None)
            if self.grpc_v2 is not None:
                await self.grpc_v2.stop(None)
            if self._services is not None and self._services.ha is not None:
                await self._services.ha.stop()
            if store is not None:
                store.shutdown()
            raise
        self._server = server
        self._start_background(services)
        log.info(
            "broker %s (cluster %s, id %d, %s) serving on %s, data in %s, %s flush; %s",
            cfg.broker_name,
            cfg.cluster_name,
            self.broker_id,
            self.role,
            self.address,
            cfg.data_dir,
            cfg.flush_disk_type,
            security_summary(
                tls=cfg.tls_enabled,
                client_auth=cfg.tls_require_client_auth,
                acl_file=cfg.acl_path if cfg.acl_enable else None,
            ),
        )
        await services.registration.start()

    def _bind_server(self) -> grpc.aio.Server:
        """The v1 gRPC server with its interceptors, bound (``self.port`` set)."""
        cfg = self.config
        max_receive = cfg.max_batch_size_bytes + cfg.max_message_size_bytes + 1024 * 1024
        # Interceptors run in list order; each one is independent of the others.
        self.flow_control = FlowControlInterceptor(
            max_per_connection=cfg.max_in_flight_requests_per_connection,
            max_total=cfg.max_in_flight_requests,
            max_bytes_per_connection=cfg.max_queued_response_bytes_per_connection,
            max_bytes_total=cfg.max_queued_response_bytes,
        )
        interceptors: list[grpc.aio.ServerInterceptor] = [MalformedRequestInterceptor()]
        if cfg.acl_enable:
            self.acl = AclStore(cfg.acl_path)
            self._acl_interceptor = AclInterceptor(self.acl, clock_ms=self.clock.now_ms)
            interceptors.append(self._acl_interceptor)
            if self._v2_authenticator is None:
                self._v2_authenticator = v2_acl_authenticator(self.acl)
        interceptors.append(self.flow_control)
        server = grpc.aio.server(
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", max_receive),
                ("grpc.max_send_message_length", -1),
                ("grpc.so_reuseport", 0),
                *server_limits(cfg),
            ],
        )
        try:
            if cfg.tls_enabled:
                self.port = server.add_secure_port(
                    f"{cfg.host}:{cfg.port}",
                    server_credentials(
                        cfg.tls_cert_file,
                        cfg.tls_key_file,
                        cfg.tls_ca_file,
                        cfg.tls_require_client_auth,
                    ),
                )
            else:
                self.port = server.add_insecure_port(f"{cfg.host}:{cfg.port}")
        except RuntimeError as exc:
            raise OSError(
                f"cannot listen on {cfg.host}:{cfg.port}: {exc}; is another process "
                "using the port? (--port chooses another)"
            ) from None
        return server

    def _open_store(self) -> tuple[MessageStore, RecoveryReport]:
        store = self._store_factory(self.config.store_config(self.port), self.clock)
        recovery = store.start(
            progress=phase_progress(
                log_sink(log), what="store recovery: ", interval_s=RECOVERY_PROGRESS_INTERVAL_S
            )
        )
        self._log_recovery(recovery)
        return store, recovery

    def _build_services(self, store: MessageStore, recovery: RecoveryReport) -> BrokerServices:
        edge = BrokerEdge(
            port=self.port,
            address=self.address,
            v2_address=self.grpc_v2.address if self.grpc_v2 is not None else "",
            acl=self.acl,
            acl_interceptor=self._acl_interceptor,
            namesrv_client_factory=self._namesrv_client_factory,
        )
        services = build_services(
            self.config, store, recovery, edge, clock=self.clock, stats=self.stats
        )
        if services.ha is not None:
            services.ha.on_become_master(functools.partial(_take_over_as_master, services))
            services.ha.on_step_down(functools.partial(_stop_master_services, services))
        return services

    def _servicer(self, services: BrokerServices) -> BrokerServicer:
        cfg = self.config
        return BrokerServicer(
            services,
            default_topic_queue_nums=cfg.default_topic_queue_nums,
            max_auto_retry_topics=cfg.max_auto_retry_topics,
            send_stream_limits=SendStreamLimits(
                max_streams=cfg.max_send_streams,
                max_streams_per_connection=cfg.max_send_streams_per_connection,
                max_in_flight=cfg.max_send_stream_in_flight,
            ),
            flow_control=self.flow_control,
            figures=[
                *([self.flow_control.figures] if self.flow_control is not None else []),
                self.stats.figures,  # put_tps, get_tps, ... (broker/stats.py)
                *([services.trace.figures] if services.trace is not None else []),
                *([services.ha.runtime_info] if services.ha is not None else []),
                self._controller_figures,
            ],
            promote=self._promote if services.ha is not None else None,
            update_config=RuntimeConfig(
                lambda: self.config, self._config_changed, lambda name: getattr(self, name, None)
            ).update,
        )

    def _config_changed(self, config: BrokerConfig) -> None:
        """UpdateBrokerConfig applied: GetBrokerConfig shows the running values."""
        self.config = config
        if self._services is not None:
            self._services.admin.config = config

    async def _promote(self, *, epoch: int = 0, role: str = "") -> tuple[int, int, str]:
        """PromoteToMaster: a manual promotion, or in controller mode a forced election
        of this broker (the controller names masters; see ControllerClient.elect_me)."""
        ha = self.services.ha
        assert ha is not None
        if self.controller_client is not None:
            return await self.controller_client.elect_me()
        return await ha.promote(epoch=epoch, role=role)

    def _controller_figures(self) -> dict[str, str]:
        client = self.controller_client
        return client.runtime_info() if client is not None else {}

    async def _start_ha(self, services: BrokerServices) -> None:
        ha, registration = services.ha, services.registration
        if ha is None:
            return
        await ha.start()
        registration.set_ha_address(ha.ha_address)
        registration.set_role(ha.broker_id, ha.epoch)
        ha.on_role_change(registration.set_role)
        if self.config.controller_mode:
            from pocketmq.broker.ha.controller_client import ControllerClient

            registration.paused = True  # until the controller names the role
            self.controller_client = ControllerClient(self.config, ha, broker_addr=self.address)
            self.controller_client.start()

    @property
    def role(self) -> str:
        ha = self._services.ha if self._services is not None else None
        return ha.role if ha is not None else self.config.broker_role

    @property
    def broker_id(self) -> int:
        ha = self._services.ha if self._services is not None else None
        return ha.broker_id if ha is not None else self.config.broker_id

    def _start_background(self, services: BrokerServices) -> None:
        services.offsets.start()
        services.clients.start()
        if self.role != "SLAVE":
            _start_master_services(services)
        self._tasks.append(
            asyncio.get_running_loop().create_task(
                self._store_cleanup(services.store), name="StoreCleanupService"
            )
        )

    async def _store_cleanup(self, store: MessageStore) -> None:
        """Retention and disk-space checks, on the loop thread as the store requires."""
        interval_s = self.config.clean_resource_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                store.run_cleanup_once()
            except Exception:
                log.exception("store cleanup failed; retrying in %.0f s", interval_s)

    @staticmethod
    def _log_recovery(report: RecoveryReport) -> None:
        log.info(
            "store recovered in %.3f s: %s shutdown, commit log scanned from %d to %d, "
            "%d records re-dispatched, %d consume-queue units trimmed",
            report.seconds,
            "clean" if report.clean_shutdown else "ABNORMAL",
            report.scanned_from,
            report.max_phys_offset,
            report.redispatched,
            report.consume_queue_units_trimmed,
        )
        if report.truncated_bytes:
            log.warning(
                "recovery cut %d bytes of the commit log at offset %s: %s",
                report.truncated_bytes,
                report.first_bad_offset,
                report.reason,
            )

    # -- stop ---------------------------------------------------------------------------
    async def stop(self, grace_s: float | None = 5.0) -> None:
        """Stop gracefully; safe to call twice and after a failed start."""
        if self._stopping:
            return
        self._stopping = True
        log.info("broker %s stopping (grace %s s)", self.config.broker_name, grace_s)
        services = self._services
        if self.metrics is not None:
            await self.metrics.stop()
        if services is not None:
            services.hold.release_all()
            await services.clients.stop()
        if self.servicer is not None:
            self.servicer.send_streams.stop()  # long-lived streams would hold the grace
        if self._server is not None:
            await self._server.stop(grace_s)
        if self.grpc_v2 is not None:
            await self.grpc_v2.stop(grace_s)
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if services is not None:
            await self._stop_services(services)
        log.info("broker %s stopped", self.config.broker_name)

    async def _stop_services(self, services: BrokerServices) -> None:
        await _stop_master_services(services)
        if self.controller_client is not None:
            await self.controller_client.stop()
        if services.ha is not None:
            await services.ha.stop()
        await _persist_metadata(services)
        services.store.shutdown()
        await services.registration.stop(unregister=True)


def _take_over_as_master(services: BrokerServices, resumed: bool) -> None:
    """A replica promoted: its timer rebuilt from the copied log, delay progress
    checked against the key index, then the master's services. *resumed*: master of
    the term it was master of before its restart, with its own files, as at a start."""
    if not resumed:
        services.timer.forget_for_promotion()
        services.schedule.check_earlier_deliveries()
    _start_master_services(services)


async def _stop_master_services(services: BrokerServices) -> None:
    """A master stepping down, or a broker stopping: the services that write to the
    store stop (each saves its progress). Stepping down, they would otherwise deliver
    beside the new master's and, elected again, run twice."""
    await services.schedule.stop()
    await services.timer.stop()
    await services.transaction_check.stop()
    if services.trace is not None:
        await services.trace.stop()


def _start_master_services(services: BrokerServices) -> None:
    """Delayed delivery, timers and transaction checks write to the store: a master's."""
    services.schedule.start()
    services.timer.start()
    services.transaction_check.start()
    if services.trace is not None:
        services.trace.ensure_topic(services.topics)  # RocketMQ creates it at start too
        services.trace.start()


async def _persist_metadata(services: BrokerServices) -> None:
    try:
        await services.offsets.stop()
    except OSError as exc:
        log.error("cannot persist consumer offsets at shutdown: %s", exc)
    try:
        await services.topics.stop()
    except OSError as exc:
        log.error("cannot persist topics at shutdown: %s", exc)
