"""The de-duplication state of idempotent producers (broker/store/producer_state.py)."""

from __future__ import annotations

import pytest

from pocketmq.broker.store.producer_snapshot import decode_snapshot, encode_snapshot
from pocketmq.broker.store.producer_state import (
    ProducerStateError,
    ProducerStateTable,
    StateErrorKind,
    idempotence_of,
    idempotence_of_props,
)
from pocketmq.client.idempotence import ProducerSession, stamp
from pocketmq.client.message_codec import encode_messages, py_encode_messages
from pocketmq.client.model import Message
from pocketmq.common.message import decode_record

Q = ("orders", 0)
HOST = b"\x7f\0\0\1\0\0\0\0"


def stored(
    table: ProducerStateTable,
    pid: int,
    epoch: int,
    seqs: range,
    *,
    queue=Q,
    phys_base: int = 1000,
    ts: int = 1,
) -> None:
    for seq in seqs:
        table.observe((pid, epoch, seq), *queue, phys_base + seq, ts)


def test_a_stamped_record_carries_pid_epoch_and_sequence_as_its_last_property() -> None:
    slot = stamp("KEY1", 77, 3, 12)
    msg = Message(topic="orders", body=b"x", tags="T")
    record = py_encode_messages([msg], [slot], 0, HOST, 1, 4096, 0)
    assert idempotence_of(record, len(record)) == (77, 3, 12)
    assert decode_record(record).properties["UNIQ_KEY"] == "KEY1"
    assert decode_record(record).properties["PMQ_IDEM"] == "77.3.12"
    assert encode_messages([msg], [slot], 0, HOST, 1, 4096, 0) == record  # compiled agrees


def test_a_record_without_the_property_or_with_a_malformed_one_is_not_stamped() -> None:
    record = py_encode_messages([Message(topic="t", body=b"x")], ["K"], 0, HOST, 1)
    assert idempotence_of(record, len(record)) is None
    assert idempotence_of_props(b"UNIQ_KEY\x01K\x02PMQ_IDEM\x01x.1.2\x02") is None
    assert idempotence_of_props(b"UNIQ_KEY\x01K\x02PMQ_IDEM\x010.1.2\x02") is None  # pid 0
    assert idempotence_of_props(b"UNIQ_KEY\x01K\x02PMQ_IDEM\x015.1.2\x02") == (5, 1, 2)


def test_a_retried_record_is_answered_with_the_stored_offset() -> None:
    table = ProducerStateTable(window=4)
    stored(table, 9, 0, range(10))
    assert table.check([(9, 0, 9), (9, 0, 6), (9, 0, 5), (9, 0, 10)], [Q] * 4, 1) == {
        0: 1009,
        1: 1006,
        2: -1,
    }  # seq 5 fell out of the 4-record window: offset unknown


def test_a_gap_is_refused_as_out_of_order_and_naming_the_missing_count() -> None:
    table = ProducerStateTable()
    stored(table, 9, 0, range(3))
    with pytest.raises(ProducerStateError) as err:
        table.check([(9, 0, 5)], [Q], 1)
    assert err.value.kind is StateErrorKind.OUT_OF_ORDER
    assert "next one there is 3" in err.value.message and "2 earlier" in err.value.message


def test_a_known_producer_starts_a_new_queue_at_zero() -> None:
    table = ProducerStateTable()
    stored(table, 9, 0, range(3))
    assert table.check([(9, 0, 0)], [("orders", 1)], 1) == {}
    with pytest.raises(ProducerStateError):
        table.check([(9, 0, 1)], [("orders", 2)], 1)


def test_an_older_epoch_is_fenced_and_a_newer_one_continues_the_numbering() -> None:
    table = ProducerStateTable()
    stored(table, 9, 0, range(3))
    table.observe((9, 1, -1), "rmq_sys_producer_epochs", 0, 5000, 2)  # an epoch record
    with pytest.raises(ProducerStateError) as err:
        table.check([(9, 0, 3)], [Q], 3)
    assert err.value.kind is StateErrorKind.FENCED
    assert table.check([(9, 1, 0), (9, 1, 3)], [Q, Q], 3) == {0: 1000}


def test_records_of_one_request_are_checked_in_order() -> None:
    table = ProducerStateTable()
    assert table.check([(9, 0, 0), (9, 0, 1), (9, 0, 2)], [Q] * 3, 1) == {}
    with pytest.raises(ProducerStateError) as err:
        table.check([(9, 0, 0), (9, 0, 0)], [Q] * 2, 1)
    assert err.value.kind is StateErrorKind.REPEATED


def test_a_copy_of_a_stored_record_changes_nothing() -> None:
    table = ProducerStateTable()
    stored(table, 9, 0, range(3))
    table.observe((9, 0, 1), *Q, 9999, 5)  # a delayed message delivered, say
    assert table.producers[9].queues[Q].last_seq == 2
    assert table.check([(9, 0, 1)], [Q], 6) == {0: 1001}


def test_idle_ids_expire_and_a_full_table_of_live_ids_refuses_a_new_one() -> None:
    table = ProducerStateTable(max_producers=2, expiration_ms=100)
    stored(table, 1, 0, range(1), ts=0)
    stored(table, 2, 0, range(1), ts=50)
    with pytest.raises(ProducerStateError) as err:
        table.check([(3, 0, 0)], [Q], 60)
    assert err.value.kind is StateErrorKind.FULL
    assert "max_producer_ids" in err.value.message
    assert table.check([(3, 0, 0)], [Q], 120) == {}  # id 1 expired at 100
    assert 1 not in table.producers and table.expired == 1


def test_observing_past_the_bound_drops_the_least_recently_active_id() -> None:
    table = ProducerStateTable(max_producers=2)
    for pid in (1, 2, 3):
        stored(table, pid, 0, range(1))
    assert list(table.producers) == [2, 3] and table.evicted == 1


def test_a_snapshot_round_trips_the_table() -> None:
    table = ProducerStateTable(window=3)
    stored(table, 9, 2, range(5))
    stored(table, 11, 0, range(2), queue=("payments", 3))
    raw = encode_snapshot(table, 123456)
    copy = ProducerStateTable(window=3)
    assert decode_snapshot(raw, copy) == 123456
    assert copy.check([(9, 2, 4), (11, 0, 1), (9, 2, 5)], [Q, ("payments", 3), Q], 1) == {
        0: 1004,
        1: 1001,
    }
    damaged = raw[:20] + bytes([raw[20] ^ 1]) + raw[21:]
    with pytest.raises(ValueError):
        decode_snapshot(damaged, ProducerStateTable())


def test_a_session_numbers_each_queue_and_resumes_after_the_brokers_last_sequence() -> None:
    session = ProducerSession("broker-a", 5, 1, [("orders", 0, 41)])
    assert session.take("orders", 0) == 42
    assert session.stamps(["a", "b"], "orders", 1) == [
        "a\x02PMQ_IDEM\x015.1.0",
        "b\x02PMQ_IDEM\x015.1.1",
    ]
