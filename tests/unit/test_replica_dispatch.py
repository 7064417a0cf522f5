"""The replica's fast apply path leaves the very files the reference path leaves.

``append_replicated`` checks a frame and dispatches it in runs, through
``frame_dispatch`` (one C pass that also makes the consume-queue units and
index entries) or, for frames that need it, ``scan_frame`` and the put's
dispatch helpers (``_dispatch_batch``); the reference appends, scans the
log record by record and dispatches each (``append_checked``). Frames of mixed
topics, queues, tags, keys, store timestamps, prepared transaction records,
schedule-topic records and segment ends go through both; the commit log,
every consume-queue file, every index file and the store's tables must agree.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from storekit import open_store, record, small_config

from pocketmq.broker.store import PutStatus
from pocketmq.broker.store import replication as repl
from pocketmq.broker.store.replication import ReplicationError
from pocketmq.common.clock import ManualClock
from pocketmq.common.message import SysFlag, encode_record, pack_host


def _files(root: Path) -> dict[str, bytes]:
    """Commit-log and consume-queue files by name; index files (named by the wall
    clock at their creation) by position."""
    files = {
        str(p.relative_to(root)): p.read_bytes()
        for sub in ("commitlog", "consumequeue")
        for p in sorted((root / sub).rglob("*"))
        if p.is_file()
    }
    index = sorted(p for p in (root / "index").iterdir() if p.is_file())
    files.update({f"index/{n}": p.read_bytes() for n, p in enumerate(index)})
    return files


def _fill(master, seed: int) -> None:
    rng = random.Random(seed)
    clock = master.clock
    for n in range(120):
        records = []
        for i in range(rng.randint(1, 12)):
            kind = rng.random()
            topic = rng.choice(["orders", "audit"])
            if kind < 0.08:
                records.append(
                    record(
                        topic=topic,
                        body=b"half%d" % i,
                        queue_id=0,
                        sysflag=SysFlag.TRANSACTION_PREPARED,
                        uniq=f"h{n}-{i}",
                    )
                )
            elif kind < 0.14:
                records.append(
                    encode_record(
                        topic="SCHEDULE_TOPIC_XXXX",
                        body=b"later",
                        queue_id=2,
                        properties={"TIMER_DELIVER_MS": str(1_700_000_000_000 + n), "TAGS": "t"},
                        born_timestamp_ms=1,
                        born_host=pack_host(("10.0.0.9", 1)),
                    )
                )
            else:
                records.append(
                    record(
                        topic=topic,
                        body=b"%d-%d:" % (n, i) + b"x" * rng.randint(10, 3000),
                        queue_id=rng.randrange(3),
                        tags=rng.choice(["", "a", "b"]),
                        keys=rng.choice(["", f"k{n}", f"k{n} k{i}"]),
                        uniq=f"u{n}-{i}",
                    )
                )
        assert master.put_batch(b"".join(records)).status is PutStatus.PUT_OK
        if rng.random() < 0.5:
            clock.advance(rng.random() / 50)


@pytest.mark.parametrize("lean", [True, False], ids=["frame_dispatch", "scan_frame"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fast_apply_leaves_the_files_the_reference_leaves(tmp_path, monkeypatch, seed, lean):
    if not lean:  # every frame the way of frames with stamps or schedule-topic records
        monkeypatch.setattr(repl, "frame_dispatch", lambda *args: None)
    master = open_store(small_config(tmp_path / "m"), clock=ManualClock())
    fast = open_store(small_config(tmp_path / "fast"))
    ref = open_store(small_config(tmp_path / "ref"))
    try:
        _fill(master, seed)
        rng = random.Random(seed)
        for replica, fast_path in ((fast, True), (ref, False)):
            monkeypatch.setattr(repl, "FAST_DISPATCH", fast_path)
            while replica.commitlog.max_offset < master.commitlog.max_offset:
                offset = replica.commitlog.max_offset
                replica.append_replicated(
                    offset, master.read_for_replica(offset, rng.choice([700, 5000, 40000]))
                )
        for store in (fast, ref):
            store.flush_round()
        assert (
            fast.commitlog.queue_offsets
            == ref.commitlog.queue_offsets
            == master.commitlog.queue_offsets
        )
        assert (fast.dispatched_offset, fast.stats_put_messages, fast.last_store_timestamp_ms) == (
            ref.dispatched_offset,
            ref.stats_put_messages,
            ref.last_store_timestamp_ms,
        )
        got, want = _files(tmp_path / "fast"), _files(tmp_path / "ref")
        assert sorted(got) == sorted(want)
        assert [name for name in want if got[name] != want[name]] == []
        assert len(fast.query_by_key("orders", "k7")) == len(ref.query_by_key("orders", "k7"))
    finally:
        for store in (master, fast, ref):
            store.shutdown()


def test_fast_apply_refuses_a_damaged_frame_before_writing_it(tmp_path):
    master = open_store(small_config(tmp_path / "m"))
    replica = open_store(small_config(tmp_path / "r"))
    try:
        for i in range(5):
            master.put_batch(record(body=b"B" * 300, uniq=f"u{i}"))
        for flip in (-150, -25):  # a byte of the last body; of its topic
            frame = bytearray(master.read_for_replica(0, 1 << 20))
            frame[flip] ^= 0xFF
            with pytest.raises(ReplicationError, match="damaged"):
                replica.append_replicated(0, bytes(frame))
            assert replica.commitlog.max_offset == 0
            assert replica.consume_queues.get("orders", 0) is None
        moved = bytearray(master.read_for_replica(0, 1 << 20))
        with pytest.raises(ReplicationError):
            replica.append_replicated(0, bytes(moved[:-7]))  # ends inside a record
        assert replica.commitlog.max_offset == 0
        replica.append_replicated(0, bytes(moved))
        assert replica.commitlog.max_offset == master.commitlog.max_offset
    finally:
        master.shutdown()
        replica.shutdown()
