"""Registration deltas: the broker's RegisterBrokerService against a real RouteTable.

The fake client hands each BrokerRegistration to a RouteTable as the nameserver's
servicer would, so these tests run the whole delta / full-table / chunk protocol
without gRPC.
"""

from __future__ import annotations

from pocketmq.broker.namesrv_client import BrokerRegistration, RegisterReply
from pocketmq.broker.registration import RegisterBrokerService
from pocketmq.broker.topic_config import BrokerTopicConfig, TopicConfigManager
from pocketmq.common.clock import ManualClock
from pocketmq.nameserver.route_table import (
    BrokerIdentity,
    DataVersion,
    RegisteredTopicConfig,
    RouteTable,
    TopicUpdate,
)


class RouteTableClient:
    """A nameserver in process: a RouteTable that can be 'restarted' (replaced)."""

    def __init__(self, addr: str) -> None:
        self.addr = addr
        self.table = RouteTable(clock=ManualClock(), default_heartbeat_timeout_ms=120_000)
        self.sent: list[BrokerRegistration] = []

    def restart(self) -> None:
        self.table = RouteTable(clock=ManualClock(), default_heartbeat_timeout_ms=120_000)

    async def register(self, reg: BrokerRegistration, *, timeout_s: float) -> RegisterReply:
        self.sent.append(reg)
        base = reg.base_version
        update = TopicUpdate(
            base_version=DataVersion(base.timestamp_ms, base.counter) if base else None,
            deleted=tuple(reg.deleted_topics),
            chunk_index=reg.chunk_index,
            chunk_count=reg.chunk_count,
        )
        result = self.table.register_broker(
            BrokerIdentity(
                cluster=reg.cluster_name,
                broker_name=reg.broker_name,
                broker_addr=reg.broker_addr,
                broker_id=reg.broker_id,
            ),
            DataVersion(reg.data_version.timestamp_ms, reg.data_version.counter),
            [
                RegisteredTopicConfig(
                    topic_name=tc.topic_name,
                    read_queue_nums=tc.read_queue_nums,
                    write_queue_nums=tc.write_queue_nums,
                    perm=tc.perm,
                )
                for tc in reg.topic_configs
            ],
            update=update,
        )
        return RegisterReply(
            topic_configs_accepted=result.topic_configs_accepted,
            full_table_needed=result.full_table_needed,
            request_bytes=len(reg.topic_configs) * 40 + 100,
        )

    async def unregister(self, reg, *, timeout_s):
        return True

    async def close(self):
        pass


def make(tmp_path, chunk_topics=50):
    topics = TopicConfigManager(
        str(tmp_path),
        broker_name="broker-a",
        cluster_name="DefaultCluster",
        clock=ManualClock(),
        max_queues_total=1_000_000,
    )
    topics.load()
    clients: dict[str, RouteTableClient] = {}

    def factory(addr):
        clients[addr] = RouteTableClient(addr)
        return clients[addr]

    service = RegisterBrokerService(
        ["ns1:9876"],
        topics,
        cluster_name="DefaultCluster",
        broker_name="broker-a",
        broker_addr="127.0.0.1:10911",
        client_factory=factory,
        chunk_topics=chunk_topics,
    )
    return service, topics, clients["ns1:9876"]


def many(prefix: str, n: int) -> list[BrokerTopicConfig]:
    return [BrokerTopicConfig(topic_name=f"{prefix}{i:05d}") for i in range(n)]


async def test_a_one_topic_change_sends_only_that_topic_as_a_delta(tmp_path):
    service, topics, ns = make(tmp_path)
    topics.create_many(many("T", 300))
    await service.run_once()
    first_round = len(ns.sent)
    assert first_round == 7 and all(r.base_version is None for r in ns.sent)  # 300+ in 50s
    topics.create(BrokerTopicConfig(topic_name="OneMore"))
    await service.run_once()
    delta = ns.sent[-1]
    assert len(ns.sent) == first_round + 1 and delta.base_version is not None
    assert [tc.topic_name for tc in delta.topic_configs] == ["OneMore"]
    assert ns.table.get_route("OneMore") is not None
    assert ns.table.topic_count == len(topics)


async def test_an_unchanged_table_sends_an_empty_delta(tmp_path):
    service, topics, ns = make(tmp_path)
    await service.run_once()
    await service.run_once()
    assert ns.sent[-1].base_version == topics.data_version and ns.sent[-1].topic_configs == []
    assert service.full_tables_sent == 1


async def test_a_deleted_topic_leaves_the_routes_through_a_delta(tmp_path):
    service, topics, ns = make(tmp_path)
    topics.create_many(many("D", 3))
    await service.run_once()
    topics.delete_many(["D00000", "D00001"])
    await service.run_once()
    assert ns.sent[-1].deleted_topics == ["D00000", "D00001"]
    assert ns.table.get_route("D00000") is None and ns.table.get_route("D00002") is not None


async def test_a_restarted_nameserver_gets_the_full_table_once_in_chunks(tmp_path):
    service, topics, ns = make(tmp_path, chunk_topics=100)
    topics.create_many(many("R", 1000))
    await service.run_once()
    ns.restart()
    ns.sent.clear()
    await service.run_once()  # delta refused (no base): the table, in chunks
    assert ns.sent[0].base_version is not None
    chunks = ns.sent[1:]
    assert len(chunks) == 11 and {c.chunk_count for c in chunks} == {11}
    assert [c.chunk_index for c in chunks] == list(range(11))
    assert max(len(c.topic_configs) for c in chunks) <= 100
    assert ns.table.topic_count == len(topics)
    ns.sent.clear()
    await service.run_once()  # once: then deltas again
    assert len(ns.sent) == 1 and ns.sent[0].base_version is not None


async def test_a_chunked_table_is_routed_only_once_complete(tmp_path):
    table = RouteTable(clock=ManualClock(), default_heartbeat_timeout_ms=120_000)
    broker = BrokerIdentity(cluster="C", broker_name="b", broker_addr="127.0.0.1:1", broker_id=0)
    version = DataVersion(1, 5)
    cfg = [
        RegisteredTopicConfig(topic_name=f"X{i}", read_queue_nums=1, write_queue_nums=1)
        for i in range(4)
    ]
    table.register_broker(broker, version, cfg[:2], update=TopicUpdate(chunk_count=2))
    assert table.get_route("X0") is None  # staged, not routed yet
    out_of_order = table.register_broker(
        broker, version, cfg[2:], update=TopicUpdate(chunk_index=1, chunk_count=3)
    )
    assert out_of_order.full_table_needed and table.get_route("X3") is None
    table.register_broker(broker, version, cfg[:2], update=TopicUpdate(chunk_count=2))
    done = table.register_broker(
        broker, version, cfg[2:], update=TopicUpdate(chunk_index=1, chunk_count=2)
    )
    assert done.topic_configs_accepted and table.topics() == ["X0", "X1", "X2", "X3"]


def test_topic_pages_walk_the_table_in_order(tmp_path):
    table = RouteTable(clock=ManualClock(), default_heartbeat_timeout_ms=120_000)
    broker = BrokerIdentity(cluster="C", broker_name="b", broker_addr="127.0.0.1:1", broker_id=0)
    table.register_broker(
        broker,
        DataVersion(1, 1),
        [
            RegisteredTopicConfig(topic_name=f"P{i:03d}", read_queue_nums=2, write_queue_nums=2)
            for i in range(250)
        ],
    )
    seen, after = [], ""
    while True:
        rows, brokers, after = table.topic_page(after, 100)
        seen.extend(topic for topic, _ in rows)
        assert set(brokers) == {"b"}
        if not after:
            break
    assert seen == [f"P{i:03d}" for i in range(250)]
