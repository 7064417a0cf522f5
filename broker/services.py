"""BrokerServices: everything a started broker serves with, built in one step.

:class:`~pocketmq.broker.broker.Broker` binds its ports first (the store's
name and the addresses it registers need them), then opens the store and calls
:func:`build_services` once. The result is frozen: code that runs after
``start()`` (the servicers, the metrics, UpdateBrokerConfig) reads its parts
without a ``None`` check, and nothing swaps a part while the broker runs::

    build_services(config, store, recovery, ...)
      topics.json ─ consumerOffset.json ─ clients ─ parked pulls
      ─ delayOffset.json (schedule) ─ timerlog / timerwheel (timer)
      ─ replication (ha, file-backed store only) ─ rebalance locks
      ─ transactionProgress.json + op queue (transactions, transaction_check)
      ─ nameserver registration ─ producer ids (idempotence)
      ─ send, send-back, trace (trace_topic_enable), pull, admin

The builder loads each manager's file and subscribes the services that react
to new records to the store's arrival listeners; it starts no task (the
broker does, in order, after the gRPC servers are up).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pocketmq.broker.admin_processor import AdminProcessor
from pocketmq.broker.client_manager import ClientManager
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.consumer_offsets import ConsumerOffsetManager
from pocketmq.broker.idempotence import IdempotenceProcessor
from pocketmq.broker.long_polling import PullRequestHolder
from pocketmq.broker.namesrv_client import GrpcNameserverClient
from pocketmq.broker.property_filter import FilterCompiler
from pocketmq.broker.pull_processor import PullMessageProcessor
from pocketmq.broker.rebalance_lock import RebalanceLockManager
from pocketmq.broker.registration import RegisterBrokerService, RegistrationClient
from pocketmq.broker.schedule import ScheduleMessageService
from pocketmq.broker.send_back import SendBackProcessor
from pocketmq.broker.send_processor import SendMessageProcessor
from pocketmq.broker.stats import BrokerStatsManager
from pocketmq.broker.store.api import MessageStore
from pocketmq.broker.store.results import RecoveryReport
from pocketmq.broker.store.timer_store import TimerMessageStore
from pocketmq.broker.timer_messages import TimerPolicy
from pocketmq.broker.timer_service import TimerService
from pocketmq.broker.topic_config import TopicConfigManager
from pocketmq.broker.trace import BrokerTraceService
from pocketmq.broker.transaction import TransactionResolver
from pocketmq.broker.transaction_check import TransactionalMessageCheckService
from pocketmq.broker.v1_authz import transaction_check_filter
from pocketmq.common.clock import Clock
from pocketmq.security.acl import AclStore
from pocketmq.security.tls import server_credentials

if TYPE_CHECKING:
    from pocketmq.broker.ha.role import HaController
    from pocketmq.security.interceptor import AclInterceptor

__all__ = ["BrokerEdge", "BrokerServices", "build_services"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerServices:
    """A started broker's store, metadata managers and services (never ``None``
    except the parts a setting turns off: ``ha`` and ``trace``)."""

    store: MessageStore
    recovery: RecoveryReport  # what the store's start-up recovery found and cut
    store_host: tuple[str, int]  # the broker's own (advertised ip, port)
    topics: TopicConfigManager  # topics.json
    offsets: ConsumerOffsetManager  # consumerOffset.json
    clients: ClientManager  # producers' and consumers' heartbeats and streams
    hold: PullRequestHolder  # parked long-polling pulls
    schedule: ScheduleMessageService  # delay levels, delayOffset.json
    timer: TimerService  # messages with a delivery time (timer wheel)
    locks: RebalanceLockManager  # orderly consumers' queue locks
    transactions: TransactionResolver  # half messages, op queue
    transaction_check: TransactionalMessageCheckService  # asks producers about old halves
    registration: RegisterBrokerService  # heartbeats to every nameserver
    idempotence: IdempotenceProcessor  # producer ids and sequence checks
    send: SendMessageProcessor
    send_back: SendBackProcessor  # consumers' retries and the dead-letter queue
    pull: PullMessageProcessor
    admin: AdminProcessor
    ha: HaController | None = None  # replication; None for a store without an epoch file
    trace: BrokerTraceService | None = None  # None unless trace_topic_enable


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerEdge:
    """What the services need from the broker's network side, bound before the store
    opens: the port, the address it registers, the ACL and the v2 address."""

    port: int
    address: str  # ``ip:port`` clients reach the broker at
    v2_address: str = ""  # RocketMQ 5's MessagingService, "" when it is off
    acl: AclStore | None = None  # when acl_enable
    acl_interceptor: AclInterceptor | None = None
    namesrv_client_factory: Callable[[str], RegistrationClient] | None = None


def build_services(
    config: BrokerConfig,
    store: MessageStore,
    recovery: RecoveryReport,
    edge: BrokerEdge,
    *,
    clock: Clock,
    stats: BrokerStatsManager,
) -> BrokerServices:
    """Load every manager's file and wire the services to *store* (started, recovered)."""
    cfg = config
    store_host = (cfg.advertised_ip, edge.port)
    topics, offsets = _load_tables(cfg, clock)
    clients = _build_clients(cfg, edge, clock)
    hold = PullRequestHolder(max_parked=cfg.max_parked_pulls)
    store.add_arrival_listener(hold.on_arrival)
    schedule = _build_schedule(cfg, store, recovery, clock)
    timer = _build_timer(cfg, store, recovery, clock)
    ha = _build_ha(cfg, store, edge, topics=topics, offsets=offsets, schedule=schedule)
    locks = RebalanceLockManager(max_live_time_ms=cfg.rebalance_lock_max_live_time_ms, clock=clock)
    transactions, transaction_check = _build_transactions(
        cfg, store, store_host, clients, clock, ha=ha
    )
    registration = _build_registration(cfg, topics, edge, ha)
    idempotence, send, send_back = _build_message_services(
        cfg, store, store_host, topics, ha=ha, clock=clock, stats=stats
    )
    trace = _build_trace(cfg, store, store_host, clock)
    if trace is not None:  # the services' hooks write to it
        for service in (send, send_back, schedule, timer, transactions):
            service.trace = trace
    pull = _build_pull(cfg, store, topics, offsets, hold, clock=clock, stats=stats)
    admin = _build_admin(cfg, store, topics, offsets, clients, hold, store_host, clock)
    return BrokerServices(
        store=store,
        recovery=recovery,
        store_host=store_host,
        topics=topics,
        offsets=offsets,
        clients=clients,
        hold=hold,
        schedule=schedule,
        timer=timer,
        locks=locks,
        transactions=transactions,
        transaction_check=transaction_check,
        registration=registration,
        idempotence=idempotence,
        send=send,
        send_back=send_back,
        pull=pull,
        admin=admin,
        ha=ha,
        trace=trace,
    )


def _load_tables(
    cfg: BrokerConfig, clock: Clock
) -> tuple[TopicConfigManager, ConsumerOffsetManager]:
    """topics.json (and its change log) and consumerOffset.json, loaded."""
    topics = TopicConfigManager(
        cfg.config_dir,
        broker_name=cfg.broker_name,
        cluster_name=cfg.cluster_name,
        default_queue_nums=cfg.default_topic_queue_nums,
        auto_create_enable=cfg.auto_create_topic_enable,
        schedule_queue_nums=cfg.delay_levels.max_level,
        max_queues_total=cfg.max_queues_total,
        clock=clock,
    )
    topics.load()
    offsets = ConsumerOffsetManager(
        cfg.config_dir, persist_interval_seconds=cfg.consumer_offset_persist_interval_seconds
    )
    offsets.load()
    return topics, offsets


def _build_clients(cfg: BrokerConfig, edge: BrokerEdge, clock: Clock) -> ClientManager:
    clients = ClientManager(
        broker_name=cfg.broker_name,
        expire_seconds=cfg.client_channel_expire_seconds,
        scan_interval_seconds=cfg.client_scan_interval_seconds,
        clock=clock,
    )
    if edge.acl is not None:
        # A transaction check carries the uncommitted record: only to keys that may PUB it.
        clients.command_filter = transaction_check_filter(edge.acl)
    return clients


def _build_schedule(
    cfg: BrokerConfig, store: MessageStore, recovery: RecoveryReport, clock: Clock
) -> ScheduleMessageService:
    """Delay levels: delayOffset.json loaded, new delayed messages heard of."""
    schedule = ScheduleMessageService(
        store,
        cfg.delay_levels,
        cfg.config_dir,
        persist_interval_s=cfg.flush_delay_offset_interval_ms / 1000,
        clock=clock,
    )
    schedule.load()
    if not recovery.clean_shutdown:
        schedule.check_earlier_deliveries()  # re-puts since the last save of progress
    store.add_arrival_listener(schedule.on_arrival)
    return schedule


def _build_pull(
    cfg: BrokerConfig,
    store: MessageStore,
    topics: TopicConfigManager,
    offsets: ConsumerOffsetManager,
    hold: PullRequestHolder,
    *,
    clock: Clock,
    stats: BrokerStatsManager,
) -> PullMessageProcessor:
    return PullMessageProcessor(
        store,
        topics,
        offsets,
        hold,
        max_pull_messages=cfg.max_pull_messages,
        max_pull_bytes=cfg.max_pull_bytes,
        long_polling_enable=cfg.long_polling_enable,
        suspend_default_ms=cfg.pull_suspend_default_ms,
        suspend_max_ms=cfg.pull_suspend_max_ms,
        clock=clock,
        stats=stats,
        filters=FilterCompiler(enable_property_filter=cfg.enable_property_filter),
    )


def _build_admin(
    cfg: BrokerConfig,
    store: MessageStore,
    topics: TopicConfigManager,
    offsets: ConsumerOffsetManager,
    clients: ClientManager,
    hold: PullRequestHolder,
    store_host: tuple[str, int],
    clock: Clock,
) -> AdminProcessor:
    return AdminProcessor(
        store,
        topics,
        offsets,
        clients,
        hold,
        broker_name=cfg.broker_name,
        cluster_name=cfg.cluster_name,
        store_host=store_host,
        default_query_max=cfg.default_query_max,
        clock=clock,
        config=cfg,
    )


def _build_message_services(
    cfg: BrokerConfig,
    store: MessageStore,
    store_host: tuple[str, int],
    topics: TopicConfigManager,
    *,
    ha: HaController | None,
    clock: Clock,
    stats: BrokerStatsManager,
) -> tuple[IdempotenceProcessor, SendMessageProcessor, SendBackProcessor]:
    """idempotence, send and send_back: the services that write producers' records."""
    idempotence = IdempotenceProcessor(
        store,
        clock=clock,
        not_master=ha.not_master if ha is not None else None,
        replica_wait=(ha.wait_replicated if ha is not None else None),
    )
    send = SendMessageProcessor(
        store,
        topics,
        store_host=store_host,
        delay_levels=cfg.delay_levels,
        clock=clock,
        stats=stats,
        timer=TimerPolicy(enabled=cfg.timer_wheel_enable, max_delay_ms=cfg.timer_max_delay_ms),
        replica_wait=(ha.wait_replicated if ha is not None else None),
        not_master=(ha.not_master if ha is not None else None),
        idempotence=idempotence,
    )
    send_back = SendBackProcessor(
        store,
        topics,
        cfg.delay_levels,
        store_host=store_host,
        clock=clock,
        replica_wait=(ha.wait_replicated if ha is not None else None),
    )
    return idempotence, send, send_back


def _build_registration(
    cfg: BrokerConfig,
    topics: TopicConfigManager,
    edge: BrokerEdge,
    ha: HaController | None,
) -> RegisterBrokerService:
    registration_kwargs = {}
    if edge.namesrv_client_factory is not None:
        registration_kwargs["client_factory"] = edge.namesrv_client_factory
    elif cfg.namesrv_tls_ca_file or cfg.credentials is not None:
        registration_kwargs["client_factory"] = functools.partial(
            GrpcNameserverClient,
            tls_ca_file=cfg.namesrv_tls_ca_file,
            credentials=cfg.credentials,
        )
    return RegisterBrokerService(
        cfg.namesrv_addr_list,
        topics,
        cluster_name=cfg.cluster_name,
        broker_name=cfg.broker_name,
        broker_addr=edge.address,
        broker_id=ha.broker_id if ha is not None else cfg.broker_id,
        interval_s=cfg.register_interval_seconds,
        timeout_s=cfg.register_timeout_seconds,
        grpc_v2_addr=edge.v2_address,
        on_reply=ha.on_register_reply if ha is not None else None,
        **registration_kwargs,
    )


def _build_transactions(
    cfg: BrokerConfig,
    store: MessageStore,
    store_host: tuple[str, int],
    clients: ClientManager,
    clock: Clock,
    *,
    ha: HaController | None,
) -> tuple[TransactionResolver, TransactionalMessageCheckService]:
    transactions = TransactionResolver(
        store,
        cfg.config_dir,
        store_host=store_host,
        max_batch_size_bytes=cfg.max_batch_size_bytes,
        clock=clock,
        replica_wait=(ha.wait_replicated if ha is not None else None),
    )
    transactions.load()
    transaction_check = TransactionalMessageCheckService(
        transactions,
        store,
        send_check=clients.send_to_producer,
        store_host=store_host,
        timeout_ms=cfg.transaction_timeout_ms,
        check_interval_ms=cfg.transaction_check_interval_ms,
        check_max=cfg.transaction_check_max,
        clock=clock,
    )
    store.add_arrival_listener(transaction_check.on_arrival)
    return transactions, transaction_check


def _build_trace(
    cfg: BrokerConfig, store: MessageStore, store_host: tuple[str, int], clock: Clock
) -> BrokerTraceService | None:
    """The broker's side of message trace (trace_topic_enable)."""
    if not cfg.trace_topic_enable:
        return None
    return BrokerTraceService(
        store,
        topic=cfg.msg_trace_topic_name,
        broker_name=cfg.broker_name,
        store_host=store_host,
        clock=clock,
    )


def _build_timer(
    cfg: BrokerConfig, store: MessageStore, recovery: RecoveryReport, clock: Clock
) -> TimerService:
    """Messages with a delivery time: recover DATA/timerlog, timerwheel, timercheck."""
    timer = TimerService(
        store,
        TimerMessageStore(
            cfg.data_dir,
            wheel_slots=cfg.timer_wheel_slots,
            log_file_size=cfg.timer_log_file_size_bytes,
        ),
        roll_window_s=cfg.timer_roll_window_s,
        flush_interval_s=cfg.timer_flush_interval_ms / 1000,
        clock=clock,
    )
    timer.load(clean_shutdown=recovery.clean_shutdown)
    store.add_arrival_listener(timer.on_arrival)
    return timer


def _build_ha(
    cfg: BrokerConfig,
    store: MessageStore,
    edge: BrokerEdge,
    *,
    topics: TopicConfigManager,
    offsets: ConsumerOffsetManager,
    schedule: ScheduleMessageService,
) -> HaController | None:
    """Replication, for a store that keeps an epoch file (the file-backed one)."""
    from pocketmq.broker.ha.role import HaController
    from pocketmq.broker.store.message_store import DefaultMessageStore

    if not isinstance(store, DefaultMessageStore):
        return None
    credentials = None
    if cfg.tls_enabled:
        credentials = server_credentials(
            cfg.tls_cert_file, cfg.tls_key_file, cfg.tls_ca_file, cfg.tls_require_client_auth
        )
    return HaController(
        cfg,
        store,
        topics=topics,
        offsets=offsets,
        schedule=schedule,
        replica_addr=edge.address,
        acl=edge.acl_interceptor,
        server_credentials=credentials,
    )
