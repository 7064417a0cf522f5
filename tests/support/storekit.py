"""Helpers shared by store tests: small configs, record factories, crash simulation."""

from __future__ import annotations

import os
import random

from pocketmq.broker.store import RecoveryReport, StoreConfig
from pocketmq.broker.store.message_store import DefaultMessageStore
from pocketmq.broker.store.replica_frames import records_end
from pocketmq.common.clock import Clock
from pocketmq.common.message import decode_record, encode_record, pack_host

SMALL = dict(
    commitlog_file_size_bytes=64 * 1024,
    max_message_size_bytes=16 * 1024,
    max_batch_size_bytes=48 * 1024,
    consume_queue_units_per_file=50,
    index_slots=64,
    index_entries=256,
)


def small_config(data_dir: str | os.PathLike[str], **overrides: object) -> StoreConfig:
    return StoreConfig(data_dir=str(data_dir), **{**SMALL, **overrides})  # type: ignore[arg-type]


def record(
    topic: str = "orders",
    body: bytes = b"hello",
    queue_id: int = 0,
    *,
    tags: str = "",
    keys: str = "",
    uniq: str = "",
    delay: int | None = None,
    sysflag: int = 0,
    flag: int = 0,
    born_timestamp_ms: int = 1_700_000_000_000,
    born_host: tuple[str, int] = ("10.0.0.9", 4321),
    store_host: tuple[str, int] | None = None,
    reconsume_times: int = 0,
    **properties: str,
) -> bytes:
    """One record as a client encodes it, the same bytes every run.

    Its properties: TAGS, KEYS, UNIQ_KEY and DELAY (a delay level) when given,
    then *properties* as named (``TIMER_DELAY_MS="500"``); an empty value is
    left out, so a caller can drop one a ``functools.partial`` set.
    """
    given = {"TAGS": tags, "KEYS": keys, "UNIQ_KEY": uniq}
    if delay is not None:
        given["DELAY"] = str(delay)
    return encode_record(
        topic=topic,
        body=body,
        queue_id=queue_id,
        properties={k: v for k, v in {**given, **properties}.items() if v},
        sysflag=sysflag,
        flag=flag,
        born_timestamp_ms=born_timestamp_ms,
        born_host=pack_host(born_host),
        **({} if store_host is None else {"store_host": pack_host(store_host)}),
        reconsume_times=reconsume_times,
    )


def bodies(records: list[bytes]) -> list[bytes]:
    return [decode_record(r).body for r in records]


def open_store(
    config: StoreConfig, *, clock: Clock | None = None, io: object | None = None
) -> DefaultMessageStore:
    store = DefaultMessageStore(config, clock=clock, io=io)  # type: ignore[arg-type]
    store.start()
    return store


def start_store(config: StoreConfig, **kw: object) -> tuple[DefaultMessageStore, RecoveryReport]:
    store = DefaultMessageStore(config, **kw)  # type: ignore[arg-type]
    return store, store.start()


def crash(store: DefaultMessageStore) -> None:
    """Drop the store as kill -9 would: no flush, no checkpoint, ``abort`` left behind.

    What was written into the mappings stays in the page cache, as it does when
    a process is killed; only the process-side state is thrown away.
    """
    for service in store.services.threads:
        service._stopped = True
        service.wakeup()
    store.services.threads.clear()
    store.health.running = False
    store.commitlog.queue.close()
    store.consume_queues.close()
    store.index.close()
    store.dirs.release_lock()


def replica_frames(store: DefaultMessageStore, seed: int, count: int) -> list[tuple[int, bytes]]:
    """(offset, records) of frames a master would send from random record boundaries of
    *store*'s log, fillers cut off."""
    rng = random.Random(seed)
    starts = [
        rec.phys_offset for rec in store.commitlog.scan(store.commitlog.min_offset, check_crc=False)
    ]
    out = []
    for _ in range(count):
        offset = rng.choice(starts)
        data = store.read_for_replica(offset, rng.choice([1500, 9000, 40000]))
        end = records_end(data, len(data) > 0)
        if end:
            out.append((offset, data[:end]))
    return out
