"""kill -9 of a broker while batches wait on its SendStream: the pending sends fail with
the retriable error a unary call gets (UNAVAILABLE), the producer's retry delivers them
once the broker is back on its port and data (an idempotent producer retries a send of
unknown outcome on its queue) or to the other broker, and none is lost or doubled (read
back by pulling from both brokers)."""

from __future__ import annotations

import asyncio
import signal

import pytest
from faultkit import create_topic, read_queue, routed_brokers, wait_for
from processkit import ProcessKit, free_port

from pocketmq.client import Message, Producer, SendStatus

pytestmark = pytest.mark.timeout(120)

TOPIC, QUEUES = "TopicStreamKill", 2
TASKS, BATCHES, PER_BATCH = 8, 30, 16


async def test_sends_pending_on_a_killed_brokers_stream_are_retried_and_none_is_lost(
    kit: ProcessKit,
) -> None:
    namesrv = await kit.nameserver()
    options = {"flush_disk_type": "sync"}
    a_port = free_port()
    brokers = [
        await kit.broker("a", namesrv=namesrv.addr, port=a_port, **options),
        await kit.broker("b", namesrv=namesrv.addr, **options),
    ]
    for broker in brokers:
        await create_topic(broker.addr, TOPIC, QUEUES)

    async def on_both() -> bool:
        return len(await routed_brokers(namesrv.addr, TOPIC)) == 2

    await wait_for(
        on_both,
        timeout_s=20,
        what=f"the route of {TOPIC} on both brokers",
    )
    acked: list[int] = []
    async with Producer(
        group="stream-kill",
        namesrv=namesrv.addr,
        send_timeout_ms=30_000,
        retry_times_when_send_failed=8,
    ) as producer:

        async def sender(n: int) -> None:
            for i in range(BATCHES):
                batch = [
                    Message(topic=TOPIC, body=b"%d-%d-%d" % (n, i, j)) for j in range(PER_BATCH)
                ]
                results = await producer.send_batch(batch)
                assert {r.status for r in results} == {SendStatus.SEND_OK}
                acked.append(len(results))

        senders = asyncio.gather(*(sender(n) for n in range(TASKS)))
        await wait_for(lambda: len(acked) >= TASKS * 3, timeout_s=40, what="the first batches")
        remoting = producer._remoting  # its batches go over the stream (signed ones too)
        assert remoting is not None
        sender = remoting.broker(brokers[0].addr)._stream
        assert sender is not None and sender._current is not None  # open, with sends on it
        brokers[0].signal(signal.SIGKILL)
        await brokers[0].proc.wait()
        restarted = await kit.broker(
            "a", namesrv=namesrv.addr, port=a_port, data_dir=kit.work_dir / "a", **options
        )
        await asyncio.wait_for(senders, 90)
    stored: list[bytes] = []
    for addr in (restarted.addr, brokers[1].addr):
        for queue_id in range(QUEUES):
            stored.extend(m.body for m in await read_queue(addr, TOPIC, queue_id))
    sent = {
        b"%d-%d-%d" % (n, i, j)
        for n in range(TASKS)
        for i in range(BATCHES)
        for j in range(PER_BATCH)
    }
    assert sum(acked) == len(sent)
    assert sent <= set(stored), f"{len(sent - set(stored))} acknowledged messages are missing"
    assert len(stored) == len(sent), "a retried batch was stored twice"
    assert await restarted.stop() == 0
