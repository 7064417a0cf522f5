"""Message trace for RocketMQ's official Python client: with ``trace_topic_enable`` the
broker writes, for the v2 client, the Pub, SubBefore and SubAfter records a traced
PocketMQ client writes itself (``source`` ``proxy``), as RocketMQ 5's proxy does.

The broker runs in this process (its trace topic is read from its store); the
client in an agent subprocess (``rmq_agent.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from pocketmq.broker.broker import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.client.trace_view import message_life
from pocketmq.common.trace import DEFAULT_TRACE_TOPIC, TraceRecord, TraceType, decode_trace_body
from pocketmq.nameserver import NameServer, NamesrvConfig
from pocketmq.rmqv2 import definition_pb2 as d
from pocketmq.rmqv2 import service_pb2 as s
from pocketmq.rmqv2 import service_pb2_grpc

from .conftest import SMALL, AgentError, V2Cluster
from .test_official_client import MAX_ATTEMPTS, receive_until, stored
from .test_v2_protocol import META, V2


@pytest.fixture
async def traced(tmp_path) -> AsyncIterator[V2Cluster]:
    """One broker with trace_topic_enable, serving the v2 API."""
    namesrv = NameServer(NamesrvConfig(host="127.0.0.1", port=0))
    await namesrv.start()
    config = BrokerConfig(
        **SMALL,
        broker_name="broker-a",
        data_dir=str(tmp_path / "broker-a"),
        namesrv_addrs=namesrv.address,
        trace_topic_enable=True,
    )
    cluster = V2Cluster(namesrv, config)
    try:
        broker = Broker(config)
        await broker.start()
        cluster.brokers.append(broker)
        yield cluster
    finally:
        for broker in cluster.brokers:
            await broker.stop(0)
        await namesrv.stop(0)


def trace_records(broker: Broker) -> list[TraceRecord]:
    return [r for m in stored(broker, DEFAULT_TRACE_TOPIC) for r in decode_trace_body(m.body)]


def records_of(broker: Broker, msg_id: str) -> list[TraceRecord]:
    return sorted((r for r in trace_records(broker) if r.msg_id == msg_id), key=lambda r: r.ts)


async def test_a_sent_nacked_then_acked_message_is_traced_for_the_official_client(
    traced, agent, eventually
):
    await traced.create_topic("Orders", eventually)
    a = await agent()
    ep = traced.endpoints
    await a.call("producer", name="p", endpoints=ep, topics=["Orders"])
    sent = await a.call(
        "send", producer="p", topic="Orders", body="paid", tag="TagA", keys=["order-1"]
    )
    await a.call("simple", name="c", endpoints=ep, group="billing", topic="Orders", await_s=1)
    (first,) = await receive_until(a, "c", 1, invisible_s=30)
    await a.call("change", consumer="c", message_id=first["message_id"], invisible_s=1)  # nack
    (second,) = await receive_until(a, "c", 1, invisible_s=30)
    await a.call("ack", consumer="c", message_id=second["message_id"])
    msg_id = sent["message_id"]

    def traced_twice() -> list[TraceRecord] | None:
        records = records_of(traced.broker, msg_id)
        return records if sum(r.type == TraceType.SUB_AFTER for r in records) >= 2 else None

    records = await eventually(traced_twice, timeout_s=15, what="two traced deliveries")
    life = message_life(msg_id, records)

    (message,) = stored(traced.broker, "Orders")
    [pub] = [r for r in records if r.type == TraceType.PUB]
    assert pub.source == "proxy" and pub.client_id
    assert (pub.topic, pub.tags, pub.keys) == ("Orders", "TagA", ["order-1"])
    assert (pub.status, pub.msg_type, pub.queue_offset) == ("SEND_OK", "Normal", sent["offset"])
    [store] = [r for r in records if r.type == TraceType.STORE]
    assert store.source == "broker" and pub.offset_msg_id == store.offset_msg_id
    assert message.uniq_key == msg_id
    consumed = life["consumed"]
    assert [(c["attempt"], c["status"]) for c in consumed] == [(0, "retry_later"), (1, "success")]
    assert {c["group"] for c in consumed} == {"billing"}
    assert all(c["client_id"] and c["client_id"] != pub.client_id for c in consumed)
    assert all(c["cost_ms"] is not None and c["queue_offset"] == sent["offset"] for c in consumed)
    befores = [r for r in records if r.type == TraceType.SUB_BEFORE]
    afters = [r for r in records if r.type == TraceType.SUB_AFTER]
    assert [r.request_id for r in befores] == [r.request_id for r in afters]
    assert len(set(r.request_id for r in befores)) == 2


async def test_a_send_the_broker_refuses_is_traced_as_failed(traced, agent, eventually):
    await traced.create_topic("Orders", eventually)
    a = await agent()
    await a.call("producer", name="p", endpoints=traced.endpoints, topics=["Orders"])
    with pytest.raises(AgentError, match="x01"):  # the stored properties' separator
        await a.call("send", producer="p", topic="Orders", body="b", props={"k": "a\x01b"})

    def failed() -> list[TraceRecord]:
        return [
            r
            for r in trace_records(traced.broker)
            if r.type == TraceType.PUB and r.topic == "Orders"
        ]

    pubs = await eventually(failed, timeout_s=15, what="the refused send's Pub")
    assert all(r.status.startswith("FAILED: ILLEGAL_MESSAGE_PROPERTY_KEY: ") for r in pubs), pubs
    assert all(r.msg_id and r.source == "proxy" and r.queue_offset == -1 for r in pubs)
    assert stored(traced.broker, "Orders") == []


async def test_a_push_consumer_that_always_fails_is_traced_up_to_the_dead_letter_queue(
    traced, agent, eventually
):
    await traced.create_topic("Poison", eventually)
    a = await agent()
    ep = traced.endpoints
    await a.call("producer", name="p", endpoints=ep, topics=["Poison"])
    sent = await a.call("send", producer="p", topic="Poison", body="boom")
    await a.call("push", name="c", endpoints=ep, group="workers", topic="Poison", behaviour="fail")
    msg_id = sent["message_id"]

    def dead_lettered() -> list[TraceRecord] | None:
        records = records_of(traced.broker, msg_id)
        sent_back = [r for r in records if r.type == TraceType.SEND_BACK]
        return records if sent_back else None

    records = await eventually(dead_lettered, timeout_s=30, what="the traced DLQ copy")
    life = message_life(msg_id, records)

    # the client nacks each failure (ChangeInvisibleDuration); after the last attempt
    # (grpc_v2_max_delivery_attempts) the broker moves the message to the DLQ itself
    attempts = [(c["attempt"], c["status"]) for c in life["consumed"]]
    assert attempts == [(n, "retry_later") for n in range(MAX_ATTEMPTS)]
    assert {c["group"] for c in life["consumed"]} == {"workers"}
    [dead] = life["dead_lettered"]
    assert (dead["group"], dead["dlq_topic"], dead["broker_confirmed"]) == (
        "workers",
        "%DLQ%workers",
        True,
    )


async def test_raw_v2_acks_nacks_and_dead_letter_forwards_are_traced_once_each(traced, eventually):
    async with grpc.aio.insecure_channel(traced.endpoints) as channel:
        v2 = V2(service_pb2_grpc.MessagingServiceStub(channel))
        sent = [(await v2.send("Raw", b"m%d" % i)).entries[0].message_id for i in range(2)]
        got: list[d.Message] = []
        for _ in range(10):  # bounded: both are there at once, one receive may take one
            got += (await v2.receive("Raw", poll_s=2))[1]
            if len(got) == 2:
                break
        assert len(got) == 2
        handles = {m.system_properties.message_id: m.system_properties.receipt_handle for m in got}
        acked, forwarded = sent
        assert (await v2.ack("Raw", handles[acked])).code == d.OK
        assert (await v2.ack("Raw", handles[acked])).code == d.OK  # twice: traced once
        assert (await v2.ack("Raw", "0 99 1 broker-a")).code == d.INVALID_RECEIPT_HANDLE
        reply = await v2.stub.ForwardMessageToDeadLetterQueue(
            s.ForwardMessageToDeadLetterQueueRequest(
                group=d.Resource(name="g"),
                topic=d.Resource(name="Raw"),
                receipt_handle=handles[forwarded],
                message_id=forwarded,
            ),
            metadata=META,
        )
        assert reply.status.code == d.OK

    def settled() -> dict[str, list[str]] | None:
        afters = [r for r in trace_records(traced.broker) if r.type == TraceType.SUB_AFTER]
        out = {m: [r.status for r in afters if r.msg_id == m] for m in sent}
        return out if all(out.values()) else None

    assert await eventually(settled, timeout_s=15, what="both settled") == {
        acked: ["success"],
        forwarded: ["dlq"],
    }
    clients = {r.client_id for r in trace_records(traced.broker) if r.source == "proxy"}
    assert clients == {META[0][1]}
