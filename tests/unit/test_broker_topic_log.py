"""topics.log: one record per change or batch, torn tails cut and reported, compaction."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from pocketmq.broker.errors import AlreadyExistsError, IllegalArgumentError
from pocketmq.broker.topic_config import BrokerTopicConfig, TopicConfigManager
from pocketmq.broker.topic_log import HEADER_SIZE, LogRecord, decode_records, encode_record
from pocketmq.common.clock import ManualClock


def manager(tmp_path, **kwargs) -> TopicConfigManager:
    kwargs.setdefault("broker_name", "broker-a")
    kwargs.setdefault("cluster_name", "DefaultCluster")
    kwargs.setdefault("max_queues_total", 1_000_000)
    m = TopicConfigManager(str(tmp_path / "config"), clock=ManualClock(), **kwargs)
    m.load()
    return m


def topics(prefix: str, n: int, queues: int = 8) -> list[BrokerTopicConfig]:
    return [
        BrokerTopicConfig(
            topic_name=f"{prefix}{i}", read_queue_nums=queues, write_queue_nums=queues
        )
        for i in range(n)
    ]


def test_record_codec_round_trips_and_stops_at_a_bad_crc():
    a = LogRecord(timestamp_ms=1, counter=2, put=[{"topicName": "T"}], delete=["U"])
    b = LogRecord(timestamp_ms=3, counter=4)
    data = bytearray(encode_record(a) + encode_record(b))
    assert decode_records(bytes(data)).records == [a, b]
    data[-1] ^= 0xFF
    loaded = decode_records(bytes(data))
    assert loaded.records == [a] and loaded.cut_bytes == len(encode_record(b))
    assert "CRC" in loaded.problem


def test_a_batch_is_one_record_and_one_data_version(tmp_path):
    m = manager(tmp_path)
    before = m.data_version.counter
    size_before = m.store.log.size_bytes
    result = m.create_many(topics("Batch", 1000))
    assert len(result.created) == 1000 and m.data_version.counter == before + 1
    assert len(decode_records(Path(m.store.log.path).read_bytes()).records) == 1
    assert m.store.log.size_bytes > size_before
    again = manager(tmp_path)
    assert again.get("Batch999") == m.get("Batch999") and again.data_version == m.data_version


def test_a_batch_with_one_bad_entry_creates_nothing_and_names_the_entry(tmp_path):
    m = manager(tmp_path)
    m.create(BrokerTopicConfig(topic_name="Exists"))
    version = m.data_version
    bad = [*topics("Ok", 3), BrokerTopicConfig(topic_name="bad name")]
    with pytest.raises(IllegalArgumentError, match=r"topic_configs\[3\] \('bad name'\)"):
        m.create_many(bad)
    with pytest.raises(AlreadyExistsError, match=r"topic_configs\[1\] \('Exists'\)"):
        m.create_many([BrokerTopicConfig(topic_name="New"), BrokerTopicConfig(topic_name="Exists")])
    assert m.get("Ok0") is None and m.get("New") is None and m.data_version == version
    result = m.create_many(
        [
            BrokerTopicConfig(topic_name="New"),
            BrokerTopicConfig(topic_name="Exists"),
            BrokerTopicConfig(topic_name="Ok0", read_queue_nums=2, write_queue_nums=2),
        ],
        update_existing=True,
    )
    assert (result.created, result.updated, result.unchanged) == (["New", "Ok0"], [], ["Exists"])


def test_recovery_truncates_a_torn_tail_record_and_reports_it(tmp_path, caplog):
    m = manager(tmp_path)
    m.create_many(topics("Whole", 10))
    m.create_many(topics("Torn", 10))
    m.store.close()
    path = m.store.log.path
    size = os.path.getsize(path)
    with open(path, "r+b") as f:  # a crash in the middle of the second batch
        f.truncate(size - 50)
    with caplog.at_level(logging.WARNING):
        again = manager(tmp_path)
    assert again.get("Whole9") is not None
    assert all(again.get(f"Torn{i}") is None for i in range(10))  # all or nothing
    assert again.last_load.cut_bytes > 0
    assert "cut" in caplog.text and "topics.log" in caplog.text
    assert decode_records(Path(path).read_bytes()).cut_bytes == 0  # cut on disk too
    again.create(BrokerTopicConfig(topic_name="After"))  # appends behind the cut
    assert manager(tmp_path).get("After") is not None


def test_a_torn_header_fragment_is_cut(tmp_path):
    m = manager(tmp_path)
    m.create(BrokerTopicConfig(topic_name="Kept"))
    m.store.close()
    with open(m.store.log.path, "ab") as f:
        f.write(b"\x00\x00\x01")  # less than a header
    again = manager(tmp_path)
    assert again.get("Kept") is not None and again.last_load.cut_bytes == 3
    assert HEADER_SIZE == 8


def test_compaction_rewrites_the_snapshot_once_the_log_is_as_large(tmp_path):
    m = manager(tmp_path, min_compact_bytes=4096)
    for i in range(40):
        m.create_many(topics(f"B{i}x", 25))
    assert m.store.compactions >= 2
    snapshot_bytes = os.path.getsize(m.store.snapshot.path)
    assert m.store.log.size_bytes < snapshot_bytes + 25 * 200  # never much past the snapshot
    again = manager(tmp_path, min_compact_bytes=4096)
    assert len(again) == len(m) and again.data_version == m.data_version


def test_a_crash_mid_compaction_replays_the_rotated_log(tmp_path):
    m = manager(tmp_path)
    m.create_many(topics("Before", 5))
    m.store.log.rotate()  # crash after the rotation, before the snapshot
    m.create_many(topics("During", 5))
    m.store.close()
    again = manager(tmp_path)  # replays both logs, then finishes the compaction
    assert again.get("Before4") is not None and again.get("During4") is not None
    assert not os.path.exists(again.store.log.compacting_path)
    assert manager(tmp_path).get("During4") is not None


def test_delete_many_is_one_change_and_ignores_missing_on_request(tmp_path):
    m = manager(tmp_path)
    m.create_many(topics("D", 5))
    version = m.data_version.counter
    with pytest.raises(Exception, match="does not exist"):
        m.delete_many(["D0", "Nope"])
    assert m.get("D0") is not None
    deleted = m.delete_many(["D0", "D1", "Nope"], ignore_missing=True)
    assert [tc.topic_name for tc in deleted] == ["D0", "D1"]
    assert m.data_version.counter == version + 1
    assert manager(tmp_path).get("D1") is None


def test_changes_since_gives_the_delta_or_none_when_too_old(tmp_path):
    m = manager(tmp_path)
    base = m.data_version.counter
    m.create(BrokerTopicConfig(topic_name="A"))
    m.create(BrokerTopicConfig(topic_name="B"))
    m.delete("A")
    delta = m.changes_since(base)
    assert [tc.topic_name for tc in delta.put] == ["B"] and delta.deleted == ["A"]
    assert m.changes_since(m.data_version.counter).put == []
    assert m.changes_since(base - 5) is None
