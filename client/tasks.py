"""Owning background tasks: cancel them and wait, without ever hanging shutdown.

gRPC's asyncio calls sometimes absorb a task's cancellation (the call ends
with a CANCELLED status or simply stops) instead of raising CancelledError
into the task. Loops that run RPCs call :func:`raise_if_cancelling` after
such an ending, and :func:`cancel_and_wait` bounds the wait so one stuck task
is logged instead of blocking ``shutdown()`` forever.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pocketmq.common.aio import wait_event

__all__ = ["CANCEL_WAIT_S", "cancel_and_wait", "raise_if_cancelling", "wait_event"]

log = logging.getLogger(__name__)

CANCEL_WAIT_S = 5.0


def raise_if_cancelling() -> None:
    """Re-raise a cancellation of the current task that an RPC swallowed."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def cancel_and_wait(*tasks: asyncio.Task[Any] | None,
                          timeout_s: float = CANCEL_WAIT_S) -> None:
    """Cancel *tasks* and wait up to *timeout_s* for them to end."""
    live = [t for t in tasks if t is not None and not t.done()]
    if not live:
        return
    for task in live:
        task.cancel()
    done, stuck = await asyncio.wait(live, timeout=timeout_s)
    for task in stuck:
        log.error("task %s did not stop within %.0f s of being cancelled", task.get_name(),
                  timeout_s)
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            log.warning("task %s ended with %r", task.get_name(), task.exception())
