"""The Messages, DLQ and Traces pages' API.

::

    GET  /api/messages?topic=&key=                by key (the brokers' index)
    GET  /api/messages?id=&topic=                 by message id (offset or unique id)
    GET  /api/messages?topic=&begin=&end=&max=    by store time: every queue of the topic
    GET  /api/message?id=                         one message: properties, body as text, hex
                                                  and JSON, where it is stored, which groups
                                                  consumed it (offset message id)
    POST /api/message/resend    {id, group}       the group (only) consumes it again, from
                                                  its retry topic (ConsumerSendMsgBack)
    GET  /api/dlq?group=&max=                     the group's dead letters (%DLQ%group)
    GET  /api/dlq/export?group=                   the same as a JSON file, bodies in base64
    POST /api/dlq/resend        {group, ids}      dead letters back to the group
    GET  /api/traces?id=                          trace records of a message id

Time search reads each queue from the offset of ``begin`` (the brokers' offset
by time) up to the offset of ``end``, ``max`` messages in all at most
(``MAX_LIST``), as RocketMQ's ``queryMsgByTopic`` does.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from pocketmq.client.admin import TOOLS_CONSUMER_GROUP
from pocketmq.client.errors import ClientError, NotFoundError, RouteNotFoundError
from pocketmq.client.message_codec import decode_messages
from pocketmq.client.model import MessageExt, MessageQueue, dlq_topic, retry_topic
from pocketmq.client.remoting import PullStatus
from pocketmq.client.trace_view import message_life, query_trace
from pocketmq.dashboard.http import HttpError, Request, Response, json_response
from pocketmq.dashboard.views import (
    Ctx,
    body_view,
    int_arg,
    message_row,
    parse_time_ms,
    str_arg,
)

__all__ = ["ROUTES", "TRACE_TOPIC"]

TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
MAX_LIST = 1000
PULL_BATCH = 32
RESEND_DELAY_LEVEL = 1  # RocketMQ's first delay level: 1 s


async def search(request: Request, ctx: Ctx) -> dict[str, Any]:
    q = request.query
    max_num = int_arg(q, "max", default=64, low=1, high=MAX_LIST)
    topic = str_arg(q, "topic", required=False, max_len=255)
    if q.get("id"):
        found = await ctx.admin.messages_by_id(str_arg(q, "id", max_len=128), topic or None)
    elif q.get("key"):
        found = await ctx.admin.query_message(
            str_arg(q, "topic", max_len=255), str_arg(q, "key", max_len=255), max_num=max_num
        )
    elif topic:
        now_ms = int(time.time() * 1000)
        begin = parse_time_ms(q["begin"], "begin") if q.get("begin") else now_ms - 3600_000
        end = parse_time_ms(q["end"], "end") if q.get("end") else now_ms
        if end < begin:
            raise HttpError(400, f"end ({end}) is before begin ({begin})")
        found = await _by_time(ctx, topic, begin, end, max_num)
    else:
        raise HttpError(400, "give a topic (with a key or a time range) or a message id")
    return {"messages": [message_row(m) for m in found]}


async def _read_queue(
    ctx: Ctx, addr: str, queue: MessageQueue, start: int, stop: int, limit: int
) -> list[MessageExt]:
    """Messages of *queue* at offsets start..stop-1, at most *limit*."""
    out: list[MessageExt] = []
    offset = start
    broker = ctx.admin.broker(addr)
    while offset < stop and len(out) < limit:
        reply = await broker.pull(
            group=TOOLS_CONSUMER_GROUP,
            queue=queue,
            offset=offset,
            max_messages=min(PULL_BATCH, stop - offset),
            subscription="*",
            suspend_ms=0,
            timeout_s=ctx.admin.timeout_s,
        )
        if reply.status is not PullStatus.FOUND:
            if reply.status.name.startswith("OFFSET") and reply.next_begin_offset > offset:
                offset = reply.next_begin_offset  # retention removed the start
                continue
            break
        batch = decode_messages(reply.records, queue.broker_name)
        out.extend(m for m in batch if m.queue_offset < stop)
        if reply.next_begin_offset <= offset:
            break
        offset = reply.next_begin_offset
    return out[:limit]


async def _by_time(
    ctx: Ctx,
    topic: str,
    begin: int,
    end: int,
    max_num: int,
) -> list[MessageExt]:
    route = await ctx.admin.topic_route(topic)

    async def one(queue: MessageQueue) -> list[MessageExt]:
        addr = route.master_addr(queue.broker_name) or next(
            iter(route.broker_addrs.get(queue.broker_name, {}).values()), ""
        )
        broker = ctx.admin.broker(addr)
        start, stop = await asyncio.gather(
            broker.offset_by_timestamp(queue, begin, timeout_s=ctx.admin.timeout_s),
            broker.offset_by_timestamp(queue, end + 1, timeout_s=ctx.admin.timeout_s),
        )
        stop = max(stop, start)
        if stop == start:
            stop = await broker.max_offset(queue, timeout_s=ctx.admin.timeout_s)
        return [
            m
            for m in await _read_queue(ctx, addr, queue, start, stop, max_num)
            if begin <= m.store_timestamp_ms <= end
        ]

    rows = await asyncio.gather(*(one(q) for q in route.read_queues()))
    found = [m for per_queue in rows for m in per_queue]
    return sorted(found, key=lambda m: m.store_timestamp_ms, reverse=True)[:max_num]


async def detail(request: Request, ctx: Ctx) -> dict[str, Any]:
    msg_id = str_arg(request.query, "id", max_len=128)
    topic = str_arg(request.query, "topic", required=False, max_len=255)
    found = await ctx.admin.messages_by_id(msg_id, topic or None)
    msg = found[0]
    located = await ctx.admin.offset_msg_id_broker(msg.offset_msg_id)
    return {
        **message_row(msg),
        "properties": dict(sorted(msg.properties.items())),
        "body": body_view(msg.body),
        "phys_offset": msg.phys_offset,
        "store_addr": located[1] if located else "",
        "consumed_by": await _consumed_by(ctx, msg),
    }


async def _consumed_by(ctx: Ctx, msg: MessageExt) -> list[dict[str, Any]]:
    """Every group with offsets in or a subscription to the message's topic: whether its
    offset on the message's queue has passed the message."""
    groups = [
        g
        for g in await ctx.admin.consumer_groups()
        if msg.topic in g.offset_topics or msg.topic in g.subscribed_topics
    ]

    async def one(group: str) -> dict[str, Any]:
        try:
            progress = await ctx.admin.consume_progress(group, msg.topic)
        except ClientError as exc:
            return {"group": group, "consumed": None, "error": str(exc)}
        row = next(
            (q for q in progress if (q.broker_name, q.queue_id) == (msg.broker_name, msg.queue_id)),
            None,
        )
        offset = row.consumer_offset if row else -1
        return {
            "group": group,
            "consumed": offset > msg.queue_offset,
            "consumer_offset": offset,
            "error": "",
        }

    return list(await asyncio.gather(*(one(g.group) for g in groups)))


async def _resend(ctx: Ctx, msg: MessageExt, group: str) -> dict[str, Any]:
    """Hand *msg* to *group* again, as its consumers hand back a failed message
    (``ConsumerSendMsgBack``, RocketMQ's way): the broker that stores it puts a copy in
    ``%RETRY%group`` (created when missing), delivered after a second to that group only,
    as a message of its first topic. A dead letter comes back the same way."""
    located = await ctx.admin.offset_msg_id_broker(msg.offset_msg_id)
    if located is None:
        raise HttpError(404, f"message {msg.offset_msg_id} is on no live broker")
    await ctx.admin.broker(located[1]).consumer_send_msg_back(
        group=group,
        phys_offset=msg.phys_offset,
        delay_level=RESEND_DELAY_LEVEL,
        origin_topic="",
        origin_msg_id=msg.msg_id,
        max_reconsume_times=msg.reconsume_times + 2,  # not straight to the DLQ again
        timeout_s=ctx.admin.timeout_s,
    )
    return {
        "msg_id": msg.msg_id,
        "offset_msg_id": msg.offset_msg_id,
        "group": group,
        "status": "SEND_OK",
        "retry_topic": retry_topic(group),
    }


async def resend(request: Request, ctx: Ctx) -> dict[str, Any]:
    data = request.json()
    msg_id = str_arg(data, "id", max_len=128)
    group = str_arg(data, "group", max_len=255)
    msg = (await ctx.admin.messages_by_id(msg_id, data.get("topic") or None))[0]
    return await _resend(ctx, msg, group)


async def _dlq_messages(ctx: Ctx, group: str, max_num: int) -> list[MessageExt]:
    """The newest *max_num* dead letters of *group*, newest first."""
    topic = dlq_topic(group)
    try:
        queues = await ctx.admin.topic_status(topic)
        route = await ctx.admin.topic_route(topic)
    except (RouteNotFoundError, NotFoundError):
        return []
    rows = await asyncio.gather(
        *(
            _read_queue(
                ctx,
                route.master_addr(q.broker_name) or "",
                MessageQueue(topic, q.broker_name, q.queue_id),
                max(q.min_offset, q.max_offset - max_num),
                q.max_offset,
                max_num,
            )
            for q in queues
            if route.master_addr(q.broker_name)
        )
    )
    found = [m for per_queue in rows for m in per_queue]
    return sorted(found, key=lambda m: m.store_timestamp_ms, reverse=True)[:max_num]


async def dlq(request: Request, ctx: Ctx) -> dict[str, Any]:
    group = str_arg(request.query, "group", max_len=255)
    max_num = int_arg(request.query, "max", default=64, low=1, high=MAX_LIST)
    return {
        "group": group,
        "topic": dlq_topic(group),
        "messages": [message_row(m) for m in await _dlq_messages(ctx, group, max_num)],
    }


async def dlq_export(request: Request, ctx: Ctx) -> Response:
    group = str_arg(request.query, "group", max_len=255)
    rows = [
        {**message_row(m), "properties": m.properties, "body_base64": body_view(m.body)["base64"]}
        for m in await _dlq_messages(ctx, group, MAX_LIST)
    ]
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in group)
    response = json_response({"group": group, "topic": dlq_topic(group), "messages": rows})
    response.body = json.dumps(json.loads(response.body), indent=2).encode()
    response.headers["Content-Disposition"] = f'attachment; filename="dlq-{safe}.json"'
    return response


async def dlq_resend(request: Request, ctx: Ctx) -> dict[str, Any]:
    data = request.json()
    group = str_arg(data, "group", max_len=255)
    ids = data.get("ids")
    if not isinstance(ids, list) or not ids or len(ids) > MAX_LIST:
        raise HttpError(400, f"ids: give a list of 1..{MAX_LIST} offset message ids")
    results = []
    for msg_id in ids:
        try:
            msg = await ctx.admin.view_message(str(msg_id))
            results.append(await _resend(ctx, msg, group))
        except ClientError as exc:
            results.append({"msg_id": msg_id, "group": group, "error": str(exc)})
    return {"results": results}


def _trace_fields(text: str) -> list[list[str]]:
    """RocketMQ's trace body: records split by \\x02 (or newlines), fields by \\x01."""
    records = [r for r in text.replace("\n", "\x02").split("\x02") if r.strip()]
    return [r.split("\x01") for r in records]


async def traces(request: Request, ctx: Ctx) -> dict[str, Any]:
    """PocketMQ's trace records of a message (``enable_trace``, ``trace_topic_enable``)
    folded into its life as ``pocketmq message trace`` shows it; failing those, the
    trace topic's messages keyed by the id as they are (RocketMQ's delimited format)."""
    msg_id = str_arg(request.query, "id", max_len=128)
    try:
        ours = await query_trace(ctx.admin, msg_id, trace_topic=TRACE_TOPIC)
    except RouteNotFoundError:
        return {
            "id": msg_id,
            "enabled": False,
            "records": [],
            "note": f"no broker serves {TRACE_TOPIC}: message trace is off",
        }
    if ours:
        life = message_life(msg_id, ours)
        return {
            "id": msg_id,
            "enabled": True,
            "note": "",
            "life": life,
            "records": [
                {
                    "store_timestamp_ms": r.ts,
                    "broker_name": r.broker,
                    "text": None,
                    "parsed": r.to_json(),
                }
                for r in ours
            ],
        }
    found = await ctx.admin.query_message(TRACE_TOPIC, msg_id, max_num=MAX_LIST)
    records = []
    for m in sorted(found, key=lambda m: m.store_timestamp_ms):
        view = body_view(m.body)
        parsed: Any = None
        if view["json"] is not None:
            parsed = json.loads(view["text"])
        elif view["text"] is not None:
            parsed = _trace_fields(view["text"])
        records.append(
            {**message_row(m), "text": view["text"], "parsed": parsed, "properties": m.properties}
        )
    return {"id": msg_id, "enabled": True, "records": records, "note": ""}


ROUTES = [
    ("GET", r"/api/messages", search, False),
    ("GET", r"/api/message", detail, False),
    ("POST", r"/api/message/resend", resend, True),
    ("GET", r"/api/dlq", dlq, False),
    ("GET", r"/api/dlq/export", dlq_export, False),
    ("POST", r"/api/dlq/resend", dlq_resend, True),
    ("GET", r"/api/traces", traces, False),
]
