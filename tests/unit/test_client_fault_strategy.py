"""Latency fault tolerance with RocketMQ 5's tables and round-robin queue selection."""

from __future__ import annotations

from collections import Counter

import pytest

from pocketmq.client.fault_strategy import (
    LatencyFaultTolerance,
    QueueSelector,
    not_available_duration_ms,
)
from pocketmq.client.model import MessageQueue

QUEUES = [MessageQueue("t", b, q) for b in ("a", "b") for q in range(4)]


@pytest.mark.parametrize(
    ("latency_ms", "avoid_ms"),
    [
        (0, 0),
        (49, 0),
        (50, 0),
        (100, 0),
        (549, 0),
        (550, 2000),
        (1800, 5000),
        (3000, 6000),
        (5000, 10000),
        (14999, 10000),
        (15000, 30000),
        (60000, 30000),
    ],
)
def test_latency_maps_to_rocketmq5_not_available_durations(latency_ms, avoid_ms):
    assert not_available_duration_ms(latency_ms) == avoid_ms


def test_a_failed_call_isolates_the_broker_for_ten_seconds(manual_clock):
    fault = LatencyFaultTolerance(clock=manual_clock)
    fault.update("a", 3, isolation=True)
    assert not fault.is_available("a")
    manual_clock.advance(9.9)
    assert not fault.is_available("a")
    manual_clock.advance(0.2)
    assert fault.is_available("a")


def test_a_slow_broker_is_avoided_for_the_matching_duration(manual_clock):
    fault = LatencyFaultTolerance(clock=manual_clock)
    fault.update("a", 600)
    assert fault.unavailable() == ["a"]
    manual_clock.advance(2.0)
    assert fault.unavailable() == []


def test_selection_is_round_robin_over_all_queues(manual_clock):
    selector = QueueSelector(LatencyFaultTolerance(clock=manual_clock))
    picks = Counter(selector.select(QUEUES) for _ in range(80))
    assert set(picks.values()) == {10}


def test_selection_avoids_an_isolated_broker(manual_clock):
    fault = LatencyFaultTolerance(clock=manual_clock)
    selector = QueueSelector(fault)
    fault.update("b", 0, isolation=True)
    assert {selector.select(QUEUES).broker_name for _ in range(20)} == {"a"}


def test_a_retry_prefers_another_broker_than_the_last_one(manual_clock):
    selector = QueueSelector(LatencyFaultTolerance(clock=manual_clock))
    assert {selector.select(QUEUES, last_broker_name="a").broker_name for _ in range(20)} == {"b"}


def test_when_every_broker_is_avoided_selection_still_answers(manual_clock):
    fault = LatencyFaultTolerance(clock=manual_clock)
    selector = QueueSelector(fault)
    fault.update("a", 0, isolation=True)
    fault.update("b", 0, isolation=True)
    assert selector.select(QUEUES) in QUEUES


def test_disabled_fault_tolerance_records_nothing(manual_clock):
    fault = LatencyFaultTolerance(clock=manual_clock, enabled=False)
    fault.update("a", 0, isolation=True)
    assert fault.is_available("a")
