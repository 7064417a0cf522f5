"""Messages with a delivery time (TIMER_DELIVER_MS / TIMER_DELAY_MS / TIMER_DELAY_SEC) on a
real broker over gRPC: they arrive not before their time and within 1.5 s after it.

Delays are 1-3 s; every wait is a long poll with a deadline. Times are compared on the
broker's clock (the delivered record's store timestamp against TIMER_DELIVER_MS) for
"not before", and on the test's clock (arrival) for "within 1.5 s after".
"""

from __future__ import annotations

import collections
import functools
import time

import grpc
import pytest
import wirekit

from pocketmq.broker.grpc_status import REASON_METADATA_KEY
from pocketmq.common.message import StoredMessage, iter_records
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc

record = functools.partial(wirekit.record, topic="TopicT", tags="TagA", uniq="U1")
TIMER = dict(timer_wheel_slots=3_600, timer_roll_window_s=600, timer_log_file_size_bytes=64 * 1024)
LATE_TOLERANCE_MS = 1_500


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture
async def timer_broker(start_broker):
    return await start_broker(**TIMER)


@pytest.fixture
async def stub(timer_broker):
    async with grpc.aio.insecure_channel(timer_broker.address) as channel:
        yield broker_pb2_grpc.BrokerStub(channel)


async def receive(
    stub, count: int, *, topic="TopicT", queue_id=0, timeout_s=8.0, offset=0
) -> list[tuple[StoredMessage, int]]:
    """The next *count* messages of the queue from *offset*, each with its arrival (ms)."""
    out: list[tuple[StoredMessage, int]] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        reply = await stub.PullMessage(
            pb.PullMessageRequest(
                consumer_group="G",
                topic=topic,
                queue_id=queue_id,
                queue_offset=offset,
                suspend_timeout_ms=500,
                max_msg_nums=1_000,
            )
        )
        arrived = now_ms()
        if reply.status == pb.FOUND:
            out += [(m, arrived) for m in iter_records(reply.records)]
            offset = reply.next_begin_offset
    assert len(out) >= count, f"{len(out)} of {count} messages arrived within {timeout_s} s"
    return out


def assert_on_time(received: list[tuple[StoredMessage, int]]) -> None:
    for msg, arrived in received:
        deliver = int(msg.properties["TIMER_DELIVER_MS"])
        assert msg.store_timestamp_ms >= deliver, f"{msg.uniq_key} delivered early"
        assert arrived <= deliver + LATE_TOLERANCE_MS, (
            f"{msg.uniq_key} arrived {arrived - deliver} ms after its time"
        )


async def refusal(call):
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    reason = dict(info.value.trailing_metadata() or ()).get(REASON_METADATA_KEY, "")
    return info.value.code(), reason, info.value.details()


async def test_messages_with_explicit_times_arrive_not_before_and_within_1_5_s(stub):
    sent_at = now_ms()
    reply = await stub.SendBatch(
        pb.SendBatchRequest(
            records=b"".join(
                [
                    record(uniq="AT", queue_id=1, TIMER_DELIVER_MS=str(sent_at + 1_200)),
                    record(uniq="MS", queue_id=1, TIMER_DELAY_MS="2000"),
                    record(uniq="SEC", queue_id=1, TIMER_DELAY_SEC="1"),
                ]
            )
        )
    )
    assert list(reply.msg_ids) == ["AT", "MS", "SEC"]
    assert list(reply.queue_ids) == [1, 1, 1]  # as sent
    assert (
        await stub.PullMessage(
            pb.PullMessageRequest(
                consumer_group="G", topic="TopicT", queue_id=1, suspend_timeout_ms=0
            )
        )
    ).status == pb.NO_NEW_MSG
    received = await receive(stub, 3, queue_id=1)
    assert_on_time(received)
    by_key = {m.uniq_key: m for m, _ in received}
    assert sorted(by_key) == ["AT", "MS", "SEC"]
    assert int(by_key["AT"].properties["TIMER_DELIVER_MS"]) == sent_at + 1_200
    assert int(by_key["MS"].properties["TIMER_DELIVER_MS"]) >= sent_at + 2_000
    assert int(by_key["SEC"].properties["TIMER_DELIVER_MS"]) >= sent_at + 1_000
    assert by_key["MS"].properties == {
        "UNIQ_KEY": "MS",
        "TAGS": "TagA",
        "TIMER_DELIVER_MS": by_key["MS"].properties["TIMER_DELIVER_MS"],
    }
    assert by_key["AT"].body == b"hello" and by_key["AT"].queue_id == 1


async def test_many_messages_due_in_one_second_all_arrive_once_and_on_time(stub):
    base = now_ms() + 1_500
    keys = [f"M{i}" for i in range(600)]
    await stub.SendBatch(
        pb.SendBatchRequest(
            records=b"".join(
                record(uniq=k, queue_id=i % 2, TIMER_DELIVER_MS=str(base + i))
                for i, k in enumerate(keys)
            )
        )
    )
    received = await receive(stub, 300, queue_id=0) + await receive(stub, 300, queue_id=1)
    assert_on_time(received)
    counts = collections.Counter(m.uniq_key for m, _ in received)
    assert set(counts) == set(keys) and max(counts.values()) == 1


async def test_a_far_future_message_is_not_delivered_early(start_broker):
    broker = await start_broker(**{**TIMER, "timer_roll_window_s": 1})
    async with grpc.aio.insecure_channel(broker.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        sent_at = now_ms()
        await stub.SendBatch(
            pb.SendBatchRequest(
                records=b"".join(
                    [
                        record(uniq="HOUR", TIMER_DELAY_MS=str(3_600_000)),
                        record(
                            uniq="ROLLED", TIMER_DELIVER_MS=str(sent_at + 2_200)
                        ),  # past the window
                    ]
                )
            )
        )
        received = await receive(stub, 1)
        assert_on_time(received)
        assert [m.uniq_key for m, _ in received] == ["ROLLED"]
        assert "TIMER_ROLL_TIMES" not in received[0][0].properties
        late = await stub.PullMessage(
            pb.PullMessageRequest(
                consumer_group="G",
                topic="TopicT",
                queue_id=0,
                queue_offset=1,
                suspend_timeout_ms=500,
            )
        )
        assert late.status == pb.NO_NEW_MSG
    assert broker.timer.rolled_total >= 2 and broker.timer.pending == 1


async def test_refusals_name_the_problem_and_past_times_go_out_at_once(stub):
    code, reason, details = await refusal(
        stub.SendMessage(pb.SendMessageRequest(record=record(TIMER_DELAY_MS=str(4 * 86_400_000))))
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "WHEEL_TIMER_MSG_ILLEGAL")
    assert "is 345600000 ms ahead" in details and "at most 259200000 ms ahead" in details
    code, reason, details = await refusal(
        stub.SendMessage(pb.SendMessageRequest(record=record(TIMER_DELIVER_MS="tomorrow")))
    )
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "'tomorrow'" in details
    code, _, _ = await refusal(
        stub.SendMessage(pb.SendMessageRequest(record=record(topic="rmq_sys_wheel_timer")))
    )
    assert code is grpc.StatusCode.PERMISSION_DENIED
    sent_at = now_ms()
    await stub.SendMessage(
        pb.SendMessageRequest(record=record(uniq="PAST", TIMER_DELIVER_MS=str(sent_at - 60_000)))
    )
    [(msg, arrived)] = await receive(stub, 1, timeout_s=2)
    assert msg.uniq_key == "PAST" and arrived - sent_at < 1_000


async def test_pending_timer_messages_survive_a_graceful_restart(start_broker, broker_config):
    config = broker_config(**TIMER)
    broker = await start_broker(config)
    async with grpc.aio.insecure_channel(broker.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        await stub.SendBatch(
            pb.SendBatchRequest(
                records=b"".join(
                    [
                        record(uniq="SOON", TIMER_DELAY_MS="300"),
                        record(uniq="LATER", TIMER_DELAY_MS="1500"),
                    ]
                )
            )
        )
        assert [m.uniq_key for m, _ in await receive(stub, 1)] == ["SOON"]
    await broker.stop()
    broker = await start_broker(config)
    assert broker.timer.recovery.checkpoint_found and broker.timer.pending >= 1
    async with grpc.aio.insecure_channel(broker.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        received = await receive(stub, 1, offset=1)
        assert_on_time(received)
        assert [m.uniq_key for m, _ in received] == ["LATER"]
        again = await stub.PullMessage(
            pb.PullMessageRequest(
                consumer_group="G",
                topic="TopicT",
                queue_id=0,
                queue_offset=2,
                suspend_timeout_ms=300,
            )
        )
        assert again.status == pb.NO_NEW_MSG


async def test_a_sync_flush_broker_delivers_timer_messages_on_time(start_broker):
    broker = await start_broker(**TIMER, flush_disk_type="sync")
    async with grpc.aio.insecure_channel(broker.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        reply = await stub.SendBatch(
            pb.SendBatchRequest(
                records=b"".join(
                    record(uniq=f"S{i}", TIMER_DELAY_MS=str(800 + i * 100)) for i in range(3)
                )
            )
        )
        assert reply.status == pb.SEND_OK
        received = await receive(stub, 3)
    assert_on_time(received)
    assert [m.uniq_key for m, _ in received] == ["S0", "S1", "S2"]
