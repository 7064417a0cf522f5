"""The dashboard's JSON API against a real nameserver and broker (in-process, port 0).

Each test calls the API over HTTP as the pages do and checks the answer against
what the cluster really holds (through the SDK), never against mocks.
"""

from __future__ import annotations

import base64
import json
import socket
import time

import pytest
from dashkit import Web, started_cluster

from pocketmq.client import Message, Producer
from pocketmq.client.admin import AdminClient
from pocketmq.client.model import MessageQueue


@pytest.fixture
def web(dash_cluster) -> Web:
    return Web(dash_cluster.url)


async def make_topic(web: Web, topic: str, queues: int = 2) -> None:
    status, body = await web.post(
        "/api/topics", {"topic": topic, "read_queue_nums": queues, "write_queue_nums": queues}
    )
    assert status == 200 and body["routed"] is True, body  # the next look finds it


async def send(web: Web, topic: str, body: str, *, keys: str = "", tags: str = "") -> dict:
    status, result = await web.post(
        f"/api/topics/{topic}/send", {"body": body, "keys": keys, "tags": tags}
    )
    assert status == 200, result
    return result


async def commit_offsets(cluster, group: str, topic: str, offset: int) -> None:
    """The group's offset on every queue of *topic*, as a consumer commits it."""
    async with AdminClient(cluster.namesrv_addr) as admin:
        route = await admin.topic_route(topic)
        broker = admin.broker(cluster.broker.address)
        for queue in route.read_queues():
            await broker.update_consumer_offset(group, queue, offset)


# -- cluster -------------------------------------------------------------------------------
async def test_cluster_lists_the_broker_with_role_version_and_figures(web, dash_cluster):
    status, body = await web.get("/api/cluster")
    assert status == 200
    (broker,) = body["brokers"]
    assert broker["broker_name"] == "broker-a" and broker["broker_id"] == 0
    assert broker["addr"] == dash_cluster.broker.address
    assert broker["role"] == "ASYNC_MASTER" and broker["version"]
    assert float(broker["put_tps"]) >= 0 and broker["error"] == ""
    assert body["nameservers"] == [
        {"addr": dash_cluster.namesrv_addr, "ok": True, "brokers": 1, "error": ""}
    ]


async def test_cluster_history_gains_a_point_per_broker_and_figure_each_sample(web, dash_cluster):
    await dash_cluster.dashboard.history.run_once()
    await dash_cluster.dashboard.history.run_once()
    _, body = await web.get("/api/cluster")
    for figure in ("put_tps", "get_tps"):
        points = body["history"][f"broker/broker-a/0/{figure}"]
        assert len(points) >= 2 and all(len(p) == 2 for p in points)


async def test_the_history_keeps_one_hour_of_points_and_no_more(dash_cluster):
    history = dash_cluster.dashboard.history.history
    for i in range(2 * int(history.retention_s / history.interval_s)):
        history.add("test/series", i, float(i))
    points = history.points("test/series")
    assert len(points) == int(history.retention_s / history.interval_s) + 1
    assert points[-1] == (len(points) * 2 - 3, float(len(points) * 2 - 3))


# -- topics --------------------------------------------------------------------------------
async def test_created_topic_is_on_the_broker_and_listed_as_a_user_topic(web, dash_cluster):
    await make_topic(web, "orders", queues=3)
    config = dash_cluster.broker.topics.get("orders")
    assert config.read_queue_nums == 3 and config.write_queue_nums == 3
    status, body = await web.get("/api/topics?kind=user")
    assert status == 200
    row = next(t for t in body["topics"] if t["topic"] == "orders")
    assert row == {
        "topic": "orders",
        "kind": "user",
        "brokers": ["broker-a"],
        "read_queue_nums": 3,
        "write_queue_nums": 3,
        "perm": "RW",
    }
    _, system = await web.get("/api/topics?kind=system")
    names = {t["topic"] for t in system["topics"]}
    assert "orders" not in names and "TBW102" in names


async def test_update_changes_queue_counts_and_permission(web, dash_cluster):
    await make_topic(web, "resized")
    status, _ = await web.post(
        "/api/topics/resized/update", {"read_queue_nums": 6, "write_queue_nums": 5, "perm": "R"}
    )
    assert status == 200
    config = dash_cluster.broker.topics.get("resized")
    assert (config.read_queue_nums, config.write_queue_nums, config.perm) == (6, 5, 4)


async def test_delete_needs_the_topic_name_as_confirmation(web, dash_cluster, eventually):
    await make_topic(web, "doomed")
    status, body = await web.post("/api/topics/doomed/delete", {"confirm": "doome"})
    assert status == 400 and "confirm" in body["error"]
    assert dash_cluster.broker.topics.get("doomed") is not None
    status, _ = await web.post("/api/topics/doomed/delete", {"confirm": "doomed"})
    assert status == 200
    assert dash_cluster.broker.topics.get("doomed") is None


@pytest.mark.parametrize(
    "fields, says",
    [
        ({"topic": "bad topic!"}, "topic"),
        ({"topic": "ok", "read_queue_nums": 0}, "read_queue_nums"),
        ({"topic": "ok", "perm": "X"}, "perm"),
        ({"read_queue_nums": 1}, "topic"),
    ],
)
async def test_bad_topic_input_is_a_400_naming_the_field(web, fields, says):
    status, body = await web.post("/api/topics", fields)
    assert status == 400 and says in body["error"]


async def test_topic_detail_shows_route_queues_and_groups(web, dash_cluster):
    await make_topic(web, "detailed")
    sent = await send(web, "detailed", "hello", keys="k1")
    await commit_offsets(dash_cluster, "reader", "detailed", 0)
    status, body = await web.get("/api/topics/detailed")
    assert status == 200
    assert body["route"][0]["broker_name"] == "broker-a"
    assert body["route"][0]["addrs"] == {"0": dash_cluster.broker.address}
    queue = next(q for q in body["queues"] if q["queue_id"] == sent["queue_id"])
    assert queue["max_offset"] == 1 and queue["last_store_timestamp_ms"] > 0
    assert [g["group"] for g in body["groups"]] == ["reader"]


async def test_topic_tps_history_counts_what_was_sent(web, dash_cluster):
    await make_topic(web, "busy")
    await web.get("/api/topics/busy")  # the page watches the topic
    history = dash_cluster.dashboard.history
    await history.run_once()
    for i in range(5):
        await send(web, "busy", f"m{i}")
    await history.run_once()
    points = history.history.points("topic/busy/put_tps")
    assert points and points[-1][1] > 0


async def test_topic_get_tps_comes_from_the_brokers_prometheus_counters(tmp_path, eventually):
    with socket.socket() as probe:  # the broker's metrics_port: free now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with started_cluster(tmp_path, metrics_port=port) as cluster:
        await eventually(
            lambda: cluster.namesrv.route_table.cluster_info().live_brokers,
            what="the broker registered",
        )
        history = cluster.dashboard.history
        await history.stop()
        web = Web(cluster.url)
        await make_topic(web, "pulled", queues=1)
        for i in range(3):
            await send(web, "pulled", f"p{i}")
        _, body = await web.get("/api/cluster")
        assert body["brokers"][0]["metrics_url"] == f"http://127.0.0.1:{port}/metrics"
        await web.get("/api/topics/pulled")  # watched from now on
        await history.run_once()
        _, found = await web.get(f"/api/messages?topic=pulled&begin=0&end={2**42}")
        assert len(found["messages"]) == 3  # three messages pulled
        await history.run_once()
        points = history.history.points("topic/pulled/get_tps")
        assert points and points[-1][1] > 0
        assert not [k for k in history.errors if k.startswith("metrics/")]


# -- messages ------------------------------------------------------------------------------
async def test_sent_message_is_found_by_key_by_id_and_by_time(web):
    await make_topic(web, "found")
    sent = await send(web, "found", "needle", keys="order-7 other", tags="paid")
    _, by_key = await web.get("/api/messages?topic=found&key=order-7")
    assert [m["msg_id"] for m in by_key["messages"]] == [sent["msg_id"]]
    assert by_key["messages"][0]["tags"] == "paid"
    _, by_id = await web.get(f"/api/messages?id={sent['offset_msg_id']}")
    assert [m["preview"] for m in by_id["messages"]] == ["needle"]
    _, by_unique = await web.get(f"/api/messages?id={sent['msg_id']}&topic=found")
    assert [m["offset_msg_id"] for m in by_unique["messages"]] == [sent["offset_msg_id"]]
    now = int(time.time() * 1000)
    _, by_time = await web.get(f"/api/messages?topic=found&begin={now - 60_000}&end={now}")
    assert [m["msg_id"] for m in by_time["messages"]] == [sent["msg_id"]]
    _, before = await web.get(f"/api/messages?topic=found&begin=0&end={now - 60_000}")
    assert before["messages"] == []


async def test_message_detail_shows_body_views_storage_and_consumers(web, dash_cluster):
    await make_topic(web, "shown", queues=1)
    sent = await send(web, "shown", json.dumps({"amount": 5}), keys="k")
    await send(web, "shown", "second")
    await commit_offsets(dash_cluster, "done-group", "shown", 1)  # past the first
    await commit_offsets(dash_cluster, "new-group", "shown", 0)
    status, body = await web.get(f"/api/message?id={sent['offset_msg_id']}")
    assert status == 200
    assert body["body"]["text"] == '{"amount": 5}'
    assert json.loads(body["body"]["json"]) == {"amount": 5}
    assert body["body"]["hex"].startswith("00000000  7b 22 61 6d")
    assert base64.b64decode(body["body"]["base64"]) == b'{"amount": 5}'
    assert body["store_addr"] == dash_cluster.broker.address
    assert body["properties"]["KEYS"] == "k"
    consumed = {c["group"]: c["consumed"] for c in body["consumed_by"]}
    assert consumed == {"done-group": True, "new-group": False}


async def test_a_message_id_nobody_stored_is_a_404_with_the_reason(web):
    await make_topic(web, "empty")
    status, body = await web.get("/api/messages?id=C0A80001000000000000000000000000&topic=empty")
    assert status == 404 and "unique id" in body["error"]


async def test_resend_hands_the_message_to_the_groups_retry_topic(web, dash_cluster, eventually):
    await make_topic(web, "again")
    sent = await send(web, "again", "twice", keys="rk")
    status, body = await web.post(
        "/api/message/resend", {"id": sent["offset_msg_id"], "group": "billing"}
    )
    assert status == 200 and body["retry_topic"] == "%RETRY%billing"

    async def retried() -> bool:  # delivered to the retry topic after its 1 s delay
        store = dash_cluster.broker.store
        return store.max_offset("%RETRY%billing", 0) == 1

    await eventually(retried, timeout_s=15, what="the copy in %RETRY%billing")


async def test_dead_letters_are_listed_exported_and_resent(web, dash_cluster, eventually):
    await make_topic(web, "fragile", queues=1)
    sent = await send(web, "fragile", "poison", keys="p1")
    async with AdminClient(dash_cluster.namesrv_addr) as admin:
        msg = await admin.view_message(sent["offset_msg_id"])
        await admin.broker(dash_cluster.broker.address).consumer_send_msg_back(
            group="payments",
            phys_offset=msg.phys_offset,
            delay_level=-1,  # straight to DLQ
            origin_topic="",
            origin_msg_id=msg.msg_id,
            max_reconsume_times=1,
        )

    async def listed() -> dict | None:  # the DLQ's consume queue is built by the dispatcher
        status, body = await web.get("/api/dlq?group=payments")
        assert status == 200 and body["topic"] == "%DLQ%payments"
        return body if body["messages"] else None

    body = await eventually(listed, timeout_s=10, what="the dead letter in %DLQ%payments")
    (dead,) = body["messages"]
    assert dead["msg_id"] == sent["msg_id"] and dead["preview"] == "poison"
    status, payload = await web.raw("GET", "/api/dlq/export?group=payments")
    assert status == 200 and "attachment" in web.last_headers["content-disposition"]
    exported = json.loads(payload)["messages"]
    assert [base64.b64decode(m["body_base64"]) for m in exported] == [b"poison"]
    status, body = await web.post(
        "/api/dlq/resend", {"group": "payments", "ids": [dead["offset_msg_id"]]}
    )
    assert status == 200 and "error" not in body["results"][0]
    await eventually(
        lambda: dash_cluster.broker.store.max_offset("%RETRY%payments", 0) == 1,
        timeout_s=15,
        what="the dead letter back in %RETRY%payments",
    )


async def test_traces_say_when_message_trace_is_off_and_render_records_when_on(web):
    status, body = await web.get("/api/traces?id=ABC")
    assert status == 200 and body["enabled"] is False and "RMQ_SYS_TRACE_TOPIC" in body["note"]
    await make_topic(web, "RMQ_SYS_TRACE_TOPIC", queues=1)
    record = (
        "\x01".join(
            [
                "Pub",
                "1700000000000",
                "r",
                "pg",
                "orders",
                "ABC",
                "t",
                "k",
                "127.0.0.1:1",
                "5",
                "3",
                "0",
                "OFF",
                "true",
            ]
        )
        + "\x02"
    )
    await send(web, "RMQ_SYS_TRACE_TOPIC", record, keys="ABC")
    status, body = await web.get("/api/traces?id=ABC")
    assert status == 200 and body["enabled"] is True
    (found,) = body["records"]
    assert found["parsed"][0][:2] == ["Pub", "1700000000000"]


async def test_the_trace_of_a_traced_producers_message_shows_its_life(
    web, dash_cluster, eventually
):
    await make_topic(web, "RMQ_SYS_TRACE_TOPIC", queues=1)
    await make_topic(web, "traced", queues=1)
    async with Producer(
        group="pg-dash-trace", namesrv=dash_cluster.namesrv_addr, enable_trace=True
    ) as producer:
        sent = await producer.send(Message(topic="traced", body=b"x", keys=["t-1"]))

    async def traced() -> dict | None:
        status, body = await web.get(f"/api/traces?id={sent.msg_id}")
        return body if status == 200 and body.get("records") else None

    body = await eventually(traced, timeout_s=20, what="the producer's trace record")
    assert body["enabled"] is True
    [pub] = body["life"]["produced"]
    assert pub["group"] == "pg-dash-trace" and pub["status"] == "SEND_OK"
    assert body["records"][0]["parsed"]["type"] == "Pub"


# -- consumer groups -------------------------------------------------------------------------
async def test_groups_list_lag_and_detail_per_queue(web, dash_cluster):
    await make_topic(web, "work", queues=2)
    for i in range(4):
        await send(web, "work", f"job {i}")
    await commit_offsets(dash_cluster, "workers", "work", 0)
    status, body = await web.get("/api/groups")
    assert status == 200
    row = next(g for g in body["groups"] if g["group"] == "workers")
    assert row["lag"] == 4 and row["offset_topics"] == ["work"] and row["online"] == 0
    status, detail = await web.get("/api/groups/workers")
    assert status == 200 and detail["total_lag"] == 4
    assert sorted(q["queue_id"] for q in detail["queues"]) == [0, 1]
    assert sum(q["lag"] for q in detail["queues"]) == 4


async def test_group_lag_history_follows_the_cluster(web, dash_cluster):
    await make_topic(web, "lagging", queues=1)
    await commit_offsets(dash_cluster, "slow", "lagging", 0)
    await web.get("/api/groups/slow")
    history = dash_cluster.dashboard.history
    await history.run_once()
    await send(web, "lagging", "one")
    await send(web, "lagging", "two")
    await history.run_once()
    lags = [v for _, v in history.history.points("group/slow/lag")]
    assert lags[0] == 0 and lags[-1] == 2


async def test_reset_preview_plans_and_reset_moves_the_group(web, dash_cluster):
    await make_topic(web, "replay", queues=2)
    for i in range(6):
        await send(web, "replay", f"r{i}")
    async with AdminClient(dash_cluster.namesrv_addr) as admin:
        queues = (await admin.topic_route("replay")).read_queues()
        ends = {
            q.queue_id: await admin.broker(dash_cluster.broker.address).max_offset(q)
            for q in queues
        }
    await commit_offsets(dash_cluster, "replayers", "replay", 0)
    for q in queues:  # caught up
        await dash_cluster_commit(dash_cluster, "replayers", q, ends[q.queue_id])
    status, plan = await web.post(
        "/api/groups/replayers/reset/preview", {"topic": "replay", "to": "earliest"}
    )
    assert status == 200 and plan["to_consume"] == 6
    assert {q["queue_id"]: (q["current_offset"], q["new_offset"]) for q in plan["queues"]} == {
        qid: (end, 0) for qid, end in ends.items()
    }
    _, progress = await web.get("/api/groups/replayers")
    assert progress["total_lag"] == 0  # the preview changed nothing
    status, done = await web.post(
        "/api/groups/replayers/reset", {"topic": "replay", "to": "earliest"}
    )
    assert status == 200 and {q["offset"] for q in done["queues"]} == {0}
    _, progress = await web.get("/api/groups/replayers")
    assert progress["total_lag"] == 6


async def dash_cluster_commit(cluster, group: str, queue: MessageQueue, offset: int) -> None:
    async with AdminClient(cluster.namesrv_addr) as admin:
        await admin.broker(cluster.broker.address).update_consumer_offset(group, queue, offset)


async def test_reset_to_a_time_before_everything_plans_the_earliest_offsets(web, dash_cluster):
    await make_topic(web, "timed", queues=1)
    await send(web, "timed", "t0")
    await commit_offsets(dash_cluster, "timers", "timed", 1)
    status, plan = await web.post(
        "/api/groups/timers/reset/preview", {"topic": "timed", "to": "2001-01-01T00:00:00"}
    )
    assert status == 200 and [q["new_offset"] for q in plan["queues"]] == [0]
    status, body = await web.post(
        "/api/groups/timers/reset/preview", {"topic": "timed", "to": "yesterday"}
    )
    assert status == 400 and "ISO 8601" in body["error"]


async def test_deleting_a_group_needs_its_name_then_forgets_its_offsets(web, dash_cluster):
    await make_topic(web, "old-work", queues=1)
    await send(web, "old-work", "job")
    await commit_offsets(dash_cluster, "retired", "old-work", 0)
    status, body = await web.post("/api/groups/retired/delete", {"confirm": "retire"})
    assert status == 400 and "confirm" in body["error"]

    status, body = await web.post("/api/groups/retired/delete", {"confirm": "retired"})

    assert status == 200 and [b["offset_topics"] for b in body["brokers"]] == [["old-work"]]
    _, listed = await web.get("/api/groups")
    assert "retired" not in {g["group"] for g in listed["groups"]}
    status, body = await web.post("/api/groups/retired/delete", {"confirm": "retired"})
    assert status == 404 and "retired" in body["error"]


# -- the server itself --------------------------------------------------------------------------
async def test_pages_and_assets_are_served_and_nothing_outside_them(web):
    status, page = await web.raw("GET", "/")
    assert status == 200 and b"/static/app.js" in page
    for asset in ("app.js", "chart.js", "style.css"):
        status, _ = await web.raw("GET", f"/static/{asset}")
        assert status == 200
    for path in ("/static/../app.py", "/static/..%2Fapp.py", "/static/.hidden", "/nope"):
        status, _ = await web.raw("GET", path)
        assert status == 404, path


async def test_api_refuses_posts_without_json_and_unknown_routes(web):
    status, body = await web.raw(
        "POST", "/api/topics", b"topic=x", {"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert status == 400 and b"application/json" in body
    status, body = await web.get("/api/nope")
    assert status == 404 and "no API" in body["error"]
    status, body = await web.raw(
        "POST", "/api/topics", b"[1]", {"Content-Type": "application/json"}
    )
    assert status == 400 and b"JSON object" in body


async def test_a_broker_that_stopped_is_an_error_in_the_answer_not_a_crash(web, dash_cluster):
    await make_topic(web, "orphan")
    await dash_cluster.broker.stop(0)
    status, body = await web.get("/api/topics/orphan")
    assert status in (404, 502) and body["error"]
    status, body = await web.get("/api/cluster")
    assert status == 200
    assert all(b["error"] for b in body["brokers"])  # still listed by the nameserver


async def test_without_the_acl_the_session_may_write_without_logging_in(web):
    status, body = await web.get("/api/session")
    assert status == 200 and body == {**body, "acl": False, "logged_in": True, "can_write": True}


async def test_producer_of_the_sdk_and_the_dashboard_see_the_same_messages(web, dash_cluster):
    await make_topic(web, "shared")
    async with Producer(group="sdk-pg", namesrv=dash_cluster.namesrv_addr) as producer:
        result = await producer.send(Message(topic="shared", body=b"from sdk", keys=["sdk"]))
    _, found = await web.get("/api/messages?topic=shared&key=sdk")
    assert [m["msg_id"] for m in found["messages"]] == [result.msg_id]
