"""TLS on the v2 port: the broker's certificate options serve RocketMQ 5 clients too."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from pki import HAVE_OPENSSL, make_pki

from pocketmq.broker.broker import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.topic_config import BrokerTopicConfig
from pocketmq.rmqv2 import definition_pb2 as d
from pocketmq.rmqv2 import service_pb2 as s
from pocketmq.rmqv2 import service_pb2_grpc

from .conftest import QUEUES, SMALL

pytestmark = pytest.mark.skipif(not HAVE_OPENSSL, reason="needs openssl")
META = (("x-mq-client-id", "tls-host@1@0@1"),)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    return make_pki(tmp_path_factory.mktemp("pki"))


async def tls_broker(tmp_path: Path, nameserver: Any, pki: Path, **tls: Any) -> Broker:
    broker = Broker(
        BrokerConfig(
            **SMALL,
            data_dir=str(tmp_path / "b"),
            namesrv_addrs=nameserver.address,
            tls_cert_file=str(pki / "server.pem"),
            tls_key_file=str(pki / "server.key"),
            **tls,
        )
    )
    await broker.start()
    broker.topics.create(
        BrokerTopicConfig(topic_name="secure", read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    )
    return broker


@pytest.fixture
async def broker(tmp_path, nameserver, pki) -> AsyncIterator[Broker]:
    broker = await tls_broker(tmp_path, nameserver, pki)
    yield broker
    await broker.stop(0)


async def query_route(channel: grpc.aio.Channel) -> s.QueryRouteResponse:
    return await service_pb2_grpc.MessagingServiceStub(channel).QueryRoute(
        s.QueryRouteRequest(topic=d.Resource(name="secure")), metadata=META, timeout=5
    )


def credentials(pki: Path, *, client_cert: bool = False) -> grpc.ChannelCredentials:
    pair = {}
    if client_cert:
        pair = {
            "private_key": (pki / "client.key").read_bytes(),
            "certificate_chain": (pki / "client.pem").read_bytes(),
        }
    return grpc.ssl_channel_credentials((pki / "ca.pem").read_bytes(), **pair)


async def test_the_v2_port_serves_tls_with_the_brokers_certificate(broker, pki):
    async with grpc.aio.secure_channel(broker.grpc_v2.address, credentials(pki)) as channel:
        reply = await query_route(channel)
    assert reply.status.code == d.OK
    assert reply.message_queues


async def test_a_plaintext_v2_client_is_refused(broker):
    async with grpc.aio.insecure_channel(broker.grpc_v2.address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await query_route(channel)
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE


async def test_the_v2_port_requires_a_client_certificate_when_the_broker_does(
    tmp_path, nameserver, pki
):
    broker = await tls_broker(
        tmp_path, nameserver, pki, tls_ca_file=str(pki / "ca.pem"), tls_require_client_auth=True
    )
    try:
        async with grpc.aio.secure_channel(broker.grpc_v2.address, credentials(pki)) as channel:
            with pytest.raises(grpc.aio.AioRpcError):
                await query_route(channel)
        async with grpc.aio.secure_channel(
            broker.grpc_v2.address, credentials(pki, client_cert=True)
        ) as channel:
            assert (await query_route(channel)).status.code == d.OK
    finally:
        await broker.stop(0)


async def test_the_official_client_sends_over_tls(broker, pki, agent, monkeypatch):
    # The official client has no CA option: grpc's default roots come from this variable.
    monkeypatch.setenv("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", str(pki / "ca.pem"))
    producer = await agent()
    await producer.call(
        "producer", name="p", endpoints=broker.grpc_v2.address, topics=["secure"], tls=True
    )
    sent = await producer.call("send", producer="p", topic="secure", body="over tls")
    assert sent["message_id"]
