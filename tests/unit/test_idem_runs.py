"""Idempotent producers' stamps parsed once, as runs: the compiled scanner and
encoder agree with their Python references, and one update per run leaves the
producer state as one update per record does (broker/store/producer_state.py)."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pocketmq.broker.store.batch import BatchError, py_scan_batch
from pocketmq.broker.store.producer_state import (
    ProducerStateError,
    ProducerStateTable,
    idempotence_of,
    idents_of_runs,
    py_idem_runs,
)
from pocketmq.client import message_codec
from pocketmq.client.idempotence import stamp
from pocketmq.client.message_codec import py_encode_messages
from pocketmq.client.model import Message

try:
    native: Any = importlib.import_module("pocketmq.broker.store._speedups")
    codec: Any = importlib.import_module("pocketmq.client._codec")
except ImportError as exc:  # no compiler where the package was installed
    native = codec = None
    _NOT_BUILT = f"the compiled extensions are not built ({exc})"
else:
    _NOT_BUILT = ""

needs_native = pytest.mark.skipif(native is None, reason=_NOT_BUILT)
HOST = b"\x7f\0\0\1\0\0\0\0"
MAX = 4 * 1024 * 1024
fuzz = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# (pid, epoch, topic, queue id, seq); pid 0 / "raw" values: unstamped or malformed stamps
stamps = st.tuples(
    st.sampled_from([0, 7, 9, (1 << 63) - 1]),
    st.sampled_from([0, 1, (1 << 31) - 1]),
    st.sampled_from(["orders", "SCHEDULE_TOPIC_XXXX", "o2"]),
    st.integers(0, 2),
    st.integers(-1, 6),
)
odd_values = st.sampled_from(
    ["+5.0.1", " 5.0.1", "5_0.0.1", "5.0", "5.0.1.2", "5..1", "-5.0.1", "5.0.-2", "05.00.01",
     "5.2147483648.1", "5.0.4611686018427387904", "9223372036854775808.0.1", "٣.0.1",
     "5.0.1\x02", "", "5.0.-0"]
)  # fmt: skip


def records(items: list[tuple[int, int, str, int, int]], odd: list[str] | None = None) -> bytes:
    out = []
    for n, (pid, epoch, topic, queue_id, seq) in enumerate(items):
        key = f"K{n}"
        if pid:
            key = stamp(key, pid, epoch, seq)
        elif odd:  # an unstamped record, or one with a malformed stamp
            key = f"{key}\x02PMQ_IDEM\x01{odd[n % len(odd)]}"
        out.append(py_encode_messages([Message(topic=topic, body=b"b")], [key], queue_id, HOST, 1))
    return b"".join(out)


def scan_runs(scan: Any, blob: bytes) -> Any:
    try:
        return scan(blob, max_body_size=MAX).idem_runs
    except BatchError as exc:
        return ("error", str(exc))


@needs_native
@fuzz
@given(st.lists(stamps, min_size=1, max_size=40), st.lists(odd_values, max_size=3))
def test_the_compiled_scanner_finds_the_same_runs_as_the_reference(items, odd) -> None:
    blob = records(items, odd)
    expected = scan_runs(py_scan_batch, blob)
    assert scan_runs(native.scan_batch, blob) == expected


@fuzz
@given(st.lists(stamps, min_size=1, max_size=40))
def test_runs_hold_each_stamped_record_once_with_its_own_stamp(items) -> None:
    blob = records(items, [])
    batch = py_scan_batch(blob, max_body_size=MAX)
    idents = idents_of_runs(batch.idem_runs, len(batch))
    expected = [(pid, epoch, seq) if pid else None for pid, epoch, _topic, _queue_id, seq in items]
    assert idents == expected
    for _pid, _epoch, topic, queue_id, first, indices in batch.idem_runs:
        assert all(batch.topics[i] == topic and batch.queue_ids[i] == queue_id for i in indices)
        assert first >= 0 or len(indices) == 1  # an epoch record is a run of its own


# Stamps whose text begins as the one before does, but whose producer id or epoch differs
# (the compiled scanner parses only the sequence of a stamp that repeats the one before's
# "<pid>.<epoch>."), among malformed ones that share it.
_PREFIX_NEIGHBOURS = [
    "7.1.0", "7.1.1", "7.10.2", "7.1.2", "70.1.0", "7.1.3", "7.1.x", "7.1.4", "7.1.",
    "7.1.5", "7.1.-1", "7.1.6", "7.11.0", "7.1.7", "07.1.8", "7.01.9", "7.1.10", "7.1.-2",
    "7.1.11", "7.1.99999999999999999999", "7.1.12", "7.2147483648.0", "7.1.13",
]  # fmt: skip


@needs_native
def test_the_compiled_scanner_reads_each_stamp_whole_even_when_it_begins_as_the_last() -> None:
    blob = records(
        [(0, 0, "orders", n % 2, 0) for n in range(len(_PREFIX_NEIGHBOURS))], _PREFIX_NEIGHBOURS
    )
    runs = scan_runs(native.scan_batch, blob)
    assert runs == scan_runs(py_scan_batch, blob)
    assert sum(len(indices) for *_rest, indices in runs) == 18  # the 5 malformed ones: none


def test_a_stamp_is_three_plain_ascii_decimals_in_range() -> None:
    for value, ident in [("5.0.1", (5, 0, 1)), ("05.00.01", (5, 0, 1)), ("5.0.-1", (5, 0, -1))]:
        record = records([(0, 0, "orders", 0, 0)], [value])
        assert idempotence_of(record, len(record)) == ident
    for value in ["+5.0.1", " 5.0.1", "5_0.0.1", "٣.0.1", "5.0.-2", "0.0.1", "5.2147483648.1"]:
        record = records([(0, 0, "orders", 0, 0)], [value])
        assert idempotence_of(record, len(record)) is None, value


def test_a_batch_without_stamps_has_no_runs() -> None:
    blob = records([(0, 0, "orders", 0, 0)] * 5, [])
    assert py_scan_batch(blob, max_body_size=MAX).idem_runs == []
    if native is not None:
        assert native.scan_batch(blob, max_body_size=MAX).idem_runs == []


@pytest.mark.skipif(
    message_codec.NATIVE is None,
    reason=f"the compiled codec is not in use ({message_codec._REASON})",
)
@fuzz
@given(
    st.lists(st.binary(min_size=1, max_size=20), min_size=1, max_size=5),
    st.none() | st.tuples(st.integers(1, (1 << 63) - 1), st.integers(0, 9), st.integers(-1, 99)),
)
def test_the_compiled_encoder_stamps_as_the_reference(bodies, stamp_args) -> None:
    msgs = [Message(topic="orders", body=b, tags="T") for b in bodies]
    keys = [f"K{i}" for i in range(len(msgs))]
    expected = py_encode_messages(msgs, keys, 3, HOST, 5, 4096, 0, stamp_args)
    assert codec.encode_messages(msgs, keys, 3, HOST, 5, 4096, 0, stamp_args) == expected
    if stamp_args is not None:
        pid, epoch, seq = stamp_args
        slots = [stamp(k, pid, epoch, seq + i) for i, k in enumerate(keys)]
        assert py_encode_messages(msgs, slots, 3, HOST, 5, 4096, 0) == expected


# -- one update per run is one update per record ------------------------------------------------
def per_record(table: ProducerStateTable, blob: bytes, phys: list[int]) -> None:
    """The reference: observe each stamped record in order (a record in the schedule
    topic without REAL_TOPIC counts in its own queue, as sent_queue says)."""
    batch = py_scan_batch(blob, max_body_size=MAX)
    for i, ident in enumerate(idents_of_runs(batch.idem_runs, len(batch))):
        if ident is not None:
            table.observe(ident, batch.topics[i], batch.queue_ids[i], phys[i], 5)


def state(table: ProducerStateTable) -> list[Any]:
    out = []
    for pid, entry in table.producers.items():
        queues = sorted((k, q.last_seq, list(q.phys)) for k, q in entry.queues.items())
        out.append((pid, entry.epoch, entry.last_active_ms, queues))
    return out


@fuzz
@given(st.lists(st.lists(stamps, min_size=1, max_size=12), min_size=1, max_size=6))
def test_observing_runs_leaves_the_state_observing_records_leaves(batches) -> None:
    by_run, by_record = ProducerStateTable(window=4), ProducerStateTable(window=4)
    base = 0
    for items in batches:
        blob = records(items)
        batch = py_scan_batch(blob, max_body_size=MAX)
        phys = [base + pos for pos in batch.positions]
        base += len(blob)
        if batch.idem_runs:
            by_run.observe_batch(batch, phys, 5)
        per_record(by_record, blob, phys)
        assert state(by_run) == state(by_record)


@fuzz
@given(st.lists(stamps, min_size=1, max_size=12), st.lists(stamps, max_size=12))
def test_the_fast_check_passes_only_requests_the_full_check_takes_whole(stored, sent) -> None:
    table = ProducerStateTable()
    for pid in (7, 9, (1 << 63) - 1):
        table.register(pid, 1, 1)
    first = py_scan_batch(records(stored, []), max_body_size=MAX)
    if first.idem_runs:
        table.observe_batch(first, list(range(len(first))), 1)
    if not sent:
        return
    batch = py_scan_batch(records(sent, []), max_body_size=MAX)
    if not batch.idem_runs:
        return
    fast = table.in_order(batch.idem_runs, 2)
    try:
        full = table.check(
            idents_of_runs(batch.idem_runs, len(batch)),
            list(zip(batch.topics, batch.queue_ids, strict=True)),
            2,
        )
    except ProducerStateError:
        full = None
    if fast:
        assert full == {}


def test_runs_of_a_reference_batch() -> None:
    blob = records(
        [(7, 0, "orders", 0, 0), (7, 0, "orders", 1, 0), (7, 0, "orders", 0, 1),
         (0, 0, "orders", 0, 0), (7, 0, "orders", 1, 1), (7, 1, "orders", 0, 2),
         (7, 0, "orders", 0, -1)]
    )  # fmt: skip
    runs = py_idem_runs(
        blob,
        *(
            getattr(py_scan_batch(blob, max_body_size=MAX), name)
            for name in ("positions", "sizes", "topics", "queue_ids")
        ),
    )
    assert runs == [
        (7, 0, "orders", 0, 0, [0, 2]),
        (7, 0, "orders", 1, 0, [1, 4]),
        (7, 1, "orders", 0, 2, [5]),  # another epoch: a run of its own
        (7, 0, "orders", 0, -1, [6]),
    ]


def test_a_stamp_that_is_its_records_only_property_is_found_by_both_scanners() -> None:
    """An epoch record of an older build carries the stamp alone: right behind the
    2-byte PROPERTIES_LENGTH, which counts exactly the stamp."""
    from pocketmq.common.message import encode_record

    alone = encode_record(
        topic="rmq_sys_producer_epochs",
        body=b"writer",
        born_host=HOST,
        properties={"PMQ_IDEM": "123.4.-1"},
    )
    # the same bytes in the value of a property, not a property of their own: no stamp
    inside = encode_record(
        topic="orders", body=b"x", born_host=HOST, properties={"A": "\0PMQ_IDEM\x015.0.1"}
    )
    assert idempotence_of(alone, len(alone)) == (123, 4, -1)
    assert idempotence_of(inside, len(inside)) is None
    assert py_scan_batch(alone, max_body_size=MAX).idem_runs == [
        (123, 4, "rmq_sys_producer_epochs", 0, -1, [0])
    ]
    if native is not None:
        for blob in (alone, inside):
            scanned = native.scan_batch(blob, max_body_size=MAX)
            assert scanned.idem_runs == py_scan_batch(blob, max_body_size=MAX).idem_runs
