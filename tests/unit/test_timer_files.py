"""The timer's files: unit, slot and checkpoint layouts byte by byte, chains, placement,
and recovery of the timer log and wheel after clean stops, kill -9 and damage."""

from __future__ import annotations

import os
import struct
import zlib

import pytest

from pocketmq.broker.store.timer_checkpoint import (
    TimerCheckpoint,
    TimerCheckpointFile,
)
from pocketmq.broker.store.timer_log import (
    NO_PREV,
    UNIT_MAGIC,
    UNIT_SIZE,
    decode_unit,
    encode_unit,
)
from pocketmq.broker.store.timer_store import TimerMessageStore
from pocketmq.broker.store.timer_wheel import SLOT_SIZE, TimerWheel, encode_slot

NOW_MS = 1_700_000_000_000
NOW_S = NOW_MS // 1000
SEGMENT = 64 * UNIT_SIZE  # 4 KiB: 64 units a segment
SLOTS = 600


def i64(raw: bytes, at: int) -> int:
    return int.from_bytes(raw[at : at + 8], "big", signed=True)


def i32(raw: bytes, at: int) -> int:
    return int.from_bytes(raw[at : at + 4], "big", signed=True)


def u32(raw: bytes, at: int) -> int:
    return int.from_bytes(raw[at : at + 4], "big")


def open_timer(path, *, now_ms=NOW_MS, queue_min=0, queue_max=10**9, slots=SLOTS):
    timer = TimerMessageStore(str(path), wheel_slots=slots, log_file_size=SEGMENT)
    report = timer.load(now_ms=now_ms, queue_min_offset=queue_min, queue_max_offset=queue_max)
    return timer, report


def add(timer, second, *, deliver_ms=None, queue_offset=None, phys=0):
    queue_offset = timer.enqueue_queue_offset if queue_offset is None else queue_offset
    pos = timer.append(
        second=second,
        deliver_ms=second * 1000 if deliver_ms is None else deliver_ms,
        enqueue_ms=NOW_MS,
        phys_offset=phys,
        size=100,
        queue_offset=queue_offset,
    )
    timer.enqueue_queue_offset = queue_offset + 1
    return pos


def checkpoint(timer):
    cp = timer.snapshot(cursor_second=timer.cursor_second, now_ms=NOW_MS)
    timer.flush(cp)
    return cp


def positions(timer, second, **kw):
    units, _last = timer.units_of(second, **kw)
    return [u.pos for u in units]


# -- layouts ------------------------------------------------------------------------------
def test_a_unit_is_64_bytes_laid_out_as_documented():
    raw = encode_unit(
        prev_pos=-1,
        second=NOW_S,
        deliver_ms=NOW_MS + 5,
        enqueue_ms=NOW_MS - 7,
        phys_offset=123_456_789_012,
        size=321,
        queue_offset=42,
        roll_times=3,
    )
    assert len(raw) == UNIT_SIZE == 64
    assert i32(raw, 0) == UNIT_MAGIC
    assert u32(raw, 4) == zlib.crc32(raw[8:64])
    assert (i64(raw, 8), i64(raw, 16), i64(raw, 24), i64(raw, 32)) == (
        -1,
        NOW_S,
        NOW_MS + 5,
        NOW_MS - 7,
    )
    assert (i64(raw, 40), i32(raw, 48), i64(raw, 52), i32(raw, 60)) == (123_456_789_012, 321, 42, 3)
    unit = decode_unit(raw, 0, 640)
    assert unit is not None
    assert (
        unit.pos,
        unit.prev_pos,
        unit.second,
        unit.deliver_ms,
        unit.queue_offset,
        unit.roll_times,
    ) == (640, -1, NOW_S, NOW_MS + 5, 42, 3)


def test_a_unit_with_a_flipped_byte_or_zero_magic_is_not_a_unit():
    raw = bytearray(
        encode_unit(
            prev_pos=64,
            second=NOW_S,
            deliver_ms=NOW_MS,
            enqueue_ms=0,
            phys_offset=0,
            size=1,
            queue_offset=0,
        )
    )
    raw[30] ^= 0x01
    assert decode_unit(raw, 0, 0) is None
    assert decode_unit(bytes(UNIT_SIZE), 0, 0) is None
    assert decode_unit(raw[:63], 0, 0) is None


def test_a_wheel_entry_is_32_bytes_at_second_modulo_slots(tmp_path):
    wheel = TimerWheel(str(tmp_path / "timerwheel"), 10)
    assert os.path.getsize(tmp_path / "timerwheel") == 10 * SLOT_SIZE == 320
    wheel.put(1_234, 64, 192, 3)
    wheel.flush()
    raw = (tmp_path / "timerwheel").read_bytes()[4 * 32 : 5 * 32]  # 1234 % 10 == 4
    assert raw == encode_slot(1_234, 64, 192, 3)
    assert (i64(raw, 0), i64(raw, 8), i64(raw, 16), i32(raw, 24)) == (1_234, 64, 192, 3)
    assert u32(raw, 28) == zlib.crc32(raw[:28])
    assert wheel.get(1_234).count == 3
    assert wheel.get(1_244) is None  # same index, another lap: empty
    wheel.clear(1_234)
    assert (tmp_path / "timerwheel").read_bytes() == bytes(320)
    wheel.close()


def test_the_checkpoint_page_is_laid_out_as_documented(tmp_path):
    cp_file = TimerCheckpointFile(str(tmp_path / "timercheck"))
    cp = TimerCheckpoint(
        cursor_second=NOW_S,
        timerlog_flushed_pos=6_400,
        enqueue_queue_offset=100,
        written_ms=NOW_MS,
        wheel_slots=604_800,
    )
    cp_file.write(cp)
    raw = (tmp_path / "timercheck").read_bytes()
    assert len(raw) == 4096 and raw[40:] == bytes(4056)
    assert (i64(raw, 0), i64(raw, 8), i64(raw, 16), i64(raw, 24), i32(raw, 32)) == (
        NOW_S,
        6_400,
        100,
        NOW_MS,
        604_800,
    )
    assert u32(raw, 36) == zlib.crc32(raw[:36])
    assert cp_file.read() == cp
    with open(tmp_path / "timercheck", "r+b") as f:
        f.seek(9)
        f.write(b"\xff")
    assert cp_file.read() is None


# -- chains and placement -------------------------------------------------------------------
def test_the_units_of_a_second_form_a_chain_walked_newest_first(tmp_path):
    timer, report = open_timer(tmp_path)
    assert report.fresh
    a = add(timer, NOW_S + 5)
    other = add(timer, NOW_S + 6)
    b = add(timer, NOW_S + 5)
    c = add(timer, NOW_S + 5)
    assert (a, other, b, c) == (0, 64, 128, 192)
    units, last = timer.units_of(NOW_S + 5)
    assert [u.pos for u in units] == [c, b, a] and last == c
    assert [u.prev_pos for u in units] == [b, a, NO_PREV]
    entry = timer.wheel.get(NOW_S + 5)
    assert (entry.first_pos, entry.last_pos, entry.count) == (a, c, 3)
    assert positions(timer, NOW_S + 5, newer_than=a) == [c, b]
    assert positions(timer, NOW_S + 5, newer_than=c) == []
    assert timer.next_live_second() == NOW_S + 5
    assert timer.pending_units == 4
    timer.close()


def test_placement_is_clamped_to_the_cursor_and_the_roll_horizon(tmp_path):
    timer, _ = open_timer(tmp_path)
    assert timer.cursor_second == NOW_S
    assert timer.place(NOW_MS + 2_500, 60) == NOW_S + 2  # its own second
    assert timer.place(NOW_MS - 10_000, 60) == NOW_S  # past: now
    assert timer.place(NOW_MS + 3_600_000, 60) == NOW_S + 60  # beyond: the horizon
    with pytest.raises(ValueError, match="before the cursor"):
        add(timer, NOW_S - 1)
    timer.close()


def test_retired_seconds_are_cleared_in_the_wheel_and_leave_the_live_set(tmp_path):
    timer, _ = open_timer(tmp_path)
    add(timer, NOW_S)
    add(timer, NOW_S + 1)
    timer.retire(NOW_S)
    assert timer.next_live_second() == NOW_S + 1 and timer.pending_units == 1
    assert timer.wheel.get(NOW_S) is not None  # until the re-puts are durable
    timer.clear_retired()
    assert timer.wheel.get(NOW_S) is None
    timer.close()


def test_a_fresh_timer_creates_no_files_until_its_first_unit(tmp_path):
    timer, report = open_timer(tmp_path)
    assert report.fresh and timer.snapshot(cursor_second=NOW_S, now_ms=NOW_MS) is None
    assert os.listdir(tmp_path) == []
    timer.close()


# -- recovery -----------------------------------------------------------------------------
def test_after_a_clean_checkpoint_recovery_replays_nothing(tmp_path):
    timer, _ = open_timer(tmp_path)
    for i in range(5):
        add(timer, NOW_S + i % 2)
    checkpoint(timer)
    timer.close()
    timer, report = open_timer(tmp_path)
    assert (report.fresh, report.checkpoint_found, report.replayed_units) == (False, True, 0)
    assert (report.enqueue_queue_offset, report.pending_units, report.wheel_rebuilt) == (5, 5, "")
    assert positions(timer, NOW_S) == [256, 128, 0]
    assert add(timer, NOW_S) == 320
    timer.close()


def test_recovery_replays_units_written_after_the_checkpoint(tmp_path):
    timer, _ = open_timer(tmp_path)
    add(timer, NOW_S)
    checkpoint(timer)
    add(timer, NOW_S)
    add(timer, NOW_S + 3)
    timer.close()  # as kill -9: the mapping's bytes stay, no checkpoint
    timer, report = open_timer(tmp_path)
    assert (report.replayed_units, report.enqueue_queue_offset, report.pending_units) == (2, 3, 3)
    assert positions(timer, NOW_S) == [64, 0]
    assert positions(timer, NOW_S + 3) == [128]
    timer.close()


def test_recovery_links_a_unit_written_just_before_a_kill_into_its_second(tmp_path):
    timer, _ = open_timer(tmp_path)
    add(timer, NOW_S)
    checkpoint(timer)
    # killed between the unit's write and its wheel entry's:
    timer.log.append(
        encode_unit(
            prev_pos=0,
            second=NOW_S,
            deliver_ms=NOW_MS,
            enqueue_ms=0,
            phys_offset=0,
            size=1,
            queue_offset=1,
        )
    )
    timer.log.append(
        encode_unit(
            prev_pos=NO_PREV,
            second=NOW_S + 9,
            deliver_ms=NOW_MS,
            enqueue_ms=0,
            phys_offset=0,
            size=1,
            queue_offset=2,
        )
    )
    timer.close()
    timer, report = open_timer(tmp_path)
    assert (report.replayed_units, report.wheel_rebuilt) == (2, "")
    assert positions(timer, NOW_S) == [64, 0]
    assert positions(timer, NOW_S + 9) == [128]
    entry = timer.wheel.get(NOW_S)
    assert (entry.first_pos, entry.last_pos, entry.count) == (0, 64, 2)
    assert report.enqueue_queue_offset == 3
    timer.close()


def test_recovery_cuts_a_torn_unit_and_zeroes_what_follows(tmp_path):
    timer, _ = open_timer(tmp_path)
    add(timer, NOW_S)
    checkpoint(timer)
    add(timer, NOW_S)
    timer.close()
    segment = tmp_path / "timerlog" / f"{0:020d}"
    with open(segment, "r+b") as f:
        f.seek(128)
        f.write(
            encode_unit(
                prev_pos=64,
                second=NOW_S,
                deliver_ms=NOW_MS,
                enqueue_ms=0,
                phys_offset=0,
                size=1,
                queue_offset=2,
            )[:40]
        )  # torn
        f.seek(256)
        f.write(
            encode_unit(
                prev_pos=NO_PREV,
                second=NOW_S + 1,
                deliver_ms=NOW_MS,
                enqueue_ms=0,
                phys_offset=0,
                size=1,
                queue_offset=9,
            )
        )  # stale
    timer, report = open_timer(tmp_path)
    assert report.log_end == 128 and report.cut_bytes > 0
    assert segment.read_bytes()[128:] == bytes(SEGMENT - 128)
    assert positions(timer, NOW_S) == [64, 0]
    assert add(timer, NOW_S + 1) == 128
    timer.close()


def test_a_wheel_entry_pointing_past_the_log_end_rebuilds_the_wheel(tmp_path):
    timer, _ = open_timer(tmp_path)
    for _ in range(3):
        add(timer, NOW_S + 1)
    add(timer, NOW_S + 2)
    cp = checkpoint(timer)
    add(timer, NOW_S + 1)  # pos 256, linked in the wheel ...
    timer.close()
    segment = tmp_path / "timerlog" / f"{0:020d}"
    with open(segment, "r+b") as f:  # ... but lost with the page cache (power loss)
        f.seek(256)
        f.write(bytes(64))
    timer, report = open_timer(tmp_path)
    assert cp.timerlog_flushed_pos == 256
    assert "names timer-log positions" in report.wheel_rebuilt
    assert positions(timer, NOW_S + 1) == [128, 64, 0]
    assert positions(timer, NOW_S + 2) == [192]
    assert timer.pending_units == 4
    timer.close()


def test_a_torn_wheel_entry_rebuilds_the_wheel(tmp_path):
    timer, _ = open_timer(tmp_path)
    add(timer, NOW_S + 1)
    add(timer, NOW_S + 1)
    checkpoint(timer)
    timer.close()
    with open(tmp_path / "timerwheel", "r+b") as f:
        f.seek((NOW_S + 1) % SLOTS * SLOT_SIZE + 17)
        f.write(b"\x7f")
    timer, report = open_timer(tmp_path)
    assert "fails its CRC" in report.wheel_rebuilt
    assert positions(timer, NOW_S + 1) == [64, 0]
    timer.close()


def test_a_wheel_of_another_size_is_rebuilt_from_the_log(tmp_path):
    timer, _ = open_timer(tmp_path)
    add(timer, NOW_S + 1)
    add(timer, NOW_S + 700)
    add(timer, NOW_S + 1)
    checkpoint(timer)
    timer.close()
    timer, report = open_timer(tmp_path, slots=2_000)
    assert "another size" in report.wheel_rebuilt
    assert os.path.getsize(tmp_path / "timerwheel") == 2_000 * SLOT_SIZE
    assert positions(timer, NOW_S + 1) == [128, 0]
    assert positions(timer, NOW_S + 700) == [64]
    timer.close()


def test_units_naming_records_the_commit_log_lost_are_dropped(tmp_path):
    timer, _ = open_timer(tmp_path)
    for _ in range(5):
        add(timer, NOW_S + 1)
    checkpoint(timer)
    timer.close()
    timer, report = open_timer(tmp_path, queue_max=3)  # records 3 and 4 were cut
    assert (report.dropped_units, report.log_end, report.enqueue_queue_offset) == (2, 192, 3)
    assert positions(timer, NOW_S + 1) == [128, 64, 0]
    timer.close()


def test_a_lost_checkpoint_restarts_the_wheel_at_the_oldest_unit(tmp_path):
    timer, _ = open_timer(tmp_path)
    add(timer, NOW_S + 4)
    add(timer, NOW_S + 2)
    checkpoint(timer)
    timer.close()
    os.unlink(tmp_path / "timercheck")
    timer, report = open_timer(tmp_path, now_ms=NOW_MS + 60_000)
    assert not report.checkpoint_found and report.cursor_second == NOW_S + 2
    assert report.enqueue_queue_offset == 2 and report.pending_units == 2
    timer.close()


def test_delivered_segments_are_deleted_and_live_units_kept(tmp_path):
    timer, _ = open_timer(tmp_path)
    for i in range(150):  # 64 units a segment: 3 segments
        add(timer, NOW_S + (0 if i < 140 else 9))
    cp = checkpoint(timer)
    assert timer.delete_delivered_segments(cp.timerlog_flushed_pos) == 0  # NOW_S is live
    timer.retire(NOW_S)
    timer.clear_retired()
    assert timer.delete_delivered_segments(cp.timerlog_flushed_pos) == 2
    assert timer.log.min_offset == 2 * SEGMENT
    assert positions(timer, NOW_S + 9) == [149 * 64 - 64 * k for k in range(10)]
    timer.close()
    timer, report = open_timer(tmp_path)
    assert report.pending_units == 10 and report.wheel_rebuilt == ""
    timer.close()


def test_struct_layouts_match_their_sizes():
    assert struct.calcsize(">iIqqqqqiqi") == UNIT_SIZE
    assert struct.calcsize(">qqqiI") == SLOT_SIZE
