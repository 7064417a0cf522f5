"""The timer's broker settings: defaults as RocketMQ 5's, and refusals that say what to change."""

from __future__ import annotations

import pytest

from pocketmq.broker.config import BrokerConfig
from pocketmq.common.errors import ConfigError


def test_the_defaults_are_rocketmq_5s():
    cfg = BrokerConfig()
    assert cfg.timer_wheel_enable
    assert cfg.timer_max_delay_ms == 3 * 86_400_000  # timerMaxDelaySec
    assert cfg.timer_roll_window_s == 2 * 86_400  # timerRollWindowSlot
    assert cfg.timer_wheel_slots == 7 * 86_400  # TIMER_WHEEL_TTL_DAY
    assert cfg.timer_log_file_size_bytes == 100 * 1024 * 1024  # mappedFileSizeTimerLog
    assert cfg.timer_flush_interval_ms == 1_000  # timerFlushIntervalMs


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(timer_log_file_size_bytes=1_000), "give a multiple of 64"),
        (dict(timer_roll_window_s=604_800), "holds at most 604740 seconds ahead"),
        (dict(file_reserved_hours=24), "commit-log files are kept only 24 h"),
        (dict(timer_max_delay_ms=0), "timer_max_delay_ms must be positive"),
    ],
)
def test_settings_that_cannot_work_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(**overrides)


def test_a_short_retention_is_fine_with_a_shorter_roll_window_or_the_timer_off():
    BrokerConfig(file_reserved_hours=24, timer_roll_window_s=43_200)
    BrokerConfig(file_reserved_hours=24, timer_wheel_enable=False)
