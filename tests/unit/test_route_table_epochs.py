"""The nameserver's route table and master epochs: a replaced master is refused and unrouted."""

from __future__ import annotations

from pocketmq.common.clock import ManualClock
from pocketmq.nameserver.route_table import (
    BrokerIdentity,
    DataVersion,
    RegisteredTopicConfig,
    RouteTable,
)

TOPIC = RegisteredTopicConfig(topic_name="orders", read_queue_nums=2, write_queue_nums=2, perm=6)


def table() -> RouteTable:
    return RouteTable(clock=ManualClock(), default_heartbeat_timeout_ms=120_000)


def member(addr: str, broker_id: int) -> BrokerIdentity:
    return BrokerIdentity(
        cluster="c", broker_name="broker-a", broker_addr=addr, broker_id=broker_id
    )


def test_a_replica_learns_its_masters_ha_address_and_epoch():
    t = table()
    t.register_broker(
        member("10.0.0.1:10911", 0),
        DataVersion(1, 1),
        [TOPIC],
        ha_addr="10.0.0.1:10912",
        master_epoch=3,
    )
    result = t.register_broker(
        member("10.0.0.2:10911", 1), DataVersion(1, 1), [], ha_addr="10.0.0.2:10912"
    )
    assert result.master_addr == "10.0.0.1:10911"
    assert result.master_ha_addr == "10.0.0.1:10912"
    assert result.master_epoch == 3
    route = t.get_route("orders")
    assert route is not None
    assert dict(route.broker_datas[0].broker_addrs) == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}


def test_a_promoted_replica_replaces_the_master_and_the_old_one_is_refused():
    t = table()
    t.register_broker(member("10.0.0.1:10911", 0), DataVersion(1, 1), [TOPIC], master_epoch=1)
    t.register_broker(member("10.0.0.2:10911", 1), DataVersion(1, 1), [])
    # the replica was promoted: id 0 in epoch 2, from its own address
    promoted = t.register_broker(
        member("10.0.0.2:10911", 0),
        DataVersion(1, 2),
        [TOPIC],
        ha_addr="10.0.0.2:10912",
        master_epoch=2,
    )
    assert not promoted.stale_master
    route = t.get_route("orders")
    assert route is not None
    assert dict(route.broker_datas[0].broker_addrs) == {0: "10.0.0.2:10911"}
    # the old master comes back and registers as master of epoch 1: refused, not routed
    stale = t.register_broker(
        member("10.0.0.1:10911", 0), DataVersion(1, 1), [TOPIC], master_epoch=1
    )
    assert stale.stale_master
    assert stale.master_epoch == 2
    assert stale.master_addr == "10.0.0.2:10911"
    assert stale.master_ha_addr == "10.0.0.2:10912"
    route = t.get_route("orders")
    assert route is not None
    assert dict(route.broker_datas[0].broker_addrs) == {0: "10.0.0.2:10911"}
    assert t.live_broker("10.0.0.1:10911") is None
    # rejoining as a replica is accepted
    back = t.register_broker(member("10.0.0.1:10911", 1), DataVersion(1, 1), [])
    assert not back.stale_master and back.master_addr == "10.0.0.2:10911"


def test_a_master_of_the_same_or_a_newer_epoch_is_taken():
    t = table()
    t.register_broker(member("10.0.0.1:10911", 0), DataVersion(1, 1), [TOPIC], master_epoch=4)
    again = t.register_broker(
        member("10.0.0.1:10911", 0), DataVersion(1, 1), [TOPIC], master_epoch=4
    )
    assert not again.stale_master
    newer = t.register_broker(
        member("10.0.0.3:10911", 0), DataVersion(1, 1), [TOPIC], master_epoch=5
    )
    assert not newer.stale_master and newer.master_epoch == 5
