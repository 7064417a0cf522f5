"""How much the ``pocketmq`` command logs, and where gRPC's own log lines go.

Two kinds of command share one entry point:

* **servers** (``nameserver``, ``broker``, ``standalone``, ``cluster up``) run
  for days and their log is their record: INFO by default;
* **clients** (``send``, ``consume``, ``topic ...``, ``bench``, ``store ...``)
  print their result on stdout; their log is for trouble: WARNING by default,
  ``-v`` for INFO, ``-vv`` for DEBUG.

``--log-level`` (or ``$POCKETMQ_LOG_LEVEL``) overrides both. A server command's
function is decorated with :func:`server_command`.

gRPC's C core logs on its own (``E1126 ... add_port.cc:81] ...``) before the
Python code gets the error it explains better. :func:`quiet_grpc_core` sets
``GRPC_VERBOSITY`` to ``NONE``, or to ``ERROR`` when DEBUG logging is asked
for, unless the environment already says. gRPC reads it when ``grpc`` is
imported, before the command line is parsed, so the entry point calls it with
the level :func:`level_from_argv` finds in the raw arguments.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])

__all__ = [
    "LOG_LEVEL_ENV",
    "add_logging_options",
    "configure_logging",
    "is_server_command",
    "level_from_argv",
    "quiet_grpc_core",
    "resolve_level",
    "security_summary",
    "server_command",
]

LOG_LEVEL_ENV = "POCKETMQ_LOG_LEVEL"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_SERVER_COMMANDS: set[Callable[..., Any]] = set()


def server_command(func: _F) -> _F:
    """Mark a sub-command's function as a server's: it logs INFO by default."""
    _SERVER_COMMANDS.add(func)
    return func


def is_server_command(func: Callable[..., Any] | None) -> bool:
    return func in _SERVER_COMMANDS


def add_logging_options(parser: object) -> None:
    """``--log-level`` and ``-v/--verbose`` on the top-level parser."""
    parser.add_argument(  # type: ignore[attr-defined]
        "--log-level",
        default=None,
        type=str.upper,
        choices=_LEVELS,
        metavar="LEVEL",
        help=f"logging level: {', '.join(_LEVELS)} (default: INFO for servers, WARNING "
        f"for clients; env {LOG_LEVEL_ENV})",
    )
    parser.add_argument(  # type: ignore[attr-defined]
        "-v", "--verbose", action="count", default=0, help="more log lines: -v INFO, -vv DEBUG"
    )


def resolve_level(*, flag: str | None, verbose: int, server: bool, env: str | None = None) -> int:
    """The logging level: ``--log-level``, then ``-v``, then the env, then the default."""
    if flag:
        return int(logging.getLevelName(flag.upper()))
    if verbose:
        return logging.DEBUG if verbose > 1 else logging.INFO
    env = os.environ.get(LOG_LEVEL_ENV, "") if env is None else env
    if env.strip().upper() in _LEVELS:
        return int(logging.getLevelName(env.strip().upper()))
    return logging.INFO if server else logging.WARNING


def quiet_grpc_core(level: int) -> None:
    """``GRPC_VERBOSITY``: NONE unless DEBUG logging (then ERROR); the env wins."""
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR" if level <= logging.DEBUG else "NONE")


def level_from_argv(argv: Sequence[str]) -> int:
    """The level the raw command line asks for (``--log-level X``, ``-v``), before parsing;
    INFO when it says nothing (only DEBUG or not matters to :func:`quiet_grpc_core`)."""
    flag: str | None = None
    verbose = 0
    for i, arg in enumerate(argv):
        if arg == "--log-level" and i + 1 < len(argv):
            flag = argv[i + 1]
        elif arg.startswith("--log-level="):
            flag = arg.partition("=")[2]
        elif arg == "--verbose" or (arg.startswith("-v") and set(arg[1:]) == {"v"}):
            verbose += 1 if arg == "--verbose" else len(arg) - 1
    if flag is not None and flag.upper() not in _LEVELS:
        flag = None
    return resolve_level(flag=flag, verbose=verbose, server=True)


def configure_logging(level: int) -> None:
    """Log records at *level* and above to stderr, one line each."""
    logging.basicConfig(level=level, format=FORMAT, stream=sys.stderr)


def security_summary(*, tls: bool, client_auth: bool, acl_file: str | None) -> str:
    """How a server admits clients, for its start-up line: ``"TLS on (client certificates
    required), ACL on (conf/acl.toml)"`` or ``"TLS off, ACL off"``."""
    tls_text = (
        "TLS on (client certificates required)"
        if tls and client_auth
        else "TLS on"
        if tls
        else "TLS off"
    )
    return f"{tls_text}, " + (f"ACL on ({acl_file})" if acl_file is not None else "ACL off")
