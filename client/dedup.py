"""Consumer-side de-duplication: ``PushConsumer(dedup_window=…)`` (NATS JetStream's
duplicate window, on the consuming side).

A :class:`DedupWindow` remembers the unique ids (``UNIQ_KEY``, ``msg_id``) the
consumer's listener handled successfully, oldest first, and forgets an id once
it is older than ``window_s`` or once more than ``max_ids`` newer ids are
kept, so memory is bounded either way. :func:`dedup_listener` wraps the user's
listener: a message whose id is in the window is answered ``CONSUME_SUCCESS``
without calling the listener; a message whose id another listener call is
handling right now waits for that call and is dropped if it succeeded.

It is for producers outside PocketMQ's idempotent SDK (the official RocketMQ
clients, ``idempotent=False``): a retried send stored twice carries the same
``UNIQ_KEY`` in both copies. The window is per consumer instance (the group's
other members keep their own), and lives in memory: a restarted consumer
starts with an empty one.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from pocketmq.client.consume_service import Listener, call_listener
from pocketmq.client.model import ConsumeResult, MessageExt

__all__ = ["DedupWindow", "dedup_listener"]


class DedupWindow:
    """Ids consumed successfully, time-ordered; bounded by age and by count."""

    def __init__(
        self,
        *,
        window_s: float = 0.0,
        max_ids: int = 100_000,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if window_s < 0 or max_ids <= 0:
            raise ValueError(
                f"window_s must be >= 0 (got {window_s}) and max_ids > 0 (got {max_ids})"
            )
        self.window_s = window_s  # 0: no age limit, only the count
        self.max_ids = max_ids
        self._now = monotonic
        self._seen: OrderedDict[str, float] = OrderedDict()  # id -> consumed at (s)
        self._in_flight: dict[str, asyncio.Future[bool]] = {}
        self.dropped = 0  # messages answered from the window

    def __len__(self) -> int:
        return len(self._seen)

    def __contains__(self, uniq_id: str) -> bool:
        self._expire()
        return uniq_id in self._seen

    def add(self, uniq_id: str) -> None:
        self._seen[uniq_id] = self._now()
        self._seen.move_to_end(uniq_id)
        while len(self._seen) > self.max_ids:
            self._seen.popitem(last=False)

    def _expire(self) -> None:
        if not self.window_s:
            return
        oldest = self._now() - self.window_s
        seen = self._seen
        while seen:
            uniq_id, at = next(iter(seen.items()))
            if at >= oldest:
                break
            del seen[uniq_id]

    def split(self, batch: list[MessageExt]) -> list[MessageExt]:
        """The messages of *batch* not in the window (nor repeated earlier in it)."""
        fresh: list[MessageExt] = []
        ids: set[str] = set()
        for msg in batch:
            uniq_id = msg.msg_id
            if uniq_id and (uniq_id in self or uniq_id in ids):
                self.dropped += 1
                continue
            ids.add(uniq_id)
            fresh.append(msg)
        return fresh

    def done(self, batch: list[MessageExt], ok: bool) -> None:
        for msg in batch:
            if msg.msg_id:
                if ok:
                    self.add(msg.msg_id)
                future = self._in_flight.pop(msg.msg_id, None)
                if future is not None and not future.done():
                    future.set_result(ok)

    async def admit(self, batch: list[MessageExt]) -> list[MessageExt]:
        """Wait out other calls handling the same ids (holding none of ours, so two
        batches never wait on each other), then claim the fresh ids."""
        while True:
            busy = [self._in_flight[m.msg_id] for m in batch if m.msg_id in self._in_flight]
            if not busy:
                break
            await asyncio.gather(*(asyncio.shield(f) for f in busy))
        fresh = self.split(batch)
        loop = asyncio.get_running_loop()
        for msg in fresh:
            if msg.msg_id:
                self._in_flight[msg.msg_id] = loop.create_future()
        return fresh


def dedup_listener(listener: Listener, window: DedupWindow) -> Listener:
    """*listener* behind *window*; a coroutine function if *listener* is one."""
    if inspect.iscoroutinefunction(listener):

        async def deduplicated(batch: list[MessageExt]) -> ConsumeResult:
            fresh = await window.admit(batch)
            if not fresh:
                return ConsumeResult.CONSUME_SUCCESS
            result = ConsumeResult.RECONSUME_LATER
            try:
                result = await call_listener(listener, fresh)
            finally:
                window.done(fresh, result is ConsumeResult.CONSUME_SUCCESS)
            return result

        return deduplicated

    def deduplicated_inline(batch: list[MessageExt]) -> Any:
        fresh = window.split(batch)
        if not fresh:
            return ConsumeResult.CONSUME_SUCCESS
        result = listener(fresh)
        window.done(fresh, result is None or result is ConsumeResult.CONSUME_SUCCESS)
        return result

    return deduplicated_inline
