"""Which implementation of the store's write path runs: compiled or pure Python.

The loops of a put that touch every record (checking a batch, patching it in
the commit log, building consume-queue units, hashing and inserting index
keys) exist twice: in pure Python next to the format each one serves, which is
the reference and always works, and in C in ``_speedups.c``, an optional
extension that must agree with the reference byte for byte and error message
for error message (``tests/unit/test_speedups.py`` checks it)::

    name               reference                             used by
    scan_batch         batch.py          py_scan_batch       MessageStore.put_batch
    queue_units        batch.py          py_queue_units      MessageStore dispatch
    patch_batch        commitlog.py      py_patch_batch      CommitLog.append_batch
    index_key_hashes   index_file_set.py  py_index_key_hashes IndexFileSet.put_many
    insert_entries     index_file.py     py_insert_entries   IndexFile.put_entries
    gather_records     reads.py          py_gather_records   StoreReader (every read by
                                                             queue offset, pulls above all)

This module is the one place that chooses. The compiled functions are used
when the extension was built (``pip install`` builds it when a C compiler is
there and goes on without it when not) and is the version this source expects,
unless the environment sets ``POCKETMQ_NO_SPEEDUPS=1``. Each module above binds
its public name once, at import, through :func:`pick`; callers in other modules
look the name up on that module at each call, so a test can swap the
implementation (see :func:`picked`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final, TypeVar

from pocketmq.common.extensions import DISABLE_ENV, load_extension

__all__ = ["DISABLE_ENV", "IMPLEMENTATION", "NATIVE", "pick", "picked"]

log = logging.getLogger(__name__)

#: ``_speedups.VERSION`` this source was written with; another build is stale.
_EXPECTED_VERSION: Final = 6

_F = TypeVar("_F", bound=Callable[..., Any])


def _load() -> tuple[ModuleType | None, str]:
    return load_extension("pocketmq.broker.store._speedups", _EXPECTED_VERSION)


#: The compiled module in use, or None when the pure-Python references run.
NATIVE, _REASON = _load()
#: ``"c"`` or ``"python"``: what the store's write path runs on.
IMPLEMENTATION: Final[str] = "c" if NATIVE is not None else "python"
log.debug("store write path: %s (%s)", IMPLEMENTATION, _REASON)

# (module, name) -> (reference, chosen), for every name bound through pick().
_PICKED: dict[tuple[str, str], tuple[Callable[..., Any], Callable[..., Any]]] = {}


def pick(name: str, reference: _F) -> _F:
    """The compiled function *name* when the extension is in use, else *reference*."""
    chosen = reference if NATIVE is None else getattr(NATIVE, name)
    _PICKED[(reference.__module__, name)] = (reference, chosen)
    return chosen


def picked() -> dict[tuple[str, str], tuple[Callable[..., Any], Callable[..., Any]]]:
    """Every bound name: ``(module, name) -> (reference, chosen)``."""
    return dict(_PICKED)
