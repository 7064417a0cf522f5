"""RocketMQ's official Python client (5.1.2, from PyPI) against a PocketMQ broker.

Every flow of the official client: clients declaring several topics, sending
(tags, keys, properties, delivery times, FIFO, transactions), SimpleConsumer
(receive, ack, invisible time, redelivery, dead letters, a restart between
receive and ack), PushConsumer (nack, FIFO, dead letters) and SQL92
subscriptions; test_node_client.py proves the same with the Node.js client.
The client runs in agent subprocesses (``rmq_agent.py``); the broker in this
process, so tests read its store.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pocketmq.broker.broker import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.store.results import GetStatus
from pocketmq.common.message import StoredMessage, decode_record
from pocketmq.rmqv2 import definition_pb2, service_pb2

from .conftest import SMALL, Agent
from .v2_schema import schema_of

MAX_ATTEMPTS = SMALL["grpc_v2_max_delivery_attempts"]


def stored(broker: Broker, topic: str) -> list[StoredMessage]:
    """Every message of *topic* on *broker*, all queues."""
    assert broker.store is not None
    out = []
    for queue_id in broker.store.queue_ids(topic):
        result = broker.store.get_messages(topic, queue_id, 0, max_count=1000)
        if result.status is GetStatus.FOUND:
            out += [decode_record(raw) for raw in result.records]
    return out


async def receive_until(
    agent: Agent, consumer: str, count: int, *, timeout_s: float = 15, invisible_s: int = 15
) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got += await agent.call("receive", consumer=consumer, max=16, invisible_s=invisible_s)
    return got


async def test_the_schema_matches_the_protos_the_official_client_ships(agent):
    theirs = await (await agent()).call("schema")
    ours = schema_of([definition_pb2.DESCRIPTOR, service_pb2.DESCRIPTOR])
    assert set(ours) == set(theirs)
    for name, rows in ours.items():
        assert [list(r) for r in rows] == theirs[name], name


async def test_sent_messages_arrive_with_tag_keys_and_properties_filtered_by_tag(
    v2_cluster, agent, eventually
):
    await v2_cluster.create_topic("Orders", eventually)
    a = await agent()
    ep = v2_cluster.endpoints
    await a.call("producer", name="p", endpoints=ep, topics=["Orders"])
    sent = await a.call(
        "send",
        producer="p",
        topic="Orders",
        body="paid order",
        tag="TagA",
        keys=["order-1", "user-7"],
        props={"region": "eu"},
    )
    await a.call("send", producer="p", topic="Orders", body="other tag", tag="TagB")
    await a.call("send", producer="p", topic="Orders", body="no tag")
    await a.call(
        "simple",
        name="c",
        endpoints=ep,
        group="billing",
        topic="Orders",
        expr="TagA || TagC",
        await_s=1,
    )

    (msg,) = await receive_until(a, "c", 1)
    await a.call("ack", consumer="c", message_id=msg["message_id"])

    assert msg["message_id"] == sent["message_id"]
    assert (msg["body"], msg["tag"], msg["keys"], msg["props"]) == (
        "paid order",
        "TagA",
        ["order-1", "user-7"],
        {"region": "eu"},
    )
    assert (msg["attempt"], msg["type"], msg["corrupted"]) == (1, definition_pb2.NORMAL, False)
    assert await a.call("receive", consumer="c", max=16, invisible_s=5) == []
    (record,) = [m for m in stored(v2_cluster.broker, "Orders") if m.tags == "TagA"]
    assert sorted(record.keys) == ["order-1", "user-7"]  # the client keeps keys in a set
    assert record.uniq_key == sent["message_id"]


async def test_messages_spread_over_two_brokers_and_each_is_received_from_its_own(
    v2_cluster, agent, eventually, tmp_path
):
    second = Broker(
        BrokerConfig(
            **{
                **SMALL,
                "broker_name": "broker-b",
                "data_dir": str(tmp_path / "broker-b"),
                "namesrv_addrs": v2_cluster.namesrv.address,
            }
        )
    )
    await second.start()
    v2_cluster.brokers.append(second)
    await v2_cluster.create_topic("Spread", eventually)
    a = await agent()
    ep = v2_cluster.endpoints  # one access point: broker-a's
    await a.call("producer", name="p", endpoints=ep, topics=["Spread"])
    for i in range(8):
        await a.call("send", producer="p", topic="Spread", body=f"s{i}")
    await a.call("simple", name="c", endpoints=ep, group="g", topic="Spread", await_s=1)

    got = await receive_until(a, "c", 8)
    for msg in got:
        await a.call("ack", consumer="c", message_id=msg["message_id"])

    assert sorted(m["body"] for m in got) == [f"s{i}" for i in range(8)]
    on_each = [len(stored(b, "Spread")) for b in v2_cluster.brokers]
    assert sum(on_each) == 8 and all(on_each), on_each


async def test_a_delayed_message_arrives_once_its_delivery_time_has_come(
    v2_cluster, agent, eventually
):
    await v2_cluster.create_topic("Later", eventually)
    a = await agent()
    ep = v2_cluster.endpoints
    await a.call("producer", name="p", endpoints=ep, topics=["Later"])
    await a.call("simple", name="c", endpoints=ep, group="g", topic="Later", await_s=1)
    due_ms = int(time.time() * 1000) + 1500
    await a.call("send", producer="p", topic="Later", body="later", delivery_ms=due_ms)

    (msg,) = await receive_until(a, "c", 1)

    assert time.time() * 1000 >= due_ms
    assert (msg["type"], msg["delivery_ms"]) == (definition_pb2.DELAY, due_ms)


async def test_an_unacked_message_comes_back_with_attempt_plus_one_then_goes_to_the_dlq(
    v2_cluster, agent, eventually
):
    await v2_cluster.create_topic("Flaky", eventually)
    a = await agent()
    ep = v2_cluster.endpoints
    await a.call("producer", name="p", endpoints=ep, topics=["Flaky"])
    await a.call("send", producer="p", topic="Flaky", body="boom")
    await a.call("simple", name="c", endpoints=ep, group="workers", topic="Flaky", await_s=1)

    first = await receive_until(a, "c", 1, invisible_s=1)
    second = await receive_until(a, "c", 1, invisible_s=30)
    new_handle = await a.call(
        "change", consumer="c", message_id=second[0]["message_id"], invisible_s=1
    )
    third = await receive_until(a, "c", 1, invisible_s=1)
    after = await receive_until(a, "c", 1, timeout_s=3)

    assert [m["attempt"] for m in first + second + third] == [1, 2, 3]
    assert new_handle != second[0]["handle"]
    assert after == []  # the 3rd attempt was the last (grpc_v2_max_delivery_attempts)
    (dead,) = await eventually(
        lambda: stored(v2_cluster.broker, "%DLQ%workers"), what="the DLQ copy"
    )
    assert dead.body == b"boom" and dead.properties["DLQ_ORIGIN_TOPIC"] == "Flaky"


async def test_a_restart_between_receive_and_ack_loses_nothing_and_resurrects_no_ack(
    v2_cluster, agent, eventually
):
    await v2_cluster.create_topic("Durable", eventually)
    a = await agent()
    ep = v2_cluster.endpoints
    await a.call("producer", name="p", endpoints=ep, topics=["Durable"])
    for i in range(3):
        await a.call("send", producer="p", topic="Durable", body=f"m{i}")
    await a.call("simple", name="c", endpoints=ep, group="g", topic="Durable", await_s=1)
    got = sorted(await receive_until(a, "c", 3, invisible_s=3), key=lambda m: m["body"])
    await a.call("ack", consumer="c", message_id=got[0]["message_id"])

    await v2_cluster.restart()

    await a.call("ack", consumer="c", message_id=got[1]["message_id"])  # handle from before
    # All three shared one invisible time: whatever comes back comes in one batch.
    back = await receive_until(a, "c", 1, timeout_s=8)
    assert [(m["body"], m["attempt"]) for m in back] == [("m2", 2)]
    await a.call("ack", consumer="c", message_id=back[0]["message_id"])
    assert await receive_until(a, "c", 1, timeout_s=2, invisible_s=1) == []


async def test_a_fifo_group_keeps_its_order_under_concurrent_consumers(
    v2_cluster, agent, eventually
):
    await v2_cluster.create_topic("Fifo", eventually, order=True)
    ep = v2_cluster.endpoints
    agents = [await agent() for _ in range(3)]
    await agents[0].call("producer", name="p", endpoints=ep, topics=["Fifo"])
    groups, per_group = ("A", "B", "C"), 6
    for i in range(per_group):
        for g in groups:
            await agents[0].call("send", producer="p", topic="Fifo", body=f"{g}-{i}", group=g)
    for i, a in enumerate(agents):
        await a.call("simple", name=f"c{i}", endpoints=ep, group="fifo", topic="Fifo", await_s=1)
    delivered: list[tuple[str, int]] = []
    deadline = time.monotonic() + 30

    async def consume(a: Agent, name: str) -> None:
        while len(delivered) < len(groups) * per_group and time.monotonic() < deadline:
            messages = await a.call("receive", consumer=name, max=4, invisible_s=20)
            for m in messages:
                group, seq = m["body"].split("-")
                assert m["group"] == group and m["type"] == definition_pb2.FIFO
                delivered.append((group, int(seq)))
            for m in messages:
                await a.call("ack", consumer=name, message_id=m["message_id"])

    await asyncio.gather(*(consume(a, f"c{i}") for i, a in enumerate(agents)))

    for g in groups:
        assert [seq for group, seq in delivered if group == g] == list(range(per_group)), g


async def test_transactions_commit_roll_back_and_are_checked_through_telemetry(
    v2_cluster, agent, eventually
):
    await v2_cluster.create_topic("Tx", eventually)
    a = await agent()
    ep = v2_cluster.endpoints
    # no topics given: the producer learns the route at its first send, and is asked about
    # the topic's open transactions because it sent a half message there
    await a.call("producer", name="p", endpoints=ep, topics=None, checker="commit")
    committed = await a.call("send", producer="p", topic="Tx", body="commit", transaction="commit")
    await a.call("send", producer="p", topic="Tx", body="rollback", transaction="rollback")
    await a.call("send", producer="p", topic="Tx", body="left open", transaction="open")
    await a.call("simple", name="c", endpoints=ep, group="g", topic="Tx", await_s=1)

    got = await receive_until(a, "c", 2)
    assert await receive_until(a, "c", 1, timeout_s=2) == []

    assert committed["transaction_id"]
    assert sorted(m["body"] for m in got) == ["commit", "left open"]
    assert {m["type"] for m in got} == {definition_pb2.TRANSACTION}
    assert v2_cluster.broker.transactions.figures()["transaction_rolled_back_total"] == "1"
    assert v2_cluster.broker.transactions.checks_total >= 1


async def test_a_push_consumer_gets_a_nacked_message_again_then_dead_letters_it(
    v2_cluster, agent, eventually
):
    await v2_cluster.create_topic("Push", eventually)
    producer, retried, failing = await agent(), await agent(), await agent()
    ep = v2_cluster.endpoints
    await producer.call("producer", name="p", endpoints=ep, topics=["Push"])
    await producer.call("send", producer="p", topic="Push", body="once")
    await retried.call(
        "push",
        name="ok",
        endpoints=ep,
        group="second-time-lucky",
        topic="Push",
        behaviour="fail_once",
    )
    await failing.call(
        "push", name="bad", endpoints=ep, group="always-fails", topic="Push", behaviour="fail"
    )

    async def consumed(a: Agent, name: str, count: int) -> list[dict[str, Any]]:
        got = await a.call("consumed", name=name)
        return got if len(got) >= count else []

    lucky = await eventually(
        lambda: consumed(retried, "ok", 2), timeout_s=20, interval_s=0.2, what="a retry"
    )
    bad = await eventually(
        lambda: consumed(failing, "bad", MAX_ATTEMPTS),
        timeout_s=20,
        interval_s=0.2,
        what="every attempt",
    )
    (dead,) = await eventually(
        lambda: stored(v2_cluster.broker, "%DLQ%always-fails"), timeout_s=10, what="the DLQ copy"
    )

    assert [m["attempt"] for m in lucky] == [1, 2]
    assert [m["attempt"] for m in bad] == list(range(1, MAX_ATTEMPTS + 1))
    assert dead.body == b"once"
    # Nothing of either group is in flight any more (acked, or forwarded to the DLQ), so
    # nothing else may arrive.
    pop = v2_cluster.broker.grpc_v2.pop
    await eventually(
        lambda: (
            not any(pop.in_flight_count(g, "Push") for g in ("second-time-lucky", "always-fails"))
        ),
        timeout_s=10,
        what="no message of Push in flight",
    )
    assert len(await retried.call("consumed", name="ok")) == 2
    assert len(await failing.call("consumed", name="bad")) == MAX_ATTEMPTS


async def test_a_fifo_push_consumer_retries_in_order_then_forwards_to_the_dlq(
    v2_cluster, agent, eventually
):
    await v2_cluster.create_topic("FifoPush", eventually, order=True)
    a, b = await agent(), await agent()
    ep = v2_cluster.endpoints
    await a.call("producer", name="p", endpoints=ep, topics=["FifoPush"])
    for i in range(3):
        await a.call("send", producer="p", topic="FifoPush", body=f"G-{i}", group="G")
    await b.call(
        "push", name="c", endpoints=ep, group="fifo-push", topic="FifoPush", behaviour="fail"
    )
    total = 3 * MAX_ATTEMPTS

    async def consumed() -> list[dict[str, Any]]:
        got = await b.call("consumed", name="c")
        return got if len(got) >= total else []

    got = await eventually(consumed, timeout_s=40, interval_s=0.2, what="every attempt")
    dead = await eventually(
        lambda: (
            len(stored(v2_cluster.broker, "%DLQ%fifo-push")) == 3
            and stored(v2_cluster.broker, "%DLQ%fifo-push")
        ),
        timeout_s=10,
        what="three DLQ copies",
    )

    # the client retries each message locally; the next starts only after its predecessor
    # went to the DLQ (ForwardMessageToDeadLetterQueue)
    assert [m["body"] for m in got] == [f"G-{i}" for i in range(3) for _ in range(MAX_ATTEMPTS)]
    assert sorted(m.body for m in dead) == [b"G-0", b"G-1", b"G-2"]
    assert all(m["type"] == definition_pb2.FIFO and m["group"] == "G" for m in got)


async def test_clients_declaring_several_topics_start(v2_cluster, agent, eventually):
    for topic in ("ManyA", "ManyB", "ManyC"):
        await v2_cluster.create_topic(topic, eventually)
    a = await agent()
    ep = v2_cluster.endpoints
    await a.call("producer", name="p", endpoints=ep, topics=["ManyA", "ManyB", "ManyC"])
    await a.call(
        "simple", name="s", endpoints=ep, group="simple", topics=["ManyA", "ManyB"], await_s=1
    )
    await a.call("push", name="q", endpoints=ep, group="push", topics=["ManyB", "ManyC"])
    for topic in ("ManyA", "ManyB", "ManyC"):
        await a.call("send", producer="p", topic=topic, body=topic)

    async def consumed() -> list[dict[str, Any]]:
        got = await a.call("consumed", name="q")
        return got if len(got) >= 2 else []

    by_simple = await receive_until(a, "s", 2)
    by_push = await eventually(
        consumed, timeout_s=15, interval_s=0.2, what="the push consumer's messages"
    )
    assert sorted(m["body"] for m in by_simple) == ["ManyA", "ManyB"]
    assert sorted(m["body"] for m in by_push) == ["ManyB", "ManyC"]


async def test_a_push_consumer_gets_its_tag_only_and_a_failed_message_again(
    v2_cluster, agent, eventually
):
    await v2_cluster.create_topic("PushTag", eventually)
    producer, consumer = await agent(), await agent()
    ep = v2_cluster.endpoints
    await producer.call("producer", name="p", endpoints=ep, topics=["PushTag"])
    await consumer.call(
        "push",
        name="c",
        endpoints=ep,
        group="tagged",
        topic="PushTag",
        expr="TagA",
        behaviour="fail_once",
    )
    await producer.call("send", producer="p", topic="PushTag", body="skipped", tag="TagB")
    await producer.call("send", producer="p", topic="PushTag", body="wanted", tag="TagA")

    async def consumed() -> list[dict[str, Any]]:
        got = await consumer.call("consumed", name="c")
        return got if len(got) >= 2 else []

    got = await eventually(consumed, timeout_s=20, interval_s=0.2, what="a retry")

    assert [(m["body"], m["attempt"]) for m in got] == [("wanted", 1), ("wanted", 2)]


# -- SQL92 filters (#20) ------------------------------------------------------------------

SQL = "region = 'eu' AND amount > 100"
SQL_MESSAGES = [
    ("eu-big", {"region": "eu", "amount": "150"}),
    ("us-big", {"region": "us", "amount": "500"}),
    ("eu-small", {"region": "eu", "amount": "20"}),
    ("no-properties", {}),
]


async def test_a_simple_consumer_with_a_sql92_subscription_receives_only_matching_messages(
    v2_cluster, agent, eventually
):
    await v2_cluster.create_topic("Sql", eventually)
    a = await agent()
    ep = v2_cluster.endpoints
    await a.call("producer", name="p", endpoints=ep, topics=["Sql"])
    for body, props in SQL_MESSAGES:
        await a.call("send", producer="p", topic="Sql", body=body, props=props)
    await a.call(
        "simple", name="c", endpoints=ep, group="sql", topic="Sql", expr=SQL, sql=True, await_s=1
    )

    got = await receive_until(a, "c", 1)
    for msg in got:
        await a.call("ack", consumer="c", message_id=msg["message_id"])

    assert [m["body"] for m in got] == ["eu-big"]
    assert await receive_until(a, "c", 1, timeout_s=2) == []


async def test_a_push_consumer_with_a_sql92_subscription_consumes_only_matching_messages(
    v2_cluster, agent, eventually
):
    await v2_cluster.create_topic("SqlPush", eventually)
    producer, consumer = await agent(), await agent()
    ep = v2_cluster.endpoints
    await producer.call("producer", name="p", endpoints=ep, topics=["SqlPush"])
    await consumer.call(
        "push", name="c", endpoints=ep, group="sql-push", topic="SqlPush", expr=SQL, sql=True
    )
    for body, props in [*SQL_MESSAGES, ("eu-last", {"region": "eu", "amount": "101"})]:
        await producer.call("send", producer="p", topic="SqlPush", body=body, props=props)

    async def consumed() -> list[dict[str, Any]]:
        got = await consumer.call("consumed", name="c")
        return got if len(got) >= 2 else []

    got = await eventually(consumed, timeout_s=20, interval_s=0.2, what="two consumed messages")

    assert sorted(m["body"] for m in got) == ["eu-big", "eu-last"]
