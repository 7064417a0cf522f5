"""One SparkSession (``local[2,2]``: 2 threads, 2 attempts a task) and one cluster for
every Spark test.

Starting Spark costs 5-10 s on a small machine, so the session is
session-scoped and shared; so is the cluster, a nameserver and two brokers
(``clusterkit``, 4 queues each) served in this process by an event loop on a
thread of its own while Spark's Python workers, separate processes, pull from
them and send to them over gRPC. Each test uses topics of its own.

The session is built without ``pocketmq.spark.register``: right after it
starts, the fixture asks Spark whether it found the ``pocketmq`` format by
itself (the ``pyspark_pocketmq`` discovery shim); tests that need the
``pocketmq-store`` reader call ``register``.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
from collections.abc import Coroutine, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from clusterkit import QUEUES, Cluster, two_broker_cluster
from loopkit import LoopThread
from waitkit import eventually_sync

from pocketmq.broker.topic_config import BrokerTopicConfig
from pocketmq.client import Message, SendResult
from pocketmq.client.sync import SyncProducer


@dataclass
class LiveCluster:
    """The in-process cluster and a producer for the tests' messages."""

    cluster: Cluster
    loop: asyncio.AbstractEventLoop
    root: Path
    producer: SyncProducer

    @property
    def namesrv(self) -> str:
        return self.cluster.addr

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def data_dir(self, broker_name: str) -> str:
        return str(self.root / broker_name)

    def create_topic(self, topic: str, queues: int = QUEUES) -> None:
        """Create *topic* on both brokers and wait until the nameserver routes it to both."""

        async def create() -> None:
            for broker in self.cluster.brokers:
                broker.topics.create(
                    BrokerTopicConfig(
                        topic_name=topic, read_queue_nums=queues, write_queue_nums=queues
                    )
                )

        self.run(create())

        def on_every_broker() -> bool:
            route = self.cluster.namesrv.route_table.get_route(topic)
            return route is not None and len(route.queue_datas) == len(self.cluster.brokers)

        eventually_sync(
            on_every_broker,
            timeout_s=10,
            interval_s=0.02,
            what=f"route of {topic} on both brokers",
        )

    def send(
        self, topic: str, count: int, *, start: int = 0, tags: Sequence[str] = ("TagA", "TagB")
    ) -> list[SendResult]:
        """*count* messages ``{topic}-{i}``, tags alternating, key ``k{i}``, a property."""
        return [
            self.producer.send(
                Message(
                    topic=topic,
                    body=f"{topic}-{i}".encode(),
                    tags=tags[i % len(tags)],
                    keys=[f"k{i}"],
                    properties={"seq": str(i)},
                )
            )
            for i in range(start, start + count)
        ]


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    import uvloop

    thread = LoopThread("spark-tests-cluster", uvloop.new_event_loop())
    root = tmp_path_factory.mktemp("spark-cluster")
    manager = two_broker_cluster(root)
    started = thread.run(manager.__aenter__())
    producer = SyncProducer(group="spark-tests", namesrv=started.addr)
    try:
        yield LiveCluster(started, thread.loop, root, producer)
    finally:
        producer.shutdown()
        thread.run(manager.__aexit__(None, None, None))
        thread.close()


@dataclass
class SparkFixture:
    session: Any  # pyspark.sql.SparkSession
    discovered: bool  # "pocketmq" was found with no register call


@pytest.fixture(scope="session")
def spark_fixture() -> Iterator[SparkFixture]:
    from pyspark.sql import SparkSession

    from pocketmq.spark import QUIET_CONF

    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers must have pyarrow and pocketmq
    # local[2,2]: two threads, and a failed task is retried once (the sink's retry tests)
    builder = SparkSession.builder.master("local[2,2]").appName("pocketmq-spark-tests")
    for key, value in QUIET_CONF.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    # Nothing registered yet: a known "pocketmq" here came from Spark's own discovery.
    manager = session._jsparkSession.sessionState().dataSourceManager()
    discovered = bool(manager.dataSourceExists("pocketmq"))
    try:
        yield SparkFixture(session, discovered)
    finally:
        session.stop()


@pytest.fixture
def spark(spark_fixture: SparkFixture) -> Any:
    return spark_fixture.session


_topic_ids = itertools.count()


@pytest.fixture
def topic(cluster: LiveCluster, request: pytest.FixtureRequest) -> str:
    """A fresh topic with 4 queues on each broker, named after the test."""
    name = f"sp{next(_topic_ids)}-{request.node.name[5:40]}".replace("[", "-").replace("]", "")
    cluster.create_topic(name)
    return name
