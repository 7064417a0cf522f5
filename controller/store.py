"""ControllerStore: where the controller's per-broker-name state lives, compare-and-set.

Two implementations behind one narrow protocol:

- :class:`FileControllerStore`: one JSON file in the nameserver's directory,
  written whole to a temporary file, fsynced and renamed; the default on one
  machine (``pocketmq nameserver --controller``).
- :class:`~pocketmq.controller.etcd_store.EtcdControllerStore`: one etcd key
  per broker name, the version being etcd's ``mod_revision``; for deployments
  across machines.

``compare_and_set(name, state, version)`` writes only when the stored version
is still *version* (0 = absent) and returns the new version, else ``None``.
Nothing is told to anybody before it returned.

File layout (``controller.json``)::

    {"groups": {"broker-a": {"version": 7, "state": {...GroupState JSON...}}}}
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Protocol

from pocketmq.controller.errors import ControllerError
from pocketmq.controller.state import GroupState

__all__ = ["ControllerStore", "FileControllerStore", "StateStoreUnavailableError"]

log = logging.getLogger(__name__)


class StateStoreUnavailableError(ControllerError):
    """The store cannot be read or written now (etcd unreachable); retry later."""


class ControllerStore(Protocol):
    async def load_all(self) -> dict[str, tuple[GroupState, int]]: ...
    async def compare_and_set(
        self, broker_name: str, state: GroupState, version: int
    ) -> int | None: ...
    async def close(self) -> None: ...


class FileControllerStore:
    def __init__(self, path: str) -> None:
        self.path = path
        self._groups: dict[str, tuple[GroupState, int]] = {}
        self._lock = asyncio.Lock()
        self._load()

    def _load(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as f:
                raw = json.load(f)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            raise RuntimeError(
                f"cannot read the controller's state from {self.path}: {exc}; "
                "fix or move the file (its .bak, if any, is the previous "
                "version)"
            ) from None
        for name, entry in raw.get("groups", {}).items():
            self._groups[name] = (
                GroupState.from_json(json.dumps(entry["state"])),
                int(entry["version"]),
            )
        log.info("controller state of %d broker names loaded from %s", len(self._groups), self.path)

    async def load_all(self) -> dict[str, tuple[GroupState, int]]:
        return dict(self._groups)

    async def compare_and_set(
        self, broker_name: str, state: GroupState, version: int
    ) -> int | None:
        async with self._lock:
            held = self._groups.get(broker_name)
            if (held[1] if held else 0) != version:
                return None
            groups = dict(self._groups)
            groups[broker_name] = (state, version + 1)
            self._write(groups)
            self._groups = groups
            return version + 1

    def _write(self, groups: dict[str, tuple[GroupState, int]]) -> None:
        doc = {
            "groups": {
                name: {"version": v, "state": json.loads(s.to_json())}
                for name, (s, v) in sorted(groups.items())
            }
        }
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        if os.path.exists(self.path):
            os.replace(self.path, self.path + ".bak")
        os.replace(tmp, self.path)

    async def close(self) -> None:
        return None
