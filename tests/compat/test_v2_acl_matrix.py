"""The v2 port with the ACL on: every RPC is authorized for every resource it touches.

Users (``ACL`` below): ``owner`` owns topic ``secret`` and group ``owner_group``;
``outsider`` has its own ``outsider_topic`` / ``outsider_group``, PUB only on
``pub_only``, SUB only on ``sub_only``, and nothing on the owner's. The
matrix takes the RPCs from the service descriptor, so a new RPC without a row
fails :func:`test_every_rpc_has_a_row`; each row lists the resources the RPC
touches, and each resource is tried as the outsider's own (allowed), one it
lacks the permission for (denied) and the owner's (another user's). The named
tests after it are the attacks this file was written for, one each.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.protobuf.duration_pb2 import Duration
from waitkit import eventually

from pocketmq.broker.broker import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.topic_config import BrokerTopicConfig
from pocketmq.nameserver import NameServer, NamesrvConfig
from pocketmq.rmqv2 import definition_pb2 as d
from pocketmq.rmqv2 import service_pb2 as s

from .conftest import QUEUES, SMALL, AgentError
from .v2_users import R, V2User, consumer_settings, producer_settings

ACL = """
[[accounts]]
access_key = "owner"
secret_key = "owner-secret"
topic_perms = { secret = "PUB|SUB" }
group_perms = { owner_group = "SUB" }

[[accounts]]
access_key = "outsider"
secret_key = "outsider-secret"
topic_perms = { outsider_topic = "PUB|SUB", pub_only = "PUB", sub_only = "SUB" }
group_perms = { outsider_group = "SUB", deny_group = "DENY" }

[[accounts]]
access_key = "admin"
secret_key = "admin-secret"
admin = true
"""
TOPICS = ("secret", "outsider_topic", "pub_only", "sub_only")
REFUSED = (d.UNAUTHORIZED, d.FORBIDDEN)


@dataclass
class Acl:
    broker: Broker
    channel: grpc.aio.Channel
    owner: V2User
    outsider: V2User
    admin: V2User

    def puts(self) -> int:
        return int(self.broker.store.runtime_info()["put_messages_total"])


async def start_acl_broker(tmp_path: Any, **overrides: Any) -> tuple[NameServer, Broker]:
    acl = tmp_path / "acl.toml"
    acl.write_text(ACL)
    namesrv = NameServer(NamesrvConfig(host="127.0.0.1", port=0))
    await namesrv.start()
    broker = Broker(
        BrokerConfig(
            **{**SMALL, **overrides},
            data_dir=str(tmp_path / "b"),
            namesrv_addrs=namesrv.address,
            acl_enable=True,
            acl_file=str(acl),
        )
    )
    await broker.start()
    for topic in TOPICS:
        broker.topics.create(
            BrokerTopicConfig(topic_name=topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        )
    return namesrv, broker


async def _acl_env(tmp_path: Any) -> AsyncIterator[Acl]:
    namesrv, broker = await start_acl_broker(tmp_path)
    try:
        async with grpc.aio.insecure_channel(broker.grpc_v2.address) as channel:
            yield Acl(
                broker,
                channel,
                V2User(channel, "owner", "owner-secret"),
                V2User(channel, "outsider", "outsider-secret"),
                V2User(channel, "admin", "admin-secret"),
            )
    finally:
        await broker.stop(0)
        await namesrv.stop(0)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared(tmp_path_factory) -> AsyncIterator[Acl]:
    """One broker for the whole matrix; each case makes the messages it needs."""
    async for env in _acl_env(tmp_path_factory.mktemp("acl-matrix")):
        assert (await env.owner.heartbeat("owner_group")).code == d.OK  # binds its id
        yield env


@pytest.fixture
async def env(tmp_path) -> AsyncIterator[Acl]:
    async for env in _acl_env(tmp_path):
        yield env


async def in_flight(user: V2User, topic: str, group: str) -> str:
    """A fresh message of *user*'s in *topic*, received by *group*: its receipt handle."""
    assert (await user.send(topic)).status.code == d.OK

    async def received() -> str | None:
        status, messages = await user.receive(topic, group)
        assert status.code in (d.OK, d.MESSAGE_NOT_FOUND), status
        return messages[0].system_properties.receipt_handle if messages else None

    return await eventually(
        received, timeout_s=10, interval_s=0.02, what=f"a message of {topic} for {group}"
    )


async def open_half(user: V2User, topic: str) -> str:
    """The transaction id of a fresh half message of *user*'s in *topic*."""
    reply = await user.send(topic, transactional=True)
    assert reply.status.code == d.OK, reply.status
    return reply.entries[0].transaction_id


# -- the matrix ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Names:
    """What one call names; the outsider's own unless a case replaces one."""

    topic: str = "outsider_topic"
    group: str = "outsider_group"
    handle: str = ""  # a receipt handle
    txid: str = ""  # a half message's transaction id
    client_id: str = ""  # "" = the caller's own


Call = Callable[[Acl, Names], Awaitable[d.Status]]


def _mq(topic: str) -> d.MessageQueue:
    return d.MessageQueue(topic=R(topic), id=0)


async def _unary(env: Acl, n: Names, rpc: str, request: Any) -> d.Status:
    reply = await getattr(env.outsider.stub, rpc)(
        request, metadata=env.outsider.meta(n.client_id or None), timeout=10
    )
    return reply.status


async def _stream_status(call: Any) -> d.Status:
    async for frame in call:
        if frame.HasField("status"):
            return frame.status
    raise AssertionError("a stream without a status")


async def _telemetry(env: Acl, n: Names, command: s.TelemetryCommand) -> d.Status:
    async with env.outsider.telemetry(client_id=n.client_id or None) as stream:
        await stream.write(command)
        reply = await stream.read()
    assert reply is not None and reply.HasField("status"), reply
    if reply.status.code == d.OK:  # what was denied is gone from the settings it got
        declared = {t.name for t in reply.settings.publishing.topics} | {
            e.topic.name for e in reply.settings.subscription.subscriptions
        }
        if n.topic != "outsider_topic":
            assert n.topic not in declared and "dropped" in reply.status.message, reply
            return d.Status(code=d.FORBIDDEN, message=reply.status.message)
    return reply.status


ROWS: dict[str, dict[str, Call]] = {}


def row(rpc: str, *resources: str) -> Callable[[Call], Call]:
    def register(call: Call) -> Call:
        ROWS[rpc] = {resource: call for resource in resources}
        return call

    return register


@row("QueryRoute", "topic")
async def _query_route(env: Acl, n: Names) -> d.Status:
    return await _unary(env, n, "QueryRoute", s.QueryRouteRequest(topic=R(n.topic)))


@row("Heartbeat", "group", "client_id")
async def _heartbeat(env: Acl, n: Names) -> d.Status:
    return await env.outsider.heartbeat(n.group, client_id=n.client_id or None)


@row("SendMessage", "topic")
async def _send(env: Acl, n: Names) -> d.Status:
    # the denied topic second: the first one must not be stored either
    before = env.puts()
    topics = ["outsider_topic"] + ([n.topic] if n.topic != "outsider_topic" else [])
    status = (await env.outsider.send(*topics)).status
    if status.code in REFUSED:
        assert env.puts() == before, "a refused send stored a message"
    return status


@row("QueryAssignment", "topic", "group")
async def _query_assignment(env: Acl, n: Names) -> d.Status:
    return await _unary(
        env, n, "QueryAssignment", s.QueryAssignmentRequest(topic=R(n.topic), group=R(n.group))
    )


@row("ReceiveMessage", "topic", "group")
async def _receive(env: Acl, n: Names) -> d.Status:
    return (await env.outsider.receive(n.topic, n.group))[0]


@row("AckMessage", "topic", "group", "receipt_handle")
async def _ack(env: Acl, n: Names) -> d.Status:
    return await env.outsider.ack(n.topic, n.group, n.handle)


@row("ChangeInvisibleDuration", "topic", "group", "receipt_handle")
async def _change(env: Acl, n: Names) -> d.Status:
    return await env.outsider.change(n.topic, n.group, n.handle)


@row("ForwardMessageToDeadLetterQueue", "topic", "group", "receipt_handle")
async def _forward(env: Acl, n: Names) -> d.Status:
    return await _unary(
        env,
        n,
        "ForwardMessageToDeadLetterQueue",
        s.ForwardMessageToDeadLetterQueueRequest(
            group=R(n.group),
            topic=R(n.topic),
            receipt_handle=n.handle,
            message_id="m",
            delivery_attempt=1,
            max_delivery_attempts=3,
        ),
    )


@row("PullMessage", "topic", "group")
async def _pull(env: Acl, n: Names) -> d.Status:
    return await _stream_status(
        env.outsider.stub.PullMessage(
            s.PullMessageRequest(
                group=R(n.group),
                message_queue=_mq(n.topic),
                batch_size=1,
                long_polling_timeout=Duration(seconds=0),
            ),
            metadata=env.outsider.meta(),
            timeout=10,
        )
    )


@row("UpdateOffset", "topic", "group")
async def _update_offset(env: Acl, n: Names) -> d.Status:
    return await _unary(
        env,
        n,
        "UpdateOffset",
        s.UpdateOffsetRequest(group=R(n.group), message_queue=_mq(n.topic), offset=0),
    )


@row("GetOffset", "topic", "group")
async def _get_offset(env: Acl, n: Names) -> d.Status:
    return await _unary(
        env, n, "GetOffset", s.GetOffsetRequest(group=R(n.group), message_queue=_mq(n.topic))
    )


@row("QueryOffset", "topic")
async def _query_offset(env: Acl, n: Names) -> d.Status:
    return await _unary(env, n, "QueryOffset", s.QueryOffsetRequest(message_queue=_mq(n.topic)))


@row("EndTransaction", "topic", "record")
async def _end(env: Acl, n: Names) -> d.Status:
    return await env.outsider.end(n.topic, n.txid)


@row("Telemetry", "topic", "group", "client_id")
async def _telemetry_row(env: Acl, n: Names) -> d.Status:
    if n.group != "outsider_group":
        return await _telemetry(env, n, consumer_settings(n.group, "outsider_topic"))
    return await _telemetry(env, n, producer_settings("outsider_topic", n.topic))


@row("NotifyClientTermination", "group", "client_id")
async def _terminate(env: Acl, n: Names) -> d.Status:
    return await env.outsider.terminate(n.group, client_id=n.client_id or None)


@row("RecallMessage", "topic")
async def _recall(env: Acl, n: Names) -> d.Status:
    return await _unary(
        env, n, "RecallMessage", s.RecallMessageRequest(topic=R(n.topic), recall_handle="h")
    )


@row("SyncLiteSubscription", "topic", "group")
async def _sync_lite(env: Acl, n: Names) -> d.Status:
    return await _unary(
        env,
        n,
        "SyncLiteSubscription",
        s.SyncLiteSubscriptionRequest(topic=R(n.topic), group=R(n.group)),
    )


_PUB_RPCS = {"SendMessage", "EndTransaction", "RecallMessage", "Telemetry"}  # the topic: PUB
CASES = ("allowed", "denied", "another_users")
MATRIX = [
    (rpc, resource, case)
    for rpc, resources in ROWS.items()
    for resource in resources
    for case in CASES
]


async def names_for(env: Acl, rpc: str, resource: str, case: str) -> Names:
    """The outsider's own names, with *resource* made *case*."""
    n = Names()
    if rpc in ("AckMessage", "ChangeInvisibleDuration", "ForwardMessageToDeadLetterQueue"):
        n = replace(n, handle=await in_flight(env.outsider, "outsider_topic", "outsider_group"))
    if rpc == "EndTransaction":
        n = replace(n, txid=await open_half(env.outsider, "outsider_topic"))
    if case == "allowed":
        return n
    owners = case == "another_users"
    if resource == "topic":
        lacking = "sub_only" if rpc in _PUB_RPCS else "pub_only"
        if rpc == "QueryRoute":
            lacking = "deny_topic"  # a route needs PUB or SUB
        return replace(n, topic="secret" if owners else lacking)
    if resource == "group":
        return replace(n, group="owner_group" if owners else "deny_group")
    if resource == "receipt_handle":
        # denied: the owner's message under the owner's names; another user's: the owner's
        # handle under the outsider's own names (it must not reach the owner's message)
        handle = await in_flight(env.owner, "secret", "owner_group")
        return (
            replace(n, handle=handle)
            if owners
            else replace(n, handle=handle, topic="secret", group="owner_group")
        )
    if resource == "record":
        txid = await open_half(env.owner, "secret")
        return replace(n, txid=txid) if owners else replace(n, txid=txid, topic="secret")
    assert resource == "client_id"
    return replace(n, client_id=env.owner.client_id)


def test_every_rpc_has_a_row():
    rpcs = {m.name for m in s.DESCRIPTOR.services_by_name["MessagingService"].methods}
    assert set(ROWS) == rpcs


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize(
    ("rpc", "resource", "case"), MATRIX, ids=[f"{r}-{res}-{c}" for r, res, c in MATRIX]
)
async def test_authorization_matrix(shared, rpc, resource, case):
    names = await names_for(shared, rpc, resource, case)
    owner_in_flight = _owner_in_flight(shared.broker)
    secret_puts = _max_offsets(shared.broker, "secret")
    status = await ROWS[rpc][resource](shared, names)
    if case == "allowed":
        assert status.code not in REFUSED, status
    elif resource == "receipt_handle" and case == "another_users":
        # Under the outsider's names the handle can only name the outsider's own messages
        # (one at that offset may be done with already: acking it again is fine).
        assert _owner_in_flight(shared.broker) == owner_in_flight, (
            "the owner's message was acked, changed or dead-lettered",
            status,
        )
    else:
        assert status.code == d.FORBIDDEN, status
        assert status.message, "a refusal says why"
    if case != "allowed":
        assert _max_offsets(shared.broker, "secret") == secret_puts, (
            "a refused call committed or stored a message of the owner's topic"
        )


def _owner_in_flight(broker: Broker) -> dict[int, dict[int, Any]]:
    """The owner's received messages: queue id -> offset -> (attempt, handle serial, deadline)."""
    return {
        key[2]: dict(state.in_flight)
        for key, state in broker.grpc_v2.pop._states.items()
        if key[:2] == ("owner_group", "secret")
    }


def _max_offsets(broker: Broker, topic: str) -> list[int]:
    return [broker.store.max_offset(topic, q) for q in range(QUEUES)]


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("rpc", sorted(ROWS))
async def test_every_rpc_refuses_an_unsigned_call(shared, rpc):
    stranger = V2User(shared.channel, "outsider", "guessed")
    env = replace(shared, outsider=stranger)
    names = Names(handle="0 0 1 broker-a", txid="0" * 32)
    status = await next(iter(ROWS[rpc].values()))(env, names)
    assert status.code == d.UNAUTHORIZED, status
    assert "does not match its secret key" in status.message


# -- the attacks, one each ----------------------------------------------------------------
async def test_send_with_one_denied_topic_stores_nothing(env):
    before = env.puts()
    reply = await env.outsider.send("outsider_topic", "secret")
    assert reply.status.code == d.FORBIDDEN
    assert "no PUB permission on topic 'secret'" in reply.status.message
    assert env.puts() == before
    assert (await env.outsider.send("outsider_topic", "outsider_topic")).status.code == d.OK


@pytest.mark.parametrize(
    "skew_s", [-400, 400, -(25 * 365 * 86400)], ids=["behind", "ahead", "dated-2001"]
)
async def test_expired_signature_is_refused(env, skew_s):
    at = time.time() + skew_s
    status = (
        await env.outsider.stub.QueryRoute(
            s.QueryRouteRequest(topic=R("outsider_topic")),
            metadata=env.outsider.meta(at_s=at),
            timeout=10,
        )
    ).status
    assert status.code == d.UNAUTHORIZED
    # The header has whole seconds and the broker reads its clock later than the test
    # did, by as much as a loaded machine delays the call: the figure is near, not equal.
    said = re.search(r"is (\d+) s (ahead of|behind) the broker's clock", status.message)
    assert said is not None, status.message
    assert abs(int(said[1]) - abs(skew_s)) <= 30, status.message
    assert said[2] == ("ahead of" if skew_s > 0 else "behind")
    assert "±300 s" in status.message
    async with env.outsider.telemetry(at_s=at) as stream:
        refused = await stream.read()
    assert refused is not None and refused.status.code == d.UNAUTHORIZED


async def test_a_signature_within_the_clock_window_is_accepted(env):
    status = (
        await env.outsider.stub.QueryRoute(
            s.QueryRouteRequest(topic=R("outsider_topic")),
            metadata=env.outsider.meta(at_s=time.time() - 200),
            timeout=10,
        )
    ).status
    assert status.code == d.OK, status


async def test_telemetry_declaring_another_users_topic_receives_no_transaction_check(env):
    """The owner leaves a half message open; the outsider declares itself a producer of
    the owner's topic. Every check goes to the owner's stream, none to the outsider's."""
    outsider_frames: list[s.TelemetryCommand] = []
    async with env.owner.telemetry() as owner, env.outsider.telemetry() as outsider:
        await outsider.write(producer_settings("secret", "outsider_topic"))
        reply = await outsider.read()
        assert reply.status.code == d.OK
        assert "publishing topics ['secret'] dropped" in reply.status.message
        assert [t.name for t in reply.settings.publishing.topics] == ["outsider_topic"]
        await owner.write(producer_settings("secret"))
        assert (await owner.read()).status.code == d.OK
        reader = asyncio.create_task(_collect(outsider, outsider_frames))
        try:
            txid = await open_half(env.owner, "secret")
            # Were the outsider registered, the producers of 'secret' would take turns:
            # three checks would reach it at least once.
            for _ in range(3):
                command = await _next_check(owner)
                assert command.recover_orphaned_transaction_command.transaction_id == txid
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await reader
    assert not [f for f in outsider_frames if f.HasField("recover_orphaned_transaction_command")], (
        outsider_frames
    )
    assert env.outsider.client_id not in env.broker.clients.producer_ids("secret")


async def _collect(stream: Any, into: list[s.TelemetryCommand]) -> None:
    async for command in stream.commands():
        into.append(command)


async def _next_check(stream: Any) -> s.TelemetryCommand:
    async with asyncio.timeout(15):
        while True:
            command = await stream.read()
            assert command is not None, "the stream ended"
            if command.HasField("recover_orphaned_transaction_command"):
                return command


async def test_a_denied_publishing_topic_is_not_registered_as_a_producer_group(env):
    async with env.outsider.telemetry() as outsider:
        await outsider.write(producer_settings("secret", "outsider_topic"))
        assert (await outsider.read()).status.code == d.OK
        assert env.outsider.client_id in env.broker.clients.producer_ids("outsider_topic")
        assert env.outsider.client_id not in env.broker.clients.producer_ids("secret")


async def test_subscription_of_another_users_group_is_refused_and_denied_topics_dropped(env):
    async with env.outsider.telemetry() as stream:
        await stream.write(consumer_settings("owner_group", "outsider_topic"))
        refused = await stream.read()
        assert refused.status.code == d.FORBIDDEN
        assert "no SUB permission on group 'owner_group'" in refused.status.message
        await stream.write(consumer_settings("outsider_group", "outsider_topic", "secret"))
        reply = await stream.read()
    assert reply.status.code == d.OK
    assert "subscriptions of topics ['secret'] dropped" in reply.status.message
    assert [e.topic.name for e in reply.settings.subscription.subscriptions] == ["outsider_topic"]


async def test_end_transaction_of_another_users_half_is_refused(env):
    txid = await open_half(env.owner, "secret")
    before = _max_offsets(env.broker, "secret")
    for topic in ("outsider_topic", "secret"):
        status = await env.outsider.end(topic, txid)
        assert status.code == d.FORBIDDEN, status
    assert _max_offsets(env.broker, "secret") == before
    # the half is still open: its owner commits it
    assert (await env.owner.end("secret", txid)).code == d.OK
    assert sum(_max_offsets(env.broker, "secret")) == sum(before) + 1


async def test_another_users_receipt_handle_cannot_be_acked_or_changed(env):
    handle = await in_flight(env.owner, "secret", "owner_group")
    pop = env.broker.grpc_v2.pop
    for topic, group in (
        ("secret", "owner_group"),
        ("outsider_topic", "outsider_group"),
        ("secret", "outsider_group"),
        ("outsider_topic", "owner_group"),
    ):
        assert (await env.outsider.ack(topic, group, handle)).code not in (d.OK,)
        assert (await env.outsider.change(topic, group, handle)).code not in (d.OK,)
    assert pop.in_flight_count("owner_group", "secret") == 1
    assert (await env.owner.ack("secret", "owner_group", handle)).code == d.OK


async def test_change_invisible_duration_is_authorized_like_ack(env):
    handle = await in_flight(env.owner, "secret", "owner_group")
    status = await env.outsider.change("secret", "owner_group", handle)
    assert status.code == d.FORBIDDEN
    assert "no SUB permission on topic 'secret'" in status.message


async def test_a_client_id_bound_to_one_key_cannot_be_used_by_another(env):
    assert (await env.owner.heartbeat("owner_group")).code == d.OK
    theirs = env.owner.client_id
    for status in (
        await env.outsider.heartbeat("outsider_group", client_id=theirs),
        await env.outsider.terminate(client_id=theirs),
    ):
        assert status.code == d.FORBIDDEN
        assert "is in use by another access key" in status.message
    async with env.outsider.telemetry(client_id=theirs) as stream:
        refused = await stream.read()
    assert refused.status.code == d.FORBIDDEN
    assert theirs in env.broker.grpc_v2.telemetry.sessions
    assert (await env.owner.terminate("owner_group")).code == d.OK
    assert theirs not in env.broker.grpc_v2.telemetry.sessions


async def test_the_official_producer_declaring_a_denied_topic_still_sends_to_its_own(env, agent):
    """Denied publishing topics are dropped, not the settings: the official client goes on."""
    producer = await agent()
    await producer.call(
        "producer",
        name="p",
        endpoints=env.broker.grpc_v2.address,
        topics=["outsider_topic", "secret"],
        ak="outsider",
        sk="outsider-secret",
    )
    sent = await producer.call("send", producer="p", topic="outsider_topic", body="mine")
    assert sent["message_id"]
    before = env.puts()
    with pytest.raises(AgentError):
        await producer.call("send", producer="p", topic="secret", body="theirs")
    assert env.puts() == before


async def test_a_key_restricted_to_other_addresses_is_refused_from_this_one(tmp_path):
    namesrv, broker = await start_acl_broker(tmp_path)
    acl = tmp_path / "acl.toml"
    acl.write_text(
        ACL.replace(
            'secret_key = "outsider-secret"',
            'secret_key = "outsider-secret"\nwhite_remote_address = "10.9.9.0/24"',
        )
    )
    later = acl.stat().st_mtime + 1  # a new mtime however fast the two writes were
    os.utime(acl, (later, later))
    assert broker.acl.reload_if_changed()
    try:
        async with grpc.aio.insecure_channel(broker.grpc_v2.address) as channel:
            outsider = V2User(channel, "outsider", "outsider-secret")
            owner = V2User(channel, "owner", "owner-secret")
            refused = (await outsider.send("outsider_topic")).status
            assert (await owner.send("secret")).status.code == d.OK
    finally:
        await broker.stop(0)
        await namesrv.stop(0)
    assert refused.code == d.UNAUTHORIZED
    assert "may not be used from 127.0.0.1" in refused.message


# -- system topics --------------------------------------------------------------------------
SYSTEM = ("SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC")


@pytest.mark.parametrize("topic", SYSTEM)
async def test_system_topics_are_not_routed_received_or_sent_without_the_acl(v2_cluster, topic):
    async with grpc.aio.insecure_channel(v2_cluster.endpoints) as channel:
        anyone = V2User(channel, "", "")
        route = await anyone.stub.QueryRoute(
            s.QueryRouteRequest(topic=R(topic)), metadata=anyone.meta(), timeout=10
        )
        status, messages = await anyone.receive(topic, "g")
        sent = await anyone.send(topic)
        assignment = await anyone.stub.QueryAssignment(
            s.QueryAssignmentRequest(topic=R(topic), group=R("g")),
            metadata=anyone.meta(),
            timeout=10,
        )
    for refused in (route.status, status, sent.status, assignment.status):
        assert refused.code == d.FORBIDDEN, refused
        assert "system topic" in refused.message
    assert not messages and not route.message_queues


@pytest.mark.parametrize("topic", SYSTEM)
async def test_an_admin_reads_system_topics_but_sends_to_none(env, topic):
    route = await env.admin.stub.QueryRoute(
        s.QueryRouteRequest(topic=R(topic)), metadata=env.admin.meta(), timeout=10
    )
    assert route.status.code != d.FORBIDDEN, route.status
    status, _ = await env.admin.receive(topic, "admin_group")
    assert status.code in (d.OK, d.MESSAGE_NOT_FOUND), status
    assert (await env.admin.send(topic)).status.code == d.FORBIDDEN
    outsider_status, _ = await env.outsider.receive(topic, "outsider_group")
    assert outsider_status.code == d.FORBIDDEN
