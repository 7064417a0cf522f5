"""TLS on the nameserver and the broker: the SDK works over it, plaintext does not get in.

Certificates are made at test time with the ``openssl`` command: a throwaway
CA, a server certificate for 127.0.0.1 and a client certificate.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from pki import HAVE_OPENSSL, make_pki

from pocketmq.broker.topic_config import BrokerTopicConfig
from pocketmq.client import Message, Producer, PullConsumer
from pocketmq.nameserver import NameServer, NamesrvConfig
from pocketmq.v1 import nameserver_pb2, nameserver_pb2_grpc

pytestmark = pytest.mark.skipif(not HAVE_OPENSSL, reason="needs openssl")


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
async def tls_cluster(pki, start_broker, eventually):
    server_tls = {"tls_cert_file": str(pki / "server.pem"), "tls_key_file": str(pki / "server.key")}
    nameserver = NameServer(NamesrvConfig(host="127.0.0.1", port=0, **server_tls))
    await nameserver.start()
    broker = await start_broker(
        namesrv_addrs=nameserver.address, namesrv_tls_ca_file=str(pki / "ca.pem"), **server_tls
    )
    broker.topics.create(
        BrokerTopicConfig(topic_name="secure", read_queue_nums=2, write_queue_nums=2)
    )
    await eventually(
        lambda: nameserver.route_table.get_route("secure") is not None,
        what="the broker registered over TLS",
    )
    yield nameserver, broker
    await broker.stop(0)
    await nameserver.stop(0)


async def test_the_sdk_sends_and_consumes_over_tls(pki, tls_cluster):
    nameserver, _ = tls_cluster
    tls = {"tls_ca_file": str(pki / "ca.pem")}
    async with Producer(group="pg", namesrv=nameserver.address, **tls) as producer:
        sent = await producer.send(Message(topic="secure", body=b"over tls"))
    consumer = PullConsumer(group="cg", namesrv=nameserver.address, consume_from="first", **tls)
    consumer.subscribe("secure")
    async with consumer:
        got = []
        for _ in range(20):
            got += await consumer.poll(timeout_s=0.5)
            if got:
                break
    assert [m.msg_id for m in got] == [sent.msg_id]


async def test_a_plaintext_client_is_refused(tls_cluster):
    nameserver, _ = tls_cluster
    async with grpc.aio.insecure_channel(nameserver.address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await nameserver_pb2_grpc.NameServerStub(channel).GetAllTopicList(
                nameserver_pb2.GetAllTopicListRequest(), timeout=3
            )
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE


async def test_a_required_client_certificate_is_enforced(pki, start_broker):
    broker = await start_broker(
        tls_cert_file=str(pki / "server.pem"),
        tls_key_file=str(pki / "server.key"),
        tls_ca_file=str(pki / "ca.pem"),
        tls_require_client_auth=True,
    )
    ca = (pki / "ca.pem").read_bytes()
    from pocketmq.v1 import broker_pb2, broker_pb2_grpc

    request = broker_pb2.GetQueueOffsetRequest(topic="TBW102", queue_id=0)
    without = grpc.ssl_channel_credentials(ca)
    async with grpc.aio.secure_channel(broker.address, without) as channel:
        with pytest.raises(grpc.aio.AioRpcError):
            await broker_pb2_grpc.BrokerStub(channel).GetMaxOffset(request, timeout=3)
    with_cert = grpc.ssl_channel_credentials(
        ca, (pki / "client.key").read_bytes(), (pki / "client.pem").read_bytes()
    )
    async with grpc.aio.secure_channel(broker.address, with_cert) as channel:
        reply = await broker_pb2_grpc.BrokerStub(channel).GetMaxOffset(request, timeout=3)
    assert reply.offset == 0
