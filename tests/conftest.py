"""Fixtures shared by every test directory. Keep this file small."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from pocketmq.common.runtime import grpc_fork_exec_only

grpc_fork_exec_only()  # before any test module imports grpc (common/runtime.py says why)

from pocketmq.common.clock import ManualClock  # noqa: E402

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
    """

    async def wait(
        predicate: Callable[[], Any],
        *,
        timeout_s: float = 5.0,
        interval_s: float = 0.01,
        what: str = "condition",
    ) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            result = predicate()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return result
            if time.monotonic() >= deadline:
                raise AssertionError(f"{what} did not hold within {timeout_s} s")
            await asyncio.sleep(interval_s)

    return wait
