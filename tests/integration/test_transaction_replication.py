"""A transaction's end on a SYNC_MASTER: answered once a replica holds the commit."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from hakit import pair_configs
from partition_proxy import PartitionProxy

from pocketmq.broker.topic_config import BrokerTopicConfig
from pocketmq.common.message import encode_record, pack_host
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc

TOPIC = "orders"
GROUP = "pg-tx"


@pytest.fixture
def pair_config(broker_config, nameserver):
    def make(**replica_overrides):
        # the test, not the slave timeout, decides when acks come
        return pair_configs(
            broker_config, nameserver.address, replica=replica_overrides, slave_timeout_ms=60_000
        )

    return make


def half(uniq: str) -> bytes:
    return encode_record(
        topic=TOPIC,
        body=b"uncommitted " + uniq.encode(),
        sysflag=0x4,
        properties={"TRAN_MSG": "true", "PGROUP": GROUP, "UNIQ_KEY": uniq},
        born_timestamp_ms=int(time.time() * 1000),
        born_host=pack_host(("127.0.0.1", 40000)),
    )


@pytest.mark.parametrize("resolution", [pb.COMMIT, pb.ROLLBACK], ids=["commit", "rollback"])
async def test_an_end_transaction_on_a_sync_master_is_answered_once_a_replica_holds_it(
    pair_config, start_broker, eventually, resolution
):
    """A SYNC_MASTER answers EndTransaction as it answers a send: once its replicas hold
    the op record (and the committed message). Answered before, a producer that then
    forgot the transaction and a master lost right after would leave the promoted
    replica checking a half that nobody can resolve. The replica's HA link is stalled
    by a proxy while the master has the EndTransaction; the answer comes only once the
    link flows again, and then the replica's log ends where the master's does."""
    master_cfg, _ = pair_config()
    master = await start_broker(master_cfg)
    master.topics.create(BrokerTopicConfig(topic_name=TOPIC, read_queue_nums=1, write_queue_nums=1))
    ha_port = int(master.ha.ha_address.rsplit(":", 1)[1])
    async with PartitionProxy("127.0.0.1", ha_port) as proxy:
        _, replica_cfg = pair_config(ha_master_address=proxy.addr)
        replica = await start_broker(replica_cfg)
        async with grpc.aio.insecure_channel(master.address) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            await eventually(
                lambda: master.ha.replication.in_sync() == 1, timeout_s=30, what="a replica"
            )
            sent = await stub.SendMessage(
                pb.SendMessageRequest(record=half("tx-1"), producer_group=GROUP)
            )
            assert sent.status == pb.SEND_OK
            await eventually(
                lambda: replica.store.commitlog.max_offset == master.store.commitlog.max_offset,
                what="the replica holds the half",
            )
            proxy.stall()
            ending = asyncio.ensure_future(
                stub.EndTransaction(
                    pb.EndTransactionRequest(
                        producer_group=GROUP,
                        commit_log_offset=sent.phys_offsets[0],
                        resolution=resolution,
                    )
                )
            )
            await eventually(
                lambda: master.store.commitlog.max_offset > replica.store.commitlog.max_offset,
                what="the op stored on the master",
            )
            await asyncio.sleep(1.0)
            assert not ending.done(), "EndTransaction answered before a replica held its op"
            proxy.heal()
            answer = await asyncio.wait_for(ending, 30)
            held = replica.store.commitlog.max_offset
    assert not answer.already_resolved
    assert held == master.store.commitlog.max_offset, "answered before the replica held it"
    if resolution == pb.COMMIT:
        await eventually(
            lambda: replica.store.max_offset(TOPIC, 0) == 1, what="the commit on the replica"
        )
