"""Idempotent producers against a real broker: lost answers, fencing, retried raw sends;
and the consumer half, ``PushConsumer(dedup_window=…)``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from partition_proxy import PartitionProxy

from pocketmq.broker.broker import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.topic_config import SCHEDULE_TOPIC, TRANS_HALF_TOPIC, BrokerTopicConfig
from pocketmq.client import (
    ConsumeResult,
    LocalTransactionState,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    TransactionProducer,
)
from pocketmq.client.errors import ProducerFencedError
from pocketmq.client.idempotence import stamp
from pocketmq.client.message_codec import decode_messages, encode_message
from pocketmq.client.transaction_producer import _prepared
from pocketmq.common.message import iter_records
from pocketmq.nameserver import NameServer, NamesrvConfig
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc

TOPIC, QUEUES = "TopicIdem", 4
HOST = b"\x7f\0\0\1\0\0\0\0"


@pytest.fixture
async def cluster(tmp_path, eventually) -> AsyncIterator[tuple[NameServer, Broker]]:
    namesrv = NameServer(NamesrvConfig(host="127.0.0.1", port=0))
    await namesrv.start()
    broker = Broker(
        BrokerConfig(
            broker_name="broker-a",
            port=0,
            data_dir=str(tmp_path / "a"),
            grpc_v2_port=-1,
            namesrv_addrs=namesrv.address,
            commitlog_file_size_bytes=16 * 1024 * 1024,
            index_slots=1000,
            index_entries=4000,
            default_topic_queue_nums=QUEUES,
        )
    )
    await broker.start()
    broker.topics.create(
        BrokerTopicConfig(topic_name=TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    )
    await eventually(
        lambda: namesrv.route_table.get_route(TOPIC) is not None, what=f"route of {TOPIC}"
    )
    try:
        yield namesrv, broker
    finally:
        await broker.stop(0)
        await namesrv.stop(0)


def stored_bodies(broker: Broker, topic: str = TOPIC, queues: int = QUEUES) -> dict[int, list]:
    out = {}
    for queue_id in range(queues):
        got = broker.store.get_messages(topic, queue_id, 0, max_count=1000)
        out[queue_id] = [m.body for m in decode_messages(b"".join(got.records), "broker-a")]
    return out


def through(producer: Producer, proxy: PartitionProxy) -> None:
    """Route the producer's calls to broker-a through *proxy*."""
    routes = producer._routes
    assert routes is not None
    routes.addr_of = lambda name: proxy.addr  # type: ignore[method-assign]


async def test_lost_answers_are_retried_and_each_message_is_stored_once_in_order_per_queue(
    cluster, eventually
) -> None:
    namesrv, broker = cluster
    async with (
        PartitionProxy("127.0.0.1", int(broker.address.rsplit(":", 1)[1])) as proxy,
        Producer(
            group="idem-pg",
            namesrv=namesrv.address,
            idempotent=True,
            request_timeout_ms=300,
            send_timeout_ms=20_000,
        ) as producer,
    ):
        through(producer, proxy)
        await producer.send(Message(topic=TOPIC, body=b"warm-up"))  # opens the session
        proxy.drop_answers()
        sends = [
            asyncio.create_task(producer.send(Message(topic=TOPIC, body=b"m%03d" % i)))
            for i in range(40)
        ]
        await eventually(
            lambda: sum(map(len, stored_bodies(broker).values())) >= 41,
            timeout_s=15,
            what="every message stored while answers are lost",
        )
        await eventually(lambda: proxy.answer_bytes_dropped > 0, what="answers dropped")
        proxy.heal()
        results = await asyncio.gather(*sends)
    stored = stored_bodies(broker)
    everything = [body for bodies in stored.values() for body in bodies]
    assert sorted(everything) == sorted([b"warm-up"] + [b"m%03d" % i for i in range(40)])
    for bodies in stored.values():
        assert bodies == sorted(bodies, key=lambda b: (b != b"warm-up", b)), "order per queue"
    for i, result in enumerate(results):  # each answer names where it really is
        assert stored[result.queue.queue_id][result.queue_offset] == b"m%03d" % i


def stored_stamps(broker: Broker, queue_id: int) -> list[tuple[bytes, str]]:
    """(body, PMQ_IDEM) of each record of the queue, in queue order (as the broker has it)."""
    got = broker.store.get_messages(TOPIC, queue_id, 0, max_count=10_000)
    return [(m.body, m.properties.get("PMQ_IDEM", "")) for m in iter_records(b"".join(got.records))]


async def test_concurrent_send_batches_reach_their_queue_in_sequence_order(cluster) -> None:
    namesrv, broker = cluster
    async with Producer(group="idem-pg", namesrv=namesrv.address) as producer:
        assert producer.config.idempotent, "on by default"
        queue = (await producer.fetch_publish_queues(TOPIC))[2]
        batches = [
            [Message(topic=TOPIC, body=b"b%02d-%d" % (i, j)) for j in range(8)] for i in range(48)
        ]
        results = await asyncio.gather(
            *(producer.send_batch(batch, queue=queue) for batch in batches)
        )
        sessions = producer._sessions
        assert sessions is not None and sessions.opened == 1
    stored = stored_stamps(broker, queue.queue_id)
    assert len(stored) == 48 * 8
    pid = stored[0][1].split(".")[0]
    assert [stamp for _body, stamp in stored] == [f"{pid}.0.{seq}" for seq in range(48 * 8)]
    by_body = {body: offset for offset, (body, _stamp) in enumerate(stored)}
    for batch, answers in zip(batches, results, strict=True):
        assert [by_body[m.body] for m in batch] == [r.queue_offset for r in answers]


async def test_a_gap_left_by_a_given_up_record_is_renumbered_in_a_new_session(cluster) -> None:
    namesrv, broker = cluster
    async with Producer(group="idem-pg", namesrv=namesrv.address) as producer:
        queue = (await producer.fetch_publish_queues(TOPIC))[1]
        await producer.send(Message(topic=TOPIC, body=b"first"), queue=queue)
        sessions = producer._sessions
        assert sessions is not None
        old = sessions.current("broker-a")
        assert old is not None
        old.take(TOPIC, queue.queue_id)  # numbered, never sent: as if given up
        result = await producer.send(Message(topic=TOPIC, body=b"after the gap"), queue=queue)
        new = sessions.current("broker-a")
        assert new is not None and new.producer_id != old.producer_id and old.retired
    assert result.queue_offset == 1
    assert [body for body, _stamp in stored_stamps(broker, queue.queue_id)] == [
        b"first",
        b"after the gap",
    ]


async def test_a_send_refused_out_of_order_waits_for_the_earlier_request_of_its_queue(
    cluster, eventually
) -> None:
    namesrv, broker = cluster
    async with Producer(group="idem-pg", namesrv=namesrv.address) as producer:
        queue = (await producer.fetch_publish_queues(TOPIC))[3]
        await producer.send(Message(topic=TOPIC, body=b"first"), queue=queue)
        sessions = producer._sessions
        assert sessions is not None
        session = sessions.current("broker-a")
        assert session is not None
        earlier = session.open(TOPIC, queue.queue_id)  # an earlier request, still on its way
        later = asyncio.create_task(producer.send(Message(topic=TOPIC, body=b"later"), queue=queue))
        await eventually(
            lambda: bool(earlier._waiters),
            what="the later send, refused out of order, waiting for the earlier",
        )
        record = producer._encode(
            Message(topic=TOPIC, body=b"earlier"), queue.queue_id, earlier.stamp("EARLIER")
        )
        earlier_result = await producer._attempt_idempotent(queue, record, float("inf"))
        earlier.close()
        later_result = await later
        assert sessions.opened == 1, "no renumbering: the gap was only a request in flight"
    assert (earlier_result.queue_offset, later_result.queue_offset) == (1, 2)
    assert [body for body, _stamp in stored_stamps(broker, queue.queue_id)] == [
        b"first",
        b"earlier",
        b"later",
    ]


async def test_coalesced_sends_leave_no_open_sequence_behind_when_first_calls_fail(
    cluster, eventually
) -> None:
    namesrv, broker = cluster
    async with (
        PartitionProxy("127.0.0.1", int(broker.address.rsplit(":", 1)[1])) as proxy,
        Producer(
            group="idem-pg",
            namesrv=namesrv.address,
            request_timeout_ms=300,
            send_timeout_ms=20_000,
        ) as producer,
    ):
        through(producer, proxy)
        await asyncio.gather(
            *(producer.send(Message(topic=TOPIC, body=b"ok%d" % i)) for i in range(8))
        )
        proxy.drop_answers()  # first calls fail: their sequences become tickets, retried
        sends = [
            asyncio.create_task(producer.send(Message(topic=TOPIC, body=b"lost%d" % i)))
            for i in range(8)
        ]
        await eventually(lambda: proxy.answer_bytes_dropped > 0, what="answers dropped")
        proxy.heal()
        await asyncio.gather(*sends)
        sessions = producer._sessions
        assert sessions is not None and sessions.opened == 1
        session = sessions.current("broker-a")
        assert session is not None and session.lanes
        assert {key: list(lane.open) for key, lane in session.lanes.items()} == {
            key: [] for key in session.lanes
        }
    assert sum(map(len, stored_bodies(broker).values())) == 16


async def test_a_send_refused_out_of_order_waits_for_an_earlier_coalesced_send(
    cluster, eventually
) -> None:
    namesrv, broker = cluster
    async with Producer(group="idem-pg", namesrv=namesrv.address) as producer:
        queue = (await producer.fetch_publish_queues(TOPIC))[2]
        await producer.send(Message(topic=TOPIC, body=b"first"), queue=queue)
        sessions = producer._sessions
        assert sessions is not None
        lane = sessions.lane_of(queue)
        assert lane is not None
        seq = lane.take_one()  # a coalesced send's bare sequence, still on its way
        later = asyncio.create_task(producer.send(Message(topic=TOPIC, body=b"later"), queue=queue))
        await eventually(
            lambda: bool(lane._waiting),
            what="the later send, refused out of order, waiting for the earlier",
        )
        session = lane.session
        record = producer._encode(
            Message(topic=TOPIC, body=b"earlier"),
            queue.queue_id,
            stamp("EARLIER", session.producer_id, session.epoch, seq),
        )
        earlier_result = await producer._attempt_idempotent(queue, record, float("inf"))
        lane.close_one(seq)
        later_result = await later
        assert sessions.opened == 1, "no renumbering: the gap was only a request in flight"
    assert (earlier_result.queue_offset, later_result.queue_offset) == (1, 2)
    assert [body for body, _stamp in stored_stamps(broker, queue.queue_id)] == [
        b"first",
        b"earlier",
        b"later",
    ]


async def test_a_delayed_send_and_a_half_message_whose_answers_were_lost_are_stored_once(
    cluster, eventually
) -> None:
    """Through the SDK: the retries of a delayed send and of a transaction's half
    message, after their answers were lost, are answered from the first stores."""
    namesrv, broker = cluster
    states: list[LocalTransactionState] = []

    async def commit(msg: Message, arg: object) -> LocalTransactionState:
        states.append(LocalTransactionState.COMMIT)
        return LocalTransactionState.COMMIT

    async with (
        PartitionProxy("127.0.0.1", int(broker.address.rsplit(":", 1)[1])) as proxy,
        Producer(
            group="idem-pg", namesrv=namesrv.address, request_timeout_ms=300, send_timeout_ms=20_000
        ) as producer,
        TransactionProducer(
            "idem-tx",
            namesrv.address,
            checker=lambda ext: LocalTransactionState.COMMIT,
            request_timeout_ms=300,
            send_timeout_ms=20_000,
        ) as tx,
    ):
        through(producer, proxy)
        through(tx, proxy)
        queue = (await producer.fetch_publish_queues(TOPIC))[0]
        await producer.send(Message(topic=TOPIC, body=b"warm-up"), queue=queue)
        await tx.fetch_publish_queues(TOPIC)
        assert tx._sessions is not None  # its producer id and channel, before answers
        await tx._sessions.get("broker-a", proxy.addr, TOPIC)  # are lost
        proxy.drop_answers()
        delayed = asyncio.create_task(
            producer.send(Message(topic=TOPIC, body=b"later", delay_level=3), queue=queue)
        )
        half = asyncio.create_task(
            tx.send_in_transaction(Message(topic=TOPIC, body=b"in a transaction"), commit)
        )
        await eventually(
            lambda: (
                broker.store.max_offset(SCHEDULE_TOPIC, 2) >= 1
                and broker.store.max_offset(TRANS_HALF_TOPIC, 0) >= 1
            ),
            timeout_s=15,
            what="the delayed and the half message stored",
        )
        await eventually(lambda: proxy.answer_bytes_dropped > 0, what="answers dropped")
        proxy.heal()
        await delayed
        outcome = await half
    assert outcome.local_state is LocalTransactionState.COMMIT and states == [
        LocalTransactionState.COMMIT
    ]
    assert broker.store.max_offset(SCHEDULE_TOPIC, 2) == 1
    assert broker.store.max_offset(TRANS_HALF_TOPIC, 0) == 1


async def test_a_restarted_producer_with_the_same_identity_fences_the_older_one(cluster) -> None:
    namesrv, broker = cluster
    async with Producer(
        group="idem-pg", namesrv=namesrv.address, idempotent=True, producer_identity="orders-writer"
    ) as older:
        queue = (await older.fetch_publish_queues(TOPIC))[0]
        await older.send(Message(topic=TOPIC, body=b"old-1"), queue=queue)
        async with Producer(
            group="idem-pg",
            namesrv=namesrv.address,
            idempotent=True,
            producer_identity="orders-writer",
        ) as newer:
            await newer.send(Message(topic=TOPIC, body=b"new-1"), queue=queue)
            with pytest.raises(ProducerFencedError, match="newer instance"):
                await older.send(Message(topic=TOPIC, body=b"old-2"), queue=queue)
            await newer.send(Message(topic=TOPIC, body=b"new-2"), queue=queue)
    assert stored_bodies(broker)[queue.queue_id] == [b"old-1", b"new-1", b"new-2"]


@pytest.fixture
async def stub(cluster) -> AsyncIterator[broker_pb2_grpc.BrokerStub]:
    _namesrv, broker = cluster
    async with grpc.aio.insecure_channel(broker.address) as channel:
        yield broker_pb2_grpc.BrokerStub(channel)


async def producer_id(stub: broker_pb2_grpc.BrokerStub) -> int:
    return (await stub.InitProducerId(pb.InitProducerIdRequest(topics=[TOPIC]))).producer_id


def numbered(pid: int, seq: int, body: bytes, **fields: int) -> bytes:
    return encode_message(
        Message(topic=TOPIC, body=body, **fields),
        queue_id=1,
        uniq_key=stamp(f"K{seq}", pid, 0, seq),
        born_host=HOST,
        born_timestamp_ms=1,
    )


async def test_a_resent_request_is_answered_with_the_original_offsets(stub, cluster) -> None:
    pid = await producer_id(stub)
    records = numbered(pid, 0, b"a") + numbered(pid, 1, b"b")
    first = await stub.SendBatch(pb.SendBatchRequest(records=records))
    again = await stub.SendBatch(pb.SendBatchRequest(records=records + numbered(pid, 2, b"c")))
    assert list(again.duplicates) == [True, True, False]
    assert list(again.queue_offsets)[:2] == list(first.queue_offsets)
    assert list(again.phys_offsets)[:2] == list(first.phys_offsets)
    assert list(again.msg_ids) == ["K0", "K1", "K2"]
    assert stored_bodies(cluster[1])[1] == [b"a", b"b", b"c"]


async def test_a_gap_in_the_sequence_is_refused_out_of_range(stub) -> None:
    pid = await producer_id(stub)
    await stub.SendMessage(pb.SendMessageRequest(record=numbered(pid, 0, b"a")))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.SendMessage(pb.SendMessageRequest(record=numbered(pid, 2, b"c")))
    assert err.value.code() is grpc.StatusCode.OUT_OF_RANGE
    assert "next one there is 1" in err.value.details()
    assert dict(err.value.trailing_metadata())["pocketmq-reason"] == "OUT_OF_ORDER_SEQUENCE"


async def test_retried_delayed_and_half_sends_are_stored_once(stub, cluster) -> None:
    _namesrv, broker = cluster
    pid = await producer_id(stub)
    delayed = numbered(pid, 0, b"later", delay_level=3)
    half = _prepared(numbered(pid, 1, b"half"))
    for record in (delayed, half):
        first = await stub.SendMessage(
            pb.SendMessageRequest(record=record, producer_group="idem-pg")
        )
        again = await stub.SendMessage(
            pb.SendMessageRequest(record=record, producer_group="idem-pg")
        )
        assert list(again.duplicates) == [True]
        assert again.phys_offsets == first.phys_offsets
    assert broker.store.max_offset(SCHEDULE_TOPIC, 2) == 1
    assert broker.store.max_offset(TRANS_HALF_TOPIC, 0) == 1


async def test_the_dedup_state_survives_a_broker_restart(tmp_path, eventually) -> None:
    config = BrokerConfig(
        broker_name="broker-a",
        port=0,
        data_dir=str(tmp_path / "a"),
        grpc_v2_port=-1,
        default_topic_queue_nums=QUEUES,
        commitlog_file_size_bytes=16 * 1024 * 1024,
        index_slots=1000,
        index_entries=4000,
    )
    answers = []
    for _run in range(2):
        broker = Broker(config)
        await broker.start()
        try:
            async with grpc.aio.insecure_channel(broker.address) as channel:
                stub = broker_pb2_grpc.BrokerStub(channel)
                if not answers:
                    pid = await producer_id(stub)
                answers.append(
                    await stub.SendMessage(pb.SendMessageRequest(record=numbered(pid, 0, b"once")))
                )
        finally:
            await broker.stop(0)
    assert list(answers[1].duplicates) == [True]
    assert answers[1].phys_offsets == answers[0].phys_offsets


async def consume_all(
    namesrv: NameServer, group: str, expected: int, eventually, **options
) -> tuple[list[bytes], PushConsumer]:
    handled: list[bytes] = []
    consumer = PushConsumer(
        group=group,
        namesrv=namesrv.address,
        consume_from="first",
        rebalance_interval_s=1.0,
        pull_suspend_ms=500,
        **options,
    )
    consumer.subscribe(TOPIC, "*")

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        handled.extend(m.body for m in messages)
        return ConsumeResult.CONSUME_SUCCESS

    async with consumer:
        await eventually(
            lambda: consumer.consumed >= expected,
            timeout_s=10,
            what=f"{expected} messages consumed by {group}",
        )
    return handled, consumer


async def test_a_message_stored_twice_by_a_plain_producer_is_handled_once_within_the_window(
    stub, cluster, eventually
) -> None:
    namesrv, broker = cluster
    # A non-idempotent producer's retry after a lost answer: the same bytes, same UNIQ_KEY.
    twice = encode_message(
        Message(topic=TOPIC, body=b"pay-42"),
        queue_id=1,
        uniq_key="UNIQ-PAY-42",
        born_host=HOST,
        born_timestamp_ms=1,
    )
    other = encode_message(
        Message(topic=TOPIC, body=b"pay-43"),
        queue_id=2,
        uniq_key="UNIQ-PAY-43",
        born_host=HOST,
        born_timestamp_ms=1,
    )
    for record in (twice, other, twice):
        await stub.SendMessage(pb.SendMessageRequest(record=record))
    assert stored_bodies(broker)[1] == [b"pay-42", b"pay-42"]
    plain, _ = await consume_all(namesrv, "cg-plain", 3, eventually)
    assert sorted(plain) == [b"pay-42", b"pay-42", b"pay-43"]
    deduped, consumer = await consume_all(namesrv, "cg-dedup", 3, eventually, dedup_window=60.0)
    assert sorted(deduped) == [b"pay-42", b"pay-43"]
    assert consumer.deduplicated == 1
