"""The client SDK against Redis Streams, side by side in one run (issue 17's shapes).

Starts ``pocketmq standalone`` (async flush) and a ``redis-server`` (AOF on,
``appendfsync everysec``), each in a temporary directory on a loopback port,
then measures, with 1 KiB bodies and Python asyncio clients on uvloop:

============  ==========================================  ================================
shape         PocketMQ                                    Redis Streams (redis-py + hiredis)
============  ==========================================  ================================
produce       one task awaiting ``send_batch`` of 256     one task sending pipelines of
              again and again                             100 XADD
consume       ``PullConsumer`` subscribed from the first  XREADGROUP COUNT 1000, then one
              offset, ``poll()`` until all are read       XACK per reply
send          ``send`` of one message from 256 tasks      one XADD per call from 256 tasks
                                                          over 64 connections
============  ==========================================  ================================

and prints each figure with the ratio PocketMQ / Redis. Then, PocketMQ only:
single ``send`` latency at concurrency 1 (p50/p99), send-to-listener latency at
5,000 msgs/s (``sdk_bench.bench_latency``), and the resident memory of a
consumer process started on a backlog far larger than its pull buffers
(``pull_threshold_for_queue`` messages per queue), which it must not exceed.

Every shape runs ``--runs`` times (fresh topic and stream each time) and the
summary gives the range. Redis must be installed (Debian: ``apt-get install
redis-server``) and the ``redis`` package with ``hiredis`` (``pip install -e
'.[bench]'``). Not part of the test run::

    .venv/bin/python benchmarks/redis_compare.py [--messages 100000] [--runs 3]
                                                 [--only produce,consume,send,latency,memory]
                                                 [--send-stream on|off|both]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import sdk_bench
from benchkit import free_port, machine, standalone, wait_port

from pocketmq.client import Message, Producer, PullConsumer

BODY = os.urandom(1024)
BATCH = 256
REDIS_PIPELINE = 100
REDIS_READ_COUNT = 1000
SEND_TASKS = 256
REDIS_CONNECTIONS = 64
PULL_BATCH = 256  # PullConsumer messages per pull (Redis reads 1000 a call)
PULL_THRESHOLD = 1000  # the consumer's per-queue buffer limit, messages (the default)
PARTS = ("produce", "consume", "send", "latency", "memory")


@contextlib.contextmanager
def redis_server() -> Iterator[tuple[int, int]]:
    """A redis-server with AOF everysec in a temporary directory: (port, pid)."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("redis-server is not installed (Debian: apt-get install redis-server)")
    data_dir = tempfile.mkdtemp(prefix="pocketmq-redis-")
    port = free_port()
    proc = subprocess.Popen(
        [
            exe,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            data_dir,
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_port(port)
        yield port, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(data_dir, ignore_errors=True)


def redis_version() -> str:
    out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True)
    return out.stdout.split(" ")[2] if out.returncode == 0 else "?"


def proc_cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def self_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def self_sys_s() -> float:
    return os.times().system


def self_minflt() -> int:
    """Minor page faults of this process so far (a fresh buffer per call shows here)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class Meter:
    """msgs/s and CPU µs per message of this process and of one server process."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid
        self.started = time.perf_counter()
        self.cpu0 = (self_cpu_s(), proc_cpu_s(server_pid), self_sys_s(), self_minflt())

    def done(self, count: int) -> tuple[float, str]:
        elapsed = time.perf_counter() - self.started
        client = (self_cpu_s() - self.cpu0[0]) / count * 1e6
        client_sys = (self_sys_s() - self.cpu0[2]) / count * 1e6
        faults = (self_minflt() - self.cpu0[3]) / count
        server = (proc_cpu_s(self.server_pid) - self.cpu0[1]) / count * 1e6
        return count / elapsed, (
            f"{count} msgs in {elapsed:.2f} s [CPU/msg: client "
            f"{client:.2f} us (system {client_sys:.2f}, {faults:.2f} page faults), "
            f"server {server:.1f} us]"
        )


# -- PocketMQ ---------------------------------------------------------------------------
def _mode(send_stream: bool) -> str:
    return "SendStream" if send_stream else "unary SendBatch"


async def pmq_produce(
    namesrv: str, topic: str, total: int, broker_pid: int, send_stream: bool = True
) -> float:
    async with Producer(group="cmp-produce", namesrv=namesrv, send_stream=send_stream) as producer:
        msgs = [Message(topic=topic, body=BODY) for _ in range(BATCH)]
        await producer.send_batch(msgs)  # route and queue files, not timed
        meter = Meter(broker_pid)
        for _ in range(total // BATCH):
            await producer.send_batch(msgs)
        rate, detail = meter.done(total // BATCH * BATCH)
    print(
        f"    PocketMQ send_batch({BATCH}) x1 task ({_mode(send_stream)}): {rate:,.0f} msgs/s, "
        f"{detail}"
    )
    return rate


async def pmq_consume(namesrv: str, topic: str, expected: int, broker_pid: int) -> float:
    consumer = PullConsumer(
        group=f"cmp-consume-{topic}",
        namesrv=namesrv,
        consume_from="first",
        pull_batch_size=PULL_BATCH,
        max_poll_messages=PULL_BATCH,
    )
    consumer.subscribe(topic)
    meter = Meter(broker_pid)
    await consumer.start()
    count = 0
    while count < expected:
        got = await consumer.poll(timeout_s=10)
        if not got:
            raise RuntimeError(f"poll() returned nothing after {count} of {expected}")
        count += len(got)
    rate, detail = meter.done(count)
    await consumer.shutdown()
    print(f"    PocketMQ PullConsumer poll() (pull {PULL_BATCH}): {rate:,.0f} msgs/s, {detail}")
    return rate


async def pmq_send(
    namesrv: str, topic: str, total: int, broker_pid: int, send_stream: bool = True
) -> float:
    async with Producer(group="cmp-send", namesrv=namesrv, send_stream=send_stream) as producer:
        await producer.send(Message(topic=topic, body=BODY))
        per_task = total // SEND_TASKS

        async def worker() -> None:
            for _ in range(per_task):
                await producer.send(Message(topic=topic, body=BODY))

        meter = Meter(broker_pid)
        await asyncio.gather(*(worker() for _ in range(SEND_TASKS)))
        rate, detail = meter.done(per_task * SEND_TASKS)
    print(
        f"    PocketMQ send x{SEND_TASKS} tasks ({_mode(send_stream)}): {rate:,.0f} msgs/s, "
        f"{detail}"
    )
    return rate


async def pmq_single_send(
    namesrv: str, topic: str, count: int = 5000, send_stream: bool = True
) -> tuple[float, float]:
    async with Producer(group="cmp-single", namesrv=namesrv, send_stream=send_stream) as producer:
        for _ in range(200):
            await producer.send(Message(topic=topic, body=BODY))
        lat = []
        for _ in range(count):
            t0 = time.perf_counter()
            await producer.send(Message(topic=topic, body=BODY))
            lat.append((time.perf_counter() - t0) * 1000)
    lat.sort()
    p50, p99 = statistics.median(lat), lat[int(len(lat) * 0.99) - 1]
    print(
        f"    PocketMQ single send at concurrency 1 ({_mode(send_stream)}): {count} sends, "
        f"p50 {p50:.2f} ms, "
        f"p99 {p99:.2f} ms, max {lat[-1]:.2f} ms"
    )
    return p50, p99


# -- Redis ------------------------------------------------------------------------------
async def redis_produce(port: int, stream: str, total: int, redis_pid: int) -> float:
    import redis.asyncio as aioredis

    client = aioredis.Redis(port=port)
    try:
        meter = Meter(redis_pid)
        for _ in range(total // REDIS_PIPELINE):
            pipe = client.pipeline(transaction=False)
            for _ in range(REDIS_PIPELINE):
                pipe.xadd(stream, {"body": BODY})
            await pipe.execute()
        rate, detail = meter.done(total // REDIS_PIPELINE * REDIS_PIPELINE)
    finally:
        await client.aclose()
    print(f"    Redis pipelines of {REDIS_PIPELINE} XADD x1 task: {rate:,.0f} msgs/s, {detail}")
    return rate


async def redis_consume(port: int, stream: str, expected: int, redis_pid: int) -> float:
    import redis.asyncio as aioredis

    client = aioredis.Redis(port=port)
    try:
        await client.xgroup_create(stream, "cmp", id="0")
        meter = Meter(redis_pid)
        count = 0
        while count < expected:
            reply = await client.xreadgroup(
                "cmp", "c1", {stream: ">"}, count=REDIS_READ_COUNT, block=10_000
            )
            entries = reply[0][1] if reply else []
            if not entries:
                raise RuntimeError(f"XREADGROUP returned nothing after {count} of {expected}")
            await client.xack(stream, "cmp", *[entry_id for entry_id, _ in entries])
            count += len(entries)
        rate, detail = meter.done(count)
    finally:
        await client.aclose()
    print(f"    Redis XREADGROUP COUNT {REDIS_READ_COUNT} + XACK: {rate:,.0f} msgs/s, {detail}")
    return rate


async def redis_send(port: int, stream: str, total: int, redis_pid: int) -> float:
    import redis.asyncio as aioredis

    pool = aioredis.BlockingConnectionPool(port=port, max_connections=REDIS_CONNECTIONS)
    client = aioredis.Redis(connection_pool=pool)
    try:
        await asyncio.gather(*(client.ping() for _ in range(REDIS_CONNECTIONS)))
        per_task = total // SEND_TASKS

        async def worker() -> None:
            for _ in range(per_task):
                await client.xadd(stream, {"body": BODY})

        meter = Meter(redis_pid)
        await asyncio.gather(*(worker() for _ in range(SEND_TASKS)))
        rate, detail = meter.done(per_task * SEND_TASKS)
    finally:
        await client.aclose()
        await pool.aclose()
    print(
        f"    Redis XADD x{SEND_TASKS} tasks over {REDIS_CONNECTIONS} connections: "
        f"{rate:,.0f} msgs/s, {detail}"
    )
    return rate


# -- memory -----------------------------------------------------------------------------
def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def memory_probe(namesrv: str, topic: str, seconds: float) -> None:
    """Child process: a consumer on a big backlog that never polls; print its RSS."""
    base = rss_mib()
    consumer = PullConsumer(
        group=f"cmp-memory-{topic}",
        namesrv=namesrv,
        consume_from="first",
        pull_batch_size=PULL_BATCH,
        pull_threshold_for_queue=PULL_THRESHOLD,
    )
    consumer.subscribe(topic)
    await consumer.start()
    peak = rss_mib()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        await asyncio.sleep(0.1)
        peak = max(peak, rss_mib())
    buffered = sum(len(pq) for pq in consumer._pqs.values())
    queues = len(consumer._pqs)
    first = await consumer.poll(timeout_s=5)
    await consumer.shutdown()
    print(
        f"    consumer RSS: {base:.0f} MiB before start, peak {peak:.0f} MiB over "
        f"{seconds:.0f} s; {buffered} messages buffered in {queues} queues (limit "
        f"{PULL_THRESHOLD} a queue + one pull ahead), {len(first)} polled at the end"
    )


async def pmq_memory(namesrv: str, topic: str, backlog: int) -> None:
    async with Producer(group="cmp-backlog", namesrv=namesrv) as producer:
        msgs = [Message(topic=topic, body=BODY) for _ in range(BATCH)]
        for _ in range(backlog // BATCH):
            await producer.send_batch(msgs)
    print(
        f"    backlog: {backlog // BATCH * BATCH} messages of 1 KiB "
        f"({backlog // BATCH * BATCH * 1024 / 2**20:.0f} MiB of bodies)"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--memory-probe", namesrv, topic
    )
    await proc.wait()


# -- driver -----------------------------------------------------------------------------
def _key(shape: str, send_stream: bool) -> str:
    return shape if send_stream else f"{shape} (unary)"


def summary(name: str, ours: list[float], theirs: list[float], target: float) -> None:
    ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
    print(
        f"  {name:15s} PocketMQ {min(ours):,.0f}-{max(ours):,.0f} msgs/s, Redis "
        f"{min(theirs):,.0f}-{max(theirs):,.0f} msgs/s, ratio {min(ratios):.2f}-"
        f"{max(ratios):.2f}x (target >= {target}x)"
    )


async def run(
    namesrv: str,
    broker_pid: int,
    redis_port: int,
    redis_pid: int,
    messages: int,
    runs: int,
    parts: set[str],
    modes: tuple[bool, ...] = (True,),
) -> None:
    await sdk_bench.wait_for_broker(namesrv)
    figures: dict[str, tuple[list[float], list[float]]] = {
        p: ([], []) for p in ("consume", *(_key(s, m) for s in ("produce", "send") for m in modes))
    }
    for run_no in range(1, runs + 1):
        print(f"  run {run_no} of {runs}")
        topic = f"cmp-batch-{run_no}"
        stream = f"cmp-stream-{run_no}"
        if "produce" in parts or "consume" in parts:
            for i, mode in enumerate(modes):  # consume reads the first mode's topic
                figures[_key("produce", mode)][0].append(
                    await pmq_produce(
                        namesrv, topic if i == 0 else f"{topic}-{i}", messages, broker_pid, mode
                    )
                )
            if redis_port:
                theirs = await redis_produce(redis_port, stream, messages, redis_pid)
                for mode in modes:
                    figures[_key("produce", mode)][1].append(theirs)
        if "consume" in parts:
            expected = messages // BATCH * BATCH
            figures["consume"][0].append(await pmq_consume(namesrv, topic, expected, broker_pid))
            if redis_port:
                figures["consume"][1].append(
                    await redis_consume(
                        redis_port, stream, messages // REDIS_PIPELINE * REDIS_PIPELINE, redis_pid
                    )
                )
        if "send" in parts:
            for i, mode in enumerate(modes):
                figures[_key("send", mode)][0].append(
                    await pmq_send(
                        namesrv, f"cmp-send-{run_no}-{i}", messages // 2, broker_pid, mode
                    )
                )
            if redis_port:
                theirs = await redis_send(
                    redis_port, f"cmp-send-{run_no}", messages // 2, redis_pid
                )
                for mode in modes:
                    figures[_key("send", mode)][1].append(theirs)
    print("summary (PocketMQ / Redis Streams, same run):")
    for name, target in (
        *((_key("produce", m), 3) for m in modes),
        ("consume", 1.5),
        *((_key("send", m), 3) for m in modes),
    ):
        ours, theirs = figures[name]
        if ours and theirs:
            summary(name, ours, theirs, target)
    if "latency" in parts:
        print("  latency (targets: single send p99 <= 2 ms; send-to-listener p99 <= 10 ms):")
        for mode in modes:
            await pmq_single_send(namesrv, f"cmp-single-{int(mode)}", send_stream=mode)
        await asyncio.sleep(3.0)  # let the broker flush what the phases above wrote
        for mode in modes:
            print(f"    send-to-listener ({_mode(mode)}):")
            await sdk_bench.bench_latency(
                namesrv, f"cmp-latency-{int(mode)}", 5000, 5.0, send_stream=mode
            )
    if "memory" in parts:
        print("  memory (a consumer's RSS is bounded by its pull buffers, whatever the backlog):")
        await pmq_memory(namesrv, "cmp-memory", max(messages * 4, 200_000))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--only", default=",".join(PARTS), help=f"comma-separated parts of {', '.join(PARTS)}"
    )
    parser.add_argument(
        "--no-redis", action="store_true", help="PocketMQ only (to profile the client with py-spy)"
    )
    parser.add_argument(
        "--send-stream",
        choices=("on", "off", "both"),
        default="on",
        help="produce and send over SendStream (on, the SDK's default), unary SendBatch calls "
        "(off), or both, alternately in each run",
    )
    parser.add_argument(
        "--memory-probe", nargs=2, metavar=("NAMESRV", "TOPIC"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    import uvloop

    if args.memory_probe:
        uvloop.run(memory_probe(*args.memory_probe, seconds=5.0))
        return 0
    parts = {p.strip() for p in args.only.split(",") if p.strip()}
    if not parts or parts - set(PARTS):
        parser.error(f"--only takes parts of {', '.join(PARTS)}")
    from pocketmq.client import message_codec

    print(
        f"machine: {machine()}; Redis {redis_version()}; client codec: "
        f"{getattr(message_codec, 'IMPLEMENTATION', 'python')}"
    )
    with (
        standalone("pocketmq-cmp-", broker_toml=f"max_pull_messages = {PULL_BATCH}\n") as server,
        contextlib.nullcontext((0, 0)) if args.no_redis else redis_server() as (
            redis_port,
            redis_pid,
        ),
    ):
        sdk_bench.BROKER_PID = server.pid
        uvloop.run(
            run(
                server.namesrv,
                server.pid,
                redis_port,
                redis_pid,
                args.messages,
                args.runs,
                parts,
                {"on": (True,), "off": (False,), "both": (True, False)}[args.send_stream],
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
