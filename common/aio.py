"""Small asyncio helpers shared by the broker's and the client's background tasks:
waiting for a wake-up and stopping a task, both safe against a swallowed cancel."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

__all__ = ["CANCEL_WAIT_S", "cancel_and_wait", "wait_event"]

log = logging.getLogger(__name__)

CANCEL_WAIT_S = 5.0


async def wait_event(event: asyncio.Event, timeout_s: float) -> None:
    """Wait until *event* is set or *timeout_s* passes, whichever is first.

    ``asyncio.timeout`` rather than ``wait_for``: on Python 3.11, ``wait_for``
    swallows a cancellation that arrives just as the event is set, which leaves
    a periodic loop running after its owner cancelled it to stop.
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            await event.wait()


async def cancel_and_wait(
    *tasks: asyncio.Task[Any] | None, timeout_s: float = CANCEL_WAIT_S
) -> None:
    """Cancel *tasks* and wait up to *timeout_s* for them to end."""
    live = [t for t in tasks if t is not None and not t.done()]
    if not live:
        return
    for task in live:
        task.cancel()
    done, stuck = await asyncio.wait(live, timeout=timeout_s)
    for task in stuck:
        log.error(
            "task %s did not stop within %.0f s of being cancelled", task.get_name(), timeout_s
        )
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            log.warning("task %s ended with %r", task.get_name(), task.exception())
