"""NameserverClient: routes, topic lists and cluster info from the nameservers.

Every call goes to the nameserver that answered last and, when that one does
not answer, to the next (:class:`~pocketmq.common.failover.AddressRing`); a
nameserver that answers "no such topic" is believed (RouteNotFoundError).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import grpc

from pocketmq.client.admin_model import BrokerInfo, ClusterInfo
from pocketmq.client.errors import RemoteError, RouteNotFoundError
from pocketmq.client.remote_errors import remote_error
from pocketmq.client.remote_values import _route
from pocketmq.client.route import QueueData, TopicRoute
from pocketmq.common.failover import AddressRing
from pocketmq.v1 import nameserver_pb2, nameserver_pb2_grpc

if TYPE_CHECKING:
    from pocketmq.client.remoting import Remoting

__all__ = ["NameserverClient"]


def _try_next(exc: Exception) -> bool:
    """A nameserver that failed the call (not one that said "no such topic")."""
    return isinstance(exc, RemoteError)


class NameserverClient:
    """Asks the nameservers, trying the next one when one does not answer
    (:class:`~pocketmq.common.failover.AddressRing`: the one that answered last first)."""

    def __init__(self, remoting: Remoting, addrs: Sequence[str], *, timeout_s: float = 3.0) -> None:
        if not addrs:
            raise ValueError("no nameserver address given")
        self._remoting = remoting
        self._ring = AddressRing(addrs)
        self._timeout_s = timeout_s

    async def get_route(self, topic: str) -> TopicRoute:
        """The route of *topic*; raises ``RouteNotFoundError`` when nobody serves it."""

        async def ask(addr: str) -> Any:
            stub = nameserver_pb2_grpc.NameServerStub(self._remoting.channel(addr))
            try:
                return await stub.GetRouteInfoByTopic(
                    nameserver_pb2.GetRouteInfoByTopicRequest(topic=topic), timeout=self._timeout_s
                )
            except grpc.aio.AioRpcError as exc:
                if exc.code() is grpc.StatusCode.NOT_FOUND:
                    raise RouteNotFoundError(topic, f"nameserver {addr}: {exc.details()}") from None
                raise remote_error(exc, addr, "GetRouteInfoByTopic") from None

        resp = await self._ring.first_answer(ask, retry=_try_next)
        return _route(topic, resp.route)

    async def get_routes(self, topics: Sequence[str]) -> tuple[dict[str, TopicRoute], list[str]]:
        """The routes of up to 1,000 *topics* in one call (GetTopicRoutes by names), and
        the topics nobody serves."""
        resp = await self._ask(
            "GetTopicRoutes", nameserver_pb2.GetTopicRoutesRequest(names=list(topics))
        )
        brokers = resp.brokers
        routes = {}
        for row in resp.topics:
            names = [q.broker_name for q in row.queue_datas]
            routes[row.topic] = TopicRoute(
                topic=row.topic,
                queue_datas=tuple(
                    QueueData(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm)
                    for q in row.queue_datas
                ),
                broker_addrs={n: dict(brokers[n].broker_addrs) for n in names if n in brokers},
                master_epochs={
                    n: brokers[n].master_epoch
                    for n in names
                    if n in brokers and brokers[n].master_epoch
                },
            )
        return routes, list(resp.missing)

    async def _ask(self, rpc: str, request: object) -> Any:
        """*rpc* answered by the first nameserver that answers."""

        async def ask(addr: str) -> Any:
            stub = nameserver_pb2_grpc.NameServerStub(self._remoting.channel(addr))
            try:
                return await getattr(stub, rpc)(request, timeout=self._timeout_s)
            except grpc.aio.AioRpcError as exc:
                raise remote_error(exc, addr, rpc) from None

        return await self._ring.first_answer(ask, retry=_try_next)

    async def cluster_info(self) -> ClusterInfo:
        """Live brokers and clusters (GET_BROKER_CLUSTER_INFO)."""
        resp = await self._ask("GetBrokerClusterInfo", nameserver_pb2.GetBrokerClusterInfoRequest())
        return ClusterInfo(
            brokers=[
                BrokerInfo(
                    cluster=b.cluster_name,
                    broker_name=b.broker_name,
                    broker_id=b.broker_id,
                    addr=b.broker_addr,
                    last_update_timestamp_ms=b.last_update_timestamp_ms,
                )
                for b in resp.live_brokers
            ],
            clusters={
                c: list(names.broker_names) for c, names in sorted(resp.cluster_addr_table.items())
            },
        )

    async def topic_list(self) -> list[str]:
        """Every topic a live broker serves, sorted (GET_ALL_TOPIC_LIST_FROM_NAMESERVER)."""
        resp = await self._ask("GetAllTopicList", nameserver_pb2.GetAllTopicListRequest())
        return list(resp.topics)

    async def topic_routes_page(
        self,
        start_after: str = "",
        limit: int = 0,
    ) -> tuple[list[tuple[str, list[QueueData]]], str]:
        """One page of topics with their queue data (GetTopicRoutes), and the name to
        continue after ("" after the last page)."""
        resp = await self._ask(
            "GetTopicRoutes",
            nameserver_pb2.GetTopicRoutesRequest(start_after=start_after, limit=limit),
        )
        return (
            [
                (
                    t.topic,
                    [
                        QueueData(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm)
                        for q in t.queue_datas
                    ],
                )
                for t in resp.topics
            ],
            resp.next_start_after,
        )
