"""PullBatch on a real broker: several queues in one long poll, each answered or refused
on its own, and the client's coalescer that merges per-queue pulls into it."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from aclmode import APP, app_acl_broker
from wirekit import create_topic, record

from pocketmq.broker import pull_processor
from pocketmq.client import MessageQueue, PermissionDeniedError
from pocketmq.client.config import Transport
from pocketmq.client.errors import NotFoundError
from pocketmq.client.pull_coalescer import PullCoalescer
from pocketmq.client.remoting import PullReply, PullStatus, QueuePull, Remoting
from pocketmq.common.message import iter_records
from pocketmq.v1 import broker_pb2 as pb


async def send(stub, *records: bytes) -> None:
    await stub.SendBatch(pb.SendBatchRequest(records=b"".join(records)))


def batch(
    *pulls: pb.QueuePull, suspend_ms: int | None = 0, group: str = "GroupA"
) -> pb.PullBatchRequest:
    request = pb.PullBatchRequest(consumer_group=group, pulls=pulls)
    if suspend_ms is not None:
        request.suspend_timeout_ms = suspend_ms
    return request


def qp(queue_id: int, offset: int = 0, topic: str = "TopicA", **kwargs) -> pb.QueuePull:
    return pb.QueuePull(topic=topic, queue_id=queue_id, queue_offset=offset, **kwargs)


def by_index(reply: pb.PullBatchResponse) -> dict[int, pb.QueuePullResult]:
    return {r.index: r for r in reply.results}


def bodies(result: pb.QueuePullResult) -> list[bytes]:
    return [m.body for m in iter_records(result.reply.records)]


async def test_every_queue_is_answered_with_its_own_status_and_offsets(stub):
    await create_topic(stub)
    await send(
        stub,
        record(queue_id=0, body=b"a0"),
        record(queue_id=0, body=b"a1"),
        record(queue_id=2, body=b"c0"),
    )
    reply = await stub.PullBatch(batch(qp(0), qp(1), qp(2, offset=1), qp(0, offset=9)))
    results = by_index(reply)
    assert sorted(results) == [0, 1, 2, 3]
    assert (results[0].reply.status, bodies(results[0])) == (pb.FOUND, [b"a0", b"a1"])
    assert results[0].reply.next_begin_offset == 2
    assert (results[1].reply.status, results[1].reply.next_begin_offset) == (pb.NO_NEW_MSG, 0)
    assert (results[2].reply.status, results[2].reply.next_begin_offset) == (pb.NO_NEW_MSG, 1)
    assert results[3].reply.status == pb.OFFSET_ILLEGAL
    assert results[3].reply.next_begin_offset == 2
    assert not any(r.error_code for r in reply.results)


async def test_a_batch_waits_while_every_queue_is_empty_and_wakes_on_any_arrival(
    broker, stub, eventually
):
    await create_topic(stub)
    waiting = asyncio.ensure_future(stub.PullBatch(batch(qp(0), qp(1), qp(3), suspend_ms=10_000)))
    await eventually(lambda: broker.hold.parked_count == 3, what="one call parked on 3 queues")
    started = time.monotonic()
    await send(stub, record(queue_id=3, body=b"late"))
    reply = await asyncio.wait_for(waiting, 5)
    assert time.monotonic() - started < 5  # the parked call held 10 s
    results = by_index(reply)
    assert bodies(results[2]) == [b"late"]
    assert [results[i].reply.status for i in (0, 1)] == [pb.NO_NEW_MSG, pb.NO_NEW_MSG]
    assert broker.hold.parked_count == 0, "every filing of the woken call is removed"


async def test_a_batch_parks_again_when_what_arrived_does_not_match_its_tags(
    broker, stub, eventually
):
    await create_topic(stub)
    waiting = asyncio.ensure_future(
        stub.PullBatch(
            batch(qp(0, subscription="TagA"), qp(1, subscription="TagA"), suspend_ms=10_000)
        )
    )
    await eventually(lambda: broker.hold.parked_count == 2, what="parked")
    await send(stub, record(queue_id=0, tags="TagB"))
    await eventually(lambda: broker.hold.parked_count == 2, what="parked past the TagB message")
    assert not waiting.done()
    await send(stub, record(queue_id=1, tags="TagA", body=b"match"))
    results = by_index(await asyncio.wait_for(waiting, 5))
    assert bodies(results[1]) == [b"match"]
    assert results[0].reply.status == pb.NO_NEW_MSG
    assert results[0].reply.next_begin_offset == 1, "moved past the TagB message"


async def test_an_empty_batch_is_answered_at_its_suspend_time(stub):
    await create_topic(stub)
    started = time.monotonic()
    reply = await stub.PullBatch(batch(qp(0), qp(1), suspend_ms=300))
    assert 0.25 < time.monotonic() - started < 3
    assert [r.reply.status for r in reply.results] == [pb.NO_NEW_MSG, pb.NO_NEW_MSG]


async def test_a_refused_queue_is_answered_alone_and_does_not_hold_the_others(stub):
    await create_topic(stub)
    await send(stub, record(queue_id=1, body=b"b0"))
    started = time.monotonic()
    reply = await stub.PullBatch(
        batch(qp(0, topic="NoSuchTopic"), qp(1), qp(7), qp(2, offset=-1), suspend_ms=10_000)
    )
    assert time.monotonic() - started < 5, "a refusal answers the call at once, not in 10 s"
    results = by_index(reply)
    assert (results[0].error_code, results[0].error_reason) == ("NOT_FOUND", "TOPIC_NOT_EXIST")
    assert "NoSuchTopic" in results[0].error_message
    assert not results[0].HasField("reply")
    assert bodies(results[1]) == [b"b0"]
    assert results[2].error_code == "INVALID_ARGUMENT"
    assert "queue id 7 is out of range" in results[2].error_message
    assert results[3].error_code == "INVALID_ARGUMENT"
    assert "queue_offset is -1" in results[3].error_message


@pytest.mark.parametrize(
    ("request_", "words"),
    [
        (batch(qp(0), group="bad group!"), "group"),
        (batch(*[qp(0)] * (pull_processor.MAX_BATCH_QUEUES + 1)), "at most 1000"),
        (batch(qp(0), suspend_ms=-5), "suspend_timeout_ms is -5"),
    ],
)
async def test_a_malformed_batch_is_refused_whole(stub, request_, words):
    await create_topic(stub)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.PullBatch(request_)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert words in caught.value.details()


async def test_each_queue_commits_the_offset_it_carries(broker, stub):
    await create_topic(stub)
    await stub.PullBatch(batch(qp(0, commit_offset=5), qp(2, commit_offset=7), qp(3)))
    assert broker.offsets.query("GroupA", "TopicA", 0) == 5
    assert broker.offsets.query("GroupA", "TopicA", 2) == 7
    assert broker.offsets.query("GroupA", "TopicA", 3) is None


async def test_queues_past_the_reply_size_limit_are_left_out_to_be_pulled_again(stub, monkeypatch):
    monkeypatch.setattr(pull_processor, "PULL_BATCH_REPLY_BYTES", 1)
    await create_topic(stub)
    await send(stub, *(record(queue_id=q, body=b"x" * 100) for q in range(4)))
    seen: set[int] = set()
    for _ in range(4):
        reply = await stub.PullBatch(batch(*(qp(q) for q in range(4))))
        assert len(reply.results) == 1, "one queue fills the reply; the rest are not read"
        seen |= {r.index for r in reply.results}
    assert seen == {0, 1, 2, 3}, "the first queue read rotates, so none starves"


# -- the client: BrokerClient.pull_batch and the coalescer ---------------------------------
@pytest.fixture
async def client(broker):
    """A BrokerClient of the broker; make_coalescer(suspend_ms) gives a coalescer on it."""
    remoting = Remoting()
    yield remoting.broker(f"127.0.0.1:{broker.port}")
    await remoting.close()


@pytest.fixture
async def make_coalescer(client):
    made: list[PullCoalescer] = []

    def make(suspend_ms: int) -> PullCoalescer:
        made.append(
            PullCoalescer(client, "GroupA", suspend_ms=suspend_ms, timeout_s=suspend_ms / 1000 + 15)
        )
        return made[-1]

    yield make
    for coalescer in made:
        await coalescer.close()


def queue_pull(
    queue_id: int, offset: int = 0, max_messages: int = 32, topic: str = "TopicA"
) -> QueuePull:
    return QueuePull(
        queue=MessageQueue(topic, "b", queue_id), offset=offset, max_messages=max_messages
    )


async def test_the_client_turns_each_result_into_a_reply_a_refusal_or_none(
    stub, client, monkeypatch
):
    await create_topic(stub)
    await send(stub, record(queue_id=0, body=b"a0"))
    pulls = [queue_pull(0), queue_pull(0, topic="Gone")]
    first, second = await client.pull_batch(group="GroupA", pulls=pulls, suspend_ms=0, timeout_s=5)
    assert isinstance(first, PullReply) and first.status is PullStatus.FOUND
    assert isinstance(second, NotFoundError) and second.reason == "TOPIC_NOT_EXIST"
    assert "Gone" in str(second)
    monkeypatch.setattr(pull_processor, "PULL_BATCH_REPLY_BYTES", 1)
    replies = await client.pull_batch(
        group="GroupA", pulls=pulls[:1] * 3, suspend_ms=0, timeout_s=5
    )
    assert sum(r is None for r in replies) == 2


async def test_pulls_started_together_share_one_call_and_each_gets_its_reply(stub, make_coalescer):
    await create_topic(stub)
    await send(stub, *(record(queue_id=q, body=f"q{q}".encode()) for q in range(4)))
    coalescer = make_coalescer(1000)
    replies = await asyncio.gather(*(coalescer.pull(queue_pull(q)) for q in range(4)))
    assert (coalescer.calls_total, coalescer.pulls_total) == (1, 4)
    assert [[m.body for m in iter_records(r.records)] for r in replies] == [
        [b"q0"],
        [b"q1"],
        [b"q2"],
        [b"q3"],
    ]


async def test_a_call_carries_at_most_sixteen_queues(stub, make_coalescer):
    await create_topic(stub, queues=40)
    await send(stub, record(queue_id=39, body=b"last"))
    coalescer = make_coalescer(0)
    replies = await asyncio.gather(*(coalescer.pull(queue_pull(q)) for q in range(40)))
    assert (coalescer.calls_total, coalescer.pulls_total) == (3, 40)  # 16 + 16 + 8
    assert [m.body for m in iter_records(replies[39].records)] == [b"last"]


async def test_a_backlog_is_read_ahead_and_the_next_pull_is_answered_by_it(stub, make_coalescer):
    await create_topic(stub, queues=2)
    await send(
        stub, *(record(queue_id=q, body=f"{q}-{i}".encode()) for i in range(10) for q in range(2))
    )
    coalescer = make_coalescer(200)
    got: dict[int, list[bytes]] = {0: [], 1: []}
    offsets = {0: 0, 1: 0}

    async def loop(q: int) -> None:
        while len(got[q]) < 10:
            reply = await coalescer.pull(queue_pull(q, offsets[q], max_messages=3))
            if reply is not None:
                got[q] += [m.body for m in iter_records(reply.records)]
                offsets[q] = reply.next_begin_offset

    await asyncio.wait_for(asyncio.gather(loop(0), loop(1)), 10)
    assert got == {q: [f"{q}-{i}".encode() for i in range(10)] for q in range(2)}
    assert coalescer.prefetch_hits >= 4, "pulls 2..4 of each queue were read ahead"


async def test_a_read_ahead_the_loop_no_longer_wants_is_dropped(stub, make_coalescer):
    await create_topic(stub, queues=1)
    await send(stub, *(record(queue_id=0, body=f"m{i}".encode()) for i in range(6)))
    coalescer = make_coalescer(200)
    first = await coalescer.pull(queue_pull(0, 0, max_messages=2))
    assert first is not None and first.next_begin_offset == 2
    # The loop was moved (a seek, an admin reset) to offset 5: the read-ahead of 2 is not
    # what it asks for, so it is not used.
    moved = await coalescer.pull(queue_pull(0, 5, max_messages=2))
    assert moved is not None
    assert [m.body for m in iter_records(moved.records)] == [b"m5"]
    assert coalescer.prefetch_hits == 0


async def test_a_call_nobody_waits_for_is_cancelled_and_the_broker_lets_it_go(
    broker, stub, make_coalescer, eventually
):
    await create_topic(stub)
    coalescer = make_coalescer(30_000)
    loops = [asyncio.ensure_future(coalescer.pull(queue_pull(q))) for q in range(2)]
    await eventually(lambda: broker.hold.parked_count == 2, what="parked")
    loops[0].cancel()
    await asyncio.gather(loops[0], return_exceptions=True)
    # A later call on the same channel parks beside it: had the first call been cancelled,
    # its cancel would have reached the broker first, leaving 1 parked, not 3.
    later = asyncio.ensure_future(make_coalescer(30_000).pull(queue_pull(0)))
    await eventually(lambda: broker.hold.parked_count != 2, what="a later call parked")
    assert broker.hold.parked_count == 3, "one loop still waits on the call"
    later.cancel()
    loops[1].cancel()
    await eventually(
        lambda: broker.hold.parked_count == 0,
        timeout_s=3,
        what="the broker to release the abandoned call",
    )


async def test_calls_that_drifted_apart_are_merged_once_one_waits_at_the_broker(
    broker, stub, make_coalescer, eventually
):
    await create_topic(stub)
    coalescer = make_coalescer(30_000)
    first = asyncio.ensure_future(coalescer.pull(queue_pull(0)))
    await eventually(lambda: broker.hold.parked_count == 1, what="first call parked")
    second = asyncio.ensure_future(coalescer.pull(queue_pull(1)))
    await eventually(lambda: coalescer.merges_total == 1, what="a merge")
    await eventually(lambda: broker.hold.parked_count == 2, what="one call on both queues")
    await send(stub, record(queue_id=0, body=b"for-first"))
    reply = await asyncio.wait_for(first, 5)
    assert [m.body for m in iter_records(reply.records)] == [b"for-first"]
    assert (await asyncio.wait_for(second, 5)).status is PullStatus.NO_NEW_MSG
    assert coalescer.calls_total == 2


async def test_a_parked_call_is_not_merged_past_sixteen_queues(
    broker, stub, make_coalescer, eventually
):
    await create_topic(stub, queues=17)
    coalescer = make_coalescer(30_000)
    full = [asyncio.ensure_future(coalescer.pull(queue_pull(q))) for q in range(16)]
    await eventually(lambda: broker.hold.parked_count == 16, what="a full call parked")
    extra = asyncio.ensure_future(coalescer.pull(queue_pull(16)))
    await eventually(lambda: broker.hold.parked_count == 17, what="a second call parked")
    assert (coalescer.calls_total, coalescer.merges_total) == (2, 0)
    for loop in (*full, extra):
        loop.cancel()


async def test_with_the_acl_on_a_queue_of_a_topic_without_sub_is_refused_alone(
    tmp_path, start_broker
):
    broker = await app_acl_broker(start_broker, tmp_path, ("orders", "secret"))
    remoting = Remoting(Transport(APP))
    try:
        client = remoting.broker(f"127.0.0.1:{broker.port}")
        pulls = [queue_pull(0, topic=t) for t in ("orders", "secret")]
        allowed, denied = await client.pull_batch(
            group="billing", pulls=pulls, suspend_ms=0, timeout_s=5
        )
        assert isinstance(allowed, PullReply)
        assert isinstance(denied, PermissionDeniedError)
        assert "no SUB permission on topic 'secret'" in str(denied)
        with pytest.raises(PermissionDeniedError, match="group 'other'"):
            await client.pull_batch(group="other", pulls=pulls[:1], suspend_ms=0, timeout_s=5)
    finally:
        await remoting.close()
