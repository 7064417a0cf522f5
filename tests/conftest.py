"""Fixtures shared by every test directory. Keep this file small."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from pocketmq.common.runtime import grpc_fork_exec_only

grpc_fork_exec_only()  # before any test module imports grpc (common/runtime.py says why)

import childwatch  # noqa: E402
import waitkit  # noqa: E402

from pocketmq.common.clock import ManualClock  # noqa: E402

childwatch.install()  # asyncio subprocesses watched by pidfd, not a thread each (3.11)

Eventually = Callable[..., Awaitable[Any]]


@pytest.fixture
def manual_clock() -> ManualClock:
    """A clock the test moves with ``advance(seconds)``."""
    return ManualClock()


@pytest.fixture
def eventually() -> Eventually:
    """``await eventually(predicate, timeout_s=5, what="...")``: poll until truthy.

    The way to wait for a condition another task or process brings about: a
    deadline instead of a fixed sleep. *predicate* may be sync or async; its
    truthy result is returned. Raises AssertionError naming *what* on timeout.
    Outside a test function, import it: ``from waitkit import eventually``.
    """
    return waitkit.eventually
