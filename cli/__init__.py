"""The ``pocketmq`` command.

Each group of sub-commands lives in a module of its own that exposes
``register(subparsers)``; the module adds its parsers and sets ``func`` on each
to a callable taking the parsed namespace and returning an exit code.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from pocketmq.common.logsetup import (
    add_logging_options,
    configure_logging,
    is_server_command,
    level_from_argv,
    quiet_grpc_core,
    resolve_level,
)
from pocketmq.common.runtime import grpc_fork_exec_only

grpc_fork_exec_only()  # before any command module imports grpc (common/runtime.py says why)
quiet_grpc_core(level_from_argv(sys.argv[1:]))  # likewise (common/logsetup.py says why)

__all__ = ["loop_factory", "main", "print_usage_of"]

# Modules that contribute sub-commands, in the order `--help` lists them.
_COMMAND_MODULES = (
    "pocketmq.cli.nameserver_cmd",
    "pocketmq.cli.broker_cmd",
    "pocketmq.cli.store_cmd",
    "pocketmq.cli.client_cmd",
    "pocketmq.cli.admin_cmd",  # after broker_cmd: adds `pocketmq broker status|config`
    "pocketmq.cli.cluster_cmd",
    "pocketmq.cli.bench_cmd",
    "pocketmq.cli.pipeline_cmd",  # Spark itself is imported only when a pipeline runs
    "pocketmq.cli.dashboard_cmd",
)


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop for ``asyncio.Runner``, or None (the default loop) without it."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        return None
    return uvloop.new_event_loop


class CliParser(argparse.ArgumentParser):
    """An ArgumentParser that remembers the innermost sub-command parser it ran, so that
    a stray argument is reported with that sub-command's usage, not the top level's."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, extras = super().parse_known_args(args, namespace)
        if not hasattr(parsed, "_cli_parser"):
            parsed._cli_parser = self
        return parsed, extras


def print_usage_of(args: argparse.Namespace) -> None:
    """The usage line of the sub-command *args* came from (before a usage error)."""
    parser = getattr(args, "_cli_parser", None)
    if parser is not None:
        parser.print_usage(sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    from pocketmq import __version__

    parser = CliParser(prog="pocketmq", description="PocketMQ: RocketMQ's architecture in Python.")
    parser.add_argument("--version", action="version", version=f"pocketmq {__version__}")
    add_logging_options(parser)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:  # exits 2 with the usage of the sub-command that was given them
        getattr(args, "_cli_parser", parser).error(f"unrecognized arguments: {' '.join(extras)}")
    func = getattr(args, "func", None)
    configure_logging(
        resolve_level(flag=args.log_level, verbose=args.verbose, server=is_server_command(func))
    )
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `pocketmq ... | head`: the reader left. Quietly, like cat: no traceback now, and
        # none when Python flushes stdout at exit (it would write to the closed pipe again).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
