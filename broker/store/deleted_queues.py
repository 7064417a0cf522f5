"""DeletedQueues: where in the commit log a deleted topic's (or queue's) records end.

RocketMQ keeps a deleted topic's records in the commit log until retention
removes the segment, and never dispatches them again. Recovery re-dispatches
the log from a checkpoint, and rebuilds a queue it finds damaged from the head
of the log, so the store must remember what was deleted, or a kill -9 after
DeleteTopic brings the topic's messages back (and a topic created again under
the name would show them). One JSON file, ``DATA/deletedQueues.json``::

    {"topics": {"TopicA": {"offset": 1048576, "queues": {"5": 2097152}}}}

A record of ``(topic, queue_id)`` at commit-log offset ``phys`` is dead when
``phys < max(topics[topic].offset, topics[topic].queues[queue_id])``: the offset
is the end of the commit log when the topic (or the queue, dropped by an
UpdateTopic to fewer queues) was deleted. Records written later, by a topic
created again, lie at or past it and live. Offsets only grow.

The file is replaced atomically (temp file, fsync, rename, fsync of the
directory) before the deletion is answered; a damaged file stops the store
from starting, since guessing would revive or lose topics.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterable
from typing import Any

from pocketmq.common.errors import StoreError

__all__ = ["DeletedQueues"]

log = logging.getLogger(__name__)


class DeletedQueues:
    def __init__(self, path: str) -> None:
        self.path = path
        self._topic_offsets: dict[str, int] = {}
        self._queue_offsets: dict[str, dict[int, int]] = {}

    def __bool__(self) -> bool:
        return bool(self._topic_offsets or self._queue_offsets)

    # -- reading ---------------------------------------------------------------------
    def load(self) -> DeletedQueues:
        """Read the file (none yet: nothing was deleted); :class:`StoreError` if damaged."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return self
        try:
            data = json.loads(raw)
            for topic, entry in data["topics"].items():
                if entry.get("offset", 0):
                    self._topic_offsets[topic] = int(entry["offset"])
                queues = {int(q): int(o) for q, o in entry.get("queues", {}).items()}
                if queues:
                    self._queue_offsets[topic] = queues
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreError(
                f"{self.path} is damaged ({exc!r}); it says which deleted "
                "topics' records must stay deleted. Restore it from a backup, "
                "or remove it to bring every deleted topic back"
            ) from None
        return self

    def dead_below(self, topic: str, queue_id: int) -> int:
        """Commit-log offset below which records of (*topic*, *queue_id*) are deleted."""
        offset = self._topic_offsets.get(topic, 0)
        queues = self._queue_offsets.get(topic)
        if queues:
            offset = max(offset, queues.get(queue_id, 0))
        return offset

    def is_dead(self, topic: str, queue_id: int, phys_offset: int) -> bool:
        return phys_offset < self.dead_below(topic, queue_id)

    # -- recording -------------------------------------------------------------------
    def delete_topic(self, topic: str, offset: int) -> None:
        """Record, durably, that *topic*'s records below *offset* are deleted."""
        self.delete_topics([topic], offset)

    def delete_topics(self, topics: Iterable[str], offset: int) -> None:
        """Record, durably and in one write, that the records of *topics* below *offset*
        are deleted (a batch delete)."""
        doomed = set(topics)
        topic_offsets = dict(self._topic_offsets)
        for topic in doomed:
            topic_offsets[topic] = max(offset, topic_offsets.get(topic, 0))
        queue_offsets = {t: q for t, q in self._queue_offsets.items() if t not in doomed}
        self._save(topic_offsets, queue_offsets)

    def delete_queues(self, topic: str, queue_ids: Iterable[int], offset: int) -> None:
        """Record, durably, that the records of these queues below *offset* are deleted."""
        queue_offsets = {t: dict(q) for t, q in self._queue_offsets.items()}
        queues = queue_offsets.setdefault(topic, {})
        for queue_id in queue_ids:
            queues[queue_id] = max(offset, queues.get(queue_id, 0))
        self._save(dict(self._topic_offsets), queue_offsets)

    def _save(
        self,
        topic_offsets: dict[str, int],
        queue_offsets: dict[str, dict[int, int]],
    ) -> None:
        """Replace the file, then the tables (an OSError leaves both as they were)."""
        data: dict[str, Any] = {"topics": {}}
        for topic in sorted(set(topic_offsets) | set(queue_offsets)):
            entry: dict[str, Any] = {"offset": topic_offsets.get(topic, 0)}
            if queue_offsets.get(topic):
                entry["queues"] = {str(q): o for q, o in sorted(queue_offsets[topic].items())}
            data["topics"][topic] = entry
        tmp = self.path + ".tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(json.dumps(data, indent=1, sort_keys=True).encode())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        dir_fd = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self._topic_offsets, self._queue_offsets = topic_offsets, queue_offsets
        log.info("recorded deleted queues in %s: %d topics", self.path, len(data["topics"]))
