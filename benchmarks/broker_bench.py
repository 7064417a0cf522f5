"""End-to-end figures through gRPC against a broker, beside bare grpc.aio.

    .venv/bin/python benchmarks/broker_bench.py [--messages 200000] [--flush async]

Starts `pocketmq broker` in a subprocess on a free port, and an echo server
(grpc.aio, no protobuf, the same bytes) in another; the client runs here on
uvloop. 1 KiB bodies. Prints SendBatch msgs/s, MB/s and the broker's CPU per
message (user + system, from /proc: the figure that holds on a busy machine) for
batches of 32/128/512, single SendMessage at concurrency 1 and 64 with p50/p99
latency, PullMessage msgs/s, and each against the echo ceiling. Not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import grpc
import uvloop
from benchkit import BODY, free_port, machine, process_cpu_s, records, wait_port

from pocketmq.v1 import broker_pb2, broker_pb2_grpc

ECHO_METHOD = "/bench.Echo/Echo"


async def run_concurrently(n_calls: int, concurrency: int, call) -> list[float]:  # type: ignore[no-untyped-def]
    """Make n_calls calls, `concurrency` at a time; return each call's latency (s)."""
    latencies: list[float] = []
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < n_calls:
            i = next_index
            next_index += 1
            t0 = time.perf_counter()
            await call(i)
            latencies.append(time.perf_counter() - t0)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def bench_send_batch(stub, total: int, batch: int) -> float:  # type: ignore[no-untyped-def]
    blobs = [b"".join(records(batch, start=i * batch)) for i in range(total // batch)]
    t0 = time.perf_counter()
    await run_concurrently(
        len(blobs), 4, lambda i: stub.SendBatch(broker_pb2.SendBatchRequest(records=blobs[i]))
    )
    return len(blobs) * batch / (time.perf_counter() - t0)


async def bench_send_single(stub, total: int, concurrency: int) -> tuple[float, list[float]]:  # type: ignore[no-untyped-def]
    recs = records(total, topic="single")
    t0 = time.perf_counter()
    lat = await run_concurrently(
        total,
        concurrency,
        lambda i: stub.SendMessage(broker_pb2.SendMessageRequest(record=recs[i])),
    )
    return total / (time.perf_counter() - t0), lat


async def bench_pull(stub, queues: int = 8) -> float:  # type: ignore[no-untyped-def]
    got = 0

    async def drain(queue_id: int) -> None:
        nonlocal got
        offset = 0
        while True:
            reply = await stub.PullMessage(
                broker_pb2.PullMessageRequest(
                    consumer_group="bench",
                    topic="bench",
                    queue_id=queue_id,
                    queue_offset=offset,
                    max_msg_nums=256,
                    suspend_timeout_ms=0,
                )
            )
            if reply.status != broker_pb2.FOUND:
                return
            got += reply.message_count
            offset = reply.next_begin_offset

    t0 = time.perf_counter()
    await asyncio.gather(*(drain(q) for q in range(queues)))
    return got / (time.perf_counter() - t0)


async def echo_ceiling(port: int, total: int) -> dict[str, float]:
    out: dict[str, float] = {}
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        echo = channel.unary_unary(ECHO_METHOD)
        for batch in (32, 128, 512):
            payload = b"".join(records(batch))
            t0 = time.perf_counter()
            calls = total // batch
            await run_concurrently(calls, 4, lambda i, p=payload: echo(p))
            out[f"batch{batch}"] = calls * batch / (time.perf_counter() - t0)
        single = records(1)[0]
        for concurrency, n in ((1, 3000), (64, 20000)):
            t0 = time.perf_counter()
            lat = await run_concurrently(n, concurrency, lambda i: echo(single))
            out[f"single{concurrency}"] = n / (time.perf_counter() - t0)
            out[f"single{concurrency}_p50"] = pct(lat, 0.5)
            out[f"single{concurrency}_p99"] = pct(lat, 0.99)
    return out


ECHO_SERVER = """
import asyncio, grpc, uvloop
async def main(port):
    handler = grpc.method_handlers_generic_handler("bench.Echo", {
        "Echo": grpc.unary_unary_rpc_method_handler(_echo)})
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()
async def _echo(req, context):
    return req
import sys
uvloop.run(main(int(sys.argv[1])))
"""


async def main_async(
    args: argparse.Namespace, broker_port: int, echo_port: int, broker_pid: int
) -> None:
    async with grpc.aio.insecure_channel(
        f"127.0.0.1:{broker_port}",
        options=[
            ("grpc.max_receive_message_length", 64 << 20),
            ("grpc.max_send_message_length", 64 << 20),
        ],
    ) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        await stub.SendMessage(broker_pb2.SendMessageRequest(record=records(1)[0]))  # warm up
        echo = await echo_ceiling(echo_port, args.messages // 2)
        print(f"{'':32}{'PocketMQ':>14}{'bare grpc.aio':>16}{'ratio':>8}")
        for batch in (32, 128, 512):
            cpu_s = process_cpu_s(broker_pid)
            rate = await bench_send_batch(stub, args.messages, batch)
            cpu_us = (process_cpu_s(broker_pid) - cpu_s) / (args.messages // batch * batch) * 1e6
            ceiling = echo[f"batch{batch}"]
            print(
                f"SendBatch x{batch:<4} 1 KiB msgs/s   {rate:>14,.0f}{ceiling:>16,.0f}"
                f"{rate / ceiling:>8.0%}   ({rate * len(BODY) / 1e6:,.0f} MB/s, "
                f"broker CPU {cpu_us:.1f} us/msg)"
            )
        for concurrency, n in ((1, 3000), (64, 20000)):
            cpu_s = process_cpu_s(broker_pid)
            rate, lat = await bench_send_single(stub, n, concurrency)
            cpu_us = (process_cpu_s(broker_pid) - cpu_s) / n * 1e6
            print(
                f"SendMessage c={concurrency:<3} msgs/s       {rate:>14,.0f}"
                f"{echo[f'single{concurrency}']:>16,.0f}"
                f"{rate / echo[f'single{concurrency}']:>8.0%}   p50 {pct(lat, 0.5):.2f} ms "
                f"p99 {pct(lat, 0.99):.2f} ms (echo p50 "
                f"{echo[f'single{concurrency}_p50']:.2f} p99 "
                f"{echo[f'single{concurrency}_p99']:.2f}; broker CPU {cpu_us:.0f} us/call)"
            )
        rate = await bench_pull(stub)
        print(
            f"PullMessage (8 queues) msgs/s  {rate:>14,.0f}   ({rate * len(BODY) / 1e6:,.0f} MB/s)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--flush", choices=["async", "sync"], default="async")
    parser.add_argument(
        "--max-pull-messages",
        type=int,
        default=256,
        help="the broker's max_pull_messages (RocketMQ's default is 32)",
    )
    args = parser.parse_args()
    data = tempfile.mkdtemp(prefix="pocketmq-broker-bench-")
    broker_port, echo_port = free_port(), free_port()
    print(
        f"machine: {machine()}\nflush: {args.flush} · {args.messages} messages per batch run · "
        f"max_pull_messages {args.max_pull_messages}"
    )
    # A broker on its own (no nameserver needed to measure it): RocketMQ's pull default
    # of 32 messages is raised to --max-pull-messages so one pull can carry a full batch.
    broker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pocketmq",
            "--log-level",
            "WARNING",
            "broker",
            "--data-dir",
            data,
            "--port",
            str(broker_port),
            "--namesrv",
            "",
            "--grpc-v2-port",
            "-1",
            "--flush",
            args.flush,
            "--max-pull-messages",
            str(args.max_pull_messages),
        ]
    )
    echo = subprocess.Popen([sys.executable, "-c", ECHO_SERVER, str(echo_port)])
    try:
        wait_port(broker_port)
        wait_port(echo_port)
        uvloop.run(main_async(args, broker_port, echo_port, broker.pid))
    finally:
        for proc in (broker, echo):
            proc.send_signal(signal.SIGTERM)
        for proc in (broker, echo):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
