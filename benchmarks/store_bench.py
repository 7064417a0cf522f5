"""Message store throughput, against the raw speed of the same bytes into an mmap.

    .venv/bin/python benchmarks/store_bench.py [--count 200000] [--sizes 100,1024] [--both]

Prints, per body size: single put and batch put (async and sync flush) in
msgs/s and MB/s including dispatch to consume queue and index, read msgs/s,
the raw speed of writing the same records (with a CRC per record) into an
mmap from Python, the ratio of each to it, and anonymous memory before and
after (it must not grow with the data stored). The header says which write
path ran: the compiled accelerator or the pure-Python references
(``POCKETMQ_NO_SPEEDUPS=1`` forces those; ``--both`` runs again with it set).
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable

from benchkit import machine

from pocketmq.broker.store import FlushDiskType, GetStatus, StoreConfig, speedups
from pocketmq.broker.store.message_store import DefaultMessageStore
from pocketmq.common.message import encode_record, pack_host

BATCH = 256


def rss_anon_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return 0


def make_records(count: int, size: int) -> list[bytes]:
    body = os.urandom(size)
    host = pack_host(("10.0.0.1", 5000))
    return [
        encode_record(
            topic="bench",
            body=body,
            queue_id=i % 8,
            born_host=host,
            properties={"TAGS": "t", "UNIQ_KEY": f"{i:032X}"},
            born_timestamp_ms=1_700_000_000_000,
        )
        for i in range(count)
    ]


def timed(fn: Callable[[], int]) -> tuple[float, int]:
    start = time.perf_counter()
    n = fn()
    return time.perf_counter() - start, n


def raw_mmap(records: list[bytes], directory: str) -> float:
    total = sum(len(r) for r in records)
    path = os.path.join(directory, "raw")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.posix_fallocate(fd, 0, total)
    mm = mmap.mmap(fd, total)
    start = time.perf_counter()
    pos = 0
    crc32 = zlib.crc32
    for r in records:
        n = len(r)
        mm[pos : pos + n] = r
        crc32(memoryview(r)[88 : n - 40])
        pos += n
    elapsed = time.perf_counter() - start
    mm.close()
    os.close(fd)
    os.unlink(path)
    return elapsed


def open_store(directory: str, flush: FlushDiskType) -> DefaultMessageStore:
    shutil.rmtree(directory, ignore_errors=True)
    store = DefaultMessageStore(
        StoreConfig(
            data_dir=directory, flush_disk_type=flush, index_slots=500_000, index_entries=2_000_000
        )
    )
    store.start()
    return store


def single_put(store: DefaultMessageStore, records: list[bytes], sync: bool) -> int:
    put = store.put_batch
    if not sync:
        for r in records:
            put(r)
        return len(records)
    # 64 puts in flight, as 64 concurrent producers would have them
    pending = []
    for r in records:
        pending.append(put(r).flush_future)
        if len(pending) == 64:
            for f in pending:
                f.result()
            pending.clear()
    for f in pending:
        f.result()
    return len(records)


def batches(records: list[bytes]) -> list[bytes]:
    return [b"".join(records[i : i + BATCH]) for i in range(0, len(records), BATCH)]


def batch_put(store: DefaultMessageStore, blobs: list[bytes], sync: bool) -> int:
    futures = []
    stored = 0
    for blob in blobs:
        result = store.put_batch(blob)
        assert result.ok, result.error
        stored += len(result.phys_offsets)
        if sync:
            futures.append(result.flush_future)
    for f in futures:
        f.result()
    return stored


def read_all(store: DefaultMessageStore) -> int:
    n = 0
    for q in store.queue_ids("bench"):
        offset = 0
        while True:
            got = store.get_messages("bench", q, offset)
            if got.status is not GetStatus.FOUND:
                break
            n += len(got.records)
            offset = got.next_begin_offset
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--sizes", default="100,1024")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    parser.add_argument(
        "--both",
        action="store_true",
        help=f"then run again on the pure-Python path ({speedups.DISABLE_ENV}=1)",
    )
    args = parser.parse_args()
    base = args.dir or tempfile.mkdtemp(prefix="pocketmq-bench-")
    print(f"machine: {machine()}")
    native = f" ({speedups.NATIVE.__file__})" if speedups.NATIVE is not None else ""
    print(f"store write path: {speedups.IMPLEMENTATION}{native}")
    print(f"data: {base} · {args.count} messages per run · batch {BATCH}")
    anon_start = rss_anon_kib()
    for size in (int(s) for s in args.sizes.split(",")):
        records = make_records(args.count, size)
        mb = sum(len(r) for r in records) / 1e6
        blobs = batches(records)
        # best of three: the first touch of fresh memory in a VM is slow and varies 3x
        raw = min(raw_mmap(records, base) for _ in range(3))
        raw_rate = args.count / raw
        print(f"\n== body {size} B ({mb / args.count * 1e6:.0f} B per record)")
        print(f"  raw mmap write + crc32    {raw_rate:>11,.0f} msgs/s {mb / raw:>8.1f} MB/s")
        for flush in (FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH):
            sync = flush is FlushDiskType.SYNC_FLUSH
            for name, fn, data in (
                ("single put", single_put, records),
                ("batch put", batch_put, blobs),
            ):
                store = open_store(os.path.join(base, "store"), flush)
                anon_before = rss_anon_kib()
                elapsed, n = timed(lambda s=store, f=fn, d=data, y=sync: f(s, d, y))
                anon_after = rss_anon_kib()
                if name == "batch put" and not sync:
                    r_elapsed, r_n = timed(lambda s=store: read_all(s))
                    read_line = (
                        f"  read (get_messages)       {r_n / r_elapsed:>11,.0f} msgs/s "
                        f"{mb / r_elapsed:>8.1f} MB/s"
                    )
                store.shutdown()
                rate = n / elapsed
                print(
                    f"  {name:<10} {flush.value:<5} flush   {rate:>11,.0f} msgs/s "
                    f"{mb / elapsed:>8.1f} MB/s  {rate / raw_rate:6.1%} of raw  "
                    f"anon +{(anon_after - anon_before) / 1024:.1f} MiB"
                )
        print(read_line)
        del records, blobs
    print(
        f"\nanonymous memory: {anon_start / 1024:.1f} MiB at start, "
        f"{rss_anon_kib() / 1024:.1f} MiB at end"
    )
    if not args.dir:
        shutil.rmtree(base, ignore_errors=True)
    if args.both and speedups.IMPLEMENTATION != "python":
        print(flush=True)
        rest = [a for a in sys.argv[1:] if a != "--both"]
        env = {**os.environ, speedups.DISABLE_ENV: "1"}
        subprocess.run([sys.executable, __file__, *rest], env=env, check=True)


if __name__ == "__main__":
    main()
