"""Master and replica brokers in one process: copy, SYNC acks, refusal, promotion, fencing."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from hakit import pair_configs
from storekit import bodies

from pocketmq.broker.topic_config import BrokerTopicConfig
from pocketmq.client import Message, Producer, SendStatus
from pocketmq.client.idempotence import stamp
from pocketmq.client.message_codec import encode_message
from pocketmq.common.message import encode_record, pack_host
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import broker_pb2_grpc

TOPIC = "orders"


@pytest.fixture
async def namesrv(nameserver):
    return nameserver


@pytest.fixture
def pair_config(broker_config, namesrv):
    """(master config, replica config) of broker name broker-a, on ports 0."""

    def make(role="SYNC_MASTER", **overrides):
        return pair_configs(broker_config, namesrv.address, role, **overrides)

    return make


async def send(namesrv, n, *, start=0, group="pg"):
    async with Producer(group=group, namesrv=namesrv.address) as producer:
        results = [
            await producer.send(Message(topic=TOPIC, body=b"m%05d" % i, keys=[f"k{i}"]))
            for i in range(start, start + n)
        ]
    return results


async def create_topic(namesrv, broker, eventually, queues):
    broker.topics.create(
        BrokerTopicConfig(topic_name=TOPIC, read_queue_nums=queues, write_queue_nums=queues)
    )

    def routed():
        route = namesrv.route_table.get_route(TOPIC)
        return route is not None and route.queue_datas[0].write_queue_nums == queues

    await eventually(routed, what="the topic's route")


async def started_pair(namesrv, pair_config, start_broker, eventually, role="ASYNC_MASTER", **cfg):
    """A started master of *role* with TOPIC (one queue) routed, and its started replica."""
    master_cfg, replica_cfg = pair_config(role, **cfg)
    master = await start_broker(master_cfg)
    await create_topic(namesrv, master, eventually, 1)
    return master, await start_broker(replica_cfg)


def stamped(pid: int, seq: int, body: bytes = b"x", *, epoch: int = 0) -> bytes:
    """A record of an idempotent producer: *pid* at *epoch*, sequence *seq* in queue 0."""
    return encode_message(
        Message(topic=TOPIC, body=body),
        queue_id=0,
        uniq_key=stamp(f"K{seq}", pid, epoch, seq),
        born_host=pack_host(("127.0.0.1", 1)),
        born_timestamp_ms=1,
    )


SAME_BYTES_UP_TO = 16 << 20  # logs this small are compared byte for byte


async def caught_up(eventually, master, replica, timeout_s: float = 5.0) -> None:
    """Until *replica*'s commit log ends where *master*'s does and, for logs under
    :data:`SAME_BYTES_UP_TO`, holds the same bytes: an old master that rejoins may hold a
    log of its own of the very length of the new master's (one record each, of one
    size) until its handshake cuts it, and that is no copy."""

    def same() -> bool:
        end = master.store.commitlog.max_offset
        if replica.store.commitlog.max_offset != end:
            return False
        return end >= SAME_BYTES_UP_TO or log_bytes(replica.store) == log_bytes(master.store)

    await eventually(same, timeout_s=timeout_s, what="the replica caught up")


def old_master_as_replica(broker_config, namesrv):
    """The master's data directory (pair_config's), restarted as replica 2 of broker-a."""
    return broker_config(
        "master",
        broker_name="broker-a",
        broker_role="SLAVE",
        broker_id=2,
        port=0,
        ha_port=0,
        namesrv_addrs=namesrv.address,
        grpc_v2_port=-1,
        register_interval_seconds=0.2,
    )


def log_bytes(store):
    out = bytearray()
    for mf in store.commitlog.queue.files:
        out += mf.read(0, mf.wrote_position)
    return bytes(out)


async def test_a_replica_copies_its_master_and_a_sync_send_waits_for_it(
    namesrv, pair_config, start_broker, eventually
):
    master_cfg, replica_cfg = pair_config("SYNC_MASTER")
    master = await start_broker(master_cfg)
    await create_topic(namesrv, master, eventually, 2)
    replica = await start_broker(replica_cfg)
    await eventually(lambda: master.ha.replication.in_sync() == 1, what="replica in sync")
    results = await send(namesrv, 40)
    assert {r.status for r in results} == {SendStatus.SEND_OK}
    # acknowledged by a SYNC_MASTER: already on the replica, byte for byte
    assert replica.store.commitlog.max_offset >= max(
        int(r.offset_msg_id[-16:], 16) for r in results
    )
    await eventually(
        lambda: log_bytes(replica.store) == log_bytes(master.store), what="identical logs"
    )
    for q in range(2):
        assert replica.store.max_offset(TOPIC, q) == master.store.max_offset(TOPIC, q)
    # topic configs and consumer offsets follow the master
    await eventually(lambda: replica.topics.get(TOPIC) is not None, what="topic on replica")
    info = replica.ha.runtime_info()
    assert info["broker_role"] == "SLAVE" and info["ha_connected"] == "true"


async def test_a_replica_fetches_the_config_of_a_topic_new_to_it_without_waiting_a_round(
    namesrv, pair_config, start_broker, eventually
):
    # A master elected from a replica that lacks a topic's config refuses its pulls and
    # offset commits until the next metadata round; the first record of it asks for one.
    master, replica = await started_pair(namesrv, pair_config, start_broker, eventually)
    await eventually(lambda: replica.topics.get(TOPIC) is not None, what="first sync")
    client = replica.ha.client
    # the first sync runs at connect, before the copy session's own events exist
    await eventually(lambda: hasattr(client, "_metadata_wanted"), what="the copy session")
    client._metadata_interval_s = 3600.0  # no periodic round during the test
    client._metadata_wanted.set()  # (the loop takes the new interval)
    master.topics.create(
        BrokerTopicConfig(topic_name="fresh", read_queue_nums=1, write_queue_nums=1)
    )
    record = encode_record(
        topic="fresh",
        body=b"first",
        queue_id=0,
        properties={},
        born_timestamp_ms=1,
        born_host=pack_host(("127.0.0.1", 1)),
    )
    async with grpc.aio.insecure_channel(master.address) as channel:
        reply = await broker_pb2_grpc.BrokerStub(channel).SendMessage(
            pb.SendMessageRequest(record=record)
        )
    assert reply.status == pb.SEND_OK

    await eventually(
        lambda: replica.topics.get("fresh") is not None,
        timeout_s=30,
        what="the new topic's config on the replica",
    )


async def test_a_replica_refuses_sends_with_a_clear_status(namesrv, pair_config, start_broker):
    master_cfg, replica_cfg = pair_config("ASYNC_MASTER")
    await start_broker(master_cfg)
    replica = await start_broker(replica_cfg)
    record = encode_record(
        topic=TOPIC,
        body=b"x",
        queue_id=0,
        properties={},
        born_timestamp_ms=1,
        born_host=pack_host(("127.0.0.1", 1)),
    )
    async with grpc.aio.insecure_channel(replica.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.SendMessage(pb.SendMessageRequest(producer_group="pg", record=record))
    # NOT_MASTER: FAILED_PRECONDITION naming the master (the SDK redirects on it)
    assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "replica (SLAVE)" in err.value.details()
    trailer = dict(err.value.trailing_metadata())
    assert trailer["pocketmq-reason"] == "NOT_MASTER"
    assert "pocketmq-not-master-bin" in trailer


async def test_a_sync_master_without_replicas_answers_slave_not_available(
    namesrv, pair_config, start_broker, eventually
):
    master_cfg, _ = pair_config("SYNC_MASTER")
    master = await start_broker(master_cfg)
    await create_topic(namesrv, master, eventually, 1)
    async with Producer(
        group="pg",
        namesrv=namesrv.address,
        retry_times_when_send_failed=0,
    ) as producer:
        result = await producer.send(Message(topic=TOPIC, body=b"x"))
    assert result.status is SendStatus.SLAVE_NOT_AVAILABLE
    # the message is stored all the same (RocketMQ's meaning of the status)
    assert master.store.max_offset(TOPIC, 0) == 1


async def test_promotion_makes_the_replica_master_and_fences_the_old_one(
    namesrv, pair_config, start_broker, eventually
):
    master, replica = await started_pair(namesrv, pair_config, start_broker, eventually)
    await send(namesrv, 10)
    await caught_up(eventually, master, replica)
    end = replica.store.commitlog.max_offset
    epoch, start, role = await replica.ha.promote()
    assert (epoch, start, role) == (2, end, "ASYNC_MASTER")
    assert replica.store.epochs.entries[-1] == (2, end)
    await replica.registration.run_once()
    route = namesrv.route_table.get_route(TOPIC)
    assert route is not None
    assert route.broker_datas[0].broker_addrs[0] == replica.address
    # the old master registers again: refused as stale, and it stops taking writes
    await master.registration.run_once()
    assert master.ha.fenced
    assert (
        master.store.put_message(topic=TOPIC, queue_id=0, body=b"late").status.value
        == "SERVICE_NOT_AVAILABLE"
    )
    results = await send(namesrv, 5, start=10)
    assert {r.status for r in results} == {SendStatus.SEND_OK}
    assert replica.store.max_offset(TOPIC, 0) == 15


async def test_a_producer_may_send_again_elsewhere_when_not_stored_ok(
    namesrv, broker_config, start_broker, eventually
):
    """RocketMQ's retryAnotherBrokerWhenNotStoreOK: off, the status is the answer; on,
    the message goes to another broker name too."""
    common = dict(
        port=0,
        ha_port=0,
        namesrv_addrs=namesrv.address,
        grpc_v2_port=-1,
        register_interval_seconds=0.2,
    )
    sync = await start_broker(
        broker_config("a", broker_name="broker-a", broker_role="SYNC_MASTER", **common)
    )
    plain = await start_broker(broker_config("b", broker_name="broker-b", **common))
    for broker in (sync, plain):
        broker.topics.create(
            BrokerTopicConfig(topic_name=TOPIC, read_queue_nums=1, write_queue_nums=1)
        )

    def routed():
        route = namesrv.route_table.get_route(TOPIC)
        return (
            route is not None
            and {q.write_queue_nums for q in route.queue_datas} == {1}
            and len(route.queue_datas) == 2
        )

    await eventually(routed, what="the topic on both brokers")
    async with Producer(group="pg", namesrv=namesrv.address) as producer:
        plain_results = [await producer.send(Message(topic=TOPIC, body=b"x")) for _ in range(4)]
    assert SendStatus.SLAVE_NOT_AVAILABLE in {r.status for r in plain_results}
    async with Producer(
        group="pg", namesrv=namesrv.address, retry_another_broker_when_not_store_ok=True
    ) as producer:
        again = [await producer.send(Message(topic=TOPIC, body=b"y")) for _ in range(4)]
    assert {r.status for r in again} == {SendStatus.SEND_OK}
    assert {r.queue.broker_name for r in again} == {"broker-b"}


async def test_a_promoted_replica_answers_an_idempotent_retry_as_the_old_master_stored_it(
    namesrv, pair_config, start_broker, eventually
):
    """The producers' de-duplication state travels with the log: a send whose answer was
    lost in a failover, retried at the new master, is not stored a second time."""
    master, replica = await started_pair(namesrv, pair_config, start_broker, eventually)

    async with grpc.aio.insecure_channel(master.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        pid = (await stub.InitProducerId(pb.InitProducerIdRequest(topics=[TOPIC]))).producer_id
        first = await stub.SendBatch(
            pb.SendBatchRequest(records=stamped(pid, 0, b"a") + stamped(pid, 1, b"b"))
        )
    await caught_up(eventually, master, replica)
    await replica.ha.promote()
    async with grpc.aio.insecure_channel(replica.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        again = await stub.SendBatch(
            pb.SendBatchRequest(
                records=stamped(pid, 0, b"a") + stamped(pid, 1, b"b") + stamped(pid, 2, b"c")
            )
        )
        with pytest.raises(grpc.aio.AioRpcError) as gap:
            await stub.SendMessage(pb.SendMessageRequest(record=stamped(pid, 4, b"e")))
    assert list(again.duplicates) == [True, True, False]
    assert list(again.phys_offsets)[:2] == list(first.phys_offsets)
    assert list(again.queue_offsets) == [0, 1, 2]
    assert replica.store.max_offset(TOPIC, 0) == 3
    assert gap.value.code() is grpc.StatusCode.OUT_OF_RANGE, "the sequence, too, carried over"


@pytest.mark.parametrize("stored", [1, 300], ids=["offset kept", "offset past the window"])
async def test_a_sync_master_answers_an_idempotent_retry_as_unreplicated_as_its_original(
    namesrv, pair_config, start_broker, eventually, stored
):
    """A retry is answered from the first store, but not SEND_OK while no replica holds
    it: an isolated master's tail (truncated when it rejoins) is never acknowledged.
    The table keeps the places of a queue's last 256 records: an older retry is
    answered without its offsets (-1, as Kafka's DUPLICATE_SEQUENCE_NUMBER), and
    waits for the replicas to hold the master's log up to its end."""
    master_cfg, _ = pair_config("SYNC_MASTER")
    master = await start_broker(master_cfg)
    await create_topic(namesrv, master, eventually, 1)
    async with grpc.aio.insecure_channel(master.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        pid = (await stub.InitProducerId(pb.InitProducerIdRequest(topics=[TOPIC]))).producer_id
        first = await stub.SendBatch(
            pb.SendBatchRequest(records=b"".join(stamped(pid, seq) for seq in range(stored)))
        )
        again = await stub.SendMessage(pb.SendMessageRequest(record=stamped(pid, 0)))
    assert first.status == again.status == pb.SLAVE_NOT_AVAILABLE
    assert list(again.duplicates) == [True]
    assert list(again.queue_offsets) == ([0] if stored == 1 else [-1])
    assert master.store.max_offset(TOPIC, 0) == stored


async def test_a_sync_master_refuses_a_send_back_no_replica_holds_so_the_consumer_keeps_it(
    namesrv, pair_config, start_broker, eventually
):
    """A consumer's send-back is acknowledged as a SYNC send would be: with no replica in
    sync the retry copy could die with the master, so the call fails UNAVAILABLE (the
    consumer consumes the message again), and succeeds once a replica holds it."""
    master_cfg, replica_cfg = pair_config("SYNC_MASTER")
    master = await start_broker(master_cfg)
    await create_topic(namesrv, master, eventually, 1)
    async with grpc.aio.insecure_channel(master.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        sent = await stub.SendMessage(
            pb.SendMessageRequest(
                record=encode_record(topic=TOPIC, body=b"x", born_host=pack_host(("127.0.0.1", 1)))
            )
        )
        assert sent.status == pb.SLAVE_NOT_AVAILABLE
        back = pb.ConsumerSendMsgBackRequest(
            group="cg", phys_offset=sent.phys_offsets[0], origin_topic=TOPIC
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.ConsumerSendMsgBack(back)
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
        assert "SLAVE_NOT_AVAILABLE" in refused.value.details()
        assert "consume the message again" in refused.value.details()
        replica = await start_broker(replica_cfg)
        await caught_up(eventually, master, replica)
        await stub.ConsumerSendMsgBack(back)  # held by the replica: acknowledged


async def test_a_push_consumer_whose_send_back_is_not_replicated_consumes_the_message_again(
    namesrv, pair_config, start_broker, eventually
):
    from pocketmq.client import ConsumeResult, PushConsumer

    master_cfg, _ = pair_config("SYNC_MASTER")
    master = await start_broker(master_cfg)
    await create_topic(namesrv, master, eventually, 1)
    async with grpc.aio.insecure_channel(master.address) as channel:
        sent = await broker_pb2_grpc.BrokerStub(channel).SendMessage(
            pb.SendMessageRequest(
                record=encode_record(
                    topic=TOPIC, body=b"again", born_host=pack_host(("127.0.0.1", 1))
                )
            )
        )
    assert sent.status == pb.SLAVE_NOT_AVAILABLE  # stored on the master alone
    seen: list[tuple[bytes, int]] = []
    consumer = PushConsumer(
        group="cg-local", namesrv=namesrv.address, consume_from="first", rebalance_interval_s=1.0
    )
    consumer.subscribe(TOPIC)

    @consumer.listener
    async def handle(messages):
        seen.extend((m.body, m.phys_offset) for m in messages)
        return ConsumeResult.RECONSUME_LATER if len(seen) == 1 else ConsumeResult.SUCCESS

    await consumer.start()
    try:
        await eventually(lambda: len(seen) >= 2, timeout_s=30, what="a local redelivery")
    finally:
        await consumer.shutdown()
    # the original again (its own commit-log offset), not the retry copy the master
    # stored and no replica holds
    assert seen[:2] == [(b"again", sent.phys_offsets[0])] * 2


async def test_a_named_producers_new_epoch_is_on_the_replica_when_init_producer_id_answers(
    namesrv, pair_config, start_broker, eventually
):
    """A replica promoted right after InitProducerId answered fences the older instance:
    a SYNC_MASTER answers once its replicas hold the epoch record. Without a replica in
    sync the id is answered all the same (as a send is stored, SLAVE_NOT_AVAILABLE)."""
    master_cfg, replica_cfg = pair_config("SYNC_MASTER")
    master = await start_broker(master_cfg)
    await create_topic(namesrv, master, eventually, 1)
    request = pb.InitProducerIdRequest(topics=[TOPIC], identity="orders-writer")
    async with grpc.aio.insecure_channel(master.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        alone = await stub.InitProducerId(request)  # no replica: answered anyway
        replica = await start_broker(replica_cfg)
        await caught_up(eventually, master, replica)
        again = await stub.InitProducerId(request)
        # in the replica's log (its dispatch may follow the Ack; a promotion runs it first)
        held = replica.store.commitlog.max_offset
    assert again.producer_id == alone.producer_id and again.epoch == alone.epoch + 1
    assert held == master.store.commitlog.max_offset, "the replica lacks the epoch record"
    await replica.ha.promote()
    older = stamped(alone.producer_id, 0, b"zombie", epoch=alone.epoch)
    async with grpc.aio.insecure_channel(replica.address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as fenced:
            await broker_pb2_grpc.BrokerStub(channel).SendMessage(
                pb.SendMessageRequest(record=older)
            )
    assert fenced.value.code() is grpc.StatusCode.FAILED_PRECONDITION, fenced.value.details()
    assert "newer instance" in fenced.value.details()


async def test_a_replica_promoted_between_a_frames_append_and_its_dispatch_serves_every_message(
    namesrv, pair_config, start_broker, eventually
):
    master_cfg, replica_cfg = pair_config("ASYNC_MASTER")
    master = await start_broker(master_cfg)
    await create_topic(namesrv, master, eventually, 2)
    replica = await start_broker(replica_cfg)
    await send(namesrv, 20)
    await caught_up(eventually, master, replica)
    # the copy stops where a replica has appended (and acknowledged) a frame and not
    # dispatched it yet: the copy loop's own steps, taken by hand at that moment
    assert replica.ha.client is not None
    await replica.ha.client.stop()
    await send(namesrv, 10, start=20)
    offset = replica.store.commitlog.max_offset
    frame = master.store.read_for_replica(offset, 1 << 20)
    replica.store.append_replicated(offset, frame, dispatch=False)
    assert replica.store.dispatched_offset == offset < replica.store.commitlog.max_offset
    await replica.ha.promote()
    store = replica.store
    assert store.dispatched_offset == store.commitlog.max_offset
    assert log_bytes(store) == log_bytes(master.store)
    pulled = []
    for q in range(2):
        got = store.get_messages(TOPIC, q, 0, max_count=100)
        pulled += bodies(got.records)
        assert store.max_offset(TOPIC, q) == master.store.max_offset(TOPIC, q)
    assert sorted(pulled) == [b"m%05d" % i for i in range(30)]
    for i in range(30):
        assert len(store.query_by_key(TOPIC, f"k{i}")) == 1, f"k{i}"


async def test_a_replica_promoted_before_a_delayed_messages_re_put_reached_it_delivers_it(
    namesrv, pair_config, start_broker, eventually
):
    """The metadata sync overtakes the records: the master re-puts a due delayed message
    and moves its level's progress past it, and the replica learns that progress before
    the re-put's bytes. Taken at once, that progress made a replica promoted then skip the
    message, which no broker delivered. It now waits for the replica's log to reach the
    master's log end of the snapshot; promoted short of it, the replica re-puts."""
    master, replica = await started_pair(
        namesrv, pair_config, start_broker, eventually, message_delay_level="1s 2s"
    )
    async with Producer(group="pg", namesrv=namesrv.address) as producer:
        sent = await producer.send(Message(topic=TOPIC, body=b"later", delay_level=1))
    assert sent.status is SendStatus.SEND_OK
    await caught_up(eventually, master, replica)  # the parked record is on the replica
    assert replica.ha.client is not None
    client = replica.ha.client
    await client.stop()  # the copy stops here; the metadata sync is taken by hand below
    await eventually(lambda: master.store.max_offset(TOPIC, 0) == 1, what="the re-put")
    snapshot = master.ha.metadata.snapshot()
    assert snapshot.delay_offsets[1] == 1
    assert snapshot.log_end_offset > replica.store.commitlog.max_offset
    client.take_progress(snapshot)
    assert replica.schedule.offsets.get(1) == 0, "progress past a re-put it does not hold"
    await replica.ha.promote()
    await eventually(lambda: replica.store.max_offset(TOPIC, 0) == 1, what="re-put by replica")
    got = replica.store.get_messages(TOPIC, 0, 0, max_count=10)
    assert bodies(got.records) == [b"later"]


async def test_a_replica_takes_consumer_offsets_once_it_holds_the_records_they_pass(
    namesrv, pair_config, start_broker, eventually
):
    """A consumer offset past the records a replica holds would, after a promotion, skip
    the new records stored at those queue offsets. The replica holds such a snapshot's
    offsets until its log reaches the snapshot's log end, then takes them."""
    master, replica = await started_pair(namesrv, pair_config, start_broker, eventually)
    await send(namesrv, 3)
    await caught_up(eventually, master, replica)
    master.offsets.commit("cg", TOPIC, 0, 3)
    assert replica.ha.client is not None
    client = replica.ha.client
    client.take_progress(master.ha.metadata.snapshot())  # holds every record it counts
    assert replica.offsets.query("cg", TOPIC, 0) == 3
    await client.stop()
    await send(namesrv, 5, start=3)
    master.offsets.commit("cg", TOPIC, 0, 8)
    client.take_progress(master.ha.metadata.snapshot())
    assert replica.offsets.query("cg", TOPIC, 0) == 3, "held: the replica has 3 records"
    client.start()  # the copy goes on from where it stopped and releases the held offsets
    await caught_up(eventually, master, replica)
    await eventually(lambda: replica.offsets.query("cg", TOPIC, 0) == 8, what="offsets taken")
    assert replica.store.max_offset(TOPIC, 0) == 8


async def test_an_old_master_that_rejoins_takes_the_new_masters_offsets_not_its_own(
    namesrv, pair_config, start_broker, broker_config, eventually
):
    """The old master's consumers committed past records its replica never got. Rejoined
    as a replica, its handshake cuts that tail; kept by maximum, its own offsets would
    then skip the records the new master stored at the same queue offsets, once it was
    promoted again. It takes the new master's offsets as they are."""
    master, replica = await started_pair(namesrv, pair_config, start_broker, eventually)
    await send(namesrv, 3)
    await caught_up(eventually, master, replica)
    assert replica.ha.client is not None
    await replica.ha.client.stop()  # the replica falls behind: 2 records it never gets
    await send(namesrv, 2, start=3)
    master.offsets.commit("cg", TOPIC, 0, 5)  # consumed on the old master, past them
    master.schedule.offsets.set(1, 1)  # as if a delayed message's re-put was among them
    await master.stop()
    await replica.ha.promote()
    await replica.registration.run_once()
    await send(namesrv, 4, start=100)  # the new master stores queue offsets 3..6
    replica.offsets.commit("cg", TOPIC, 0, 3)  # its consumers are at 3
    rejoined = await start_broker(old_master_as_replica(broker_config, namesrv))
    await caught_up(eventually, replica, rejoined, timeout_s=20)  # a start, a handshake
    assert rejoined.ha.client is not None
    assert rejoined.ha.client.status.truncated_bytes > 0
    await eventually(
        lambda: rejoined.offsets.query("cg", TOPIC, 0) == 3,
        timeout_s=15,
        what="the new master's offset, not its own 5",
    )
    assert rejoined.schedule.offsets.get(1) == 0, "the new master has not re-put it"


async def test_a_promoted_replica_delivers_pending_timer_messages_and_not_the_delivered_again(
    namesrv, pair_config, start_broker, eventually
):
    """A replica's timer never ran: promoted, it enqueues every parked record of the
    copied log. Those the old master delivered are found in the key index (their re-puts
    were copied too) and not delivered again; the one still waiting goes out once."""
    master, replica = await started_pair(namesrv, pair_config, start_broker, eventually)
    async with Producer(group="pg", namesrv=namesrv.address) as producer:
        for i in range(3):
            soon = int(time.time() * 1000) + 200
            await producer.send(Message(topic=TOPIC, body=b"due %d" % i, deliver_at_ms=soon))
        await eventually(lambda: master.store.max_offset(TOPIC, 0) == 3, what="3 delivered")
        later = int(time.time() * 1000) + 2_500
        await producer.send(Message(topic=TOPIC, body=b"later", deliver_at_ms=later))
    await caught_up(eventually, master, replica)
    await replica.ha.promote()
    await eventually(
        lambda: replica.store.max_offset(TOPIC, 0) >= 4, timeout_s=15, what="the later one"
    )
    got = replica.store.get_messages(TOPIC, 0, 0, max_count=100)
    assert sorted(bodies(got.records)) == [b"due 0", b"due 1", b"due 2", b"later"]
    # "later" too, when a slow run let the master deliver it before the replica caught up
    assert replica.timer.duplicates_skipped_total in (3, 4)


async def test_an_old_master_promoted_again_rebuilds_its_timer_from_the_new_masters_log(
    namesrv, pair_config, start_broker, broker_config, eventually
):
    """The old master's timer files claim a parked record of the tail its rejoin cut,
    at the timer queue offset where the new master parked another one. Kept, they would
    have the timer start past that record, never delivered once the old master is
    promoted again. A promoted broker drops timer files of an earlier term."""
    master, replica = await started_pair(namesrv, pair_config, start_broker, eventually)
    await eventually(lambda: replica.topics.get(TOPIC) is not None, what="topic on replica")
    assert replica.ha.client is not None
    await replica.ha.client.stop()
    async with Producer(group="pg", namesrv=namesrv.address) as producer:
        due = int(time.time() * 1000) + 60_000
        await producer.send(Message(topic=TOPIC, body=b"cut", deliver_at_ms=due))
    await eventually(lambda: master.timer.enqueued_total == 1, what="parked on the old master")
    await master.stop()
    await replica.ha.promote()
    await replica.registration.run_once()
    async with Producer(group="pg", namesrv=namesrv.address) as producer:
        due = int(time.time() * 1000) + 4_000
        await producer.send(Message(topic=TOPIC, body=b"kept", deliver_at_ms=due))
    rejoined = await start_broker(old_master_as_replica(broker_config, namesrv))
    await caught_up(eventually, replica, rejoined, timeout_s=20)  # a start, a handshake
    await replica.stop()  # before "kept" is due: the rejoined broker must deliver it
    await rejoined.ha.promote()
    await eventually(
        lambda: rejoined.store.max_offset(TOPIC, 0) >= 1, timeout_s=15, what="'kept' delivered"
    )
    got = rejoined.store.get_messages(TOPIC, 0, 0, max_count=10)
    assert bodies(got.records) == [b"kept"]


async def test_a_master_that_steps_down_and_is_elected_again_delivers_each_message_once(
    namesrv, pair_config, start_broker, eventually
):
    """Controller mode steps a master down without a restart, and may elect it again.
    Its delay-level, timer and transaction-check loops stop when it steps down (they
    kept running against a store that refused their re-puts, and elected again it ran
    a second set beside them)."""
    master_cfg, _ = pair_config("ASYNC_MASTER", message_delay_level="1s 2s")
    master = await start_broker(master_cfg)
    await create_topic(namesrv, master, eventually, 1)
    loops = ("ScheduleMessageService-level-1", "TimerService", "TransactionalMessageCheckService")

    def running() -> list[str]:
        return sorted(name for task in asyncio.all_tasks() if (name := task.get_name()) in loops)

    assert running() == sorted(loops)
    await master.ha.follow(
        broker_id=1, master_ha_addr="127.0.0.1:1", master_epoch=2, master_addr="127.0.0.1:2"
    )
    assert running() == []
    await master.ha.promote(epoch=3)
    assert running() == sorted(loops)

    def later(body: bytes, **timing: int) -> bytes:
        return encode_message(
            Message(topic=TOPIC, body=body, **timing),
            queue_id=0,
            uniq_key=body.decode(),
            born_host=pack_host(("127.0.0.1", 1)),
            born_timestamp_ms=int(time.time() * 1000),
        )

    async with grpc.aio.insecure_channel(master.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        soon = int(time.time() * 1000) + 500
        for record in (
            later(b"level-1", delay_level=1),
            later(b"timer", deliver_at_ms=soon),
            later(b"level-2", delay_level=2),  # last: the others' doubles came before it
        ):
            assert (
                await stub.SendMessage(pb.SendMessageRequest(record=record))
            ).status == pb.SEND_OK
    await eventually(
        lambda: b"level-2" in bodies(master.store.get_messages(TOPIC, 0, 0, max_count=10).records),
        timeout_s=10,
        what="the last one delivered",
    )
    got = bodies(master.store.get_messages(TOPIC, 0, 0, max_count=10).records)
    assert sorted(got) == [b"level-1", b"level-2", b"timer"]


async def test_a_promoted_replica_keeps_no_offset_past_the_records_it_holds(
    namesrv, pair_config, start_broker, eventually
):
    """Its own offsets may count records its handshake cut, when it is promoted before the
    master's next snapshot replaces them: each is moved back to its queue's end, where the
    new master's next record goes."""
    master, replica = await started_pair(
        namesrv, pair_config, start_broker, eventually, message_delay_level="1s 2s"
    )
    await send(namesrv, 3)
    await caught_up(eventually, master, replica)
    assert replica.ha.client is not None
    await replica.ha.client.stop()
    replica.offsets.commit("cg", TOPIC, 0, 9)
    replica.offsets.commit("cg-behind", TOPIC, 0, 1)
    replica.schedule.offsets.set(1, 4)
    await replica.ha.promote()
    assert replica.offsets.query("cg", TOPIC, 0) == 3
    assert replica.offsets.query("cg-behind", TOPIC, 0) == 1, "an offset behind stays"
    assert replica.schedule.offsets.get(1) == 0
