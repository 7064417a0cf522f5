"""A replica's copy of its master's topics and consumer offsets (StreamMetadata)."""

from __future__ import annotations

import grpc
import pytest
from hakit import pair_configs

from pocketmq.broker.topic_config import BrokerTopicConfig
from pocketmq.v1 import ha_pb2

LONG = "t" * 100  # topic names of 120 characters: a big table from few topics
GROUPS = [f"{'g' * 95}-{i}" for i in range(4)]


@pytest.fixture
def pair_config(broker_config, nameserver):
    def make(**overrides):
        return pair_configs(broker_config, nameserver.address, "ASYNC_MASTER", replica=overrides)

    return make


def fill(master, topics: int, start: int = 0) -> None:
    """*topics* topics of 8 queues, each queue with an offset of every group in GROUPS."""
    for i in range(start, start + topics):
        name = f"{LONG}-{i:019d}"
        master.topics.create(
            BrokerTopicConfig(topic_name=name, read_queue_nums=8, write_queue_nums=8)
        )
        for group in GROUPS:
            for q in range(8):
                master.offsets.commit(group, name, q, i + q)


async def test_a_replica_copies_topics_and_offsets_beyond_one_grpc_messages_limit(
    pair_config, start_broker, eventually
):
    """7.9 MB of metadata: more than the replica's HA channel takes in one message
    (6 MiB), which GetMetadata's one answer was, so the replica never had the master's
    topics or offsets. StreamMetadata sends it in parts of 1 MiB."""
    master_cfg, replica_cfg = pair_config()
    master = await start_broker(master_cfg)
    fill(master, 1_000)
    size = master.ha.metadata.snapshot().ByteSize()
    assert size > 7 << 20
    parts = list(master.ha.metadata.parts())
    assert len(parts) >= 8 and max(p.ByteSize() for p in parts) <= 1 << 20
    replica = await start_broker(replica_cfg)
    await eventually(  # 7.9 MB built, sent and parsed: seconds on a loaded machine
        lambda: len(replica.topics) == len(master.topics),
        timeout_s=30,
        what="every topic on the replica",
    )
    await eventually(
        lambda: sorted(replica.offsets.entries()) == sorted(master.offsets.entries()),
        timeout_s=30,
        what="every consumer offset on the replica",
    )
    assert replica.topics.data_version == master.topics.data_version


async def test_a_replica_whose_table_is_the_masters_is_sent_only_the_offsets(
    pair_config, start_broker, eventually
):
    master_cfg, replica_cfg = pair_config()
    master = await start_broker(master_cfg)
    fill(master, 20)
    replica = await start_broker(replica_cfg)
    await eventually(
        lambda: replica.topics.data_version == master.topics.data_version, what="topics synced"
    )
    known = replica.ha._topics_version()
    steady = master.ha.metadata.snapshot(known)
    assert steady.topics_omitted and not steady.topic_configs
    assert len(steady.consumer_offsets) == 20 * 8 * len(GROUPS)
    replica.ha.metadata.apply_topics(steady)  # an omitted table is no empty table
    assert len(replica.topics) == len(master.topics)
    fill(master, 1, start=20)  # one topic more: a new version, the whole table again
    changed = master.ha.metadata.snapshot(known)
    assert not changed.topics_omitted and len(changed.topic_configs) == len(master.topics)
    await eventually(  # the next round (every 5 s): the new topic has no records to ask it
        lambda: len(replica.topics) == len(master.topics), timeout_s=20, what="the new topic"
    )


async def test_a_replica_refuses_metadata_beyond_its_bound_and_goes_on_copying_records(
    pair_config, start_broker, eventually, caplog
):
    master_cfg, replica_cfg = pair_config(ha_max_metadata_bytes=64 << 10)
    master = await start_broker(master_cfg)
    fill(master, 100)  # about 800 KB
    replica = await start_broker(replica_cfg)
    await eventually(
        lambda: "passes 65536 bytes (ha_max_metadata_bytes)" in caplog.text,
        what="the refusal logged",
    )
    assert len(replica.offsets.entries()) == 0
    await eventually(lambda: master.ha.replication.in_sync() == 1, what="records still copied")


async def test_a_replica_syncs_from_a_master_that_predates_stream_metadata(
    pair_config, start_broker, eventually
):
    """A master without StreamMetadata answers UNIMPLEMENTED: the replica asks
    GetMetadata, as it did before (a rolling upgrade upgrades replicas first)."""
    master_cfg, _ = pair_config()
    master = await start_broker(master_cfg)
    fill(master, 3)

    async def get_metadata(request, context):
        return master.ha.metadata.snapshot()

    old = grpc.aio.server()
    old.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "pocketmq.v1.HaService",
                {
                    "GetMetadata": grpc.unary_unary_rpc_method_handler(
                        get_metadata,
                        request_deserializer=ha_pb2.GetMetadataRequest.FromString,
                        response_serializer=ha_pb2.MetadataSnapshot.SerializeToString,
                    )
                },
            ),
        )
    )
    port = old.add_insecure_port("127.0.0.1:0")
    await old.start()
    try:
        _, replica_cfg = pair_config(ha_master_address=f"127.0.0.1:{port}")
        replica = await start_broker(replica_cfg)
        await eventually(
            lambda: len(replica.topics) == len(master.topics), what="topics from GetMetadata"
        )
        # (its offsets wait for records this stand-in, which serves no Replicate, never sends)
    finally:
        await old.stop(0)
