"""``pocketmq cluster up`` and ``pocketmq cluster list``.

``cluster up [--brokers 2] [--replicas 0] [--master-role SYNC_MASTER|ASYNC_MASTER]
[--data-dir DIR] [--namesrv-port 9876] [--broker-port 10911] [--grpc-v2-port 8081]
[--dashboard-port PORT] [--config FILE]``
runs one nameserver and N broker names (``broker-a``, ``broker-b``, ...), each a
master (broker id 0) plus ``--replicas`` replicas (broker ids 1.., role SLAVE),
as child processes. Each child is the very ``pocketmq nameserver`` /
``pocketmq broker ...`` command that ``docker-compose.yml`` runs:
:func:`nameserver_command`, :func:`broker_command` and :func:`cluster_layout`
are the one definition of both, and ``tests/unit/test_docker_compose.py``
holds the compose file to them. Each child writes its log to
``DIR/logs/{member}.log``.

Port layout: the members are numbered in order, ``k = i * (R + 1) + id`` for
broker name *i*, broker id *id* and R replicas (``broker-a``, ``broker-a-1``,
``broker-b``, ``broker-b-1`` ...). Member *k* listens on ``--broker-port`` + 2k
and serves replication on the port above it (RocketMQ's haListenPort =
listenPort + 1), and serves RocketMQ 5 clients on ``--grpc-v2-port`` + k; its data
is in ``DIR/{member}`` (``broker-a``, ``broker-a-1``)::

    --brokers 2 --replicas 1   port   ha port  v2 port  data
    broker-a    (SYNC_MASTER)  10911  10912    8081     DIR/broker-a
    broker-a-1  (SLAVE, id 1)  10913  10914    8082     DIR/broker-a-1
    broker-b    (SYNC_MASTER)  10915  10916    8083     DIR/broker-b
    broker-b-1  (SLAVE, id 1)  10917  10918    8084     DIR/broker-b-1

Masters are SYNC_MASTER when there are replicas (``--master-role
ASYNC_MASTER`` to acknowledge before the replicas have the message), else
ASYNC_MASTER. ``--dashboard-port PORT`` also runs the web dashboard
(``pocketmq dashboard``, :func:`dashboard_command`) on that port; it is off by
default so that a second cluster on the machine, or a test's, never fights over
one well-known port. Once every member has registered with the nameserver the
addresses are printed::

    ROLE         NAME      ID  ADDRESS          PID   LOG
    nameserver   -          -  127.0.0.1:9876   4242  pocketmq-cluster/logs/nameserver.log
    SYNC_MASTER  broker-a   0  127.0.0.1:10911  4243  pocketmq-cluster/logs/broker-a.log
    SLAVE        broker-a   1  127.0.0.1:10913  4244  pocketmq-cluster/logs/broker-a-1.log

The banner shows each broker's role and id as it runs: after a failover
(``pocketmq broker promote``) a ``cluster up`` on the same data shows the
promoted replica as id 0 and the old master as ``(fenced)``, which counts as up.

Ctrl-C (SIGINT) or SIGTERM stops the cluster gracefully: SIGTERM to the
brokers (they flush, write their checkpoint, remove ``abort`` and unregister),
then to the nameserver, each given ``STOP_GRACE_S`` (cluster_up.py) before SIGKILL; the
exit code of each is printed. A child that dies on its own is reported with
the end of its log, and the rest are stopped. The children run in sessions of
their own so that a terminal's Ctrl-C reaches only this process, which stops
them in that order; on Linux they also get SIGTERM should this process die.

``cluster list`` prints every live broker: cluster, name, id, role (the
broker's own: SYNC_MASTER, ASYNC_MASTER, SLAVE), address, master epoch,
replication lag in bytes (replicas) or replicas in sync (masters), version,
put and get TPS (``-`` where the broker does not report one).
Exit codes: 0 done (every child exited 0), 1 a child failed or a server could
not be reached, 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from pocketmq.cli import loop_factory
from pocketmq.cli.admin_cmd import add_common_options, run_admin
from pocketmq.cli.cluster_layout import (
    CLUSTER_NAME,
    DEFAULT_DATA_DIR,
    MASTER_ROLES,
    POCKETMQ,
    PORTS_PER_MEMBER,
    Member,
    broker_command,
    broker_name,
    cluster_layout,
    controller_id,
    dashboard_command,
    nameserver_command,
)
from pocketmq.cli.cluster_up import STARTUP_TIMEOUT_S, STOP_GRACE_S, LocalCluster
from pocketmq.cli.table import dump_json, render
from pocketmq.client import AdminClient, ClientError
from pocketmq.client.errors import NotFoundError
from pocketmq.common.logsetup import server_command

__all__ = [
    "CLUSTER_NAME",
    "DEFAULT_DATA_DIR",
    "MASTER_ROLES",
    "POCKETMQ",
    "PORTS_PER_MEMBER",
    "STARTUP_TIMEOUT_S",
    "STOP_GRACE_S",
    "LocalCluster",
    "Member",
    "broker_command",
    "broker_name",
    "cluster_layout",
    "controller_id",
    "dashboard_command",
    "nameserver_command",
    "register",
]


# -- commands --------------------------------------------------------------------------------
_LAYOUT_HELP = """\
port layout: the members are numbered k = 0, 1, ... in the order broker-a, its
replicas broker-a-1 .. broker-a-R, broker-b, ...; member k listens on
--broker-port + 2k, serves its replicas on the port above (haListenPort), and
serves RocketMQ 5 clients on --grpc-v2-port + k. With --brokers 2 --replicas 1:

  member      role            port   ha port  v2 port  data and log
  broker-a    SYNC_MASTER, 0  10911  10912    8081     DIR/broker-a
  broker-a-1  SLAVE, id 1     10913  10914    8082     DIR/broker-a-1
  broker-b    SYNC_MASTER, 0  10915  10916    8083     DIR/broker-b
  broker-b-1  SLAVE, id 1     10917  10918    8084     DIR/broker-b-1"""


def register(subparsers: Any) -> None:
    cluster = subparsers.add_parser(
        "cluster",
        help="run or list a cluster",
        description="Run a local cluster, or list a cluster's brokers.",
    )
    actions = cluster.add_subparsers(dest="cluster_action", metavar="ACTION", required=True)
    _add_up(actions)
    listing = actions.add_parser(
        "list",
        parents=[_common()],
        help="the cluster's brokers",
        description="Every live broker with its role, master epoch, "
        "replication lag (replicas) or replicas in sync "
        "(masters), version and put/get TPS.",
    )
    listing.set_defaults(func=lambda args: run_admin(_cluster_list, args))


def _add_up(actions: Any) -> None:
    """``cluster up`` and its flags."""
    up = actions.add_parser(
        "up",
        help="one nameserver and N brokers (and their replicas) as local processes",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run one nameserver and N brokers, each with --replicas replicas, as child\n"
        "processes (the commands docker-compose.yml runs) until Ctrl-C.\n\n" + _LAYOUT_HELP,
    )
    up.add_argument("--brokers", type=int, default=2, help="how many broker names (default 2)")
    up.add_argument(
        "--replicas",
        type=int,
        default=0,
        help="replicas (role SLAVE, broker ids 1..N) per broker name (default 0)",
    )
    up.add_argument(
        "--master-role",
        choices=MASTER_ROLES,
        default=None,
        help="role of the masters (default SYNC_MASTER with --replicas >= 1, else ASYNC_MASTER)",
    )
    up.add_argument(
        "--data-dir",
        default=DEFAULT_DATA_DIR,
        help=f"brokers' data and the logs (default {DEFAULT_DATA_DIR})",
    )
    _add_port_options(up)
    up.add_argument(
        "--controller",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run the controller in the nameserver and the brokers in controller "
        "mode: a dead master is replaced automatically (default: on with "
        "--replicas >= 1; --no-controller for manual `broker promote`)",
    )
    up.add_argument(
        "--dashboard-port",
        type=int,
        default=-1,
        metavar="PORT",
        help="also run the web dashboard (`pocketmq dashboard`) on this port, "
        "e.g. 8080 (default -1: off)",
    )
    up.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help="TOML file of broker keys (docs/configuration.md) for every broker; "
        "the cluster's own flags win over it",
    )
    up.set_defaults(func=_run_up)


def _add_port_options(up: argparse.ArgumentParser) -> None:
    """Where the members listen (the port layout of the module docstring)."""
    up.add_argument("--host", default="127.0.0.1", help="address every server listens on")
    up.add_argument("--namesrv-port", type=int, default=9876, help="default 9876")
    up.add_argument(
        "--broker-port",
        type=int,
        default=10911,
        help="port of the first broker; member k gets this + 2k and its "
        "replication port this + 2k + 1 (default 10911)",
    )
    up.add_argument(
        "--grpc-v2-port",
        dest="v2_port",
        type=int,
        default=8081,
        help="RocketMQ 5 gRPC port of the first broker (the proxy's 8081); member "
        "k gets this + k; -1 = off",
    )
    up.add_argument("--v2-port", dest="v2_port", type=int, help=argparse.SUPPRESS)


def _common() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    add_common_options(parser)
    return parser


async def _cluster_list(admin: AdminClient, args: argparse.Namespace) -> int:
    info = await admin.cluster_info()
    if not info.brokers:
        raise NotFoundError("no live broker is registered with the nameserver")

    async def runtime(addr: str) -> dict[str, str]:
        try:
            return await admin.broker_runtime_info(addr)
        except ClientError:
            return {}

    tables = await asyncio.gather(*(runtime(b.addr) for b in info.brokers))
    rows = [_broker_row(b, t) for b, t in zip(info.brokers, tables, strict=True)]
    _print_brokers(rows, as_json=args.json)
    unreachable = [r["addr"] for r in rows if not r["reachable"]]
    for addr in unreachable:
        print(f"broker {addr} did not answer", file=sys.stderr)
    return 1 if unreachable else 0


def _broker_row(b: Any, t: dict[str, str]) -> dict[str, Any]:
    """One live broker (*b*, from the cluster info) with its runtime figures *t*."""
    return {
        "cluster": b.cluster,
        "broker_name": b.broker_name,
        "broker_id": b.broker_id,
        "role": b.role,
        "broker_role": t.get("broker_role"),
        "addr": b.addr,
        "master_epoch": _int(t.get("master_epoch")),
        "replication_lag_bytes": _int(t.get("replication_lag_bytes")),
        "in_sync_replicas": _int(t.get("in_sync_replicas")),
        "version": t.get("version"),
        "put_tps": t.get("put_tps"),
        "get_tps": t.get("get_tps"),
        "reachable": bool(t),
        "controller_broker_id": _int(t.get("controller_broker_id")),
        "sync_state_set": t.get("sync_state_set"),
    }


def _print_brokers(rows: list[dict[str, Any]], *, as_json: bool) -> None:
    print(
        dump_json(rows)
        if as_json
        else render(
            [
                "CLUSTER",
                "BROKER",
                "ID",
                "ROLE",
                "ADDRESS",
                "EPOCH",
                "LAG BYTES",
                "IN SYNC",
                "VERSION",
                "PUT TPS",
                "GET TPS",
                "CONTROLLER ID",
                "IN-SYNC SET",
            ],
            [
                [
                    r["cluster"],
                    r["broker_name"],
                    r["broker_id"],
                    r["broker_role"] or r["role"],
                    r["addr"],
                    r["master_epoch"],
                    r["replication_lag_bytes"],
                    r["in_sync_replicas"],
                    r["version"],
                    r["put_tps"],
                    r["get_tps"],
                    r["controller_broker_id"],
                    r["sync_state_set"],
                ]
                for r in rows
            ],
        )
    )


def _int(text: str | None) -> int | None:
    """A runtime-info figure as a number; None where the broker does not report it."""
    try:
        return int(text) if text else None
    except ValueError:
        return None


@server_command
def _run_up(args: argparse.Namespace) -> int:
    if not 1 <= args.brokers <= 64:
        print(f"pocketmq cluster up: --brokers is {args.brokers}; give 1..64", file=sys.stderr)
        return 2
    if not 0 <= args.replicas <= 8:
        print(f"pocketmq cluster up: --replicas is {args.replicas}; give 0..8", file=sys.stderr)
        return 2
    members = args.brokers * (args.replicas + 1)
    ranges = [
        ("--namesrv-port", args.namesrv_port, 1),
        ("--broker-port", args.broker_port, PORTS_PER_MEMBER * members),
    ]
    if args.v2_port != -1:
        ranges.append(("--grpc-v2-port", args.v2_port, members))
    if args.dashboard_port != -1:
        ranges.append(("--dashboard-port", args.dashboard_port, 1))
    for flag, first, count in ranges:
        if first <= 0 or first + count > 65536:
            print(
                f"pocketmq cluster up: {flag} {first} leaves no room for {count} port(s) "
                "below 65536",
                file=sys.stderr,
            )
            return 2
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(LocalCluster(args).run())
