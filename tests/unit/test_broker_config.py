"""BrokerConfig: RocketMQ's defaults, validation naming the key, the derived StoreConfig."""

from __future__ import annotations

import pytest

from pocketmq.broker.config import BrokerConfig, parse_namesrv_addrs
from pocketmq.broker.store.config import FlushDiskType
from pocketmq.common.errors import ConfigError


def test_defaults_are_rocketmqs():
    cfg = BrokerConfig()
    assert (cfg.broker_name, cfg.cluster_name, cfg.broker_id) == ("broker-a", "DefaultCluster", 0)
    assert cfg.port == 10911
    assert cfg.default_topic_queue_nums == 8
    assert cfg.auto_create_topic_enable is True
    assert cfg.register_interval_seconds == 30
    assert cfg.client_channel_expire_seconds == 120
    assert cfg.consumer_offset_persist_interval_seconds == 5
    assert cfg.pull_suspend_default_ms == 15_000
    assert (cfg.max_pull_messages, cfg.max_pull_bytes) == (32, 256 * 1024)
    assert cfg.max_message_size_bytes == 4 * 1024 * 1024


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"port": 70000}, "port"),
        ({"flush_disk_type": "fast"}, "flush_disk_type"),
        ({"broker_name": "bad name"}, "broker_name"),
        ({"cluster_name": ""}, "cluster_name"),
        ({"default_topic_queue_nums": 0}, "default_topic_queue_nums"),
        ({"register_interval_seconds": -1}, "register_interval_seconds"),
        ({"namesrv_addrs": "localhost"}, "namesrv_addrs"),
        ({"host": "0.0.0.0"}, "broker_ip"),
        ({"broker_ip": "not-an-ip"}, "broker_ip"),
        ({"pull_suspend_default_ms": 90_000}, "pull_suspend_default_ms"),
        ({"max_message_size_bytes": 2 * 1024 * 1024 * 1024}, "max_message_size_bytes"),
        # checked by the store's config, which names the broker's keys too
        ({"commitlog_file_size_bytes": 1024}, "commitlog_file_size_bytes"),
        ({"max_batch_size_bytes": 2 * 1024 * 1024 * 1024}, "max_batch_size_bytes"),
        ({"max_pull_messages": 0}, "max_pull_messages"),
        ({"ha_transfer_linger_ms": -1}, "ha_transfer_linger_ms"),
    ],
)
def test_invalid_values_raise_errors_naming_the_key(kwargs, key):
    with pytest.raises(ConfigError, match=key):
        BrokerConfig(**kwargs)


def test_store_config_carries_the_bound_port_and_flush_mode(tmp_path):
    cfg = BrokerConfig(
        data_dir=str(tmp_path), port=0, flush_disk_type="sync", broker_ip="10.0.0.7", host="0.0.0.0"
    )
    store = cfg.store_config(45678)
    assert store.store_host == ("10.0.0.7", 45678)
    assert store.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert store.data_dir == str(tmp_path)
    assert (store.max_pull_messages, store.max_pull_bytes) == (32, 256 * 1024)


def test_namesrv_addrs_are_split_on_semicolons():
    assert parse_namesrv_addrs(" 10.0.0.1:9876; 10.0.0.2:9877 ;") == [
        "10.0.0.1:9876",
        "10.0.0.2:9877",
    ]
    assert parse_namesrv_addrs("") == []
