"""RocketMQ's official Python client against a real PocketMQ broker.

The broker and nameserver run in the test's process on port 0 (real gRPC,
real files in ``tmp_path``); the official client runs in a subprocess, the
agent of ``rmq_agent.py``, since the two cannot share a process (both own
the ``apache.rocketmq.v2`` protobuf names). ``await agent()`` starts one;
``await a.call("send", ...)`` runs one command there with a bounded wait.
``await node_agent()`` starts the official Node.js client's agent
(``node/agent.js``), which takes the same commands; ``./dev.sh`` installs that
client (``npm ci`` in ``node/``, pinned by its ``package-lock.json``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pocketmq.broker.broker import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.topic_config import BrokerTopicConfig
from pocketmq.nameserver import NameServer, NamesrvConfig

AGENT = Path(__file__).with_name("rmq_agent.py")
NODE_DIR = Path(__file__).with_name("node")
NODE_AGENT = NODE_DIR / "agent.js"
NODE_CLIENT = "rocketmq-client-nodejs"
MiB = 1024 * 1024
CALL_TIMEOUT_S = 40.0
QUEUES = 2

SMALL: dict[str, Any] = dict(
    port=0,
    grpc_v2_port=0,
    commitlog_file_size_bytes=16 * MiB,
    max_message_size_bytes=MiB,
    index_slots=1024,
    index_entries=4096,
    consume_queue_units_per_file=10_000,
    default_topic_queue_nums=QUEUES,
    register_interval_seconds=1,
    # retries and nacks come back after 1 s instead of 10 s, 30 s ...
    message_delay_level="1s 1s 1s 1s 1s 1s",
    grpc_v2_max_delivery_attempts=3,
    transaction_timeout_ms=500,
    transaction_check_interval_ms=500,
)


class AgentError(AssertionError):
    pass


class Agent:
    """One subprocess running the official client."""

    def __init__(self, proc: asyncio.subprocess.Process, log: Path) -> None:
        self.proc = proc
        self.log = log  # the client's own log file

    async def call(self, op: str, *, timeout_s: float = CALL_TIMEOUT_S, **fields: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write((json.dumps({"op": op, **fields}) + "\n").encode())
        await self.proc.stdin.drain()
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout_s)
        except TimeoutError:
            raise AgentError(
                f"agent gave no answer to {op} within {timeout_s} s\n{self.client_log()}"
            ) from None
        if not line:
            raise AgentError(f"agent died during {op}\n{self.client_log()}")
        answer = json.loads(line)
        if not answer["ok"]:
            raise AgentError(f"{op} failed: {answer['error']}\n{self.client_log()}")
        return answer["result"]

    def client_log(self, lines: int = 30) -> str:
        try:
            tail = self.log.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return "(no client log)"
        return "client log:\n" + "\n".join(tail)

    async def close(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(AgentError):
                await self.call("exit", timeout_s=20)
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


async def _agents(
    tmp_path: Path,
    name: str,
    argv: list[str],
    log: str,
) -> AsyncIterator[Callable[[], Awaitable[Agent]]]:
    """Start agents with ``argv``, each with a HOME of its own (the clients log there)."""
    started: list[Agent] = []

    async def start() -> Agent:
        home = tmp_path / f"{name}-{len(started)}"
        home.mkdir()
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env={**os.environ, "HOME": str(home)},
        )
        started.append(Agent(proc, home / log))
        return started[-1]

    yield start
    await asyncio.gather(*(a.close() for a in started))


@pytest.fixture
async def agent(tmp_path) -> AsyncIterator[Callable[[], Awaitable[Agent]]]:
    """Agents of the official Python client (rmq_agent.py)."""
    async for start in _agents(
        tmp_path, "agent", [sys.executable, str(AGENT)], "logs/rocketmq_python/rocketmq_client.log"
    ):
        yield start


@pytest.fixture(scope="session")
def node_executable() -> str:
    """node, with the pinned Node.js client installed in node/node_modules.

    Fails (never skips) when either is missing: the Node.js client's tests are
    part of the suite.
    """
    node = shutil.which("node")
    if node is None:
        pytest.fail(
            "node is not on PATH: the official Node.js client's tests "
            "(tests/compat/test_node_client.py) need Node.js >= 18 and npm; install "
            "them, then ./dev.sh test installs the client",
            pytrace=False,
        )
    pinned = json.loads((NODE_DIR / "package.json").read_text())["dependencies"][NODE_CLIENT]
    try:
        installed = json.loads(
            (NODE_DIR / "node_modules" / NODE_CLIENT / "package.json").read_text()
        )["version"]
    except OSError:
        installed = None
    if installed != pinned:
        pytest.fail(
            f"{NODE_CLIENT} {pinned} is not installed in {NODE_DIR} (found "
            f"{installed}): ./dev.sh test installs it, or run `npm ci` there",
            pytrace=False,
        )
    return node


@pytest.fixture
async def node_agent(tmp_path, node_executable) -> AsyncIterator[Callable[[], Awaitable[Agent]]]:
    """Agents of the official Node.js client (node/agent.js)."""
    async for start in _agents(
        tmp_path,
        "node",
        [node_executable, str(NODE_AGENT)],
        "logs/rocketmq/rocketmq_client_nodejs.log",
    ):
        yield start


@dataclass
class V2Cluster:
    namesrv: NameServer
    config: BrokerConfig
    brokers: list[Broker] = field(default_factory=list)

    @property
    def broker(self) -> Broker:
        return self.brokers[0]

    @property
    def endpoints(self) -> str:
        """The access point a RocketMQ 5 client is given."""
        assert self.broker.grpc_v2 is not None
        return self.broker.grpc_v2.address

    async def restart(self) -> Broker:
        """Stop the broker gracefully and start it again on the same ports and data."""
        old = self.brokers.pop()
        assert old.grpc_v2 is not None
        ports = dict(port=old.port, grpc_v2_port=old.grpc_v2.port)
        await old.stop(0)
        broker = Broker(BrokerConfig(**{**_fields(self.config), **ports}))
        await broker.start()
        self.brokers.append(broker)
        return broker

    async def create_topic(
        self, topic: str, eventually: Any, *, order: bool = False, queues: int = QUEUES
    ) -> None:
        for broker in self.brokers:
            assert broker.topics is not None
            broker.topics.create(
                BrokerTopicConfig(
                    topic_name=topic, read_queue_nums=queues, write_queue_nums=queues, order=order
                )
            )

        def routed() -> bool:
            route = self.namesrv.route_table.get_route(topic)
            return route is not None and len(route.queue_datas) == len(self.brokers)

        await eventually(routed, timeout_s=10, what=f"route of {topic}")


def _fields(config: BrokerConfig) -> dict[str, Any]:
    return {name: getattr(config, name) for name in config.__dataclass_fields__}


@pytest.fixture
async def nameserver() -> AsyncIterator[NameServer]:
    server = NameServer(NamesrvConfig(host="127.0.0.1", port=0))
    await server.start()
    yield server
    await server.stop(0)


@pytest.fixture
async def v2_cluster(tmp_path) -> AsyncIterator[V2Cluster]:
    namesrv = NameServer(NamesrvConfig(host="127.0.0.1", port=0))
    await namesrv.start()
    config = BrokerConfig(
        **SMALL,
        broker_name="broker-a",
        data_dir=str(tmp_path / "broker-a"),
        namesrv_addrs=namesrv.address,
    )
    cluster = V2Cluster(namesrv, config)
    try:
        broker = Broker(config)
        await broker.start()
        cluster.brokers.append(broker)
        yield cluster
    finally:
        for broker in cluster.brokers:
            await broker.stop(0)
        await namesrv.stop(0)
