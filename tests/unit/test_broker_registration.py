"""RegisterBrokerService: every nameserver, every round, failures retried, unregister at stop."""

from __future__ import annotations

import asyncio
import logging

from pocketmq.broker.namesrv_client import BrokerRegistration, NameserverCallError, RegisterReply
from pocketmq.broker.registration import RegisterBrokerService
from pocketmq.broker.topic_config import BrokerTopicConfig, TopicConfigManager
from pocketmq.common.clock import ManualClock


class FakeNameserver:
    def __init__(self, addr: str) -> None:
        self.addr = addr
        self.registrations: list[BrokerRegistration] = []
        self.unregistrations: list[BrokerRegistration] = []
        self.down = False
        self.closed = False
        self.registered_event = asyncio.Event()

    async def register(self, reg, *, timeout_s):
        if self.down:
            raise NameserverCallError(f"nameserver {self.addr}: UNAVAILABLE: connection refused")
        self.registrations.append(reg)
        self.registered_event.set()
        return RegisterReply(topic_configs_accepted=True)

    async def unregister(self, reg, *, timeout_s):
        if self.down:
            raise NameserverCallError(f"nameserver {self.addr}: UNAVAILABLE")
        self.unregistrations.append(reg)
        return True

    async def close(self):
        self.closed = True


def make(tmp_path, addrs=("ns1:9876", "ns2:9876"), interval_s=30.0):
    topics = TopicConfigManager(
        str(tmp_path), broker_name="broker-a", cluster_name="DefaultCluster", clock=ManualClock()
    )
    topics.load()
    fakes: dict[str, FakeNameserver] = {}

    def factory(addr):
        fakes[addr] = FakeNameserver(addr)
        return fakes[addr]

    service = RegisterBrokerService(
        list(addrs),
        topics,
        cluster_name="DefaultCluster",
        broker_name="broker-a",
        broker_addr="127.0.0.1:10911",
        interval_s=interval_s,
        client_factory=factory,
    )
    return service, topics, fakes


async def test_a_round_registers_the_full_topic_table_with_every_nameserver(tmp_path):
    service, topics, fakes = make(tmp_path)
    assert await service.run_once() == 2
    for fake in fakes.values():
        reg = fake.registrations[-1]
        assert (reg.cluster_name, reg.broker_name, reg.broker_addr, reg.broker_id) == (
            "DefaultCluster",
            "broker-a",
            "127.0.0.1:10911",
            0,
        )
        assert {tc.topic_name for tc in reg.topic_configs} == {tc.topic_name for tc in topics.all()}
        assert reg.data_version == topics.data_version


async def test_a_failing_nameserver_is_logged_and_retried_next_round(tmp_path, caplog):
    service, _topics, fakes = make(tmp_path)
    fakes["ns2:9876"].down = True
    with caplog.at_level(logging.WARNING):
        assert await service.run_once() == 1
        assert await service.run_once() == 1
    assert caplog.text.count("cannot register with nameserver ns2:9876") == 1  # not every round
    assert service.registered == {"ns1:9876": True, "ns2:9876": False}
    fakes["ns2:9876"].down = False
    assert await service.run_once() == 2
    assert service.registered["ns2:9876"] is True


async def test_a_topic_change_registers_at_once(tmp_path):
    service, topics, fakes = make(tmp_path, interval_s=3600)
    await service.start()
    ns1 = fakes["ns1:9876"]
    assert len(ns1.registrations) == 1
    ns1.registered_event.clear()
    topics.create(BrokerTopicConfig(topic_name="TopicA"))
    await asyncio.wait_for(ns1.registered_event.wait(), 5)
    assert "TopicA" in {tc.topic_name for tc in ns1.registrations[-1].topic_configs}
    await service.stop()


async def test_stop_unregisters_from_every_nameserver_and_closes_clients(tmp_path):
    service, _topics, fakes = make(tmp_path)
    await service.start()
    fakes["ns2:9876"].down = True  # an unreachable nameserver does not block the stop
    await service.stop()
    assert len(fakes["ns1:9876"].unregistrations) == 1
    assert all(f.closed for f in fakes.values())


async def test_no_nameservers_means_no_task(tmp_path):
    service, _topics, _fakes = make(tmp_path, addrs=())
    await service.start()
    assert await service.run_once() == 0
    await service.stop()
