"""Where the CPU of a Spark read goes, per row: the JVM's compilers, its generated code,
the Python workers, the codec, gRPC, the broker (``perf``, sampled; Linux only).

    .venv/bin/python benchmarks/spark_profile.py [--messages 300000] [--only ceiling,store,broker]

Fills topic ``bench`` of a ``pocketmq standalone`` as ``spark_bench.py`` does, warms
each path up twice (the JIT), then reads it three times under ``perf record -p`` of
every process of the run (the Spark JVM, its Python workers, the broker) and prints
the samples, as CPU microseconds per row, by thread kind and code::

    ceiling  1.66 us/row  JVM JIT compilers (C1/C2)
             1.32 us/row  JVM executor threads: generated code
             ...

The ceiling is ``spark_bench.py``'s: a Python data source yielding one prebuilt
Arrow batch, no I/O, no decoding. What a path costs above it is the connector's;
what the ceiling costs is Spark's. ``perf`` must be installed and allowed to
attach (root, or ``kernel.perf_event_paranoid`` <= 1). Not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import spark_bench as sb
from benchkit import standalone

SAMPLE_HZ = 499  # perf samples per second of each thread's CPU
RUNS = 3


def category(comm: str, dso: str) -> str:
    """The bucket of one ``perf report --sort comm,dso`` line."""
    if "Compiler" in comm:
        return "JVM JIT compilers (C1/C2)"
    if comm.startswith(("Executor task", "Thread-", "ResultQuery", "shuffle", "dag-")):
        code = "generated code" if "JIT" in dso else "kernel" if "kernel" in dso else "libjvm"
        return f"JVM executor threads: {code}"
    if "GC" in comm:
        return "JVM GC"
    if comm in ("python", "event_engine"):
        if "arrowcodec" in dso:
            return "Python processes: the Arrow codec (C)"
        if "grpc" in dso or comm == "event_engine":
            return "Python processes: gRPC"
        if "kernel" in dso:
            return "Python processes: kernel (sockets, page faults)"
        return "Python processes: interpreter, libc, pyarrow"
    return "JVM, other threads"


def summarize(data: str, rows: int, cpu_s: float) -> list[tuple[float, str]]:
    """(us per row, bucket), largest first: the *cpu_s* seconds that *rows* rows cost
    (``/proc``, exact) split as the samples of ``perf.data`` are (attaching to every
    thread takes perf a moment: its first samples may be missing, its shares stand)."""
    out = subprocess.run(
        ["perf", "report", "-i", data, "--no-children", "--sort", "comm,dso", "-g", "none"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    buckets = dict[str, float]()
    for line in out.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+(.{16})\s+(\S.*?)\s*$", line)
        if m:
            key = category(m.group(2).strip(), m.group(3))
            buckets[key] = buckets.get(key, 0.0) + float(m.group(1))
    per_row = cpu_s / max(rows, 1) * 1e6 / max(sum(buckets.values()), 1e-9)
    return sorted(((pct * per_row, key) for key, pct in buckets.items()), reverse=True)


def cpu_seconds(pids: list[int]) -> float:
    """CPU seconds used so far by *pids* together (those still running)."""
    total = 0.0
    for pid in pids:
        try:
            total += sb.cpu_seconds(pid)
        except OSError:
            continue
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--only", default="ceiling,store,broker")
    args = parser.parse_args()
    total = args.messages - args.messages % sb.BATCH
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with standalone("pocketmq-spark-profile-") as server, tempfile.TemporaryDirectory() as tmp:
        asyncio.run(sb.fill(server.broker_port, total))
        from pyspark.sql import SparkSession

        from pocketmq.spark import register

        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        spark.dataSource.register(sb.ceiling_source(total))
        reads = {
            "ceiling": lambda: spark.read.format("pocketmq-bench-ceiling").load(),
            "store": lambda: (
                spark.read.format("pocketmq-store")
                .option("subscribe", "bench")
                .load(server.data_dir)
            ),
            "broker": lambda: (
                spark.read.format("pocketmq")
                .option("namesrv", server.namesrv)
                .option("subscribe", "bench")
                .load()
            ),
        }
        for name in args.only.split(","):
            for _ in range(2):  # warm-up: imports, channels, the JIT
                sb.materialize(reads[name]())
            pids = [pid for pid, _ in sb.spark_cpu_seconds(server.pid)] + [server.pid]
            data = os.path.join(tmp, f"{name}.data")
            attach = ",".join(map(str, pids))
            perf = subprocess.Popen(
                ["perf", "record", "-F", str(SAMPLE_HZ), "-o", data, "-p", attach],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(1.0)  # let perf attach to every thread before the runs
            used = cpu_seconds(pids)
            rows = sum(sb.materialize(reads[name]()) for _ in range(RUNS))
            used = cpu_seconds(pids) - used
            perf.send_signal(signal.SIGINT)
            perf.wait()
            buckets = summarize(data, rows, used)
            print(f"{name}: {rows:,} rows, {sum(us for us, _ in buckets):.2f} us of CPU per row")
            for us, key in buckets:
                print(f"  {us:5.2f} us/row  {key}")
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
