"""Replication under the broker's TLS and ACL: a replica copies as an admin, over TLS."""

from __future__ import annotations

import pytest
from pki import HAVE_OPENSSL, make_pki

from pocketmq.broker.topic_config import BrokerTopicConfig
from pocketmq.client import Message, Producer, SendStatus
from pocketmq.nameserver import NameServer, NamesrvConfig

pytestmark = pytest.mark.skipif(not HAVE_OPENSSL, reason="needs the openssl command")

TOPIC = "orders"
ACL = """
[[accounts]]
access_key = "ops"
secret_key = "ops-secret"
admin = true

[[accounts]]
access_key = "app"
secret_key = "app-secret"
default_topic_perm = "PUB|SUB"
default_group_perm = "PUB|SUB"
"""


@pytest.fixture
def pki(tmp_path):
    return make_pki(tmp_path)


@pytest.fixture
async def nameserver(pki):
    """A nameserver serving TLS too: the SDK's TLS settings hold for every server."""
    server = NameServer(
        NamesrvConfig(
            host="127.0.0.1",
            port=0,
            tls_cert_file=str(pki / "server.pem"),
            tls_key_file=str(pki / "server.key"),
        )
    )
    await server.start()
    yield server
    await server.stop(0)


@pytest.fixture
def secured(tmp_path, pki, broker_config, nameserver):
    acl = tmp_path / "acl.toml"
    acl.write_text(ACL)

    def make(name, *, role, broker_id, access_key="ops", secret_key="ops-secret"):
        return broker_config(
            name,
            broker_name="broker-a",
            broker_role=role,
            broker_id=broker_id,
            port=0,
            ha_port=0,
            grpc_v2_port=-1,
            namesrv_addrs=nameserver.address,
            register_interval_seconds=0.2,
            namesrv_tls_ca_file=str(pki / "ca.pem"),
            acl_enable=True,
            acl_file=str(acl),
            access_key=access_key,
            secret_key=secret_key,
            tls_cert_file=str(pki / "server.pem"),
            tls_key_file=str(pki / "server.key"),
            tls_ca_file=str(pki / "ca.pem"),
        )

    return make, pki


async def test_a_replica_signed_as_an_admin_copies_over_tls(
    secured, start_broker, nameserver, eventually
):
    make, pki = secured
    master = await start_broker(make("master", role="SYNC_MASTER", broker_id=0))
    master.topics.create(BrokerTopicConfig(topic_name=TOPIC, read_queue_nums=1, write_queue_nums=1))
    replica = await start_broker(make("replica", role="SLAVE", broker_id=1))
    await eventually(lambda: master.ha.replication.in_sync() == 1, what="replica in sync")
    await eventually(
        lambda: (
            (r := nameserver.route_table.get_route(TOPIC)) is not None
            and r.queue_datas[0].write_queue_nums == 1
        ),
        what="route",
    )
    async with Producer(
        group="pg",
        namesrv=nameserver.address,
        access_key="app",
        secret_key="app-secret",
        tls_ca_file=str(pki / "ca.pem"),
    ) as producer:
        results = [await producer.send(Message(topic=TOPIC, body=b"%d" % i)) for i in range(5)]
    assert {r.status for r in results} == {SendStatus.SEND_OK}  # SYNC: on the replica too
    assert replica.store.max_offset(TOPIC, 0) == 5


async def test_a_replica_without_an_admin_key_is_refused(secured, start_broker, eventually):
    make, _pki = secured
    master = await start_broker(make("master", role="ASYNC_MASTER", broker_id=0))
    replica = await start_broker(
        make("replica", role="SLAVE", broker_id=1, access_key="app", secret_key="app-secret")
    )
    await eventually(
        lambda: "admin" in replica.ha.runtime_info().get("ha_last_error", ""),
        what="the refusal of a non-admin replica",
    )
    assert master.ha.replication.in_sync() == 0
