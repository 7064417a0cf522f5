"""ConsumeQueueStore: every consume queue of a broker, under ``DATA/consumequeue``.

It owns the directory tree ``{root_dir}/{topic}/{queue_id}/`` (``root_dir`` is
``DATA/consumequeue``), discovers the queues in it on load, creates new ones on
first dispatch, and fans the store-wide operations out to each queue: recovery,
truncation after the commit log was cut, deletion below the commit log's head,
flush, and topic deletion. Topic names (``[%|a-zA-Z0-9_-]``) are the directory
names as they are.

It also bounds what the queues hold open: a least-recently-used list of the
queues whose segments are mapped, at most ``max_open_files`` segments in all
(one mapping and one descriptor each). A queue's use (append, read, recovery,
truncation, head deletion) moves it to the front; past the bound the queues
used longest ago are unmapped. Unmapping never syncs and never closes a
descriptor another thread uses: segments hold no descriptor of their own (the
mapping's), and the flush service syncs an unmapped segment by opening its
path, so an idle queue's last units become durable in the next flush round
like a mapped queue's. The LRU is the owner thread's only; the flush thread
never touches it.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections import OrderedDict

from pocketmq.broker.store.consume_queue import ConsumeQueue
from pocketmq.broker.store.io import StoreIO

__all__ = ["ConsumeQueueStore"]

log = logging.getLogger(__name__)

_TOPIC_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")
_QUEUE_ID_NAME = re.compile(r"^(0|[1-9][0-9]*)$")


class ConsumeQueueStore:
    """Consume queues by topic and queue id. Owned by the store's thread, except
    :meth:`flush` and :attr:`dirty_bytes`, which a worker thread may call."""

    def __init__(
        self,
        root_dir: str,
        *,
        units_per_file: int = 300_000,
        io: StoreIO | None = None,
        max_open_files: int = 0,
    ) -> None:
        if max_open_files < 0:
            raise ValueError(f"max_open_files must be >= 0 (0: no bound), got {max_open_files}")
        self.root_dir = root_dir
        self.units_per_file = units_per_file
        self._io = io or StoreIO()
        self._queues: dict[str, dict[int, ConsumeQueue]] = {}
        #: segments the mapped queues may hold in all; 0 keeps every used queue mapped
        self.max_open_files = max_open_files
        # queue -> its segment count when last used, least recently used first
        self._open: OrderedDict[ConsumeQueue, int] = OrderedDict()
        self._open_files = 0
        #: queues unmapped by the LRU since start (a metric)
        self.evictions = 0

    # -- lifecycle -------------------------------------------------------------------
    def load(self) -> None:
        """Map every ``{topic}/{queue_id}`` directory; other names are logged and left alone."""
        os.makedirs(self.root_dir, exist_ok=True)
        for topic in sorted(os.listdir(self.root_dir)):
            topic_dir = os.path.join(self.root_dir, topic)
            if not (_TOPIC_NAME.match(topic) and os.path.isdir(topic_dir)):
                log.warning("ignoring %s: not a topic directory of consume queues", topic_dir)
                continue
            for name in sorted(os.listdir(topic_dir)):
                queue_dir = os.path.join(topic_dir, name)
                if not (_QUEUE_ID_NAME.match(name) and os.path.isdir(queue_dir)):
                    log.warning("ignoring %s: not a consume queue directory", queue_dir)
                    continue
                cq = self._new_queue(topic, int(name))
                cq.load()
                self._queues.setdefault(topic, {})[cq.queue_id] = cq
        log.info(
            "loaded %d consume queues of %d topics from %s",
            sum(len(q) for q in self._queues.values()),
            len(self._queues),
            self.root_dir,
        )

    def recover(self) -> int:
        """Recover every queue; return the greatest ``max_phys_end`` (-1 when none has units).

        One line sums them up (each queue's own is DEBUG: a broker has thousands)."""
        max_phys_end, queues, units = -1, 0, 0
        for cq in self.all_queues():
            cq.recover()
            max_phys_end = max(max_phys_end, cq.max_phys_end)
            queues += 1
            units += cq.max_offset - cq.min_offset
        if queues:
            log.info(
                "recovered %d consume queues: %d units, max phys end %d",
                queues,
                units,
                max_phys_end,
            )
        return max_phys_end

    def flush(self) -> None:
        """Sync every queue (safe in a worker thread while the owner dispatches)."""
        for cq in self.all_queues():
            cq.flush()

    @property
    def dirty_bytes(self) -> int:
        return sum(cq.dirty_bytes for cq in self.all_queues())

    def close(self) -> None:
        for cq in self.all_queues():
            cq.close()
        self._open.clear()
        self._open_files = 0

    # -- the LRU of mapped queues ------------------------------------------------------
    @property
    def open_files(self) -> int:
        """Segments of the queues in the LRU, as counted at their last use."""
        return self._open_files

    def _on_use(self, cq: ConsumeQueue) -> None:
        """Move *cq* to the front; unmap the least recently used queues past the bound."""
        count = max(1, cq.segment_count)
        previous = self._open.get(cq)
        if previous is None:
            self._open[cq] = count
        else:
            self._open.move_to_end(cq)
            if previous == count:
                return
            self._open[cq] = count
        self._open_files += count - (previous or 0)
        if self.max_open_files and self._open_files > self.max_open_files:
            self._evict(keep=cq)

    def _evict(self, *, keep: ConsumeQueue) -> None:
        skipped: list[tuple[ConsumeQueue, int]] = []
        for _ in range(len(self._open)):
            if self._open_files <= self.max_open_files:
                break
            victim, count = self._open.popitem(last=False)
            if victim is not keep and victim.unmap():
                self._open_files -= count
                self.evictions += 1
            elif victim is not keep:  # a buffer of it is in use: leave it mapped
                skipped.append((victim, count))
            else:
                self._open[victim] = count  # back to the front: it is being used
        for victim, count in reversed(skipped):
            self._open[victim] = count
            self._open.move_to_end(victim, last=False)

    def _forget(self, cq: ConsumeQueue) -> None:
        count = self._open.pop(cq, None)
        if count is not None:
            self._open_files -= count

    # -- queues ----------------------------------------------------------------------
    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue of (*topic*, *queue_id*); a new one has no file until its first unit."""
        queues = self._queues.get(topic)
        cq = queues.get(queue_id) if queues is not None else None
        if cq is None:
            if not _TOPIC_NAME.match(topic):
                raise ValueError(
                    f"topic {topic!r} is not a valid directory name "
                    "(allowed: %, |, letters, digits, _ and -)"
                )
            if queue_id < 0:
                raise ValueError(f"queue id must be >= 0, got {queue_id}")
            cq = self._new_queue(topic, queue_id)
            self._queues.setdefault(topic, {})[queue_id] = cq
        return cq

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        queues = self._queues.get(topic)
        return queues.get(queue_id) if queues is not None else None

    def topics(self) -> list[str]:
        return sorted(self._queues)

    @property
    def topic_count(self) -> int:
        return len(self._queues)

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(self._queues.get(topic, ()))

    def all_queues(self) -> list[ConsumeQueue]:
        """Every queue, as a snapshot (a worker thread's flush must not see the dicts change)."""
        return [cq for queues in list(self._queues.values()) for cq in list(queues.values())]

    def delete_queue(self, topic: str, queue_id: int) -> None:
        """Destroy one queue and its directory, files it could not map included."""
        if not _TOPIC_NAME.match(topic):
            raise ValueError(f"topic {topic!r} is not a valid directory name")
        queues = self._queues.get(topic, {})
        cq = queues.pop(queue_id, None)
        if not queues:
            self._queues.pop(topic, None)
        queue_dir = os.path.join(self.root_dir, topic, str(queue_id))
        if cq is not None:
            self._forget(cq)
            cq.destroy()
        shutil.rmtree(queue_dir, ignore_errors=True)
        log.info("deleted consume queue %s:%d (%s)", topic, queue_id, queue_dir)

    def delete_topic(self, topic: str) -> None:
        """Destroy the topic's queues and remove its directory."""
        if not _TOPIC_NAME.match(topic):
            raise ValueError(f"topic {topic!r} is not a valid directory name")
        queues = self._queues.pop(topic, {})
        for cq in queues.values():
            self._forget(cq)
            cq.destroy()
        topic_dir = os.path.join(self.root_dir, topic)
        shutil.rmtree(topic_dir, ignore_errors=True)
        log.info("deleted the %d consume queues of topic %s (%s)", len(queues), topic, topic_dir)

    # -- store-wide operations ---------------------------------------------------------
    def truncate_phys(self, phys_offset: int) -> int:
        """Remove units at or past commit-log *phys_offset* in every queue; return how many."""
        return sum(cq.truncate_phys(phys_offset) for cq in self.all_queues())

    def delete_expired(self, commitlog_min_phys: int) -> int:
        """Delete segments below the commit log's head in every queue; return how many."""
        return sum(cq.delete_expired(commitlog_min_phys) for cq in self.all_queues())

    # -- internals ---------------------------------------------------------------------
    def _new_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        return ConsumeQueue(
            topic,
            queue_id,
            os.path.join(self.root_dir, topic, str(queue_id)),
            units_per_file=self.units_per_file,
            io=self._io,
            on_use=self._on_use,
        )
