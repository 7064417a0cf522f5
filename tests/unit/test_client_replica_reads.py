"""Which member of a broker name a read goes to, suspicion, and offsets across a failover."""

from __future__ import annotations

import asyncio

import pytest

from pocketmq.client.allocate import allocate_averagely
from pocketmq.client.errors import UnavailableError
from pocketmq.client.members import MemberTable
from pocketmq.client.model import MessageQueue
from pocketmq.client.offset_store import RemoteBrokerOffsetStore
from pocketmq.client.rebalance import Rebalancer
from pocketmq.client.route import QueueData, RouteService, TopicRoute

MASTER, REPLICA, REPLICA2 = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"


@pytest.fixture
def table(manual_clock) -> MemberTable:
    table = MemberTable(suspect_s=5.0, clock=manual_clock)
    table.update({"broker-a": {0: MASTER, 2: REPLICA2, 1: REPLICA}})
    return table


def test_reads_go_to_the_master_while_it_is_not_suspect(table):
    assert table.read_addr("broker-a") == MASTER
    assert table.master_usable("broker-a")


def test_a_suspect_master_sends_reads_to_the_lowest_replica_id(table):
    assert table.mark_suspect(MASTER)
    assert table.read_addr("broker-a") == REPLICA
    assert not table.master_usable("broker-a")
    table.mark_suspect(REPLICA)
    assert table.read_addr("broker-a") == REPLICA2


def test_suspicion_ends_after_the_configured_period(table, manual_clock):
    table.mark_suspect(MASTER)
    manual_clock.advance(4.9)
    assert table.read_addr("broker-a") == REPLICA
    assert not table.mark_suspect(MASTER)  # already suspect: the period restarts
    manual_clock.advance(4.9)
    assert table.read_addr("broker-a") == REPLICA
    manual_clock.advance(0.1)
    assert table.read_addr("broker-a") == MASTER
    assert table.master_usable("broker-a")


def test_with_every_member_suspect_the_master_is_tried(table):
    for addr in (MASTER, REPLICA, REPLICA2):
        table.mark_suspect(addr)
    assert table.read_addr("broker-a") == MASTER


def test_reads_follow_the_route_when_the_master_leaves_it(table):
    table.update({"broker-a": {1: REPLICA}})  # the nameserver expired the master
    assert table.read_addr("broker-a") == REPLICA
    assert table.master("broker-a") is None
    assert not table.master_usable("broker-a")
    table.update({"broker-a": {0: MASTER, 1: REPLICA}})  # it registered again
    assert table.read_addr("broker-a") == MASTER


def test_reads_follow_a_promotion_to_the_former_replica_address(table):
    table.mark_suspect(MASTER)
    table.update({"broker-a": {0: REPLICA}})  # the replica was promoted to id 0
    assert table.read_addr("broker-a") == REPLICA
    assert table.master_usable("broker-a")
    assert table.masters() == {"broker-a": REPLICA}


def test_a_broker_name_no_route_lists_has_no_read_address(table):
    assert table.read_addr("broker-b") is None


def test_a_route_that_omits_a_broker_name_keeps_its_members(table):
    table.update({"broker-b": {0: "10.0.1.1:10911"}})
    assert table.names() == ["broker-a", "broker-b"]
    assert table.names_at(REPLICA) == ["broker-a"]


def test_read_queues_keep_a_broker_name_whose_master_left_the_route_but_write_queues_do_not():
    route = TopicRoute(
        topic="t",
        queue_datas=(QueueData("broker-a", 2, 2, 6), QueueData("broker-b", 2, 2, 6)),
        broker_addrs={"broker-a": {1: REPLICA}, "broker-b": {0: MASTER}},
    )
    assert [(q.broker_name, q.queue_id) for q in route.read_queues()] == [
        ("broker-a", 0),
        ("broker-a", 1),
        ("broker-b", 0),
        ("broker-b", 1),
    ]
    assert {q.broker_name for q in route.write_queues()} == {"broker-b"}


def test_an_unavailable_answer_with_a_reason_is_not_an_unreachable_broker():
    refused = UnavailableError(
        "SendMessage refused", addr=REPLICA, code="UNAVAILABLE", reason="SERVICE_NOT_AVAILABLE"
    )
    silent = UnavailableError("connection refused", addr=MASTER, code="UNAVAILABLE")
    assert refused.retriable and not refused.unreachable
    assert silent.unreachable


class Nameserver:
    def __init__(self, members: dict[int, str]) -> None:
        self.members = members
        self.asked: list[str] = []

    async def fetch(self, topic: str) -> TopicRoute:
        self.asked.append(topic)
        return TopicRoute(
            topic=topic,
            queue_datas=(QueueData("broker-a", 2, 2, 6),),
            broker_addrs={"broker-a": dict(self.members)},
        )


async def test_an_unreachable_master_moves_reads_and_refetches_its_routes_at_most_once_a_second(
    manual_clock,
):
    ns = Nameserver({0: MASTER, 1: REPLICA})
    routes = RouteService(
        ns.fetch, clock=manual_clock, suspect_s=5.0, failure_refresh_interval_s=1.0
    )
    await routes.get("t")
    await routes.get("u")
    ns.members = {1: REPLICA}  # meanwhile the master expired
    routes.mark_unreachable(MASTER)
    assert routes.read_addr("broker-a") == REPLICA  # at once, before any refetch
    routes.mark_unreachable(MASTER)  # a second failure: no second refetch
    await asyncio.gather(*routes._refreshes)
    assert sorted(ns.asked) == ["t", "t", "u", "u"]
    assert routes.members.members("broker-a") == {1: REPLICA}
    assert routes.addr_of("broker-a") is None
    assert routes.degraded_topics() == ["t", "u"]
    manual_clock.advance(1.0)
    routes.mark_unreachable(REPLICA)
    await asyncio.gather(*routes._refreshes)
    assert len(ns.asked) == 6
    ns.members = {0: MASTER, 1: REPLICA}  # it registered again
    await routes.refresh("t")
    assert routes.degraded_topics() == ["t", "u"]  # still suspect for 4 s more
    manual_clock.advance(4.0)
    assert routes.degraded_topics() == []
    assert routes.read_addr("broker-a") == MASTER
    await routes.stop()


class FakeBroker:
    def __init__(self, addr: str, stored: dict[MessageQueue, int]) -> None:
        self.addr = addr
        self.stored = stored
        self.commits: list[tuple[MessageQueue, int]] = []

    async def update_consumer_offset(self, group, queue, offset, *, timeout_s):
        self.commits.append((queue, offset))
        self.stored[queue] = offset

    async def query_consumer_offset(self, group, queue, *, timeout_s):
        return self.stored.get(queue)


async def test_offsets_committed_to_the_replica_are_committed_again_to_the_returning_master():
    mq = MessageQueue("t", "broker-a", 0)
    master, replica = FakeBroker(MASTER, {mq: 10}), FakeBroker(REPLICA, {mq: 10})
    serving = {"now": master}
    store = RemoteBrokerOffsetStore("cg", lambda name: serving["now"])
    assert await store.read_stored(mq) == 10
    assert await store.persist() == 0  # nothing new
    serving["now"] = replica  # the master went away
    store.update(mq, 25)
    assert await store.persist() == 1
    assert replica.commits == [(mq, 25)] and master.commits == []
    assert await store.persist() == 0
    serving["now"] = master  # it is back, with 10
    assert await store.persist() == 1
    assert master.commits == [(mq, 25)]
    assert await store.persist() == 0


class MembersBroker:
    addr = REPLICA

    def __init__(self, ids: list[str]) -> None:
        self.ids = ids

    async def consumer_ids(self, group, *, timeout_s):
        return self.ids


@pytest.mark.parametrize("ids", [[], ["other-member"]])
async def test_a_member_list_that_lacks_this_client_keeps_its_current_queues(manual_clock, ids):
    ns = Nameserver({1: REPLICA})
    routes = RouteService(ns.fetch, clock=manual_clock)
    rebalancer = Rebalancer(
        group="cg",
        client_id="me",
        routes=routes,
        broker_of=lambda name: MembersBroker(ids),
        strategy=allocate_averagely,
    )
    # a replica (or a restarted master) that has not had this member's heartbeat yet
    assert await rebalancer.target("t") is None
    rebalancer._broker_of = lambda name: MembersBroker(["me", *ids])
    assert len(await rebalancer.target("t")) == (2 if not ids else 1)
