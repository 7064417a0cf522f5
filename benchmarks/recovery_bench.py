"""How long a store with ~1 GiB of data takes to start again.

    .venv/bin/python benchmarks/recovery_bench.py [--gib 1.0] [--body 1024]

Writes the data once (batch puts, 8 queues, a unique key per message), then
times four starts: after a clean shutdown; after a crash (no shutdown: the
checkpoint is up to one flush round old); after a crash with the checkpoint
deleted (the whole log is verified, every CRC); and after deleting the index
(it is rebuilt from the log). Prints the RecoveryReport of each.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "support"))

from storekit import crash

from pocketmq.broker.store import StoreConfig
from pocketmq.broker.store.message_store import DefaultMessageStore
from pocketmq.common.message import encode_record, pack_host


def config(path: str) -> StoreConfig:
    return StoreConfig(data_dir=path, index_slots=500_000, index_entries=2_000_000)


def fill(path: str, gib: float, body_size: int) -> int:
    store = DefaultMessageStore(config(path))
    store.start()
    body = os.urandom(body_size)
    host = pack_host(("10.0.0.1", 5000))
    target = int(gib * (1 << 30))
    n = 0
    started = time.perf_counter()
    while store.commitlog.max_offset < target:
        blob = b"".join(
            encode_record(
                topic="bench",
                body=body,
                queue_id=(n + i) % 8,
                born_host=host,
                properties={"UNIQ_KEY": f"{n + i:032X}"},
            )
            for i in range(256)
        )
        assert store.put_batch(blob).ok
        n += 256
    print(
        f"wrote {n:,} messages, {store.commitlog.max_offset / 2**30:.2f} GiB in "
        f"{time.perf_counter() - started:.1f} s"
    )
    store.shutdown()
    return n


def timed_start(path: str, label: str, *, then_crash: bool = False) -> None:
    store = DefaultMessageStore(config(path))
    started = time.perf_counter()
    report = store.start()
    elapsed = time.perf_counter() - started
    print(
        f"{label:<38} {elapsed:7.2f} s  verified from {report.scanned_from:,}, "
        f"re-dispatched {report.redispatched:,}, truncated {report.truncated_bytes}"
    )
    if then_crash:
        crash(store)
    else:
        store.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--body", type=int, default=1024)
    args = parser.parse_args()
    path = tempfile.mkdtemp(prefix="pocketmq-recovery-")
    try:
        fill(path, args.gib, args.body)
        timed_start(path, "start after clean shutdown", then_crash=True)
        timed_start(path, "start after a crash")
        store = DefaultMessageStore(config(path))
        store.start()
        crash(store)
        os.unlink(os.path.join(path, "checkpoint"))
        timed_start(path, "start after a crash, no checkpoint")
        shutil.rmtree(os.path.join(path, "index"))
        timed_start(path, "start with the index deleted")
    finally:
        shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
