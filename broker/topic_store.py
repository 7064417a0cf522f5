"""TopicTableStore: the topic table on disk, a snapshot plus a change log.

``config/topics.json`` is a snapshot of the table in RocketMQ's shape (see
:mod:`.topic_config`), saved through :class:`~pocketmq.broker.json_file.JsonFile`;
``config/topics.log`` (:mod:`.topic_log`) holds every change since. A change
costs one appended record, whatever the table's size; the snapshot is rewritten
by a *compaction* once the log has grown as large as the snapshot (and at least
``min_compact_bytes``), so the total bytes written stay linear in the bytes of
changes. The snapshot's JSON is built and written in a worker thread, from a
shallow copy of the table taken on the owner's thread, while new changes go to
a fresh log.

This module stores JSON-ready dicts and knows nothing of validation; the owner
(:class:`~pocketmq.broker.topic_config.TopicConfigManager`) converts.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pocketmq.broker.json_file import JsonFile
from pocketmq.broker.topic_log import LogRecord, TopicLog

__all__ = ["LoadedTable", "TopicTableStore"]

log = logging.getLogger(__name__)

DEFAULT_MIN_COMPACT_BYTES = 4 * 1024 * 1024

# A copy of the table: name -> something with .to_json(); converted in the worker thread.
Snapshot = Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadedTable:
    table: dict[str, dict[str, Any]]  # topic -> TopicConfig JSON, snapshot + log applied
    timestamp_ms: int
    counter: int
    snapshot_found: bool  # False: neither topics.json nor its .bak existed
    replayed: int  # log records applied over the snapshot
    cut_bytes: int  # torn or damaged log bytes removed


class TopicTableStore:
    def __init__(
        self, config_dir: str, *, min_compact_bytes: int = DEFAULT_MIN_COMPACT_BYTES
    ) -> None:
        self.snapshot = JsonFile(os.path.join(config_dir, "topics.json"))
        self.log = TopicLog(os.path.join(config_dir, "topics.log"))
        self._min_compact_bytes = min_compact_bytes
        self._snapshot_bytes = 0
        self._task: asyncio.Task[None] | None = None
        self.compactions = 0

    # -- load --------------------------------------------------------------------------
    def load(self) -> LoadedTable:
        data = self.snapshot.load()
        version = (data or {}).get("dataVersion", {})
        ts, counter = int(version.get("timestamp", 0)), int(version.get("counter", 0))
        table: dict[str, dict[str, Any]] = dict((data or {}).get("topicConfigTable", {}))
        self._snapshot_bytes = _size(self.snapshot.path)
        records, cut = self.log.load()
        replayed = 0
        for record in records:
            if record.counter <= counter:
                continue  # already in the snapshot (a crash mid-compaction)
            if record.counter != counter + 1:
                log.warning(
                    "%s: changes of data versions %d..%d are missing (the snapshot "
                    "came from %s); topics they made are lost",
                    self.log.path,
                    counter + 1,
                    record.counter - 1,
                    self.snapshot.bak_path,
                )
            for raw in record.put:
                table[str(raw["topicName"])] = raw
            for name in record.delete:
                table.pop(name, None)
            ts, counter = record.timestamp_ms, record.counter
            replayed += 1
        return LoadedTable(
            table=table,
            timestamp_ms=ts,
            counter=counter,
            snapshot_found=data is not None,
            replayed=replayed,
            cut_bytes=cut,
        )

    # -- changes -----------------------------------------------------------------------
    def append(self, record: LogRecord) -> int:
        """Append one change durably; raises OSError (nothing appended)."""
        return self.log.append(record)

    @property
    def needs_compaction(self) -> bool:
        return self._task is None and self.log.size_bytes >= max(
            self._min_compact_bytes, self._snapshot_bytes
        )

    @property
    def compacting(self) -> bool:
        return self._task is not None and not self._task.done()

    # -- compaction ----------------------------------------------------------------------
    def compact(self, table: Snapshot, timestamp_ms: int, counter: int) -> None:
        """Compact now, on this thread (load, shutdown, tests)."""
        if self.log.compacting:  # left by a crash: *table* holds both logs' records
            self.replace(table, timestamp_ms, counter)
            return
        self.log.rotate()
        self._write(table, timestamp_ms, counter)
        self.log.finish_compaction()

    def compact_in_background(
        self,
        table: Snapshot,
        timestamp_ms: int,
        counter: int,
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        """Rotate the log now and write the snapshot in a worker thread; without a
        running event loop, compact on this thread."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.compact(table, timestamp_ms, counter)
            return
        self.log.rotate()

        async def run() -> None:
            try:
                await asyncio.to_thread(self._write, table, timestamp_ms, counter)
                self.log.finish_compaction()
            except Exception as exc:  # the log still holds every change: nothing is lost
                log.error(
                    "compaction of %s failed: %s; the change log keeps growing and the "
                    "next compaction retries",
                    self.snapshot.path,
                    exc,
                )
                if on_error is not None:
                    on_error(exc)
            finally:
                self._task = None

        self._task = loop.create_task(run(), name="TopicCompactionService")

    async def wait_compacted(self) -> None:
        """Let a background compaction finish (the owner's stop())."""
        task = self._task
        if task is not None:
            await asyncio.shield(task)

    def replace(self, table: Snapshot, timestamp_ms: int, counter: int) -> None:
        """A new table wholesale (a replica took its master's): snapshot it, drop the log."""
        self._write(table, timestamp_ms, counter)
        self.log.reset()

    def _write(self, table: Snapshot, timestamp_ms: int, counter: int) -> None:
        self.snapshot.save(
            {
                "dataVersion": {"timestamp": timestamp_ms, "counter": counter},
                "topicConfigTable": {name: table[name].to_json() for name in sorted(table)},
            },
            indent=None,
        )
        self._snapshot_bytes = _size(self.snapshot.path)
        self.compactions += 1
        log.info(
            "compacted the topic table into %s: %d topics, %d bytes, data version %d",
            self.snapshot.path,
            len(table),
            self._snapshot_bytes,
            counter,
        )

    def close(self) -> None:
        self.log.close()


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
