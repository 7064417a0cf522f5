"""Spark figures: rows/s read from a broker, from store files, and written to a topic.

    .venv/bin/python benchmarks/spark_bench.py [--messages 4000000] [--write 200000]
        [--repeat 3] [--only broker,store,ceiling,write] [--send-batch-size N] [--conf K=V]
        [--broker-toml 'max_pull_messages = 1024'] [--no-fixed-cost]

Starts ``pocketmq standalone`` in a temporary directory, fills topic ``bench``
(8 queues) with 1 KiB messages through SendBatch, then in Spark ``local[2]``:
a batch read of the topic through the brokers (``format("pocketmq")``), the
same read from the commit-log files (``format("pocketmq-store")``), Spark's
ceiling (a data source yielding one prebuilt Arrow batch of the same rows over
and over: no I/O, no decoding; what any Python data source can reach on the
machine), and a write of ``--write`` rows (``df.write.format("pocketmq")``).
Each run also prints the cores busy on the whole machine and in the broker.
Each read
materializes every column: a sum over the length of every column (nested ones
through ``size``), computed in the JVM, so every value crosses from the
Python worker. Each figure is measured ``--repeat`` times after a warm-up run of its own
and printed with its range; on a shared machine, read the range, not one run.

Spark's cost per query: before a read's timed runs, the same query over a few
rows (from a broker: ``endingOffsets`` after each queue's first message, the same
8 tasks; the ceiling: one batch a partition) is timed 5 times. Its median, 0.4-0.7 s
here, is what every query pays whatever it reads: planning, the JIT compiling
Spark's planner (still at it after dozens of queries: C1/C2 threads take about
0.45 s of CPU a query), launching each task and its Python worker's call. The
read's median run is printed again past that cost: the rate its rows move at,
which a longer read tends to. The default ``--messages`` (4,000,000, 4 GiB in the
broker's data directory) keeps that cost near a tenth of a run; with 1,000,000 it is
a fifth to a quarter.
``--broker-toml`` passes broker settings (e.g. the pull caps
``max_pull_messages``/``max_pull_bytes``, 32 and 256 KiB by default). Not a
test.

Each run also prints the CPU it cost per row, split into the Spark JVM, its
Python workers and the broker (``/proc``: utime + stime of each process this
script started). On a shared machine that figure moves far less than rows/s,
which any other load cuts; "2 cores / that" is the rate the CPU cost allows on
two otherwise idle cores, a projection, not a measurement.

Spark settings, all Spark's defaults but the UI: ``spark.python.worker.reuse``
is on (the default: the two Python workers live across tasks and runs, so
imports, the gRPC channels and the event loop are paid once), and no Arrow
setting applies: a Python data source yielding ``pyarrow.RecordBatch`` values
hands them to the JVM as they are (``spark.sql.execution.arrow.maxRecordsPerBatch``
sizes only batches Spark builds itself); the connector sizes them (8,192 rows
per batch from store files, one PullBatch reply's rows from a broker). The
write's input is made in its two partitions (``spark.range(0, n, 1, 2)``), not
shuffled into them: a shuffle costs the JVM 2-4 us per 1 KiB row and tells
nothing about the sink.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

import grpc

sys.path.insert(0, os.path.dirname(__file__))
from benchkit import machine, process_cpu_s, records, standalone

from pocketmq.v1 import broker_pb2, broker_pb2_grpc

BATCH = 512


async def fill(port: int, total: int) -> None:
    blob = b"".join(records(BATCH, topic="bench"))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        sem = asyncio.Semaphore(4)

        async def one() -> None:
            async with sem:
                await stub.SendBatch(broker_pb2.SendBatchRequest(records=blob))

        # The broker listens before its controller makes it the master: wait for that.
        deadline = time.monotonic() + 30
        while True:
            try:
                await one()
                break
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.FAILED_PRECONDITION or (
                    time.monotonic() > deadline
                ):
                    raise
                await asyncio.sleep(0.2)
        total -= BATCH

        await asyncio.gather(*(one() for _ in range(total // BATCH)))


def cpu_seconds(pid: int | None = None) -> float:
    """CPU seconds used by *pid*, or by the whole machine (every core, all processes)."""
    if pid is not None:
        return process_cpu_s(pid)
    with open("/proc/stat") as f:
        user, nice, system = f.readline().split()[1:4]
    return (int(user) + int(nice) + int(system)) / os.sysconf("SC_CLK_TCK")


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        tree.setdefault(ppid, []).append(int(name))
    return tree


def spark_cpu_seconds(broker_pid: int) -> dict[tuple[int, str], float]:
    """CPU seconds of each process this script started but the broker, by (pid, "jvm" or
    "python"): the Spark JVM and its Python workers (reused: they live across runs)."""
    tree, out, todo = _children(), {}, [os.getpid()]
    while todo:
        pid = todo.pop()
        for child in tree.get(pid, []):
            if child == broker_pid:
                continue
            try:
                with open(f"/proc/{child}/comm") as f:
                    kind = "jvm" if f.read().strip() == "java" else "python"
                out[(child, kind)] = cpu_seconds(child)
            except (OSError, IndexError):
                continue
            todo.append(child)
    return out


def timed(
    label: str,
    rows_expected: int,
    action,
    repeat: int,  # type: ignore[no-untyped-def]
    broker_pid: int,
    fixed_s: float | None = None,
) -> None:
    """Run *action* *repeat* times; print rows/s and the CPU spent per row (the figure a
    loaded machine changes least: other work slows the wall clock, not this). With
    *fixed_s*, Spark's cost per query (:func:`fixed_cost`), the median's rate past it too:
    what the rows themselves move at, the rate a longer read tends to."""
    rates, costs, times = [], [], []
    for _ in range(repeat):
        machine, broker = cpu_seconds(), cpu_seconds(broker_pid)
        spark = spark_cpu_seconds(broker_pid)
        started = time.perf_counter()
        rows = action()
        elapsed = time.perf_counter() - started
        machine, broker = cpu_seconds() - machine, cpu_seconds(broker_pid) - broker
        spark_after = spark_cpu_seconds(broker_pid)
        used = {"jvm": 0.0, "python": 0.0}
        for key, t in spark_after.items():
            used[key[1]] += t - spark.get(key, 0.0)
        per_row = {k: v / max(rows, 1) * 1e6 for k, v in used.items()}
        rates.append(rows / elapsed)
        times.append((elapsed, rows))
        costs.append(sum(per_row.values()) + broker / max(rows, 1) * 1e6)
        print(
            f"  {label:<38} {rows:>10,} rows in {elapsed:6.2f} s = {rates[-1]:>10,.0f} rows/s"
            f"  (cores busy: machine {machine / elapsed:.1f}, broker {broker / elapsed:.2f};"
            f" CPU per row: JVM {per_row['jvm']:.2f} us, Python workers"
            f" {per_row['python']:.2f} us, broker {broker / max(rows, 1) * 1e6:.2f} us)"
            + ("" if rows == rows_expected else f"  (expected {rows_expected:,})"),
            flush=True,
        )
    rates.sort()
    costs.sort()
    cost = costs[len(costs) // 2]
    print(
        f"  {label:<38} range {rates[0]:,.0f} .. {rates[-1]:,.0f} rows/s over {repeat} runs,"
        f" median {rates[len(rates) // 2]:,.0f}; CPU per row (Spark + broker) median"
        f" {cost:.2f} us (2 cores / that: {2e6 / cost:,.0f} rows/s)",
        flush=True,
    )
    if fixed_s is not None:
        elapsed, rows = sorted(times)[len(times) // 2]
        print(
            f"  {label:<38} median run {elapsed:.2f} s, of which Spark's cost per query"
            f" {fixed_s:.2f} s; past it: {rows / max(elapsed - fixed_s, 1e-9):,.0f} rows/s",
            flush=True,
        )


def fixed_cost(label: str, action, runs: int = 5) -> float:  # type: ignore[no-untyped-def]
    """Median seconds of *action*, a query over a handful of rows with the plan and tasks of
    a full read: Spark's cost per query (planning, compiling its planner and generated code,
    launching each task and its Python worker's call), whatever it reads."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    times.sort()
    fixed = times[len(times) // 2]
    print(
        f"  {label:<38} the same query over a few rows: {times[0]:.2f} .. {times[-1]:.2f} s,"
        f" median {fixed:.2f} s (Spark's cost per query)",
        flush=True,
    )
    return fixed


def materialize(df) -> int:  # type: ignore[no-untyped-def]
    """Rows of *df*, every column of every row computed on (in the JVM)."""
    from pyspark.sql import functions as F

    sizes = [F.sum(F.length(c)) for c in ("topic", "broker", "body", "tags", "msg_id")]
    sizes += [F.sum(F.size(c)) for c in ("keys", "properties")]
    sizes += [F.sum(c) for c in ("queue_id", "queue_offset")]
    sizes += [F.max(c) for c in ("store_timestamp", "born_timestamp")]
    return int(df.agg(F.count("*").alias("n"), *sizes).first().n)


async def first_offsets(namesrv: str, topic: str) -> str:
    """``endingOffsets`` JSON that ends every queue of *topic* after its first message."""
    from pocketmq.client.admin import AdminClient

    async with AdminClient(namesrv) as admin:
        route = await admin.topic_route(topic)
    return json.dumps(
        {
            topic: {
                q.broker_name: {str(i): 1 for i in range(q.read_queue_nums)}
                for q in route.queue_datas
            }
        }
    )


def ceiling_source(rows: int, name: str = "pocketmq-bench-ceiling"):  # type: ignore[no-untyped-def]
    """A data source that yields one prebuilt batch of 1 KiB rows again and again: what
    Spark's Python data source path carries here with no I/O and no decoding at all."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from pocketmq.spark.schema import SCHEMA

    class CeilingReader(DataSourceReader):
        def partitions(self):  # type: ignore[no-untyped-def]
            return [InputPartition(i) for i in range(4)]

        def read(self, partition):  # type: ignore[no-untyped-def]
            from pocketmq.client.message_codec import encode_message
            from pocketmq.client.model import Message
            from pocketmq.spark import arrowcodec

            record = encode_message(
                Message(
                    topic="bench", body=b"x" * 1024, tags="T", keys=["k"], properties={"p": "1"}
                ),
                queue_id=1,
                uniq_key="0" * 32,
                born_host=b"\0" * 8,
                born_timestamp_ms=1,
            )
            blob = record * 8192
            batch = arrowcodec.decode_block(blob, 0, len(blob), broker="b").batch
            for _ in range(rows // 4 // 8192):
                yield batch

    class CeilingSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return name

        def schema(self):  # type: ignore[no-untyped-def]
            return SCHEMA

        def reader(self, schema):  # type: ignore[no-untyped-def]
            return CeilingReader()

    return CeilingSource


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=4_000_000)
    parser.add_argument("--write", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="untimed runs of each path first (Spark's planner is still being compiled "
        "by the JVM's JIT for several queries: more runs measure a warm session)",
    )
    parser.add_argument("--only", default="broker,store,ceiling,write")
    parser.add_argument(
        "--no-fixed-cost",
        dest="fixed_cost",
        action="store_false",
        help="skip timing each read over a few rows (Spark's cost per query)",
    )
    parser.add_argument("--broker-toml", default="")
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the session (repeatable), printed with the figures",
    )
    parser.add_argument(
        "--send-batch-size",
        type=int,
        default=None,
        help="the sink's sendBatchSize (its default when not given)",
    )
    args = parser.parse_args()
    only = set(args.only.split(","))
    total = args.messages - args.messages % BATCH
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with standalone("pocketmq-spark-bench-", broker_toml=args.broker_toml) as server:
        print(f"filling topic bench with {total:,} messages of 1 KiB ...")
        asyncio.run(fill(server.broker_port, total))
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F

        from pocketmq.spark import register

        builder = (
            SparkSession.builder.master("local[2]")
            .appName("pocketmq-bench")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "4")
        )
        for setting in args.conf:
            key, _, value = setting.partition("=")
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("WARN")
        register(spark)
        namesrv, data_dir = server.namesrv, server.data_dir

        def broker_read() -> int:
            return materialize(
                spark.read.format("pocketmq")
                .option("namesrv", namesrv)
                .option("subscribe", "bench")
                .load()
            )

        ending = asyncio.run(first_offsets(namesrv, "bench"))

        def broker_read_few() -> int:
            return materialize(
                spark.read.format("pocketmq")
                .option("namesrv", namesrv)
                .option("subscribe", "bench")
                .option("endingOffsets", ending)
                .load()
            )

        def store_read() -> int:
            return materialize(
                spark.read.format("pocketmq-store").option("subscribe", "bench").load(data_dir)
            )

        def write() -> int:
            # Two partitions made where the rows are made: a shuffle (.repartition) before
            # the sink would cost the JVM 2-4 us per 1 KiB row more, the sink nothing.
            df = spark.range(0, args.write, 1, 2).select(F.expr("repeat('x', 1024)").alias("body"))
            writer = (
                df.write.format("pocketmq")
                .option("namesrv", namesrv)
                .option("topic", "bench-write")
                .mode("append")
            )
            if args.send_batch_size:
                writer = writer.option("sendBatchSize", args.send_batch_size)
            writer.save()
            return args.write

        try:
            from pocketmq.spark.arrowcodec import IMPLEMENTATION as codec
        except ImportError:  # a connector from before the Arrow codec
            codec = "none"
        print(
            f"machine: {machine()}, load average {os.getloadavg()[0]:.1f}; "
            f"Spark local[2]; arrow codec: {codec}"
            + (f"; broker: {args.broker_toml}" if args.broker_toml else "")
            + (f"; Spark: {', '.join(args.conf)}" if args.conf else "")
        )
        spark.dataSource.register(ceiling_source(total))
        spark.dataSource.register(ceiling_source(32768, "pocketmq-bench-ceiling-few"))

        def ceiling() -> int:
            return materialize(spark.read.format("pocketmq-bench-ceiling").load())

        def ceiling_few() -> int:  # one batch a partition
            return materialize(spark.read.format("pocketmq-bench-ceiling-few").load())

        paths = (
            ("broker", "read from the broker (PullBatch)", total, broker_read, broker_read_few),
            ("store", "read from store files (pocketmq-store)", total, store_read, None),
            (
                "ceiling",
                "Spark's ceiling (prebuilt batches)",
                total - total % 32768,
                ceiling,
                ceiling_few,
            ),
            ("write", "write to a topic (SendBatch)", args.write, write, None),
        )
        for key, label, expected, action, few in paths:
            if key in only:
                for _ in range(max(args.warmup, 1)):
                    action()  # a path's first run pays its imports, channels, routes
                fixed = fixed_cost(label, few) if few is not None and args.fixed_cost else None
                timed(label, expected, action, args.repeat, server.pid, fixed)
        print(f"load average after: {os.getloadavg()[0]:.1f}")
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
