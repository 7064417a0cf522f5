"""TimerCheckpoint: how far the timer is durable, ``DATA/timercheck``.

RocketMQ 5's ``TimerCheckpoint`` (``lastReadTimeMs``, ``lastTimerLogFlushPos``,
``lastTimerQueueOffset``). One 4 KiB page, rewritten in place and synced
after every timer flush round, big-endian (``LAYOUT``)::

    ┌───────────────┬──────────────────────┬──────────────────────┐
    │ cursor_second │ timerlog_flushed_pos │ enqueue_queue_offset │
    │ i64           │ i64                  │ i64                  │
    └───────────────┴──────────────────────┴──────────────────────┘
     0               8                      16                     24
    ┌────────────┬─────────────┬───────┐
    │ written_ms │ wheel_slots │ crc   │
    │ i64        │ i32         │ u32   │
    └────────────┴─────────────┴───────┘
     24           32            36      40
     ... zero up to 4096

    cursor_second         every wheel second before it is delivered: its messages are re-put
                          into their topics (with synchronous flush, durably)
    timerlog_flushed_pos  timer-log bytes durable; the wheel file covers every unit below it
    enqueue_queue_offset  next offset of rmq_sys_wheel_timer queue 0 to turn into a unit; every
                          record below it has its unit below timerlog_flushed_pos
    written_ms            broker clock at the write (for logs)
    wheel_slots           the wheel's slot count when written
    crc                   zlib CRC-32 of bytes 0..36: a torn or damaged page is ignored

Each value is written only after what it describes is durable, and moves
only forward; a page that fails its CRC reads as no checkpoint at all.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from pocketmq.broker.store.checkpoint import CrcPage

__all__ = ["LAYOUT", "TimerCheckpoint", "TimerCheckpointFile"]

LAYOUT = struct.Struct(">qqqqi")  # the five fields above, before the CRC


@dataclass(frozen=True, slots=True, kw_only=True)
class TimerCheckpoint:
    cursor_second: int
    timerlog_flushed_pos: int
    enqueue_queue_offset: int
    written_ms: int
    wheel_slots: int


class TimerCheckpointFile:
    def __init__(self, path: str) -> None:
        self.path = path
        self._page = CrcPage(path, LAYOUT, "timer checkpoint")

    def read(self) -> TimerCheckpoint | None:
        """The stored checkpoint, or None when it is missing or fails its CRC."""
        fields = self._page.read()
        if fields is None:
            return None
        cursor, flushed, enqueued, written, slots = fields
        return TimerCheckpoint(
            cursor_second=cursor,
            timerlog_flushed_pos=flushed,
            enqueue_queue_offset=enqueued,
            written_ms=written,
            wheel_slots=slots,
        )

    def write(self, cp: TimerCheckpoint) -> None:
        """Write and sync *cp* in place (one page: the write is atomic)."""
        self._page.write(
            cp.cursor_second,
            cp.timerlog_flushed_pos,
            cp.enqueue_queue_offset,
            cp.written_ms,
            cp.wheel_slots,
        )

    def exists(self) -> bool:
        return os.path.exists(self.path)
