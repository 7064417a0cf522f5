"""IndexFile and IndexFileSet on real files, with 8 slots and 16 entries a file."""

from __future__ import annotations

import errno
import logging
import os
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pocketmq.broker.store.index_file import (
    HASH_SLOT,
    INDEX_ENTRY,
    INDEX_HEADER,
    IndexFile,
    index_key_hash,
    iter_index_entries,
)
from pocketmq.broker.store.index_file_set import IndexFileSet, key_hash_of
from pocketmq.broker.store.io import StoreIO
from pocketmq.common.clock import ManualClock
from pocketmq.common.hashing import index_slot, java_string_hash

SLOTS, ENTRIES = 8, 16
FILE_BYTES = 40 + SLOTS * 4 + ENTRIES * 20
T0 = 1_700_000_000_000  # ms


def new_service(
    tmp_path, *, entries: int = ENTRIES, io: StoreIO | None = None, clock: ManualClock | None = None
) -> IndexFileSet:
    service = IndexFileSet(
        str(tmp_path / "index"), slots=SLOTS, entries=entries, io=io, clock=clock or ManualClock(T0)
    )
    service.load(clean_shutdown=True, checkpoint_timestamp_ms=0)
    return service


def reopen(
    service: IndexFileSet, *, clean_shutdown: bool = True, checkpoint_timestamp_ms: int = 0
) -> IndexFileSet:
    service.close()
    again = IndexFileSet(
        service.directory, slots=SLOTS, entries=service.entries, clock=ManualClock(T0)
    )
    again.load(clean_shutdown=clean_shutdown, checkpoint_timestamp_ms=checkpoint_timestamp_ms)
    return again


def index_files(service: IndexFileSet) -> list[str]:
    return sorted(os.listdir(service.directory))


def read_file(service: IndexFileSet, name: str) -> bytes:
    with open(os.path.join(service.directory, name), "rb") as f:
        return f.read()


def key_hash(topic: str, key: str) -> int:
    return index_key_hash(java_string_hash(f"{topic}#{key}"))


def keys_in_one_slot(topic: str, count: int) -> list[str]:
    """Keys of *topic* whose hashes differ but fall in the same slot."""
    by_slot: dict[int, list[str]] = {}
    for n in range(1000):
        key = f"order-{n}"
        keys = by_slot.setdefault(key_hash(topic, key) % SLOTS, [])
        keys.append(key)
        if len(keys) == count:
            return keys
    raise AssertionError("no slot filled")


# -- format ---------------------------------------------------------------------------


def test_records_are_40_byte_header_i32_slots_and_20_byte_entries():
    assert (INDEX_HEADER.size, HASH_SLOT.size, INDEX_ENTRY.size) == (40, 4, 20)
    assert IndexFile.size_for(5_000_000, 20_000_000) == 420_000_040  # RocketMQ's default file


def test_key_hash_is_abs_of_java_hash_with_min_value_stored_as_zero():
    assert java_string_hash("polygenelubricants") == -(1 << 31)
    assert index_key_hash(-(1 << 31)) == 0
    assert index_key_hash(-12345) == 12345 and index_key_hash(12345) == 12345
    for key in ("a", "TopicTest#KEY-1", "polygenelubricants", "T#日本"):
        java_hash = java_string_hash(key)
        assert index_key_hash(java_hash) % SLOTS == index_slot(java_hash, SLOTS)


@given(topic=st.text(max_size=20), key=st.text(max_size=300))
def test_key_hash_of_topic_and_key_equals_the_hash_of_the_joined_string(topic, key):
    assert key_hash_of(topic, key) == index_key_hash(java_string_hash(f"{topic}#{key}"))


def test_first_put_writes_header_slot_and_entry_one_byte_for_byte(tmp_path):
    service = new_service(tmp_path)
    key = next(f"k{n}" for n in range(100) if java_string_hash(f"TopicA#k{n}") < 0)
    stored_hash = -java_string_hash(f"TopicA#{key}")  # RocketMQ stores abs(hashCode)
    service.put("TopicA", [key], 4096, T0 + 1234)
    (name,) = index_files(service)
    assert name == "20231114221320000"  # T0 in UTC, yyyyMMddHHmmssSSS
    data = read_file(service, name)
    assert len(data) == FILE_BYTES
    assert data[:40] == (
        (T0 + 1234).to_bytes(8, "big")
        + (T0 + 1234).to_bytes(8, "big")
        + (4096).to_bytes(8, "big")
        + (4096).to_bytes(8, "big")
        + (1).to_bytes(4, "big")
        + (2).to_bytes(4, "big")
    )
    slot = stored_hash % SLOTS
    slot_table = data[40 : 40 + SLOTS * 4]
    assert slot_table == bytes(4 * slot) + (1).to_bytes(4, "big") + bytes(4 * (SLOTS - slot - 1))
    entries = data[40 + SLOTS * 4 :]
    assert entries[:20] == bytes(20)  # entry 0 is never used
    assert entries[20:40] == (
        stored_hash.to_bytes(4, "big")
        + (4096).to_bytes(8, "big")
        + (0).to_bytes(4, "big")
        + (0).to_bytes(4, "big")
    )
    assert entries[40:] == bytes(len(entries) - 40)
    service.close()


def test_collisions_chain_through_prev_index_and_query_returns_newest_first(tmp_path):
    service = new_service(tmp_path)
    a, b, c = keys_in_one_slot("TopicA", 3)
    service.put("TopicA", [a], 100, T0)
    service.put("TopicA", [b], 200, T0 + 2500)
    service.put("TopicA", [a, c], 300, T0 + 5000)
    data = read_file(service, index_files(service)[0])
    slot = key_hash("TopicA", a) % SLOTS
    assert HASH_SLOT.unpack_from(data, 40 + slot * 4) == (4,)
    entries = [INDEX_ENTRY.unpack_from(data, 40 + SLOTS * 4 + n * 20) for n in range(1, 5)]
    assert entries == [
        (key_hash("TopicA", a), 100, 0, 0),
        (key_hash("TopicA", b), 200, 2, 1),
        (key_hash("TopicA", a), 300, 5, 2),
        (key_hash("TopicA", c), 300, 5, 3),
    ]
    assert INDEX_HEADER.unpack_from(data)[4:] == (1, 5)  # one slot used, four entries
    assert service.query("TopicA", a, max_count=10) == [300, 100]
    assert service.query("TopicA", b, max_count=10) == [200]
    assert service.query("TopicB", a, max_count=10) == []
    service.close()


def test_keys_with_equal_java_hashes_are_both_candidates(tmp_path):
    assert java_string_hash("T#Aa") == java_string_hash("T#BB")
    service = new_service(tmp_path)
    service.put("T", ["Aa"], 100, T0)
    service.put("T", ["BB"], 200, T0)
    assert service.query("T", "Aa", max_count=10) == [200, 100]  # the caller checks the keys
    service.close()


def test_put_skips_empty_keys_and_records_at_or_below_the_last_indexed(tmp_path):
    service = new_service(tmp_path)
    assert service.last_indexed_phys == -1
    service.put("T", ["", "k1", ""], 0, T0)
    assert service.last_indexed_phys == 0
    service.put("T", ["k2"], 0, T0)  # re-dispatch of the same record
    service.put("T", [""], 500, T0)  # no key: nothing indexed
    assert service.last_indexed_phys == 0
    assert service.query("T", "k2", max_count=5) == []
    assert INDEX_HEADER.unpack_from(read_file(service, index_files(service)[0]))[5] == 2
    service.close()


# -- rolling and querying ---------------------------------------------------------------


def test_a_full_file_rolls_to_a_new_one_that_starts_at_its_end(tmp_path):
    clock = ManualClock(T0)
    service = new_service(tmp_path, entries=4, clock=clock)  # 3 keys a file
    for n in range(7):
        keys = ["same", f"k{n}"] if n == 1 else ["same"]
        service.put("T", keys, 100 * (n + 1), T0 + n * 1000)
    names = index_files(service)
    assert names == ["20231114221320000", "20231114221320001", "20231114221320002"]
    headers = [INDEX_HEADER.unpack_from(read_file(service, name)) for name in names]
    assert [h[5] for h in headers] == [4, 4, 3]  # full, full, two keys
    assert headers[1][:4] == (T0 + 2000, T0 + 4000, 300, 500)
    assert service.query("T", "same", max_count=50) == [700, 600, 500, 400, 300, 200, 100]
    assert service.query("T", "k1", max_count=50) == [200]
    assert service.last_indexed_phys == 700
    service.close()


def test_a_record_whose_keys_overflow_a_file_continues_in_the_next(tmp_path):
    service = new_service(tmp_path, entries=4)
    service.put("T", ["a", "b", "c", "d", "e"], 100, T0)
    assert len(index_files(service)) == 2
    assert [service.query("T", k, max_count=5) for k in "abcde"] == [[100]] * 5
    service.close()


def test_query_honours_max_count_across_files(tmp_path):
    service = new_service(tmp_path, entries=4)
    for n in range(9):
        service.put("T", ["k"], 100 * (n + 1), T0 + n)
    assert service.query("T", "k", max_count=4) == [900, 800, 700, 600]
    assert service.query("T", "k", max_count=0) == []
    service.close()


def test_query_filters_by_store_time_range(tmp_path):
    service = new_service(tmp_path, entries=4)
    for n in range(9):  # one record every 10 s
        service.put("T", ["k"], 100 * (n + 1), T0 + n * 10_000)
    assert service.query(
        "T", "k", max_count=50, begin_timestamp_ms=T0 + 20_000, end_timestamp_ms=T0 + 50_000
    ) == [600, 500, 400, 300]
    assert service.query("T", "k", max_count=50, begin_timestamp_ms=T0 + 75_000) == [900]
    assert service.query("T", "k", max_count=50, end_timestamp_ms=T0 - 1) == []
    service.close()


def test_a_record_stored_within_the_first_second_of_the_range_is_a_candidate(tmp_path):
    service = new_service(tmp_path)
    service.put("T", ["k"], 100, T0)
    service.put("T", ["k"], 200, T0 + 1700)  # its entry says "1 s after T0"
    assert service.query("T", "k", max_count=5, begin_timestamp_ms=T0 + 1700) == [200]
    service.close()


# -- flush, close and reopen --------------------------------------------------------------


def test_flush_returns_the_newest_files_end_timestamp_and_runs_in_a_worker(tmp_path):
    service = new_service(tmp_path, entries=4)
    assert service.flush() == 0
    for n in range(5):
        service.put("T", ["k"], 100 * (n + 1), T0 + n * 1000)
    result: list[int] = []
    worker = threading.Thread(target=lambda: result.append(service.flush()))
    worker.start()
    worker.join()
    assert result == [T0 + 4000]
    service.close()


def test_reopen_after_close_finds_every_key(tmp_path):
    service = new_service(tmp_path, entries=4)
    for n in range(7):
        service.put("T", [f"k{n % 2}"], 100 * (n + 1), T0 + n * 1000)
    service.flush()
    service = reopen(service)
    assert len(service._files) == 3
    assert service.last_indexed_phys == 700
    assert service.query("T", "k0", max_count=10) == [700, 500, 300, 100]
    service.put("T", ["k1"], 800, T0 + 8000)
    assert service.query("T", "k1", max_count=10) == [800, 600, 400, 200]
    service.close()


def test_reopened_empty_file_that_follows_a_full_one_keeps_the_last_indexed(tmp_path):
    service = new_service(tmp_path, entries=4)
    service.put("T", ["a", "b", "c"], 300, T0)
    service.put("T", ["d", "e", "f"], 400, T0)
    service.truncate_phys(400)  # deletes the second file
    service._roll()  # an empty file carrying the first one's end
    service = reopen(service)
    assert service.last_indexed_phys == 300


def test_a_deleted_index_directory_loads_empty(tmp_path):
    service = new_service(tmp_path)
    service.put("T", ["k"], 100, T0)
    service.close()
    for name in os.listdir(service.directory):
        os.unlink(os.path.join(service.directory, name))
    os.rmdir(service.directory)
    service = reopen(service, clean_shutdown=False, checkpoint_timestamp_ms=T0)
    assert service.last_indexed_phys == -1
    assert service.query("T", "k", max_count=5) == []
    service.put("T", ["k"], 100, T0)  # rebuilt by re-dispatch
    assert service.query("T", "k", max_count=5) == [100]
    service.close()


def test_load_ignores_foreign_names_and_deletes_a_wrong_size_file_and_newer_ones(tmp_path, caplog):
    service = new_service(tmp_path, entries=4)
    for n in range(7):
        service.put("T", ["k"], 100 * (n + 1), T0)
    service.close()
    names = index_files(service)
    os.truncate(os.path.join(service.directory, names[1]), 100)
    with open(os.path.join(service.directory, "README"), "w") as f:
        f.write("x")
    with caplog.at_level(logging.WARNING):
        service = reopen(service)
    assert "README" in caplog.text and names[1] in caplog.text
    assert index_files(service) == [names[0], "README"]
    assert service.last_indexed_phys == 300
    service.close()


# -- crash ----------------------------------------------------------------------------


def test_crash_load_deletes_files_that_end_after_the_checkpoint(tmp_path, caplog):
    service = new_service(tmp_path, entries=4)
    for n in range(7):  # files end at T0+2 s, T0+5 s, T0+6 s
        service.put("T", ["k"], 100 * (n + 1), T0 + n * 1000)
    names = index_files(service)
    service.flush()
    with caplog.at_level(logging.WARNING):
        service = reopen(service, clean_shutdown=False, checkpoint_timestamp_ms=T0 + 2000)
    assert index_files(service) == names[:1]
    assert names[1] in caplog.text
    assert service.last_indexed_phys == 300
    assert service.query("T", "k", max_count=10) == [300, 200, 100]
    service = reopen(service, clean_shutdown=True, checkpoint_timestamp_ms=0)
    assert index_files(service) == names[:1]  # a clean shutdown deletes nothing
    service.close()


def test_crash_load_rebuilds_slots_that_point_past_the_header_index_count(tmp_path):
    service = new_service(tmp_path)
    service.put("T", ["a"], 100, T0)
    service.put("T", ["b"], 200, T0)
    path = os.path.join(service.directory, index_files(service)[0])
    with open(path, "rb") as f:
        flushed_header = f.read(40)
    service.put("T", ["a"], 300, T0)  # its slot page reached the disk, the header did not
    service.close()
    with open(path, "r+b") as f:
        f.write(flushed_header)
    service = reopen(service, clean_shutdown=False, checkpoint_timestamp_ms=T0)
    assert service.last_indexed_phys == 200
    assert service.query("T", "a", max_count=10) == [100]
    service.put("T", ["a"], 300, T0)  # re-dispatch
    assert service.query("T", "a", max_count=10) == [300, 100]  # the chain is whole
    service.close()


# -- deletion -------------------------------------------------------------------------


def test_truncate_phys_deletes_the_files_reaching_the_cut(tmp_path):
    service = new_service(tmp_path, entries=4)
    for n in range(7):  # files hold phys 100..300, 400..600, 700
        service.put("T", ["k"], 100 * (n + 1), T0 + n)
    names = index_files(service)
    service.truncate_phys(450)
    assert index_files(service) == names[:1]
    assert service.last_indexed_phys == 300  # re-dispatch re-indexes 400 on
    service.put("T", ["k"], 400, T0 + 3)
    assert service.query("T", "k", max_count=10) == [400, 300, 200, 100]
    service.truncate_phys(0)
    assert index_files(service) == [] and service.last_indexed_phys == -1
    service.close()


def test_delete_below_deletes_old_files_but_never_the_newest(tmp_path):
    service = new_service(tmp_path, entries=4)
    for n in range(7):
        service.put("T", ["k"], 100 * (n + 1), T0 + n)
    names = index_files(service)
    assert service.delete_below(300) == 0  # the first file ends at 300
    assert service.delete_below(301) == 1
    assert index_files(service) == names[1:]
    assert service.delete_below(10**9) == 1
    assert index_files(service) == names[2:]
    assert service.last_indexed_phys == 700
    service.destroy()
    assert index_files(service) == []


# -- disk full ------------------------------------------------------------------------


class FullDisk(StoreIO):
    full = False

    def allocate(self, fd: int, size: int) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        super().allocate(fd, size)


def test_a_full_disk_fails_the_put_that_needs_a_new_file_and_leaves_no_file(tmp_path):
    io = FullDisk()
    service = new_service(tmp_path, entries=4, io=io)
    service.put("T", ["a", "b", "c"], 100, T0)
    io.full = True
    with pytest.raises(OSError) as excinfo:
        service.put("T", ["d"], 200, T0)
    assert excinfo.value.errno == errno.ENOSPC
    assert len(index_files(service)) == 1 and service.last_indexed_phys == 100
    io.full = False
    service.put("T", ["d"], 200, T0)
    assert service.query("T", "d", max_count=5) == [200]
    service.close()


# -- model ----------------------------------------------------------------------------


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    records=st.lists(
        st.lists(st.sampled_from([f"key{n}" for n in range(12)]), max_size=3), max_size=30
    ),
    entries=st.integers(2, 6),
)
def test_query_returns_what_a_dict_of_lists_would(tmp_path_factory, records, entries):
    service = new_service(tmp_path_factory.mktemp("idx"), entries=entries)
    model: dict[str, list[int]] = {}
    for n, keys in enumerate(records):
        phys_offset = 100 * (n + 1)
        service.put("T", keys, phys_offset, T0 + n * 1000)
        for key in keys:
            model.setdefault(key, []).insert(0, phys_offset)
    for n in range(12):
        key = f"key{n}"
        assert service.query("T", key, max_count=100) == model.get(key, [])
    service.close()


# -- offline reading ------------------------------------------------------------------


@pytest.mark.parametrize(("slots", "entries"), [(SLOTS, ENTRIES), (1000, 5000), (7, 3)])
def test_iter_index_entries_reads_every_entry_given_the_slot_count(tmp_path, slots, entries):
    service = IndexFileSet(
        str(tmp_path / "index"), slots=slots, entries=entries, clock=ManualClock(T0)
    )
    service.load(clean_shutdown=True, checkpoint_timestamp_ms=0)
    written = []
    for n in range(12):
        service.put("T", [f"k{n}", f"u{n}"], 4096 * (n + 1), T0 + n)
        written += [
            (key_hash("T", f"k{n}"), 4096 * (n + 1)),
            (key_hash("T", f"u{n}"), 4096 * (n + 1)),
        ]
    service.close()
    read = [
        entry
        for name in index_files(service)
        for entry in iter_index_entries(os.path.join(service.directory, name), slots=slots)
    ]
    assert read == written


def test_iter_index_entries_of_an_empty_file_yields_nothing(tmp_path):
    service = new_service(tmp_path)
    service._roll()
    service.close()
    (name,) = index_files(service)
    assert (
        list(iter_index_entries(os.path.join(service.directory, name), slots=service.slots)) == []
    )
