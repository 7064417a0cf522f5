"""``pocketmq group ...``: consumer groups (mqadmin's consumerProgress, resetOffsetByTime,
consumerConnection, deleteSubGroup), registered by :mod:`.admin_cmd`.

::

    pocketmq group list | progress GROUP [--topic T] | connections GROUP | delete GROUP
    pocketmq group reset-offset GROUP TOPIC (--to earliest|latest|TIME | --to-offset N |
        --shift-by N) [--queue N [--broker NAME]] [--execute] [--allow-new-group]

``reset-offset`` shows its plan (every queue: current offset, new offset, the
queue's range) and changes nothing unless ``--execute`` is given, as Kafka's
``kafka-consumer-groups --reset-offsets`` (``--dry-run`` is its default). A
group no broker knows is refused (a typo would create it) unless
``--allow-new-group``. ``progress`` shows what the live brokers answered and
lists the ones that did not (exit 1).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from pocketmq.cli.table import render, time_ms
from pocketmq.client import AdminClient, ClientError
from pocketmq.client.admin import ResetTarget
from pocketmq.client.admin_model import BrokerFailure, ResetPlan, ResetResult
from pocketmq.client.errors import NotFoundError

__all__ = ["print_failures", "register_group"]


def register_group(actions: Any, leaf: Any, parse_reset_target: Any) -> None:
    leaf(actions, "list", _group_list, "consumer groups the brokers know")
    progress = leaf(
        actions, "progress", _group_progress, "broker offset, consumer offset and lag per queue"
    )
    progress.add_argument("group")
    progress.add_argument("--topic", help="this topic only (default: all of the group's)")
    leaf(
        actions,
        "connections",
        _group_connections,
        "online members of a group: client id, subscriptions (consumerConnection)",
    ).add_argument("group")
    leaf(
        actions,
        "delete",
        _group_delete,
        "forget a group: its offsets and retry topic on every broker (no member may be online)",
    ).add_argument("group")
    reset = leaf(
        actions,
        "reset-offset",
        _group_reset,
        "move a group's offsets of a topic: shows the plan, --execute applies it",
    )
    reset.add_argument("group")
    reset.add_argument("topic")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--to",
        type=parse_reset_target,
        metavar="earliest|latest|TIME",
        help="earliest, latest, ms since the epoch or ISO-8601",
    )
    target.add_argument("--to-offset", type=int, metavar="N", help="this queue offset")
    target.add_argument(
        "--shift-by",
        type=int,
        metavar="N",
        help="N messages forward (negative: back) from the current offset",
    )
    reset.add_argument("--queue", type=int, metavar="N", help="this queue id only")
    reset.add_argument("--broker", metavar="NAME", help="the broker of --queue")
    reset.add_argument(
        "--execute",
        action="store_true",
        help="apply the plan (default: show it and change nothing)",
    )
    reset.add_argument(
        "--allow-new-group",
        action="store_true",
        help="reset a group no broker knows yet (creates its offsets)",
    )


def print_failures(failures: list[BrokerFailure]) -> None:
    for f in failures:
        print(f"broker {f.broker_name} ({f.addr}) did not answer: {f.error}", file=sys.stderr)


def _out(args: argparse.Namespace, data: Any, table: Any) -> None:
    from pocketmq.cli.table import dump_json

    print(dump_json(data) if args.json else table())


def _as_dict(value: Any) -> dict[str, Any]:
    return {name: getattr(value, name) for name in value.__dataclass_fields__}


async def _group_list(admin: AdminClient, args: argparse.Namespace) -> int:
    groups = await admin.consumer_groups()

    async def lag(group: str) -> int | None:
        try:
            return sum(q.lag for q in await admin.consume_progress(group))
        except ClientError:
            return None

    lags = await asyncio.gather(*(lag(g.group) for g in groups))
    rows = [{**_as_dict(g), "total_lag": total} for g, total in zip(groups, lags, strict=True)]
    _out(
        args,
        rows,
        lambda: render(
            ["GROUP", "CLIENTS", "TYPE", "MODEL", "TOPICS", "LAG"],
            [
                [
                    g.group,
                    len(g.client_ids),
                    g.consume_type or None,
                    g.message_model or None,
                    sorted({*g.subscribed_topics, *g.offset_topics}),
                    total,
                ]
                for g, total in zip(groups, lags, strict=True)
            ],
        ),
    )
    return 0


async def _group_progress(admin: AdminClient, args: argparse.Namespace) -> int:
    failures: list[BrokerFailure] = []
    queues = await admin.consume_progress(args.group, args.topic, failures=failures)
    total = sum(q.lag for q in queues)
    rows = [
        [
            q.topic,
            q.broker_name,
            q.queue_id,
            q.broker_offset,
            q.consumer_offset if q.consumer_offset >= 0 else None,
            q.lag,
            time_ms(q.last_timestamp_ms),
        ]
        for q in queues
    ]
    rows += [["-", f.broker_name, None, None, None, None, "UNREACHABLE"] for f in failures]
    _out(
        args,
        {"group": args.group, "queues": queues, "total_lag": total, "unreachable": failures},
        lambda: "\n".join(
            [
                render(
                    [
                        "TOPIC",
                        "BROKER",
                        "QUEUE",
                        "BROKER OFFSET",
                        "CONSUMER OFFSET",
                        "LAG",
                        "LAST CONSUMED",
                    ],
                    rows,
                ),
                f"total lag: {total}" + (" (without the unreachable brokers)" if failures else ""),
            ]
        ),
    )
    print_failures(failures)
    return 1 if failures else 0


async def _group_connections(admin: AdminClient, args: argparse.Namespace) -> int:
    members, failures = await admin.consumer_connections(args.group)
    if not members and not failures:
        raise NotFoundError(f"consumer group {args.group!r} has no online member")
    _out(
        args,
        {"group": args.group, "connections": members, "unreachable": failures},
        lambda: render(
            ["CLIENT ID", "BROKER", "TYPE", "MODEL", "SUBSCRIPTIONS", "SILENT MS"],
            [
                [
                    c.client_id,
                    c.broker_name,
                    c.consume_type or None,
                    c.message_model or None,
                    c.subscriptions,
                    c.silent_ms,
                ]
                for c in members
            ],
        ),
    )
    print_failures(failures)
    return 1 if failures else 0


async def _group_delete(admin: AdminClient, args: argparse.Namespace) -> int:
    deleted, failures = await admin.delete_group(args.group)
    _out(
        args,
        {"group": args.group, "deleted": deleted, "unreachable": failures},
        lambda: render(
            ["BROKER", "OFFSETS OF", "RETRY TOPIC"],
            [
                [d.broker_name, d.offset_topics, "deleted" if d.retry_topic_deleted else None]
                for d in deleted
            ],
        ),
    )
    print_failures(failures)
    return 1 if failures else 0


async def _group_reset(admin: AdminClient, args: argparse.Namespace) -> int:
    if args.broker and args.queue is None:
        raise ValueError("--broker chooses the broker of --queue; give --queue too")
    target = ResetTarget(to=args.to, to_offset=args.to_offset, shift_by=args.shift_by)
    plan = await admin.plan_reset(
        args.group, args.topic, target, queue_id=args.queue, broker_name=args.broker
    )
    if not plan.group_known and not args.allow_new_group:
        await _refuse_unknown_group(admin, args)
    if not args.execute:
        _print_reset_plan(args, plan)
        return 0
    result = await admin.apply_reset(plan)
    _print_reset_result(args, result)
    return 0


async def _refuse_unknown_group(admin: AdminClient, args: argparse.Namespace) -> None:
    """Raise NotFoundError naming the groups the brokers do know (a typo would create one)."""
    groups = sorted(g.group for g in await admin.consumer_groups())
    raise NotFoundError(
        f"no broker of {args.topic!r} knows consumer group {args.group!r} (a typo?); "
        f"known groups: {', '.join(groups) or 'none'}. Give --allow-new-group to create "
        "its offsets"
    )


def _print_reset_plan(args: argparse.Namespace, plan: ResetPlan) -> None:
    """The dry run: every queue's current and new offset and its range; nothing changed."""
    _out(
        args,
        {"executed": False, **_as_dict(plan)},
        lambda: "\n".join(
            [
                render(
                    ["BROKER", "QUEUE", "CURRENT OFFSET", "NEW OFFSET", "MIN", "MAX"],
                    [
                        [
                            m.broker_name,
                            m.queue_id,
                            m.current_offset if m.current_offset >= 0 else None,
                            m.new_offset,
                            m.min_offset,
                            m.max_offset,
                        ]
                        for m in plan.moves
                    ],
                ),
                "dry run: nothing changed; add --execute to apply this plan",
            ]
        ),
    )


def _print_reset_result(args: argparse.Namespace, result: ResetResult) -> None:
    """What --execute stored per queue, and which online consumers were told."""
    told = (
        f"told {len(result.notified_client_ids)} online consumer(s): "
        f"{', '.join(result.notified_client_ids)}"
        if result.notified_client_ids
        else f"no consumer of {args.group} is online; the offsets are stored"
    )
    _out(
        args,
        {"executed": True, **_as_dict(result)},
        lambda: "\n".join(
            [
                render(
                    ["BROKER", "QUEUE", "PREVIOUS OFFSET", "NEW OFFSET"],
                    [
                        [
                            q.broker_name,
                            q.queue_id,
                            q.previous_offset if q.previous_offset >= 0 else None,
                            q.offset,
                        ]
                        for q in result.queues
                    ],
                ),
                told,
            ]
        ),
    )
