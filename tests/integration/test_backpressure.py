"""Back-pressure: bounded requests in flight and parked pulls; beyond them SYSTEM_BUSY,
on which the SDK backs off and still delivers every message.

The limits are made tiny and each request slow (synchronous flush on a disk whose
sync takes 30 ms), so that requests really overlap on the broker.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import grpc
import pytest
from processkit import ProcessKit
from wirekit import record

from pocketmq.broker.broker import Broker
from pocketmq.broker.grpc_status import REASON_METADATA_KEY
from pocketmq.broker.store import StoreIO
from pocketmq.broker.store.message_store import DefaultMessageStore
from pocketmq.client import ConsumeResult, Message, Producer, PushConsumer
from pocketmq.nameserver import NameServer, NamesrvConfig
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc, common_pb2

MiB = 1024 * 1024
BUSY = grpc.StatusCode.RESOURCE_EXHAUSTED


class SlowSyncIO(StoreIO):
    """A disk whose fdatasync takes 30 ms: every sync-flush send lasts that long."""

    def sync(self, fd: int) -> None:
        time.sleep(0.03)  # runs in the flush thread: a slow disk, not a test waiting
        super().sync(fd)


@pytest.fixture
async def slow_broker(broker_config):
    started: list[Broker] = []

    async def start(**overrides) -> Broker:
        config = broker_config(flush_disk_type="sync", **overrides)
        broker = Broker(
            config,
            store_factory=lambda cfg, clock: DefaultMessageStore(cfg, clock=clock, io=SlowSyncIO()),
        )
        await broker.start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        await broker.stop(0)


def puts(broker: Broker) -> int:
    return int(broker.store.runtime_info()["put_messages_total"])


async def outcomes(calls) -> tuple[int, list[grpc.aio.AioRpcError]]:
    """(successes, errors) of calls made concurrently."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert all(isinstance(e, grpc.aio.AioRpcError) for e in errors), errors
    return len(results) - len(errors), errors


def reason(error: grpc.aio.AioRpcError) -> str:
    return dict(error.trailing_metadata() or ()).get(REASON_METADATA_KEY, "")


async def test_requests_beyond_the_connection_limit_are_answered_busy_and_store_nothing(
    slow_broker, eventually
):
    broker = await slow_broker(max_in_flight_requests_per_connection=2)
    async with grpc.aio.insecure_channel(broker.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        ok, errors = await outcomes(
            stub.SendMessage(pb.SendMessageRequest(record=record())) for _ in range(20)
        )
    assert errors, "20 concurrent 30 ms sends on one connection never exceeded 2 in flight"
    for error in errors:
        assert (error.code(), reason(error)) == (BUSY, "SYSTEM_BUSY")
        assert "(max_in_flight_requests_per_connection)" in error.details()
        assert "the limit is 2" in error.details()
    assert ok >= 2 and puts(broker) == ok
    # A call is uncounted when grpc reports it done, which may come just after the
    # client has its answer.
    await eventually(
        lambda: broker.flow_control.in_flight == 0, what="every answered call uncounted"
    )
    assert broker.flow_control.refused_total == len(errors)


async def test_the_broker_wide_limit_counts_every_connection(slow_broker):
    broker = await slow_broker(max_in_flight_requests_per_connection=100, max_in_flight_requests=3)
    channels = [grpc.aio.insecure_channel(broker.address) for _ in range(4)]
    try:
        stubs = [broker_pb2_grpc.BrokerStub(c) for c in channels]
        ok, errors = await outcomes(
            stub.SendMessage(pb.SendMessageRequest(record=record()))
            for stub in stubs
            for _ in range(5)
        )
    finally:
        for channel in channels:
            await channel.close()
    assert errors
    assert all("(max_in_flight_requests)" in e.details() for e in errors)
    assert puts(broker) == ok


async def test_parked_pulls_are_not_counted_in_flight_but_bounded_on_their_own(
    slow_broker, eventually
):
    broker = await slow_broker(max_in_flight_requests_per_connection=2, max_parked_pulls=3)
    async with grpc.aio.insecure_channel(broker.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        await stub.CreateTopic(
            pb.CreateTopicRequest(
                topic_config=common_pb2.TopicConfig(
                    topic_name="TopicA", read_queue_nums=4, write_queue_nums=4
                )
            )
        )

        def pull(queue_id: int):
            return stub.PullMessage(
                pb.PullMessageRequest(
                    consumer_group="G",
                    topic="TopicA",
                    queue_id=queue_id,
                    queue_offset=0,
                    suspend_timeout_ms=20_000,
                )
            )

        parked = [asyncio.ensure_future(pull(0)) for _ in range(3)]
        await eventually(
            lambda: broker.hold.parked_count >= 3, timeout_s=10, what="three pulls parked"
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await pull(1)
        assert refused.value.code() is BUSY and "(max_parked_pulls = 3)" in refused.value.details()
        # Three pulls wait on this connection, yet a send on it is admitted (limit 2)
        # and wakes them.
        reply = await stub.SendMessage(pb.SendMessageRequest(record=record()))
        assert reply.status == pb.SEND_OK
        woken = await asyncio.wait_for(asyncio.gather(*parked), 10)
    assert [r.status for r in woken] == [pb.FOUND] * 3
    assert broker.flow_control.refused_total == 0


@pytest.mark.timeout(120)
async def test_the_sdk_backs_off_on_busy_and_delivers_every_message(tmp_path, eventually):
    """A broker process with tiny limits, pushed by three producers well past them."""
    namesrv = NameServer(NamesrvConfig(host="127.0.0.1", port=0))
    await namesrv.start()
    kit = ProcessKit(tmp_path)
    try:
        # Each client has connections of its own: three producers with calls in flight
        # pass a total of 2 (a producer coalesces its tasks' sends into few calls).
        broker = await kit.broker(
            namesrv=namesrv.address,
            flush_disk_type="sync",
            max_in_flight_requests_per_connection=2,
            max_in_flight_requests=2,
        )
        received: Counter[str] = Counter()
        consumer = PushConsumer(
            group="bp-consumer",
            namesrv=namesrv.address,
            consume_from="first",
            pull_delay_on_error_s=0.2,
        )
        consumer.subscribe("TopicBP", "*")

        @consumer.listener
        async def handle(messages):
            received.update(m.msg_id for m in messages)
            return ConsumeResult.CONSUME_SUCCESS

        sent, rss = await _push_past_the_limit(namesrv.address, broker)
        await consumer.start()
        try:
            await eventually(
                lambda: sent <= set(received),
                timeout_s=60,
                interval_s=0.1,
                what=f"all {len(sent)} messages consumed",
            )
        finally:
            await consumer.shutdown()
        info = await _runtime_info(broker.addr)
        refused = int(info["requests_refused_busy_total"])
        print(
            f"\n{len(sent)} messages sent, {refused} requests refused busy, broker RSS "
            f"{min(rss) / MiB:.0f}..{max(rss) / MiB:.0f} MiB"
        )
        assert refused > 0, "the load never reached the limits; the test proves nothing"
        assert max(rss) < 600 * MiB
        assert await broker.stop() == 0
    finally:
        await kit.close()
        await namesrv.stop(0)


async def _push_past_the_limit(namesrv: str, broker) -> tuple[set[str], list[int]]:
    """3 producers x 24 tasks x 25 sends, each producer up to 8 calls in flight."""
    producers = [
        Producer(group=f"bp-producer-{i}", namesrv=namesrv, max_in_flight_per_broker=8)
        for i in range(3)
    ]
    sent: set[str] = set()
    rss: list[int] = []

    async def task(producer: Producer, n: int) -> None:
        for i in range(25):
            result = await producer.send(
                Message(topic="TopicBP", body=b"x" * 200, keys=[f"{n}-{i}"])
            )
            sent.add(result.msg_id)

    isolated: list[str] = []  # SYSTEM_BUSY is back-pressure: never a reason to avoid a broker
    for producer in producers:
        await producer.start()
        record_isolation(producer, isolated)
    try:
        load = asyncio.gather(*(task(p, n) for p in producers for n in range(24)))
        while not load.done():
            rss.append(broker.rss_bytes())
            await asyncio.wait([load], timeout=0.2)
        await load  # every send succeeded: SendTimeoutError would surface here
    finally:
        for producer in producers:
            await producer.shutdown()
    assert not isolated, f"a busy broker was avoided as if it had failed: {isolated[:3]}"
    return sent, rss


def record_isolation(producer: Producer, isolated: list[str]) -> None:
    """Note every send the producer's fault tolerance records as a failure."""
    update = producer.fault.update

    def noting(broker_name: str, latency_ms: float, *, isolation: bool = False) -> None:
        if isolation:
            isolated.append(broker_name)
        update(broker_name, latency_ms, isolation=isolation)

    producer.fault.update = noting  # type: ignore[method-assign]


async def _runtime_info(addr: str) -> dict[str, str]:
    async with grpc.aio.insecure_channel(addr) as channel:
        reply = await broker_pb2_grpc.BrokerStub(channel).GetBrokerRuntimeInfo(
            pb.GetBrokerRuntimeInfoRequest()
        )
    return dict(reply.table)
