"""Every malformed request to a real broker gets its own status and stores nothing."""

from __future__ import annotations

import grpc
import pytest
from wirekit import record

from pocketmq.broker.grpc_status import REASON_METADATA_KEY
from pocketmq.common.message import SysFlag
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc, common_pb2

MiB = 1024 * 1024
Code = grpc.StatusCode


def patched(rec: bytes, pos: int, raw: bytes) -> bytes:
    return rec[:pos] + raw + rec[pos + len(raw) :]


@pytest.fixture
async def broker(start_broker):
    broker = await start_broker(auto_create_topic_enable=False)
    async with grpc.aio.insecure_channel(broker.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        await stub.CreateTopic(
            pb.CreateTopicRequest(
                topic_config=common_pb2.TopicConfig(
                    topic_name="TopicA", read_queue_nums=4, write_queue_nums=4, perm=6
                )
            )
        )
        broker.stub = stub
        yield broker


async def refusal(call) -> tuple[grpc.StatusCode, str, str]:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    reason = dict(info.value.trailing_metadata() or ()).get(REASON_METADATA_KEY, "")
    return info.value.code(), reason, info.value.details()


def puts(broker) -> int:
    return int(broker.store.runtime_info()["put_messages_total"])


SENDS = [
    ("empty request", b"", Code.INVALID_ARGUMENT, "MESSAGE_ILLEGAL", "no records"),
    ("torn head", record()[:40], Code.INVALID_ARGUMENT, "MESSAGE_ILLEGAL", "cut short"),
    (
        "torn record",
        record()[:60],
        Code.INVALID_ARGUMENT,
        "MESSAGE_ILLEGAL",
        "TOTALSIZE 102, but 60 bytes are left",
    ),
    (
        "bad magic",
        patched(record(), 4, b"\x12\x34\x56\x78"),
        Code.INVALID_ARGUMENT,
        "MESSAGE_ILLEGAL",
        "magic code 0x12345678",
    ),
    (
        "bad crc",
        patched(record(), 8, b"\x00\x00\x00\x01"),
        Code.INVALID_ARGUMENT,
        "MESSAGE_ILLEGAL",
        "CRC",
    ),
    (
        "body too large",
        record(body=b"x" * (MiB + 1)),
        Code.INVALID_ARGUMENT,
        "MESSAGE_BODY_TOO_LARGE",
        f"message body is {MiB + 1} bytes; this broker accepts at most {MiB} "
        "(max_message_size_bytes)",
    ),
    ("empty body", record(body=b""), Code.INVALID_ARGUMENT, "MESSAGE_ILLEGAL", "body is empty"),
    (
        "bad topic name",
        record(topic="a/b"),
        Code.INVALID_ARGUMENT,
        "MESSAGE_ILLEGAL",
        "contains '/'",
    ),
    (
        "unknown topic",
        record(topic="Unknown"),
        Code.NOT_FOUND,
        "TOPIC_NOT_EXIST",
        "auto_create_topic_enable is off",
    ),
    (
        "system topic",
        record(topic="SCHEDULE_TOPIC_XXXX"),
        Code.PERMISSION_DENIED,
        "NO_PERMISSION",
        "written by the broker only",
    ),
    (
        "queue out of range",
        record(queue_id=4),
        Code.INVALID_ARGUMENT,
        "QUEUE_OUT_OF_RANGE",
        "queue id 4 is out of range; topic 'TopicA' has 4 write queues",
    ),
    (
        "properties not utf-8",
        patched(record(keys="ab"), len(record(keys="ab")) - 3, b"\xff"),
        Code.INVALID_ARGUMENT,
        "MESSAGE_ILLEGAL",
        "UTF-8",
    ),
    (
        "second record bad",
        record() + record(queue_id=9),
        Code.INVALID_ARGUMENT,
        "QUEUE_OUT_OF_RANGE",
        "queue id 9",
    ),
    (
        "delayed half message",
        record() + record(PGROUP="tx", TIMER_DELAY_MS="5000", sysflag=SysFlag.TRANSACTION_PREPARED),
        Code.INVALID_ARGUMENT,
        "MESSAGE_ILLEGAL",
        "a transactional (prepared) message cannot be delayed, but it carries ['TIMER_DELAY_MS']",
    ),
    (
        "half message with a delay level",
        record(PGROUP="tx", DELAY="2", sysflag=SysFlag.TRANSACTION_PREPARED),
        Code.INVALID_ARGUMENT,
        "MESSAGE_ILLEGAL",
        "carries ['DELAY']",
    ),
]


@pytest.mark.parametrize(
    ("blob", "code", "reason", "words"), [s[1:] for s in SENDS], ids=[s[0] for s in SENDS]
)
async def test_each_invalid_send_gets_its_own_status_and_stores_nothing(
    broker, blob, code, reason, words
):
    before = puts(broker)
    got = await refusal(broker.stub.SendBatch(pb.SendBatchRequest(records=blob)))
    assert got[:2] == (code, reason), got
    assert words in got[2]
    assert puts(broker) == before


async def test_send_message_with_two_records_stores_nothing(broker):
    got = await refusal(broker.stub.SendMessage(pb.SendMessageRequest(record=record() + record())))
    assert got[0] is Code.INVALID_ARGUMENT and "SendBatch" in got[2]
    assert puts(broker) == 0


PULLS = [
    ("no group", {"consumer_group": ""}, Code.INVALID_ARGUMENT, "group name is empty"),
    ("bad topic", {"topic": "a b"}, Code.INVALID_ARGUMENT, "contains"),
    ("unknown topic", {"topic": "Nope"}, Code.NOT_FOUND, "does not exist"),
    ("queue out of range", {"queue_id": 4}, Code.INVALID_ARGUMENT, "queue id 4 is out of range"),
    ("negative offset", {"queue_offset": -3}, Code.INVALID_ARGUMENT, "queue_offset is -3"),
    ("negative max", {"max_msg_nums": -1}, Code.INVALID_ARGUMENT, "max_msg_nums is -1"),
    (
        "negative suspend",
        {"suspend_timeout_ms": -1},
        Code.INVALID_ARGUMENT,
        "suspend_timeout_ms is -1",
    ),
    ("bad subscription", {"subscription": "||"}, Code.INVALID_ARGUMENT, "names no tags"),
    ("negative commit", {"commit_offset": -1}, Code.INVALID_ARGUMENT, "commit_offset is -1"),
]


@pytest.mark.parametrize(
    ("fields", "code", "words"), [p[1:] for p in PULLS], ids=[p[0] for p in PULLS]
)
async def test_each_invalid_pull_gets_its_own_status(broker, fields, code, words):
    request = {
        "consumer_group": "GroupA",
        "topic": "TopicA",
        "queue_id": 0,
        "queue_offset": 0,
        "suspend_timeout_ms": 0,
        **fields,
    }
    got = await refusal(broker.stub.PullMessage(pb.PullMessageRequest(**request)))
    assert got[0] is code and words in got[2], got


async def test_admin_and_query_refusals(broker):
    stub = broker.stub
    cases = [
        (
            stub.CreateTopic(
                pb.CreateTopicRequest(topic_config=common_pb2.TopicConfig(topic_name="bad topic"))
            ),
            Code.INVALID_ARGUMENT,
            "contains",
        ),
        (
            stub.CreateTopic(
                pb.CreateTopicRequest(
                    topic_config=common_pb2.TopicConfig(topic_name="Big", read_queue_nums=5000)
                )
            ),
            Code.INVALID_ARGUMENT,
            "1..1024",
        ),
        (
            stub.UpdateTopic(
                pb.UpdateTopicRequest(
                    topic_config=common_pb2.TopicConfig(
                        topic_name="Nope", read_queue_nums=1, write_queue_nums=1, perm=6
                    )
                )
            ),
            Code.NOT_FOUND,
            "CreateTopic",
        ),
        (
            stub.DeleteTopic(pb.DeleteTopicRequest(topic="SCHEDULE_TOPIC_XXXX")),
            Code.PERMISSION_DENIED,
            "system topic",
        ),
        (
            stub.ViewMessage(pb.ViewMessageRequest(offset_msg_id="xyz")),
            Code.INVALID_ARGUMENT,
            "32 (IPv4)",
        ),
        (
            stub.QueryMessage(pb.QueryMessageRequest(topic="TopicA", key="")),
            Code.INVALID_ARGUMENT,
            "key is empty",
        ),
        (
            stub.UpdateConsumerOffset(
                pb.UpdateConsumerOffsetRequest(
                    consumer_group="G", topic="TopicA", queue_id=0, offset=-1
                )
            ),
            Code.INVALID_ARGUMENT,
            "offset is -1",
        ),
        (
            stub.GetMaxOffset(pb.GetQueueOffsetRequest(topic="TopicA", queue_id=99)),
            Code.INVALID_ARGUMENT,
            "queue id 99",
        ),
        (
            stub.HeartBeat(pb.HeartBeatRequest(client_id="")),
            Code.INVALID_ARGUMENT,
            "client_id is empty",
        ),
        (
            stub.HeartBeat(
                pb.HeartBeatRequest(
                    client_id="c1", consumers=[pb.ConsumerData(group="G", consume_type=42)]
                )
            ),
            Code.INVALID_ARGUMENT,
            "consume_type 42 is unknown",
        ),
        (
            stub.HeartBeat(
                pb.HeartBeatRequest(
                    client_id="c1",
                    consumers=[
                        pb.ConsumerData(group="G", subscriptions=[pb.Subscription(topic="a b")])
                    ],
                )
            ),
            Code.INVALID_ARGUMENT,
            "topic name",
        ),
        (
            stub.GetConsumeProgress(pb.GetConsumeProgressRequest(consumer_group="Nobody")),
            Code.NOT_FOUND,
            "no offsets",
        ),
    ]
    for call, code, words in cases:
        got = await refusal(call)
        assert got[0] is code and words in got[2], got


async def test_the_broker_serves_on_after_every_refusal(broker):
    reply = await broker.stub.SendMessage(pb.SendMessageRequest(record=record()))
    assert reply.status == pb.SEND_OK
