"""Process limits a broker's queue count needs: open files and memory mappings.

A consume queue that holds messages keeps its segment file open and mapped
(one descriptor and one mapping per segment), so a broker configured for
``max_queues_total`` queues may need that many of each, plus its commit log,
index files and sockets. Linux defaults (``ulimit -n`` 1,024 soft,
``vm.max_map_count`` 65,530) are far below a million queues; the broker checks
at start and warns with the numbers and the command that raises each limit,
instead of failing with EMFILE / ENOMEM at the first busy queue.
"""

from __future__ import annotations

import logging
import resource

__all__ = ["HEADROOM", "limit_warnings", "read_limits", "warn_if_low"]

log = logging.getLogger(__name__)

HEADROOM = 4_096   # descriptors and mappings besides consume queues (commit log, index, sockets)
_MAX_MAP_COUNT = "/proc/sys/vm/max_map_count"


def read_limits() -> tuple[int | None, int | None]:
    """(soft ``RLIMIT_NOFILE``, ``vm.max_map_count``); None where unknown or unlimited."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    nofile = None if soft == resource.RLIM_INFINITY else int(soft)
    try:
        with open(_MAX_MAP_COUNT) as f:
            max_map_count: int | None = int(f.read().strip())
    except (OSError, ValueError):
        max_map_count = None
    return nofile, max_map_count


def limit_warnings(max_queues_total: int, nofile: int | None,
                   max_map_count: int | None) -> list[str]:
    """What is too low for *max_queues_total* queues, each with how to raise it (pure)."""
    need = max_queues_total + HEADROOM
    out = []
    if nofile is not None and nofile < need:
        out.append(f"open files limit (ulimit -n) is {nofile}; max_queues_total "
                   f"{max_queues_total} may need {need} when every queue holds messages: "
                   f"raise it (ulimit -n {need}, LimitNOFILE= in a systemd unit) or lower "
                   "max_queues_total")
    if max_map_count is not None and max_map_count < need:
        out.append(f"vm.max_map_count is {max_map_count}; max_queues_total "
                   f"{max_queues_total} may need {need} mappings when every queue holds "
                   f"messages: raise it (sysctl -w vm.max_map_count={need}) or lower "
                   "max_queues_total")
    return out


def warn_if_low(max_queues_total: int) -> list[str]:
    warnings = limit_warnings(max_queues_total, *read_limits())
    for text in warnings:
        log.warning("%s", text)
    return warnings
