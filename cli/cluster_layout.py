"""The topology of ``pocketmq cluster up``: one definition of its members, their
ports and data, and the very ``pocketmq nameserver`` / ``pocketmq broker ...``
commands each runs (``docker-compose.yml`` runs the same;
``tests/unit/test_docker_compose.py`` holds it to them). :mod:`.cluster_cmd`'s
docstring draws the port layout.
"""

from __future__ import annotations

import string
import sys
from dataclasses import dataclass

__all__ = [
    "CLUSTER_NAME",
    "DEFAULT_DATA_DIR",
    "MASTER_ROLES",
    "POCKETMQ",
    "PORTS_PER_MEMBER",
    "Member",
    "broker_command",
    "broker_name",
    "cluster_layout",
    "controller_id",
    "dashboard_command",
    "nameserver_command",
]

CLUSTER_NAME = "DefaultCluster"
DEFAULT_DATA_DIR = "./pocketmq-cluster"
POCKETMQ = (sys.executable, "-m", "pocketmq")  # the `pocketmq` command of this install
MASTER_ROLES = ("SYNC_MASTER", "ASYNC_MASTER")
PORTS_PER_MEMBER = 2  # the broker's port and, above it, its replication (ha) port


# -- the topology: one definition for `cluster up` and docker-compose.yml --------------------
def broker_name(index: int) -> str:
    """``broker-a``, ``broker-b``, ... ``broker-z``, then ``broker-26``, ..."""
    return f"broker-{string.ascii_lowercase[index] if index < 26 else index}"


def nameserver_command(
    *,
    port: int,
    host: str,
    controller_dir: str | None = None,
    controller_etcd: str | None = None,
    advertise: str | None = None,
    acl_file: str | None = None,
) -> list[str]:
    """The nameserver; with *controller_dir* (file store) or *controller_etcd* it runs the
    controller too (*advertise*: the address standbys name it by, for a wildcard host);
    with *acl_file* it checks every request against that ACL, as the brokers do."""
    command = ["nameserver", "--host", host, "--port", str(port)]
    if controller_etcd:
        command += ["--controller", "--controller-etcd", controller_etcd]
        if advertise:
            command += ["--controller-advertise-addr", advertise]
    elif controller_dir:
        command += ["--controller", "--controller-data-dir", controller_dir]
    return [*command, "--acl-enable", "--acl-file", acl_file] if acl_file else command


def dashboard_command(*, namesrv: str, host: str, port: int) -> list[str]:
    """The web dashboard of the cluster whose nameservers are *namesrv*."""
    return ["dashboard", "--namesrv", namesrv, "--host", host, "--port", str(port)]


def controller_id(member_id: int) -> int:
    """The id a member asks the controller for: the controller numbers replicas from 1
    (0 means "assign one"), so member id N (0 = the first master) is controller id N + 1."""
    return member_id + 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Member:
    """One broker process of ``cluster up``: broker name *index*, broker id *broker_id*."""

    index: int
    broker_id: int  # 0 = the master, 1.. the replicas
    role: str  # SYNC_MASTER, ASYNC_MASTER or SLAVE
    port: int
    ha_port: int
    v2_port: int  # -1 = off

    @property
    def broker_name(self) -> str:
        return broker_name(self.index)

    @property
    def label(self) -> str:
        """``broker-a`` for a master, ``broker-a-1`` for its replica id 1: log and data dir."""
        return self.broker_name if self.broker_id == 0 else f"{self.broker_name}-{self.broker_id}"


def cluster_layout(
    brokers: int,
    replicas: int = 0,
    *,
    broker_port: int,
    v2_port: int,
    master_role: str | None = None,
) -> list[Member]:
    """Every member, masters before their replicas: member k = index * (replicas + 1) + id
    on *broker_port* + 2k (ha port + 1 above it) and *v2_port* + k (-1: off)."""
    role = master_role or ("SYNC_MASTER" if replicas else "ASYNC_MASTER")
    members = []
    for index in range(brokers):
        for broker_id in range(replicas + 1):
            k = index * (replicas + 1) + broker_id
            port = broker_port + PORTS_PER_MEMBER * k
            members.append(
                Member(
                    index=index,
                    broker_id=broker_id,
                    role=role if broker_id == 0 else "SLAVE",
                    port=port,
                    ha_port=port + 1,
                    v2_port=-1 if v2_port == -1 else v2_port + k,
                )
            )
    return members


def broker_command(
    index: int,
    *,
    port: int,
    ha_port: int,
    v2_port: int,
    namesrv: str,
    data_dir: str,
    host: str,
    broker_id: int = 0,
    role: str = "ASYNC_MASTER",
    broker_ip: str | None = None,
    acl_file: str | None = None,
    config_file: str | None = None,
    controller: str | None = None,
) -> list[str]:
    """Broker *index* of the cluster (id *broker_id*); *broker_ip* when *host* listens on
    every interface.

    *ha_port* serves the master's replicas (a replica serves one too, for when it is
    promoted); *v2_port* serves RocketMQ 5 clients (-1 = off); each broker on a host
    needs ports of its own. *config_file*: a TOML of broker keys for every broker; the
    flags here win over it. *controller* (the controllers' addresses): controller mode,
    where the controller names the master; *role* is then the role taken when elected
    and the broker id the controller id (:func:`controller_id`).
    """
    if controller:
        broker_id, role = controller_id(broker_id), role if role in MASTER_ROLES else "SYNC_MASTER"
    command = [
        "broker",
        "--cluster",
        CLUSTER_NAME,
        "--name",
        broker_name(index),
        "--broker-id",
        str(broker_id),
        "--role",
        role,
        "--host",
        host,
        "--port",
        str(port),
        "--ha-port",
        str(ha_port),
        "--grpc-v2-port",
        str(v2_port),
        "--namesrv",
        namesrv,
        "--data-dir",
        data_dir,
    ]
    if config_file:
        command += ["--config", config_file]
    if broker_ip:
        command += ["--broker-ip", broker_ip]
    if controller:
        command += ["--controller-mode", "--controller", controller]
    return [*command, "--acl-enable", "--acl-file", acl_file] if acl_file else command
