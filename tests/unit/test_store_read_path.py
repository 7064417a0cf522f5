"""The compiled read path gathers what its pure-Python reference gathers, and the store serves it.

``gather_records`` (``_speedups.c``) copies the records a pull names out of a
commit-log segment in one call; ``py_gather_records`` (``reads.py``) defines
what it does. Both are run here over random units, hostile ones included (a
damaged store's units may name any offset and any length), and then the
store's reads are compared, list form against blob form, on each
implementation, across segment boundaries, tag filters, byte limits and the
visibility gate.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storekit import open_store, record, small_config

from pocketmq.broker.store import GetStatus
from pocketmq.broker.store import reads as reads_module
from pocketmq.broker.store.consume_queue import CQ_UNIT
from pocketmq.broker.store.reads import (
    GATHER_LIMIT,
    GATHER_OTHER_SEGMENT,
    GATHER_UNITS_DONE,
    py_gather_records,
)
from pocketmq.common.hashing import tags_code
from pocketmq.common.message import decode_record

try:
    native: Any = importlib.import_module("pocketmq.broker.store._speedups")
except ImportError as exc:
    native = None
    _NOT_BUILT = f"the compiled extension is not built ({exc})"
else:
    _NOT_BUILT = ""

needs_native = pytest.mark.skipif(native is None, reason=_NOT_BUILT)
fuzz = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1
LOG_BASE = 1000


@st.composite
def gather_calls(draw: st.DrawFn) -> tuple[Any, ...]:
    """Arguments of one gather call: a segment, units inside and outside it, limits."""
    log = draw(st.binary(min_size=0, max_size=300))
    span = draw(st.sampled_from([len(log), len(log) + 50, 400]))
    wrote = draw(st.integers(-5, len(log) + 20))
    inside = st.tuples(
        st.integers(LOG_BASE, LOG_BASE + span + 10),
        st.integers(-3, 80),
        st.sampled_from([0, 1, 2, 7]),
    )
    hostile = st.tuples(
        st.integers(I64_MIN, I64_MAX), st.integers(I32_MIN, I32_MAX), st.integers(I64_MIN, I64_MAX)
    )
    units = draw(st.lists(st.one_of(inside, inside, hostile), max_size=30))
    raw = b"".join(CQ_UNIT.pack(*u) for u in units)
    pad = draw(st.integers(0, 2)) * 7  # units need not start at byte 0
    buf = draw(st.sampled_from([bytes, bytearray]))(b"\0" * pad + raw)
    n_units = draw(st.integers(0, len(units)))
    tag_codes = draw(
        st.one_of(
            st.none(),
            st.frozensets(
                st.one_of(st.sampled_from([0, 1, 2, 7]), st.integers(-(1 << 70), 1 << 70)),
                max_size=3,
            ),
        )
    )
    return (
        buf,
        pad,
        n_units,
        draw(st.integers(0, 10**6)),
        log,
        LOG_BASE,
        span,
        wrote,
        draw(st.sampled_from([0, LOG_BASE, LOG_BASE + 30])),
        draw(st.integers(1, 40)),
        draw(st.integers(0, 500)),
        draw(st.integers(0, 3)),
        draw(st.integers(0, 300)),
        tag_codes,
        draw(st.sampled_from([-1, LOG_BASE + 100, I64_MAX])),
        draw(st.booleans()),
    )


@needs_native
@fuzz
@given(gather_calls())
def test_compiled_gather_returns_what_the_reference_returns(call):
    assert native.gather_records(*call) == py_gather_records(*call)


@needs_native
@fuzz
@given(gather_calls(), st.integers(-40, 40), st.integers(-3, 40))
def test_units_outside_the_buffer_are_refused_by_both(call, upos, n_units):
    call = (call[0], upos, n_units, *call[3:])
    outcomes = []
    for gather in (native.gather_records, py_gather_records):
        try:
            outcomes.append(gather(*call))
        except ValueError as exc:
            outcomes.append(str(exc))
    assert outcomes[0] == outcomes[1]


@needs_native
@pytest.mark.parametrize("gather", ["c", "python"])
def test_a_damaged_unit_naming_bytes_past_the_written_end_is_skipped_as_removed(gather):
    fn = native.gather_records if gather == "c" else py_gather_records
    log = bytes(range(100))
    units = b"".join(
        CQ_UNIT.pack(*u)
        for u in [
            (LOG_BASE + 10, 5, 0),  # good
            (LOG_BASE + 90, I32_MAX, 0),  # runs past what is written
            (LOG_BASE + 20, -4, 0),  # negative length
            (LOG_BASE + 30, 0, 0),  # empty
            (LOG_BASE + 40, 5, 0),
        ]
    )  # good
    out, offsets, consumed, taken, removed, stop = fn(
        units, 0, 5, 70, log, LOG_BASE, 1 << 20, 100, 0, 10, 1 << 40, 0, 0, None, -1, False
    )
    assert (out, offsets, consumed, taken, removed, stop) == (
        log[10:15] + log[40:45],
        [70, 74],
        5,
        10,
        True,
        GATHER_UNITS_DONE,
    )


@needs_native
@pytest.mark.parametrize("gather", ["c", "python"])
def test_gather_stops_before_a_unit_of_another_segment_and_at_the_gate(gather):
    fn = native.gather_records if gather == "c" else py_gather_records
    log = bytes(range(100))
    units = b"".join(
        CQ_UNIT.pack(*u)
        for u in [(LOG_BASE, 10, 0), (LOG_BASE + 10, 10, 0), (LOG_BASE + 100, 10, 0)]
    )
    first = fn(units, 0, 3, 0, log, LOG_BASE, 100, 100, 0, 10, 10_000, 0, 0, None, -1, True)
    assert first == ([log[0:10], log[10:20]], [0, 1], 2, 20, False, GATHER_OTHER_SEGMENT)
    gated = fn(
        units, 0, 3, 0, log, LOG_BASE, 100, 100, 0, 10, 10_000, 0, 0, None, LOG_BASE + 15, True
    )
    assert gated == ([log[0:10]], [0], 1, 10, False, GATHER_LIMIT)


# -- the store, list form against blob form, on each implementation -------------------------
def _reads(store, topic, queue_id, offset, **kw):
    listed = store.get_messages(topic, queue_id, offset, **kw)
    blob = store.get_message_blob(topic, queue_id, offset, **kw)
    return listed, blob


@pytest.fixture(params=["python", "c"])
def gather_impl(request, monkeypatch):
    if request.param == "c":
        if native is None:
            pytest.skip(_NOT_BUILT)
        monkeypatch.setattr(reads_module, "gather_records", native.gather_records)
    else:
        monkeypatch.setattr(reads_module, "gather_records", py_gather_records)
    return request.param


def test_reads_across_commit_log_segments_return_every_record_in_both_forms(tmp_path, gather_impl):
    store = open_store(
        small_config(
            tmp_path,
            commitlog_file_size_bytes=8 * 1024,
            max_message_size_bytes=4096,
            max_batch_size_bytes=4096,
        )
    )
    try:
        for i in range(60):  # ~300-byte records: several 8 KiB segments and BLANK tails
            assert store.put_batch(
                record(body=b"%03d" % i + b"x" * 200, tags="A" if i % 3 else "B")
            ).ok
        assert len(store.commitlog.queue.files) > 2
        listed, blob = _reads(store, "orders", 0, 0, max_count=1000, max_bytes=1 << 20)
        assert listed.status is blob.status is GetStatus.FOUND
        assert len(listed.records) == blob.message_count == 60
        assert blob.blob == b"".join(listed.records)
        assert listed.queue_offsets == blob.queue_offsets == list(range(60))
        assert [decode_record(r).body[:3] for r in listed.records] == [
            b"%03d" % i for i in range(60)
        ]
        assert listed.next_begin_offset == blob.next_begin_offset == 60
    finally:
        store.shutdown()


def test_tag_filtered_and_byte_limited_reads_agree_in_both_forms(tmp_path, gather_impl):
    store = open_store(
        small_config(
            tmp_path,
            commitlog_file_size_bytes=8 * 1024,
            max_message_size_bytes=4096,
            max_batch_size_bytes=4096,
        )
    )
    try:
        for i in range(40):
            assert store.put_batch(record(body=b"x" * 100, tags="B" if i % 4 == 0 else "A")).ok
        listed, blob = _reads(store, "orders", 0, 3, tag_codes=frozenset({tags_code("B")}))
        assert listed.queue_offsets == blob.queue_offsets == [4, 8, 12, 16, 20, 24, 28, 32, 36]
        assert blob.blob == b"".join(listed.records)
        one = len(listed.records[0])
        listed, blob = _reads(store, "orders", 0, 0, max_bytes=3 * one + 1)
        assert listed.queue_offsets == blob.queue_offsets == [0, 1, 2]
        assert blob.total_bytes == 3 * one and blob.next_begin_offset == 3
    finally:
        store.shutdown()


def test_reads_stop_at_the_confirm_offset_in_both_forms(tmp_path, gather_impl):
    store = open_store(small_config(tmp_path))
    try:
        results = [store.put_batch(record(body=b"m%d" % i)) for i in range(5)]
        third_end = results[2].phys_offsets[0] + results[2].sizes[0]
        store.gate.turn_on(third_end)
        listed, blob = _reads(store, "orders", 0, 0)
        assert listed.queue_offsets == blob.queue_offsets == [0, 1, 2]
        assert listed.max_offset == blob.max_offset == 3
        assert blob.blob == b"".join(listed.records)
    finally:
        store.shutdown()


def test_a_unit_naming_a_deleted_segment_reads_as_removed(tmp_path, gather_impl):
    store = open_store(small_config(tmp_path))
    try:
        assert store.put_batch(record(body=b"kept")).ok
        cq = store.consume_queues.get("orders", 0)
        cq.append(1, 10 * 1024 * 1024, 120, 0)  # a unit past every segment (damage)
        listed, blob = _reads(store, "orders", 0, 1)
        assert listed.status is blob.status is GetStatus.MESSAGE_WAS_REMOVING
        assert blob.blob == b"" and listed.records == []
        assert listed.next_begin_offset == blob.next_begin_offset == 2
    finally:
        store.shutdown()
