"""LockBatchMQ / UnlockBatchMQ on a real broker: one holder per queue, expiry, unlock."""

from __future__ import annotations

import grpc
import pytest

from pocketmq.broker.rebalance_lock import MessageQueue
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc


def queues(*ids: int, topic: str = "TopicA") -> list[pb.MessageQueueRef]:
    return [pb.MessageQueueRef(topic=topic, broker_name="broker-a", queue_id=i) for i in ids]


async def lock(stub, client_id: str, *ids: int, group: str = "G") -> list[int]:
    reply = await stub.LockBatchMQ(
        pb.LockBatchMQRequest(group=group, client_id=client_id, queues=queues(*ids))
    )
    return [q.queue_id for q in reply.locked]


async def test_one_client_wins_a_queue_until_it_unlocks(stub):
    assert await lock(stub, "c1", 0, 1) == [0, 1]
    assert await lock(stub, "c2", 0, 1, 2) == [2]
    assert await lock(stub, "c1", 0, 1) == [0, 1]  # renewal answers what it holds
    await stub.UnlockBatchMQ(
        pb.UnlockBatchMQRequest(group="G", client_id="c2", queues=queues(0))
    )  # not c2's: kept
    assert await lock(stub, "c2", 0) == []
    await stub.UnlockBatchMQ(pb.UnlockBatchMQRequest(group="G", client_id="c1", queues=queues(0)))
    assert await lock(stub, "c2", 0, 1) == [0]
    assert await lock(stub, "c3", 0, group="OtherGroup") == [0]


async def test_a_lock_not_renewed_expires(start_broker, eventually):
    broker = await start_broker(rebalance_lock_max_live_time_ms=300)
    async with grpc.aio.insecure_channel(broker.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        assert await lock(stub, "c1", 0) == [0]
        assert await lock(stub, "c2", 0) == []

        async def taken_over():
            return await lock(stub, "c2", 0) == [0]

        await eventually(taken_over, timeout_s=5, what="c1's lock expiring")
        assert await lock(stub, "c1", 0) == []
        assert broker.locks.holder("G", MessageQueue("TopicA", "broker-a", 0)) == "c2"


@pytest.mark.parametrize(
    "request_fields, words",
    [
        ({"group": "", "client_id": "c1"}, "group name is empty"),
        ({"group": "G", "client_id": ""}, "client_id is empty"),
        (
            {
                "group": "G",
                "client_id": "c1",
                "queues": [pb.MessageQueueRef(topic="TopicA", queue_id=-1)],
            },
            "queue_id -1",
        ),
        (
            {"group": "G", "client_id": "c1", "queues": [pb.MessageQueueRef(topic="bad topic")]},
            "contains ' '",
        ),
    ],
)
async def test_malformed_lock_requests_are_refused(stub, request_fields, words):
    for call, request_cls in (
        (stub.LockBatchMQ, pb.LockBatchMQRequest),
        (stub.UnlockBatchMQ, pb.UnlockBatchMQRequest),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call(request_cls(**request_fields))
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert words in info.value.details()
