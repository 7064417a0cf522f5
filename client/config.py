"""Options of each client, one frozen dataclass per client, with RocketMQ's defaults.

Constructors take them as keyword arguments (``Producer(group=..., namesrv=...,
linger_ms=2)``) or as a ready config (``config=ProducerConfig(...)``). Every
field carries its unit in its name; ``__post_init__`` refuses values that
cannot work and names the field.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from pocketmq.client.allocate import AllocateStrategy, resolve_strategy
from pocketmq.client.model import ConsumeFrom, MessageModel
from pocketmq.common.errors import ConfigError
from pocketmq.common.validation import check_group

__all__ = [
    "DEFAULT_NAMESRV",
    "NAMESRV_ENV",
    "ConsumerConfig",
    "ProducerConfig",
    "PullConsumerConfig",
    "parse_namesrv",
]

NAMESRV_ENV = "POCKETMQ_NAMESRV"
DEFAULT_NAMESRV = "127.0.0.1:9876"
MiB = 1024 * 1024


def parse_namesrv(namesrv: str | Sequence[str] | None) -> list[str]:
    """``"h1:9876;h2:9876"`` or a list; None = ``$POCKETMQ_NAMESRV``, then 127.0.0.1:9876."""
    if namesrv is None:
        namesrv = os.environ.get(NAMESRV_ENV) or DEFAULT_NAMESRV
    items = namesrv.split(";") if isinstance(namesrv, str) else list(namesrv)
    addrs = [a.strip() for a in items if a.strip()]
    if not addrs:
        raise ConfigError("namesrv is empty; give 'host:port' (several separated by ';')")
    for addr in addrs:
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ConfigError(f"namesrv address {addr!r} is not host:port")
    return addrs


def _positive(config: Any, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        if not value > 0:
            raise ConfigError(f"{name} must be positive, got {value}")


def _non_negative(config: Any, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        if value < 0:
            raise ConfigError(f"{name} must be >= 0, got {value}")


def _check_group(group: str) -> None:
    problem = check_group(group)
    if problem:
        raise ConfigError(f"group: {problem}")


def build(cls: type, config: Any, options: dict[str, Any]) -> Any:
    """*config* with *options* applied; unknown option names are a ConfigError."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(f"unknown option(s) {unknown} for {cls.__name__}; known: "
                          f"{sorted(known)}")
    if config is None:
        return cls(**options)
    values = {f.name: getattr(config, f.name) for f in fields(cls)}
    values.update(options)
    return cls(**values)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerConfig:
    send_timeout_ms: int = 3000            # budget of one send, retries included
    retry_times_when_send_failed: int = 2  # extra attempts, each to another broker if any
    linger_ms: float = 0.0                 # wait this long to fill a batch; 0 = natural batching
    batch_max_messages: int = 512          # records per coalesced SendBatch call
    batch_max_bytes: int = 1 * MiB         # bytes per coalesced SendBatch call
    max_in_flight_per_broker: int = 4      # concurrent SendBatch calls to one broker
    max_message_size_bytes: int = 4 * MiB  # largest body accepted (maxMessageSize)
    max_batch_size_bytes: int = 4 * MiB    # largest send_batch() blob (the broker's limit)
    compress_over_bytes: int = 4096        # bodies above this are zlib-compressed
    latency_fault_enable: bool = True      # avoid slow or failed brokers for a while
    route_refresh_interval_s: float = 30.0  # pollNameServerInterval
    heartbeat_interval_s: float = 30.0     # heartbeatBrokerInterval

    def __post_init__(self) -> None:
        _positive(self, "send_timeout_ms", "batch_max_messages", "batch_max_bytes",
                  "max_in_flight_per_broker", "max_message_size_bytes",
                  "max_batch_size_bytes", "route_refresh_interval_s", "heartbeat_interval_s")
        _non_negative(self, "retry_times_when_send_failed", "linger_ms", "compress_over_bytes")


@dataclass(frozen=True, slots=True, kw_only=True)
class _ConsumerCommon:
    message_model: MessageModel | str = MessageModel.CLUSTERING  # "clustering" or "broadcasting"
    consume_from: ConsumeFrom | str = ConsumeFrom.LAST  # for a group with no stored offset
    consume_timestamp_ms: int | None = None   # CONSUME_FROM_TIMESTAMP; None = now - 30 min
    allocate: str | AllocateStrategy = "averagely"  # or "circle", "consistent_hash", callable
    pull_batch_size: int = 32                 # messages per pull (pullBatchSize)
    pull_suspend_ms: int = 15_000             # long-poll wait of an empty pull
    pull_delay_on_error_s: float = 3.0        # pause of a queue's pull loop after a failure
    pull_threshold_for_queue: int = 1000      # flow control: messages cached per queue
    pull_threshold_size_for_queue_bytes: int = 100 * MiB  # flow control: bytes per queue
    rebalance_interval_s: float = 20.0        # also at once on the broker's notification
    commit_interval_s: float = 5.0            # persistConsumerOffsetInterval
    heartbeat_interval_s: float = 30.0       # heartbeatBrokerInterval
    route_refresh_interval_s: float = 30.0   # pollNameServerInterval
    offset_store_dir: str = "~/.pocketmq_offsets"  # broadcasting: {dir}/{group}/offsets.json
    rpc_timeout_s: float = 3.0               # offset, lock and admin calls to a broker

    def __post_init__(self) -> None:
        for name, kind in (("message_model", MessageModel), ("consume_from", ConsumeFrom)):
            try:
                object.__setattr__(self, name, kind(getattr(self, name)))
            except ValueError:
                raise ConfigError(f"{name} is {getattr(self, name)!r}; use one of "
                                  f"{[k.value for k in kind]}") from None
        try:
            resolve_strategy(self.allocate)
        except ValueError as exc:
            raise ConfigError(f"allocate: {exc}") from None
        _positive(self, "pull_batch_size", "pull_threshold_for_queue",
                  "pull_threshold_size_for_queue_bytes", "rebalance_interval_s",
                  "commit_interval_s", "heartbeat_interval_s", "route_refresh_interval_s",
                  "rpc_timeout_s")
        _non_negative(self, "pull_suspend_ms", "pull_delay_on_error_s")


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerConfig(_ConsumerCommon):
    """PushConsumer options."""

    orderly: bool = False                     # one batch at a time per queue, queue locked
    consume_concurrency: int = 20             # handler calls at once (consumeThreadMax)
    consume_batch_max_size: int = 1           # messages per handler call
    consume_concurrently_max_span: int = 2000  # flow control: offset span in flight
    max_reconsume_times: int = -1             # then the DLQ; -1 = 16, orderly: no limit
    suspend_current_queue_ms: int = 1000      # orderly: pause after SUSPEND_CURRENT_QUEUE…
    lock_renew_interval_s: float = 20.0       # orderly: re-lock held queues
    shutdown_timeout_s: float = 5.0           # handlers in progress may finish this long

    def __post_init__(self) -> None:
        _ConsumerCommon.__post_init__(self)
        _positive(self, "consume_concurrency", "consume_batch_max_size",
                  "consume_concurrently_max_span", "lock_renew_interval_s")
        _non_negative(self, "suspend_current_queue_ms", "shutdown_timeout_s")


@dataclass(frozen=True, slots=True, kw_only=True)
class PullConsumerConfig(_ConsumerCommon):
    """PullConsumer (lite pull) options."""

    auto_commit: bool = True                  # commit polled offsets every commit_interval_s
    max_poll_messages: int = 32               # messages one poll() returns at most

    def __post_init__(self) -> None:
        _ConsumerCommon.__post_init__(self)
        _positive(self, "max_poll_messages")
