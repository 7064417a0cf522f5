"""The Consumer groups page's API.

::

    GET  /api/groups                         every group: online clients, model, TPS, lag
    GET  /api/groups/{group}                 lag per queue, clients, subscriptions, history
    POST /api/groups/{group}/reset/preview   {topic, to}: per queue, from where to where
    POST /api/groups/{group}/reset           {topic, to}: move the group (and tell its
                                             online consumers)
    POST /api/groups/{group}/delete          {confirm: group}: forget its offsets and retry
                                             topic on every broker (refused while online)

``to`` is ``earliest``, ``latest``, ms since the epoch or an ISO 8601 time. The
preview asks the same brokers the reset will (min/max offsets, offset by time)
and changes nothing.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from pocketmq.client.admin_model import ConsumerGroup, QueueProgress
from pocketmq.client.errors import ClientError, NotFoundError
from pocketmq.client.model import MessageQueue
from pocketmq.dashboard.history import MAX_WATCHED
from pocketmq.dashboard.http import HttpError, Request
from pocketmq.dashboard.views import Ctx, parse_time_ms, str_arg

__all__ = ["ROUTES"]

MAX_LAG_GROUPS = 200  # the list computes lag for this many groups, then stops
LAG_CONCURRENCY = 8


def _group_row(g: ConsumerGroup) -> dict[str, Any]:
    return {
        "group": g.group,
        "online": len(g.client_ids),
        "client_ids": g.client_ids,
        "consume_type": g.consume_type,
        "message_model": g.message_model,
        "subscribed_topics": g.subscribed_topics,
        "offset_topics": g.offset_topics,
        "brokers": g.brokers,
    }


def _last(points: list[tuple[int, float]]) -> float | None:
    return points[-1][1] if points else None


async def groups(request: Request, ctx: Ctx) -> dict[str, Any]:
    found = await ctx.admin.consumer_groups()
    limit = asyncio.Semaphore(LAG_CONCURRENCY)

    async def lag(group: str) -> int | None:
        async with limit:
            try:
                return sum(q.lag for q in await ctx.admin.consume_progress(group))
            except ClientError:
                return None

    lags = await asyncio.gather(*(lag(g.group) for g in found[:MAX_LAG_GROUPS]))
    rows = []
    for g in found[:MAX_WATCHED]:
        ctx.history.watch_group(g.group)  # their TPS from the next sample on
    for i, g in enumerate(found):
        row = _group_row(g)
        row["lag"] = lags[i] if i < len(lags) else None
        row["consume_tps"] = _last(ctx.history.history.points(f"group/{g.group}/consume_tps"))
        rows.append(row)
    return {"groups": rows}


async def group_detail(request: Request, ctx: Ctx, group: str) -> dict[str, Any]:
    ctx.history.watch_group(group)
    known = next((g for g in await ctx.admin.consumer_groups() if g.group == group), None)
    try:
        progress = await ctx.admin.consume_progress(group)
    except NotFoundError:
        if known is None:
            raise
        progress = []
    return {
        "group": _group_row(known) if known else {"group": group},
        "queues": [_progress_row(q) for q in progress],
        "total_lag": sum(q.lag for q in progress),
        "history": ctx.history.history.with_prefix(f"group/{group}/"),
    }


def _progress_row(q: QueueProgress) -> dict[str, Any]:
    return {
        "topic": q.topic,
        "broker_name": q.broker_name,
        "queue_id": q.queue_id,
        "broker_offset": q.broker_offset,
        "consumer_offset": q.consumer_offset,
        "lag": q.lag,
        "last_timestamp_ms": q.last_timestamp_ms,
    }


def _target(data: dict[str, Any]) -> Literal["earliest", "latest"] | int:
    to = data.get("to", "")
    if isinstance(to, int) and not isinstance(to, bool):
        return to
    text = str_arg(data, "to", max_len=64)
    if text in ("earliest", "latest"):
        return text
    return parse_time_ms(text, "to")


async def reset_preview(request: Request, ctx: Ctx, group: str) -> dict[str, Any]:
    data = request.json()
    topic = str_arg(data, "topic", max_len=255)
    to = _target(data)
    admin = ctx.admin
    route = await admin.topic_route(topic)
    status = {(q.broker_name, q.queue_id): q for q in await admin.topic_status(topic)}
    try:
        current = {
            (q.broker_name, q.queue_id): q.consumer_offset
            for q in await admin.consume_progress(group, topic)
        }
    except NotFoundError:
        current = {}

    async def plan(broker_name: str, queue_id: int) -> dict[str, Any]:
        q = status[(broker_name, queue_id)]
        if to == "earliest":
            new = q.min_offset
        elif to == "latest":
            new = q.max_offset
        else:
            addr = route.master_addr(broker_name) or ""
            new = await admin.broker(addr).offset_by_timestamp(
                MessageQueue(topic, broker_name, queue_id), to, timeout_s=admin.timeout_s
            )
        now = current.get((broker_name, queue_id), -1)
        return {
            "broker_name": broker_name,
            "queue_id": queue_id,
            "current_offset": now,
            "new_offset": new,
            "moves_by": new - max(now, 0),
            "to_consume": q.max_offset - new,
        }

    rows = await asyncio.gather(*(plan(*key) for key in sorted(status)))
    return {
        "group": group,
        "topic": topic,
        "to": to,
        "queues": list(rows),
        "to_consume": sum(r["to_consume"] for r in rows),
    }


async def reset(request: Request, ctx: Ctx, group: str) -> dict[str, Any]:
    data = request.json()
    topic = str_arg(data, "topic", max_len=255)
    result = await ctx.admin.reset_offset(group, topic, to=_target(data))
    return {
        "group": group,
        "topic": topic,
        "queues": [
            {
                "broker_name": q.broker_name,
                "queue_id": q.queue_id,
                "previous_offset": q.previous_offset,
                "offset": q.offset,
            }
            for q in result.queues
        ],
        "notified_client_ids": result.notified_client_ids,
    }


async def delete(request: Request, ctx: Ctx, group: str) -> dict[str, Any]:
    if request.json().get("confirm") != group:
        raise HttpError(400, f"to delete consumer group {group!r}, confirm with its name")
    deleted, failures = await ctx.admin.delete_group(group)
    return {
        "group": group,
        "brokers": [
            {
                "broker_name": d.broker_name,
                "offset_topics": d.offset_topics,
                "retry_topic_deleted": d.retry_topic_deleted,
            }
            for d in deleted
        ],
        "failed": [{"broker_name": f.broker_name, "error": f.error} for f in failures],
    }


_GROUP = r"/api/groups/(?P<group>[^/]+)"
ROUTES = [
    ("GET", r"/api/groups", groups, False),
    ("GET", _GROUP, group_detail, False),
    ("POST", _GROUP + "/reset/preview", reset_preview, False),
    ("POST", _GROUP + "/reset", reset, True),
    ("POST", _GROUP + "/delete", delete, True),
]
