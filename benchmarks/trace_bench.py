"""Message trace (issue 20): what ``enable_trace=True`` costs a producer's send path.

    .venv/bin/python benchmarks/trace_bench.py [--seconds 5] [--rounds 3] [--sends 2000]

Against one ``pocketmq standalone`` (broker-side trace off: the client's cost alone):

1. Throughput: ``--tasks`` tasks (64) calling ``send`` in a loop, by a traced and an
   untraced producer, alternating for ``--rounds`` rounds of ``--seconds`` each; the
   best round of each is kept (noise only slows). Beside it the CPU each message cost
   the client process (its trace dispatcher included) and the server process, the
   median over the rounds: on a shared machine the steadier figure.
2. Latency: one task sending ``--sends`` messages one after another, traced and
   untraced alternating in blocks of 100; p50 / p99 / max of each.

The traced producer's dispatcher figures (records written, dropped because its
queue was full, failed) are printed after each part.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

from benchkit import machine, standalone

from pocketmq.client import AdminClient, ClientError, Message, Producer, TopicConfig
from pocketmq.common.trace import DEFAULT_TRACE_TOPIC

TOPIC = "TraceBench"
BODY = b"x" * 256
BLOCK = 100


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process *pid* so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run_for(
    producer: Producer, seconds: float, tasks: int, server_pid: int = 0
) -> tuple[float, float, float]:
    """(messages per second, client and server CPU µs per message) of *tasks* tasks
    sending in a loop for *seconds*."""
    stop_at = time.monotonic() + seconds
    counts = [0] * tasks
    failures = 0

    async def task(i: int) -> None:
        nonlocal failures
        while time.monotonic() < stop_at:
            try:
                await producer.send(Message(topic=TOPIC, body=BODY, keys=[f"k{i}"]))
                counts[i] += 1
            except ClientError:
                failures += 1

    started, cpu = time.monotonic(), time.process_time()
    server = proc_cpu_s(server_pid) if server_pid else 0.0
    await asyncio.gather(*(task(i) for i in range(tasks)))
    if producer.trace is not None:
        await producer.trace.run_once()  # its cost belongs to these messages
    cpu = time.process_time() - cpu
    server = (proc_cpu_s(server_pid) - server) if server_pid else 0.0
    if failures:
        print(f"  {producer.group}: {failures} sends failed")
    sent = max(sum(counts), 1)
    return sent / (time.monotonic() - started), cpu / sent * 1e6, server / sent * 1e6


def figures(producer: Producer) -> str:
    t = producer.trace
    if t is None:
        return "untraced"
    return (
        f"trace records written {t.written:,}, dropped (queue full) {t.dropped:,}, "
        f"failed {t.failed:,}, queued {t.queued:,}"
    )


async def throughput(
    traced: Producer, plain: Producer, seconds: float, rounds: int, tasks: int, server_pid: int
) -> None:
    print(
        f"\n1. throughput: {tasks} tasks, {len(BODY)} B bodies, best of {rounds} rounds of "
        f"{seconds:g} s, traced and untraced alternating"
    )
    await run_for(traced, 1.0, tasks)  # warm-up: routes, channels, the trace topic
    await run_for(plain, 1.0, tasks)
    best = {True: 0.0, False: 0.0}
    cpu: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for _ in range(rounds):
        for flag, producer in ((True, traced), (False, plain)):
            rate, client_us, server_us = await run_for(producer, seconds, tasks, server_pid)
            best[flag] = max(best[flag], rate)
            cpu[flag].append((client_us, server_us))
    overhead = (best[False] - best[True]) / best[False] * 100
    print(f"{'':<10}{'msg/s':>10}{'client µs/msg':>15}{'server µs/msg':>15}")
    for flag, name in ((True, "traced"), (False, "untraced")):
        client_us = statistics.median(c for c, _ in cpu[flag])
        server_us = statistics.median(s for _, s in cpu[flag])
        print(f"{name:<10}{best[flag]:>10,.0f}{client_us:>15.1f}{server_us:>15.1f}")
    print(f"throughput overhead {overhead:.1f}%")
    print(f"  {figures(traced)}")


async def latency(traced: Producer, plain: Producer, sends: int) -> None:
    print(f"\n2. latency: one task, {sends} sends each, blocks of {BLOCK} alternating")
    samples: dict[bool, list[float]] = {True: [], False: []}
    for start in range(0, sends, BLOCK):
        for flag, producer in ((True, traced), (False, plain)):
            for _ in range(min(BLOCK, sends - start)):
                began = time.perf_counter()
                await producer.send(Message(topic=TOPIC, body=BODY, keys=["lat"]))
                samples[flag].append((time.perf_counter() - began) * 1000)
    print(f"{'':<10}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}")
    for flag, name in ((True, "traced"), (False, "untraced")):
        values = sorted(samples[flag])
        p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
        print(f"{name:<10}{statistics.median(values):>10.3f}{p99:>10.3f}{values[-1]:>10.3f}")
    print(f"  {figures(traced)}")


async def bench(namesrv: str, broker: str, server_pid: int, args: argparse.Namespace) -> None:
    async with AdminClient(namesrv=namesrv) as admin:
        for topic, queues in ((TOPIC, 8), (DEFAULT_TRACE_TOPIC, 1)):
            await admin.create_topic(
                broker, TopicConfig(topic=topic, read_queue_nums=queues, write_queue_nums=queues)
            )
    async with (
        Producer(
            group="bench-traced", namesrv=namesrv, enable_trace=True, send_timeout_ms=10_000
        ) as traced,
        Producer(group="bench-plain", namesrv=namesrv, send_timeout_ms=10_000) as plain,
    ):
        await throughput(traced, plain, args.seconds, args.rounds, args.tasks, server_pid)
        await latency(traced, plain, args.sends)
    print(f"\nafter shutdown (flushed): {figures(traced)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--sends", type=int, default=2000)
    args = parser.parse_args()
    print(f"trace_bench on {machine()}")
    with standalone("pmq-trace-bench-") as server:
        asyncio.run(bench(server.namesrv, f"127.0.0.1:{server.broker_port}", server.pid, args))


if __name__ == "__main__":
    main()
