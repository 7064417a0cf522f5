"""Dispatch around a put: space reserved before the append, catch-up after a failure.

A put goes ``prepare ─ CommitLog.append_batch ─ dispatch``. :func:`prepare_batch`
runs first and creates every consume-queue file and reserves every block the
dispatch will write (units of each queue the batch feeds, index entries of its
keys). A full disk therefore refuses the batch whole, before one byte of it is
in the commit log; the dispatch that follows an append has nothing left that
can run out of space. Consume-queue files are sparse, so "reserve" means
``fallocate`` of the pages the units land in (:meth:`MappedFile.reserve`).

Should a dispatch fail anyway (an I/O error, a disk filled by another process
between reserve and write is not one: reserved blocks stay ours), the batch
is in the commit log and is acknowledged; the store stops accepting puts and
:class:`DispatchCatchUp` re-dispatches the log from the last dispatched offset
(as recovery does, idempotently) with a back-off, until it succeeds. Then puts
are accepted again and long polls hear of the new messages.
"""

from __future__ import annotations

import errno
import logging
import time
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from pocketmq.broker.store.batch import ScannedBatch

if TYPE_CHECKING:
    from pocketmq.broker.store.message_store import DefaultMessageStore

__all__ = ["DispatchCatchUp", "prepare_batch"]

log = logging.getLogger(__name__)

_FIRST_RETRY_S = 0.05
_MAX_RETRY_S = 5.0


def prepare_batch(store: DefaultMessageStore, batch: ScannedBatch) -> str | None:
    """Create and reserve what dispatching *batch* needs; None, or why it cannot.

    An ``OSError`` other than ENOSPC is raised (the caller turns the store read-only).
    """
    queue_offsets = store.commitlog.queue_offsets
    queue: tuple[str, int] | None = None  # the one being prepared, for a refusal's words
    cq = None
    try:
        for queue, count in _queue_counts(batch.topics, batch.queue_ids):
            cq = None
            cq = store.consume_queues.find_or_create(*queue)
            cq.prepare(queue_offsets.get(queue, 0), count)
        queue = None
        if store.config.message_index_enable:
            store.index.prepare(sum(map(len, batch.keys)))
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        if queue is None:
            what = f"index in {store.index.directory}"
        else:
            where = cq.directory if cq is not None else store.consume_queues.root_dir
            what = f"consume queue {queue[0]}:{queue[1]} in {where}"
        return f"disk full: cannot reserve space for the {what} ({exc.strerror})"
    return None


def _queue_counts(topics: list[str], queue_ids: list[int]) -> Iterable[tuple[tuple[str, int], int]]:
    """``((topic, queue_id), records)`` per queue of a batch, in first-seen order.

    A batch usually feeds one queue (a producer's SendBatch), or queues of one topic:
    ``list.count`` sees that without a Python step per record, and the queues of one
    topic are counted without a tuple per record."""
    n = len(topics)
    if n and topics.count(topics[0]) == n:
        topic = topics[0]
        if queue_ids.count(queue_ids[0]) == n:
            return (((topic, queue_ids[0]), n),)
        return [((topic, queue_id), count) for queue_id, count in Counter(queue_ids).items()]
    return Counter(zip(topics, queue_ids, strict=True)).items()


class DispatchCatchUp:
    """Re-dispatches the commit log after a failed dispatch, with a back-off."""

    def __init__(self, store: DefaultMessageStore) -> None:
        self._store = store
        self.behind_reason = ""  # why dispatch stopped; "" while it keeps up
        self._delay_s = _FIRST_RETRY_S
        self._next_try = 0.0
        self.failures = 0

    @property
    def behind(self) -> bool:
        return bool(self.behind_reason)

    def stopped(self, exc: OSError) -> None:
        """Dispatch failed at the store's dispatched offset; retry from there."""
        store = self._store
        self.behind_reason = (
            f"dispatch to consume queues and index stopped at commit-log "
            f"offset {store.dispatched_offset}: {exc.strerror or exc} "
            f"(errno {exc.errno}); it resumes once space is back"
        )
        self.failures += 1
        self._delay_s = _FIRST_RETRY_S
        self._next_try = time.monotonic() + self._delay_s
        log.error("%s", self.behind_reason)

    def run_once(self, *, force: bool = False) -> bool:
        """Try to catch up (when the back-off allows, or *force*); True when caught up."""
        if not self.behind:
            return True
        if not force and time.monotonic() < self._next_try:
            return False
        from pocketmq.broker.store.recovery import redispatch_range

        store = self._store
        start, end = store.dispatched_offset, store.commitlog.max_offset
        before = {
            (cq.topic, cq.queue_id): cq.max_offset for cq in store.consume_queues.all_queues()
        }
        try:
            redispatch_range(store, start, end)
        except OSError as exc:
            self._delay_s = min(self._delay_s * 2, _MAX_RETRY_S)
            self._next_try = time.monotonic() + self._delay_s
            log.warning(
                "dispatch still behind at %d: %s; next try in %.2f s", start, exc, self._delay_s
            )
            return False
        store.dispatched_offset = end
        self.behind_reason = ""
        log.warning("dispatch caught up: commit log [%d, %d) dispatched again", start, end)
        for cq in store.consume_queues.all_queues():
            if cq.max_offset != before.get((cq.topic, cq.queue_id), 0):
                store.notify_arrival(cq.topic, cq.queue_id, cq.max_offset)
        return True
