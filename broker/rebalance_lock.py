"""RebalanceLockManager: which client of a group may consume a queue in order.

RocketMQ's ``RebalanceLockManager`` (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ). An
orderly consumer handles a queue only while it holds the queue's lock on the
queue's broker, so that two members of a group never interleave one queue's
messages during a rebalance. The table, per group::

    MessageQueue(topic, broker_name, queue_id) -> (client id, last renewed, monotonic s)

* :meth:`try_lock_batch` takes each free, expired or already-held queue for the
  caller and renews the caller's lock; it answers the queues the caller now
  holds. A lock held by another live client is left alone.
* A lock expires ``max_live_time_ms`` (RocketMQ: 60 s) after its last renewal.
  Clients renew every 20 s and treat their own copy as lost after 30 s, so an
  expired lock on the broker is never one a live client still relies on.
* :meth:`unlock_batch` releases the caller's locks; others' are kept.

There is no background task: an expired lock is taken over by the next
caller, and a group's expired locks are dropped whenever it locks. Called on
the event-loop thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.model import MessageQueue

__all__ = ["MessageQueue", "RebalanceLockManager"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _LockEntry:
    client_id: str
    renewed_at_s: float


class RebalanceLockManager:
    def __init__(self, *, max_live_time_ms: int = 60_000, clock: Clock | None = None) -> None:
        if max_live_time_ms <= 0:
            raise ValueError(f"max_live_time_ms must be positive, got {max_live_time_ms}")
        self._max_live_s = max_live_time_ms / 1000
        self._clock = clock or SystemClock()
        self._groups: dict[str, dict[MessageQueue, _LockEntry]] = {}

    def try_lock_batch(
        self, group: str, client_id: str, queues: Iterable[MessageQueue]
    ) -> list[MessageQueue]:
        """Lock what can be locked for *client_id*; the queues it holds now, in request order."""
        now = self._clock.monotonic()
        table = self._groups.setdefault(group, {})
        self._drop_expired(group, table, now)
        held: list[MessageQueue] = []
        for mq in dict.fromkeys(queues):  # de-duplicated, order kept
            entry = table.get(mq)
            if entry is None:
                table[mq] = _LockEntry(client_id, now)
            elif entry.client_id == client_id:
                entry.renewed_at_s = now
            else:
                continue  # a live lock of another client (expired ones were dropped)
            held.append(mq)
        if not table:
            del self._groups[group]
        return held

    def unlock_batch(self, group: str, client_id: str, queues: Iterable[MessageQueue]) -> int:
        """Release the caller's locks among *queues*; returns how many were released."""
        table = self._groups.get(group)
        if table is None:
            return 0
        released = 0
        for mq in queues:
            entry = table.get(mq)
            if entry is None:
                continue
            if entry.client_id != client_id:
                log.warning(
                    "group %s: client %s asked to unlock %s, held by %s; kept",
                    group,
                    client_id,
                    mq,
                    entry.client_id,
                )
                continue
            del table[mq]
            released += 1
        if not table:
            del self._groups[group]
        return released

    def holder(self, group: str, mq: MessageQueue) -> str | None:
        """The client holding a live lock on *mq* for *group*, if any."""
        entry = self._groups.get(group, {}).get(mq)
        if entry is None or self._expired(entry, self._clock.monotonic()):
            return None
        return entry.client_id

    def locked_count(self) -> int:
        return sum(len(table) for table in self._groups.values())

    def _expired(self, entry: _LockEntry, now: float) -> bool:
        return now - entry.renewed_at_s > self._max_live_s

    def _drop_expired(self, group: str, table: dict[MessageQueue, _LockEntry], now: float) -> None:
        expired = [mq for mq, entry in table.items() if self._expired(entry, now)]
        if not expired:
            return
        clients = sorted({table[mq].client_id for mq in expired})
        for mq in expired:
            del table[mq]
        log.info(
            "group %s: %d queue locks of %s expired (not renewed for %.0f s)",
            group,
            len(expired),
            ", ".join(clients),
            self._max_live_s,
        )
