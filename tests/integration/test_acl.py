"""A real broker with the ACL on: signed clients work, everyone else gets a clear status."""

from __future__ import annotations

import asyncio
import os

import pytest
from aclmode import APP_ACL

from pocketmq.broker.topic_config import BrokerTopicConfig
from pocketmq.client import (
    AdminClient,
    ClientState,
    ConsumeResult,
    Message,
    PermissionDeniedError,
    Producer,
    PullConsumer,
    PushConsumer,
    RemoteError,
)
from pocketmq.client import (
    TopicConfig as ClientTopicConfig,
)

APP = {"access_key": "app", "secret_key": "app-secret"}


@pytest.fixture
async def secured(tmp_path, start_broker, nameserver, eventually):
    acl = tmp_path / "acl.toml"
    acl.write_text(APP_ACL)
    broker = await start_broker(
        namesrv_addrs=nameserver.address, acl_enable=True, acl_file=str(acl)
    )
    for topic in ("orders", "audit"):
        broker.topics.create(
            BrokerTopicConfig(topic_name=topic, read_queue_nums=2, write_queue_nums=2)
        )
    await eventually(lambda: nameserver.route_table.get_route("audit") is not None, what="routes")
    broker.acl_path = acl
    return broker


async def test_a_signed_producer_and_consumer_move_messages(secured, nameserver, eventually):
    async with Producer(group="pg", namesrv=nameserver.address, **APP) as producer:
        sent = await producer.send(Message(topic="orders", body=b"paid"))
    consumer = PullConsumer(
        group="billing", namesrv=nameserver.address, consume_from="first", **APP
    )
    consumer.subscribe("orders")
    async with consumer:
        got = await eventually(
            lambda: consumer.poll(timeout_s=1), timeout_s=10, what="the message polled"
        )
    assert [m.msg_id for m in got] == [sent.msg_id]


async def test_a_signed_producers_batch_is_signed_and_stored(secured, nameserver):
    before = secured.store.runtime_info()["put_messages_total"]
    async with Producer(group="pg", namesrv=nameserver.address, **APP) as producer:
        results = await producer.send_batch(
            [Message(topic="orders", body=b"b%d" % i) for i in range(3)]
        )
    assert [r.status.name for r in results] == ["SEND_OK"] * 3
    assert int(secured.store.runtime_info()["put_messages_total"]) == int(before) + 3


async def test_an_unsigned_batch_is_refused(secured, nameserver):
    before = secured.store.runtime_info()["put_messages_total"]
    async with Producer(
        group="pg", namesrv=nameserver.address, retry_times_when_send_failed=0, send_timeout_ms=1500
    ) as producer:
        with pytest.raises(RemoteError, match="requires signed requests"):
            await producer.send_batch([Message(topic="orders", body=b"x")])
    assert secured.store.runtime_info()["put_messages_total"] == before


@pytest.mark.parametrize(
    ("credentials", "words"),
    [
        ({}, "requires signed requests"),
        ({"access_key": "app", "secret_key": "wrong"}, "does not match"),
        ({"access_key": "ghost", "secret_key": "x"}, "'ghost' is unknown"),
    ],
)
async def test_unsigned_or_badly_signed_sends_are_refused(secured, nameserver, credentials, words):
    before = secured.store.runtime_info()["put_messages_total"]
    async with Producer(
        group="pg",
        namesrv=nameserver.address,
        retry_times_when_send_failed=0,
        send_timeout_ms=1500,
        **credentials,
    ) as producer:
        with pytest.raises(RemoteError, match=words):
            await producer.send(Message(topic="orders", body=b"x"))
    assert secured.store.runtime_info()["put_messages_total"] == before


async def test_no_pub_on_a_topic_is_refused_naming_user_topic_and_permission(secured, nameserver):
    async with Producer(
        group="pg", namesrv=nameserver.address, retry_times_when_send_failed=0, **APP
    ) as producer:
        with pytest.raises(
            PermissionDeniedError, match="'app' has no PUB permission on topic 'audit'"
        ):
            await producer.send(Message(topic="audit", body=b"x"))


async def test_no_sub_on_a_group_is_refused(secured, nameserver):
    consumer = PullConsumer(group="reporting", namesrv=nameserver.address, **APP)
    consumer.assign([])
    async with consumer:
        queues = await consumer.fetch_message_queues("orders")
        broker = consumer._broker(queues[0].broker_name)
        with pytest.raises(PermissionDeniedError, match="no SUB permission on group 'reporting'"):
            await broker.query_consumer_offset("reporting", queues[0])


@pytest.mark.parametrize(
    ("group", "topic", "words"),
    [
        ("reporting", "orders", "access key 'app' has no SUB permission on group 'reporting'"),
        ("billing", "payroll", "access key 'app' has no SUB permission on topic 'payroll'"),
    ],
)
async def test_a_push_consumer_the_acl_refuses_fails_at_start_naming_key_and_resource(
    secured, nameserver, eventually, group, topic, words
):
    secured.topics.create(
        BrokerTopicConfig(topic_name="payroll", read_queue_nums=1, write_queue_nums=1)
    )
    await eventually(lambda: nameserver.route_table.get_route("payroll") is not None, what="route")
    consumer = PushConsumer(group=group, namesrv=nameserver.address, **APP)
    consumer.subscribe(topic)
    consumer.listener(lambda msgs: ConsumeResult.CONSUME_SUCCESS)

    with pytest.raises(PermissionDeniedError, match=words) as refused:
        await consumer.start()

    assert f"consumer group {group!r} may not consume here" in str(refused.value)
    assert consumer.state is ClientState.SHUT_DOWN
    assert secured.topics.get(f"%RETRY%{group}") is None
    await consumer.shutdown()  # already shut down: a no-op


async def test_a_push_consumer_with_its_permissions_starts_and_consumes(
    secured, nameserver, eventually
):
    async with Producer(group="pg", namesrv=nameserver.address, **APP) as producer:
        sent = await producer.send(Message(topic="orders", body=b"paid"))
    got: list[str] = []
    consumer = PushConsumer(
        group="billing", namesrv=nameserver.address, consume_from="first", **APP
    )
    consumer.subscribe("orders")

    @consumer.listener
    def handle(msgs):
        got.extend(m.msg_id for m in msgs)
        return ConsumeResult.CONSUME_SUCCESS

    async with consumer:
        await eventually(lambda: got, timeout_s=10, what="the message")
    assert got == [sent.msg_id]


async def test_only_an_admin_creates_topics(secured, nameserver):
    config = ClientTopicConfig(topic="new-topic", read_queue_nums=1, write_queue_nums=1)
    async with AdminClient(nameserver.address, **APP) as admin:
        with pytest.raises(PermissionDeniedError, match="CreateTopic is an admin request"):
            await admin.create_topic(secured.address, config)
    async with AdminClient(
        nameserver.address, access_key="admin", secret_key="admin-secret"
    ) as admin:
        await admin.create_topic(secured.address, config)
    assert secured.topics.get("new-topic") is not None


async def test_an_edited_acl_file_applies_without_a_restart(secured, nameserver, eventually):
    async with Producer(
        group="pg", namesrv=nameserver.address, retry_times_when_send_failed=0, **APP
    ) as producer:
        with pytest.raises(PermissionDeniedError):
            await producer.send(Message(topic="audit", body=b"before"))
        secured.acl_path.write_text(APP_ACL.replace('audit = "SUB"', 'audit = "PUB"'))
        stat = secured.acl_path.stat()
        os.utime(secured.acl_path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))

        async def sent() -> bool:
            try:
                await producer.send(Message(topic="audit", body=b"after"))
            except PermissionDeniedError:
                return False
            return True

        await eventually(sent, what="the new rule")


async def test_the_cli_signs_with_keys_from_the_environment(
    secured, nameserver, monkeypatch, capsys
):
    from pocketmq.cli import main

    argv = ["send", "orders", "from the cli", "--namesrv", nameserver.address]
    assert await asyncio.to_thread(main, argv) == 1  # unsigned: refused
    assert "requires signed requests" in capsys.readouterr().err
    monkeypatch.setenv("POCKETMQ_ACCESS_KEY", "app")
    monkeypatch.setenv("POCKETMQ_SECRET_KEY", "app-secret")
    assert await asyncio.to_thread(main, argv) == 0


async def test_an_acl_nameserver_takes_registrations_from_admins_and_routes_for_users(
    tmp_path, start_broker, eventually
):
    from pocketmq.client import RouteNotFoundError
    from pocketmq.nameserver import NameServer, NamesrvConfig

    acl = tmp_path / "acl.toml"
    acl.write_text(APP_ACL)
    nameserver = NameServer(
        NamesrvConfig(host="127.0.0.1", port=0, acl_enable=True, acl_file=str(acl))
    )
    await nameserver.start()
    try:
        outsider = await start_broker(
            dir_name="outsider", broker_name="broker-x", namesrv_addrs=nameserver.address
        )
        member = await start_broker(
            dir_name="member",
            namesrv_addrs=nameserver.address,
            access_key="admin",
            secret_key="admin-secret",
        )
        member.topics.create(
            BrokerTopicConfig(topic_name="orders", read_queue_nums=1, write_queue_nums=1)
        )
        await eventually(
            lambda: nameserver.route_table.get_route("orders") is not None,
            what="the signed registration",
        )
        assert nameserver.route_table.live_broker(outsider.address) is None
        async with Producer(group="pg", namesrv=nameserver.address, **APP) as producer:
            assert await producer.fetch_publish_queues("orders")
        async with Producer(group="pg", namesrv=nameserver.address) as anonymous:
            with pytest.raises((RouteNotFoundError, RemoteError)):
                await anonymous.fetch_publish_queues("orders")
    finally:
        await nameserver.stop(0)


async def test_a_named_producers_id_is_keyed_with_its_accounts_secret(secured):
    """From an access key and an identity alone (neither is secret) nobody computes
    another account's producer id: stamping records with it would get the owner's
    next records answered as duplicates and dropped."""
    from pocketmq.broker.idempotence import named_producer_id
    from pocketmq.client.config import Transport
    from pocketmq.client.remoting import Remoting
    from pocketmq.common.auth import Credentials

    remoting = Remoting(Transport(Credentials("app", "app-secret")))
    try:
        pid, _epoch, _seqs = await remoting.broker(f"127.0.0.1:{secured.port}").init_producer_id(
            identity="orders-writer", topics=["orders"], producer_group="pg", timeout_s=5
        )
    finally:
        await remoting.close()
    assert pid == named_producer_id("app", "orders-writer", "app-secret")
    assert pid != named_producer_id("app", "orders-writer"), "computable without the secret"
