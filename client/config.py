"""Options of each client, one frozen dataclass per client, with RocketMQ's defaults.

Constructors take them as keyword arguments (``Producer(group=..., namesrv=...,
linger_ms=2)``) or as a ready config (``config=ProducerConfig(...)``). Every
field carries its unit in its name; ``__post_init__`` refuses values that
cannot work and names the field.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from pocketmq.client.allocate import AllocateStrategy, resolve_strategy
from pocketmq.client.model import ConsumeFrom, MessageModel
from pocketmq.common.auth import Credentials
from pocketmq.common.errors import ConfigError
from pocketmq.common.trace import DEFAULT_TRACE_TOPIC
from pocketmq.common.validation import check_topic

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


def _help(text: str) -> dict[str, str]:
    return {"help": text}  # shown by docs/configuration.md (scripts/gen_config_docs.py)


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


@dataclass(frozen=True, slots=True)
class Transport:
    """How a client's channels are made: signed (ACL) and/or TLS."""

    credentials: Credentials | None = None
    tls_ca_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""
    # SendBatch over one SendStream per broker (ProducerConfig.send_stream)
    send_stream: bool = False


def transport(config: Any) -> Transport:
    """The :class:`Transport` of a client config's security keys."""
    if bool(config.access_key) != bool(config.secret_key):
        raise ConfigError("give both access_key and secret_key (or neither)")
    if bool(config.tls_cert_file) != bool(config.tls_key_file):
        raise ConfigError("give both tls_cert_file and tls_key_file (or neither)")
    creds = Credentials(config.access_key, config.secret_key) if config.access_key else None
    return Transport(
        creds,
        config.tls_ca_file,
        config.tls_cert_file,
        config.tls_key_file,
        send_stream=getattr(config, "send_stream", False),
    )


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


def _check_trace(config: Any) -> None:
    problem = check_topic(config.trace_topic)
    if problem:
        raise ConfigError(f"trace_topic: {problem}")
    _positive(config, "trace_queue_capacity", "trace_batch_max_records", "trace_flush_interval_ms")


def build(cls: type, config: Any, options: dict[str, Any]) -> Any:
    """*config* with *options* applied; unknown option names are a ConfigError."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(f"unknown option(s) {unknown} for {cls.__name__}; known: {sorted(known)}")
    if config is None:
        return cls(**options)
    values = {f.name: getattr(config, f.name) for f in fields(cls)}
    values.update(options)
    return cls(**values)


@dataclass(frozen=True, slots=True, kw_only=True)
class _ClientCommon:
    """What every client has: its cadence towards the servers and how it connects."""

    route_refresh_interval_s: float = field(
        default=30.0, metadata=_help("seconds between route refreshes from the nameserver")
    )
    heartbeat_interval_s: float = field(
        default=30.0, metadata=_help("seconds between heartbeats to each broker")
    )
    access_key: str = field(
        default="", metadata=_help("ACL user; with secret_key every request is signed")
    )
    secret_key: str = field(
        default="",
        repr=False,
        metadata=_help("the ACL user's secret; signs requests and is never sent"),
    )
    tls_ca_file: str = field(
        default="", metadata=_help("PEM CA of the servers' certificates; set = connect with TLS")
    )
    tls_cert_file: str = field(
        default="", metadata=_help("PEM client certificate, for servers that require one")
    )
    tls_key_file: str = field(default="", metadata=_help("PEM private key of tls_cert_file"))
    # -- message trace (client/trace.py) --
    enable_trace: bool = field(
        default=False,
        metadata=_help(
            "record each send / consume in the trace topic (RocketMQ's enableMsgTrace); "
            "`pocketmq message trace MSG_ID` reads them back"
        ),
    )
    trace_topic: str = field(
        default=DEFAULT_TRACE_TOPIC,
        metadata=_help("topic trace records are written to; the client's ACL user needs PUB on it"),
    )
    trace_queue_capacity: int = field(
        default=2048,
        metadata=_help(
            "trace records waiting to be written at most; more are dropped (counted), never "
            "slowing a send"
        ),
    )
    trace_batch_max_records: int = field(
        default=100,
        metadata=_help("trace records written at once (packed into messages of at most 128 kB)"),
    )
    trace_flush_interval_ms: int = field(
        default=100, metadata=_help("ms trace records wait at most before they are written")
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerConfig(_ClientCommon):
    send_timeout_ms: int = field(
        default=3000, metadata=_help("ms one send may take, retries included")
    )
    retry_times_when_send_failed: int = field(
        default=2,
        metadata=_help("attempts after the first, each to another broker when there is one"),
    )
    retry_another_broker_when_not_store_ok: bool = field(
        default=False,
        metadata=_help(
            "send again to another broker when the answer is FLUSH_DISK_TIMEOUT, "
            "FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE (stored, but not as promised); the "
            "message may then be stored twice (RocketMQ's retryAnotherBrokerWhenNotStoreOK)"
        ),
    )
    linger_ms: float = field(
        default=0.0,
        metadata=_help(
            "ms a send waits for others to share its SendBatch call; 0 = batch only what is "
            "already waiting"
        ),
    )
    batch_max_messages: int = field(
        default=512, metadata=_help("messages per coalesced SendBatch call")
    )
    batch_max_bytes: int = field(
        default=1 * MiB, metadata=_help("bytes per coalesced SendBatch call")
    )
    max_in_flight_per_broker: int = field(
        default=4, metadata=_help("SendBatch calls in progress to one broker at once")
    )
    send_stream: bool = field(
        default=True,
        metadata=_help(
            "send batches over one long-lived SendStream per broker instead of one SendBatch "
            "call each (cheaper on both sides; with access_key each request is signed on its "
            "own); a broker without it gets SendBatch calls"
        ),
    )
    max_message_size_bytes: int = field(
        default=4 * MiB, metadata=_help("largest body accepted, checked before sending")
    )
    max_batch_size_bytes: int = field(
        default=4 * MiB + 64 * 1024,
        metadata=_help("largest send_batch() blob; keep it at the broker's max_batch_size_bytes"),
    )
    compress_over_bytes: int = field(
        default=4096, metadata=_help("bodies longer than this are zlib-compressed")
    )
    latency_fault_enable: bool = field(
        default=True, metadata=_help("avoid a broker for a while after it was slow or failed")
    )
    idempotent: bool = field(
        default=True,
        metadata=_help(
            "number each record per queue under a producer id from the broker, so that a retry "
            "(a lost answer, a timeout) is stored once; a send whose outcome is unknown is "
            "retried on the same queue, never moved to another broker (on by default, as in "
            "Kafka 3; False: RocketMQ's plain producer)"
        ),
    )
    producer_identity: str = field(
        default="",
        metadata=_help(
            "idempotent only: a stable name; a new producer with the same name (and ACL user) "
            "fences the older one (its later sends are refused, PRODUCER_FENCED); '' = a fresh "
            "producer id per broker"
        ),
    )
    max_in_flight_requests_per_queue: int = field(
        default=5,
        metadata=_help(
            "idempotent only: send_batch() requests to one queue in flight at once; later ones "
            "wait, so that a queue's requests reach the broker in order (Kafka's "
            "max.in.flight.requests.per.connection)"
        ),
    )
    request_timeout_ms: int = field(
        default=1000,
        metadata=_help(
            "idempotent only: ms one SendMessage/SendBatch call may take before the same "
            "records are sent again (within send_timeout_ms)"
        ),
    )

    def __post_init__(self) -> None:
        if self.producer_identity and not self.idempotent:
            raise ConfigError("producer_identity needs idempotent=True")
        _positive(self, "request_timeout_ms", "max_in_flight_requests_per_queue")
        _positive(
            self,
            "send_timeout_ms",
            "batch_max_messages",
            "batch_max_bytes",
            "max_in_flight_per_broker",
            "max_message_size_bytes",
            "max_batch_size_bytes",
            "route_refresh_interval_s",
            "heartbeat_interval_s",
        )
        _non_negative(self, "retry_times_when_send_failed", "linger_ms", "compress_over_bytes")
        _check_trace(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class _ConsumerCommon(_ClientCommon):
    message_model: MessageModel | str = field(
        default=MessageModel.CLUSTERING,
        metadata=_help(
            "'clustering': each queue has one consumer in the group; 'broadcasting': every "
            "consumer reads every queue and keeps its offsets locally"
        ),
    )
    consume_from: ConsumeFrom | str = field(
        default=ConsumeFrom.LAST,
        metadata=_help(
            "where a group with no stored offset starts: the last, first or "
            "consume_timestamp_ms message"
        ),
    )
    consume_timestamp_ms: int | None = field(
        default=None,
        metadata=_help(
            "start time (epoch ms) for consume_from 'timestamp'; unset = 30 minutes ago"
        ),
    )
    allocate: str | AllocateStrategy = field(
        default="averagely",
        metadata=_help(
            "how queues are shared in the group: 'averagely', 'circle', 'consistent_hash' "
            "or a callable"
        ),
    )
    pull_batch_size: int = field(default=32, metadata=_help("messages one pull asks for"))
    pull_suspend_ms: int = field(
        default=15_000,
        metadata=_help("ms the broker holds a pull that finds no message (long polling)"),
    )
    pull_delay_on_error_s: float = field(
        default=3.0, metadata=_help("seconds a queue's pulls pause after a failed pull")
    )
    pull_threshold_for_queue: int = field(
        default=1000,
        metadata=_help("flow control: messages cached per queue before pulling pauses"),
    )
    pull_threshold_size_for_queue_bytes: int = field(
        default=100 * MiB,
        metadata=_help("flow control: bytes cached per queue before pulling pauses"),
    )
    rebalance_interval_s: float = field(
        default=20.0,
        metadata=_help(
            "seconds between rebalances; one also runs at once when the broker says the group "
            "changed"
        ),
    )
    commit_interval_s: float = field(
        default=5.0, metadata=_help("seconds between commits of consumed offsets")
    )
    offset_store_dir: str = field(
        default="~/.pocketmq_offsets",
        metadata=_help("broadcasting only: offsets are kept in {dir}/{group}/offsets.json"),
    )
    rpc_timeout_s: float = field(
        default=3.0, metadata=_help("seconds an offset, lock or admin call to a broker may take")
    )
    unreachable_suspect_s: float = field(
        default=5.0,
        metadata=_help(
            "seconds reads avoid a broker address that did not answer (refused, reset, timed "
            "out); a replica of its broker name serves them meanwhile, then the master is tried "
            "again"
        ),
    )

    def __post_init__(self) -> None:
        for name, kind in (("message_model", MessageModel), ("consume_from", ConsumeFrom)):
            try:
                object.__setattr__(self, name, kind(getattr(self, name)))
            except ValueError:
                raise ConfigError(
                    f"{name} is {getattr(self, name)!r}; use one of {[k.value for k in kind]}"
                ) from None
        try:
            resolve_strategy(self.allocate)
        except ValueError as exc:
            raise ConfigError(f"allocate: {exc}") from None
        _positive(
            self,
            "pull_batch_size",
            "pull_threshold_for_queue",
            "pull_threshold_size_for_queue_bytes",
            "rebalance_interval_s",
            "commit_interval_s",
            "heartbeat_interval_s",
            "route_refresh_interval_s",
            "rpc_timeout_s",
        )
        _non_negative(self, "pull_suspend_ms", "pull_delay_on_error_s", "unreachable_suspect_s")
        _check_trace(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerConfig(_ConsumerCommon):
    """PushConsumer options."""

    orderly: bool = field(
        default=False,
        metadata=_help(
            "consume each queue in order: one batch at a time, with the queue locked at the broker"
        ),
    )
    consume_concurrency: int = field(default=20, metadata=_help("handler calls at once"))
    consume_batch_max_size: int = field(
        default=1, metadata=_help("messages passed to one handler call at most")
    )
    consume_concurrently_max_span: int = field(
        default=2000,
        metadata=_help(
            "flow control: pulling pauses while a queue's oldest and newest cached offsets are "
            "further apart"
        ),
    )
    max_reconsume_times: int = field(
        default=-1,
        metadata=_help(
            "redeliveries before a message goes to %DLQ%{group}; -1 = 16, or no limit when orderly"
        ),
    )
    suspend_current_queue_ms: int = field(
        default=1000,
        metadata=_help(
            "orderly: ms a queue pauses after the handler returns SUSPEND_CURRENT_QUEUE_A_MOMENT"
        ),
    )
    lock_renew_interval_s: float = field(
        default=20.0, metadata=_help("orderly: seconds between renewals of the held queue locks")
    )
    shutdown_timeout_s: float = field(
        default=5.0,
        metadata=_help("seconds handlers in progress may take to finish when the consumer stops"),
    )
    dedup_window: float = field(
        default=0.0,
        metadata=_help(
            "seconds: a message whose unique id (UNIQ_KEY) this consumer handled successfully "
            "this recently is acknowledged without calling the listener; 0 = off unless "
            "dedup_window_count is set"
        ),
    )
    dedup_window_count: int = field(
        default=0,
        metadata=_help(
            "unique ids the de-duplication window keeps at most (the oldest are forgotten "
            "first); 0 = 100000 when dedup_window is set, else off"
        ),
    )

    def __post_init__(self) -> None:
        _ConsumerCommon.__post_init__(self)
        _positive(
            self,
            "consume_concurrency",
            "consume_batch_max_size",
            "consume_concurrently_max_span",
            "lock_renew_interval_s",
        )
        _non_negative(
            self,
            "suspend_current_queue_ms",
            "shutdown_timeout_s",
            "dedup_window",
            "dedup_window_count",
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PullConsumerConfig(_ConsumerCommon):
    """PullConsumer (lite pull) options."""

    auto_commit: bool = field(
        default=True,
        metadata=_help(
            "commit the offsets of polled messages every commit_interval_s; off = call commit()"
        ),
    )
    max_poll_messages: int = field(
        default=32, metadata=_help("messages one poll() returns at most")
    )

    def __post_init__(self) -> None:
        _ConsumerCommon.__post_init__(self)
        _positive(self, "max_poll_messages")
