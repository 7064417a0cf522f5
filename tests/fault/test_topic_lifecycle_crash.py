"""kill -9 during and right after topic and offset administration, on real broker processes.

After each crash the broker restarts on the same directory; what the admin
request changed is there exactly when it was answered (a deleted topic never
comes back, not even when it is created again), and after a clean stop
``pocketmq store verify`` exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from faultkit import read_queue
from processkit import ProcessKit, ServerProcess, store_verify
from wirekit import record

from pocketmq.common.message import iter_records
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc, common_pb2

pytestmark = pytest.mark.timeout(120)

# Offsets are saved every hour here: only a save made before the answer survives a crash.
OPTIONS = dict(consumer_offset_persist_interval_seconds=3600)


@contextlib.asynccontextmanager
async def stub_of(broker: ServerProcess) -> AsyncIterator[broker_pb2_grpc.BrokerStub]:
    async with grpc.aio.insecure_channel(broker.addr) as channel:
        yield broker_pb2_grpc.BrokerStub(channel)


async def start(kit: ProcessKit, data_dir: Path) -> ServerProcess:
    return await kit.broker("broker-a", data_dir=data_dir, **OPTIONS)


def topic_config(topic: str, queues: int) -> common_pb2.TopicConfig:
    return common_pb2.TopicConfig(
        topic_name=topic, read_queue_nums=queues, write_queue_nums=queues, perm=6
    )


async def fill_topic(
    stub: broker_pb2_grpc.BrokerStub, topic: str, queues: int, prefix: str, per_queue: int = 5
) -> list[str]:
    keys = [f"{prefix}-{q}-{i}" for q in range(queues) for i in range(per_queue)]
    await stub.SendBatch(
        pb.SendBatchRequest(
            records=b"".join(
                record(topic=topic, queue_id=int(k.split("-")[1]), uniq=k, keys=k) for k in keys
            )
        )
    )
    return keys


async def topic_keys(addr: str, topic: str, queues: int) -> list[str]:
    out: list[str] = []
    for queue_id in range(queues):
        out += [m.uniq_key for m in await read_queue(addr, topic, queue_id)]
    return sorted(out)


async def topics_of(stub: broker_pb2_grpc.BrokerStub) -> dict[str, common_pb2.TopicConfig]:
    reply = await stub.GetAllTopicConfig(pb.GetAllTopicConfigRequest())
    return {tc.topic_name: tc for tc in reply.topic_configs}


async def stop_and_verify(broker: ServerProcess, data_dir: Path) -> None:
    assert await broker.stop() == 0
    code, output = await store_verify(data_dir)
    assert code == 0, output


async def assert_recreated_topic_is_empty(
    broker: ServerProcess, topic: str, queues: int, old_key: str
) -> None:
    async with stub_of(broker) as stub:
        if topic in await topics_of(stub):
            await stub.DeleteTopic(pb.DeleteTopicRequest(topic=topic))
        await stub.CreateTopic(pb.CreateTopicRequest(topic_config=topic_config(topic, queues)))
        assert await topic_keys(broker.addr, topic, queues) == [], "old messages are back"
        found = await stub.QueryMessage(pb.QueryMessageRequest(topic=topic, key=old_key))
        assert list(iter_records(found.records)) == [], "an old message is found by its key"
        new = await fill_topic(stub, topic, queues, "new", per_queue=2)
        assert await topic_keys(broker.addr, topic, queues) == sorted(new)


async def test_deleted_topic_stays_deleted_after_kill_9_right_after_delete_topic(kit, tmp_path):
    data_dir, topic = tmp_path / "broker", "TopicGone"
    broker = await start(kit, data_dir)
    async with stub_of(broker) as stub:
        await stub.CreateTopic(pb.CreateTopicRequest(topic_config=topic_config(topic, 2)))
        old = await fill_topic(stub, topic, 2, "old")
        await stub.DeleteTopic(pb.DeleteTopicRequest(topic=topic))
    await broker.kill()

    broker = await start(kit, data_dir)
    async with stub_of(broker) as stub:
        assert topic not in await topics_of(stub)
    await assert_recreated_topic_is_empty(broker, topic, 2, old[0])
    await broker.kill()  # and a second crash, with the topic created again

    broker = await start(kit, data_dir)
    assert len(await topic_keys(broker.addr, topic, 2)) == 4
    await stop_and_verify(broker, data_dir)


async def test_deleted_topic_never_comes_back_after_kill_9_during_delete_topic(kit, tmp_path):
    data_dir, topic = tmp_path / "broker", "TopicHalfGone"
    broker = await start(kit, data_dir)
    async with stub_of(broker) as stub:
        await stub.CreateTopic(pb.CreateTopicRequest(topic_config=topic_config(topic, 2)))
        old = await fill_topic(stub, topic, 2, "old")
        deleting = asyncio.ensure_future(stub.DeleteTopic(pb.DeleteTopicRequest(topic=topic)))
        await asyncio.sleep(0)  # the request is on its way; the kill races it
        await broker.kill()
        with contextlib.suppress(grpc.aio.AioRpcError):
            await deleting

    broker = await start(kit, data_dir)
    kept = await topic_keys(broker.addr, topic, 2)
    assert kept in ([], sorted(old)), f"a partly deleted topic: {kept}"
    await assert_recreated_topic_is_empty(broker, topic, 2, old[0])
    await stop_and_verify(broker, data_dir)


async def test_dropped_queues_stay_empty_after_kill_9_and_growing_again(kit, tmp_path):
    data_dir, topic = tmp_path / "broker", "TopicShrunk"
    broker = await start(kit, data_dir)
    async with stub_of(broker) as stub:
        await stub.CreateTopic(pb.CreateTopicRequest(topic_config=topic_config(topic, 4)))
        old = await fill_topic(stub, topic, 4, "old")
        await stub.UpdateTopic(pb.UpdateTopicRequest(topic_config=topic_config(topic, 2)))
    await broker.kill()

    broker = await start(kit, data_dir)
    async with stub_of(broker) as stub:
        assert (await topics_of(stub))[topic].write_queue_nums == 2
        assert await topic_keys(broker.addr, topic, 2) == sorted(
            k for k in old if k.split("-")[1] in "01"
        )
        await stub.UpdateTopic(pb.UpdateTopicRequest(topic_config=topic_config(topic, 4)))
        for queue_id in (2, 3):
            assert await read_queue(broker.addr, topic, queue_id) == [], (
                f"queue {queue_id} shows messages of before it was dropped"
            )
    await broker.kill()

    broker = await start(kit, data_dir)
    for queue_id in (2, 3):
        assert await read_queue(broker.addr, topic, queue_id) == []
    await stop_and_verify(broker, data_dir)


async def test_offset_reset_survives_kill_9_right_after_it_is_answered(kit, tmp_path):
    data_dir, topic, group = tmp_path / "broker", "TopicReset", "GroupReset"
    broker = await start(kit, data_dir)
    async with stub_of(broker) as stub:
        await stub.CreateTopic(pb.CreateTopicRequest(topic_config=topic_config(topic, 2)))
        await fill_topic(stub, topic, 2, "m")
        await stub.ResetConsumerOffset(
            pb.ResetConsumerOffsetRequest(
                consumer_group=group, topic=topic, position=pb.RESET_TO_LATEST
            )
        )
    await broker.kill()

    broker = await start(kit, data_dir)
    async with stub_of(broker) as stub:
        for queue_id in (0, 1):
            reply = await stub.QueryConsumerOffset(
                pb.QueryConsumerOffsetRequest(consumer_group=group, topic=topic, queue_id=queue_id)
            )
            assert reply.HasField("offset") and reply.offset == 5, (queue_id, reply)
    await stop_and_verify(broker, data_dir)


async def test_topic_changes_survive_kill_9_right_after_they_are_answered(kit, tmp_path):
    data_dir = tmp_path / "broker"
    broker = await start(kit, data_dir)
    for n in range(3):  # create, then update, each followed by a crash
        async with stub_of(broker) as stub:
            await stub.CreateTopic(
                pb.CreateTopicRequest(topic_config=topic_config(f"TopicNew{n}", 2))
            )
            await stub.UpdateTopic(
                pb.UpdateTopicRequest(topic_config=topic_config(f"TopicNew{n}", 3))
            )
            await fill_topic(stub, f"TopicNew{n}", 3, f"t{n}", per_queue=1)
        await broker.kill()
        broker = await start(kit, data_dir)
        async with stub_of(broker) as stub:
            topics = await topics_of(stub)
        for m in range(n + 1):
            assert topics[f"TopicNew{m}"].write_queue_nums == 3
            assert len(await topic_keys(broker.addr, f"TopicNew{m}", 3)) == 3
    await stop_and_verify(broker, data_dir)
