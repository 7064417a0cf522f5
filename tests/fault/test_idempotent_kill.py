"""kill -9 of the broker process between append and answer: the idempotent producer's
retry, sent to the restarted broker, is stored once (issue 22).

The producer reaches the broker through a PartitionProxy that drops the broker's
answers: the record is appended (synchronous flush), its answer never arrives,
the broker is killed, restarted on the same port and data directory (recovery
rebuilds the producer state from the commit log), the proxy heals, and the
producer, still retrying the same record, is answered with the original offset.
"""

from __future__ import annotations

import asyncio
import signal

import pytest
from faultkit import create_topic, read_queue, routed_brokers, wait_for
from partition_proxy import PartitionProxy
from processkit import ProcessKit, free_port

from pocketmq.client import Message, Producer

pytestmark = pytest.mark.timeout(90)

TOPIC, QUEUES = "TopicIdemKill", 2


async def bodies(broker_addr: str) -> list[list[bytes]]:
    return [[m.body for m in await read_queue(broker_addr, TOPIC, q)] for q in range(QUEUES)]


async def test_a_send_whose_answer_died_with_the_broker_is_stored_once_after_restart(
    kit: ProcessKit,
) -> None:
    namesrv = await kit.nameserver()
    port = free_port()
    options = {"flush_disk_type": "sync", "port": port}
    broker = await kit.broker("broker-a", namesrv=namesrv.addr, **options)
    await create_topic(broker.addr, TOPIC, QUEUES)
    await wait_for(
        lambda: routed_brokers(namesrv.addr, TOPIC), timeout_s=20, what=f"the route of {TOPIC}"
    )
    data_dir = kit.work_dir / "broker-a"
    async with (
        PartitionProxy("127.0.0.1", port) as proxy,
        Producer(
            group="idem-kill",
            namesrv=namesrv.addr,
            idempotent=True,
            request_timeout_ms=500,
            send_timeout_ms=60_000,
        ) as producer,
    ):
        routes = producer._routes
        assert routes is not None
        await producer.fetch_publish_queues(TOPIC)
        routes.addr_of = lambda name: proxy.addr  # type: ignore[method-assign]
        # through the proxy while it still answers: the connection and the session
        await producer.send(Message(topic=TOPIC, body=b"warm-up"))
        proxy.drop_answers()
        send = asyncio.create_task(producer.send(Message(topic=TOPIC, body=b"once")))
        await wait_for(
            lambda: _has(broker.addr, b"once"),
            timeout_s=20,
            what="the record appended while its answer is dropped",
        )
        assert not send.done()
        broker.signal(signal.SIGKILL)
        await broker.proc.wait()
        restarted = await kit.broker("broker-a", namesrv=namesrv.addr, data_dir=data_dir, **options)
        assert "ABNORMAL" in restarted.log_text(), "the restart did not see a crash"
        proxy.heal()
        result = await asyncio.wait_for(send, 60)
    stored = await bodies(restarted.addr)
    assert sorted(b for q in stored for b in q) == [b"once", b"warm-up"]
    assert stored[result.queue.queue_id][result.queue_offset] == b"once"
    assert await restarted.stop() == 0


async def _has(broker_addr: str, body: bytes) -> bool:
    return any(body in q for q in await bodies(broker_addr))
