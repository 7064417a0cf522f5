"""Replication figures beside a single broker, measured in the same run.

    .venv/bin/python benchmarks/replication_bench.py [--messages 1000000] [--catchup-mib 512]
                                                     [--runs 1] [--throughput-only]
                                                     [--broker-args=--no-write-without-mmap]
                                                     [--broker-env="MALLOC_ARENA_MAX=2 ..."]

Brokers run as ``pocketmq broker`` subprocesses on free ports (no nameserver:
the replica dials ``--ha-master-address``); the client runs here on uvloop.
1 KiB bodies. Prints:

* SendBatch x512 msgs/s, 4 concurrent calls: one broker, ASYNC_MASTER + 1
  replica, SYNC_MASTER + 1 replica, and each as a share of the single broker;
  beside each, the CPU time and minor page faults per message of every
  process (master, replica, this client; user + system, from /proc; batches
  are encoded before the counters start; a replica's counters are read once
  it has caught up): on a shared machine throughput swings with the
  neighbours' load, the CPU each message costs much less. So each share
  comes twice: by msgs/s, and *by CPU*, the single broker's CPU per message
  (broker + client) over the replicated run's (master + replica + client):
  what the share would be with every process CPU-bound on the same cores,
  steady where the msgs/s share swings with the neighbours.
  ``--runs N`` repeats the three (each replicated run against the single
  broker of its own round) and prints the median shares. Rounds rotate
  the order of the three, so that none always runs first or last (each run
  reuses the memory the run before it freed), and an untimed single-broker
  run comes first (on a VM the first gigabytes written into memory the
  guest never touched cost more). Each run sends ``--messages`` (1,000,000
  = 1 GiB, 4-7 s): runs of 100,000 last under half a second;
* the control, in each round: the single broker again, beside processes that
  keep as many cores busy copying memory as the ASYNC run's replica used
  (its CPU µs per message x its msgs/s): what any process of the replica's
  size costs a broker on this machine, so the share it leaves is the most a
  replica of that CPU could leave, and the gap down to the ASYNC share is the
  replication's own cost on the master;
* the page-cache control, in each round: the single broker again beside a
  process that only writes the ASYNC replica's bytes a second (its msgs/s x the
  stored record size) with ``pwrite`` into new 256 MiB files it keeps, as a
  replica's log grows: the least any replica costs, since it must at least
  store its copy. On this VM a page-cache page new to the guest costs 2-3 µs a
  KiB to write, against 0.2 for a page it reuses (the hypervisor backs it
  then), and the broker beside that writer slows too, so this control lies far
  below the burner's;
* SendMessage one at a time (c=1) on SYNC_MASTER + replica: p50 / p99;
* catch-up: a replica started empty against a master holding --catchup-mib
  MiB, MB/s from its first copied byte to the master's end (producers idle);
* failover: kill -9 of a SYNC_MASTER, time until its replica answers a pull
  with messages, and until the replica, promoted over PromoteToMaster, acks a
  send. (The SDK does not fall back to replicas for reads yet in this branch,
  so this is the broker's side of the read fallback, not a consumer's.)

``--broker-args`` adds flags to every broker and ``--broker-env`` variables
to its environment (to compare settings: run with and without, interleaved);
``--throughput-only`` stops after the SendBatch rounds.

Not a test; the machine it ran on is printed first.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

import grpc
import uvloop
from benchkit import BODY, free_port, machine, records, wait_port

from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc, common_pb2

MiB = 1 << 20
BATCH = 512
OPTIONS = [
    ("grpc.max_receive_message_length", 64 * MiB),
    ("grpc.max_send_message_length", 64 * MiB),
]


_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def proc_stat(pid: int) -> tuple[float, int]:
    """User + system CPU seconds and minor page faults of process *pid* so far (/proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * _TICK_S, int(fields[7])


def own_stat() -> tuple[float, int]:
    times = os.times()
    return times.user + times.system, resource.getrusage(resource.RUSAGE_SELF).ru_minflt


async def measured_send(
    group: Brokers, port: int, n: int, replica: int | None = None
) -> tuple[float, float, str, list[float]]:
    """SendBatch msg/s, the CPU µs per message of every process together, and the
    CPU µs and minor page faults per message of each broker and of this client
    (as text, and the µs as a list: brokers in start order, then the client).
    The batches are encoded before the clock and the CPU counters start; with a
    *replica*, its figures are read once it has caught up (an ASYNC_MASTER's
    replica is still appending when the last send returns)."""
    pids = [p.pid for p in group.procs]
    blobs = encode_batches(n)
    before = [proc_stat(pid) for pid in pids] + [own_stat()]
    rate = await send_batches(port, blobs)
    after = [proc_stat(pid) for pid in pids] + [own_stat()]
    if replica is not None:
        await until(lambda: caught_up(port, replica))
        after[1] = proc_stat(pids[1])
    sent = len(blobs) * BATCH
    names = ["master", "replica"][: len(pids)] if len(pids) > 1 else ["broker"]
    cpu = "  ".join(
        f"{name} {(b[0] - a[0]) * 1e6 / sent:4.1f}"
        for name, a, b in zip([*names, "client"], before, after, strict=True)
    )
    faults = " ".join(f"{(b[1] - a[1]) / sent:.2f}" for a, b in zip(before, after, strict=True))
    each = [(b[0] - a[0]) * 1e6 / sent for a, b in zip(before, after, strict=True)]
    return rate, sum(each), f"CPU us/msg: {cpu}  (faults/msg {faults})", each


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


class Brokers:
    """Broker processes in one temporary directory; all stopped and removed at the end."""

    #: flags added to every broker's command line (--broker-args), variables to its
    #: environment (--broker-env)
    extra_args: list[str] = []
    extra_env: dict[str, str] = {}

    def __init__(self) -> None:
        self.root = tempfile.mkdtemp(prefix="pocketmq-repl-bench-")
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(
        self,
        name: str,
        *,
        role: str = "ASYNC_MASTER",
        broker_id: int = 0,
        ha_port: int = -1,
        master_ha: str = "",
        **extra: str,
    ) -> tuple[int, int]:
        port = free_port()
        ha_port = free_port() if ha_port == 0 else ha_port
        args = [
            sys.executable,
            "-m",
            "pocketmq",
            "--log-level",
            "WARNING",
            "broker",
            "--data-dir",
            os.path.join(self.root, name),
            "--port",
            str(port),
            "--namesrv",
            "",
            "--grpc-v2-port",
            "-1",
            "--broker-name",
            "broker-b",
            "--broker-role",
            role,
            "--broker-id",
            str(broker_id),
            "--ha-port",
            str(ha_port),
            "--ha-heartbeat-interval-ms",
            "200",
            "--commitlog-file-size-bytes",
            str(256 * MiB),
        ]
        if master_ha:
            args += ["--ha-master-address", master_ha]
        for key, value in extra.items():
            args += [f"--{key.replace('_', '-')}", value]
        args += self.extra_args
        self.procs.append(subprocess.Popen(args, env={**os.environ, **self.extra_env}))
        wait_port(port)
        return port, ha_port

    def kill(self, index: int) -> None:
        self.procs[index].send_signal(signal.SIGKILL)
        self.procs[index].wait()

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def brokers() -> Iterator[Brokers]:
    group = Brokers()
    try:
        yield group
    finally:
        group.close()


async def info(port: int) -> dict[str, str]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = await broker_pb2_grpc.BrokerStub(channel).GetBrokerRuntimeInfo(
            pb.GetBrokerRuntimeInfoRequest(), timeout=10
        )
    return dict(reply.table)


async def until(predicate, timeout_s: float = 120, every_s: float = 0.005) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    while not await predicate():
        if time.perf_counter() - started > timeout_s:
            raise RuntimeError(f"not done within {timeout_s} s")
        await asyncio.sleep(every_s)
    return time.perf_counter()


async def caught_up(master: int, replica: int) -> bool:
    m, r = await asyncio.gather(info(master), info(replica))
    return (
        r.get("ha_connected") == "true" and r["commitlog_max_offset"] == m["commitlog_max_offset"]
    )


def encode_batches(total: int) -> list[bytes]:
    return [b"".join(records(BATCH, start=i * BATCH)) for i in range(max(1, total // BATCH))]


async def send_batches(port: int, blobs: list[bytes], concurrency: int = 4) -> float:
    todo = iter(range(len(blobs)))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=OPTIONS) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        for topic in ("bench", "single"):
            with contextlib.suppress(grpc.aio.AioRpcError):  # ALREADY_EXISTS
                await stub.CreateTopic(
                    pb.CreateTopicRequest(
                        topic_config=common_pb2.TopicConfig(
                            topic_name=topic, read_queue_nums=8, write_queue_nums=8, perm=6
                        )
                    )
                )
        await stub.SendMessage(pb.SendMessageRequest(record=records(1)[0]))  # warm-up

        async def worker() -> None:
            for i in todo:
                reply = await stub.SendBatch(pb.SendBatchRequest(records=blobs[i]))
                assert reply.status == pb.SEND_OK, pb.SendStatus.Name(reply.status)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return len(blobs) * BATCH / (time.perf_counter() - t0)


async def single_latency(port: int, n: int) -> list[float]:
    recs = records(n, topic="single")
    out = []
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        for rec in recs[:200]:  # warm-up
            await stub.SendMessage(pb.SendMessageRequest(record=rec))
        for rec in recs:
            t0 = time.perf_counter()
            reply = await stub.SendMessage(pb.SendMessageRequest(record=rec))
            out.append(time.perf_counter() - t0)
            assert reply.status == pb.SEND_OK, pb.SendStatus.Name(reply.status)
    return out


async def pair(group: Brokers, role: str) -> tuple[int, int]:
    master, ha = group.start("m", role=role, ha_port=0)
    replica, _ = group.start("r", role="SLAVE", broker_id=1, ha_port=0, master_ha=f"127.0.0.1:{ha}")
    await until(lambda: caught_up(master, replica), 30)
    return master, replica


#: a stand-in for a replica's load on the machine: *frac* of a core spent copying 1 MiB
#: buffers (memory traffic, as a replica's receive and append), in 2 ms duty cycles
BURNER = """
import sys, time
frac = float(sys.argv[1])
src, dst = bytearray(1 << 20), bytearray(1 << 20)
while True:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.002 * frac:
        dst[:] = src
    time.sleep(0.002 * (1 - frac))
"""


#: a stand-in for a replica's own copy of the log: *rate* bytes a second written with
#: pwrite, 1 MiB at a time, into 256 MiB files of a scratch directory, each fallocated
#: as a segment is and kept, as a replica's log grows (new page-cache pages throughout,
#: not pages another file just freed), until *limit* bytes
PAGE_WRITER = """
import os, sys, time
rate, limit, where = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
chunk, size = os.urandom(1 << 20), 256 << 20
start, done, n = time.perf_counter(), 0, 0
while done < limit:
    fd = os.open(os.path.join(where, str(n)), os.O_RDWR | os.O_CREAT, 0o644)
    os.posix_fallocate(fd, 0, size)
    for pos in range(0, size, len(chunk)):
        os.pwrite(fd, chunk, pos)
        done += len(chunk)
        ahead = done / rate - (time.perf_counter() - start)
        if ahead > 0:
            time.sleep(ahead)
    os.close(fd)
    n += 1
"""


@contextlib.contextmanager
def page_writer(rate: float, limit: int) -> Iterator[None]:
    """A process writing *rate* bytes a second into new page-cache pages (at most
    *limit* bytes) until the block ends; its files are removed then."""
    where = tempfile.mkdtemp(prefix="pocketmq-repl-bench-pages-")
    proc = subprocess.Popen([sys.executable, "-c", PAGE_WRITER, f"{rate:.0f}", str(limit), where])
    try:
        yield
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(where, ignore_errors=True)


@contextlib.contextmanager
def burner(cores: float) -> Iterator[None]:
    """Processes that keep *cores* cores busy with memory copies until the block ends."""
    procs = []
    left = cores
    while left > 0.01:
        procs.append(subprocess.Popen([sys.executable, "-c", BURNER, f"{min(left, 1.0):.3f}"]))
        left -= 1.0
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


ROLES = (("single", 0.0), ("ASYNC_MASTER", 0.7), ("SYNC_MASTER", 0.6))


async def throughput_round(n: int, shares: dict[str, list[float]], first: int = 0) -> None:
    """Single broker, ASYNC_MASTER + replica, SYNC_MASTER + replica: one after another,
    starting with ``ROLES[first]`` (rounds rotate the order, so that no setting always
    runs first, on the memory the round before left, or last); then the two controls:
    the single broker again beside a burner of the ASYNC replica's cores (what any
    process of that CPU costs the broker on this machine), and beside a writer of the
    ASYNC replica's bytes into new page-cache pages (what storing the copy, and nothing
    else, costs it). Shares are of the round's single broker, printed once every run
    of the round is done."""
    runs: dict[str, tuple[float, float, str, list[float]]] = {}
    for role, _target in (*ROLES[first:], *ROLES[:first]):
        with brokers() as group:
            if role == "single":
                port, _ = group.start("single")
                runs[role] = await measured_send(group, port, n)
            else:
                master, replica = await pair(group, role)
                runs[role] = await measured_send(group, master, n, replica)
    single, single_cpu, cpu, _each = runs["single"]
    print(f"round: {' -> '.join(role for role in runs)}")
    print(
        f"SendBatch x{BATCH} 1 KiB, 4 calls  single broker        {single:>10,.0f} msg/s "
        f"({single * len(BODY) / 1e6:,.0f} MB/s)            {cpu}"
    )
    for role, target in ROLES[1:]:
        rate, total_cpu, cpu, each = runs[role]
        shares[role].append(rate / single)
        shares[f"{role} by CPU"].append(single_cpu / total_cpu)
        print(
            f"SendBatch x{BATCH} 1 KiB, 4 calls  {role}+replica {rate:>10,.0f} msg/s "
            f"= {rate / single:4.0%} of single (target >= {target:.0%}), "
            f"{single_cpu / total_cpu:4.0%} by CPU  {cpu}"
        )
    each = runs["ASYNC_MASTER"][3]
    replica_cores = each[1] * runs["ASYNC_MASTER"][0] / 1e6
    control, cpu, record_bytes = await single_beside(n, lambda _size: burner(replica_cores))
    shares["control"].append(control / single)
    print(
        f"SendBatch x{BATCH} 1 KiB, 4 calls  single + burner {replica_cores:.2f} core "
        f"{control:>8,.0f} msg/s = {control / single:4.0%} of single (a process using the "
        f"ASYNC replica's CPU)  {cpu}"
    )
    copy_rate = runs["ASYNC_MASTER"][0] * record_bytes  # the replica's bytes a second
    copied, cpu, _size = await single_beside(n, lambda size: page_writer(copy_rate, int(n * size)))
    shares["page-cache control"].append(copied / single)
    print(
        f"SendBatch x{BATCH} 1 KiB, 4 calls  single + {copy_rate / 1e6:.0f} MB/s written "
        f"{copied:>7,.0f} msg/s = {copied / single:4.0%} of single (a process storing the "
        f"ASYNC replica's bytes, and nothing else)  {cpu}"
    )


async def single_beside(
    n: int, load: Callable[[float], contextlib.AbstractContextManager[None]]
) -> tuple[float, str, float]:
    """A single broker, warmed as the runs above, sending *n* messages beside
    ``load(stored bytes a record)``: msgs/s, the CPU text, the stored bytes a record."""
    with brokers() as group:
        port, _ = group.start("single")
        await send_batches(port, encode_batches(20 * BATCH))
        record_bytes = int((await info(port))["commitlog_max_offset"]) / (20 * BATCH)
        with load(record_bytes):
            await asyncio.sleep(0.3)
            rate, _cpu, cpu, _each = await measured_send(group, port, n)
    return rate, cpu, record_bytes


async def run(args: argparse.Namespace) -> None:
    n = args.messages
    shares: dict[str, list[float]] = collections.defaultdict(list)
    with brokers() as group:  # untimed: the first gigabytes a fresh VM writes cost more
        port, _ = group.start("warm-up")
        await measured_send(group, port, n)
    for i in range(args.runs):
        await throughput_round(n, shares, i % len(ROLES))
    if args.runs > 1:
        print(
            f"median of {args.runs} rounds: ASYNC_MASTER+replica "
            f"{statistics.median(shares['ASYNC_MASTER']):.0%}, SYNC_MASTER+replica "
            f"{statistics.median(shares['SYNC_MASTER']):.0%} of single; by CPU "
            f"{statistics.median(shares['ASYNC_MASTER by CPU']):.0%} and "
            f"{statistics.median(shares['SYNC_MASTER by CPU']):.0%}; single beside a burner "
            f"of the replica's cores {statistics.median(shares['control']):.0%}, beside a "
            f"writer of its bytes {statistics.median(shares['page-cache control']):.0%}"
        )
    if args.throughput_only:
        return
    with brokers() as group:
        master, replica = await pair(group, "SYNC_MASTER")
        await send_batches(
            master, encode_batches(20 * BATCH)
        )  # the topics, and records to pull below
        lat = await single_latency(master, args.singles)
        print(
            f"SendMessage c=1 SYNC_MASTER+replica  p50 {pct(lat, 0.5):.2f} ms  "
            f"p99 {pct(lat, 0.99):.2f} ms  (target p99 <= 2.5 ms)"
        )

        # failover: kill -9 the master; the replica serves pulls; promote; it takes sends
        async def pulls() -> bool:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{replica}") as channel:
                try:
                    reply = await broker_pb2_grpc.BrokerStub(channel).PullMessage(
                        pb.PullMessageRequest(
                            consumer_group="bench",
                            topic="bench",
                            queue_id=0,
                            queue_offset=0,
                            max_msg_nums=32,
                            suspend_timeout_ms=0,
                        ),
                        timeout=2,
                    )
                except grpc.aio.AioRpcError:
                    return False
            return reply.status == pb.FOUND

        await until(pulls, 30, 0.05)  # the replica has the topic (metadata sync, 5 s)
        group.kill(0)
        killed = time.perf_counter()
        served = await until(pulls, 10) - killed
        async with grpc.aio.insecure_channel(f"127.0.0.1:{replica}") as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            await stub.PromoteToMaster(pb.PromoteToMasterRequest(role="ASYNC_MASTER"))
            reply = await stub.SendMessage(pb.SendMessageRequest(record=records(1)[0]))
            assert reply.status == pb.SEND_OK
        writable = time.perf_counter() - killed
        print(
            f"failover after kill -9 of SYNC_MASTER: replica serves a pull after "
            f"{served * 1000:.0f} ms (target <= 2 s); promoted and acking sends after "
            f"{writable * 1000:.0f} ms"
        )
    with brokers() as group:
        master, ha = group.start("m", role="ASYNC_MASTER", ha_port=0)
        await send_batches(master, encode_batches(args.catchup_mib * MiB // (len(BODY) + 150)))
        end = int((await info(master))["commitlog_max_offset"])
        replica, _ = group.start(
            "r", role="SLAVE", broker_id=1, ha_port=0, master_ha=f"127.0.0.1:{ha}"
        )

        async def moving() -> bool:
            return int((await info(replica))["commitlog_max_offset"]) > 0

        first = await until(moving, 60, 0.002)
        done = await until(lambda: caught_up(master, replica), 600, 0.01)
        speed = end / (done - first) / 1e6
        print(
            f"catch-up of {end / MiB:,.0f} MiB from empty, producers idle: "
            f"{done - first:.2f} s = {speed:,.0f} MB/s (target >= 150)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--singles", type=int, default=2000)
    parser.add_argument("--catchup-mib", type=int, default=512)
    parser.add_argument(
        "--runs",
        type=int,
        default=1,
        help="rounds of the three SendBatch runs (the median share is printed)",
    )
    parser.add_argument(
        "--throughput-only", action="store_true", help="stop after the SendBatch rounds"
    )
    parser.add_argument(
        "--broker-args",
        default="",
        help="flags added to every broker, e.g. --broker-args=--no-write-without-mmap",
    )
    parser.add_argument(
        "--broker-env",
        default="",
        help="NAME=VALUE pairs added to every broker's environment, e.g. "
        "--broker-env=MALLOC_TRIM_THRESHOLD_=134217728",
    )
    args = parser.parse_args()
    Brokers.extra_args = shlex.split(args.broker_args)
    Brokers.extra_env = dict(pair.split("=", 1) for pair in shlex.split(args.broker_env))
    print(f"machine: {machine()} · load average {os.getloadavg()[0]:.1f}")
    print(
        f"{args.messages} messages per SendBatch run · "
        f"{args.singles} single sends · catch-up of {args.catchup_mib} MiB"
        + (f" · brokers {args.broker_args}" if args.broker_args else "")
        + (f" · broker env {args.broker_env}" if args.broker_env else "")
    )
    uvloop.run(run(args))
    print(f"load average at the end: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cpu)")


if __name__ == "__main__":
    main()
