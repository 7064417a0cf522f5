"""``pocketmq broker`` and ``pocketmq standalone``: run a broker (with a nameserver).

``pocketmq broker`` takes BrokerConfig's keys from ``--config FILE`` (TOML,
top-level keys or a ``[broker]`` table) and then flags, which win; every key
is a flag (``--data-dir``, ``--flush-disk-type`` ...) and the common ones have
RocketMQ-style short names: ``--namesrv``, ``--name``, ``--cluster``,
``--flush``. ``POCKETMQ_NAMESRV`` is the default for ``--namesrv``.

``pocketmq standalone`` runs a nameserver and a broker registered with it in
one process: the embedded default for trying PocketMQ out.

SIGTERM or SIGINT stops gracefully (the broker flushes, writes its checkpoint,
removes ``abort`` and unregisters). Exit codes: 0 after a graceful stop, 1 when
a server cannot start (port taken, data directory locked), 2 on a
configuration error.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import Any

from pocketmq.broker.config import BrokerConfig
from pocketmq.cli import loop_factory
from pocketmq.cli.serve import stop_signals
from pocketmq.common.configfile import add_config_flags, load_config
from pocketmq.common.errors import ConfigError, PocketMQError
from pocketmq.common.logsetup import server_command

__all__ = ["register"]

log = logging.getLogger(__name__)

NAMESRV_ENV = "POCKETMQ_NAMESRV"
SHUTDOWN_GRACE_S = 5.0
# `pocketmq standalone` is for a laptop: a 64 MiB commit-log segment (pre-allocated
# whole) rather than RocketMQ's 1 GiB, and index files of 42 MB rather than 420 MB
# (sparse), so the quick start takes tens of MB, not 1.5 GB. A --config file that
# sets any of these keys wins; a data directory made with other sizes keeps its own
# (storeGeometry.json), since a store cannot change them.
STANDALONE_STORE_DEFAULTS: dict[str, int] = {
    "commitlog_file_size_bytes": 64 * 1024 * 1024,
    "index_slots": 500_000,
    "index_entries": 2_000_000,
}

# Short flag -> BrokerConfig key, as `mqbroker -n` / the command line.
_ALIASES = {
    "--namesrv": "namesrv_addrs",
    "--name": "broker_name",
    "--cluster": "cluster_name",
    "--flush": "flush_disk_type",
    "--role": "broker_role",
    "--controller": "controller_addr",
}
_ALIAS_CHOICES: dict[str, tuple[str, ...]] = {
    "--flush": ("async", "sync"),
    "--role": ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"),
}
_ALIAS_NOTES = {"--role": " (RocketMQ's brokerRole; a SLAVE needs --broker-id 1 or above)"}

_REPLICATION_HELP = (
    "Replication (RocketMQ's master/slave): the brokers of one --name are a master "
    "(--broker-id 0, brokerId; --role ASYNC_MASTER or SYNC_MASTER, brokerRole) and replicas "
    "(--broker-id 1.., --role SLAVE) that copy its commit log. A master serves its replicas "
    "on --ha-port (haListenPort; default --port + 1, -1 = off); a replica finds it through "
    "the nameserver. `pocketmq broker promote HOST:PORT` makes a replica the master."
)


def register(subparsers: Any) -> None:
    _add_broker(subparsers)
    _add_standalone(subparsers)


def _add_broker(subparsers: Any) -> None:
    """``pocketmq broker``: --config, the short aliases, then one flag per BrokerConfig key."""
    broker = subparsers.add_parser(
        "broker",
        help="run a broker (commit log, queues, gRPC service)",
        description="Run a PocketMQ broker. It registers with every nameserver in --namesrv "
        "and stops gracefully on SIGTERM/SIGINT. " + _REPLICATION_HELP,
    )
    broker.add_argument(
        "--config",
        metavar="FILE",
        help="TOML file of broker keys, top level or [broker] (flags override)",
    )
    for flag, key in _ALIASES.items():
        extra: dict[str, Any] = {"choices": _ALIAS_CHOICES[flag]} if flag in _ALIAS_CHOICES else {}
        note = f" (default: ${NAMESRV_ENV})" if key == "namesrv_addrs" else ""
        broker.add_argument(
            flag,
            dest=key,
            default=None,
            metavar=key.upper(),
            help=f"same as --{key.replace('_', '-')}{note}{_ALIAS_NOTES.get(flag, '')}",
            **extra,
        )
    add_config_flags(broker, BrokerConfig)
    # `cluster up` once called it --v2-port: kept as a hidden alias, one name in the help.
    broker.add_argument("--v2-port", dest="grpc_v2_port", type=int, help=argparse.SUPPRESS)
    broker.set_defaults(func=_run_broker)


def _add_standalone(subparsers: Any) -> None:
    standalone = subparsers.add_parser(
        "standalone",
        help="run a nameserver and a broker in one process",
        description="Run a nameserver and one broker registered with it, in one process.",
    )
    standalone.add_argument(
        "--data-dir",
        default="./pocketmq-data",
        help="broker data directory (default: ./pocketmq-data)",
    )
    standalone.add_argument(
        "--host", default="127.0.0.1", help="address both servers listen on (default: 127.0.0.1)"
    )
    standalone.add_argument(
        "--namesrv-port", type=int, default=9876, help="nameserver port (default: 9876)"
    )
    standalone.add_argument(
        "--broker-port", type=int, default=10911, help="broker port (default: 10911)"
    )
    standalone.add_argument(
        "--flush",
        choices=("async", "sync"),
        default="async",
        help="flush mode of the commit log (default: async)",
    )
    _add_standalone_extras(standalone)
    standalone.set_defaults(func=_run_standalone)


def _add_standalone_extras(standalone: argparse.ArgumentParser) -> None:
    """``standalone``'s optional servers and files: v2 and metrics ports, --config, --demo."""
    standalone.add_argument(
        "--grpc-v2-port",
        type=int,
        default=None,
        help="port of RocketMQ 5's gRPC API for the official 5.x clients; "
        "0 = any, -1 = off (default: 8081 shifted as --broker-port "
        "is from 10911, any when --broker-port is 0)",
    )
    standalone.add_argument("--v2-port", dest="grpc_v2_port", type=int, help=argparse.SUPPRESS)
    standalone.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="port of the broker's Prometheus /metrics; 0 = any, "
        "-1 = off (default: off, or metrics_port of --config)",
    )
    standalone.add_argument(
        "--config",
        metavar="FILE",
        help="TOML file of broker keys, top level or [broker], for what "
        "the flags above do not set (max_pull_messages, ...); "
        "replication is off (ha_port = -1) unless it sets ha_port",
    )
    standalone.add_argument(
        "--controller",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the controller in the nameserver and the broker in "
        "controller mode (default on; its state is in "
        "DATA_DIR/controller)",
    )
    standalone.add_argument(
        "--demo", action="store_true", help="once up, send and consume a few messages and show how"
    )


def _section(path: str | None) -> str | None:
    """Read ``[broker]`` when the file has one, else the top level."""
    if path is None:
        return None
    import tomllib

    try:
        with open(path, "rb") as f:
            return "broker" if isinstance(tomllib.load(f).get("broker"), dict) else None
    except (OSError, tomllib.TOMLDecodeError):
        return None  # load_config reports the problem with the file's name


@server_command
def _run_broker(args: argparse.Namespace) -> int:
    overrides = {}
    if os.environ.get(NAMESRV_ENV):
        overrides["namesrv_addrs"] = os.environ[NAMESRV_ENV]
    try:
        config = load_config(
            BrokerConfig,
            toml_path=args.config,
            args=args,
            section=_section(args.config),
            overrides=overrides,
        )
    except ConfigError as exc:
        print(f"pocketmq broker: {exc}", file=sys.stderr)
        return 2
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(_serve(config, namesrv=None))


@server_command
def _run_standalone(args: argparse.Namespace) -> int:
    from pocketmq.nameserver import NamesrvConfig

    try:
        namesrv_config = NamesrvConfig(
            host=args.host,
            port=args.namesrv_port,
            controller_enable=args.controller,
            controller_data_dir=os.path.join(args.data_dir, "controller"),
        )
        _standalone_broker_config(args, namesrv_addrs="")
    except ConfigError as exc:
        print(f"pocketmq standalone: {exc}", file=sys.stderr)
        return 2
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(_serve_standalone(args, namesrv_config))


def _config_sets(path: str | None, key: str) -> bool:
    """Whether the TOML file at *path* gives *key* (in ``[broker]`` or at the top level)."""
    if path is None:
        return False
    import tomllib

    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError):
        return False  # load_config reports the problem with the file's name
    section = data.get("broker")
    return key in (section if isinstance(section, dict) else data)


def _recorded_geometry(data_dir: str) -> dict[str, int]:
    """The store sizes an existing *data_dir* was made with, as BrokerConfig keys."""
    from pocketmq.broker.store.data_dir import DataDirectory

    geometry = DataDirectory(data_dir).read_geometry()
    names = {
        "commitlog_file_size": "commitlog_file_size_bytes",
        "index_slots": "index_slots",
        "index_entries": "index_entries",
    }
    return {
        key: int(geometry[name])
        for name, key in names.items()
        if isinstance(geometry.get(name), int)
    }


def _standalone_broker_config(args: argparse.Namespace, *, namesrv_addrs: str) -> BrokerConfig:
    """``--config``'s broker keys, under the standalone flags (which always win).

    A standalone broker has no replicas, so it serves no replication port unless
    the file asks for one: the default (port + 1 = 10912) is the port of the second
    broker of the README's cluster by hand. Its store is sized for a laptop
    (:data:`STANDALONE_STORE_DEFAULTS`) unless the file says otherwise.
    """
    flags: dict[str, Any] = {
        "host": args.host,
        "port": args.broker_port,
        "data_dir": args.data_dir,
        "flush_disk_type": args.flush,
        "namesrv_addrs": namesrv_addrs,
    }
    if getattr(args, "controller", False):
        # Controller mode: the nameserver's controller names this broker master.
        flags.update(controller_mode=True, controller_addr=namesrv_addrs or "127.0.0.1:1")
    if not _config_sets(args.config, "ha_port"):
        flags["ha_port"] = -1
    recorded = _recorded_geometry(args.data_dir)
    for key, value in STANDALONE_STORE_DEFAULTS.items():
        if not _config_sets(args.config, key):
            flags[key] = recorded.get(key, value)
    if args.grpc_v2_port is not None:
        flags["grpc_v2_port"] = args.grpc_v2_port
    if args.metrics_port is not None:
        flags["metrics_port"] = args.metrics_port
    return load_config(
        BrokerConfig, toml_path=args.config, section=_section(args.config), overrides=flags
    )


async def _serve_standalone(args: argparse.Namespace, namesrv_config: Any) -> int:
    from pocketmq.nameserver import NameServer, ServerBindError

    with stop_signals(asyncio.Event()) as stop:  # from before start: see _serve
        nameserver = NameServer(namesrv_config)
        try:
            await nameserver.start()
        except ServerBindError as exc:
            print(f"pocketmq standalone: {exc}", file=sys.stderr)
            return 1
        config = _standalone_broker_config(args, namesrv_addrs=nameserver.address)
        try:
            return await _serve(config, namesrv=nameserver, demo=args.demo, stop=stop)
        finally:
            await nameserver.stop()


async def _until_master(broker: Any, timeout_s: float = 15.0) -> None:
    """In controller mode the embedded controller names the broker master within a
    heartbeat or two; "ready" (and the demo) wait for that, so a send made at once is
    not refused NOT_MASTER."""
    ha = broker.ha
    if ha is None or not broker.config.controller_mode:
        return
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not ha.is_master() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    if not ha.is_master():
        log.warning(
            "the controller has not named this broker master within %.0f s; sends "
            "are refused until it does",
            timeout_s,
        )


async def _serve(
    config: BrokerConfig, *, namesrv: Any, demo: bool = False, stop: asyncio.Event | None = None
) -> int:
    """Start the broker, serve until SIGTERM/SIGINT, stop it gracefully.

    The signal handlers are in place before the broker starts: it answers requests
    (and a supervisor may send SIGTERM) before ``start()`` returns, and a signal then
    stops it gracefully once started, instead of killing it.
    """
    if stop is None:
        with stop_signals(asyncio.Event()) as stop:
            return await _serve(config, namesrv=namesrv, demo=demo, stop=stop)
    from pocketmq.broker.broker import Broker

    broker = Broker(config)
    try:
        await broker.start()
    except (OSError, PocketMQError) as exc:
        print(f"pocketmq broker: cannot start: {exc}", file=sys.stderr)
        await broker.stop(0)
        return 1
    import gc

    gc.freeze()
    demo_task = None
    if namesrv is not None:
        await _until_master(broker)
        log.info(
            "standalone: nameserver on %s, broker %s on %s",
            namesrv.address,
            config.broker_name,
            broker.address,
        )
        if demo:
            from pocketmq.cli.demo import run_demo

            demo_task = asyncio.get_running_loop().create_task(
                run_demo(namesrv.address, broker_address=broker.address, data_dir=config.data_dir)
            )
    try:
        await stop.wait()
        log.info("stop requested; finishing in-flight requests (grace %.1f s)", SHUTDOWN_GRACE_S)
    finally:
        if demo_task is not None and not demo_task.done():
            demo_task.cancel()
        await broker.stop(SHUTDOWN_GRACE_S)
    return 0
