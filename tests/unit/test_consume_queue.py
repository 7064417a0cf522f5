"""ConsumeQueue and ConsumeQueueStore on real files, with 10 units a segment."""

from __future__ import annotations

import logging
import os
import struct
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pocketmq.broker.store.consume_queue import (
    BLANK_UNIT,
    CQ_UNIT,
    CQ_UNIT_SIZE,
    ConsumeQueue,
)
from pocketmq.broker.store.consume_queue_store import ConsumeQueueStore
from pocketmq.common.errors import StoreError

UNITS = 10  # units a segment
SEGMENT_BYTES = UNITS * CQ_UNIT_SIZE


def unit_bytes(phys_offset: int, size: int, tags_code: int) -> bytes:
    """A unit built by hand, field by field."""
    return (
        phys_offset.to_bytes(8, "big", signed=True)
        + size.to_bytes(4, "big", signed=True)
        + tags_code.to_bytes(8, "big", signed=True)
    )


def segment_path(directory: str, start_byte: int) -> str:
    return os.path.join(directory, f"{start_byte:020d}")


def new_queue(tmp_path, *, topic: str = "TopicA", queue_id: int = 0) -> ConsumeQueue:
    directory = str(tmp_path / "consumequeue" / topic / str(queue_id))
    return ConsumeQueue(topic, queue_id, directory, units_per_file=UNITS)


def reopen(cq: ConsumeQueue) -> ConsumeQueue:
    cq.close()
    again = ConsumeQueue(cq.topic, cq.queue_id, cq.directory, units_per_file=UNITS)
    again.load()
    again.recover()
    return again


def fill(cq: ConsumeQueue, count: int, *, first: int = 0, size: int = 100) -> None:
    """Units for queue offsets first..first+count-1; unit n points at phys n * 1000."""
    for n in range(first, first + count):
        assert cq.append(n, n * 1000, size, n % 7)


# -- format ---------------------------------------------------------------------------


def test_unit_is_phys_i64_size_i32_tags_i64_big_endian():
    assert CQ_UNIT_SIZE == 20
    assert CQ_UNIT.pack(0x0102030405060708, 0x11223344, -2) == (
        bytes.fromhex("0102030405060708")
        + bytes.fromhex("11223344")
        + bytes.fromhex("fffffffffffffffe")
    )
    assert unit_bytes(0, 0x7FFFFFFF, 0) == BLANK_UNIT


def test_appended_units_lie_at_queue_offset_times_20_in_the_segment_file(tmp_path):
    cq = new_queue(tmp_path)
    cq.append(0, 4096, 310, 12345)
    cq.append(1, 4406, 200, -99)
    cq.flush()
    with open(segment_path(cq.directory, 0), "rb") as f:
        data = f.read()
    assert len(data) == SEGMENT_BYTES
    assert data[:40] == unit_bytes(4096, 310, 12345) + unit_bytes(4406, 200, -99)
    assert data[40:] == bytes(SEGMENT_BYTES - 40)
    cq.close()


def test_segments_are_named_by_start_byte_offset_and_roll_every_units_per_file(tmp_path):
    cq = new_queue(tmp_path)
    fill(cq, 25)
    assert sorted(os.listdir(cq.directory)) == [
        "00000000000000000000",
        "00000000000000000200",
        "00000000000000000400",
    ]
    assert (cq.min_offset, cq.max_offset, cq.max_phys_end) == (0, 25, 24_100)
    assert cq.get(10) == (10_000, 100, 3)
    cq.close()


def test_empty_queue_has_no_offsets_and_no_phys_end(tmp_path):
    cq = new_queue(tmp_path)
    assert (cq.min_offset, cq.max_offset, cq.max_phys_end) == (0, 0, -1)
    assert cq.get(0) is None
    assert cq.read_units(0, 5) == b""
    assert not os.path.exists(cq.directory)  # nothing on disk before the first unit


# -- appending ------------------------------------------------------------------------


def test_append_skips_a_queue_offset_already_present(tmp_path):
    cq = new_queue(tmp_path)
    fill(cq, 3)
    assert cq.append(1, 999_999, 1, 1) is False
    assert cq.get(1) == (1000, 100, 1)
    assert cq.max_offset == 3
    cq.close()


def test_append_leaving_a_gap_raises_with_both_offsets(tmp_path):
    cq = new_queue(tmp_path)
    fill(cq, 3)
    with pytest.raises(StoreError, match=r"queue offset 5 .* max offset 3"):
        cq.append(5, 5000, 100, 0)
    cq.close()


def test_first_unit_above_zero_fills_blank_units_before_it_in_its_segment(tmp_path):
    cq = new_queue(tmp_path)
    assert cq.append(25, 7000, 120, 5)
    assert os.listdir(cq.directory) == ["00000000000000000400"]
    with open(segment_path(cq.directory, 400), "rb") as f:
        data = f.read()
    assert data[:100] == BLANK_UNIT * 5
    assert data[100:120] == unit_bytes(7000, 120, 5)
    assert (cq.min_offset, cq.max_offset, cq.max_phys_end) == (25, 26, 7120)
    assert cq.get(24) is None and cq.read_units(20, 10) == b""

    cq = reopen(cq)  # blank units survive recovery and are still not readable
    assert (cq.min_offset, cq.max_offset, cq.max_phys_end) == (25, 26, 7120)
    assert cq.get(25) == (7000, 120, 5)
    cq.close()


def test_a_queue_left_with_only_an_empty_segment_by_a_crash_starts_where_dispatch_says(tmp_path):
    cq = new_queue(tmp_path)
    os.makedirs(cq.directory)
    with open(segment_path(cq.directory, 400), "wb") as f:  # created, never written
        f.truncate(SEGMENT_BYTES)
    cq.load()
    cq.recover()
    assert (cq.min_offset, cq.max_offset) == (20, 20)
    assert cq.append(25, 7000, 120, 5)
    assert (cq.min_offset, cq.max_offset) == (25, 26)
    cq.close()


def test_append_many_copies_whole_runs_and_splits_at_segment_ends(tmp_path):
    cq = new_queue(tmp_path)
    fill(cq, 4)
    units = b"".join(CQ_UNIT.pack(n * 1000, 100, n % 7) for n in range(2, 17))
    assert cq.append_many(2, units) == 13  # offsets 2 and 3 were already there
    assert cq.max_offset == 17 and cq.max_phys_end == 16_100
    assert [cq.get(n) for n in range(17)] == [(n * 1000, 100, n % 7) for n in range(17)]
    assert cq.append_many(5, units[60:]) == 0
    with pytest.raises(ValueError, match="whole 20-byte units"):
        cq.append_many(17, b"x" * 21)
    cq.close()


def test_append_many_on_an_empty_queue_starts_it_at_the_first_offset(tmp_path):
    cq = new_queue(tmp_path)
    units = b"".join(CQ_UNIT.pack(n * 1000, 100, 0) for n in range(8, 13))
    assert cq.append_many(8, units) == 5
    assert (cq.min_offset, cq.max_offset) == (8, 13)
    assert sorted(os.listdir(cq.directory)) == ["00000000000000000000", "00000000000000000200"]
    cq.close()


# -- reading --------------------------------------------------------------------------


def test_read_units_stops_at_max_offset_and_at_a_segment_end(tmp_path):
    cq = new_queue(tmp_path)
    fill(cq, 15)
    assert cq.read_units(3, 4) == b"".join(unit_bytes(n * 1000, 100, n % 7) for n in (3, 4, 5, 6))
    assert len(cq.read_units(8, 32)) == 2 * CQ_UNIT_SIZE  # the segment ends at offset 10
    assert len(cq.read_units(12, 32)) == 3 * CQ_UNIT_SIZE  # max offset is 15
    assert cq.read_units(15, 1) == b"" and cq.read_units(-1, 1) == b""
    assert cq.read_units(3, 0) == b""
    cq.close()


def test_offset_by_timestamp_returns_the_first_offset_stored_at_or_after(tmp_path):
    cq = new_queue(tmp_path)
    fill(cq, 25)
    # store times: two messages a second, 1000, 1000, 1500, 1500, ...
    store_time = {n * 1000: 1000 + (n // 2) * 500 for n in range(25)}

    def store_time_of(phys_offset: int, size: int) -> int | None:
        assert size == 100
        return store_time.get(phys_offset)

    assert cq.offset_by_timestamp(1500, store_time_of) == 2
    assert cq.offset_by_timestamp(1501, store_time_of) == 4
    assert cq.offset_by_timestamp(0, store_time_of) == 0  # before all: min offset
    assert cq.offset_by_timestamp(10**13, store_time_of) == 25  # after all: max offset
    for n in range(6):  # records gone from the commit log count as older
        del store_time[n * 1000]
    assert cq.offset_by_timestamp(0, store_time_of) == 6
    cq.close()


# -- recovery -------------------------------------------------------------------------


def write_at(path: str, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def test_recovery_ends_at_a_zeroed_unit_and_zeroes_the_stale_tail_after_it(tmp_path):
    cq = new_queue(tmp_path)
    fill(cq, 16)
    cq.flush()
    cq.close()
    path = segment_path(cq.directory, 200)
    write_at(path, 2 * CQ_UNIT_SIZE, bytes(CQ_UNIT_SIZE))  # unit 12 never reached the disk
    cq = reopen(cq)
    assert (cq.max_offset, cq.max_phys_end) == (12, 11_100)
    with open(path, "rb") as f:
        assert f.read()[2 * CQ_UNIT_SIZE :] == bytes(SEGMENT_BYTES - 2 * CQ_UNIT_SIZE)
    assert cq.append(12, 12_000, 100, 0)  # re-dispatch continues from there
    cq.close()


@pytest.mark.parametrize(
    "torn", [unit_bytes(-1, 100, 0), unit_bytes(5000, 0, 3), unit_bytes(5000, -7, 3)]
)
def test_recovery_ends_at_a_unit_with_negative_phys_or_nonpositive_size(tmp_path, torn):
    cq = new_queue(tmp_path)
    fill(cq, 8)
    cq.close()
    write_at(segment_path(cq.directory, 0), 5 * CQ_UNIT_SIZE, torn)
    cq = reopen(cq)
    assert (cq.max_offset, cq.max_phys_end) == (5, 4100)
    cq.close()


def test_recovery_of_a_truncated_segment_keeps_its_whole_units(tmp_path):
    cq = new_queue(tmp_path)
    fill(cq, 20)
    cq.close()
    os.truncate(segment_path(cq.directory, 200), 3 * CQ_UNIT_SIZE + 7)
    cq = reopen(cq)
    assert (cq.max_offset, cq.max_phys_end) == (13, 12_100)
    assert os.path.getsize(segment_path(cq.directory, 200)) == SEGMENT_BYTES
    cq.close()


def test_recovery_deletes_segments_after_the_end(tmp_path):
    cq = new_queue(tmp_path)
    fill(cq, 25)
    cq.close()
    write_at(segment_path(cq.directory, 200), 0, bytes(CQ_UNIT_SIZE))
    cq = reopen(cq)
    assert os.listdir(cq.directory) == ["00000000000000000000"]
    assert (cq.max_offset, cq.max_phys_end) == (10, 9100)
    cq.close()


def test_recovery_trusts_segments_before_the_third_last(tmp_path):
    cq = new_queue(tmp_path)
    fill(cq, 35)
    cq.close()
    write_at(segment_path(cq.directory, 0), 0, bytes(CQ_UNIT_SIZE))  # not scanned (RocketMQ)
    cq = reopen(cq)
    assert (cq.max_offset, cq.max_phys_end) == (35, 34_100)
    cq.close()


def test_recovery_of_an_empty_directory_leaves_an_empty_queue(tmp_path):
    cq = new_queue(tmp_path)
    os.makedirs(cq.directory)
    cq.load()
    cq.recover()
    assert (cq.min_offset, cq.max_offset, cq.max_phys_end) == (0, 0, -1)


# -- truncation and deletion --------------------------------------------------------------


def test_truncate_phys_removes_the_units_at_or_past_the_cut(tmp_path):
    cq = new_queue(tmp_path)
    fill(cq, 25)
    assert cq.truncate_phys(11_000) == 14  # units 11..24 point at 11,000 and beyond
    assert (cq.max_offset, cq.max_phys_end) == (11, 10_100)
    assert sorted(os.listdir(cq.directory)) == ["00000000000000000000", "00000000000000000200"]
    with open(segment_path(cq.directory, 200), "rb") as f:
        assert f.read()[CQ_UNIT_SIZE:] == bytes(SEGMENT_BYTES - CQ_UNIT_SIZE)
    assert cq.truncate_phys(50_000) == 0
    assert cq.append(11, 11_000, 100, 0)
    cq.close()


def test_truncate_phys_of_every_unit_keeps_the_queue_position(tmp_path):
    cq = new_queue(tmp_path)
    fill(cq, 25)
    cq.delete_expired(20_000)  # segments 0 and 1 go; the queue now starts at 20
    assert cq.truncate_phys(0) == 5
    assert (cq.min_offset, cq.max_offset, cq.max_phys_end) == (20, 20, -1)
    cq = reopen(cq)
    assert (cq.min_offset, cq.max_offset) == (20, 20)
    assert cq.append(20, 20_000, 100, 0)
    cq.close()


def test_delete_expired_deletes_whole_head_segments_and_corrects_min_offset(tmp_path):
    cq = new_queue(tmp_path)
    fill(cq, 25)
    assert cq.delete_expired(12_500) == 1  # segment 0 ends at phys 9,000; segment 1 at 19,000
    assert sorted(os.listdir(cq.directory)) == ["00000000000000000200", "00000000000000000400"]
    assert (cq.min_offset, cq.max_offset) == (13, 25)  # unit 13 is the first at >= 12,500
    assert cq.get(12) is None and cq.read_units(12, 5) == b""
    assert cq.get(13) == (13_000, 100, 6)
    cq.close()


def test_delete_expired_never_deletes_the_last_segment(tmp_path):
    cq = new_queue(tmp_path)
    fill(cq, 25)
    assert cq.delete_expired(10**9) == 2
    assert os.listdir(cq.directory) == ["00000000000000000400"]
    assert (cq.min_offset, cq.max_offset) == (25, 25)  # nothing left to read
    assert cq.delete_expired(10**9) == 0
    cq.close()


def test_min_offset_only_moves_forward(tmp_path):
    cq = new_queue(tmp_path)
    fill(cq, 5)
    cq.delete_expired(3000)
    assert cq.min_offset == 3
    cq.delete_expired(0)
    assert cq.min_offset == 3
    cq.close()


# -- flush ----------------------------------------------------------------------------


def test_flush_in_a_worker_thread_syncs_what_was_written(tmp_path):
    cq = new_queue(tmp_path)
    fill(cq, 15)
    assert cq.dirty_bytes == 15 * CQ_UNIT_SIZE
    worker = threading.Thread(target=cq.flush)
    worker.start()
    worker.join()
    assert cq.dirty_bytes == 0
    cq.close()


# -- round trip -----------------------------------------------------------------------

units_strategy = st.lists(
    st.tuples(st.integers(1, 2**20), st.integers(1, 2**31 - 2), st.integers(-(2**63), 2**63 - 1)),
    min_size=1,
    max_size=40,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(first=st.integers(0, 30), fields=units_strategy, batch=st.booleans())
def test_units_round_trip_through_append_read_and_recovery(tmp_path_factory, first, fields, batch):
    cq = new_queue(tmp_path_factory.mktemp("cq"))
    phys, expected = 0, []
    for gap, size, tags_code in fields:  # phys offsets grow along the queue
        phys += gap
        expected.append((phys, size, tags_code))
    if batch:
        cq.append_many(first, b"".join(CQ_UNIT.pack(*unit) for unit in expected))
    else:
        for n, unit in enumerate(expected):
            cq.append(first + n, *unit)
    assert_holds(cq, first, expected)
    cq = reopen(cq)
    assert_holds(cq, first, expected)
    cq.close()


def assert_holds(cq: ConsumeQueue, first: int, expected: list[tuple[int, int, int]]) -> None:
    assert (cq.min_offset, cq.max_offset) == (first, first + len(expected))
    assert [cq.get(first + n) for n in range(len(expected))] == expected
    packed = b""
    while len(packed) < len(expected) * CQ_UNIT_SIZE:
        packed += cq.read_units(first + len(packed) // CQ_UNIT_SIZE, 64)
    assert list(struct.iter_unpack(">qiq", packed)) == expected
    assert cq.max_phys_end == expected[-1][0] + expected[-1][1]


# -- ConsumeQueueStore ------------------------------------------------------------------


def new_store(tmp_path) -> ConsumeQueueStore:
    return ConsumeQueueStore(str(tmp_path / "consumequeue"), units_per_file=UNITS)


def test_store_creates_queues_under_topic_and_queue_id_directories(tmp_path):
    store = new_store(tmp_path)
    fill(store.find_or_create("TopicA", 1), 3)
    fill(store.find_or_create("%RETRY%group_1", 0), 2, first=3)
    assert store.find_or_create("TopicA", 1) is store.get("TopicA", 1)
    assert store.get("TopicA", 2) is None and store.get("Nope", 0) is None
    assert store.topics() == ["%RETRY%group_1", "TopicA"]
    assert store.queue_ids("TopicA") == [1] and store.queue_ids("Nope") == []
    assert os.path.isfile(segment_path(str(tmp_path / "consumequeue" / "TopicA" / "1"), 0))
    assert os.path.isdir(tmp_path / "consumequeue" / "%RETRY%group_1" / "0")
    with pytest.raises(ValueError, match="not a valid directory name"):
        store.find_or_create("../escape", 0)
    store.close()


def test_store_load_and_recover_find_every_queue_and_ignore_foreign_names(tmp_path, caplog):
    store = new_store(tmp_path)
    fill(store.find_or_create("TopicA", 0), 3)
    fill(store.find_or_create("TopicA", 3), 12)
    fill(store.find_or_create("TopicB", 0), 5)
    store.close()
    root = tmp_path / "consumequeue"
    (root / "not a topic").mkdir()
    (root / "TopicA" / "lost+found").mkdir()
    (root / "stray.txt").write_text("x")

    store = new_store(tmp_path)
    with caplog.at_level(logging.WARNING):
        store.load()
    assert "not a topic" in caplog.text and "lost+found" in caplog.text
    assert store.recover() == 11_100  # queue TopicA:3 reaches furthest into the commit log
    assert store.queue_ids("TopicA") == [0, 3]
    assert store.get("TopicB", 0).max_offset == 5
    store.close()


def test_store_recover_of_no_queues_returns_minus_one(tmp_path):
    store = new_store(tmp_path)
    store.load()
    assert store.recover() == -1


def test_store_truncate_delete_flush_and_delete_topic_reach_every_queue(tmp_path):
    store = new_store(tmp_path)
    fill(store.find_or_create("TopicA", 0), 25)
    fill(store.find_or_create("TopicB", 0), 15)
    assert store.dirty_bytes == 40 * CQ_UNIT_SIZE
    store.flush()
    assert store.dirty_bytes == 0
    assert store.truncate_phys(14_000) == 11 + 1
    assert store.delete_expired(12_000) == 2
    assert store.get("TopicA", 0).min_offset == 12
    store.delete_topic("TopicA")
    assert store.topics() == ["TopicB"]
    assert not os.path.exists(tmp_path / "consumequeue" / "TopicA")
    store.close()


def test_a_short_segment_marks_the_queue_damaged(tmp_path):
    store = new_store(tmp_path)
    fill(store.find_or_create("TopicA", 0), 25)
    fill(store.find_or_create("TopicA", 1), 5)
    store.close()
    os.truncate(segment_path(str(tmp_path / "consumequeue" / "TopicA" / "0"), 0), 47)
    store = new_store(tmp_path)
    store.load()
    store.recover()
    assert [(cq.queue_id, cq.damaged) for cq in store.all_queues()] == [(0, True), (1, False)]
    store.close()


def test_a_missing_middle_segment_marks_the_queue_damaged_and_unmapped(tmp_path):
    cq = new_queue(tmp_path)
    fill(cq, 25)
    cq.close()
    os.unlink(segment_path(cq.directory, 200))
    cq = ConsumeQueue(cq.topic, cq.queue_id, cq.directory, units_per_file=UNITS)
    cq.load()
    cq.recover()
    assert cq.damaged and cq.max_offset == 0


def test_an_empty_last_segment_left_by_a_crash_is_not_damage(tmp_path):
    cq = new_queue(tmp_path)
    fill(cq, 10)
    cq.close()
    open(segment_path(cq.directory, 200), "wb").close()  # created, never sized
    cq = reopen(cq)
    assert not cq.damaged and cq.max_offset == 10
    cq.close()


def test_delete_queue_removes_its_directory_even_when_it_could_not_be_mapped(tmp_path):
    store = new_store(tmp_path)
    fill(store.find_or_create("TopicA", 0), 25)
    fill(store.find_or_create("TopicA", 1), 5)
    store.close()
    os.unlink(segment_path(str(tmp_path / "consumequeue" / "TopicA" / "0"), 200))
    store = new_store(tmp_path)
    store.load()
    store.delete_queue("TopicA", 0)
    assert not os.path.exists(tmp_path / "consumequeue" / "TopicA" / "0")
    assert store.queue_ids("TopicA") == [1]
    assert store.find_or_create("TopicA", 0).append(0, 0, 100, 0)  # rebuilt from scratch
    store.delete_queue("TopicA", 1)
    store.delete_queue("TopicA", 0)
    assert store.topics() == []
    store.close()
