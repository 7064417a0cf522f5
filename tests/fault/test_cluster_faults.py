"""A nameserver killed and restarted, and a broker frozen (SIGSTOP) and thawed, under load.

Clients keep running through both: none of them is restarted.

* nameserver: kill -9 and a new process on the same port, which knows nothing
  until the brokers register again (every second here). The producer and the
  push consumer carry on with the routes they hold, then learn a topic created
  after the restart from the new process.
* broker frozen: its registration stops, the nameserver drops it after
  ``broker_expire_seconds`` and producers send to the other broker; after
  SIGCONT it registers again and gets messages again.

Every acknowledged message is consumed (nameserver) or stored (frozen broker).
"""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest
from faultkit import (
    SendLoad,
    check_acks,
    create_topic,
    read_topic,
    recording_consumer,
    routed_brokers,
    wait_for,
)
from processkit import free_port

from pocketmq.client import Producer

pytestmark = pytest.mark.timeout(120)

QUEUES = 4
FAST_CLIENT = dict(route_refresh_interval_s=1, heartbeat_interval_s=1)


async def two_brokers(kit, namesrv_addr: str, *topics: str):
    brokers = [await kit.broker(name, namesrv=namesrv_addr) for name in ("broker-a", "broker-b")]
    for topic in topics:
        for broker in brokers:
            await create_topic(broker.addr, topic, QUEUES)
        await wait_for(
            lambda t=topic: _routed_to(namesrv_addr, t, 2),
            timeout_s=20,
            what=f"the route of {topic} on both brokers",
        )
    return brokers


async def _routed_to(namesrv_addr: str, topic: str, n: int) -> bool:
    return len(await routed_brokers(namesrv_addr, topic)) == n


async def test_clients_ride_through_a_nameserver_restart(kit, fault_report):
    port = free_port()
    namesrv = await kit.nameserver(port=port)
    brokers = await two_brokers(kit, namesrv.addr, "TopicOld")
    consumed: Counter[str] = Counter()
    consumer = recording_consumer(
        group="ns-restart",
        namesrv=namesrv.addr,
        topics=["TopicOld", "TopicNew"],  # New: made after the restart
        into=consumed,
        rebalance_interval_s=1,
        **FAST_CLIENT,
    )
    await consumer.start()
    try:
        async with Producer(group="ns-restart", namesrv=namesrv.addr, **FAST_CLIENT) as producer:
            old = SendLoad(producer, "TopicOld", tasks=4, pause_s=0.005)
            async with old:
                await wait_for(lambda: len(old.acks) >= 200, timeout_s=20, what="200 sends")
                namesrv.signal(signal.SIGKILL)
                await namesrv.proc.wait()
                during = len(old.acks)
                await wait_for(
                    lambda: len(old.acks) >= during + 200,
                    timeout_s=20,
                    what="200 sends while no nameserver runs",
                )
                restarted_at = time.monotonic()
                namesrv = await kit.nameserver(port=port)
                await wait_for(
                    lambda: _routed_to(namesrv.addr, "TopicOld", 2),
                    timeout_s=20,
                    what="both brokers registered with the new nameserver",
                )
                reregistered_s = time.monotonic() - restarted_at
                for broker in brokers:
                    await create_topic(broker.addr, "TopicNew", QUEUES)
                new = SendLoad(producer, "TopicNew", tasks=2, pause_s=0.005)
                async with new:
                    await wait_for(
                        lambda: len(new.acks) >= 100,
                        timeout_s=20,
                        what="100 sends to a topic known only to the new nameserver",
                    )
        acked = {a.msg_id for a in old.acks + new.acks}
        await wait_for(
            lambda: acked <= set(consumed), timeout_s=30, what="every acknowledged message consumed"
        )
        recovered_s = time.monotonic() - restarted_at
    finally:
        await consumer.shutdown()
    fault_report.add(
        "nameserver kill -9 + restart",
        acknowledged=len(acked),
        lost=len(acked - set(consumed)),
        recover_s=reregistered_s,
    )
    print(
        f"\nbrokers re-registered {reregistered_s:.2f} s after the restart; a new topic was "
        f"produced and consumed {recovered_s:.2f} s after it; {old.failures + new.failures} "
        "sends failed"
    )
    assert old.failures == 0, "a send failed while only the nameserver was away"


async def test_a_frozen_broker_expires_from_routes_and_rejoins_after_sigcont(kit, fault_report):
    namesrv = await kit.nameserver(broker_expire_seconds=3, scan_interval_seconds=0.5)
    frozen, other = await two_brokers(kit, namesrv.addr, "TopicFreeze")
    async with Producer(group="freeze", namesrv=namesrv.addr, **FAST_CLIENT) as producer:
        load = SendLoad(producer, "TopicFreeze", tasks=8, pause_s=0.005)
        async with load:
            await wait_for(
                lambda: load.acked_by("broker-a") >= 50 and load.acked_by("broker-b") >= 50,
                timeout_s=20,
                what="sends to both brokers",
            )
            frozen.signal(signal.SIGSTOP)
            stopped_at = time.monotonic()
            expired_s = await wait_for(
                lambda: _routes_only(namesrv.addr, "TopicFreeze", "broker-b"),
                timeout_s=15,
                what="the frozen broker dropped from the route",
            )
            on_b = load.acked_by("broker-b")
            await wait_for(
                lambda: load.acked_by("broker-b") >= on_b + 300,
                timeout_s=15,
                what="300 sends failed over to broker-b",
            )
            failover_s = time.monotonic() - stopped_at
            on_a = load.acked_by("broker-a")
            frozen.signal(signal.SIGCONT)
            thawed_at = time.monotonic()
            await wait_for(
                lambda: _routed_to(namesrv.addr, "TopicFreeze", 2),
                timeout_s=15,
                what="the thawed broker registered again",
            )
            await wait_for(
                lambda: load.acked_by("broker-a") >= on_a + 50,
                timeout_s=30,
                what="sends reaching the thawed broker again",
            )
            rejoin_s = time.monotonic() - thawed_at
    lost = 0
    for broker in (frozen, other):
        stored = await read_topic(broker.addr, "TopicFreeze", QUEUES)
        check = check_acks([a for a in load.acks if a.broker == broker.name], stored)
        lost += len(check.lost) + len(check.misplaced)
    fault_report.add(
        "broker SIGSTOP (failover), then SIGCONT",
        acknowledged=len(load.acks),
        lost=lost,
        recover_s=failover_s,
    )
    print(
        f"\nroute expired {expired_s:.2f} s after SIGSTOP, sends failed over within "
        f"{failover_s:.2f} s ({load.failures} sends failed meanwhile); the broker got "
        f"traffic again {rejoin_s:.2f} s after SIGCONT"
    )
    assert lost == 0


async def _routes_only(namesrv_addr: str, topic: str, broker: str) -> bool:
    return await routed_brokers(namesrv_addr, topic) == {broker}
