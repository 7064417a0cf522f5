"""The options of the ``pocketmq`` source and sink and of the ``pocketmq-store`` reader.

Spark hands a data source its options as a case-insensitive map of strings;
this module turns them into frozen, picklable values once, on the driver, and
refuses what cannot work with an :class:`~pocketmq.spark.errors.OptionError`
naming the option as documented (``startingOffsets``, not ``startingoffsets``).
An option no reader or writer knows is refused too, with the nearest known name,
so that a typo does not silently read the wrong range.

Offsets, as the Kafka source writes them but one level deeper, since a queue is
named by topic, broker and queue id::

    {"orders": {"broker-a": {"0": 23, "1": -2}, "broker-b": {"0": -1}}}

-2 is the earliest offset of the queue, -1 the latest (one past its last
message). The same shape is what a streaming query keeps in its checkpoint
(``offsets/N``), with concrete offsets only.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pocketmq.client import MessageQueue, MessageSelector, SqlFilterError, parse_namesrv
from pocketmq.common.errors import ConfigError
from pocketmq.common.filter import TagExpressionError, parse_tag_expression
from pocketmq.common.validation import check_group, check_topic
from pocketmq.spark.errors import OptionError

__all__ = [
    "EARLIEST",
    "LATEST",
    "ClientSecurity",
    "OffsetSpec",
    "PullSettings",
    "SinkOptions",
    "SourceOptions",
    "StoreOptions",
    "TopicSelection",
    "offsets_from_json",
    "offsets_to_json",
    "parse_sink_options",
    "parse_source_options",
    "parse_store_options",
    "tag_set",
]

EARLIEST = -2  # Kafka's sentinel offsets in JSON
LATEST = -1

DEFAULT_CONSUMER_GROUP = "pocketmq-spark"
DEFAULT_PRODUCER_GROUP = "pocketmq-spark"
DEFAULT_PULL_BATCH_SIZE = 1024  # the broker caps it at its max_pull_messages
DEFAULT_PULL_TIMEOUT_MS = 30_000
DEFAULT_MAX_RECORDS_PER_PARTITION = 1_000_000
DEFAULT_SEND_BATCH_SIZE = 1024  # messages per SendBatch call of the sink (and <= 2 MiB of bodies)
DEFAULT_SEND_TIMEOUT_MS = 10_000
DEFAULT_MAX_BYTES_PER_PARTITION = 128 * 1024 * 1024  # of a segment, per store-reader task

_SELECTION = ("subscribe", "subscribePattern", "assign")
_SOURCE = (
    *_SELECTION,
    "namesrv",
    "tagExpression",
    "sqlFilter",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "maxOffsetsPerTrigger",
    "failOnDataLoss",
    "minPartitions",
    "maxRecordsPerPartition",
    "pullBatchSize",
    "pullTimeoutMs",
    "consumerGroup",
    "accessKey",
    "secretKey",
    "tlsCaFile",
    "tlsCertFile",
    "tlsKeyFile",
)
_STORE = (
    "path",
    "subscribe",
    "subscribePattern",
    "tagExpression",
    "brokerName",
    "failOnDataLoss",
    "maxBytesPerPartition",
)
_SINK = (
    "namesrv",
    "topic",
    "producerGroup",
    "sendBatchSize",
    "sendTimeoutMs",
    "accessKey",
    "secretKey",
    "tlsCaFile",
    "tlsCertFile",
    "tlsKeyFile",
    "idempotent",
    "writeId",
    "failFirstAttemptAfterRows",
)
# Keys Spark itself may add to a sink's options.
_SPARK_SINK_KEYS = ("path", "checkpointLocation", "queryName")


# -- values ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How the source's and sink's calls prove who they are: ACL keys (``accessKey``,
    ``secretKey``) and TLS (``tlsCaFile``; ``tlsCertFile`` and ``tlsKeyFile`` for servers
    that require a client certificate). The PEM paths are read where the calls are made,
    so on a cluster they must exist on every executor. Hashable: it keys the channel
    cache of :func:`pocketmq.spark.remote.remoting`."""

    access_key: str = ""
    secret_key: str = field(default="", repr=False)
    tls_ca_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicSelection:
    """Which queues to read: exactly one of ``subscribe``, ``subscribePattern``, ``assign``."""

    topics: tuple[str, ...] = ()  # subscribe
    pattern: str = ""  # subscribePattern (Python regex, full match)
    # assign: (topic, broker name or None for every broker, queue ids)
    assigned: tuple[tuple[str, str | None, tuple[int, ...]], ...] = ()

    def describe(self) -> str:
        if self.pattern:
            return f"subscribePattern {self.pattern!r}"
        if self.assigned:
            return "assign " + ", ".join(
                f"{t}{'@' + b if b else ''}{list(q)}" for t, b, q in self.assigned
            )
        return "subscribe " + ",".join(self.topics)


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetSpec:
    """Where reading starts or ends: ``earliest``, ``latest``, per-queue JSON, or a time."""

    kind: str  # earliest|latest|specific|timestamp
    offsets: Mapping[MessageQueue, int] = field(default_factory=dict)  # specific; may hold -2/-1
    timestamp_ms: int = 0  # timestamp


@dataclass(frozen=True, slots=True, kw_only=True)
class PullSettings:
    """What a task needs to read a range with PullMessage."""

    consumer_group: str = DEFAULT_CONSUMER_GROUP
    tag_expression: str = "*"
    sql_filter: str = ""  # an SQL92 filter on properties, applied by the brokers
    pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE
    pull_timeout_ms: int = DEFAULT_PULL_TIMEOUT_MS
    fail_on_data_loss: bool = True
    credentials: ClientSecurity | None = field(default=None, repr=False)  # ACL keys, TLS


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceOptions:
    namesrv: tuple[str, ...]
    selection: TopicSelection
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    max_records_per_partition: int
    pull: PullSettings
    streaming: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreOptions:
    data_dir: str
    topics: tuple[str, ...]
    pattern: str
    tag_expression: str
    broker_name: str | None
    fail_on_data_loss: bool
    max_bytes_per_partition: int = DEFAULT_MAX_BYTES_PER_PARTITION


@dataclass(frozen=True, slots=True, kw_only=True)
class SinkOptions:
    namesrv: tuple[str, ...]
    topic: str | None
    producer_group: str
    send_batch_size: int
    send_timeout_ms: int
    credentials: ClientSecurity | None = field(default=None, repr=False)  # ACL keys, TLS
    idempotent: bool = True  # each task a named idempotent producer (exactly once)
    write_id: str | None = None  # batch writes: the identities' stable part (else per job)
    fail_first_attempt_after_rows: int | None = None  # fault injection, for tests only


# -- parsing --------------------------------------------------------------------------------
class _Options:
    """Spark's lower-cased option map, read by documented names."""

    def credentials(self) -> ClientSecurity | None:
        """ACL keys (both or neither) and TLS files, or None for a plain connection."""
        access, secret = self.get("accessKey"), self.get("secretKey")
        if bool(access) != bool(secret):
            raise OptionError(
                "options accessKey and secretKey go together: give both (the "
                "ACL user and its secret) or neither"
            )
        ca, cert, key = self.get("tlsCaFile"), self.get("tlsCertFile"), self.get("tlsKeyFile")
        if bool(cert) != bool(key):
            raise OptionError(
                "options tlsCertFile and tlsKeyFile go together: give both (the "
                "client certificate and its key) or neither"
            )
        if (cert or key) and not ca:
            raise OptionError(
                "options tlsCertFile and tlsKeyFile need tlsCaFile, the CA of "
                "the servers' certificates"
            )
        if not (access or ca):
            return None
        return ClientSecurity(access or "", secret or "", ca or "", cert or "", key or "")

    def __init__(
        self,
        options: Mapping[str, str],
        known: Iterable[str],
        what: str,
        ignored: Iterable[str] = (),
    ) -> None:
        self._values = {str(k).lower(): str(v) for k, v in options.items()}
        names = {name.lower(): name for name in known}
        skip = {name.lower() for name in ignored}
        for key in self._values:
            if key in names or key in skip:
                continue
            close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
            hint = f"; did you mean {names[close[0]]!r}?" if close else ""
            if key == "path" and what == "pocketmq source":
                hint = (
                    "; load(PATH) is for format('pocketmq-store'), which reads a data "
                    "directory; the pocketmq source reads from brokers (option namesrv)"
                )
            raise OptionError(
                f"option {key!r} is not an option of the {what}{hint} "
                f"(known: {', '.join(sorted(names.values()))})"
            )

    def get(self, name: str) -> str | None:
        value = self._values.get(name.lower())
        return value if value is None or value.strip() else None

    def has(self, name: str) -> bool:
        return self.get(name) is not None

    def integer(self, name: str, default: int, *, minimum: int) -> int:
        value = self.optional_integer(name, minimum=minimum)
        return default if value is None else value

    def optional_integer(self, name: str, *, minimum: int) -> int | None:
        raw = self.get(name)
        if raw is None:
            return None
        try:
            value = int(raw.strip())
        except ValueError:
            raise OptionError(
                f"option {name} is {raw!r}; give a whole number >= {minimum}"
            ) from None
        if value < minimum:
            raise OptionError(f"option {name} is {value}; it must be >= {minimum}")
        return value

    def boolean(self, name: str, default: bool) -> bool:
        raw = self.get(name)
        if raw is None:
            return default
        text = raw.strip().lower()
        if text not in ("true", "false"):
            raise OptionError(f"option {name} is {raw!r}; give true or false")
        return text == "true"

    def namesrv(self) -> tuple[str, ...]:
        try:
            return tuple(parse_namesrv(self.get("namesrv")))
        except ConfigError as exc:
            raise OptionError(f"option namesrv: {exc}") from None

    def group(self, name: str, default: str) -> str:
        value = (self.get(name) or default).strip()
        problem = check_group(value)
        if problem:
            raise OptionError(f"option {name}: {problem}")
        return value


def tag_set(expression: str, option: str = "tagExpression") -> frozenset[str] | None:
    """``"*"`` -> None (every tag); ``"A || B"`` -> {"A", "B"}; as the broker parses it."""
    try:
        return parse_tag_expression(expression)
    except TagExpressionError:
        raise OptionError(
            f"option {option} is {expression!r}, which names no tag; give '*' or 'TagA || TagB'"
        ) from None


def _topics(raw: str, option: str) -> tuple[str, ...]:
    topics = tuple(t.strip() for t in raw.split(",") if t.strip())
    if not topics:
        raise OptionError(f"option {option} is {raw!r}; give one or more topics, comma-separated")
    for topic in topics:
        problem = check_topic(topic)
        if problem:
            raise OptionError(f"option {option}: {problem}")
    return topics


def _pattern(raw: str, option: str) -> str:
    try:
        re.compile(raw)
    except re.error as exc:
        raise OptionError(f"option {option} {raw!r} is not a regular expression: {exc}") from None
    return raw


def _json(raw: str, option: str, example: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(
            f"option {option} is neither a keyword nor JSON ({exc}); give for example {example}"
        ) from None


def _assign(raw: str) -> tuple[tuple[str, str | None, tuple[int, ...]], ...]:
    example = '{"orders": [0, 1]} or {"orders": {"broker-a": [0, 1]}}'
    value = _json(raw, "assign", example)
    if not isinstance(value, dict) or not value:
        raise OptionError(f"option assign must be a JSON object; give for example {example}")
    out: list[tuple[str, str | None, tuple[int, ...]]] = []

    def queue_ids(ids: Any, where: str) -> tuple[int, ...]:
        if (
            not isinstance(ids, list)
            or not ids
            or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids)
        ):
            raise OptionError(
                f"option assign: {where} must be a list of queue ids >= 0, got {json.dumps(ids)}"
            )
        return tuple(sorted(set(ids)))

    for topic, spec in value.items():
        problem = check_topic(topic)
        if problem:
            raise OptionError(f"option assign: {problem}")
        if isinstance(spec, dict):
            for broker, ids in spec.items():
                out.append((topic, broker, queue_ids(ids, f"{topic}.{broker}")))
        else:
            out.append((topic, None, queue_ids(spec, topic)))
    return tuple(out)


def _selection(opts: _Options) -> TopicSelection:
    given = [name for name in _SELECTION if opts.has(name)]
    if len(given) != 1:
        got = " and ".join(given) if given else "none"
        raise OptionError(
            f"give exactly one of the options subscribe, subscribePattern and assign; got {got}"
        )
    name = given[0]
    raw = opts.get(name) or ""
    if name == "subscribe":
        return TopicSelection(topics=_topics(raw, name))
    if name == "subscribePattern":
        return TopicSelection(pattern=_pattern(raw, name))
    return TopicSelection(assigned=_assign(raw))


def offsets_from_json(value: Any, option: str = "offsets") -> dict[MessageQueue, int]:
    """``{"topic": {"broker": {"queue id": offset}}}`` -> ``{MessageQueue: offset}``."""
    example = '{"orders": {"broker-a": {"0": 23, "1": -2}}}'
    if not isinstance(value, dict):
        raise OptionError(f"option {option} must be a JSON object like {example}")
    out: dict[MessageQueue, int] = {}
    for topic, brokers in value.items():
        if not isinstance(brokers, dict):
            raise OptionError(
                f"option {option}: topic {topic!r} must map broker names to queues, like {example}"
            )
        for broker, queues in brokers.items():
            if not isinstance(queues, dict):
                raise OptionError(
                    f"option {option}: {topic}.{broker} must map queue ids to "
                    f"offsets, like {example}"
                )
            for qid, offset in queues.items():
                if not str(qid).isdigit():
                    raise OptionError(
                        f"option {option}: queue id {qid!r} of {topic}@{broker} "
                        "is not a number >= 0"
                    )
                if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                    raise OptionError(
                        f"option {option}: offset {offset!r} of "
                        f"{topic}@{broker}#{qid} must be a number >= 0, or -2 "
                        "(earliest) or -1 (latest)"
                    )
                out[MessageQueue(topic, broker, int(qid))] = offset
    return out


def offsets_to_json(offsets: Mapping[MessageQueue, int]) -> dict[str, dict[str, dict[str, int]]]:
    """The checkpoint form of *offsets*, keys sorted so equal offsets give equal JSON."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for mq in sorted(offsets):
        out.setdefault(mq.topic, {}).setdefault(mq.broker_name, {})[str(mq.queue_id)] = int(
            offsets[mq]
        )
    return out


def _offset_spec(opts: _Options, name: str, default: str, *, streaming: bool) -> OffsetSpec:
    raw = opts.get(name)
    text = (raw or default).strip()
    starting = name == "startingOffsets"
    if text.lower() in ("earliest", "latest"):
        kind = text.lower()
        if starting and kind == "latest" and not streaming:
            raise OptionError(
                "option startingOffsets is 'latest', which a batch query cannot "
                "start from (it would read nothing); use 'earliest' or JSON"
            )
        if not starting and kind == "earliest":
            raise OptionError(
                "option endingOffsets is 'earliest', which would read nothing; use 'latest' or JSON"
            )
        return OffsetSpec(kind=kind)
    offsets = offsets_from_json(_json(text, name, '{"orders": {"broker-a": {"0": 23}}}'), name)
    for mq, offset in offsets.items():
        if starting and offset == LATEST and not streaming:
            raise OptionError(
                f"option startingOffsets: {mq} is -1 (latest), which a batch "
                "query cannot start from"
            )
        if not starting and offset == EARLIEST:
            raise OptionError(
                f"option endingOffsets: {mq} is -2 (earliest), which would read nothing"
            )
    return OffsetSpec(kind="specific", offsets=offsets)


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Options of ``spark.read[Stream].format("pocketmq")``; see the package docstring."""
    opts = _Options(options, _SOURCE, "pocketmq source")
    if streaming and opts.has("endingOffsets"):
        raise OptionError(
            "option endingOffsets is for batch queries; a streaming query reads "
            "on as messages arrive (use trigger(availableNow=True) to stop at "
            "what is there now)"
        )
    if not streaming and opts.has("maxOffsetsPerTrigger"):
        raise OptionError(
            "option maxOffsetsPerTrigger is for streaming queries; a batch query "
            "reads its whole range (limit it with endingOffsets)"
        )
    timestamp = opts.optional_integer("startingTimestamp", minimum=0)
    if timestamp is not None:
        starting = OffsetSpec(kind="timestamp", timestamp_ms=timestamp)
    else:
        starting = _offset_spec(
            opts, "startingOffsets", "latest" if streaming else "earliest", streaming=streaming
        )
    tag_expression = (opts.get("tagExpression") or "*").strip()
    tag_set(tag_expression)
    sql_filter = _sql_filter(opts.get("sqlFilter"))
    if sql_filter and tag_expression != "*":
        raise OptionError(
            "give at most one of the options tagExpression and sqlFilter (an "
            "SQL92 filter can test tags too: TAGS IN ('TagA', 'TagB'))"
        )
    return SourceOptions(
        namesrv=opts.namesrv(),
        selection=_selection(opts),
        starting=starting,
        ending=(
            OffsetSpec(kind="latest")
            if streaming
            else _offset_spec(opts, "endingOffsets", "latest", streaming=False)
        ),
        max_offsets_per_trigger=opts.optional_integer("maxOffsetsPerTrigger", minimum=1),
        min_partitions=opts.optional_integer("minPartitions", minimum=1),
        max_records_per_partition=opts.integer(
            "maxRecordsPerPartition", DEFAULT_MAX_RECORDS_PER_PARTITION, minimum=1
        ),
        pull=PullSettings(
            credentials=opts.credentials(),
            consumer_group=opts.group("consumerGroup", DEFAULT_CONSUMER_GROUP),
            tag_expression=tag_expression,
            sql_filter=sql_filter,
            pull_batch_size=opts.integer("pullBatchSize", DEFAULT_PULL_BATCH_SIZE, minimum=1),
            pull_timeout_ms=opts.integer("pullTimeoutMs", DEFAULT_PULL_TIMEOUT_MS, minimum=1),
            fail_on_data_loss=opts.boolean("failOnDataLoss", True),
        ),
        streaming=streaming,
    )


def _sql_filter(raw: str | None) -> str:
    """The sqlFilter option, checked here so a typo fails the query before any task."""
    if raw is None:
        return ""
    try:
        return MessageSelector.by_sql(raw).expression
    except SqlFilterError as exc:
        raise OptionError(f"option sqlFilter {raw!r} does not parse: {exc}") from None


def parse_store_options(options: Mapping[str, str]) -> StoreOptions:
    """Options of ``spark.read.format("pocketmq-store").load(DATA_DIR)``."""
    opts = _Options(options, _STORE, "pocketmq-store reader")
    data_dir = opts.get("path")
    if data_dir is None:
        raise OptionError(
            "the pocketmq-store reader needs a data directory: "
            "spark.read.format('pocketmq-store').load('/path/to/data-dir')"
        )
    if opts.has("subscribe") and opts.has("subscribePattern"):
        raise OptionError("give at most one of the options subscribe and subscribePattern")
    raw_topics = opts.get("subscribe")
    raw_pattern = opts.get("subscribePattern")
    tag_expression = (opts.get("tagExpression") or "*").strip()
    tag_set(tag_expression)
    return StoreOptions(
        data_dir=data_dir,
        topics=_topics(raw_topics, "subscribe") if raw_topics else (),
        pattern=_pattern(raw_pattern, "subscribePattern") if raw_pattern else "",
        tag_expression=tag_expression,
        broker_name=(opts.get("brokerName") or "").strip() or None,
        fail_on_data_loss=opts.boolean("failOnDataLoss", True),
        max_bytes_per_partition=opts.integer(
            "maxBytesPerPartition", DEFAULT_MAX_BYTES_PER_PARTITION, minimum=1
        ),
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Options of ``df.write[Stream].format("pocketmq")``."""
    opts = _Options(options, _SINK, "pocketmq sink", ignored=_SPARK_SINK_KEYS)
    topic = opts.get("topic")
    if topic is not None:
        topic = topic.strip()
        problem = check_topic(topic)
        if problem:
            raise OptionError(f"option topic: {problem}")
    return SinkOptions(
        namesrv=opts.namesrv(),
        topic=topic,
        producer_group=opts.group("producerGroup", DEFAULT_PRODUCER_GROUP),
        send_batch_size=opts.integer("sendBatchSize", DEFAULT_SEND_BATCH_SIZE, minimum=1),
        send_timeout_ms=opts.integer("sendTimeoutMs", DEFAULT_SEND_TIMEOUT_MS, minimum=1),
        credentials=opts.credentials(),
        idempotent=opts.boolean("idempotent", True),
        write_id=_write_id(opts.get("writeId")),
        fail_first_attempt_after_rows=opts.optional_integer("failFirstAttemptAfterRows", minimum=0),
    )


def _write_id(raw: str | None) -> str | None:
    if raw is None:
        return None
    value = raw.strip()
    if len(value) > 128:
        raise OptionError(f"option writeId is {len(value)} characters; at most 128 are allowed")
    return value
