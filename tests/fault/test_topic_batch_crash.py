"""kill -9 of a broker in the middle of batch creates and deletes; a torn topics.log tail.

Each CreateTopics / DeleteTopics call is one record of topics.log: after the
crash and a restart on the same directory, every batch is all there or all
absent, and every batch that was answered is there.
"""

from __future__ import annotations

import asyncio
import contextlib

import grpc
import pytest
from processkit import ProcessKit

from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc, common_pb2

pytestmark = pytest.mark.timeout(180)

BATCHES = 24
PER_BATCH = 2_000
OPTIONS = dict(max_queues_total=1_000_000)


def batch(prefix: str) -> pb.CreateTopicsRequest:
    return pb.CreateTopicsRequest(
        topic_configs=[
            common_pb2.TopicConfig(
                topic_name=f"{prefix}_{i:05d}", read_queue_nums=8, write_queue_nums=8, perm=6
            )
            for i in range(PER_BATCH)
        ]
    )


async def topic_names(addr: str) -> set[str]:
    async with grpc.aio.insecure_channel(addr) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        reply = await stub.GetAllTopicConfig(pb.GetAllTopicConfigRequest())
        return {tc.topic_name for tc in reply.topic_configs}


def counts_by_prefix(names: set[str], prefixes: list[str]) -> dict[str, int]:
    out = dict.fromkeys(prefixes, 0)
    for name in names:
        prefix = name.rsplit("_", 1)[0]
        if prefix in out:
            out[prefix] += 1
    return out


async def fire_and_kill(broker, calls) -> set[int]:
    """Run *calls* concurrently; SIGKILL the broker once the first is answered. Returns
    the indexes answered before the kill."""
    answered: set[int] = set()
    first = asyncio.Event()

    async def one(i, call):
        with contextlib.suppress(grpc.aio.AioRpcError):
            await call
            answered.add(i)
            first.set()

    tasks = [asyncio.create_task(one(i, c)) for i, c in enumerate(calls)]
    await asyncio.wait_for(first.wait(), 60)
    snapshot = set(answered)
    await broker.kill()  # SIGKILL, by PID
    await asyncio.gather(*tasks)
    return snapshot


async def test_kill_during_batch_creates_leaves_each_batch_whole_or_absent(tmp_path):
    kit = ProcessKit(tmp_path)
    data_dir = tmp_path / "broker"
    try:
        broker = await kit.broker("broker-a", data_dir=data_dir, **OPTIONS)
        prefixes = [f"B{n:02d}" for n in range(BATCHES)]
        async with grpc.aio.insecure_channel(broker.addr) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            answered = await fire_and_kill(
                broker, [stub.CreateTopics(batch(p), timeout=60) for p in prefixes]
            )
        broker = await kit.broker("broker-a", data_dir=data_dir, **OPTIONS)
        counts = counts_by_prefix(await topic_names(broker.addr), prefixes)
        assert set(counts.values()) <= {0, PER_BATCH}, counts
        assert all(counts[prefixes[i]] == PER_BATCH for i in answered)
        assert sum(1 for c in counts.values() if c) > 0, counts

        kept = [p for p in prefixes if counts[p]]
        async with grpc.aio.insecure_channel(broker.addr) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            deletes = [
                stub.DeleteTopics(
                    pb.DeleteTopicsRequest(topics=[f"{p}_{i:05d}" for i in range(PER_BATCH)]),
                    timeout=60,
                )
                for p in kept
            ]
            answered = await fire_and_kill(broker, deletes)
        broker = await kit.broker("broker-a", data_dir=data_dir, **OPTIONS)
        counts = counts_by_prefix(await topic_names(broker.addr), kept)
        assert set(counts.values()) <= {0, PER_BATCH}, counts
        assert all(counts[kept[i]] == 0 for i in answered)
        assert await broker.stop() == 0
    finally:
        await kit.close()


async def test_a_torn_topics_log_tail_is_cut_and_reported_at_start(tmp_path):
    kit = ProcessKit(tmp_path)
    data_dir = tmp_path / "broker"
    try:
        broker = await kit.broker("broker-a", data_dir=data_dir, **OPTIONS)
        async with grpc.aio.insecure_channel(broker.addr) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            await stub.CreateTopics(batch("Whole"))
            await stub.CreateTopics(batch("Torn"))
        await broker.kill()
        log_path = data_dir / "config" / "topics.log"
        size = log_path.stat().st_size
        with open(log_path, "r+b") as f:
            f.truncate(size - 100)  # the last batch's record, torn
        broker = await kit.broker("broker-a", data_dir=data_dir, **OPTIONS)
        names = await topic_names(broker.addr)
        assert sum(n.startswith("Whole_") for n in names) == PER_BATCH
        assert not any(n.startswith("Torn_") for n in names)
        assert "topics.log: cut" in broker.log_text()
        assert await broker.stop() == 0
    finally:
        await kit.close()
