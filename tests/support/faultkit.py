"""What fault tests do around real servers: load through the SDK, topics, routes, reading back.

``SendLoad`` runs producer tasks until stopped and keeps every acknowledgement
as an ``Ack(broker, queue_id, queue_offset, msg_id)``; ``read_queue`` pulls a
queue from offset 0 to its end over plain gRPC; ``check_acks`` compares the two.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

import grpc
from waitkit import eventually

from pocketmq.client import (
    ClientError,
    ConsumeResult,
    Message,
    Producer,
    PushConsumer,
    SendStatus,
    decode_messages,
)
from pocketmq.common.message import StoredMessage, iter_records
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc, common_pb2, nameserver_pb2, nameserver_pb2_grpc

T = TypeVar("T")


class Ack(NamedTuple):
    broker: str
    queue_id: int
    queue_offset: int
    msg_id: str


async def create_topic(broker_addr: str, topic: str, queues: int = 4) -> None:
    async with grpc.aio.insecure_channel(broker_addr) as channel:
        try:
            await broker_pb2_grpc.BrokerStub(channel).CreateTopic(
                pb.CreateTopicRequest(
                    topic_config=common_pb2.TopicConfig(
                        topic_name=topic, read_queue_nums=queues, write_queue_nums=queues, perm=6
                    )
                ),
                timeout=10,
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() is not grpc.StatusCode.ALREADY_EXISTS:
                raise


async def routed_brokers(namesrv_addr: str, topic: str) -> set[str]:
    """Names of the brokers the nameserver routes *topic* to (empty if none or unreachable)."""
    async with grpc.aio.insecure_channel(namesrv_addr) as channel:
        try:
            reply = await nameserver_pb2_grpc.NameServerStub(channel).GetRouteInfoByTopic(
                nameserver_pb2.GetRouteInfoByTopicRequest(topic=topic), timeout=5
            )
        except grpc.aio.AioRpcError:
            return set()
    return {q.broker_name for q in reply.route.queue_datas}


async def wait_for(
    predicate: Callable[[], Any], *, timeout_s: float, what: str, interval_s: float = 0.05
) -> float:
    """Poll *predicate* (sync or async) until truthy; returns the seconds it took."""
    start = time.monotonic()
    await eventually(predicate, timeout_s=timeout_s, interval_s=interval_s, what=what)
    return time.monotonic() - start


async def _pull_all(
    broker_addr: str, topic: str, queue_id: int, decode: Callable[[bytes], list[T]]
) -> list[T]:
    """Every record of one queue, from offset 0 to its end, each reply through *decode*."""
    decoded: list[T] = []
    offset = 0
    async with grpc.aio.insecure_channel(broker_addr) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        while True:
            reply = await stub.PullMessage(
                pb.PullMessageRequest(
                    consumer_group="fault-reader",
                    topic=topic,
                    queue_id=queue_id,
                    queue_offset=offset,
                    max_msg_nums=512,
                    suspend_timeout_ms=0,
                ),
                timeout=30,
            )
            if reply.status != pb.FOUND:
                return decoded
            decoded.extend(decode(reply.records))
            offset = reply.next_begin_offset


async def read_queue(broker_addr: str, topic: str, queue_id: int) -> list[StoredMessage]:
    """Every message of one queue, from offset 0 to its end."""
    return await _pull_all(
        broker_addr, topic, queue_id, lambda records: list(iter_records(records))
    )


async def read_topic(broker_addr: str, topic: str, queues: int) -> dict[tuple[int, int], str]:
    """(queue id, queue offset) -> UNIQ_KEY of every stored message; checks offsets are dense
    and every body CRC. Decoded by the client's block codec: a GiB holds a million records."""
    stored: dict[tuple[int, int], str] = {}
    for queue_id in range(queues):
        messages = await _pull_all(
            broker_addr,
            topic,
            queue_id,
            lambda records: decode_messages(records, "fault-reader", check_crc=True),
        )
        offsets = [m.queue_offset for m in messages]
        assert offsets == list(range(len(offsets))), (
            f"queue {queue_id}: offsets are not 0..{len(offsets) - 1} exactly once"
        )
        stored.update({(queue_id, m.queue_offset): m.msg_id for m in messages})
    return stored


@dataclass
class AckCheck:
    kept: int
    lost: list[Ack]
    misplaced: list[Ack]  # the acknowledged offset holds another message
    lost_before_kept: list[Ack] = field(default_factory=list)  # a lost ack below a kept one


def check_acks(acks: list[Ack], stored: dict[tuple[int, int], str]) -> AckCheck:
    """Each ack found where it says its message is. An ack without an offset (-1: a
    retry the broker answered as a duplicate of a record whose offset it no longer
    keeps, as Kafka's DUPLICATE_SEQUENCE_NUMBER does) is looked up by its message id
    in its queue instead."""
    kept, lost, misplaced = 0, [], []
    highest_kept: dict[int, int] = {}
    by_queue: dict[int, set[str]] | None = None
    for ack in acks:
        if ack.queue_offset < 0:
            if by_queue is None:
                by_queue = {}
                for (queue_id, _), msg_id in stored.items():
                    by_queue.setdefault(queue_id, set()).add(msg_id)
            if ack.msg_id in by_queue.get(ack.queue_id, ()):
                kept += 1
            else:
                lost.append(ack)
            continue
        at = stored.get((ack.queue_id, ack.queue_offset))
        if at == ack.msg_id:
            kept += 1
            highest_kept[ack.queue_id] = max(highest_kept.get(ack.queue_id, -1), ack.queue_offset)
        elif at is None:
            lost.append(ack)
        else:
            misplaced.append(ack)
    before = [a for a in lost if a.queue_offset < highest_kept.get(a.queue_id, -1)]
    return AckCheck(kept, lost, misplaced, before)


def recording_consumer(
    *, group: str, namesrv: str, topics: list[str], into: Any, **options: Any
) -> PushConsumer:
    """A push consumer of *topics* from their first offset; its listener adds the
    msg_id of every message to *into* (a set, or a Counter to see redeliveries)."""
    consumer = PushConsumer(group=group, namesrv=namesrv, consume_from="first", **options)
    for topic in topics:
        consumer.subscribe(topic, "*")

    @consumer.listener
    async def handle(messages: list[Any]) -> ConsumeResult:
        into.update(m.msg_id for m in messages)
        return ConsumeResult.CONSUME_SUCCESS

    return consumer


class SendLoad:
    """*tasks* coroutines sending through one producer until :meth:`stop`.

    Only ``SEND_OK`` answers count as acknowledgements (``acks``); every answer's
    status is counted in ``statuses`` (a SYNC_MASTER may store a message and still
    answer ``FLUSH_SLAVE_TIMEOUT`` or ``SLAVE_NOT_AVAILABLE``: not acknowledged).
    """

    def __init__(
        self,
        producer: Producer,
        topic: str,
        *,
        tasks: int = 8,
        body_bytes: tuple[int, int] = (100, 1000),
        seed: int = 7,
        pause_s: float = 0.0,
    ) -> None:
        self.producer = producer
        self.topic = topic
        self.pause_s = pause_s  # between two sends of one task: a steady, modest rate
        self.acks: list[Ack] = []
        self.failures = 0
        self.statuses: Counter[str] = Counter()
        self.status_at: list[tuple[float, str]] = []  # (monotonic time, status) per answer
        # (issued, answered, status) per answer, monotonic seconds: "the first SEND_OK of a
        # send issued after the kill" must not count a send that was in flight before it
        self.answers: list[tuple[float, float, str]] = []
        self._bodies = body_bytes
        self._rng = random.Random(seed)
        self._stopped = asyncio.Event()
        self._tasks = [asyncio.ensure_future(self._run(n)) for n in range(tasks)]

    async def _run(self, n: int) -> None:
        i = 0
        while not self._stopped.is_set():
            body = f"{n}-{i}:".encode() + b"x" * self._rng.randint(*self._bodies)
            i += 1
            issued = time.monotonic()
            try:
                result = await self.producer.send(Message(topic=self.topic, body=body))
            except ClientError:
                self.failures += 1
                await asyncio.sleep(0.01)  # a dead broker answers at once: do not spin
                continue
            status = result.status.value
            self.statuses[status] += 1
            answered = time.monotonic()
            self.status_at.append((answered, status))
            self.answers.append((issued, answered, status))
            if result.status is SendStatus.SEND_OK:
                self.acks.append(
                    Ack(
                        result.queue.broker_name,
                        result.queue.queue_id,
                        result.queue_offset,
                        result.msg_id,
                    )
                )
            if self.pause_s:
                await asyncio.sleep(self.pause_s)

    def first_ok_issued_after(self, t: float) -> float | None:
        """When the first SEND_OK of a send *issued* after *t* was answered (None: none yet)."""
        return min(
            (answered for issued, answered, s in self.answers if issued > t and s == "SEND_OK"),
            default=None,
        )

    def acked_by(self, broker: str) -> int:
        return sum(1 for a in self.acks if a.broker == broker)

    async def stop(self) -> None:
        self._stopped.set()
        results = await asyncio.gather(*self._tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def __aenter__(self) -> SendLoad:
        return self

    async def __aexit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            await self.stop()
