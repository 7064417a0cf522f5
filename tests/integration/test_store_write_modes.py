"""The commit log written through pwrite (write_without_mmap) or through the mapping:
the same bytes on disk, the same reads, restarts and truncations, either way."""

from __future__ import annotations

import errno
import mmap
import os

import pytest
from storekit import bodies, crash, open_store, record, small_config, start_store

from pocketmq.broker.store import GetStatus, PutStatus, StoreIO, replication
from pocketmq.broker.store.mapped_file import MappedFile
from pocketmq.broker.store.mapped_file_queue import MappedFileQueue
from pocketmq.broker.store.verify import verify_store
from pocketmq.common.clock import ManualClock
from pocketmq.common.message import decode_record

MODES = [pytest.param(True, id="pwrite"), pytest.param(False, id="mmap")]
SEGMENT = 64 * 1024


def _segment_bytes(store) -> bytes:
    out = b""
    for mf in store.commitlog.queue.files:
        with open(mf.path, "rb") as f:
            out += f.read()
    return out


def test_both_modes_leave_byte_identical_commit_logs(tmp_path):
    """Same puts at the same clock: the segments match byte for byte, fillers included."""
    logs = []
    for pwrite in (True, False):
        config = small_config(tmp_path / str(pwrite), write_without_mmap=pwrite)
        store = open_store(config, clock=ManualClock())
        try:
            for i in range(120):  # about three 64 KiB segments: rolls and BLANK fillers
                blob = b"".join(
                    record(body=bytes([i]) * (300 + 37 * j), queue_id=j % 3, uniq=f"U{i}-{j}")
                    for j in range(4)
                )
                assert store.put_batch(blob).status is PutStatus.PUT_OK
            assert len(store.commitlog.queue.files) >= 3
            logs.append(_segment_bytes(store))
        finally:
            store.shutdown()
    assert logs[0] == logs[1]


def _all_records(store) -> list[bytes]:
    out = []
    for queue_id in store.queue_ids("orders"):
        offset = 0
        while True:
            got = store.get_messages("orders", queue_id, offset, max_count=64)
            if got.status is not GetStatus.FOUND:
                break
            out += got.records
            offset = got.next_begin_offset
    return sorted(out, key=lambda r: decode_record(r).phys_offset)


@pytest.mark.parametrize("pwrite", MODES)
def test_a_put_is_readable_through_the_mapping_at_once(tmp_path, pwrite):
    store = open_store(small_config(tmp_path, write_without_mmap=pwrite))
    try:
        result = store.put_batch(record(body=b"one", uniq="U1") + record(body=b"two", uniq="U2"))
        assert result.status is PutStatus.PUT_OK
        got = store.get_messages("orders", 0, 0)
        msgs = [decode_record(r) for r in got.records]
        assert [m.body for m in msgs] == [b"one", b"two"]
        assert [m.phys_offset for m in msgs] == result.phys_offsets
        assert [m.queue_offset for m in msgs] == [0, 1]
        assert bodies(store.query_by_key("orders", "U2")) == [b"two"]
    finally:
        store.shutdown()


@pytest.mark.parametrize("pwrite", MODES)
def test_a_crash_and_restart_keep_every_put_and_verify_clean(tmp_path, pwrite):
    config = small_config(tmp_path, write_without_mmap=pwrite)
    store = open_store(config)
    for i in range(200):
        assert store.put_batch(record(body=os.urandom(700), queue_id=i % 2)).ok
    crash(store)
    store, report = start_store(config)
    try:
        assert not report.clean_shutdown
        assert store.max_offset("orders", 0) == store.max_offset("orders", 1) == 100
        assert store.put_batch(record(body=b"after")).ok  # appends continue at the end
    finally:
        store.shutdown()
    assert verify_store(str(tmp_path)).ok


def test_the_mapping_of_a_segment_written_with_pwrite_is_read_only(tmp_path):
    queue = MappedFileQueue(str(tmp_path), SEGMENT, write_without_mmap=True)
    mf = queue.last_file()
    assert mf is not None and mf.write_without_mmap
    mf.append(b"abc")
    assert mf.read(0, 3) == b"abc"
    with pytest.raises(TypeError):
        mf.buffer[0:1] = b"x"  # a stray store into the mapping is refused, not lost
    queue.close()


def test_a_truncated_segment_written_with_pwrite_reads_zeros_past_the_cut(tmp_path):
    queue = MappedFileQueue(str(tmp_path), SEGMENT, write_without_mmap=True)
    mf = queue.last_file()
    assert mf is not None
    mf.append(b"k" * 10_000)
    mf.truncate(4_000)
    assert mf.is_zero_from(4_000)
    mf.append(b"n" * 100)
    assert bytes(mf.buffer[3_990:4_110]) == b"k" * 10 + b"n" * 100 + b"\0" * 10
    queue.close()


def test_a_new_segments_first_bytes_go_through_its_file_and_the_rest_through_the_mapping(
    tmp_path,
):
    """The first store into a new file's mapping waits on the filesystem (ext4 here:
    1.8-2.3 ms median, against 8-20 us for a pwrite; the pages after the first cost
    5-12 us), which every new consume queue paid on the event loop. A new sparse segment
    (a consume queue's: unmapped until used) takes its first bytes by pwrite and stays
    unmapped; the next append maps it, and both read back through the mapping."""
    mf = MappedFile(str(tmp_path / f"{0:020d}"), SEGMENT, io=StoreIO(), create=True, sparse=True)
    mf.unmap()
    assert not mf.mapped
    mf.append(b"first unit..........")
    assert not mf.mapped, "the first append faulted the new file's mapping in"
    mf.append(b"second unit.........")
    assert mf.mapped
    assert bytes(mf.buffer[0:40]) == b"first unit..........second unit........."
    mf.flush()
    mf.close()
    with open(tmp_path / f"{0:020d}", "rb") as f:
        assert f.read(40) == b"first unit..........second unit........."


def test_a_sparse_segment_cannot_be_written_without_mmap(tmp_path):
    with pytest.raises(ValueError, match="sparse"):
        MappedFile(
            str(tmp_path / "00000000000000000000"),
            SEGMENT,
            io=StoreIO(),
            create=True,
            sparse=True,
            write_without_mmap=True,
        )


def test_a_failed_pwrite_gives_back_the_queue_offsets_it_took(tmp_path):
    store = open_store(small_config(tmp_path, write_without_mmap=True))
    try:
        assert store.put_batch(record(queue_id=0) + record(queue_id=1)).ok
        mf = store.commitlog.queue.files[-1]
        real_fd = mf._fd
        mf._fd = os.open(os.devnull, os.O_RDONLY)  # a descriptor pwrite fails on: EBADF
        try:
            with pytest.raises(OSError) as caught:
                store.commitlog.append_batch(
                    record(queue_id=0) + record(queue_id=1),
                    store.scan(record(queue_id=0) + record(queue_id=1)),
                    1,
                )
            assert caught.value.errno == errno.EBADF
        finally:
            os.close(mf._fd)
            mf._fd = real_fd
        assert store.commitlog.queue_offsets[("orders", 0)] == 1
        assert store.commitlog.queue_offsets[("orders", 1)] == 1
        assert mf.wrote_position == store.commitlog.max_offset - mf.file_from_offset
        result = store.put_batch(record(queue_id=1, body=b"next"))
        assert result.ok and result.queue_offsets == [1]
    finally:
        store.shutdown()


def test_pwrite_mode_never_maps_a_commit_log_page_writable(tmp_path):
    store = open_store(small_config(tmp_path, write_without_mmap=True))
    try:
        assert store.put_batch(record(body=b"x" * 5000)).ok
        for mf in store.commitlog.queue.files:
            with pytest.raises(TypeError):
                mf.buffer.write_byte(0)
            assert isinstance(mf.buffer, mmap.mmap)
    finally:
        store.shutdown()


def _copy_all(master, replica, max_bytes: int) -> int:
    frames = 0
    while replica.commitlog.max_offset < master.commitlog.max_offset:
        offset = replica.commitlog.max_offset
        data = master.read_for_replica(offset, max_bytes)
        assert data, f"no frame at {offset} below {master.commitlog.max_offset}"
        replica.append_replicated(offset, data)
        frames += 1
    return frames


@pytest.mark.parametrize("reference", [False, True], ids=["fast", "reference"])
@pytest.mark.parametrize(
    ("master_pwrite", "replica_pwrite"),
    [(True, True), (False, False), (True, False), (False, True)],
    ids=["pwrite-pwrite", "mmap-mmap", "pwrite-mmap", "mmap-pwrite"],
)
def test_a_replica_in_either_mode_copies_a_master_in_either_mode_byte_for_byte(
    tmp_path, monkeypatch, master_pwrite, replica_pwrite, reference
):
    monkeypatch.setattr(replication, "FAST_DISPATCH", not reference)
    master = open_store(small_config(tmp_path / "m", write_without_mmap=master_pwrite))
    replica = open_store(small_config(tmp_path / "r", write_without_mmap=replica_pwrite))
    try:
        for i in range(250):  # several 64 KiB segments, BLANK ends
            assert master.put_batch(record(body=os.urandom(600), queue_id=i % 3, uniq=f"u{i}")).ok
        good = master.read_for_replica(0, 8 * 1024)
        damaged = bytearray(good)
        damaged[len(damaged) // 2] ^= 0xFF
        with pytest.raises(replication.ReplicationError, match="damaged record"):
            replica.append_replicated(0, bytes(damaged))
        assert replica.commitlog.max_offset == 0  # nothing of it kept
        assert _copy_all(master, replica, 8 * 1024) > 4
        assert _segment_bytes(replica) == _segment_bytes(master)
        for queue_id in range(3):
            assert replica.max_offset("orders", queue_id) == master.max_offset("orders", queue_id)
        assert bodies(replica.query_by_key("orders", "u77")) == bodies(
            master.query_by_key("orders", "u77")
        )
    finally:
        master.shutdown()
        replica.shutdown()
