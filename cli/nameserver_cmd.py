"""``pocketmq nameserver``: run one nameserver until SIGTERM or SIGINT.

Configuration is NamesrvConfig's keys, from ``--config FILE`` (TOML, top-level
keys) and then flags, which win. A configuration error prints its message and
exits 2; a port that cannot be bound exits 1; a graceful stop exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Any

from pocketmq.cli import loop_factory
from pocketmq.cli.serve import stop_signals
from pocketmq.common.configfile import add_config_flags, load_config
from pocketmq.common.errors import ConfigError
from pocketmq.common.logsetup import server_command
from pocketmq.common.runtime import freeze_startup_objects
from pocketmq.nameserver import NameServer, NamesrvConfig, ServerBindError

__all__ = ["register"]

logger = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "nameserver",
        help="run a nameserver (topic routes and broker liveness)",
        description="Run a PocketMQ nameserver. Brokers register with every nameserver; "
        "clients ask any one for routes. Stops gracefully on SIGTERM/SIGINT.",
    )
    parser.add_argument(
        "--config", metavar="FILE", help="TOML file of nameserver keys (flags override it)"
    )
    add_config_flags(parser, NamesrvConfig)
    parser.add_argument(
        "--controller",
        dest="controller_enable",
        action="store_const",
        const=True,
        default=None,
        help="run the controller here (same as --controller-enable)",
    )
    parser.set_defaults(func=_run)


@server_command
def _run(args: argparse.Namespace) -> int:
    try:
        config = load_config(NamesrvConfig, toml_path=args.config, args=args)
    except ConfigError as exc:
        print(f"pocketmq nameserver: {exc}", file=sys.stderr)
        return 2
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(_serve(config))


async def _serve(config: NamesrvConfig) -> int:
    with stop_signals(asyncio.Event()) as stop:  # from before start: a SIGTERM while
        return await _serve_until(config, stop)  # starting stops it once started


async def _serve_until(config: NamesrvConfig, stop: asyncio.Event) -> int:
    server = NameServer(config)
    try:
        await server.start()
    except ServerBindError as exc:
        print(f"pocketmq nameserver: {exc}", file=sys.stderr)
        return 1
    freeze_startup_objects()
    try:
        await stop.wait()
        logger.info(
            "stop requested; finishing in-flight requests (grace %.1f s)",
            config.shutdown_grace_seconds,
        )
    finally:
        await server.stop()
    return 0
