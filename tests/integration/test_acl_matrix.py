"""Authorization of every v1 RPC, Kafka-style: each resource it touches by allowed / denied /
another user's, on a real broker with the ACL on, and each attack found on v1 as its own test.

Accounts (:data:`ACL`): ``owner`` owns topic ``secret`` and groups ``owner_pg`` / ``owner_cg``;
``outsider`` owns ``public``, ``outsider_pg`` / ``outsider_cg``, may read any other topic by
default (``default_topic_perm = "SUB"``) but not ``secret`` nor ``hidden`` (no one's, DENY).
:data:`MATRIX` has rows for every method of ``pocketmq.v1.Broker``: a new RPC without rows
fails :func:`test_the_matrix_covers_every_rpc_of_the_broker_service`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from aclmode import signers
from wirekit import record

from pocketmq.broker.topic_config import SCHEDULE_TOPIC, TRANS_HALF_TOPIC, BrokerTopicConfig
from pocketmq.common.auth import Credentials, sign_stream_request, signed_metadata
from pocketmq.common.message import encode_record, iter_records, pack_host
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc, common_pb2

ACL = """
[[accounts]]
access_key = "admin"
secret_key = "admin-secret"
admin = true

[[accounts]]
access_key = "owner"
secret_key = "owner-secret"
topic_perms = { secret = "PUB|SUB" }
group_perms = { owner_pg = "PUB", owner_cg = "SUB" }

[[accounts]]
access_key = "outsider"
secret_key = "outsider-secret"
default_topic_perm = "SUB"
topic_perms = { public = "PUB|SUB", secret = "DENY", hidden = "DENY" }
group_perms = { outsider_pg = "PUB", outsider_cg = "SUB" }

[[accounts]]
access_key = "auditor"
secret_key = "auditor-secret"
topic_perms = { secret = "SUB" }
group_perms = { owner_pg = "SUB" }
"""
KEYS = {
    name: Credentials(name, f"{name}-secret") for name in ("admin", "owner", "outsider", "auditor")
}
OK, DENIED = grpc.StatusCode.OK, grpc.StatusCode.PERMISSION_DENIED
INVALID, UNAUTHENTICATED = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNAUTHENTICATED
BROKER = "Broker"
# Transaction checks every 300 ms, so the check test sees them soon.
FAST_TX = {
    "transaction_timeout_ms": 300,
    "transaction_check_interval_ms": 300,
    "transaction_check_max": 1000,
}


def half(topic: str, group: str, uniq: str) -> bytes:
    return encode_record(
        topic=topic,
        body=b"uncommitted " + uniq.encode(),
        sysflag=0x4,
        properties={"TRAN_MSG": "true", "PGROUP": group, "UNIQ_KEY": uniq},
        born_timestamp_ms=int(time.time() * 1000),
        born_host=pack_host(("127.0.0.1", 40000)),
        store_host=pack_host(("127.0.0.1", 0)),
    )


def consumer(group: str, *topics: str) -> pb.ConsumerData:
    return pb.ConsumerData(
        group=group,
        consume_type=pb.CONSUME_ACTIVELY,
        message_model=pb.CLUSTERING,
        subscriptions=[pb.Subscription(topic=t, expression="*") for t in topics],
    )


@dataclass
class Env:
    broker: Any
    stubs: dict[str, broker_pb2_grpc.BrokerStub]
    secret_phys: int = 0  # owner's message in secret
    public_phys: int = 0  # outsider's message in public
    owner_half: int = 0  # owner_pg's half message for secret
    outsider_half: int = 0  # outsider_pg's half message for public
    msg_id_prefix: str = ""

    def offset_msg_id(self, phys: int) -> str:
        return f"{self.msg_id_prefix}{phys:016X}"


async def status_of(call: Any) -> tuple[grpc.StatusCode, str]:
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    return OK, ""


@pytest.fixture
async def env(tmp_path, start_broker) -> AsyncIterator[Env]:
    acl = tmp_path / "acl.toml"
    acl.write_text(ACL)
    broker = await start_broker(acl_enable=True, acl_file=str(acl), **FAST_TX)
    for topic in ("secret", "public", "hidden"):
        broker.topics.create(
            BrokerTopicConfig(topic_name=topic, read_queue_nums=1, write_queue_nums=1)
        )
    channels = {
        name: grpc.aio.insecure_channel(broker.address, interceptors=signers(creds))
        for name, creds in KEYS.items()
    }
    env = Env(broker, {name: broker_pb2_grpc.BrokerStub(ch) for name, ch in channels.items()})
    owner, outsider = env.stubs["owner"], env.stubs["outsider"]
    sent = await owner.SendMessage(
        pb.SendMessageRequest(record=record("secret", uniq="S1", keys="k1"))
    )
    env.secret_phys, env.msg_id_prefix = sent.phys_offsets[0], sent.offset_msg_id_prefix
    sent = await outsider.SendMessage(
        pb.SendMessageRequest(record=record("public", uniq="P1", keys="k1"))
    )
    env.public_phys = sent.phys_offsets[0]
    env.owner_half = (
        await owner.SendMessage(
            pb.SendMessageRequest(
                record=half("secret", "owner_pg", "H1"), producer_group="owner_pg"
            )
        )
    ).phys_offsets[0]
    env.outsider_half = (
        await outsider.SendMessage(
            pb.SendMessageRequest(
                record=half("public", "outsider_pg", "H2"), producer_group="outsider_pg"
            )
        )
    ).phys_offsets[0]
    await owner.HeartBeat(
        pb.HeartBeatRequest(
            client_id="owner-client",
            producer_groups=["owner_pg"],
            consumers=[consumer("owner_cg", "secret")],
        )
    )
    await outsider.HeartBeat(
        pb.HeartBeatRequest(
            client_id="outsider-client",
            producer_groups=["outsider_pg"],
            consumers=[consumer("outsider_cg", "public")],
        )
    )
    yield env
    for channel in channels.values():
        await channel.close()


# -- the matrix ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    case: str  # resource and whose: "topic: another user's"
    who: str  # the account calling
    request: Callable[[Env], Any]
    expect: grpc.StatusCode
    check: Callable[[Env, Any], bool] | None = None  # on the reply, when OK


def pull(topic: str, group: str = "outsider_cg", sql: str = "") -> Callable[[Env], Any]:
    """A pull; with *sql* an SQL92 subscription, authorized exactly as a tag one."""
    return lambda e: pb.PullMessageRequest(
        consumer_group=group,
        topic=topic,
        queue_id=0,
        max_msg_nums=8,
        suspend_timeout_ms=0,
        subscription=sql or "*",
        expression_type="SQL92" if sql else "",
    )


def sql_consumer(group: str, topic: str) -> pb.ConsumerData:
    return pb.ConsumerData(
        group=group,
        subscriptions=[pb.Subscription(topic=topic, expression="TRUE", expression_type="SQL92")],
    )


def queues(*topics: str) -> list[pb.MessageQueueRef]:
    return [pb.MessageQueueRef(topic=t, broker_name="b", queue_id=0) for t in topics]


def batch_refused(index: int) -> Callable[[Env, Any], bool]:
    return lambda e, reply: any(
        r.index == index and r.error_code == "PERMISSION_DENIED" for r in reply.results
    )


def offset_req(topic: str) -> Callable[[Env], Any]:
    return lambda e: pb.GetQueueOffsetRequest(topic=topic, queue_id=0)


def admin_only(request: Callable[[Env], Any]) -> list[Row]:
    return [
        Row("admin request: a user", "outsider", request, DENIED),
        Row("admin request: an admin", "admin", request, OK),
    ]


MATRIX: dict[str, list[Row]] = {
    "SendMessage": [
        Row(
            "topic: allowed",
            "outsider",
            lambda e: pb.SendMessageRequest(record=record("public")),
            OK,
        ),
        Row(
            "topic: denied",
            "outsider",
            lambda e: pb.SendMessageRequest(record=record("hidden")),
            DENIED,
        ),
        Row(
            "topic: another user's",
            "outsider",
            lambda e: pb.SendMessageRequest(record=record("secret")),
            DENIED,
        ),
    ],
    "SendBatch": [
        Row(
            "topics: allowed",
            "outsider",
            lambda e: pb.SendBatchRequest(records=record("public") * 2),
            OK,
        ),
        Row(
            "topics: one denied",
            "outsider",
            lambda e: pb.SendBatchRequest(records=record("public") + record("hidden")),
            DENIED,
        ),
        Row(
            "topics: one another user's",
            "outsider",
            lambda e: pb.SendBatchRequest(records=record("public") + record("secret")),
            DENIED,
        ),
    ],
    # Each request of a stream carries its own signature (the caller's keys, added by
    # call()); its topics are authorized as SendBatch's.
    "SendStream": [
        Row(
            "topics: allowed",
            "outsider",
            lambda e: pb.SendStreamRequest(
                request_id=1, batch=pb.SendBatchRequest(records=record("public") * 2)
            ),
            OK,
        ),
        Row(
            "topics: one denied",
            "outsider",
            lambda e: pb.SendStreamRequest(
                request_id=2,
                batch=pb.SendBatchRequest(records=record("public") + record("hidden")),
            ),
            DENIED,
        ),
        Row(
            "topics: one another user's",
            "outsider",
            lambda e: pb.SendStreamRequest(
                request_id=3,
                batch=pb.SendBatchRequest(records=record("public") + record("secret")),
            ),
            DENIED,
        ),
    ],
    "InitProducerId": [
        Row(
            "topics: allowed",
            "outsider",
            lambda e: pb.InitProducerIdRequest(topics=["public"]),
            OK,
            lambda e, r: r.producer_id > 0,
        ),
        Row(
            "topics: one denied",
            "outsider",
            lambda e: pb.InitProducerIdRequest(topics=["public", "hidden"]),
            DENIED,
        ),
        Row(
            "topics: one another user's",
            "outsider",
            lambda e: pb.InitProducerIdRequest(topics=["public", "secret"], identity="writer"),
            DENIED,
        ),
    ],
    "PullMessage": [
        Row(
            "topic and group: allowed",
            "outsider",
            pull("public"),
            OK,
            lambda e, r: r.message_count == 1,
        ),
        Row("topic: denied", "outsider", pull("hidden"), DENIED),
        Row("topic: another user's", "outsider", pull("secret"), DENIED),
        Row("group: another user's", "outsider", pull("public", "owner_cg"), DENIED),
        Row("topic: the broker's (delayed)", "outsider", pull(SCHEDULE_TOPIC), DENIED),
        Row("topic: the broker's (half)", "outsider", pull(TRANS_HALF_TOPIC), DENIED),
        Row(
            "SQL92 filter: allowed",
            "outsider",
            pull("public", sql="TRUE"),
            OK,
            lambda e, r: r.message_count == 1,
        ),
        Row("SQL92 filter: topic denied", "outsider", pull("hidden", sql="TRUE"), DENIED),
        Row(
            "SQL92 filter: group another user's",
            "outsider",
            pull("public", "owner_cg", sql="TRUE"),
            DENIED,
        ),
    ],
    "PullBatch": [
        Row(
            "queues: allowed",
            "outsider",
            lambda e: pb.PullBatchRequest(
                consumer_group="outsider_cg",
                suspend_timeout_ms=0,
                pulls=[pb.QueuePull(topic="public", queue_id=0)],
            ),
            OK,
            lambda e, r: r.results[0].reply.message_count == 1,
        ),
        Row(
            "queue: denied, refused alone",
            "outsider",
            lambda e: pb.PullBatchRequest(
                consumer_group="outsider_cg",
                suspend_timeout_ms=0,
                pulls=[pb.QueuePull(topic="public"), pb.QueuePull(topic="hidden")],
            ),
            OK,
            batch_refused(1),
        ),
        Row(
            "queue: another user's, refused alone",
            "outsider",
            lambda e: pb.PullBatchRequest(
                consumer_group="outsider_cg",
                suspend_timeout_ms=0,
                pulls=[pb.QueuePull(topic="secret")],
            ),
            OK,
            batch_refused(0),
        ),
        Row(
            "queue: the broker's, refused alone",
            "outsider",
            lambda e: pb.PullBatchRequest(
                consumer_group="outsider_cg",
                suspend_timeout_ms=0,
                pulls=[pb.QueuePull(topic=SCHEDULE_TOPIC)],
            ),
            OK,
            batch_refused(0),
        ),
        Row(
            "group: another user's",
            "outsider",
            lambda e: pb.PullBatchRequest(
                consumer_group="owner_cg", pulls=[pb.QueuePull(topic="public")]
            ),
            DENIED,
        ),
    ],
    "QueryConsumerOffset": [
        Row(
            "topic and group: allowed",
            "outsider",
            lambda e: pb.QueryConsumerOffsetRequest(consumer_group="outsider_cg", topic="public"),
            OK,
        ),
        Row(
            "topic: denied",
            "outsider",
            lambda e: pb.QueryConsumerOffsetRequest(consumer_group="outsider_cg", topic="hidden"),
            DENIED,
        ),
        Row(
            "group: another user's",
            "outsider",
            lambda e: pb.QueryConsumerOffsetRequest(consumer_group="owner_cg", topic="public"),
            DENIED,
        ),
    ],
    "UpdateConsumerOffset": [
        Row(
            "topic and group: allowed",
            "outsider",
            lambda e: pb.UpdateConsumerOffsetRequest(
                consumer_group="outsider_cg", topic="public", offset=1
            ),
            OK,
        ),
        Row(
            "topic: another user's",
            "outsider",
            lambda e: pb.UpdateConsumerOffsetRequest(
                consumer_group="outsider_cg", topic="secret", offset=1
            ),
            DENIED,
        ),
        Row(
            "group: another user's",
            "outsider",
            lambda e: pb.UpdateConsumerOffsetRequest(
                consumer_group="owner_cg", topic="public", offset=1
            ),
            DENIED,
        ),
        Row(
            "offset: past the queue's end",
            "outsider",
            lambda e: pb.UpdateConsumerOffsetRequest(
                consumer_group="outsider_cg", topic="public", offset=99
            ),
            INVALID,
        ),
    ],
    "GetMinOffset": [
        Row("topic: allowed", "outsider", offset_req("public"), OK),
        Row("topic: denied", "outsider", offset_req("hidden"), DENIED),
        Row("topic: another user's", "outsider", offset_req("secret"), DENIED),
    ],
    "GetMaxOffset": [
        Row("topic: allowed", "outsider", offset_req("public"), OK, lambda e, r: r.offset == 1),
        Row("topic: denied", "outsider", offset_req("hidden"), DENIED),
        Row("topic: another user's", "outsider", offset_req("secret"), DENIED),
    ],
    "SearchOffsetByTimestamp": [
        Row(
            "topic: allowed",
            "outsider",
            lambda e: pb.SearchOffsetByTimestampRequest(topic="public"),
            OK,
        ),
        Row(
            "topic: another user's",
            "outsider",
            lambda e: pb.SearchOffsetByTimestampRequest(topic="secret"),
            DENIED,
        ),
    ],
    "QueryMessage": [
        Row(
            "topic: allowed",
            "outsider",
            lambda e: pb.QueryMessageRequest(topic="public", key="k1"),
            OK,
            lambda e, r: r.message_count == 1,
        ),
        Row(
            "topic: denied",
            "outsider",
            lambda e: pb.QueryMessageRequest(topic="hidden", key="k1"),
            DENIED,
        ),
        Row(
            "topic: another user's",
            "outsider",
            lambda e: pb.QueryMessageRequest(topic="secret", key="k1"),
            DENIED,
        ),
        Row(
            "topic: the broker's",
            "outsider",
            lambda e: pb.QueryMessageRequest(topic=TRANS_HALF_TOPIC, key="H1"),
            DENIED,
        ),
    ],
    "ViewMessage": [
        Row(
            "record: a user (admin request)",
            "outsider",
            lambda e: pb.ViewMessageRequest(offset_msg_id=e.offset_msg_id(e.public_phys)),
            DENIED,
        ),
        Row(
            "record: an admin",
            "admin",
            lambda e: pb.ViewMessageRequest(offset_msg_id=e.offset_msg_id(e.secret_phys)),
            OK,
            lambda e, r: b"hello" in r.record,
        ),
    ],
    "ConsumerSendMsgBack": [
        Row(
            "record and group: allowed",
            "outsider",
            lambda e: pb.ConsumerSendMsgBackRequest(
                group="outsider_cg", phys_offset=e.public_phys, origin_topic="public"
            ),
            OK,
        ),
        Row(
            "group: denied",
            "outsider",
            lambda e: pb.ConsumerSendMsgBackRequest(group="nobody_cg", phys_offset=e.public_phys),
            DENIED,
        ),
        Row(
            "record: another user's",
            "outsider",
            lambda e: pb.ConsumerSendMsgBackRequest(group="outsider_cg", phys_offset=e.secret_phys),
            DENIED,
        ),
        Row(
            "record: the broker's (a half)",
            "outsider",
            lambda e: pb.ConsumerSendMsgBackRequest(
                group="outsider_cg", phys_offset=e.outsider_half
            ),
            DENIED,
        ),
        Row(
            "record: not a message",
            "outsider",
            lambda e: pb.ConsumerSendMsgBackRequest(
                group="outsider_cg", phys_offset=e.public_phys + 1
            ),
            grpc.StatusCode.NOT_FOUND,
        ),
    ],
    "EndTransaction": [
        Row(
            "half and group: allowed",
            "outsider",
            lambda e: pb.EndTransactionRequest(
                producer_group="outsider_pg",
                commit_log_offset=e.outsider_half,
                resolution=pb.ROLLBACK,
            ),
            OK,
        ),
        Row(
            "group: denied",
            "outsider",
            lambda e: pb.EndTransactionRequest(
                producer_group="nobody_pg",
                commit_log_offset=e.outsider_half,
                resolution=pb.ROLLBACK,
            ),
            DENIED,
        ),
        Row(
            "group: another user's",
            "outsider",
            lambda e: pb.EndTransactionRequest(
                producer_group="owner_pg", commit_log_offset=e.owner_half, resolution=pb.ROLLBACK
            ),
            DENIED,
        ),
        Row(
            "half: another user's",
            "outsider",
            lambda e: pb.EndTransactionRequest(
                producer_group="outsider_pg", commit_log_offset=e.owner_half, resolution=pb.ROLLBACK
            ),
            DENIED,
        ),
        Row(
            "half: its topic not publishable",
            "auditor",
            lambda e: pb.EndTransactionRequest(
                producer_group="owner_pg", commit_log_offset=e.owner_half, resolution=pb.ROLLBACK
            ),
            DENIED,
        ),
    ],
    "LockBatchMQ": [
        Row(
            "queues and group: allowed",
            "outsider",
            lambda e: pb.LockBatchMQRequest(
                group="outsider_cg", client_id="outsider-client", queues=queues("public")
            ),
            OK,
            lambda e, r: len(r.locked) == 1,
        ),
        Row(
            "queue: denied",
            "outsider",
            lambda e: pb.LockBatchMQRequest(
                group="outsider_cg", client_id="outsider-client", queues=queues("public", "hidden")
            ),
            DENIED,
        ),
        Row(
            "queue: another user's",
            "outsider",
            lambda e: pb.LockBatchMQRequest(
                group="outsider_cg", client_id="outsider-client", queues=queues("secret")
            ),
            DENIED,
        ),
        Row(
            "queue: the broker's",
            "outsider",
            lambda e: pb.LockBatchMQRequest(
                group="outsider_cg", client_id="outsider-client", queues=queues(SCHEDULE_TOPIC)
            ),
            DENIED,
        ),
        Row(
            "group: another user's",
            "outsider",
            lambda e: pb.LockBatchMQRequest(
                group="owner_cg", client_id="outsider-client", queues=queues("public")
            ),
            DENIED,
        ),
    ],
    "UnlockBatchMQ": [
        Row(
            "queues and group: allowed",
            "outsider",
            lambda e: pb.UnlockBatchMQRequest(
                group="outsider_cg", client_id="outsider-client", queues=queues("public")
            ),
            OK,
        ),
        Row(
            "queue: another user's",
            "outsider",
            lambda e: pb.UnlockBatchMQRequest(
                group="outsider_cg", client_id="outsider-client", queues=queues("secret")
            ),
            DENIED,
        ),
        Row(
            "group: another user's",
            "outsider",
            lambda e: pb.UnlockBatchMQRequest(
                group="owner_cg", client_id="outsider-client", queues=queues("secret")
            ),
            DENIED,
        ),
    ],
    "HeartBeat": [
        Row(
            "client, groups and topics: allowed",
            "outsider",
            lambda e: pb.HeartBeatRequest(
                client_id="outsider-client",
                producer_groups=["outsider_pg"],
                consumers=[consumer("outsider_cg", "public")],
            ),
            OK,
        ),
        Row(
            "producer group: another user's",
            "outsider",
            lambda e: pb.HeartBeatRequest(
                client_id="outsider-client", producer_groups=["owner_pg"]
            ),
            DENIED,
        ),
        Row(
            "consumer group: another user's",
            "outsider",
            lambda e: pb.HeartBeatRequest(
                client_id="outsider-client", consumers=[consumer("owner_cg", "public")]
            ),
            DENIED,
        ),
        Row(
            "subscribed topic: denied",
            "outsider",
            lambda e: pb.HeartBeatRequest(
                client_id="outsider-client", consumers=[consumer("outsider_cg", "hidden")]
            ),
            DENIED,
        ),
        Row(
            "client id: another user's",
            "outsider",
            lambda e: pb.HeartBeatRequest(
                client_id="owner-client", producer_groups=["outsider_pg"]
            ),
            DENIED,
        ),
        Row(
            "SQL92 subscription: allowed",
            "outsider",
            lambda e: pb.HeartBeatRequest(
                client_id="outsider-client", consumers=[sql_consumer("outsider_cg", "public")]
            ),
            OK,
        ),
        Row(
            "SQL92 subscription: topic denied",
            "outsider",
            lambda e: pb.HeartBeatRequest(
                client_id="outsider-client", consumers=[sql_consumer("outsider_cg", "hidden")]
            ),
            DENIED,
        ),
    ],
    "UnregisterClient": [
        Row(
            "client: its own",
            "outsider",
            lambda e: pb.UnregisterClientRequest(
                client_id="outsider-client", consumer_group="outsider_cg"
            ),
            OK,
        ),
        Row(
            "client: another user's",
            "outsider",
            lambda e: pb.UnregisterClientRequest(
                client_id="owner-client", consumer_group="owner_cg"
            ),
            DENIED,
        ),
    ],
    "GetConsumerListByGroup": [
        Row(
            "group: allowed",
            "outsider",
            lambda e: pb.GetConsumerListByGroupRequest(consumer_group="outsider_cg"),
            OK,
            lambda e, r: list(r.consumer_ids) == ["outsider-client"],
        ),
        Row(
            "group: denied",
            "outsider",
            lambda e: pb.GetConsumerListByGroupRequest(consumer_group="nobody_cg"),
            DENIED,
        ),
        Row(
            "group: another user's",
            "outsider",
            lambda e: pb.GetConsumerListByGroupRequest(consumer_group="owner_cg"),
            DENIED,
        ),
    ],
    "ClientChannel": [
        Row(
            "client: its own",
            "outsider",
            lambda e: pb.ClientChannelRequest(client_id="outsider-client"),
            OK,
        ),
        Row(
            "client: another user's",
            "outsider",
            lambda e: pb.ClientChannelRequest(client_id="owner-client"),
            DENIED,
        ),
    ],
    "CreateTopic": admin_only(
        lambda e: pb.CreateTopicRequest(
            topic_config=common_pb2.TopicConfig(
                topic_name="fresh", read_queue_nums=1, write_queue_nums=1, perm=6
            )
        )
    ),
    "UpdateTopic": admin_only(
        lambda e: pb.UpdateTopicRequest(
            topic_config=common_pb2.TopicConfig(
                topic_name="public", read_queue_nums=1, write_queue_nums=1, perm=6
            )
        )
    ),
    "DeleteTopic": admin_only(lambda e: pb.DeleteTopicRequest(topic="hidden")),
    "CreateTopics": admin_only(
        lambda e: pb.CreateTopicsRequest(
            topic_configs=[
                common_pb2.TopicConfig(
                    topic_name="fresh-many", read_queue_nums=1, write_queue_nums=1, perm=6
                )
            ]
        )
    ),
    "DeleteTopics": admin_only(
        lambda e: pb.DeleteTopicsRequest(topics=["nothing-here"], ignore_missing=True)
    ),
    "GetAllTopicConfig": admin_only(lambda e: pb.GetAllTopicConfigRequest()),
    "GetTopicStatus": admin_only(lambda e: pb.GetTopicStatusRequest(topic="public")),
    "GetConsumeProgress": admin_only(
        lambda e: pb.GetConsumeProgressRequest(consumer_group="outsider_cg")
    ),
    "GetBrokerRuntimeInfo": admin_only(lambda e: pb.GetBrokerRuntimeInfoRequest()),
    "GetBrokerConfig": admin_only(lambda e: pb.GetBrokerConfigRequest()),
    "GetAllConsumerGroups": admin_only(lambda e: pb.GetAllConsumerGroupsRequest()),
    "ResetConsumerOffset": admin_only(
        lambda e: pb.ResetConsumerOffsetRequest(
            consumer_group="outsider_cg", topic="public", position=pb.RESET_TO_EARLIEST
        )
    ),
    "GetConsumerConnections": admin_only(
        lambda e: pb.GetConsumerConnectionsRequest(consumer_group="outsider_cg")
    ),
    "UpdateBrokerConfig": admin_only(
        lambda e: pb.UpdateBrokerConfigRequest(updates={"max_pull_messages": "32"})
    ),
    # past the ACL an admin reaches the broker, which knows no such group
    "DeleteConsumerGroup": [
        Row(
            "admin request: a user",
            "outsider",
            lambda e: pb.DeleteConsumerGroupRequest(consumer_group="nobody_cg"),
            DENIED,
        ),
        Row(
            "admin request: an admin",
            "admin",
            lambda e: pb.DeleteConsumerGroupRequest(consumer_group="nobody_cg"),
            grpc.StatusCode.NOT_FOUND,
        ),
    ],
    # past the ACL an admin reaches the broker, which refuses: it is already the master
    "PromoteToMaster": [
        Row("admin request: a user", "outsider", lambda e: pb.PromoteToMasterRequest(), DENIED),
        Row(
            "admin request: an admin",
            "admin",
            lambda e: pb.PromoteToMasterRequest(),
            grpc.StatusCode.FAILED_PRECONDITION,
        ),
    ],
}


def test_the_matrix_covers_every_rpc_of_the_broker_service():
    methods = {m.name for m in pb.DESCRIPTOR.services_by_name[BROKER].methods}
    assert set(MATRIX) == methods
    for name, rows in MATRIX.items():  # each RPC: one thing allowed, one refused at least
        assert any(row.expect is not DENIED for row in rows), f"{name}: no allowed row"
        assert any(row.expect is not OK for row in rows), f"{name}: no refused row"


CODES = {code.value[0]: code for code in grpc.StatusCode}


async def send_stream(
    stub: broker_pb2_grpc.BrokerStub, keys: Credentials, request: pb.SendStreamRequest
) -> tuple[grpc.StatusCode, str, Any]:
    """One SendStream request signed with *keys*: its answer's status, details, reply."""
    request.access_key = keys.access_key
    request.timestamp_ms = int(time.time() * 1000)
    request.nonce = f"n{request.request_id}-{time.monotonic_ns()}"
    request.signature = sign_stream_request(
        keys.secret_key,
        request.timestamp_ms,
        keys.access_key,
        request.nonce,
        request.batch.SerializeToString(),
    )
    call = stub.SendStream()
    try:
        await call.write(request)
        answer = await call.read()
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or "", None
    finally:
        call.cancel()
    if answer.error_code:
        return CODES[answer.error_code], answer.error_message, None
    return OK, "", answer.response


async def call(env: Env, name: str, row: Row) -> tuple[grpc.StatusCode, str, Any]:
    stub = env.stubs[row.who]
    request = row.request(env)
    if name == "SendStream":
        return await send_stream(stub, KEYS[row.who], request)
    if name == "ClientChannel":
        stream = stub.ClientChannel(request)
        try:
            first = await stream.read()
        except grpc.aio.AioRpcError as exc:
            return exc.code(), exc.details() or "", None
        finally:
            stream.cancel()
        return OK, "", first
    try:
        return OK, "", await getattr(stub, name)(request)
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or "", None


@pytest.mark.parametrize("name", sorted(MATRIX))
async def test_each_rpc_allows_its_own_resources_and_refuses_others(env, name):
    for row in MATRIX[name]:
        code, details, reply = await call(env, name, row)
        assert code is row.expect, f"{name} [{row.case}] as {row.who}: {code.name} {details}"
        if row.check is not None:
            assert row.check(env, reply), f"{name} [{row.case}]: unexpected reply {reply}"
        if row.who == "outsider" and code is not OK:
            # Whatever the outsider did not name stays unnamed.
            assert "owner_pg" not in details or "owner_pg" in str(row.request(env))
            assert "'secret'" not in details or "secret" in str(row.request(env))


# -- the attacks, one test each ------------------------------------------------------------
def retry_topics(env: Env) -> set[str]:
    return {
        tc.topic_name
        for tc in env.broker.topics.all()
        if tc.topic_name.startswith(("%RETRY%", "%DLQ%"))
    }


async def test_send_back_of_another_users_record_is_refused(env):
    before = env.broker.store.runtime_info()["put_messages_total"]
    for origin in ("", "secret", "public"):
        code, details = await status_of(
            env.stubs["outsider"].ConsumerSendMsgBack(
                pb.ConsumerSendMsgBackRequest(
                    group="outsider_cg",
                    phys_offset=env.secret_phys,
                    origin_topic=origin,
                    delay_level=-1,
                )
            )
        )
        # The same answer whether the guess of the topic is right or not: no oracle.
        assert code is DENIED, details
        assert "not one consumer group 'outsider_cg' may hand back" in details
        assert "secret" not in details and "hello" not in details
    assert env.broker.store.runtime_info()["put_messages_total"] == before
    assert "%DLQ%outsider_cg" not in retry_topics(env)


async def test_send_back_of_a_record_of_a_topic_the_group_never_subscribed_is_refused(env):
    # outsider may read "feed" (default SUB) but outsider_cg does not subscribe to it.
    env.broker.topics.create(
        BrokerTopicConfig(topic_name="feed", read_queue_nums=1, write_queue_nums=1)
    )
    phys = (
        await env.stubs["admin"].SendMessage(pb.SendMessageRequest(record=record("feed")))
    ).phys_offsets[0]
    code, details = await status_of(
        env.stubs["outsider"].ConsumerSendMsgBack(
            pb.ConsumerSendMsgBackRequest(group="outsider_cg", phys_offset=phys)
        )
    )
    assert code is DENIED and "subscribes to" in details


async def test_end_transaction_of_another_groups_half_is_refused_and_the_half_stays(env):
    code, details = await status_of(
        env.stubs["outsider"].EndTransaction(
            pb.EndTransactionRequest(
                producer_group="outsider_pg",
                commit_log_offset=env.owner_half,
                resolution=pb.ROLLBACK,
            )
        )
    )
    assert code is DENIED and "owner_pg" not in details and "secret" not in details
    code, details = await status_of(
        env.stubs["outsider"].EndTransaction(
            pb.EndTransactionRequest(
                producer_group="owner_pg", commit_log_offset=env.owner_half, resolution=pb.ROLLBACK
            )
        )
    )
    assert code is DENIED and "no PUB or SUB permission on group 'owner_pg'" in details
    reply = await env.stubs["owner"].EndTransaction(
        pb.EndTransactionRequest(
            producer_group="owner_pg", commit_log_offset=env.owner_half, resolution=pb.COMMIT
        )
    )
    assert not reply.already_resolved  # the owner's transaction was untouched


async def test_heartbeat_as_producer_of_another_users_group_is_refused(env):
    code, details = await status_of(
        env.stubs["outsider"].HeartBeat(
            pb.HeartBeatRequest(client_id="spy", producer_groups=["owner_pg"])
        )
    )
    assert (
        code is DENIED and "'outsider' has no PUB or SUB permission on group 'owner_pg'" in details
    )
    assert env.broker.clients.producer_ids("owner_pg") == ["owner-client"]


async def test_transaction_checks_go_only_to_producers_with_pub_on_the_halfs_topic(env, eventually):
    # auditor may join owner_pg (SUB on the group) but not publish to secret.
    await env.stubs["auditor"].HeartBeat(
        pb.HeartBeatRequest(client_id="auditor-client", producer_groups=["owner_pg"])
    )
    got: dict[str, list[pb.ServerCommand]] = {"owner": [], "auditor": []}
    streams = {
        who: env.stubs[who].ClientChannel(pb.ClientChannelRequest(client_id=f"{who}-client"))
        for who in got
    }

    async def read(who: str) -> None:
        async for command in streams[who]:
            got[who].append(command)

    readers = [asyncio.create_task(read(who)) for who in got]
    try:
        # Producers of a group take turns: two checks in a row to the owner mean the
        # auditor was passed over, not just unlucky.
        await eventually(
            lambda: sum(c.HasField("check_transaction_state") for c in got["owner"]) >= 2,
            timeout_s=15,
            interval_s=0.05,
            what="two transaction checks reaching the owner",
        )
        assert not any(c.HasField("check_transaction_state") for c in got["auditor"])
    finally:
        for stream in streams.values():
            stream.cancel()
        await asyncio.gather(*readers, return_exceptions=True)


async def test_system_topics_are_unreadable_even_with_a_default_sub_permission(env):
    for topic in (SCHEDULE_TOPIC, TRANS_HALF_TOPIC):
        code, details = await status_of(env.stubs["outsider"].PullMessage(pull(topic)(env)))
        assert code is DENIED and "broker system topic" in details
    reply = await env.stubs["admin"].PullMessage(pull(TRANS_HALF_TOPIC, "admin_cg")(env))
    assert reply.message_count == 2  # an admin account still reads them


async def test_system_topics_are_unreadable_without_the_acl(start_broker):
    broker = await start_broker()
    async with grpc.aio.insecure_channel(broker.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        await stub.SendMessage(
            pb.SendMessageRequest(record=half("TopicA", "pg", "H"), producer_group="pg")
        )
        for attempt in (
            stub.PullMessage(pull(TRANS_HALF_TOPIC, "g")(None)),
            stub.QueryMessage(pb.QueryMessageRequest(topic=TRANS_HALF_TOPIC, key="H")),
            stub.LockBatchMQ(
                pb.LockBatchMQRequest(group="g", client_id="c", queues=queues(SCHEDULE_TOPIC))
            ),
        ):
            code, details = await status_of(attempt)
            assert code is DENIED and "broker system topic" in details
        reply = await stub.PullBatch(
            pb.PullBatchRequest(consumer_group="g", pulls=[pb.QueuePull(topic=TRANS_HALF_TOPIC)])
        )
        assert reply.results[0].error_code == "PERMISSION_DENIED"


async def test_heartbeat_cannot_join_another_users_consumer_group(env):
    code, _ = await status_of(
        env.stubs["outsider"].HeartBeat(
            pb.HeartBeatRequest(client_id="spy", consumers=[consumer("owner_cg", "public")])
        )
    )
    assert code is DENIED
    assert env.broker.clients.consumer_ids("owner_cg") == ["owner-client"]


async def test_unregister_of_another_client_is_refused(env):
    code, details = await status_of(
        env.stubs["outsider"].UnregisterClient(
            pb.UnregisterClientRequest(client_id="owner-client", consumer_group="owner_cg")
        )
    )
    assert code is DENIED and "client id 'owner-client' is registered by another" in details
    assert "'owner'" not in details
    assert env.broker.clients.consumer_ids("owner_cg") == ["owner-client"]


async def test_client_channel_with_a_victims_client_id_leaves_the_victims_stream(env):
    victim = env.stubs["owner"].ClientChannel(pb.ClientChannelRequest(client_id="owner-client"))
    try:
        assert (await victim.read()).HasField("channel_opened")
        opened = env.broker.clients.channel("owner-client")
        attacker = env.stubs["outsider"].ClientChannel(
            pb.ClientChannelRequest(client_id="owner-client")
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await attacker.read()
        assert refused.value.code() is DENIED
        assert env.broker.clients.channel("owner-client") is opened and not opened.closed
    finally:
        victim.cancel()


async def test_heartbeat_bounds_its_groups_and_subscriptions(env):
    code, details = await status_of(
        env.stubs["admin"].HeartBeat(
            pb.HeartBeatRequest(client_id="many", producer_groups=[f"g{i}" for i in range(300)])
        )
    )
    assert code is INVALID and "names 300 groups; at most 256" in details
    code, details = await status_of(
        env.stubs["admin"].HeartBeat(
            pb.HeartBeatRequest(
                client_id="many", consumers=[consumer("g", *[f"t{i}" for i in range(1100)])]
            )
        )
    )
    assert code is INVALID and "1100 subscriptions; at most 1024" in details


async def test_retry_topics_made_by_heartbeats_are_bounded(tmp_path, start_broker):
    acl = tmp_path / "acl.toml"
    acl.write_text(ACL)
    broker = await start_broker(acl_enable=True, acl_file=str(acl), max_auto_retry_topics=1)
    async with grpc.aio.insecure_channel(
        broker.address, interceptors=signers(KEYS["admin"])
    ) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        await stub.HeartBeat(pb.HeartBeatRequest(client_id="c", consumers=[consumer("g1")]))
        code, details = await status_of(
            stub.HeartBeat(pb.HeartBeatRequest(client_id="c", consumers=[consumer("g2")]))
        )
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "access key 'admin' would create '%RETRY%g2'" in details
    assert "limit 1, max_auto_retry_topics" in details


async def test_a_heartbeat_without_the_group_permission_creates_no_retry_topic(env):
    code, _ = await status_of(
        env.stubs["outsider"].HeartBeat(
            pb.HeartBeatRequest(client_id="spy", consumers=[consumer("anything_else", "public")])
        )
    )
    assert code is DENIED
    assert "%RETRY%anything_else" not in retry_topics(env)


# -- signatures ----------------------------------------------------------------------------
async def raw_call(env: Env, method: str, request: Any, metadata: Any) -> tuple[Any, str]:
    async with grpc.aio.insecure_channel(env.broker.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        return await status_of(getattr(stub, method)(request, metadata=metadata))


async def test_replayed_signature_is_refused(env):
    request = pb.SendMessageRequest(record=record("public", body=b"once"))
    signed = signed_metadata(KEYS["outsider"], "/pocketmq.v1.Broker/SendMessage", request)
    assert (await raw_call(env, "SendMessage", request, signed))[0] is OK
    code, details = await raw_call(env, "SendMessage", request, signed)
    assert code is UNAUTHENTICATED and "a replay is refused" in details


@pytest.mark.parametrize(
    ("method", "signed", "sent"),
    [
        (
            "SendMessage",
            pb.SendMessageRequest(record=record("public", body=b"signed")),
            pb.SendMessageRequest(record=record("public", body=b"swapped")),
        ),
        (
            "SendBatch",
            pb.SendBatchRequest(records=record("public")),
            pb.SendBatchRequest(records=record("public") * 2),
        ),
        (
            "UpdateConsumerOffset",
            pb.UpdateConsumerOffsetRequest(
                consumer_group="outsider_cg", topic="public", queue_id=0, offset=0
            ),
            pb.UpdateConsumerOffsetRequest(
                consumer_group="outsider_cg", topic="public", queue_id=0, offset=1
            ),
        ),
        (
            "PullBatch",
            pb.PullBatchRequest(consumer_group="outsider_cg", pulls=[pb.QueuePull(topic="public")]),
            pb.PullBatchRequest(consumer_group="outsider_cg", pulls=[pb.QueuePull(topic="feed")]),
        ),
    ],
    ids=["records", "batch", "offset", "queues"],
)
async def test_signature_over_another_payload_is_refused(env, method, signed, sent):
    metadata = signed_metadata(KEYS["outsider"], f"/pocketmq.v1.Broker/{method}", signed)
    code, details = await raw_call(env, method, sent, metadata)
    assert code is UNAUTHENTICATED and "does not match" in details


async def test_offset_commit_past_the_queue_end_is_refused_with_the_numbers(env):
    code, details = await status_of(
        env.stubs["outsider"].UpdateConsumerOffset(
            pb.UpdateConsumerOffsetRequest(
                consumer_group="outsider_cg", topic="public", queue_id=0, offset=5
            )
        )
    )
    assert code is INVALID
    assert "offset 5 of public:0 is past the queue's max offset 1" in details


async def test_records_pulled_by_the_owner_are_intact(env):
    # The matrix's refusals changed nothing the owner reads.
    reply = await env.stubs["owner"].PullMessage(pull("secret", "owner_cg")(env))
    assert [m.uniq_key for m in iter_records(reply.records)] == ["S1"]
