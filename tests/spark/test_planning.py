"""Range planning and pull outcomes: pure functions, no Spark job."""

from __future__ import annotations

import pytest

from pocketmq.client.model import MessageQueue
from pocketmq.client.remoting import PullReply, PullStatus
from pocketmq.spark.errors import DataLossError, OptionError
from pocketmq.spark.options import (
    PullSettings,
    offsets_from_json,
    offsets_to_json,
    parse_sink_options,
    parse_source_options,
)
from pocketmq.spark.planning import QueueRange, rate_limit, split_ranges
from pocketmq.spark.pull import _next_offset

A0, A1, B0 = (
    MessageQueue("t", "broker-a", 0),
    MessageQueue("t", "broker-a", 1),
    MessageQueue("t", "broker-b", 0),
)


def rng(start: int, end: int, *, fail: bool = True, queue: int = 0) -> QueueRange:
    return QueueRange(
        "t", "broker-a", "127.0.0.1:1", queue, start, end, PullSettings(fail_on_data_loss=fail)
    )


def test_rate_limit_splits_a_cap_over_queues_by_backlog():
    start = {A0: 0, A1: 10, B0: 5}
    latest = {A0: 600, A1: 310, B0: 6}  # backlogs 600, 300, 1
    end = rate_limit(start, latest, 90)
    assert end == {A0: 59, A1: 39, B0: 6}  # 59.9 -> 59, 29.9 -> 29, 0.09 -> at least 1
    assert rate_limit(start, latest, 10_000) == latest


def test_split_ranges_caps_range_length_then_reaches_min_partitions():
    parts = split_ranges([rng(0, 10), rng(0, 3, queue=1)], min_partitions=None, max_records=4)
    assert [(p.queue_id, p.start, p.end) for p in parts] == [
        (0, 0, 3),
        (0, 3, 6),
        (0, 6, 10),
        (1, 0, 3),
    ]
    parts = split_ranges([rng(0, 90), rng(0, 10, queue=1)], min_partitions=10, max_records=1000)
    assert sum(1 for p in parts if p.queue_id == 0) == 9
    assert sum(1 for p in parts if p.queue_id == 1) == 1
    assert sorted((p.start, p.end) for p in parts if p.queue_id == 0)[-1][1] == 90


def reply(status: PullStatus, nxt: int, lo: int = 0, hi: int = 100) -> PullReply:
    return PullReply(status, nxt, lo, hi, b"", 0)


def test_offsets_removed_by_retention_fail_the_read_unless_told_otherwise():
    with pytest.raises(DataLossError, match=r"offsets 5\.\.20 are gone .*failOnDataLoss"):
        _next_offset(rng(5, 50), 5, reply(PullStatus.OFFSET_ILLEGAL, 20, lo=20))
    assert _next_offset(rng(5, 50, fail=False), 5, reply(PullStatus.OFFSET_ILLEGAL, 20)) == 20
    # The queue ends before the planned end (truncated): nothing more to read.
    assert _next_offset(rng(5, 50, fail=False), 30, reply(PullStatus.NO_NEW_MSG, 30)) == 50
    assert _next_offset(rng(5, 50), 5, reply(PullStatus.NO_MATCHED_MSG, 9)) == 9


def test_offsets_json_round_trips_in_the_checkpoint_shape():
    offsets = {A0: 3, B0: 7, A1: 0}
    as_json = offsets_to_json(offsets)
    assert as_json == {"t": {"broker-a": {"0": 3, "1": 0}, "broker-b": {"0": 7}}}
    assert offsets_from_json(as_json) == offsets
    with pytest.raises(OptionError, match="option startingOffsets: offset 'x' of t@b#0"):
        offsets_from_json({"t": {"b": {"0": "x"}}}, "startingOffsets")


def test_streaming_and_sink_options_are_checked_by_their_documented_names():
    with pytest.raises(OptionError, match="option endingOffsets is for batch queries"):
        parse_source_options({"subscribe": "t", "endingoffsets": "latest"}, streaming=True)
    opts = parse_source_options({"subscribe": "t"}, streaming=True)
    assert opts.starting.kind == "latest"
    with pytest.raises(
        OptionError,
        match="option 'topics' is not an option of the pocketmq sink; did you mean 'topic'",
    ):
        parse_sink_options({"topics": "t"})
    with pytest.raises(
        OptionError, match="option namesrv: namesrv address 'nohost' is not host:port"
    ):
        parse_sink_options({"namesrv": "nohost"})
