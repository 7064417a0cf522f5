"""How every admin command runs (:mod:`.admin_cmd`, :mod:`.message_cmd`,
:mod:`.cluster_cmd` ``list``): the options they share, an :class:`AdminClient`
for the call, their output (a table, or JSON with ``--json``) and their exit
codes (0 done, 1 a server refused or could not be reached, 2 bad usage).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from pocketmq.cli import loop_factory, print_usage_of
from pocketmq.cli.credentials import add_security_options, security_kwargs
from pocketmq.cli.errors import UsageError
from pocketmq.cli.table import dump_json
from pocketmq.client import AdminClient, ClientError
from pocketmq.client.config import DEFAULT_NAMESRV, NAMESRV_ENV, parse_namesrv
from pocketmq.common.errors import ConfigError

__all__ = ["AdminCommand", "UsageError", "add_common_options", "print_out", "run_admin"]

AdminCommand = Callable[[AdminClient, argparse.Namespace], Awaitable[int]]


def add_common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namesrv",
        default=None,
        help=f"nameserver(s) 'host:port;host:port' (default ${NAMESRV_ENV}, "
        f"then {DEFAULT_NAMESRV})",
    )
    parser.add_argument("--json", action="store_true", help="JSON instead of a table")
    parser.add_argument(
        "--timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="deadline of each call (default 5)",
    )
    add_security_options(parser)


def run_admin(fn: AdminCommand, args: argparse.Namespace) -> int:
    """Run one admin command: 0 done, 1 remote error, 2 usage (messages on stderr)."""
    command = f"pocketmq {args.command} {getattr(args, f'{args.command}_action', '')}".strip()
    try:
        namesrv = parse_namesrv(args.namesrv)
    except ConfigError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 2

    async def main() -> int:
        async with AdminClient(namesrv, timeout_s=args.timeout, **security_kwargs(args)) as admin:
            return await fn(admin, args)

    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            return runner.run(main())
    except (UsageError, ValueError, ConfigError) as exc:
        print_usage_of(args)
        print(f"{command}: {exc}", file=sys.stderr)
        return 2
    except ClientError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 1


def print_out(args: argparse.Namespace, data: Any, table: Callable[[], str]) -> None:
    print(dump_json(data) if args.json else table())
