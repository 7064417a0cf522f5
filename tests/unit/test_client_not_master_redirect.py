"""NOT_MASTER redirect in the SDK: master epochs per broker name in the member table and
the route cache, the error a NOT_MASTER answer becomes, and a producer that retries at
the master a demoted broker names (in-process gRPC servers on port 0, no brokers)."""

from __future__ import annotations

import grpc
import pytest

from pocketmq.broker.errors import BrokerNotMasterError as BrokerNotMaster
from pocketmq.broker.servicer import _abort
from pocketmq.client import Message, Producer
from pocketmq.client.errors import NotMasterError
from pocketmq.client.members import MemberTable
from pocketmq.client.model import SendStatus
from pocketmq.client.route import QueueData, RouteService, TopicRoute
from pocketmq.v1 import broker_pb2 as bpb
from pocketmq.v1 import broker_pb2_grpc, common_pb2, nameserver_pb2, nameserver_pb2_grpc

OLD, NEW, REPLICA = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"


# -- the member table ---------------------------------------------------------------------------
def test_a_redirect_with_a_newer_epoch_moves_the_master_and_drops_its_replica_entry():
    table = MemberTable()
    table.update({"broker-a": {0: OLD, 1: NEW, 2: REPLICA}}, {"broker-a": 3})
    assert table.redirect("broker-a", NEW, 4)
    assert table.members("broker-a") == {0: NEW, 2: REPLICA}
    assert table.master_epoch("broker-a") == 4


def test_a_redirect_with_an_epoch_not_above_the_held_one_is_ignored():
    table = MemberTable()
    table.update({"broker-a": {0: OLD}}, {"broker-a": 3})
    assert not table.redirect("broker-a", NEW, 3)
    assert not table.redirect("broker-a", NEW, 2)
    assert not table.redirect("broker-a", "", 9)  # no master named: nowhere to go
    assert table.master("broker-a") == OLD


def test_a_route_with_a_lower_master_epoch_than_one_seen_is_ignored():
    table = MemberTable()
    table.update({"broker-a": {0: NEW}}, {"broker-a": 5})
    stale = table.update({"broker-a": {0: OLD}}, {"broker-a": 4})
    assert stale == ["broker-a"] and table.master("broker-a") == NEW
    assert table.update({"broker-a": {0: OLD}}, {"broker-a": 6}) == []
    assert table.master("broker-a") == OLD and table.master_epoch("broker-a") == 6


def test_a_route_without_an_epoch_is_taken_as_before():
    table = MemberTable()
    table.update({"broker-a": {0: NEW}}, {"broker-a": 5})
    assert table.update({"broker-a": {0: OLD}}) == []
    assert table.master("broker-a") == OLD


# -- the route cache ----------------------------------------------------------------------------
def route(master: str, epoch: int) -> TopicRoute:
    return TopicRoute(
        topic="orders",
        queue_datas=(QueueData("broker-a", 2, 2, 6),),
        broker_addrs={"broker-a": {0: master}},
        master_epochs={"broker-a": epoch},
    )


async def test_route_cache_keeps_the_newer_master_over_a_lagging_nameservers_route():
    answers = [route(NEW, 2), route(OLD, 1)]

    async def fetch(topic):
        return answers.pop(0)

    routes = RouteService(fetch)
    await routes.refresh("orders")
    await routes.refresh("orders")  # a nameserver that missed the election
    assert routes.addr_of("broker-a") == NEW
    assert routes.cached("orders").master_addr("broker-a") == NEW


async def test_route_cache_redirect_updates_every_cached_route_at_once():
    async def fetch(topic):
        return route(OLD, 1)

    routes = RouteService(fetch)
    await routes.refresh("orders")
    assert routes.redirect("broker-a", NEW, 2)
    assert routes.addr_of("broker-a") == NEW
    assert routes.cached("orders").master_addr("broker-a") == NEW
    assert routes.cached_write_queues("orders")  # still writable, now at NEW
    assert not routes.redirect("broker-a", OLD, 1)


# -- over the wire ------------------------------------------------------------------------------
class FakeNameserver(nameserver_pb2_grpc.NameServerServicer):
    def __init__(self, master: str, epoch: int) -> None:
        self.master, self.epoch = master, epoch

    async def GetRouteInfoByTopic(self, request, context):
        return nameserver_pb2.GetRouteInfoByTopicResponse(
            route=common_pb2.TopicRouteData(
                queue_datas=[
                    common_pb2.QueueData(
                        broker_name="broker-a", read_queue_nums=1, write_queue_nums=1, perm=6
                    )
                ],
                broker_datas=[
                    common_pb2.BrokerData(
                        cluster="c",
                        broker_name="broker-a",
                        broker_addrs={0: self.master},
                        master_epoch=self.epoch,
                    )
                ],
            )
        )


class FakeBroker(broker_pb2_grpc.BrokerServicer):
    """Either a demoted master (answers NOT_MASTER naming *redirect*) or the master."""

    def __init__(self, redirect: tuple[str, int] | None = None) -> None:
        self.redirect = redirect
        self.sends = 0

    async def SendMessage(self, request, context):
        return await self.SendBatch(request, context)

    async def SendBatch(self, request, context):
        self.sends += 1
        if self.redirect is not None:
            addr, epoch = self.redirect
            await _abort(
                context,
                BrokerNotMaster(
                    "this broker is not the master of broker-a",
                    broker_name="broker-a",
                    master_addr=addr,
                    master_epoch=epoch,
                ),
            )
        return bpb.SendMessageResponse(
            status=bpb.SEND_OK,
            msg_ids=["id"],
            queue_ids=[0],
            queue_offsets=[self.sends - 1],
            phys_offsets=[0],
            offset_msg_id_prefix="00" * 8,
        )

    async def HeartBeat(self, request, context):
        return bpb.HeartBeatResponse()

    async def UnregisterClient(self, request, context):
        return bpb.UnregisterClientResponse()


async def serve(add, servicer) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    add(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


@pytest.fixture
async def servers():
    started: list[grpc.aio.Server] = []

    async def start(add, servicer) -> str:
        server, addr = await serve(add, servicer)
        started.append(server)
        return addr

    yield start
    for server in started:
        await server.stop(None)


async def test_a_not_master_answer_becomes_a_retriable_error_naming_the_new_master(servers):
    demoted = FakeBroker(redirect=(NEW, 7))
    addr = await servers(broker_pb2_grpc.add_BrokerServicer_to_server, demoted)
    from pocketmq.client.remoting import BrokerClient

    channel = grpc.aio.insecure_channel(addr)
    try:
        with pytest.raises(NotMasterError) as caught:
            await BrokerClient(addr, channel).send_batch(b"x")
    finally:
        await channel.close()
    err = caught.value
    assert err.retriable and err.reason == "NOT_MASTER" and err.code == "FAILED_PRECONDITION"
    assert (err.broker_name, err.master_addr, err.master_epoch) == ("broker-a", NEW, 7)


async def test_producer_follows_a_not_master_redirect_within_one_send(servers):
    master = FakeBroker()
    new_addr = await servers(broker_pb2_grpc.add_BrokerServicer_to_server, master)
    demoted = FakeBroker(redirect=(new_addr, 2))
    old_addr = await servers(broker_pb2_grpc.add_BrokerServicer_to_server, demoted)
    # The nameserver still routes to the demoted master (it has not heard of epoch 2).
    namesrv = await servers(
        nameserver_pb2_grpc.add_NameServerServicer_to_server, FakeNameserver(old_addr, 1)
    )
    async with Producer(group="pg", namesrv=namesrv, send_timeout_ms=3000) as producer:
        result = await producer.send(Message(topic="orders", body=b"hello"))
        assert result.status is SendStatus.SEND_OK
        assert (demoted.sends, master.sends) == (1, 1)
        # These fakes hand out no producer ids (InitProducerId UNIMPLEMENTED, as an older
        # broker): idempotent by default, the producer still sends, unstamped.
        sessions = producer._sessions
        assert sessions is not None
        session = sessions.current("broker-a")
        assert session is not None and session.producer_id == 0
        # The route refetched after the redirect still names epoch 1: the newer master stays.
        assert producer._routes is not None
        await producer._routes.refresh("orders")
        again = await producer.send(Message(topic="orders", body=b"again"))
        assert again.status is SendStatus.SEND_OK
        assert (demoted.sends, master.sends) == (1, 2)
