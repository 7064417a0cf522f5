"""The dashboard's pure parts, and its HTTP server against hostile requests."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from pocketmq.dashboard.api_cluster import _replication_lag
from pocketmq.dashboard.history import MAX_WATCHED, History, HistoryService
from pocketmq.dashboard.http import (
    MAX_BODY_BYTES,
    HttpError,
    HttpServer,
    Request,
    Response,
    json_response,
)
from pocketmq.dashboard.scrape import ScrapeError, topic_totals
from pocketmq.dashboard.views import body_view, parse_time_ms, topic_kind


@pytest.mark.parametrize(
    "topic, kind",
    [
        ("orders", "user"),
        ("%RETRY%billing", "retry"),
        ("%DLQ%billing", "dlq"),
        ("TBW102", "system"),
        ("rmq_sys_wheel_timer", "system"),
        ("RMQ_SYS_TRACE_TOPIC", "system"),
        ("SCHEDULE_TOPIC_XXXX", "system"),
        ("broker-a", "system"),
    ],
)
def test_topics_are_sorted_into_rocketmq_dashboards_kinds(topic, kind):
    assert topic_kind(topic, {"broker-a"}) == kind


def test_body_views_text_json_hex_and_base64():
    view = body_view(b'{"a": [1, 2]}')
    assert view["text"] == '{"a": [1, 2]}' and json.loads(view["json"]) == {"a": [1, 2]}
    assert view["hex"].startswith("00000000  7b 22 61 22") and view["hex"].endswith('{"a": [1, 2]}')
    binary = body_view(bytes(range(256)) * 300)
    assert binary["text"] is None and binary["json"] is None
    assert binary["hex_truncated"] is True and binary["size_bytes"] == 76800
    assert len(binary["hex"].splitlines()) == 64 * 1024 // 16


def test_times_are_ms_or_iso_8601_and_anything_else_is_refused():
    assert parse_time_ms("1714557600000", "to") == 1714557600000
    assert parse_time_ms("2024-05-01T10:00:00+00:00", "to") == 1714557600000
    with pytest.raises(HttpError, match="ISO 8601"):
        parse_time_ms("last tuesday", "to")


def test_replication_lag_is_a_replicas_own_or_a_masters_largest():
    assert _replication_lag({"replication_lag_bytes": "42"}) == 42
    assert _replication_lag({"replicas": "1:10 2:300"}) == 300
    assert _replication_lag({}) is None


def test_watching_more_topics_than_the_limit_drops_the_oldest_history():
    history = History(retention_s=60, interval_s=1)
    service = HistoryService(admin=None, history=history)  # type: ignore[arg-type]
    for i in range(MAX_WATCHED + 1):
        service.watch_topic(f"t{i}")
        history.add(f"topic/t{i}/put_tps", 1, 1.0)
    assert history.points("topic/t0/put_tps") == []
    assert history.points(f"topic/t{MAX_WATCHED}/put_tps") == [(1, 1.0)]


# -- the HTTP server -----------------------------------------------------------------------
@pytest.fixture
async def server():
    async def echo(request: Request):
        return json_response(
            {"path": request.path, "query": request.query, "body": request.body.decode()}
        )

    http = HttpServer(echo, host="127.0.0.1", port=0)
    await http.start()
    yield http
    await http.stop()


async def exchange(server: HttpServer, raw: bytes) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(raw)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 15)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


async def test_a_request_is_decoded_path_query_and_body(server):
    status, body = await exchange(
        server, b"POST /a%20b?x=1&y= HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
    )
    assert status == 200
    assert json.loads(body) == {"path": "/a b", "query": {"x": "1", "y": ""}, "body": "abc"}


@pytest.mark.parametrize(
    "raw, status",
    [
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nX: " + b"a" * 40_000 + b"\r\n\r\n", 413),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411),
        (
            b"POST / HTTP/1.1\r\nContent-Length: " + str(MAX_BODY_BYTES + 1).encode() + b"\r\n\r\n",
            413,
        ),
        (b"POST / HTTP/1.1\r\nContent-Length: -4\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: lots\r\n\r\n", 400),
    ],
)
async def test_hostile_requests_get_a_status_and_an_error_not_a_hang(server, raw, status):
    got, body = await exchange(server, raw)
    assert got == status and json.loads(body)["error"]


async def test_a_failing_handler_is_a_500_with_the_reason():
    async def broken(request: Request):
        raise RuntimeError("boom")

    http = HttpServer(broken, host="127.0.0.1", port=0)
    await http.start()
    try:
        status, body = await exchange(http, b"GET / HTTP/1.1\r\n\r\n")
    finally:
        await http.stop()
    assert status == 500 and "boom" in json.loads(body)["error"]


async def test_a_metrics_port_that_does_not_answer_is_a_scrape_error_naming_it():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(ScrapeError, match=f"127.0.0.1:{port}"):
        await topic_totals("127.0.0.1", port, timeout_s=2)


async def test_a_scrape_reads_put_and_get_totals_per_topic():
    async def metrics(request: Request) -> Response:
        return Response(
            body=b"# TYPE pocketmq_put_messages counter\n"
            b'pocketmq_put_messages_total{topic="a"} 7.0\n'
            b"# TYPE pocketmq_get_messages counter\n"
            b'pocketmq_get_messages_total{topic="a"} 2.0\n'
        )

    http = HttpServer(metrics, host="127.0.0.1", port=0)
    await http.start()
    try:
        totals = await topic_totals("127.0.0.1", http.port)
    finally:
        await http.stop()
    assert totals == {"put": {"a": 7.0}, "get": {"a": 2.0}}
