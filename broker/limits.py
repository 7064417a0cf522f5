"""Process limits a broker's queue count needs: open files and memory mappings.

A consume queue in use keeps its segment mapped (one mapping, and the one
descriptor the mapping holds); the store keeps at most
``max_open_consume_queue_files`` of them mapped and unmaps the least recently
used past that. A broker therefore needs ``min(max_queues_total,
max_open_consume_queue_files)`` of each, plus its commit log, index files and
sockets. Linux defaults (``ulimit -n`` 1,024 soft, ``vm.max_map_count``
65,530) may be below that. At start the broker first raises its own soft
open-files limit toward the need, as far as the hard limit allows (as the JVM
does by default with ``-XX:+MaxFDLimit``), then warns with the numbers and the
command that raises each limit still short (or the key that lowers the need),
instead of failing with EMFILE / ENOMEM at the first busy queue.
"""

from __future__ import annotations

import logging
import resource

__all__ = ["HEADROOM", "limit_warnings", "need_of", "raise_nofile", "read_limits", "warn_if_low"]

log = logging.getLogger(__name__)

HEADROOM = 4_096  # descriptors and mappings besides consume queues (commit log, index, sockets)
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


def need_of(max_queues_total: int, max_open_consume_queue_files: int | None) -> int:
    """Descriptors (and mappings) a broker may hold with that many queues in use."""
    if max_open_consume_queue_files:
        return min(max_queues_total, max_open_consume_queue_files) + HEADROOM
    return max_queues_total + HEADROOM


def raise_nofile(need: int) -> tuple[int, int] | None:
    """Raise this process's soft ``RLIMIT_NOFILE`` toward *need*, up to the hard limit.

    Returns ``(before, after)`` when it raised the limit, None when it was
    already enough, unlimited, or the hard limit leaves no room.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return None
    target = need if hard == resource.RLIM_INFINITY else min(need, hard)
    if target <= soft:
        return None
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        return None
    return soft, target


def limit_warnings(
    max_queues_total: int,
    nofile: int | None,
    max_map_count: int | None,
    *,
    max_open_consume_queue_files: int | None = None,
) -> list[str]:
    """What is too low for *max_queues_total* queues, each with how to raise it (pure)."""
    need = need_of(max_queues_total, max_open_consume_queue_files)
    mapped = need - HEADROOM
    what = (
        f"max_queues_total {max_queues_total}"
        if mapped == max_queues_total
        else f"max_open_consume_queue_files {mapped}"
    )
    lower = (
        "lower max_queues_total"
        if mapped == max_queues_total
        else "lower max_open_consume_queue_files"
    )
    out = []
    if nofile is not None and nofile < need:
        out.append(
            f"open files limit (ulimit -n) is {nofile}; {what} may need {need} when "
            f"that many queues are in use: raise it (ulimit -n {need}, LimitNOFILE= "
            f"in a systemd unit) or {lower}"
        )
    if max_map_count is not None and max_map_count < need:
        out.append(
            f"vm.max_map_count is {max_map_count}; {what} may need {need} mappings "
            f"when that many queues are in use: raise it (sysctl -w "
            f"vm.max_map_count={need}) or {lower}"
        )
    return out


def warn_if_low(
    max_queues_total: int, max_open_consume_queue_files: int | None = None
) -> list[str]:
    """Raise the soft open-files limit as far as allowed, then log what is still low."""
    raised = raise_nofile(need_of(max_queues_total, max_open_consume_queue_files))
    if raised is not None:
        log.info("raised the open files limit (ulimit -n) from %d to %d", *raised)
    warnings = limit_warnings(
        max_queues_total, *read_limits(), max_open_consume_queue_files=max_open_consume_queue_files
    )
    for text in warnings:
        log.warning("%s", text)
    return warnings
