"""Master epochs: which master wrote which part of the commit log, and where two logs agree.

Every master term has an epoch, a number that only grows; the first byte it
wrote is the epoch's start offset. The store keeps the list in ``DATA/epochs``,
one entry a line, oldest first::

    1 0
    2 1073741824          <epoch> <start offset>; epoch 2 wrote [1073741824, next start)
    4 1180000000          (epochs may skip: 3 was a term that wrote nothing here)

The file is replaced whole (temporary file, fsync, rename, fsync of the
directory), so a crash leaves the old list or the new one. An epoch ends
where the next one starts; the last ends at the log's end.

:func:`consistent_point` is the rule a replica's log is cut by when it joins a
master (RocketMQ 5's ``findConsistentPoint``, Kafka's KIP-101 and KIP-279):
walk the replica's epochs newest first; the first one the master has *with
the same start offset* is shared history, and both logs are identical up to
the smaller of the two ends of that epoch. No shared epoch: the logs share
nothing and the replica starts again from the master's log.

Pure file and list code: no network, no event loop.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import NamedTuple

from pocketmq.common.errors import ConfigError

__all__ = ["EpochEntry", "EpochFile", "consistent_point", "epoch_end"]


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


def epoch_end(entries: Sequence[EpochEntry], i: int, log_end: int) -> int:
    """Where entry *i* of *entries* ends: the next entry's start, or *log_end*."""
    return entries[i + 1].start_offset if i + 1 < len(entries) else log_end


def consistent_point(
    local: Sequence[EpochEntry], local_end: int, remote: Sequence[EpochEntry], remote_end: int
) -> int | None:
    """The offset up to which the *local* and *remote* logs hold the same bytes.

    ``None`` when they share no epoch (the local log must be dropped whole). An
    empty *local* list with ``local_end == 0`` is an empty log: 0.
    """
    if not local:
        return 0 if local_end == 0 else None
    starts = {e.epoch: (i, e.start_offset) for i, e in enumerate(remote)}
    for i in range(len(local) - 1, -1, -1):
        found = starts.get(local[i].epoch)
        if found is None or found[1] != local[i].start_offset:
            continue
        return min(epoch_end(local, i, local_end), epoch_end(remote, found[0], remote_end))
    return None


class EpochFile:
    """``DATA/epochs``: the ``<epoch, start offset>`` entries of one store."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.entries: list[EpochEntry] = []

    def load(self) -> list[EpochEntry]:
        entries: list[EpochEntry] = []
        try:
            with open(self.path, encoding="ascii") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            self.entries = []
            return []
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            parts = line.split()
            try:
                epoch, start = int(parts[0]), int(parts[1])
                if len(parts) != 2:
                    raise ValueError
            except (ValueError, IndexError):
                raise ConfigError(
                    f"{self.path}:{n}: {line!r} is not '<epoch> <start offset>'; "
                    "restore the file from a replica or remove it to rejoin "
                    "as an empty replica"
                ) from None
            if entries and (epoch <= entries[-1].epoch or start < entries[-1].start_offset):
                raise ConfigError(
                    f"{self.path}:{n}: epoch {epoch} at {start} does not follow "
                    f"epoch {entries[-1].epoch} at {entries[-1].start_offset}"
                )
            entries.append(EpochEntry(epoch, start))
        self.entries = entries
        return list(entries)

    @property
    def last_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else 0

    def begin(self, epoch: int, start_offset: int) -> None:
        """Record that *epoch* writes from *start_offset* on (a new master term)."""
        if self.entries and epoch <= self.entries[-1].epoch:
            raise ValueError(f"epoch {epoch} is not above the last one, {self.entries[-1].epoch}")
        if self.entries and start_offset < self.entries[-1].start_offset:
            raise ValueError(
                f"epoch {epoch} cannot start at {start_offset}, before epoch "
                f"{self.entries[-1].epoch} at {self.entries[-1].start_offset}"
            )
        entries = list(self.entries)
        if entries and entries[-1].start_offset == start_offset:
            entries.pop()  # the previous term wrote nothing: it owns no bytes
        entries.append(EpochEntry(epoch, start_offset))
        self._write(entries)

    def replace(self, entries: Sequence[EpochEntry]) -> None:
        self._write(list(entries))

    def truncate(self, offset: int) -> list[EpochEntry]:
        """Forget epochs that start at or past *offset* (their bytes were cut)."""
        kept = [e for e in self.entries if e.start_offset < offset]
        if kept != self.entries:
            self._write(kept)
        return list(kept)

    def _write(self, entries: list[EpochEntry]) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="ascii") as f:
            f.write("".join(f"{e.epoch} {e.start_offset}\n" for e in entries))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self.entries = entries
