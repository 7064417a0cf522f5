"""What the benchmarks share: the machine line, free ports, a ``pocketmq standalone``
to measure against, and records of 1 KiB bodies to send it.

Not a test helper: imported by the scripts in this folder (run as scripts, so
this folder is on ``sys.path``).
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

from pocketmq.common.message import encode_record, pack_host

__all__ = [
    "BODY",
    "Standalone",
    "free_port",
    "machine",
    "process_cpu_s",
    "records",
    "standalone",
    "wait_port",
]

BODY = os.urandom(1024)  # every benchmark record's body


def records(n: int, topic: str = "bench", queues: int = 8, start: int = 0) -> list[bytes]:
    """*n* records of :data:`BODY`, round-robin over *queues*, UNIQ_KEY numbered from *start*."""
    host = pack_host(("127.0.0.1", 1))
    return [
        encode_record(
            topic=topic,
            body=BODY,
            queue_id=(start + i) % queues,
            born_host=host,
            properties={"UNIQ_KEY": f"{start + i:032X}"},
        )
        for i in range(n)
    ]


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process *pid* so far, every thread (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine() -> str:
    """The line every benchmark prints first, e.g. ``host · 2 cpu (AMD EPYC 7B13) · x86_64 ·
    Linux 6.1.0 · Python 3.11.7 · grpcio 1.66.1``; a part it cannot read is left out."""
    model = _cpu_model()
    parts = [
        platform.node(),
        f"{os.cpu_count()} cpu" + (f" ({model})" if model else ""),
        platform.machine(),
        f"{platform.system()} {platform.release()}",
        f"Python {platform.python_version()}",
    ]
    try:
        import grpc
    except ImportError:
        pass
    else:
        parts.append(f"grpcio {grpc.__version__}")
    return " · ".join(part for part in parts if part.strip())


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), ""
            )
    except OSError:
        return ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {timeout_s} s")


@dataclass(frozen=True)
class Standalone:
    namesrv: str  # "127.0.0.1:port"
    broker_port: int
    data_dir: str
    pid: int  # the server process, whose CPU time a benchmark may report


@contextlib.contextmanager
def standalone(prefix: str, *, broker_toml: str = "") -> Iterator[Standalone]:
    """A nameserver and a broker (one process, RocketMQ 5 port off) in a temporary
    directory, given the broker keys of *broker_toml*; stopped and removed after."""
    data_dir = tempfile.mkdtemp(prefix=prefix)
    config = []
    if broker_toml:
        path = os.path.join(data_dir, "broker.toml")
        with open(path, "w") as f:
            f.write(broker_toml)
        config = ["--config", path]
    namesrv_port, broker_port = free_port(), free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pocketmq",
            "--log-level",
            "WARNING",
            "standalone",
            "--data-dir",
            data_dir,
            "--namesrv-port",
            str(namesrv_port),
            "--broker-port",
            str(broker_port),
            "--grpc-v2-port",
            "-1",
            *config,
        ]
    )
    try:
        wait_port(broker_port)
        yield Standalone(f"127.0.0.1:{namesrv_port}", broker_port, data_dir, server.pid)
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(data_dir, ignore_errors=True)
