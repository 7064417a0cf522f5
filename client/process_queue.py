"""ProcessQueue: the messages of one assigned queue between pull and done.

RocketMQ's ``ProcessQueue``. Pulled messages are added in offset order and
removed when their handler finished (in any order, with concurrent
handling). Two numbers come out of it:

* the *committed offset*: the smallest offset still in flight, or, when
  nothing is, the offset the next pull starts from. Committing it never skips
  a message that was not handled; after a crash or a rebalance the messages
  between it and what was really handled are delivered again (at least once).
* the *flow-control state*: a queue holding more than ``max_messages``
  (1,000) or ``max_bytes`` (100 MiB) of messages, or (concurrent handling)
  spanning more than ``max_span`` (2,000) offsets, pauses its pull loop until
  handlers catch up. :meth:`wait_for_room` waits on an event, not a timer.

Offsets in flight are kept in a deque beside a dict, with lazy deletion, so
adding, removing and finding the smallest are all O(1) amortised.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable

from pocketmq.client.model import MessageExt, MessageQueue

__all__ = ["ProcessQueue"]

DEFAULT_MAX_MESSAGES = 1000  # pullThresholdForQueue
DEFAULT_MAX_BYTES = 100 * 1024 * 1024  # pullThresholdSizeForQueue, MiB
DEFAULT_MAX_SPAN = 2000  # consumeConcurrentlyMaxSpan


class ProcessQueue:
    def __init__(
        self,
        queue: MessageQueue,
        *,
        next_offset: int,
        max_messages: int = DEFAULT_MAX_MESSAGES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_span: int | None = DEFAULT_MAX_SPAN,
    ) -> None:
        self.queue = queue
        self.next_offset = next_offset  # where the next pull starts
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.max_span = max_span  # None = no span limit (orderly, lite pull)
        self.dropped = False
        self.locked = False  # orderly: the broker lock is held
        self.lock_expires_at_s = 0.0
        self.consuming = False  # orderly: a batch is with the handler
        self._msgs: dict[int, MessageExt] = {}
        self._order: deque[int] = deque()
        self._bytes = 0
        self._room = asyncio.Event()
        self._room.set()
        self._changed = asyncio.Event()

    # -- state --------------------------------------------------------------------------
    @property
    def count(self) -> int:
        return len(self._msgs)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._msgs)

    @property
    def committed_offset(self) -> int:
        """The smallest offset in flight, else where the next pull starts."""
        self._trim()
        return self._order[0] if self._order else self.next_offset

    def span(self) -> int:
        self._trim()
        return self._order[-1] - self._order[0] if self._order else 0

    def is_full(self) -> bool:
        """True when the pull loop must wait (flow control)."""
        if len(self._msgs) >= self.max_messages or self._bytes >= self.max_bytes:
            return True
        return self.max_span is not None and self.span() > self.max_span

    # -- changes ------------------------------------------------------------------------
    def add(self, messages: Iterable[MessageExt], next_offset: int) -> int:
        """Add pulled messages (ascending offsets); returns how many were new."""
        added = 0
        for msg in messages:
            if msg.queue_offset in self._msgs:
                continue
            self._msgs[msg.queue_offset] = msg
            self._order.append(msg.queue_offset)
            self._bytes += len(msg.body)
            added += 1
        self.next_offset = max(self.next_offset, next_offset)
        self._update_room()
        if added:
            self._changed.set()
        return added

    def remove(self, offsets: Iterable[int]) -> int:
        """Handled messages leave; returns the committed offset afterwards."""
        for offset in offsets:
            msg = self._msgs.pop(offset, None)
            if msg is not None:
                self._bytes -= len(msg.body)
        self._trim()
        self._update_room()
        return self.committed_offset

    def take(self, max_count: int) -> list[MessageExt]:
        """The first *max_count* messages in offset order, left in place (orderly)."""
        self._trim()
        out = []
        for offset in self._order:
            msg = self._msgs.get(offset)
            if msg is not None:
                out.append(msg)
                if len(out) >= max_count:
                    break
        return out

    def replace(self, msg: MessageExt) -> None:
        """Swap in an updated copy of a message in flight (e.g. reconsume times + 1)."""
        if msg.queue_offset in self._msgs:
            self._msgs[msg.queue_offset] = msg

    def clear(self) -> None:
        self._msgs.clear()
        self._order.clear()
        self._bytes = 0
        self._update_room()

    def drop(self) -> None:
        """The queue is no longer ours: stop pulling, ignore late results."""
        self.dropped = True
        self._room.set()
        self._changed.set()

    # -- waiting ------------------------------------------------------------------------
    async def wait_for_room(self) -> None:
        while self.is_full() and not self.dropped:
            self._room.clear()
            await self._room.wait()

    async def wait_for_messages(self) -> None:
        while not self._msgs and not self.dropped:
            self._changed.clear()
            await self._changed.wait()

    def _update_room(self) -> None:
        if not self.is_full():
            self._room.set()

    def _trim(self) -> None:
        order, msgs = self._order, self._msgs
        while order and order[0] not in msgs:
            order.popleft()
