"""``pocketmq cluster up``'s processes: :class:`LocalCluster` starts the nameserver
and every broker as children in sessions of their own, waits until every broker
has registered, prints the members, watches them, and stops them in order
(brokers, then the nameserver; SIGTERM, then SIGKILL after :data:`STOP_GRACE_S`).
:mod:`.cluster_cmd` says what the command does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TextIO

from pocketmq.cli.cluster_layout import (
    CLUSTER_NAME,
    POCKETMQ,
    Member,
    broker_command,
    cluster_layout,
    dashboard_command,
    nameserver_command,
)
from pocketmq.cli.table import render
from pocketmq.client import AdminClient, ClientError

__all__ = ["STARTUP_TIMEOUT_S", "STOP_GRACE_S", "LocalCluster"]

STARTUP_TIMEOUT_S = 60.0  # until every broker has registered
STOP_GRACE_S = 20.0  # per child, after SIGTERM, before SIGKILL
POLL_S = 0.2
LOG_TAIL_LINES = 15


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
        self.brokers = self._broker_children(args, logs, use_controller=use_controller)
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

    def _broker_children(
        self, args: argparse.Namespace, logs: Path, *, use_controller: bool
    ) -> list[_Child]:
        """One child per member of the layout (in controller mode every broker starts
        in the masters' role and the controller names who is master)."""
        config_file = str(Path(args.config).resolve()) if args.config else None
        layout = cluster_layout(
            args.brokers,
            args.replicas,
            broker_port=args.broker_port,
            v2_port=args.v2_port,
            master_role=args.master_role,
        )
        return [
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
            if died is None and self.dashboard is not None:
                # the banner names the dashboard's address: it answers there once printed
                dashboard_addr = self.dashboard.addr
                died = await self._until(lambda: _listening(dashboard_addr))
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
