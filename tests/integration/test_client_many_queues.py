"""A consumer of 2,000 queues: small heartbeats while nothing changes, the whole
subscription table once after a broker restart, every message once across the
restart and a rebalance."""

from __future__ import annotations

import grpc
from clusterkit import Cluster

from pocketmq.broker.broker import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.topic_config import BrokerTopicConfig
from pocketmq.client import ConsumeResult, MessageExt, PushConsumer
from pocketmq.common.message import encode_record, pack_host
from pocketmq.nameserver import NameServer, NamesrvConfig
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc

TOPICS, QUEUES = 250, 8  # 2,000 queues
FAST = {
    "rebalance_interval_s": 1.0,
    "commit_interval_s": 0.2,
    "pull_suspend_ms": 2000,
    "heartbeat_interval_s": 3600.0,
}


def broker_config(tmp_path, namesrv: NameServer, port: int = 0) -> BrokerConfig:
    return BrokerConfig(
        broker_name="broker-a",
        port=port,
        data_dir=str(tmp_path / "a"),
        namesrv_addrs=namesrv.address,
        commitlog_file_size_bytes=16 * 1024 * 1024,
        index_slots=1000,
        index_entries=4000,
        max_open_consume_queue_files=200,
        grpc_v2_port=-1,
    )


async def send_round(broker: Broker, round_no: int) -> None:
    async with grpc.aio.insecure_channel(broker.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        for t in range(TOPICS):
            records = b"".join(
                encode_record(
                    topic=f"many{t}",
                    body=f"{t}/{q}/{round_no}".encode(),
                    queue_id=q,
                    store_host=pack_host(("127.0.0.1", 0)),
                )
                for q in range(QUEUES)
            )
            await stub.SendBatch(pb.SendBatchRequest(records=records))


def consumer(namesrv: NameServer, seen: dict[bytes, list[str]]) -> PushConsumer:
    c = PushConsumer(group="gmany", namesrv=namesrv.address, consume_from="first", **FAST)
    for t in range(TOPICS):
        c.subscribe(f"many{t}", "*")

    @c.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        for m in messages:
            seen.setdefault(m.body, []).append(c.client_id)
        return ConsumeResult.CONSUME_SUCCESS

    return c


def expected(round_no: int) -> set[bytes]:
    return {f"{t}/{q}/{round_no}".encode() for t in range(TOPICS) for q in range(QUEUES)}


async def test_a_consumer_of_2000_queues_heartbeats_small_and_reads_every_message_once(
    tmp_path, eventually
):
    namesrv = NameServer(NamesrvConfig(host="127.0.0.1", port=0))
    await namesrv.start()
    broker = Broker(broker_config(tmp_path, namesrv))
    await broker.start()
    port = broker.port
    seen: dict[bytes, list[str]] = {}
    a = consumer(namesrv, seen)
    b = consumer(namesrv, seen)
    try:
        broker.topics.create_many(
            [
                BrokerTopicConfig(
                    topic_name=f"many{t}", read_queue_nums=QUEUES, write_queue_nums=QUEUES
                )
                for t in range(TOPICS)
            ]
        )
        cluster = Cluster(namesrv, [broker])
        await eventually(
            lambda: cluster.namesrv.route_table.get_route(f"many{TOPICS - 1}") is not None,
            what="routes of every topic",
        )
        await send_round(broker, 0)
        await a.start()
        await eventually(lambda: expected(0) <= seen.keys(), timeout_s=60, what="round 0 consumed")
        group_offsets = broker.offsets
        await eventually(
            lambda: all(
                group_offsets.query("gmany", f"many{t}", q) == 1
                for t in range(TOPICS)
                for q in range(QUEUES)
            ),
            timeout_s=30,
            what="round 0 committed",
        )

        # Steady state: the fingerprint alone, and a rebalance that allocates nothing anew.
        hb, rebalancer = a._heartbeat, a._rebalancer
        assert hb is not None and rebalancer is not None
        await hb.run_once()
        small = hb.last_request_bytes[broker.address]
        whole = (
            await a._remoting.broker(broker.address).heartbeat(
                a.client_id, consumers=a._consumer_infos()
            )
        ).request_bytes
        print(
            f"\nheartbeat of a consumer of {TOPICS} topics / {TOPICS * QUEUES} queues: "
            f"{small} bytes unchanged, {whole} bytes whole"
        )
        assert small < 200 < whole
        recomputed, calls = rebalancer.recomputed, rebalancer.member_list_calls
        await a.rebalance_once()
        assert rebalancer.recomputed == recomputed  # route and members unchanged
        assert rebalancer.member_list_calls == calls + 1  # one broker, asked once a round

        # A broker restart: the client sends its whole table once.
        full_before = hb.full_sends
        await broker.stop()
        broker = Broker(broker_config(tmp_path, namesrv, port=port))
        await broker.start()
        await eventually(
            lambda: a.client_id in broker.clients.consumer_ids("gmany"),
            timeout_s=30,
            what="the consumer registered again",
        )
        await hb.run_once()
        assert hb.full_sends == full_before + 1
        assert hb.last_request_bytes[broker.address] < 200

        # A second member joins; once the queues are split, round 1 is read once.
        await b.start()

        def split() -> bool:
            owned = [q for c in (a, b) for q in c.assigned_queues() if q.topic.startswith("many")]
            return len(owned) == TOPICS * QUEUES == len(set(owned)) and all(
                any(q.topic.startswith("many") for q in c.assigned_queues()) for c in (a, b)
            )

        await eventually(split, timeout_s=120, what="2,000 queues split between two members")
        await send_round(broker, 1)
        await eventually(lambda: expected(1) <= seen.keys(), timeout_s=60, what="round 1 consumed")
        twice = {body: ids for body, ids in seen.items() if len(ids) != 1}
        assert not twice
        assert {ids[0] for body, ids in seen.items() if body in expected(1)} == {
            a.client_id,
            b.client_id,
        }
    finally:
        await b.shutdown()
        await a.shutdown()
        await broker.stop(0)
        await namesrv.stop(0)
