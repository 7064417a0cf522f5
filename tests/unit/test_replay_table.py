"""RecentSignatures: a signature is admitted once within its window; memory stays bounded."""

from __future__ import annotations

import pytest

from pocketmq.security.replay import RecentSignatures

WINDOW_MS = 300_000


def test_a_signature_is_admitted_once_within_its_window():
    seen = RecentSignatures(WINDOW_MS)
    assert seen.admit("sig", timestamp_ms=1_000, now_ms=1_000)
    assert not seen.admit("sig", timestamp_ms=1_000, now_ms=1_000 + WINDOW_MS)
    assert seen.admit("other", timestamp_ms=1_000, now_ms=1_000)


def test_entries_leave_once_their_timestamp_is_out_of_the_window():
    seen = RecentSignatures(WINDOW_MS)
    seen.admit("old", timestamp_ms=0, now_ms=0)
    seen.admit("new", timestamp_ms=WINDOW_MS, now_ms=WINDOW_MS)
    seen.admit("later", timestamp_ms=WINDOW_MS + 1, now_ms=WINDOW_MS + 1)
    assert len(seen) == 2  # "old" expired: the timestamp check refuses it from now on


def test_the_table_is_bounded_and_forgets_the_oldest_first():
    seen = RecentSignatures(WINDOW_MS, max_entries=2)
    for sig in ("a", "b", "c"):
        assert seen.admit(sig, timestamp_ms=0, now_ms=0)
    assert len(seen) == 2 and seen.evicted_early == 1
    assert seen.admit("a", timestamp_ms=0, now_ms=0)  # forgotten early: admitted again
    assert not seen.admit("c", timestamp_ms=0, now_ms=0)


def test_a_table_without_room_is_a_config_error():
    with pytest.raises(ValueError, match="max_entries is 0"):
        RecentSignatures(WINDOW_MS, max_entries=0)
