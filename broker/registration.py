"""RegisterBrokerService: keeps this broker known to every nameserver.

Nameservers share nothing, so the broker registers with each of them: at
start, every ``register_interval_seconds`` (30 s) and right after its topic
table changes, sending the whole topic table with its data version (a
nameserver that already holds that version only refreshes the broker's
liveness). Registrations to different nameservers run concurrently; a failure
is logged with the nameserver's address and retried at the next round. A
graceful shutdown unregisters from each, so routes drop the broker at once
instead of after the nameserver's 120 s expiry.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from pocketmq.broker.namesrv_client import (
    BrokerRegistration,
    GrpcNameserverClient,
    RegisterReply,
)
from pocketmq.broker.topic_config import TopicConfigManager
from pocketmq.common.aio import cancel_and_wait, wait_event

__all__ = ["NameserverClient", "RegisterBrokerService"]

log = logging.getLogger(__name__)


class NameserverClient(Protocol):
    addr: str

    async def register(self, reg: BrokerRegistration, *,
                       timeout_s: float) -> RegisterReply: ...
    async def unregister(self, reg: BrokerRegistration, *, timeout_s: float) -> bool: ...
    async def close(self) -> None: ...


class RegisterBrokerService:
    def __init__(self, namesrv_addrs: list[str], topics: TopicConfigManager, *,
                 cluster_name: str, broker_name: str, broker_addr: str, broker_id: int = 0,
                 interval_s: float = 30.0, timeout_s: float = 6.0,
                 client_factory: Callable[[str], NameserverClient] = GrpcNameserverClient,
                 grpc_v2_addr: str = "", ha_addr: str = "",
                 on_reply: Callable[[RegisterReply], None] | None = None) -> None:
        self._clients = [client_factory(addr) for addr in namesrv_addrs]
        self._topics = topics
        self._identity = (cluster_name, broker_name, broker_addr, broker_id)
        self._grpc_v2_addr = grpc_v2_addr   # where RocketMQ 5 clients reach it; "" = nowhere
        self._ha_addr = ha_addr             # where its replicas replicate from; "" = nowhere
        self.master_epoch = 0
        self.paused = False
        self._on_reply = on_reply           # the broker learns its master's HA address here
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        # addr -> outcome of the last attempt (None before the first); logs state changes only
        self.registered: dict[str, bool | None] = {c.addr: None for c in self._clients}
        topics.add_change_listener(self._changed.set)

    def _registration(self) -> BrokerRegistration:
        cluster, name, addr, broker_id = self._identity
        return BrokerRegistration(cluster_name=cluster, broker_name=name, broker_addr=addr,
                                  broker_id=broker_id, topic_configs=self._topics.all(),
                                  data_version=self._topics.data_version,
                                  grpc_v2_addr=self._grpc_v2_addr, ha_addr=self._ha_addr,
                                  master_epoch=self.master_epoch)

    def set_ha_address(self, ha_addr: str) -> None:
        self._ha_addr = ha_addr

    def set_role(self, broker_id: int, master_epoch: int) -> None:
        """A promotion or a step-down: register under the new id and epoch from now on."""
        cluster, name, addr, _old = self._identity
        self._identity = (cluster, name, addr, broker_id)
        self.master_epoch = master_epoch
        self.paused = False
        self._changed.set()

    # -- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        """Register once now (failures only logged), then keep registering."""
        if not self._clients:
            log.warning("no nameserver configured (namesrv_addrs is empty); clients can reach "
                        "this broker only by its address")
            return
        await self.run_once()
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="RegisterBrokerService")

    async def stop(self, *, unregister: bool = True) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        if unregister:
            await self.unregister_all()
        for client in self._clients:
            await client.close()

    async def _run(self) -> None:
        while True:
            # Wake at the interval, or at once when the topic table changed.
            await wait_event(self._changed, self._interval_s)
            await self.run_once()

    # -- rounds -------------------------------------------------------------------------
    async def run_once(self) -> int:
        """Register with every nameserver; returns how many accepted (none while paused:
        a broker in controller mode whose role the controller has not named yet)."""
        self._changed.clear()
        if self.paused:
            return 0
        reg = self._registration()
        results = await asyncio.gather(*(self._register_one(c, reg) for c in self._clients))
        return sum(results)

    async def _register_one(self, client: NameserverClient, reg: BrokerRegistration) -> bool:
        try:
            reply = await client.register(reg, timeout_s=self._timeout_s)
        except Exception as exc:
            if self.registered.get(client.addr) is not False:
                log.warning("cannot register with nameserver %s: %s; retrying every %.0f s",
                            client.addr, exc, self._interval_s)
            self.registered[client.addr] = False
            return False
        if self.registered.get(client.addr) is not True:
            log.info("registered %s (%s) with nameserver %s: %d topics, data version %d",
                     reg.broker_name, reg.broker_addr, client.addr, len(reg.topic_configs),
                     reg.data_version.counter)
        elif reply.topic_configs_accepted:
            log.debug("nameserver %s took topic data version %d", client.addr,
                      reg.data_version.counter)
        self.registered[client.addr] = True
        if self._on_reply is not None:
            self._on_reply(reply)
        return True

    async def unregister_all(self) -> None:
        reg = self._registration()

        async def one(client: NameserverClient) -> None:
            try:
                await client.unregister(reg, timeout_s=self._timeout_s)
                log.info("unregistered from nameserver %s", client.addr)
            except Exception as exc:
                log.warning("cannot unregister from nameserver %s: %s; it will drop this "
                            "broker when its heartbeat expires", client.addr, exc)

        await asyncio.gather(*(one(c) for c in self._clients))
