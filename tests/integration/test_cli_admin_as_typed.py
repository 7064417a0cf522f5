"""Operators' commands run as typed (issue 18): ``.venv/bin/pocketmq`` as a subprocess
against real servers: port conflicts, dead brokers, the ACL, exit codes, offset
reset plans, group delete and members, runtime broker configuration."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import pytest
from aclmode import APP_ACL
from clikit import POCKETMQ, pocketmq
from processkit import ProcessKit, free_port_with

from pocketmq.broker.broker import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.topic_config import BrokerTopicConfig
from pocketmq.cli import build_parser
from pocketmq.cli.pipeline_cmd import parse_interval
from pocketmq.client import Message, Producer, PullConsumer
from pocketmq.nameserver import NameServer, NamesrvConfig


def small_broker(tmp_path: Path, name: str, namesrv: str, **options) -> Broker:
    return Broker(
        BrokerConfig(
            broker_name=name,
            port=0,
            data_dir=str(tmp_path / name),
            namesrv_addrs=namesrv,
            commitlog_file_size_bytes=16 << 20,
            index_slots=1000,
            index_entries=4000,
            default_topic_queue_nums=2,
            **options,
        )
    )


@pytest.fixture
async def cluster(tmp_path):
    namesrv = NameServer(NamesrvConfig(host="127.0.0.1", port=0))
    await namesrv.start()
    broker = small_broker(tmp_path, "broker-a", namesrv.address)
    await broker.start()
    yield namesrv, broker
    await broker.stop(0)
    await namesrv.stop(0)


async def send(namesrv: str, topic: str, count: int) -> None:
    async with Producer(group="pg", namesrv=namesrv) as producer:
        for i in range(count):
            await producer.send(Message(topic=topic, body=b"m%d" % i))


# -- 1, 2: ports -----------------------------------------------------------------------------
async def test_a_server_refuses_a_port_another_process_holds(cluster):
    namesrv, broker = cluster
    namesrv_port = namesrv.address.rsplit(":", 1)[1]
    code, _out, err = await pocketmq("nameserver", "--port", namesrv_port, timeout_s=30)
    assert code == 1, err
    assert f"cannot listen on 127.0.0.1:{namesrv_port}" in err
    assert "another process" in err
    code, _out, err = await pocketmq(
        "broker",
        "--port",
        str(broker.port),
        "--data-dir",
        str(Path(broker.config.data_dir).with_name("other")),
        "--grpc-v2-port",
        "-1",
        "--ha-port",
        "-1",
        timeout_s=30,
    )
    assert code == 1, err
    assert f"cannot listen on 127.0.0.1:{broker.port}" in err


def _port_pair() -> int:
    """A broker port whose ha (port + 1) and RocketMQ 5 (derived) ports are free."""
    return free_port_with(lambda port: (port, port + 1, BrokerConfig(port=port).v2_port))


async def test_two_brokers_by_hand_share_a_machine_without_naming_v2_ports(tmp_path):
    assert BrokerConfig(port=10911).v2_port == 8081
    assert BrokerConfig(port=10921).v2_port == 8091
    assert build_parser().parse_args(["broker", "--v2-port", "-1"]).grpc_v2_port == -1
    kit = ProcessKit(tmp_path)
    try:
        ns = await kit.nameserver()
        first = await kit.broker("broker-a", namesrv=ns.addr, port=_port_pair())
        second = await kit.broker("broker-b", namesrv=ns.addr, port=_port_pair())
        assert first.running and second.running
    finally:
        await kit.close()


# -- 5, 7, 18: brokers that answer and one that does not ------------------------------------
async def test_status_commands_show_the_live_brokers_and_mark_the_dead_one(
    cluster, tmp_path, eventually
):
    namesrv, _broker = cluster
    kit = ProcessKit(tmp_path)
    try:
        dead = await kit.broker("broker-b", namesrv=namesrv.address)
        for b in ("broker-a", "broker-b"):
            code, _out, err = await pocketmq(
                "topic", "create", "split", "--broker", b, "--namesrv", namesrv.address
            )
            assert code == 0, err
        await eventually(
            lambda: len(namesrv.route_table.get_route("split").queue_datas) == 2,
            what="both brokers routed",
        )
        await send(namesrv.address, "split", 4)
        await dead.kill()  # SIGKILL: the nameserver still lists it for a while

        code, out, err = await pocketmq("broker", "status", "--json", "--namesrv", namesrv.address)
        assert code == 1
        status = json.loads(out)
        assert status["broker-b"] == {"status": "UNREACHABLE"}
        assert isinstance(status["broker-a"]["topic_count"], int)  # numbers as numbers
        assert "broker broker-b" in err and "did not answer" in err
        code, out, err = await pocketmq("topic", "status", "split", "--namesrv", namesrv.address)
        assert code == 1
        assert "broker-a" in out and "UNREACHABLE" in out
        code, out, err = await pocketmq(
            "group", "progress", "nobody-yet", "--topic", "split", "--namesrv", namesrv.address
        )
        assert code == 1 and "broker-b" in out + err
    finally:
        await kit.close()


async def test_broker_by_name_and_config_without_unset_values(cluster):
    namesrv, _broker = cluster
    code, out, err = await pocketmq(
        "broker", "config", "broker-a", "--json", "--namesrv", namesrv.address
    )
    assert code == 0, err
    config = json.loads(out)["broker-a"]
    assert config["broker_name"] == "broker-a" and config["port"] == 0  # as configured
    assert "grpc_v2_port" not in config and "secret_key" not in config
    assert "None" not in config.values() and "***" not in config.values()
    code, _out, err = await pocketmq("broker", "status", "broker-z", "--namesrv", namesrv.address)
    assert code == 1 and "no live broker is named 'broker-z'" in err


# -- 7: exit codes ---------------------------------------------------------------------------
async def test_nothing_to_show_or_nothing_reachable_exits_1(cluster):
    namesrv, _broker = cluster
    lonely = NameServer(NamesrvConfig(host="127.0.0.1", port=0))
    await lonely.start()
    try:
        code, _out, err = await pocketmq("cluster", "list", "--namesrv", lonely.address)
        assert code == 1 and "no live broker" in err
    finally:
        await lonely.stop(0)
    code, _out, err = await pocketmq(
        "topic", "status", "no-such-topic", "--namesrv", namesrv.address
    )
    assert code == 1 and "no-such-topic" in err
    code, _out, err = await pocketmq("topic", "list", "--namesrv", "127.0.0.1:1")
    assert code == 1 and "UNAVAILABLE" in err


async def test_an_interrupted_bench_exits_130(cluster):
    namesrv, _broker = cluster
    proc = await asyncio.create_subprocess_exec(
        POCKETMQ,
        "--log-level",
        "WARNING",
        "bench",
        "produce",
        "--topic",
        "bench-int",
        "--duration",
        "120",
        "--interval",
        "0.2",
        "--namesrv",
        namesrv.address,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        await asyncio.wait_for(proc.stdout.readline(), 60)  # the first progress line
        proc.send_signal(signal.SIGINT)
        _out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert b"interrupted" in err


# -- 6: the ACL refuses a consumer's group --------------------------------------------------
async def test_a_consumer_whose_group_the_acl_denies_exits_1_and_creates_nothing(tmp_path):
    acl = tmp_path / "acl.toml"
    acl.write_text(APP_ACL)
    namesrv = NameServer(NamesrvConfig(host="127.0.0.1", port=0))
    await namesrv.start()
    broker = small_broker(tmp_path, "broker-a", namesrv.address, acl_enable=True, acl_file=str(acl))
    await broker.start()
    try:
        broker.topics.create(
            BrokerTopicConfig(topic_name="orders", read_queue_nums=2, write_queue_nums=2)
        )
        code, _out, err = await pocketmq(
            "consume",
            "orders",
            "--group",
            "intruders",
            "-n",
            "1",
            "--access-key",
            "app",
            "--secret-key",
            "app-secret",
            "--namesrv",
            namesrv.address,
        )
        assert code == 1, err
        assert "consumer group 'intruders' may not consume" in err
        assert broker.topics.get("%RETRY%intruders") is None
        code, _out, err = await pocketmq(
            "broker",
            "update-config",
            "broker-a",
            "max_pull_messages=64",
            "--access-key",
            "app",
            "--secret-key",
            "app-secret",
            "--namesrv",
            namesrv.address,
        )
        assert code == 1 and "admin" in err
    finally:
        await broker.stop(0)
        await namesrv.stop(0)


# -- 8: permissions --------------------------------------------------------------------------
async def test_topic_create_refuses_a_permission_rocketmq_does_not_have(cluster):
    namesrv, broker = cluster
    code, _out, err = await pocketmq(
        "topic", "create", "perm9", "-p", "9", "--namesrv", namesrv.address
    )
    assert code == 2 and "give 6 (read+write), 4 (read only), 2 (write only)" in err
    assert "usage: pocketmq topic create" in err
    code, _out, err = await pocketmq(
        "topic", "create", "perm4", "-p", "r", "--namesrv", namesrv.address
    )
    assert code == 0, err
    assert broker.topics.get("perm4").perm == 4


# -- 9: offset reset plans -------------------------------------------------------------------
async def test_reset_offset_shows_a_plan_refuses_typos_and_applies_per_queue(cluster):
    namesrv, broker = cluster
    await send(namesrv.address, "ledger", 6)
    addr = namesrv.address
    code, _out, err = await pocketmq(
        "group", "reset-offset", "ledgr", "ledger", "--to", "earliest", "--namesrv", addr
    )
    assert code == 1 and "a typo?" in err and "--allow-new-group" in err
    assert not broker.offsets.topics_of_group("ledgr")

    code, out, err = await pocketmq(
        "group",
        "reset-offset",
        "auditors",
        "ledger",
        "--to",
        "latest",
        "--allow-new-group",
        "--json",
        "--namesrv",
        addr,
    )
    assert code == 0, err
    plan = json.loads(out)
    assert plan["executed"] is False and len(plan["moves"]) == 2
    assert not broker.offsets.topics_of_group("auditors")  # a dry run

    code, _out, err = await pocketmq(
        "group",
        "reset-offset",
        "auditors",
        "ledger",
        "--to",
        "latest",
        "--allow-new-group",
        "--execute",
        "--namesrv",
        addr,
    )
    assert code == 0, err
    ends = {q: broker.offsets.query("auditors", "ledger", q) for q in (0, 1)}
    assert sum(ends.values()) == 6
    code, _out, err = await pocketmq(
        "group",
        "reset-offset",
        "auditors",
        "ledger",
        "--shift-by",
        "-1",
        "--queue",
        "0",
        "--execute",
        "--namesrv",
        addr,
    )
    assert code == 0, err
    assert broker.offsets.query("auditors", "ledger", 0) == ends[0] - 1
    assert broker.offsets.query("auditors", "ledger", 1) == ends[1]
    code, _out, err = await pocketmq(
        "group",
        "reset-offset",
        "auditors",
        "ledger",
        "--to-offset",
        "0",
        "--execute",
        "--namesrv",
        addr,
    )
    assert code == 0, err
    assert {broker.offsets.query("auditors", "ledger", q) for q in (0, 1)} == {0}


# -- 17: group delete, members, runtime config, system topics --------------------------------
async def test_group_connections_then_delete(cluster, eventually):
    namesrv, broker = cluster
    await send(namesrv.address, "work", 2)
    consumer = PullConsumer(group="workers", namesrv=namesrv.address, consume_from="first")
    consumer.subscribe("work", "a || b")
    await consumer.start()
    try:
        code, out, err = await pocketmq(
            "group", "connections", "workers", "--json", "--namesrv", namesrv.address
        )
        assert code == 0, err
        [member] = json.loads(out)["connections"]
        assert member["client_id"] == consumer.client_id
        assert "work: a || b" in member["subscriptions"]
        await consumer.commit()
        await eventually(lambda: broker.offsets.topics_of_group("workers") or True)
        code, _out, err = await pocketmq("group", "delete", "workers", "--namesrv", namesrv.address)
        assert code == 1 and "online member" in err
    finally:
        await consumer.shutdown()
    broker.offsets.commit("workers", "work", 0, 1)
    code, out, err = await pocketmq("group", "delete", "workers", "--namesrv", namesrv.address)
    assert code == 0, err
    assert not broker.offsets.topics_of_group("workers")
    assert broker.topics.get("%RETRY%workers") is None
    code, _out, err = await pocketmq("group", "delete", "workers", "--namesrv", namesrv.address)
    assert code == 1 and "no broker knows consumer group 'workers'" in err


async def test_broker_update_config_changes_what_may_change(cluster):
    namesrv, broker = cluster
    code, out, err = await pocketmq(
        "broker", "update-config", "broker-a", "max_pull_messages=7", "--namesrv", namesrv.address
    )
    assert code == 0, err
    assert broker.pull_service._max_messages == 7
    code, out, err = await pocketmq(
        "broker", "config", "broker-a", "--json", "--namesrv", namesrv.address
    )
    assert json.loads(out)["broker-a"]["max_pull_messages"] == 7
    code, _out, err = await pocketmq(
        "broker", "update-config", "broker-a", "port=1", "--namesrv", namesrv.address
    )
    assert code == 1 and "cannot change while the broker runs" in err
    code, _out, err = await pocketmq(
        "broker",
        "update-config",
        "broker-a",
        "max_pull_messages=lots",
        "--namesrv",
        namesrv.address,
    )
    assert code == 1 and "max_pull_messages: 'lots' is not an integer" in err


async def test_topic_list_hides_system_topics_unless_all(cluster):
    namesrv, _broker = cluster
    await send(namesrv.address, "visible", 1)
    code, out, err = await pocketmq("topic", "list", "--json", "--namesrv", namesrv.address)
    assert code == 0, err
    names = {t["topic"] for t in json.loads(out)}
    assert "visible" in names
    assert not names & {"TBW102", "SCHEDULE_TOPIC_XXXX", "broker-a"}
    code, out, _ = await pocketmq("topic", "list", "--all", "--json", "--namesrv", namesrv.address)
    assert {"TBW102", "broker-a"} <= {t["topic"] for t in json.loads(out)}


# -- 10: pipeline interval -------------------------------------------------------------------
async def test_pipeline_interval_takes_seconds_and_units():
    assert parse_interval("2") == "2000 milliseconds"
    assert parse_interval("500ms") == "500 milliseconds"
    assert parse_interval("1 minute") == "60000 milliseconds"
    assert parse_interval("10 seconds") == "10000 milliseconds"
    code, _out, err = await pocketmq(
        "pipeline", "archive", "--topic", "t", "--to", "/tmp/x", "--interval", "soon"
    )
    assert code == 2 and "--interval" in err
