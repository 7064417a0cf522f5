"""Many topics: batch create/delete through the CLI and AdminClient, `topic list` in one
call per page, registration deltas and a nameserver restart (real gRPC, port 0)."""

from __future__ import annotations

import json

import pytest
from clusterkit import two_broker_cluster

from pocketmq.client import AdminClient, TopicConfig
from pocketmq.client.errors import ClientError
from pocketmq.nameserver import NameServer, NamesrvConfig


@pytest.fixture
def cluster(cluster):
    for broker in cluster.brokers:  # room for 20,000 topics of 4 queues
        broker.topics._max_queues_total = 200_000
    return cluster


def routed_topics(cluster, prefix: str) -> set[str]:
    return {t for t in cluster.namesrv.route_table.topics() if t.startswith(prefix)}


async def test_topic_create_from_a_file_of_lines_json_or_toml(
    cluster, pocketmq, tmp_path, eventually
):
    (tmp_path / "t.txt").write_text("# name read write perm\nLineA\nLineB 2\nLineC 2 3 4\n")
    (tmp_path / "t.json").write_text(json.dumps(["JsonA", {"topic": "JsonB", "read": 2}]))
    (tmp_path / "t.toml").write_text('[[topic]]\nname = "TomlA"\nread_queue_nums = 3\n')
    for name in ("t.txt", "t.json", "t.toml"):
        code, out, err = await pocketmq(
            "topic", "create", "--from-file", str(tmp_path / name), json_out=True
        )
        assert code == 0, err
        assert len(out) == 2 and all(r["ok"] for r in out)
    await eventually(
        lambda: (
            len(
                routed_topics(cluster, "Line")
                | routed_topics(cluster, "Json")
                | routed_topics(cluster, "Toml")
            )
            == 6
        ),
        what="six topics routed",
    )
    configs = cluster.brokers[0].topics
    assert (
        configs.get("LineC").read_queue_nums,
        configs.get("LineC").write_queue_nums,
        configs.get("LineC").perm,
    ) == (2, 3, 4)
    assert configs.get("JsonB").write_queue_nums == 2
    assert configs.get("TomlA").read_queue_nums == 3
    code, _out, err = await pocketmq("topic", "create", "--from-file", str(tmp_path / "t.txt"))
    assert code == 1 and "already exists" in _out  # refused per broker, reported
    code, out, _err = await pocketmq(
        "topic",
        "create",
        "--from-file",
        str(tmp_path / "t.txt"),
        "--update-existing",
        json_out=True,
    )
    assert code == 0 and "unchanged 3" in out[0]["result"]


async def test_a_bad_topic_file_line_is_refused_before_anything_is_sent(
    cluster, pocketmq, tmp_path
):
    (tmp_path / "bad.txt").write_text("Good\nGood 1 2 3 4 5\n")
    code, _out, err = await pocketmq("topic", "create", "--from-file", str(tmp_path / "bad.txt"))
    assert code == 2 and "bad.txt:2" in err and "NAME [READ [WRITE [PERM]]]" in err
    assert cluster.brokers[0].topics.get("Good") is None


async def test_topic_list_with_20000_topics_returns_every_row(cluster, pocketmq, eventually):
    async with AdminClient(cluster.addr) as admin:
        configs = [
            TopicConfig(topic=f"Many{i:05d}", read_queue_nums=1, write_queue_nums=1)
            for i in range(20_000)
        ]
        for broker in cluster.brokers:
            done = await admin.create_topics(broker.address, configs)
            assert done.created == 20_000
    table = cluster.namesrv.route_table

    def both_route_all() -> bool:  # the second broker's registration may come later
        names = routed_topics(cluster, "Many")
        return len(names) == 20_000 and all(len(table.get_route(t).queue_datas) == 2 for t in names)

    await eventually(both_route_all, timeout_s=60, what="20,000 topics routed by both")
    code, rows, err = await pocketmq("topic", "list", json_out=True)
    assert code == 0, err
    many = [r for r in rows if r["topic"].startswith("Many")]
    assert len(many) == 20_000
    assert all(len(r["brokers"]) == 2 for r in many)
    # two pages of 10,000 and a few system topics: a handful of calls, not 20,000


async def test_topic_delete_of_many_topics_and_missing_ones_reported(cluster, pocketmq, eventually):
    async with AdminClient(cluster.addr) as admin:
        for broker in cluster.brokers:
            await admin.create_topics(
                broker.address, [TopicConfig(topic=f"Del{i}") for i in range(50)]
            )
    await eventually(lambda: len(routed_topics(cluster, "Del")) == 50, what="routed")
    code, out, err = await pocketmq(
        "topic", "delete", *[f"Del{i}" for i in range(40)], json_out=True
    )
    assert code == 0, err
    assert {r["result"] for r in out} == {"deleted 40"}
    await eventually(lambda: len(routed_topics(cluster, "Del")) == 10, what="40 unrouted")
    code, out, _err = await pocketmq("topic", "delete", "Del45", "NoSuchTopic")
    assert code == 1 and "NoSuchTopic" in out  # reported, not dropped
    await eventually(lambda: len(routed_topics(cluster, "Del")) == 9, what="Del45 unrouted")
    code, _out, err = await pocketmq("topic", "delete", "Del46", "NoSuchTopic", "--ignore-missing")
    assert code == 0, err


async def test_a_refused_batch_names_the_entry_and_creates_nothing(cluster):
    addr = cluster.brokers[0].address
    async with AdminClient(cluster.addr) as admin:
        with pytest.raises(ClientError) as refused:
            await admin.create_topics(
                addr, [TopicConfig(topic="FineOne"), TopicConfig(topic="bad name")]
            )
        assert "topic_configs[1]" in str(refused.value) and "INVALID_ARGUMENT" in str(refused.value)
    assert cluster.brokers[0].topics.get("FineOne") is None


async def test_a_one_topic_change_registers_a_small_delta(cluster, eventually):
    broker = cluster.brokers[0]
    async with AdminClient(cluster.addr) as admin:
        await admin.create_topics(
            broker.address, [TopicConfig(topic=f"Big{i:05d}") for i in range(5_000)]
        )
        await eventually(
            lambda: len(routed_topics(cluster, "Big")) == 5_000, timeout_s=20, what="5,000 routed"
        )
        await admin.create_topic(broker.address, TopicConfig(topic="JustOne"))
    await eventually(
        lambda: cluster.namesrv.route_table.get_route("JustOne"), what="JustOne routed"
    )
    sizes = broker.registration.last_request_bytes
    assert sizes and max(sizes.values()) <= 10 * 1024


async def test_a_restarted_nameserver_gets_each_brokers_table_once_in_chunks(tmp_path, eventually):
    async with two_broker_cluster(tmp_path) as cluster:
        broker = cluster.brokers[0]
        broker.topics._max_queues_total = 200_000
        async with AdminClient(cluster.addr) as admin:
            await admin.create_topics(
                broker.address, [TopicConfig(topic=f"Rt{i:05d}") for i in range(12_000)]
            )
        await eventually(
            lambda: len(routed_topics(cluster, "Rt")) == 12_000, timeout_s=30, what="12,000 routed"
        )
        port = int(cluster.addr.rsplit(":", 1)[1])
        await cluster.namesrv.stop(0)
        fresh = NameServer(NamesrvConfig(host="127.0.0.1", port=port))
        await fresh.start()
        try:
            full_before = broker.registration.full_tables_sent
            await broker.registration.run_once()
            assert broker.registration.full_tables_sent == full_before + 1
            assert len({t for t in fresh.route_table.topics() if t.startswith("Rt")}) == 12_000
            await broker.registration.run_once()  # once: deltas from then on
            assert broker.registration.full_tables_sent == full_before + 1
            assert max(broker.registration.last_request_bytes.values()) < 10 * 1024
        finally:
            await fresh.stop(0)
