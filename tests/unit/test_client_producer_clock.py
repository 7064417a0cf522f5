"""The producer's deadlines run on the clock it was given (client/producer.py)."""

from __future__ import annotations

import time

import grpc
import pytest

from pocketmq.client import ClientState, Message, Producer, SendTimeoutError
from pocketmq.v1 import nameserver_pb2_grpc


class LeapingClock:
    """Wall time as is; a monotonic clock that leaps 10 s each time it is read."""

    def __init__(self) -> None:
        self.reads = 0

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        self.reads += 1
        return 10.0 * self.reads


class CountingNameserver(nameserver_pb2_grpc.NameServerServicer):
    def __init__(self) -> None:
        self.route_calls = 0

    async def GetRouteInfoByTopic(self, request, context):  # type: ignore[no-untyped-def]
        self.route_calls += 1
        await context.abort(grpc.StatusCode.NOT_FOUND, f"no route for {request.topic}")


@pytest.fixture
async def nameserver():
    server = grpc.aio.server()
    servicer = CountingNameserver()
    nameserver_pb2_grpc.add_NameServerServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield servicer, f"127.0.0.1:{port}"
    await server.stop(None)


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
async def test_a_send_whose_budget_the_injected_clock_has_spent_times_out_untried(
    nameserver, idempotent
):
    servicer, addr = nameserver
    clock = LeapingClock()
    async with Producer(
        group="pg", namesrv=addr, clock=clock, idempotent=idempotent, send_timeout_ms=3000
    ) as producer:
        assert producer.state is ClientState.RUNNING
        with pytest.raises(SendTimeoutError, match="within 3000 ms"):
            await producer.send(Message(topic="orders", body=b"x"))
    assert servicer.route_calls == 0  # the deadline passed before any route was asked for
    assert clock.reads >= 2
    assert producer.state == "shut down"  # a string enum: the old comparisons hold
