"""Write docs/configuration.md from the configuration dataclasses themselves.

    .venv/bin/python scripts/gen_config_docs.py           # rewrite the reference
    .venv/bin/python scripts/gen_config_docs.py --check   # exit 1 when it is stale

Every key of every component, from the one place that defines it: the frozen
dataclass with its default and help text (``metadata["help"]``, or the comment
after the field on its line). tests/unit/test_config_docs.py fails when the
file is stale or a key has no help text.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import enum
import inspect
import sys
import textwrap
from pathlib import Path
from typing import Any

from pocketmq.broker.config import BrokerConfig
from pocketmq.client.config import ConsumerConfig, ProducerConfig, PullConsumerConfig
from pocketmq.nameserver.config import NamesrvConfig

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "configuration.md"

KiB, MiB, GiB = 1024, 1024 ** 2, 1024 ** 3

# Our key -> RocketMQ's name for it, where the two truly mean the same thing.
ROCKETMQ_NAMES = {
    "broker_name": "brokerName", "cluster_name": "brokerClusterName",
    "broker_id": "brokerId", "namesrv_addrs": "namesrvAddr", "port": "listenPort",
    "flush_disk_type": "flushDiskType", "commitlog_file_size_bytes": "mappedFileSizeCommitLog",
    "auto_create_topic_enable": "autoCreateTopicEnable",
    "default_topic_queue_nums": "defaultTopicQueueNums",
    "max_message_size_bytes": "maxMessageSize", "file_reserved_hours": "fileReservedTime",
    "delete_when": "deleteWhen", "long_polling_enable": "longPollingEnable",
    "max_pull_messages": "maxTransferCountOnMessageInMemory",
    "max_pull_bytes": "maxTransferBytesOnMessageInMemory",
    "message_delay_level": "messageDelayLevel", "transaction_timeout_ms": "transactionTimeOut",
    "transaction_check_max": "transactionCheckMax",
    "transaction_check_interval_ms": "transactionCheckInterval",
    "sync_flush_timeout_ms": "syncFlushTimeout",
    "register_interval_seconds": "registerNameServerPeriod",
    "consumer_offset_persist_interval_seconds": "flushConsumerOffsetInterval",
    "flush_delay_offset_interval_ms": "flushDelayOffsetInterval",
    "timer_wheel_enable": "timerWheelEnable", "timer_max_delay_ms": "timerMaxDelaySec (ms)",
    "broker_expire_seconds": "BROKER_CHANNEL_EXPIRED_TIME",
    "send_timeout_ms": "sendMsgTimeout",
    "retry_times_when_send_failed": "retryTimesWhenSendFailed",
    "compress_over_bytes": "compressMsgBodyOverHowmuch",
    "latency_fault_enable": "sendLatencyFaultEnable",
    "route_refresh_interval_s": "pollNameServerInterval",
    "heartbeat_interval_s": "heartbeatBrokerInterval",
    "message_model": "messageModel", "consume_from": "consumeFromWhere",
    "consume_timestamp_ms": "consumeTimestamp", "allocate": "allocateMessageQueueStrategy",
    "pull_batch_size": "pullBatchSize", "pull_threshold_for_queue": "pullThresholdForQueue",
    "pull_threshold_size_for_queue_bytes": "pullThresholdSizeForQueue (bytes)",
    "commit_interval_s": "persistConsumerOffsetInterval",
    "consume_concurrency": "consumeThreadMax",
    "consume_batch_max_size": "consumeMessageBatchMaxSize",
    "consume_concurrently_max_span": "consumeConcurrentlyMaxSpan",
    "max_reconsume_times": "maxReconsumeTimes",
    "suspend_current_queue_ms": "suspendCurrentQueueTimeMillis",
    "max_poll_messages": "pullBatchSize (lite pull)", "auto_commit": "autoCommit",
}

# (title, class, how a user sets a key, what the intro says)
COMPONENTS: list[tuple[str, type, str, str]] = [
    ("Nameserver", NamesrvConfig, "flag",
     "`pocketmq nameserver [--config FILE] [--KEY VALUE ...]`; the file holds top-level "
     "keys."),
    ("Broker", BrokerConfig, "flag",
     "`pocketmq broker [--config FILE] [--KEY VALUE ...]` (short forms: `--namesrv`, "
     "`--name`, `--cluster`, `--flush`); the file holds top-level keys or a `[broker]` table. "
     "`pocketmq standalone --config FILE` takes the same broker keys. `POCKETMQ_NAMESRV` is "
     "the default of `namesrv_addrs`."),
    ("Producer (SDK)", ProducerConfig, "keyword",
     "`Producer(group=..., namesrv=..., KEY=VALUE)` or `config=ProducerConfig(...)`; "
     "`TransactionProducer` takes the same keys."),
    ("Push consumer (SDK)", ConsumerConfig, "keyword",
     "`PushConsumer(group=..., namesrv=..., KEY=VALUE)` or `config=ConsumerConfig(...)`."),
    ("Pull consumer (SDK)", PullConsumerConfig, "keyword",
     "`PullConsumer(group=..., namesrv=..., KEY=VALUE)` or `config=PullConsumerConfig(...)`."),
]


def _comments(cls: type) -> dict[str, str]:
    """Field name -> the comment after it on its line, for every class in the MRO."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        lines, _ = inspect.getsourcelines(klass)
        tree = ast.parse(textwrap.dedent("".join(lines)))
        body = tree.body[0].body  # type: ignore[attr-defined]
        for node in body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                line = lines[node.end_lineno - 1]
                if "#" in line:
                    out[node.target.id] = line.split("#", 1)[1].strip()
    return out


def help_text(cls: type, field: dataclasses.Field[Any]) -> str:
    return field.metadata.get("help") or _comments(cls).get(field.name, "")


def _size(n: int) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n:,} bytes" if n >= 10_000 else f"{n} bytes"


def default_text(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "(required)"
    if isinstance(value, enum.Enum):
        value = value.value
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and field.name.endswith("_bytes") and value > 0:
        return _size(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        for suffix, unit in (("_ms", "ms"), ("_seconds", "s"), ("_s", "s")):
            if field.name.endswith(suffix):
                return f"{value} {unit}" if isinstance(value, int) else f"{value:g} {unit}"
        return str(value) if isinstance(value, int) else f"{value:g}"
    if isinstance(value, tuple | list):
        return ", ".join(str(v) for v in value) or "(empty)"
    if callable(value):
        return getattr(value, "__name__", repr(value))
    return f'"{value}"' if isinstance(value, str) else str(value)


def _type_text(cls: type, field: dataclasses.Field[Any]) -> str:
    text = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", "")
    return str(text).replace("|", "or")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    out = ["# Configuration reference", "",
           "Generated by `scripts/gen_config_docs.py` from the configuration dataclasses "
           "(the one place each key, its default and its meaning are defined); "
           "`tests/unit/test_config_docs.py` fails when this file is stale.", "",
           "Servers: dataclass defaults < the TOML file (`--config FILE`) < environment "
           "defaults (`POCKETMQ_NAMESRV`) < flags given on the command line. Every key is a "
           "flag (`max_pull_messages` → `--max-pull-messages`). A wrong key or value stops "
           "the server at start with an error naming the key. SDK clients take the same keys "
           "as keyword arguments.", ""]
    for title, cls, how, intro in COMPONENTS:
        out += [f"## {title}", "", intro, ""]
        head = "| key | flag | default | RocketMQ | meaning |" if how == "flag" else \
            "| keyword | type | default | RocketMQ | meaning |"
        out += [head, "|---|---|---|---|---|"]
        for field in dataclasses.fields(cls):
            if field.name.startswith("_"):
                continue
            second = f"`--{field.name.replace('_', '-')}`" if how == "flag" else \
                _cell(_type_text(cls, field))
            out.append(f"| `{field.name}` | {second} | {_cell(default_text(field))} | "
                       f"{ROCKETMQ_NAMES.get(field.name, '')} | "
                       f"{_cell(help_text(cls, field))} |")
        out.append("")
    out += ["## Example files", "", "`broker.toml`:", "", "```toml", "[broker]",
            'broker_name = "broker-a"', 'cluster_name = "DefaultCluster"',
            'namesrv_addrs = "10.0.0.5:9876;10.0.0.6:9876"', 'data_dir = "/var/lib/pocketmq"',
            'flush_disk_type = "sync"', "max_pull_messages = 256", "```", "",
            "`nameserver.toml`:", "", "```toml", "port = 9876",
            "broker_expire_seconds = 120", "```", ""]
    return "\n".join(out)


def check() -> str | None:
    """None when docs/configuration.md is current, else what to run."""
    if not OUT.exists() or OUT.read_text() != render():
        return f"{OUT.relative_to(ROOT)} is stale; run .venv/bin/python scripts/gen_config_docs.py"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the file is stale")
    args = parser.parse_args()
    if args.check:
        problem = check()
        if problem:
            print(problem, file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(render())
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
