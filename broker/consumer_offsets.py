"""ConsumerOffsetManager: where each consumer group is in each queue.

Offsets are kept per ``topic@group`` and queue id, as the next queue offset the
group will consume (RocketMQ's semantics: the committed offset is the first
message not yet consumed). They are persisted to ``config/consumerOffset.json``
in RocketMQ's shape::

    {"offsetTable": {"TopicA@GroupA": {"0": 120, "1": 98}, ...}}

every ``consumer_offset_persist_interval_seconds`` (5 s) when something
changed, and at shutdown, through :class:`~pocketmq.broker.json_file.JsonFile`
(temp file, fsync, rename, previous version kept as ``.bak`` and read when
the main file is unreadable). An offset committed less than one interval
before a crash may be lost; consumption is at-least-once. An admin's reset
(:meth:`ConsumerOffsetManager.commit_durably`) and the offsets of a deleted
topic or queue are saved before the request is answered.

Commits are not required to move forward: a rebalance or an admin reset may
move a group back, and RocketMQ accepts that too.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from pocketmq.broker.errors import IllegalArgumentError
from pocketmq.broker.json_file import JsonFile
from pocketmq.common.aio import cancel_and_wait

__all__ = ["ConsumerOffsetManager"]

log = logging.getLogger(__name__)

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetManager:
    """The offset table; mutated on the event-loop thread only."""

    def __init__(self, config_dir: str, *, persist_interval_seconds: float = 5.0) -> None:
        self._file = JsonFile(os.path.join(config_dir, "consumerOffset.json"))
        self._interval_s = persist_interval_seconds
        self._table: dict[str, dict[int, int]] = {}
        self._dirty = False
        self._save_lock = threading.Lock()  # the periodic save runs in a worker thread
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle ----------------------------------------------------------------------
    def load(self) -> None:
        data = self._file.load()
        if data is None:
            return
        for key, queues in data.get("offsetTable", {}).items():
            try:
                self._table[key] = {int(qid): int(off) for qid, off in queues.items()}
            except (AttributeError, TypeError, ValueError):
                log.warning(
                    "skipping %r in %s: %r is not a queue -> offset map",
                    key,
                    self._file.path,
                    queues,
                )
        log.info(
            "loaded offsets of %d topic@group pairs from %s", len(self._table), self._file.path
        )

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="ConsumerOffsetPersistService"
        )

    async def stop(self) -> None:
        """Cancel the periodic save and write the table one last time."""
        await cancel_and_wait(self._task)
        self._task = None
        await asyncio.to_thread(self.persist)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.run_once()
            except OSError as exc:
                log.error(
                    "cannot persist consumer offsets to %s: %s; retrying in %.0f s",
                    self._file.path,
                    exc,
                    self._interval_s,
                )

    async def run_once(self) -> bool:
        """Save the table if it changed since the last save; True if it did."""
        if not self._dirty:
            return False
        snapshot = self._snapshot()
        self._dirty = False
        try:
            await asyncio.to_thread(self._save, snapshot)
        except BaseException:
            self._dirty = True
            raise
        return True

    def persist(self) -> None:
        """Save now (shutdown); safe to call from a worker thread."""
        self._save(self._snapshot())
        self._dirty = False

    def _snapshot(self) -> dict[str, Any]:
        return {
            "offsetTable": {
                key: {str(q): o for q, o in sorted(queues.items())}
                for key, queues in sorted(self._table.items())
            }
        }

    def _save(self, snapshot: dict[str, Any]) -> None:
        with self._save_lock:
            self._file.save(snapshot)

    # -- offsets ------------------------------------------------------------------------
    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        if offset < 0:
            raise IllegalArgumentError(f"consumer offset is {offset}; offsets are >= 0")
        queues = self._table.setdefault(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {})
        previous = queues.get(queue_id)
        if previous != offset:
            queues[queue_id] = offset
            self._dirty = True
            if previous is not None and offset < previous:
                log.debug(
                    "group %s moved back on %s:%d from %d to %d",
                    group,
                    topic,
                    queue_id,
                    previous,
                    offset,
                )

    def commit_durably(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """Commit *offsets* (queue id -> offset) and save the table before returning.

        When the file cannot be written the commits are undone and the request's
        error raised (:class:`~pocketmq.broker.errors.DiskFullError` on ENOSPC).
        """
        key = f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"
        before = dict(self._table.get(key, {}))
        had_key = key in self._table
        for queue_id, offset in offsets.items():
            self.commit(group, topic, queue_id, offset)
        try:
            self.persist()
        except OSError as exc:
            if had_key:
                self._table[key] = before
            else:
                self._table.pop(key, None)
            self._dirty = True
            raise self._file.refusal(exc) from None

    def remove_queues(self, topic: str, queue_ids: set[int]) -> None:
        """Forget every group's offsets of the given queues of *topic* (deleted queues)."""
        prefix = f"{topic}{TOPIC_GROUP_SEPARATOR}"
        for key, queues in self._table.items():
            if key.startswith(prefix):
                for queue_id in queue_ids & queues.keys():
                    del queues[queue_id]
                    self._dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        queues = self._table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}")
        return None if queues is None else queues.get(queue_id)

    def offsets(self, group: str, topic: str) -> dict[int, int]:
        return dict(self._table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {}))

    def topics_of_group(self, group: str) -> list[str]:
        suffix = f"{TOPIC_GROUP_SEPARATOR}{group}"
        return sorted(key[: -len(suffix)] for key in self._table if key.endswith(suffix))

    def group_topics(self) -> dict[str, list[str]]:
        """Every group with stored offsets -> its topics, sorted."""
        out: dict[str, list[str]] = {}
        for key in sorted(self._table):
            topic, _, group = key.partition(TOPIC_GROUP_SEPARATOR)
            out.setdefault(group, []).append(topic)
        return out

    def entries(self) -> list[tuple[str, str, int, int]]:
        """Every stored offset as (group, topic, queue id, offset)."""
        out: list[tuple[str, str, int, int]] = []
        for key, queues in self._table.items():
            topic, _, group = key.partition(TOPIC_GROUP_SEPARATOR)
            out.extend((group, topic, q, o) for q, o in queues.items())
        return out

    def merge_max(self, entries: list[tuple[str, str, int, int]]) -> int:
        """Take a master's offsets where they are ahead (a replica's sync): an offset
        never moves back, so a consumer that committed to the replica keeps its
        place. Returns how many moved."""
        moved = 0
        for group, topic, queue_id, offset in entries:
            queues = self._table.setdefault(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {})
            if offset > queues.get(queue_id, -1):
                queues[queue_id] = offset
                moved += 1
        if moved:
            self._dirty = True
        return moved

    def replace_all(self, entries: list[tuple[str, str, int, int]]) -> None:
        """Take a master's offsets as they are (a replica whose diverged tail was cut:
        its own offsets may count records the master never had)."""
        table: dict[str, dict[int, int]] = {}
        for group, topic, queue_id, offset in entries:
            table.setdefault(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {})[queue_id] = offset
        if table != self._table:
            self._table = table
            self._dirty = True

    def clamp(self, max_offset: Callable[[str, int], int]) -> int:
        """Move every offset past its queue's end (``max_offset(topic, queue id)``) back to
        it; how many moved."""
        moved = 0
        for key, queues in self._table.items():
            topic = key.partition(TOPIC_GROUP_SEPARATOR)[0]
            for queue_id, offset in queues.items():
                end = max_offset(topic, queue_id)
                if offset > end:
                    queues[queue_id] = end
                    moved += 1
        if moved:
            self._dirty = True
        return moved

    def remove_group(self, group: str, topic: str) -> None:
        """Forget *group*'s offsets of *topic* (a deleted consumer group)."""
        if self._table.pop(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", None) is not None:
            self._dirty = True

    def remove_topic(self, topic: str) -> None:
        """Forget every group's offsets of a deleted topic."""
        prefix = f"{topic}{TOPIC_GROUP_SEPARATOR}"
        for key in [k for k in self._table if k.startswith(prefix)]:
            del self._table[key]
            self._dirty = True

    @property
    def dirty(self) -> bool:
        return self._dirty
