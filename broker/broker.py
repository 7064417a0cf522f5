"""Broker: one broker process's parts, started and stopped in order.

RocketMQ's ``BrokerController``. It owns the message store, the metadata
managers, the services, the gRPC server and every background task::

    start():  bind the port (0 = any) ─ store.start() (recovery, logged) ─
              load topics.json, consumerOffset.json, delayOffset.json,
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
from typing import TYPE_CHECKING

import grpc

from pocketmq.broker.admin_service import AdminProcessor
from pocketmq.broker.client_manager import ClientManager
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.consumer_offsets import ConsumerOffsetManager
from pocketmq.broker.flow_control import FlowControlInterceptor, server_limits
from pocketmq.broker.grpc_v2.auth import acl_authenticator as v2_acl_authenticator
from pocketmq.broker.grpc_v2.server import BrokerParts, GrpcV2Server
from pocketmq.broker.grpc_v2.servicer import Authenticator
from pocketmq.broker.idempotence import IdempotenceProcessor
from pocketmq.broker.limits import warn_if_low
from pocketmq.broker.long_polling import PullRequestHolder
from pocketmq.broker.namesrv_client import GrpcNameserverClient
from pocketmq.broker.property_filter import FilterCompiler
from pocketmq.broker.pull_service import PullMessageProcessor
from pocketmq.broker.rebalance_lock import RebalanceLockManager
from pocketmq.broker.registration import RegisterBrokerService, RegistrationClient
from pocketmq.broker.runtime_config import RuntimeConfig
from pocketmq.broker.schedule import ScheduleMessageService
from pocketmq.broker.send_back import SendBackProcessor
from pocketmq.broker.send_service import SendMessageProcessor
from pocketmq.broker.servicer import BrokerServicer, MalformedRequestInterceptor, add_to_server
from pocketmq.broker.stats import BrokerStatsManager
from pocketmq.broker.store.api import MessageStore
from pocketmq.broker.store.config import StoreConfig
from pocketmq.broker.store.results import RecoveryReport
from pocketmq.broker.store.timer_store import TimerMessageStore
from pocketmq.broker.timer_messages import TimerPolicy
from pocketmq.broker.timer_service import TimerService
from pocketmq.broker.topic_config import TopicConfigManager
from pocketmq.broker.trace import BrokerTraceService
from pocketmq.broker.transaction import TransactionResolver
from pocketmq.broker.transaction_check import TransactionalMessageCheckService
from pocketmq.broker.v1_authz import transaction_check_filter
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

StoreFactory = Callable[[StoreConfig, Clock], MessageStore]
RECOVERY_PROGRESS_INTERVAL_S = 5.0  # a long recovery logs how far it is this often


def _default_store(config: StoreConfig, clock: Clock) -> MessageStore:
    from pocketmq.broker.store.message_store import DefaultMessageStore

    return DefaultMessageStore(config, clock=clock)


class Broker:
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
        self._server: grpc.aio.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.port = 0
        self.store: MessageStore | None = None
        self.recovery: RecoveryReport | None = None
        self.topics: TopicConfigManager | None = None
        self.offsets: ConsumerOffsetManager | None = None
        self.clients: ClientManager | None = None
        self.hold: PullRequestHolder | None = None
        self.flow_control: FlowControlInterceptor | None = None
        self.admin: AdminProcessor | None = None
        self.pull_service: PullMessageProcessor | None = None
        self.acl: AclStore | None = None  # when acl_enable
        self.registration: RegisterBrokerService | None = None
        self.send: SendMessageProcessor | None = None
        self.send_back: SendBackProcessor | None = None
        self.grpc_v2: GrpcV2Server | None = None  # RocketMQ 5's MessagingService
        self.schedule: ScheduleMessageService | None = None
        self.timer: TimerService | None = None
        self.locks: RebalanceLockManager | None = None
        self.transactions: TransactionResolver | None = None
        self.transaction_check: TransactionalMessageCheckService | None = None
        self.trace: BrokerTraceService | None = None  # trace_topic_enable
        self._stopping = False
        self.stats = BrokerStatsManager(clock=self.clock)  # put/get counts, TPS, latency
        self.metrics: MetricsHttpServer | None = None  # Prometheus, on metrics_port
        self.ha: HaController | None = None  # role and replication (broker/ha)
        self.controller_client: ControllerClient | None = None  # controller mode
        self._acl_interceptor: AclInterceptor | None = None

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
        try:
            if cfg.v2_port >= 0:
                self.grpc_v2 = GrpcV2Server(
                    cfg,
                    authenticate=self._v2_authenticator,
                    clock=self.clock,
                    interceptors=[MalformedRequestInterceptor(), self.flow_control],
                )
                self.grpc_v2.bind()
            servicer = self._open_store_and_services()
            add_to_server(servicer, server)
            await self._start_ha()
            await server.start()
            if self.grpc_v2 is not None:
                await self.grpc_v2.start(self._v2_parts())
            if cfg.metrics_port >= 0:
                from pocketmq.broker.metrics import start_broker_metrics

                self.metrics = await start_broker_metrics(self, cfg.metrics_port)
        except BaseException:
            await server.stop(None)
            if self.grpc_v2 is not None:
                await self.grpc_v2.stop(None)
            if self.ha is not None:
                await self.ha.stop()
            if self.store is not None:
                self.store.shutdown()
            raise
        self._server = server
        self._start_background()
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
        assert self.registration is not None
        await self.registration.start()

    def _open_store_and_services(self) -> BrokerServicer:
        store = self._store_factory(self.config.store_config(self.port), self.clock)
        self.recovery = store.start(
            progress=phase_progress(
                log_sink(log), what="store recovery: ", interval_s=RECOVERY_PROGRESS_INTERVAL_S
            )
        )
        self.store = store
        self._log_recovery(self.recovery)
        return self._build_services(store)

    def _build_services(self, store: MessageStore) -> BrokerServicer:
        cfg = self.config
        store_host = (cfg.advertised_ip, self.port)
        levels = cfg.delay_levels
        self.topics = TopicConfigManager(
            cfg.config_dir,
            broker_name=cfg.broker_name,
            cluster_name=cfg.cluster_name,
            default_queue_nums=cfg.default_topic_queue_nums,
            auto_create_enable=cfg.auto_create_topic_enable,
            schedule_queue_nums=levels.max_level,
            max_queues_total=cfg.max_queues_total,
            clock=self.clock,
        )
        self.topics.load()
        self.offsets = ConsumerOffsetManager(
            cfg.config_dir, persist_interval_seconds=cfg.consumer_offset_persist_interval_seconds
        )
        self.offsets.load()
        self.clients = ClientManager(
            broker_name=cfg.broker_name,
            expire_seconds=cfg.client_channel_expire_seconds,
            scan_interval_seconds=cfg.client_scan_interval_seconds,
            clock=self.clock,
        )
        if self.acl is not None:
            # A transaction check carries the uncommitted record: only to keys that may PUB it.
            self.clients.command_filter = transaction_check_filter(self.acl)
        self.hold = PullRequestHolder(max_parked=cfg.max_parked_pulls)
        store.add_arrival_listener(self.hold.on_arrival)
        self.schedule = ScheduleMessageService(
            store,
            levels,
            cfg.config_dir,
            persist_interval_s=cfg.flush_delay_offset_interval_ms / 1000,
            clock=self.clock,
        )
        self.schedule.load()
        store.add_arrival_listener(self.schedule.on_arrival)
        self._build_timer(store)
        self._build_ha(store)
        self.locks = RebalanceLockManager(
            max_live_time_ms=cfg.rebalance_lock_max_live_time_ms, clock=self.clock
        )
        self._build_transactions(store, store_host)
        registration_kwargs = {}
        if self._namesrv_client_factory is not None:
            registration_kwargs["client_factory"] = self._namesrv_client_factory
        elif cfg.namesrv_tls_ca_file or cfg.credentials is not None:
            registration_kwargs["client_factory"] = functools.partial(
                GrpcNameserverClient,
                tls_ca_file=cfg.namesrv_tls_ca_file,
                credentials=cfg.credentials,
            )
        self.registration = RegisterBrokerService(
            cfg.namesrv_addr_list,
            self.topics,
            cluster_name=cfg.cluster_name,
            broker_name=cfg.broker_name,
            broker_addr=self.address,
            broker_id=self.broker_id,
            interval_s=cfg.register_interval_seconds,
            timeout_s=cfg.register_timeout_seconds,
            grpc_v2_addr=self.grpc_v2.address if self.grpc_v2 is not None else "",
            on_reply=self.ha.on_register_reply if self.ha is not None else None,
            **registration_kwargs,
        )
        self.idempotence = IdempotenceProcessor(
            store, clock=self.clock, not_master=self.ha.not_master if self.ha is not None else None
        )
        self.send = SendMessageProcessor(
            store,
            self.topics,
            store_host=store_host,
            delay_levels=levels,
            clock=self.clock,
            stats=self.stats,
            timer=TimerPolicy(enabled=cfg.timer_wheel_enable, max_delay_ms=cfg.timer_max_delay_ms),
            replica_wait=(self.ha.wait_replicated if self.ha is not None else None),
            not_master=(self.ha.not_master if self.ha is not None else None),
            idempotence=self.idempotence,
        )
        self.send_back = SendBackProcessor(
            store, self.topics, levels, store_host=store_host, clock=self.clock
        )
        self._build_trace(store, store_host)
        self.pull_service = PullMessageProcessor(
            store,
            self.topics,
            self.offsets,
            self.hold,
            max_pull_messages=cfg.max_pull_messages,
            max_pull_bytes=cfg.max_pull_bytes,
            long_polling_enable=cfg.long_polling_enable,
            suspend_default_ms=cfg.pull_suspend_default_ms,
            suspend_max_ms=cfg.pull_suspend_max_ms,
            clock=self.clock,
            stats=self.stats,
            filters=FilterCompiler(enable_property_filter=cfg.enable_property_filter),
        )
        self.admin = AdminProcessor(
            store,
            self.topics,
            self.offsets,
            self.clients,
            self.hold,
            broker_name=cfg.broker_name,
            cluster_name=cfg.cluster_name,
            store_host=store_host,
            default_query_max=cfg.default_query_max,
            clock=self.clock,
            config=cfg,
        )
        return BrokerServicer(
            send=self.send,
            send_back=self.send_back,
            locks=self.locks,
            transactions=self.transactions,
            pull=self.pull_service,
            offsets=self.offsets,
            clients=self.clients,
            admin=self.admin,
            default_topic_queue_nums=cfg.default_topic_queue_nums,
            max_auto_retry_topics=cfg.max_auto_retry_topics,
            figures=[
                *([self.flow_control.figures] if self.flow_control is not None else []),
                self.stats.figures,  # put_tps, get_tps, ... (broker/stats.py)
                *([self.trace.figures] if self.trace is not None else []),
                *([self.ha.runtime_info] if self.ha is not None else []),
                self._controller_figures,
            ],
            promote=self._promote if self.ha is not None else None,
            idempotence=self.idempotence,
            update_config=RuntimeConfig(
                lambda: self.config, self._config_changed, lambda name: getattr(self, name, None)
            ).update,
        )

    def _config_changed(self, config: BrokerConfig) -> None:
        """UpdateBrokerConfig applied: GetBrokerConfig shows the running values."""
        self.config = config
        if self.admin is not None:
            self.admin.config = config

    async def _promote(self, *, epoch: int = 0, role: str = "") -> tuple[int, int, str]:
        """PromoteToMaster: a manual promotion, or in controller mode a forced election
        of this broker (the controller names masters; see ControllerClient.elect_me)."""
        assert self.ha is not None
        if self.controller_client is not None:
            return await self.controller_client.elect_me()
        return await self.ha.promote(epoch=epoch, role=role)

    def _controller_figures(self) -> dict[str, str]:
        client = self.controller_client
        return client.runtime_info() if client is not None else {}

    def _v2_parts(self) -> BrokerParts:
        assert (
            self.store
            and self.topics
            and self.offsets
            and self.clients
            and self.send
            and self.send_back
            and self.transactions
        )
        return BrokerParts(
            store=self.store,
            topics=self.topics,
            offsets=self.offsets,
            clients=self.clients,
            send=self.send,
            send_back=self.send_back,
            transactions=self.transactions,
            store_host=(self.config.advertised_ip, self.port),
        )

    def _build_transactions(self, store: MessageStore, store_host: tuple[str, int]) -> None:
        cfg = self.config
        assert self.clients is not None
        self.transactions = TransactionResolver(
            store,
            cfg.config_dir,
            store_host=store_host,
            max_batch_size_bytes=cfg.max_batch_size_bytes,
            clock=self.clock,
        )
        self.transactions.load()
        self.transaction_check = TransactionalMessageCheckService(
            self.transactions,
            store,
            send_check=self.clients.send_to_producer,
            store_host=store_host,
            timeout_ms=cfg.transaction_timeout_ms,
            check_interval_ms=cfg.transaction_check_interval_ms,
            check_max=cfg.transaction_check_max,
            clock=self.clock,
        )
        store.add_arrival_listener(self.transaction_check.on_arrival)

    def _build_trace(self, store: MessageStore, store_host: tuple[str, int]) -> None:
        """The broker's side of message trace: the services' hooks write to it."""
        cfg = self.config
        if not cfg.trace_topic_enable:
            return
        self.trace = BrokerTraceService(
            store,
            topic=cfg.msg_trace_topic_name,
            broker_name=cfg.broker_name,
            store_host=store_host,
            clock=self.clock,
        )
        for service in (self.send, self.send_back, self.schedule, self.timer, self.transactions):
            if service is not None:
                service.trace = self.trace

    def _build_timer(self, store: MessageStore) -> None:
        """Messages with a delivery time: recover DATA/timerlog, timerwheel, timercheck."""
        cfg = self.config
        assert self.recovery is not None
        self.timer = TimerService(
            store,
            TimerMessageStore(
                cfg.data_dir,
                wheel_slots=cfg.timer_wheel_slots,
                log_file_size=cfg.timer_log_file_size_bytes,
            ),
            roll_window_s=cfg.timer_roll_window_s,
            flush_interval_s=cfg.timer_flush_interval_ms / 1000,
            clock=self.clock,
        )
        self.timer.load(clean_shutdown=self.recovery.clean_shutdown)
        store.add_arrival_listener(self.timer.on_arrival)

    def _build_ha(self, store: MessageStore) -> None:
        """Replication, for a store that keeps an epoch file (the file-backed one)."""
        from pocketmq.broker.ha.role import HaController
        from pocketmq.broker.store.message_store import DefaultMessageStore

        cfg = self.config
        if not isinstance(store, DefaultMessageStore):
            return
        assert self.topics is not None and self.offsets is not None
        credentials = None
        if cfg.tls_enabled:
            credentials = server_credentials(
                cfg.tls_cert_file, cfg.tls_key_file, cfg.tls_ca_file, cfg.tls_require_client_auth
            )
        self.ha = HaController(
            cfg,
            store,
            topics=self.topics,
            offsets=self.offsets,
            schedule=self.schedule,
            replica_addr=self.address,
            acl=self._acl_interceptor,
            server_credentials=credentials,
        )
        self.ha.on_become_master(self._start_master_services)

    async def _start_ha(self) -> None:
        if self.ha is None:
            return
        await self.ha.start()
        assert self.registration is not None
        self.registration.set_ha_address(self.ha.ha_address)
        self.registration.set_role(self.ha.broker_id, self.ha.epoch)
        self.ha.on_role_change(self.registration.set_role)
        if self.config.controller_mode:
            from pocketmq.broker.ha.controller_client import ControllerClient

            self.registration.paused = True  # until the controller names the role
            self.controller_client = ControllerClient(
                self.config, self.ha, broker_addr=self.address
            )
            self.controller_client.start()

    @property
    def role(self) -> str:
        return self.ha.role if self.ha is not None else self.config.broker_role

    @property
    def broker_id(self) -> int:
        return self.ha.broker_id if self.ha is not None else self.config.broker_id

    def _start_master_services(self) -> None:
        """Delayed delivery, timers and transaction checks write to the store: a master's."""
        if self.schedule is not None:
            self.schedule.start()
        if self.timer is not None:
            self.timer.start()
        if self.transaction_check is not None:
            self.transaction_check.start()
        if self.trace is not None and self.topics is not None:
            self.trace.ensure_topic(self.topics)  # RocketMQ creates it at start too
            self.trace.start()

    def _start_background(self) -> None:
        assert self.offsets is not None and self.clients is not None
        self.offsets.start()
        self.clients.start()
        if self.role != "SLAVE":
            self._start_master_services()
        self._tasks.append(
            asyncio.get_running_loop().create_task(
                self._store_cleanup(), name="StoreCleanupService"
            )
        )

    async def _store_cleanup(self) -> None:
        """Retention and disk-space checks, on the loop thread as the store requires."""
        run_once = getattr(self.store, "run_cleanup_once", None)
        if run_once is None:
            return
        interval_s = self.config.clean_resource_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                run_once()
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
        if self.metrics is not None:
            await self.metrics.stop()
        if self.hold is not None:
            self.hold.release_all()
        if self.clients is not None:
            await self.clients.stop()
        if self._server is not None:
            await self._server.stop(grace_s)
        if self.grpc_v2 is not None:
            await self.grpc_v2.stop(grace_s)
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self.schedule is not None:
            await self.schedule.stop()
        if self.timer is not None:
            await self.timer.stop()
        if self.transaction_check is not None:
            await self.transaction_check.stop()
        if self.trace is not None:
            await self.trace.stop()
        if self.controller_client is not None:
            await self.controller_client.stop()
        if self.ha is not None:
            await self.ha.stop()
        await self._persist_metadata()
        if self.store is not None:
            self.store.shutdown()
        if self.registration is not None:
            await self.registration.stop(unregister=True)
        log.info("broker %s stopped", self.config.broker_name)

    async def _persist_metadata(self) -> None:
        if self.offsets is not None:
            try:
                await self.offsets.stop()
            except OSError as exc:
                log.error("cannot persist consumer offsets at shutdown: %s", exc)
        if self.topics is not None:
            try:
                await self.topics.stop()
            except OSError as exc:
                log.error("cannot persist topics at shutdown: %s", exc)
