"""RocketMQ's official Node.js client (rocketmq-client-nodejs 1.0.8, from npm) against PocketMQ.

The client runs in agent subprocesses (``node/agent.js``, the same commands as
the Python client's ``rmq_agent.py``); the broker in this process, so tests
read its store. Every client is created the way the client's README shows:
producers with their topics, consumers with their subscriptions, which is the
start-up that waits for the broker's settings (telemetry.py, "Settings sent
again").
"""

from __future__ import annotations

import time
from typing import Any

from pocketmq.client import Message, Producer, PullConsumer

from .conftest import Agent
from .test_interop import _poll
from .test_official_client import receive_until, stored

STARTUP_S = 15  # > one heartbeat (10 s), the slowest way the settings come again


async def consumed(a: Agent, name: str, count: int) -> list[dict[str, Any]]:
    got = await a.call("consumed", name=name)
    return got if len(got) >= count else []


async def test_clients_declaring_several_topics_start(v2_cluster, node_agent, eventually):
    for topic in ("NodeA", "NodeB", "NodeC"):
        await v2_cluster.create_topic(topic, eventually)
    a = await node_agent()
    ep = v2_cluster.endpoints

    # each answer of the broker's settings can come while the client still fetches the
    # routes of its other topics; startup() waits for one that comes after
    await a.call(
        "producer", name="p", endpoints=ep, topics=["NodeA", "NodeB", "NodeC"], startup_s=STARTUP_S
    )
    await a.call(
        "simple",
        name="s",
        endpoints=ep,
        group="simple",
        topics=["NodeA", "NodeB"],
        await_s=1,
        startup_s=STARTUP_S,
    )
    await a.call(
        "push", name="q", endpoints=ep, group="push", topics=["NodeB", "NodeC"], startup_s=STARTUP_S
    )
    for topic in ("NodeA", "NodeB", "NodeC"):
        await a.call("send", producer="p", topic=topic, body=topic)

    by_simple = await receive_until(a, "s", 2)
    by_push = await eventually(
        lambda: consumed(a, "q", 2),
        timeout_s=15,
        interval_s=0.2,
        what="the push consumer's messages",
    )
    assert sorted(m["body"] for m in by_simple) == ["NodeA", "NodeB"]
    assert sorted(m["body"] for m in by_push) == ["NodeB", "NodeC"]


async def test_a_producer_with_its_topics_sends_tag_keys_and_properties_filtered_by_tag(
    v2_cluster, node_agent, eventually
):
    await v2_cluster.create_topic("NodeOrders", eventually)
    a = await node_agent()
    ep = v2_cluster.endpoints
    await a.call("producer", name="p", endpoints=ep, topics=["NodeOrders"])
    sent = await a.call(
        "send",
        producer="p",
        topic="NodeOrders",
        body="paid order",
        tag="TagA",
        keys=["order-1", "user-7"],
        props={"region": "eu"},
    )
    await a.call("send", producer="p", topic="NodeOrders", body="other tag", tag="TagB")
    await a.call("send", producer="p", topic="NodeOrders", body="no tag")
    await a.call(
        "simple",
        name="c",
        endpoints=ep,
        group="billing",
        topic="NodeOrders",
        expr="TagA || TagC",
        await_s=1,
    )

    (msg,) = await receive_until(a, "c", 1)
    await a.call("ack", consumer="c", message_id=msg["message_id"])

    assert msg["message_id"] == sent["message_id"]
    assert (msg["body"], msg["tag"], msg["keys"], msg["props"], msg["attempt"]) == (
        "paid order",
        "TagA",
        ["order-1", "user-7"],
        {"region": "eu"},
        1,
    )
    assert not msg["corrupted"]
    assert await a.call("receive", consumer="c", max=16, invisible_s=5) == []
    (record,) = [m for m in stored(v2_cluster.broker, "NodeOrders") if m.tags == "TagA"]
    assert (sorted(record.keys), record.uniq_key) == (["order-1", "user-7"], sent["message_id"])


async def test_a_push_consumer_gets_its_tag_only_and_a_failed_message_again(
    v2_cluster, node_agent, eventually
):
    await v2_cluster.create_topic("NodePush", eventually)
    producer, consumer = await node_agent(), await node_agent()
    ep = v2_cluster.endpoints
    await producer.call("producer", name="p", endpoints=ep, topics=["NodePush"])
    await consumer.call(
        "push",
        name="c",
        endpoints=ep,
        group="second-time-lucky",
        topic="NodePush",
        expr="TagA",
        behaviour="fail_once",
    )
    await producer.call("send", producer="p", topic="NodePush", body="skipped", tag="TagB")
    await producer.call("send", producer="p", topic="NodePush", body="wanted", tag="TagA")

    got = await eventually(
        lambda: consumed(consumer, "c", 2), timeout_s=20, interval_s=0.2, what="a retry"
    )

    # the failed consumption came back after the broker's first retry delay (1 s here)
    assert [(m["body"], m["attempt"]) for m in got] == [("wanted", 1), ("wanted", 2)]
    assert len(stored(v2_cluster.broker, "NodePush")) == 2


async def test_fifo_groups_reach_a_push_consumer_in_order(v2_cluster, node_agent, eventually):
    await v2_cluster.create_topic("NodeFifo", eventually, order=True)
    producer, consumer = await node_agent(), await node_agent()
    ep = v2_cluster.endpoints
    await producer.call("producer", name="p", endpoints=ep, topics=["NodeFifo"])
    groups, per_group = ("A", "B", "C"), 6
    for i in range(per_group):
        for g in groups:
            await producer.call("send", producer="p", topic="NodeFifo", body=f"{g}-{i}", group=g)
    # the settings say the topic is FIFO: the client then consumes a group in order
    await consumer.call("push", name="c", endpoints=ep, group="node-fifo", topic="NodeFifo")

    got = await eventually(
        lambda: consumed(consumer, "c", len(groups) * per_group),
        timeout_s=30,
        interval_s=0.2,
        what="every message",
    )

    assert all(m["group"] == m["body"].split("-")[0] for m in got)
    for g in groups:
        assert [m["body"] for m in got if m["group"] == g] == [
            f"{g}-{i}" for i in range(per_group)
        ], g


async def test_a_delayed_message_is_not_delivered_before_its_time(
    v2_cluster, node_agent, eventually
):
    await v2_cluster.create_topic("NodeLater", eventually)
    a = await node_agent()
    ep = v2_cluster.endpoints
    await a.call("producer", name="p", endpoints=ep, topics=["NodeLater"])
    await a.call("simple", name="c", endpoints=ep, group="g", topic="NodeLater", await_s=1)
    due_ms = int(time.time() * 1000) + 2000
    await a.call("send", producer="p", topic="NodeLater", body="later", delivery_ms=due_ms)

    (msg,) = await receive_until(a, "c", 1, timeout_s=20)

    assert msg["received_ms"] >= due_ms  # the client's clock: the same machine's
    assert (msg["body"], msg["delivery_ms"]) == ("later", due_ms)


async def test_a_committed_transaction_is_delivered_a_rolled_back_one_is_not(
    v2_cluster, node_agent, eventually
):
    await v2_cluster.create_topic("NodeTx", eventually)
    a = await node_agent()
    ep = v2_cluster.endpoints
    await a.call("producer", name="p", endpoints=ep, topics=["NodeTx"], checker="commit")
    committed = await a.call(
        "send", producer="p", topic="NodeTx", body="commit", transaction="commit"
    )
    await a.call("send", producer="p", topic="NodeTx", body="rollback", transaction="rollback")
    # neither committed nor rolled back: the broker asks the producer over Telemetry
    await a.call("send", producer="p", topic="NodeTx", body="left open", transaction="open")
    await a.call("simple", name="c", endpoints=ep, group="g", topic="NodeTx", await_s=1)

    got = await receive_until(a, "c", 2, timeout_s=20)
    assert await receive_until(a, "c", 1, timeout_s=2) == []

    assert committed["transaction_id"]
    assert sorted(m["body"] for m in got) == ["commit", "left open"]
    assert v2_cluster.broker.transactions.figures()["transaction_rolled_back_total"] == "1"
    assert v2_cluster.broker.transactions.checks_total >= 1


async def test_a_message_sent_by_pocketmq_sdk_reaches_the_node_consumer(
    v2_cluster, node_agent, eventually
):
    await v2_cluster.create_topic("SdkToNode", eventually)
    big = b"z" * 10_000  # compressed by the SDK: the client gunzips it
    async with Producer(group="sdk-producer", namesrv=v2_cluster.namesrv.address) as producer:
        small = await producer.send(
            Message(
                topic="SdkToNode",
                body=b"from the sdk",
                tags="TagA",
                keys=["o-1", "o-2"],
                properties={"k": "v"},
            )
        )
        await producer.send(Message(topic="SdkToNode", body=big, tags="TagA"))
        await producer.send(Message(topic="SdkToNode", body=b"filtered out", tags="TagB"))
    a = await node_agent()
    await a.call(
        "simple",
        name="c",
        endpoints=v2_cluster.endpoints,
        group="node",
        topic="SdkToNode",
        expr="TagA",
        await_s=1,
    )

    got = sorted(await receive_until(a, "c", 2), key=lambda m: len(m["body"]))

    assert [len(m["body"]) for m in got] == [len(b"from the sdk"), len(big)]
    assert (got[0]["message_id"], got[0]["tag"], got[0]["keys"], got[0]["props"]) == (
        small.msg_id,
        "TagA",
        ["o-1", "o-2"],
        {"k": "v"},
    )
    assert got[1]["body"] == big.decode() and not got[1]["corrupted"]


async def test_a_message_sent_by_the_node_producer_reaches_a_pocketmq_consumer(
    v2_cluster, node_agent, eventually
):
    await v2_cluster.create_topic("NodeToSdk", eventually)
    a = await node_agent()
    await a.call("producer", name="p", endpoints=v2_cluster.endpoints, topics=["NodeToSdk"])
    sent = [
        await a.call(
            "send",
            producer="p",
            topic="NodeToSdk",
            body=f"node-{i}",
            tag="TagA",
            keys=[f"k{i}"],
            props={"origin": "node"},
        )
        for i in range(3)
    ]
    await a.call("send", producer="p", topic="NodeToSdk", body="filtered out", tag="TagB")
    consumer = PullConsumer(group="sdk", namesrv=v2_cluster.namesrv.address, consume_from="first")
    consumer.subscribe("NodeToSdk", "TagA")
    await consumer.start()
    try:
        got = sorted(await _poll(consumer, 3), key=lambda m: m.body)
    finally:
        await consumer.shutdown()

    assert [m.body for m in got] == [b"node-0", b"node-1", b"node-2"]
    assert [m.msg_id for m in got] == [s["message_id"] for s in sent]
    assert all(m.tags == "TagA" and m.properties["origin"] == "node" for m in got)
    assert [m.keys for m in got] == [["k0"], ["k1"], ["k2"]]


# -- SQL92 filters (#20) ------------------------------------------------------------------

SQL = "region = 'eu' AND amount > 100"
SQL_MESSAGES = [
    ("eu-big", {"region": "eu", "amount": "150"}),
    ("us-big", {"region": "us", "amount": "500"}),
    ("eu-small", {"region": "eu", "amount": "20"}),
    ("no-properties", {}),
]


async def send_sql_messages(a: Agent, topic: str) -> None:
    for body, props in SQL_MESSAGES:
        await a.call("send", producer="p", topic=topic, body=body, props=props)


async def test_a_simple_consumer_with_a_sql92_subscription_receives_only_matching_messages(
    v2_cluster, node_agent, eventually
):
    await v2_cluster.create_topic("NodeSql", eventually)
    a = await node_agent()
    ep = v2_cluster.endpoints
    await a.call("producer", name="p", endpoints=ep, topics=["NodeSql"])
    await send_sql_messages(a, "NodeSql")
    await a.call(
        "simple",
        name="c",
        endpoints=ep,
        group="sql",
        topic="NodeSql",
        expr=SQL,
        sql=True,
        await_s=1,
    )

    got = await receive_until(a, "c", 1)
    for msg in got:
        await a.call("ack", consumer="c", message_id=msg["message_id"])

    assert [m["body"] for m in got] == ["eu-big"]
    assert await receive_until(a, "c", 1, timeout_s=2) == []


async def test_a_push_consumer_with_a_sql92_subscription_consumes_only_matching_messages(
    v2_cluster, node_agent, eventually
):
    await v2_cluster.create_topic("NodeSqlPush", eventually)
    producer, consumer = await node_agent(), await node_agent()
    ep = v2_cluster.endpoints
    await producer.call("producer", name="p", endpoints=ep, topics=["NodeSqlPush"])
    await consumer.call(
        "push", name="c", endpoints=ep, group="sql-push", topic="NodeSqlPush", expr=SQL, sql=True
    )
    await send_sql_messages(producer, "NodeSqlPush")
    await producer.call(
        "send",
        producer="p",
        topic="NodeSqlPush",
        body="eu-last",
        props={"region": "eu", "amount": "101"},
    )

    got = await eventually(
        lambda: consumed(consumer, "c", 2),
        timeout_s=20,
        interval_s=0.2,
        what="two consumed messages",
    )

    assert sorted(m["body"] for m in got) == ["eu-big", "eu-last"]
