"""A process that writes to a store until it is killed (fault tests run it).

    python crashwriter.py DATA_DIR sync|async [pwrite|mmap]

Puts batches of 1..8 records spread over 4 queues, forever. After each put is
acknowledged (with sync flush: after its flush future says PUT_OK) it prints
``ACK <uniq key>`` for each record and flushes stdout, so the parent knows
exactly what was acknowledged when it sends SIGKILL.
"""

from __future__ import annotations

import random
import sys

from storekit import record, small_config

from pocketmq.broker.store import FlushDiskType, PutStatus
from pocketmq.broker.store.message_store import DefaultMessageStore


def main() -> None:
    data_dir, mode = sys.argv[1], sys.argv[2]
    write = sys.argv[3] if len(sys.argv) > 3 else "pwrite"
    flush = FlushDiskType.SYNC_FLUSH if mode == "sync" else FlushDiskType.ASYNC_FLUSH
    store = DefaultMessageStore(
        small_config(
            data_dir,
            flush_disk_type=flush,
            commitlog_file_size_bytes=256 * 1024,
            write_without_mmap=write == "pwrite",
        )
    )
    store.start()
    rng = random.Random(7)
    n = 0
    print("READY", flush=True)
    while True:
        uniqs = [f"U{n + i:08d}" for i in range(rng.randint(1, 8))]
        n += len(uniqs)
        blob = b"".join(
            record(
                body=rng.randbytes(rng.randint(1, 2000)),
                uniq=u,
                queue_id=int(u[1:]) % 4,
                keys=f"k{u}",
            )
            for u in uniqs
        )
        result = store.put_batch(blob)
        if not result.ok:
            print("FAIL", result.status, result.error, flush=True)
            continue
        if result.flush_future is not None and result.flush_future.result() is not PutStatus.PUT_OK:
            continue
        sys.stdout.write("".join(f"ACK {u}\n" for u in uniqs))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
