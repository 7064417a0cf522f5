"""For tests/dashboard: a real cluster (nameserver + broker in-process, port 0) with a
dashboard on port 0.

:func:`started_cluster` starts them on the calling event loop (the API tests);
``ThreadedCluster`` runs the same on an event loop of its own thread, for the
browser tests, whose Selenium calls block. ``Web`` is a small HTTP client that
keeps the session cookie, as a browser does.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from loopkit import LoopThread

from pocketmq.broker.broker import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.dashboard import Dashboard, DashboardConfig
from pocketmq.nameserver import NameServer, NamesrvConfig

T = TypeVar("T")
MiB = 1024 * 1024

ADMIN_KEYS = ("dash-admin", "dash-admin-secret")
READER_KEYS = ("dash-reader", "dash-reader-secret")
ACL = f"""
[[accounts]]
access_key = "{ADMIN_KEYS[0]}"
secret_key = "{ADMIN_KEYS[1]}"
admin = true

[[accounts]]
access_key = "{READER_KEYS[0]}"
secret_key = "{READER_KEYS[1]}"
default_topic_perm = "PUB|SUB"
default_group_perm = "PUB|SUB"
"""


@dataclass
class DashCluster:
    namesrv: NameServer
    broker: Broker
    dashboard: Dashboard

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.address

    @property
    def url(self) -> str:
        return self.dashboard.url


@asynccontextmanager
async def started_cluster(
    data_dir: Path, *, acl: bool = False, interval_s: float = 0.3, metrics_port: int = -1
) -> AsyncIterator[DashCluster]:
    """Nameserver, broker and dashboard; with *acl*, the ACL on everywhere and the
    dashboard sampling with the admin's keys."""
    acl_options: dict[str, Any] = {}
    if acl:
        path = data_dir / "acl.toml"
        data_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(ACL)
        acl_options = {"acl_enable": True, "acl_file": str(path)}
    namesrv = NameServer(NamesrvConfig(host="127.0.0.1", port=0, **acl_options))
    await namesrv.start()
    broker = Broker(
        BrokerConfig(
            broker_name="broker-a",
            port=0,
            data_dir=str(data_dir / "broker-a"),
            namesrv_addrs=namesrv.address,
            commitlog_file_size_bytes=16 * MiB,
            index_slots=1024,
            index_entries=4096,
            default_topic_queue_nums=4,
            consume_queue_units_per_file=10_000,
            grpc_v2_port=-1,
            metrics_port=metrics_port,
            **(
                {**acl_options, "access_key": ADMIN_KEYS[0], "secret_key": ADMIN_KEYS[1]}
                if acl
                else {}
            ),
        )
    )
    dashboard = None
    try:
        await broker.start()
        keys = dict(access_key=ADMIN_KEYS[0], secret_key=ADMIN_KEYS[1]) if acl else {}
        dashboard = Dashboard(
            DashboardConfig(namesrv=namesrv.address, port=0, interval_s=interval_s, **keys)
        )
        await dashboard.start()
        yield DashCluster(namesrv, broker, dashboard)
    finally:
        if dashboard is not None:
            await dashboard.stop()
        await broker.stop(0)
        await namesrv.stop(0)


class Web:
    """HTTP/1.1 to the dashboard, keeping its session cookie (one request per connection)."""

    def __init__(self, url: str) -> None:
        host, _, port = url.removeprefix("http://").rpartition(":")
        self.host, self.port = host, int(port)
        self.cookie = ""
        self.last_headers: dict[str, str] = {}

    async def raw(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        head = [
            f"{method} {path} HTTP/1.1",
            f"Host: {self.host}:{self.port}",
            f"Content-Length: {len(body)}",
        ]
        if self.cookie:
            head.append(f"Cookie: {self.cookie}")
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        await writer.drain()
        data = await reader.read()
        writer.close()
        head_bytes, _, payload = data.partition(b"\r\n\r\n")
        lines = head_bytes.decode("latin-1").split("\r\n")
        self.last_headers = {
            k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])
        }
        cookie = self.last_headers.get("set-cookie", "")
        if cookie:
            self.cookie = cookie.split(";", 1)[0]
        return int(lines[0].split(" ")[1]), payload

    async def get(self, path: str) -> tuple[int, Any]:
        status, payload = await self.raw("GET", path)
        return status, json.loads(payload)

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        status, payload = await self.raw(
            "POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        return status, json.loads(payload)


class ThreadedCluster:
    """:func:`started_cluster` on an event loop in a thread of its own; ``run(coro)``
    runs a coroutine there (the cluster's objects belong to that loop)."""

    def __init__(self, data_dir: Path, **options: Any) -> None:
        self._data_dir = data_dir
        self._options = options
        self._thread: LoopThread | None = None
        self._context: Any = None
        self.cluster: DashCluster | None = None
        #: the keys a test signs its own calls with (the admin's with the ACL on)
        self.keys = ADMIN_KEYS if options.get("acl") else ("", "")

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T:
        assert self._thread is not None, "start() first"
        return self._thread.run(coro, timeout_s)

    def start(self) -> DashCluster:
        self._thread = LoopThread("dash-cluster")
        self._context = started_cluster(self._data_dir, **self._options)
        self.cluster = self.run(self._context.__aenter__())
        return self.cluster

    def stop(self) -> None:
        try:
            if self._context is not None:
                self.run(self._context.__aexit__(None, None, None))
        finally:
            if self._thread is not None:
                self._thread.close()
