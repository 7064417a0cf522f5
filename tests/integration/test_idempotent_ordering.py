"""A request of an idempotent producer that reaches the broker ahead of its queue's
earlier ones waits for them (briefly, a bounded number at a time) instead of being
refused; a real gap is still refused OUT_OF_ORDER_SEQUENCE (broker/idempotence.py)."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest
from storekit import small_config, start_store

from pocketmq.broker.errors import SequenceGapError
from pocketmq.broker.idempotence import IdempotenceProcessor
from pocketmq.broker.send_processor import SendMessageProcessor
from pocketmq.broker.store.config import FlushDiskType
from pocketmq.broker.store.io import StoreIO
from pocketmq.broker.topic_config import TopicConfigManager
from pocketmq.client.message_codec import encode_messages
from pocketmq.client.model import Message
from pocketmq.common.model import SendStatus
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc

HOST = b"\x7f\0\0\1\0\0\0\0"
PID = 4242


def numbered(first: int, count: int, queue_id: int = 0) -> bytes:
    msgs = [Message(topic="orders", body=f"m{first + i}".encode()) for i in range(count)]
    keys = [f"K{first + i}" for i in range(count)]
    return encode_messages(msgs, keys, queue_id, HOST, 1, 4096, 0, (PID, 0, first))


@pytest.fixture
def broker(tmp_path):
    store, _ = start_store(small_config(tmp_path / "store"))
    topics = TopicConfigManager(
        str(tmp_path / "config"),
        broker_name="broker-a",
        cluster_name="DefaultCluster",
        auto_create_enable=True,
    )
    topics.load()
    made: list[IdempotenceProcessor] = []

    def make(**kw: int) -> tuple[SendMessageProcessor, IdempotenceProcessor]:
        idempotence = IdempotenceProcessor(store, **kw)
        store.producers.register(PID, 0, store.clock.now_ms())
        made.append(idempotence)
        send = SendMessageProcessor(
            store, topics, store_host=("127.0.0.1", 10911), idempotence=idempotence
        )
        return send, idempotence

    yield make
    store.shutdown()


async def until(condition, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.001)


async def test_a_request_ahead_of_its_queue_waits_for_the_earlier_one_then_both_are_stored(
    broker,
) -> None:
    send, idempotence = broker(wait_ms=10_000)
    later = asyncio.create_task(send.send(numbered(2, 2)))
    await until(lambda: idempotence.has_waiters)
    earlier = await send.send(numbered(0, 2))
    stored_later = await later
    assert earlier.queue_offsets == [0, 1]
    assert stored_later.queue_offsets == [2, 3]  # in sequence order, not arrival order
    assert idempotence.waited == 1 and not idempotence.has_waiters


async def test_a_retry_of_a_waiting_request_is_answered_once_its_original_is_stored(
    broker,
) -> None:
    send, idempotence = broker(wait_ms=10_000)
    later = asyncio.create_task(send.send(numbered(1, 1)))
    await until(lambda: idempotence.has_waiters)
    await send.send(numbered(0, 1))
    first = await later
    again = await send.send(numbered(1, 1))  # the same bytes, as a retry resends them
    assert again.duplicates == [True]
    assert again.queue_offsets == first.queue_offsets


async def test_a_real_gap_is_refused_out_of_order_once_the_wait_is_over(broker) -> None:
    send, idempotence = broker(wait_ms=20)
    await send.send(numbered(0, 1))
    with pytest.raises(SequenceGapError, match="next one there is 1"):
        await send.send(numbered(5, 1))
    assert not idempotence.has_waiters


async def test_waiters_past_the_bound_of_a_queue_are_refused_at_once(broker) -> None:
    send, idempotence = broker(max_waiters_per_queue=1, wait_ms=10_000)
    waiting = asyncio.create_task(send.send(numbered(3, 1)))
    await until(lambda: idempotence.has_waiters)
    with pytest.raises(SequenceGapError):
        await send.send(numbered(2, 1))  # a second one ahead of sequence 0: no room
    await send.send(numbered(0, 3))  # 0, 1, 2: the waiting sequence 3 is next
    assert (await waiting).queue_offsets == [3]


async def test_requests_of_other_queues_never_wait_for_each_other(broker) -> None:
    send, idempotence = broker()
    await send.send(numbered(0, 1, queue_id=1))
    stored = await send.send(numbered(0, 1, queue_id=0))
    assert stored.queue_offsets == [0]
    assert idempotence.waited == 0


async def test_a_waiting_request_leaves_room_for_the_earlier_one_under_the_in_flight_limit(
    start_broker,
) -> None:
    # One request in progress at a time: were the waiting one counted, the earlier one
    # would be refused SYSTEM_BUSY until the wait ran out, and then the waiting one too.
    broker = await start_broker(max_in_flight_requests=1, max_in_flight_requests_per_connection=1)
    broker.services.idempotence._wait_s = 10.0  # a wait that cannot run out in this test
    async with grpc.aio.insecure_channel(broker.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        pid = (await stub.InitProducerId(pb.InitProducerIdRequest(topics=["orders"]))).producer_id

        def request(first: int, count: int) -> pb.SendBatchRequest:
            msgs = [Message(topic="orders", body=f"m{first + i}".encode()) for i in range(count)]
            keys = [f"K{first + i}" for i in range(count)]
            blob = encode_messages(msgs, keys, 0, HOST, 1, 4096, 0, (pid, 0, first))
            return pb.SendBatchRequest(records=blob)

        later = asyncio.ensure_future(stub.SendBatch(request(2, 2)))
        await until(lambda: broker.services.idempotence.has_waiters)
        earlier = await stub.SendBatch(request(0, 2))
        stored_later = await later
    assert earlier.status == stored_later.status == pb.SEND_OK
    assert list(earlier.queue_offsets) == [0, 1]
    assert list(stored_later.queue_offsets) == [2, 3]


class HeldSyncIO(StoreIO):
    """A disk whose syncs wait until the test lets them through."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def sync(self, fd: int) -> None:
        self.release.wait(timeout=30)
        super().sync(fd)


async def test_on_a_sync_flush_store_a_retry_is_answered_once_its_original_is_durable(
    tmp_path,
) -> None:
    io = HeldSyncIO()
    config = small_config(tmp_path / "store", flush_disk_type=FlushDiskType.SYNC_FLUSH)
    store, _ = start_store(config, io=io)
    topics = TopicConfigManager(
        str(tmp_path / "config"), broker_name="b", cluster_name="c", auto_create_enable=True
    )
    topics.load()
    store.producers.register(PID, 0, store.clock.now_ms())
    send = SendMessageProcessor(
        store,
        topics,
        store_host=("127.0.0.1", 10911),
        idempotence=IdempotenceProcessor(store),
    )
    try:
        original = asyncio.create_task(send.send(numbered(0, 1)))
        await until(lambda: store.commitlog.max_offset > 0)
        retry = asyncio.create_task(send.send(numbered(0, 1)))  # the answer was lost
        await asyncio.sleep(0.2)
        assert not retry.done(), "a retry was acknowledged before its record was durable"
        io.release.set()
        first, again = await original, await retry
        assert again.duplicates == [True] and again.queue_offsets == first.queue_offsets
        assert first.status is again.status is SendStatus.SEND_OK
        assert store.commitlog.queue.flushed_offset >= store.commitlog.max_offset
    finally:
        io.release.set()
        store.shutdown()
