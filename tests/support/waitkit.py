"""Waiting in tests: poll a condition until it holds or a deadline passes, never a fixed sleep.

``await eventually(predicate, timeout_s=5, what="...")`` (the ``eventually``
fixture of tests/conftest.py is this function) and ``eventually_sync`` for
tests that run no event loop (Spark, the browser tests). *predicate* may return
an awaitable (async form only); its first truthy result is returned. On the
deadline an AssertionError names *what*.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

__all__ = ["eventually", "eventually_sync"]


async def eventually(
    predicate: Callable[[], Any],
    *,
    timeout_s: float = 5.0,
    interval_s: float = 0.01,
    what: str = "condition",
) -> Any:
    """The first truthy result of *predicate* (sync or async), polled every *interval_s*."""
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


def eventually_sync(
    predicate: Callable[[], Any],
    *,
    timeout_s: float = 5.0,
    interval_s: float = 0.05,
    what: str = "condition",
) -> Any:
    """The same for a test without an event loop: blocks this thread between polls."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} did not hold within {timeout_s} s")
        time.sleep(interval_s)
