"""The data directory: its paths, the ``lock`` file and the ``abort`` marker.

``lock`` is held with ``flock`` for the life of the store, so a second broker
on the same directory gets a clear error instead of corrupting the first one's
files. ``abort`` exists while a store runs; finding it at start means the last
run did not shut down cleanly and recovery must distrust the tail.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os

from pocketmq.common.errors import StoreLockedError

__all__ = ["DataDirectory"]


class DataDirectory:
    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.commitlog = os.path.join(self.root, "commitlog")
        self.consumequeue = os.path.join(self.root, "consumequeue")
        self.index = os.path.join(self.root, "index")
        self.config = os.path.join(self.root, "config")
        self.checkpoint = os.path.join(self.root, "checkpoint")
        self.deleted_queues = os.path.join(self.root, "deletedQueues.json")
        self.geometry = os.path.join(self.root, "storeGeometry.json")
        self.epochs = os.path.join(self.root, "epochs")
        self.producers = os.path.join(self.root, "producers")
        self.abort = os.path.join(self.root, "abort")
        self.lock = os.path.join(self.root, "lock")
        self._lock_fd: int | None = None

    def create(self) -> None:
        for path in (self.root, self.commitlog, self.consumequeue, self.index, self.config):
            os.makedirs(path, exist_ok=True)

    def acquire_lock(self) -> None:
        """Take the directory's lock or raise :class:`StoreLockedError`."""
        fd = os.open(self.lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StoreLockedError(
                f"data directory {self.root} is in use by another broker (pid {holder}); "
                "stop it or give this broker its own --data-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd

    def release_lock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def record_geometry(self, geometry: dict[str, int]) -> None:
        """Keep the file sizes the store runs with in ``storeGeometry.json``, so offline
        tools (``store verify``) read index files without guessing; rewritten
        (atomically) only when they change."""
        if self.read_geometry() == geometry:
            return
        tmp = self.geometry + ".tmp"
        with open(tmp, "w") as f:
            json.dump(geometry, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.geometry)

    def read_geometry(self) -> dict[str, int]:
        """What :meth:`record_geometry` kept; {} when there is none (or it is unreadable)."""
        try:
            with open(self.geometry) as f:
                data = json.load(f)
        except (OSError, ValueError):
            return {}
        return (
            {k: v for k, v in data.items() if isinstance(v, int)} if isinstance(data, dict) else {}
        )

    def was_clean_shutdown(self) -> bool:
        return not os.path.exists(self.abort)

    def mark_running(self) -> None:
        fd = os.open(self.abort, os.O_WRONLY | os.O_CREAT, 0o644)
        os.fsync(fd)
        os.close(fd)

    def mark_clean_shutdown(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.abort)
