"""What a write must reach before the broker acknowledges it, by role::

    ASYNC_FLUSH + ASYNC_MASTER   stored (in the page cache)
    SYNC_FLUSH                   ... and flushed: the group commit's future, PUT_OK
    SYNC_MASTER                  ... and held by min_sync_replicas in-sync replicas

A producer's send answers a shortfall with its status (FLUSH_DISK_TIMEOUT,
FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE: stored, not yet durable). Writes the
broker makes on a client's behalf wait the same way: the answer to a retry of
an idempotent record, a consumer's send-back copy, a named producer's epoch
record; :func:`wait_durable` is that wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any

from pocketmq.broker.store.results import PutStatus

__all__ = ["OK", "ReplicaWait", "wait_durable"]

#: after a put on a SYNC_MASTER: wait until replicas hold the log up to the offset given
#: (HaController.wait_replicated); its answer's ``value`` is "OK", "FLUSH_SLAVE_TIMEOUT"
#: or "SLAVE_NOT_AVAILABLE"
ReplicaWait = Callable[[int], Awaitable[Any]]

OK = "OK"


async def wait_durable(
    flush: Future[PutStatus] | None, end_offset: int, replica_wait: ReplicaWait | None
) -> str:
    """Until the log up to *end_offset* is as durable as the role asks: *flush* (a
    SYNC_FLUSH store's group-commit future, or None) and then *replica_wait* (a
    SYNC_MASTER's, or None). "OK", or the status of the first step that fell short:
    FLUSH_DISK_TIMEOUT (or SERVICE_NOT_AVAILABLE: the flush failed),
    FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE."""
    if flush is not None:
        flushed = await asyncio.wrap_future(flush)
        if flushed is not PutStatus.PUT_OK:
            return str(flushed.value)
    if replica_wait is not None:
        return str((await replica_wait(end_offset)).value)
    return OK
