"""`pocketmq broker promote` against a master and two replicas (real gRPC, port 0).

The brokers and the nameserver serve in the test's process; the CLI runs in-process
on a worker thread (it runs its own event loop), as in test_admin_cli.py, and its
output is read with capsys. One replica is held back (its copy loop stopped) so
that the members' logs differ.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
from clikit import CliRun, pocketmq_main

from pocketmq.broker.topic_config import BrokerTopicConfig
from pocketmq.client import AdminClient, Message, Producer, SendStatus
from pocketmq.client.admin import PromotionRefusedError

TOPIC = "orders"


@pytest.fixture
def pocketmq(capsys, nameserver):
    """``await pocketmq("broker", "promote", addr)``: (exit code, stdout, stderr)."""

    async def run(*args: str) -> CliRun:
        return await pocketmq_main(capsys, *args, "--namesrv", nameserver.address)

    return run


async def send(namesrv: str, count: int) -> None:
    async with Producer(group="promote-pg", namesrv=namesrv) as producer:
        results = [await producer.send(Message(topic=TOPIC, body=b"m%d" % i)) for i in range(count)]
    assert {r.status for r in results} == {SendStatus.SEND_OK}


@pytest.fixture
async def trio(nameserver, broker_config, start_broker, eventually):
    """broker-a: an ASYNC_MASTER and replicas 1 and 2, all with the same 10 messages."""
    common = dict(
        broker_name="broker-a",
        port=0,
        ha_port=0,
        grpc_v2_port=-1,
        namesrv_addrs=nameserver.address,
        register_interval_seconds=0.2,
    )
    master = await start_broker(
        broker_config("master", broker_role="ASYNC_MASTER", broker_id=0, **common)
    )
    master.topics.create(BrokerTopicConfig(topic_name=TOPIC, read_queue_nums=2, write_queue_nums=2))
    await eventually(
        lambda: nameserver.route_table.get_route(TOPIC) is not None, what="the topic's route"
    )
    replicas = [
        await start_broker(
            broker_config(f"replica-{i}", broker_role="SLAVE", broker_id=i, **common)
        )
        for i in (1, 2)
    ]
    await send(nameserver.address, 10)
    await eventually(
        lambda: all(
            r.store.commitlog.max_offset == master.store.commitlog.max_offset for r in replicas
        ),
        what="both replicas caught up",
    )
    return SimpleNamespace(master=master, first=replicas[0], second=replicas[1])


async def hold_back_second_replica(trio, namesrv: str, eventually) -> None:
    """Stop replica 2's copying, then write 10 more messages only the others get."""
    assert trio.second.ha.client is not None
    await trio.second.ha.client.stop()
    await send(namesrv, 10)
    await eventually(
        lambda: trio.first.store.commitlog.max_offset == trio.master.store.commitlog.max_offset,
        what="replica 1 caught up",
    )
    assert trio.second.store.commitlog.max_offset < trio.first.store.commitlog.max_offset


async def test_promote_refuses_a_broker_that_is_already_the_master(trio, pocketmq):
    code, _, err = await pocketmq("broker", "promote", trio.master.address)
    assert code == 1
    assert f"cannot promote {trio.master.address}" in err and "already its master" in err
    assert trio.master.ha.runtime_info()["master_epoch"] == "1"


async def test_promote_refuses_a_replica_behind_another_live_member_unless_forced(
    trio, nameserver, pocketmq, eventually
):
    await hold_back_second_replica(trio, nameserver.address, eventually)
    behind = trio.second.store.commitlog.max_offset
    ahead = trio.first.store.commitlog.max_offset
    # The master is lost (it unregisters): replica 1 is now the one furthest ahead.
    await trio.master.stop()
    code, _, err = await pocketmq("broker", "promote", trio.second.address)
    assert code == 1
    assert (
        f"{trio.first.address} (SLAVE): epoch 1, commit-log offset {ahead} is "
        f"{ahead - behind} bytes ahead in epoch 1" in err
    ), err
    assert "--force" in err
    assert trio.second.ha.runtime_info()["broker_role"] == "SLAVE"  # nothing was changed

    code, out, err = await pocketmq("broker", "promote", trio.second.address, "--force")
    assert code == 0, err
    assert f"(forced): master epoch 2, starting at commit-log offset {behind}" in out, out
    assert trio.second.ha.runtime_info()["broker_role"] == "ASYNC_MASTER"


async def test_promote_takes_the_replica_furthest_ahead_and_prints_what_it_compared(
    trio, nameserver, pocketmq, eventually
):
    await hold_back_second_replica(trio, nameserver.address, eventually)
    ahead = trio.first.store.commitlog.max_offset
    await trio.master.stop()
    code, out, err = await pocketmq(
        "broker", "promote", trio.first.address, "--role", "SYNC_MASTER", "--json"
    )
    assert code == 0, err
    result = json.loads(out)
    assert (result["epoch"], result["start_offset"], result["role"], result["forced"]) == (
        2,
        ahead,
        "SYNC_MASTER",
        False,
    )
    assert [(m["addr"], m["max_offset"]) for m in result["members"]] == [
        (trio.second.address, trio.second.store.commitlog.max_offset)
    ]
    assert trio.first.store.epochs.entries[-1] == (2, ahead)


async def test_promote_of_an_unreachable_or_malformed_address_says_why(pocketmq):
    code, out, err = await pocketmq("broker", "promote", "127.0.0.1:1", "--timeout", "2")
    assert (code, out) == (1, "")
    assert err.startswith(
        "pocketmq broker promote: cannot promote 127.0.0.1:1: "
        "GetBrokerRuntimeInfo to 127.0.0.1:1 failed: UNAVAILABLE"
    ), err
    code, _, err = await pocketmq("broker", "promote", "no-port-here")
    assert code == 2 and "is not host:port" in err
    code, _, err = await pocketmq("broker", "promote", "127.0.0.1:1", "--epoch", "-1")
    assert code == 2 and "--epoch" in err


async def test_admin_client_promote_raises_with_the_positions_it_compared(
    trio, nameserver, eventually
):
    await hold_back_second_replica(trio, nameserver.address, eventually)
    async with AdminClient(nameserver.address) as admin:
        with pytest.raises(PromotionRefusedError) as refused:
            await admin.promote(trio.second.address)
    assert refused.value.target.max_offset == trio.second.store.commitlog.max_offset
    assert sorted(m.addr for m in refused.value.ahead) == sorted(
        [trio.master.address, trio.first.address]
    )
    assert re.search(r"not promoting broker-a id 2 at \S+ \(SLAVE\)", str(refused.value))
