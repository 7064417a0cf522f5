"""ControllerService: the controller component a nameserver owns — store, leadership, scan.

::

    file store:  always active (one controller per deployment)
    etcd store:  active while it holds the etcd lease (EtcdLeadership); on
                 becoming active it reloads the state (ReplicasManager.reset)
    scan:        every scan_interval_ms, ReplicasManager.run_once() elects for
                 masters silent for broker_inactive_ms (active only)

``start()`` / ``stop()``; ``run_once()`` steps the scan for tests.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

from pocketmq.common.aio import cancel_and_wait
from pocketmq.controller.manager import ControllerConfigView, ReplicasManager
from pocketmq.controller.servicer import ControllerServicer
from pocketmq.controller.store import (
    ControllerStore,
    FileControllerStore,
    StateStoreUnavailableError,
)

__all__ = ["ControllerService"]

log = logging.getLogger(__name__)


class ControllerService:
    def __init__(
        self,
        *,
        data_dir: str,
        etcd_endpoints: list[str] | None = None,
        etcd_prefix: str = "/pocketmq/default/controller",
        address: str = "",
        broker_inactive_ms: int = 3000,
        scan_interval_ms: int = 1000,
        lease_ttl_s: int = 3,
        elect_unclean_master: bool = False,
    ) -> None:
        self._scan_s = scan_interval_ms / 1000
        self._address = address
        self._etcd_endpoints = etcd_endpoints
        self._etcd_prefix = etcd_prefix
        self._lease_ttl_s = lease_ttl_s
        self._data_dir = data_dir
        self.leadership = None
        self._store: ControllerStore | None = None
        self.manager: ReplicasManager | None = None
        self._view = ControllerConfigView(
            broker_inactive_ms=broker_inactive_ms, elect_unclean_master=elect_unclean_master
        )
        self._task: asyncio.Task[None] | None = None
        self._resetting: asyncio.Task[None] | None = None
        self._ready = False

    def set_address(self, address: str) -> None:
        """Where brokers reach this controller (known once the server is bound)."""
        self._address = address
        if self.leadership is not None:
            self.leadership.address = address

    def build(self) -> ControllerServicer:
        """The store and the gRPC servicer (before the nameserver's server starts)."""
        address = self._address
        if self._etcd_endpoints:
            from pocketmq.controller.etcd import EtcdClient
            from pocketmq.controller.etcd_store import EtcdControllerStore, EtcdLeadership

            client = EtcdClient(self._etcd_endpoints)
            self.leadership = EtcdLeadership(
                client,
                prefix=self._etcd_prefix,
                address=address,
                ttl_s=self._lease_ttl_s,
                on_change=self._leadership_changed,
            )
            self._store = EtcdControllerStore(
                client, prefix=self._etcd_prefix, leadership=self.leadership
            )
        else:
            self._store = FileControllerStore(os.path.join(self._data_dir, "controller.json"))
        self.manager = ReplicasManager(
            self._store, self._view, now_ms=lambda: int(time.monotonic() * 1000)
        )
        return ControllerServicer(
            self.manager, is_active=self.is_active, leader_addr=self.leader_addr
        )

    def is_active(self) -> bool:
        if not self._ready:
            return False
        return self.leadership is None or self.leadership.active

    def leader_addr(self) -> str:
        if self.leadership is None:
            return self._address
        return self._address if self.leadership.active else self.leadership.leader_addr

    def _leadership_changed(self, active: bool) -> None:
        self._ready = False
        if active:
            self._resetting = asyncio.get_running_loop().create_task(self._reset())

    async def _reset(self) -> None:
        assert self.manager is not None
        while self.leadership is None or self.leadership.active:
            try:
                await self.manager.reset()
            except StateStoreUnavailableError as exc:
                log.warning("controller cannot load its state: %s; retrying", exc)
                await asyncio.sleep(0.5)
                continue
            self._ready = True
            log.info(
                "controller at %s serves %d broker names", self._address, len(self.manager.groups())
            )
            return

    async def start(self) -> None:
        assert self.manager is not None, "build() first"
        if self.leadership is None:
            await self._reset()
        else:
            self.leadership.start()
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="ControllerScanService"
        )

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._scan_s)
            try:
                await self.run_once()
            except StateStoreUnavailableError as exc:
                log.warning("controller scan: %s", exc)
            except Exception:
                log.exception("controller scan failed")

    async def run_once(self) -> list[str]:
        if not self.is_active() or self.manager is None:
            return []
        return await self.manager.run_once()

    async def stop(self) -> None:
        await cancel_and_wait(self._task, self._resetting)
        self._task = None
        if self.leadership is not None:
            await self.leadership.stop()
        if self._store is not None:
            await self._store.close()
