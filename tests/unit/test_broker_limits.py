"""The start-up check of ulimit -n and vm.max_map_count against max_queues_total."""

from __future__ import annotations

from pocketmq.broker.limits import HEADROOM, limit_warnings, read_limits


def test_low_limits_are_named_with_the_numbers_and_the_fix():
    warnings = limit_warnings(1_000_000, 1024, 65_530)
    assert len(warnings) == 2
    assert "ulimit -n" in warnings[0] and "1024" in warnings[0]
    assert f"ulimit -n {1_000_000 + HEADROOM}" in warnings[0]
    assert "sysctl -w vm.max_map_count=" in warnings[1] and "65530" in warnings[1]


def test_enough_or_unknown_limits_give_no_warning():
    assert limit_warnings(32_768, 1_048_576, 2_000_000) == []
    assert limit_warnings(32_768, None, None) == []


def test_read_limits_reads_this_process():
    nofile, _max_map_count = read_limits()
    assert nofile is None or nofile > 0


def test_the_open_file_bound_caps_what_the_limits_must_allow():
    # a million queues, but at most 16,384 consume-queue files mapped at once
    assert limit_warnings(1_000_000, 1_048_576, 65_530, max_open_consume_queue_files=16_384) == []
    warnings = limit_warnings(1_000_000, 1024, 65_530, max_open_consume_queue_files=16_384)
    assert len(warnings) == 1
    assert f"ulimit -n {16_384 + HEADROOM}" in warnings[0]
    assert "max_open_consume_queue_files" in warnings[0]
