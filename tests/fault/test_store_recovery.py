"""Crash recovery on damaged real files, and SIGKILL of a writing process."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from storekit import bodies, crash, open_store, record, small_config, start_store

from pocketmq.broker.store import GetStatus
from pocketmq.broker.store.verify import verify_store
from pocketmq.common.message import decode_record

SUPPORT = Path(__file__).resolve().parents[1] / "support"


def fill(store, n: int, *, pad: int = 0, **kw) -> list[int]:
    """Put n records (one per put); return their phys offsets."""
    return [
        store.put_batch(
            record(body=f"m{i}".encode() + b"." * pad, uniq=f"U{i}", **kw)
        ).phys_offsets[0]
        for i in range(n)
    ]


def segment(data_dir: Path, offset: int, file_size: int) -> Path:
    return data_dir / "commitlog" / f"{offset - offset % file_size:020d}"


def test_recovery_truncates_torn_tail_record(tmp_path):
    store = open_store(small_config(tmp_path))
    fill(store, 10)
    end = store.commitlog.max_offset
    crash(store)
    torn = record(body=b"x" * 500)[:300]  # half a record, as a crash mid-write leaves it
    with open(segment(tmp_path, end, 64 * 1024), "r+b") as f:
        f.seek(end)
        f.write(torn)
    store, report = start_store(small_config(tmp_path))
    try:
        assert (report.first_bad_offset, report.truncated_bytes) == (end, 300)
        assert not report.clean_shutdown
        assert store.commitlog.max_offset == end
        assert bodies(store.get_messages("orders", 0, 0).records) == [
            f"m{i}".encode() for i in range(10)
        ]
        assert store.put_batch(record()).phys_offsets == [end]
    finally:
        store.shutdown()
    assert verify_store(str(tmp_path)).ok


def test_recovery_report_names_the_bad_offset_and_bytes_cut(tmp_path):
    store = open_store(small_config(tmp_path))
    offsets = fill(store, 10)
    crash(store)
    with open(segment(tmp_path, offsets[6], 64 * 1024), "r+b") as f:
        f.seek(offsets[6] + 88)  # first body byte of record 6 (IPv4 hosts)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    store, report = start_store(small_config(tmp_path))
    try:
        assert report.first_bad_offset == offsets[6]
        assert "CRC" in report.reason
        assert (
            report.truncated_bytes == offsets[9] + len(record(body=b"m9", uniq="U9")) - offsets[6]
        )
        assert report.consume_queue_units_trimmed >= 0
        assert store.max_offset("orders", 0) == 6
        assert bodies(store.get_messages("orders", 0, 0).records)[-1] == b"m5"
        assert store.query_by_key("orders", "U8") == []
    finally:
        store.shutdown()
    assert verify_store(str(tmp_path)).ok


def test_with_check_crc_on_recover_off_a_flipped_body_byte_is_kept_and_framing_still_checked(
    tmp_path,
):
    store = open_store(small_config(tmp_path))
    offsets = fill(store, 10)
    end = store.commitlog.max_offset
    crash(store)
    with open(segment(tmp_path, offsets[6], 64 * 1024), "r+b") as f:
        f.seek(offsets[6] + 88)  # first body byte of record 6: only its CRC can tell
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
        f.seek(end)
        f.write(record(body=b"x" * 500)[:300])  # a torn tail: its framing is wrong
    config = small_config(tmp_path, check_crc_on_recover=False)
    store, report = start_store(config)
    try:
        assert (report.first_bad_offset, report.truncated_bytes) == (end, 300)
        assert store.max_offset("orders", 0) == 10, "record 6 kept: its CRC was not read"
    finally:
        store.shutdown()


def test_flipped_bytes_in_the_last_segment_cut_the_log_there(tmp_path):
    config = small_config(tmp_path)
    store = open_store(config)
    offsets = fill(store, 200, queue_id=1, pad=600)
    assert len(store.commitlog.queue.files) >= 2
    crash(store)
    target = offsets[-5]
    seg = segment(tmp_path, target, config.commitlog_file_size_bytes)
    with open(seg, "r+b") as f:
        f.seek(target % config.commitlog_file_size_bytes + 4)  # its MAGICCODE
        f.write(b"\xde\xad\xbe\xef")
    store = open_store(config)
    try:
        assert store.max_offset("orders", 1) == 195
        assert store.commitlog.max_offset == target
    finally:
        store.shutdown()
    assert verify_store(str(tmp_path)).ok


def test_a_truncated_consume_queue_file_is_rebuilt(tmp_path):
    config = small_config(tmp_path)
    store = open_store(config)
    fill(store, 30)
    store.shutdown()
    cq_file = tmp_path / "consumequeue" / "orders" / "0" / f"{0:020d}"
    with open(cq_file, "r+b") as f:
        f.truncate(10 * 20 + 7)  # ten whole units and a torn eleventh
    store = open_store(config)
    try:
        assert store.max_offset("orders", 0) == 30
        got = store.get_messages("orders", 0, 0, max_count=30)
        assert bodies(got.records) == [f"m{i}".encode() for i in range(30)]
    finally:
        store.shutdown()
    assert verify_store(str(tmp_path)).ok


def test_a_deleted_index_directory_is_rebuilt(tmp_path):
    config = small_config(tmp_path)
    store = open_store(config)
    fill(store, 20)
    store.shutdown()
    shutil.rmtree(tmp_path / "index")
    store = open_store(config)
    try:
        assert bodies(store.query_by_key("orders", "U13")) == [b"m13"]
    finally:
        store.shutdown()


def test_a_deleted_consume_queue_is_rebuilt_after_a_crash(tmp_path):
    config = small_config(tmp_path)
    store = open_store(config)
    fill(store, 12, queue_id=3)
    fill(store, 5, queue_id=4)
    crash(store)
    shutil.rmtree(tmp_path / "consumequeue" / "orders" / "3")
    store = open_store(config)
    try:
        assert store.max_offset("orders", 3) == 12
        assert store.get_messages("orders", 3, 0).status is GetStatus.FOUND
    finally:
        store.shutdown()


def test_unclean_restart_without_damage_keeps_everything(tmp_path):
    config = small_config(tmp_path)
    store = open_store(config)
    fill(store, 50, queue_id=2)
    crash(store)
    store = open_store(config)
    try:
        assert store.max_offset("orders", 2) == 50
        assert bodies(store.query_by_key("orders", "U49")) == [b"m49"]
    finally:
        store.shutdown()


def _run_writer_and_kill(data_dir: Path, mode: str, acks_wanted: int, write: str) -> set[str]:
    env = {**os.environ, "PYTHONPATH": str(SUPPORT)}
    proc = subprocess.Popen(
        [sys.executable, str(SUPPORT / "crashwriter.py"), str(data_dir), mode, write],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    acked: set[str] = set()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("ACK "):
                acked.add(line.split()[1])
                if len(acked) >= acks_wanted:
                    break
            elif line.startswith("FAIL"):
                pytest.fail(line)
        proc.send_signal(signal.SIGKILL)
        # whatever was acknowledged before the kill is still in the pipe: read it
        for line in proc.stdout:
            if line.startswith("ACK "):
                acked.add(line.split()[1])
    finally:
        proc.kill()
        proc.wait(timeout=30)
    return acked


def _stored_uniq_keys(store) -> list[str]:
    keys = []
    for queue_id in store.queue_ids("orders"):
        offset = 0
        while True:
            got = store.get_messages("orders", queue_id, offset, max_count=32)
            if got.status is not GetStatus.FOUND:
                break
            for raw, queue_offset in zip(got.records, got.queue_offsets, strict=True):
                msg = decode_record(raw)
                assert msg.queue_offset == queue_offset
                keys.append(msg.uniq_key)
            offset = got.next_begin_offset
    return keys


@pytest.mark.parametrize("write", ["pwrite", "mmap"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sigkill_of_a_writing_process_loses_no_acknowledged_record(tmp_path, mode, write):
    acked = _run_writer_and_kill(tmp_path, mode, acks_wanted=1500, write=write)
    assert len(acked) >= 1500
    store, report = start_store(
        small_config(
            tmp_path, commitlog_file_size_bytes=256 * 1024, write_without_mmap=write == "pwrite"
        )
    )
    try:
        assert not report.clean_shutdown
        stored = _stored_uniq_keys(store)
        assert len(stored) == len(set(stored)), "a queue offset holds a duplicate"
        missing = acked - set(stored)
        # kill -9 keeps the page cache, so even asynchronous flush loses nothing here;
        # power loss (dropped unflushed pages) is a separate test.
        assert not missing, f"{len(missing)} acknowledged records lost"
    finally:
        store.shutdown()
    assert verify_store(str(tmp_path)).ok


def test_schedule_queue_units_keep_the_delivery_time_through_a_rebuild(tmp_path):
    from pocketmq.common.message import encode_record

    config = small_config(tmp_path)
    store = open_store(config)
    scheduled = encode_record(
        topic="SCHEDULE_TOPIC_XXXX",
        body=b"later",
        queue_id=2,
        properties={"TAGS": "t", "TIMER_DELIVER_MS": "1800000000000"},
    )
    store.put_batch(scheduled)
    assert store.consume_queues.get("SCHEDULE_TOPIC_XXXX", 2).get(0)[2] == 1_800_000_000_000
    crash(store)
    shutil.rmtree(tmp_path / "consumequeue" / "SCHEDULE_TOPIC_XXXX")
    store = open_store(config)
    try:
        assert store.consume_queues.get("SCHEDULE_TOPIC_XXXX", 2).get(0)[2] == 1_800_000_000_000
    finally:
        store.shutdown()
    assert verify_store(str(tmp_path)).ok
