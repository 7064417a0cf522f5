"""Injected time, so that services and tests agree on what "now" is."""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (store and born timestamps)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (timeouts, intervals)."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock a test moves by hand."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = now_ms
        self._mono = 0.0

    def now_ms(self) -> int:
        return self._now_ms

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._now_ms += int(seconds * 1000)
        self._mono += seconds
