"""VisibilityGate: consumers read only below the confirm offset (Kafka's high watermark).

In a group with a controller, a SYNC master's record is *committed* once every
member of the in-sync replica set holds it; the commit log's byte offset up to
which that is true is the **confirm offset**. A consumer that read past it
could commit a queue offset that a failover then gives to another message,
and skip that message for good (RocketMQ #7689, #6662). So reads stop there::

    consume queue units   [u0][u1][u2][u3][u4]        phys + size of each unit
    commit log            |r0|r1|r2|r3 ... confirm ▼   r3 ends past confirm
    visible               u0 u1 u2                     max_offset reports 3

- ``confirm_offset == -1``: no gate (a master alone in its set, ASYNC_MASTER,
  no controller): everything appended is visible, as before.
- Arrival notifications (long polling) for a queue are held while its new
  records are above the gate and fired when the confirm offset passes them.
- The offset is kept in ``DATA/confirm_offset`` (written with each flush
  round), so records past it stay invisible after a restart until confirmed
  again; queue offsets keep counting from each consume queue's real tail, so
  none is ever given out twice.

Pure bookkeeping on top of the consume queues: no I/O but the small file.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pocketmq.broker.store.consume_queue import ConsumeQueue

__all__ = ["VisibilityGate"]

log = logging.getLogger(__name__)

_FILE = struct.Struct(">q")  # the confirm offset; -1 = no gate


class VisibilityGate:
    def __init__(self, path: str, notify: Callable[[str, int, int], None]) -> None:
        self._path = path
        self._notify = notify
        self.confirm_offset = -1
        self._saved = -1
        self._pending: dict[tuple[str, int], ConsumeQueue] = {}
        try:
            with open(path, "rb") as f:
                raw = f.read(_FILE.size)
            if len(raw) == _FILE.size:
                self.confirm_offset = self._saved = _FILE.unpack(raw)[0]
        except FileNotFoundError:
            pass

    @property
    def on(self) -> bool:
        return self.confirm_offset >= 0

    def visible_max(self, cq: ConsumeQueue) -> int:
        """The queue offset of the first unit not wholly below the gate (cq max without one)."""
        hi = cq.max_offset
        gate = self.confirm_offset
        if gate < 0 or hi <= cq.min_offset:
            return hi
        last = cq.get(hi - 1)
        if last is None or last[0] + last[1] <= gate:
            return hi
        lo = cq.min_offset  # binary search: units are in commit-log order
        while lo < hi:
            mid = (lo + hi) // 2
            unit = cq.get(mid)
            if unit is not None and unit[0] + unit[1] <= gate:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def arrived(self, topic: str, queue_id: int, cq: ConsumeQueue) -> bool:
        """New records in *cq*; True when the caller should notify now (no gate)."""
        if not self.on:
            return True
        self._pending[(topic, queue_id)] = cq
        return False

    def advance(self, offset: int) -> None:
        """The confirm offset moved to *offset* (never backwards while on)."""
        if offset <= self.confirm_offset:
            return
        self.confirm_offset = offset
        for key, cq in list(self._pending.items()):
            visible = self.visible_max(cq)
            if visible >= cq.max_offset:
                del self._pending[key]
            self._notify(key[0], key[1], visible)

    def turn_on(self, offset: int) -> None:
        """Gate reads at *offset* from now (a SYNC master with replicas in its set).

        Saved at once, not with the next flush round: a broker killed in between would
        come back ungated and show records its replicas never got."""
        if not self.on:
            self.confirm_offset = offset
            self.save()
            log.info("reads are gated at commit-log offset %d (the confirm offset)", offset)

    def turn_off(self) -> None:
        """Everything appended is visible (a master alone in its set, ASYNC_MASTER)."""
        if self.on:
            self.confirm_offset = -1
            for (topic, queue_id), cq in self._pending.items():
                self._notify(topic, queue_id, cq.max_offset)
            self._pending.clear()

    def cut(self, point: int) -> None:
        """The log was truncated at *point*: the gate cannot stand above it."""
        if self.on and self.confirm_offset > point:
            self.confirm_offset = point

    def save(self) -> None:
        """Persist when changed (called by the flush round; a write and an fsync)."""
        if self.confirm_offset == self._saved:
            return
        tmp = self._path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(_FILE.pack(self.confirm_offset))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)
        self._saved = self.confirm_offset
