"""Replication frames: the hand codec is protobuf's wire format, and frames end where the walk says.

``broker/ha/wire.py`` writes and reads ``MasterFrame{data}`` without protobuf
objects; every frame it writes must be the bytes protobuf writes, and every
frame protobuf writes must decode to the same fields. The master's frame
bounds (``replica_frame``: all that is there when it fits, else the compiled
walk ``frame_end``) and the replica's dispatch columns (``frame_columns``)
must agree with their pure-Python references over real logs.
"""

from __future__ import annotations

import random

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st
from storekit import open_store, record, small_config

from pocketmq.broker.ha import wire
from pocketmq.broker.store import PutStatus, speedups
from pocketmq.broker.store import replica_frames as rf
from pocketmq.broker.store import replication as repl
from pocketmq.broker.store.batch import scan_batch
from pocketmq.common.message import HOST_V4_SIZE
from pocketmq.v1 import ha_pb2

int64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
offsets = st.one_of(
    st.integers(min_value=0, max_value=(1 << 63) - 1), st.sampled_from([0, 127, 128])
)


def data_fields():
    return st.fixed_dictionaries(
        {
            "offset": offsets,
            "epoch": int64,
            "epoch_start_offset": offsets,
            "master_max_offset": offsets,
            "master_min_offset": offsets,
            "records": st.binary(max_size=3000),
            "confirm_offset": st.one_of(st.none(), int64),
            "lazy_ack": st.booleans(),
        }
    )


def as_protobuf(fields: dict) -> ha_pb2.MasterFrame:
    plain = {k: v for k, v in fields.items() if k != "confirm_offset"}
    data = ha_pb2.Data(**plain)
    if fields["confirm_offset"] is not None:
        data.confirm_offset = fields["confirm_offset"]
    return ha_pb2.MasterFrame(data=data)


@settings(max_examples=300, deadline=None)
@given(data_fields())
def test_encoded_data_frames_are_the_bytes_protobuf_writes(fields):
    assert wire.encode_data(**fields) == as_protobuf(fields).SerializeToString()


@settings(max_examples=300, deadline=None)
@given(data_fields())
def test_data_frames_protobuf_writes_decode_to_their_fields(fields):
    frame = wire.decode_master_frame(as_protobuf(fields).SerializeToString())
    assert isinstance(frame, wire.DataFrame)
    decoded = {name: getattr(frame, name) for name in fields}
    decoded["records"] = bytes(frame.records)
    assert decoded == fields


def test_decoded_records_are_a_view_into_the_received_frame():
    raw = wire.encode_data(
        offset=8,
        epoch=1,
        epoch_start_offset=0,
        master_max_offset=9,
        master_min_offset=0,
        records=b"x" * 100,
    )
    frame = wire.decode_master_frame(raw)
    assert isinstance(frame.records, memoryview) and frame.records.obj is raw


def test_a_newer_masters_unknown_fields_are_skipped():
    raw = ha_pb2.Data(offset=5, records=b"abc").SerializeToString()
    raw += b"\x78\x2a" + b"\x82\x01\x03xyz" + b"\x8d\x01\x00\x00\x00\x00"  # 15, 16, 17
    outer = b"\x12" + bytes([len(raw)]) + raw
    frame = wire.decode_master_frame(outer)
    assert (frame.offset, bytes(frame.records), frame.lazy_ack) == (5, b"abc", False)


def test_a_repeated_field_is_read_as_protobuf_reads_it():
    first = ha_pb2.Data(offset=1, records=b"old").SerializeToString()
    second = ha_pb2.Data(records=b"new").SerializeToString()
    raw = b"\x12" + bytes([len(first) + len(second)]) + first + second
    frame = wire.decode_master_frame(raw)
    expected = ha_pb2.MasterFrame.FromString(raw).data
    assert (frame.offset, bytes(frame.records)) == (expected.offset, expected.records)


def test_welcome_and_refuse_frames_come_back_as_protobuf_messages():
    for message in (
        ha_pb2.MasterFrame(welcome=ha_pb2.Welcome(master_epoch=3, start_offset=9)),
        ha_pb2.MasterFrame(refuse=ha_pb2.Refuse(message="no")),
    ):
        assert wire.decode_master_frame(message.SerializeToString()) == message
    assert wire.serialize(message) == message.SerializeToString()
    assert wire.serialize(b"\x12\x00") == b"\x12\x00"


@pytest.mark.parametrize("cut", [2, 5, 20])
def test_a_truncated_data_frame_is_an_error_not_a_short_frame(cut):
    raw = wire.encode_data(
        offset=300,
        epoch=2,
        epoch_start_offset=0,
        master_max_offset=400,
        master_min_offset=0,
        records=b"r" * 40,
    )
    inner = raw[2:-cut]
    with pytest.raises((wire.FrameError, DecodeError)):
        wire.decode_master_frame(b"\x12" + bytes([len(inner)]) + inner)


# -- frame bounds and dispatch columns over real logs ------------------------------------


@pytest.fixture(scope="module")
def master(tmp_path_factory):
    """A log over several segments (so several BLANK fillers) of mixed record sizes."""
    store = open_store(small_config(tmp_path_factory.mktemp("m")))
    rng = random.Random(7)
    for n in range(150):
        batch = b"".join(
            record(
                topic=rng.choice(["a", "b"]),
                queue_id=rng.randrange(3),
                body=b"%d:" % n + b"x" * rng.randint(1, 2500),
                uniq=f"u{n}-{i}",
            )
            for i in range(rng.randint(1, 6))
        )
        assert store.put_batch(batch).status is PutStatus.PUT_OK
    assert len(store.commitlog.queue.files) >= 3
    yield store
    store.shutdown()


def boundaries(store) -> list[int]:
    return [
        rec.phys_offset for rec in store.commitlog.scan(store.commitlog.min_offset, check_crc=False)
    ]


needs_native = pytest.mark.skipif(
    speedups.NATIVE is None or not hasattr(speedups.NATIVE, "frame_end"),
    reason="the store's extension is not built",
)


@needs_native
def test_frame_end_matches_the_reference_on_a_real_log(master):
    rng = random.Random(1)
    starts = boundaries(master)
    for _ in range(400):
        offset = rng.choice(starts)
        mf = master.commitlog.queue.find(offset)
        start = offset - mf.file_from_offset
        limit = rng.randint(start, mf.wrote_position)
        max_bytes = rng.choice([1, 500, 4000, 20000, 1 << 30])
        assert speedups.NATIVE.frame_end(mf.buffer, start, limit, max_bytes) == rf.py_frame_end(
            mf.buffer, start, limit, max_bytes
        )


@needs_native
def test_frame_end_refuses_a_range_outside_the_segment():
    for args in ((b"\0" * 16, 4, 2, 10), (b"\0" * 16, 0, 17, 10), (b"\0" * 16, -1, 8, 10)):
        with pytest.raises(ValueError):
            speedups.NATIVE.frame_end(*args)
        with pytest.raises(ValueError):
            rf.py_frame_end(*args)


def test_frames_end_on_records_and_never_cross_a_segment_or_a_stop(master):
    """What the master sends (all there is when it fits, else the walk) is what the
    reference walk gives: whole records, at most max_bytes but one record at least."""
    rng = random.Random(2)
    starts = boundaries(master)
    for _ in range(400):
        offset = rng.choice(starts)
        later = [b for b in starts if b > offset] + [master.commitlog.max_offset]
        stop = rng.choice([None, rng.choice(later)])
        max_bytes = rng.choice([1, 3000, 9000, 40000, 1 << 30])
        span = repl.replica_frame(master, offset, max_bytes, stop)
        mf = master.commitlog.queue.find(offset)
        base = mf.file_from_offset
        end = master.commitlog.max_offset if stop is None else stop
        limit = min(end, base + mf.file_size) - base
        walked = rf.py_frame_end(mf.buffer, offset - base, limit, max_bytes)
        assert span is not None
        assert span == (mf, offset - base, walked)
        data = master.read_for_replica(offset, max_bytes, stop)
        assert data == mf.read(offset - base, walked - (offset - base))
        assert offset + len(data) <= end
        if len(data) > max_bytes:  # one record only (and a segment's filler after it)
            assert not [b for b in starts if offset < b < offset + len(data)]
    assert repl.replica_frame(master, master.commitlog.max_offset, 1000) is None


@needs_native
def test_frame_columns_match_the_reference(master):
    rng = random.Random(3)
    starts = boundaries(master)
    compared = 0
    for _ in range(60):
        offset = rng.choice(starts)
        data = master.read_for_replica(offset, rng.choice([2000, 30000]))
        end = repl.records_end(data, False)
        try:
            batch = scan_batch(
                memoryview(data)[:end], max_body_size=1 << 30, store_host_size=HOST_V4_SIZE
            )
        except Exception:  # a frame holding a segment's filler: not what dispatch sees
            continue
        args = (batch.blob, batch.positions, batch.store_ts_positions, offset)
        assert speedups.NATIVE.frame_columns(*args) == rf.py_frame_columns(*args)
        compared += 1
    assert compared > 30


@needs_native
def test_frame_columns_refuse_positions_outside_the_frame():
    frame = b"\0" * 100
    for positions, stamps in (([80], [0]), ([0], [95]), ([-1], [0]), ([0, 1], [0])):
        with pytest.raises(ValueError):
            speedups.NATIVE.frame_columns(frame, positions, stamps, 0)
        with pytest.raises(ValueError):
            rf.py_frame_columns(frame, positions, stamps, 0)
