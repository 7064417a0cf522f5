"""Messages cross between RocketMQ's official client and PocketMQ's SDK both ways."""

from __future__ import annotations

import time
from typing import Any

from pocketmq.client import Message, Producer, PullConsumer
from pocketmq.rmqv2 import definition_pb2

from .test_official_client import receive_until


async def _poll(consumer: PullConsumer, count: int, timeout_s: float = 15) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got += await consumer.poll(timeout_s=1.0)
    return got


async def test_the_official_producer_feeds_a_pocketmq_consumer(v2_cluster, agent, eventually):
    await v2_cluster.create_topic("ToSdk", eventually)
    a = await agent()
    await a.call("producer", name="p", endpoints=v2_cluster.endpoints, topics=["ToSdk"])
    sent = [
        await a.call(
            "send",
            producer="p",
            topic="ToSdk",
            body=f"v2-{i}",
            tag="TagA",
            keys=[f"k{i}"],
            props={"origin": "official"},
        )
        for i in range(3)
    ]
    fifo = await a.call("send", producer="p", topic="ToSdk", body="grouped", group="G1")
    consumer = PullConsumer(group="sdk", namesrv=v2_cluster.namesrv.address, consume_from="first")
    consumer.subscribe("ToSdk", "TagA")
    await consumer.start()
    try:
        got = sorted(await _poll(consumer, 3), key=lambda m: m.body)
    finally:
        await consumer.shutdown()

    assert [m.body for m in got] == [b"v2-0", b"v2-1", b"v2-2"]
    assert [m.msg_id for m in got] == [s["message_id"] for s in sent]
    assert all(m.tags == "TagA" and m.properties["origin"] == "official" for m in got)
    assert [m.keys for m in got] == [["k0"], ["k1"], ["k2"]]
    assert fifo["message_id"]  # a FIFO message is an ordinary one to the SDK (tag filtered)


async def test_a_pocketmq_producer_feeds_the_official_simple_consumer(
    v2_cluster, agent, eventually
):
    await v2_cluster.create_topic("FromSdk", eventually)
    big = b"z" * 10_000  # compressed by the SDK: the consumer sees GZIP
    async with Producer(group="sdk-producer", namesrv=v2_cluster.namesrv.address) as producer:
        small = await producer.send(
            Message(
                topic="FromSdk",
                body=b"from the sdk",
                tags="TagA",
                keys=["o-1", "o-2"],
                properties={"k": "v"},
            )
        )
        await producer.send(Message(topic="FromSdk", body=big, tags="TagA"))
        await producer.send(Message(topic="FromSdk", body=b"filtered out", tags="TagB"))
    a = await agent()
    await a.call(
        "simple",
        name="c",
        endpoints=v2_cluster.endpoints,
        group="official",
        topic="FromSdk",
        expr="TagA",
        await_s=1,
    )

    got = sorted(await receive_until(a, "c", 2), key=lambda m: len(m["body"]))
    for msg in got:
        await a.call("ack", consumer="c", message_id=msg["message_id"])

    assert [len(m["body"]) for m in got] == [len(b"from the sdk"), len(big)]
    first = got[0]
    assert (first["message_id"], first["tag"], first["keys"], first["props"]) == (
        small.msg_id,
        "TagA",
        ["o-1", "o-2"],
        {"k": "v"},
    )
    assert got[1]["body"] == big.decode() and not got[1]["corrupted"]
    assert {m["type"] for m in got} == {definition_pb2.NORMAL}
    assert await a.call("receive", consumer="c", max=16, invisible_s=5) == []
