"""The controller's state in etcd, and the choice of the one active controller by lease.

Keys (prefix ``/pocketmq/<deployment>/controller``)::

    .../groups/<broker name>   GroupState JSON; version = the key's mod_revision
    .../leader                 the active controller's address, on its lease

Several nameservers run ``--controller --controller-etcd``. Each campaigns
(:class:`EtcdLeadership`): a transaction creates ``leader`` on its own lease
when the key is absent. The winner keeps the lease alive (every TTL/3); the
others watch the key and campaign again when it goes. A controller that
cannot refresh its lease for the TTL stops acting at once, before etcd lets
another take over, and every write of the state also checks that the leader
key is still the one it created (``guard``), so a deposed controller's late
write fails instead of overwriting its successor's::

    campaign ─ won ─▶ ACTIVE ─ keepalive fails for ttl ─▶ STANDBY ─ key deleted ─▶ campaign
        └─ lost ─▶ STANDBY (watch leader key)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from pocketmq.common.aio import cancel_and_wait
from pocketmq.controller.etcd import EtcdClient
from pocketmq.controller.state import GroupState
from pocketmq.controller.store import StateStoreUnavailableError

__all__ = ["EtcdControllerStore", "EtcdLeadership"]

log = logging.getLogger(__name__)


class EtcdLeadership:
    """Campaigns for the active-controller role; :attr:`active` while it holds the lease."""

    def __init__(
        self,
        client: EtcdClient,
        *,
        prefix: str,
        address: str,
        ttl_s: int = 3,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self._client = client
        self.key = f"{prefix}/leader".encode()
        self.address = address
        self._ttl_s = max(2, ttl_s)
        self._on_change = on_change
        self.active = False
        self.leader_addr = ""
        self.create_revision = 0  # of the leader key while we hold it (the guard)
        self._lease = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="EtcdLeadership")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        if self.active and self.create_revision:
            with contextlib.suppress(StateStoreUnavailableError):
                await self._client.delete_if(self.key, self.create_revision)
        if self._lease:
            await self._client.lease_revoke(self._lease)
        self._set(False)

    def _set(self, active: bool) -> None:
        if active != self.active:
            self.active = active
            log.warning(
                "controller at %s is %s",
                self.address,
                "now the ACTIVE controller" if active else "no longer active (standby)",
            )
            if self._on_change is not None:
                self._on_change(active)

    async def _run(self) -> None:
        while True:
            try:
                await self.run_once()
            except StateStoreUnavailableError as exc:
                self._set(False)
                log.warning("controller election on etcd: %s; retrying", exc)
                await asyncio.sleep(min(1.0, self._ttl_s / 3))

    async def run_once(self) -> None:
        """One campaign, then keep the lease (active) or watch the key (standby)."""
        self._lease = await self._client.lease_grant(self._ttl_s)
        won, revision, holder = await self._client.create_if_absent(
            self.key, self.address.encode(), self._lease
        )
        self.leader_addr = holder.decode()
        if won:
            self.create_revision = revision
            self._set(True)
            await self._keep_alive()
            self._set(False)
            return
        await self._client.lease_revoke(self._lease)
        self._lease = 0
        if revision == 0:
            return  # it vanished between the two calls: campaign again
        async for kind, value in self._client.watch(self.key):
            if kind == "DELETE":
                return
            self.leader_addr = value.decode()

    async def _keep_alive(self) -> None:
        """Refresh the lease every ttl/3; give up once it may have expired."""
        good_until = time.monotonic() + self._ttl_s
        while True:
            await asyncio.sleep(self._ttl_s / 3)
            try:
                ttl = await self._client.lease_keepalive(self._lease)
            except StateStoreUnavailableError as exc:
                if time.monotonic() + self._ttl_s / 3 >= good_until:
                    log.error("cannot refresh the controller lease (%s); stepping down", exc)
                    return
                continue
            if ttl <= 0:
                log.error("the controller lease expired; stepping down")
                return
            good_until = time.monotonic() + ttl


class EtcdControllerStore:
    def __init__(
        self, client: EtcdClient, *, prefix: str, leadership: EtcdLeadership | None = None
    ) -> None:
        self._client = client
        self._prefix = f"{prefix}/groups/".encode()
        self._leadership = leadership

    async def load_all(self) -> dict[str, tuple[GroupState, int]]:
        out = {}
        for key, (value, revision) in (await self._client.get_prefix(self._prefix)).items():
            out[key[len(self._prefix) :].decode()] = (GroupState.from_json(value), revision)
        return out

    async def compare_and_set(
        self, broker_name: str, state: GroupState, version: int
    ) -> int | None:
        guard = None
        if self._leadership is not None:
            if not self._leadership.active:
                raise StateStoreUnavailableError("this controller is not the active one any more")
            guard = (self._leadership.key, self._leadership.create_revision)
        return await self._client.put_if(
            self._prefix + broker_name.encode(), state.to_json(), version, guard=guard
        )

    async def close(self) -> None:
        await self._client.close()
