"""`pocketmq cluster up`'s port layout and broker commands (cli/cluster_cmd.py), pure."""

from __future__ import annotations

import pytest

from pocketmq.broker.config import BrokerConfig
from pocketmq.cli import build_parser
from pocketmq.cli.cluster_cmd import broker_command, cluster_layout
from pocketmq.common.configfile import load_config


@pytest.mark.parametrize(("brokers", "replicas"), [(1, 0), (2, 0), (2, 1), (3, 2), (64, 0)])
def test_no_two_members_share_a_port_and_each_ha_port_is_the_one_above_its_port(brokers, replicas):
    layout = cluster_layout(brokers, replicas, broker_port=10911, v2_port=8081)
    assert len(layout) == brokers * (replicas + 1)
    ports = [p for m in layout for p in (m.port, m.ha_port)]
    v2_ports = [m.v2_port for m in layout]
    assert len(set(ports)) == len(ports) and len(set(v2_ports)) == len(v2_ports)
    assert all(m.ha_port == m.port + 1 for m in layout)
    assert ports == list(range(10911, 10911 + len(ports)))  # one block, no gaps
    assert len({m.label for m in layout}) == len(layout)  # data dirs and logs apart


def test_members_are_a_master_then_its_replicas_in_order():
    layout = cluster_layout(2, 1, broker_port=10911, v2_port=8081)
    assert [
        (m.label, m.broker_name, m.broker_id, m.role, m.port, m.ha_port, m.v2_port) for m in layout
    ] == [
        ("broker-a", "broker-a", 0, "SYNC_MASTER", 10911, 10912, 8081),
        ("broker-a-1", "broker-a", 1, "SLAVE", 10913, 10914, 8082),
        ("broker-b", "broker-b", 0, "SYNC_MASTER", 10915, 10916, 8083),
        ("broker-b-1", "broker-b", 1, "SLAVE", 10917, 10918, 8084),
    ]


def test_masters_are_async_without_replicas_and_as_asked_with_them():
    assert {m.role for m in cluster_layout(2, 0, broker_port=1000, v2_port=-1)} == {"ASYNC_MASTER"}
    layout = cluster_layout(1, 2, broker_port=1000, v2_port=-1, master_role="ASYNC_MASTER")
    assert [m.role for m in layout] == ["ASYNC_MASTER", "SLAVE", "SLAVE"]
    assert {m.v2_port for m in layout} == {-1}


def test_a_member_command_is_a_broker_config_of_that_member():
    for member in cluster_layout(2, 1, broker_port=10911, v2_port=8081):
        command = broker_command(
            member.index,
            broker_id=member.broker_id,
            role=member.role,
            port=member.port,
            ha_port=member.ha_port,
            v2_port=member.v2_port,
            namesrv="127.0.0.1:9876",
            data_dir=f"/d/{member.label}",
            host="127.0.0.1",
        )
        config = load_config(BrokerConfig, args=build_parser().parse_args(command))
        assert (
            config.broker_name,
            config.broker_id,
            config.broker_role,
            config.port,
            config.ha_listen_port,
            config.v2_port,
            config.data_dir,
        ) == (
            member.broker_name,
            member.broker_id,
            member.role,
            member.port,
            member.ha_port,
            member.v2_port,
            f"/d/{member.label}",
        )


def test_the_role_flag_is_an_alias_of_broker_role():
    args = build_parser().parse_args(["broker", "--role", "SLAVE", "--broker-id", "2"])
    config = load_config(BrokerConfig, args=args)
    assert (config.broker_role, config.broker_id) == ("SLAVE", 2)


def test_standalone_serves_no_replication_port_unless_its_config_sets_one(tmp_path):
    from pocketmq.cli.broker_cmd import _standalone_broker_config

    args = build_parser().parse_args(["standalone", "--data-dir", str(tmp_path / "d")])
    assert _standalone_broker_config(args, namesrv_addrs="").ha_listen_port == -1
    toml = tmp_path / "ha.toml"
    toml.write_text("[broker]\nha_port = 10999\n")
    args = build_parser().parse_args(["standalone", "--config", str(toml)])
    assert _standalone_broker_config(args, namesrv_addrs="").ha_listen_port == 10999


def test_broker_help_prints_although_a_key_mentions_a_percent_sign(capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["broker", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "%RETRY%group" in out and "brokerRole" in out and "haListenPort" in out


def _readme_commands(section: str) -> list[list[str]]:
    """The `pocketmq ...` commands of the first bash block under *section* in README.md."""
    import shlex
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = text.split(f"## {section}\n", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [
        shlex.split(line)[1:]
        for line in block.replace("\\\n", " ").splitlines()
        if line.startswith(("pocketmq ", ".venv/bin/pocketmq "))
    ]


@pytest.mark.parametrize("section", ["Running a cluster by hand", "Replication"])
def test_the_readme_brokers_by_hand_have_ports_of_their_own(section):
    configs = [
        load_config(BrokerConfig, args=build_parser().parse_args(command))
        for command in _readme_commands(section)
        if command[0] == "broker"
    ]
    assert len(configs) == 2
    ports = [p for c in configs for p in (c.port, c.ha_listen_port, c.v2_port)]
    assert len(set(ports)) == len(ports), ports
    assert len({c.data_dir for c in configs}) == 2
