"""Message trace end to end: traced clients and a broker with trace_topic_enable, then
``pocketmq message trace`` (in-process, on a worker thread) reading the life back.

A nameserver and one broker on port 0, delay levels of 100-800 ms so that retries
come quickly; every wait polls with a deadline.
"""

from __future__ import annotations

import json
import logging

import pytest
from clikit import pocketmq_main

from pocketmq.broker.broker import Broker
from pocketmq.broker.store.results import GetStatus
from pocketmq.broker.topic_config import SCHEDULE_TOPIC, BrokerTopicConfig
from pocketmq.client import (
    AdminClient,
    ConsumeResult,
    LocalTransactionState,
    Message,
    MessageExt,
    PermissionDeniedError,
    Producer,
    PullConsumer,
    PushConsumer,
    TransactionProducer,
    dlq_topic,
)
from pocketmq.client.trace_view import message_life, query_trace
from pocketmq.common.message import StoredMessage, decode_record
from pocketmq.common.trace import DEFAULT_TRACE_TOPIC, TraceRecord, TraceType, decode_trace_body

LEVELS = "100ms 200ms 300ms 400ms 500ms 600ms 700ms 800ms"
FAST = {"rebalance_interval_s": 1.0, "commit_interval_s": 0.2, "pull_suspend_ms": 1000}


@pytest.fixture
async def traced_broker(start_broker, nameserver, eventually) -> Broker:
    broker = await start_broker(
        namesrv_addrs=nameserver.address, trace_topic_enable=True, message_delay_level=LEVELS
    )
    broker.topics.create(
        BrokerTopicConfig(topic_name="orders", read_queue_nums=2, write_queue_nums=2)
    )
    await eventually(
        lambda: (
            nameserver.route_table.get_route("orders") is not None
            and nameserver.route_table.get_route(DEFAULT_TRACE_TOPIC) is not None
        ),
        what="routes of orders and the trace topic",
    )
    return broker


@pytest.fixture
async def admin(nameserver):
    async with AdminClient(nameserver.address) as client:
        yield client


async def life_when(admin, msg_id, eventually, ready, what):
    """The message's life once ready(life) holds."""

    async def probe():
        life = message_life(msg_id, await query_trace(admin, msg_id))
        return life if ready(life) else None

    return await eventually(probe, timeout_s=20, interval_s=0.2, what=what)


async def test_the_broker_creates_the_trace_topic_at_start(traced_broker):
    config = traced_broker.topics.get(DEFAULT_TRACE_TOPIC)
    assert config is not None and config.writable and config.readable


async def test_a_sent_and_consumed_message_traces_producer_broker_and_consumer(
    traced_broker, nameserver, admin, eventually
):
    async with Producer(
        group="pg-trace", namesrv=nameserver.address, enable_trace=True
    ) as producer:
        sent = await producer.send(
            Message(topic="orders", body=b"paid", tags="paid", keys=["order-1"])
        )
    consumer = PushConsumer(
        group="cg-trace",
        namesrv=nameserver.address,
        consume_from="first",
        enable_trace=True,
        **FAST,
    )
    consumer.subscribe("orders")
    consumer.listener(lambda msgs: ConsumeResult.CONSUME_SUCCESS)
    async with consumer:
        life = await life_when(
            admin,
            sent.msg_id,
            eventually,
            lambda life: life["consumed"] and life["consumed"][0]["cost_ms"] is not None,
            "a traced consumption",
        )

    assert (life["topic"], life["tags"], life["keys"]) == ("orders", "paid", ["order-1"])
    [pub] = life["produced"]
    assert pub["group"] == "pg-trace" and pub["client_id"] == producer.client_id
    assert pub["status"] == "SEND_OK" and pub["msg_type"] == "Normal"
    assert (pub["broker"], pub["queue_id"], pub["queue_offset"]) == (
        sent.queue.broker_name,
        sent.queue.queue_id,
        sent.queue_offset,
    )
    assert pub["offset_msg_id"] == sent.offset_msg_id
    assert pub["store_host"] == traced_broker.address and pub["cost_ms"] > 0
    [stored] = [b for b in life["broker"] if b["type"] == TraceType.STORE]
    assert stored["queue_offset"] == sent.queue_offset and stored["store_time"] > 0
    [attempt] = life["consumed"]
    assert attempt["group"] == "cg-trace" and attempt["client_id"] == consumer.client_id
    assert attempt["status"] == "success" and attempt["attempt"] == 0
    assert attempt["queue_offset"] == sent.queue_offset
    assert not life["dead_lettered"]
    # the same records are found through the message key and the offset message id
    by_offset_id = await query_trace(admin, sent.offset_msg_id)
    assert {r.type for r in by_offset_id} >= {TraceType.PUB, TraceType.SUB_AFTER}


async def test_a_message_retried_until_dead_lettered_traces_every_attempt_and_the_dlq(
    traced_broker, nameserver, admin, eventually
):
    async with Producer(
        group="pg-poison", namesrv=nameserver.address, enable_trace=True
    ) as producer:
        sent = await producer.send(Message(topic="orders", body=b"poison"))
    attempts: list[int] = []
    consumer = PushConsumer(
        group="cg-poison",
        namesrv=nameserver.address,
        consume_from="first",
        max_reconsume_times=2,
        enable_trace=True,
        **FAST,
    )
    consumer.subscribe("orders")

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        attempts.extend(m.reconsume_times for m in messages)
        return ConsumeResult.RECONSUME_LATER

    async with consumer:
        life = await life_when(
            admin,
            sent.msg_id,
            eventually,
            lambda life: life["dead_lettered"],
            "the dead-lettering traced",
        )
        await eventually(
            lambda: traced_broker.topics.get(dlq_topic("cg-poison")), what="the DLQ topic"
        )

    assert attempts == [0, 1, 2]
    rows = life["consumed"]
    assert [(r["attempt"], r["status"]) for r in rows] == [
        (0, "retry_later"),
        (1, "retry_later"),
        (2, "dlq"),
    ]
    assert all(r["client_id"] == consumer.client_id and r["cost_ms"] is not None for r in rows)
    # the broker traced each retry copy coming due in the group's retry topic, and the
    # hand-backs: two to retry, the last to the DLQ
    retries = [b for b in life["broker"] if b["type"] == TraceType.DELIVERED]
    assert [b["topic"] for b in retries] == ["%RETRY%cg-poison"] * 2
    life = await life_when(
        admin,
        sent.msg_id,
        eventually,
        lambda life: life["dead_lettered"][0]["broker_confirmed"],
        "the broker's record of the dead-letter copy",
    )
    assert life["dead_lettered"] == [
        {
            "group": "cg-poison",
            "client_id": consumer.client_id,
            "ts": rows[-1]["ts"],
            "dlq_topic": "%DLQ%cg-poison",
            "broker_confirmed": True,
        }
    ]
    sent_back = [
        (b["topic"], b["status"]) for b in life["broker"] if b["type"] == TraceType.SEND_BACK
    ]
    assert sent_back == [("%RETRY%cg-poison", "to retry")] * 2 + [
        ("%DLQ%cg-poison", "dead-lettered")
    ]


async def test_the_broker_traces_a_delayed_message_parked_then_delivered(
    traced_broker, nameserver, admin, eventually
):
    async with Producer(group="pg-delay", namesrv=nameserver.address) as producer:  # untraced
        sent = await producer.send(Message(topic="orders", body=b"later", delay_level=2))
    life = await life_when(
        admin,
        sent.msg_id,
        eventually,
        lambda life: any(b["type"] == TraceType.DELIVERED for b in life["broker"]),
        "the delayed delivery",
    )

    stored, delivered = life["broker"]
    assert stored["type"] == TraceType.STORE and stored["stored_topic"] == SCHEDULE_TOPIC
    assert stored["msg_type"] == "Delay" and stored["topic"] == "orders"
    assert delivered["topic"] == "orders" and delivered["stored_topic"] == SCHEDULE_TOPIC
    assert delivered["status"] == "delivered after delay level 2"
    assert delivered["store_time"] - stored["store_time"] >= 200 - 5
    assert not life["produced"]  # the producer itself was not traced
    figures = traced_broker.trace.figures()
    assert int(figures["trace_written_total"]) >= 2
    assert figures["trace_dropped_total"] == "0"


async def test_a_pull_consumer_traces_what_each_poll_hands_over(
    traced_broker, nameserver, admin, eventually
):
    async with Producer(group="pg-pull", namesrv=nameserver.address) as producer:
        sent = await producer.send(Message(topic="orders", body=b"pulled"))
    consumer = PullConsumer(
        group="cg-pull", namesrv=nameserver.address, consume_from="first", enable_trace=True, **FAST
    )
    consumer.subscribe("orders")
    async with consumer:
        got: list[MessageExt] = []

        async def polled():
            got.extend(await consumer.poll(timeout_s=0.5))
            return any(m.msg_id == sent.msg_id for m in got)

        await eventually(polled, timeout_s=15, what="the message polled")
    life = await life_when(
        admin, sent.msg_id, eventually, lambda life: life["consumed"], "the poll traced"
    )
    assert [(r["group"], r["status"]) for r in life["consumed"]] == [("cg-pull", "success")]


def stored_in(broker: Broker, topic: str) -> list[StoredMessage]:
    """Every message of *topic* on *broker*, read from its store."""
    out = []
    for queue_id in broker.store.queue_ids(topic):
        result = broker.store.get_messages(topic, queue_id, 0, max_count=1000)
        if result.status is GetStatus.FOUND:
            out += [decode_record(raw) for raw in result.records]
    return out


async def test_a_one_way_send_is_traced_once_the_broker_answered(
    traced_broker, nameserver, admin, eventually
):
    async with Producer(
        group="pg-oneway", namesrv=nameserver.address, enable_trace=True
    ) as producer:
        await producer.send_oneway(
            Message(topic="orders", body=b"fire", tags="fast", keys=["oneway-1"])
        )
    # shut down: what was handed over is sent, and its trace written
    [stored] = [m for m in stored_in(traced_broker, "orders") if m.body == b"fire"]
    life = await life_when(
        admin,
        stored.uniq_key,
        eventually,
        lambda life: life["produced"] and life["broker"],
        "the one-way Pub and the broker's Store",
    )

    [pub] = life["produced"]
    assert (life["topic"], life["tags"], life["keys"]) == ("orders", "fast", ["oneway-1"])
    assert pub["group"] == "pg-oneway" and pub["client_id"] == producer.client_id
    assert (pub["status"], pub["msg_type"]) == ("SEND_OK", "Normal_Oneway")
    assert (pub["queue_id"], pub["queue_offset"]) == (stored.queue_id, stored.queue_offset)
    [store] = [b for b in life["broker"] if b["type"] == TraceType.STORE]
    assert pub["offset_msg_id"] == store["offset_msg_id"]


@pytest.mark.parametrize("idempotent", [False, True])
async def test_a_one_way_send_the_broker_refuses_is_traced_as_failed(
    tmp_path, start_broker, nameserver, eventually, idempotent
):
    acl = tmp_path / "acl.toml"
    acl.write_text(
        '[[accounts]]\naccess_key = "app"\nsecret_key = "app-secret"\n'
        'default_topic_perm = "DENY"\ndefault_group_perm = "PUB|SUB"\n'
        f'topic_perms = {{ audit = "SUB", {DEFAULT_TRACE_TOPIC} = "PUB" }}\n'
    )
    broker = await start_broker(
        namesrv_addrs=nameserver.address,
        trace_topic_enable=True,
        acl_enable=True,
        acl_file=str(acl),
    )
    broker.topics.create(
        BrokerTopicConfig(topic_name="audit", read_queue_nums=1, write_queue_nums=1)
    )
    await eventually(lambda: nameserver.route_table.get_route("audit") is not None, what="route")
    async with Producer(
        group="pg-oneway",
        namesrv=nameserver.address,
        access_key="app",
        secret_key="app-secret",
        enable_trace=True,
        idempotent=idempotent,
    ) as producer:
        message = Message(topic="audit", body=b"nope", keys=["k-1"])
        if idempotent:  # its producer id is refused first, before anything is handed over
            with pytest.raises(PermissionDeniedError):
                await producer.send_oneway(message)
        else:  # handed over; the broker's refusal comes later, to the log and the trace
            await producer.send_oneway(message)

    def traced_pub() -> list[TraceRecord]:
        records = [
            r for m in stored_in(broker, DEFAULT_TRACE_TOPIC) for r in decode_trace_body(m.body)
        ]
        return [r for r in records if r.type == TraceType.PUB and r.topic == "audit"]

    [pub] = await eventually(traced_pub, timeout_s=10, what="the refused one-way send's Pub")
    assert pub.status.startswith("FAILED: PermissionDeniedError: ") and "'audit'" in pub.status
    assert (pub.msg_type, pub.group, pub.keys) == ("Normal_Oneway", "pg-oneway", ["k-1"])
    assert pub.queue_offset == -1
    if not idempotent:  # handed over: the record names its id and the queue it was meant for
        assert pub.msg_id and pub.broker == broker.config.broker_name and pub.queue_id == 0
    assert stored_in(broker, "audit") == []


async def test_a_full_trace_queue_drops_and_counts_and_never_blocks_sends(
    traced_broker, nameserver, admin, eventually
):
    producer = Producer(
        group="pg-full",
        namesrv=nameserver.address,
        enable_trace=True,
        trace_queue_capacity=4,
        trace_flush_interval_ms=600_000,
    )
    async with producer:
        results = [await producer.send(Message(topic="orders", body=b"m%d" % i)) for i in range(20)]
        trace = producer.trace
        assert trace is not None
        assert (trace.queued, trace.dropped) == (4, 16)  # nothing written meanwhile
    assert all(r.status.value == "SEND_OK" for r in results)
    assert (trace.written, trace.failed) == (4, 0)  # flushed on shutdown
    kept = await life_when(
        admin,
        results[3].msg_id,
        eventually,
        lambda life: life["produced"],
        "the fourth send's trace",
    )
    assert kept["produced"][0]["status"] == "SEND_OK"
    dropped = await life_when(
        admin,
        results[4].msg_id,
        eventually,
        lambda life: life["broker"],
        "the broker's record of the fifth",
    )
    assert not dropped["produced"]  # its Pub was dropped; the producer flushed before


async def test_a_producer_without_pub_on_the_trace_topic_warns_once_and_sends_on(
    tmp_path, start_broker, nameserver, eventually, caplog
):
    acl = tmp_path / "acl.toml"
    acl.write_text(
        '[[accounts]]\naccess_key = "app"\nsecret_key = "app-secret"\n'
        'default_topic_perm = "DENY"\ndefault_group_perm = "PUB|SUB"\n'
        'topic_perms = { orders = "PUB|SUB" }\n'
    )
    broker = await start_broker(
        namesrv_addrs=nameserver.address,
        trace_topic_enable=True,
        acl_enable=True,
        acl_file=str(acl),
    )
    broker.topics.create(
        BrokerTopicConfig(topic_name="orders", read_queue_nums=1, write_queue_nums=1)
    )
    await eventually(
        lambda: nameserver.route_table.get_route("orders") is not None, what="route of orders"
    )
    caplog.set_level(logging.WARNING, logger="pocketmq.client.trace")
    async with Producer(
        group="pg",
        namesrv=nameserver.address,
        access_key="app",
        secret_key="app-secret",
        enable_trace=True,
        retry_times_when_send_failed=0,
    ) as producer:
        for body in (b"a", b"b", b"c"):
            sent = await producer.send(Message(topic="orders", body=body))
            assert sent.status.value == "SEND_OK"
            await producer.trace.run_once()
        assert (producer.trace.failed, producer.trace.written) == (3, 0)
    warnings = [r.getMessage() for r in caplog.records if "no permission" in r.getMessage()]
    assert len(warnings) == 1
    assert "PUB on RMQ_SYS_TRACE_TOPIC" in warnings[0] and "sends are unaffected" in warnings[0]


# -- the CLI -------------------------------------------------------------------------------
async def test_message_trace_cli_prints_the_life_as_text_and_json(
    traced_broker, nameserver, admin, eventually, capsys
):
    async with Producer(group="pg-cli", namesrv=nameserver.address, enable_trace=True) as producer:
        sent = await producer.send(Message(topic="orders", body=b"x", keys=["k-cli"]))
    consumer = PushConsumer(
        group="cg-cli",
        namesrv=nameserver.address,
        consume_from="first",
        max_reconsume_times=1,
        enable_trace=True,
        **FAST,
    )
    consumer.subscribe("orders")
    consumer.listener(lambda msgs: ConsumeResult.RECONSUME_LATER)
    async with consumer:
        await life_when(
            admin,
            sent.msg_id,
            eventually,
            lambda life: [d["broker_confirmed"] for d in life["dead_lettered"]] == [True],
            "the dead-lettering traced by consumer and broker",
        )

    code, out, err = await pocketmq_main(
        capsys, "message", "trace", sent.msg_id, "--namesrv", nameserver.address
    )
    assert code == 0, err
    assert f"Message ID  {sent.msg_id}" in out
    assert "Produced" in out and "pg-cli" in out and "SEND_OK" in out
    assert "Consumed" in out and "retry_later" in out and "dlq" in out
    assert (
        "Dead-lettered: group cg-cli moved it to %DLQ%cg-cli at " in out
        and "(the broker stored the copy)" in out
    )
    assert "SendBack" in out and "dead-lettered" in out
    consumed_lines = [
        line for line in out.splitlines() if "cg-cli" in line and consumer.client_id in line
    ]
    assert len(consumed_lines) == 2  # attempt 1 and 2

    code, out, err = await pocketmq_main(
        capsys, "message", "trace", sent.msg_id, "--namesrv", nameserver.address, "--json"
    )
    assert code == 0, err
    life = json.loads(out)
    assert life["msg_id"] == sent.msg_id and life["keys"] == ["k-cli"]
    assert [c["status"] for c in life["consumed"]] == ["retry_later", "dlq"]
    assert life["produced"][0]["queue_offset"] == sent.queue_offset
    assert {r["type"] for r in life["records"]} >= {"Pub", "SubBefore", "SubAfter", "Store"}

    code, out, err = await pocketmq_main(
        capsys, "message", "trace", "0" * 32, "--namesrv", nameserver.address
    )
    assert code == 1 and "no trace of message" in err


async def test_a_transactional_message_traces_its_half_commit_and_rollback(
    traced_broker, nameserver, admin, eventually
):
    async with TransactionProducer(
        "pg-tx",
        nameserver.address,
        enable_trace=True,
        checker=lambda msg: LocalTransactionState.COMMIT,
    ) as tx:
        committed = await tx.send_in_transaction(
            Message(topic="orders", body=b"paid"), lambda msg, arg: LocalTransactionState.COMMIT
        )
        rolled = await tx.send_in_transaction(
            Message(topic="orders", body=b"no"), lambda msg, arg: LocalTransactionState.ROLLBACK
        )
    for result, state in ((committed, "COMMIT"), (rolled, "ROLLBACK")):
        life = await life_when(
            admin,
            result.msg_id,
            eventually,
            lambda life: (
                life["transactions"]
                and any(b["type"] == TraceType.END_TRANSACTION for b in life["broker"])
            ),
            f"the {state} traced",
        )
        [half] = life["produced"]
        assert half["msg_type"] == "Trans_Half" and half["status"] == "SEND_OK"
        [ended] = life["transactions"]
        assert ended["group"] == "pg-tx" and ended["transaction_state"] == state
        assert not ended["from_transaction_check"]
        [applied] = [b for b in life["broker"] if b["type"] == TraceType.END_TRANSACTION]
        assert applied["status"] == state and applied["topic"] == "orders"
        [stored] = [b for b in life["broker"] if b["type"] == TraceType.STORE]
        assert stored["msg_type"] == "Trans_Half"
