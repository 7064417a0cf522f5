"""A replica's check of a master's frame: the compiled ``scan_frame`` is its reference.

``scan_frame`` checks every record of a frame as the batch scanner does (body CRC
folded with PCLMULQDQ where the CPU has it: ``crc32_fast``), checks every
PHYSICALOFFSET against where the record lands, and reads the dispatch columns,
in one call. Over real logs, damaged frames and misplaced ones it must return
and raise exactly what ``py_scan_frame`` does, and ``crc32_fast`` must be
``zlib.crc32``.
"""

from __future__ import annotations

import dataclasses
import os
import random
import zlib

import pytest
from storekit import open_store, record, replica_frames, small_config

from pocketmq.broker.store import PutStatus, speedups
from pocketmq.broker.store import replica_frames as rf
from pocketmq.broker.store import replication as repl
from pocketmq.broker.store.batch import BatchError
from pocketmq.common.message import HOST_V4_SIZE, HOST_V6_SIZE, POS_QUEUEOFFSET

needs_native = pytest.mark.skipif(
    speedups.NATIVE is None or not hasattr(speedups.NATIVE, "scan_frame"),
    reason="the store's extension is not built",
)


@pytest.fixture(scope="module")
def master(tmp_path_factory):
    """A log of mixed topics, queues, keys, tags, sizes and store timestamps."""
    store = open_store(small_config(tmp_path_factory.mktemp("m")))
    rng = random.Random(11)
    for n in range(120):
        batch = b"".join(
            record(
                topic=rng.choice(["orders", "audit"]),
                queue_id=rng.randrange(3),
                body=b"%d:" % n + os.urandom(rng.randint(0, 2500)),
                tags=rng.choice(["", "a", "b"]),
                keys=rng.choice(["", f"k{n}", f"k{n} k{n + 1}"]),
                uniq=f"u{n}-{i}",
                born_timestamp_ms=1_700_000_000_000 + n,
            )
            for i in range(rng.randint(1, 6))
        )
        assert store.put_batch(batch).status is PutStatus.PUT_OK
    yield store
    store.shutdown()


def outcome(scan, frame: bytes, base: int, host_size: int = HOST_V4_SIZE):
    """What *scan* returns (the batch as a plain dict), or the error it raises."""
    try:
        batch, *columns = scan(frame, base, host_size)
    except BatchError as exc:
        return ("error", exc.kind, str(exc))
    fields = dataclasses.asdict(batch)
    fields["blob"] = bytes(fields["blob"])
    return fields, columns


def log_bytes(store) -> bytes:
    return b"".join(mf.read(0, mf.wrote_position) for mf in store.commitlog.queue.files)


def test_crc32_fast_is_zlibs_crc32_at_every_length_and_alignment():
    rng = random.Random(5)
    lengths = [*range(0, 300), *(rng.randrange(300, 70_000) for _ in range(400))]
    for n in lengths:
        data = os.urandom(n + 16)
        skew = rng.randrange(16)
        start = rng.choice([0, rng.randrange(1 << 32)])
        view = memoryview(data)[skew : skew + n]
        expected = zlib.crc32(view, start)
        if speedups.NATIVE is not None and hasattr(speedups.NATIVE, "crc32_fast"):
            assert speedups.NATIVE.crc32_fast(view, start) == expected, (n, skew)


@needs_native
def test_scan_frame_matches_the_reference_on_a_real_log(master):
    compared = 0
    for offset, frame in replica_frames(master, 1, 80):
        expected = outcome(rf.py_scan_frame, frame, offset)
        assert expected[0] != "error"
        assert outcome(speedups.NATIVE.scan_frame, frame, offset) == expected
        compared += 1
    assert compared > 50


@needs_native
def test_scan_frame_refuses_what_the_reference_refuses(master):
    rng = random.Random(2)
    refused = 0
    for offset, frame in replica_frames(master, 3, 60):
        damaged = bytearray(frame)
        kind = rng.randrange(4)
        if kind == 0:  # a flipped byte anywhere: CRC, framing, topic or properties
            damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
        elif kind == 1:  # cut short
            damaged = damaged[: rng.randrange(1, len(damaged))]
        elif kind == 2:  # bound for another place in the log
            offset += rng.choice([-1, 1, 4096])
        else:  # one record's PHYSICALOFFSET rewritten
            damaged[POS_QUEUEOFFSET + 8 + 7] ^= 0x10
        expected = outcome(rf.py_scan_frame, bytes(damaged), offset)
        assert outcome(speedups.NATIVE.scan_frame, bytes(damaged), offset) == expected
        refused += expected[0] == "error"
    assert refused > 40


@needs_native
def test_scan_frame_names_the_misplaced_record():
    one = record(body=b"x" * 100)
    two = record(body=b"y" * 100)
    frame = bytearray(one + two)
    # the records as the master stored them at 1000 and 1000 + len(one)
    for pos, phys in ((0, 1000), (len(one), 1000 + len(one))):
        frame[pos + POS_QUEUEOFFSET + 8 : pos + POS_QUEUEOFFSET + 16] = phys.to_bytes(8, "big")
    assert outcome(speedups.NATIVE.scan_frame, bytes(frame), 1000)[0] != "error"
    for scan in (speedups.NATIVE.scan_frame, rf.py_scan_frame):
        misplaced = (
            "record at batch offset 0 says PHYSICALOFFSET 1000; it lies at commit-log offset 1004"
        )
        with pytest.raises(BatchError, match=misplaced):
            scan(bytes(frame), 1004, HOST_V4_SIZE)
        with pytest.raises(ValueError, match="STOREHOST is 8 or 20"):
            scan(bytes(frame), 1000, 12)
        with pytest.raises(BatchError, match="reserves 8 bytes for STOREHOST"):
            scan(bytes(frame), 1000, HOST_V6_SIZE)


def test_a_replica_on_the_reference_scan_copies_the_log_byte_for_byte(
    master, tmp_path, monkeypatch
):
    monkeypatch.setattr(repl, "scan_frame", rf.py_scan_frame)
    monkeypatch.setattr(repl, "frame_dispatch", rf.py_frame_dispatch)
    replica = open_store(small_config(tmp_path / "r"))
    try:
        offset = 0
        while offset < master.commitlog.max_offset:
            data = master.read_for_replica(offset, 8192)
            offset = replica.append_replicated(offset, data)
        assert replica.commitlog.max_offset == master.commitlog.max_offset
        for topic, queue_id in master.commitlog.queue_offsets:
            assert replica.max_offset(topic, queue_id) == master.max_offset(topic, queue_id)
        assert log_bytes(replica) == log_bytes(master)
    finally:
        replica.shutdown()
