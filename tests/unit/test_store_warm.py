"""WarmMappedFileService reads ahead of the commit log's writer and never changes a byte."""

from __future__ import annotations

import os
import random

import pytest
from storekit import record, small_config, start_store
from waitkit import eventually_sync

from pocketmq.broker.store import mapped_file as mapped_file_module
from pocketmq.broker.store.mapped_file_queue import MappedFileQueue
from pocketmq.broker.store.warm import STEP_BYTES, WarmMappedFileService

SEGMENT = 4 * 1024 * 1024
AHEAD = 1024 * 1024


def test_a_round_warms_up_to_ahead_bytes_past_the_write_position(tmp_path):
    queue = MappedFileQueue(str(tmp_path), SEGMENT)
    mf = queue.last_file()
    mf.append(b"x" * 5000)
    warm = WarmMappedFileService(queue, ahead_bytes=AHEAD)
    warm.run_once()
    assert warm.warmed == 5000 + AHEAD
    mf.append(b"y" * 100)
    warm.run_once()  # not due: nothing more is read
    assert warm.bytes_warmed == AHEAD
    queue.close()


def test_warming_stops_at_the_end_of_the_segment_and_moves_to_the_next(tmp_path):
    queue = MappedFileQueue(str(tmp_path), SEGMENT)
    first = queue.last_file()
    first.append(b"a" * (SEGMENT - AHEAD // 2))
    warm = WarmMappedFileService(queue, ahead_bytes=AHEAD)
    warm.run_once()
    assert warm.warmed == SEGMENT
    first.wrote_position = SEGMENT  # full: the next append rolls
    second = queue.last_file()
    assert second is not first
    warm.notify(second)
    warm.run_once()
    assert warm.warmed == AHEAD  # relative to the new segment
    queue.close()


def test_notify_wakes_the_thread_only_when_the_writer_nears_the_warm_edge(tmp_path):
    queue = MappedFileQueue(str(tmp_path), SEGMENT)
    mf = queue.last_file()
    warm = WarmMappedFileService(queue, ahead_bytes=AHEAD)
    warm.run_once()
    warm.notify(mf)
    assert not warm._wakeup.is_set()
    mf.append(b"z" * (AHEAD // 2 + 1))
    warm.notify(mf)
    assert warm._wakeup.is_set()
    queue.close()


def test_the_writer_s_progress_is_warmed_a_step_at_a_time_not_in_bursts(tmp_path):
    queue = MappedFileQueue(str(tmp_path), 4 * SEGMENT)
    mf = queue.last_file()
    warm = WarmMappedFileService(queue, ahead_bytes=8 * STEP_BYTES)
    warm.run_once()
    assert warm.bytes_warmed == 8 * STEP_BYTES
    mf.append(b"w" * (STEP_BYTES // 2))
    warm.notify(mf)
    assert not warm._wakeup.is_set(), "less than a step behind: not due"
    mf.append(b"w" * (STEP_BYTES // 2 + 1))
    warm.notify(mf)
    assert warm._wakeup.is_set()
    before = warm.bytes_warmed
    warm.run_once()
    assert 0 < warm.bytes_warmed - before <= 2 * STEP_BYTES, "one step, not half of ahead"
    assert warm.warmed >= mf.wrote_position + 8 * STEP_BYTES
    queue.close()


def test_warming_beside_a_writer_leaves_exactly_what_was_written(tmp_path):
    """The service reads while the writer writes, with no lock: the file must hold
    the writer's bytes and zeros after them, whatever the interleaving."""
    queue = MappedFileQueue(str(tmp_path), SEGMENT)
    mf = queue.last_file()
    warm = WarmMappedFileService(queue, ahead_bytes=AHEAD)
    warm.start()
    rng = random.Random(7)
    written = bytearray()
    try:
        while len(written) < SEGMENT - 70_000:
            chunk = rng.randbytes(rng.randrange(1, 65_536))
            mf.append(chunk)
            written += chunk
            warm.notify(mf)
        # the warmer runs on its own thread: on a busy machine the writer may finish first
        eventually_sync(lambda: warm.bytes_warmed > 0, timeout_s=20, what="some pages warmed")
    finally:
        warm.stop()
    queue.flush()
    with open(mf.path, "rb") as f:
        on_disk = f.read()
    assert on_disk[: len(written)] == written
    assert on_disk[len(written) :] == bytes(SEGMENT - len(written))
    queue.close()


def test_the_store_warms_its_commit_log_unless_disabled(tmp_path):
    for enabled in (True, False):
        data_dir = tmp_path / str(enabled)
        store, _ = start_store(
            small_config(data_dir, warm_mapped_file_enable=enabled, write_without_mmap=False)
        )
        try:
            assert store.put_batch(record(body=os.urandom(100))).status.value == "PUT_OK"
            assert (store.commitlog.warm is not None) is enabled
        finally:
            store.shutdown()


def test_a_store_writing_without_mmap_runs_no_warmer(tmp_path):
    store, _ = start_store(
        small_config(tmp_path, warm_mapped_file_enable=True, write_without_mmap=True)
    )
    try:
        assert store.put_batch(record(body=os.urandom(100))).status.value == "PUT_OK"
        assert store.commitlog.warm is None
    finally:
        store.shutdown()


@pytest.mark.skipif(
    mapped_file_module._populate_write is None, reason="the compiled populate_write is not built"
)
def test_warming_by_populating_writable_beside_a_writer_leaves_exactly_what_was_written(tmp_path):
    queue = MappedFileQueue(str(tmp_path), SEGMENT)
    mf = queue.last_file()
    warm = WarmMappedFileService(queue, ahead_bytes=AHEAD, populate_write=True)
    warm.start()
    rng = random.Random(11)
    written = bytearray()
    try:
        while len(written) < SEGMENT - 70_000:
            chunk = rng.randbytes(rng.randrange(1, 65_536))
            mf.append(chunk)
            written += chunk
            warm.notify(mf)
        # the warmer runs on its own thread: on a busy machine the writer may finish first
        eventually_sync(lambda: warm.bytes_warmed > 0, timeout_s=20, what="some pages warmed")
    finally:
        warm.stop()
    queue.flush()
    with open(mf.path, "rb") as f:
        on_disk = f.read()
    assert on_disk[: len(written)] == written
    assert on_disk[len(written) :] == bytes(SEGMENT - len(written))
    queue.close()


def test_populate_write_falls_back_to_reading_where_the_kernel_cannot(tmp_path, monkeypatch):
    monkeypatch.setattr(mapped_file_module, "_populate_write", None)
    queue = MappedFileQueue(str(tmp_path), SEGMENT)
    mf = queue.last_file()
    assert mf.prefault(0, bytearray(AHEAD), populate_write=True) == AHEAD
    assert mf.read(0, 10) == b""  # nothing written, nothing changed
    queue.close()


@pytest.mark.skipif(
    mapped_file_module._populate_write is None, reason="the compiled populate_write is not built"
)
def test_populating_written_pages_changes_no_byte_and_refuses_ranges_outside_the_mapping(tmp_path):
    queue = MappedFileQueue(str(tmp_path), SEGMENT)
    mf = queue.last_file()
    data = os.urandom(3 * 4096 + 123)
    mf.append(data)
    assert mf.prefault(100, bytearray(AHEAD), populate_write=True) == AHEAD  # mid-page, written
    assert mf.read(0, len(data)) == data
    with pytest.raises(ValueError, match="outside a mapping"):
        mapped_file_module._populate_write(mf.buffer, SEGMENT - 10, 20)
    queue.close()
    assert mf.prefault(0, bytearray(AHEAD), populate_write=True) == 0  # closed: no crash
