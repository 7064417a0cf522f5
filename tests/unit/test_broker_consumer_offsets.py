"""ConsumerOffsetManager: per topic@group offsets, periodic save, .bak fallback."""

from __future__ import annotations

import json
import logging

import pytest

from pocketmq.broker.consumer_offsets import ConsumerOffsetManager
from pocketmq.broker.errors import IllegalArgumentError, MetadataError


def manager(tmp_path) -> ConsumerOffsetManager:
    m = ConsumerOffsetManager(str(tmp_path / "config"))
    m.load()
    return m


def offsets_file(tmp_path):
    return tmp_path / "config" / "consumerOffset.json"


def test_commit_and_query_by_group_topic_and_queue():
    m = ConsumerOffsetManager("/nonexistent")
    m.commit("GroupA", "TopicA", 0, 10)
    m.commit("GroupA", "TopicA", 1, 20)
    m.commit("GroupB", "TopicA", 0, 5)
    assert m.query("GroupA", "TopicA", 0) == 10
    assert m.query("GroupB", "TopicA", 0) == 5
    assert m.query("GroupA", "TopicA", 7) is None
    assert m.query("GroupC", "TopicA", 0) is None
    assert m.offsets("GroupA", "TopicA") == {0: 10, 1: 20}
    assert m.topics_of_group("GroupA") == ["TopicA"]


def test_a_commit_may_move_an_offset_back():
    m = ConsumerOffsetManager("/nonexistent")
    m.commit("G", "T", 0, 10)
    m.commit("G", "T", 0, 3)
    assert m.query("G", "T", 0) == 3


def test_negative_offsets_are_refused():
    with pytest.raises(IllegalArgumentError, match="-1"):
        ConsumerOffsetManager("/nonexistent").commit("G", "T", 0, -1)


async def test_run_once_saves_only_after_a_change_in_rocketmqs_shape(tmp_path):
    m = manager(tmp_path)
    assert await m.run_once() is False
    m.commit("GroupA", "TopicA", 3, 42)
    assert await m.run_once() is True
    assert json.loads(offsets_file(tmp_path).read_text()) == {
        "offsetTable": {"TopicA@GroupA": {"3": 42}}
    }
    assert await m.run_once() is False


async def test_offsets_survive_a_restart(tmp_path):
    m = manager(tmp_path)
    m.commit("GroupA", "TopicA", 0, 7)
    await m.stop()
    assert manager(tmp_path).query("GroupA", "TopicA", 0) == 7


async def test_an_unreadable_file_falls_back_to_bak_with_a_warning(tmp_path, caplog):
    m = manager(tmp_path)
    m.commit("G", "T", 0, 1)
    m.persist()
    m.commit("G", "T", 0, 2)
    m.persist()  # consumerOffset.json holds 2, .bak holds 1
    offsets_file(tmp_path).write_bytes(b"\x00\x00garbage")
    with caplog.at_level(logging.WARNING):
        reloaded = manager(tmp_path)
    assert reloaded.query("G", "T", 0) == 1
    assert "consumerOffset.json is unreadable" in caplog.text
    assert "consumerOffset.json.bak" in caplog.text


def test_a_missing_main_file_falls_back_to_bak(tmp_path):
    m = manager(tmp_path)
    m.commit("G", "T", 0, 1)
    m.persist()
    m.persist()
    offsets_file(tmp_path).unlink()
    assert manager(tmp_path).query("G", "T", 0) == 1


def test_both_files_damaged_refuses_to_start_empty(tmp_path):
    m = manager(tmp_path)
    m.commit("G", "T", 0, 1)
    m.persist()
    m.persist()
    offsets_file(tmp_path).write_text("[")
    (tmp_path / "config" / "consumerOffset.json.bak").write_text("[")
    with pytest.raises(MetadataError, match="repair or remove"):
        manager(tmp_path)


def test_removing_a_topic_forgets_every_groups_offsets():
    m = ConsumerOffsetManager("/nonexistent")
    m.commit("G1", "TopicA", 0, 1)
    m.commit("G2", "TopicA", 0, 1)
    m.commit("G1", "TopicAB", 0, 1)
    m.remove_topic("TopicA")
    assert m.query("G1", "TopicA", 0) is None
    assert m.query("G2", "TopicA", 0) is None
    assert m.query("G1", "TopicAB", 0) == 1
