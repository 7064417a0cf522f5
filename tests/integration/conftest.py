"""Brokers and nameservers on port 0 with small stores in ``tmp_path``, and gRPC stubs.

``broker_config(dir_name="data", **overrides)`` builds the small config;
``await start_broker(**overrides)`` (or ``start_broker(config)``) starts one and
stops it at teardown; ``broker`` / ``stub`` are the common single-broker case,
``namesrv_addr`` a nameserver with one broker (the CLI tests), ``cluster`` a
nameserver and two brokers (tests/support/clusterkit.py), and ``pocketmq`` the
command run in this process against ``cluster`` (tests/support/clikit.py runs it
as a subprocess).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest
from clikit import pocketmq_main
from clusterkit import Cluster, two_broker_cluster

from pocketmq.broker.broker import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.nameserver import NameServer, NamesrvConfig
from pocketmq.v1 import broker_pb2_grpc

MiB = 1024 * 1024

# Small files so that a test broker starts fast and stays small on disk.
SMALL_BROKER: dict[str, Any] = dict(
    port=0,
    commitlog_file_size_bytes=16 * MiB,
    max_message_size_bytes=MiB,
    max_batch_size_bytes=4 * MiB,
    index_slots=1024,
    index_entries=4096,
    consume_queue_units_per_file=10_000,
)

BrokerConfigFactory = Callable[..., BrokerConfig]
BrokerStarter = Callable[..., Awaitable[Broker]]


@pytest.fixture
def broker_config(tmp_path) -> BrokerConfigFactory:
    """``broker_config(dir_name="data", **overrides)``: data in ``tmp_path / dir_name``."""

    def make(dir_name: str = "data", **overrides: Any) -> BrokerConfig:
        return BrokerConfig(**{**SMALL_BROKER, "data_dir": str(tmp_path / dir_name), **overrides})

    return make


@pytest.fixture
async def start_broker(broker_config) -> AsyncIterator[BrokerStarter]:
    """``await start_broker(config=None, **overrides)``: a started broker, stopped at teardown."""
    started: list[Broker] = []

    async def start(config: BrokerConfig | None = None, **overrides: Any) -> Broker:
        broker = Broker(config or broker_config(**overrides))
        await broker.start()
        started.append(broker)
        return broker

    yield start
    for broker in reversed(started):
        await broker.stop()  # a no-op for one the test stopped itself


@pytest.fixture
async def broker(start_broker) -> Broker:
    return await start_broker()


@pytest.fixture
async def stub(broker) -> AsyncIterator[broker_pb2_grpc.BrokerStub]:
    async with grpc.aio.insecure_channel(broker.address) as channel:
        yield broker_pb2_grpc.BrokerStub(channel)


@pytest.fixture
async def nameserver() -> AsyncIterator[NameServer]:
    server = NameServer(NamesrvConfig(host="127.0.0.1", port=0))
    await server.start()
    yield server
    await server.stop(0)


@pytest.fixture
async def cluster(tmp_path) -> AsyncIterator[Cluster]:
    """A nameserver and brokers broker-a and broker-b, in-process on port 0."""
    async with two_broker_cluster(tmp_path) as started:
        yield started


@pytest.fixture
async def namesrv_addr(nameserver, broker_config) -> AsyncIterator[str]:
    """A nameserver and one broker (two queues a new topic): the nameserver's address."""
    broker = Broker(
        broker_config("broker", namesrv_addrs=nameserver.address, default_topic_queue_nums=2)
    )
    await broker.start()
    yield nameserver.address
    await broker.stop(0)


@pytest.fixture
def pocketmq(capsys, cluster) -> Callable[..., Awaitable[tuple[int, Any, str]]]:
    """``await pocketmq("topic", "list", json_out=True)`` against ``cluster`` (in this
    process): (exit code, output, stderr); the output parsed when ``json_out`` succeeds."""

    async def run(*args: str, json_out: bool = False, namesrv: str | None = None):
        argv = [*args, "--namesrv", namesrv or cluster.addr, *(["--json"] if json_out else [])]
        code, out, err = await pocketmq_main(capsys, *argv)
        return code, json.loads(out) if json_out and code == 0 else out, err

    return run
