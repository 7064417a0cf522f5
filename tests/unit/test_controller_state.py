"""The controller's election and in-sync-set rules (controller/state.py, manager.py)."""

from __future__ import annotations

import pytest

from pocketmq.controller.manager import ControllerConfigView, Heartbeat, ReplicasManager
from pocketmq.controller.state import (
    BrokerLive,
    ControllerRefusalError,
    GroupState,
    ReplicaAddr,
    alter_sync_state_set,
    elect,
)
from pocketmq.controller.store import FileControllerStore


def _live(epoch: int, max_offset: int, priority: int = 0) -> BrokerLive:
    return BrokerLive(
        last_heartbeat_ms=0, incarnation="x", epoch=epoch, max_offset=max_offset, priority=priority
    )


def _group(sss: set[int], master: int = 1) -> GroupState:
    return GroupState(
        cluster_name="c",
        broker_name="b",
        master_id=master,
        master_epoch=3,
        sync_state_set=frozenset(sss),
        sss_epoch=7,
        replicas={i: ReplicaAddr(addr=f"h:{i}") for i in (1, 2, 3)},
        next_id=4,
    )


def test_election_prefers_epoch_then_offset_then_priority_among_live_in_sync_replicas():
    state = _group({1, 2, 3})
    live = {2: _live(3, 100, priority=5), 3: _live(3, 100, priority=1)}
    new = elect(state, live)
    assert (new.master_id, new.master_epoch, new.sync_state_set, new.sss_epoch) == (
        3,
        4,
        frozenset({3}),
        8,
    )
    assert elect(state, {2: _live(3, 200), 3: _live(3, 100)}).master_id == 2
    assert elect(state, {2: _live(2, 900), 3: _live(3, 100)}).master_id == 3


def test_election_never_picks_a_replica_outside_the_in_sync_set_unless_unclean():
    state = _group({1, 2})
    with pytest.raises(ControllerRefusalError, match="no live in-sync replica"):
        elect(state, {3: _live(3, 10_000)})
    assert elect(state, {3: _live(3, 10_000)}, unclean=True).master_id == 3


def test_designated_election_refuses_a_replica_out_of_sync():
    with pytest.raises(ControllerRefusalError, match="not in the in-sync replica set"):
        elect(_group({1, 2}), {2: _live(3, 1), 3: _live(3, 1)}, designated=3)


def test_alter_sync_state_set_is_compare_and_set_on_both_epochs():
    state = _group({1, 2})
    live = {1: _live(3, 0), 3: _live(3, 0)}
    grown = alter_sync_state_set(
        state, live, master_id=1, master_epoch=3, sss_epoch=7, new_set=frozenset({1, 2, 3})
    )
    assert grown.sync_state_set == {1, 2, 3} and grown.sss_epoch == 8
    with pytest.raises(ControllerRefusalError) as stale:
        alter_sync_state_set(
            state, live, master_id=1, master_epoch=2, sss_epoch=7, new_set=frozenset({1})
        )
    assert stale.value.reason == "FENCED_MASTER_EPOCH"
    with pytest.raises(ControllerRefusalError) as old_set:
        alter_sync_state_set(
            state, live, master_id=1, master_epoch=3, sss_epoch=6, new_set=frozenset({1})
        )
    assert old_set.value.reason == "FENCED_SYNC_STATE_SET_EPOCH"
    with pytest.raises(ControllerRefusalError, match="have not heartbeated"):
        alter_sync_state_set(
            state,
            {1: _live(3, 0)},
            master_id=1,
            master_epoch=3,
            sss_epoch=7,
            new_set=frozenset({1, 2, 3}),
        )


def _hb(
    broker_id: int, port: int, *, incarnation: str = "a", epoch: int = 0, max_offset: int = 0
) -> Heartbeat:
    return Heartbeat(
        cluster_name="c",
        broker_name="b",
        broker_id=broker_id,
        broker_addr=f"h:{port}",
        ha_addr=f"h:{port + 1}",
        incarnation=incarnation,
        epoch=epoch,
        max_offset=max_offset,
    )


async def test_controller_elects_when_the_master_stops_heartbeating_and_survives_restart(tmp_path):
    now = [0]
    path = str(tmp_path / "controller.json")
    manager = ReplicasManager(
        FileControllerStore(path),
        ControllerConfigView(broker_inactive_ms=3000),
        now_ms=lambda: now[0],
    )
    await manager.reset()
    state, first = await manager.heartbeat(_hb(0, 10))
    assert (first, state.master_id, state.master_epoch) == (1, 1, 1)
    _state, second = await manager.heartbeat(_hb(0, 20))
    assert second == 2
    await manager.alter_sync_state_set(
        "b", master_id=1, master_epoch=1, sss_epoch=1, new_set=frozenset({1, 2})
    )
    now[0] = 2500
    await manager.heartbeat(_hb(2, 20, epoch=1, max_offset=50))
    assert await manager.run_once() == []  # the master is silent for 2.5 s only
    now[0] = 3500
    assert await manager.run_once() == ["b"]
    elected = manager.get("b")
    assert elected is not None
    assert (elected.master_id, elected.master_epoch, elected.sync_state_set) == (
        2,
        2,
        frozenset({2}),
    )

    again = ReplicasManager(
        FileControllerStore(path), ControllerConfigView(), now_ms=lambda: now[0]
    )
    await again.reset()
    assert again.get("b") == elected


async def test_a_master_that_restarts_with_a_new_incarnation_yields_to_an_in_sync_replica(tmp_path):
    now = [0]
    manager = ReplicasManager(
        FileControllerStore(str(tmp_path / "c.json")), ControllerConfigView(), now_ms=lambda: now[0]
    )
    await manager.reset()
    await manager.heartbeat(_hb(0, 10, incarnation="one"))
    await manager.heartbeat(_hb(0, 20))
    await manager.alter_sync_state_set(
        "b", master_id=1, master_epoch=1, sss_epoch=1, new_set=frozenset({1, 2})
    )
    state, _ = await manager.heartbeat(_hb(1, 10, incarnation="two", epoch=1))
    assert (state.master_id, state.master_epoch) == (2, 2)
