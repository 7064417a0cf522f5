"""``pocketmq send``, ``pocketmq produce`` and ``pocketmq consume``: the SDK from a shell.

* ``send TOPIC BODY [--tag T] [--key K]... [--property NAME=VALUE]...`` sends one
  message and prints its result.
* ``produce TOPIC`` sends one message per line of standard input and prints
  how many were sent.
* ``consume TOPIC --group G [--expr "A || B"] [--from first|last] [-n N]
  [--json]`` prints messages (body, or one JSON object per line) until *N*
  were printed or it is interrupted, and commits exactly what it printed.

Every command takes ``--namesrv`` (default ``$POCKETMQ_NAMESRV``, then
127.0.0.1:9876). Exit codes: 0 done, 1 a client error (message on stderr),
2 bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys
from typing import Any

from pocketmq.cli import loop_factory
from pocketmq.cli.credentials import add_security_options, security_kwargs
from pocketmq.client import (
    ClientError,
    Message,
    MessageExt,
    MessageQueue,
    MessageSelector,
    Producer,
    PullConsumer,
    SendResult,
    SqlFilterError,
)
from pocketmq.client.config import DEFAULT_NAMESRV, NAMESRV_ENV
from pocketmq.common.errors import ConfigError

__all__ = ["register"]

PRODUCE_WINDOW = 256   # concurrent sends of `produce`


def register(subparsers: Any) -> None:
    send = subparsers.add_parser("send", help="send one message",
                                 description="Send one message and print its result.")
    _namesrv(send)
    send.add_argument("topic")
    send.add_argument("body", help="message body (UTF-8)")
    send.add_argument("--tag", default="", help="the message's tag")
    send.add_argument("--key", action="append", default=[], help="a key (repeatable)")
    send.add_argument("--property", action="append", default=[], metavar="NAME=VALUE",
                      help="a user property (repeatable)")
    send.add_argument("--group", default="pocketmq-cli", help="producer group")
    send.set_defaults(func=_send)

    produce = subparsers.add_parser("produce", help="send one message per stdin line",
                                    description="Send each line of standard input as one "
                                                "message (without its line break).")
    _namesrv(produce)
    produce.add_argument("topic")
    produce.add_argument("--tag", default="", help="tag of every message")
    produce.add_argument("--group", default="pocketmq-cli", help="producer group")
    produce.set_defaults(func=_produce)

    consume = subparsers.add_parser("consume", help="print a topic's messages",
                                    description="Print messages of a topic as a member of "
                                                "a consumer group; commits what it printed.")
    _namesrv(consume)
    consume.add_argument("topic")
    consume.add_argument("--group", required=True, help="consumer group")
    selector = consume.add_mutually_exclusive_group()
    selector.add_argument("--expr", default="*", help='tag expression, "*" or "A || B"')
    selector.add_argument("--sql", default=None, metavar="EXPR",
                          help="SQL92 filter on message properties, e.g. "
                               "\"region = 'eu' AND amount > 100\"")
    consume.add_argument("--from", dest="consume_from", choices=("first", "last"),
                         default="last", help="where a new group starts (default last)")
    consume.add_argument("-n", type=int, default=0, help="stop after N messages (0 = never)")
    consume.add_argument("--json", action="store_true", help="one JSON object per message")
    consume.add_argument("--idle-timeout", type=float, default=0.0, metavar="SECONDS",
                         help="stop when nothing arrives for this long (0 = never)")
    consume.set_defaults(func=_consume)


def _namesrv(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namesrv", default=None,
                        help=f"nameserver(s) 'host:port;host:port' (default ${NAMESRV_ENV}, "
                             f"then {DEFAULT_NAMESRV})")
    add_security_options(parser)




def _run(coro: Any, command: str) -> int:
    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            return int(runner.run(coro))
    except (ClientError, ConfigError, ValueError) as exc:
        print(f"pocketmq {command}: {exc}", file=sys.stderr)
        return 1


# -- send / produce ----------------------------------------------------------------------------
def _send(args: argparse.Namespace) -> int:
    properties = {}
    for item in args.property:
        name, sep, value = item.partition("=")
        if not sep:
            print(f"pocketmq send: --property {item!r} is not NAME=VALUE", file=sys.stderr)
            return 2
        properties[name] = value
    msg = Message(topic=args.topic, body=args.body.encode(), tags=args.tag, keys=args.key,
                  properties=properties)
    return _run(_send_one(args, msg), "send")


async def _send_one(args: argparse.Namespace, msg: Message) -> int:
    async with Producer(group=args.group, namesrv=args.namesrv,
                        **security_kwargs(args)) as producer:
        result = await producer.send(msg)
    print(_result_line(result))
    return 0


def _result_line(result: SendResult) -> str:
    return (f"{result.status.value} msg_id={result.msg_id} offset_msg_id={result.offset_msg_id} "
            f"queue={result.queue} queue_offset={result.queue_offset}")


def _produce(args: argparse.Namespace) -> int:
    return _run(_produce_lines(args), "produce")


async def _produce_lines(args: argparse.Namespace) -> int:
    sent = 0
    async with Producer(group=args.group, namesrv=args.namesrv,
                        **security_kwargs(args)) as producer:
        window: set[asyncio.Task[SendResult]] = set()
        for line in sys.stdin.buffer:
            body = line.rstrip(b"\r\n")
            if not body:
                continue
            window.add(asyncio.ensure_future(producer.send(
                Message(topic=args.topic, body=body, tags=args.tag))))
            if len(window) >= PRODUCE_WINDOW:
                done, window = await asyncio.wait(window, return_when=asyncio.FIRST_COMPLETED)
                sent += sum(1 for t in done if t.result())
        if window:
            done, _ = await asyncio.wait(window)
            sent += sum(1 for t in done if t.result())
    print(f"sent {sent} message(s) to {args.topic}", file=sys.stderr)
    return 0


# -- consume ------------------------------------------------------------------------------------
def _consume(args: argparse.Namespace) -> int:
    if args.n < 0:
        print("pocketmq consume: -n must be >= 0", file=sys.stderr)
        return 2
    if args.sql is not None:
        try:
            args.selector = MessageSelector.by_sql(args.sql)
        except SqlFilterError as exc:
            print(f"pocketmq consume: --sql {args.sql!r}: {exc}", file=sys.stderr)
            return 2
    else:
        args.selector = args.expr
    return _run(_consume_messages(args), "consume")


async def _consume_messages(args: argparse.Namespace) -> int:
    consumer = PullConsumer(group=args.group, namesrv=args.namesrv,
                            consume_from=args.consume_from, auto_commit=False,
                            rebalance_interval_s=5.0, **security_kwargs(args))
    consumer.subscribe(args.topic, args.selector)
    await consumer.start()
    printed = 0
    idle_s = 0.0
    try:
        while not args.n or printed < args.n:
            batch = await consumer.poll(timeout_s=1.0)
            if not batch:
                idle_s += 1.0
                if args.idle_timeout and idle_s >= args.idle_timeout:
                    break
                continue
            idle_s = 0.0
            room = args.n - printed if args.n else len(batch)
            for msg in batch[:room]:
                print(_format(msg, args.json), flush=True)
            printed += min(room, len(batch))
            if room < len(batch):  # give back what was polled but not printed
                await _rewind(consumer, batch[room:])
            await consumer.commit()
    finally:
        await consumer.commit()
        await consumer.shutdown()
    return 0


async def _rewind(consumer: PullConsumer, unprinted: list[MessageExt]) -> None:
    first: dict[MessageQueue, int] = {}
    for msg in unprinted:
        queue = MessageQueue(msg.topic, msg.broker_name, msg.queue_id)
        first[queue] = min(first.get(queue, msg.queue_offset), msg.queue_offset)
    for queue, offset in first.items():
        if queue in consumer.assigned_queues():
            await consumer.seek(queue, offset)


def _format(msg: MessageExt, as_json: bool) -> str:
    if not as_json:
        return msg.body.decode("utf-8", "replace")
    try:
        body: str = msg.body.decode("utf-8")
        encoding = "utf-8"
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(msg.body).decode(), "base64"
    return json.dumps({
        "topic": msg.topic, "tags": msg.tags, "keys": msg.keys, "msg_id": msg.msg_id,
        "offset_msg_id": msg.offset_msg_id, "broker_name": msg.broker_name,
        "queue_id": msg.queue_id, "queue_offset": msg.queue_offset,
        "store_timestamp_ms": msg.store_timestamp_ms,
        "born_timestamp_ms": msg.born_timestamp_ms, "reconsume_times": msg.reconsume_times,
        "properties": msg.properties, "body": body, "body_encoding": encoding,
    }, ensure_ascii=False)
