"""How a server command waits to be stopped: until SIGTERM or SIGINT (Ctrl-C).

``pocketmq nameserver``, ``broker``, ``standalone`` and ``dashboard`` each enter
:func:`stop_signals` *before* they start their server (a server answers, and a
supervisor may signal it, before its ``start()`` returns: the signal then stops
it gracefully once started rather than killing it), await the event, then stop
the server (gracefully) in a ``finally``. The handlers are the event loop's, so
they are removed again when the block ends, however it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator

__all__ = ["STOP_SIGNALS", "stop_signals"]

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
