"""Brokers and nameservers as real processes (``python -m pocketmq ...``), for fault tests.

``ProcessKit`` starts them on port 0 (or a port given, to restart in place),
learns each one's address from its log, and owns them: ``close()`` kills
whatever a test left running. Signals go to one process by its PID.

    kit = ProcessKit(tmp_path)
    ns = await kit.nameserver()
    broker = await kit.broker("broker-a", namesrv=ns.addr, flush_disk_type="sync")
    broker.signal(signal.SIGKILL); await broker.wait()

With ``POCKETMQ_TEST_ACL=1`` (``aclmode``) every server starts with its ACL on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aclmode
from waitkit import eventually

MiB = 1024 * 1024

# Small files and fast registration, so that a broker starts and rejoins quickly.
SMALL_BROKER: dict[str, Any] = dict(
    commitlog_file_size_bytes=16 * MiB,
    max_message_size_bytes=MiB,
    max_batch_size_bytes=4 * MiB,
    index_slots=1024,
    index_entries=4096,
    consume_queue_units_per_file=10_000,
    register_interval_seconds=1,
    default_topic_queue_nums=4,
)

_BROKER_SERVING = re.compile(rb"serving on (\S+),")
_NAMESRV_LISTENING = re.compile(rb"nameserver listening on (\S+) ")


def free_port() -> int:
    """A port free now (to restart a server on the same address)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_port_run(count: int) -> int:
    """The first of *count* consecutive ports that are free now."""
    return free_port_with(lambda first: range(first, first + count))


def free_port_with(ports: Callable[[int], Iterable[int]], attempts: int = 100) -> int:
    """A port *p* such that every port of ``ports(p)`` (p itself among them) is free now."""
    for _ in range(attempts):
        wanted = list(ports(free_port()))
        if max(wanted) > 65535:
            continue
        held = []
        try:
            for port in wanted:
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", port))
            return wanted[0]
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
    raise RuntimeError(f"no free ports like {list(ports(10_000))} found")


def config_flags(options: dict[str, Any]) -> list[str]:
    """``{"flush_disk_type": "sync", "x_enable": False}`` -> ``["--flush-disk-type", "sync",
    "--no-x-enable"]``."""
    flags: list[str] = []
    for key, value in options.items():
        flag = key.replace("_", "-")
        if isinstance(value, bool):
            flags.append(f"--{flag}" if value else f"--no-{flag}")
        else:
            flags += [f"--{flag}", str(value)]
    return flags


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc (Linux)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"process {pid} reports no VmRSS")


@dataclass
class ServerProcess:
    name: str
    proc: asyncio.subprocess.Process
    log_path: Path
    addr: str = ""

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc.returncode is None

    def signal(self, sig: signal.Signals) -> None:
        if self.running:
            with contextlib.suppress(ProcessLookupError):  # dead, not reaped yet
                os.kill(self.pid, sig)

    def rss_bytes(self) -> int:
        return rss_bytes(self.pid)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def kill(self) -> None:
        """SIGKILL (it ends a stopped process too) and reap."""
        self.signal(signal.SIGKILL)
        await self.proc.wait()

    async def stop(self, timeout_s: float = 20.0) -> int:
        """SIGTERM (graceful) and wait; SIGKILL after *timeout_s*. Returns the exit code."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout_s)
        except TimeoutError:
            await self.kill()
            raise AssertionError(
                f"{self.name} did not stop within {timeout_s} s on SIGTERM; "
                f"log:\n{self.log_text()[-3000:]}"
            ) from None


class ProcessKit:
    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self.started: list[ServerProcess] = []

    async def _spawn(
        self, name: str, args: list[str], ready: re.Pattern[bytes], timeout_s: float
    ) -> ServerProcess:
        log_path = self.work_dir / f"{name}.{len(self.started)}.log"
        with open(log_path, "wb") as log:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "pocketmq",
                *args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        server = ServerProcess(name, proc, log_path)
        self.started.append(server)
        deadline = time.monotonic() + timeout_s
        while True:
            match = ready.search(log_path.read_bytes())
            if match:
                server.addr = match.group(1).decode()
                return server
            if not server.running or time.monotonic() > deadline:
                await server.kill()
                raise AssertionError(
                    f"{name} did not come up within {timeout_s} s (exit "
                    f"{proc.returncode}); log:\n{server.log_text()[-3000:]}"
                )
            await asyncio.sleep(0.05)

    async def nameserver(
        self, *, port: int = 0, timeout_s: float = 30.0, **options: Any
    ) -> ServerProcess:
        options = {**aclmode.server_options(self.work_dir), **options}
        return await self._spawn(
            "nameserver",
            ["nameserver", "--host", "127.0.0.1", "--port", str(port), *config_flags(options)],
            _NAMESRV_LISTENING,
            timeout_s,
        )

    async def broker(
        self,
        name: str = "broker-a",
        *,
        namesrv: str = "",
        port: int = 0,
        data_dir: Path | None = None,
        timeout_s: float = 30.0,
        **options: Any,
    ) -> ServerProcess:
        """A broker with SMALL_BROKER settings; *options* are BrokerConfig keys."""
        data_dir = data_dir or self.work_dir / name
        # ha_port and grpc_v2_port 0: any free port. Left to derive from a fixed --port
        # (port + 1; 8081 shifted as the port is), either may be a port another process
        # holds (a client's ephemeral port, say), and the broker refuses to start: a
        # restart on its old --port failed so. A test that needs one names it.
        settings = {
            **SMALL_BROKER,
            **aclmode.broker_options(self.work_dir),
            "ha_port": 0,
            "grpc_v2_port": 0,
            "broker_name": name,
            "port": port,
            "data_dir": str(data_dir),
            **options,
        }
        if namesrv:
            settings["namesrv_addrs"] = namesrv
        return await self._spawn(
            name, ["broker", *config_flags(settings)], _BROKER_SERVING, timeout_s
        )

    async def close(self) -> None:
        for server in self.started:
            if server.running:
                await server.kill()


async def broker_process(
    config: Any, log_path: Path, *, timeout_s: float = 30.0, **options: Any
) -> tuple[asyncio.subprocess.Process, str]:
    """``python -m pocketmq broker`` on port 0 with *config*'s data directory and store
    sizes and *options* as flags, its log in *log_path*, once it serves: the process (the
    caller kills it) and its address. For a test that SIGKILLs a broker it configured;
    :meth:`ProcessKit.broker` is the usual way."""
    store = (
        "data_dir",
        "commitlog_file_size_bytes",
        "index_slots",
        "index_entries",
        "consume_queue_units_per_file",
    )
    flags = config_flags({"port": 0, **{key: getattr(config, key) for key in store}, **options})
    with open(log_path, "wb") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "pocketmq",
            "broker",
            *flags,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=log,
        )
    try:
        match = await eventually(
            lambda: _BROKER_SERVING.search(log_path.read_bytes()),
            timeout_s=timeout_s,
            what="the broker process serving",
        )
    except BaseException:
        proc.kill()
        await proc.wait()
        raise
    return proc, match.group(1).decode()


async def store_verify(data_dir: Path) -> tuple[int, str]:
    """``pocketmq store verify DIR``: (exit code, output)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pocketmq",
        "store",
        "verify",
        str(data_dir),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:  # a GiB store takes seconds on a quiet machine; minutes on a loaded one
        out, _ = await asyncio.wait_for(proc.communicate(), 240)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"store verify {data_dir} still running after 240 s") from None
    return proc.returncode or 0, out.decode(errors="replace")
