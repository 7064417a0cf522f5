"""The nameserver: topic routes and broker liveness, served over gRPC.

Modules by role: :mod:`~pocketmq.nameserver.config` (``NamesrvConfig``),
:mod:`~pocketmq.nameserver.route_table` (RocketMQ's RouteInfoManager, pure),
:mod:`~pocketmq.nameserver.liveness` (the expiry scan),
:mod:`~pocketmq.nameserver.servicer` (the only one that sees protobuf) and
:mod:`~pocketmq.nameserver.server` (the ``NameServer`` component).
"""

from pocketmq.nameserver.config import DEFAULT_NAMESRV_PORT, NamesrvConfig
from pocketmq.nameserver.errors import (
    MalformedRequestError,
    NameServerError,
    RegistrationConflictError,
    ServerBindError,
    TopicNotFoundError,
)
from pocketmq.nameserver.route_table import (
    BrokerData,
    BrokerIdentity,
    BrokerLiveInfo,
    ClusterSnapshot,
    DataVersion,
    QueueData,
    RegisteredTopicConfig,
    RegisterResult,
    RouteTable,
    TopicRouteData,
)
from pocketmq.nameserver.server import NameServer

__all__ = [
    "DEFAULT_NAMESRV_PORT",
    "BrokerData",
    "BrokerIdentity",
    "BrokerLiveInfo",
    "ClusterSnapshot",
    "DataVersion",
    "MalformedRequestError",
    "NameServer",
    "NameServerError",
    "NamesrvConfig",
    "QueueData",
    "RegisterResult",
    "RegisteredTopicConfig",
    "RegistrationConflictError",
    "RouteTable",
    "ServerBindError",
    "TopicNotFoundError",
    "TopicRouteData",
]
