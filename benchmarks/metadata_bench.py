"""Metadata at scale (issue 23): topic creation, restart, route lookups, registration
size, memory and handles, at 1k, 10k and 100k topics side by side.

    .venv/bin/python benchmarks/metadata_bench.py [--topics 100000] [--extra-brokers 1]

A nameserver and a broker run as processes (so RSS and file handles are the
broker's own); topics of 8 queues are created through AdminClient.create_topics
in batches of 1,000 and the rate of each 10,000 is printed. At 1k, 10k and 100k
topics it measures: single creates (AdminClient.create_topic, 32 tasks), route
lookups through gRPC (one topic a call from 32 tasks, and 100 names a call through
GetTopicRoutes, as clients refresh) and in the RouteTable itself, the registration
payload after a one-topic change (a RegisterBrokerService against the same
nameserver, in this process), broker RSS and open files. Then a few thousand
topics get a message, the broker restarts (time to serving), and extra brokers
bring the cluster to a million queues. Everything lives in a temporary
directory (consume-queue files are sparse) that is removed at the end.
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

from benchkit import free_port, machine

from pocketmq.broker.namesrv_client import GrpcNameserverClient
from pocketmq.broker.registration import RegisterBrokerService
from pocketmq.broker.topic_config import BrokerTopicConfig as BrokerTopic
from pocketmq.broker.topic_config import TopicConfigManager
from pocketmq.client import AdminClient, ClientError, Message, Producer, TopicConfig
from pocketmq.common.clock import ManualClock
from pocketmq.nameserver.route_table import BrokerIdentity, DataVersion, RouteTable
from pocketmq.nameserver.route_table import RegisteredTopicConfig as NsTopic

QUEUES = 8
MARKS = (1_000, 10_000, 100_000)
SERVING = re.compile(rb"serving on (\S+),")


class Proc:
    def __init__(self, args: list[str], log_path: str) -> None:
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.p = subprocess.Popen(
                [sys.executable, "-m", "pocketmq", *args],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
            )

    def wait_log(self, pattern: re.Pattern[bytes], start: int = 0, timeout_s: float = 120):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as f:
                f.seek(start)
                m = pattern.search(f.read())
            if m:
                return m
            if self.p.poll() is not None:
                raise RuntimeError(f"exited {self.p.returncode}; see {self.log_path}")
            time.sleep(0.02)
        raise RuntimeError(f"no {pattern.pattern!r} in {self.log_path}")

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(60)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()

    def rss_mib(self) -> float:
        with open(f"/proc/{self.p.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.p.pid}/fd"))

    def maps(self) -> int:
        with open(f"/proc/{self.p.pid}/maps") as f:
            return sum(1 for _ in f)

    def cq_files(self) -> tuple[int, int]:
        """(open files, mappings) of consume-queue segments: bounded by the broker's
        max_open_consume_queue_files (16,384) whatever the queues holding messages."""
        fds = 0
        for name in os.listdir(f"/proc/{self.p.pid}/fd"):
            try:
                fds += "/consumequeue/" in os.readlink(f"/proc/{self.p.pid}/fd/{name}")
            except OSError:
                continue
        with open(f"/proc/{self.p.pid}/maps") as f:
            maps = sum(1 for line in f if "/consumequeue/" in line)
        return fds, maps


def start_broker(work: str, name: str, namesrv: str, port: int, max_queues: int) -> Proc:
    data = os.path.join(work, name)
    args = [
        "--log-level",
        "INFO",
        "broker",
        "--broker-name",
        name,
        "--port",
        str(port),
        "--data-dir",
        data,
        "--namesrv-addrs",
        namesrv,
        "--grpc-v2-port",
        "-1",
        "--max-queues-total",
        str(max_queues),
        "--consume-queue-units-per-file",
        "10000",
        "--commitlog-file-size-bytes",
        str(64 * 1024 * 1024),
    ]
    return Proc(args, os.path.join(work, f"{name}.log"))


async def create_batched(
    admin: AdminClient, addr: str, prefix: str, start: int, end: int, batch: int = 1_000
) -> float:
    began = time.perf_counter()
    for lo in range(start, end, batch):
        await admin.create_topics(
            addr,
            [
                TopicConfig(
                    topic=f"{prefix}{i:06d}", read_queue_nums=QUEUES, write_queue_nums=QUEUES
                )
                for i in range(lo, min(end, lo + batch))
            ],
            batch_size=batch,
        )
    return (end - start) / (time.perf_counter() - began)


async def single_creates(admin: AdminClient, addr: str, tag: str, n: int = 400) -> float:
    names = iter(range(n))

    async def worker() -> None:
        for i in names:
            await admin.create_topic(
                addr,
                TopicConfig(
                    topic=f"Single{tag}_{i}", read_queue_nums=QUEUES, write_queue_nums=QUEUES
                ),
            )

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(32)))
    return n / (time.perf_counter() - began)


async def grpc_lookups(admin: AdminClient, topics: int, seconds: float = 3.0) -> float:
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker(seed: int) -> None:
        nonlocal done
        i = seed
        while time.perf_counter() < deadline:
            await admin.topic_route(f"T{i % topics:06d}")
            done += 1
            i += 7919

    began = time.perf_counter()
    await asyncio.gather(*(worker(s) for s in range(32)))
    return done / (time.perf_counter() - began)


async def grpc_batched_lookups(
    namesrv: str, topics: int, seconds: float = 3.0, per_call: int = 100
) -> float:
    """Routes per second through GetTopicRoutes by names (*per_call* a call, 8 tasks):
    how a client refreshes the routes it holds (one call per thousand topics)."""
    from pocketmq.client.remoting import Remoting

    remoting = Remoting()
    ns = remoting.nameserver([namesrv])
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker(seed: int) -> None:
        nonlocal done
        i = seed
        while time.perf_counter() < deadline:
            names = [f"T{(i + k * 7919) % topics:06d}" for k in range(per_call)]
            routes, _missing = await ns.get_routes(names)
            done += len(routes)
            i += 104_729

    try:
        began = time.perf_counter()
        await asyncio.gather(*(worker(s) for s in range(8)))
        return done / (time.perf_counter() - began)
    finally:
        await remoting.close()


def table_lookups(topics: int) -> float:
    table = RouteTable(clock=ManualClock(), default_heartbeat_timeout_ms=120_000)
    for b in range(2):
        table.register_broker(
            BrokerIdentity(
                cluster="C", broker_name=f"b{b}", broker_addr=f"127.0.0.1:{b + 1}", broker_id=0
            ),
            DataVersion(1, 1),
            [
                NsTopic(topic_name=f"T{i:06d}", read_queue_nums=8, write_queue_nums=8)
                for i in range(topics)
            ],
        )
    n = 200_000
    began = time.perf_counter()
    for i in range(n):
        table.get_route(f"T{(i * 7919) % topics:06d}")
    return n / (time.perf_counter() - began)


async def registration_bytes(work: str, namesrv: str, topics: int) -> tuple[int, int, float]:
    """(bytes of the full table, bytes after a one-topic change, seconds of the full
    registration) for a broker of *topics* topics registering with the nameserver."""
    directory = tempfile.mkdtemp(dir=work)
    manager = TopicConfigManager(
        directory, broker_name=f"reg{topics}", cluster_name="RegBench", max_queues_total=10_000_000
    )
    manager.load()
    for lo in range(0, topics, 20_000):
        manager.create_many(
            [BrokerTopic(topic_name=f"R{i:06d}") for i in range(lo, min(topics, lo + 20_000))]
        )
    service = RegisterBrokerService(
        [namesrv],
        manager,
        cluster_name="RegBench",
        broker_name=f"reg{topics}",
        broker_addr="127.0.0.1:1",
        client_factory=GrpcNameserverClient,
    )
    began = time.perf_counter()
    await service.run_once()
    full_s = time.perf_counter() - began
    full = service.last_request_bytes[namesrv]
    manager.create(BrokerTopic(topic_name="OneMore"))
    await service.run_once()
    delta = service.last_request_bytes[namesrv]
    await service.stop(unregister=True)
    await manager.stop()
    shutil.rmtree(directory, ignore_errors=True)
    return full, delta, full_s


async def restart_time(
    broker: Proc, work: str, namesrv: str, port: int, max_queues: int
) -> tuple[float, Proc]:
    broker.stop()
    size = os.path.getsize(broker.log_path)
    began = time.perf_counter()
    again = start_broker(work, "broker-a", namesrv, port, max_queues)
    again.wait_log(SERVING, start=size)
    return time.perf_counter() - began, again


async def routes_back(namesrv: str, topics: int, began: float) -> float:
    """Seconds from *began* until the nameserver routes the broker's topics again (the
    stopped broker unregistered; a full table is swapped in at its last chunk, so the
    last topic routed means all are)."""
    async with AdminClient(namesrv, timeout_s=60) as admin:
        while True:
            try:
                await admin.topic_route(f"T{topics - 1:06d}")
                return time.perf_counter() - began
            except ClientError:
                await asyncio.sleep(0.02)


async def main(args: argparse.Namespace) -> None:
    work = tempfile.mkdtemp(prefix="pmq-metadata-")
    print(f"# metadata_bench on {machine()}")
    print(f"# figures are noisy (shared machine); run it several times. dir {work}")
    ns_port, port = free_port(), free_port()
    namesrv = f"127.0.0.1:{ns_port}"
    ns = Proc(
        ["--log-level", "WARNING", "nameserver", "--host", "127.0.0.1", "--port", str(ns_port)],
        os.path.join(work, "ns.log"),
    )
    max_queues = args.topics * QUEUES + 100_000
    procs = [ns]
    try:
        time.sleep(0.5)
        broker = start_broker(work, "broker-a", namesrv, port, max_queues)
        procs.append(broker)
        addr = broker.wait_log(SERVING).group(1).decode()
        rows: dict[int, dict[str, str]] = {}
        async with AdminClient(namesrv, timeout_s=60) as admin:
            base_rss, base_fds = broker.rss_mib(), broker.fds()
            made = 0
            print("\n## batch create (1,000 topics of 8 queues a call), topics/s per window")
            for mark in [m for m in MARKS if m <= args.topics]:
                while made < mark:
                    step = min(10_000, mark - made) if mark > 1_000 else mark - made
                    rate = await create_batched(admin, addr, "T", made, made + step)
                    made += step
                    print(f"  {made - step:>7,}..{made:>7,}: {rate:>8,.0f} topics/s", flush=True)
                await asyncio.sleep(1.0)  # let registration settle before measuring
                row = rows[mark] = {}
                row["single creates/s"] = f"{await single_creates(admin, addr, str(mark)):,.0f}"
                row["route lookups/s (gRPC, 32 tasks)"] = f"{await grpc_lookups(admin, mark):,.0f}"
                row["route lookups/s (gRPC, 100 names a call)"] = (
                    f"{await grpc_batched_lookups(namesrv, mark):,.0f}"
                )
                row["route lookups/s (RouteTable)"] = f"{table_lookups(mark):,.0f}"
                full, delta, full_s = await registration_bytes(work, namesrv, mark)
                row["registration: full table bytes"] = f"{full:,}"
                row["registration: full table s"] = f"{full_s:.2f}"
                row["registration: after 1-topic change bytes"] = f"{delta:,}"
                rss, fds = broker.rss_mib(), broker.fds()
                row["broker RSS MiB"] = f"{rss:,.0f}"
                row["RSS KiB per idle topic"] = f"{(rss - base_rss) * 1024 / mark:.2f}"
                row["open files"] = f"{fds}"
                row["files per idle queue"] = f"{(fds - base_fds) / (mark * QUEUES):.4f}"
                row["memory mappings"] = f"{broker.maps()}"
            print("\n## at each size (columns: topics)")
            marks = sorted(rows)
            print(f"  {'':45}" + "".join(f"{m:>12,}" for m in marks))
            for key in rows[marks[0]]:
                print(f"  {key:45}" + "".join(f"{rows[m][key]:>12}" for m in marks))

            hot = min(args.hot_topics, made)
            print(f"\n## restart with {made:,} topics, {hot:,} of them holding a message")
            async with Producer(group="bench-pg", namesrv=namesrv) as producer:
                sem = asyncio.Semaphore(64)

                async def send(i: int) -> None:
                    async with sem:
                        await producer.send(Message(topic=f"T{i:06d}", body=b"x"))

                await asyncio.gather(*(send(i * (made // hot)) for i in range(hot)))
        for attempt in range(args.restarts):
            began = time.perf_counter()
            seconds, broker = await restart_time(broker, work, namesrv, port, max_queues)
            procs.append(broker)
            routed_s = await routes_back(namesrv, made, began)
            print(
                f"  restart {attempt + 1}: serving after {seconds:.2f} s, all routes back "
                f"at the nameserver after {routed_s:.2f} s; RSS {broker.rss_mib():,.0f} MiB, "
                f"{broker.fds()} open files, {broker.maps()} mappings"
            )
            cq_fds, cq_maps = broker.cq_files()
            print(
                f"    consume-queue files of the {hot:,} queues with messages: {cq_fds} open, "
                f"{cq_maps} mapped (one descriptor per mapping; 6,027 / 3,336 for 3,000 "
                "before the LRU)"
            )

        if args.extra_brokers:
            extra_topics = max(0, (1_000_000 - made * QUEUES) // QUEUES // args.extra_brokers)
            print(
                f"\n## a million queues: {args.extra_brokers} more broker(s) with "
                f"{extra_topics:,} topics of 8 queues each"
            )
            async with AdminClient(namesrv, timeout_s=60) as admin:
                for b in range(args.extra_brokers):
                    extra = start_broker(
                        work, f"broker-x{b}", namesrv, free_port(), extra_topics * QUEUES + 100_000
                    )
                    procs.append(extra)
                    extra_addr = extra.wait_log(SERVING).group(1).decode()
                    rate = await create_batched(admin, extra_addr, f"X{b}_", 0, extra_topics)
                    print(
                        f"  broker-x{b}: {rate:,.0f} topics/s; RSS {extra.rss_mib():,.0f} MiB,"
                        f" {extra.fds()} open files, {extra.maps()} mappings"
                    )
                routes = await admin.topic_routes()
                queues = sum(q.write_queue_nums for _t, qds in routes for q in qds)
                print(
                    f"  cluster: {len(routes):,} topics, {queues:,} queues; broker-a "
                    f"{broker.fds()} open files, {broker.maps()} mappings"
                )
        du = subprocess.run(["du", "-sh", work], capture_output=True, text=True).stdout.split()
        print(f"\n## disk used: {du[0] if du else '?'} (sparse consume-queue files)")
    finally:
        for proc in reversed(procs):
            proc.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=100_000)
    parser.add_argument("--hot-topics", type=int, default=3_000)
    parser.add_argument("--restarts", type=int, default=2)
    parser.add_argument("--extra-brokers", type=int, default=1)
    asyncio.run(main(parser.parse_args()))
