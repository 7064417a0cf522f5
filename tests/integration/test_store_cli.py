"""`pocketmq store verify|dump` on real data directories, as a person runs them."""

from __future__ import annotations

import json

from clikit import pocketmq_sync
from storekit import open_store, record, small_config


def make_store(path, n=20):
    store = open_store(small_config(path))
    for i in range(n):
        store.put_batch(
            record(body=f"m{i}".encode(), queue_id=i % 3, tags="t", keys=f"k{i}", uniq=f"U{i}")
        )
    store.shutdown()


def test_verify_passes_a_healthy_store_and_prints_a_summary(tmp_path):
    make_store(tmp_path)
    result = pocketmq_sync("store", "verify", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "20 records" in result.stdout and result.stdout.strip().endswith("OK")


def test_verify_exits_non_zero_naming_a_flipped_byte(tmp_path):
    make_store(tmp_path)
    segment = tmp_path / "commitlog" / f"{0:020d}"
    with open(segment, "r+b") as f:
        f.seek(88)  # first body byte of the first record
        f.write(b"\xff")
    result = pocketmq_sync("store", "verify", "--json", str(tmp_path))
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert not report["ok"]
    assert any("body CRC" in p for p in report["problems"])


def test_verify_finds_a_consume_queue_unit_pointing_nowhere(tmp_path):
    make_store(tmp_path)
    unit_file = tmp_path / "consumequeue" / "orders" / "0" / f"{0:020d}"
    with open(unit_file, "r+b") as f:
        f.seek(20)
        f.write((7).to_bytes(8, "big"))  # second unit's commit-log offset, now wrong
    result = pocketmq_sync("store", "verify", str(tmp_path))
    assert result.returncode == 1
    assert "PROBLEM" in result.stdout


def test_dump_prints_records_filtered_by_topic_and_queue(tmp_path):
    make_store(tmp_path)
    result = pocketmq_sync("store", "dump", str(tmp_path), "--queue", "1", "--json")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["queue_offset"] for r in rows] == list(range(7))
    assert {r["queue_id"] for r in rows} == {1}
    assert rows[0]["properties"]["KEYS"] == "k1"


def test_store_commands_refuse_a_directory_that_is_not_a_store(tmp_path):
    result = pocketmq_sync("store", "verify", str(tmp_path))
    assert result.returncode == 2 and "not a PocketMQ data directory" in result.stderr


def test_verify_reads_a_store_whose_only_indexed_record_is_at_offset_0(tmp_path):
    make_store(tmp_path, n=1)
    result = pocketmq_sync("store", "verify", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 records" in result.stdout and "index        2 entries" in result.stdout


def test_verify_takes_the_index_slot_count_from_the_option_when_the_store_recorded_none(tmp_path):
    make_store(tmp_path, n=1)
    (tmp_path / "storeGeometry.json").unlink()  # a store written before it was recorded
    unknown = pocketmq_sync("store", "verify", str(tmp_path))
    assert unknown.returncode == 1 and "--index-slots" in unknown.stdout, unknown.stdout
    assert "Traceback" not in unknown.stderr, unknown.stderr
    told = pocketmq_sync(
        "store", "verify", "--index-slots", str(small_config(tmp_path).index_slots), str(tmp_path)
    )
    assert told.returncode == 0, told.stdout + told.stderr


def test_verify_passes_a_store_with_a_deleted_topic(tmp_path):
    store = open_store(small_config(tmp_path))
    for i in range(6):
        store.put_batch(record(topic="gone", body=b"x", queue_id=i % 2, keys=f"g{i}"))
    store.delete_topics(["gone"])
    store.put_batch(record(topic="gone", body=b"y", keys="g-new"))  # created again
    store.shutdown()
    result = pocketmq_sync("store", "verify", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "7 records" in result.stdout


def _index_entry_at(tmp_path, number: int) -> tuple[object, int]:
    """(index file, file position) of entry *number* (1 = the first) of the store's index."""
    from pocketmq.broker.store.index_file import HASH_SLOT, INDEX_ENTRY, INDEX_HEADER

    (index,) = sorted((tmp_path / "index").iterdir())
    slots = small_config(tmp_path).index_slots
    return index, INDEX_HEADER.size + slots * HASH_SLOT.size + number * INDEX_ENTRY.size


def test_verify_names_an_index_entry_whose_hash_matches_no_key_of_its_record(tmp_path):
    make_store(tmp_path, n=3)
    index, pos = _index_entry_at(tmp_path, 3)  # the second record's first key
    with open(index, "r+b") as f:
        f.seek(pos)
        f.write((12345).to_bytes(4, "big"))
    result = pocketmq_sync("store", "verify", "--json", str(tmp_path))
    assert result.returncode == 1, result.stdout
    problems = json.loads(result.stdout)["problems"]
    assert len(problems) == 1 and "entry hash 12345 matches no key" in problems[0], problems


def test_verify_names_an_index_entry_that_points_inside_a_record(tmp_path):
    make_store(tmp_path, n=3)
    index, pos = _index_entry_at(tmp_path, 1)
    with open(index, "r+b") as f:
        f.seek(pos + 4)
        f.write((9).to_bytes(8, "big"))  # commit-log offset 9: the middle of the first record
    result = pocketmq_sync("store", "verify", "--json", str(tmp_path))
    assert result.returncode == 1, result.stdout
    problems = json.loads(result.stdout)["problems"]
    assert any("entry points at 9, not a record" in p for p in problems), problems
