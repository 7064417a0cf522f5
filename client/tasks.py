"""Owning background tasks: cancel them and wait, without ever hanging shutdown.

gRPC's asyncio calls sometimes absorb a task's cancellation (the call ends
with a CANCELLED status or simply stops) instead of raising CancelledError
into the task. Loops that run RPCs call :func:`raise_if_cancelling` after
such an ending, and :func:`cancel_and_wait` bounds the wait so one stuck task
is logged instead of blocking ``shutdown()`` forever.
"""

from __future__ import annotations

import asyncio

from pocketmq.common.aio import CANCEL_WAIT_S, cancel_and_wait, wait_event

__all__ = ["CANCEL_WAIT_S", "cancel_and_wait", "raise_if_cancelling", "wait_event"]


def raise_if_cancelling() -> None:
    """Re-raise a cancellation of the current task that an RPC swallowed."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
