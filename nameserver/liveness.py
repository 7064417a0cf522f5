"""BrokerLivenessService: drops brokers that stopped registering.

RocketMQ's ``scanNotActiveBroker`` task: every ``scan_interval_seconds`` it asks
the route table to remove brokers silent past their heartbeat timeout. Tests
call :meth:`BrokerLivenessService.run_once` with a manual clock instead of
waiting for the timer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from pocketmq.nameserver.route_table import BrokerLiveInfo, RouteTable

__all__ = ["BrokerLivenessService"]

logger = logging.getLogger(__name__)


class BrokerLivenessService:
    """Owns the periodic liveness scan of one route table."""

    def __init__(self, route_table: RouteTable, *, scan_interval_seconds: float) -> None:
        if scan_interval_seconds <= 0:
            raise ValueError(f"scan_interval_seconds must be positive, got {scan_interval_seconds}")
        self._route_table = route_table
        self._scan_interval_seconds = scan_interval_seconds
        self._task: asyncio.Task[None] | None = None

    def run_once(self) -> list[BrokerLiveInfo]:
        """Scan now; returns the brokers dropped."""
        return self._route_table.scan_not_active_brokers()

    def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("BrokerLivenessService is already running")
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="BrokerLivenessService"
        )

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._scan_interval_seconds)
            try:
                self.run_once()
            except Exception:
                # A bug in one scan must not stop every later scan.
                logger.exception(
                    "broker liveness scan failed; retrying in %.1f s", self._scan_interval_seconds
                )
