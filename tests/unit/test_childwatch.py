"""The suite's asyncio subprocesses are reaped through their pidfds, no thread each."""

from __future__ import annotations

import asyncio
import signal
import sys
import threading

import childwatch
import pytest

pytestmark = pytest.mark.skipif(
    sys.version_info >= (3, 12), reason="Python 3.12 and later watch children by pidfd already"
)


def _watcher() -> asyncio.AbstractChildWatcher:
    watcher = asyncio.get_child_watcher()
    if not isinstance(watcher, childwatch.PidfdChildWatcher):
        pytest.skip("this kernel has no pidfd_open: asyncio's own watcher is in place")
    return watcher


async def test_a_child_s_exit_code_and_its_kill_reach_the_test_with_no_waitpid_thread():
    _watcher()
    done = await asyncio.create_subprocess_exec(sys.executable, "-c", "raise SystemExit(3)")
    assert await asyncio.wait_for(done.wait(), 30) == 3
    sleeper = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import time; time.sleep(60)"
    )
    assert not [t.name for t in threading.enumerate() if "waitpid" in t.name]
    sleeper.kill()
    assert await asyncio.wait_for(sleeper.wait(), 30) == -signal.SIGKILL


def test_children_of_a_closed_loop_are_forgotten_at_the_next_child():
    watcher = _watcher()
    other = asyncio.new_event_loop()
    try:
        proc = other.run_until_complete(
            asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
        )
        other.run_until_complete(proc.wait())
        running = other.run_until_complete(
            asyncio.create_subprocess_exec(sys.executable, "-c", "import time; time.sleep(60)")
        )
    finally:
        other.close()
    assert running.pid in watcher._children
    running.kill()

    async def next_child() -> int:
        child = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
        assert running.pid not in watcher._children, "its pidfd was closed with its loop gone"
        return await asyncio.wait_for(child.wait(), 30)

    assert asyncio.run(next_child()) == 0
