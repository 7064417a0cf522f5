"""The admin commands (RocketMQ's ``mqadmin``), on :class:`~pocketmq.client.AdminClient`.

::

    pocketmq topic create|update TOPIC [--cluster C | --broker ADDR] [-r N] [-w N] [-p PERM]
    pocketmq topic create --from-file FILE [--update-existing] [--cluster C | --broker ADDR]
    pocketmq topic delete TOPIC... | --from-file FILE [--ignore-missing] [--cluster C | ...]
    pocketmq topic list [--all] | route TOPIC | status TOPIC
    pocketmq group ...                                                  (cli/group_cmd.py)
    pocketmq message by-key TOPIC KEY | by-id MSGID [--topic T] | by-offset TOPIC QUEUE OFFSET
    pocketmq message trace MSGID [--trace-topic T]                     (cli/trace_cmd.py)
    pocketmq broker status|config [BROKER]
    pocketmq broker update-config BROKER KEY=VALUE...
    pocketmq broker promote ADDR [--epoch N] [--role ROLE] [--force]   (cli/promote_cmd.py)
    pocketmq broker elect NAME [--broker-id N] [--controller ADDR]     (cli/elect_cmd.py)

A BROKER (``--broker`` or the argument) is a broker name, resolved through
the nameserver to its master, or a ``host:port``. ``topic create`` and
``topic update`` act on every master of ``--cluster`` (default: every
cluster) or on the one ``--broker``; ``update`` is RocketMQ's
``updateTopic``: the fields given replace the broker's, the others are kept,
and a broker without the topic gets it. ``--from-file`` (one topic a line, or
JSON, or TOML: see :mod:`pocketmq.cli.topic_batch`) creates many topics in
batches of one call each, every batch all or none. A TIMESTAMP is ms since the epoch or
ISO-8601 (``2024-05-01T10:00:00``, local time unless it names a zone).

Questions to several brokers (``broker status|config``, ``topic status``,
``group progress``) print what the live brokers answered, mark each broker
that did not, and exit 1. Every command takes ``--namesrv`` (default
``$POCKETMQ_NAMESRV``, then 127.0.0.1:9876) and ``--json`` (numbers as
numbers); tables otherwise. Exit codes: 0 done, 1 a server refused or could
not be reached, or nothing was found (message on stderr), 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from pocketmq.cli import loop_factory, print_usage_of
from pocketmq.cli.credentials import add_security_options, security_kwargs
from pocketmq.cli.errors import UsageError
from pocketmq.cli.group_cmd import print_failures, register_group
from pocketmq.cli.table import dump_json, render, render_mapping, time_ms
from pocketmq.cli.topic_batch import (
    read_topic_file,
    topic_create_many,
    topic_delete_many,
    topic_list,
)
from pocketmq.client import AdminClient, ClientError, MessageExt, MessageQueue, TopicConfig
from pocketmq.client.admin_model import BrokerFailure
from pocketmq.client.config import DEFAULT_NAMESRV, NAMESRV_ENV, parse_namesrv
from pocketmq.client.errors import NotFoundError
from pocketmq.common.errors import ConfigError

__all__ = ["add_common_options", "parse_reset_target", "register", "run_admin"]

AdminCommand = Callable[[AdminClient, argparse.Namespace], Awaitable[int]]
_PERM_LETTERS = {"r": 4, "w": 2}
_VALID_PERMS = (2, 4, 6)  # RocketMQ: PERM_WRITE, PERM_READ, both
MAX_BODY_CHARS = 4096


# -- parsing -------------------------------------------------------------------------------
def parse_reset_target(text: str) -> str | int:
    """``earliest``, ``latest``, ms since the epoch, or an ISO-8601 time -> ms."""
    if text in ("earliest", "latest"):
        return text
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not earliest, latest, ms since the epoch or an ISO-8601 time "
            "(e.g. 2024-05-01T10:00:00)"
        ) from None
    return int(moment.timestamp() * 1000)


def _perm(text: str) -> int:
    """``6``, ``4``, ``2``, or letters ``rw`` / ``r`` / ``w`` (RocketMQ's PermName)."""
    letters = set(text.lower())
    if text.isdigit() and int(text) in _VALID_PERMS:
        return int(text)
    if text and not text.isdigit() and letters <= set(_PERM_LETTERS) and len(text) <= 2:
        return sum(_PERM_LETTERS[c] for c in letters)
    raise argparse.ArgumentTypeError(
        f"perm {text!r}: give 6 (read+write), 4 (read only), 2 (write only), or letters rw / r / w"
    )


def _queue_count(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 1024:
        raise argparse.ArgumentTypeError(f"{text!r}: give a queue count 1..1024")
    return int(text)


def add_common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namesrv",
        default=None,
        help=f"nameserver(s) 'host:port;host:port' (default ${NAMESRV_ENV}, "
        f"then {DEFAULT_NAMESRV})",
    )
    parser.add_argument("--json", action="store_true", help="JSON instead of a table")
    parser.add_argument(
        "--timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="deadline of each call (default 5)",
    )
    add_security_options(parser)


def register(subparsers: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    add_common_options(common)

    def group(name: str, help_text: str, parent: Any = None) -> Any:
        parser = parent or subparsers.add_parser(name, help=help_text, description=help_text)
        return parser.add_subparsers(
            dest=f"{name}_action", metavar="ACTION", required=parent is None
        )

    def leaf(actions: Any, name: str, fn: AdminCommand, help_text: str) -> Any:
        parser = actions.add_parser(name, parents=[common], help=help_text, description=help_text)
        parser.set_defaults(func=lambda args: run_admin(fn, args))
        return parser

    _register_topic(group("topic", "create, change and inspect topics"), leaf)
    register_group(
        group("group", "consumer groups: progress, lag, members, offset reset, delete"),
        leaf,
        parse_reset_target,
    )
    _register_message(group("message", "find messages by key, id or position; trace them"), leaf)
    # `pocketmq broker` runs a broker; `pocketmq broker status|config` ask one.
    broker = subparsers.choices.get("broker")
    actions = group("broker", "ask brokers", broker)
    for name, fn, text in (
        ("status", _broker_status, "runtime figures of brokers"),
        ("config", _broker_config, "configuration of brokers"),
    ):
        # A positional: an option here would clash with the broker's own (--broker-name ...).
        leaf(actions, name, fn, text).add_argument(
            "addr",
            nargs="?",
            metavar="BROKER",
            help="this broker only: a name or host:port (default: every live broker)",
        )
    update = leaf(
        actions,
        "update-config",
        _broker_update_config,
        "change settings of a running broker (updateBrokerConfig; admin only)",
    )
    update.add_argument("addr", metavar="BROKER", help="a broker name (its master) or host:port")
    update.add_argument(
        "settings",
        nargs="+",
        metavar="KEY=VALUE",
        help="e.g. max_pull_messages=64 (the broker lists the keys it takes)",
    )
    from pocketmq.cli.elect_cmd import add_elect
    from pocketmq.cli.promote_cmd import add_promote

    add_promote(actions, leaf)
    add_elect(actions, leaf)


def _register_topic(actions: Any, leaf: Any) -> None:
    for name, fn, text in (
        ("create", _topic_create, "create a topic on brokers"),
        ("update", _topic_update, "change (or add) a topic on brokers"),
    ):
        parser = leaf(actions, name, fn, text)
        if name == "create":
            parser.add_argument("topic", nargs="?")
            parser.add_argument(
                "--from-file",
                metavar="FILE",
                help="create every topic of FILE (lines, .json or .toml)",
            )
            parser.add_argument(
                "--update-existing",
                action="store_true",
                help="with --from-file: existing topics take the file's config",
            )
        else:
            parser.add_argument("topic")
        _target_options(parser)
        parser.add_argument(
            "-r",
            "--read-queues",
            type=_queue_count,
            metavar="N",
            help="read queue count (create default: the broker's, 8)",
        )
        parser.add_argument(
            "-w",
            "--write-queues",
            type=_queue_count,
            metavar="N",
            help="write queue count (create default: the read count)",
        )
        parser.add_argument(
            "-p", "--perm", type=_perm, help="permission: 6 = read+write (default), 4 read, 2 write"
        )
        parser.add_argument(
            "--order", action=argparse.BooleanOptionalAction, default=None, help="ordered topic"
        )
    delete = leaf(actions, "delete", _topic_delete, "delete topics from brokers")
    delete.add_argument("topics", nargs="*", metavar="TOPIC")
    delete.add_argument("--from-file", metavar="FILE", help="delete every topic of FILE")
    delete.add_argument(
        "--ignore-missing",
        action="store_true",
        help="skip topics that do not exist instead of failing",
    )
    _target_options(delete, default="every broker serving the topic")
    leaf(actions, "list", _topic_list, "every topic with its brokers and queues").add_argument(
        "--all",
        action="store_true",
        help="also the system topics (TBW102, SCHEDULE_TOPIC_XXXX, %%RETRY%%..., broker and "
        "cluster names)",
    )
    leaf(actions, "route", _topic_route, "a topic's route").add_argument("topic")
    leaf(actions, "status", _topic_status, "min/max offset of each queue").add_argument("topic")


def _target_options(parser: argparse.ArgumentParser, default: str = "every cluster") -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--cluster", help=f"every master of this cluster (default: {default})")
    where.add_argument(
        "--broker", metavar="BROKER", help="this broker only: a name (its master) or host:port"
    )


def _register_message(actions: Any, leaf: Any) -> None:
    by_key = leaf(actions, "by-key", _message_by_key, "messages with a key (index)")
    by_key.add_argument("topic")
    by_key.add_argument("key")
    by_key.add_argument("--max", type=int, default=32, help="at most this many (default 32)")
    by_id = leaf(
        actions,
        "by-id",
        _message_by_id,
        "a message by offset message id, or by unique id with --topic",
    )
    by_id.add_argument("msg_id", metavar="MSGID")
    by_id.add_argument("--topic", help="the topic; needed for a unique id (UNIQ_KEY)")
    by_offset = leaf(actions, "by-offset", _message_by_offset, "the message at a queue offset")
    by_offset.add_argument("topic")
    by_offset.add_argument("queue", type=int)
    by_offset.add_argument("offset", type=int)
    by_offset.add_argument(
        "--broker",
        metavar="BROKER",
        help="broker name or host:port (needed when several brokers serve the topic)",
    )
    from pocketmq.cli.trace_cmd import add_trace

    add_trace(actions, leaf)  # message trace MSGID (cli/trace_cmd.py)


# -- running -------------------------------------------------------------------------------
def run_admin(fn: AdminCommand, args: argparse.Namespace) -> int:
    """Run one admin command: 0 done, 1 remote error, 2 usage (messages on stderr)."""
    command = f"pocketmq {args.command} {getattr(args, f'{args.command}_action', '')}".strip()
    try:
        namesrv = parse_namesrv(args.namesrv)
    except ConfigError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 2

    async def main() -> int:
        async with AdminClient(namesrv, timeout_s=args.timeout, **security_kwargs(args)) as admin:
            return await fn(admin, args)

    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            return runner.run(main())
    except (UsageError, ValueError, ConfigError) as exc:
        print_usage_of(args)
        print(f"{command}: {exc}", file=sys.stderr)
        return 2
    except ClientError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 1


def _out(args: argparse.Namespace, data: Any, table: Callable[[], str]) -> None:
    print(dump_json(data) if args.json else table())


# -- topics --------------------------------------------------------------------------------
async def _targets(admin: AdminClient, args: argparse.Namespace) -> dict[str, str]:
    """Broker name -> address to act on: --broker, --cluster, or every master."""
    if args.broker:
        name, addr = await admin.resolve_broker(args.broker)
        return {name: addr}
    info = await admin.cluster_info()
    if args.cluster and args.cluster not in info.clusters:
        raise UsageError(
            f"no live broker is in cluster {args.cluster!r}; clusters: "
            f"{', '.join(info.clusters) or 'none'}"
        )
    masters = info.masters(args.cluster)
    if not masters:
        raise NotFoundError("no live master broker is registered with the nameserver")
    return masters


async def _per_broker(
    args: argparse.Namespace, targets: dict[str, str], act: Callable[[str], Awaitable[str]]
) -> int:
    """Run *act(addr)* on every target; print a BROKER / ADDRESS / RESULT table."""

    async def one(addr: str) -> tuple[bool, str]:
        try:
            return True, await act(addr)
        except ClientError as exc:
            return False, str(exc)

    results = await asyncio.gather(*(one(targets[n]) for n in sorted(targets)))
    rows = [
        {"broker_name": name, "addr": targets[name], "ok": ok, "result": text}
        for name, (ok, text) in zip(sorted(targets), results, strict=True)
    ]
    _out(
        args,
        rows,
        lambda: render(
            ["BROKER", "ADDRESS", "RESULT"],
            [[r["broker_name"], r["addr"], r["result"]] for r in rows],
        ),
    )
    return 0 if all(ok for ok, _ in results) else 1


def _given_config(args: argparse.Namespace, base: TopicConfig | None) -> TopicConfig:
    """*base* (or the create defaults) with the fields given on the command line."""
    read = args.read_queues or (base.read_queue_nums if base else 0)
    write = args.write_queues or (base.write_queue_nums if base else 0)
    if base is None:  # one given count serves for both; 0 = the broker's default
        read, write = read or write, write or read
    return TopicConfig(
        topic=args.topic,
        read_queue_nums=read,
        write_queue_nums=write,
        perm=args.perm if args.perm is not None else (base.perm if base else 6),
        order=args.order if args.order is not None else bool(base and base.order),
    )


async def _topic_create(admin: AdminClient, args: argparse.Namespace) -> int:
    if bool(args.topic) == bool(args.from_file):
        raise UsageError("give a TOPIC or --from-file FILE (one of them)")
    if args.from_file:
        configs = read_topic_file(
            args.from_file,
            {
                "read_queue_nums": args.read_queues,
                "write_queue_nums": args.write_queues,
                "perm": args.perm,
                "order": args.order,
            },
        )
        return await topic_create_many(admin, args, configs, await _targets(admin, args), _out)
    config = _given_config(args, None)

    async def act(addr: str) -> str:
        await admin.create_topic(addr, config)
        return "created"

    return await _per_broker(args, await _targets(admin, args), act)


async def _topic_update(admin: AdminClient, args: argparse.Namespace) -> int:
    async def act(addr: str) -> str:
        current = (await admin.topic_configs(addr)).get(args.topic)
        config = _given_config(args, current)
        if current is None:
            await admin.create_topic(addr, config)
            return "created"
        await admin.update_topic(addr, config)
        return (
            f"updated: read {config.read_queue_nums}, write {config.write_queue_nums}, "
            f"perm {config.perm}"
        )

    return await _per_broker(args, await _targets(admin, args), act)


async def _topic_delete(admin: AdminClient, args: argparse.Namespace) -> int:
    topics = list(args.topics)
    if args.from_file:
        topics += [c.topic for c in read_topic_file(args.from_file)]
    if not topics:
        raise UsageError("give the TOPICs to delete, or --from-file FILE")
    if len(topics) > 1 or args.ignore_missing:
        targets = await _targets(admin, args) if args.broker or args.cluster else None
        return await topic_delete_many(admin, args, topics, targets, _out)
    args.topic = topics[0]
    if args.broker or args.cluster:
        targets = await _targets(admin, args)
    else:
        route = await admin.topic_route(args.topic)
        targets = {
            qd.broker_name: addr
            for qd in route.queue_datas
            if (addr := route.master_addr(qd.broker_name))
        }

    async def act(addr: str) -> str:
        await admin.delete_topic(addr, args.topic)
        return "deleted"

    return await _per_broker(args, targets, act)


async def _topic_list(admin: AdminClient, args: argparse.Namespace) -> int:
    return await topic_list(admin, args, _out)


async def _topic_route(admin: AdminClient, args: argparse.Namespace) -> int:
    route = await admin.topic_route(args.topic)
    rows = [
        {
            "broker_name": q.broker_name,
            "addrs": route.broker_addrs.get(q.broker_name, {}),
            "read_queue_nums": q.read_queue_nums,
            "write_queue_nums": q.write_queue_nums,
            "perm": q.perm,
        }
        for q in sorted(route.queue_datas, key=lambda q: q.broker_name)
    ]
    _out(
        args,
        {"topic": args.topic, "brokers": rows},
        lambda: render(
            ["BROKER", "ADDRESS", "READ", "WRITE", "PERM"],
            [
                [
                    r["broker_name"],
                    r["addrs"].get(0),
                    r["read_queue_nums"],
                    r["write_queue_nums"],
                    r["perm"],
                ]
                for r in rows
            ],
        ),
    )
    return 0


async def _topic_status(admin: AdminClient, args: argparse.Namespace) -> int:
    failures: list[BrokerFailure] = []
    queues = await admin.topic_status(args.topic, failures=failures)
    rows = [
        [q.broker_name, q.queue_id, q.min_offset, q.max_offset, time_ms(q.last_store_timestamp_ms)]
        for q in queues
    ]
    rows += [[f.broker_name, None, None, None, "UNREACHABLE"] for f in failures]
    # JSON: the queues, then one {"broker_name", "addr", "error"} per broker that did not answer
    _out(
        args,
        [*queues, *failures],
        lambda: render(["BROKER", "QUEUE", "MIN OFFSET", "MAX OFFSET", "LAST UPDATED"], rows),
    )
    print_failures(failures)
    return 1 if failures else 0


def _as_dict(value: Any) -> dict[str, Any]:
    return {name: getattr(value, name) for name in value.__dataclass_fields__}


# -- messages ------------------------------------------------------------------------------
def message_json(msg: MessageExt) -> dict[str, Any]:
    try:
        body, encoding = msg.body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(msg.body).decode(), "base64"
    return {**_as_dict(msg), "body": body, "body_encoding": encoding}


def _message_detail(msg: MessageExt) -> str:
    data = message_json(msg)
    body = data["body"]
    if len(body) > MAX_BODY_CHARS:
        body = f"{body[:MAX_BODY_CHARS]}... ({len(msg.body)} bytes; --json prints it whole)"
    rows = [
        ["Topic", msg.topic],
        ["Tags", msg.tags or None],
        ["Keys", msg.keys],
        ["Unique ID", msg.msg_id or None],
        ["Offset Message ID", msg.offset_msg_id],
        ["Broker", msg.broker_name],
        ["Queue ID", msg.queue_id],
        ["Queue Offset", msg.queue_offset],
        ["Commit Log Offset", msg.phys_offset],
        ["Store Size", msg.store_size_bytes],
        ["Reconsume Times", msg.reconsume_times],
        ["Born Time", time_ms(msg.born_timestamp_ms)],
        ["Store Time", time_ms(msg.store_timestamp_ms)],
        ["Properties", ", ".join(f"{k}={v}" for k, v in sorted(msg.properties.items()))],
        [f"Body ({data['body_encoding']})", body],
    ]
    return render(["FIELD", "VALUE"], rows)


def _print_messages(args: argparse.Namespace, messages: list[MessageExt]) -> None:
    _out(
        args,
        [message_json(m) for m in messages],
        lambda: "\n\n".join(_message_detail(m) for m in messages),
    )


async def _message_by_key(admin: AdminClient, args: argparse.Namespace) -> int:
    messages = await admin.query_message(args.topic, args.key, max_num=args.max)
    if not messages:
        raise NotFoundError(f"no message of topic {args.topic!r} has key {args.key!r}")
    _out(
        args,
        [message_json(m) for m in messages],
        lambda: render(
            ["UNIQUE ID", "OFFSET MESSAGE ID", "BROKER", "QUEUE", "OFFSET", "STORED", "TAGS"],
            [
                [
                    m.msg_id or None,
                    m.offset_msg_id,
                    m.broker_name,
                    m.queue_id,
                    m.queue_offset,
                    time_ms(m.store_timestamp_ms),
                    m.tags or None,
                ]
                for m in messages
            ],
        ),
    )
    return 0


async def _message_by_id(admin: AdminClient, args: argparse.Namespace) -> int:
    try:
        messages = await admin.messages_by_id(args.msg_id, args.topic)
    except ValueError as exc:
        raise UsageError(f"{exc} with --topic TOPIC") from None
    _print_messages(args, messages)
    return 0


async def _message_by_offset(admin: AdminClient, args: argparse.Namespace) -> int:
    broker_name = args.broker
    if broker_name is not None and ":" in broker_name:
        broker_name, _ = await admin.resolve_broker(broker_name)
    if broker_name is None:
        names = sorted({qd.broker_name for qd in (await admin.topic_route(args.topic)).queue_datas})
        if len(names) != 1:
            raise UsageError(
                f"topic {args.topic!r} is on brokers {', '.join(names)}; "
                "choose one with --broker NAME"
            )
        broker_name = names[0]
    _print_messages(
        args,
        [await admin.message_at(MessageQueue(args.topic, broker_name, args.queue), args.offset)],
    )
    return 0


# -- brokers -------------------------------------------------------------------------------
async def _broker_tables(
    admin: AdminClient, args: argparse.Namespace, fetch: Callable[[str], Awaitable[dict[str, str]]]
) -> int:
    """One column per broker; a broker that does not answer gets a column saying so."""
    if args.addr:  # the column is headed as the user named the broker
        targets = {args.addr: (await admin.resolve_broker(args.addr))[1]}
    else:
        info = await admin.cluster_info()
        targets = {
            (b.broker_name if b.broker_id == 0 else f"{b.broker_name}#{b.broker_id}"): b.addr
            for b in info.brokers
        }
        if not targets:
            raise NotFoundError("no live broker is registered with the nameserver")
    answers, failures = await admin.each_alive(targets, lambda _name, b: fetch(b.addr))
    columns: dict[str, dict[str, Any]] = {
        n: (
            {k: _number(v) for k, v in answers[n].items()}
            if n in answers
            else {"status": "UNREACHABLE"}
        )
        for n in targets
    }
    _out(
        args,
        {**columns, **({"unreachable": failures} if failures else {})},
        lambda: render_mapping(columns),
    )
    print_failures(failures)
    return 1 if failures else 0


def _number(text: str) -> Any:
    """A figure as a number when it is one ("12" -> 12, "0.5" -> 0.5), else the text."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text) if text.strip().lower() not in ("nan", "inf", "-inf") else text
    except ValueError:
        return text


async def _broker_status(admin: AdminClient, args: argparse.Namespace) -> int:
    return await _broker_tables(admin, args, admin.broker_runtime_info)


async def _broker_config(admin: AdminClient, args: argparse.Namespace) -> int:
    return await _broker_tables(admin, args, admin.broker_config)


async def _broker_update_config(admin: AdminClient, args: argparse.Namespace) -> int:
    updates: dict[str, str] = {}
    for item in args.settings:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{item!r} is not KEY=VALUE")
        updates[key.replace("-", "_")] = value
    name, addr = await admin.resolve_broker(args.addr)
    previous = await admin.update_broker_config(addr, updates)
    rows = [{"key": k, "previous": previous.get(k), "value": v} for k, v in updates.items()]
    _out(
        args,
        {"broker_name": name, "addr": addr, "changed": rows},
        lambda: render(
            ["KEY", "PREVIOUS", "NOW"], [[r["key"], r["previous"], r["value"]] for r in rows]
        ),
    )
    return 0
