"""Prometheus /metrics of a real broker and nameserver (port 0), scraped over HTTP.

The SDK sends and pulls; the scrape is parsed with prometheus_client's own
parser and every figure is held to what the test did or to the store's own
numbers.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import urllib.error
import urllib.request

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pocketmq import __version__
from pocketmq.broker.broker import Broker
from pocketmq.broker.store.io import StoreIO
from pocketmq.broker.store.message_store import DefaultMessageStore
from pocketmq.broker.topic_config import BrokerTopicConfig
from pocketmq.client import Message, Producer, PullConsumer
from pocketmq.common.message import encode_record, pack_host
from pocketmq.nameserver import NameServer, NamesrvConfig
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc

TOPIC = "metrics-orders"
QUEUES = 2
BODY = b"m" * 100

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _get(port: int, path: str = "/metrics", accept: str = "") -> tuple[int, str, str]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", headers={"Accept": accept} if accept else {}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, reply.headers["Content-Type"], reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


async def scrape(port: int) -> Samples:
    status, _type, text = await asyncio.to_thread(_get, port)
    assert status == 200, text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


@pytest.fixture
async def namesrv():
    server = NameServer(NamesrvConfig(host="127.0.0.1", port=0, metrics_port=0))
    await server.start()
    yield server
    await server.stop(0)


@pytest.fixture
async def broker(namesrv, start_broker):  # the nameserver outlives the broker
    broker = await start_broker(
        namesrv_addrs=namesrv.address, metrics_port=0, flush_disk_type="sync"
    )
    broker.topics.create(
        BrokerTopicConfig(topic_name=TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    )
    return broker


async def consume_everything(namesrv: NameServer, group: str, expected: int) -> int:
    """Poll *expected* messages of TOPIC as *group*, commit them, leave the group."""
    consumer = PullConsumer(
        group=group, namesrv=namesrv.address, consume_from="first", auto_commit=False
    )
    consumer.subscribe(TOPIC)
    await consumer.start()
    got = 0
    try:
        async with asyncio.timeout(20):
            while got < expected:
                got += len(await consumer.poll(timeout_s=1.0))
        await consumer.commit()
    finally:
        await consumer.shutdown()
    return got


async def test_broker_metrics_count_what_producers_sent_and_consumers_pulled(
    broker, namesrv, eventually
):
    assert broker.metrics_port and broker.metrics_port != broker.port
    async with Producer(group="metrics-pg", namesrv=namesrv.address) as producer:
        for i in range(12):  # one request each: awaited one by one
            await producer.send(Message(topic=TOPIC, body=BODY, keys=[f"k{i}"]))
        await producer.send_batch([Message(topic="metrics-other", body=BODY)] * 5)
    assert await consume_everything(namesrv, "metrics-cg", 12) == 12

    samples = await scrape(broker.metrics_port)
    assert value(samples, "pocketmq_put_messages_total", topic=TOPIC) == 12
    assert value(samples, "pocketmq_put_messages_total", topic="metrics-other") == 5
    assert value(samples, "pocketmq_get_messages_total", topic=TOPIC) == 12
    put_bytes = value(samples, "pocketmq_put_bytes_total", topic=TOPIC)
    assert put_bytes > 12 * len(BODY)
    assert value(samples, "pocketmq_get_bytes_total", topic=TOPIC) == put_bytes  # same records
    assert put_bytes + value(samples, "pocketmq_put_bytes_total", topic="metrics-other") == int(
        broker.store.runtime_info()["put_bytes_total"]
    )
    assert value(samples, "pocketmq_put_latency_seconds_count") == 13  # 12 sends + 1 batch
    assert value(samples, "pocketmq_put_latency_seconds_bucket", le="+Inf") == 13
    assert value(samples, "pocketmq_put_latency_seconds_sum") > 0
    assert value(samples, "pocketmq_get_messages_total", topic="metrics-other") == 0
    assert (
        value(
            samples,
            "pocketmq_broker_info",
            broker_name=broker.config.broker_name,
            cluster=broker.config.cluster_name,
            broker_id="0",
            address=broker.address,
            version=__version__,
        )
        == 1
    )


async def test_broker_metrics_show_the_store_and_its_flushes(broker, namesrv, eventually):
    async with Producer(group="metrics-pg", namesrv=namesrv.address) as producer:
        await producer.send_batch([Message(topic=TOPIC, body=BODY)] * 10)

    def consume_queue_flushed(samples: Samples) -> bool:
        return value(samples, "pocketmq_flush_latency_seconds_count", kind="consume_queue") > 0

    samples = await eventually(
        lambda: _scrape_until(broker.metrics_port, consume_queue_flushed),
        timeout_s=10,
        what="a consume-queue flush round",
    )
    info = broker.store.runtime_info()
    max_offset = int(info["commitlog_max_offset"])
    assert (
        value(samples, "pocketmq_store_size_bytes")
        == max_offset - int(info["commitlog_min_offset"])
        > 10 * len(BODY)
    )
    assert value(samples, "pocketmq_flush_lag_bytes") == 0  # sync flush: all durable
    assert value(samples, "pocketmq_dispatch_lag_bytes") == 0
    # sync flush: the send waited for at least one group commit
    assert value(samples, "pocketmq_flush_latency_seconds_count", kind="commitlog") >= 1
    ratio = value(samples, "pocketmq_store_disk_used_ratio")
    assert 0 < ratio <= 1
    assert ratio == pytest.approx(StoreIO().disk_used_ratio(broker.config.data_dir), abs=0.05)


async def _scrape_until(port: int, predicate) -> Samples | None:  # type: ignore[no-untyped-def]
    samples = await scrape(port)
    return samples if predicate(samples) else None


async def test_consumer_lag_equals_the_messages_not_yet_consumed(broker, namesrv, eventually):
    async with Producer(group="metrics-pg", namesrv=namesrv.address) as producer:
        await producer.send_batch([Message(topic=TOPIC, body=BODY)] * 8)
        assert await consume_everything(namesrv, "metrics-lag", 8) == 8
        samples = await scrape(broker.metrics_port)
        assert (
            value(samples, "pocketmq_consumer_lag_messages", group="metrics-lag", topic=TOPIC) == 0
        )
        for _ in range(3):
            await producer.send(Message(topic=TOPIC, body=BODY))
        await producer.send_batch([Message(topic=TOPIC, body=BODY)] * 4)
    samples = await scrape(broker.metrics_port)
    assert value(samples, "pocketmq_consumer_lag_messages", group="metrics-lag", topic=TOPIC) == 7


async def test_parked_pulls_follow_the_waiting_consumer(broker, namesrv, eventually):
    consumer = PullConsumer(
        group="metrics-park", namesrv=namesrv.address, consume_from="first", pull_suspend_ms=30_000
    )
    consumer.subscribe(TOPIC)
    async with consumer:
        # the consumer's one pull per empty queue waits at the broker
        await eventually(
            lambda: _scrape_until(
                broker.metrics_port,
                lambda s: value(s, "pocketmq_parked_pulls") == broker.hold.parked_count == QUEUES,
            ),
            timeout_s=10,
            what=f"{QUEUES} parked pulls",
        )
    await eventually(
        lambda: _scrape_until(
            broker.metrics_port, lambda s: value(s, "pocketmq_parked_pulls") == 0
        ),
        what="no parked pull once the consumer left",
    )


async def test_nameserver_metrics_count_registered_brokers(
    broker, namesrv, start_broker, eventually
):
    assert namesrv.metrics_port
    # the fixture's topic reaches the nameserver with the broker's next registration
    await eventually(
        lambda: TOPIC in namesrv.route_table.topics() or None,
        timeout_s=10,
        what=f"{TOPIC} registered",
    )
    samples = await scrape(namesrv.metrics_port)
    assert value(samples, "pocketmq_registered_brokers", cluster="DefaultCluster") == 1
    assert value(samples, "pocketmq_nameserver_topics") == len(namesrv.route_table.topics())
    assert value(samples, "pocketmq_nameserver_registrations_total") >= 1
    assert (
        value(samples, "pocketmq_nameserver_info", address=namesrv.address, version=__version__)
        == 1
    )

    await start_broker(
        dir_name="b",
        broker_name="broker-b",
        cluster_name="OtherCluster",
        namesrv_addrs=namesrv.address,
    )
    samples = await scrape(namesrv.metrics_port)
    assert value(samples, "pocketmq_registered_brokers", cluster="OtherCluster") == 1
    await broker.stop()  # unregisters
    samples = await scrape(namesrv.metrics_port)
    assert (
        "pocketmq_registered_brokers",
        frozenset({("cluster", "DefaultCluster")}),
    ) not in samples
    assert value(samples, "pocketmq_nameserver_unregistrations_total") == 1


async def test_two_brokers_in_one_process_serve_their_own_registries(start_broker):
    a = await start_broker(dir_name="a", broker_name="broker-a", metrics_port=0)
    b = await start_broker(dir_name="b", broker_name="broker-b", metrics_port=0)
    names = set()
    for broker in (a, b):
        samples = await scrape(broker.metrics_port)
        names |= {
            dict(labels)["broker_name"]
            for name, labels in samples
            if name == "pocketmq_broker_info"
        }
    assert names == {"broker-a", "broker-b"}


async def test_metrics_are_off_by_default_and_closed_at_stop(start_broker):
    assert (await start_broker(dir_name="off")).metrics_port is None
    broker = await start_broker(dir_name="on", metrics_port=0)
    port = broker.metrics_port
    status, content_type, _ = await asyncio.to_thread(_get, port, "/nowhere")
    assert status == 404
    status, content_type, text = await asyncio.to_thread(
        _get, port, "/metrics", "application/openmetrics-text; version=1.0.0"
    )
    assert status == 200 and content_type.startswith("application/openmetrics-text")
    assert text.rstrip().endswith("# EOF")
    await broker.stop()
    with pytest.raises(OSError):
        await asyncio.to_thread(_get, port)


async def test_a_taken_metrics_port_fails_the_start_with_the_key(start_broker):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError, match="metrics_port"):
            await start_broker(metrics_port=taken.getsockname()[1])


class GatedSyncIO(StoreIO):
    """A disk whose syncs wait while the gate is closed: a sync-flush send stays in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()

    def sync(self, fd: int) -> None:
        self.gate.wait(30)  # in the flush thread: a stalled disk, not the test waiting
        super().sync(fd)


async def test_in_flight_requests_and_busy_refusals_follow_flow_control(broker_config, eventually):
    io = GatedSyncIO()
    broker = Broker(
        broker_config(flush_disk_type="sync", metrics_port=0, max_in_flight_requests=1),
        store_factory=lambda cfg, clock: DefaultMessageStore(cfg, clock=clock, io=io),
    )
    await broker.start()
    request = pb.SendMessageRequest(
        record=encode_record(
            topic=TOPIC, body=BODY, queue_id=0, store_host=pack_host(("127.0.0.1", 0))
        )
    )
    try:
        async with grpc.aio.insecure_channel(broker.address) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            io.gate.clear()
            held = asyncio.ensure_future(stub.SendMessage(request, timeout=30))
            samples = await eventually(
                lambda: _scrape_until(
                    broker.metrics_port, lambda s: value(s, "pocketmq_requests_in_flight") == 1
                ),
                timeout_s=10,
                what="a send held by the stalled flush",
            )
            assert value(samples, "pocketmq_requests_refused_busy_total") == 0
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.SendMessage(request, timeout=10)
            assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            samples = await scrape(broker.metrics_port)
            assert value(samples, "pocketmq_requests_refused_busy_total") == 1
            io.gate.set()
            await held
        # The broker uncounts a call when gRPC reports it done, which may come just after
        # the client has its answer.
        samples = await eventually(
            lambda: _scrape_until(
                broker.metrics_port, lambda s: value(s, "pocketmq_requests_in_flight") == 0
            ),
            timeout_s=10,
            what="the answered send uncounted",
        )
        assert value(samples, "pocketmq_put_messages_total", topic=TOPIC) == 1
    finally:
        io.gate.set()
        await broker.stop(0)


def test_standalone_metrics_port_flag_reaches_the_broker(tmp_path):
    from pocketmq.cli import build_parser
    from pocketmq.cli.broker_cmd import _standalone_broker_config

    def metrics_port(*flags: str) -> int:
        args = build_parser().parse_args(["standalone", "--data-dir", str(tmp_path), *flags])
        return _standalone_broker_config(args, namesrv_addrs="").metrics_port

    assert metrics_port() == -1
    assert metrics_port("--metrics-port", "0") == 0
    assert metrics_port("--metrics-port", "5557") == 5557
