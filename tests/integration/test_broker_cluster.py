"""A real broker and real nameservers on port 0: registration, expiry, re-registration.

Everything goes through gRPC; the broker stores into ``tmp_path``.
"""

from __future__ import annotations

import os

import grpc
import pytest

from pocketmq.broker.broker import Broker
from pocketmq.common.clock import ManualClock
from pocketmq.common.message import encode_record, pack_host
from pocketmq.nameserver import NameServer, NamesrvConfig
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc, nameserver_pb2, nameserver_pb2_grpc


async def route(ns: NameServer, topic: str):
    async with grpc.aio.insecure_channel(ns.address) as channel:
        stub = nameserver_pb2_grpc.NameServerStub(channel)
        try:
            reply = await stub.GetRouteInfoByTopic(
                nameserver_pb2.GetRouteInfoByTopicRequest(topic=topic)
            )
        except grpc.aio.AioRpcError as exc:
            assert exc.code() is grpc.StatusCode.NOT_FOUND
            return None
        return reply.route


async def live_brokers(ns: NameServer) -> list[str]:
    async with grpc.aio.insecure_channel(ns.address) as channel:
        stub = nameserver_pb2_grpc.NameServerStub(channel)
        info = await stub.GetBrokerClusterInfo(nameserver_pb2.GetBrokerClusterInfoRequest())
        return [b.broker_addr for b in info.live_brokers]


@pytest.fixture
async def nameservers():
    clock = ManualClock()
    servers = [
        NameServer(NamesrvConfig(host="127.0.0.1", port=0, broker_expire_seconds=120), clock=clock)
        for _ in range(2)
    ]
    for ns in servers:
        await ns.start()
    yield servers, clock
    for ns in servers:
        await ns.stop(0)


async def test_broker_registers_with_every_nameserver_and_routes_follow_its_topics(
    broker_config, eventually, nameservers
):
    servers, _clock = nameservers
    addrs = ";".join(ns.address for ns in servers)
    broker = Broker(broker_config("broker", namesrv_addrs=addrs, broker_name="broker-x"))
    await broker.start()
    try:
        for ns in servers:
            assert await live_brokers(ns) == [broker.address]
            tbw = await route(ns, "TBW102")
            assert [q.broker_name for q in tbw.queue_datas] == ["broker-x"]
            assert dict(tbw.broker_datas[0].broker_addrs) == {0: broker.address}
        async with grpc.aio.insecure_channel(broker.address) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            record = encode_record(
                topic="NewTopic", body=b"x", queue_id=0, store_host=pack_host(("127.0.0.1", 0))
            )
            await stub.SendMessage(pb.SendMessageRequest(record=record))
        for ns in servers:  # the auto-created topic is registered at once, not in 30 s
            await eventually(lambda ns=ns: route(ns, "NewTopic"))
            new = await route(ns, "NewTopic")
            assert (new.queue_datas[0].write_queue_nums, new.queue_datas[0].perm) == (8, 6)
    finally:
        await broker.stop()


async def test_an_expired_broker_comes_back_at_its_next_registration(broker_config, nameservers):
    servers, clock = nameservers
    ns = servers[0]
    broker = Broker(broker_config("broker", namesrv_addrs=ns.address))
    await broker.start()
    try:
        assert await live_brokers(ns) == [broker.address]
        clock.advance(121)
        assert [b.broker.broker_addr for b in ns.run_once()] == [broker.address]
        assert await live_brokers(ns) == []
        assert await route(ns, "TBW102") is None
        assert await broker.registration.run_once() == 1  # the 30 s round
        assert await live_brokers(ns) == [broker.address]
        assert await route(ns, "TBW102") is not None
    finally:
        await broker.stop()


async def test_a_nameserver_down_at_start_gets_the_broker_when_it_comes_up(
    broker_config, eventually
):
    probe = NameServer(NamesrvConfig(host="127.0.0.1", port=0))
    await probe.start()
    port = probe.port
    await probe.stop(0)
    broker = Broker(
        broker_config("broker", namesrv_addrs=f"127.0.0.1:{port}", register_timeout_seconds=1)
    )
    await broker.start()  # the failure is logged, the broker serves anyway
    try:
        assert broker.registration.registered == {f"127.0.0.1:{port}": False}
        ns = NameServer(NamesrvConfig(host="127.0.0.1", port=port))
        await ns.start()
        try:
            await eventually(lambda: broker.registration.run_once(), timeout_s=10)
            assert await live_brokers(ns) == [broker.address]
        finally:
            await ns.stop(0)
    finally:
        await broker.stop()


async def test_graceful_stop_unregisters_and_leaves_no_abort_file(
    tmp_path, broker_config, nameservers
):
    servers, _clock = nameservers
    broker = Broker(broker_config("broker", namesrv_addrs=";".join(s.address for s in servers)))
    await broker.start()
    assert os.path.exists(tmp_path / "broker" / "abort")
    await broker.stop()
    for ns in servers:
        assert await live_brokers(ns) == []
    assert not os.path.exists(tmp_path / "broker" / "abort")
    assert os.path.exists(tmp_path / "broker" / "config" / "topics.json")
    assert os.path.exists(tmp_path / "broker" / "config" / "consumerOffset.json")
