"""Crash-safe JSON files for broker metadata (topics.json, consumerOffset.json).

RocketMQ's ``ConfigManager`` keeps each table in one JSON file and the
previous version beside it as ``.bak``. A save here goes::

    write FILE.tmp ─ fsync ─ rename FILE → FILE.bak ─ rename FILE.tmp → FILE ─ fsync dir

so at every instant either FILE or FILE.bak holds a complete table. A load
reads FILE and, when it is missing (a crash between the two renames) or
unreadable (a damaged disk, a hand edit gone wrong), falls back to FILE.bak
with a warning naming the file and the reason.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
from typing import Any

from pocketmq.broker.errors import BrokerError, DiskFullError, MetadataError

__all__ = ["JsonFile"]

log = logging.getLogger(__name__)


class JsonFile:
    def __init__(self, path: str) -> None:
        self.path = path
        self.bak_path = path + ".bak"
        self.tmp_path = path + ".tmp"

    def load(self) -> dict[str, Any] | None:
        """The newest readable table, or None when neither file exists."""
        main, problem = self._read(self.path)
        if main is not None:
            return main
        bak, bak_problem = self._read(self.bak_path)
        if bak is not None:
            if problem:
                log.warning(
                    "%s is unreadable (%s); loaded the previous version from %s",
                    self.path,
                    problem,
                    self.bak_path,
                )
            else:
                log.warning(
                    "%s is missing; loaded the previous version from %s", self.path, self.bak_path
                )
            return bak
        if problem or bak_problem:
            # Both exist and both are damaged: refuse to start on an empty table silently.
            raise MetadataError(
                f"cannot read {self.path} ({problem or 'missing'}) nor "
                f"{self.bak_path} ({bak_problem or 'missing'}); repair or remove "
                "them to start with an empty table"
            )
        return None

    @staticmethod
    def _read(path: str) -> tuple[dict[str, Any] | None, str]:
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None, ""
        except OSError as exc:
            return None, f"{exc.strerror} (errno {exc.errno})"
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return None, f"not valid JSON: {exc}"
        if not isinstance(data, dict):
            return None, f"top level is a {type(data).__name__}, expected an object"
        return data, ""

    def refusal(self, exc: OSError) -> BrokerError:
        """The error a request gets when :meth:`save` failed with *exc* (nothing changed)."""
        if exc.errno == errno.ENOSPC:
            return DiskFullError(
                f"disk full: cannot write {self.path} ({exc.strerror}); "
                "nothing was changed; retry once space is freed"
            )
        return BrokerError(
            f"cannot write {self.path}: {exc.strerror or exc} (errno "
            f"{exc.errno}); nothing was changed"
        )

    def save(self, data: dict[str, Any], *, indent: int | None = 2) -> None:
        """Replace the file atomically, keeping the previous one as ``.bak``. With
        ``indent=None`` the JSON is compact and keys keep their order (large tables)."""
        directory = os.path.dirname(self.path) or "."
        os.makedirs(directory, exist_ok=True)
        if indent is None:
            raw = json.dumps(data, separators=(",", ":")).encode()
        else:
            raw = json.dumps(data, indent=indent, sort_keys=True).encode()
        try:
            with open(self.tmp_path, "wb") as f:
                f.write(raw)
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            with contextlib.suppress(OSError):  # a partial temp file only takes space
                os.unlink(self.tmp_path)
            raise
        if os.path.exists(self.path):
            os.replace(self.path, self.bak_path)
        os.replace(self.tmp_path, self.path)
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
