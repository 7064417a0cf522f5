"""ProcessQueue: committed offset is the smallest in flight; flow control by event."""

from __future__ import annotations

import asyncio

from pocketmq.client.model import MessageExt, MessageQueue
from pocketmq.client.process_queue import ProcessQueue

MQ = MessageQueue("t", "b", 0)


def msg(offset: int, size: int = 10) -> MessageExt:
    return MessageExt(
        topic="t",
        body=b"x" * size,
        tags="",
        keys=[],
        properties={},
        msg_id="",
        offset_msg_id="",
        broker_name="b",
        queue_id=0,
        queue_offset=offset,
        store_timestamp_ms=0,
        born_timestamp_ms=0,
        reconsume_times=0,
    )


def test_committed_offset_is_the_smallest_offset_in_flight():
    pq = ProcessQueue(MQ, next_offset=100)
    pq.add([msg(o) for o in range(100, 110)], next_offset=110)
    assert pq.committed_offset == 100
    assert pq.remove([101, 102, 105]) == 100
    assert pq.remove([100]) == 103
    assert pq.remove([103, 104, 106, 107, 108]) == 109
    assert pq.remove([109]) == 110  # nothing in flight: where the next pull starts


def test_an_empty_queue_commits_where_the_next_pull_starts():
    pq = ProcessQueue(MQ, next_offset=7)
    pq.add([], next_offset=12)  # e.g. messages filtered out by tag
    assert pq.committed_offset == 12


def test_duplicates_are_not_added_twice():
    pq = ProcessQueue(MQ, next_offset=0)
    assert pq.add([msg(0), msg(1)], 2) == 2
    assert pq.add([msg(1)], 2) == 0
    assert (pq.count, pq.size_bytes) == (2, 20)


def test_flow_control_by_count_bytes_and_span():
    assert ProcessQueue(MQ, next_offset=0, max_messages=3).add([msg(i) for i in range(3)], 3) == 3
    by_count = ProcessQueue(MQ, next_offset=0, max_messages=3)
    by_count.add([msg(i) for i in range(3)], 3)
    assert by_count.is_full()
    by_bytes = ProcessQueue(MQ, next_offset=0, max_bytes=100)
    by_bytes.add([msg(0, 60), msg(1, 60)], 2)
    assert by_bytes.is_full()
    by_span = ProcessQueue(MQ, next_offset=0, max_span=10)
    by_span.add([msg(0), msg(20)], 21)
    assert by_span.is_full()
    by_span.remove([0])
    assert not by_span.is_full()


async def test_wait_for_room_wakes_when_handlers_catch_up():
    pq = ProcessQueue(MQ, next_offset=0, max_messages=2)
    pq.add([msg(0), msg(1)], 2)
    waiter = asyncio.ensure_future(pq.wait_for_room())
    await asyncio.sleep(0)
    assert not waiter.done()
    pq.remove([0])
    await asyncio.wait_for(waiter, 1)


async def test_dropping_releases_waiters():
    pq = ProcessQueue(MQ, next_offset=0, max_messages=1)
    pq.add([msg(0)], 1)
    room = asyncio.ensure_future(pq.wait_for_room())
    empty = ProcessQueue(MQ, next_offset=0)
    messages = asyncio.ensure_future(empty.wait_for_messages())
    await asyncio.sleep(0)
    pq.drop()
    empty.drop()
    await asyncio.wait_for(asyncio.gather(room, messages), 1)


def test_take_returns_the_first_messages_in_offset_order_without_removing():
    pq = ProcessQueue(MQ, next_offset=0)
    pq.add([msg(i) for i in range(5)], 5)
    pq.remove([0])
    assert [m.queue_offset for m in pq.take(2)] == [1, 2]
    assert pq.count == 4
