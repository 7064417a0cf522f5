"""The controller: automatic failover for the brokers of each broker name.

It runs inside a nameserver (``pocketmq nameserver --controller``) and keeps,
per broker name, the master, the master epoch and the in-sync replica set in
a :class:`~pocketmq.controller.store.ControllerStore` — a file on one machine,
etcd across machines — and elects a new master among the in-sync replicas
when the master stops heartbeating. See ``controller.proto`` for the wire
contract and :mod:`.state` for the rules.
"""

from pocketmq.controller.errors import ControllerError
from pocketmq.controller.manager import ControllerConfigView, Heartbeat, ReplicasManager
from pocketmq.controller.service import ControllerService
from pocketmq.controller.state import BrokerLive, ControllerRefusalError, GroupState
from pocketmq.controller.store import (
    ControllerStore,
    FileControllerStore,
    StateStoreUnavailableError,
)

__all__ = [
    "BrokerLive",
    "ControllerConfigView",
    "ControllerError",
    "ControllerRefusalError",
    "ControllerService",
    "ControllerStore",
    "FileControllerStore",
    "GroupState",
    "Heartbeat",
    "ReplicasManager",
    "StateStoreUnavailableError",
]
