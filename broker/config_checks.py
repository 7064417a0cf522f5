"""The checks a :class:`~pocketmq.broker.config.BrokerConfig` makes of itself when built.

Each raises :class:`~pocketmq.common.errors.ConfigError` naming the key (as the user
writes it in the TOML file or as a flag) and what would be accepted; the store's own
checks run after these, through ``BrokerConfig.store_config``.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

from pocketmq.common.errors import ConfigError
from pocketmq.common.validation import check_topic, check_topic_like

if TYPE_CHECKING:
    from pocketmq.broker.config import BrokerConfig

__all__ = [
    "BROKER_ROLES",
    "MIN_RECORD_HEADROOM_BYTES",
    "TIMER_BLANK_SLOTS",
    "check_names",
    "check_network",
    "check_numbers",
    "check_timer",
    "parse_namesrv_addrs",
]

KiB = 1024
BROKER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")
_WILDCARD_HOSTS = ("0.0.0.0", "::", "[::]")
TIMER_BLANK_SLOTS = 60  # wheel slots kept free beyond the roll window (RocketMQ's)
# The least room a configuration may leave: fixed fields, topic and a few properties.
MIN_RECORD_HEADROOM_BYTES = 4 * KiB


def parse_namesrv_addrs(text: str) -> list[str]:
    """Split ``"h1:9876;h2:9876"`` into addresses; raises ConfigError naming a bad one."""
    addrs = [a.strip() for a in text.split(";") if a.strip()]
    for addr in addrs:
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(
                f"namesrv_addrs: {addr!r} is not host:port "
                f"(expected e.g. '127.0.0.1:9876;10.0.0.2:9876')"
            )
    return addrs


def check_names(cfg: BrokerConfig) -> None:
    for key, kind in (("broker_name", "broker"), ("cluster_name", "cluster")):
        problem = check_topic_like(kind, getattr(cfg, key))  # RocketMQ makes topics of both
        if problem:
            raise ConfigError(f"{key}: {problem}")
    problem = check_topic(cfg.msg_trace_topic_name)
    if problem:
        raise ConfigError(f"msg_trace_topic_name: {problem}")
    if not cfg.data_dir:
        raise ConfigError("data_dir is empty; give the directory the broker stores into")


def check_network(cfg: BrokerConfig) -> None:
    if not 0 <= cfg.port < 65536:
        raise ConfigError(f"port must be 0..65535, got {cfg.port}")
    if cfg.v2_port >= 65536 or (cfg.v2_port == cfg.port != 0):
        raise ConfigError(
            f"grpc_v2_port is {cfg.v2_port}; give 1..65535 other than "
            f"port ({cfg.port}), 0 for any free port or -1 for off"
        )
    if not -1 <= cfg.metrics_port < 65536 or (cfg.metrics_port == cfg.port != 0):
        raise ConfigError(
            f"metrics_port is {cfg.metrics_port}; give 1..65535 other than "
            f"port ({cfg.port}), 0 for any free port or -1 for off"
        )
    if cfg.broker_id < 0:
        raise ConfigError(f"broker_id must be >= 0 (0 = master), got {cfg.broker_id}")
    if cfg.broker_role not in BROKER_ROLES:
        raise ConfigError(
            f"broker_role is {cfg.broker_role!r}; give one of {', '.join(BROKER_ROLES)}"
        )
    if cfg.controller_mode:
        if not cfg.controller_addr:
            raise ConfigError(
                "controller_mode needs controller_addr (--controller "
                "host:port of a nameserver running --controller)"
            )
        if cfg.broker_role == "SLAVE":
            raise ConfigError(
                "with controller_mode, broker_role is the role taken when "
                "elected: give ASYNC_MASTER or SYNC_MASTER"
            )
        if cfg.controller_heartbeat_interval_ms <= 0 or cfg.ha_max_time_replica_not_catchup_ms <= 0:
            raise ConfigError(
                "controller_heartbeat_interval_ms and "
                "ha_max_time_replica_not_catchup_ms must be positive"
            )
    elif (cfg.broker_role == "SLAVE") != (cfg.broker_id > 0):
        raise ConfigError(
            f"broker_role {cfg.broker_role} with broker_id {cfg.broker_id}: "
            "a master has broker_id 0 and a SLAVE a broker_id above 0"
        )
    if cfg.ha_listen_port >= 65536 or (cfg.ha_listen_port == cfg.port != 0):
        raise ConfigError(
            f"ha_port is {cfg.ha_listen_port}; give 1..65535 other than "
            f"port ({cfg.port}), 0 for any free port or -1 for off"
        )
    if cfg.ha_transfer_linger_ms < 0:
        raise ConfigError(
            "ha_transfer_linger_ms must be >= 0 (0 = no lingering), "
            f"got {cfg.ha_transfer_linger_ms}"
        )
    if cfg.min_sync_replicas < 0:
        raise ConfigError(f"min_sync_replicas must be >= 0, got {cfg.min_sync_replicas}")
    if cfg.ha_master_address:
        parse_namesrv_addrs(cfg.ha_master_address)
    if not cfg.broker_ip and cfg.host in _WILDCARD_HOSTS:
        raise ConfigError(
            f"host {cfg.host!r} listens on every interface; set broker_ip "
            "to the address clients should use"
        )
    try:
        ipaddress.ip_address(cfg.advertised_ip)
    except ValueError:
        raise ConfigError(
            f"broker_ip (or host) must be an IP address, got {cfg.advertised_ip!r}"
        ) from None


def check_numbers(cfg: BrokerConfig) -> None:
    positive = (
        "sync_flush_timeout_ms",
        "commitlog_file_size_bytes",
        "consume_queue_units_per_file",
        "max_open_consume_queue_files",
        "index_slots",
        "index_entries",
        "clean_resource_interval_ms",
        "disk_min_free_bytes",
        "max_queues_total",
        "max_producer_ids",
        "producer_id_expiration_ms",
        "producer_dedup_window",
        "producer_snapshot_interval_bytes",
        "max_message_size_bytes",
        "max_batch_size_bytes",
        "default_topic_queue_nums",
        "max_pull_messages",
        "max_pull_bytes",
        "default_query_max",
        "pull_suspend_max_ms",
        "max_parked_pulls",
        "client_channel_expire_seconds",
        "client_scan_interval_seconds",
        "max_in_flight_requests_per_connection",
        "max_in_flight_requests",
        "max_queued_response_bytes_per_connection",
        "max_queued_response_bytes",
        "max_send_streams",
        "max_send_streams_per_connection",
        "max_send_stream_in_flight",
        "keepalive_time_ms",
        "keepalive_timeout_ms",
        "consumer_offset_persist_interval_seconds",
        "register_interval_seconds",
        "register_timeout_seconds",
        "flush_delay_offset_interval_ms",
        "rebalance_lock_max_live_time_ms",
        "transaction_timeout_ms",
        "transaction_check_interval_ms",
        "transaction_check_max",
        "timer_max_delay_ms",
        "timer_roll_window_s",
        "timer_wheel_slots",
        "timer_log_file_size_bytes",
        "timer_flush_interval_ms",
        "grpc_v2_max_delivery_attempts",
        "slave_timeout_ms",
        "ha_transfer_batch_bytes",
        "ha_heartbeat_interval_ms",
        "ha_housekeeping_interval_ms",
        "ha_slave_fallbehind_max_bytes",
        "ha_max_metadata_bytes",
        "max_auto_retry_topics",
    )
    for key in positive:
        value = getattr(cfg, key)
        if value <= 0:
            raise ConfigError(f"{key} must be positive, got {value}")
    if cfg.max_concurrent_streams_per_connection < 0:
        raise ConfigError(
            f"max_concurrent_streams_per_connection must be >= 0 (0 = derived), "
            f"got {cfg.max_concurrent_streams_per_connection}"
        )
    if cfg.pull_suspend_default_ms < 0:
        raise ConfigError(
            f"pull_suspend_default_ms must be >= 0, got {cfg.pull_suspend_default_ms}"
        )
    least = cfg.max_message_size_bytes + MIN_RECORD_HEADROOM_BYTES
    if cfg.max_batch_size_bytes < least:
        raise ConfigError(
            f"max_batch_size_bytes is {cfg.max_batch_size_bytes} but max_message_size_bytes "
            f"is {cfg.max_message_size_bytes}: a record of the largest body would not fit "
            f"a batch; give max_batch_size_bytes >= {least} (max_message_size_bytes + "
            f"{MIN_RECORD_HEADROOM_BYTES} for the record's header, topic and properties)"
        )
    if cfg.default_topic_queue_nums > 1024:
        raise ConfigError(
            f"default_topic_queue_nums is {cfg.default_topic_queue_nums}; "
            "at most 1024 queues per topic are allowed"
        )


def check_timer(cfg: BrokerConfig) -> None:
    if cfg.timer_log_file_size_bytes % 64 or cfg.timer_log_file_size_bytes < 4 * KiB:
        raise ConfigError(
            f"timer_log_file_size_bytes is {cfg.timer_log_file_size_bytes}; "
            "give a multiple of 64 (the timer-log unit) of at least 4096"
        )
    if cfg.timer_roll_window_s > cfg.timer_wheel_slots - TIMER_BLANK_SLOTS:
        raise ConfigError(
            f"timer_roll_window_s is {cfg.timer_roll_window_s}; the wheel "
            f"of {cfg.timer_wheel_slots} slots (timer_wheel_slots) holds "
            f"at most {cfg.timer_wheel_slots - TIMER_BLANK_SLOTS} seconds "
            f"ahead; raise timer_wheel_slots or lower the window"
        )
    retention_s = cfg.file_reserved_hours * 3600
    if cfg.timer_wheel_enable and 0 < retention_s <= cfg.timer_roll_window_s:
        raise ConfigError(
            f"timer_roll_window_s is {cfg.timer_roll_window_s} s but "
            f"commit-log files are kept only {cfg.file_reserved_hours:g} h "
            f"({retention_s:.0f} s, file_reserved_hours): a parked timer "
            "message would be deleted before it is re-parked; lower "
            "timer_roll_window_s"
        )
