"""How a registration's topic configs change a broker name's routes, and the
chunks of a full table staged until its last chunk arrives (used by
:class:`~pocketmq.nameserver.route_table.RouteTable`).

A registration's mode is ``"full"`` (replace the routes), ``"delta"`` (apply
changes on the version held), ``"none"`` (liveness only, or a chunk staged), or
``"need_full"`` (a delta on another base, or a chunk out of order).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from pocketmq.nameserver.route_model import MASTER_ID, BrokerIdentity, DataVersion, TopicUpdate

if TYPE_CHECKING:
    from pocketmq.nameserver.route_table import RegisteredTopicConfig

__all__ = ["TopicStaging"]


class TopicStaging:
    """The chunks of full tables received so far, by broker address."""

    def __init__(self) -> None:
        # broker address -> (version, next chunk index, chunk count, configs so far)
        self._staged: dict[str, tuple[DataVersion, int, int, list[RegisteredTopicConfig]]] = {}

    def forget(self, broker_addr: str) -> None:
        """The broker went: its partial table goes too."""
        self._staged.pop(broker_addr, None)

    def topic_mode(
        self,
        broker: BrokerIdentity,
        held: DataVersion,
        version: DataVersion,
        topic_configs: Iterable[RegisteredTopicConfig],
        update: TopicUpdate,
    ) -> tuple[str, tuple[RegisteredTopicConfig, ...]]:
        """What a registration does to the broker name's routes: "full" (replace them),
        "delta" (apply changes), "none", or "need_full" (a delta on another base). The
        configs are read completely before anything changes."""
        if broker.broker_id != MASTER_ID or held == version:
            self._staged.pop(broker.broker_addr, None)
            return "none", ()
        if update.base_version is not None:
            if held != update.base_version:
                return "need_full", ()
            return "delta", tuple(topic_configs)
        if update.chunk_count <= 1:
            return "full", tuple(topic_configs)
        # One chunk of a full table: staged until the last one arrives.
        expected = (version, update.chunk_index, update.chunk_count)
        staged = self._staged.get(broker.broker_addr)
        if update.chunk_index == 0:
            staged = (version, 0, update.chunk_count, [])
        elif staged is None or staged[:3] != expected:
            self._staged.pop(broker.broker_addr, None)
            return "need_full", ()  # a chunk out of order or of another table
        configs = staged[3]
        configs.extend(topic_configs)
        if update.chunk_index < update.chunk_count - 1:
            self._staged[broker.broker_addr] = (
                version,
                update.chunk_index + 1,
                update.chunk_count,
                configs,
            )
            return "none", ()
        self._staged.pop(broker.broker_addr, None)
        return "full", tuple(configs)
