"""``pocketmq message by-key|by-id|by-offset`` (RocketMQ's ``queryMsgByKey``,
``queryMsgById``, ``queryMsgByOffset``) and, from :mod:`.trace_cmd`, ``message
trace``. A message prints as a FIELD / VALUE table (its body up to
:data:`MAX_BODY_CHARS` characters) or, with ``--json``, whole: a UTF-8 body as
text, any other as base64 (``body_encoding``).
"""

from __future__ import annotations

import argparse
import base64
from typing import Any

from pocketmq.cli.admin_run import UsageError, print_out
from pocketmq.cli.table import render, time_ms
from pocketmq.client import AdminClient, MessageExt, MessageQueue
from pocketmq.client.errors import NotFoundError

__all__ = ["MAX_BODY_CHARS", "message_json", "register_message"]

MAX_BODY_CHARS = 4096


def register_message(actions: Any, leaf: Any) -> None:
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


def _as_dict(value: Any) -> dict[str, Any]:
    return {name: getattr(value, name) for name in value.__dataclass_fields__}


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
    print_out(
        args,
        [message_json(m) for m in messages],
        lambda: "\n\n".join(_message_detail(m) for m in messages),
    )


async def _message_by_key(admin: AdminClient, args: argparse.Namespace) -> int:
    messages = await admin.query_message(args.topic, args.key, max_num=args.max)
    if not messages:
        raise NotFoundError(f"no message of topic {args.topic!r} has key {args.key!r}")
    print_out(
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
