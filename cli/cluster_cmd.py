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
then to the nameserver, each given :data:`STOP_GRACE_S` before SIGKILL; the
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
import contextlib
import signal
import string
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from pocketmq.cli import loop_factory
from pocketmq.cli.admin_cmd import add_common_options, run_admin
from pocketmq.cli.table import dump_json, render
from pocketmq.client import AdminClient, ClientError
from pocketmq.client.errors import NotFoundError
from pocketmq.common.logsetup import server_command

__all__ = [
    "CLUSTER_NAME",
    "DEFAULT_DATA_DIR",
    "Member",
    "broker_command",
    "broker_name",
    "cluster_layout",
    "dashboard_command",
    "nameserver_command",
    "register",
]

CLUSTER_NAME = "DefaultCluster"
DEFAULT_DATA_DIR = "./pocketmq-cluster"
STARTUP_TIMEOUT_S = 60.0  # until every broker has registered
STOP_GRACE_S = 20.0  # per child, after SIGTERM, before SIGKILL
POLL_S = 0.2
LOG_TAIL_LINES = 15
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
    listing = actions.add_parser(
        "list",
        parents=[_common()],
        help="the cluster's brokers",
        description="Every live broker with its role, master epoch, "
        "replication lag (replicas) or replicas in sync "
        "(masters), version and put/get TPS.",
    )
    listing.set_defaults(func=lambda args: run_admin(_cluster_list, args))


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
    rows = [
        {
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
        for b, t in zip(info.brokers, tables, strict=True)
    ]
    print(
        dump_json(rows)
        if args.json
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
    unreachable = [r["addr"] for r in rows if not r["reachable"]]
    for addr in unreachable:
        print(f"broker {addr} did not answer", file=sys.stderr)
    return 1 if unreachable else 0


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


class _Child:
    """One server process and its log file."""

    def __init__(
        self,
        name: str,
        role: str,
        addr: str,
        command: Sequence[str],
        log_path: Path,
        member: Member | None = None,
    ) -> None:
        self.name, self.role, self.addr = name, role, addr
        self.member = member
        self.broker_id = member.broker_id if member is not None else None  # as registered
        self.fenced = ""  # why the nameserver refused this master, when it did
        self.command = list(command)
        self.log_path = log_path
        self.proc: asyncio.subprocess.Process | None = None
        self.exited: asyncio.Task[int] | None = None
        self._log: TextIO | None = None

    async def start(self) -> None:
        self._log = open(self.log_path, "a", encoding="utf-8")  # noqa: SIM115 - kept open
        self.proc = await asyncio.create_subprocess_exec(
            *POCKETMQ,
            *self.command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=self._log,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        self.exited = asyncio.get_running_loop().create_task(self.proc.wait())

    async def stop(self) -> int | None:
        """SIGTERM, wait up to STOP_GRACE_S, then SIGKILL; the exit code."""
        if self.proc is None or self.exited is None:
            return None
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(asyncio.shield(self.exited), STOP_GRACE_S)
            except TimeoutError:
                print(
                    f"{self.name} did not stop within {STOP_GRACE_S:.0f} s; killing it",
                    file=sys.stderr,
                )
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
        code = await self.exited
        if self._log is not None:
            self._log.close()
        return code

    def log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(f"    {line}" for line in lines[-LOG_TAIL_LINES:])


async def _listening(addr: str) -> bool:
    host, _, port = addr.rpartition(":")
    _, writer = await asyncio.open_connection(host.strip("[]"), int(port))
    writer.close()
    return True


def _controller_has_masters(path: Path, names: set[str]) -> bool:
    """Whether the controller's state file names a master for every broker name in *names*."""
    import json

    try:
        groups = json.loads(path.read_text(encoding="utf-8")).get("groups", {})
    except (OSError, ValueError):
        return False
    return all(groups.get(n, {}).get("state", {}).get("master_id", 0) for n in names)


def _die_with_parent() -> None:
    """In the child: receive SIGTERM when the parent dies (Linux), not to outlive it."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGTERM)


class LocalCluster:
    """The processes of ``cluster up``, started in order and stopped in reverse."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.data_dir = Path(args.data_dir).resolve()
        self.namesrv = f"{args.host}:{args.namesrv_port}"
        logs = self.data_dir / "logs"
        use_controller = args.replicas > 0 if args.controller is None else args.controller
        # The controller's state file: `cluster up` reads it (no gRPC before forking).
        self.controller_file = (
            self.data_dir / "controller" / "controller.json" if use_controller else None
        )
        self.nameserver = _Child(
            "nameserver",
            "nameserver",
            self.namesrv,
            nameserver_command(
                port=args.namesrv_port,
                host=args.host,
                controller_dir=str(self.data_dir / "controller") if use_controller else None,
            ),
            logs / "nameserver.log",
        )
        config_file = str(Path(args.config).resolve()) if args.config else None
        layout = cluster_layout(
            args.brokers,
            args.replicas,
            broker_port=args.broker_port,
            v2_port=args.v2_port,
            master_role=args.master_role,
        )
        self.brokers = [
            _Child(
                m.label,
                m.role,
                f"{args.host}:{m.port}",
                broker_command(
                    m.index,
                    broker_id=m.broker_id,
                    role=layout[0].role if use_controller else m.role,
                    port=m.port,
                    ha_port=m.ha_port,
                    v2_port=m.v2_port,
                    namesrv=self.namesrv,
                    data_dir=str(self.data_dir / m.label),
                    host=args.host,
                    config_file=config_file,
                    controller=self.namesrv if use_controller else None,
                ),
                logs / f"{m.label}.log",
                member=m,
            )
            for m in layout
        ]
        self.dashboard = (
            _Child(
                "dashboard",
                "dashboard",
                f"{args.host}:{args.dashboard_port}",
                dashboard_command(namesrv=self.namesrv, host=args.host, port=args.dashboard_port),
                logs / "dashboard.log",
            )
            if args.dashboard_port != -1
            else None
        )
        self._stop = asyncio.Event()

    @property
    def children(self) -> list[_Child]:
        return [self.nameserver, *self.brokers, *([self.dashboard] if self.dashboard else [])]

    async def run(self) -> int:
        (self.data_dir / "logs").mkdir(parents=True, exist_ok=True)
        loop = asyncio.get_running_loop()
        signals = (signal.SIGINT, signal.SIGTERM)
        for sig in signals:
            loop.add_signal_handler(sig, self._stop.set)
        try:
            failed = await self._start_all()
            if failed is None and not self._stop.is_set():
                self._print_up()
                failed = await self._watch()
            return await self._stop_all(failed)
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)

    async def _start_all(self) -> _Child | None:
        """Start the nameserver, the masters, then the replicas; the child that died, if
        one did.

        The replicas start once every master listens on its ha port (its store is open
        and it registers next): a replica learns its master's ha address from its
        registrations, and one registering before its master would wait for its next
        round (30 s) to start copying. Every child is started before this process opens
        a gRPC channel (the checks until then are bare TCP connects): forking while
        gRPC runs threads is what gRPC warns against.
        """
        await self.nameserver.start()
        if (died := await self._until(lambda: _listening(self.namesrv))) is not None:
            return died
        masters = [b for b in self.brokers if b.member is None or b.member.broker_id == 0]
        replicas = [b for b in self.brokers if b not in masters]
        for broker in masters:
            await broker.start()
        if replicas:
            ha_addrs = [
                f"{b.addr.rpartition(':')[0]}:{b.member.ha_port}"
                for b in masters
                if b.member is not None
            ]
            names = {b.member.broker_name for b in masters if b.member is not None}

            async def masters_up() -> bool:
                if self.controller_file is not None:
                    # The first broker of a name to heartbeat becomes its master: start the
                    # replicas once the controller holds one for every name.
                    return _controller_has_masters(self.controller_file, names)
                return all([await _listening(addr) for addr in ha_addrs])

            if (died := await self._until(masters_up)) is not None or self._stop.is_set():
                return died
        for broker in replicas:
            await broker.start()
        if self.dashboard is not None:  # before any gRPC channel here, as the brokers
            await self.dashboard.start()
        async with AdminClient(self.namesrv, timeout_s=1.0) as admin:

            async def registered() -> bool:
                """Every broker registered under its name (a promoted replica as id 0), or
                fenced: an old master the nameserver refuses after a promotion."""
                info = await admin.cluster_info()
                live = {(b.broker_name, b.addr) for b in info.brokers if b.cluster == CLUSTER_NAME}
                for child in self.brokers:
                    if child.member is None or (child.member.broker_name, child.addr) in live:
                        continue
                    child.fenced = (await admin.broker_runtime_info(child.addr)).get("fenced", "")
                    if not child.fenced:
                        return False
                return True

            died = await self._until(registered)
            if died is None:
                await self._learn_roles(admin)
            return died

    async def _learn_roles(self, admin: AdminClient) -> None:
        """Each broker's role and id as it runs: a promotion outlives the command line."""
        deadline = asyncio.get_running_loop().time() + STARTUP_TIMEOUT_S
        for child in self.brokers:
            while True:  # a loaded machine may miss a call's 1 s timeout: ask again
                try:
                    table = await admin.broker_runtime_info(child.addr)
                except ClientError:
                    if asyncio.get_running_loop().time() > deadline:
                        break
                    await asyncio.sleep(POLL_S)
                    continue
                with contextlib.suppress(ValueError):
                    child.role = table.get("broker_role", child.role)
                    child.broker_id = int(table.get("broker_id", child.broker_id))
                break

    async def _until(self, ready: Callable[[], Awaitable[bool]]) -> _Child | None:
        """Poll *ready* until it holds; the child that exited meanwhile, if one did."""
        deadline = asyncio.get_running_loop().time() + STARTUP_TIMEOUT_S
        while not self._stop.is_set():
            for child in self.children:
                if child.exited is not None and child.exited.done():
                    return child
            with contextlib.suppress(ClientError, OSError):
                if await ready():
                    return None
            if asyncio.get_running_loop().time() > deadline:
                print(
                    f"pocketmq cluster up: the cluster did not come up within "
                    f"{STARTUP_TIMEOUT_S:.0f} s; see the logs in {self.data_dir / 'logs'}",
                    file=sys.stderr,
                )
                self._stop.set()
                return self.nameserver
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), POLL_S)
        return None

    def _print_up(self) -> None:
        rows = [
            [
                f"{c.role} (fenced)" if c.fenced else c.role,
                c.member.broker_name if c.member else None,
                c.broker_id,
                c.addr,
                c.proc.pid if c.proc else None,
                c.log_path,
            ]
            for c in self.children
        ]
        fenced = "".join(
            f"\n{c.name} at {c.addr} takes no writes: {c.fenced}" for c in self.brokers if c.fenced
        )
        dashboard = f"dashboard: http://{self.dashboard.addr}/\n" if self.dashboard else ""
        print(
            f"PocketMQ cluster {CLUSTER_NAME} is up, data in {self.data_dir}:\n"
            f"{render(['ROLE', 'NAME', 'ID', 'ADDRESS', 'PID', 'LOG'], rows)}\n{fenced}\n"
            f"export POCKETMQ_NAMESRV={self.namesrv}\n{dashboard}"
            "Ctrl-C stops the cluster.",
            flush=True,
        )

    async def _watch(self) -> _Child | None:
        """Until a stop is asked for (None) or a child exits on its own (that child)."""
        stop = asyncio.ensure_future(self._stop.wait())
        exits = {c.exited: c for c in self.children if c.exited is not None}
        try:
            done, _ = await asyncio.wait([stop, *exits], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        return next((exits[t] for t in done if t in exits), None)

    async def _stop_all(self, failed: _Child | None) -> int:
        if failed is not None and failed.exited is not None and failed.exited.done():
            print(
                f"pocketmq cluster up: {failed.name} exited with code "
                f"{failed.exited.result()}; the end of {failed.log_path}:\n"
                f"{failed.log_tail()}",
                file=sys.stderr,
                flush=True,
            )
        if self.dashboard is not None and self.dashboard.proc is not None:
            await self.dashboard.stop()  # first: it only watches the others
        brokers = [b for b in self.brokers if b.proc is not None]
        print(
            f"stopping {', '.join([*(b.name for b in brokers), 'then the nameserver'])}", flush=True
        )
        codes = dict(
            zip(
                (b.name for b in brokers),
                await asyncio.gather(*(b.stop() for b in brokers)),
                strict=True,
            )
        )
        codes[self.nameserver.name] = await self.nameserver.stop()
        for name, code in codes.items():
            if code is not None:
                print(f"{name} exited with code {code}", flush=True)
        clean = failed is None and all(code in (0, None) for code in codes.values())
        return 0 if clean else 1
