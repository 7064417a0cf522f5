"""How a server command waits to be stopped: until SIGTERM or SIGINT (Ctrl-C).

``pocketmq nameserver``, ``broker``, ``standalone`` and ``dashboard`` each start
their server, ``await until_stop_signal()``, then stop it (gracefully) in a
``finally``. The handlers are the event loop's, so they are removed again when
the wait ends, however it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator

__all__ = ["STOP_SIGNALS", "stop_signals", "until_stop_signal"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def stop_signals(event: asyncio.Event) -> Iterator[asyncio.Event]:
    """Sets *event* on SIGTERM or SIGINT while the block runs."""
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, event.set)
    try:
        yield event
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)


async def until_stop_signal() -> None:
    """Returns when the process is sent SIGTERM or SIGINT."""
    with stop_signals(asyncio.Event()) as stop_requested:
        await stop_requested.wait()
