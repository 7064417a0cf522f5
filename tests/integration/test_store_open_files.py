"""A store with more consume queues than max_open_consume_queue_files: bounded
descriptors and mappings, every queue readable, crash recovery with unmapped queues."""

from __future__ import annotations

import os

from storekit import bodies, crash, open_store, record, small_config, start_store

from pocketmq.broker.store.message_store import DefaultMessageStore

TOPICS, QUEUES_PER_TOPIC = 250, 8  # 2,000 queues
BOUND = 100
SLACK = 4  # beyond the bound: a queue that rolled to a new segment since its last count


def config(tmp_path, **overrides):
    return small_config(
        tmp_path / "data",
        commitlog_file_size_bytes=4 * 1024 * 1024,
        max_batch_size_bytes=1024 * 1024,
        consume_queue_units_per_file=1000,
        max_open_consume_queue_files=BOUND,
        flush_interval_consume_queue_ms=3_600_000,
        **overrides,
    )


def cq_fds_and_mappings(store: DefaultMessageStore) -> tuple[int, int]:
    root = store.dirs.consumequeue + os.sep
    fds = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            fds += os.readlink(f"/proc/self/fd/{name}").startswith(root)
        except OSError:
            continue
    with open("/proc/self/maps") as f:
        maps = sum(1 for line in f if root in line)
    return fds, maps


def put_round(store: DefaultMessageStore, round_no: int) -> None:
    for t in range(TOPICS):
        blob = b"".join(
            record(topic=f"t{t}", queue_id=q, body=f"{t}/{q}/{round_no}".encode())
            for q in range(QUEUES_PER_TOPIC)
        )
        assert store.put_batch(blob).status.name == "PUT_OK"


def assert_every_queue_holds(store: DefaultMessageStore, rounds: int) -> None:
    for t in range(TOPICS):
        for q in range(QUEUES_PER_TOPIC):
            got = store.get_messages(f"t{t}", q, 0)
            assert bodies(got.records) == [f"{t}/{q}/{r}".encode() for r in range(rounds)], (t, q)
        if t % 25 == 0:
            fds, maps = cq_fds_and_mappings(store)
            assert fds <= BOUND + SLACK and maps <= BOUND + SLACK, (fds, maps)


def test_two_thousand_queues_under_a_bound_of_100_stay_readable_with_bounded_files(tmp_path):
    store = open_store(config(tmp_path))
    put_round(store, 0)
    put_round(store, 1)
    fds, maps = cq_fds_and_mappings(store)
    print(
        f"\n2,000 queues with messages, bound {BOUND}: {fds} open files, {maps} mappings "
        f"under consumequeue/; {store.consume_queues.evictions} unmaps"
    )
    assert fds <= BOUND + SLACK and maps <= BOUND + SLACK
    assert store.consume_queues.evictions >= 2_000 - BOUND
    assert_every_queue_holds(store, 2)
    store.shutdown()
    again = open_store(config(tmp_path))
    assert_every_queue_holds(again, 2)
    again.shutdown()


def test_a_crash_with_unmapped_unsynced_queues_recovers_every_message(tmp_path):
    store = open_store(config(tmp_path))
    put_round(store, 0)
    store.flush_round()  # round 0 is durable and checkpointed
    put_round(store, 1)  # round 1 only in the page cache, most queues unmapped
    crash(store)
    recovered, _report = start_store(config(tmp_path))
    fds, maps = cq_fds_and_mappings(recovered)
    assert fds <= BOUND + SLACK and maps <= BOUND + SLACK, (fds, maps)
    assert_every_queue_holds(recovered, 2)
    put_round(recovered, 2)
    crash(recovered)
    third, _report = start_store(config(tmp_path))
    assert_every_queue_holds(third, 3)
    third.shutdown()
