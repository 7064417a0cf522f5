"""docker-compose.yml runs what `pocketmq cluster up` runs, and holds together.

No docker engine runs here: the file is loaded as YAML and every command is
parsed by the real CLI parser and checked against cli/cluster_cmd.py's one
definition of the nameserver and broker commands.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import yaml

from pocketmq.broker.config import BrokerConfig
from pocketmq.cli import build_parser
from pocketmq.cli.cluster_cmd import (
    broker_command,
    cluster_layout,
    controller_id,
    nameserver_command,
)
from pocketmq.common.configfile import load_config
from pocketmq.nameserver import NamesrvConfig
from pocketmq.security.acl import AclStore

ROOT = Path(__file__).resolve().parents[2]
# The compose topology is `cluster up --brokers 2 --replicas 1` with the default ports, its
# controller on etcd in three nameservers instead of a file in one.
LAYOUT = cluster_layout(2, 1, broker_port=10911, v2_port=8081)
BROKERS = tuple(m.label for m in LAYOUT)  # broker-a, broker-a-1, broker-b, broker-b-1
NAMESERVERS = ("nameserver", "nameserver-2", "nameserver-3")
SERVERS = (*NAMESERVERS, *BROKERS)
ETCD = "http://etcd:2379"
NAMESRV = ";".join(f"{n}:9876" for n in NAMESERVERS)  # every client's --namesrv
CONTROLLERS = ",".join(f"{n}:9876" for n in NAMESERVERS)  # every broker's --controller
ACL_IN_CONTAINER = "/etc/pocketmq/acl.toml"
KEYS_IN_CONTAINER = "/etc/pocketmq/broker.toml"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def parse(command: list[str]) -> argparse.Namespace:
    """*command* as the image's entrypoint `pocketmq` gets it; fails the test on a usage error."""
    try:
        return build_parser().parse_args(command)
    except SystemExit as exc:
        pytest.fail(f"`pocketmq {' '.join(command)}` does not parse (exit {exc.code})")


def published(service: dict) -> dict[int, int]:
    """Container port -> host port."""
    pairs = (str(p).split(":") for p in service.get("ports", []))
    return {int(container): int(host) for host, container in pairs}


def healthcheck_command(service: dict) -> list[str]:
    test = service["healthcheck"]["test"]
    assert test[:2] == ["CMD", "pocketmq"], f"healthcheck must run a pocketmq command: {test}"
    return test[2:]


def test_the_image_runs_pocketmq_so_service_commands_are_its_arguments():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r'^ENTRYPOINT \["pocketmq"\]$', dockerfile, re.MULTILINE)
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored


def pocketmq_services(services: dict) -> dict:
    """The services that run the PocketMQ image (etcd runs its own)."""
    return {n: s for n, s in services.items() if s.get("image") == "pocketmq:latest"}


def test_every_service_command_and_healthcheck_parses_with_the_cli(services):
    assert set(SERVERS) | {"demo-producer", "demo-consumer"} <= set(services)
    assert set(services) - set(pocketmq_services(services)) == {"etcd"}
    for name, service in pocketmq_services(services).items():
        assert callable(getattr(parse(service["command"]), "func", None)), name
        if "healthcheck" in service:
            assert callable(getattr(parse(healthcheck_command(service)), "func", None)), name


def test_server_commands_equal_the_commands_cluster_up_runs(services):
    for name in NAMESERVERS:
        ns = parse(services[name]["command"])
        assert services[name]["command"] == nameserver_command(
            port=ns.port,
            host="0.0.0.0",
            controller_etcd=ETCD,
            advertise=f"{name}:{ns.port}",
            acl_file=ACL_IN_CONTAINER,
        )
    for member in LAYOUT:
        service = services[member.label]
        assert service["command"] == broker_command(
            member.index,
            broker_id=member.broker_id,
            role=LAYOUT[0].role,
            port=member.port,
            ha_port=member.ha_port,
            v2_port=member.v2_port,
            namesrv=NAMESRV,
            data_dir="/data",
            host="0.0.0.0",
            broker_ip=service["networks"]["pocketmq"]["ipv4_address"],
            acl_file=ACL_IN_CONTAINER,
            config_file=KEYS_IN_CONTAINER,
            controller=CONTROLLERS,
        ), member.label


def test_every_nameserver_runs_the_controller_on_etcd_and_names_itself_to_brokers(services):
    assert services["etcd"]["restart"] == "unless-stopped"
    assert "http://0.0.0.0:2379" in services["etcd"]["command"]
    for name in NAMESERVERS:
        config = load_config(NamesrvConfig, args=parse(services[name]["command"]))
        assert config.controller_enable and config.controller_etcd == ETCD, name
        assert config.controller_advertise_addr == f"{name}:{config.port}", name
        assert "etcd" in services[name]["depends_on"], name


def test_each_broker_name_is_two_controller_mode_members_that_parse_as_such(services):
    for member in LAYOUT:
        config = load_config(
            BrokerConfig,
            toml_path=str(ROOT / "config" / "broker.toml"),
            section="broker",
            args=parse(services[member.label]["command"]),
        )
        assert (config.broker_name, config.broker_id, config.broker_role) == (
            member.broker_name,
            controller_id(member.broker_id),
            "SYNC_MASTER",
        )
        assert config.controller_mode and config.controller_addr == CONTROLLERS
        assert config.ha_listen_port == config.port + 1
        if member.broker_id:  # the replica starts once the first member is up
            master = services[member.label]["depends_on"][member.broker_name]
            assert master["condition"] == "service_healthy"
    assert {(m.broker_name, m.broker_id) for m in LAYOUT} == {
        ("broker-a", 0),
        ("broker-a", 1),
        ("broker-b", 0),
        ("broker-b", 1),
    }


def test_one_service_builds_the_image_and_every_other_runs_it_without_pulling(services):
    ours = pocketmq_services(services)
    builders = [name for name, service in ours.items() if "build" in service]
    assert builders == ["nameserver"], builders
    for name, service in ours.items():
        if name not in builders:
            assert service["pull_policy"] == "never", name  # never a registry's pocketmq


def test_no_container_gets_an_anonymous_volume(services):
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert not re.search(r"^\s*VOLUME\b", dockerfile, re.MULTILINE)
    for name, service in services.items():
        for mount in service.get("volumes", []):
            assert ":" in str(mount), f"{name} mounts {mount} anonymously"


def test_the_nameservers_enforce_the_same_acl_as_the_brokers(services):
    for name in NAMESERVERS:
        service = services[name]
        config = load_config(NamesrvConfig, args=parse(service["command"]))
        assert config.acl_enable and config.acl_file == ACL_IN_CONTAINER, name
        assert f"./config/acl.toml:{ACL_IN_CONTAINER}:ro" in service["volumes"], name


def test_replicas_sign_replication_with_an_admin_account_of_the_shipped_acl(services):
    acl = AclStore(str(ROOT / "config" / "acl.toml")).acl
    for name in BROKERS:
        service = services[name]
        assert f"./config/broker.toml:{KEYS_IN_CONTAINER}:ro" in service["volumes"], name
        config = load_config(
            BrokerConfig,
            toml_path=str(ROOT / "config" / "broker.toml"),
            section="broker",
            args=parse(service["command"]),
        )
        account = acl.accounts[config.access_key]
        assert account.admin and account.secret_key == config.secret_key, name


def test_the_brokers_enforce_the_shipped_acl_and_every_client_has_keys_of_it(services):
    acl = AclStore(str(ROOT / "config" / "acl.toml")).acl
    for name, service in pocketmq_services(services).items():
        if name in BROKERS:
            config = load_config(BrokerConfig, args=parse(service["command"]))
            assert config.acl_enable and config.acl_path == ACL_IN_CONTAINER
            assert f"./config/acl.toml:{ACL_IN_CONTAINER}:ro" in service["volumes"]
        if name:
            env = service["environment"]
            account = acl.accounts[env["POCKETMQ_ACCESS_KEY"]]
            assert account.secret_key == env["POCKETMQ_SECRET_KEY"], name


def test_ports_and_addresses_agree_between_services(services):
    ns_args = parse(services["nameserver"]["command"])
    namesrv = load_config(NamesrvConfig, args=ns_args)
    assert published(services["nameserver"]) == {namesrv.port: namesrv.port}
    assert healthcheck_command(services["nameserver"])[-1] == f"127.0.0.1:{namesrv.port}"
    broker_ports = set()
    for member in LAYOUT:
        service = services[member.label]
        config = load_config(BrokerConfig, args=parse(service["command"]))
        assert config.broker_name == member.broker_name
        assert (config.port, config.ha_listen_port, config.v2_port) == (
            member.port,
            member.ha_port,
            member.v2_port,
        ), member.label
        assert config.namesrv_addr_list == NAMESRV.split(";")
        assert config.advertised_ip == service["networks"]["pocketmq"]["ipv4_address"]
        assert published(service) == {config.port: config.port, config.v2_port: config.v2_port}
        assert healthcheck_command(service)[-1] == f"127.0.0.1:{config.port}"
        broker_ports |= {config.port, config.ha_listen_port, config.v2_port}
        for name in NAMESERVERS:
            assert service["depends_on"][name]["condition"] == "service_healthy"
    assert len(broker_ports) == 3 * len(LAYOUT), "each broker needs ports of its own"
    for name in ("demo-producer", "demo-consumer"):
        command = services[name]["command"]
        assert command[command.index("--namesrv") + 1] == NAMESRV
        assert set(services[name]["depends_on"]) == set(BROKERS)


def test_broker_ips_are_distinct_and_inside_the_network(compose, services):
    subnet = compose["networks"]["pocketmq"]["ipam"]["config"][0]["subnet"]
    prefix = subnet.rsplit(".", 1)[0] + "."
    ips = [services[s]["networks"]["pocketmq"]["ipv4_address"] for s in SERVERS]
    assert len(set(ips)) == len(ips)
    assert all(ip.startswith(prefix) for ip in ips), (subnet, ips)


def test_every_named_volume_is_declared_and_holds_the_broker_data_dir(compose, services):
    declared = set(compose.get("volumes") or {})
    for name, service in services.items():
        for mount in service.get("volumes", []):
            source, target = str(mount).split(":")[:2]
            if not source.startswith((".", "/")):
                assert source in declared, f"{name} mounts undeclared volume {source}"
            if name.startswith("broker-") and not source.startswith("."):
                config = load_config(BrokerConfig, args=parse(service["command"]))
                assert target == config.data_dir
    assert {f"{name}-data" for name in BROKERS} <= declared


def test_servers_restart_unless_stopped_and_have_healthchecks(services):
    for name in (*SERVERS, "etcd", "demo-consumer"):
        assert services[name]["restart"] == "unless-stopped", name
    for name in SERVERS:
        assert services[name]["healthcheck"]["test"], name
