"""ClientManager: heartbeats, expiry on a ManualClock, membership-change notifications."""

from __future__ import annotations

import asyncio

import pytest

from pocketmq.broker.client_manager import (
    ChannelOpenedCommand,
    ClientManager,
    ClientOwnershipError,
    ConsumerRegistration,
    NotifyConsumerIdsChangedCommand,
)
from pocketmq.common.clock import ManualClock


def consumer(group="GroupA", **subs) -> ConsumerRegistration:
    return ConsumerRegistration(group=group, subscriptions=subs or {"TopicA": "*"})


def pending(channel) -> list:
    out = []
    while not channel._queue.empty():
        out.append(channel._queue.get_nowait())
    return out


async def test_heartbeats_register_producers_and_consumers():
    m = ClientManager(broker_name="broker-a", clock=ManualClock())
    m.heartbeat("c2", consumers=[consumer()])
    m.heartbeat("c1", producer_groups=["PG"], consumers=[consumer()])
    assert m.consumer_ids("GroupA") == ["c1", "c2"]
    assert m.producer_ids("PG") == ["c1"]
    assert m.subscribed_topics("GroupA") == {"TopicA"}
    assert m.consumer_ids("Unknown") == []


async def test_clients_silent_past_the_expiry_are_dropped():
    clock = ManualClock()
    m = ClientManager(broker_name="broker-a", expire_seconds=120, clock=clock)
    m.heartbeat("old", producer_groups=["PG"], consumers=[consumer()])
    clock.advance(100)
    m.heartbeat("fresh", consumers=[consumer()])
    clock.advance(30)  # old: 130 s silent, fresh: 30 s
    assert m.run_once() == ["old"]
    assert m.consumer_ids("GroupA") == ["fresh"]
    assert m.producer_ids("PG") == []
    clock.advance(89)  # fresh: 119 s silent
    assert m.run_once() == []
    clock.advance(2)
    assert m.run_once() == ["fresh"]


async def test_a_heartbeat_keeps_a_client_alive():
    clock = ManualClock()
    m = ClientManager(broker_name="broker-a", expire_seconds=120, clock=clock)
    for _ in range(10):
        m.heartbeat("c1", consumers=[consumer()])
        clock.advance(30)
        assert m.run_once() == []


async def test_group_members_are_told_when_a_consumer_joins_leaves_or_expires():
    clock = ManualClock()
    m = ClientManager(broker_name="broker-a", expire_seconds=120, clock=clock)
    m.heartbeat("c1", consumers=[consumer()])
    ch1 = m.open_channel("c1")
    assert pending(ch1) == [ChannelOpenedCommand("broker-a")]
    m.heartbeat("c2", consumers=[consumer()])
    assert pending(ch1) == [NotifyConsumerIdsChangedCommand("GroupA")]
    m.heartbeat("c2", consumers=[consumer()])  # same member, same topics: quiet
    assert pending(ch1) == []
    m.heartbeat("c2", consumers=[consumer(TopicA="*", TopicB="*")])  # topics changed
    assert pending(ch1) == [NotifyConsumerIdsChangedCommand("GroupA")]
    m.unregister("c2", consumer_group="GroupA")
    assert pending(ch1) == [NotifyConsumerIdsChangedCommand("GroupA")]
    m.heartbeat("c3", consumers=[consumer()])
    pending(ch1)
    clock.advance(100)
    m.heartbeat("c1", consumers=[consumer()])
    clock.advance(30)
    # c2 left its only group: it is forgotten then, not dropped (and logged) as silent now
    assert m.run_once() == ["c3"]
    assert pending(ch1) == [NotifyConsumerIdsChangedCommand("GroupA")]


async def test_other_groups_are_not_notified():
    m = ClientManager(broker_name="broker-a", clock=ManualClock())
    m.heartbeat("b1", consumers=[consumer("GroupB")])
    ch = m.open_channel("b1")
    pending(ch)
    m.heartbeat("a1", consumers=[consumer("GroupA")])
    assert pending(ch) == []


async def test_channel_streams_commands_until_closed():
    m = ClientManager(broker_name="broker-a", clock=ManualClock())
    m.heartbeat("c1", consumers=[consumer()])
    channel = m.open_channel("c1")
    received = []

    async def read():
        async for command in channel.commands():
            received.append(command)

    reader = asyncio.create_task(read())
    m.heartbeat("c2", consumers=[consumer()])
    m.close_channel(channel)
    await asyncio.wait_for(reader, 1)
    assert received == [ChannelOpenedCommand("broker-a"), NotifyConsumerIdsChangedCommand("GroupA")]
    assert m.channel("c1") is None


async def test_a_client_whose_channel_closes_leaves_every_group_and_the_rest_are_told():
    m = ClientManager(broker_name="broker-a", clock=ManualClock())
    m.heartbeat("c1", producer_groups=["pg"], consumers=[consumer()])
    m.heartbeat("c2", consumers=[consumer()])
    gone, stays = m.open_channel("c1"), m.open_channel("c2")
    m.close_channel(gone)  # c1's process was killed: its stream ended
    assert m.consumer_ids("GroupA") == ["c2"]
    assert m.producer_ids("pg") == []
    assert pending(stays)[-1] == NotifyConsumerIdsChangedCommand("GroupA")
    assert m.run_once() == [], "nothing left to expire later"
    m.heartbeat("c1", consumers=[consumer()])  # alive after all: its next heartbeat is back
    assert m.consumer_ids("GroupA") == ["c1", "c2"]


async def test_a_new_channel_replaces_the_old_one():
    m = ClientManager(broker_name="broker-a", clock=ManualClock())
    old = m.open_channel("c1")
    new = m.open_channel("c1")
    assert old.closed and not new.closed
    m.heartbeat("c1", consumers=[consumer()])
    m.close_channel(old)  # the old stream ending must not drop the new one
    assert m.channel("c1") is new
    assert m.consumer_ids("GroupA") == ["c1"]


async def test_an_unread_channel_drops_commands_past_its_bound():
    m = ClientManager(broker_name="broker-a", clock=ManualClock())
    channel = m.open_channel("c1")
    for _ in range(channel.MAX_PENDING + 10):
        channel.send(NotifyConsumerIdsChangedCommand("G"))
    assert channel._queue.qsize() == channel.MAX_PENDING


async def test_expiry_closes_the_clients_channel():
    clock = ManualClock()
    m = ClientManager(broker_name="broker-a", expire_seconds=120, clock=clock)
    m.heartbeat("c1", consumers=[consumer()])
    channel = m.open_channel("c1")
    clock.advance(121)
    m.run_once()
    assert channel.closed and m.channel("c1") is None


# -- client ids belong to the access key that registered them ------------------------------
def test_a_client_id_is_bound_to_the_key_that_first_registered_it():
    m = ClientManager(broker_name="broker-a", clock=ManualClock())
    m.heartbeat("c1", consumers=[consumer()], owner="alice")
    m.heartbeat("c1", consumers=[consumer()], owner="alice")  # its own again: fine
    with pytest.raises(ClientOwnershipError, match="'c1' is registered by another access key"):
        m.heartbeat("c1", producer_groups=["PG"], owner="mallory")
    with pytest.raises(ClientOwnershipError):
        m.unregister("c1", consumer_group="GroupA", owner="mallory")
    with pytest.raises(ClientOwnershipError):
        m.open_channel("c1", owner="mallory")
    assert m.consumer_ids("GroupA") == ["c1"] and m.producer_ids("PG") == []
    assert m.owner("c1") == "alice"


def test_without_an_owner_nothing_is_bound_or_refused():
    m = ClientManager(broker_name="broker-a", clock=ManualClock())
    m.heartbeat("c1", producer_groups=["PG"])  # the call forms of grpc_v2/telemetry.py
    m.open_channel("c1")
    m.unregister("c1", producer_group="PG")
    assert m.owner("c1") is None
    m.heartbeat("c2", consumers=[consumer()], owner="alice")
    m.unregister("c2", consumer_group="GroupA")  # a trusted host may
    assert m.consumer_ids("GroupA") == []


def test_a_client_gone_releases_its_id():
    clock = ManualClock()
    m = ClientManager(broker_name="broker-a", expire_seconds=120, clock=clock)
    m.heartbeat("c1", consumers=[consumer()], owner="alice")
    clock.advance(121)
    m.run_once()
    m.heartbeat("c1", consumers=[consumer()], owner="bob")
    assert m.owner("c1") == "bob"


def test_the_command_filter_picks_which_producers_get_a_check():
    m = ClientManager(broker_name="broker-a", clock=ManualClock())
    for client_id, owner in (("p1", "auditor"), ("p2", "writer")):
        m.heartbeat(client_id, producer_groups=["PG"], owner=owner)
        m.open_channel(client_id, owner=owner)
    m.command_filter = lambda owner, command: owner == "writer"
    assert [m.send_to_producer("PG", ChannelOpenedCommand("x")) for _ in range(3)] == ["p2"] * 3
    m.command_filter = lambda owner, command: False
    assert m.send_to_producer("PG", ChannelOpenedCommand("x")) is None
