"""Flush services: the worker threads that make written bytes durable.

Appends happen on the owner's thread into mappings; these services sync them
from worker threads (``fdatasync`` releases the GIL), so no append ever waits
on the disk.

- :class:`GroupCommitService` (synchronous flush): puts ask for their end
  offset to be durable; every request waiting when a round starts is covered by
  that round's one sync (group commit). All requests of a round share one
  future, so a round costs one cross-thread wake-up however many puts it covers.
  A round finishing after ``sync_flush_timeout`` answers ``FLUSH_DISK_TIMEOUT``.
- :class:`FlushRealTimeService` (asynchronous flush): every 500 ms syncs the
  commit log if at least 4 pages are dirty, and everything every 10 s.
- :class:`FlushConsumeQueueService`: every second syncs consume queues and the
  index, then writes the checkpoint.

Each service times its syncs into a :class:`DurationHistogram` the store owns;
the broker's metrics read it (the store knows no metrics library).

Each has ``run_once()`` so tests can step it without threads or sleeping.
"""

from __future__ import annotations

import logging
import threading
import time
from bisect import bisect_left
from collections.abc import Callable
from concurrent.futures import Future

from pocketmq.broker.store.mapped_file_queue import MappedFileQueue
from pocketmq.broker.store.results import PutStatus

__all__ = [
    "DurationHistogram",
    "FlushConsumeQueueService",
    "FlushRealTimeService",
    "GroupCommitService",
    "ServiceThread",
]

log = logging.getLogger(__name__)

PAGE_SIZE = 4096
IOErrorHandler = Callable[[OSError], None]


class DurationHistogram:
    """Durations counted into fixed buckets, with their sum: filled by one thread
    (a flush service, the send path), read by a metrics collector.

    ``counts[i]`` counts durations ``<= BOUNDS_S[i]`` and above the bound before;
    the last count is everything above the last bound (Prometheus' ``+Inf``).
    """

    BOUNDS_S = (
        0.0001,
        0.00025,
        0.0005,
        0.001,
        0.0025,
        0.005,
        0.01,
        0.025,
        0.05,
        0.1,
        0.25,
        0.5,
        1.0,
        2.5,
        5.0,
        10.0,
    )

    __slots__ = ("counts", "sum_s")

    def __init__(self) -> None:
        self.counts = [0] * (len(self.BOUNDS_S) + 1)
        self.sum_s = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.BOUNDS_S, seconds)] += 1
        self.sum_s += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, durations at or below it)`` per bucket, ``inf`` last."""
        out, running = [], 0
        for bound, n in zip((*self.BOUNDS_S, float("inf")), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out


class ServiceThread:
    """A named worker thread that calls ``run_once`` until stopped."""

    name = "service"

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._wakeup = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped = True
        self._wakeup.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        self.run_once(final=True)

    def wakeup(self) -> None:
        self._wakeup.set()

    def _run(self) -> None:
        while not self._stopped:
            self._wakeup.wait(self.interval_s)
            self._wakeup.clear()
            if self._stopped:
                break
            try:
                self.run_once()
            except Exception:  # a service must outlive one bad round; the store decides
                log.exception("%s round failed", self.name)

    def run_once(self, *, final: bool = False) -> None:
        raise NotImplementedError


class _SharedFlushFuture(Future[PutStatus]):
    """A round's future, shared by every put it covers: no one waiter may cancel it.

    ``asyncio.wrap_future`` passes a waiter's cancellation on to the future it
    wraps; if that were the shared one, every other put of the round would see
    its own wait cancelled.
    """

    def cancel(self) -> bool:
        return False


class GroupCommitService(ServiceThread):
    name = "GroupCommitService"

    def __init__(
        self,
        log_queue: MappedFileQueue,
        *,
        timeout_s: float,
        on_io_error: IOErrorHandler,
        durations: DurationHistogram | None = None,
    ) -> None:
        super().__init__(interval_s=0.01)
        self._queue = log_queue
        self.durations = durations or DurationHistogram()  # of each round's sync
        self._timeout_s = timeout_s
        self._on_io_error = on_io_error
        self._lock = threading.Lock()
        self._pending: Future[PutStatus] | None = None
        self._pending_since = 0.0
        self._failed: OSError | None = None

    def request(self, end_offset: int) -> Future[PutStatus]:
        """A future resolved once every byte below *end_offset* is durable."""
        with self._lock:
            if self._failed is None and self._queue.flushed_offset >= end_offset:
                done: Future[PutStatus] = Future()
                done.set_result(PutStatus.PUT_OK)
                return done
            if self._pending is None:
                self._pending = _SharedFlushFuture()
                self._pending_since = time.monotonic()
            fut = self._pending
        self._wakeup.set()
        return fut

    def run_once(self, *, final: bool = False) -> None:
        with self._lock:
            fut, since = self._pending, self._pending_since
            self._pending = None
        if fut is None:
            return
        # Every request registered before the swap asked for an end offset at or
        # below the current write position, so one sync of what is written covers it.
        status = PutStatus.PUT_OK
        try:
            if self._failed is not None:
                raise self._failed
            synced_at = time.monotonic()
            self._queue.flush()
            self.durations.observe(time.monotonic() - synced_at)
        except OSError as exc:
            self._failed = exc
            self._on_io_error(exc)
            status = PutStatus.SERVICE_NOT_AVAILABLE
        else:
            if time.monotonic() - since > self._timeout_s:
                log.warning(
                    "group commit took %.3f s, over sync_flush_timeout %.3f s",
                    time.monotonic() - since,
                    self._timeout_s,
                )
                status = PutStatus.FLUSH_DISK_TIMEOUT
        fut.set_result(status)


class FlushRealTimeService(ServiceThread):
    name = "FlushRealTimeService"

    def __init__(
        self,
        log_queue: MappedFileQueue,
        *,
        interval_s: float,
        least_pages: int,
        thorough_interval_s: float,
        on_io_error: IOErrorHandler,
        durations: DurationHistogram | None = None,
    ) -> None:
        super().__init__(interval_s=interval_s)
        self._queue = log_queue
        self.durations = durations or DurationHistogram()  # of each sync
        self._least_bytes = least_pages * PAGE_SIZE
        self._thorough_interval_s = thorough_interval_s
        self._last_thorough = time.monotonic()
        self._on_io_error = on_io_error

    def run_once(self, *, final: bool = False) -> None:
        now = time.monotonic()
        thorough = final or now - self._last_thorough >= self._thorough_interval_s
        if not thorough and self._queue.dirty_bytes() < self._least_bytes:
            return
        try:
            self._queue.flush()
        except OSError as exc:
            self._on_io_error(exc)
            return
        self.durations.observe(time.monotonic() - now)
        if thorough:
            self._last_thorough = now


class FlushConsumeQueueService(ServiceThread):
    """Flush consume queues and index, then record the checkpoint.

    *flush_round* does the work (it belongs to the store, which knows what a
    checkpoint must say); this class only gives it a thread and a period.
    """

    name = "FlushConsumeQueueService"

    def __init__(
        self,
        flush_round: Callable[[], None],
        *,
        interval_s: float,
        on_io_error: IOErrorHandler,
        durations: DurationHistogram | None = None,
    ) -> None:
        super().__init__(interval_s=interval_s)
        self._flush_round = flush_round
        self._on_io_error = on_io_error
        self.durations = durations or DurationHistogram()  # of each round

    def run_once(self, *, final: bool = False) -> None:
        started = time.monotonic()
        try:
            self._flush_round()
        except OSError as exc:
            self._on_io_error(exc)
            return
        self.durations.observe(time.monotonic() - started)
