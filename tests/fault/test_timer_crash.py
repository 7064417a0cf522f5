"""kill -9 of a broker process with timer messages pending: after a restart every one is
delivered, not before its time, and none twice (with or without a UNIQ_KEY of its own).

The broker runs with ``timer_flush_interval_ms`` far beyond the test, so no timer
checkpoint is ever written before the kill: recovery must rebuild the wheel from the
timer log alone, and every second walked before the kill is walked again.
"""

from __future__ import annotations

import collections
import signal
import time

import grpc
from processkit import broker_process
from wirekit import record as wire_record

from pocketmq.broker.broker import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.common.message import StoredMessage, iter_records
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc

MiB = 1024 * 1024
SMALL = dict(
    port=0,
    commitlog_file_size_bytes=16 * MiB,
    index_slots=1024,
    index_entries=4096,
    consume_queue_units_per_file=10_000,
)
TIMER = dict(
    timer_wheel_slots=3_600,
    timer_roll_window_s=600,
    timer_log_file_size_bytes=64 * 1024,
    timer_flush_interval_ms=600_000,
)
WITH_KEY, WITHOUT_KEY = 150, 150


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def pull_all(stub, offset: int, wait_ms: int) -> tuple[list[StoredMessage], int]:
    reply = await stub.PullMessage(
        pb.PullMessageRequest(
            consumer_group="G",
            topic="TopicT",
            queue_id=0,
            queue_offset=offset,
            max_msg_nums=1_000,
            suspend_timeout_ms=wait_ms,
        )
    )
    if reply.status != pb.FOUND:
        return [], offset
    return list(iter_records(reply.records)), reply.next_begin_offset


async def test_kill_9_with_timer_messages_pending_loses_none(tmp_path, eventually):
    config = BrokerConfig(**SMALL, **TIMER, data_dir=str(tmp_path / "data"))
    proc, addr = await broker_process(config, tmp_path / "broker.log", **TIMER)
    base = now_ms() + 1_000
    # Due over 2.5 s: some go out before the kill, some are still waiting at it.
    sent: dict[bytes, str] = {}  # body -> UNIQ_KEY; with and without one, interleaved
    for i in range(max(WITH_KEY, WITHOUT_KEY)):
        if i < WITH_KEY:
            sent[f"K{i}".encode()] = f"K{i}"
        if i < WITHOUT_KEY:
            sent[f"N{i}".encode()] = ""
    deliver = {body: base + (i * 2_500) // len(sent) for i, body in enumerate(sent)}
    try:
        async with grpc.aio.insecure_channel(addr) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            await stub.SendBatch(
                pb.SendBatchRequest(
                    records=b"".join(
                        wire_record(
                            "TopicT", body=body, uniq=uniq, TIMER_DELIVER_MS=str(deliver[body])
                        )
                        for body, uniq in sent.items()
                    )
                )
            )

            async def a_third_delivered():
                reply = await stub.GetMaxOffset(pb.GetQueueOffsetRequest(topic="TopicT"))
                return reply.offset >= len(sent) // 3

            await eventually(a_third_delivered, timeout_s=10, what="a third delivered")
            before_kill = (await stub.GetMaxOffset(pb.GetQueueOffsetRequest(topic="TopicT"))).offset
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()

    broker = Broker(config)
    await broker.start()
    try:
        await check_restart(broker, sent, deliver, before_kill, eventually)
    finally:
        await broker.stop()


async def check_restart(broker, sent, deliver, before_kill, eventually):
    assert not broker.recovery.clean_shutdown
    assert not broker.timer.recovery.checkpoint_found  # never written: worst case
    async with grpc.aio.insecure_channel(broker.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        seen: collections.Counter[bytes] = collections.Counter()
        received: list[StoredMessage] = []
        offset = 0

        async def everything_delivered():
            nonlocal offset
            msgs, offset = await pull_all(stub, offset, 500)
            received.extend(msgs)
            seen.update(m.body for m in msgs)
            return set(seen) == set(sent)

        await eventually(everything_delivered, timeout_s=15, what="every timer message")
        msgs, offset = await pull_all(stub, offset, 300)  # anything re-put late
        received.extend(msgs)
        seen.update(m.body for m in msgs)
    duplicated = sorted(body.decode() for body, n in seen.items() if n > 1)
    print(
        f"\n{before_kill} of {len(sent)} delivered before the kill; duplicates after the "
        f"restart: {len(duplicated)} ({', '.join(duplicated[:10])})"
    )
    assert all(m.store_timestamp_ms >= deliver[m.body] for m in received)  # never early
    assert max(seen.values()) == 1  # exactly once
    assert broker.timer.duplicates_skipped_total >= before_kill // 2
