"""The start-up check of ulimit -n and vm.max_map_count against max_queues_total."""

from __future__ import annotations

import resource
import subprocess
import sys

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


def test_a_low_soft_open_files_limit_is_raised_up_to_the_hard_limit(tmp_path):
    # in a child process: the soft limit set low, the hard one left as it is
    script = (
        "import resource\n"
        "from pocketmq.broker.limits import warn_if_low\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "warn_if_low(1_000, 16_384)\n"
        "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], hard)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    soft_after, hard = int(out[0]), int(out[1])
    need = 1_000 + HEADROOM
    assert soft_after == (need if hard == resource.RLIM_INFINITY else min(need, hard))
    assert soft_after > 256
