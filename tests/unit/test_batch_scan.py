"""scan_batch: every record of a batch is checked before anything is stored."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pocketmq.broker.store.batch import (
    MARK_DELAY,
    MARK_TIMER,
    BatchError,
    py_scan_batch,
    scan_batch,
)
from pocketmq.common.hashing import tags_code
from pocketmq.common.message import encode_record, pack_host

MAX = 4 * 1024 * 1024


def rec(topic="t", body=b"b", queue_id=0, **props) -> bytes:
    return encode_record(topic=topic, body=body, queue_id=queue_id, properties=props)


def test_scan_extracts_what_dispatch_needs_for_each_record():
    blob = rec("a", queue_id=1, TAGS="x", KEYS="k1 k2", UNIQ_KEY="U1") + rec("b", queue_id=2)
    batch = scan_batch(blob, max_body_size=MAX)
    assert batch.topics == ["a", "b"]
    assert batch.queue_ids == [1, 2]
    assert batch.tags_codes == [tags_code("x"), 0]
    assert batch.keys == [["k1", "k2", "U1"], []]
    assert batch.uniq_keys == ["U1", ""]
    assert batch.positions[1] == batch.sizes[0]


@pytest.mark.parametrize("scan", [scan_batch, py_scan_batch], ids=["scan_batch", "py"])
@pytest.mark.parametrize(
    ("props", "markers"),
    [
        ({}, 0),
        ({"TAGS": "DELAY", "KEYS": "TIMER_DELAY_MS"}, 0),  # only property names count
        ({"DELAY": "3"}, MARK_DELAY),
        ({"DELAY": ""}, 0),  # an empty value is no property
        ({"TIMER_DELIVER_MS": "1"}, MARK_TIMER),
        ({"TIMER_DELAY_SEC": "1", "DELAY": "2"}, MARK_DELAY | MARK_TIMER),
    ],
)
def test_scan_marks_the_properties_the_broker_acts_on(scan, props, markers):
    blob = rec("a") + rec("b", **props) + rec("c")
    assert scan(blob, max_body_size=MAX).markers == markers


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda b: b[:20], "cut short"),
        (lambda b: b[:50], "TOTALSIZE 99, but 50 bytes are left"),
        (lambda b: b[:4] + b"\0\0\0\0" + b[8:], "magic code"),
        (lambda b: struct.pack(">i", 10**6) + b[4:], "TOTALSIZE"),
        (lambda b: struct.pack(">i", -5) + b[4:], "TOTALSIZE"),
        (lambda b: b[:8] + b"\0\0\0\7" + b[12:], "body CRC"),
        (lambda b: b + b"\0" * 10, "cut short"),
    ],
)
def test_scan_rejects_forged_blobs_naming_the_problem(damage, expected):
    with pytest.raises(BatchError, match=expected):
        scan_batch(damage(rec(body=b"payload")), max_body_size=MAX)


def test_scan_rejects_an_oversized_body_with_both_numbers():
    with pytest.raises(BatchError, match="5000 bytes; this broker accepts at most 4096"):
        scan_batch(rec(body=b"x" * 5000), max_body_size=4096)


def test_scan_rejects_a_bad_topic_name():
    with pytest.raises(BatchError, match="topic name"):
        scan_batch(rec(topic="bad topic!"), max_body_size=MAX)


def test_scan_rejects_a_store_host_it_cannot_patch():
    blob = encode_record(topic="t", body=b"x", store_host=pack_host(("::1", 1)))
    with pytest.raises(BatchError, match="STOREHOST"):
        scan_batch(blob, max_body_size=MAX)


def test_scan_rejects_an_empty_batch():
    with pytest.raises(BatchError, match="no records"):
        scan_batch(b"", max_body_size=MAX)


@given(st.binary(min_size=0, max_size=400))
def test_scan_never_crashes_on_arbitrary_bytes(garbage):
    with contextlib.suppress(BatchError):
        scan_batch(garbage, max_body_size=MAX)


@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 7), st.binary(max_size=100)),
        min_size=1,
        max_size=20,
    )
)
def test_scan_accepts_any_well_formed_batch(messages):
    blob = b"".join(rec(t, body, q) for t, q, body in messages)
    batch = scan_batch(blob, max_body_size=MAX)
    assert batch.topics == [t for t, _, _ in messages]
    assert batch.queue_ids == [q for _, q, _ in messages]
    assert sum(batch.sizes) == len(blob)
