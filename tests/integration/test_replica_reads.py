"""Consumers read from the replica while the master is away, and return to it after.

In one process: a nameserver, broker-a's SYNC_MASTER (id 0) and its SLAVE (id
1), all on port 0. Messages are acknowledged (hence already on the replica)
before the consumer starts; the consumer is held back (a closed gate, or no
poll) so that most of them are still unread when the master goes away, either
cleanly (``stop``: it unregisters, the route loses id 0) or abruptly (only its
gRPC server stops: the nameserver still lists it). The consumer must carry on
from the replica at once and receive every message exactly once, in order per
queue; after the master restarts on the same port, more messages are sent and
the consumer must return to the master, skip nothing, and commit the queue ends
there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import defaultdict

import pytest
from hakit import pair_configs

from pocketmq.broker.topic_config import BrokerTopicConfig
from pocketmq.client import ConsumeResult, Message, MessageExt, Producer, PullConsumer, PushConsumer
from pocketmq.client.errors import NotMasterError

TOPIC = "orders"
QUEUES = 2
GROUP = "cg"
FAILOVER_BUDGET_S = 10.0  # far above normal (0.01-0.15 s); the 2 s target is the benchmark's
FAST = dict(
    rebalance_interval_s=1.0,
    commit_interval_s=0.2,
    pull_suspend_ms=2000,
    unreachable_suspect_s=1.0,
    consume_from="first",
    pull_batch_size=4,
    pull_threshold_for_queue=4,
)


class Pair:
    """broker-a's master and replica, with a way to take the master away and back."""

    def __init__(self, namesrv, start_broker, eventually, master_cfg, replica_cfg) -> None:
        self.namesrv = namesrv
        self._start = start_broker
        self._eventually = eventually
        self.master_cfg = master_cfg
        self.replica_cfg = replica_cfg
        self.master = None
        self.replica = None

    async def start(self) -> None:
        self.master = await self._start(self.master_cfg)
        self.master.topics.create(
            BrokerTopicConfig(topic_name=TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        )
        self.replica = await self._start(self.replica_cfg)
        await self.in_sync()
        # the same port on restart, so the consumer's address is the master's again
        self.master_cfg = dataclasses.replace(
            self.master_cfg, port=int(self.master.address.rsplit(":", 1)[1])
        )

    async def in_sync(self) -> None:
        def ready():
            route = self.namesrv.route_table.get_route(TOPIC)
            return (
                route is not None
                and self.master.ha.replication.in_sync() == 1
                and len(route.broker_datas[0].broker_addrs) == 2
            )

        await self._eventually(ready, timeout_s=10, what="master, replica and route ready")

    async def take_master_away(self, how: str) -> None:
        if how == "stop":
            await self.master.stop(0)  # unregisters: the route loses id 0
        else:
            await self.master._server.stop(0)  # unreachable, still registered

    def route_members(self) -> dict[int, str]:
        route = self.namesrv.route_table.get_route(TOPIC)
        return dict(route.broker_datas[0].broker_addrs) if route is not None else {}

    async def restart_master(self) -> None:
        await self.master.stop(0)
        self.master = await self._start(self.master_cfg)
        await self.in_sync()

    def committed(self, broker) -> dict[int, int | None]:
        return {q: broker.offsets.query(GROUP, TOPIC, q) for q in range(QUEUES)}

    def ends(self, broker) -> dict[int, int]:
        return {q: broker.store.max_offset(TOPIC, q) for q in range(QUEUES)}


@pytest.fixture
async def pair(nameserver, broker_config, start_broker, eventually):
    pair = Pair(
        nameserver, start_broker, eventually, *pair_configs(broker_config, nameserver.address)
    )
    await pair.start()
    return pair


async def send(pair: Pair, start: int, n: int, *, status: str = "SEND_OK") -> None:
    async with Producer(group="pg", namesrv=pair.namesrv.address) as producer:
        results = [
            await producer.send(Message(topic=TOPIC, body=b"m%05d" % i))
            for i in range(start, start + n)
        ]
    assert {r.status.name for r in results} == {status}


def check_exactly_once_in_order(seen: dict[int, list[int]], ends: dict[int, int]) -> None:
    """Every offset of every queue, once, in offset order."""
    assert {q: offsets for q, offsets in seen.items()} == {
        q: list(range(end)) for q, end in ends.items() if end
    }


def pulls_from(consumer, addr: str) -> int:
    return consumer.pull_stats().get(addr, (0, 0))[1]


def push_consumer(
    pair: Pair, seen: dict[int, list[int]], gate: asyncio.Event, **options
) -> PushConsumer:
    consumer = PushConsumer(
        group=GROUP, namesrv=pair.namesrv.address, consume_concurrency=1, **{**FAST, **options}
    )
    consumer.subscribe(TOPIC)

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        await gate.wait()
        for m in messages:
            seen[m.queue_id].append(m.queue_offset)
        return ConsumeResult.CONSUME_SUCCESS

    return consumer


@pytest.mark.parametrize("how", ["stop", "abrupt"])
@pytest.mark.parametrize("model", ["clustering", "broadcasting"])
async def test_push_consumer_reads_the_replica_while_the_master_is_away_and_returns(
    pair, eventually, how, model, tmp_path
):
    await send(pair, 0, 40)
    seen: dict[int, list[int]] = defaultdict(list)
    gate = asyncio.Event()
    consumer = push_consumer(
        pair, seen, gate, message_model=model, offset_store_dir=str(tmp_path / "offsets")
    )
    master_addr, replica_addr = pair.master.address, pair.replica.address
    async with consumer:
        await eventually(lambda: pulls_from(consumer, master_addr), what="first pulls")
        t0 = time.monotonic()
        await pair.take_master_away(how)
        gate.set()
        await eventually(
            lambda: sum(map(len, seen.values())) == 40,
            timeout_s=FAILOVER_BUDGET_S,
            what="every acknowledged message, read from the replica",
        )
        failover_s = time.monotonic() - t0
        print(
            f"\n[{model}/{how}] all 40 messages received {failover_s:.2f} s after the "
            f"master began to go away"
        )
        assert pulls_from(consumer, replica_addr) > 0
        if how == "abrupt":
            assert pair.route_members() == {0: master_addr, 1: replica_addr}
        check_exactly_once_in_order(seen, pair.ends(pair.replica))

        await pair.restart_master()
        t1 = time.monotonic()
        before = pulls_from(consumer, master_addr)
        await eventually(
            lambda: pulls_from(consumer, master_addr) > before,
            timeout_s=10,
            what="reads back on the master",
        )
        print(
            f"[{model}/{how}] reads back on the master {time.monotonic() - t1:.2f} s after "
            f"its restart"
        )
        await send(pair, 40, 20)
        await eventually(
            lambda: sum(map(len, seen.values())) == 60,
            timeout_s=10,
            what="the messages sent after the restart",
        )
        check_exactly_once_in_order(seen, pair.ends(pair.master))
        if model == "clustering":
            await eventually(
                lambda: pair.committed(pair.master) == pair.ends(pair.master),
                what="committed offsets at the queue ends on the master",
            )


@pytest.mark.parametrize("how", ["stop", "abrupt"])
async def test_pull_consumer_reads_the_replica_while_the_master_is_away_and_returns(
    pair, eventually, how
):
    await send(pair, 0, 40)
    seen: dict[int, list[int]] = defaultdict(list)
    master_addr, replica_addr = pair.master.address, pair.replica.address

    async def poll_until(total: int, timeout_s: float) -> None:
        async def more():
            for m in await consumer.poll(timeout_s=0.05):
                seen[m.queue_id].append(m.queue_offset)
            return sum(map(len, seen.values())) >= total

        await eventually(more, timeout_s=timeout_s, what=f"{total} messages polled")

    consumer = PullConsumer(group=GROUP, namesrv=pair.namesrv.address, **FAST)
    consumer.subscribe(TOPIC)
    async with consumer:
        # buffers fill from the master; nothing is polled until it is gone
        await eventually(lambda: pulls_from(consumer, master_addr), what="first pulls")
        t0 = time.monotonic()
        await pair.take_master_away(how)
        await poll_until(40, FAILOVER_BUDGET_S)
        print(
            f"\n[pull/{how}] all 40 messages polled {time.monotonic() - t0:.2f} s after the "
            f"master went away"
        )
        assert pulls_from(consumer, replica_addr) > 0
        check_exactly_once_in_order(seen, pair.ends(pair.replica))
        # commits while the master is away land on the replica
        await consumer.commit()
        assert pair.committed(pair.replica) == pair.ends(pair.replica)

        await pair.restart_master()
        await send(pair, 40, 20)
        await poll_until(60, 10)
        check_exactly_once_in_order(seen, pair.ends(pair.master))
        await eventually(lambda: pulls_from(consumer, master_addr) > 0, what="master pulls")

        async def committed_on_master():
            await consumer.commit()
            return pair.committed(pair.master) == pair.ends(pair.master)

        await eventually(committed_on_master, what="committed offsets at the ends on the master")


async def test_orderly_consumer_pauses_while_the_master_is_away_and_never_reads_the_replica(
    pair, eventually
):
    await send(pair, 0, 40)
    seen: dict[int, list[int]] = defaultdict(list)
    gate = asyncio.Event()
    consumer = push_consumer(pair, seen, gate, orderly=True, suspend_current_queue_ms=100)
    replica_addr = pair.replica.address
    async with consumer:
        await eventually(
            lambda: len([q for q in consumer.assigned_queues() if q.topic == TOPIC]) == QUEUES,
            what="the topic's queues locked and assigned",
        )
        await pair.take_master_away("abrupt")
        # the next pull finds the master gone: its queues lose the lock, so they pause
        await eventually(
            lambda: not any(consumer._is_locked(pq) for pq in consumer._pqs.values()),
            what="queues paused",
        )
        gate.set()
        consumed_while_away = sum(map(len, seen.values()))
        assert consumed_while_away < 40
        await pair.restart_master()
        await eventually(
            lambda: sum(map(len, seen.values())) == 40,
            timeout_s=10,
            what="the rest, from the master",
        )
        check_exactly_once_in_order(seen, pair.ends(pair.master))
        assert pulls_from(consumer, replica_addr) == 0


async def test_a_producer_refused_by_a_replica_sends_to_another_broker_name(
    pair, start_broker, broker_config, eventually
):
    other = await start_broker(
        broker_config(
            "other",
            broker_name="broker-b",
            port=0,
            namesrv_addrs=pair.namesrv.address,
            grpc_v2_port=-1,
            register_interval_seconds=0.2,
        )
    )
    other.topics.create(BrokerTopicConfig(topic_name=TOPIC, read_queue_nums=1, write_queue_nums=1))

    def routed():
        route = pair.namesrv.route_table.get_route(TOPIC)
        return route is not None and len(route.broker_datas) == 2

    await eventually(routed, what="the topic on both broker names")
    async with Producer(
        group="pg", namesrv=pair.namesrv.address, latency_fault_enable=True
    ) as producer:
        queues = await producer.fetch_publish_queues(TOPIC)
        assert {q.broker_name for q in queues} == {"broker-a", "broker-b"}
        # a stale view: broker-a's id 0 is at the replica (as after a promotion the
        # client has not seen); the replica refuses with NOT_MASTER naming the master
        producer._routes.members.update({"broker-a": {0: pair.replica.address}})
        a_queue = next(q for q in queues if q.broker_name == "broker-a")
        with pytest.raises(NotMasterError, match=r"replica \(SLAVE\)") as refused:
            await producer.send(Message(topic=TOPIC, body=b"x"), queue=a_queue)
        assert refused.value.master_addr == pair.master.address
        producer._routes.members.update({"broker-a": {0: pair.replica.address}})
        results = [await producer.send(Message(topic=TOPIC, body=b"y%d" % i)) for i in range(6)]
    # round robin over three queues: at least one first attempt met the replica's
    # refusal, and was retried on another broker (name) instead of failing the send
    assert {r.status.name for r in results} == {"SEND_OK"}


async def test_a_replica_behind_the_consumer_moves_no_offset_and_the_master_continues_it(
    pair, start_broker, eventually
):
    await send(pair, 0, 20)
    await pair.replica.ha.client.stop()  # the replica stays up and routed, but stops copying
    await eventually(lambda: pair.master.ha.replication.in_sync() == 0, what="replica gone")
    # stored on the master only (a SYNC_MASTER without its replica says so)
    await send(pair, 20, 20, status="SLAVE_NOT_AVAILABLE")
    assert pair.ends(pair.replica) == {0: 10, 1: 10}
    seen: dict[int, list[int]] = defaultdict(list)

    async def poll_until(total: int) -> None:
        async def more():
            for m in await consumer.poll(timeout_s=0.05):
                seen[m.queue_id].append(m.queue_offset)
            return sum(map(len, seen.values())) >= total

        await eventually(more, timeout_s=10, what=f"{total} messages polled")

    def position() -> dict[int, int | None]:
        return {mq.queue_id: consumer.committed(mq) for mq in consumer.assigned_queues()}

    consumer = PullConsumer(group=GROUP, namesrv=pair.namesrv.address, **FAST)
    consumer.subscribe(TOPIC)
    async with consumer:
        await poll_until(40)
        assert position() == {0: 20, 1: 20}
        await pair.master.stop(0)
        # the replica, 10 behind on each queue, answers OFFSET_ILLEGAL again and again;
        # the consumer neither goes back to 10 nor forward
        await eventually(
            lambda: pulls_from(consumer, pair.replica.address) >= 8,
            timeout_s=10,
            what="repeated pulls from the replica",
        )
        assert position() == {0: 20, 1: 20}
        assert await consumer.poll(timeout_s=0.05) == []
        pair.master = await start_broker(pair.master_cfg)
        await send(pair, 40, 10, status="SLAVE_NOT_AVAILABLE")
        await poll_until(50)
        check_exactly_once_in_order(seen, pair.ends(pair.master))
