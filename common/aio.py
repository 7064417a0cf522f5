"""Small asyncio helpers shared by the broker's and the client's background loops."""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["wait_event"]


async def wait_event(event: asyncio.Event, timeout_s: float) -> None:
    """Wait until *event* is set or *timeout_s* passes, whichever is first.

    ``asyncio.timeout`` rather than ``wait_for``: on Python 3.11, ``wait_for``
    swallows a cancellation that arrives just as the event is set, which leaves
    a periodic loop running after its owner cancelled it to stop.
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            await event.wait()
