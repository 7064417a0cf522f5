"""Handing pulled messages to the user's listener, concurrently or in order.

* :class:`ConcurrentConsumeService` (RocketMQ's ConsumeMessageConcurrentlyService):
  messages are cut into batches of ``consume_batch_max_size`` and handled by
  up to ``consume_concurrency`` listener calls at once, in any order. A
  batch answered ``CONSUME_SUCCESS`` leaves its process queue and the queue's
  committed offset moves to the smallest offset still in flight.
  ``RECONSUME_LATER`` (or an exception) sends each message back to the broker
  (``ConsumerSendMsgBack``: to ``%RETRY%{group}`` with a growing delay, or
  to ``%DLQ%{group}`` after ``max_reconsume_times``); a message that cannot be
  sent back stays and is offered again after ``LOCAL_RETRY_DELAY_S`` with
  ``reconsume_times`` + 1. Broadcasting never retries: failures are logged.
* :class:`OrderlyConsumeService` (ConsumeMessageOrderlyService): one task per
  queue takes the first messages of its process queue, one batch at a time,
  only while the queue's broker lock is held. ``SUSPEND_CURRENT_QUEUE_A_MOMENT``
  (or an exception) offers the same batch again after
  ``suspend_current_queue_ms``; past ``max_reconsume_times`` (if >= 0) the
  messages go to the dead-letter queue and the queue moves on.

A listener may be a coroutine function or a plain function returning a
:class:`ConsumeResult`; a plain one is called inline on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pocketmq.client.model import ConsumeResult, MessageExt
from pocketmq.client.process_queue import ProcessQueue
from pocketmq.client.tasks import cancel_and_wait

__all__ = ["ConcurrentConsumeService", "Listener", "OrderlyConsumeService"]

log = logging.getLogger(__name__)

Listener = Callable[[list[MessageExt]], "ConsumeResult | Awaitable[ConsumeResult]"]
# (process queue, handled offsets) -> None: the consumer updates the offset store
DoneCallback = Callable[[ProcessQueue, list[int]], None]
# (process queue, message) -> True when the broker took it back
SendBack = Callable[[ProcessQueue, MessageExt], Awaitable[bool]]

LOCAL_RETRY_DELAY_S = 5.0
_OK = (ConsumeResult.CONSUME_SUCCESS,)


async def call_listener(listener: Listener, batch: list[MessageExt]) -> ConsumeResult:
    """The listener's verdict; an exception or a non-result counts as a failure."""
    try:
        result: Any = listener(batch)
        if inspect.isawaitable(result):
            result = await result
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception(
            "listener failed on %d message(s) from %s#%d at offset %d",
            len(batch),
            batch[0].broker_name,
            batch[0].queue_id,
            batch[0].queue_offset,
        )
        return ConsumeResult.RECONSUME_LATER
    if result is None:
        return ConsumeResult.CONSUME_SUCCESS
    if not isinstance(result, ConsumeResult):
        log.error(
            "listener returned %r; expected a ConsumeResult, treating it as a failure", result
        )
        return ConsumeResult.RECONSUME_LATER
    return result


def _bump(msg: MessageExt) -> MessageExt:
    return dataclasses.replace(msg, reconsume_times=msg.reconsume_times + 1)


class ConcurrentConsumeService:
    def __init__(
        self,
        listener: Listener,
        *,
        on_done: DoneCallback,
        send_back: SendBack,
        concurrency: int = 20,
        batch_max_size: int = 1,
        broadcasting: bool = False,
    ) -> None:
        self._listener = listener
        self._on_done = on_done
        self._send_back = send_back
        self._batch_max = batch_max_size
        self._broadcasting = broadcasting
        self._inline = not inspect.iscoroutinefunction(listener)
        self._queue: asyncio.Queue[tuple[ProcessQueue, list[MessageExt]]] = asyncio.Queue()
        self._workers: list[asyncio.Task[None]] = []
        self._later: set[asyncio.TimerHandle] = set()
        self._retries: set[asyncio.Task[None]] = set()
        self._concurrency = concurrency
        self._busy = 0
        self.consumed = 0

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._workers = [
            loop.create_task(self._work(), name=f"ConsumeWorker-{i}")
            for i in range(self._concurrency if not self._inline else 0)
        ]

    def submit(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        step = self._batch_max
        for i in range(0, len(messages), step):
            batch = messages[i : i + step]
            if self._inline:
                self._consume_inline(pq, batch)
            else:
                self._queue.put_nowait((pq, batch))

    def _consume_inline(self, pq: ProcessQueue, batch: list[MessageExt]) -> None:
        if pq.dropped:
            return
        try:
            result = self._listener(batch)
        except Exception:
            log.exception("listener failed on %d message(s) of %s", len(batch), pq.queue)
            result = ConsumeResult.RECONSUME_LATER
        if inspect.isawaitable(result):  # a sync callable that returned a coroutine
            self._queue.put_nowait((pq, batch))
            with contextlib.suppress(Exception):
                result.close()  # type: ignore[attr-defined]
            return
        if result is None or result in _OK:
            self.consumed += len(batch)
            self._on_done(pq, [m.queue_offset for m in batch])
        else:
            self._spawn_failure(pq, batch)

    async def _work(self) -> None:
        while True:
            pq, batch = await self._queue.get()
            if pq.dropped:
                continue
            self._busy += 1
            try:
                result = await call_listener(self._listener, batch)
                if result in _OK:
                    self.consumed += len(batch)
                    if not pq.dropped:
                        self._on_done(pq, [m.queue_offset for m in batch])
                else:
                    await self._failed(pq, batch)
            finally:
                self._busy -= 1

    def _spawn_failure(self, pq: ProcessQueue, batch: list[MessageExt]) -> None:
        task = asyncio.get_running_loop().create_task(self._failed(pq, batch))
        self._retries.add(task)
        task.add_done_callback(self._retries.discard)

    async def _failed(self, pq: ProcessQueue, batch: list[MessageExt]) -> None:
        if self._broadcasting:
            log.warning(
                "broadcasting: %d message(s) of %s failed and are dropped (no retry "
                "in broadcasting mode)",
                len(batch),
                pq.queue,
            )
            self._on_done(pq, [m.queue_offset for m in batch])
            return
        sent: list[MessageExt] = []
        kept: list[MessageExt] = []
        for msg in batch:
            (sent if await self._send_back(pq, msg) else kept).append(msg)
        if sent and not pq.dropped:
            self._on_done(pq, [m.queue_offset for m in sent])
        if kept and not pq.dropped:
            bumped = [_bump(m) for m in kept]
            for msg in bumped:
                pq.replace(msg)
            handle = asyncio.get_running_loop().call_later(
                LOCAL_RETRY_DELAY_S, self._resubmit, pq, bumped
            )
            self._later.add(handle)

    def _resubmit(self, pq: ProcessQueue, batch: list[MessageExt]) -> None:
        now = asyncio.get_running_loop().time()
        self._later = {h for h in self._later if h.when() > now}
        if not pq.dropped:
            self.submit(pq, batch)

    @property
    def in_progress(self) -> int:
        return self._busy + len(self._retries)

    async def stop(self, timeout_s: float) -> None:
        """Let listener calls in progress finish (up to *timeout_s*), then cancel."""
        for handle in self._later:
            handle.cancel()
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self.in_progress and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        await cancel_and_wait(*self._workers, *self._retries)
        self._workers.clear()


class OrderlyConsumeService:
    def __init__(
        self,
        listener: Listener,
        *,
        on_done: DoneCallback,
        send_back: SendBack,
        batch_max_size: int = 1,
        suspend_s: float = 1.0,
        max_reconsume_times: int = -1,
        is_locked: Callable[[ProcessQueue], bool] = lambda pq: True,
    ) -> None:
        self._listener = listener
        self._on_done = on_done
        self._send_back = send_back
        self._batch_max = batch_max_size
        self._suspend_s = suspend_s
        self._max_reconsume = max_reconsume_times
        self._is_locked = is_locked
        self._tasks: dict[ProcessQueue, asyncio.Task[None]] = {}
        self.consumed = 0

    def start(self) -> None:
        return None

    def submit(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        task = self._tasks.get(pq)
        if task is None or task.done():
            self._tasks[pq] = asyncio.get_running_loop().create_task(
                self._consume_queue(pq), name=f"OrderlyConsume {pq.queue}"
            )

    async def _consume_queue(self, pq: ProcessQueue) -> None:
        while not pq.dropped:
            await pq.wait_for_messages()
            if pq.dropped:
                return
            if not self._is_locked(pq):
                await asyncio.sleep(self._suspend_s)  # lock renewal runs on its own
                continue
            batch = pq.take(self._batch_max)
            pq.consuming = True
            try:
                result = await call_listener(self._listener, batch)
            finally:
                pq.consuming = False
            if pq.dropped:
                return
            if result in _OK:
                self.consumed += len(batch)
                self._on_done(pq, [m.queue_offset for m in batch])
                continue
            await self._suspend(pq, batch)

    async def _suspend(self, pq: ProcessQueue, batch: list[MessageExt]) -> None:
        if self._max_reconsume >= 0 and any(
            m.reconsume_times >= self._max_reconsume for m in batch
        ):
            done = [m for m in batch if await self._send_back(pq, m)]
            if len(done) == len(batch):
                self._on_done(pq, [m.queue_offset for m in batch])
                return
        for msg in batch:
            pq.replace(_bump(msg))
        await asyncio.sleep(self._suspend_s)

    def forget(self, pq: ProcessQueue) -> None:
        task = self._tasks.pop(pq, None)
        if task is not None:
            task.cancel()

    @property
    def in_progress(self) -> int:
        return sum(1 for pq in self._tasks if pq.consuming)

    async def stop(self, timeout_s: float) -> None:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self.in_progress and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        tasks = list(self._tasks.values())
        self._tasks.clear()
        await cancel_and_wait(*tasks)
