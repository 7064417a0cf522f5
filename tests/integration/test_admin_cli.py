"""The admin commands against a real nameserver and two real brokers (gRPC, port 0).

The CLI runs in-process (``pocketmq.cli.main`` on a worker thread, since it
runs its own event loop while the cluster serves on the test's); output is
read with capsys. One test runs it as a subprocess, for real exit codes.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import sys
import time
from collections import Counter

import pytest
from clusterkit import QUEUES, Cluster, create_topic

from pocketmq.cli.admin_cmd import parse_reset_target
from pocketmq.cli.table import render
from pocketmq.client import (
    ConsumeResult,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
    SendResult,
)
from pocketmq.client.remoting import ConsumerInfo, PullStatus, Remoting

FAST = {"rebalance_interval_s": 1.0, "commit_interval_s": 0.2, "pull_suspend_ms": 1000}


async def send(cluster: Cluster, topic: str, count: int, **fields) -> list[SendResult]:
    async with Producer(group="admin-test-pg", namesrv=cluster.addr) as producer:
        return list(
            await asyncio.gather(
                *(
                    producer.send(Message(topic=topic, body=f"m{i}".encode(), **fields))
                    for i in range(count)
                )
            )
        )


def broker_addr(cluster: Cluster, index: int) -> str:
    return cluster.brokers[index].address


# -- pure parts ----------------------------------------------------------------------------
def test_reset_target_takes_earliest_latest_ms_and_iso_8601():
    assert parse_reset_target("earliest") == "earliest"
    assert parse_reset_target("1700000000123") == 1700000000123
    moment = datetime.datetime(2024, 5, 1, 10, 0, 0, 250000, tzinfo=datetime.UTC)
    assert parse_reset_target(moment.isoformat()) == int(moment.timestamp() * 1000)
    assert parse_reset_target("2024-05-01T10:00:00Z") == 1714557600000
    with pytest.raises(Exception, match="ISO-8601"):
        parse_reset_target("yesterday")


def test_table_right_aligns_numeric_columns_and_prints_none_as_dash():
    assert render(["NAME", "LAG"], [["a", 5], ["bb", None], ["c", 120]]).splitlines() == [
        "NAME  LAG",
        "a       5",
        "bb      -",
        "c     120",
    ]


# -- topics --------------------------------------------------------------------------------
async def test_topic_create_update_route_status_and_delete_across_both_brokers(
    cluster, pocketmq, eventually
):
    code, rows, err = await pocketmq("topic", "create", "orders", "-r", "3", json_out=True)
    assert code == 0, err
    assert [(r["broker_name"], r["result"]) for r in rows] == [
        ("broker-a", "created"),
        ("broker-b", "created"),
    ]

    async def routed_on_both():
        code, route, _ = await pocketmq("topic", "route", "orders", json_out=True)
        return code == 0 and len(route["brokers"]) == 2 and route

    route = await eventually(routed_on_both, what="route of orders on both brokers")
    assert {(b["read_queue_nums"], b["write_queue_nums"], b["perm"]) for b in route["brokers"]} == {
        (3, 3, 6)
    }

    code, out, _ = await pocketmq("topic", "create", "orders")
    assert code == 1 and "ALREADY_EXISTS" in out  # each broker's refusal is in its row

    code, _, err = await pocketmq(
        "topic", "update", "orders", "-w", "2", "-p", "4", "--broker", broker_addr(cluster, 0)
    )
    assert code == 0, err
    a, b = (broker.topics.get("orders") for broker in cluster.brokers)
    assert (a.read_queue_nums, a.write_queue_nums, a.perm) == (3, 2, 4)  # read kept
    assert (b.read_queue_nums, b.write_queue_nums, b.perm) == (3, 3, 6)  # untouched

    await send(cluster, "orders", 5)
    code, queues, _ = await pocketmq("topic", "status", "orders", json_out=True)
    assert code == 0
    assert len(queues) == 6 and sum(q["max_offset"] for q in queues) == 5
    code, topics, _ = await pocketmq("topic", "list", json_out=True)
    assert "orders" in {t["topic"] for t in topics}

    code, _, err = await pocketmq("topic", "delete", "orders")
    assert code == 0, err
    assert all(broker.topics.get("orders") is None for broker in cluster.brokers)


async def test_topic_create_on_one_broker_or_an_unknown_cluster(cluster, pocketmq):
    code, rows, err = await pocketmq(
        "topic", "create", "solo", "--broker", broker_addr(cluster, 1), json_out=True
    )
    assert code == 0, err
    assert [r["broker_name"] for r in rows] == ["broker-b"]
    assert cluster.brokers[0].topics.get("solo") is None
    assert cluster.brokers[1].topics.get("solo").read_queue_nums == QUEUES  # the default

    code, _, err = await pocketmq("topic", "create", "other", "--cluster", "NoSuchCluster")
    assert code == 2 and "DefaultCluster" in err


# -- groups --------------------------------------------------------------------------------
async def consume_all(cluster: Cluster, group: str, topic: str, count: int) -> None:
    consumer = PullConsumer(
        group=group, namesrv=cluster.addr, consume_from="first", auto_commit=False, **FAST
    )
    consumer.subscribe(topic)
    await consumer.start()
    try:
        got = 0
        deadline = time.monotonic() + 20
        while got < count and time.monotonic() < deadline:
            got += len(await consumer.poll(timeout_s=1.0))
        assert got == count
        await consumer.commit()
    finally:
        await consumer.shutdown()


async def test_group_progress_and_list_report_lag_per_queue_and_total(
    cluster, pocketmq, eventually
):
    await create_topic(cluster, "ledger", eventually)
    await send(cluster, "ledger", 10)
    await consume_all(cluster, "auditors", "ledger", 10)
    await send(cluster, "ledger", 5)

    code, progress, err = await pocketmq(
        "group", "progress", "auditors", "--topic", "ledger", json_out=True
    )
    assert code == 0, err
    queues = progress["queues"]
    assert progress["total_lag"] == 5 == sum(q["lag"] for q in queues)
    assert sum(q["broker_offset"] for q in queues) == 15
    assert {q["broker_name"] for q in queues} == {"broker-a", "broker-b"}
    assert all(q["lag"] == q["broker_offset"] - q["consumer_offset"] for q in queues)

    code, out, _ = await pocketmq("group", "progress", "auditors")
    assert code == 0 and out.rstrip().endswith("total lag: 5")

    online = PushConsumer(group="watchers", namesrv=cluster.addr, **FAST)
    online.subscribe("ledger")
    online.register_listener(lambda msgs: ConsumeResult.CONSUME_SUCCESS)
    await online.start()
    try:
        code, groups, _ = await pocketmq("group", "list", json_out=True)
        by_name = {g["group"]: g for g in groups}
        assert by_name["auditors"]["total_lag"] == 5
        assert by_name["auditors"]["client_ids"] == []
        assert "ledger" in by_name["auditors"]["offset_topics"]
        assert by_name["watchers"]["client_ids"] == [online.client_id]
        assert (by_name["watchers"]["consume_type"], by_name["watchers"]["message_model"]) == (
            "push",
            "clustering",
        )
    finally:
        await online.shutdown()

    code, _, err = await pocketmq("group", "progress", "nobody")
    assert code == 1 and "nobody" in err


async def test_reset_offset_without_consumers_stores_earliest_latest_or_timestamp(
    cluster, pocketmq, eventually
):
    await create_topic(cluster, "events", eventually)
    await send(cluster, "events", 6)

    async def after(ms: int) -> int:  # the first millisecond of the clock past *ms*
        return await eventually(
            lambda: now_ms() > ms and now_ms(), interval_s=0.001, what=f"the clock past {ms}"
        )

    boundary_ms = await after(now_ms())  # a millisecond boundary between the two batches
    await after(boundary_ms)
    await send(cluster, "events", 3)

    async def total_lag() -> int:
        code, progress, err = await pocketmq(
            "group", "progress", "replayers", "--topic", "events", json_out=True
        )
        assert code == 0, err
        return progress["total_lag"]

    code, out, err = await pocketmq(
        "group",
        "reset-offset",
        "replayers",
        "events",
        "--to",
        "latest",
        "--execute",
        "--allow-new-group",
    )
    assert code == 0, err
    assert "no consumer of replayers is online; the offsets are stored" in out
    assert await total_lag() == 0

    code, result, _ = await pocketmq(
        "group",
        "reset-offset",
        "replayers",
        "events",
        "--to",
        "earliest",
        "--execute",
        json_out=True,
    )
    assert len(result["queues"]) == 2 * QUEUES and all(q["offset"] == 0 for q in result["queues"])
    assert await total_lag() == 9

    iso = datetime.datetime.fromtimestamp(boundary_ms / 1000).isoformat()
    code, _, err = await pocketmq(
        "group", "reset-offset", "replayers", "events", "--to", iso, "--execute"
    )
    assert code == 0, err
    assert await total_lag() == 3
    code, _, _ = await pocketmq(
        "group", "reset-offset", "replayers", "events", "--to", str(boundary_ms), "--execute"
    )
    assert await total_lag() == 3

    code, _, err = await pocketmq(
        "group", "reset-offset", "replayers", "events", "--to", "yesterday"
    )
    assert code == 2 and "ISO-8601" in err


async def test_reset_offset_while_a_push_consumer_runs_makes_it_consume_again(
    cluster, pocketmq, eventually, caplog
):
    caplog.set_level(logging.INFO, logger="pocketmq.client.consumer_base")
    await create_topic(cluster, "payments", eventually)
    bodies = {r.msg_id for r in await send(cluster, "payments", 8)}
    seen: Counter[str] = Counter()
    consumer = PushConsumer(group="settlement", namesrv=cluster.addr, consume_from="first", **FAST)
    consumer.subscribe("payments")

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        seen.update(m.msg_id for m in messages)
        return ConsumeResult.CONSUME_SUCCESS

    async def lag() -> int:
        code, progress, _ = await pocketmq(
            "group", "progress", "settlement", "--topic", "payments", json_out=True
        )
        return progress["total_lag"] if code == 0 else -1

    await consumer.start()
    try:
        await eventually(lambda: set(seen) == bodies, timeout_s=15, what="first delivery")
        await eventually(lambda: _eq(lag(), 0), timeout_s=10, what="offsets committed")

        code, out, err = await pocketmq(
            "group", "reset-offset", "settlement", "payments", "--to", "earliest", "--execute"
        )
        assert code == 0, err
        assert f"told 1 online consumer(s): {consumer.client_id}" in out
        await eventually(
            lambda: "an admin reset payments" in caplog.text,
            what="the consumer handled RESET_CONSUMER_CLIENT_OFFSET",
        )

        await eventually(
            lambda: all(seen[b] >= 2 for b in bodies),
            timeout_s=15,
            what="every message consumed again after the reset",
        )
        # The consumer's commits continue from the reset: they end at the queues' ends.
        await eventually(lambda: _eq(lag(), 0), timeout_s=10, what="offsets committed again")
    finally:
        await consumer.shutdown()


async def test_reset_offset_moves_a_running_pull_consumer_and_fences_stale_commits(
    cluster, pocketmq, eventually
):
    await create_topic(cluster, "audit", eventually)
    await send(cluster, "audit", 6)
    consumer = PullConsumer(group="auditors", namesrv=cluster.addr, consume_from="first", **FAST)
    consumer.subscribe("audit")
    await consumer.start()
    try:
        first: list[MessageExt] = []
        await eventually(lambda: _poll_into(consumer, first, 6), timeout_s=15)
        await consumer.commit()
        code, _, err = await pocketmq(
            "group", "reset-offset", "auditors", "audit", "--to", "earliest", "--execute"
        )
        assert code == 0, err
        again: list[MessageExt] = []
        await eventually(lambda: _poll_into(consumer, again, 6), timeout_s=15)
        assert sorted(m.msg_id for m in again) == sorted(m.msg_id for m in first)
    finally:
        await consumer.shutdown()


async def test_after_a_reset_stale_commits_are_dropped_until_the_consumer_pulls_there(
    cluster, eventually
):
    """The fence (RocketMQ 5's assignResetOffset): a consumer that missed the push
    neither overwrites the reset nor reads on from its old position."""
    await create_topic(cluster, "fenced", eventually)
    await send(cluster, "fenced", 12)
    broker = cluster.brokers[0]
    queue = MessageQueue("fenced", "broker-a", 0)
    remoting = Remoting()
    client = remoting.broker(broker.address)
    try:
        max_offset = await client.max_offset(queue)
        assert max_offset > 0
        await client.update_consumer_offset("late", queue, max_offset)
        # An online member (heartbeat), with no command channel: it will not hear of the reset.
        await client.heartbeat(
            "10.0.0.9@1#stale",
            consumers=[ConsumerInfo(group="late", subscriptions={"fenced": "*"})],
        )
        moved, told = await client.reset_consumer_offset(
            "late", "fenced", timestamp_ms=None, broker_name="broker-a"
        )
        assert told == [] and {q.queue_id: q.offset for q in moved}[0] == 0

        await client.update_consumer_offset("late", queue, max_offset)  # stale: dropped
        assert await client.query_consumer_offset("late", queue) == 0
        reply = await client.pull(
            group="late",
            queue=queue,
            offset=max_offset,
            max_messages=32,
            subscription="*",
            suspend_ms=0,
            commit_offset=max_offset,
            timeout_s=5,
        )
        assert (reply.status, reply.next_begin_offset) == (PullStatus.OFFSET_ILLEGAL, 0)
        assert await client.query_consumer_offset("late", queue) == 0

        reply = await client.pull(
            group="late",
            queue=queue,
            offset=0,
            max_messages=1,
            subscription="*",
            suspend_ms=0,
            timeout_s=5,
        )
        assert reply.status is PullStatus.FOUND  # at the reset offset: fence lifted
        await client.update_consumer_offset("late", queue, 1)
        assert await client.query_consumer_offset("late", queue) == 1
    finally:
        await remoting.close()


async def _eq(value, expected) -> bool:
    return await value == expected


async def _poll_into(consumer: PullConsumer, into: list[MessageExt], count: int) -> bool:
    into.extend(await consumer.poll(timeout_s=0.5))
    return len(into) >= count


# -- messages ------------------------------------------------------------------------------
async def test_message_lookups_by_key_by_either_id_and_by_offset(cluster, pocketmq, eventually):
    await create_topic(cluster, "invoices", eventually)
    async with Producer(group="admin-test-pg", namesrv=cluster.addr) as producer:
        sent = await producer.send(
            Message(topic="invoices", body=b"invoice 7", tags="paid", keys=["inv-7"])
        )

    code, found, err = await pocketmq("message", "by-key", "invoices", "inv-7", json_out=True)
    assert code == 0, err
    assert [(m["body"], m["msg_id"]) for m in found] == [("invoice 7", sent.msg_id)]

    code, found, err = await pocketmq("message", "by-id", sent.offset_msg_id, json_out=True)
    assert code == 0, err
    assert found[0]["msg_id"] == sent.msg_id and found[0]["tags"] == "paid"

    code, _, err = await pocketmq("message", "by-id", sent.msg_id)
    assert code == 2 and "--topic" in err and "unique id" in err
    code, found, err = await pocketmq(
        "message", "by-id", sent.msg_id, "--topic", "invoices", json_out=True
    )
    assert code == 0, err
    assert found[0]["offset_msg_id"] == sent.offset_msg_id

    queue = sent.queue
    code, found, err = await pocketmq(
        "message",
        "by-offset",
        "invoices",
        str(queue.queue_id),
        str(sent.queue_offset),
        "--broker",
        queue.broker_name,
        json_out=True,
    )
    assert code == 0, err
    assert found[0]["body"] == "invoice 7"
    code, out, _ = await pocketmq(
        "message",
        "by-offset",
        "invoices",
        str(queue.queue_id),
        str(sent.queue_offset),
        "--broker",
        queue.broker_name,
    )
    assert "invoice 7" in out and "Offset Message ID" in out

    code, _, err = await pocketmq("message", "by-offset", "invoices", "0", "0")
    assert code == 2 and "--broker" in err
    code, _, err = await pocketmq(
        "message", "by-offset", "invoices", str(queue.queue_id), "99", "--broker", queue.broker_name
    )
    assert code == 1 and "no message at offset 99" in err


# -- brokers and cluster -------------------------------------------------------------------
async def test_broker_status_config_and_cluster_list(cluster, pocketmq):
    code, status, err = await pocketmq("broker", "status", json_out=True)
    assert code == 0, err
    assert set(status) == {"broker-a", "broker-b"}
    assert status["broker-a"]["broker_address"] == broker_addr(cluster, 0)

    code, config, err = await pocketmq("broker", "config", broker_addr(cluster, 1), json_out=True)
    assert code == 0, err
    assert config[broker_addr(cluster, 1)]["broker_name"] == "broker-b"
    assert config[broker_addr(cluster, 1)]["auto_create_topic_enable"] == "true"

    code, brokers, err = await pocketmq("cluster", "list", json_out=True)
    assert code == 0, err
    assert [
        (b["broker_name"], b["role"], b["broker_role"], b["master_epoch"], b["addr"])
        for b in brokers
    ] == [
        ("broker-a", "master", "ASYNC_MASTER", 1, broker_addr(cluster, 0)),
        ("broker-b", "master", "ASYNC_MASTER", 1, broker_addr(cluster, 1)),
    ]
    assert {b["replication_lag_bytes"] for b in brokers} == {None}  # no replicas
    code, out, _ = await pocketmq("cluster", "list")
    header, *lines = out.splitlines()
    assert header.split() == [
        "CLUSTER",
        "BROKER",
        "ID",
        "ROLE",
        "ADDRESS",
        "EPOCH",
        "LAG",
        "BYTES",
        "IN",
        "SYNC",
        "VERSION",
        "PUT",
        "TPS",
        "GET",
        "TPS",
        "CONTROLLER",
        "ID",
        "IN-SYNC",
        "SET",
    ]
    assert len(lines) == 2 and all(
        "DefaultCluster" in line and "ASYNC_MASTER" in line for line in lines
    )


async def test_a_remote_error_exits_1_and_bad_usage_exits_2(cluster, pocketmq):
    code, _, err = await pocketmq("topic", "route", "nowhere")
    assert code == 1 and err.startswith("pocketmq topic route:") and "nowhere" in err
    code, _, err = await pocketmq("topic", "list", namesrv="not-an-address")
    assert code == 2 and "host:port" in err
    code, _, _ = await pocketmq("topic", "frobnicate")
    assert code == 2

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pocketmq",
        "--log-level",
        "WARNING",
        "topic",
        "list",
        "--namesrv",
        "127.0.0.1:1",
        "--timeout",
        "1",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 1 and out == b""
    assert b"pocketmq topic list: GetTopicRoutes to 127.0.0.1:1 failed: UNAVAILABLE" in err


def now_ms() -> int:
    return int(time.time() * 1000)
