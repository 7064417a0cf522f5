"""RecordAccumulator: concurrent sends to one broker coalesced into SendBatch calls.

Each broker address has a :class:`BrokerBatcher`: callers append an encoded
record and get a future for its own receipt. The batcher's sender task keeps
up to ``max_in_flight`` calls going; while they are busy, new records pile up
and leave together in the next call (natural batching), at most
``max_messages`` records or ``max_bytes`` bytes each. When several call slots
are free, what is pending is split over them (at least ``SPLIT_MIN_RECORDS``,
128, a call), so that the broker stores one batch while the callers of another
already make the next: one big call at a time would make the two take turns.
With ``linger_s`` > 0 a call also waits that long for a batch to fill. A batch may mix topics and
queues (each record carries its queue id); the reply carries one receipt per
record, in order, and each caller's future gets its own.

When the broker refuses a batch of several records for a reason a retry will
not fix (a malformed or oversized record), the records are sent again one by
one, so that only the culprit's caller sees the error.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable

from pocketmq.client.errors import ClientError, ClientStateError, SendTimeoutError
from pocketmq.client.remoting import SendReceipt
from pocketmq.client.tasks import cancel_and_wait
from pocketmq.common.aio import wait_event

__all__ = ["BrokerBatcher", "RecordAccumulator"]

log = logging.getLogger(__name__)

SendFn = Callable[[bytes, float], Awaitable[list[SendReceipt]]]  # (records, timeout_s)
_Pending = tuple[bytes, "asyncio.Future[SendReceipt]", float]  # record, caller, deadline
SPLIT_MIN_RECORDS = 128  # smallest share when pending records are split over free call slots


class BrokerBatcher:
    def __init__(
        self,
        name: str,
        send_one: SendFn,
        send_batch: SendFn,
        *,
        linger_s: float = 0.0,
        max_messages: int = 512,
        max_bytes: int = 1 << 20,
        max_in_flight: int = 4,
        call_timeout_s: float = 3.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._monotonic = monotonic  # the producer's clock: records' deadlines are on it
        self._call_timeout_s = call_timeout_s
        self._send_one = send_one
        self._send_batch = send_batch
        self._linger_s = linger_s
        self._max_messages = max_messages
        self._max_bytes = max_bytes
        self._pending: deque[_Pending] = deque()
        self._pending_bytes = 0
        self._has_data = asyncio.Event()
        self._full = asyncio.Event()
        self._slots = asyncio.Semaphore(max_in_flight)
        self._inflight: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._max_in_flight = max_in_flight
        self._calls_in_flight = 0
        self._closed = False
        self.calls = 0  # SendMessage/SendBatch calls made
        self.records_sent = 0

    def add(self, record: bytes, deadline: float = float("inf")) -> asyncio.Future[SendReceipt]:
        """Queue *record*; the future fails with SendTimeoutError past *deadline* (monotonic)."""
        if self._closed:
            raise ClientStateError(f"the producer is shutting down; cannot send to {self.name}")
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        future: asyncio.Future[SendReceipt] = loop.create_future()
        pending = self._pending
        pending.append((record, future, deadline))
        self._pending_bytes += len(record)
        if len(pending) == 1:  # _take clears the event only when nothing is pending
            self._has_data.set()
        if len(pending) >= self._max_messages or self._pending_bytes >= self._max_bytes:
            self._full.set()
        if self._task is None:
            self._task = loop.create_task(self._run(), name=f"BrokerBatcher {self.name}")
        return future

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def _run(self) -> None:
        while True:
            await self._slots.acquire()
            try:
                await self._has_data.wait()
                if self._linger_s > 0 and not self._full.is_set():
                    await wait_event(self._full, self._linger_s)
            except BaseException:
                self._slots.release()
                raise
            self._start_call()

    def _start_call(self) -> None:
        # Split what is pending over the free call slots (at least SPLIT_MIN_RECORDS a
        # call): with one call the producers and the broker take turns; with two or more
        # the broker works on one while the callers of the other make the next batch.
        batch = self._take(
            max(
                -(-len(self._pending) // (self._max_in_flight - self._calls_in_flight)),
                SPLIT_MIN_RECORDS,
            )
        )
        if not batch:
            self._slots.release()
            return
        self._calls_in_flight += 1
        task = asyncio.get_running_loop().create_task(self._call(batch))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def run_once(self) -> int:
        """Send what is pending now in one call (tests); returns the records sent."""
        await self._slots.acquire()
        batch = self._take()
        if not batch:
            self._slots.release()
            return 0
        self._calls_in_flight += 1
        await self._call(batch)
        return len(batch)

    def _take(self, limit: int | None = None) -> list[_Pending]:
        """Up to *limit* (and max_messages, max_bytes) pending records still wanted."""
        batch: list[_Pending] = []
        size = 0
        pending = self._pending
        now = self._monotonic()
        max_count = self._max_messages if limit is None else min(limit, self._max_messages)
        max_bytes = self._max_bytes
        taken_bytes = 0
        while pending and len(batch) < max_count:
            item = pending[0]
            n = len(item[0])
            if batch and size + n > max_bytes:
                break
            pending.popleft()
            taken_bytes += n
            future = item[1]
            if future.done():  # the caller gave up (cancellation)
                continue
            if item[2] <= now:
                future.set_exception(
                    SendTimeoutError(f"record waited past its deadline to be sent to {self.name}")
                )
                continue
            batch.append(item)
            size += n
        self._pending_bytes -= taken_bytes
        if not pending:
            self._has_data.clear()
        if len(pending) < self._max_messages and self._pending_bytes < max_bytes:
            self._full.clear()
        return batch

    async def _call(self, batch: list[_Pending]) -> None:
        try:
            await self._deliver(batch)
        finally:
            self._calls_in_flight -= 1
            self._slots.release()

    async def _deliver(self, batch: list[_Pending]) -> None:
        try:
            self.calls += 1
            timeout_s = min(
                max(max(p[2] for p in batch) - self._monotonic(), 0.001), self._call_timeout_s
            )
            if len(batch) == 1:
                receipts = await self._send_one(batch[0][0], timeout_s)
            else:
                receipts = await self._send_batch(b"".join(p[0] for p in batch), timeout_s)
            if len(receipts) != len(batch):
                raise ClientError(
                    f"broker {self.name} answered {len(receipts)} receipts for {len(batch)} records"
                )
        except ClientError as exc:
            if len(batch) > 1 and not exc.retriable:
                log.info(
                    "batch of %d records refused by %s (%s); sending them one by one",
                    len(batch),
                    self.name,
                    exc,
                )
                await asyncio.gather(*(self._deliver([p]) for p in batch))
                return
            for _record, future, _deadline in batch:
                if not future.done():
                    future.set_exception(exc)
        except BaseException as exc:
            for _record, future, _deadline in batch:
                if not future.done():
                    future.set_exception(ClientError(f"send to {self.name} failed: {exc!r}"))
            raise
        else:
            self.records_sent += len(batch)
            for (_record, future, _deadline), receipt in zip(batch, receipts, strict=True):
                if not future.done():
                    future.set_result(receipt)

    async def close(self, timeout_s: float) -> None:
        """Send what is pending, wait up to *timeout_s*, then fail the rest."""
        self._closed = True
        deadline = asyncio.get_running_loop().time() + timeout_s
        while (self._pending or self._inflight) and asyncio.get_running_loop().time() < deadline:
            waiting = [p[1] for p in self._pending] + list(self._inflight)
            if not waiting:
                break
            await asyncio.wait(
                waiting,
                timeout=max(deadline - asyncio.get_running_loop().time(), 0),
                return_when=asyncio.FIRST_COMPLETED,
            )
        await cancel_and_wait(self._task, *self._inflight)
        for _record, future, _deadline in self._pending:
            if not future.done():
                future.set_exception(
                    ClientStateError(
                        f"the producer shut down before this record was sent to {self.name}"
                    )
                )
        self._pending.clear()


class RecordAccumulator:
    """One :class:`BrokerBatcher` per broker address."""

    def __init__(self, factory: Callable[[str], BrokerBatcher]) -> None:
        self._factory = factory
        self._batchers: dict[str, BrokerBatcher] = {}
        self._closed = False

    def add(
        self, addr: str, record: bytes, deadline: float = float("inf")
    ) -> asyncio.Future[SendReceipt]:
        batcher = self._batchers.get(addr)
        if batcher is None:
            if self._closed:
                raise ClientStateError("the producer is shutting down")
            batcher = self._batchers[addr] = self._factory(addr)
        return batcher.add(record, deadline)

    def batchers(self) -> dict[str, BrokerBatcher]:
        return dict(self._batchers)

    async def close(self, timeout_s: float) -> None:
        self._closed = True
        await asyncio.gather(*(b.close(timeout_s) for b in self._batchers.values()))
