"""TopicConfigManager: system topics, create/update/delete, auto-create, data version, file."""

from __future__ import annotations

import json

import pytest

from pocketmq.broker.errors import (
    AlreadyExistsError,
    DiskFullError,
    FailedPreconditionError,
    IllegalArgumentError,
    NoPermissionError,
    ResourceNotFoundError,
)
from pocketmq.broker.topic_config import BrokerTopicConfig, Perm, TopicConfigManager
from pocketmq.common.clock import ManualClock


def manager(tmp_path, **kwargs) -> TopicConfigManager:
    kwargs.setdefault("broker_name", "broker-a")
    kwargs.setdefault("cluster_name", "DefaultCluster")
    m = TopicConfigManager(str(tmp_path / "config"), clock=ManualClock(), **kwargs)
    m.load()
    return m


def test_load_creates_system_topics_and_persists_them(tmp_path):
    m = manager(tmp_path)
    names = {tc.topic_name for tc in m.all()}
    assert {
        "TBW102",
        "SELF_TEST_TOPIC",
        "SCHEDULE_TOPIC_XXXX",
        "DefaultCluster",
        "broker-a",
        "RMQ_SYS_TRANS_HALF_TOPIC",
    } <= names
    assert m.get("TBW102").perm == Perm.READ_WRITE | Perm.INHERIT
    on_disk = json.loads((tmp_path / "config" / "topics.json").read_text())
    assert set(on_disk["topicConfigTable"]) == names
    assert on_disk["dataVersion"]["counter"] == m.data_version.counter == 1


def test_template_topic_is_absent_when_auto_create_is_off(tmp_path):
    assert manager(tmp_path, auto_create_enable=False).get("TBW102") is None


def test_create_update_delete_bump_the_data_version(tmp_path):
    m = manager(tmp_path)
    v0 = m.data_version
    m.create(BrokerTopicConfig(topic_name="TopicA", read_queue_nums=4, write_queue_nums=4))
    v1 = m.data_version
    m.update(BrokerTopicConfig(topic_name="TopicA", read_queue_nums=4, write_queue_nums=2))
    v2 = m.data_version
    m.delete("TopicA")
    assert v0.counter < v1.counter < v2.counter < m.data_version.counter
    assert m.get("TopicA") is None


def test_update_with_an_identical_config_keeps_the_version(tmp_path):
    m = manager(tmp_path)
    tc = m.create(BrokerTopicConfig(topic_name="TopicA"))
    version = m.data_version
    m.update(tc)
    assert m.data_version == version


def test_refusals_say_what_to_do(tmp_path):
    m = manager(tmp_path)
    m.create(BrokerTopicConfig(topic_name="TopicA"))
    with pytest.raises(AlreadyExistsError, match="UpdateTopic"):
        m.create(BrokerTopicConfig(topic_name="TopicA"))
    with pytest.raises(ResourceNotFoundError, match="CreateTopic"):
        m.update(BrokerTopicConfig(topic_name="TopicB"))
    with pytest.raises(ResourceNotFoundError, match="TopicB"):
        m.delete("TopicB")
    with pytest.raises(NoPermissionError, match="system topic"):
        m.delete("SCHEDULE_TOPIC_XXXX")
    with pytest.raises(IllegalArgumentError, match="write_queue_nums is 0"):
        m.create(BrokerTopicConfig(topic_name="TopicC", write_queue_nums=0))
    with pytest.raises(IllegalArgumentError, match="contains"):
        m.create(BrokerTopicConfig(topic_name="bad topic"))


def test_auto_create_copies_the_template_without_inherit(tmp_path):
    m = manager(tmp_path, default_queue_nums=3)
    tc = m.get_or_auto_create("NewTopic")
    assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (3, 3, Perm.READ_WRITE)
    assert m.get("NewTopic") == tc


def test_auto_create_off_says_how_to_create_the_topic(tmp_path):
    m = manager(tmp_path, auto_create_enable=False)
    with pytest.raises(
        ResourceNotFoundError, match=r"auto_create_topic_enable is off.*CreateTopic"
    ):
        m.get_or_auto_create("NewTopic")


def test_change_listeners_run_after_each_change(tmp_path):
    m = manager(tmp_path)
    calls = []
    m.add_change_listener(lambda: calls.append(m.data_version.counter))
    m.create(BrokerTopicConfig(topic_name="TopicA"))
    m.delete("TopicA")
    assert len(calls) == 2 and calls[0] < calls[1]


def test_table_survives_a_restart_and_a_damaged_snapshot(tmp_path):
    m = manager(tmp_path)
    m.create(
        BrokerTopicConfig(topic_name="TopicA", read_queue_nums=2, write_queue_nums=2, order=True)
    )
    m.persist()  # compacted: TopicA is in topics.json, the first snapshot is its .bak
    m.create(BrokerTopicConfig(topic_name="TopicB"))  # only in topics.log
    version = m.data_version
    again = manager(tmp_path)
    assert again.get("TopicA") == m.get("TopicA") and again.get("TopicB") == m.get("TopicB")
    assert again.data_version == version
    (tmp_path / "config" / "topics.json").write_text("{ torn")
    reloaded = manager(tmp_path)  # the .bak (before TopicA), then the log (TopicB)
    assert reloaded.get("TopicA") is None
    assert reloaded.get("TopicB") == m.get("TopicB")
    assert reloaded.data_version == version


def test_topics_beyond_max_queues_total_are_refused_naming_the_key_and_numbers(tmp_path):
    m = manager(tmp_path, max_queues_total=100)
    system = m.queues_total()
    m.create(
        BrokerTopicConfig(
            topic_name="Fits", read_queue_nums=100 - system - 4, write_queue_nums=100 - system - 4
        )
    )
    for attempt in (
        lambda: m.create(
            BrokerTopicConfig(topic_name="TooMany", read_queue_nums=16, write_queue_nums=16)
        ),
        lambda: m.update(
            BrokerTopicConfig(topic_name="Fits", read_queue_nums=100, write_queue_nums=100)
        ),
        lambda: m.get_or_auto_create("AutoTooMany"),
    ):
        with pytest.raises(FailedPreconditionError) as refused:
            attempt()
        assert "max_queues_total" in refused.value.message and "100" in refused.value.message
        assert refused.value.reason == "QUEUE_LIMIT_EXCEEDED"
    assert m.get("TooMany") is None and m.get("AutoTooMany") is None
    assert m.queues_total() == 100 - 4


def test_a_topic_change_that_cannot_be_saved_is_undone(tmp_path, monkeypatch):
    import errno

    m = manager(tmp_path)
    version = m.data_version

    def full_disk(record):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(m.store.log, "append", full_disk)
    with pytest.raises(DiskFullError) as refused:
        m.create(BrokerTopicConfig(topic_name="NotSaved"))
    assert refused.value.reason == "DISK_FULL" and "topics.json" in refused.value.message
    assert m.get("NotSaved") is None and m.data_version == version
