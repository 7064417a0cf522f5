"""DefaultMessageStore on real files: puts, reads, statuses, flush, limits, retention."""

from __future__ import annotations

import errno
import os
import time

import pytest
from storekit import bodies, open_store, record, small_config

from pocketmq.broker.store import FlushDiskType, GetStatus, PutStatus, StoreIO
from pocketmq.broker.store.message_store import DefaultMessageStore
from pocketmq.common.clock import ManualClock
from pocketmq.common.errors import StoreLockedError
from pocketmq.common.hashing import tags_code
from pocketmq.common.message import SysFlag, decode_record


@pytest.fixture
def store(tmp_path):
    s = open_store(small_config(tmp_path / "data"))
    yield s
    s.shutdown()


def test_put_patches_broker_fields_and_reads_back_the_stored_bytes(store):
    result = store.put_batch(record(body=b"one") + record(body=b"two"))
    assert result.status is PutStatus.PUT_OK
    assert result.queue_offsets == [0, 1]
    assert result.phys_offsets[0] == 0
    got = store.get_messages("orders", 0, 0)
    assert got.status is GetStatus.FOUND
    msgs = [decode_record(r) for r in got.records]
    assert [m.body for m in msgs] == [b"one", b"two"]
    assert [m.queue_offset for m in msgs] == [0, 1]
    assert [m.phys_offset for m in msgs] == result.phys_offsets
    assert msgs[0].store_host == ("127.0.0.1", 10911)
    assert msgs[0].store_timestamp_ms == result.store_timestamp_ms
    assert got.next_begin_offset == 2


def test_one_batch_feeds_several_queues_with_dense_offsets_per_queue(store):
    blob = b"".join(record(queue_id=q, body=bytes([i])) for i, q in enumerate([0, 1, 0, 2, 1]))
    result = store.put_batch(blob)
    assert result.queue_offsets == [0, 0, 1, 0, 1]
    assert [store.max_offset("orders", q) for q in range(3)] == [2, 2, 1]
    assert store.queue_ids("orders") == [0, 1, 2]


def test_get_answers_every_rocketmq_offset_status(store):
    assert store.get_messages("nope", 0, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    store.put_batch(record() * 1)
    store.put_batch(record())
    cases = {
        0: (GetStatus.FOUND, 2),
        2: (GetStatus.OFFSET_OVERFLOW_ONE, 2),
        9: (GetStatus.OFFSET_OVERFLOW_BADLY, 2),
    }
    for offset, (status, next_offset) in cases.items():
        got = store.get_messages("orders", 0, offset)
        assert (got.status, got.next_begin_offset) == (status, next_offset), offset


def test_get_filters_on_tag_codes_without_decoding(store):
    store.put_batch(b"".join(record(tags=t, body=t.encode()) for t in ["a", "b", "a", "c"]))
    got = store.get_messages("orders", 0, 0, tag_codes=frozenset({tags_code("a")}))
    assert bodies(got.records) == [b"a", b"a"]
    assert got.queue_offsets == [0, 2]
    assert got.next_begin_offset == 4
    none = store.get_messages("orders", 0, 0, tag_codes=frozenset({tags_code("zzz")}))
    assert none.status is GetStatus.NO_MATCHED_MESSAGE and none.next_begin_offset == 4


def test_get_respects_max_count_and_max_bytes(store):
    store.put_batch(b"".join(record(body=b"x" * 1000) for _ in range(10)))
    assert len(store.get_messages("orders", 0, 0, max_count=3).records) == 3
    by_bytes = store.get_messages("orders", 0, 0, max_bytes=2500)
    assert len(by_bytes.records) == 2 and by_bytes.next_begin_offset == 2


def test_records_never_straddle_segments_and_reads_cross_them(store):
    size = store.config.commitlog_file_size_bytes
    for i in range(40):
        assert store.put_batch(record(body=bytes([i]) * 3000)).ok
    assert len(store.commitlog.queue.files) >= 2
    offsets = []
    for i in range(40):
        (raw,) = store.get_messages("orders", 0, i, max_count=1).records
        msg = decode_record(raw)
        assert msg.body == bytes([i]) * 3000
        offsets.append(msg.phys_offset)
        assert msg.phys_offset // size == (msg.phys_offset + msg.total_size - 1) // size


def test_prepared_and_rolled_back_transaction_records_get_no_queue_unit(store):
    result = store.put_batch(
        record(sysflag=SysFlag.TRANSACTION_PREPARED)
        + record(sysflag=SysFlag.TRANSACTION_ROLLBACK)
        + record(sysflag=SysFlag.TRANSACTION_COMMIT, body=b"c")
    )
    assert result.queue_offsets == [0, 0, 0]
    assert store.max_offset("orders", 0) == 1
    assert bodies(store.get_messages("orders", 0, 0).records) == [b"c"]
    assert store.read_record(result.phys_offsets[0]) is not None


def test_query_by_key_finds_keys_and_unique_ids_and_verifies_hits(store):
    store.put_batch(
        record(keys="order-1 order-2", uniq="U1", body=b"a")
        + record(keys="order-2", uniq="U2", body=b"b")
        + record(topic="other", keys="order-1", body=b"c")
    )
    assert sorted(bodies(store.query_by_key("orders", "order-2"))) == [b"a", b"b"]
    assert bodies(store.query_by_key("orders", "order-1")) == [b"a"]
    assert bodies(store.query_by_key("orders", "U2")) == [b"b"]
    assert store.query_by_key("orders", "missing") == []
    assert len(store.query_by_key("orders", "order-2", max_count=1)) == 1


def test_arrival_listeners_hear_of_each_queue_after_dispatch(store):
    heard = []
    store.add_arrival_listener(lambda t, q, m: heard.append((t, q, m, store.max_offset(t, q))))
    store.put_batch(record(queue_id=1) + record(queue_id=1) + record(queue_id=2))
    assert sorted(heard) == [("orders", 1, 2, 2), ("orders", 2, 1, 1)]


def test_offset_by_timestamp_and_store_timestamp(tmp_path):
    clock = ManualClock(now_ms=1_000_000)
    store = open_store(small_config(tmp_path), clock=clock)
    try:
        for _ in range(5):
            store.put_batch(record())
            clock.advance(10)
        assert store.store_timestamp("orders", 0, 2) == 1_020_000
        assert store.offset_by_timestamp("orders", 0, 1_015_000) == 2
        assert store.offset_by_timestamp("orders", 0, 0) == 0
        assert store.offset_by_timestamp("orders", 0, 9_999_999) == 5
    finally:
        store.shutdown()


def test_a_second_store_on_the_same_directory_gets_a_clear_error(store):
    other = DefaultMessageStore(store.config)
    with pytest.raises(StoreLockedError, match="in use by another broker"):
        other.start()


def test_abort_marker_exists_while_running_and_goes_on_clean_shutdown(tmp_path):
    store = open_store(small_config(tmp_path))
    assert os.path.exists(tmp_path / "abort")
    store.shutdown()
    assert not os.path.exists(tmp_path / "abort")


def test_restart_keeps_messages_and_continues_queue_offsets(tmp_path):
    store = open_store(small_config(tmp_path))
    store.put_batch(record(body=b"a") + record(body=b"b"))
    store.shutdown()
    store = open_store(small_config(tmp_path))
    try:
        assert store.put_batch(record(body=b"c")).queue_offsets == [2]
        assert bodies(store.get_messages("orders", 0, 0).records) == [b"a", b"b", b"c"]
    finally:
        store.shutdown()


def test_invalid_puts_get_their_own_status_and_store_nothing(store):
    assert store.put_batch(record(body=b"x" * 20_000)).status is PutStatus.MESSAGE_ILLEGAL
    bad_crc = bytearray(record())
    bad_crc[8] ^= 0xFF
    result = store.put_batch(bytes(bad_crc))
    assert result.status is PutStatus.MESSAGE_ILLEGAL and "CRC" in result.error
    result = store.put_batch(record() + b"\x00" * 60)
    assert result.status is PutStatus.MESSAGE_ILLEGAL
    huge = store.put_batch(b"\0" * (store.config.max_batch_size_bytes + 1))
    assert "max_batch_size_bytes" in huge.error
    assert store.commitlog.max_offset == 0 and store.topics() == []


def test_sync_flush_acknowledges_after_the_bytes_are_durable(tmp_path):
    store = open_store(small_config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH))
    try:
        result = store.put_batch(record())
        assert result.flush_future is not None
        assert result.flush_future.result(timeout=10) is PutStatus.PUT_OK
        assert store.commitlog.queue.flushed_offset >= result.phys_offsets[0] + result.sizes[0]
    finally:
        store.shutdown()


class SlowSyncIO(StoreIO):
    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def sync(self, fd: int) -> None:
        time.sleep(self.delay_s)  # a slow disk, not a test waiting on a condition
        super().sync(fd)


def test_sync_flush_slower_than_the_timeout_answers_flush_disk_timeout(tmp_path):
    config = small_config(
        tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout_ms=50
    )
    store = open_store(config, io=SlowSyncIO(0.2))
    try:
        result = store.put_batch(record())
        assert result.flush_future.result(timeout=10) is PutStatus.FLUSH_DISK_TIMEOUT
    finally:
        store.shutdown()


class FakeDiskIO(StoreIO):
    """Reports a chosen disk use; can refuse to allocate like a full disk."""

    def __init__(self) -> None:
        self.ratio = 0.10
        self.enospc = False
        self.fail_sync = False

    def disk_used_ratio(self, path: str) -> float:
        return self.ratio

    def allocate(self, fd: int, size: int) -> None:
        if self.enospc:
            raise OSError(errno.ENOSPC, "No space left on device")
        super().allocate(fd, size)

    def sync(self, fd: int) -> None:
        if self.fail_sync:
            raise OSError(errno.EIO, "Input/output error")
        super().sync(fd)


def test_above_the_warning_level_writes_are_refused_and_reads_go_on(tmp_path):
    io = FakeDiskIO()
    store = open_store(small_config(tmp_path), io=io)
    try:
        store.put_batch(record(body=b"kept"))
        io.ratio = 0.95
        store.run_cleanup_once()
        refused = store.put_batch(record())
        assert refused.status is PutStatus.DISK_FULL
        assert "95.0%" in refused.error and "disk_space_warning_level_ratio" in refused.error
        assert bodies(store.get_messages("orders", 0, 0).records) == [b"kept"]
        io.ratio = 0.50
        store.run_cleanup_once()
        assert store.put_batch(record()).ok
    finally:
        store.shutdown()


def test_enospc_creating_a_segment_answers_disk_full_and_resumes(tmp_path):
    io = FakeDiskIO()
    store = open_store(small_config(tmp_path), io=io)
    try:
        io.enospc = True
        result = store.put_batch(record())
        assert result.status is PutStatus.DISK_FULL and "disk full" in result.error
        assert store.max_offset("orders", 0) == 0
        io.enospc = False
        store.run_cleanup_once()
        assert store.put_batch(record()).queue_offsets == [0]
    finally:
        store.shutdown()


def test_an_io_error_on_sync_makes_the_store_read_only(tmp_path):
    io = FakeDiskIO()
    store = open_store(small_config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH), io=io)
    try:
        store.put_batch(record(body=b"before"))
        io.fail_sync = True
        result = store.put_batch(record())
        assert result.flush_future.result(timeout=10) is PutStatus.SERVICE_NOT_AVAILABLE
        later = store.put_batch(record())
        assert later.status is PutStatus.SERVICE_NOT_AVAILABLE and "errno 5" in later.error
        assert store.get_messages("orders", 0, 0).status is GetStatus.FOUND
    finally:
        io.fail_sync = False
        store.shutdown()


def test_retention_deletes_expired_segments_and_moves_queue_minimums(tmp_path):
    clock = ManualClock(now_ms=1_700_000_000_000)
    later_hour = time.localtime(clock.now_ms() / 1000 + 2 * 3600).tm_hour
    config = small_config(tmp_path, file_reserved_hours=1, delete_when=f"{later_hour:02d}")
    store = open_store(config, clock=clock, io=FakeDiskIO())
    try:
        for _ in range(60):
            store.put_batch(record(body=b"x" * 3000))
        segments = len(store.commitlog.queue.files)
        assert segments >= 3
        assert store.run_cleanup_once() == 0  # not the delete hour yet
        clock.advance(2 * 3600)
        store.put_batch(record(body=b"new"))
        deleted = store.run_cleanup_once()
        assert deleted >= segments - 1
        assert store.commitlog.min_offset > 0
        low = store.min_offset("orders", 0)
        assert low > 0
        got = store.get_messages("orders", 0, 0)
        assert (got.status, got.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, low)
        assert store.get_messages("orders", 0, low).status is GetStatus.FOUND
    finally:
        store.shutdown()


def test_above_the_forcible_ratio_unexpired_segments_are_deleted(tmp_path):
    io = FakeDiskIO()
    clock = ManualClock(now_ms=1_700_000_000_000)
    other_hour = (time.localtime(clock.now_ms() / 1000).tm_hour + 12) % 24
    store = open_store(small_config(tmp_path, delete_when=f"{other_hour:02d}"), io=io, clock=clock)
    try:
        for _ in range(60):
            store.put_batch(record(body=b"x" * 3000))
        io.ratio = 0.86
        assert store.run_cleanup_once() >= 1
        assert store.put_batch(record()).ok  # 86 % is below the 90 % write limit
    finally:
        store.shutdown()


async def test_one_cancelled_waiter_does_not_cancel_the_others_of_its_flush_round(tmp_path):
    import asyncio

    from pocketmq.broker.store.flush import GroupCommitService
    from pocketmq.broker.store.mapped_file_queue import MappedFileQueue

    log_queue = MappedFileQueue(str(tmp_path), 64 * 1024)
    log_queue.last_file().append(b"x" * 100)
    service = GroupCommitService(log_queue, timeout_s=5, on_io_error=lambda exc: None)
    first, second = service.request(50), service.request(100)  # no thread: one round
    assert first is second
    impatient = asyncio.ensure_future(asyncio.wrap_future(first))
    patient = asyncio.wrap_future(second)
    await asyncio.sleep(0)
    impatient.cancel()
    await asyncio.sleep(0)
    service.run_once()
    assert await patient is PutStatus.PUT_OK
    log_queue.close()
