"""``pocketmq consume``: print a topic's messages (parser in :mod:`.client_cmd`).

Three ways to read, one output::

    consume TOPIC --group G                   a member of G: rebalanced queues, commits
    consume TOPIC --group G --queue 3 --offset 100
                                              G's offsets of the chosen queues, from there
    consume TOPIC --peek [--from TIME] [--until TIME]
                                              read-only (kcat -C -e): no group, no commit,
                                              ends at the end of every queue (as it was
                                              at the start), or at --until

Where to start, ``--from``: ``first``, ``last`` or a time (ms since the epoch or
ISO-8601); for a group it applies where the group has no offset yet, with
``--queue``/``--offset``/``--peek`` it is where reading starts. Output: the
body (default), ``--json`` (one object per line) or ``--format TEMPLATE``
(``{topic} {queue_id} {queue_offset} {keys} {tags} {msg_id} {store_time}
{body}``...). When to stop: after ``-n N`` messages; when nothing arrives for
``--idle-timeout`` seconds (default 5 with ``-n`` or ``--peek``, like
kafka-console-consumer's ``--timeout-ms``; otherwise never), printing
``consumed K message(s)`` on stderr; on Ctrl-C or SIGTERM (between polls:
what was printed is committed; exit 130). Exit codes: 0
done, 1 refused or unreachable (unknown topic, denied group, no nameserver),
2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime
import json
import signal
import sys
from typing import Any

from pocketmq.cli.credentials import broker_name_of, security_kwargs
from pocketmq.cli.errors import UsageError
from pocketmq.client import MessageExt, MessageQueue, MessageSelector, PullConsumer
from pocketmq.client.admin import TOOLS_CONSUMER_GROUP
from pocketmq.common.filter import (
    SqlFilterError,
    TagExpressionError,
    compile_sql92,
    parse_tag_expression,
)

__all__ = ["DEFAULT_IDLE_TIMEOUT_S", "consume_messages", "format_message", "parse_start"]

DEFAULT_IDLE_TIMEOUT_S = 5.0
POLL_S = 0.5


def parse_start(text: str) -> str | int:
    """``first``, ``last``, ms since the epoch or ISO-8601 -> "first" / "last" / ms."""
    if text in ("first", "last"):
        return text
    if text.isdigit():
        return int(text)
    try:
        return int(datetime.datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--from {text!r}: give first, last, ms since the epoch or an ISO-8601 time "
            "(e.g. 2024-05-01T10:00:00)"
        ) from None


def idle_timeout_of(args: argparse.Namespace) -> float:
    if args.idle_timeout is not None:
        return args.idle_timeout
    return DEFAULT_IDLE_TIMEOUT_S if (args.n or args.peek) else 0.0


def check_args(args: argparse.Namespace) -> None:
    if args.n < 0:
        raise UsageError("-n must be >= 0")
    if args.idle_timeout is not None and args.idle_timeout < 0:
        raise UsageError("--idle-timeout must be >= 0 (0 = wait forever)")
    if args.peek and args.group:
        raise UsageError("--peek reads without a group; drop --group (or --peek)")
    if not args.peek and not args.group:
        raise UsageError("give --group GROUP, or --peek to read without one")
    if args.json and args.format:
        raise UsageError("give --json or --format, not both")
    if args.broker and args.queue is None:
        raise UsageError("--broker chooses the broker of --queue; give --queue too")
    try:
        parse_tag_expression(args.expr, what="--expr")
    except TagExpressionError as exc:
        raise UsageError(str(exc)) from None
    if args.sql is not None:
        try:
            args.sql_filter = compile_sql92(args.sql)
        except SqlFilterError as exc:
            raise UsageError(f"--sql {args.sql!r}: {exc}") from None
    if args.until is not None and (not args.peek or isinstance(args.until, str)):
        raise UsageError("--until takes a time (ms since the epoch or ISO-8601) and ends a --peek")


def _consumer(args: argparse.Namespace) -> PullConsumer:
    start = args.consume_from
    options: dict[str, Any] = {"consume_from": start if isinstance(start, str) else "timestamp"}
    if isinstance(start, int):
        options["consume_timestamp_ms"] = start
    return PullConsumer(
        group=args.group or TOOLS_CONSUMER_GROUP,
        namesrv=args.namesrv,
        auto_commit=False,
        rebalance_interval_s=5.0,
        **options,
        **security_kwargs(args),
    )


async def _assign(
    consumer: PullConsumer, args: argparse.Namespace, from_given: bool
) -> dict[MessageQueue, int]:
    """Assign the chosen queues and seek them; returns each queue's end (peek stops there).

    Where each starts: --offset (clamped into the queue), else --from when given (or
    peeking), else the group's stored offset (the consumer's own start rule)."""
    args.broker = await broker_name_of(args)
    queues = [
        q
        for q in await consumer.fetch_message_queues(args.topic)
        if args.queue in (None, q.queue_id) and args.broker in (None, q.broker_name)
    ]
    if not queues:
        raise UsageError(
            f"topic {args.topic!r} has no queue {args.queue}"
            + (f" on broker {args.broker!r}" if args.broker else "")
        )
    consumer.assign(queues)
    ends: dict[MessageQueue, int] = {}
    for queue in queues:
        low, high = await consumer.beginning_offset(queue), await consumer.end_offset(queue)
        ends[queue] = (
            high
            if args.until is None
            else min(high, await consumer.offset_for_time(queue, args.until))
        )
        start = args.consume_from
        if args.offset is not None:
            await consumer.seek(queue, min(max(args.offset, low), high))
        elif start == "first" and (from_given or args.peek):
            await consumer.seek(queue, low)
        elif start == "last" and from_given:
            await consumer.seek(queue, high)
        elif isinstance(start, int):
            await consumer.seek(queue, await consumer.offset_for_time(queue, start))
    return ends


async def consume_messages(args: argparse.Namespace) -> int:
    check_args(args)
    from_given = args.consume_from is not None
    if not from_given:
        args.consume_from = "first" if args.peek else "last"
    assigned = args.peek or args.queue is not None or args.offset is not None
    consumer = _consumer(args)
    reader = _Printer(args, filter_tags=assigned)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # stop between polls: commit, leave, 130
        loop.add_signal_handler(sig, reader.stop.set)
    try:
        if assigned:
            await consumer.start()
            ends = await _assign(consumer, args, from_given)
        else:
            consumer.subscribe(
                args.topic, args.expr if args.sql is None else MessageSelector.by_sql(args.sql)
            )
            await consumer.start()
            await consumer.fetch_message_queues(args.topic)  # unknown topic: exit 1
            ends = {}
        await reader.run(consumer, ends)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        if consumer.state == "running" and not args.peek:
            await consumer.commit()
        await consumer.shutdown()
        if reader.stopped_idle:
            print(
                f"consumed {reader.printed} message(s); nothing more arrived for "
                f"{idle_timeout_of(args):g} s",
                file=sys.stderr,
            )
    if reader.stop.is_set():
        print(f"interrupted after {reader.printed} message(s)", file=sys.stderr)
        return 130
    return 0


class _Printer:
    """Polls, filters (peek: tags), prints, and decides when to stop."""

    def __init__(self, args: argparse.Namespace, *, filter_tags: bool) -> None:
        self.args = args
        self.printed = 0
        self.stopped_idle = False
        self.stop = asyncio.Event()  # Ctrl-C or SIGTERM
        # Assigned queues are pulled without a subscription: --expr / --sql apply here.
        self._tags = parse_tag_expression(args.expr) if filter_tags else None
        self._sql = args.sql_filter if filter_tags and args.sql is not None else None

    def _wanted(self, msg: MessageExt, ends: dict[MessageQueue, int]) -> bool:
        """Its tag matches, and (peeking) it is before its queue's end."""
        if self._tags is not None and msg.tags not in self._tags:
            return False
        if self._sql is not None and not self._sql.matches(msg.properties or {}):
            return False
        if not self.args.peek:
            return True
        end = ends.get(MessageQueue(msg.topic, msg.broker_name, msg.queue_id))
        return end is None or msg.queue_offset < end

    async def run(self, consumer: PullConsumer, ends: dict[MessageQueue, int]) -> None:
        loop = asyncio.get_running_loop()
        idle_s = idle_timeout_of(self.args)
        last = loop.time()
        limit = self.args.n
        while (not limit or self.printed < limit) and not self.stop.is_set():
            if self.args.peek and _at_end(consumer, ends):
                return
            batch = await consumer.poll(timeout_s=POLL_S)
            if not batch:
                if idle_s and loop.time() - last >= idle_s:
                    self.stopped_idle = not self.args.peek
                    return
                continue
            last = loop.time()
            room = limit - self.printed if limit else len(batch)
            for msg in batch[:room]:
                if self._wanted(msg, ends):
                    print(format_message(msg, self.args), flush=True)
                    self.printed += 1
            if room < len(batch) and not self.args.peek:  # give back what was not printed
                await _rewind(consumer, batch[room:])
            if not self.args.peek:
                await consumer.commit()


def _at_end(consumer: PullConsumer, ends: dict[MessageQueue, int]) -> bool:
    return all((consumer.committed(q) or 0) >= end for q, end in ends.items())


async def _rewind(consumer: PullConsumer, unprinted: list[MessageExt]) -> None:
    first: dict[MessageQueue, int] = {}
    for msg in unprinted:
        queue = MessageQueue(msg.topic, msg.broker_name, msg.queue_id)
        first[queue] = min(first.get(queue, msg.queue_offset), msg.queue_offset)
    for queue, offset in first.items():
        if queue in consumer.assigned_queues():
            await consumer.seek(queue, offset)


def message_fields(msg: MessageExt) -> dict[str, Any]:
    """The fields of --json and --format (body as text, or base64 when it is not UTF-8)."""
    try:
        body: str = msg.body.decode("utf-8")
        encoding = "utf-8"
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(msg.body).decode(), "base64"
    stored = datetime.datetime.fromtimestamp(msg.store_timestamp_ms / 1000)
    return {
        "topic": msg.topic,
        "tags": msg.tags,
        "keys": msg.keys,
        "msg_id": msg.msg_id,
        "offset_msg_id": msg.offset_msg_id,
        "broker_name": msg.broker_name,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "store_timestamp_ms": msg.store_timestamp_ms,
        "store_time": stored.isoformat(timespec="milliseconds"),
        "born_timestamp_ms": msg.born_timestamp_ms,
        "reconsume_times": msg.reconsume_times,
        "properties": msg.properties,
        "body": body,
        "body_encoding": encoding,
    }


def format_message(msg: MessageExt, args: argparse.Namespace) -> str:
    if args.json:
        fields = message_fields(msg)
        fields.pop("store_time")
        return json.dumps(fields, ensure_ascii=False)
    if args.format:
        fields = message_fields(msg)
        fields["keys"] = ",".join(msg.keys)
        fields["properties"] = ",".join(f"{k}={v}" for k, v in sorted(msg.properties.items()))
        template = args.format.replace("\\n", "\n").replace("\\t", "\t")
        return template.format_map(fields)
    return msg.body.decode("utf-8", "replace")
