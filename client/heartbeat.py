"""HeartbeatService: keeps every broker a client uses aware of it, and listens.

Every ``heartbeat_interval_s`` (30 s), and at once when a route names a
broker not heard of before, the client sends ``HeartBeat`` to the master of
every broker in its routes: its producer group and its consumer groups with
their subscriptions (the broker's group membership is built from these). A
consumer (``replicas=True``) tells the replicas too, as RocketMQ's
``sendHeartbeatToAllBroker`` does: while a master is away its replica answers
the group's member list, and a rebalance must find this member in it.

A client that consumes, or answers transaction checks, also keeps one
``ClientChannel`` stream open per broker; the broker pushes
``NotifyConsumerIdsChangedCommand`` on it when a group's members change (the
consumer rebalances at once instead of at its next 20 s round) and
``CheckTransactionState`` to a transactional producer. A stream that breaks
is reopened after a short pause, and every broker is sent a heartbeat when a
stream opens: a broker forgets a client whose stream closed.

A consumer group's data (subscriptions, model, where it starts) goes whole
only when it changed: each heartbeat carries :func:`consumer_fingerprint` of
it, and once a broker has taken that fingerprint (and said it keeps
fingerprints) the next heartbeats send the fingerprint alone, a few dozen
bytes however many topics the group reads. A broker that does not hold it (it
restarted, or dropped the client) names the group in its answer and is sent
the whole data again at once; a broker that never said it keeps fingerprints
gets the whole data every time, as before.

:func:`make_client_id` names a client as RocketMQ does: ``ip@pid#nonce``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import socket
import uuid
from collections.abc import Callable, Sequence

from pocketmq.client.errors import ClientError, PermissionDeniedError
from pocketmq.client.remoting import ChannelOpened, ConsumerInfo, Remoting, ServerCommand
from pocketmq.client.route import RouteService, TopicRoute
from pocketmq.client.tasks import cancel_and_wait, raise_if_cancelling, wait_event
from pocketmq.common.filter import MessageSelector

__all__ = ["HeartbeatService", "consumer_fingerprint", "local_ip", "make_client_id"]

log = logging.getLogger(__name__)

STREAM_RETRY_S = 1.0


def local_ip() -> str:
    """This host's outbound IPv4 address, or 127.0.0.1."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))  # no packet is sent
            return str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def make_client_id(instance_name: str | None = None) -> str:
    return f"{local_ip()}@{instance_name or os.getpid()}#{uuid.uuid4().hex[:12]}"


def consumer_fingerprint(consumer: ConsumerInfo) -> str:
    """A digest of everything a heartbeat says about *consumer* (pure, order-free)."""
    digest = hashlib.blake2b(digest_size=12)
    digest.update(
        f"{consumer.group}\0{consumer.push:d}{consumer.broadcasting:d}"
        f"\0{consumer.consume_from}".encode()
    )
    for topic, expression in sorted(consumer.subscriptions.items()):
        # str(): a tag expression as it always was; an SQL92 one as "SQL92(...)"
        digest.update(f"\0{topic}\1{MessageSelector.of(expression)}".encode())
    return digest.hexdigest()


class HeartbeatService:
    def __init__(
        self,
        remoting: Remoting,
        routes: RouteService,
        client_id: str,
        *,
        producer_groups: Sequence[str] = (),
        consumers: Callable[[], list[ConsumerInfo]] = list,
        interval_s: float = 30.0,
        on_command: Callable[[ServerCommand], None] | None = None,
        timeout_s: float = 3.0,
        replicas: bool = False,
    ) -> None:
        self._remoting = remoting
        self._routes = routes
        self.client_id = client_id
        self._producer_groups = list(producer_groups)
        self._consumers = consumers
        self._interval_s = interval_s
        self._on_command = on_command
        self._timeout_s = timeout_s
        self._replicas = replicas
        self._task: asyncio.Task[None] | None = None
        self._streams: dict[str, asyncio.Task[None]] = {}
        self._known: set[str] = set()
        # broker address -> group -> fingerprint that broker holds (it said it keeps them)
        self._held: dict[str, dict[str, str]] = {}
        #: request bytes of the last heartbeat to each broker, and full sends so far
        self.last_request_bytes: dict[str, int] = {}
        self.full_sends = 0
        #: broker address -> the ACL refusal of the last heartbeat there (cleared on success)
        self.denied: dict[str, PermissionDeniedError] = {}
        self.last_answered = 0
        self._wake = asyncio.Event()
        routes.add_listener(self._route_fetched)

    # -- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        await self.run_once()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="HeartbeatService")

    def refused_everywhere(self) -> PermissionDeniedError | None:
        """The ACL's refusal when the last round reached brokers and every one refused."""
        if self.last_answered or not self.denied:
            return None
        return next(iter(self.denied.values()))

    def listen(self, on_command: Callable[[ServerCommand], None]) -> None:
        """Handle the brokers' commands with *on_command*; streams open at the next round."""
        self._on_command = on_command

    def wakeup(self) -> None:
        """Heartbeat every broker now, e.g. one that restarted and forgot this client."""
        self._wake.set()

    async def stop(self) -> None:
        tasks = [self._task, *self._streams.values()]
        self._task = None
        self._streams.clear()
        await cancel_and_wait(*tasks)

    async def _run(self) -> None:
        while True:
            await wait_event(self._wake, self._interval_s)
            self._wake.clear()
            await self.run_once()

    def _route_fetched(self, route: TopicRoute) -> None:
        addrs = {
            a
            for m in route.broker_addrs.values()
            for broker_id, a in m.items()
            if broker_id == 0 or self._replicas
        }
        if not addrs <= self._known:
            self._wake.set()

    def _addrs(self) -> list[str]:
        """The brokers this client tells: every master, and every replica if asked to."""
        if self._replicas:
            return sorted(self._routes.member_addrs())
        return sorted(set(self._routes.broker_addrs().values()))

    # -- rounds -------------------------------------------------------------------------
    async def run_once(self) -> int:
        """Heartbeat every known broker; returns how many answered."""
        addrs = self._addrs()
        self._known.update(addrs)
        consumers = self._consumers()
        fingerprints = {c.group: consumer_fingerprint(c) for c in consumers}

        async def one(addr: str) -> bool:
            try:
                await self._heartbeat(addr, consumers, fingerprints)
                self.denied.pop(addr, None)
                return True
            except PermissionDeniedError as exc:
                self.denied[addr] = exc
                log.debug("heartbeat to %s refused: %s", addr, exc)
                return False
            except ClientError as exc:
                log.debug("heartbeat to %s failed: %s", addr, exc)
                return False

        answered = sum(await asyncio.gather(*(one(a) for a in addrs)))
        self.last_answered = answered
        if self._on_command is not None:
            self._open_streams(addrs)
        return answered

    async def _heartbeat(
        self, addr: str, consumers: list[ConsumerInfo], fingerprints: dict[str, str]
    ) -> None:
        held = self._held.get(addr, {})
        unchanged = {g for g, f in fingerprints.items() if held.get(g) == f}
        broker = self._remoting.broker(addr)
        answer = await broker.heartbeat(
            self.client_id,
            producer_groups=self._producer_groups,
            consumers=consumers,
            fingerprints=fingerprints,
            unchanged=unchanged,
            timeout_s=self._timeout_s,
        )
        self.last_request_bytes[addr] = answer.request_bytes
        if len(unchanged) < len(consumers):
            self.full_sends += 1
        if answer.unknown_groups:
            # The broker lost them (restart, expiry): send those groups whole, now.
            log.info(
                "broker %s does not hold the subscriptions of %s; sending them whole",
                addr,
                ", ".join(answer.unknown_groups),
            )
            unknown = set(answer.unknown_groups)
            answer = await broker.heartbeat(
                self.client_id,
                producer_groups=self._producer_groups,
                consumers=consumers,
                fingerprints=fingerprints,
                unchanged=unchanged - unknown,
                timeout_s=self._timeout_s,
            )
            self.last_request_bytes[addr] = answer.request_bytes
            self.full_sends += 1
        if answer.keeps_fingerprints and not answer.unknown_groups:
            self._held[addr] = dict(fingerprints)
        else:
            self._held.pop(addr, None)

    async def unregister(self, *, producer_group: str = "", consumer_group: str = "") -> None:
        """Leave the groups on every broker, so the others rebalance at once."""

        async def one(addr: str) -> None:
            try:
                await self._remoting.broker(addr).unregister_client(
                    self.client_id,
                    producer_group=producer_group,
                    consumer_group=consumer_group,
                    timeout_s=self._timeout_s,
                )
            except ClientError as exc:
                log.debug("unregister from %s failed: %s", addr, exc)

        await asyncio.gather(*(one(a) for a in self._addrs()))

    # -- command streams ----------------------------------------------------------------
    def _open_streams(self, addrs: list[str]) -> None:
        loop = asyncio.get_running_loop()
        for addr in addrs:
            task = self._streams.get(addr)
            if task is None or task.done():
                self._streams[addr] = loop.create_task(
                    self._stream(addr), name=f"ClientChannel {addr}"
                )

    async def _stream(self, addr: str) -> None:
        assert self._on_command is not None
        while True:
            try:
                async for command in self._remoting.broker(addr).commands(self.client_id):
                    if isinstance(command, ChannelOpened):
                        # The broker forgets a client whose stream closed: tell it again.
                        self._wake.set()
                    self._on_command(command)
            except ClientError as exc:
                log.debug("command stream from %s ended: %s", addr, exc)
            raise_if_cancelling()  # gRPC may end a cancelled stream quietly
            await asyncio.sleep(STREAM_RETRY_S)
