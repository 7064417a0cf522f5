"""QueueLocks: the broker locks an orderly push consumer holds on its queues.

An orderly consumer in clustering mode reads a queue only while it holds the
queue's lock on the broker's master (``LockBatchMQ``): taken before the queue
is added, renewed every ``lock_renew_interval_s`` (``LockRenewService``),
released when the queue leaves and at shutdown (``UnlockBatchMQ``). A lock the
client has not renewed for :data:`LOCK_TTL_S` is not trusted.

Locks exist only on the master, so while a broker name's master is away its
queues pause (no pull, no handler call) until the master answers again and the
lock is taken anew (RocketMQ 4's behaviour). A broker without the lock RPCs
is warned about once; orderly consumption then relies on the rebalance alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from pocketmq.client.config import ConsumerConfig
from pocketmq.client.errors import ClientError, UnsupportedError
from pocketmq.client.model import MessageQueue
from pocketmq.client.process_queue import ProcessQueue
from pocketmq.client.remoting import BrokerClient
from pocketmq.client.route import RouteService
from pocketmq.client.tasks import cancel_and_wait
from pocketmq.common.clock import Clock

__all__ = ["LOCK_TTL_S", "QueueLocks"]

log = logging.getLogger(__name__)

LOCK_TTL_S = 30.0  # a lock the client has not renewed for this long is not trusted


class QueueLocks:
    """The locks of one orderly consumer: *master* (broker name -> its master) is where
    they are taken, *queues* the process queues to renew, *warn_once(key, text, *args)*
    logs a missing broker feature once."""

    def __init__(
        self,
        *,
        group: str,
        client_id: str,
        config: ConsumerConfig,
        routes: RouteService,
        master: Callable[[str], BrokerClient | None],
        queues: Callable[[], Iterable[ProcessQueue]],
        clock: Clock,
        warn_once: Callable[..., None],
    ) -> None:
        self._group = group
        self._client_id = client_id
        self._config = config
        self._routes = routes
        self._master = master
        self._queues = queues
        self._clock = clock
        self._warn_once = warn_once
        self._task: asyncio.Task[None] | None = None

    # -- the renewal task ------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._lock_loop(), name=f"LockRenewService {self._group}"
        )

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _lock_loop(self) -> None:
        while True:
            await asyncio.sleep(self._config.lock_renew_interval_s)
            await self.lock_all()

    async def lock_all(self) -> None:
        """Renew the broker locks of every queue read."""
        by_broker: dict[str, list[ProcessQueue]] = {}
        for pq in self._queues():
            if not pq.dropped:
                by_broker.setdefault(pq.queue.broker_name, []).append(pq)
        for broker_name, pqs in by_broker.items():
            locked = await self.lock(broker_name, [pq.queue for pq in pqs])
            now = self._clock.monotonic()
            for pq in pqs:
                pq.locked = pq.queue in locked
                if pq.locked:
                    pq.lock_expires_at_s = now + LOCK_TTL_S

    # -- what the fetcher and the rebalance ask ----------------------------------------------
    def is_locked(self, pq: ProcessQueue) -> bool:
        """Whether *pq* may be read and handled now."""
        return (
            pq.locked
            and self._clock.monotonic() < pq.lock_expires_at_s
            and self.master_usable(pq.queue.broker_name)
        )

    def master_usable(self, broker_name: str) -> bool:
        return self._routes.members.master_usable(broker_name)

    def mark_locked(self, pq: ProcessQueue) -> None:
        """A queue whose loop starts was just locked (by :meth:`may_add`)."""
        pq.locked = True
        pq.lock_expires_at_s = self._clock.monotonic() + LOCK_TTL_S

    async def may_add(self, mq: MessageQueue) -> bool:
        """Lock *mq* before it is read; False while another member holds it."""
        locked = await self.lock(mq.broker_name, [mq])
        if mq not in locked:
            log.info(
                "group %s: %s is still locked by another member; next rebalance retries",
                self._group,
                mq,
            )
            return False
        return True

    async def ready_to_pull(self, pq: ProcessQueue) -> bool:
        """True when *pq* is locked; else takes the lock again if the master is back, or
        pauses (``suspend_current_queue_ms``) and answers False."""
        if self.is_locked(pq):
            return True
        if self.master_usable(pq.queue.broker_name):
            # The master is back (or the lock lapsed): take the lock again now rather
            # than at the next renewal round.
            locked = pq.queue in await self.lock(pq.queue.broker_name, [pq.queue])
            if locked and not pq.dropped:
                self.mark_locked(pq)
                return True
        await asyncio.sleep(self._config.suspend_current_queue_ms / 1000)
        return False

    # -- calls -----------------------------------------------------------------------------
    async def lock(self, broker_name: str, queues: list[MessageQueue]) -> set[MessageQueue]:
        broker = self._master(broker_name)
        if broker is None:
            return set()
        try:
            return await broker.lock_batch(
                self._group, self._client_id, queues, timeout_s=self._config.rpc_timeout_s
            )
        except UnsupportedError as exc:
            self._warn_once(
                "lock",
                "the broker cannot lock queues (%s); orderly consumption "
                "relies on the rebalance alone",
                exc,
            )
            return set(queues)
        except ClientError as exc:
            log.warning("group %s: cannot lock queues on %s: %s", self._group, broker_name, exc)
            return set()

    async def unlock(self, broker_name: str, queues: list[MessageQueue]) -> None:
        broker = self._master(broker_name)
        if broker is None:
            return
        try:
            await broker.unlock_batch(
                self._group, self._client_id, queues, timeout_s=self._config.rpc_timeout_s
            )
        except ClientError as exc:
            log.debug("unlock of %d queue(s) on %s failed: %s", len(queues), broker_name, exc)

    async def release(self, pqs: Iterable[ProcessQueue]) -> None:
        """Unlock *pqs* (shutting down)."""
        by_broker: dict[str, list[MessageQueue]] = {}
        for pq in pqs:
            by_broker.setdefault(pq.queue.broker_name, []).append(pq.queue)
        for broker_name, queues in by_broker.items():
            await self.unlock(broker_name, queues)
