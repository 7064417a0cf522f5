"""common.progress: throttled progress lines, on a manual clock."""

from __future__ import annotations

import io
import logging

from pocketmq.common.progress import (
    Progress,
    format_bytes,
    log_sink,
    phase_progress,
    stream_sink,
)

MiB = 1024 * 1024


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def collecting() -> tuple[list[tuple[str, bool]], object]:
    lines: list[tuple[str, bool]] = []
    return lines, lambda line, final: lines.append((line, final))


def test_progress_shows_a_line_per_interval_with_rate_and_eta():
    clock, (lines, sink) = Clock(), collecting()
    progress = Progress("verifying", sink=sink, total=100 * MiB, interval_s=5, clock=clock)
    clock.now += 1
    assert not progress.update(10 * MiB)  # before the interval: silent
    clock.now += 4
    assert progress.update(25 * MiB)
    assert lines == [("verifying  25.0 MiB / 100.0 MiB (25%)  5.0 MiB/s  ETA 15 s", False)]
    clock.now += 5
    progress.update(75 * MiB)  # the rate is the one since the last line
    assert lines[-1][0] == "verifying  75.0 MiB / 100.0 MiB (75%)  10.0 MiB/s  ETA 3 s"
    progress.done = 100 * MiB
    progress.finish()
    assert lines[-1] == ("verifying: done, 100.0 MiB in 10 s (10.0 MiB/s)", True)


def test_short_work_stays_silent():
    clock, (lines, sink) = Clock(), collecting()
    progress = Progress("quick", sink=sink, total=10, unit="records", clock=clock)
    progress.update(10)
    progress.finish()
    assert lines == []


def test_counts_with_a_time_budget_and_a_detail():
    clock, (lines, sink) = Clock(), collecting()
    progress = Progress(
        "produce",
        sink=sink,
        unit="msgs",
        time_budget_s=60,
        clock=clock,
        detail=lambda: "RT avg 1.00 ms",
    )
    clock.now += 20
    progress.update(40_000)
    assert lines == [("produce  40,000 msgs  2,000 msgs/s  ETA 40 s | RT avg 1.00 ms", False)]


def test_phase_progress_gives_each_phase_its_own_progress():
    clock, (lines, sink) = Clock(), collecting()
    report = phase_progress(sink, what="recovery: ", interval_s=1, clock=clock)
    report("verifying", 0, 200)  # a phase starts with 0 done
    clock.now += 2
    report("verifying", 50, 200)
    clock.now += 2
    report("re-dispatching", 0, 400)  # a new phase finishes the previous one
    clock.now += 2
    report("re-dispatching", 400, 400)  # done: finished at once
    assert [line for line, _ in lines] == [
        "recovery: verifying  50 B / 200 B (25%)  25 B/s  ETA 6 s",
        "recovery: verifying: done, 50 B in 4 s (12 B/s)",
        "recovery: re-dispatching  400 B / 400 B (100%)  200 B/s  ETA 0.0 s",
        "recovery: re-dispatching: done, 400 B in 2 s (200 B/s)",
    ]


def test_stream_sink_redraws_in_place_on_a_terminal():
    out = io.StringIO()
    sink = stream_sink(out, tty=True)
    sink("verifying 10%", False)
    sink("verifying 9%", False)
    sink("done", True)
    assert out.getvalue() == "\rverifying 10%\rverifying 9% \rdone        \n"
    plain = io.StringIO()
    stream_sink(plain, tty=False)("verifying 10%", False)
    assert plain.getvalue() == "verifying 10%\n"


def test_log_sink_logs_each_line(caplog):
    caplog.set_level(logging.INFO)
    log_sink(logging.getLogger("pocketmq.test"))("recovery: 50%", False)
    assert caplog.messages == ["recovery: 50%"]


def test_format_bytes_picks_the_unit():
    assert format_bytes(512) == "512 B"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(3 * 1024 * MiB) == "3.0 GiB"
