"""``pocketmq`` as a person types it: the installed command run as a subprocess.

``await pocketmq(*args)`` runs ``.venv/bin/pocketmq --log-level WARNING ARGS``
without blocking the event loop (so in-process servers keep answering) and
returns a :class:`CliRun`, which unpacks as ``code, out, err``. ``quiet=False``
leaves the command's own log level; ``env`` replaces the environment;
``stdin`` is written and closed. ``pocketmq_sync`` is the same for a test
without an event loop. A command still running after *timeout_s* is killed.
``await pocketmq_main(capsys, *args)`` runs the command's ``main`` in this
process instead (faster; its output through pytest's ``capsys``).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

__all__ = ["POCKETMQ", "CliRun", "pocketmq", "pocketmq_main", "pocketmq_sync"]

POCKETMQ = str(Path(sys.executable).with_name("pocketmq"))  # .venv/bin/pocketmq


class CliRun(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


def _argv(args: tuple[str, ...], quiet: bool) -> list[str]:
    return [POCKETMQ, *(["--log-level", "WARNING"] if quiet else []), *args]


async def pocketmq(
    *args: str,
    stdin: bytes = b"",
    env: Mapping[str, str] | None = None,
    timeout_s: float = 60.0,
    quiet: bool = True,
) -> CliRun:
    """Run ``pocketmq ARGS``: (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        *_argv(args, quiet),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=None if env is None else dict(env),
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout_s)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return CliRun(proc.returncode, out.decode(), err.decode())


def pocketmq_sync(
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 120.0,
    quiet: bool = False,
) -> CliRun:
    """The same, blocking this thread (a test with no event loop)."""
    done = subprocess.run(
        _argv(args, quiet),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=None if env is None else dict(env),
        stdin=subprocess.DEVNULL,
    )
    return CliRun(done.returncode, done.stdout, done.stderr)


async def pocketmq_main(capsys: Any, *args: str, quiet: bool = True) -> CliRun:
    """``pocketmq ARGS`` in this process, its output taken from pytest's *capsys*.

    ``main`` runs in a thread (it runs an event loop of its own), so in-process
    servers keep answering; an argparse usage error is its exit code.
    """
    from pocketmq.cli import main

    capsys.readouterr()

    def call() -> int:
        try:
            return main(_argv(args, quiet)[1:])
        except SystemExit as exc:  # argparse's usage errors
            return int(exc.code or 0)

    code = await asyncio.to_thread(call)
    out, err = capsys.readouterr()
    return CliRun(code, out, err)
