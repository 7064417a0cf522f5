"""The confirm-offset read gate (broker/store/visibility.py) on a real store in tmp_path:
reads stop at the confirm offset, max_offset reports the visible max, and arrival
notifications come only when the confirm offset passes new records."""

from __future__ import annotations

import pytest

from pocketmq.broker.store.results import GetStatus, PutStatus
from tests.support.storekit import open_store, small_config

TOPIC = "orders"


@pytest.fixture
def store(tmp_path):
    s = open_store(small_config(tmp_path))
    yield s
    s.shutdown()


def put(store, body: bytes) -> tuple[int, int]:
    """(queue offset, end of the record in the commit log)."""
    result = store.put_message(topic=TOPIC, queue_id=0, body=body)
    assert result.status is PutStatus.PUT_OK
    return result.queue_offsets[0], result.phys_offsets[0] + result.sizes[0]


def read_bodies(store, offset: int = 0) -> list[int]:
    got = store.get_messages(TOPIC, 0, offset, max_count=100)
    return got.queue_offsets


def test_without_a_gate_every_appended_record_is_visible(store):
    for i in range(3):
        put(store, b"m%d" % i)
    assert not store.gate.on
    assert store.max_offset(TOPIC, 0) == 3
    assert read_bodies(store) == [0, 1, 2]


def test_reads_stop_at_the_confirm_offset_and_max_offset_reports_the_visible_max(store):
    _q0, end0 = put(store, b"first")
    store.gate.turn_on(end0)  # only record 0 is confirmed
    _q1, end1 = put(store, b"second")
    _q2, end2 = put(store, b"third")
    assert store.max_offset(TOPIC, 0) == 1
    assert read_bodies(store) == [0]
    got = store.get_messages(TOPIC, 0, 1, max_count=10)
    assert got.records == [] and got.status is not GetStatus.FOUND
    store.gate.advance(end1)
    assert store.max_offset(TOPIC, 0) == 2 and read_bodies(store) == [0, 1]
    store.gate.advance(end2)
    assert store.max_offset(TOPIC, 0) == 3 and read_bodies(store) == [0, 1, 2]


def test_a_record_ending_one_byte_past_the_gate_stays_invisible(store):
    _q, end = put(store, b"x" * 100)
    store.gate.turn_on(0)
    store.gate.advance(end - 1)
    assert store.max_offset(TOPIC, 0) == 0 and read_bodies(store) == []
    store.gate.advance(end)
    assert store.max_offset(TOPIC, 0) == 1


def test_the_confirm_offset_never_moves_backwards_while_on(store):
    _q, end = put(store, b"a")
    store.gate.turn_on(end)
    store.gate.advance(end - 5)
    assert store.gate.confirm_offset == end


def test_arrival_is_notified_only_when_the_confirm_offset_passes_new_records(store):
    heard: list[tuple[str, int, int]] = []
    store.add_arrival_listener(lambda t, q, m: heard.append((t, q, m)))
    store.gate.turn_on(0)
    _q0, end0 = put(store, b"a")
    _q1, end1 = put(store, b"b")
    assert heard == []  # appended, not confirmed: nobody hears
    store.gate.advance(end0)
    assert heard == [(TOPIC, 0, 1)]  # the visible max, not the appended one
    store.gate.advance(end1)
    assert heard[-1] == (TOPIC, 0, 2)
    count = len(heard)
    store.gate.advance(end1 + 1000)  # nothing pending: no more notifications
    assert len(heard) == count


def test_turning_the_gate_off_makes_everything_visible_and_notifies_pending_queues(store):
    heard: list[tuple[str, int, int]] = []
    store.add_arrival_listener(lambda t, q, m: heard.append((t, q, m)))
    store.gate.turn_on(0)
    put(store, b"a")
    put(store, b"b")
    store.gate.turn_off()
    assert heard == [(TOPIC, 0, 2)]
    assert store.max_offset(TOPIC, 0) == 2 and read_bodies(store) == [0, 1]


def test_a_truncation_lowers_the_gate_to_the_cut_point(store):
    _q, end = put(store, b"a")
    store.gate.turn_on(end)
    store.gate.cut(end - 1)
    assert store.gate.confirm_offset == end - 1


def test_the_confirm_offset_survives_a_restart_and_keeps_unconfirmed_records_hidden(tmp_path):
    store = open_store(small_config(tmp_path))
    _q0, end0 = put(store, b"a")
    store.gate.turn_on(end0)
    put(store, b"b")
    store.shutdown()
    again = open_store(small_config(tmp_path))
    try:
        assert again.gate.confirm_offset == end0
        assert again.max_offset(TOPIC, 0) == 1
        q2, _end = put(again, b"c")
        assert q2 == 2  # the hidden record keeps its queue offset
    finally:
        again.shutdown()


def test_the_queue_end_for_offset_commits_stays_at_the_real_tail_while_the_gate_lags(store):
    # A new SYNC master's gate may stand below what consumers read on the old master;
    # a commit bound by the visible max refused "offset 3 past max 1" after a failover.
    _q0, end0 = put(store, b"first")
    for body in (b"second", b"third"):
        put(store, body)
    store.gate.turn_on(end0)
    assert store.max_offset(TOPIC, 0) == 1  # reads still stop at the gate
    assert store.end_offset(TOPIC, 0) == 3  # commits may name the real tail


def _master(store):
    from pocketmq.broker.ha.master import ReplicationMaster

    return ReplicationMaster(
        store,
        broker_name="b",
        batch_bytes=1 << 16,
        heartbeat_s=1,
        housekeeping_s=1,
        fallbehind_max_bytes=1 << 20,
        min_sync_replicas=1,
        is_master=lambda: True,
    )


def test_a_sync_master_alone_gates_reads_while_a_replica_joining_its_set_lacks_new_records(store):
    # The controller may write an expansion before the master hears of it and then elect
    # the joiner: what the master appends meanwhile must stay unread until the joiner has it.
    master = _master(store)
    master.set_sync_state_set(frozenset(), gated=True)
    assert not store.gate.on  # alone in its set: no gate
    _q0, end0 = put(store, b"held-by-both")
    joiner = master.connected(2, "replica", end0)  # caught up to end0
    master.set_pending(frozenset({2}), gated=True, gate_at=end0)
    put(store, b"appended-while-the-controller-decides")
    assert store.max_offset(TOPIC, 0) == 1 and read_bodies(store) == [0]
    master.on_ack(joiner, store.commitlog.max_offset, store.commitlog.max_offset)
    assert store.max_offset(TOPIC, 0) == 2


def test_an_unanswered_expansion_keeps_the_gate_until_it_is_settled_then_refusal_reopens_it(store):
    master = _master(store)
    master.set_sync_state_set(frozenset(), gated=True)
    _q0, end0 = put(store, b"a")
    master.connected(2, "replica", end0)
    master.set_pending(frozenset({2}), gated=True, gate_at=end0)
    put(store, b"b")
    master.set_sync_state_set(frozenset(), gated=True)  # a watch update meanwhile
    assert store.max_offset(TOPIC, 0) == 1, "the gate must hold while the change is pending"
    master.set_pending(frozenset(), gated=True)  # the controller kept {master}
    assert not store.gate.on and store.max_offset(TOPIC, 0) == 2


def test_turning_the_gate_on_is_saved_at_once(tmp_path):
    from pocketmq.broker.store.visibility import VisibilityGate

    path = str(tmp_path / "confirm_offset")
    VisibilityGate(path, lambda *_: None).turn_on(1234)
    assert VisibilityGate(path, lambda *_: None).confirm_offset == 1234
