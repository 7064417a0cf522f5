"""OffsetKeeper: a consumer's progress, where each queue starts and when it is written.

It owns the group's :class:`~pocketmq.client.offset_store.OffsetStore` (on the
brokers when clustering, in a local file when broadcasting) and, with
``auto_commit``, the commit task (``OffsetCommitService``, every
``commit_interval_s``). A queue that joins starts at its stored offset, else
where the consume-from policy says (:func:`~pocketmq.client.rebalance.resolve_start_offset`);
a queue that leaves has its offset written at once.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from pocketmq.client.config import _ConsumerCommon as ConsumerCommonConfig
from pocketmq.client.model import ConsumeFrom, MessageModel, MessageQueue
from pocketmq.client.offset_store import LocalFileOffsetStore, OffsetStore, RemoteBrokerOffsetStore
from pocketmq.client.rebalance import resolve_start_offset
from pocketmq.client.remoting import BrokerClient
from pocketmq.client.tasks import cancel_and_wait
from pocketmq.common.clock import Clock

__all__ = ["OffsetKeeper"]

DEFAULT_TIMESTAMP_LOOKBACK_MS = 30 * 60 * 1000  # consume_from="timestamp" without a time


class OffsetKeeper:
    """The offsets of one consumer group, as this member reads them.

    *broker_of* (broker name -> the broker reads go to) serves the remote store;
    *auto_commit* False (a pull consumer's ``auto_commit=False``): offsets are
    written only by :meth:`commit`, never piggybacked on pulls nor at shutdown.
    """

    def __init__(
        self,
        group: str,
        config: ConsumerCommonConfig,
        broker_of: Callable[[str], BrokerClient | None],
        *,
        clock: Clock,
        auto_commit: bool = True,
    ) -> None:
        self._group = group
        self._config = config
        self._clock = clock
        self.auto_commit = auto_commit
        self._broadcasting = config.message_model is MessageModel.BROADCASTING
        self.store: OffsetStore
        if self._broadcasting:
            self.store = LocalFileOffsetStore(group, os.path.expanduser(config.offset_store_dir))
        else:
            self.store = RemoteBrokerOffsetStore(group, broker_of, timeout_s=config.rpc_timeout_s)
        self._commit_task: asyncio.Task[None] | None = None

    async def load(self) -> None:
        await self.store.load()

    # -- the commit task -------------------------------------------------------------------
    def start(self) -> None:
        """Start the commit task (auto_commit only)."""
        if self.auto_commit:
            self._commit_task = asyncio.get_running_loop().create_task(
                self._commit_loop(), name=f"OffsetCommitService {self._group}"
            )

    async def stop(self) -> None:
        await cancel_and_wait(self._commit_task)
        self._commit_task = None

    async def _commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self._config.commit_interval_s)
            await self.commit()

    async def commit(self) -> int:
        """Write every changed offset now; returns how many were written."""
        return await self.store.persist()

    async def close(self) -> None:
        """The last write at shutdown (auto_commit only)."""
        if self.auto_commit:
            await self.store.persist()

    # -- queues ----------------------------------------------------------------------------
    async def start_offset(self, mq: MessageQueue, broker: BrokerClient) -> int:
        """Where *mq* starts for this member: its stored offset, else the consume-from policy."""
        cfg = self._config
        timestamp_ms = cfg.consume_timestamp_ms
        if timestamp_ms is None:
            timestamp_ms = self._clock.now_ms() - DEFAULT_TIMESTAMP_LOOKBACK_MS
        return await resolve_start_offset(
            mq,
            broker,
            self.store,
            ConsumeFrom(cfg.consume_from),
            timestamp_ms=timestamp_ms,
            timeout_s=cfg.rpc_timeout_s,
        )

    async def release(self, mq: MessageQueue, committed_offset: int) -> None:
        """*mq* left this member: its offset is written at once (auto_commit) and forgotten."""
        self.store.update(mq, committed_offset)
        if self.auto_commit:
            await self.store.persist([mq])
        self.store.remove(mq)

    def piggyback(self, mq: MessageQueue) -> int | None:
        """The offset a pull of *mq* carries to commit on its way (clustering, auto_commit)."""
        if self._broadcasting or not self.auto_commit:
            return None
        return self.store.get(mq)
