"""Client SDK benchmark: producer and push-consumer throughput, end-to-end latency.

Starts ``pocketmq standalone`` (a nameserver and a broker, one process) in a
temporary directory, then, with 1 KiB bodies:

1. ``send`` from 256 concurrent tasks (coalesced into SendBatch calls);
2. ``send_batch`` of 64 messages from 8 concurrent tasks, and of 512 from 2 and from 4;
3. a PushConsumer reading everything from the first offset, 32 messages a pull
   (RocketMQ's default), and again pulling ``--max-pull-messages`` (msgs/s through
   the listener);
4. send-to-listener latency at a paced 5,000 msgs/s (p50/p99 of listener time
   minus the time the producer was called, carried in a property), after one
   second of warm-up at that rate.

Each line also gives the CPU time per message of this (client) process and
of the broker process: on a shared two-core machine msgs/s swing with other
load, CPU per message much less.

Not part of the test run. Prints its figures and the machine it ran on::

    .venv/bin/python benchmarks/sdk_bench.py [--messages 50000] [--seconds 5]
                                             [--max-pull-messages 256]
                                             [--only send,batch,consume,latency]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import time

from benchkit import machine, standalone

from pocketmq.client import ConsumeResult, Message, MessageExt, Producer, PushConsumer

BODY = os.urandom(1024)


BROKER_PID = 0  # set by main(): the standalone server whose CPU time is reported


def cpu_s() -> tuple[float, float]:
    """CPU seconds (user + system) of this process and of the broker process."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    broker = 0.0
    try:
        with open(f"/proc/{BROKER_PID}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        broker = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        pass
    return usage.ru_utime + usage.ru_stime, broker


def cpu_per_msg(before: tuple[float, float], count: int) -> str:
    client, broker = cpu_s()
    n = max(count, 1)
    return (
        f"[CPU/msg: client {(client - before[0]) / n * 1e6:.1f} us, "
        f"broker {(broker - before[1]) / n * 1e6:.1f} us]"
    )


async def wait_for_broker(namesrv: str, deadline_s: float = 30.0) -> None:
    """Until the broker's template route is on the nameserver (it auto-creates topics)."""
    async with Producer(group="bench-probe", namesrv=namesrv) as producer:
        end = time.monotonic() + deadline_s
        while True:
            try:
                await producer.send(Message(topic="bench-warmup", body=b"x"))
                return
            except Exception:
                if time.monotonic() > end:
                    raise
                await asyncio.sleep(0.2)


async def bench_send(namesrv: str, topic: str, total: int, concurrency: int = 256) -> float:
    async with Producer(group="bench-send", namesrv=namesrv) as producer:
        per_task = total // concurrency

        async def worker() -> None:
            for _ in range(per_task):
                await producer.send(Message(topic=topic, body=BODY))

        cpu0 = cpu_s()
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
        calls = sum(c for c, _ in producer.batch_stats().values())
    sent = per_task * concurrency
    print(
        f"  send x{concurrency} tasks: {sent} msgs in {elapsed:.2f} s = "
        f"{sent / elapsed:,.0f} msgs/s ({sent / max(calls, 1):.1f} msgs per SendBatch call) "
        f"{cpu_per_msg(cpu0, sent)}"
    )
    return sent / elapsed


async def bench_send_batch(
    namesrv: str, topic: str, total: int, batch: int = 64, concurrency: int = 8
) -> float:
    async with Producer(group="bench-batch", namesrv=namesrv) as producer:
        msgs = [Message(topic=topic, body=BODY) for _ in range(batch)]
        rounds = total // (batch * concurrency)

        async def worker() -> None:
            for _ in range(rounds):
                await producer.send_batch(msgs)

        cpu0 = cpu_s()
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    sent = rounds * batch * concurrency
    print(
        f"  send_batch({batch}) x{concurrency} tasks: {sent} msgs in {elapsed:.2f} s = "
        f"{sent / elapsed:,.0f} msgs/s {cpu_per_msg(cpu0, sent)}"
    )
    return sent / elapsed


async def bench_consume(namesrv: str, topic: str, expected: int, pull_batch: int = 32) -> float:
    done = asyncio.Event()
    count = 0
    first_at = 0.0

    def handle(messages: list[MessageExt]) -> ConsumeResult:
        nonlocal count, first_at
        if not first_at:
            first_at = time.perf_counter()
        count += len(messages)
        if count >= expected:
            done.set()
        return ConsumeResult.CONSUME_SUCCESS

    consumer = PushConsumer(
        group=f"bench-consume-{pull_batch}",
        namesrv=namesrv,
        consume_from="first",
        consume_batch_max_size=32,
        pull_batch_size=pull_batch,
    )
    consumer.subscribe(topic)
    consumer.listener(handle)
    cpu0 = cpu_s()
    started = time.perf_counter()
    await consumer.start()
    await asyncio.wait_for(done.wait(), 300)
    elapsed = time.perf_counter() - started
    cpu = cpu_per_msg(cpu0, count)
    await consumer.shutdown()
    print(
        f"  PushConsumer (pull {pull_batch}): {count} msgs in {elapsed:.2f} s = "
        f"{count / elapsed:,.0f} msgs/s "
        f"through the listener {cpu}"
    )
    return count / elapsed


async def send_paced(
    producer: Producer, topic: str, rate: int, seconds: float, measured: bool
) -> int:
    """Send *rate* msgs/s for *seconds* in 1 ms ticks; each carries its send time."""
    tick_s = 0.001
    total = int(rate * seconds)
    sent = 0
    started = time.perf_counter()
    pending: set[asyncio.Task[object]] = set()
    mark = "1" if measured else "0"
    while sent < total:
        due = int((time.perf_counter() - started) * rate) + 1
        while sent < min(due, total):
            task = asyncio.ensure_future(
                producer.send(
                    Message(
                        topic=topic, body=BODY, properties={"t0": str(time.time_ns()), "m": mark}
                    )
                )
            )
            pending.add(task)
            task.add_done_callback(pending.discard)
            sent += 1
        await asyncio.sleep(tick_s)
    await asyncio.gather(*pending)
    return total


async def bench_latency(
    namesrv: str, topic: str, rate: int, seconds: float, *, send_stream: bool = True
) -> None:
    """Send-to-listener latency at a steady *rate*: one second of warm-up at that rate
    (the topic's queue files are created, the consumer's pulls settle) is not counted."""
    latencies_ms: list[float] = []
    consumer = PushConsumer(
        group="bench-latency", namesrv=namesrv, consume_from="last", consume_batch_max_size=32
    )
    consumer.subscribe(topic)

    def handle(messages: list[MessageExt]) -> ConsumeResult:
        now = time.time_ns()
        for m in messages:
            if m.properties.get("m") == "1":
                latencies_ms.append((now - int(m.properties["t0"])) / 1e6)
        return ConsumeResult.CONSUME_SUCCESS

    consumer.listener(handle)
    async with Producer(
        group="bench-latency", namesrv=namesrv, send_stream=send_stream
    ) as producer:
        await producer.send(Message(topic=topic, body=b"create"))
        await consumer.start()
        await asyncio.sleep(1.0)  # let the consumer's long polls park
        await send_paced(producer, topic, rate, 1.0, measured=False)
        cpu0 = cpu_s()
        calls0 = (
            sum(c for c, _ in producer.batch_stats().values()),
            sum(c for c, _ in consumer.pull_stats().values()),
        )
        total = await send_paced(producer, topic, rate, seconds, measured=True)
        end = time.monotonic() + 10
        while len(latencies_ms) < total and time.monotonic() < end:
            await asyncio.sleep(0.05)
        sends = sum(c for c, _ in producer.batch_stats().values()) - calls0[0]
        pulls = sum(c for c, _ in consumer.pull_stats().values()) - calls0[1]
    cpu = cpu_per_msg(cpu0, total)
    await consumer.shutdown()
    lat = sorted(latencies_ms)
    p50 = statistics.median(lat)
    p99 = lat[int(len(lat) * 0.99) - 1]
    print(
        f"  latency at {rate} msgs/s for {seconds:.0f} s (after 1 s of warm-up): {len(lat)} "
        f"msgs, p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {lat[-1]:.2f} ms; "
        f"{sends / seconds:,.0f} SendBatch and {pulls / seconds:,.0f} PullBatch calls/s {cpu}"
    )


PARTS = ("send", "batch", "consume", "latency")
SETTLE_S = 3.0


async def run(namesrv: str, messages: int, seconds: float, max_pull: int, parts: set[str]) -> None:
    await wait_for_broker(namesrv)
    if "send" in parts:
        await bench_send(namesrv, "bench-send", messages)
    shapes = ((64, 8), (512, 2), (512, 4))  # (batch, concurrent tasks)
    if "batch" in parts or "consume" in parts:
        for batch, tasks in shapes:
            await bench_send_batch(
                namesrv, "bench-batch", messages * 2, batch=batch, concurrency=tasks
            )
    if "consume" in parts:
        expected = sum(messages * 2 // (batch * tasks) * batch * tasks for batch, tasks in shapes)
        await bench_consume(namesrv, "bench-batch", expected)
        if max_pull != 32:
            await bench_consume(namesrv, "bench-batch", expected, pull_batch=max_pull)
    if "latency" in parts:
        if parts != {"latency"}:
            await asyncio.sleep(SETTLE_S)  # the broker flushes what the phases above wrote
        await bench_latency(namesrv, "bench-latency", 5000, seconds)


def main() -> int:
    global BROKER_PID
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument(
        "--max-pull-messages",
        type=int,
        default=32,
        help="the broker's max_pull_messages; above 32 (RocketMQ's default), "
        "the consumer is measured again pulling that many at a time",
    )
    parser.add_argument(
        "--only",
        default=",".join(PARTS),
        help=f"comma-separated parts to run, of {', '.join(PARTS)} "
        "(consume sends its messages with the batch part first)",
    )
    args = parser.parse_args()
    parts = {p.strip() for p in args.only.split(",") if p.strip()}
    if not parts or parts - set(PARTS):
        parser.error(f"--only takes parts of {', '.join(PARTS)}")
    print(f"machine: {machine()}")
    with standalone(
        "pocketmq-bench-", broker_toml=f"max_pull_messages = {args.max_pull_messages}\n"
    ) as server:
        BROKER_PID = server.pid
        import uvloop

        uvloop.run(run(server.namesrv, args.messages, args.seconds, args.max_pull_messages, parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
