"""Spark figures: rows/s read from a broker, from store files, and written to a topic.

    .venv/bin/python benchmarks/spark_bench.py [--messages 1000000] [--write 200000]

Starts ``pocketmq standalone`` in a temporary directory, fills topic ``bench``
(8 queues) with 1 KiB messages through SendBatch, then in Spark ``local[2]``:
a batch read of the topic through the brokers (``format("pocketmq")``), the
same read from the commit-log files (``format("pocketmq-store")``), and a
write of ``--write`` rows (``df.write.format("pocketmq")``). Each read
materializes every column (a sum over the body lengths). Not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

import grpc

sys.path.insert(0, os.path.dirname(__file__))
from benchkit import standalone
from broker_bench import records

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

        await asyncio.gather(*(one() for _ in range(total // BATCH)))


def timed(label: str, rows_expected: int, action) -> None:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    rows = action()
    elapsed = time.perf_counter() - started
    print(f"  {label:<38} {rows:>10,} rows in {elapsed:6.2f} s = {rows / elapsed:>10,.0f} rows/s"
          + ("" if rows == rows_expected else f"  (expected {rows_expected:,})"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--write", type=int, default=200_000)
    args = parser.parse_args()
    total = args.messages - args.messages % BATCH
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with standalone("pocketmq-spark-bench-") as server:
        print(f"filling topic bench with {total:,} messages of 1 KiB ...")
        asyncio.run(fill(server.broker_port, total))
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F

        from pocketmq.spark import register

        spark = (SparkSession.builder.master("local[2]").appName("pocketmq-bench")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "4").getOrCreate())
        spark.sparkContext.setLogLevel("WARN")
        register(spark)
        namesrv, data_dir = server.namesrv, server.data_dir

        def broker_read() -> int:
            df = (spark.read.format("pocketmq").option("namesrv", namesrv)
                  .option("subscribe", "bench").load())
            row = df.agg(F.count("*").alias("n"), F.sum(F.length("body")).alias("b")).first()
            return int(row.n)

        def store_read() -> int:
            df = spark.read.format("pocketmq-store").option("subscribe", "bench").load(data_dir)
            row = df.agg(F.count("*").alias("n"), F.sum(F.length("body")).alias("b")).first()
            return int(row.n)

        def write() -> int:
            df = (spark.range(args.write).select(
                F.expr("repeat('x', 1024)").alias("body")).repartition(2))
            (df.write.format("pocketmq").option("namesrv", namesrv)
             .option("topic", "bench-write").mode("append").save())
            return args.write

        print(f"machine: {os.cpu_count()} cpu; Spark local[2]")
        broker_read()                                    # warm up the Python workers
        timed("read from the broker (PullMessage)", total, broker_read)
        timed("read from store files (pocketmq-store)", total, store_read)
        timed("write to a topic (SendBatch)", args.write, write)
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
