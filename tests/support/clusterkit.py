"""A nameserver and two brokers in-process (port 0), for client tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from pocketmq.broker.broker import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.topic_config import BrokerTopicConfig
from pocketmq.nameserver import NameServer, NamesrvConfig

QUEUES = 4  # per broker


@dataclass
class Cluster:
    namesrv: NameServer
    brokers: list[Broker]

    @property
    def addr(self) -> str:
        return self.namesrv.address


@asynccontextmanager
async def two_broker_cluster(data_dir: Path) -> AsyncIterator[Cluster]:
    namesrv = NameServer(NamesrvConfig(host="127.0.0.1", port=0))
    await namesrv.start()
    brokers: list[Broker] = []
    try:
        for name in ("broker-a", "broker-b"):
            broker = Broker(
                BrokerConfig(
                    broker_name=name,
                    port=0,
                    data_dir=str(data_dir / name),
                    namesrv_addrs=namesrv.address,
                    commitlog_file_size_bytes=16 * 1024 * 1024,
                    index_slots=1000,
                    index_entries=4000,
                    default_topic_queue_nums=QUEUES,
                )
            )
            await broker.start()
            brokers.append(broker)
        yield Cluster(namesrv, brokers)
    finally:
        for broker in brokers:
            await broker.stop(0)
        await namesrv.stop(0)


async def create_topic(cluster: Cluster, topic: str, eventually, queues: int = QUEUES) -> None:  # type: ignore[no-untyped-def]
    """Create *topic* on every broker and wait until the nameserver routes it to all."""
    for broker in cluster.brokers:
        broker.topics.create(
            BrokerTopicConfig(topic_name=topic, read_queue_nums=queues, write_queue_nums=queues)
        )

    def routed() -> bool:
        route = cluster.namesrv.route_table.get_route(topic)
        return route is not None and len(route.queue_datas) == len(cluster.brokers)

    await eventually(routed, what=f"route of {topic} on both brokers")
