"""Where a consumer group's progress is kept: on the broker, or in a local file.

* :class:`RemoteBrokerOffsetStore` (clustering): the group shares offsets, so
  they live on the broker that owns each queue (``UpdateConsumerOffset``,
  ``QueryConsumerOffset``), as RocketMQ's ``RemoteBrokerOffsetStore``: on its
  master, or on the replica that serves reads while the master is away (a
  replica accepts commits). An offset counts as written only where it was
  written: once the master is back, the offsets committed to the replica meanwhile
  are sent to the master too (it never learns a replica's commits otherwise,
  apache/rocketmq#1094), so a rebalance there re-delivers no more than the
  last uncommitted window.
* :class:`LocalFileOffsetStore` (broadcasting): every member has its own
  progress, kept in ``{dir}/{group}/offsets.json`` (written to a temporary
  file, fsynced, renamed over the old one).

Both keep an in-memory table updated as messages are handled
(:meth:`update`) and written out by :meth:`persist` — every 5 s by the
consumer's commit task, at rebalance for dropped queues, and at shutdown.
Only offsets that changed since they were last written are sent.
:meth:`reset` takes an offset an admin moved the group to (the broker already
stored it, so the remote store does not send it back; the local file store
writes it at its next persist).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable, Iterable
from typing import Protocol

from pocketmq.client.errors import ClientError
from pocketmq.client.model import MessageQueue
from pocketmq.client.remoting import BrokerClient

__all__ = ["LocalFileOffsetStore", "OffsetStore", "RemoteBrokerOffsetStore"]

log = logging.getLogger(__name__)


class OffsetStore(Protocol):
    async def load(self) -> None: ...
    def update(self, queue: MessageQueue, offset: int, *, increase_only: bool = True) -> None: ...
    def get(self, queue: MessageQueue) -> int | None: ...
    async def read_stored(self, queue: MessageQueue) -> int | None: ...
    async def persist(self, queues: Iterable[MessageQueue] | None = None) -> int: ...
    def remove(self, queue: MessageQueue) -> None: ...
    def reset(self, queue: MessageQueue, offset: int) -> None: ...


class _Table:
    """Offsets in memory and which of them are not yet written out."""

    def __init__(self) -> None:
        self.offsets: dict[MessageQueue, int] = {}
        self.written: dict[MessageQueue, int] = {}

    def update(self, queue: MessageQueue, offset: int, increase_only: bool) -> None:
        current = self.offsets.get(queue)
        if current is None or not increase_only or offset > current:
            self.offsets[queue] = offset

    def dirty(self, queues: Iterable[MessageQueue] | None) -> list[tuple[MessageQueue, int]]:
        pick = (
            self.offsets
            if queues is None
            else {q: self.offsets[q] for q in queues if q in self.offsets}
        )
        return [(q, o) for q, o in pick.items() if self.written.get(q) != o]

    def remove(self, queue: MessageQueue) -> None:
        self.offsets.pop(queue, None)
        self.written.pop(queue, None)


class RemoteBrokerOffsetStore:
    def __init__(
        self, group: str, broker_of: Callable[[str], BrokerClient | None], *, timeout_s: float = 3.0
    ) -> None:
        self._group = group
        self._broker_of = broker_of  # broker name -> the member serving reads, or None
        self._timeout_s = timeout_s
        self._table = _Table()
        self._written_to: dict[MessageQueue, str] = {}  # where table.written[q] went

    async def load(self) -> None:
        return None

    def update(self, queue: MessageQueue, offset: int, *, increase_only: bool = True) -> None:
        self._table.update(queue, offset, increase_only)

    def get(self, queue: MessageQueue) -> int | None:
        return self._table.offsets.get(queue)

    async def read_stored(self, queue: MessageQueue) -> int | None:
        """The broker's offset for *queue* (None when the group has none), cached."""
        broker = self._broker_of(queue.broker_name)
        if broker is None:
            raise ClientError(
                f"no address for broker {queue.broker_name}; cannot read the offset of {queue}"
            )
        offset = await broker.query_consumer_offset(self._group, queue, timeout_s=self._timeout_s)
        if offset is not None:
            self._table.update(queue, offset, increase_only=False)
            self._table.written[queue] = offset
            self._written_to[queue] = broker.addr
        return offset

    def _dirty(
        self,
        queues: Iterable[MessageQueue] | None,
    ) -> list[tuple[MessageQueue, int, BrokerClient]]:
        """Offsets not yet held by the member that serves their queue now: changed
        ones, and any written to another member (the replica, while the master was
        away)."""
        table = self._table
        pick = (
            table.offsets
            if queues is None
            else {q: table.offsets[q] for q in queues if q in table.offsets}
        )
        out = []
        for queue, offset in pick.items():
            broker = self._broker_of(queue.broker_name)
            if broker is None:
                continue
            if table.written.get(queue) != offset or self._written_to.get(queue) != broker.addr:
                out.append((queue, offset, broker))
        return out

    async def persist(self, queues: Iterable[MessageQueue] | None = None) -> int:
        """Send changed offsets to their brokers; returns how many were written."""
        dirty = self._dirty(queues)

        async def one(queue: MessageQueue, offset: int, broker: BrokerClient) -> bool:
            try:
                await broker.update_consumer_offset(
                    self._group, queue, offset, timeout_s=self._timeout_s
                )
            except ClientError as exc:
                log.warning(
                    "cannot commit offset %d of %s for group %s: %s",
                    offset,
                    queue,
                    self._group,
                    exc,
                )
                return False
            self._table.written[queue] = offset
            self._written_to[queue] = broker.addr
            return True

        return sum(await asyncio.gather(*(one(q, o, b) for q, o, b in dirty)))

    def remove(self, queue: MessageQueue) -> None:
        self._table.remove(queue)
        self._written_to.pop(queue, None)

    def reset(self, queue: MessageQueue, offset: int) -> None:
        self._table.update(queue, offset, increase_only=False)
        self._table.written[queue] = offset  # the broker stored it with the reset
        broker = self._broker_of(queue.broker_name)
        if broker is not None:
            self._written_to[queue] = broker.addr


class LocalFileOffsetStore:
    def __init__(self, group: str, directory: str) -> None:
        self.path = os.path.join(directory, group, "offsets.json")
        self._table = _Table()
        self._stored: dict[MessageQueue, int] = {}

    async def load(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as f:
                raw = json.load(f)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.error(
                "cannot read offsets from %s (%s); starting from the consume-from policy",
                self.path,
                exc,
            )
            return
        for entry in raw.get("offsetTable", []):
            queue = MessageQueue(entry["topic"], entry["brokerName"], int(entry["queueId"]))
            self._stored[queue] = int(entry["offset"])

    def update(self, queue: MessageQueue, offset: int, *, increase_only: bool = True) -> None:
        self._table.update(queue, offset, increase_only)

    def get(self, queue: MessageQueue) -> int | None:
        return self._table.offsets.get(queue)

    async def read_stored(self, queue: MessageQueue) -> int | None:
        offset = self._stored.get(queue)
        if offset is not None:
            self._table.update(queue, offset, increase_only=False)
            self._table.written[queue] = offset
        return offset

    async def persist(self, queues: Iterable[MessageQueue] | None = None) -> int:
        dirty = self._table.dirty(queues)
        if not dirty:
            return 0
        for queue, offset in dirty:
            self._stored[queue] = offset
        self._write()
        for queue, offset in dirty:
            self._table.written[queue] = offset
        return len(dirty)

    def remove(self, queue: MessageQueue) -> None:
        self._table.remove(queue)

    def reset(self, queue: MessageQueue, offset: int) -> None:
        self._table.update(queue, offset, increase_only=False)

    def _write(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        data = {
            "offsetTable": [
                {"topic": q.topic, "brokerName": q.broker_name, "queueId": q.queue_id, "offset": o}
                for q, o in sorted(self._stored.items())
            ]
        }
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
