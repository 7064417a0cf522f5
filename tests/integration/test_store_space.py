"""Disk space and the store: sparse consume queues, whole refusals, dispatch catch-up, the check.

Real files in ``tmp_path``; a ``StoreIO`` subclass stands in for a full disk
where a test needs ENOSPC at one kind of file (the tmpfs fault tests fill a
real filesystem).
"""

from __future__ import annotations

import errno
import os

from storekit import open_store, record, small_config

from pocketmq.broker.store import StoreIO
from pocketmq.broker.store.results import PutStatus
from pocketmq.broker.store.verify import verify_store

KiB = 1024
MiB = 1024 * KiB


def disk_use(directory: str) -> tuple[int, int]:
    """(bytes of disk blocks, apparent bytes) of every file under *directory*."""
    used = apparent = 0
    for root, _dirs, files in os.walk(directory):
        for name in files:
            st = os.stat(os.path.join(root, name))
            used += st.st_blocks * 512
            apparent += st.st_size
    return used, apparent


def test_a_thousand_consume_queues_with_a_message_each_take_a_page_each_not_6_mb(tmp_path):
    store = open_store(
        small_config(
            tmp_path, consume_queue_units_per_file=300_000, commitlog_file_size_bytes=1 * MiB
        )
    )
    for first in range(0, 1000, 100):
        assert store.put_batch(
            b"".join(record(topic="Wide", queue_id=q, body=b"x") for q in range(first, first + 100))
        ).ok
    used, apparent = disk_use(store.dirs.consumequeue)
    print(
        f"\n1,000 consume queues of 6,000,000-byte files: {used} bytes of disk "
        f"({apparent} apparent)"
    )
    assert apparent == 1000 * 6_000_000
    assert used <= 1000 * 8 * KiB, f"{used} bytes on disk for 1,000 one-message queues"
    assert [store.get_messages("Wide", q, 0).message_count for q in (0, 499, 999)] == [1, 1, 1]
    store.shutdown()
    assert verify_store(str(tmp_path)).ok


class QueueSpaceIO(StoreIO):
    """ENOSPC for consume-queue files while ``full`` is set; everything else as usual."""

    def __init__(self) -> None:
        self.full = False

    def allocate(self, fd: int, size: int) -> None:
        if self.full and "consumequeue" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        super().allocate(fd, size)


def test_a_batch_whose_consume_queues_find_no_space_is_refused_whole(tmp_path):
    io = QueueSpaceIO()
    store = open_store(small_config(tmp_path), io=io)
    assert store.put_batch(record(topic="T", queue_id=0, body=b"first")).ok
    end = store.commitlog.max_offset
    io.full = True
    refused = store.put_batch(b"".join(record(topic="T", queue_id=q, body=b"b") for q in range(8)))
    assert refused.status is PutStatus.DISK_FULL
    assert "consume queue T:1" in refused.error and "No space left" in refused.error
    assert store.commitlog.max_offset == end, "part of the refused batch is in the commit log"
    assert [store.max_offset("T", q) for q in range(8)] == [1] + [0] * 7
    io.full = False
    store.run_cleanup_once()  # the disk check: space is back
    assert store.put_batch(b"".join(record(topic="T", queue_id=q, body=b"b") for q in range(8))).ok
    assert [store.max_offset("T", q) for q in range(8)] == [2] + [1] * 7
    store.shutdown()
    assert verify_store(str(tmp_path)).ok


def test_a_dispatch_that_fails_after_the_append_catches_up_before_the_next_put(
    tmp_path, monkeypatch
):
    store = open_store(small_config(tmp_path))
    real_put_many = store.index.put_many
    calls = []

    def fails_once(*args, **kwargs):
        calls.append(args)
        if len(calls) == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_put_many(*args, **kwargs)

    monkeypatch.setattr(store.index, "put_many", fails_once)
    stored = store.put_batch(record(topic="T", body=b"acked", keys="k1"))
    assert stored.ok, "the batch is whole in the commit log: acknowledged"
    assert store.catch_up.behind and store.get_messages("T", 0, 0).message_count == 0
    behind = store.put_batch(record(topic="T", body=b"later"))
    assert behind.status is PutStatus.DISK_FULL and "dispatch" in behind.error
    store.run_cleanup_once()  # the catch-up runs with the disk check
    assert not store.catch_up.behind
    assert store.get_messages("T", 0, 0).message_count == 1
    assert len(store.query_by_key("T", "k1")) == 1
    assert store.put_batch(record(topic="T", body=b"later")).ok
    store.shutdown()
    assert verify_store(str(tmp_path)).ok


class FreeSpaceIO(StoreIO):
    """A filesystem 40 % used whose user may still write only 424 KiB (root's reserve)."""

    def disk_used_ratio(self, path: str) -> float:
        return 0.40

    def available_bytes(self, path: str) -> int:
        return 424 * KiB


def test_the_disk_check_refuses_writes_below_disk_min_free_bytes_naming_the_numbers(tmp_path):
    store = open_store(small_config(tmp_path, disk_min_free_bytes=64 * MiB), io=FreeSpaceIO())
    store.run_cleanup_once()
    refused = store.put_batch(record(body=b"x"))
    assert refused.status is PutStatus.DISK_FULL
    assert f"{424 * KiB} bytes are available" in refused.error
    assert f"{64 * MiB} (disk_min_free_bytes)" in refused.error
    store.shutdown()


def statvfs_of(blocks: int, free: int, available: int) -> os.statvfs_result:
    """A filesystem of 4 KiB blocks: *free* counts root's reserve, *available* does not."""
    return os.statvfs_result((4096, 4096, blocks, free, available, 0, 0, 0, 0, 255))


def test_the_disk_ratio_is_dfs_used_over_used_and_available_leaving_roots_reserve_out(
    tmp_path, monkeypatch
):
    # 1,000 blocks: 300 used, 100 available to the broker, 600 reserved for root
    monkeypatch.setattr(os, "statvfs", lambda path: statvfs_of(1000, 700, 100))
    assert StoreIO().disk_used_ratio(str(tmp_path)) == 0.75  # df's Use%; not 0.90
    assert StoreIO().available_bytes(str(tmp_path)) == 100 * 4096


def test_a_filesystem_with_nothing_left_for_the_broker_reads_full(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "statvfs", lambda path: statvfs_of(1000, 600, 0))  # 40 % used
    assert StoreIO().disk_used_ratio(str(tmp_path)) == 1.0
    monkeypatch.setattr(os, "statvfs", lambda path: statvfs_of(1000, 1000, 0))  # all root's
    assert StoreIO().disk_used_ratio(str(tmp_path)) == 1.0


def test_the_disk_ratio_of_a_real_filesystem_is_what_df_shows(tmp_path):
    st = os.statvfs(tmp_path)
    used = st.f_blocks - st.f_bfree
    assert abs(StoreIO().disk_used_ratio(str(tmp_path)) - used / (used + st.f_bavail)) < 0.01


def test_enospc_writing_the_checkpoint_refuses_writes_until_space_is_back(tmp_path, monkeypatch):
    store = open_store(small_config(tmp_path))
    assert store.put_batch(record(body=b"before")).ok

    def full_disk(cp):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store.checkpoint, "write", full_disk)
    store.services.threads[-1].run_once()  # FlushConsumeQueueService: syncs, then the checkpoint
    refused = store.put_batch(record(body=b"during"))
    assert refused.status is PutStatus.DISK_FULL, refused
    assert not store.is_read_only, "a full disk is not a broken one"
    monkeypatch.undo()
    store.run_cleanup_once()
    assert store.put_batch(record(body=b"after")).ok
    store.shutdown()
    assert verify_store(str(tmp_path)).ok
