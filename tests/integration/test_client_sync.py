"""The blocking facade (pocketmq.client.sync) against a real two-broker cluster.

The cluster runs on the test's event loop, so the blocking code runs in a
worker thread, as it would in a script that is not asyncio at all.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from clusterkit import QUEUES, create_topic
from waitkit import eventually_sync

from pocketmq.client import (
    ClientStateError,
    ConsumeResult,
    LocalTransactionState,
    Message,
    MessageExt,
    MessageSelector,
    SendStatus,
)
from pocketmq.client.sync import (
    SyncProducer,
    SyncPullConsumer,
    SyncPushConsumer,
    SyncTransactionProducer,
)


async def test_sync_producer_and_pull_consumer_round_trip_every_message(cluster, eventually):
    await create_topic(cluster, "sync-rt", eventually)

    def script() -> tuple[list, list[MessageExt]]:
        with SyncProducer(group="pg", namesrv=cluster.addr) as producer:
            results = [producer.send(Message(topic="sync-rt", body=b"m%d" % i)) for i in range(20)]
            results += producer.send_batch(
                [Message(topic="sync-rt", body=b"b%d" % i) for i in range(10)]
            )
        got: list[MessageExt] = []
        consumer = SyncPullConsumer(group="cg", namesrv=cluster.addr, consume_from="first")
        consumer.subscribe("sync-rt")
        with consumer:
            deadline = time.monotonic() + 20
            while len(got) < 30 and time.monotonic() < deadline:
                got += consumer.poll(timeout_s=1)
            consumer.commit()
        return results, got

    results, got = await asyncio.to_thread(script)
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert sorted(m.body for m in got) == sorted(
        [b"m%d" % i for i in range(20)] + [b"b%d" % i for i in range(10)]
    )


async def test_sync_pull_consumer_with_an_sql_selector_polls_only_the_matches(cluster, eventually):
    await create_topic(cluster, "sync-sql", eventually)

    def script() -> list[bytes]:
        with SyncProducer(group="pg", namesrv=cluster.addr) as producer:
            for i in range(30):
                producer.send(Message(topic="sync-sql", body=b"m%d" % i, properties={"n": str(i)}))
        got: list[bytes] = []
        consumer = SyncPullConsumer(group="cg-sql", namesrv=cluster.addr, consume_from="first")
        consumer.subscribe("sync-sql", MessageSelector.by_sql("n >= 25 OR n = 3"))
        with consumer:
            deadline = time.monotonic() + 20
            while len(got) < 6 and time.monotonic() < deadline:
                got += [m.body for m in consumer.poll(timeout_s=1)]
            got += [m.body for m in consumer.poll(timeout_s=1)]  # nothing else may come
        return got

    got = await asyncio.to_thread(script)
    assert sorted(got) == sorted([b"m3"] + [b"m%d" % i for i in range(25, 30)])


async def test_sync_producer_is_shared_safely_by_many_threads(cluster, eventually):
    await create_topic(cluster, "sync-threads", eventually)

    def script() -> list:
        results: list = []
        lock = threading.Lock()
        with SyncProducer(group="pg", namesrv=cluster.addr) as producer:

            def worker(n: int) -> None:
                for i in range(25):
                    r = producer.send(Message(topic="sync-threads", body=b"%d-%d" % (n, i)))
                    with lock:
                        results.append(r)

            threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        return results

    results = await asyncio.to_thread(script)
    assert len(results) == 200
    assert len({r.msg_id for r in results}) == 200
    assert len({r.queue for r in results}) == 2 * QUEUES


async def test_sync_push_consumer_runs_a_blocking_listener_on_worker_threads(cluster, eventually):
    await create_topic(cluster, "sync-push", eventually)
    seen: list[bytes] = []
    threads: set[str] = set()
    lock = threading.Lock()

    def script() -> None:
        consumer = SyncPushConsumer(
            group="cg-push", namesrv=cluster.addr, consume_from="first", consume_threads=4
        )
        consumer.subscribe("sync-push")

        @consumer.listener
        def handle(messages: list[MessageExt]) -> ConsumeResult:
            time.sleep(0.01)  # blocking work is fine here
            with lock:
                seen.extend(m.body for m in messages)
                threads.add(threading.current_thread().name)
            return ConsumeResult.CONSUME_SUCCESS

        with consumer:
            consumer.start()
            with SyncProducer(group="pg", namesrv=cluster.addr) as producer:
                for i in range(40):
                    producer.send(Message(topic="sync-push", body=b"p%d" % i))
            eventually_sync(
                lambda: consumer.consumed >= 40, timeout_s=20, what="40 messages consumed"
            )

    await asyncio.to_thread(script)
    assert sorted(seen) == sorted(b"p%d" % i for i in range(40))
    assert all(name.startswith("pocketmq-consume-cg-push") for name in threads)


async def test_sync_transaction_producer_commits_what_the_local_transaction_commits(
    cluster, eventually
):
    await create_topic(cluster, "sync-tx", eventually)

    def script() -> tuple[list, list[MessageExt]]:
        states = []
        with SyncTransactionProducer(
            "txg", cluster.addr, checker=lambda msg: LocalTransactionState.ROLLBACK
        ) as producer:
            for i in range(4):
                decision = (
                    LocalTransactionState.COMMIT if i % 2 == 0 else LocalTransactionState.ROLLBACK
                )
                result = producer.send_in_transaction(
                    Message(topic="sync-tx", body=b"t%d" % i),
                    lambda msg, arg, decision=decision: decision,
                )
                states.append(result.local_state)
        got: list[MessageExt] = []
        consumer = SyncPullConsumer(group="cg-tx", namesrv=cluster.addr, consume_from="first")
        consumer.subscribe("sync-tx")
        with consumer:
            deadline = time.monotonic() + 5
            while len(got) < 2 and time.monotonic() < deadline:
                got += consumer.poll(timeout_s=0.5)
            got += consumer.poll(timeout_s=0.5)  # nothing more may arrive
        return states, got

    states, got = await asyncio.to_thread(script)
    assert states == [LocalTransactionState.COMMIT, LocalTransactionState.ROLLBACK] * 2
    assert sorted(m.body for m in got) == [b"t0", b"t2"]


async def test_sync_facade_errors_are_the_asyncio_clients_own(cluster):
    def script() -> None:
        producer = SyncProducer(group="pg", namesrv=cluster.addr, start=False)
        try:
            with pytest.raises(ClientStateError, match="start"):
                producer.send(Message(topic="t", body=b"x"))
        finally:
            producer.shutdown()
            producer.shutdown()  # twice is fine

    await asyncio.to_thread(script)
