"""Fewer acknowledgements, never a SYNC send left waiting for one.

A master marks a frame ``lazy_ack`` unless it completes what a SYNC send waits
for (or reads are gated): the replica's :class:`AckDue` then acknowledges on a timer or every
few MiB instead of after each frame. A SYNC send that comes to wait for
records already sent lazily gets an empty frame without ``lazy_ack`` at once,
so the replica acknowledges them without waiting for its timer. Real store,
the master's real sender; the stream itself is played by the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import types

import pytest
from storekit import open_store, record, small_config

from pocketmq.broker.ha.master import ReplicationMaster, SyncOutcome
from pocketmq.broker.ha.replica import AckDue
from pocketmq.broker.store import PutStatus


def encode(offset, epoch, start, records, lazy_ack):
    return offset, bytes(records), lazy_ack


@pytest.fixture
def master(tmp_path):
    store = open_store(small_config(tmp_path / "m"))
    service = ReplicationMaster(
        store,
        broker_name="b",
        batch_bytes=1 << 20,
        heartbeat_s=30,
        housekeeping_s=60,
        fallbehind_max_bytes=1 << 30,
        min_sync_replicas=1,
        is_master=lambda: True,
    )
    store.add_append_listener(service.on_append)
    yield store, service
    service.close()
    store.shutdown()


def put(store, n: int = 3) -> int:
    result = store.put_batch(b"".join(record(body=b"m%d" % i, uniq=f"u{i}") for i in range(n)))
    assert result.status is PutStatus.PUT_OK
    return result.end_offset


async def test_frames_no_sync_send_waits_for_are_lazy(master):
    store, service = master
    state = service.connected(1, "replica", 0)
    frames = service.frames(state, 0, encode)
    end = put(store)
    offset, records, lazy = await asyncio.wait_for(anext(frames), 5)
    assert (offset, len(records), lazy) == (0, end, True)
    await frames.aclose()


async def test_a_sync_send_waiting_for_lazily_sent_records_gets_them_acked_at_once(master):
    store, service = master
    state = service.connected(1, "replica", 0)
    frames = service.frames(state, 0, encode)
    end = put(store)
    assert (await asyncio.wait_for(anext(frames), 5))[2] is True
    waiting = asyncio.ensure_future(service.wait_replicated(end, 30))
    # the sender follows up with an empty frame that asks for an Ack now
    offset, records, lazy = await asyncio.wait_for(anext(frames), 5)
    assert (offset, records, lazy) == (end, b"", False)
    assert not waiting.done()
    service.on_ack(state, end, 0)
    assert await asyncio.wait_for(waiting, 5) is SyncOutcome.OK
    await frames.aclose()


async def test_records_sent_while_a_sync_send_waits_are_not_lazy(master):
    store, service = master
    state = service.connected(1, "replica", 0)
    frames = service.frames(state, 0, encode)
    first_end = put(store)
    waiting = asyncio.ensure_future(service.wait_replicated(first_end, 30))
    await asyncio.sleep(0)  # one loop step: the send registers as a waiter
    assert service.ack_wanted_by(state, first_end)
    offset, records, lazy = await asyncio.wait_for(anext(frames), 5)
    assert (offset, len(records), lazy) == (0, first_end, False)
    service.on_ack(state, first_end, 0)
    assert await asyncio.wait_for(waiting, 5) is SyncOutcome.OK
    second_end = put(store)  # nobody waits any more: lazy again
    offset, records, lazy = await asyncio.wait_for(anext(frames), 5)
    assert (offset, offset + len(records), lazy) == (first_end, second_end, True)
    await frames.aclose()


async def test_only_the_frame_that_completes_a_waiting_send_asks_for_an_ack(tmp_path):
    store = open_store(small_config(tmp_path / "m"))
    # frames of one record each: a put of three records goes out in three frames
    service = ReplicationMaster(
        store,
        broker_name="b",
        batch_bytes=1,
        heartbeat_s=30,
        housekeeping_s=60,
        fallbehind_max_bytes=1 << 30,
        min_sync_replicas=1,
        is_master=lambda: True,
    )
    try:
        state = service.connected(1, "replica", 0)
        frames = service.frames(state, 0, encode)
        end = put(store, 3)
        waiting = asyncio.ensure_future(service.wait_replicated(end, 30))
        await asyncio.sleep(0)  # one loop step: the send registers as a waiter
        sent = [await asyncio.wait_for(anext(frames), 5) for _ in range(3)]
        assert [lazy for _offset, _records, lazy in sent] == [True, True, False]
        assert sent[-1][0] + len(sent[-1][1]) == end
        service.on_ack(state, end, 0)
        assert await asyncio.wait_for(waiting, 5) is SyncOutcome.OK
        await frames.aclose()
    finally:
        service.close()
        store.shutdown()


async def test_gated_reads_want_every_frame_acked_at_once(master):
    _store, service = master
    state = service.connected(1, "replica", 0)
    assert not service.ack_wanted_by(state, 1 << 40)
    service.gated = True
    assert service.ack_wanted_by(state, 0)


async def test_a_replica_outside_the_in_sync_set_acks_every_frame_at_once(master):
    """It joins the set once an Ack of it reaches the master's end (controller mode):
    an Ack held back would trail a master under load and never get there."""
    _store, service = master
    outside = service.connected(1, "replica-1", 0)
    inside = service.connected(2, "replica-2", 0)
    service.sync_state_set = frozenset({2})
    assert service.ack_wanted_by(outside, 1 << 40)
    assert not service.ack_wanted_by(inside, 1 << 40)


async def test_ack_due_at_once_for_a_frame_without_lazy_ack():
    calls = []
    due = AckDue(lambda: calls.append(1), interval_s=30, max_bytes=1000)
    due.applied(10, lazy=False)
    assert calls == [1]


async def test_ack_due_after_max_bytes_of_lazy_frames():
    calls = []
    due = AckDue(lambda: calls.append(1), interval_s=30, max_bytes=1000)
    due.applied(600, lazy=True)
    assert calls == []
    due.applied(400, lazy=True)
    assert calls == [1]
    due.sent()
    assert due.unacked_bytes == 0
    due.applied(999, lazy=True)
    assert calls == [1]
    due.sent()


async def test_ack_due_on_the_timer_after_a_lazy_frame():
    fired = asyncio.Event()
    due = AckDue(fired.set, interval_s=0.01, max_bytes=1 << 30)
    due.applied(10, lazy=True)
    assert not fired.is_set()
    await asyncio.wait_for(fired.wait(), 5)
    due.sent()


async def test_an_ack_sent_cancels_the_pending_timer():
    calls = []
    due = AckDue(lambda: calls.append(1), interval_s=0.01, max_bytes=1 << 30)
    due.applied(10, lazy=True)
    due.sent()
    fired = asyncio.Event()
    # a later timer of the same length, started after the cancelled one, fires first
    # only if the cancelled one did not: wait for it, then check nothing else ran
    asyncio.get_running_loop().call_later(0.02, fired.set)
    await asyncio.wait_for(fired.wait(), 5)
    assert calls == []


def lingering_master(store, *, batch_bytes: int, linger_s: float) -> ReplicationMaster:
    service = ReplicationMaster(
        store,
        broker_name="b",
        batch_bytes=batch_bytes,
        heartbeat_s=30,
        housekeeping_s=60,
        fallbehind_max_bytes=1 << 30,
        min_sync_replicas=1,
        is_master=lambda: True,
        linger_s=linger_s,
    )
    store.add_append_listener(service.on_append)
    return service


@contextlib.asynccontextmanager
async def lingering_frames(store, *, batch_bytes: int, linger_s: float):  # type: ignore[no-untyped-def]
    """The service, a replica's state and its frames of a lingering master on *store*; closes
    the master and shuts the store down after."""
    service = lingering_master(store, batch_bytes=batch_bytes, linger_s=linger_s)
    try:
        state = service.connected(1, "replica", 0)
        frames = service.frames(state, 0, encode)
        yield types.SimpleNamespace(service=service, state=state, frames=frames)
        await frames.aclose()
    finally:
        service.close()
        store.shutdown()


async def loop_steps(n: int = 20) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_short_lazy_frame_lingers_until_more_records_fill_it(tmp_path):
    store = open_store(small_config(tmp_path / "m"))
    first_end = put(store)
    async with lingering_frames(store, batch_bytes=2 * first_end, linger_s=60) as run:
        pending = asyncio.ensure_future(anext(run.frames))
        await loop_steps()
        assert not pending.done()  # half a frame's worth: it waits for more
        second_end = put(store)
        offset, records, lazy = await asyncio.wait_for(pending, 5)
        assert (offset, len(records), lazy) == (0, second_end, True)


async def test_a_sync_send_ends_the_linger_of_the_frame_it_waits_for(tmp_path):
    store = open_store(small_config(tmp_path / "m"))
    async with lingering_frames(store, batch_bytes=1 << 20, linger_s=60) as run:
        pending = asyncio.ensure_future(anext(run.frames))
        end = put(store)
        await loop_steps()
        assert not pending.done()
        waiting = asyncio.ensure_future(run.service.wait_replicated(end, 30))
        offset, records, lazy = await asyncio.wait_for(pending, 5)
        assert (offset, len(records), lazy) == (0, end, False)
        run.service.on_ack(run.state, end, 0)
        assert await asyncio.wait_for(waiting, 5) is SyncOutcome.OK


async def test_a_lingering_frame_goes_out_short_when_no_more_records_come(tmp_path):
    store = open_store(small_config(tmp_path / "m"))
    async with lingering_frames(store, batch_bytes=1 << 20, linger_s=0.01) as run:
        end = put(store)
        offset, records, lazy = await asyncio.wait_for(anext(run.frames), 5)
        assert (offset, len(records), lazy) == (0, end, True)


async def test_a_frame_stopped_by_an_epoch_end_does_not_linger(tmp_path):
    store = open_store(small_config(tmp_path / "m"))
    store.epochs.begin(1, 0)
    first_end = put(store)
    store.epochs.begin(2, first_end)
    put(store)
    async with lingering_frames(store, batch_bytes=1 << 20, linger_s=60) as run:
        offset, records, lazy = await asyncio.wait_for(anext(run.frames), 5)
        assert (offset, len(records), lazy) == (0, first_end, True)
