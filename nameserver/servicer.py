"""The nameserver's gRPC servicer: the only nameserver module that sees protobuf.

Each RPC validates its request, converts it to route-table values, calls the
:class:`~pocketmq.nameserver.route_table.RouteTable` and converts the answer
back. Failures leave as gRPC status codes with a message naming the field or
the topic (see :mod:`pocketmq.nameserver.errors` for the mapping); a bug
becomes INTERNAL, never a dead server.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import grpc

from pocketmq.common.configfile import parse_host_port
from pocketmq.common.validation import check_topic
from pocketmq.nameserver.errors import (
    MalformedRequestError,
    NameServerError,
    RegistrationConflictError,
    TopicNotFoundError,
)
from pocketmq.nameserver.route_table import (
    PERM_INHERIT,
    PERM_PRIORITY,
    PERM_READ,
    PERM_WRITE,
    BrokerData,
    BrokerIdentity,
    BrokerLiveInfo,
    DataVersion,
    RegisteredTopicConfig,
    RouteTable,
    TopicUpdate,
)
from pocketmq.v1 import common_pb2, nameserver_pb2, nameserver_pb2_grpc

__all__ = ["NameServerServicer"]

logger = logging.getLogger(__name__)

_STATUS_BY_ERROR: tuple[tuple[type[NameServerError], grpc.StatusCode], ...] = (
    (MalformedRequestError, grpc.StatusCode.INVALID_ARGUMENT),
    (TopicNotFoundError, grpc.StatusCode.NOT_FOUND),
    (RegistrationConflictError, grpc.StatusCode.FAILED_PRECONDITION),
)
_ALL_PERM_BITS = PERM_PRIORITY | PERM_READ | PERM_WRITE | PERM_INHERIT
_MAX_NAME_LENGTH = 255
TOPIC_PAGE_SIZE = 10_000  # GetTopicRoutes page when the request gives no limit
MAX_TOPIC_PAGE_SIZE = 50_000
MAX_ROUTES_PER_CALL = 1_000  # GetTopicRoutes by names

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Handler = Callable[[Any, Req, grpc.aio.ServicerContext], Awaitable[Resp]]


def _status_for(exc: NameServerError) -> grpc.StatusCode:
    for error_type, code in _STATUS_BY_ERROR:
        if isinstance(exc, error_type):
            return code
    return grpc.StatusCode.INTERNAL


def _rpc(method: Handler[Req, Resp]) -> Handler[Req, Resp]:
    """Turn the nameserver's errors into statuses, and a bug into INTERNAL."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Req, context: grpc.aio.ServicerContext) -> Resp:
        try:
            return await method(self, request, context)
        except NameServerError as exc:
            await context.abort(_status_for(exc), str(exc))
        except Exception as exc:
            logger.exception("%s failed", method.__name__)
            await context.abort(
                grpc.StatusCode.INTERNAL, f"nameserver failed in {method.__name__}: {exc!r}"
            )
        raise AssertionError("context.abort returned")  # pragma: no cover

    return wrapper


# ---------------------------------------------------------------------- validation


def _check_name(field: str, value: str, example: str) -> str:
    if not value:
        raise MalformedRequestError(field, f"is empty; set it (for example {example!r})")
    if len(value) > _MAX_NAME_LENGTH:
        raise MalformedRequestError(
            field, f"is {len(value)} characters; at most {_MAX_NAME_LENGTH} are allowed"
        )
    if any(c.isspace() or not c.isprintable() for c in value):
        raise MalformedRequestError(field, f"{value!r} contains whitespace or control characters")
    return value


def _check_addr(field: str, value: str) -> str:
    try:
        _, port = parse_host_port(value)
    except ValueError as exc:
        raise MalformedRequestError(field, str(exc)) from None
    if port == 0:
        raise MalformedRequestError(
            field, f"{value!r} has port 0; send the port the broker actually listens on"
        )
    return value


def _check_non_negative(field: str, value: int) -> int:
    if value < 0:
        raise MalformedRequestError(field, f"is {value}; it must be >= 0")
    return value


def _broker_identity(
    request: nameserver_pb2.RegisterBrokerRequest | nameserver_pb2.UnregisterBrokerRequest,
) -> BrokerIdentity:
    return BrokerIdentity(
        cluster=_check_name("cluster_name", request.cluster_name, "DefaultCluster"),
        broker_name=_check_name("broker_name", request.broker_name, "broker-a"),
        broker_addr=_check_addr("broker_addr", request.broker_addr),
        broker_id=_check_non_negative("broker_id", request.broker_id),
    )


def _data_version(request: nameserver_pb2.RegisterBrokerRequest) -> DataVersion:
    if not request.HasField("data_version"):
        raise MalformedRequestError(
            "data_version",
            "is missing; send the broker's topic-config version and bump "
            "its counter whenever a topic changes",
        )
    version = request.data_version
    return DataVersion(
        timestamp_ms=_check_non_negative("data_version.timestamp_ms", version.timestamp_ms),
        counter=_check_non_negative("data_version.counter", version.counter),
    )


def _topic_configs(
    request: nameserver_pb2.RegisterBrokerRequest,
) -> Iterator[RegisteredTopicConfig]:
    """Validate and convert lazily: the route table reads them only when it takes them."""
    first_index: dict[str, int] = {}
    for i, pb in enumerate(request.topic_configs):
        where = f"topic_configs[{i}]"
        problem = check_topic(pb.topic_name)
        if problem is not None:
            raise MalformedRequestError(f"{where}.topic_name", problem)
        if pb.topic_name in first_index:
            raise MalformedRequestError(
                f"{where}.topic_name",
                f"topic {pb.topic_name!r} is already in "
                f"topic_configs[{first_index[pb.topic_name]}]; send each topic once",
            )
        first_index[pb.topic_name] = i
        _check_non_negative(f"{where}.read_queue_nums", pb.read_queue_nums)
        _check_non_negative(f"{where}.write_queue_nums", pb.write_queue_nums)
        if pb.perm & ~_ALL_PERM_BITS or pb.perm < 0:
            raise MalformedRequestError(
                f"{where}.perm",
                f"is {pb.perm}; it is a bitwise OR of 4 (read), 2 (write), "
                f"1 (inherit) and 8 (priority), e.g. 6 for read-write",
            )
        yield RegisteredTopicConfig(
            topic_name=pb.topic_name,
            read_queue_nums=pb.read_queue_nums,
            write_queue_nums=pb.write_queue_nums,
            perm=pb.perm,
            order=pb.order,
            topic_sys_flag=pb.topic_sys_flag,
        )


def _topic_update(request: nameserver_pb2.RegisterBrokerRequest) -> TopicUpdate:
    if request.topic_table_kind == nameserver_pb2.TOPIC_TABLE_DELTA:
        if not request.HasField("base_version"):
            raise MalformedRequestError(
                "base_version",
                "is missing; a DELTA registration names the data version its changes apply to",
            )
        for i, name in enumerate(request.deleted_topics):
            problem = check_topic(name)
            if problem is not None:
                raise MalformedRequestError(f"deleted_topics[{i}]", problem)
        base = request.base_version
        return TopicUpdate(
            base_version=DataVersion(timestamp_ms=base.timestamp_ms, counter=base.counter),
            deleted=tuple(request.deleted_topics),
        )
    if request.deleted_topics:
        raise MalformedRequestError(
            "deleted_topics", "is only meaningful in a DELTA registration; a FULL table has none"
        )
    count = _check_non_negative("chunk_count", request.chunk_count) or 1
    if not 0 <= request.chunk_index < count:
        raise MalformedRequestError(
            "chunk_index",
            f"is {request.chunk_index}; with chunk_count {count} it must be 0..{count - 1}",
        )
    return TopicUpdate(chunk_index=request.chunk_index, chunk_count=count)


# ---------------------------------------------------------------------- conversion


def _broker_data_pb(data: BrokerData) -> common_pb2.BrokerData:
    return common_pb2.BrokerData(
        cluster=data.cluster,
        broker_name=data.broker_name,
        broker_addrs=dict(data.broker_addrs),
        master_epoch=data.master_epoch,
    )


def _live_info_pb(info: BrokerLiveInfo) -> nameserver_pb2.BrokerLiveInfo:
    return nameserver_pb2.BrokerLiveInfo(
        broker_addr=info.broker.broker_addr,
        cluster_name=info.broker.cluster,
        broker_name=info.broker.broker_name,
        broker_id=info.broker.broker_id,
        last_update_timestamp_ms=info.last_update_timestamp_ms,
        heartbeat_timeout_ms=info.heartbeat_timeout_ms,
        data_version=common_pb2.DataVersion(
            timestamp_ms=info.data_version.timestamp_ms, counter=info.data_version.counter
        ),
    )


# ------------------------------------------------------------------------ servicer


class NameServerServicer(nameserver_pb2_grpc.NameServerServicer):
    """Adapts the NameServer gRPC service to a :class:`RouteTable`."""

    def __init__(self, route_table: RouteTable) -> None:
        self._route_table = route_table

    @_rpc
    async def RegisterBroker(
        self,
        request: nameserver_pb2.RegisterBrokerRequest,
        context: grpc.aio.ServicerContext,
    ) -> nameserver_pb2.RegisterBrokerResponse:
        broker = _broker_identity(request)
        data_version = _data_version(request)
        timeout_ms = _check_non_negative("heartbeat_timeout_ms", request.heartbeat_timeout_ms)
        v2_addr = request.grpc_v2_addr and _check_addr("grpc_v2_addr", request.grpc_v2_addr)
        ha_addr = request.ha_addr and _check_addr("ha_addr", request.ha_addr)
        result = self._route_table.register_broker(
            broker,
            data_version,
            _topic_configs(request),
            heartbeat_timeout_ms=timeout_ms or None,
            grpc_v2_addr=v2_addr,
            ha_addr=ha_addr,
            master_epoch=_check_non_negative("master_epoch", request.master_epoch),
            update=_topic_update(request),
        )
        return nameserver_pb2.RegisterBrokerResponse(
            master_addr=result.master_addr,
            topic_configs_accepted=result.topic_configs_accepted,
            master_ha_addr=result.master_ha_addr,
            master_epoch=result.master_epoch,
            stale_master=result.stale_master,
            full_table_needed=result.full_table_needed,
        )

    @_rpc
    async def UnregisterBroker(
        self,
        request: nameserver_pb2.UnregisterBrokerRequest,
        context: grpc.aio.ServicerContext,
    ) -> nameserver_pb2.UnregisterBrokerResponse:
        removed = self._route_table.unregister_broker(_broker_identity(request))
        return nameserver_pb2.UnregisterBrokerResponse(was_registered=removed)

    @_rpc
    async def GetRouteInfoByTopic(
        self,
        request: nameserver_pb2.GetRouteInfoByTopicRequest,
        context: grpc.aio.ServicerContext,
    ) -> nameserver_pb2.GetRouteInfoByTopicResponse:
        problem = check_topic(request.topic)
        if problem is not None:
            raise MalformedRequestError("topic", problem)
        route = self._route_table.get_route(request.topic)
        if route is None:
            raise TopicNotFoundError(request.topic)
        return nameserver_pb2.GetRouteInfoByTopicResponse(
            route=common_pb2.TopicRouteData(
                queue_datas=[
                    common_pb2.QueueData(
                        broker_name=q.broker_name,
                        read_queue_nums=q.read_queue_nums,
                        write_queue_nums=q.write_queue_nums,
                        perm=q.perm,
                    )
                    for q in route.queue_datas
                ],
                broker_datas=[_broker_data_pb(b) for b in route.broker_datas],
            ),
            grpc_v2_addrs=dict(route.grpc_v2_addrs),
        )

    @_rpc
    async def GetAllTopicList(
        self,
        request: nameserver_pb2.GetAllTopicListRequest,
        context: grpc.aio.ServicerContext,
    ) -> nameserver_pb2.GetAllTopicListResponse:
        return nameserver_pb2.GetAllTopicListResponse(topics=self._route_table.topics())

    @_rpc
    async def GetTopicRoutes(
        self,
        request: nameserver_pb2.GetTopicRoutesRequest,
        context: grpc.aio.ServicerContext,
    ) -> nameserver_pb2.GetTopicRoutesResponse:
        missing: list[str] = []
        next_after = ""
        if request.names:
            if len(request.names) > MAX_ROUTES_PER_CALL:
                raise MalformedRequestError(
                    "names",
                    f"has {len(request.names)} topics; ask for "
                    f"at most {MAX_ROUTES_PER_CALL} a call",
                )
            for name in request.names:
                problem = check_topic(name)
                if problem is not None:
                    raise MalformedRequestError("names", f"topic {name[:80]!r}: {problem}")
            rows, brokers, missing = self._route_table.routes_of(request.names)
        else:
            limit = _check_non_negative("limit", request.limit) or TOPIC_PAGE_SIZE
            if limit > MAX_TOPIC_PAGE_SIZE:
                raise MalformedRequestError(
                    "limit", f"is {limit}; ask for at most {MAX_TOPIC_PAGE_SIZE} topics per page"
                )
            rows, brokers, next_after = self._route_table.topic_page(request.start_after, limit)
        return nameserver_pb2.GetTopicRoutesResponse(
            topics=[
                nameserver_pb2.TopicQueues(
                    topic=topic,
                    queue_datas=[
                        common_pb2.QueueData(
                            broker_name=q.broker_name,
                            read_queue_nums=q.read_queue_nums,
                            write_queue_nums=q.write_queue_nums,
                            perm=q.perm,
                        )
                        for q in queues
                    ],
                )
                for topic, queues in rows
            ],
            brokers={n: _broker_data_pb(b) for n, b in brokers.items()},
            next_start_after=next_after,
            total_topics=self._route_table.topic_count,
            missing=missing,
        )

    @_rpc
    async def GetBrokerClusterInfo(
        self,
        request: nameserver_pb2.GetBrokerClusterInfoRequest,
        context: grpc.aio.ServicerContext,
    ) -> nameserver_pb2.GetBrokerClusterInfoResponse:
        info = self._route_table.cluster_info()
        return nameserver_pb2.GetBrokerClusterInfoResponse(
            broker_addr_table={n: _broker_data_pb(b) for n, b in info.broker_addr_table.items()},
            cluster_addr_table={
                c: nameserver_pb2.ClusterBrokerNames(broker_names=names)
                for c, names in info.cluster_addr_table.items()
            },
            live_brokers=[_live_info_pb(i) for i in info.live_brokers],
        )
