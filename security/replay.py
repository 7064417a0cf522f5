"""RecentSignatures: the signatures seen within the replay window, to refuse them again.

A signature (``common/auth.py``) covers a request's method, timestamp, nonce
and whole body, and holds while its timestamp is within ``REPLAY_WINDOW_MS`` of
the verifier's clock. Someone who copies a request off the wire (or out of a
log) could send it again until then; this table makes the second arrival a
refusal. An entry lives until its own timestamp leaves the window: after that
the timestamp check refuses the request anyway.

Memory is bounded (``max_entries``, 100 000 by default, about 20 MB): past it the
oldest entry goes first. A flood of valid signatures could thus push out an
entry before its window ends; the table logs that once per minute, since the
answer is a larger table or fewer requests per key, not silence.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict

__all__ = ["DEFAULT_MAX_SIGNATURES", "RecentSignatures"]

log = logging.getLogger(__name__)

DEFAULT_MAX_SIGNATURES = 100_000
_EVICTION_LOG_INTERVAL_S = 60.0


class RecentSignatures:
    """Signatures admitted recently; :meth:`admit` is False for one seen before."""

    def __init__(self, window_ms: int, *, max_entries: int = DEFAULT_MAX_SIGNATURES) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries is {max_entries}; it must be >= 1")
        self._window_ms = window_ms
        self._max_entries = max_entries
        self._expiry_ms: OrderedDict[str, int] = OrderedDict()  # in arrival order
        self.evicted_early = 0
        self._logged_eviction_at = -_EVICTION_LOG_INTERVAL_S

    def __len__(self) -> int:
        return len(self._expiry_ms)

    def admit(self, signature: str, timestamp_ms: int, now_ms: int) -> bool:
        """Remember *signature* signed at *timestamp_ms*; False if it is already known."""
        self._expire(now_ms)
        if signature in self._expiry_ms:
            return False
        while len(self._expiry_ms) >= self._max_entries:
            self._expiry_ms.popitem(last=False)
            self.evicted_early += 1
            self._log_eviction()
        self._expiry_ms[signature] = timestamp_ms + self._window_ms
        return True

    def _expire(self, now_ms: int) -> None:
        # Arrival order is nearly expiry order (timestamps are within the window of now);
        # an entry that outlives its window behind a younger one just waits its turn.
        while self._expiry_ms:
            signature, expiry_ms = next(iter(self._expiry_ms.items()))
            if expiry_ms >= now_ms:
                return
            del self._expiry_ms[signature]

    def _log_eviction(self) -> None:
        now = time.monotonic()
        if now - self._logged_eviction_at >= _EVICTION_LOG_INTERVAL_S:
            self._logged_eviction_at = now
            log.warning(
                "more than %d signed requests within the replay window; the oldest "
                "signatures are forgotten early (%d so far), so a replay of them "
                "would pass",
                self._max_entries,
                self.evicted_early,
            )
