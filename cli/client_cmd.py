"""``pocketmq send``, ``pocketmq produce`` and ``pocketmq consume``: the SDK from a shell.

* ``send TOPIC BODY [--tag T] [--key K]... [--property NAME=VALUE]... [--delay-level N |
  --deliver-at TIME] [--queue N [--broker NAME]] [--json]`` sends one message and prints
  its result.
* ``produce TOPIC [--tag T] [--key K]... [--property NAME=VALUE]...`` sends each line of
  standard input as it arrives and reports ``sent N, failed M`` (:mod:`.produce_cmd`).
* ``consume TOPIC (--group G | --peek) [--expr "A || B"] [--from first|last|TIME]
  [--until TIME] [--queue N [--broker B]] [--offset N] [-n N] [--idle-timeout S] [--json |
  --format T]`` prints messages (:mod:`.consume_cmd`).

Every command takes ``--namesrv`` (default ``$POCKETMQ_NAMESRV``, then
127.0.0.1:9876). Exit codes: 0 done, 1 refused or unreachable (message on
stderr), 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from pocketmq.cli import loop_factory, print_usage_of
from pocketmq.cli.consume_cmd import DEFAULT_IDLE_TIMEOUT_S, consume_messages, parse_start
from pocketmq.cli.credentials import add_security_options
from pocketmq.cli.errors import UsageError
from pocketmq.cli.produce_cmd import add_message_options, produce_lines, send_one
from pocketmq.client import ClientError
from pocketmq.client.config import DEFAULT_NAMESRV, NAMESRV_ENV
from pocketmq.common.errors import ConfigError

__all__ = ["register"]


def register(subparsers: Any) -> None:
    _add_send(subparsers)
    _add_produce(subparsers)
    _add_consume(subparsers)


def _add_send(subparsers: Any) -> None:
    send = subparsers.add_parser(
        "send", help="send one message", description="Send one message and print its result."
    )
    _namesrv(send)
    send.add_argument("topic")
    send.add_argument("body", help="message body (UTF-8)")
    add_message_options(send)
    send.add_argument(
        "--queue", type=int, metavar="N", help="this queue id (default: the producer's round robin)"
    )
    send.add_argument(
        "--broker",
        metavar="BROKER",
        help="the broker of --queue (a name or host:port), when several serve it",
    )
    send.add_argument("--json", action="store_true", help="the result as one JSON object")
    send.set_defaults(func=_send)


def _add_produce(subparsers: Any) -> None:
    produce = subparsers.add_parser(
        "produce",
        help="send one message per stdin line, as lines arrive",
        description="Send each line of standard input as one message (without its line "
        "break) as soon as it is read; Ctrl-C ends the input, sends what was "
        "read, and prints 'sent N, failed M'.",
    )
    _namesrv(produce)
    produce.add_argument("topic")
    add_message_options(produce, every=" of every message")
    produce.set_defaults(func=_produce)


def _add_consume(subparsers: Any) -> None:
    consume = subparsers.add_parser(
        "consume",
        help="print a topic's messages",
        description="Print messages of a topic as a member of a consumer group (commits "
        "what it printed), or read-only with --peek.",
    )
    _namesrv(consume)
    consume.add_argument("topic")
    consume.add_argument("--group", default=None, help="consumer group (or --peek)")
    consume.add_argument(
        "--peek",
        action="store_true",
        help="read without a group and commit nothing; stops at the end of "
        "every queue (kcat -C -e)",
    )
    selector = consume.add_mutually_exclusive_group()
    selector.add_argument("--expr", default="*", help='tag expression, "*" or "A || B"')
    selector.add_argument(
        "--sql",
        default=None,
        metavar="EXPR",
        help="SQL92 filter on message properties, e.g. \"region = 'eu' AND amount > 100\"",
    )
    _add_consume_range_options(consume)
    _add_consume_output_options(consume)
    consume.set_defaults(func=_consume)


def _add_consume_range_options(consume: argparse.ArgumentParser) -> None:
    """Where ``consume`` starts and stops: --from, --until, --queue, --broker, --offset, -n."""
    consume.add_argument(
        "--from",
        dest="consume_from",
        type=parse_start,
        default=None,
        metavar="first|last|TIME",
        help="where to start: first, last, or a time (ms since the epoch or "
        "ISO-8601); for a group, where it has no offset yet (default "
        "last; --peek: first)",
    )
    consume.add_argument(
        "--until",
        type=parse_start,
        default=None,
        metavar="TIME",
        help="with --peek: stop at messages stored at or after TIME (ms "
        "since the epoch or ISO-8601)",
    )
    consume.add_argument("--queue", type=int, metavar="N", help="only this queue id")
    consume.add_argument(
        "--broker", metavar="BROKER", help="the broker of --queue: a name or host:port"
    )
    consume.add_argument(
        "--offset",
        type=int,
        metavar="N",
        help="start at this queue offset (clamped into each queue)",
    )
    consume.add_argument("-n", type=int, default=0, help="stop after N messages (0 = never)")


def _add_consume_output_options(consume: argparse.ArgumentParser) -> None:
    """How ``consume`` prints (--json, --format) and when it gives up waiting."""
    consume.add_argument("--json", action="store_true", help="one JSON object per message")
    consume.add_argument(
        "--format",
        metavar="TEMPLATE",
        help="one line per message from a template: {topic} {broker_name} "
        "{queue_id} {queue_offset} {msg_id} {keys} {tags} {store_time} "
        "{store_timestamp_ms} {properties} {body}",
    )
    consume.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"stop when nothing arrives for this long; 0 = never (default "
        f"{DEFAULT_IDLE_TIMEOUT_S:g} with -n or --peek, else never)",
    )


def _namesrv(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namesrv",
        default=None,
        help=f"nameserver(s) 'host:port;host:port' (default ${NAMESRV_ENV}, "
        f"then {DEFAULT_NAMESRV})",
    )
    add_security_options(parser)


def _run(coro: Any, args: argparse.Namespace) -> int:
    command = args.command
    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            return int(runner.run(coro))
    except UsageError as exc:
        print_usage_of(args)
        print(f"pocketmq {command}: {exc}", file=sys.stderr)
        return 2
    except (ClientError, ConfigError, ValueError) as exc:
        print(f"pocketmq {command}: {exc}", file=sys.stderr)
        return 1


def _send(args: argparse.Namespace) -> int:
    return _run(send_one(args), args)


def _produce(args: argparse.Namespace) -> int:
    return _run(produce_lines(args), args)


def _consume(args: argparse.Namespace) -> int:
    return _run(consume_messages(args), args)
