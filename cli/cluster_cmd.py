"""``pocketmq cluster up`` and ``pocketmq cluster list``.

``cluster up [--brokers 2] [--data-dir DIR] [--namesrv-port 9876] [--broker-port 10911]
[--config FILE]``
runs one nameserver and N brokers (``broker-a``, ``broker-b``, ...; broker i
on ``--broker-port`` + i, data in ``DIR/broker-x``) as child processes, each
the very ``pocketmq nameserver`` / ``pocketmq broker ...`` command that
``docker-compose.yml`` runs: :func:`nameserver_command` and
:func:`broker_command` are the one definition of both, and
``tests/unit/test_docker_compose.py`` holds the compose file to them. Each
child writes its log to ``DIR/logs/{name}.log``. Once every broker has
registered with the nameserver the addresses are printed::

    ROLE        NAME      ADDRESS          PID    LOG
    nameserver  -         127.0.0.1:9876   4242   pocketmq-cluster/logs/nameserver.log
    broker      broker-a  127.0.0.1:10911  4243   pocketmq-cluster/logs/broker-a.log

Ctrl-C (SIGINT) or SIGTERM stops the cluster gracefully: SIGTERM to the
brokers (they flush, write their checkpoint, remove ``abort`` and unregister),
then to the nameserver, each given :data:`STOP_GRACE_S` before SIGKILL; the
exit code of each is printed. A child that dies on its own is reported with
the end of its log, and the rest are stopped. The children run in sessions of
their own so that a terminal's Ctrl-C reaches only this process, which stops
them in that order; on Linux they also get SIGTERM should this process die.

``cluster list`` prints every live broker: cluster, name, id, role, address,
version, put and get TPS (``-`` where the broker does not report one).
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
from pathlib import Path
from typing import Any, TextIO

from pocketmq.cli import loop_factory
from pocketmq.cli.admin_cmd import add_common_options, run_admin
from pocketmq.cli.table import dump_json, render
from pocketmq.client import AdminClient, ClientError

__all__ = [
    "CLUSTER_NAME",
    "DEFAULT_DATA_DIR",
    "broker_command",
    "broker_name",
    "nameserver_command",
    "register",
]

CLUSTER_NAME = "DefaultCluster"
DEFAULT_DATA_DIR = "./pocketmq-cluster"
STARTUP_TIMEOUT_S = 60.0   # until every broker has registered
STOP_GRACE_S = 20.0        # per child, after SIGTERM, before SIGKILL
POLL_S = 0.2
LOG_TAIL_LINES = 15
POCKETMQ = (sys.executable, "-m", "pocketmq")   # the `pocketmq` command of this install


# -- the topology: one definition for `cluster up` and docker-compose.yml --------------------
def broker_name(index: int) -> str:
    """``broker-a``, ``broker-b``, ... ``broker-z``, then ``broker-26``, ..."""
    return f"broker-{string.ascii_lowercase[index] if index < 26 else index}"


def nameserver_command(*, port: int, host: str) -> list[str]:
    return ["nameserver", "--host", host, "--port", str(port)]


def broker_command(index: int, *, port: int, v2_port: int, namesrv: str, data_dir: str,
                   host: str, broker_ip: str | None = None,
                   acl_file: str | None = None, config_file: str | None = None) -> list[str]:
    """Broker *index* of the cluster; *broker_ip* when *host* listens on every interface.

    *v2_port* serves RocketMQ 5 clients (-1 = off); each broker on a host needs its own.
    *config_file*: a TOML of broker keys for every broker; the flags here win over it.
    """
    command = ["broker", "--cluster", CLUSTER_NAME, "--name", broker_name(index),
               "--host", host, "--port", str(port), "--grpc-v2-port", str(v2_port),
               "--namesrv", namesrv, "--data-dir", data_dir]
    if config_file:
        command += ["--config", config_file]
    if broker_ip:
        command += ["--broker-ip", broker_ip]
    return [*command, "--acl-enable", "--acl-file", acl_file] if acl_file else command


# -- commands --------------------------------------------------------------------------------
def register(subparsers: Any) -> None:
    cluster = subparsers.add_parser("cluster", help="run or list a cluster",
                                    description="Run a local cluster, or list a cluster's "
                                                "brokers.")
    actions = cluster.add_subparsers(dest="cluster_action", metavar="ACTION", required=True)
    up = actions.add_parser(
        "up", help="one nameserver and N brokers as local processes",
        description="Run one nameserver and N brokers as child processes (the commands "
                    "docker-compose.yml runs) until Ctrl-C.")
    up.add_argument("--brokers", type=int, default=2, help="how many brokers (default 2)")
    up.add_argument("--data-dir", default=DEFAULT_DATA_DIR,
                    help=f"brokers' data and the logs (default {DEFAULT_DATA_DIR})")
    up.add_argument("--host", default="127.0.0.1", help="address every server listens on")
    up.add_argument("--namesrv-port", type=int, default=9876, help="default 9876")
    up.add_argument("--broker-port", type=int, default=10911,
                    help="port of the first broker; broker i gets this + i (default 10911)")
    up.add_argument("--v2-port", type=int, default=8081,
                    help="RocketMQ 5 gRPC port of the first broker (the proxy's 8081); broker "
                         "i gets this + i; -1 = off")
    up.add_argument("--config", metavar="FILE", default=None,
                    help="TOML file of broker keys (docs/configuration.md) for every broker; "
                         "the cluster's own flags win over it")
    up.set_defaults(func=_run_up)
    listing = actions.add_parser("list", parents=[_common()], help="the cluster's brokers",
                                 description="Every live broker with its role, version "
                                             "and put/get TPS.")
    listing.set_defaults(func=lambda args: run_admin(_cluster_list, args))


def _common() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    add_common_options(parser)
    return parser


async def _cluster_list(admin: AdminClient, args: argparse.Namespace) -> int:
    info = await admin.cluster_info()

    async def runtime(addr: str) -> dict[str, str]:
        try:
            return await admin.broker_runtime_info(addr)
        except ClientError:
            return {}

    tables = await asyncio.gather(*(runtime(b.addr) for b in info.brokers))
    rows = [{"cluster": b.cluster, "broker_name": b.broker_name, "broker_id": b.broker_id,
             "role": b.role, "addr": b.addr, "version": t.get("version"),
             "put_tps": t.get("put_tps"), "get_tps": t.get("get_tps"), "reachable": bool(t)}
            for b, t in zip(info.brokers, tables, strict=True)]
    keys = ("cluster", "broker_name", "broker_id", "role", "addr", "version", "put_tps",
            "get_tps")
    print(dump_json(rows) if args.json else render(
        ["CLUSTER", "BROKER", "ID", "ROLE", "ADDRESS", "VERSION", "PUT TPS", "GET TPS"],
        [[r[k] for k in keys] for r in rows]))
    return 0


def _run_up(args: argparse.Namespace) -> int:
    if not 1 <= args.brokers <= 64:
        print(f"pocketmq cluster up: --brokers is {args.brokers}; give 1..64", file=sys.stderr)
        return 2
    ranges = [("--namesrv-port", args.namesrv_port, 1), ("--broker-port", args.broker_port,
                                                          args.brokers)]
    if args.v2_port != -1:
        ranges.append(("--v2-port", args.v2_port, args.brokers))
    for flag, first, count in ranges:
        if first <= 0 or first + count > 65536:
            print(f"pocketmq cluster up: {flag} {first} leaves no room for {count} port(s) "
                  "below 65536", file=sys.stderr)
            return 2
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(LocalCluster(args).run())


class _Child:
    """One server process and its log file."""

    def __init__(self, name: str, role: str, addr: str, command: Sequence[str],
                 log_path: Path) -> None:
        self.name, self.role, self.addr = name, role, addr
        self.command = list(command)
        self.log_path = log_path
        self.proc: asyncio.subprocess.Process | None = None
        self.exited: asyncio.Task[int] | None = None
        self._log: TextIO | None = None

    async def start(self) -> None:
        self._log = open(self.log_path, "a", encoding="utf-8")  # noqa: SIM115 - kept open
        self.proc = await asyncio.create_subprocess_exec(
            *POCKETMQ, *self.command, stdin=asyncio.subprocess.DEVNULL, stdout=self._log,
            stderr=asyncio.subprocess.STDOUT, start_new_session=True,
            preexec_fn=_die_with_parent)
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
                print(f"{self.name} did not stop within {STOP_GRACE_S:.0f} s; killing it",
                      file=sys.stderr)
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
        self.nameserver = _Child("nameserver", "nameserver", self.namesrv,
                                 nameserver_command(port=args.namesrv_port, host=args.host),
                                 logs / "nameserver.log")
        self.brokers = [
            _Child(broker_name(i), "broker", f"{args.host}:{args.broker_port + i}",
                   broker_command(i, port=args.broker_port + i, namesrv=self.namesrv,
                                  v2_port=-1 if args.v2_port == -1 else args.v2_port + i,
                                  data_dir=str(self.data_dir / broker_name(i)), host=args.host,
                                  config_file=str(Path(args.config).resolve()) if args.config
                                  else None),
                   logs / f"{broker_name(i)}.log")
            for i in range(args.brokers)]
        self._stop = asyncio.Event()

    @property
    def children(self) -> list[_Child]:
        return [self.nameserver, *self.brokers]

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
        """Start the nameserver, then the brokers; the child that died, if one did.

        Every child is started before this process opens a gRPC channel: forking
        while gRPC runs threads is what gRPC warns against.
        """
        await self.nameserver.start()
        if (died := await self._until(lambda: _listening(self.namesrv))) is not None:
            return died
        for broker in self.brokers:
            await broker.start()
        wanted = {b.name: b.addr for b in self.brokers}
        async with AdminClient(self.namesrv, timeout_s=1.0) as admin:

            async def registered() -> bool:
                info = await admin.cluster_info()
                return wanted.items() <= info.masters(CLUSTER_NAME).items()

            return await self._until(registered)

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
                print(f"pocketmq cluster up: the cluster did not come up within "
                      f"{STARTUP_TIMEOUT_S:.0f} s; see the logs in {self.data_dir / 'logs'}",
                      file=sys.stderr)
                self._stop.set()
                return self.nameserver
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), POLL_S)
        return None

    def _print_up(self) -> None:
        rows = [[c.role, c.name if c.role == "broker" else None, c.addr,
                 c.proc.pid if c.proc else None, c.log_path] for c in self.children]
        print(f"PocketMQ cluster {CLUSTER_NAME} is up, data in {self.data_dir}:\n"
              f"{render(['ROLE', 'NAME', 'ADDRESS', 'PID', 'LOG'], rows)}\n\n"
              f"export POCKETMQ_NAMESRV={self.namesrv}\n"
              "Ctrl-C stops the cluster.", flush=True)

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
            print(f"pocketmq cluster up: {failed.name} exited with code "
                  f"{failed.exited.result()}; the end of {failed.log_path}:\n"
                  f"{failed.log_tail()}", file=sys.stderr, flush=True)
        brokers = [b for b in self.brokers if b.proc is not None]
        print(f"stopping {', '.join([*(b.name for b in brokers), 'then the nameserver'])}",
              flush=True)
        codes = dict(zip((b.name for b in brokers),
                         await asyncio.gather(*(b.stop() for b in brokers)), strict=True))
        codes[self.nameserver.name] = await self.nameserver.stop()
        for name, code in codes.items():
            if code is not None:
                print(f"{name} exited with code {code}", flush=True)
        clean = failed is None and all(code in (0, None) for code in codes.values())
        return 0 if clean else 1

