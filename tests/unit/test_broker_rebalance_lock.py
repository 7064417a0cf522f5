"""RebalanceLockManager on a manual clock: one holder per queue and group, expiry, unlock."""

from __future__ import annotations

import pytest

from pocketmq.broker.rebalance_lock import MessageQueue, RebalanceLockManager

Q0, Q1, Q2 = (MessageQueue("TopicA", "broker-a", i) for i in range(3))


@pytest.fixture
def locks(manual_clock):
    return RebalanceLockManager(max_live_time_ms=60_000, clock=manual_clock)


def test_the_first_client_wins_and_the_second_gets_only_free_queues(locks):
    assert locks.try_lock_batch("G", "c1", [Q0, Q1]) == [Q0, Q1]
    assert locks.try_lock_batch("G", "c2", [Q0, Q1, Q2]) == [Q2]
    assert (locks.holder("G", Q0), locks.holder("G", Q2)) == ("c1", "c2")


def test_a_holder_locking_again_keeps_and_renews(locks, manual_clock):
    locks.try_lock_batch("G", "c1", [Q0])
    manual_clock.advance(50)
    assert locks.try_lock_batch("G", "c1", [Q0]) == [Q0]
    manual_clock.advance(50)  # 100 s after the first lock, 50 after renewal
    assert locks.try_lock_batch("G", "c2", [Q0]) == []


def test_a_lock_not_renewed_for_60_s_is_taken_over(locks, manual_clock):
    locks.try_lock_batch("G", "c1", [Q0, Q1])
    manual_clock.advance(60)
    assert locks.try_lock_batch("G", "c2", [Q0]) == []  # exactly 60 s: still live
    manual_clock.advance(0.001)
    assert locks.holder("G", Q0) is None
    assert locks.try_lock_batch("G", "c2", [Q0]) == [Q0]
    assert locks.holder("G", Q0) == "c2"
    assert locks.locked_count() == 1  # c1's expired Q1 is dropped too


def test_the_lifetime_is_configurable(manual_clock):
    locks = RebalanceLockManager(max_live_time_ms=200, clock=manual_clock)
    locks.try_lock_batch("G", "c1", [Q0])
    manual_clock.advance(0.201)
    assert locks.try_lock_batch("G", "c2", [Q0]) == [Q0]
    with pytest.raises(ValueError, match="max_live_time_ms must be positive, got 0"):
        RebalanceLockManager(max_live_time_ms=0)


def test_unlock_releases_only_the_callers_locks(locks):
    locks.try_lock_batch("G", "c1", [Q0])
    locks.try_lock_batch("G", "c2", [Q1])
    assert locks.unlock_batch("G", "c1", [Q0, Q1, Q2]) == 1
    assert (locks.holder("G", Q0), locks.holder("G", Q1)) == (None, "c2")
    assert locks.try_lock_batch("G", "c3", [Q0, Q1]) == [Q0]
    assert locks.unlock_batch("other-group", "c1", [Q0]) == 0


def test_groups_lock_independently(locks):
    assert locks.try_lock_batch("G1", "c1", [Q0]) == [Q0]
    assert locks.try_lock_batch("G2", "c2", [Q0]) == [Q0]


def test_a_queue_named_twice_is_answered_once_in_request_order(locks):
    assert locks.try_lock_batch("G", "c1", [Q2, Q0, Q2]) == [Q2, Q0]


def test_queues_of_other_brokers_are_other_queues(locks):
    other = MessageQueue("TopicA", "broker-b", 0)
    locks.try_lock_batch("G", "c1", [Q0])
    assert locks.try_lock_batch("G", "c2", [other]) == [other]
