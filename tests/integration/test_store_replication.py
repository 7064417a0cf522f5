"""The store's side of replication on real files: frames out, frames in, tails cut by epoch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from storekit import bodies, open_store, record, small_config

from pocketmq.broker.store import GetStatus, PutStatus
from pocketmq.broker.store.epochs import EpochEntry
from pocketmq.broker.store.replication import ReplicationError


@pytest.fixture
def pair(tmp_path):
    master = open_store(small_config(tmp_path / "master"))
    replica = open_store(small_config(tmp_path / "replica"))
    yield master, replica
    master.shutdown()
    replica.shutdown()


def copy_all(master, replica, *, max_bytes=8 * 1024):
    """Replicate frame by frame until the replica holds the master's whole log."""
    frames = 0
    while replica.commitlog.max_offset < master.commitlog.max_offset:
        offset = replica.commitlog.max_offset
        data = master.read_for_replica(offset, max_bytes)
        assert data, f"no frame at {offset} below {master.commitlog.max_offset}"
        replica.append_replicated(offset, data)
        frames += 1
    return frames


def log_bytes(store):
    out = bytearray()
    for mf in store.commitlog.queue.files:
        out += mf.read(0, mf.wrote_position)
    return bytes(out)


def put(store, n, *, topic="orders", queues=3, size=700, start=0):
    for i in range(start, start + n):
        result = store.put_batch(
            record(
                topic=topic,
                body=b"%06d" % i + b"x" * size,
                queue_id=i % queues,
                keys=f"k{i}",
                uniq=f"u{i}",
            )
        )
        assert result.status is PutStatus.PUT_OK


def test_a_replica_copies_the_log_byte_for_byte_across_segments(pair):
    master, replica = pair
    put(master, 300)  # ~ 230 KiB: several 64 KiB segments, BLANK ends
    frames = copy_all(master, replica)
    assert frames > 4
    assert len(master.commitlog.queue.files) > 2
    assert log_bytes(replica) == log_bytes(master)
    for q in range(3):
        assert replica.max_offset("orders", q) == master.max_offset("orders", q)
        got = replica.get_messages("orders", q, 0, max_count=500)
        want = master.get_messages("orders", q, 0, max_count=500)
        assert bodies(got.records) == bodies(want.records)
    assert [
        len(x)
        for x in (replica.query_by_key("orders", "k123"), replica.query_by_key("orders", "u42"))
    ] == [1, 1]


def test_frames_hold_whole_records_and_never_cross_a_segment(pair):
    master, _ = pair
    put(master, 200)
    seg = master.commitlog.file_size
    offset = 0
    while offset < master.commitlog.max_offset:
        data = master.read_for_replica(offset, 3000)
        assert data
        assert offset // seg == (offset + len(data) - 1) // seg
        offset += len(data)
    assert offset == master.commitlog.max_offset


def test_a_frame_stops_at_the_given_epoch_end(pair):
    master, _ = pair
    put(master, 7)
    boundary = master.commitlog.max_offset  # where the next term would begin
    put(master, 13, start=7)
    data = master.read_for_replica(0, 1 << 20, stop=boundary)
    assert len(data) == boundary
    assert master.read_for_replica(boundary, 1 << 20, stop=boundary) == b""


def test_a_replica_continues_after_a_restart(tmp_path):
    master = open_store(small_config(tmp_path / "m"))
    replica = open_store(small_config(tmp_path / "r"))
    put(master, 100)
    copy_all(master, replica)
    replica.shutdown()
    put(master, 100, start=100)
    replica = open_store(small_config(tmp_path / "r"))
    copy_all(master, replica)
    assert log_bytes(replica) == log_bytes(master)
    assert replica.commitlog.queue_offsets == master.commitlog.queue_offsets
    master.shutdown()
    replica.shutdown()


def test_a_damaged_frame_is_refused_and_nothing_of_it_is_kept(pair):
    master, replica = pair
    put(master, 10)
    data = bytearray(master.read_for_replica(0, 1 << 20))
    data[len(data) // 2] ^= 0xFF
    with pytest.raises(ReplicationError, match="damaged record"):
        replica.append_replicated(0, bytes(data))
    assert replica.commitlog.max_offset == 0
    assert replica.get_messages("orders", 0, 0).status is not GetStatus.FOUND
    copy_all(master, replica)
    assert log_bytes(replica) == log_bytes(master)


def test_a_frame_at_the_wrong_offset_is_refused(pair):
    master, replica = pair
    put(master, 10)
    data = master.read_for_replica(0, 1 << 20)
    with pytest.raises(ReplicationError, match="this log ends at 0"):
        replica.append_replicated(100, data)


def test_truncate_to_cuts_the_tail_its_queues_index_and_epochs(pair):
    _master, replica = pair
    replica.epochs.begin(1, 0)
    put(replica, 50)
    point = replica.commitlog.max_offset
    replica.epochs.begin(2, point)
    put(replica, 50, start=50)
    before = {q: replica.max_offset("orders", q) for q in range(3)}
    cut = replica.truncate_to(point)
    assert cut > 0
    assert replica.commitlog.max_offset == point
    assert replica.epochs.entries == [EpochEntry(1, 0)]
    assert sum(replica.max_offset("orders", q) for q in range(3)) == 50
    assert all(replica.max_offset("orders", q) < before[q] for q in range(3))
    assert replica.query_by_key("orders", "k70") == []
    assert len(replica.query_by_key("orders", "k10")) == 1
    # the queue offsets continue from the cut: the next put takes the cut record's offset
    put(replica, 1, start=50)
    assert replica.max_offset("orders", 50 % 3) == before[50 % 3] - 16
    with pytest.raises(ReplicationError, match="not a record boundary"):
        replica.truncate_to(point - 3)


def test_truncate_survives_a_restart(tmp_path):
    store = open_store(small_config(tmp_path / "s"))
    put(store, 40)
    point = store.commitlog.max_offset
    put(store, 40, start=40)
    store.truncate_to(point)
    store.shutdown()
    store = open_store(small_config(tmp_path / "s"))
    assert store.commitlog.max_offset == point
    assert sum(store.max_offset("orders", q) for q in range(3)) == 40
    assert os.path.exists(store.dirs.epochs) is False or store.epochs.entries == []
    store.shutdown()


def test_a_wiped_replica_copies_a_master_whose_log_starts_past_zero(tmp_path):
    master = open_store(small_config(tmp_path / "m"))
    replica = open_store(small_config(tmp_path / "r"))
    put(master, 300)
    put(replica, 20, topic="other")  # history the master does not share
    master.commitlog.queue.delete_head(lambda mf: True, max_files=2)  # retention
    start = master.commitlog.min_offset
    assert start > 0
    replica.wipe()
    assert replica.commitlog.max_offset == 0 and replica.topics() == []
    offset = start
    while offset < master.commitlog.max_offset:
        data = master.read_for_replica(offset, 8192)
        offset = replica.append_replicated(offset, data)
    assert replica.commitlog.min_offset == start
    assert log_bytes(replica) == log_bytes(master)
    for q in range(3):
        assert replica.max_offset("orders", q) == master.max_offset("orders", q)
    master.shutdown()
    replica.shutdown()


def assert_all_readable_once(replica, n, *, queues=3, topic="orders"):
    """Every record 0..n-1 of :func:`put` is in its queue exactly once, and found by key."""
    for q in range(queues):
        got = replica.get_messages(topic, q, 0, max_count=n)
        want = [b"%06d" % i for i in range(q, n, queues)]
        assert [body[:6] for body in bodies(got.records)] == want
        assert replica.max_offset(topic, q) == len(want)
    for i in range(n):
        assert len(replica.query_by_key(topic, f"k{i}")) == 1, f"k{i}"


def test_a_frame_appended_without_its_dispatch_is_dispatched_once_by_what_comes_next(pair):
    master, replica = pair
    put(master, 60)
    data = master.read_for_replica(0, 1 << 20)
    replica.append_replicated(0, data, dispatch=False)
    # acknowledged as held: in the log, not yet in the queues
    assert replica.commitlog.max_offset == master.commitlog.max_offset
    assert replica.max_offset("orders", 0) == 0
    assert replica.dispatched_offset == 0
    put(master, 30, start=60)
    copy_all(master, replica)  # the next frame dispatches the previous one first
    replica.dispatch_replicated()  # nothing left: a no-op
    assert replica.dispatched_offset == replica.commitlog.max_offset
    assert log_bytes(replica) == log_bytes(master)
    assert_all_readable_once(replica, 90)
    assert replica.commitlog.queue_offsets == master.commitlog.queue_offsets


def test_a_promoted_replicas_first_put_dispatches_the_frame_it_held_undispatched(pair):
    master, replica = pair
    put(master, 30)
    replica.append_replicated(0, master.read_for_replica(0, 1 << 20), dispatch=False)
    put(replica, 6, start=30)  # a put on the (now master) store: the frame goes first
    assert_all_readable_once(replica, 36)


def test_a_replica_killed_between_append_and_dispatch_dispatches_on_restart(tmp_path):
    master = open_store(small_config(tmp_path / "m"))
    put(master, 200)
    master_bytes = log_bytes(master)
    master.shutdown()
    support = os.path.join(os.path.dirname(__file__), os.pardir, "support")
    proc = subprocess.Popen(
        [
            sys.executable,
            os.path.join(support, "replica_appender.py"),
            str(tmp_path / "m"),
            str(tmp_path / "r"),
        ],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.path.abspath(support)},
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("APPENDED "), line
        end, dispatched = map(int, line.split()[1:])
        assert dispatched < end == len(master_bytes)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    replica = open_store(small_config(tmp_path / "r"))
    try:
        assert log_bytes(replica) == master_bytes
        assert replica.dispatched_offset == replica.commitlog.max_offset
        assert_all_readable_once(replica, 200)
    finally:
        replica.shutdown()
