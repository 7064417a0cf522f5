"""``pocketmq bench produce|consume|e2e``: RocketMQ's benchmark tools, on the public SDK.

RocketMQ ships ``producer.sh`` and ``consumer.sh`` (``benchmark/``); these do
the same with :mod:`pocketmq.client`, bounded and with a summary a script can read:

* ``produce`` — ``--concurrency`` tasks (default 64) send ``--size``-byte
  messages, one at a time (the producer coalesces them into SendBatch calls)
  or ``--batch N`` per ``send_batch``; RT is one send call.
* ``consume`` — a PushConsumer of ``--group`` reads the topic (``--from first``
  by default) with ``--concurrency`` handler calls at once (default 20); RT is
  born timestamp -> handler (meaningful while producers run).
* ``e2e`` — both: a new group starts at the end of the topic, sending starts
  once it holds every queue, and RT is born timestamp -> handler. After the
  sending stops it waits until every acknowledged message was consumed.

A run stops after ``--count N`` messages, ``--duration S`` seconds (10 s when
neither is given) or Ctrl-C; ``consume`` and the end of ``e2e`` also after
``--idle-timeout`` seconds without a message. Every ``--interval`` seconds it
prints a line per side (rate and RT of that interval), at the end a summary per
side and, last, one JSON object (also written to ``--json-out FILE``)::

    produce  52,480 / 100,000 msgs (52%)  10,496 msgs/s  ETA 4.5 s | 1.3 MB/s  RT avg ...
    {"mode": "produce", "topic": "BenchmarkTest", ..., "produce": {"sent": 100000,
     "acknowledged": 100000, "failed": 0, "tps": 10321.4, "mb_per_s": 1.32,
     "rt_ms": {"avg": 5.9, "p50": 5.1, "p99": 14.3, "max": 40.1}, ...}}

Exit code 0; 1 when a send failed or ``e2e`` consumed fewer messages than were
acknowledged (or the cluster could not be reached); 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

from pocketmq.cli import loop_factory
from pocketmq.cli.credentials import add_security_options, security_kwargs
from pocketmq.client import (
    AdminClient,
    ClientError,
    ConsumeResult,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PushConsumer,
    RouteNotFoundError,
    TopicConfig,
)
from pocketmq.client.config import DEFAULT_NAMESRV, NAMESRV_ENV
from pocketmq.client.route import TopicRoute
from pocketmq.common.errors import ConfigError
from pocketmq.common.progress import Progress, stream_sink

__all__ = ["LatencyHistogram", "register"]

DEFAULT_TOPIC = "BenchmarkTest"  # RocketMQ's benchmark topic
DEFAULT_DURATION_S = 10.0
SEND_CONCURRENCY = 64  # producer.sh's default threads
CONSUME_CONCURRENCY = 20  # consumeThreadMin
FAILURE_PAUSE_S = 0.05  # after a failed send, before the next
ASSIGNMENT_TIMEOUT_S = 30.0  # e2e: the consumer must hold every queue by then
MAX_ERRORS_KEPT = 5


class LatencyHistogram:
    """Latencies to the microsecond in log-linear buckets at most 1/32 of their value
    wide (HdrHistogram's scheme): percentiles of a run of any length in little memory."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.count = 0
        self.sum_s = 0.0
        self.max_s = 0.0

    @staticmethod
    def _index(us: int) -> int:
        if us < 64:
            return us
        shift = us.bit_length() - 6  # us >> shift lies in 32..63
        return 64 + (shift - 1) * 32 + ((us >> shift) - 32)

    @staticmethod
    def _top_us(index: int) -> int:
        if index < 64:
            return index
        shift, mantissa = divmod(index - 64, 32)
        return ((mantissa + 33) << (shift + 1)) - 1

    def record(self, seconds: float) -> None:
        index = self._index(max(int(seconds * 1_000_000), 0))
        self.counts[index] = self.counts.get(index, 0) + 1
        self.count += 1
        self.sum_s += seconds
        self.max_s = max(self.max_s, seconds)

    def merge(self, other: LatencyHistogram) -> None:
        for index, n in other.counts.items():
            self.counts[index] = self.counts.get(index, 0) + n
        self.count += other.count
        self.sum_s += other.sum_s
        self.max_s = max(self.max_s, other.max_s)

    def mean_s(self) -> float:
        return self.sum_s / self.count if self.count else 0.0

    def percentile_s(self, q: float) -> float:
        """The latency *q* (0..100) percent of the records are at or below."""
        if not self.count:
            return 0.0
        rank, seen = max(1, math.ceil(q / 100 * self.count)), 0
        for index in sorted(self.counts):
            seen += self.counts[index]
            if seen >= rank:
                return min(self._top_us(index) / 1_000_000, self.max_s)
        return self.max_s

    def summary_ms(self) -> dict[str, float]:
        return {
            "avg": round(self.mean_s() * 1000, 3),
            "p50": round(self.percentile_s(50) * 1000, 3),
            "p99": round(self.percentile_s(99) * 1000, 3),
            "max": round(self.max_s * 1000, 3),
        }


class _Side:
    """What one side (produce or consume) did: totals, and the interval since the last line."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.messages = 0
        self.bytes = 0
        self.failed = 0
        self.errors: list[str] = []
        self.latency = LatencyHistogram()
        self.started_at = self.last_at = time.monotonic()
        self._interval = LatencyHistogram()
        self._tick_at, self._tick_bytes = self.started_at, 0

    def record(self, messages: int, nbytes: int, latencies_s: Sequence[float]) -> None:
        self.messages += messages
        self.bytes += nbytes
        self.last_at = time.monotonic()
        for seconds in latencies_s:
            self._interval.record(seconds)

    def fail(self, messages: int, exc: Exception) -> None:
        self.failed += messages
        text = f"{type(exc).__name__}: {exc}"
        if len(self.errors) < MAX_ERRORS_KEPT and text not in self.errors:
            self.errors.append(text)

    def detail(self) -> str:
        """The interval's MB/s and RT, for the live line; starts the next interval."""
        now = time.monotonic()
        mb_per_s = (self.bytes - self._tick_bytes) / 1e6 / max(now - self._tick_at, 1e-9)
        interval, self._interval = self._interval, LatencyHistogram()
        self.latency.merge(interval)
        self._tick_at, self._tick_bytes = now, self.bytes
        text = (
            f"{mb_per_s:.1f} MB/s  RT avg {interval.mean_s() * 1000:.2f} ms  "
            f"p99 {interval.percentile_s(99) * 1000:.2f} ms"
        )
        return text + (f"  failed {self.failed:,}" if self.failed else "")

    def summary(self) -> dict[str, Any]:
        self.latency.merge(self._interval)
        self._interval = LatencyHistogram()
        elapsed = max(self.last_at - self.started_at, 1e-9)
        return {
            "messages": self.messages,
            "bytes": self.bytes,
            "elapsed_s": round(elapsed, 3),
            "tps": round(self.messages / elapsed, 1),
            "mb_per_s": round(self.bytes / 1e6 / elapsed, 3),
            "rt_ms": self.latency.summary_ms(),
        }


# -- command line -----------------------------------------------------------------------------
def register(subparsers: Any) -> None:
    bench = subparsers.add_parser(
        "bench",
        help="benchmark a cluster: produce, consume, end to end",
        description="RocketMQ's benchmark tools on the PocketMQ SDK: live TPS, MB/s and RT "
        "every --interval seconds, a JSON summary at the end.",
    )
    modes = bench.add_subparsers(dest="bench_mode", metavar="MODE", required=True)
    for mode, text in (
        ("produce", "send messages as fast as the cluster takes them"),
        ("consume", "consume a topic as fast as the cluster serves it"),
        ("e2e", "produce and consume at once; latency born -> handler"),
    ):
        parser = modes.add_parser(mode, help=text, description=text)
        _options(parser, mode)
        parser.set_defaults(func=_run)


def _options(parser: argparse.ArgumentParser, mode: str) -> None:
    parser.add_argument(
        "--namesrv",
        default=None,
        help=f"nameserver(s) 'host:port;host:port' (default ${NAMESRV_ENV}, "
        f"then {DEFAULT_NAMESRV})",
    )
    parser.add_argument("--topic", default=DEFAULT_TOPIC, help=f"(default {DEFAULT_TOPIC})")
    parser.add_argument(
        "--group",
        default=None,
        help="producer group for produce; consumer group for consume "
        "(default benchmark_consumer) and e2e (default: a new one)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="concurrent sends (default 64), or handler calls of consume (default 20)",
    )
    _mode_options(parser, mode)
    parser.add_argument(
        "--count",
        type=int,
        default=0,
        metavar="N",
        help="stop after N messages (produce, e2e: sent; consume: consumed)",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="S",
        help=f"stop after S seconds (default {DEFAULT_DURATION_S:g} unless --count is given)",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds between live lines (default 5)",
    )
    parser.add_argument("--json-out", metavar="FILE", help="also write the JSON summary here")
    add_security_options(parser)


def _mode_options(parser: argparse.ArgumentParser, mode: str) -> None:
    """The flags of one mode: message shape for senders, start and batching for consumers."""
    if mode != "consume":
        parser.add_argument(
            "--size", type=int, default=128, help="body bytes of each message (default 128)"
        )
        parser.add_argument(
            "--batch",
            type=int,
            default=1,
            help="messages per send_batch call; 1 = single sends (default)",
        )
    if mode == "consume":
        parser.add_argument(
            "--from",
            dest="consume_from",
            choices=("first", "last"),
            default="first",
            help="where a group without offsets starts (default first)",
        )
    if mode != "produce":
        parser.add_argument(
            "--consume-batch",
            type=int,
            default=1,
            help="messages per handler call (default 1, RocketMQ's)",
        )
        parser.add_argument(
            "--idle-timeout",
            type=float,
            default=10.0,
            metavar="S",
            help="stop consuming after S seconds without a message (default 10; 0 = never)",
        )


def _check(args: argparse.Namespace) -> str | None:
    for name in ("size", "batch", "concurrency", "consume_batch"):
        value = getattr(args, name, None)
        if value is not None and value <= 0:
            return f"--{name.replace('_', '-')} must be positive, got {value}"
    if args.count < 0:
        return f"--count must be >= 0, got {args.count}"
    for name in ("duration", "interval"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            return f"--{name} must be positive, got {value}"
    if getattr(args, "idle_timeout", 0) < 0:
        return f"--idle-timeout must be >= 0, got {args.idle_timeout}"
    return None


def _run(args: argparse.Namespace) -> int:
    problem = _check(args)
    if problem:
        print(f"pocketmq bench: {problem}", file=sys.stderr)
        return 2
    if args.duration is None and not args.count:
        args.duration = DEFAULT_DURATION_S
    if args.concurrency is None:
        args.concurrency = CONSUME_CONCURRENCY if args.bench_mode == "consume" else SEND_CONCURRENCY
    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            summary = runner.run(Bench(args).run())
    except (ClientError, ConfigError, ValueError, TimeoutError) as exc:
        print(f"pocketmq bench: {exc}", file=sys.stderr)
        return 1
    line = json.dumps(summary)
    if args.json_out:
        with open(args.json_out, "w") as f:
            f.write(line + "\n")
    print(line, flush=True)
    produce, consume = summary.get("produce"), summary.get("consume")
    failed = bool(produce and produce["failed"])
    lost = bool(produce and consume and consume["consumed"] < produce["acknowledged"])
    if summary.get("interrupted"):  # the figures are printed, but the run did not finish
        print("pocketmq bench: interrupted; the figures cover the part that ran", file=sys.stderr)
        return 130
    return 1 if failed or lost else 0


# -- the run ----------------------------------------------------------------------------------
class Bench:
    """One run of ``pocketmq bench MODE``; :meth:`run` returns the JSON summary."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.mode: str = args.bench_mode
        self.stop = asyncio.Event()  # stop sending (or consuming, in consume mode)
        self.interrupts = 0  # Ctrl-C: the first stops, a second ends a drain
        self.produce = _Side("produce") if self.mode != "consume" else None
        self.consume = _Side("consume") if self.mode != "produce" else None
        self._claimed = 0  # messages handed to senders so far
        self._timer: asyncio.TimerHandle | None = None
        self.security = security_kwargs(args)  # --access-key, --tls-ca ... (or the env)

    def _start_clock(self, side: _Side) -> None:
        """*side* starts now, and --duration counts from here."""
        side.started_at = side.last_at = time.monotonic()
        if self.args.duration and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.args.duration, self.stop.set)

    async def run(self) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, self._interrupt)
        started = time.monotonic()
        try:
            if self.mode == "produce":
                async with self._producer() as producer:
                    await self._ticking(self._send_all(producer))
            elif self.mode == "consume":
                await self._ticking(self._consume_only())
            else:
                await self._ticking(self._end_to_end())
        finally:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signal.SIGINT)
        return self._summary(time.monotonic() - started)

    def _interrupt(self) -> None:
        self.interrupts += 1
        self.stop.set()

    def _producer(self) -> Producer:
        return Producer(
            group=self.args.group
            if self.mode == "produce" and self.args.group
            else "benchmark_producer",
            namesrv=self.args.namesrv,
            **self.security,
        )

    # -- live lines -------------------------------------------------------------------
    async def _ticking(self, work: Any) -> None:
        args = self.args
        progress = [
            Progress(
                side.name,
                sink=stream_sink(sys.stdout, tty=False),
                unit="msgs",
                total=args.count,
                time_budget_s=args.duration,
                detail=side.detail,
            )
            for side in (self.produce, self.consume)
            if side is not None
        ]
        sides = [side for side in (self.produce, self.consume) if side is not None]

        async def tick() -> None:
            while True:
                await asyncio.sleep(args.interval)
                for line, side in zip(progress, sides, strict=True):
                    line.report(side.messages)

        ticker = asyncio.get_running_loop().create_task(tick())
        try:
            await work
        finally:
            if self._timer is not None:
                self._timer.cancel()
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker

    # -- producing --------------------------------------------------------------------
    def _claim(self, want: int) -> int:
        """Messages the next send may carry: *want*, fewer near --count, 0 when done."""
        if self.stop.is_set():
            return 0
        count = self.args.count
        n = want if not count else min(want, count - self._claimed)
        if n <= 0:
            self.stop.set()
            return 0
        self._claimed += n
        return n

    async def _send_all(self, producer: Producer) -> None:
        args, side = self.args, self.produce
        assert side is not None
        messages = [Message(topic=args.topic, body=os.urandom(args.size))] * args.batch
        self._start_clock(side)
        await asyncio.gather(
            *(self._send_loop(producer, messages) for _ in range(args.concurrency))
        )

    async def _send_loop(self, producer: Producer, messages: list[Message]) -> None:
        side, size = self.produce, self.args.size
        assert side is not None
        while n := self._claim(len(messages)):
            started = time.perf_counter()
            try:
                if len(messages) == 1:
                    await producer.send(messages[0])
                else:
                    await producer.send_batch(messages[:n])
            except ClientError as exc:
                side.fail(n, exc)
                await asyncio.sleep(FAILURE_PAUSE_S)
            else:
                side.record(n, n * size, (time.perf_counter() - started,))

    # -- consuming --------------------------------------------------------------------
    def _consumer(self, group: str, consume_from: str) -> PushConsumer:
        args, side = self.args, self.consume
        assert side is not None
        consumer = PushConsumer(
            group=group,
            namesrv=args.namesrv,
            consume_from=consume_from,
            consume_concurrency=args.concurrency if self.mode == "consume" else CONSUME_CONCURRENCY,
            consume_batch_max_size=args.consume_batch,
            **self.security,
        )
        consumer.subscribe(args.topic)

        @consumer.listener
        async def handle(batch: list[MessageExt]) -> ConsumeResult:
            now_ms = time.time() * 1000
            side.record(
                len(batch),
                sum(len(m.body) for m in batch),
                [(now_ms - m.born_timestamp_ms) / 1000 for m in batch],
            )
            if self.mode == "consume" and self.args.count and side.messages >= self.args.count:
                self.stop.set()
            return ConsumeResult.CONSUME_SUCCESS

        return consumer

    async def _consume_only(self) -> None:
        consumer = self._consumer(self.args.group or "benchmark_consumer", self.args.consume_from)
        assert self.consume is not None
        self._start_clock(self.consume)
        await consumer.start()
        try:
            await self._consumed_until(self.stop.is_set)
        finally:
            await consumer.shutdown()

    async def _end_to_end(self) -> None:
        consume, produce = self.consume, self.produce
        assert consume is not None and produce is not None
        group = self.args.group or f"benchmark_e2e_{os.urandom(4).hex()}"
        queues = await self._topic_queues()
        async with self._producer() as producer:
            consumer = self._consumer(group, "last")
            await consumer.start()
            try:
                await self._hold_every_queue(consumer, queues)
                consume.started_at = consume.last_at = time.monotonic()
                await self._send_all(producer)
                await self._consumed_until(
                    lambda: self.interrupts > 1 or consume.messages >= produce.messages
                )
            finally:
                await consumer.shutdown()

    async def _consumed_until(self, done: Any) -> None:
        """Wait for *done*, or --idle-timeout without a message."""
        side, idle_s = self.consume, self.args.idle_timeout
        assert side is not None
        while not done():
            if idle_s and time.monotonic() - side.last_at >= idle_s:
                return
            await asyncio.sleep(0.05)

    async def _topic_queues(self) -> set[MessageQueue]:
        """The topic's read queues. A topic no broker serves yet is created on every
        master first, as ``pocketmq topic create`` does: the consumer must find it
        before the first message is sent."""
        topic = self.args.topic
        async with AdminClient(self.args.namesrv, **self.security) as admin:
            try:
                route = await admin.topic_route(topic)
            except RouteNotFoundError:
                masters = (await admin.cluster_info()).masters()
                for addr in masters.values():
                    await admin.create_topic(addr, TopicConfig(topic=topic))
                print(f"created topic {topic} on {len(masters)} broker(s)", flush=True)
                route = await self._routed(admin)
        return set(route.read_queues())

    async def _routed(self, admin: AdminClient) -> TopicRoute:
        deadline = time.monotonic() + ASSIGNMENT_TIMEOUT_S
        while True:
            try:
                return await admin.topic_route(self.args.topic)
            except RouteNotFoundError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)

    async def _hold_every_queue(self, consumer: PushConsumer, queues: set[MessageQueue]) -> None:
        deadline = time.monotonic() + ASSIGNMENT_TIMEOUT_S
        while not queues <= consumer.assigned_queues():
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the consumer did not get every queue of "
                    f"{self.args.topic} in {ASSIGNMENT_TIMEOUT_S:.0f} s "
                    f"({len(consumer.assigned_queues())} of {len(queues)})"
                )
            await asyncio.sleep(0.05)

    # -- summary ----------------------------------------------------------------------
    def _summary(self, elapsed_s: float) -> dict[str, Any]:
        args = self.args
        out: dict[str, Any] = {
            "mode": self.mode,
            "topic": args.topic,
            "elapsed_s": round(elapsed_s, 3),
            "interrupted": self.interrupts > 0,
            "config": {
                key: getattr(args, key, None)
                for key in ("concurrency", "size", "batch", "consume_batch", "count", "duration")
            },
        }
        if self.produce is not None:
            side = self.produce
            figures = side.summary()
            out["produce"] = {
                "sent": side.messages + side.failed,
                "acknowledged": side.messages,
                "failed": side.failed,
                **figures,
                "errors": side.errors,
            }
            self._print_total(side, figures)
        if self.consume is not None:
            figures = self.consume.summary()
            out["consume"] = {"consumed": self.consume.messages, **figures}
            self._print_total(self.consume, figures)
        return out

    @staticmethod
    def _print_total(side: _Side, figures: dict[str, Any]) -> None:
        rt = figures["rt_ms"]
        print(
            f"{side.name} total: {side.messages:,} msgs in {figures['elapsed_s']:.1f} s, "
            f"{figures['tps']:,.0f} msgs/s, {figures['mb_per_s']:.2f} MB/s, RT avg "
            f"{rt['avg']:.2f} ms p50 {rt['p50']:.2f} ms p99 {rt['p99']:.2f} ms max "
            f"{rt['max']:.2f} ms" + (f", {side.failed:,} failed" if side.failed else ""),
            flush=True,
        )
