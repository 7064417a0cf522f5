"""A real broker over gRPC: send, pull with every offset status, tags, long polling,
queries, admin RPCs and client channels."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from wirekit import create_topic, record

from pocketmq.common.message import decode_record, iter_records
from pocketmq.common.msgid import decode_offset_msg_id
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc, common_pb2


def pull(stub, offset=0, **kwargs):
    kwargs.setdefault("consumer_group", "GroupA")
    kwargs.setdefault("topic", "TopicA")
    kwargs.setdefault("queue_id", 0)
    kwargs.setdefault("suspend_timeout_ms", 0)
    return stub.PullMessage(pb.PullMessageRequest(queue_offset=offset, **kwargs))


def bodies(reply) -> list[bytes]:
    return [m.body for m in iter_records(reply.records)]


async def test_send_answers_ids_and_offsets_for_every_message(broker, stub):
    reply = await stub.SendBatch(
        pb.SendBatchRequest(
            records=b"".join(record(queue_id=q, uniq=f"U{i}") for i, q in enumerate((0, 1, 0)))
        )
    )
    assert reply.status == pb.SEND_OK
    assert list(zip(reply.msg_ids, reply.queue_ids, reply.queue_offsets, strict=True)) == [
        ("U0", 0, 0),
        ("U1", 1, 0),
        ("U2", 0, 1),
    ]
    for uniq, phys in zip(reply.msg_ids, reply.phys_offsets, strict=True):
        offset_msg_id = f"{reply.offset_msg_id_prefix}{phys:016X}"
        msg_id = decode_offset_msg_id(offset_msg_id)
        assert (msg_id.host, msg_id.port, msg_id.phys_offset) == ("127.0.0.1", broker.port, phys)
        view = await stub.ViewMessage(pb.ViewMessageRequest(offset_msg_id=offset_msg_id))
        stored = decode_record(view.record)
        assert (stored.uniq_key, stored.phys_offset) == (uniq, phys)


async def test_a_batch_asking_so_is_answered_without_the_ids_and_queues_it_sent(stub):
    records = b"".join(record(queue_id=q, uniq=f"U{i}") for i, q in enumerate((0, 1, 0)))
    full = await stub.SendBatch(pb.SendBatchRequest(records=records))
    lean = await stub.SendBatch(pb.SendBatchRequest(records=records, omit_sent_columns=True))
    assert lean.status == pb.SEND_OK
    assert (list(lean.msg_ids), list(lean.queue_ids)) == ([], [])
    assert list(full.queue_offsets) == [0, 0, 1]
    assert list(lean.queue_offsets) == [2, 1, 3]
    size = len(record(queue_id=0, uniq="U0"))
    assert list(lean.phys_offsets) == [full.phys_offsets[0] + (3 + i) * size for i in range(3)]
    assert lean.offset_msg_id_prefix == full.offset_msg_id_prefix


async def test_pull_walks_every_offset_status(stub):
    await create_topic(stub)
    empty = await pull(stub, 0)
    assert empty.status == pb.NO_NEW_MSG
    await stub.SendBatch(
        pb.SendBatchRequest(records=b"".join(record(body=b"m%d" % i) for i in range(5)))
    )
    found = await pull(stub, 1, max_msg_nums=3)
    assert (found.status, found.get_message_status) == (pb.FOUND, pb.GET_FOUND)
    assert bodies(found) == [b"m1", b"m2", b"m3"]
    assert (found.next_begin_offset, found.min_offset, found.max_offset) == (4, 0, 5)
    one = await pull(stub, 5)
    assert (one.status, one.get_message_status, one.next_begin_offset) == (
        pb.NO_NEW_MSG,
        pb.GET_OFFSET_OVERFLOW_ONE,
        5,
    )
    badly = await pull(stub, 9)
    assert (badly.status, badly.get_message_status, badly.next_begin_offset) == (
        pb.OFFSET_ILLEGAL,
        pb.GET_OFFSET_OVERFLOW_BADLY,
        5,
    )
    other_queue = await pull(stub, 3, queue_id=2)
    assert other_queue.status in (pb.OFFSET_ILLEGAL, pb.NO_NEW_MSG)
    assert other_queue.next_begin_offset == 0


async def test_pull_filters_by_tags_on_the_broker(stub):
    await create_topic(stub)
    await stub.SendBatch(
        pb.SendBatchRequest(
            records=b"".join(
                record(tags=t, body=t.encode()) for t in ("TagA", "TagB", "TagC", "TagA")
            )
        )
    )
    picked = await pull(stub, 0, subscription="TagA || TagC")
    assert bodies(picked) == [b"TagA", b"TagC", b"TagA"]
    none = await pull(stub, 0, subscription="TagZ")
    assert (none.status, none.next_begin_offset) == (pb.NO_MATCHED_MSG, 4)


async def test_a_parked_long_poll_is_answered_by_a_matching_send_not_by_its_suspend_time(
    broker, stub, eventually
):
    await create_topic(stub)
    parked = asyncio.ensure_future(pull(stub, 0, suspend_timeout_ms=10_000, subscription="TagA"))
    await eventually(lambda: broker.hold.parked_count == 1, what="the TagA pull parked")
    assert not parked.done()
    # A TagB pull parks after it. The TagB message wakes both, the TagA pull first: by the
    # time the TagB pull is answered, the TagA pull has read the message and parked again.
    later = asyncio.ensure_future(pull(stub, 0, suspend_timeout_ms=10_000, subscription="TagB"))
    await eventually(lambda: broker.hold.parked_count == 2, what="the TagB pull parked")
    await stub.SendMessage(pb.SendMessageRequest(record=record(tags="TagB")))
    assert (await asyncio.wait_for(later, 5)).status == pb.FOUND
    assert broker.hold.parked_count == 1, "the TagA pull was answered by a TagB message"
    assert not parked.done()  # a non-matching arrival does not answer it
    await stub.SendMessage(pb.SendMessageRequest(record=record(tags="TagA", body=b"now")))
    # answered by the arrival: its suspend time (10 s) is twice this wait away. How soon
    # after the send is a latency figure: benchmarks/sdk_bench.py prints it.
    reply = await asyncio.wait_for(parked, 5)
    assert (reply.status, bodies(reply), reply.next_begin_offset) == (pb.FOUND, [b"now"], 2)


async def test_a_long_poll_is_released_at_its_suspend_time_not_before(stub):
    await create_topic(stub)
    started = time.monotonic()
    reply = await asyncio.wait_for(pull(stub, 0, suspend_timeout_ms=300), 10)
    assert reply.status == pb.NO_NEW_MSG
    assert time.monotonic() - started >= 0.3  # held for its suspend time, then released


async def test_offsets_query_update_and_ride_on_pulls(stub):
    await create_topic(stub)
    query = pb.QueryConsumerOffsetRequest(consumer_group="GroupA", topic="TopicA", queue_id=0)
    assert not (await stub.QueryConsumerOffset(query)).HasField("offset")
    await stub.UpdateConsumerOffset(
        pb.UpdateConsumerOffsetRequest(
            consumer_group="GroupA", topic="TopicA", queue_id=0, offset=0
        )
    )
    assert (await stub.QueryConsumerOffset(query)).offset == 0
    await stub.SendMessage(pb.SendMessageRequest(record=record()))
    await pull(stub, 1, commit_offset=1)
    assert (await stub.QueryConsumerOffset(query)).offset == 1


async def test_topic_admin_status_and_progress(stub):
    await create_topic(stub, "TopicA", queues=2)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await create_topic(stub, "TopicA")
    assert info.value.code() is grpc.StatusCode.ALREADY_EXISTS
    await stub.UpdateTopic(
        pb.UpdateTopicRequest(
            topic_config=common_pb2.TopicConfig(
                topic_name="TopicA", read_queue_nums=3, write_queue_nums=3, perm=6
            )
        )
    )
    configs = {
        tc.topic_name: tc
        for tc in (await stub.GetAllTopicConfig(pb.GetAllTopicConfigRequest())).topic_configs
    }
    assert configs["TopicA"].write_queue_nums == 3
    await stub.SendBatch(
        pb.SendBatchRequest(records=record(queue_id=0) + record(queue_id=0) + record(queue_id=2))
    )
    status = await stub.GetTopicStatus(pb.GetTopicStatusRequest(topic="TopicA"))
    assert [(q.queue_id, q.max_offset) for q in status.queues] == [(0, 2), (1, 0), (2, 1)]
    assert status.queues[0].last_store_timestamp_ms > 0
    await stub.UpdateConsumerOffset(
        pb.UpdateConsumerOffsetRequest(
            consumer_group="GroupA", topic="TopicA", queue_id=0, offset=1
        )
    )
    progress = await stub.GetConsumeProgress(
        pb.GetConsumeProgressRequest(consumer_group="GroupA", topic="TopicA")
    )
    assert [(q.queue_id, q.consumer_offset, q.lag) for q in progress.queues] == [
        (0, 1, 1),
        (1, -1, 0),
        (2, -1, 1),
    ]
    assert progress.total_lag == 2
    now_ms = int(time.time() * 1000) + 1000
    assert (
        await stub.SearchOffsetByTimestamp(
            pb.SearchOffsetByTimestampRequest(topic="TopicA", queue_id=0, timestamp_ms=now_ms)
        )
    ).offset in (1, 2)
    await stub.DeleteTopic(pb.DeleteTopicRequest(topic="TopicA"))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.GetTopicStatus(pb.GetTopicStatusRequest(topic="TopicA"))
    assert info.value.code() is grpc.StatusCode.NOT_FOUND


async def test_query_message_by_key_and_time_range(stub):
    await stub.SendBatch(
        pb.SendBatchRequest(
            records=record(keys="order-1 order-2", uniq="U1") + record(keys="order-2", uniq="U2")
        )
    )
    by_key = await stub.QueryMessage(pb.QueryMessageRequest(topic="TopicA", key="order-2"))
    assert sorted(m.uniq_key for m in iter_records(by_key.records)) == ["U1", "U2"]
    by_uniq = await stub.QueryMessage(pb.QueryMessageRequest(topic="TopicA", key="U1"))
    assert by_uniq.message_count == 1
    past = await stub.QueryMessage(
        pb.QueryMessageRequest(
            topic="TopicA", key="order-2", begin_timestamp_ms=1, end_timestamp_ms=2
        )
    )
    assert past.message_count == 0


async def test_runtime_info_reports_the_broker(broker, stub):
    table = (await stub.GetBrokerRuntimeInfo(pb.GetBrokerRuntimeInfoRequest())).table
    assert table["broker_name"] == "broker-a"
    assert table["broker_address"] == broker.address


async def test_heartbeats_channels_and_membership_notifications(stub):
    def consumer(group="GroupA"):
        return pb.ConsumerData(
            group=group,
            consume_type=pb.CONSUME_PASSIVELY,
            message_model=pb.CLUSTERING,
            subscriptions=[pb.Subscription(topic="TopicA", expression="*")],
        )

    await stub.HeartBeat(pb.HeartBeatRequest(client_id="c1", consumers=[consumer()]))
    stream = stub.ClientChannel(pb.ClientChannelRequest(client_id="c1"))
    first = await stream.read()
    assert first.WhichOneof("command") == "channel_opened"
    await stub.HeartBeat(
        pb.HeartBeatRequest(client_id="c2", producer_groups=["PG"], consumers=[consumer()])
    )
    note = await asyncio.wait_for(stream.read(), 5)
    assert note.notify_consumer_ids_changed.consumer_group == "GroupA"
    ids = await stub.GetConsumerListByGroup(
        pb.GetConsumerListByGroupRequest(consumer_group="GroupA")
    )
    assert list(ids.consumer_ids) == ["c1", "c2"]
    await stub.UnregisterClient(pb.UnregisterClientRequest(client_id="c2", consumer_group="GroupA"))
    note = await asyncio.wait_for(stream.read(), 5)
    assert note.notify_consumer_ids_changed.consumer_group == "GroupA"
    stream.cancel()


async def test_sync_flush_acknowledges_after_the_group_commit(start_broker):
    broker = await start_broker(dir_name="sync", flush_disk_type="sync")
    async with grpc.aio.insecure_channel(broker.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        replies = await asyncio.gather(
            *(
                stub.SendMessage(pb.SendMessageRequest(record=record(body=b"%d" % i)))
                for i in range(20)
            )
        )
    assert all(r.status == pb.SEND_OK for r in replies)
    assert sorted(r.queue_offsets[0] for r in replies) == list(range(20))
