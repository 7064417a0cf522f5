"""BrokerStatsManager, MovingRate and DurationHistogram, on a manual clock."""

from __future__ import annotations

import pytest

from pocketmq.broker.stats import BrokerStatsManager, MovingRate
from pocketmq.broker.store.batch import scan_batch
from pocketmq.broker.store.flush import DurationHistogram
from pocketmq.common.message import encode_record, pack_host

HOST = pack_host(("127.0.0.1", 10911))


def batch(*topics: str, body: bytes = b"x" * 10):
    blob = b"".join(
        encode_record(topic=t, body=body, queue_id=0, born_host=HOST, store_host=HOST)
        for t in topics
    )
    return scan_batch(blob, max_body_size=1 << 20, store_host_size=8)


def test_moving_rate_is_the_mean_of_the_last_complete_seconds(manual_clock):
    rate = MovingRate(manual_clock)
    for _ in range(20):  # 100 a second for 20 s
        rate.add(100)
        manual_clock.advance(1)
    assert rate.rate(10) == 100
    assert rate.rate(60) == 100  # only 20 s have passed: divided by 20, not 60
    rate.add(5000)  # the second being filled does not count yet
    assert rate.rate(10) == 100
    manual_clock.advance(1)
    assert rate.rate(10) == (9 * 100 + 5000) / 10
    assert rate.total == 20 * 100 + 5000


def test_moving_rate_forgets_seconds_older_than_its_window(manual_clock):
    rate = MovingRate(manual_clock)
    rate.add(600)
    manual_clock.advance(11)
    assert rate.rate(10) == 0
    assert rate.rate(60) == pytest.approx(600 / 11)
    manual_clock.advance(3600)  # far past the ring: every bucket is emptied
    rate.add(7)
    manual_clock.advance(1)
    assert rate.rate(60) == pytest.approx(7 / 60)
    with pytest.raises(ValueError, match="window_s"):
        rate.rate(61)


def test_a_put_counts_per_topic_with_its_latency(manual_clock):
    stats = BrokerStatsManager(clock=manual_clock)
    one = batch("orders", "orders", "orders")
    started = manual_clock.monotonic()
    manual_clock.advance(0.002)
    stats.on_put(one, started)
    mixed = batch("orders", "audit", "orders", "audit", "audit")
    stats.on_put(mixed, manual_clock.monotonic())
    assert stats.topics["orders"].put_messages == 5
    assert stats.topics["audit"].put_messages == 3
    assert (
        stats.topics["orders"].put_bytes + stats.topics["audit"].put_bytes
        == len(one.blob) + len(mixed.blob)
        == stats.put_bytes
    )
    assert stats.topics["audit"].put_bytes == sum(
        size for topic, size in zip(mixed.topics, mixed.sizes, strict=True) if topic == "audit"
    )
    assert stats.put_rate.total == 8
    assert stats.put_latency.count == 2
    assert stats.put_latency.sum_s == pytest.approx(0.002)


def test_a_get_counts_what_the_pull_returned(manual_clock):
    stats = BrokerStatsManager(clock=manual_clock)
    stats.on_get("orders", [b"a" * 40, b"b" * 60])
    stats.on_get("orders", [])  # an empty pull counts nothing
    assert stats.topics["orders"].get_messages == 2
    assert stats.topics["orders"].get_bytes == stats.get_bytes == 100
    assert stats.topics["orders"].put_messages == 0


def test_figures_give_tps_and_totals_as_runtime_info_rows(manual_clock):
    stats = BrokerStatsManager(clock=manual_clock)
    for _ in range(10):
        stats.on_put(batch(*["orders"] * 50), manual_clock.monotonic())
        stats.on_get("orders", [b"r"] * 20)
        manual_clock.advance(1)
    figures = stats.figures()
    assert figures["put_tps"] == "50.00"
    assert figures["get_tps"] == "20.00"
    assert figures["sent_messages_total"] == "500"
    assert "put_messages_total" not in figures  # the store's row, not overridden
    assert figures["get_messages_total"] == "200"
    assert figures["get_bytes_total"] == "200"
    assert float(figures["put_latency_avg_ms"]) == 0


def test_duration_histogram_buckets_are_cumulative_and_upper_inclusive():
    histogram = DurationHistogram()
    for seconds in (0.0001, 0.0003, 0.001, 0.2, 30.0):
        histogram.observe(seconds)
    cumulative = dict(histogram.cumulative())
    assert cumulative[0.0001] == 1  # le: a duration on a bound counts in it
    assert cumulative[0.0005] == 2
    assert cumulative[0.001] == 3
    assert cumulative[0.25] == 4
    assert cumulative[10.0] == 4
    assert cumulative[float("inf")] == histogram.count == 5
    assert histogram.sum_s == pytest.approx(30.2014)
