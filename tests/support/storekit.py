"""Helpers shared by store tests: small configs, record factories, crash simulation."""

from __future__ import annotations

import os

from pocketmq.broker.store import RecoveryReport, StoreConfig
from pocketmq.broker.store.message_store import DefaultMessageStore
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
    sysflag: int = 0,
    born_timestamp_ms: int = 1_700_000_000_000,
) -> bytes:
    props = {}
    if tags:
        props["TAGS"] = tags
    if keys:
        props["KEYS"] = keys
    if uniq:
        props["UNIQ_KEY"] = uniq
    return encode_record(
        topic=topic,
        body=body,
        queue_id=queue_id,
        properties=props,
        sysflag=sysflag,
        born_timestamp_ms=born_timestamp_ms,
        born_host=pack_host(("10.0.0.9", 4321)),
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
    for service in store._services:
        service._stopped = True
        service.wakeup()
    store._services.clear()
    store.health.running = False
    store.commitlog.queue.close()
    store.consume_queues.close()
    store.index.close()
    store.dirs.release_lock()
