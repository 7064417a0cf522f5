"""``pocketmq send`` and ``pocketmq produce``: messages from a shell (parsers in client_cmd).

``send`` sends one message and prints its result (``--json``: one object).
``produce`` sends each line of standard input as it arrives, so that
``tail -f app.log | pocketmq produce logs`` streams; the sends run
concurrently (at most ``PRODUCE_WINDOW`` in flight) and the SDK coalesces them
into batches per broker. Ctrl-C (or SIGTERM) ends the input like end-of-file
does: every line already read is still sent and waited for. The last line on
stderr is always ``sent N, failed M`` followed by each distinct failure
reason and its count; the exit code is 0 when nothing failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import select
import signal
import sys
import threading
from collections import Counter
from typing import Any

from pocketmq.cli.credentials import broker_name_of, security_kwargs
from pocketmq.cli.errors import UsageError
from pocketmq.client import ClientError, Message, MessageQueue, Producer, SendResult

__all__ = ["add_message_options", "parse_deliver_at", "produce_lines", "send_one"]

PRODUCE_WINDOW = 256  # sends of `produce` in flight at once
MAX_REASONS = 5  # distinct failure reasons printed
READ_CHUNK = 64 * 1024
STOP_DRAIN_POLL_S = 0.05  # after Ctrl-C, while the reader queues what it read
# After Ctrl-C, input already in the pipe is still read, for this long at most (a
# producer that never pauses, `yes | pocketmq produce t`, must still stop)
STOP_GRACE_S = 0.5


def parse_deliver_at(text: str) -> int:
    """ms since the epoch, or ISO-8601 (local time unless it names a zone) -> ms."""
    if text.isdigit():
        return int(text)
    try:
        return int(datetime.datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not ms since the epoch or an ISO-8601 time (e.g. 2024-05-01T10:00:00)"
        ) from None


def add_message_options(parser: argparse.ArgumentParser, *, every: str = "") -> None:
    """--tag, --key, --property (shared by send and produce)."""
    parser.add_argument("--tag", default="", help=f"the tag{every}")
    parser.add_argument("--key", action="append", default=[], help=f"a key{every} (repeatable)")
    parser.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help=f"a user property{every} (repeatable)",
    )
    parser.add_argument("--group", default="pocketmq-cli", help="producer group")
    parser.add_argument(
        "--delay-level",
        type=int,
        default=0,
        metavar="N",
        help="RocketMQ delay level 1..18 (1 s .. 2 h); 0 = none",
    )
    parser.add_argument(
        "--deliver-at",
        type=parse_deliver_at,
        default=0,
        metavar="TIME",
        help="deliver at this time: ms since the epoch or ISO-8601",
    )


def _properties(items: list[str]) -> dict[str, str]:
    properties = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--property {item!r} is not NAME=VALUE")
        properties[name] = value
    return properties


def _message(args: argparse.Namespace, body: bytes, properties: dict[str, str]) -> Message:
    if args.delay_level and args.deliver_at:
        raise UsageError("give --delay-level or --deliver-at, not both")
    return Message(
        topic=args.topic,
        body=body,
        tags=args.tag,
        keys=args.key,
        properties=properties,
        delay_level=args.delay_level,
        deliver_at_ms=args.deliver_at,
    )


async def _queue_of(producer: Producer, args: argparse.Namespace) -> MessageQueue | None:
    """The queue --queue (and --broker) name, or None to let the producer choose."""
    if args.queue is None:
        return None
    args.broker = await broker_name_of(args)
    queues = [
        q
        for q in await producer.fetch_publish_queues(args.topic)
        if q.queue_id == args.queue and args.broker in (None, q.broker_name)
    ]
    names = sorted({q.broker_name for q in queues})
    if not queues:
        raise UsageError(
            f"topic {args.topic!r} has no writable queue {args.queue}"
            + (f" on broker {args.broker!r}" if args.broker else "")
        )
    if len(names) > 1:
        raise UsageError(
            f"queue {args.queue} of {args.topic!r} is on brokers "
            f"{', '.join(names)}; choose one with --broker NAME"
        )
    return queues[0]


async def send_one(args: argparse.Namespace) -> int:
    msg = _message(args, args.body.encode(), _properties(args.property))
    async with Producer(
        group=args.group, namesrv=args.namesrv, **security_kwargs(args)
    ) as producer:
        result = await producer.send(msg, queue=await _queue_of(producer, args))
    print(json.dumps(_result_json(result)) if args.json else _result_line(result))
    return 0


def _result_json(result: SendResult) -> dict[str, Any]:
    return {
        "status": result.status.value,
        "msg_id": result.msg_id,
        "offset_msg_id": result.offset_msg_id,
        "topic": result.queue.topic,
        "broker_name": result.queue.broker_name,
        "queue_id": result.queue.queue_id,
        "queue_offset": result.queue_offset,
    }


def _result_line(result: SendResult) -> str:
    return (
        f"{result.status.value} msg_id={result.msg_id} offset_msg_id={result.offset_msg_id} "
        f"queue={result.queue} queue_offset={result.queue_offset}"
    )


# -- produce ---------------------------------------------------------------------------------
class _StdinLines:
    """Standard input's lines as they arrive, read by a daemon thread on the raw
    descriptor: a read blocked at Ctrl-C must neither keep the process alive nor hold
    the lock of ``sys.stdin.buffer`` while the interpreter shuts down. After a stop,
    :meth:`next` still hands out every complete line the thread had already read, and
    the lines already waiting in the pipe when the stop came (written before Ctrl-C),
    reading for :data:`STOP_GRACE_S` at most."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._fd = sys.stdin.fileno()
        self._lines: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=PRODUCE_WINDOW)
        self._idle = threading.Event()  # the thread holds no line it has read
        self._stopped_at: float | None = None
        self._left: int | None = None  # after the grace: lines still to hand out
        threading.Thread(target=self._read, name="stdin", daemon=True).start()

    def _unread(self) -> bool:
        """Whether input waits in the descriptor that the thread has not read yet."""
        try:
            return bool(select.select([self._fd], [], [], 0)[0])
        except (OSError, ValueError):
            return False

    def _put(self, line: bytes | None) -> None:
        asyncio.run_coroutine_threadsafe(self._lines.put(line), self._loop).result()

    def _read(self) -> None:
        fd = self._fd
        pending = b""
        try:
            while True:
                self._idle.set()
                chunk = os.read(fd, READ_CHUNK)
                self._idle.clear()
                if not chunk:
                    break
                *complete, pending = (pending + chunk).split(b"\n")
                for line in complete:
                    self._put(line)
            if pending:
                self._put(pending)
            self._put(None)
        except (OSError, RuntimeError, ValueError):
            pass  # stdin closed under us, or the loop is gone: the input has ended
        finally:
            self._idle.set()

    async def next(self, stop: asyncio.Event) -> bytes | None:
        """The next line; None at end of input, or once *stop* is set and every line
        already read or waiting in the pipe is handed out (see the class)."""
        while True:
            if stop.is_set() and self._past_grace():
                if not self._left or self._lines.empty():
                    return None
                self._left -= 1  # only the lines queued when the grace ended
                return self._lines.get_nowait()
            if not self._lines.empty():
                return self._lines.get_nowait()
            if stop.is_set():
                if await self._drained():
                    return None
                with contextlib.suppress(TimeoutError):  # the thread is queueing a chunk
                    return await asyncio.wait_for(self._lines.get(), STOP_DRAIN_POLL_S)
                continue
            getter = asyncio.ensure_future(self._lines.get())
            stopper = asyncio.ensure_future(stop.wait())
            await asyncio.wait((getter, stopper), return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            if getter.done():
                return getter.result()
            getter.cancel()

    def _past_grace(self) -> bool:
        """Whether :data:`STOP_GRACE_S` passed since the stop was first seen; when it
        has, ``_left`` is how many lines were queued then (all that is still handed out)."""
        now = self._loop.time()
        if self._stopped_at is None:
            self._stopped_at = now
        if self._left is None and now - self._stopped_at > STOP_GRACE_S:
            self._left = self._lines.qsize()
        return self._left is not None

    async def _drained(self) -> bool:
        """After a stop: nothing read is waiting to be handed out and nothing is left in
        the pipe."""
        if not self._idle.is_set() or self._unread():
            return False
        # the thread may be between a read that just returned and marking itself busy
        await asyncio.sleep(STOP_DRAIN_POLL_S)
        return self._idle.is_set() and self._lines.empty() and not self._unread()


class _Tally:
    """What `produce` sent and why sends failed."""

    def __init__(self) -> None:
        self.sent = 0
        self.reasons: Counter[str] = Counter()

    def done(self, task: asyncio.Task[SendResult]) -> None:
        if task.cancelled():
            self.reasons["cancelled"] += 1
        elif (exc := task.exception()) is not None:
            self.reasons[str(exc) or type(exc).__name__] += 1
        else:
            self.sent += 1

    def summary(self, topic: str) -> str:
        failed = sum(self.reasons.values())
        text = f"sent {self.sent}, failed {failed} message(s) to {topic}"
        for reason, count in self.reasons.most_common(MAX_REASONS):
            text += f"\n  {count} x {reason}"
        if len(self.reasons) > MAX_REASONS:
            text += f"\n  ... and {len(self.reasons) - MAX_REASONS} other reason(s)"
        return text


async def produce_lines(args: argparse.Namespace) -> int:
    properties = _properties(args.property)
    _message(args, b"", properties)  # argument errors before anything is read
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    lines = _StdinLines(loop)
    tally = _Tally()
    window = asyncio.Semaphore(PRODUCE_WINDOW)
    in_flight: set[asyncio.Task[SendResult]] = set()
    try:
        async with Producer(
            group=args.group, namesrv=args.namesrv, **security_kwargs(args)
        ) as producer:
            while (line := await lines.next(stop)) is not None:
                body = line.rstrip(b"\r\n")
                if not body:
                    continue
                await window.acquire()
                task = asyncio.ensure_future(producer.send(_message(args, body, properties)))
                in_flight.add(task)
                task.add_done_callback(tally.done)
                task.add_done_callback(in_flight.discard)
                task.add_done_callback(lambda _t: window.release())
            if in_flight:
                await asyncio.wait(set(in_flight))
    except ClientError as exc:  # the producer could not start
        tally.reasons[str(exc)] += 1
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        print(tally.summary(args.topic), file=sys.stderr)
    return 1 if tally.reasons else 0
