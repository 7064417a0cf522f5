"""The master's handshake: where a joining replica's log must end, or why it is refused."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from pocketmq.broker.ha.master import HandshakeRefusedError, ReplicationMaster, SyncOutcome
from pocketmq.broker.store.epochs import EpochEntry as E


def service(epochs, end, *, min_offset=0, fenced=None, housekeeping_s=10.0):
    store = SimpleNamespace(
        epochs=SimpleNamespace(entries=list(epochs), last_epoch=epochs[-1].epoch if epochs else 0),
        commitlog=SimpleNamespace(min_offset=min_offset, max_offset=end),
    )
    return ReplicationMaster(
        store,
        broker_name="b",
        batch_bytes=1 << 16,
        heartbeat_s=1,
        housekeeping_s=housekeeping_s,
        fallbehind_max_bytes=1 << 30,
        min_sync_replicas=1,
        is_master=lambda: True,
        on_replica_ahead=fenced,
    )


def hello(svc, epochs, end, seen=0):
    return svc.handshake(
        broker_name="b",
        replica_id=1,
        max_offset=end,
        epochs=list(epochs),
        highest_epoch_seen=seen or (epochs[-1].epoch if epochs else 0),
    )


def test_a_replica_behind_in_the_same_term_copies_from_its_end():
    w = hello(service([E(1, 0)], 1000), [E(1, 0)], 400)
    assert (w.truncate_to, w.start_offset) == (400, 400)


def test_a_replica_ahead_in_the_masters_own_term_is_refused_and_the_master_fenced():
    why = []
    svc = service([E(1, 0)], 600, fenced=why.append)
    with pytest.raises(HandshakeRefusedError) as refused:
        hello(svc, [E(1, 0)], 1000)
    assert refused.value.reason == "REPLICA_AHEAD"
    assert "lost 400 bytes" in why[0]


def test_a_tail_written_in_an_older_term_is_cut_at_the_new_terms_start():
    # the old master wrote [500, 1034) alone in epoch 1; the new master began epoch 2 at 500
    w = hello(service([E(1, 0), E(2, 500)], 900), [E(1, 0)], 1034)
    assert (w.truncate_to, w.start_offset) == (500, 500)


def test_a_replica_that_knows_a_newer_master_refuses_this_one():
    with pytest.raises(HandshakeRefusedError) as refused:
        hello(service([E(1, 0)], 100), [E(1, 0)], 100, seen=2)
    assert refused.value.reason == "STALE_EPOCH"


def test_no_shared_history_or_below_the_min_offset_means_a_fresh_copy():
    w = hello(service([E(3, 0)], 100), [E(1, 0)], 50)
    assert (w.truncate_to, w.start_offset) == (-1, 0)
    w = hello(service([E(1, 0)], 5000, min_offset=4096), [E(1, 0)], 100)
    assert (w.truncate_to, w.start_offset) == (-1, 4096)


async def test_a_silent_replica_counts_for_nothing_in_sync_sends():
    svc = service([E(1, 0)], 100, housekeeping_s=0.05)
    state = svc.connected(1, "r", 100)
    assert svc.in_sync() == 1
    state.last_frame_at = time.monotonic() - 1
    assert svc.in_sync() == 0
    assert await svc.wait_replicated(100, 0.01) is SyncOutcome.SLAVE_NOT_AVAILABLE
