"""A broker's store and services: one frozen BrokerServices, built once by start()."""

from __future__ import annotations

import dataclasses

import pytest

from pocketmq.broker.broker import Broker
from pocketmq.broker.services import BrokerServices


def test_a_broker_not_started_says_its_services_come_with_start(broker_config):
    broker = Broker(broker_config())

    with pytest.raises(RuntimeError, match=r"not started.*start\(\)"):
        _ = broker.topics
    with pytest.raises(RuntimeError, match="not started"):
        _ = broker.services


async def test_a_started_broker_serves_with_one_frozen_services_object(start_broker):
    broker = await start_broker()
    services = broker.services

    assert isinstance(services, BrokerServices)
    with pytest.raises(dataclasses.FrozenInstanceError):
        services.topics = None  # type: ignore[misc]
    # The broker's attributes are the parts of that one object.
    assert broker.store is services.store
    assert broker.topics is services.topics
    assert broker.pull_service is services.pull
    assert services.store_host == (broker.config.advertised_ip, broker.port)
    required = [f.name for f in dataclasses.fields(BrokerServices) if f.name not in ("ha", "trace")]
    assert [name for name in required if getattr(services, name) is None] == []


async def test_a_broker_stopped_after_a_failed_start_stops_cleanly(broker_config):
    broker = Broker(broker_config(), store_factory=_failing_store)

    with pytest.raises(OSError, match="no store here"):
        await broker.start()
    await broker.stop()  # nothing was built: nothing to stop, and no AttributeError

    with pytest.raises(RuntimeError, match="not started"):
        _ = broker.store


def _failing_store(config, clock):
    raise OSError("no store here")
