"""Allocation strategies: every member's share from the same sorted inputs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pocketmq.client.allocate import (
    ALLOCATE_STRATEGIES,
    allocate_averagely,
    allocate_by_circle,
    allocate_consistent_hash,
    resolve_strategy,
)
from pocketmq.client.model import MessageQueue


def queues(n: int, brokers: int = 1) -> list[MessageQueue]:
    return sorted(MessageQueue("t", f"b{b}", q) for b in range(brokers) for q in range(n))


def ids(n: int) -> list[str]:
    return sorted(f"10.0.0.{i}@{i}" for i in range(n))


def test_averagely_gives_contiguous_blocks_and_the_first_members_one_more():
    mqs, cids = queues(8), ids(3)
    shares = [allocate_averagely("g", c, mqs, cids) for c in cids]
    assert [[q.queue_id for q in s] for s in shares] == [[0, 1, 2], [3, 4, 5], [6, 7]]


def test_averagely_with_more_members_than_queues_leaves_some_idle():
    mqs, cids = queues(2), ids(3)
    shares = [allocate_averagely("g", c, mqs, cids) for c in cids]
    assert [[q.queue_id for q in s] for s in shares] == [[0], [1], []]


def test_circle_deals_queues_round_robin():
    mqs, cids = queues(8), ids(3)
    shares = [allocate_by_circle("g", c, mqs, cids) for c in cids]
    assert [[q.queue_id for q in s] for s in shares] == [[0, 3, 6], [1, 4, 7], [2, 5]]


def test_a_member_not_yet_registered_takes_nothing():
    for strategy in ALLOCATE_STRATEGIES.values():
        assert strategy("g", "stranger", queues(4), ids(2)) == []


def test_consistent_hash_moves_only_the_leavers_queues():
    mqs, cids = queues(32, brokers=2), ids(4)
    before = {c: set(allocate_consistent_hash("g", c, mqs, cids)) for c in cids}
    remaining = cids[:3]
    after = {c: set(allocate_consistent_hash("g", c, mqs, remaining)) for c in remaining}
    for c in remaining:
        assert before[c] <= after[c]


@pytest.mark.parametrize("name", sorted(ALLOCATE_STRATEGIES))
@given(n_queues=st.integers(0, 40), n_ids=st.integers(1, 9))
def test_every_queue_has_exactly_one_owner(name, n_queues, n_ids):
    strategy = resolve_strategy(name)
    mqs, cids = queues(n_queues), ids(n_ids)
    owned = [q for c in cids for q in strategy("g", c, mqs, cids)]
    assert sorted(owned) == mqs


def test_unknown_strategy_names_the_known_ones():
    with pytest.raises(ValueError, match="averagely"):
        resolve_strategy("random")
