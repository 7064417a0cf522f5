"""Transactional messages end to end: real nameserver and brokers (port 0, gRPC), the public
TransactionProducer, a push consumer. Timeouts and check intervals are 300 ms through the
broker's config; every wait polls a condition with a deadline.

The last two tests kill a process with SIGKILL between the half message and its end: a
producer (another producer of its group answers the check) and a broker (the half is
resolved after the restart).
"""

from __future__ import annotations

import asyncio
import collections
import signal
import sys

import grpc
import pytest
from processkit import broker_process

from pocketmq.broker.topic_config import BrokerTopicConfig
from pocketmq.client import (
    ConsumeResult,
    InvalidMessageError,
    LocalTransactionState,
    Message,
    MessageExt,
    PushConsumer,
    TransactionProducer,
)
from pocketmq.common.message import iter_records
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc

TOPIC = "TxTopic"
GROUP = "tx-group"
# Checks every 300 ms; 100 of them (30 s) before a half is discarded, so that a slow
# machine still reconnects a producer in time.
FAST_TX = {
    "transaction_timeout_ms": 300,
    "transaction_check_interval_ms": 300,
    "transaction_check_max": 100,
}
COMMIT, ROLLBACK, UNKNOWN = (
    LocalTransactionState.COMMIT,
    LocalTransactionState.ROLLBACK,
    LocalTransactionState.UNKNOWN,
)


def commit_all(msg: MessageExt) -> LocalTransactionState:
    return COMMIT


async def routed(nameserver, eventually) -> None:
    await eventually(
        lambda: nameserver.route_table.get_route(TOPIC) is not None, what=f"route of {TOPIC}"
    )


@pytest.fixture
async def broker(start_broker, nameserver, eventually):
    broker = await start_broker(namesrv_addrs=nameserver.address, **FAST_TX)
    broker.topics.create(BrokerTopicConfig(topic_name=TOPIC, read_queue_nums=2, write_queue_nums=2))
    await routed(nameserver, eventually)
    return broker


async def delivered(addr: str) -> collections.Counter[bytes]:
    """Bodies in every queue of the topic, as a consumer pulls them."""
    seen: collections.Counter[bytes] = collections.Counter()
    async with grpc.aio.insecure_channel(addr) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        for queue_id in (0, 1):
            reply = await stub.PullMessage(
                pb.PullMessageRequest(
                    consumer_group="reader",
                    topic=TOPIC,
                    queue_id=queue_id,
                    queue_offset=0,
                    max_msg_nums=100,
                    suspend_timeout_ms=0,
                )
            )
            seen.update(m.body for m in iter_records(reply.records))
    return seen


async def end(addr: str, result, resolution) -> pb.EndTransactionResponse:
    async with grpc.aio.insecure_channel(addr) as channel:
        return await broker_pb2_grpc.BrokerStub(channel).EndTransaction(
            pb.EndTransactionRequest(
                producer_group=GROUP,
                offset_msg_id=result.offset_msg_id,
                msg_id=result.msg_id,
                resolution=resolution,
            )
        )


async def test_a_commit_reaches_the_consumer_exactly_once(broker, nameserver, eventually):
    received: list[MessageExt] = []
    consumer = PushConsumer(
        group="tx-consumers",
        namesrv=nameserver.address,
        consume_from="first",
        rebalance_interval_s=1.0,
    )
    consumer.subscribe(TOPIC)

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        received.extend(messages)
        return ConsumeResult.CONSUME_SUCCESS

    await consumer.start()
    try:
        async with TransactionProducer(GROUP, nameserver.address, checker=commit_all) as tx:
            result = await tx.send_in_transaction(
                Message(topic=TOPIC, body=b"paid"), lambda msg, arg: COMMIT
            )
        assert result.local_state is COMMIT
        await eventually(lambda: received, what="the committed message consumed")
        assert (await end(broker.address, result, pb.COMMIT)).already_resolved
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await end(broker.address, result, pb.ROLLBACK)
        assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert "already committed" in refused.value.details()
    finally:
        await consumer.shutdown()
    assert [(m.body, m.msg_id, m.topic) for m in received] == [(b"paid", result.msg_id, TOPIC)]
    assert await delivered(broker.address) == {b"paid": 1}


async def test_a_rollback_is_never_delivered(broker, nameserver):
    async with TransactionProducer(GROUP, nameserver.address, checker=commit_all) as tx:
        result = await tx.send_in_transaction(
            Message(topic=TOPIC, body=b"cancelled"), lambda msg, arg: ROLLBACK
        )
        assert broker.transactions.rolled_back_total == 1
        assert (await broker.transaction_check.run_once()).checked == 0
    assert result.local_state is ROLLBACK
    assert await delivered(broker.address) == {}
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await end(broker.address, result, pb.COMMIT)
    assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION


@pytest.mark.parametrize(
    "delay",
    [{"delay_level": 2}, {"deliver_at_ms": 1}, {"delay_ms": 5000}],
    ids=["level", "at", "after"],
)
async def test_a_delayed_transactional_message_is_refused_before_anything_is_sent(
    broker, nameserver, delay
):
    executed: list[MessageExt] = []
    puts = broker.store.runtime_info()["put_messages_total"]
    async with TransactionProducer(GROUP, nameserver.address, checker=commit_all) as tx:
        with pytest.raises(InvalidMessageError, match="cannot be delayed"):
            await tx.send_in_transaction(
                Message(topic=TOPIC, body=b"later", **delay),
                lambda msg, arg: executed.append(msg) or COMMIT,
            )
    assert executed == []
    assert broker.store.runtime_info()["put_messages_total"] == puts


async def test_unknown_then_the_check_commits_it(broker, nameserver, eventually):
    asked: list[MessageExt] = []

    async def checker(msg: MessageExt) -> LocalTransactionState:
        asked.append(msg)
        return COMMIT if len(asked) > 1 else UNKNOWN  # known on the second check

    async def execute_local(msg: Message, arg: str) -> LocalTransactionState:
        assert arg == "order-7"
        return UNKNOWN

    async with TransactionProducer(GROUP, nameserver.address, checker=checker) as tx:
        result = await tx.send_in_transaction(
            Message(topic=TOPIC, body=b"later", keys=["order-7"]), execute_local, "order-7"
        )
        assert await delivered(broker.address) == {}
        await eventually(lambda: tx.checks_answered, what="the second check answered")
    assert len(asked) >= 2  # a check already on its way may arrive after the answer
    assert (asked[0].topic, asked[0].msg_id, asked[0].keys) == (TOPIC, result.msg_id, ["order-7"])
    assert asked[0].queue_id == result.queue.queue_id
    assert await delivered(broker.address) == {b"later": 1}


async def test_a_failing_local_transaction_counts_as_unknown_and_is_checked(
    broker, nameserver, eventually
):
    def explode(msg: Message, arg: object) -> LocalTransactionState:
        raise RuntimeError("database down")

    async with TransactionProducer(GROUP, nameserver.address, checker=commit_all) as tx:
        result = await tx.send_in_transaction(Message(topic=TOPIC, body=b"retried"), explode)
        assert result.local_state is UNKNOWN
        await eventually(lambda: tx.checks_answered, what="the check answered")
    assert await delivered(broker.address) == {b"retried": 1}


PRODUCER_SCRIPT = r"""
import asyncio, sys
from pocketmq.client import LocalTransactionState, Message, TransactionProducer

async def main(namesrv, topic, group):
    producer = TransactionProducer(group, namesrv,
                                   checker=lambda msg: LocalTransactionState.UNKNOWN)
    await producer.start()

    async def hang(msg, arg):
        print("HALF SENT", flush=True)
        await asyncio.Event().wait()       # killed here, before any EndTransaction

    await producer.send_in_transaction(Message(topic=topic, body=b"orphan"), hang)

asyncio.run(main(*sys.argv[1:]))
"""


async def test_a_killed_producers_half_is_resolved_by_another_of_its_group(
    broker, nameserver, eventually
):
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        PRODUCER_SCRIPT,
        nameserver.address,
        TOPIC,
        GROUP,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line == b"HALF SENT\n"
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert await delivered(broker.address) == {}
    asked: list[bytes] = []

    def checker(msg: MessageExt) -> LocalTransactionState:
        asked.append(msg.body)
        return COMMIT

    async with TransactionProducer(
        GROUP, nameserver.address, checker=checker, topics=[TOPIC]
    ) as survivor:
        await eventually(
            lambda: survivor.checks_answered,
            timeout_s=20,
            what="the orphan's check answered by the surviving producer",
        )
    assert set(asked) == {b"orphan"}
    assert await delivered(broker.address) == {b"orphan": 1}


async def test_a_half_left_by_a_broker_crash_is_resolved_after_the_restart(
    tmp_path, start_broker, broker_config, nameserver, eventually
):
    config = broker_config(namesrv_addrs=nameserver.address, **FAST_TX)
    proc, addr = await broker_process(
        config,
        tmp_path / "broker.log",
        namesrv=nameserver.address,
        transaction_timeout_ms=300,
        transaction_check_interval_ms=300,
        transaction_check_max=100,
    )
    try:
        port = int(addr.rsplit(":", 1)[1])
        async with grpc.aio.insecure_channel(addr) as channel:
            await broker_pb2_grpc.BrokerStub(channel).CreateTopic(
                pb.CreateTopicRequest(
                    topic_config={"topic_name": TOPIC, "read_queue_nums": 2, "write_queue_nums": 2}
                )
            )
        await routed(nameserver, eventually)

        async def crash_then_commit(msg: Message, arg: object) -> LocalTransactionState:
            proc.send_signal(signal.SIGKILL)  # the broker dies holding the half
            await proc.wait()
            return COMMIT  # this EndTransaction fails

        async with TransactionProducer(GROUP, nameserver.address, checker=commit_all) as tx:
            result = await tx.send_in_transaction(
                Message(topic=TOPIC, body=b"survivor"), crash_then_commit
            )
            assert result.local_state is COMMIT
            broker = await start_broker(config.__class__(**{**_fields(config), "port": port}))
            assert not broker.recovery.clean_shutdown
            await eventually(
                lambda: tx.checks_answered,
                timeout_s=20,
                what="the half committed through a check after the restart",
            )
            assert broker.transactions.committed_total == 1
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert await delivered(broker.address) == {b"survivor": 1}


def _fields(config) -> dict:
    return {name: getattr(config, name) for name in config.__dataclass_fields__}
