"""BrokerConfig: every knob of one broker process, with RocketMQ's defaults.

The executable (``pocketmq broker``) reads a TOML file, the environment and
flags and builds one of these; library code never reads files or the
environment for configuration. :meth:`BrokerConfig.store_config` derives the
message store's :class:`~pocketmq.broker.store.StoreConfig` from it, with the
port the server actually bound (``port = 0`` picks a free one).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from pocketmq.broker.config_checks import (
    BROKER_ROLES,
    TIMER_BLANK_SLOTS,
    check_names,
    check_network,
    check_numbers,
    check_timer,
    parse_namesrv_addrs,
)
from pocketmq.broker.delay_levels import (
    DEFAULT_MESSAGE_DELAY_LEVEL,
    DelayLevels,
    parse_delay_levels,
)
from pocketmq.broker.store.config import FlushDiskType, StoreConfig
from pocketmq.common.auth import Credentials
from pocketmq.common.errors import ConfigError
from pocketmq.common.trace import DEFAULT_TRACE_TOPIC

__all__ = ["BROKER_ROLES", "TIMER_BLANK_SLOTS", "BrokerConfig", "parse_namesrv_addrs"]

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
DEFAULT_GRPC_V2_PORT = 8081  # RocketMQ proxy's grpcServerPort
DEFAULT_BROKER_PORT = 10911  # RocketMQ broker's listenPort
# Room around the largest body in one record: fixed fields (~100 bytes), topic (<= 255)
# and properties (<= 32767), rounded up; the default batch limit leaves this much.
RECORD_HEADROOM_BYTES = 64 * KiB


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfig:
    # -- identity and network ---------------------------------------------------------
    broker_name: str = field(
        default="broker-a",
        metadata=_help("broker name (brokerName); a master and its slaves share it"),
    )
    cluster_name: str = field(
        default="DefaultCluster",
        metadata=_help("cluster the broker belongs to (brokerClusterName)"),
    )
    broker_id: int = field(
        default=0,
        metadata=_help("0 = master, > 0 = a replica (SLAVE) of the same broker name (brokerId)"),
    )
    host: str = field(default="127.0.0.1", metadata=_help("address the gRPC server listens on"))
    broker_ip: str = field(
        default="", metadata=_help("IP clients reach the broker at (brokerIP1); empty = host")
    )
    port: int = field(default=10911, metadata=_help("gRPC port (listenPort); 0 = any free port"))
    namesrv_addrs: str = field(
        default="", metadata=_help("nameservers as 'host:port;host:port'; empty = register nowhere")
    )
    # -- storage ----------------------------------------------------------------------
    data_dir: str = field(
        default="./pocketmq-data",
        metadata=_help("directory of the commit log, queues, index and config (storePathRootDir)"),
    )
    flush_disk_type: str = field(
        default="async",
        metadata=_help("'async' acknowledges after the page-cache write, 'sync' after fsync"),
    )
    sync_flush_timeout_ms: int = field(
        default=5_000,
        metadata=_help("ms a sync-flush send waits before answering FLUSH_DISK_TIMEOUT"),
    )
    commitlog_file_size_bytes: int = field(
        default=1 * GiB, metadata=_help("bytes per commit-log segment (mappedFileSizeCommitLog)")
    )
    consume_queue_units_per_file: int = field(
        default=300_000, metadata=_help("20-byte units per consume-queue file")
    )
    max_open_consume_queue_files: int = field(
        default=16_384,
        metadata=_help(
            "consume-queue files kept open and mapped at most; the least recently used queues "
            "are closed past it and reopened on their next read or write, so open files and "
            "mappings stay bounded whatever the queue count (keep it well under "
            "vm.max_map_count, Linux default 65,530, and ulimit -n)"
        ),
    )
    index_slots: int = field(
        default=5_000_000, metadata=_help("hash slots per index file (maxHashSlotNum)")
    )
    index_entries: int = field(
        default=20_000_000, metadata=_help("entries per index file (maxIndexNum)")
    )
    file_reserved_hours: float = field(
        default=72, metadata=_help("hours commit-log files are kept (fileReservedTime)")
    )
    delete_when: str = field(
        default="04",
        metadata=_help("hours of day expired files are deleted, ';'-separated (deleteWhen)"),
    )
    clean_resource_interval_ms: int = field(
        default=10_000, metadata=_help("ms between retention and disk-space checks")
    )
    disk_min_free_bytes: int = field(
        default=64 * MiB,
        metadata=_help(
            "bytes that must stay available to the broker's user (statvfs f_bavail) on the "
            "data directory's filesystem; below it sends are refused with DISK_FULL"
        ),
    )
    max_producer_ids: int = field(
        default=10_000,
        metadata=_help(
            "idempotent producer ids whose de-duplication state is kept; InitProducerId (and a "
            "send from an unknown id) is refused with RESOURCE_EXHAUSTED / PRODUCER_ID_LIMIT "
            "while every kept id is younger than producer_id_expiration_ms"
        ),
    )
    producer_id_expiration_ms: int = field(
        default=86_400_000,
        metadata=_help("ms an idempotent producer id may stay idle before its state is dropped"),
    )
    producer_dedup_window: int = field(
        default=256,
        metadata=_help(
            "newest records per producer id and queue whose original results answer a retry"
        ),
    )
    producer_snapshot_interval_bytes: int = field(
        default=64 * MiB,
        metadata=_help(
            "commit-log bytes between snapshots of the producer state (bounds its rebuild)"
        ),
    )
    write_without_mmap: bool = field(
        default=True,
        metadata=_help(
            "write the commit log with pwrite on each segment's descriptor, reads staying on "
            "the mapping (RocketMQ's writeWithoutMmap): a store into a fresh mapped page makes "
            "the kernel zero the page first, a write covering it whole does not; off, stores go "
            "through the mapping with the page warmer ahead of them"
        ),
    )
    warm_populate_write: bool = field(
        default=False,
        metadata=_help(
            "the commit log's page warmer faults pages in writable (Linux 5.14+) instead of "
            "reading them: less CPU per message on the event loop, about a third more bytes "
            "written to the disk (pages are flushed as zeros before they are filled)"
        ),
    )
    max_message_size_bytes: int = field(
        default=4 * MiB, metadata=_help("largest message body accepted (maxMessageSize)")
    )
    max_batch_size_bytes: int = field(
        default=4 * MiB + RECORD_HEADROOM_BYTES,
        metadata=_help(
            "largest SendBatch blob accepted; at least max_message_size_bytes + 4 KiB, so that "
            "one record of the largest body fits with its header, topic and properties"
        ),
    )
    # -- topics -----------------------------------------------------------------------
    auto_create_topic_enable: bool = field(
        default=True, metadata=_help("create unknown topics on first send (autoCreateTopicEnable)")
    )
    default_topic_queue_nums: int = field(
        default=8, metadata=_help("queues of an auto-created topic (defaultTopicQueueNums)")
    )
    max_queues_total: int = field(
        default=32_768,
        metadata=_help(
            "queues the broker serves at most, over all topics (each topic counts the larger "
            "of its read and write queue numbers); CreateTopic, UpdateTopic and auto-create "
            "beyond it are refused. Each queue with messages keeps a file open and mapped; "
            "the broker checks ulimit -n and vm.max_map_count (Linux default 65,530) against "
            "it at start and warns, with the command to raise each, when they are lower"
        ),
    )
    # -- pulls ------------------------------------------------------------------------
    max_pull_messages: int = field(
        default=32,
        metadata=_help("messages one pull returns at most (maxTransferCountOnMessageInMemory)"),
    )
    max_pull_bytes: int = field(
        default=256 * KiB,
        metadata=_help("bytes one pull returns at most (maxTransferBytesOnMessageInMemory)"),
    )
    default_query_max: int = field(
        default=32, metadata=_help("messages a key query returns when the request does not say")
    )
    long_polling_enable: bool = field(
        default=True, metadata=_help("hold empty pulls until a message arrives (longPollingEnable)")
    )
    enable_property_filter: bool = field(
        default=True,
        metadata=_help(
            "serve SQL92 filters on message properties; when false, SQL92 subscriptions are "
            "refused at heartbeat, pull and ReceiveMessage (enablePropertyFilter)"
        ),
    )
    pull_suspend_default_ms: int = field(
        default=15_000, metadata=_help("ms an empty pull waits when the request does not say")
    )
    pull_suspend_max_ms: int = field(
        default=60_000, metadata=_help("longest wait a pull may ask for, in ms")
    )
    max_parked_pulls: int = field(
        default=10_000, metadata=_help("pulls waiting at once; more are refused as busy")
    )
    # -- flow control (broker/flow_control.py) ------------------------------------------
    max_in_flight_requests_per_connection: int = field(
        default=1_024,
        metadata=_help(
            "requests one client connection may have in progress, parked pulls not counted; "
            "more are answered SYSTEM_BUSY (RESOURCE_EXHAUSTED) and retried by clients"
        ),
    )
    max_in_flight_requests: int = field(
        default=10_000,
        metadata=_help(
            "requests in progress at once over every connection (sendThreadPoolQueueCapacity); "
            "more are answered SYSTEM_BUSY"
        ),
    )
    max_queued_response_bytes_per_connection: int = field(
        default=16 * MiB,
        metadata=_help(
            "response bytes one connection may have waiting to be sent (a client that does not "
            "read); past it its new requests are answered SYSTEM_BUSY"
        ),
    )
    max_queued_response_bytes: int = field(
        default=128 * MiB,
        metadata=_help(
            "response bytes waiting to be sent over every connection; past it new requests are "
            "answered SYSTEM_BUSY"
        ),
    )
    # -- SendStream (broker/v1_send_stream.py) ---------------------------------------------
    max_send_streams: int = field(
        default=1_024,
        metadata=_help(
            "SendStream calls open at once on this broker; one more is refused "
            "(RESOURCE_EXHAUSTED, reason SEND_STREAM_LIMIT) and its client sends with SendBatch"
        ),
    )
    max_send_streams_per_connection: int = field(
        default=4,
        metadata=_help(
            "SendStream calls one client connection may have open at once (the SDK opens one); "
            "more are refused as max_send_streams refuses"
        ),
    )
    max_send_stream_in_flight: int = field(
        default=64,
        metadata=_help(
            "requests one SendStream has in progress at once; at the bound the broker reads no "
            "more of that stream until one is answered (HTTP/2 flow control holds the sender)"
        ),
    )
    max_concurrent_streams_per_connection: int = field(
        default=0,
        metadata=_help(
            "calls one connection may have open at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS, "
            "grpc.max_concurrent_streams); more are reset (REFUSED_STREAM, UNAVAILABLE to the "
            "caller); 0 = max_parked_pulls + max_in_flight_requests_per_connection, all a "
            "connection can use"
        ),
    )
    keepalive_time_ms: int = field(
        default=30_000,
        metadata=_help(
            "ms between the broker's HTTP/2 pings on a connection (grpc.keepalive_time_ms)"
        ),
    )
    keepalive_timeout_ms: int = field(
        default=20_000,
        metadata=_help(
            "ms a ping may go unanswered before the connection is closed and its calls ended: "
            "a client that stopped reading its socket (grpc.keepalive_timeout_ms)"
        ),
    )
    # -- delayed messages, retries, orderly consumption ---------------------------------
    message_delay_level: str = field(
        default=DEFAULT_MESSAGE_DELAY_LEVEL,
        metadata=_help("delay of each level 1, 2, ...; units ms, s, m, h, d (messageDelayLevel)"),
    )
    flush_delay_offset_interval_ms: int = field(
        default=10_000,
        metadata=_help("ms between saves of delayOffset.json (flushDelayOffsetInterval)"),
    )
    # -- messages with a delivery time (RocketMQ 5 timer) --------------------------------
    timer_wheel_enable: bool = field(
        default=True,
        metadata=_help(
            "accept messages with TIMER_DELIVER_MS / TIMER_DELAY_MS / TIMER_DELAY_SEC "
            "(timerWheelEnable)"
        ),
    )
    timer_max_delay_ms: int = field(
        default=3 * 86_400_000,
        metadata=_help(
            "ms ahead a delivery time may lie; further is refused (timerMaxDelaySec x 1000; 3 days)"
        ),
    )
    timer_roll_window_s: int = field(
        default=2 * 86_400,
        metadata=_help(
            "seconds ahead the wheel links a message; a later one waits at this horizon and "
            "is re-parked there (timerRollWindowSlot; 2 days)"
        ),
    )
    timer_wheel_slots: int = field(
        default=7 * 86_400,
        metadata=_help("one-second slots of DATA/timerwheel, 32 bytes each (7 days)"),
    )
    timer_log_file_size_bytes: int = field(
        default=100 * MiB,
        metadata=_help(
            "bytes per DATA/timerlog segment, a multiple of 64 (mappedFileSizeTimerLog)"
        ),
    )
    timer_flush_interval_ms: int = field(
        default=1_000,
        metadata=_help(
            "ms between syncs of the timer log, wheel and timercheck (timerFlushIntervalMs)"
        ),
    )
    rebalance_lock_max_live_time_ms: int = field(
        default=60_000,
        metadata=_help(
            "ms an orderly consumer's queue lock lasts unless renewed "
            "(rocketmq.broker.rebalance.lockMaxLiveTime)"
        ),
    )
    # -- transactional messages ---------------------------------------------------------
    transaction_timeout_ms: int = field(
        default=6_000,
        metadata=_help(
            "ms a half message waits for EndTransaction before its first check (transactionTimeOut)"
        ),
    )
    transaction_check_interval_ms: int = field(
        default=30_000,
        metadata=_help(
            "ms between checks of a half message still unresolved (transactionCheckInterval)"
        ),
    )
    transaction_check_max: int = field(
        default=15,
        metadata=_help(
            "checks of one half message before it is discarded as rolled back (transactionCheckMax)"
        ),
    )
    # -- message trace (broker/trace.py) -------------------------------------------------
    trace_topic_enable: bool = field(
        default=False,
        metadata=_help(
            "create the trace topic at start and trace the broker's side of each message: "
            "store time, delayed delivery, transaction commit/rollback (traceTopicEnable)"
        ),
    )
    msg_trace_topic_name: str = field(
        default=DEFAULT_TRACE_TOPIC, metadata=_help("the trace topic (msgTraceTopicName)")
    )
    # -- clients and offsets ----------------------------------------------------------
    client_channel_expire_seconds: float = field(
        default=120, metadata=_help("seconds without a heartbeat before a client is dropped")
    )
    client_scan_interval_seconds: float = field(
        default=10, metadata=_help("seconds between scans for silent clients")
    )
    consumer_offset_persist_interval_seconds: float = field(
        default=5,
        metadata=_help(
            "seconds between saves of consumerOffset.json (flushConsumerOffsetInterval)"
        ),
    )
    # -- nameserver registration ------------------------------------------------------
    register_interval_seconds: float = field(
        default=30, metadata=_help("seconds between registrations with each nameserver")
    )
    register_timeout_seconds: float = field(
        default=6, metadata=_help("seconds one registration may take")
    )
    # -- replication (broker/ha) -------------------------------------------------------
    broker_role: str = field(
        default="ASYNC_MASTER",
        metadata=_help(
            "ASYNC_MASTER (acknowledge after the local write), SYNC_MASTER (after "
            "min_sync_replicas replicas hold the message too) or SLAVE (brokerRole)"
        ),
    )
    ha_port: int | None = field(
        default=None,
        metadata=_help(
            "port of the replication service a master serves its replicas on (haListenPort); "
            "unset = port + 1, or any free port when port is 0; -1 = off"
        ),
    )
    ha_master_address: str = field(
        default="",
        metadata=_help(
            "a replica's master HA address 'host:port' (haMasterAddress); empty = learned from "
            "the nameserver"
        ),
    )
    ha_advertise_addr: str = field(
        default="",
        metadata=_help(
            "'host:port' replicas reach this broker's replication service at, when it is not "
            "broker_ip:ha_port (port mapping, NAT, a proxy); empty = broker_ip:ha_port"
        ),
    )
    min_sync_replicas: int = field(
        default=1,
        metadata=_help("replicas that must hold a message before a SYNC_MASTER acknowledges it"),
    )
    slave_timeout_ms: int = field(
        default=3_000,
        metadata=_help(
            "ms a SYNC_MASTER send waits for its replicas before answering FLUSH_SLAVE_TIMEOUT "
            "(slaveTimeout)"
        ),
    )
    # 1 MiB: a 512-message SendBatch (~600 KiB) goes out as one frame, not three; per
    # stored message a SYNC_MASTER spent ~20 % and its replica ~25 % less CPU than at 256 KiB
    # (benchmarks/replication_bench.py). Small writes still go out in small frames.
    ha_transfer_batch_bytes: int = field(
        default=1 * MiB,
        metadata=_help(
            "bytes of whole records a master sends a replica in one frame at most "
            "(haTransferBatchSize)"
        ),
    )
    # 5 ms: under a steady ASYNC load (benchmarks/replication_bench.py) a replica got half
    # as many frames, made a third fewer syscalls and context switches and spent ~0.2 us
    # (~8 %) less CPU per message; a SYNC send never waits on it
    ha_transfer_linger_ms: int = field(
        default=5,
        metadata=_help(
            "ms a master holds a short frame for a replica that no send waits on, for more "
            "records to fill it up to ha_transfer_batch_bytes (0 = send at once)"
        ),
    )
    ha_heartbeat_interval_ms: int = field(
        default=1_000,
        metadata=_help(
            "ms between a master's empty frames and a replica's acks when idle "
            "(haSendHeartbeatInterval)"
        ),
    )
    ha_housekeeping_interval_ms: int = field(
        default=10_000,
        metadata=_help(
            "ms without a frame after which either side drops a replication stream "
            "(haHousekeepingInterval)"
        ),
    )
    # 1 GiB: a snapshot passing it is a table no replica should copy every 5 s anyway;
    # 100,000 topics with an offset for each queue of 8 are about 35 MB
    ha_max_metadata_bytes: int = field(
        default=1024 * MiB,
        metadata=_help(
            "bytes of topic configs and consumer offsets a replica takes from its master "
            "in one metadata sync at most (it refuses a larger one, and says so)"
        ),
    )
    ha_slave_fallbehind_max_bytes: int = field(
        default=256 * MiB,
        metadata=_help(
            "a replica this many bytes behind does not count as in sync (haSlaveFallbehindMax)"
        ),
    )
    # -- controller mode (broker/ha/controller_client.py) ---------------------------------
    controller_mode: bool = field(
        default=False,
        metadata=_help(
            "let the controller (controller_addr) choose this broker's role: it is master when "
            "elected, with broker_role (ASYNC_MASTER or SYNC_MASTER), else a replica "
            "(enableControllerMode)"
        ),
    )
    controller_addr: str = field(
        default="",
        metadata=_help(
            "the controllers, 'host:port[,host:port]' (their nameservers' addresses; "
            "controllerAddr)"
        ),
    )
    controller_heartbeat_interval_ms: int = field(
        default=1_000,
        metadata=_help("ms between heartbeats to the controller (brokerHeartbeatInterval)"),
    )
    election_priority: int = field(
        default=0,
        metadata=_help(
            "among equally up-to-date replicas the lowest is elected (brokerElectionPriority)"
        ),
    )
    ha_max_time_replica_not_catchup_ms: int = field(
        default=10_000,
        metadata=_help(
            "ms a replica of the in-sync set may go without catching up before its master asks "
            "the controller to drop it (haMaxTimeSlaveNotCatchup)"
        ),
    )
    # -- RocketMQ 5 clients (broker/grpc_v2) ----------------------------------------------
    grpc_v2_port: int | None = field(
        default=None,
        metadata=_help(
            "port of RocketMQ 5's gRPC MessagingService, for the official 5.x clients "
            "(the proxy's grpcServerPort); 0 = any free port, -1 = off; unset = 8081 shifted "
            "by as much as port is from 10911 (port 10921 -> 8091), so brokers sharing a "
            "machine do not collide; any free port when port is 0"
        ),
    )
    grpc_v2_max_delivery_attempts: int = field(
        default=17,
        metadata=_help(
            "deliveries of a message to a RocketMQ 5 consumer group before it goes to the "
            "group's dead-letter topic (retryMaxTimes 16 + 1)"
        ),
    )
    # -- Prometheus (broker/metrics.py) -------------------------------------------------
    metrics_port: int = field(
        default=-1,
        metadata=_help(
            "port of the Prometheus /metrics endpoint, on host; -1 = off, 0 = any free port "
            "(RocketMQ 5's metricsPromExporterPort)"
        ),
    )
    # -- security (security/, common/auth.py) --------------------------------------------
    acl_enable: bool = field(
        default=False,
        metadata=_help("require signed requests and check them against acl_file (aclEnable)"),
    )
    acl_file: str = field(
        default="",
        metadata=_help("the ACL (TOML, README 'Security'); empty = {data_dir}/config/acl.toml"),
    )
    max_auto_retry_topics: int = field(
        default=10_000,
        metadata=_help(
            "retry topics (%RETRY%group) consumer heartbeats may create in all; past it a new "
            "group's heartbeat is refused (RESOURCE_EXHAUSTED)"
        ),
    )
    tls_cert_file: str = field(
        default="",
        metadata=_help("PEM certificate chain of the broker; with tls_key_file turns TLS on"),
    )
    tls_key_file: str = field(default="", metadata=_help("PEM private key of tls_cert_file"))
    tls_ca_file: str = field(
        default="",
        metadata=_help("PEM CA that signs client certificates (with tls_require_client_auth)"),
    )
    tls_require_client_auth: bool = field(
        default=False, metadata=_help("refuse clients without a certificate signed by tls_ca_file")
    )
    namesrv_tls_ca_file: str = field(
        default="",
        metadata=_help("PEM CA of the nameservers' certificates; given = TLS to the nameservers"),
    )
    access_key: str = field(
        default="",
        metadata=_help(
            "the broker's own ACL user, signing its calls to nameservers with acl_enable"
        ),
    )
    secret_key: str = field(default="", repr=False, metadata=_help("secret key of access_key"))

    def __post_init__(self) -> None:
        check_names(self)
        check_network(self)
        check_numbers(self)
        if self.flush_disk_type not in ("async", "sync"):
            raise ConfigError(
                f"flush_disk_type must be 'async' or 'sync', got {self.flush_disk_type!r}"
            )
        parse_namesrv_addrs(self.namesrv_addrs)
        try:
            parse_delay_levels(self.message_delay_level)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        check_timer(self)
        if self.pull_suspend_default_ms > self.pull_suspend_max_ms:
            raise ConfigError(
                f"pull_suspend_default_ms ({self.pull_suspend_default_ms}) "
                f"exceeds pull_suspend_max_ms ({self.pull_suspend_max_ms})"
            )
        # Everything the store checks is checked now, so errors name our keys.
        self.store_config(self.port)

    # -- derived ------------------------------------------------------------------------
    @property
    def advertised_ip(self) -> str:
        """The IP written into STOREHOST, offset message ids and the route."""
        return self.broker_ip or self.host

    @property
    def v2_port(self) -> int:
        """grpc_v2_port as applied; -1 (or below) = off. Unset: RocketMQ's 8081 for its
        default port 10911, shifted as the port is (10921 -> 8091), so two brokers of
        one machine get two ports; a port that shifts below 1024 takes port + 2."""
        if self.grpc_v2_port is not None:
            return self.grpc_v2_port
        if self.port == 0:
            return 0
        derived = DEFAULT_GRPC_V2_PORT + (self.port - DEFAULT_BROKER_PORT)
        return derived if derived >= 1024 else self.port + 2

    @property
    def ha_listen_port(self) -> int:
        """ha_port as applied: port + 1 unless set (any free port when port is 0)."""
        if self.ha_port is not None:
            return self.ha_port
        return 0 if self.port == 0 else self.port + 1

    @property
    def streams_per_connection(self) -> int:
        """max_concurrent_streams_per_connection as applied (0 = derived)."""
        return (
            self.max_concurrent_streams_per_connection
            or self.max_parked_pulls + self.max_in_flight_requests_per_connection
        )

    @property
    def namesrv_addr_list(self) -> list[str]:
        return parse_namesrv_addrs(self.namesrv_addrs)

    @property
    def acl_path(self) -> str:
        return self.acl_file or os.path.join(self.config_dir, "acl.toml")

    @property
    def credentials(self) -> Credentials | None:
        """The broker's own signing keys, when configured."""
        return Credentials(self.access_key, self.secret_key) if self.access_key else None

    @property
    def tls_enabled(self) -> bool:
        return bool(self.tls_cert_file or self.tls_key_file)

    @property
    def flush(self) -> FlushDiskType:
        return FlushDiskType(self.flush_disk_type)

    @property
    def delay_levels(self) -> DelayLevels:
        return DelayLevels.parse(self.message_delay_level)

    @property
    def config_dir(self) -> str:
        """DATA/config: topics.json, consumerOffset.json, delayOffset.json."""
        return os.path.join(self.data_dir, "config")

    def store_config(self, bound_port: int) -> StoreConfig:
        """The store's config; *bound_port* is the port the server listens on.

        The store's keys are named as ours, so its ConfigError names the key to change.
        """
        return StoreConfig(
            data_dir=self.data_dir,
            commitlog_file_size_bytes=self.commitlog_file_size_bytes,
            max_message_size_bytes=self.max_message_size_bytes,
            max_batch_size_bytes=self.max_batch_size_bytes,
            store_host=(self.advertised_ip, bound_port),
            flush_disk_type=self.flush,
            sync_flush_timeout_ms=self.sync_flush_timeout_ms,
            consume_queue_units_per_file=self.consume_queue_units_per_file,
            max_open_consume_queue_files=self.max_open_consume_queue_files,
            index_slots=self.index_slots,
            index_entries=self.index_entries,
            default_query_max=self.default_query_max,
            max_pull_messages=self.max_pull_messages,
            max_pull_bytes=self.max_pull_bytes,
            file_reserved_hours=self.file_reserved_hours,
            delete_when=self.delete_when,
            clean_resource_interval_ms=self.clean_resource_interval_ms,
            disk_min_free_bytes=self.disk_min_free_bytes,
            max_producer_ids=self.max_producer_ids,
            producer_id_expiration_ms=self.producer_id_expiration_ms,
            producer_dedup_window=self.producer_dedup_window,
            producer_snapshot_interval_bytes=self.producer_snapshot_interval_bytes,
            warm_populate_write=self.warm_populate_write,
            write_without_mmap=self.write_without_mmap,
        )
