"""Brokers and nameservers on port 0 with small stores in ``tmp_path``, and gRPC stubs.

``broker_config(dir_name="data", **overrides)`` builds the small config;
``await start_broker(**overrides)`` (or ``start_broker(config)``) starts one and
stops it at teardown; ``broker`` / ``stub`` are the common single-broker case.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest

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
