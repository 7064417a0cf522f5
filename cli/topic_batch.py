"""Topic commands over many topics: ``topic create --from-file``, ``topic delete T...``,
``topic list``; none of them sends one RPC per topic.

A topic file is one of (chosen by its extension)::

    topics.txt     one topic a line: NAME [READ [WRITE [PERM]]]; '#' starts a comment
    topics.json    ["A", "B"]  or  [{"topic": "A", "read_queue_nums": 4, ...}, ...]
                   (or {"topics": [...]} around either)
    topics.toml    [[topic]]
                   name = "A"
                   read_queue_nums = 4        # write_queue_nums, perm, order likewise

Fields a line or entry leaves out take the command line's ``-r/-w/-p/--order``,
then the broker's defaults. A bad line is refused before anything is sent,
naming the file and the line.
"""

from __future__ import annotations

import argparse
import json
import os
import tomllib
from collections.abc import Callable
from typing import Any

from pocketmq.cli.table import render
from pocketmq.client import AdminClient, ClientError, TopicConfig
from pocketmq.common.errors import ConfigError

__all__ = ["read_topic_file", "topic_create_many", "topic_delete_many", "topic_list"]

_KEYS = {
    "topic": "topic",
    "name": "topic",
    "read_queue_nums": "read_queue_nums",
    "read": "read_queue_nums",
    "write_queue_nums": "write_queue_nums",
    "write": "write_queue_nums",
    "perm": "perm",
    "order": "order",
}


def _config(fields: dict[str, Any], defaults: dict[str, Any], where: str) -> TopicConfig:
    merged = {**defaults}
    for key, value in fields.items():
        if key not in _KEYS:
            raise ConfigError(
                f"{where}: unknown key {key!r}; use topic (or name), "
                "read_queue_nums, write_queue_nums, perm, order"
            )
        merged[_KEYS[key]] = value
    if not isinstance(merged.get("topic"), str) or not merged["topic"]:
        raise ConfigError(f"{where}: no topic name")
    try:
        read = int(merged.get("read_queue_nums") or 0)
        write = int(merged.get("write_queue_nums") or 0)
        perm = int(merged.get("perm") or 6)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from None
    read, write = read or write, write or read  # one given count serves for both
    return TopicConfig(
        topic=merged["topic"],
        read_queue_nums=read,
        write_queue_nums=write,
        perm=perm,
        order=bool(merged.get("order", False)),
    )


def read_topic_file(path: str, defaults: dict[str, Any] | None = None) -> list[TopicConfig]:
    """The topics of *path* (text, JSON or TOML by extension); ConfigError names the
    line or entry that is wrong."""
    defaults = defaults or {}
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise ConfigError(f"cannot read topic file {path}: {exc.strerror}") from None
    ext = os.path.splitext(path)[1].lower()
    try:
        if ext == ".json":
            entries = json.loads(raw)
        elif ext == ".toml":
            entries = tomllib.loads(raw.decode()).get("topic", [])
        else:
            return _read_lines(path, raw.decode(), defaults)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"topic file {path} is not valid {ext[1:].upper()}: {exc}") from None
    if isinstance(entries, dict):
        entries = entries.get("topics", entries.get("topic", []))
    if not isinstance(entries, list):
        raise ConfigError(f"topic file {path}: expected a list of topics")
    out = []
    for i, entry in enumerate(entries):
        where = f"{path}: entry {i + 1}"
        fields = {"topic": entry} if isinstance(entry, str) else entry
        if not isinstance(fields, dict):
            raise ConfigError(f"{where}: {entry!r} is neither a name nor a table")
        out.append(_config(fields, defaults, where))
    return out


def _read_lines(path: str, text: str, defaults: dict[str, Any]) -> list[TopicConfig]:
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) > 4:
            raise ConfigError(
                f"{path}:{number}: {line.strip()!r} has {len(words)} fields; "
                "a line is NAME [READ [WRITE [PERM]]]"
            )
        fields = dict(
            zip(("topic", "read_queue_nums", "write_queue_nums", "perm"), words, strict=False)
        )
        out.append(_config(fields, defaults, f"{path}:{number}"))
    return out


Out = Callable[[argparse.Namespace, Any, Callable[[], str]], None]


async def topic_create_many(
    admin: AdminClient,
    args: argparse.Namespace,
    configs: list[TopicConfig],
    targets: dict[str, str],
    out: Out,
) -> int:
    """Create the file's topics on every target broker, in batches of one call each."""

    async def one(name: str) -> dict[str, Any]:
        addr = targets[name]
        try:
            done = await admin.create_topics(addr, configs, update_existing=args.update_existing)
        except ClientError as exc:
            return {"broker_name": name, "addr": addr, "ok": False, "result": str(exc)}
        return {
            "broker_name": name,
            "addr": addr,
            "ok": True,
            "result": f"created {done.created}, updated {done.updated}, unchanged {done.unchanged}",
        }

    return _report(args, out, [await one(n) for n in sorted(targets)])


async def topic_delete_many(
    admin: AdminClient,
    args: argparse.Namespace,
    topics: list[str],
    targets: dict[str, str] | None,
    out: Out,
) -> int:
    """Delete *topics* from *targets*, or, without targets, from every broker that
    serves each of them (read from the nameserver a page at a time)."""
    by_broker: dict[str, list[str]] = {}
    rows: list[dict[str, Any]] = []
    if targets is not None:
        by_broker = {name: list(topics) for name in targets}
        addrs = targets
    else:
        routes = dict(await admin.topic_routes())
        info = await admin.cluster_info()
        addrs = info.masters(None)
        for topic in topics:
            queue_datas = routes.get(topic)
            if not queue_datas and not args.ignore_missing:
                rows.append(
                    {
                        "broker_name": "-",
                        "addr": "-",
                        "ok": False,
                        "result": f"topic {topic!r}: no live broker serves it",
                    }
                )
            for qd in queue_datas or ():
                by_broker.setdefault(qd.broker_name, []).append(topic)
    for name in sorted(by_broker):
        addr = addrs.get(name)
        if addr is None:
            rows.append(
                {
                    "broker_name": name,
                    "addr": "-",
                    "ok": False,
                    "result": "no live master to delete from",
                }
            )
            continue
        try:
            done = await admin.delete_topics(
                addr, by_broker[name], ignore_missing=args.ignore_missing
            )
            rows.append(
                {"broker_name": name, "addr": addr, "ok": True, "result": f"deleted {done.deleted}"}
            )
        except ClientError as exc:
            rows.append({"broker_name": name, "addr": addr, "ok": False, "result": str(exc)})
    return _report(args, out, rows)


def _report(args: argparse.Namespace, out: Out, rows: list[dict[str, Any]]) -> int:
    out(
        args,
        rows,
        lambda: render(
            ["BROKER", "ADDRESS", "RESULT"],
            [[r["broker_name"], r["addr"], r["result"]] for r in rows],
        ),
    )
    return 0 if rows and all(r["ok"] for r in rows) else 1


# Topics the brokers make for themselves (RocketMQ's TopicValidator.isSystemTopic), and
# the retry topics consumer groups get; dead-letter topics (%DLQ%) are listed.
SYSTEM_TOPICS = frozenset(
    {
        "TBW102",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "SCHEDULE_TOPIC_XXXX",
        "TRANS_CHECK_MAX_TIME_TOPIC",
    }
)
SYSTEM_PREFIXES = ("rmq_sys_", "RMQ_SYS_", "%RETRY%")


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_PREFIXES)


async def topic_list(admin: AdminClient, args: argparse.Namespace, out: Out) -> int:
    """Every topic with its brokers and queues: one nameserver call per 10,000 topics.
    A failed page fails the command (exit 1): no row is dropped silently. System
    topics (:func:`is_system_topic`, and the broker and cluster names) only with --all."""
    routes = await admin.topic_routes()
    hidden: set[str] = set()
    if not getattr(args, "all", False):
        info = await admin.cluster_info()
        names = {b.broker_name for b in info.brokers} | set(info.clusters)
        hidden = {t for t, _ in routes if t in names or is_system_topic(t)}
    rows = [
        {
            "topic": topic,
            "brokers": [
                {
                    "broker_name": q.broker_name,
                    "read_queue_nums": q.read_queue_nums,
                    "write_queue_nums": q.write_queue_nums,
                    "perm": q.perm,
                }
                for q in qds
            ],
        }
        for topic, qds in routes
        if topic not in hidden
    ]
    out(
        args,
        rows,
        lambda: render(
            ["TOPIC", "BROKERS", "READ", "WRITE", "PERM"],
            [
                [
                    r["topic"],
                    [b["broker_name"] for b in r["brokers"]],
                    sum(b["read_queue_nums"] for b in r["brokers"]),
                    sum(b["write_queue_nums"] for b in r["brokers"]),
                    sorted({b["perm"] for b in r["brokers"]}),
                ]
                for r in rows
            ],
        ),
    )
    return 0
