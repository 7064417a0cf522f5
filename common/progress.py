"""Progress of long work, as throttled lines: store recovery, ``store verify``, ``bench``.

A :class:`Progress` is told how far a job has come (``update(done)``) and, at
most every ``interval_s`` seconds, hands its *sink* one line::

    recovery: verifying commit log  512.0 MiB / 1.0 GiB (50%)  120.3 MiB/s  ETA 4 s
    produce  42,000 / 100,000 msgs (42%)  8,400 msgs/s  ETA 7 s | 8.6 MB/s  RT ...

The rate is the one since the previous line; the ETA uses the average since the
start (or the time budget, when the job has one). The first line comes only after
``interval_s``, so short work stays silent. ``finish()`` ends with a summary line,
if any line was shown.

Work that only reports ``(phase, done, total)`` — the store's recovery, which
must not know how its progress is shown — gets a :data:`ProgressCallback` from
:func:`phase_progress`. Sinks: :func:`log_sink` (a logger) and
:func:`stream_sink` (a terminal, where the line is redrawn in place, or a file).
No threads, no I/O of its own; the clock is injected so tests step it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TextIO

__all__ = [
    "Progress",
    "ProgressCallback",
    "Sink",
    "format_bytes",
    "log_sink",
    "phase_progress",
    "stream_sink",
]

# (phase, done, total): how far a phase of some long work is; total 0 = unknown.
ProgressCallback = Callable[[str, int, int], None]
# Takes one rendered line; ``final`` is True for the line of finish().
Sink = Callable[[str, bool], None]

_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(n: float) -> str:
    """``1536`` -> ``"1.5 KiB"``."""
    for unit in _BYTE_UNITS:
        if abs(n) < 1024 or unit == _BYTE_UNITS[-1]:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _format_seconds(seconds: float) -> str:
    if seconds < 1:
        return f"{max(seconds, 0):.1f} s"
    s = round(seconds)
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


class Progress:
    """How far one job is, shown as a line at most every *interval_s* seconds.

    *unit* ``"bytes"`` shows sizes in KiB/MiB/GiB, any other word counts
    (``"msgs"``, ``"records"``). *detail*, when given, is called for every line
    and appended after ``|``.
    """

    def __init__(
        self,
        what: str,
        *,
        sink: Sink,
        total: int = 0,
        unit: str = "bytes",
        interval_s: float = 5.0,
        time_budget_s: float | None = None,
        detail: Callable[[], str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self.total = total
        self.unit = unit
        self.done = 0
        self.lines = 0  # lines handed to the sink so far
        self._sink = sink
        self._interval_s = interval_s
        self._time_budget_s = time_budget_s
        self._detail = detail
        self._clock = clock
        self._started = self._last_t = clock()
        self._last_done = 0

    def update(self, done: int, total: int | None = None) -> bool:
        """Record *done*; show a line if *interval_s* has passed since the last one."""
        self.done = done
        if total is not None:
            self.total = total
        if self._clock() - self._last_t < self._interval_s:
            return False
        self.report()
        return True

    def report(self, done: int | None = None) -> None:
        """Show a line now (a ticker's call), with *done* if given."""
        if done is not None:
            self.done = done
        now = self._clock()
        rate = (self.done - self._last_done) / max(now - self._last_t, 1e-9)
        self._last_t, self._last_done = now, self.done
        self.lines += 1
        self._sink(self._line(now, rate), False)

    def finish(self) -> None:
        """End with a summary line, if any line was shown (short work stays silent)."""
        if not self.lines:
            return
        elapsed = self._clock() - self._started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        self._sink(
            f"{self.what}: done, {self._amount(self.done)} in "
            f"{_format_seconds(elapsed)} ({self._rate(rate)})",
            True,
        )

    def _line(self, now: float, rate: float) -> str:
        parts = [f"{self.what}", self._amount(self.done)]
        if self.total > 0:
            parts[-1] += f" / {self._amount(self.total)} ({self.done * 100 // self.total}%)"
        parts.append(self._rate(rate))
        eta = self._eta(now)
        if eta is not None:
            parts.append(f"ETA {_format_seconds(eta)}")
        line = "  ".join(parts)
        if self._detail is not None:
            line += f" | {self._detail()}"
        return line

    def _eta(self, now: float) -> float | None:
        elapsed = now - self._started
        etas = []
        if self.total > 0 and self.done > 0 and elapsed > 0:
            etas.append(max(self.total - self.done, 0) / (self.done / elapsed))
        if self._time_budget_s is not None:
            etas.append(max(self._time_budget_s - elapsed, 0.0))
        return min(etas) if etas else None

    def _amount(self, n: float) -> str:
        return format_bytes(n) if self.unit == "bytes" else f"{n:,.0f} {self.unit}"

    def _rate(self, per_s: float) -> str:
        return f"{format_bytes(per_s)}/s" if self.unit == "bytes" else f"{per_s:,.0f} {self.unit}/s"


def phase_progress(
    sink: Sink,
    *,
    what: str = "",
    unit: str = "bytes",
    interval_s: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
) -> ProgressCallback:
    """A :data:`ProgressCallback` showing each phase as a :class:`Progress` of its own.

    A new phase finishes the previous one; ``total`` 0 means unknown.
    """
    current: list[Progress] = []

    def report(phase: str, done: int, total: int) -> None:
        if not current or current[0].what != f"{what}{phase}":
            if current:
                current.pop().finish()
            current.append(
                Progress(
                    f"{what}{phase}",
                    sink=sink,
                    total=total,
                    unit=unit,
                    interval_s=interval_s,
                    clock=clock,
                )
            )
        current[0].update(done, total)
        if total and done >= total:
            current.pop().finish()

    return report


def log_sink(logger: logging.Logger, level: int = logging.INFO) -> Sink:
    """Each line becomes a log record of *logger*."""

    def emit(line: str, final: bool) -> None:
        logger.log(level, "%s", line)

    return emit


def stream_sink(stream: TextIO, *, tty: bool | None = None) -> Sink:
    """Lines to *stream*: on a terminal redrawn in place (``\\r``), else one per line."""
    in_place = stream.isatty() if tty is None else tty
    width = [0]

    def emit(line: str, final: bool) -> None:
        if in_place:
            pad = " " * max(width[0] - len(line), 0)
            width[0] = 0 if final else len(line)
            stream.write(f"\r{line}{pad}{chr(10) if final else ''}")
        else:
            stream.write(line + "\n")
        stream.flush()

    return emit
