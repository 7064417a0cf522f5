"""Write docs/configuration.md from the configuration dataclasses themselves.

    .venv/bin/python scripts/gen_config_docs.py           # rewrite docs/configuration.md
    .venv/bin/python scripts/gen_config_docs.py --check   # exit 1 when it is stale

Nothing below lists keys. Each component's keys are the fields of its frozen
config dataclass: name, type and default from the field, the meaning from its
``metadata["help"]``, the flags from the real parser of the component's
command (``add_config_flags`` plus the command's short aliases), the group
from the ``# -- group ---`` comment above the field. A key added to a
dataclass shows up on the next run, and tests/unit/test_config_docs.py fails
until it has. The two hand-kept tables are ROCKETMQ_NAMES (our key -> the
RocketMQ setting it truly corresponds to) and the example files.
"""

from __future__ import annotations

import argparse
import ast
import collections.abc
import dataclasses
import enum
import functools
import inspect
import itertools
import json
import os
import re
import sys
import textwrap
import types
import typing
from pathlib import Path
from typing import Any

from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.store.config import StoreConfig
from pocketmq.cli import broker_cmd, nameserver_cmd
from pocketmq.client.config import NAMESRV_ENV, ConsumerConfig, ProducerConfig, PullConsumerConfig
from pocketmq.nameserver.config import NamesrvConfig

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "configuration.md"
REGENERATE = ".venv/bin/python scripts/gen_config_docs.py"

# -------------------------------------------------------------- RocketMQ's names
# Our key -> the RocketMQ setting with the same meaning ("name note": the first
# word is the name, the rest says how it differs, usually the unit). A key
# without a true counterpart is left out rather than matched loosely.
_CLIENT_NAMES = {
    "route_refresh_interval_s": "pollNameServerInterval (ms)",
    "heartbeat_interval_s": "heartbeatBrokerInterval (ms)",
    "access_key": "accessKey (SessionCredentials)",
    "secret_key": "secretKey (SessionCredentials)",
    "tls_ca_file": "tls.client.trustCertPath",
    "tls_cert_file": "tls.client.certPath",
    "tls_key_file": "tls.client.keyPath",
}
_CONSUMER_NAMES = {
    **_CLIENT_NAMES,
    "message_model": "messageModel",
    "consume_from": "consumeFromWhere",
    "consume_timestamp_ms": "consumeTimestamp (yyyyMMddHHmmss)",
    "allocate": "allocateMessageQueueStrategy",
    "pull_batch_size": "pullBatchSize",
    "pull_delay_on_error_s": "pullTimeDelayMillsWhenException (ms)",
    "pull_threshold_for_queue": "pullThresholdForQueue",
    "pull_threshold_size_for_queue_bytes": "pullThresholdSizeForQueue (MiB)",
    "rebalance_interval_s": "rocketmq.client.rebalance.waitInterval (ms)",
    "offset_store_dir": "rocketmq.client.localOffsetStoreDir",
}
_SERVER_TLS_NAMES = {
    "tls_cert_file": "tls.server.certPath",
    "tls_key_file": "tls.server.keyPath",
    "tls_ca_file": "tls.server.trustCertPath",
    "tls_require_client_auth": "tls.server.need.client.auth (require)",
}
ROCKETMQ_NAMES: dict[type, dict[str, str]] = {
    NamesrvConfig: {
        **_SERVER_TLS_NAMES,
        "port": "listenPort",
        "broker_expire_seconds": "BROKER_CHANNEL_EXPIRED_TIME (constant, ms)",
        "scan_interval_seconds": "scanNotActiveBrokerInterval (ms)",
    },
    BrokerConfig: {
        "broker_name": "brokerName",
        "cluster_name": "brokerClusterName",
        "broker_id": "brokerId",
        "broker_ip": "brokerIP1",
        "port": "listenPort",
        "namesrv_addrs": "namesrvAddr",
        "data_dir": "storePathRootDir",
        "flush_disk_type": "flushDiskType (ASYNC_FLUSH, SYNC_FLUSH)",
        "sync_flush_timeout_ms": "syncFlushTimeout",
        "commitlog_file_size_bytes": "mappedFileSizeCommitLog",
        "index_slots": "maxHashSlotNum",
        "index_entries": "maxIndexNum",
        "file_reserved_hours": "fileReservedTime",
        "delete_when": "deleteWhen",
        "clean_resource_interval_ms": "cleanResourceInterval",
        "max_message_size_bytes": "maxMessageSize",
        "auto_create_topic_enable": "autoCreateTopicEnable",
        "default_topic_queue_nums": "defaultTopicQueueNums",
        "max_pull_messages": "maxTransferCountOnMessageInMemory",
        "max_pull_bytes": "maxTransferBytesOnMessageInMemory",
        "default_query_max": "defaultQueryMaxNum",
        "long_polling_enable": "longPollingEnable",
        "enable_property_filter": "enablePropertyFilter",
        "message_delay_level": "messageDelayLevel",
        "flush_delay_offset_interval_ms": "flushDelayOffsetInterval",
        "timer_wheel_enable": "timerWheelEnable",
        "timer_max_delay_ms": "timerMaxDelaySec (s)",
        "timer_roll_window_s": "timerRollWindowSlot (slots of timerPrecisionMs)",
        "timer_log_file_size_bytes": "mappedFileSizeTimerLog",
        "timer_flush_interval_ms": "timerFlushIntervalMs",
        "rebalance_lock_max_live_time_ms": "rocketmq.broker.rebalance.lockMaxLiveTime",
        "transaction_timeout_ms": "transactionTimeOut",
        "transaction_check_interval_ms": "transactionCheckInterval",
        "transaction_check_max": "transactionCheckMax",
        "client_channel_expire_seconds": "channelExpiredTimeout (ms)",
        "consumer_offset_persist_interval_seconds": "flushConsumerOffsetInterval (ms)",
        "register_interval_seconds": "registerNameServerPeriod (ms)",
        "register_timeout_seconds": "registerBrokerTimeoutMills (ms)",
        "grpc_v2_port": "grpcServerPort (proxy)",
        "metrics_port": "metricsPromExporterPort",
        "acl_enable": "aclEnable",
        **_SERVER_TLS_NAMES,
        "broker_role": "brokerRole",
        "ha_port": "haListenPort",
        "ha_master_address": "haMasterAddress",
        "min_sync_replicas": "inSyncReplicas (5.x; 4.x waits for one slave)",
        "slave_timeout_ms": "slaveTimeout",
        "ha_transfer_batch_bytes": "haTransferBatchSize",
        "ha_heartbeat_interval_ms": "haSendHeartbeatInterval",
        "ha_housekeeping_interval_ms": "haHousekeepingInterval",
        "ha_slave_fallbehind_max_bytes": "haSlaveFallbehindMax",
        "write_without_mmap": "writeWithoutMmap (5.x)",
    },
    StoreConfig: {
        "check_crc_on_recover": "checkCRCOnRecover",
        "flush_interval_commitlog_ms": "flushIntervalCommitLog",
        "flush_commitlog_least_pages": "flushCommitLogLeastPages",
        "flush_commitlog_thorough_interval_ms": "flushCommitLogThoroughInterval",
        "flush_interval_consume_queue_ms": "flushIntervalConsumeQueue",
        "warm_mapped_file_enable": "warmMapedFileEnable",
        "write_without_mmap": "writeWithoutMmap (5.x)",
        "message_index_enable": "messageIndexEnable",
        "delete_files_batch_max": "DELETE_FILES_BATCH_MAX (constant)",
        "disk_max_used_space_ratio": "diskMaxUsedSpaceRatio (percent)",
        "disk_space_clean_forcibly_ratio": "rocketmq.broker.diskSpaceCleanForciblyRatio",
        "disk_space_warning_level_ratio": "rocketmq.broker.diskSpaceWarningLevelRatio",
    },
    ProducerConfig: {
        **_CLIENT_NAMES,
        "send_timeout_ms": "sendMsgTimeout",
        "retry_times_when_send_failed": "retryTimesWhenSendFailed",
        "max_message_size_bytes": "maxMessageSize",
        "compress_over_bytes": "compressMsgBodyOverHowmuch",
        "latency_fault_enable": "sendLatencyFaultEnable",
    },
    ConsumerConfig: {
        **_CONSUMER_NAMES,
        "pull_suspend_ms": "BROKER_SUSPEND_MAX_TIME_MILLIS (constant)",
        "commit_interval_s": "persistConsumerOffsetInterval (ms)",
        "consume_concurrency": "consumeThreadMax",
        "consume_batch_max_size": "consumeMessageBatchMaxSize",
        "consume_concurrently_max_span": "consumeConcurrentlyMaxSpan",
        "max_reconsume_times": "maxReconsumeTimes",
        "suspend_current_queue_ms": "suspendCurrentQueueTimeMillis",
        "lock_renew_interval_s": "rocketmq.client.rebalance.lockInterval (ms)",
        "shutdown_timeout_s": "awaitTerminationMillisWhenShutdown (ms)",
    },
    PullConsumerConfig: {
        **_CONSUMER_NAMES,
        "pull_suspend_ms": "brokerSuspendMaxTimeMillis",
        "commit_interval_s": "autoCommitIntervalMillis (ms)",
        "auto_commit": "autoCommit",
    },
}


# -------------------------------------------------------------------- components


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Component:
    title: str
    cls: type
    how: str  # one paragraph: where this component's keys are given
    command: str | None = None  # `pocketmq COMMAND` has a flag per key
    example: dict[str, Any] | None = None
    example_table: str | None = None  # [table] of the example file; None = top level
    skip: frozenset[str] = frozenset()  # keys documented under another component


def broker_store_keys() -> dict[str, str]:
    """StoreConfig key -> what BrokerConfig.store_config sets it from (a key, or ``derived``)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(BrokerConfig.store_config)))
    call = next(
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id == StoreConfig.__name__
    )
    broker_keys = {f.name for f in dataclasses.fields(BrokerConfig)}
    out = {}
    for kw in call.keywords:
        value = kw.value
        if (
            isinstance(value, ast.Attribute)
            and isinstance(value.value, ast.Name)
            and value.value.id == "self"
            and value.attr in broker_keys
        ):
            out[str(kw.arg)] = value.attr
        else:
            out[str(kw.arg)] = "derived"
    return out


def _store_intro() -> str:
    renamed = [
        f"`{ours}` → `{theirs}`"
        for theirs, ours in broker_store_keys().items()
        if ours not in ("derived", theirs)
    ]
    derived = [f"`{theirs}`" for theirs, ours in broker_store_keys().items() if ours == "derived"]
    same = "those of the same name" + (f", and {', '.join(renamed)}" if renamed else "")
    return (
        f"A broker builds its `StoreConfig` from the broker keys above ({same}); it derives "
        f"{' and '.join(derived)}. The store keys below are not broker keys: a broker runs "
        "them at their defaults. Code that embeds the store sets them: "
        "`DefaultMessageStore(StoreConfig(data_dir=..., KEY=VALUE))`."
    )


def _sdk(
    title: str, cls: type, ctor: str, table: str, example: dict[str, Any], also: str = ""
) -> Component:
    how = (
        f"`{ctor}(group=..., namesrv=..., KEY=VALUE)` or `config={cls.__name__}(...)` "
        f"(keywords win){also}. An SDK client reads no file or flag itself; to keep its "
        f"keys in TOML, pass a table as keywords: "
        f'`{ctor}(group=..., **tomllib.load(f)["{table}"])`.'
    )
    return Component(title=title, cls=cls, how=how, example=example, example_table=table)


COMPONENTS: list[Component] = [
    Component(
        title="Nameserver",
        cls=NamesrvConfig,
        command="nameserver",
        how="`pocketmq nameserver [--config FILE] [FLAGS]`. The file holds the keys at its "
        "top level.",
        example={
            "host": "0.0.0.0",
            "port": 9876,
            "broker_expire_seconds": 120.0,
            "metrics_port": 5557,
        },
    ),
    Component(
        title="Broker",
        cls=BrokerConfig,
        command="broker",
        example_table="broker",
        how=f"`pocketmq broker [--config FILE] [FLAGS]`. The file holds the keys at its top "
        f"level or in a `[broker]` table. `${NAMESRV_ENV}`, when set, is `namesrv_addrs` "
        f"unless a flag gives it. `pocketmq standalone --config FILE` reads the same keys "
        f"(its own `--host`, `--broker-port`, `--data-dir`, `--flush` and `--grpc-v2-port` "
        f"win); `pocketmq broker config` shows a running broker's values.",
        example={
            "broker_name": "broker-a",
            "cluster_name": "DefaultCluster",
            "namesrv_addrs": "10.0.0.5:9876;10.0.0.6:9876",
            "host": "0.0.0.0",
            "broker_ip": "10.0.0.7",
            "port": 10911,
            "data_dir": "/var/lib/pocketmq/broker-a",
            "flush_disk_type": "sync",
            "file_reserved_hours": 120,
            "delete_when": "04",
            "max_pull_messages": 64,
            "metrics_port": 5557,
        },
    ),
    Component(
        title="Message store (embedded)",
        cls=StoreConfig,
        skip=frozenset(broker_store_keys()),
        how=_store_intro(),
    ),
    _sdk(
        "Producer",
        ProducerConfig,
        "Producer",
        "producer",
        {
            "send_timeout_ms": 3000,
            "retry_times_when_send_failed": 2,
            "linger_ms": 2.0,
            "compress_over_bytes": 4096,
        },
        also="; `TransactionProducer` takes the same keys",
    ),
    _sdk(
        "Push consumer",
        ConsumerConfig,
        "PushConsumer",
        "push_consumer",
        {
            "consume_from": "first",
            "consume_concurrency": 32,
            "max_reconsume_times": 16,
            "pull_batch_size": 32,
        },
    ),
    _sdk(
        "Pull consumer",
        PullConsumerConfig,
        "PullConsumer",
        "pull_consumer",
        {"consume_from": "first", "auto_commit": False, "max_poll_messages": 64},
    ),
]

_COMMAND_MODULES = {"nameserver": nameserver_cmd, "broker": broker_cmd}
_ENV = {(BrokerConfig, "namesrv_addrs"): NAMESRV_ENV}

# ------------------------------------------------------------------ field facts


def help_text(field: dataclasses.Field[Any]) -> str:
    return str(field.metadata.get("help", "")).strip()


@functools.cache
def command_flags(command: str, cls: type) -> dict[str, list[str]]:
    """Key -> every flag of `pocketmq COMMAND` that sets it, read from the real parser."""
    root = argparse.ArgumentParser()
    _COMMAND_MODULES[command].register(root.add_subparsers())
    sub = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    parser = sub.choices[command]
    dests = parser.get_default("_pocketmq_config_flag_dests")[cls]  # see add_config_flags
    by_dest: dict[str, list[str]] = {}
    for action in parser._actions:
        by_dest.setdefault(action.dest, []).extend(action.option_strings)
    out = {}
    for key, dest in dests.items():
        own = "--" + key.replace("_", "-")
        main = [f for f in (own, "--no-" + own[2:]) if f in by_dest.get(dest, [])]
        out[key] = main + [f for f in by_dest.get(dest, []) if f not in main]  # then aliases
    return out


def _groups(cls: type) -> dict[str, str]:
    """Key -> the title of the ``# -- title ---`` comment above it in its class."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        lines, start = inspect.getsourcelines(klass)
        titles = {
            start + i: m.group(1)
            for i, line in enumerate(lines)
            if (m := re.match(r"\s*# -- (.+?) -+\s*$", line))
        }
        for node in ast.parse(textwrap.dedent("".join(lines))).body[0].body:  # type: ignore[attr-defined]
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                above = [t for n, t in titles.items() if n < start + node.lineno - 1]
                if above:
                    out[node.target.id] = re.sub(r"\s*\(.*\)$", "", above[-1])
    return out


def type_text(tp: Any) -> str:
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        enums = [a for a in args if isinstance(a, type) and issubclass(a, enum.Enum)]
        text = type_text(enums[0]) if enums else " or ".join(type_text(a) for a in args)
        return text + (", optional" if len(args) < len(typing.get_args(tp)) else "")
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + ", ".join(f"`{m.value}`" for m in tp)
    if typing.get_origin(tp) is tuple and typing.get_args(tp) == (str, int):
        return "host:port"
    if typing.get_origin(tp) is collections.abc.Callable:
        return "callable"
    return "path" if tp is Path else getattr(tp, "__name__", str(tp))


# -------------------------------------------------------------------- defaults

_UNITS = (("_bytes", "bytes"), ("_ms", "ms"), ("_seconds", "s"), ("_s", "s"), ("_hours", "h"))
_SECONDS = {"ms": 0.001, "s": 1, "h": 3600}
_SPANS = (("d", 86_400), ("h", 3600), ("min", 60), ("s", 1))  # largest first


def _unit(key: str) -> str | None:
    return next((unit for suffix, unit in _UNITS if key.endswith(suffix)), None)


def _number(value: int | float) -> str:
    if isinstance(value, float) and not value.is_integer():
        return repr(value)
    return f"{int(value):,}"


def _bytes(n: int) -> str:
    for name, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {name} ({n})"
    return f"{_number(n)} bytes"


def _duration(value: int | float, unit: str) -> str:
    """``5,000 ms (5 s)``: the value in the key's unit, then in the largest exact span."""
    text = f"{_number(value)} {unit}"
    seconds = value / 1000 if unit == "ms" else value * _SECONDS[unit]
    for name, span in _SPANS:
        if span <= _SECONDS[unit]:
            break
        if seconds >= span and seconds % span == 0:
            return f"{text} ({_number(seconds // span)} {name})"
    return text


def default_value(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def default_text(field: dataclasses.Field[Any]) -> str:
    value = default_value(field)
    if value is dataclasses.MISSING:
        return "required"
    if value is None:
        return "unset"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, tuple) and len(value) == 2:
        value = f"{value[0]}:{value[1]}"
    if isinstance(value, str | bool):
        return f"`{toml_value(value)}`"
    unit = _unit(field.name)
    if isinstance(value, int | float) and not field.name.endswith("port"):
        if unit == "bytes" and value > 0:
            return _bytes(int(value))
        return _duration(value, unit) if unit in _SECONDS else _number(value)
    return str(value)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string escapes as JSON does
    return repr(value)


# --------------------------------------------------------------------- render


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _rocketmq(cls: type, key: str) -> str:
    name, _, note = ROCKETMQ_NAMES.get(cls, {}).get(key, "").partition(" ")
    return f"`{name}` {note}".strip() if name else ""


def _meaning(cls: type, field: dataclasses.Field[Any]) -> str:
    """The help text without the "(rocketMQName)" the RocketMQ column already shows."""
    name = ROCKETMQ_NAMES.get(cls, {}).get(field.name, "").partition(" ")[0]
    text = help_text(field)
    return re.sub(rf"\s*\({re.escape(name)}\)", "", text) if name else text


def _flags_cell(comp: Component, key: str, flags: dict[str, list[str]]) -> str:
    text = ", ".join(f"`{f}`" for f in flags.get(key, [])) or "—"
    env = _ENV.get((comp.cls, key))
    return f"{text}; env `{env}`" if env else text


def _table(comp: Component, fields: list[dataclasses.Field[Any]]) -> list[str]:
    hints = typing.get_type_hints(comp.cls)
    flags = command_flags(comp.command, comp.cls) if comp.command else {}
    head = ["key (TOML)", "flags"] if comp.command else ["keyword"]
    head += ["type", "default", "RocketMQ", "meaning"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for f in fields:
        cells = [f"`{f.name}`"] + ([_flags_cell(comp, f.name, flags)] if comp.command else [])
        cells += [
            type_text(hints[f.name]),
            default_text(f),
            _rocketmq(comp.cls, f.name),
            _meaning(comp.cls, f),
        ]
        out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return [*out, ""]


def _example(comp: Component) -> list[str]:
    if comp.example is None:
        return []
    name = f"{comp.title.lower().replace(' ', '_')}.toml"
    body = [f"[{comp.example_table}]"] if comp.example_table else []
    body += [f"{k} = {toml_value(v)}" for k, v in comp.example.items()]
    return [f"Example `{name}`:", "", "```toml", *body, "```", ""]


def _slug(title: str) -> str:
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def render_component(comp: Component) -> list[str]:
    out = [f"## {comp.title}", "", comp.how, ""]
    fields = [f for f in dataclasses.fields(comp.cls) if f.name not in comp.skip]
    groups = _groups(comp.cls)
    for title, run in itertools.groupby(fields, key=lambda f: groups.get(f.name)):
        out += ([f"### {comp.title}: {title}", ""] if title else []) + _table(comp, list(run))
    return out + _example(comp)


def _intro() -> str:
    sources = sorted(
        {Path(inspect.getfile(c.cls)).resolve().relative_to(ROOT).as_posix() for c in COMPONENTS}
    )
    return _INTRO.format(
        regenerate=REGENERATE, env=NAMESRV_ENV, sources=", ".join(f"`{s}`" for s in sources)
    )


_INTRO = """\
# Configuration reference

<!-- Generated by scripts/gen_config_docs.py from the configuration dataclasses; do not edit.
     Regenerate: {regenerate} -->

Every key of every PocketMQ component: its name, how to set it, its type and default, the
RocketMQ setting it corresponds to and what it does. Generated from the frozen configuration
dataclasses that define the keys, in
{sources};
`{regenerate} --check` and `tests/unit/test_config_docs.py` fail when this file is stale.

**Servers** (`pocketmq nameserver`, `pocketmq broker`) take each key from, lowest first:

    dataclass default  <  TOML file (--config FILE)  <  environment  <  flags given

The one environment variable that sets a key is `${env}`: the broker's `namesrv_addrs`.
Every key is a TOML key and a flag of the same name (`max_pull_messages` →
`--max-pull-messages`; a bool key also has `--no-…`). An unknown key or a value of the
wrong type or range stops the server before it binds, with a message naming the key.

**SDK clients** take each key as a keyword argument of the client's constructor (which wins)
or in a config object: `Producer(group="g", linger_ms=2)` or
`Producer(group="g", config=ProducerConfig(linger_ms=2))`; the blocking clients of
`pocketmq.client.sync` take the same keywords. A client's nameservers are its
`namesrv=` argument, else `${env}`, else `127.0.0.1:9876`.

Units are in the key's name (`_ms`, `_s`/`_seconds`, `_hours`, `_bytes`); sizes without a
suffix in the store are bytes too.
"""


def render() -> str:
    out = [_intro(), "Components:", ""]
    out += [f"- [{c.title}](#{_slug(c.title)})" for c in COMPONENTS] + [""]
    for comp in COMPONENTS:
        out += render_component(comp)
    return "\n".join(out).rstrip("\n") + "\n"


def check() -> str | None:
    """None when docs/configuration.md is current, else what to do."""
    if not OUT.exists() or OUT.read_text() != render():
        return f"{os.path.relpath(OUT, ROOT)} is stale; run {REGENERATE}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="only compare; exit 1 when the file is stale"
    )
    args = parser.parse_args(argv)
    if args.check:
        problem = check()
        print(problem or f"{os.path.relpath(OUT, ROOT)} is current", file=sys.stderr)
        return 1 if problem else 0
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(render())
    print(f"wrote {os.path.relpath(OUT, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
