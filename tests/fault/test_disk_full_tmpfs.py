"""A full disk for real: the broker's data directory on an 8 MiB tmpfs, filled by a file.

Each test fills the filesystem where one kind of file must grow (a commit-log
segment, consume-queue files for many new queues, an index file, the timer log,
topics.json and consumerOffset.json), and checks the operator's promises:

- the refusal is RESOURCE_EXHAUSTED with reason DISK_FULL;
- a batch is stored whole or not at all (the records readable are exactly the
  acknowledged ones);
- once space is back (the filler deleted) sends work again and every
  acknowledged message is readable;
- after a clean stop ``pocketmq store verify`` exits 0.

Mounting needs root; without it (or without tmpfs) the tests are skipped.
``disk_min_free_bytes`` is 1 byte and the disk check (``run_cleanup_once``,
stepped by the test) runs only when the test says, so the refusals come from
real ``ENOSPC`` at the file that must grow, not from the periodic check.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from faultkit import read_queue, wait_for
from processkit import store_verify
from wirekit import record

from pocketmq.broker.broker import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.grpc_status import REASON_METADATA_KEY
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc, common_pb2

pytestmark = pytest.mark.timeout(90)

KiB = 1024
MiB = 1024 * KiB
DISK_BYTES = 8 * MiB


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs mounted at a fresh directory, unmounted at teardown."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(disk: Path, *, leave_bytes: int = 0) -> Path:
    """Fill *disk* with one file until at most *leave_bytes* are left; return the file."""
    filler = disk / "filler"
    with open(filler, "wb") as f:
        chunk = b"\xff" * (64 * KiB)
        while True:
            room = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize - leave_bytes
            if room <= 0:
                break
            try:
                f.write(chunk[: min(len(chunk), room)])
                f.flush()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
    return filler


@contextlib.asynccontextmanager
async def disk_broker(
    data_dir: Path,
    **options: object,
) -> AsyncIterator[tuple[Broker, broker_pb2_grpc.BrokerStub]]:
    """An in-process broker on *data_dir* and a stub talking to it."""
    settings: dict[str, object] = dict(
        port=0,
        data_dir=str(data_dir),
        commitlog_file_size_bytes=MiB,
        max_message_size_bytes=64 * KiB,
        max_batch_size_bytes=256 * KiB,
        index_slots=256,
        index_entries=4096,
        consume_queue_units_per_file=1000,
        clean_resource_interval_ms=3_600_000,
        disk_min_free_bytes=1,
        consumer_offset_persist_interval_seconds=3600,
    )
    settings.update(options)
    broker = Broker(BrokerConfig(**settings))  # type: ignore[arg-type]
    await broker.start()
    try:
        async with grpc.aio.insecure_channel(broker.address) as channel:
            yield broker, broker_pb2_grpc.BrokerStub(channel)
    finally:
        await broker.stop(0)


async def create_topic(stub: broker_pb2_grpc.BrokerStub, topic: str, queues: int) -> None:
    await stub.CreateTopic(
        pb.CreateTopicRequest(
            topic_config=common_pb2.TopicConfig(
                topic_name=topic, read_queue_nums=queues, write_queue_nums=queues, perm=6
            )
        )
    )


async def send(stub: broker_pb2_grpc.BrokerStub, records: list[bytes]) -> bool:
    """True when the batch is stored; False when refused as DISK_FULL (anything else fails)."""
    try:
        await stub.SendBatch(pb.SendBatchRequest(records=b"".join(records)), timeout=10)
    except grpc.aio.AioRpcError as exc:
        assert_disk_full(exc)
        return False
    return True


def assert_disk_full(exc: grpc.aio.AioRpcError) -> None:
    assert exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, (exc.code(), exc.details())
    assert dict(exc.trailing_metadata() or ())[REASON_METADATA_KEY] == "DISK_FULL", exc.details()
    assert "disk full" in (exc.details() or ""), exc.details()


async def stored_keys(addr: str, topic: str, queues: int) -> list[str]:
    keys: list[str] = []
    for queue_id in range(queues):
        keys += [m.uniq_key for m in await read_queue(addr, topic, queue_id)]
    return sorted(keys)


async def space_back(broker: Broker, filler: Path) -> None:
    """Delete the filler, then step the disk check (it would run on its own, later)."""
    filler.unlink()
    assert broker.store is not None
    broker.store.run_cleanup_once()


async def assert_verify_clean(data_dir: Path) -> None:
    code, output = await store_verify(data_dir)
    assert code == 0, output


def batch(
    topic: str,
    prefix: str,
    count: int,
    *,
    queues: int = 1,
    body: bytes = b"m" * 200,
    keys: bool = False,
) -> list[bytes]:
    return [
        record(
            topic=topic,
            queue_id=i % queues,
            body=body,
            uniq=f"{prefix}-{i}",
            keys=f"k-{prefix}-{i}" if keys else "",
        )
        for i in range(count)
    ]


async def test_commit_log_segment_on_a_full_disk_refuses_whole_batches_and_resumes(small_disk):
    data_dir = small_disk / "broker"
    topic, acked = "TopicLog", []
    async with disk_broker(data_dir) as (broker, stub):
        await create_topic(stub, topic, 2)
        assert await send(stub, batch(topic, "a", 4, queues=2))
        acked += [f"a-{i}" for i in range(4)]
        filler = fill(small_disk, leave_bytes=256 * KiB)  # less than a 1 MiB segment
        refused = False
        for n in range(40):  # 40 x 32 KiB: the 1 MiB segment runs out on the way
            records = batch(topic, f"b{n}", 32, queues=2, body=b"b" * KiB)
            if not await send(stub, records):
                refused = True
                break
            acked += [f"b{n}-{i}" for i in range(32)]
        assert refused, "the broker never needed a new segment"
        assert await stored_keys(broker.address, topic, 2) == sorted(acked)
        await space_back(broker, filler)
        assert await send(stub, batch(topic, "c", 32, queues=2))
        acked += [f"c-{i}" for i in range(32)]
        assert await stored_keys(broker.address, topic, 2) == sorted(acked)
    await assert_verify_clean(data_dir)


async def test_new_consume_queues_on_a_full_disk_refuse_the_batch_whole_and_resume(small_disk):
    data_dir = small_disk / "broker"
    topic, queues = "TopicManyQueues", 64
    async with disk_broker(data_dir) as (broker, stub):
        await create_topic(stub, topic, queues)
        assert await send(stub, [record(topic=topic, queue_id=0, uniq="first")])
        # The commit-log segment and index are in place; 64 new queues need a page
        # each (256 KiB) and only 64 KiB are left.
        filler = fill(small_disk, leave_bytes=64 * KiB)
        records = batch(topic, "q", queues, queues=queues)
        assert not await send(stub, records)
        assert await stored_keys(broker.address, topic, queues) == ["first"], (
            "part of a refused batch is readable"
        )
        await space_back(broker, filler)
        assert await send(stub, records)  # the retry, after space came back
        assert await send(stub, batch(topic, "r", queues, queues=queues))
        want = sorted(
            ["first"] + [f"q-{i}" for i in range(queues)] + [f"r-{i}" for i in range(queues)]
        )
        assert await stored_keys(broker.address, topic, queues) == want
    await assert_verify_clean(data_dir)


async def test_a_new_index_file_on_a_full_disk_refuses_the_batch_and_resumes(small_disk):
    data_dir = small_disk / "broker"
    topic, acked = "TopicIndexed", []
    # 64 entries a file: a keyed message takes two (KEYS, UNIQ_KEY), so files roll often.
    async with disk_broker(data_dir, index_entries=64, index_slots=4096) as (broker, stub):
        await create_topic(stub, topic, 1)
        assert await send(stub, batch(topic, "a", 1, keys=True))
        acked.append("a-0")
        filler = fill(small_disk, leave_bytes=8 * KiB)  # an index file needs 17 KiB
        refused = False
        for n in range(40):
            if not await send(stub, batch(topic, f"b{n}", 8, keys=True)):
                refused = True
                break
            acked += [f"b{n}-{i}" for i in range(8)]
        assert refused, "the index never needed a new file"
        assert await stored_keys(broker.address, topic, 1) == sorted(acked)
        await space_back(broker, filler)
        assert await send(stub, batch(topic, "c", 8, keys=True))
        acked += [f"c-{i}" for i in range(8)]
        assert await stored_keys(broker.address, topic, 1) == sorted(acked)
        reply = await stub.QueryMessage(pb.QueryMessageRequest(topic=topic, key="k-c-7"))
        assert reply.records, "the key of a message sent after space came back"
    await assert_verify_clean(data_dir)


async def test_timer_log_on_a_full_disk_delivers_every_acknowledged_message_later(small_disk):
    data_dir = small_disk / "broker"
    topic, acked = "TopicTimed", []
    async with disk_broker(
        data_dir,
        timer_log_file_size_bytes=64 * KiB,
        timer_wheel_slots=3_600,
        timer_roll_window_s=600,
    ) as (broker, stub):
        await create_topic(stub, topic, 1)
        assert await send(stub, batch(topic, "plain", 1))
        acked.append("plain-0")
        # The commit log has room; the timer wheel (113 KiB) and a 64 KiB timer-log
        # segment do not: the timer service retries until space is back.
        filler = fill(small_disk, leave_bytes=16 * KiB)
        due = str(int(time.time() * 1000) + 500)
        for n in range(8):
            records = [_timed(topic, f"t{n}-{i}", due) for i in range(16)]
            if not await send(stub, records):
                break
            acked += [f"t{n}-{i}" for i in range(16)]
        assert len(acked) > 1, "no timer message was acknowledged on the full disk"
        assert await stored_keys(broker.address, topic, 1) == ["plain-0"], (
            "delivered without a timer log"
        )
        await space_back(broker, filler)
        await wait_for(
            lambda: _all_delivered(broker.address, topic, acked),
            timeout_s=30,
            what="delivery of every acknowledged timer message",
        )
    await assert_verify_clean(data_dir)


def _timed(topic: str, uniq: str, deliver_ms: str) -> bytes:
    from pocketmq.common.message import encode_record, pack_host

    return encode_record(
        topic=topic,
        body=b"t" * 512,
        queue_id=0,
        properties={"UNIQ_KEY": uniq, "TIMER_DELIVER_MS": deliver_ms},
        born_timestamp_ms=int(time.time() * 1000),
        born_host=pack_host(("127.0.0.1", 40000)),
        store_host=pack_host(("127.0.0.1", 0)),
    )


async def _all_delivered(addr: str, topic: str, acked: list[str]) -> bool:
    return set(acked) <= set(await stored_keys(addr, topic, 1))


async def test_topics_json_on_a_full_disk_refuses_the_change_and_keeps_the_table(small_disk):
    data_dir = small_disk / "broker"
    async with disk_broker(data_dir) as (broker, stub):
        await create_topic(stub, "TopicKept", 2)
        assert await send(stub, batch("TopicKept", "k", 4, queues=2))
        filler = fill(small_disk)
        # A change is one record appended to topics.log; a small one may still fit in
        # the log's last allocated page (and is then durable), so each change here is a
        # batch whose record needs new pages.
        padding = [
            common_pb2.TopicConfig(
                topic_name=f"Pad{i:04d}", read_queue_nums=1, write_queue_nums=1, perm=6
            )
            for i in range(300)
        ]
        for change in (
            stub.CreateTopics(
                pb.CreateTopicsRequest(
                    topic_configs=[
                        common_pb2.TopicConfig(
                            topic_name="TopicNew", read_queue_nums=2, write_queue_nums=2, perm=6
                        ),
                        *padding,
                    ]
                )
            ),
            stub.CreateTopics(
                pb.CreateTopicsRequest(
                    update_existing=True,
                    topic_configs=[
                        common_pb2.TopicConfig(
                            topic_name="TopicKept", read_queue_nums=4, write_queue_nums=4, perm=6
                        ),
                        *padding,
                    ],
                )
            ),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await change
            assert_disk_full(refused.value)
            assert "topics.json" in (refused.value.details() or "")
        topics = {
            tc.topic_name: tc
            for tc in (await stub.GetAllTopicConfig(pb.GetAllTopicConfigRequest())).topic_configs
        }
        assert "TopicNew" not in topics and topics["TopicKept"].write_queue_nums == 2
        assert "Pad0000" not in topics
        await space_back(broker, filler)
        await create_topic(stub, "TopicNew", 2)
        assert await send(stub, batch("TopicNew", "n", 4, queues=2))
        assert await stored_keys(broker.address, "TopicNew", 2) == sorted(
            f"n-{i}" for i in range(4)
        )
    await assert_verify_clean(data_dir)


async def test_consumer_offsets_on_a_full_disk_refuse_a_reset_and_keep_the_offsets(small_disk):
    data_dir = small_disk / "broker"
    topic, group = "TopicOffsets", "GroupOffsets"
    async with disk_broker(data_dir) as (broker, stub):
        await create_topic(stub, topic, 1)
        assert await send(stub, batch(topic, "o", 6))
        await stub.UpdateConsumerOffset(
            pb.UpdateConsumerOffsetRequest(consumer_group=group, topic=topic, queue_id=0, offset=2)
        )
        filler = fill(small_disk)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.ResetConsumerOffset(
                pb.ResetConsumerOffsetRequest(
                    consumer_group=group, topic=topic, position=pb.RESET_TO_LATEST
                )
            )
        assert_disk_full(refused.value)
        assert "consumerOffset.json" in (refused.value.details() or "")
        assert (
            await stub.QueryConsumerOffset(
                pb.QueryConsumerOffsetRequest(consumer_group=group, topic=topic, queue_id=0)
            )
        ).offset == 2
        await space_back(broker, filler)
        await stub.ResetConsumerOffset(
            pb.ResetConsumerOffsetRequest(
                consumer_group=group, topic=topic, position=pb.RESET_TO_LATEST
            )
        )
        assert (
            await stub.QueryConsumerOffset(
                pb.QueryConsumerOffsetRequest(consumer_group=group, topic=topic, queue_id=0)
            )
        ).offset == 6
        assert await send(stub, batch(topic, "p", 2))
    await assert_verify_clean(data_dir)
