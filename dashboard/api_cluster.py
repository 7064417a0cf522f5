"""The Cluster and Topics pages' API.

::

    GET  /api/cluster                    brokers (role, version, TPS, disk, replication
                                         lag), nameservers, and the TPS history
    GET  /api/topics?kind=user|retry|dlq|system|all
    POST /api/topics                     {topic, read_queue_nums, write_queue_nums, perm}
    GET  /api/topics/{topic}             route, queues, consumer groups, TPS history
    POST /api/topics/{topic}/update      {read_queue_nums, write_queue_nums, perm}
    POST /api/topics/{topic}/delete      {confirm: topic}
    POST /api/topics/{topic}/send        {body, tags, keys, properties, encoding}
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any
from urllib.parse import quote

from pocketmq.client.admin import AdminClient
from pocketmq.client.admin_model import TopicConfig
from pocketmq.client.errors import ClientError
from pocketmq.client.model import Message
from pocketmq.common.validation import check_topic
from pocketmq.dashboard.http import HttpError, Request
from pocketmq.dashboard.views import Ctx, decode_body, int_arg, request_args, str_arg, topic_kind

__all__ = ["ROUTES"]

PERMS = {2: "W", 4: "R", 6: "RW", 0: "-"}
MAX_QUEUES = 1024
ROUTE_WAIT_S = 5.0  # a created topic reaches the nameserver with the next registration


async def cluster(request: Request, ctx: Ctx) -> dict[str, Any]:
    admin = ctx.admin
    info = await admin.cluster_info()
    configs = await _broker_configs(ctx, [b.addr for b in info.brokers])

    async def row(b: Any) -> dict[str, Any]:
        try:
            table, error = await admin.broker_runtime_info(b.addr), ""
        except ClientError as exc:
            table, error = {}, str(exc)
        metrics_port = int(configs.get(b.addr, {}).get("metrics_port", "0") or 0)
        host = b.addr.rsplit(":", 1)[0]
        return {
            "cluster": b.cluster,
            "broker_name": b.broker_name,
            "broker_id": b.broker_id,
            "addr": b.addr,
            "role": table.get("broker_role") or b.role.upper(),
            "version": table.get("version", ""),
            "put_tps": table.get("put_tps", ""),
            "get_tps": table.get("get_tps", ""),
            "disk_used_ratio": table.get("disk_used_ratio", ""),
            "store_bytes": _minus(
                table.get("commitlog_max_offset"), table.get("commitlog_min_offset")
            ),
            "replication_lag_bytes": _replication_lag(table),
            "uptime_s": table.get("uptime_s", ""),
            "metrics_url": f"http://{host}:{metrics_port}/metrics" if metrics_port > 0 else "",
            "error": error,
        }

    brokers = list(await asyncio.gather(*(row(b) for b in info.brokers)))
    return {
        "clusters": info.clusters,
        "brokers": brokers,
        "nameservers": await _nameservers(ctx),
        "history": ctx.history.history.with_prefix("broker/"),
        "history_errors": ctx.history.errors,
        "interval_s": ctx.history.history.interval_s,
        "prometheus": _prometheus(
            ctx, "sum by (broker_name) (rate(pocketmq_put_messages_total[1m]))"
        ),
    }


def _minus(a: str | None, b: str | None) -> int | None:
    try:
        return int(a or "") - int(b or "")
    except ValueError:
        return None


def _replication_lag(table: dict[str, str]) -> int | None:
    """A replica's own lag; a master's largest replica lag (``replicas`` = "id:lag ...")."""
    if "replication_lag_bytes" in table:
        return int(table["replication_lag_bytes"])
    lags = [
        int(lag)
        for part in table.get("replicas", "").split()
        if (lag := part.rpartition(":")[2]).lstrip("-").isdigit()
    ]
    return max(lags) if lags else None


async def _broker_configs(ctx: Ctx, addrs: list[str]) -> dict[str, dict[str, str]]:
    """Each broker's configuration (for its metrics port), asked once per address."""
    cache = ctx.brokers_config if ctx.brokers_config is not None else {}

    async def one(addr: str) -> None:
        with contextlib.suppress(ClientError):  # not an admin, or away: no metrics link
            cache[addr] = await ctx.admin.broker_config(addr)

    await asyncio.gather(*(one(a) for a in addrs if a not in cache))
    return cache


async def _nameservers(ctx: Ctx) -> list[dict[str, Any]]:
    session = ctx.session

    async def one(addr: str) -> dict[str, Any]:
        try:
            async with AdminClient(
                [addr],
                timeout_s=3.0,
                access_key=session.access_key,
                secret_key=session.secret_key,
                tls_ca_file=ctx.tls_ca,
            ) as single:
                brokers = len((await single.cluster_info()).brokers)
            return {"addr": addr, "ok": True, "brokers": brokers, "error": ""}
        except ClientError as exc:
            return {"addr": addr, "ok": False, "brokers": 0, "error": str(exc)}

    return list(await asyncio.gather(*(one(a) for a in ctx.namesrv)))


def _prometheus(ctx: Ctx, expr: str) -> str:
    """A link to the Prometheus graph of *expr* (longer history), when one is given."""
    if not ctx.prometheus_url:
        return ""
    return (
        f"{ctx.prometheus_url.rstrip('/')}/graph?g0.expr={quote(expr)}&g0.tab=0&g0.range_input=1d"
    )


# -- topics --------------------------------------------------------------------------------
async def topics(request: Request, ctx: Ctx) -> dict[str, Any]:
    kind = request.query.get("kind", "user")
    if kind not in ("user", "retry", "dlq", "system", "all"):
        raise HttpError(400, f"kind {kind!r}: give user, retry, dlq, system or all")
    info = await ctx.admin.cluster_info()
    names = set(info.clusters) | {b.broker_name for b in info.brokers}
    rows = []
    for topic, queue_datas in await ctx.admin.topic_routes():
        this_kind = topic_kind(topic, names)
        if kind not in ("all", this_kind):
            continue
        rows.append(
            {
                "topic": topic,
                "kind": this_kind,
                "brokers": sorted(q.broker_name for q in queue_datas),
                "read_queue_nums": sum(q.read_queue_nums for q in queue_datas),
                "write_queue_nums": sum(q.write_queue_nums for q in queue_datas),
                "perm": PERMS.get(queue_datas[0].perm, str(queue_datas[0].perm))
                if queue_datas
                else "-",
            }
        )
    return {"topics": rows, "kind": kind}


def _topic_config(topic: str, data: dict[str, Any]) -> TopicConfig:
    problem = check_topic(topic)
    if problem:
        raise HttpError(400, f"topic {topic!r}: {problem}")
    perm = data.get("perm", 6)
    perm = {"RW": 6, "R": 4, "W": 2}.get(perm, perm) if isinstance(perm, str) else perm
    if perm not in (2, 4, 6):
        raise HttpError(400, f"perm {data.get('perm')!r}: give RW (6), R (4) or W (2)")
    return TopicConfig(
        topic=topic,
        read_queue_nums=int_arg(data, "read_queue_nums", default=8, low=1, high=MAX_QUEUES),
        write_queue_nums=int_arg(data, "write_queue_nums", default=8, low=1, high=MAX_QUEUES),
        perm=perm,
        order=bool(data.get("order", False)),
    )


async def create_topic(request: Request, ctx: Ctx) -> dict[str, Any]:
    data = request.json()
    config = _topic_config(str_arg(data, "topic", max_len=127), data)
    masters = (await ctx.admin.cluster_info()).masters()
    wanted = data.get("brokers") or sorted(masters)
    unknown = [b for b in wanted if b not in masters]
    if unknown:
        raise HttpError(
            400,
            f"no live master for broker(s) {', '.join(map(str, unknown))}; "
            f"the cluster has {', '.join(sorted(masters))}",
        )
    for name in wanted:
        await ctx.admin.create_topic(masters[name], config)
    return {
        "topic": config.topic,
        "brokers": wanted,
        "routed": await _routed(ctx, config.topic, set(wanted)),
    }


async def _routed(ctx: Ctx, topic: str, brokers: set[str]) -> bool:
    """Wait (ROUTE_WAIT_S at most) until the nameserver routes *topic* to *brokers*, so
    that the page's next look finds it; the brokers register it on their own."""
    deadline = asyncio.get_running_loop().time() + ROUTE_WAIT_S
    while True:
        with contextlib.suppress(ClientError):
            route = await ctx.admin.topic_route(topic)
            if brokers <= {q.broker_name for q in route.queue_datas}:
                return True
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.1)


async def topic_detail(request: Request, ctx: Ctx, topic: str) -> dict[str, Any]:
    admin = ctx.admin
    route = await admin.topic_route(topic)
    ctx.history.watch_topic(topic)
    queues, groups = await asyncio.gather(admin.topic_status(topic), admin.consumer_groups())
    return {
        "topic": topic,
        "route": [
            {
                "broker_name": q.broker_name,
                "read_queue_nums": q.read_queue_nums,
                "write_queue_nums": q.write_queue_nums,
                "perm": PERMS.get(q.perm, str(q.perm)),
                "addrs": {
                    str(i): a for i, a in sorted(route.broker_addrs.get(q.broker_name, {}).items())
                },
            }
            for q in sorted(route.queue_datas, key=lambda q: q.broker_name)
        ],
        "queues": [
            {
                "broker_name": q.broker_name,
                "queue_id": q.queue_id,
                "min_offset": q.min_offset,
                "max_offset": q.max_offset,
                "last_store_timestamp_ms": q.last_store_timestamp_ms,
            }
            for q in queues
        ],
        "groups": [
            {
                "group": g.group,
                "online": len(g.client_ids),
                "subscribed": topic in g.subscribed_topics,
            }
            for g in groups
            if topic in g.subscribed_topics or topic in g.offset_topics
        ],
        "history": ctx.history.history.with_prefix(f"topic/{topic}/"),
        "prometheus": _prometheus(
            ctx, f'sum(rate(pocketmq_put_messages_total{{topic="{topic}"}}[1m]))'
        ),
    }


async def _masters_serving(ctx: Ctx, topic: str) -> dict[str, str]:
    route = await ctx.admin.topic_route(topic)
    return {
        q.broker_name: addr for q in route.queue_datas if (addr := route.master_addr(q.broker_name))
    }


async def update_topic(request: Request, ctx: Ctx, topic: str) -> dict[str, Any]:
    config = _topic_config(topic, request.json())
    masters = await _masters_serving(ctx, topic)
    for addr in masters.values():
        await ctx.admin.update_topic(addr, config)
    return {"topic": topic, "brokers": sorted(masters)}


async def delete_topic(request: Request, ctx: Ctx, topic: str) -> dict[str, Any]:
    if request.json().get("confirm") != topic:
        raise HttpError(400, f"to delete topic {topic!r}, confirm with its name")
    masters = await _masters_serving(ctx, topic)
    for addr in masters.values():
        await ctx.admin.delete_topic(addr, topic)
    return {"topic": topic, "brokers": sorted(masters)}


async def send(request: Request, ctx: Ctx, topic: str) -> dict[str, Any]:
    data = request_args(request)
    keys = data.get("keys", [])
    if isinstance(keys, str):
        keys = keys.replace(",", " ").split()
    properties = data.get("properties") or {}
    if not isinstance(keys, list) or not isinstance(properties, dict):
        raise HttpError(
            400, "keys must be a list or a space separated string, properties an object"
        )
    message = Message(
        topic=topic,
        body=decode_body(data),
        tags=str_arg(data, "tags", required=False, max_len=255),
        keys=[str(k) for k in keys],
        properties={str(k): str(v) for k, v in properties.items()},
    )
    producer = await ctx.session.producer(ctx.namesrv, ctx.tls_ca)
    result = await producer.send(message)
    return {
        "status": result.status.value,
        "msg_id": result.msg_id,
        "offset_msg_id": result.offset_msg_id,
        "broker_name": result.queue.broker_name,
        "queue_id": result.queue.queue_id,
        "queue_offset": result.queue_offset,
    }


_TOPIC = r"/api/topics/(?P<topic>[^/]+)"
ROUTES = [
    ("GET", r"/api/cluster", cluster, False),
    ("GET", r"/api/topics", topics, False),
    ("POST", r"/api/topics", create_topic, True),
    ("GET", _TOPIC, topic_detail, False),
    ("POST", _TOPIC + "/update", update_topic, True),
    ("POST", _TOPIC + "/delete", delete_topic, True),
    ("POST", _TOPIC + "/send", send, True),
]
