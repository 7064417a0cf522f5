"""Output of the admin commands: aligned text tables for people, JSON for scripts.

::

    >>> print(render(["BROKER", "QUEUE", "LAG"], [["broker-a", 0, 12], ["broker-b", 1, 3]]))
    BROKER    QUEUE  LAG
    broker-a      0   12
    broker-b      1    3

A column whose every cell is a number (or ``-`` for none) is right-aligned;
``None`` prints as ``-``. :func:`dump_json` writes dataclasses, mappings and
lists as indented JSON.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["cell", "dump_json", "render", "render_mapping", "time_ms"]

NONE = "-"


def cell(value: Any) -> str:
    if value is None:
        return NONE
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple, set, frozenset)):
        return ",".join(str(v) for v in value) or NONE
    return str(value)


def _numeric(text: str) -> bool:
    return text == NONE or text.lstrip("-").replace(".", "", 1).isdigit()


def render(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """An aligned table: headers, then one line per row, two spaces between columns."""
    cells = [[cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    right = [bool(cells) and all(_numeric(r[i]) for r in cells) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right, strict=True)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), *(line(r) for r in cells)])


def render_mapping(columns: Mapping[str, Mapping[str, Any]], *, key_header: str = "KEY") -> str:
    """Keys down, one column per source (``{"broker-a": {...}, "broker-b": {...}}``)."""
    keys = sorted({k for table in columns.values() for k in table})
    return render(
        [key_header, *columns], [[k, *(table.get(k) for table in columns.values())] for k in keys]
    )


def time_ms(ms: int) -> str | None:
    """Local wall-clock time of *ms* since the epoch; None for 0 (never)."""
    if ms <= 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def dump_json(value: Any) -> str:
    return json.dumps(_plain(value), indent=2, ensure_ascii=False, sort_keys=False)
