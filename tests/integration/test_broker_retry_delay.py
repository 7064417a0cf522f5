"""Delay levels, ConsumerSendMsgBack, retry and dead-letter topics on a real broker over gRPC.

Delay levels are configured short ("100ms 200ms ..."); every wait is a long poll
or a poll with a deadline. The last test kills a broker process with SIGKILL
and checks that no delayed message is lost.
"""

from __future__ import annotations

import collections
import functools
import json
import signal
import time

import grpc
import pytest
import wirekit
from processkit import broker_process

from pocketmq.broker.grpc_status import REASON_METADATA_KEY
from pocketmq.common.message import iter_records
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc

LEVELS = "100ms 200ms 300ms 400ms 500ms 600ms 700ms 800ms"
# Delivery time is kept in whole ms; allow for the rounding when checking "not before".
MS_ROUNDING_S = 0.005
LATE_TOLERANCE_S = 1.5
record = functools.partial(wirekit.record, tags="TagA", uniq="U1")


@pytest.fixture
async def broker(start_broker):
    return await start_broker(message_delay_level=LEVELS)


async def pull(stub, topic, queue_id=0, offset=0, wait_ms=0):
    return await stub.PullMessage(
        pb.PullMessageRequest(
            consumer_group="G",
            topic=topic,
            queue_id=queue_id,
            queue_offset=offset,
            suspend_timeout_ms=wait_ms,
        )
    )


async def pull_first(stub, topic, queue_id=0, offset=0, timeout_s=5.0):
    """The first message at *offset*, long-polling until it arrives."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        reply = await pull(stub, topic, queue_id, offset, wait_ms=1000)
        if reply.status == pb.FOUND:
            return next(iter_records(reply.records))
    raise AssertionError(f"no message at {topic}:{queue_id}@{offset} within {timeout_s} s")


async def refusal(call):
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    reason = dict(info.value.trailing_metadata() or ()).get(REASON_METADATA_KEY, "")
    return info.value.code(), reason, info.value.details()


async def test_a_delayed_message_is_invisible_until_its_level_delay(stub):
    sent_at = time.monotonic()
    reply = await stub.SendMessage(
        pb.SendMessageRequest(record=record(queue_id=1, delay=3, uniq="D1"))
    )
    assert (list(reply.queue_ids), list(reply.msg_ids)) == ([1], ["D1"])  # as sent
    parked = await stub.GetMaxOffset(
        pb.GetQueueOffsetRequest(topic="SCHEDULE_TOPIC_XXXX", queue_id=2)
    )
    assert parked.offset == 1
    assert (await pull(stub, "TopicA", 1)).status == pb.NO_NEW_MSG
    msg = await pull_first(stub, "TopicA", 1)
    elapsed = time.monotonic() - sent_at
    assert 0.3 - MS_ROUNDING_S <= elapsed < 0.3 + LATE_TOLERANCE_S
    assert (msg.topic, msg.queue_id, msg.body, msg.uniq_key) == ("TopicA", 1, b"hello", "D1")
    assert msg.properties == {"UNIQ_KEY": "D1", "TAGS": "TagA"}


async def test_a_level_above_the_last_waits_the_last_delay(stub):
    sent_at = time.monotonic()
    await stub.SendMessage(pb.SendMessageRequest(record=record(delay=99)))
    await pull_first(stub, "TopicA")
    assert time.monotonic() - sent_at >= 0.8 - MS_ROUNDING_S


async def test_send_back_redelivers_in_the_retry_topic_after_the_level_delay(stub):
    await stub.SendMessage(pb.SendMessageRequest(record=record(uniq="R1")))
    consumed = await pull_first(stub, "TopicA")
    sent_back_at = time.monotonic()
    await stub.ConsumerSendMsgBack(
        pb.ConsumerSendMsgBackRequest(
            group="G",
            phys_offset=consumed.phys_offset,
            delay_level=0,
            origin_topic="TopicA",
            origin_msg_id="R1",
        )
    )
    assert (await pull(stub, "%RETRY%G")).status == pb.NO_NEW_MSG
    retry = await pull_first(stub, "%RETRY%G")
    elapsed = time.monotonic() - sent_back_at
    assert 0.3 - MS_ROUNDING_S <= elapsed < 0.3 + LATE_TOLERANCE_S  # level 3 + 0 retries
    assert (retry.body, retry.reconsume_times, retry.uniq_key) == (b"hello", 1, "R1")
    assert retry.properties["RETRY_TOPIC"] == "TopicA"
    assert retry.properties["ORIGIN_MESSAGE_ID"] == "R1"


async def test_past_max_reconsume_times_the_message_goes_to_the_dlq(stub):
    await stub.SendMessage(pb.SendMessageRequest(record=record(uniq="P1")))
    msg = await pull_first(stub, "TopicA")
    for attempt in range(1, 3):
        await stub.ConsumerSendMsgBack(
            pb.ConsumerSendMsgBackRequest(
                group="G",
                phys_offset=msg.phys_offset,
                delay_level=1,
                origin_topic="TopicA",
                max_reconsume_times=2,
            )
        )
        msg = await pull_first(stub, "%RETRY%G", offset=attempt - 1)
        assert msg.reconsume_times == attempt
    await stub.ConsumerSendMsgBack(
        pb.ConsumerSendMsgBackRequest(
            group="G",
            phys_offset=msg.phys_offset,
            delay_level=1,
            origin_topic="TopicA",
            max_reconsume_times=2,
        )
    )
    dead = await pull_first(stub, "%DLQ%G")
    assert (dead.reconsume_times, dead.uniq_key, dead.body) == (3, "P1", b"hello")
    assert (dead.properties["DLQ_ORIGIN_TOPIC"], dead.properties["DLQ_ORIGIN_MESSAGE_ID"]) == (
        "TopicA",
        "P1",
    )
    configs = {
        tc.topic_name: tc
        for tc in (await stub.GetAllTopicConfig(pb.GetAllTopicConfigRequest())).topic_configs
    }
    assert (configs["%DLQ%G"].write_queue_nums, configs["%RETRY%G"].write_queue_nums) == (1, 1)


async def test_send_back_refusals_name_the_problem(stub):
    await stub.SendMessage(pb.SendMessageRequest(record=record()))
    code, reason, details = await refusal(
        stub.ConsumerSendMsgBack(pb.ConsumerSendMsgBackRequest(group="G", phys_offset=10**9))
    )
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "NO_MESSAGE")
    assert "no message starts at commit-log offset 1000000000" in details
    code, _, details = await refusal(
        stub.ConsumerSendMsgBack(pb.ConsumerSendMsgBackRequest(group="bad group!", phys_offset=0))
    )
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "group name 'bad group!' contains" in details


async def test_a_clustering_consumers_heartbeat_creates_its_retry_topic(stub):
    def consumer(group, model):
        return pb.ConsumerData(
            group=group,
            consume_type=pb.CONSUME_PASSIVELY,
            message_model=model,
            subscriptions=[pb.Subscription(topic="TopicA", expression="*")],
        )

    await stub.HeartBeat(
        pb.HeartBeatRequest(
            client_id="c1",
            consumers=[
                consumer("Clustered", pb.CLUSTERING),
                consumer("Broadcast", pb.BROADCASTING),
            ],
        )
    )
    names = {
        tc.topic_name
        for tc in (await stub.GetAllTopicConfig(pb.GetAllTopicConfigRequest())).topic_configs
    }
    assert "%RETRY%Clustered" in names
    assert "%RETRY%Broadcast" not in names


async def test_delay_progress_survives_a_restart(start_broker, broker_config, tmp_path):
    config = broker_config(message_delay_level="100ms 1s")
    broker = await start_broker(config)
    async with grpc.aio.insecure_channel(broker.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        await stub.SendMessage(pb.SendMessageRequest(record=record(delay=1, uniq="A")))
        await pull_first(stub, "TopicA")
        await stub.SendMessage(pb.SendMessageRequest(record=record(delay=2, uniq="B")))
    await broker.stop()  # before B is due
    saved = json.loads((tmp_path / "data" / "config" / "delayOffset.json").read_text())
    assert saved == {"offsetTable": {"1": 1}}
    broker = await start_broker(config)
    async with grpc.aio.insecure_channel(broker.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        assert (await pull_first(stub, "TopicA", offset=1)).uniq_key == "B"
        assert (await pull(stub, "TopicA", offset=2, wait_ms=300)).status == pb.NO_NEW_MSG
    assert broker.schedule.offsets.as_dict() == {1: 1, 2: 1}


async def test_sigkill_of_a_broker_loses_no_delayed_message(
    tmp_path, start_broker, broker_config, eventually
):
    levels = "100ms 200ms 2s"
    config = broker_config(
        message_delay_level=levels, flush_delay_offset_interval_ms=600_000
    )  # never saved before the kill
    proc, addr = await broker_process(
        config,
        tmp_path / "broker.log",
        message_delay_level=levels,
        flush_delay_offset_interval_ms=600_000,
    )
    try:
        fast = [f"F{i}" for i in range(100)]
        slow = [f"S{i}" for i in range(100)]
        async with grpc.aio.insecure_channel(addr) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            await stub.SendBatch(
                pb.SendBatchRequest(
                    records=b"".join(
                        [record(delay=1, uniq=u) for u in fast]
                        + [record(delay=3, uniq=u) for u in slow]
                    )
                )
            )

            async def fast_ones_delivered():
                reply = await stub.GetMaxOffset(pb.GetQueueOffsetRequest(topic="TopicA"))
                return reply.offset >= len(fast)

            await eventually(fast_ones_delivered, what="the 100 ms messages delivered")
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    broker = await start_broker(config)
    assert not broker.recovery.clean_shutdown
    async with grpc.aio.insecure_channel(broker.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        seen: collections.Counter[str] = collections.Counter()
        next_offset = 0

        async def everything_delivered():
            nonlocal next_offset
            reply = await pull(stub, "TopicA", offset=next_offset, wait_ms=500)
            if reply.status == pb.FOUND:
                seen.update(m.uniq_key for m in iter_records(reply.records))
                next_offset = reply.next_begin_offset
            return set(seen) == set(fast) | set(slow)

        await eventually(everything_delivered, timeout_s=15, what="every delayed message")
    assert max(seen.values()) <= 2  # at least once, never more than twice
    assert all(seen[u] == 1 for u in slow)  # not yet due at the kill
