"""Fixtures shared by every test directory. Keep this file small."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from pocketmq.common.runtime import grpc_fork_exec_only

grpc_fork_exec_only()  # before any test module imports grpc (common/runtime.py says why)

import waitkit  # noqa: E402

from pocketmq.common.clock import ManualClock  # noqa: E402

Eventually = Callable[..., Awaitable[Any]]

_TESTS = Path(__file__).parent
#: Directories whose session fixtures are costly (a JVM; the official clients' runtimes):
#: under pytest-xdist, each runs whole on one worker.
_ONE_WORKER_DIRS = frozenset({"spark", "compat"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Groups for ``pytest -n N --dist loadgroup`` (``dev.sh test``): a file's tests run on
    one worker, so module fixtures (a cluster, a broker) start once, and each directory
    of :data:`_ONE_WORKER_DIRS` runs on one worker. Without xdist the marks do nothing."""
    for item in items:
        parts = item.path.relative_to(_TESTS).parts
        group = parts[0] if parts[0] in _ONE_WORKER_DIRS else "/".join(parts)
        item.add_marker(pytest.mark.xdist_group(group))


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
