"""RegisterBrokerService: keeps this broker known to every nameserver.

Nameservers share nothing, so the broker registers with each of them: at
start, every ``register_interval_seconds`` (30 s) and right after its topic
table changes. What it sends depends on what that nameserver acknowledged::

    first contact, or a reply full_table_needed   the whole table, in chunks of at
                                                  most chunk_topics topics
    acknowledged version V, table now at W        a DELTA on base V: the topics
                                                  changed since V, the names deleted
    V == W                                        an empty DELTA (liveness only)

so a registration after a one-topic change carries that topic, whatever the
table's size, and a restarted nameserver (which holds no base) asks for the
table once. Changes made while a round is in flight are coalesced into the
next round's delta. Registrations to different nameservers run concurrently; a
failure is logged with the nameserver's address and retried at the next round
(with the same base: a nameserver that took it already answers as for an
unchanged version). A graceful shutdown unregisters from each, so routes drop
the broker at once instead of after the nameserver's 120 s expiry.
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
from pocketmq.broker.topic_config import DataVersion, TopicConfigManager
from pocketmq.common.aio import cancel_and_wait, wait_event

__all__ = ["DEFAULT_CHUNK_TOPICS", "RegisterBrokerService", "RegistrationClient"]

log = logging.getLogger(__name__)

# Topics per registration chunk: at ~170 bytes a config (127-character names) a
# chunk stays under 1 MiB, a quarter of gRPC's default 4 MiB frame limit.
DEFAULT_CHUNK_TOPICS = 5_000


class RegistrationClient(Protocol):
    addr: str

    async def register(self, reg: BrokerRegistration, *, timeout_s: float) -> RegisterReply: ...
    async def unregister(self, reg: BrokerRegistration, *, timeout_s: float) -> bool: ...
    async def close(self) -> None: ...


class RegisterBrokerService:
    def __init__(
        self,
        namesrv_addrs: list[str],
        topics: TopicConfigManager,
        *,
        cluster_name: str,
        broker_name: str,
        broker_addr: str,
        broker_id: int = 0,
        interval_s: float = 30.0,
        timeout_s: float = 6.0,
        client_factory: Callable[[str], RegistrationClient] = GrpcNameserverClient,
        grpc_v2_addr: str = "",
        ha_addr: str = "",
        on_reply: Callable[[RegisterReply], None] | None = None,
        chunk_topics: int = DEFAULT_CHUNK_TOPICS,
    ) -> None:
        self._clients = [client_factory(addr) for addr in namesrv_addrs]
        self._topics = topics
        self._identity = (cluster_name, broker_name, broker_addr, broker_id)
        self._grpc_v2_addr = grpc_v2_addr  # where RocketMQ 5 clients reach it; "" = nowhere
        self._ha_addr = ha_addr  # where its replicas replicate from; "" = nowhere
        self.master_epoch = 0
        self.paused = False
        self._on_reply = on_reply  # the broker learns its master's HA address here
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        # addr -> outcome of the last attempt (None before the first); logs state changes only
        self.registered: dict[str, bool | None] = {c.addr: None for c in self._clients}
        # addr -> the data version that nameserver acknowledged (None: send the table)
        self._acked: dict[str, DataVersion | None] = {c.addr: None for c in self._clients}
        self._chunk_topics = chunk_topics
        self.last_request_bytes: dict[str, int] = {}  # addr -> bytes of the last round
        self.full_tables_sent = 0
        topics.add_change_listener(self._changed.set)

    def _registration(self, **topics: object) -> BrokerRegistration:
        cluster, name, addr, broker_id = self._identity
        return BrokerRegistration(
            cluster_name=cluster,
            broker_name=name,
            broker_addr=addr,
            broker_id=broker_id,
            grpc_v2_addr=self._grpc_v2_addr,
            ha_addr=self._ha_addr,
            master_epoch=self.master_epoch,
            **topics,
        )

    def _full_table(self) -> list[BrokerRegistration]:
        """The whole table at one version, in chunks of at most chunk_topics topics."""
        configs, version = self._topics.all(), self._topics.data_version
        size = self._chunk_topics
        chunks = [configs[i : i + size] for i in range(0, len(configs), size)] or [[]]
        return [
            self._registration(
                topic_configs=chunk, data_version=version, chunk_index=i, chunk_count=len(chunks)
            )
            for i, chunk in enumerate(chunks)
        ]

    def _delta(self, acked: DataVersion | None) -> BrokerRegistration | None:
        """A delta on *acked*, or None when the table must be sent whole."""
        version = self._topics.data_version
        if acked is None:
            return None
        if self._identity[3] != 0:  # a replica's topics are not routed: no table
            return self._registration(data_version=version, base_version=version)
        same_counter_other_table = acked.counter == version.counter and acked != version
        delta = None if same_counter_other_table else self._topics.changes_since(acked.counter)
        if delta is None or len(delta.put) + len(delta.deleted) > self._chunk_topics:
            return None
        return self._registration(
            topic_configs=delta.put,
            deleted_topics=delta.deleted,
            data_version=version,
            base_version=acked,
        )

    def set_ha_address(self, ha_addr: str) -> None:
        self._ha_addr = ha_addr

    def set_role(self, broker_id: int, master_epoch: int) -> None:
        """A promotion or a step-down: register under the new id and epoch from now on."""
        cluster, name, addr, _old = self._identity
        self._identity = (cluster, name, addr, broker_id)
        self.master_epoch = master_epoch
        self.paused = False
        self._acked = dict.fromkeys(self._acked)  # a new role: the table once more
        self._changed.set()

    # -- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        """Register once now (failures only logged), then keep registering."""
        if not self._clients:
            log.warning(
                "no nameserver configured (namesrv_addrs is empty); clients can reach "
                "this broker only by its address"
            )
            return
        await self.run_once()
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="RegisterBrokerService"
        )

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
        results = await asyncio.gather(*(self._register_one(c) for c in self._clients))
        return sum(results)

    async def _register_one(self, client: RegistrationClient) -> bool:
        delta = self._delta(self._acked.get(client.addr))
        try:
            if delta is not None:
                reply = await client.register(delta, timeout_s=self._timeout_s)
                sent, total_bytes = delta, reply.request_bytes
            if delta is None or reply.full_table_needed:
                chunks = self._full_table()
                total_bytes = 0
                for chunk in chunks:
                    reply = await client.register(chunk, timeout_s=self._timeout_s)
                    total_bytes += reply.request_bytes
                    if reply.full_table_needed or reply.stale_master:
                        break
                self.full_tables_sent += 1
                sent = chunks[-1]
        except Exception as exc:
            if self.registered.get(client.addr) is not False:
                log.warning(
                    "cannot register with nameserver %s: %s; retrying every %.0f s",
                    client.addr,
                    exc,
                    self._interval_s,
                )
            self.registered[client.addr] = False
            return False
        self.last_request_bytes[client.addr] = total_bytes
        if not (reply.full_table_needed or reply.stale_master):
            self._acked[client.addr] = sent.data_version
        if self.registered.get(client.addr) is not True:
            log.info(
                "registered %s (%s) with nameserver %s: %d topics, data version %d",
                sent.broker_name,
                sent.broker_addr,
                client.addr,
                len(self._topics),
                sent.data_version.counter,
            )
        elif reply.topic_configs_accepted:
            log.debug(
                "nameserver %s took topic data version %d (%d bytes)",
                client.addr,
                sent.data_version.counter,
                total_bytes,
            )
        self.registered[client.addr] = True
        if self._on_reply is not None:
            self._on_reply(reply)
        return True

    async def unregister_all(self) -> None:
        reg = self._registration(data_version=self._topics.data_version)

        async def one(client: RegistrationClient) -> None:
            try:
                await client.unregister(reg, timeout_s=self._timeout_s)
                log.info("unregistered from nameserver %s", client.addr)
            except Exception as exc:
                log.warning(
                    "cannot unregister from nameserver %s: %s; it will drop this "
                    "broker when its heartbeat expires",
                    client.addr,
                    exc,
                )

        await asyncio.gather(*(one(c) for c in self._clients))
