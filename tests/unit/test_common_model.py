"""The value types the broker, nameserver and client share are one definition each."""

from __future__ import annotations

from pocketmq.broker import rebalance_lock, send_processor, topic_config
from pocketmq.client import MessageModel, MessageQueue, SendStatus
from pocketmq.client import route as client_route
from pocketmq.common.model import DataVersion, QueueData
from pocketmq.nameserver import route_table


def test_each_shared_value_type_is_the_same_class_on_every_side():
    assert rebalance_lock.MessageQueue is MessageQueue
    assert send_processor.SendStatus is SendStatus
    assert topic_config.DataVersion is route_table.DataVersion is DataVersion
    assert client_route.QueueData is route_table.QueueData is QueueData


def test_data_version_advances_and_unpacks_as_timestamp_and_counter():
    version = DataVersion(1_000, 4).next(2_000)
    assert version == DataVersion(timestamp_ms=2_000, counter=5)
    assert tuple(version) == (2_000, 5)


def test_message_model_keeps_the_clients_values():
    assert MessageModel("clustering") is MessageModel.CLUSTERING
    assert [m.name for m in MessageModel] == ["CLUSTERING", "BROADCASTING"]
