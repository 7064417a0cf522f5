"""A child watcher for asyncio subprocesses that starts no thread (for Python 3.11).

Python 3.11 watches each child an ``asyncio.create_subprocess_exec`` starts with a
thread of its own, blocked in ``waitpid`` (``ThreadedChildWatcher``). A suite run
hung for pytest's whole 120 s timeout inside that thread's ``Thread.start()``:
the test's thread waited for the new thread's start signal while the new thread
stood already in ``waitpid`` (``tests/fault/test_consumer_kill.py``, spawning a
broker; seen once). Python 3.12 made a pidfd watcher the default where the kernel
has ``pidfd_open`` (Linux 5.3 and later): the running event loop watches the
child's pidfd, which becomes readable when the child exits, and reaps it then::

    add_child_handler(pid) ─ pidfd_open(pid) ─ loop.add_reader(pidfd)
    child exits ─ pidfd readable ─ waitpid(pid) ─ callback(pid, exit code)

:func:`install` puts that watcher in place for the suite on 3.11, where the
kernel allows it; on 3.12 and later, or without pidfd, asyncio's default stays.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["PidfdChildWatcher", "install"]

log = logging.getLogger(__name__)


class PidfdChildWatcher(asyncio.AbstractChildWatcher):
    """Each child reaped by the loop that was running when it was started."""

    def __init__(self) -> None:
        self._children: dict[int, tuple[int, asyncio.AbstractEventLoop]] = {}

    def __enter__(self) -> PidfdChildWatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def is_active(self) -> bool:
        return True

    def attach_loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Nothing to attach: a child is watched by the loop running when it is added."""

    def close(self) -> None:
        for pid in list(self._children):
            self.remove_child_handler(pid)

    def add_child_handler(self, pid: int, callback: Callable[..., object], *args: Any) -> None:
        self._forget_closed_loops()
        loop = asyncio.get_running_loop()
        pidfd = os.pidfd_open(pid)
        self._children[pid] = (pidfd, loop)
        loop.add_reader(pidfd, self._reap, pid, callback, args)

    def remove_child_handler(self, pid: int) -> bool:
        child = self._children.pop(pid, None)
        if child is None:
            return False
        pidfd, loop = child
        if not loop.is_closed():
            loop.remove_reader(pidfd)
        os.close(pidfd)
        return True

    def _reap(self, pid: int, callback: Callable[..., object], args: tuple[Any, ...]) -> None:
        self.remove_child_handler(pid)
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            # reaped by someone else: its exit code is lost (asyncio answers 255 too)
            log.warning("child process %d was reaped elsewhere; its exit code is unknown", pid)
            code = 255
        else:
            code = os.waitstatus_to_exitcode(status)
        callback(pid, code, *args)

    def _forget_closed_loops(self) -> None:
        """Children of a test whose loop is gone: close their pidfds, reap any that
        exited (a test that left a child running leaves it to its own cleanup)."""
        for pid, (_pidfd, loop) in list(self._children.items()):
            if loop.is_closed():
                self.remove_child_handler(pid)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)


def install() -> bool:
    """Use :class:`PidfdChildWatcher` for asyncio subprocesses; True if it was put in place."""
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # an older kernel, or a sandbox that refuses it
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.set_child_watcher(PidfdChildWatcher())
    return True
