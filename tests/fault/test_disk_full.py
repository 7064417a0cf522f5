"""A full disk under a running broker: sends are refused clearly, reads go on, writes resume.

The store's file calls go through a ``StoreIO``; this one answers ``ENOSPC``
when a new commit-log segment is allocated while the "disk" is full, as
``posix_fallocate`` does on a real full filesystem. The segments are 64 KiB,
so the broker needs a new one after a few dozen messages.
"""

from __future__ import annotations

import errno
import time

import grpc
import pytest
from faultkit import read_queue, wait_for

from pocketmq.broker.broker import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.grpc_status import REASON_METADATA_KEY
from pocketmq.broker.store import StoreIO
from pocketmq.broker.store.message_store import DefaultMessageStore
from pocketmq.client import ClientError, Message, Producer
from pocketmq.nameserver import NameServer, NamesrvConfig
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc, common_pb2

pytestmark = pytest.mark.timeout(60)

KiB = 1024
TOPIC = "TopicDiskFull"


class FullDiskIO(StoreIO):
    """Refuses to allocate new segments while ``full`` is set."""

    def __init__(self) -> None:
        self.full = False

    def allocate(self, fd: int, size: int) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        super().allocate(fd, size)


async def test_disk_full_refuses_sends_keeps_reads_and_resumes(tmp_path, fault_report):
    io = FullDiskIO()
    namesrv = NameServer(NamesrvConfig(host="127.0.0.1", port=0))
    await namesrv.start()
    broker = Broker(
        BrokerConfig(
            port=0,
            data_dir=str(tmp_path / "broker"),
            namesrv_addrs=namesrv.address,
            commitlog_file_size_bytes=64 * KiB,
            max_message_size_bytes=16 * KiB,
            max_batch_size_bytes=32 * KiB,
            index_slots=256,
            index_entries=4096,
            consume_queue_units_per_file=1000,
            clean_resource_interval_ms=100,
        ),
        store_factory=lambda cfg, clock: DefaultMessageStore(cfg, clock=clock, io=io),
    )
    await broker.start()
    try:
        async with grpc.aio.insecure_channel(broker.address) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            await stub.CreateTopic(
                pb.CreateTopicRequest(
                    topic_config=common_pb2.TopicConfig(
                        topic_name=TOPIC, read_queue_nums=1, write_queue_nums=1
                    )
                )
            )
        await wait_for(lambda: namesrv.route_table.get_route(TOPIC), timeout_s=10, what="the route")
        async with Producer(
            group="disk-full",
            namesrv=namesrv.address,
            batch_max_bytes=16 * KiB,
            max_message_size_bytes=16 * KiB,
        ) as producer:
            acked = [
                (await producer.send(Message(topic=TOPIC, body=b"a" * KiB))).msg_id
                for _ in range(20)
            ]
            io.full = True
            refusal = None
            for _ in range(200):  # a 64 KiB segment holds about 60 of them
                try:
                    acked.append(
                        (await producer.send(Message(topic=TOPIC, body=b"b" * KiB))).msg_id
                    )
                except ClientError as exc:
                    refusal = exc
                    break
            assert refusal is not None, "the broker never needed a new segment"
            assert "disk full: cannot create a commit-log segment" in str(refusal), refusal
            assert "No space left on device" in str(refusal), refusal
            await check_raw_send_is_refused(broker.address)

            # reads go on while the disk is full
            stored = [m.uniq_key for m in await read_queue(broker.address, TOPIC, 0)]
            assert stored == acked

            io.full = False
            freed_at = time.monotonic()
            resumed: list[str] = []

            async def sends_again() -> bool:
                try:
                    resumed.append(
                        (await producer.send(Message(topic=TOPIC, body=b"c" * KiB))).msg_id
                    )
                except ClientError:
                    return False
                return True

            await wait_for(sends_again, timeout_s=20, what="a send after space returned")
            recover_s = time.monotonic() - freed_at
            acked += resumed
            acked += [
                (await producer.send(Message(topic=TOPIC, body=b"d" * KiB))).msg_id
                for _ in range(80)
            ]  # across at least one more new segment
        stored = [m.uniq_key for m in await read_queue(broker.address, TOPIC, 0)]
    finally:
        await broker.stop(0)
        await namesrv.stop(0)
    fault_report.add(
        "disk full (ENOSPC), then space back",
        acknowledged=len(acked),
        lost=len(set(acked) - set(stored)),
        recover_s=recover_s,
    )
    assert stored == acked, "the queue does not hold exactly the acknowledged messages"


async def check_raw_send_is_refused(addr: str) -> None:
    from pocketmq.common.message import encode_record, pack_host

    record = encode_record(topic=TOPIC, body=b"x" * 2 * KiB, store_host=pack_host(("127.0.0.1", 0)))
    async with grpc.aio.insecure_channel(addr) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await broker_pb2_grpc.BrokerStub(channel).SendMessage(
                pb.SendMessageRequest(record=record)
            )
    error = refused.value
    assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert dict(error.trailing_metadata())[REASON_METADATA_KEY] == "DISK_FULL"
    assert "No space left on device" in error.details(), error.details()
