"""Settings sent again on the Telemetry stream (telemetry.py, "Settings sent again").

Raw v2 calls, the order a client with several topics makes them. A stream
shows what it carries by its next command: to prove that nothing came between
two points, the test sends settings that differ from the first and reads
their answer next; a re-send still to come after a route answer shows in
``settings_again_pending``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from pocketmq.rmqv2 import definition_pb2 as d
from pocketmq.rmqv2 import service_pb2 as s
from pocketmq.rmqv2 import service_pb2_grpc

from .conftest import V2Cluster

META = (("x-mq-client-id", "settings-host@1@0@abc"),)
READ_TIMEOUT_S = 10.0


def producer_settings(*topics: str) -> s.TelemetryCommand:
    return s.TelemetryCommand(
        settings=d.Settings(
            client_type=d.PRODUCER,
            publishing=d.Publishing(topics=[d.Resource(name=t) for t in topics]),
        )
    )


def topics_of(command: s.TelemetryCommand) -> list[str]:
    assert command.status.code == d.OK and command.HasField("settings"), command
    return [t.name for t in command.settings.publishing.topics]


class Stream:
    """One Telemetry stream: ``await write(command)``, ``await read()``."""

    def __init__(self, stub: service_pb2_grpc.MessagingServiceStub) -> None:
        self._commands: asyncio.Queue[s.TelemetryCommand] = asyncio.Queue()
        self.call = stub.Telemetry(self._iterate(), metadata=META)

    async def _iterate(self) -> AsyncIterator[s.TelemetryCommand]:
        while True:
            yield await self._commands.get()

    async def write(self, command: s.TelemetryCommand) -> None:
        await self._commands.put(command)

    async def read(self) -> s.TelemetryCommand:
        return await asyncio.wait_for(self.call.read(), READ_TIMEOUT_S)


@pytest.fixture
async def stub(v2_cluster: V2Cluster) -> AsyncIterator[service_pb2_grpc.MessagingServiceStub]:
    async with grpc.aio.insecure_channel(v2_cluster.endpoints) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)


async def route(stub: service_pb2_grpc.MessagingServiceStub, topic: str) -> None:
    reply = await stub.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name=topic)), metadata=META)
    assert reply.status.code == d.OK


async def heartbeat(stub: service_pb2_grpc.MessagingServiceStub) -> None:
    reply = await stub.Heartbeat(s.HeartbeatRequest(client_type=d.PRODUCER), metadata=META)
    assert reply.status.code == d.OK


def pending(cluster: V2Cluster) -> bool:
    """Settings of the test's client are to go out again (0.2 s after a route answer)."""
    assert cluster.broker.grpc_v2 is not None and cluster.broker.grpc_v2.telemetry is not None
    return cluster.broker.grpc_v2.telemetry.settings_again_pending(META[0][1])


async def test_settings_answered_before_a_route_query_come_again_after_its_answer(v2_cluster, stub):
    await route(stub, "First")
    stream = Stream(stub)
    await stream.write(producer_settings("First", "Second"))
    answer = await stream.read()

    await route(stub, "Second")  # the client listens only once this is answered

    again = await stream.read()
    assert again == answer
    assert not pending(v2_cluster)
    stream.call.cancel()


async def test_a_stream_answered_after_the_last_route_query_gets_nothing_more(v2_cluster, stub):
    await route(stub, "Only")
    stream = Stream(stub)
    await stream.write(producer_settings("Only"))
    assert topics_of(await stream.read()) == ["Only"]
    assert not pending(v2_cluster)

    await heartbeat(stub)
    await stream.write(producer_settings("Only", "Later"))

    assert topics_of(await stream.read()) == ["Only", "Later"]  # nothing came in between
    stream.call.cancel()


async def test_a_client_that_queried_no_route_here_gets_its_settings_again_on_its_first_heartbeat(
    stub,
):
    stream = Stream(stub)
    await stream.write(producer_settings("Elsewhere"))
    answer = await stream.read()

    await heartbeat(stub)
    again = await stream.read()
    await heartbeat(stub)
    await stream.write(producer_settings("Elsewhere", "Later"))

    assert again == answer
    assert topics_of(await stream.read()) == ["Elsewhere", "Later"]  # once only
    stream.call.cancel()


async def test_route_queries_after_the_first_heartbeat_send_no_settings_again(v2_cluster, stub):
    await route(stub, "Steady")
    stream = Stream(stub)
    await stream.write(producer_settings("Steady"))
    await stream.read()
    await heartbeat(stub)

    await route(stub, "Steady")  # the clients refresh routes every 30 s

    assert not pending(v2_cluster)
    await stream.write(producer_settings("Steady", "Later"))
    assert topics_of(await stream.read()) == ["Steady", "Later"]
    stream.call.cancel()
