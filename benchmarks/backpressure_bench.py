"""Back-pressure under overload: the broker's memory stays flat while clients push past its limits.

    .venv/bin/python benchmarks/backpressure_bench.py [--seconds 20] [--connections 8]
        [--concurrency 64] [--per-connection 16] [--total 64] [--flush sync] [--unlimited]

Starts `pocketmq broker` in a subprocess with small flow-control limits
(``max_in_flight_requests_per_connection``, ``max_in_flight_requests``); this
process opens ``--connections`` channels and keeps ``--concurrency`` SendMessage
calls going on each (8 x 64 = 512 at once by default, 8 times the broker's
limit), re-sending at once whatever the broker refuses: no back-off, the worst
client. Every second it prints the broker's resident memory, the sends stored
and refused in that second, and the broker's own in-flight count. ``--unlimited``
lifts the limits to compare. Not a test; nothing is asserted.

Beyond about a thousand calls the server has not yet taken up, gRPC core sheds
load on its own and cancels calls (``grpc.server.max_pending_requests``, 1000):
those are counted as "cancelled" (``--concurrency 256`` shows them).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import grpc
import uvloop
from benchkit import machine

from pocketmq.common.message import encode_record, pack_host
from pocketmq.v1 import broker_pb2, broker_pb2_grpc

MiB = 1024 * 1024
SERVING = re.compile(rb"serving on (\S+),")


def rss_mib(pid: int) -> tuple[float, float]:
    """(heap and other anonymous memory, mapped files) resident, in MiB.

    The commit log is memory-mapped, so the file part grows with what is stored;
    the anonymous part is where an unbounded queue of requests would show.
    """
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("RssAnon", "RssFile", "RssShmem"):
                fields[key] = int(value.split()[0]) / 1024
    return fields.get("RssAnon", float("nan")), fields.get("RssFile", 0.0) + fields.get(
        "RssShmem", 0.0
    )


def start_broker(data_dir: str, args: argparse.Namespace) -> tuple[subprocess.Popen[bytes], str]:
    per_connection, total = (
        (1_000_000, 1_000_000) if args.unlimited else (args.per_connection, args.total)
    )
    log_path = os.path.join(data_dir, "broker.log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pocketmq",
                "broker",
                "--port",
                "0",
                "--data-dir",
                os.path.join(data_dir, "store"),
                "--flush",
                args.flush,
                "--commitlog-file-size-bytes",
                str(64 * MiB),
                "--index-slots",
                "100000",
                "--index-entries",
                "400000",
                "--max-in-flight-requests-per-connection",
                str(per_connection),
                "--max-in-flight-requests",
                str(total),
            ],
            stdout=log,
            stderr=log,
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with open(log_path, "rb") as log:
            match = SERVING.search(log.read())
        if match:
            return proc, match.group(1).decode()
        time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"the broker did not start; see {log_path}")


class Counts:
    def __init__(self) -> None:
        self.ok = 0
        self.busy = 0
        self.cancelled = 0
        self.other = 0


async def sender(
    stub: broker_pb2_grpc.BrokerStub, record: bytes, counts: Counts, stop: asyncio.Event
) -> None:
    request = broker_pb2.SendMessageRequest(record=record)
    while not stop.is_set():
        try:
            await stub.SendMessage(request, timeout=30)
            counts.ok += 1
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED:
                counts.busy += 1
            elif exc.code() is grpc.StatusCode.CANCELLED:
                counts.cancelled += 1
            else:
                counts.other += 1


async def runtime_info(stub: broker_pb2_grpc.BrokerStub) -> dict[str, str]:
    try:
        reply = await stub.GetBrokerRuntimeInfo(broker_pb2.GetBrokerRuntimeInfoRequest(), timeout=5)
        return dict(reply.table)
    except grpc.aio.AioRpcError:  # the admin call itself may be refused as busy
        return {"requests_in_flight": "busy"}


async def run(args: argparse.Namespace, pid: int, addr: str) -> None:
    record = encode_record(
        topic="bench", body=os.urandom(args.body_bytes), born_host=pack_host(("127.0.0.1", 1))
    )
    channels = [grpc.aio.insecure_channel(addr) for _ in range(args.connections)]
    admin = grpc.aio.insecure_channel(addr)
    counts, stop = Counts(), asyncio.Event()
    tasks = [
        asyncio.ensure_future(sender(broker_pb2_grpc.BrokerStub(c), record, counts, stop))
        for c in channels
        for _ in range(args.concurrency)
    ]
    admin_stub = broker_pb2_grpc.BrokerStub(admin)
    print(
        f"{'s':>3} {'RSS anon MiB':>13} {'files MiB':>10} {'stored/s':>9} {'busy/s':>9} "
        f"{'cancelled/s':>12} {'in flight':>10} {'refused total':>14}"
    )
    rss: list[tuple[float, float]] = []
    last = (0, 0, 0)
    start = time.monotonic()
    for second in range(1, args.seconds + 1):
        await asyncio.sleep(max(start + second - time.monotonic(), 0))
        info = await runtime_info(admin_stub)
        rss.append(rss_mib(pid))
        now = (counts.ok, counts.busy, counts.cancelled)
        ok, busy, cancelled = (a - b for a, b in zip(now, last, strict=True))
        last = now
        print(
            f"{second:>3} {rss[-1][0]:>13.1f} {rss[-1][1]:>10.1f} {ok:>9} {busy:>9} "
            f"{cancelled:>12} "
            f"{info.get('requests_in_flight', '?'):>10} "
            f"{info.get('requests_refused_busy_total', '?'):>14}",
            flush=True,
        )
    stop.set()
    await asyncio.gather(*tasks)
    for channel in [*channels, admin]:
        await channel.close()
    anon = [a for a, _files in rss]
    half = len(anon) // 2
    print(
        f"\n{counts.ok} stored, {counts.busy} refused busy, {counts.cancelled} cancelled, "
        f"{counts.other} other errors in {args.seconds} s; broker anonymous RSS first "
        f"{anon[0]:.1f} MiB, max {max(anon):.1f} MiB, last {anon[-1]:.1f} MiB; growth over "
        f"the second half {anon[-1] - anon[half]:+.1f} MiB (mapped files: "
        f"{rss[-1][1]:.1f} MiB, the data stored)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument(
        "--concurrency", type=int, default=64, help="calls kept going per connection"
    )
    parser.add_argument(
        "--per-connection",
        type=int,
        default=16,
        help="max_in_flight_requests_per_connection of the broker",
    )
    parser.add_argument("--total", type=int, default=64, help="max_in_flight_requests")
    parser.add_argument("--flush", choices=("async", "sync"), default="sync")
    parser.add_argument("--body-bytes", type=int, default=256)
    parser.add_argument("--unlimited", action="store_true", help="lift both limits (to compare)")
    args = parser.parse_args()
    print(machine())
    print(
        f"{args.connections} connections x {args.concurrency} calls at once against "
        + (
            "no limits"
            if args.unlimited
            else f"{args.per_connection} per connection / {args.total} in all"
        )
        + f", {args.flush} flush, {args.body_bytes} B bodies\n"
    )
    data_dir = tempfile.mkdtemp(prefix="pocketmq-bp-")
    proc, addr = start_broker(data_dir, args)
    try:
        uvloop.run(run(args, proc.pid, addr))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
