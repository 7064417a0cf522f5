"""The producer state is a function of the commit log: crash, snapshots, replicas."""

from __future__ import annotations

import os

from storekit import crash, small_config, start_store

from pocketmq.broker.idempotence import IdempotenceProcessor
from pocketmq.broker.store.producer_snapshot import snapshot_offsets
from pocketmq.client.idempotence import stamp
from pocketmq.client.message_codec import encode_message
from pocketmq.client.model import Message

HOST = b"\x7f\0\0\1\0\0\0\0"


def numbered(pid: int, seq: int, queue_id: int = 0) -> bytes:
    return encode_message(
        Message(topic="orders", body=b"x" * 100),
        queue_id=queue_id,
        uniq_key=stamp(f"K{seq}", pid, 0, seq),
        born_host=HOST,
        born_timestamp_ms=1,
    )


def duplicates(store, record: bytes) -> dict:
    service = IdempotenceProcessor(store)
    return service.check(record, store.scan(record)) or {}


def test_a_crashed_store_rebuilds_the_state_from_the_log_and_refuses_a_duplicate(tmp_path) -> None:
    config = small_config(tmp_path, producer_snapshot_interval_bytes=4096)
    store, _ = start_store(config)
    phys = [store.put_batch(numbered(7, seq)).phys_offsets[0] for seq in range(100)]
    assert snapshot_offsets(store.dirs.producers), "snapshots were written on the way"
    crash(store)
    store, _ = start_store(config)
    try:
        assert store.producers_snapshot_offset > 0, "replay started at a snapshot"
        assert duplicates(store, numbered(7, 99))[0].phys_offset == phys[99]
        assert duplicates(store, numbered(7, 100)) == {}
    finally:
        store.shutdown()


def test_a_snapshot_past_the_recovered_end_is_dropped(tmp_path) -> None:
    config = small_config(tmp_path, producer_snapshot_interval_bytes=1 << 40)
    store, _ = start_store(config)
    for seq in range(5):
        store.put_batch(numbered(7, seq))
    end = store.commitlog.max_offset
    store.snapshot_producers(end + 10_000)  # claims records the log will not have
    crash(store)
    store, _ = start_store(config)
    try:
        assert end + 10_000 not in snapshot_offsets(store.dirs.producers)
        assert store.producers.producers[7].queues[("orders", 0)].last_seq == 4
    finally:
        store.shutdown()


def test_a_replica_fed_the_masters_frames_refuses_the_same_duplicate(tmp_path) -> None:
    master, _ = start_store(small_config(tmp_path / "m"))
    replica, _ = start_store(small_config(tmp_path / "r"))
    try:
        for seq in range(20):
            master.put_batch(numbered(9, seq // 2, queue_id=seq % 2))
        offset = 0
        while offset < master.commitlog.max_offset:
            frame = master.read_for_replica(offset, 4096)
            offset = replica.append_replicated(offset, frame)
        assert duplicates(replica, numbered(9, 9, queue_id=0)) == duplicates(
            master, numbered(9, 9, queue_id=0)
        )
        assert duplicates(replica, numbered(9, 9, queue_id=0))[0].phys_offset >= 0
        assert os.path.isdir(replica.dirs.root)
    finally:
        master.shutdown()
        replica.shutdown()
