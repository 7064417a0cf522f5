"""RouteResolver: which brokers serve a topic, and where their v2 endpoints are.

RocketMQ 5's ``QueryRoute`` and ``QueryAssignment`` answer with every broker
serving the topic, at the address where that broker serves MessagingService;
a client then sends, receives and acks at each queue's own broker. PocketMQ
has no proxy: every broker serves its own queues, so the route comes from the
nameserver (``GetRouteInfoByTopic``), whose answer carries each broker's v2
address (``grpc_v2_addr`` of its registration). Brokers that registered none
are left out: a RocketMQ 5 client could not reach them.

A topic no nameserver knows yet is routed like the auto-create template
``TBW102``, as RocketMQ 4 clients do: the brokers that would create it on the
first send. Without a nameserver (or when none answers) the route is this
broker alone, from its own topic table.

The nameserver's route carries no FIFO flag; whether a topic is FIFO (its
``order`` flag) is read from this broker's table, which the brokers of one
cluster share.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

import grpc

from pocketmq.broker.errors import ResourceNotFoundError
from pocketmq.broker.namesrv_client import namesrv_channel, signed
from pocketmq.broker.topic_config import AUTO_CREATE_TOPIC_KEY_TOPIC, TopicConfigManager
from pocketmq.common.auth import Credentials
from pocketmq.common.configfile import parse_host_port
from pocketmq.common.failover import AddressRing
from pocketmq.v1 import nameserver_pb2, nameserver_pb2_grpc

__all__ = ["BrokerRoute", "RouteResolver"]

log = logging.getLogger(__name__)

MASTER_ID = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRoute:
    """One broker's queues of a topic and where a RocketMQ 5 client reaches it."""

    broker_name: str
    host: str
    port: int
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    order: bool


_ROUTE = "/pocketmq.v1.NameServer/GetRouteInfoByTopic"


class _NoV2Route(Exception):
    """A nameserver routes the topic, but to no broker that serves RocketMQ 5 clients."""


def _try_next(exc: Exception) -> bool:
    return isinstance(exc, grpc.aio.AioRpcError | _NoV2Route)


class RouteResolver:
    def __init__(
        self,
        namesrv_addrs: list[str],
        topics: TopicConfigManager,
        *,
        broker_name: str,
        v2_host: str,
        v2_port: int,
        timeout_s: float = 3.0,
        tls_ca_file: str = "",
        credentials: Credentials | None = None,
    ) -> None:
        self._credentials = credentials
        self._channels = [(addr, namesrv_channel(addr, tls_ca_file)) for addr in namesrv_addrs]
        self._stubs = {addr: nameserver_pb2_grpc.NameServerStub(ch) for addr, ch in self._channels}
        self._nameservers = AddressRing(list(self._stubs), sticky=False)  # in the given order
        self._topics = topics
        self._broker_name = broker_name
        self._v2 = (v2_host, v2_port)
        self._timeout_s = timeout_s

    async def close(self) -> None:
        for _, channel in self._channels:
            await channel.close()

    async def route(self, topic: str) -> list[BrokerRoute]:
        """The brokers serving *topic*, sorted by name; ResourceNotFoundError when none does."""
        order = self._order(topic)

        async def ask(addr: str) -> list[BrokerRoute] | None:
            try:
                response = await self._lookup(self._stubs[addr], topic)
            except grpc.aio.AioRpcError as exc:
                log.warning(
                    "route of %s: nameserver %s answered %s: %s; trying the next",
                    topic,
                    addr,
                    exc.code().name,
                    exc.details(),
                )
                raise
            if response is None:
                return None  # no nameserver knows the topic nor the template
            routes = _routes(response, order)
            if not routes:
                raise _NoV2Route(addr)  # none with a v2 address there: ask the next
            return routes

        if self._nameservers:
            with contextlib.suppress(grpc.aio.AioRpcError, _NoV2Route):
                routes = await self._nameservers.first_answer(ask, retry=_try_next)
                if routes is not None:
                    return routes
        return self._local(topic, order)

    async def _lookup(
        self,
        stub: nameserver_pb2_grpc.NameServerStub,
        topic: str,
    ) -> nameserver_pb2.GetRouteInfoByTopicResponse | None:
        for name in (topic, AUTO_CREATE_TOPIC_KEY_TOPIC):
            try:
                request = nameserver_pb2.GetRouteInfoByTopicRequest(topic=name)
                return await stub.GetRouteInfoByTopic(
                    request,
                    timeout=self._timeout_s,
                    metadata=signed(self._credentials, _ROUTE, request),
                )
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.NOT_FOUND:
                    raise
        return None

    def _order(self, topic: str) -> bool:
        config = self._topics.get(topic)
        return config is not None and config.order

    def _local(self, topic: str, order: bool) -> list[BrokerRoute]:
        config = self._topics.get(topic)
        if config is None and self._topics.auto_create_enable:
            config = self._topics.get(AUTO_CREATE_TOPIC_KEY_TOPIC)
        if config is None:
            raise ResourceNotFoundError(
                f"topic {topic!r} does not exist on any broker; create it first",
                reason="TOPIC_NOT_EXIST",
            )
        return [
            BrokerRoute(
                broker_name=self._broker_name,
                host=self._v2[0],
                port=self._v2[1],
                read_queue_nums=config.read_queue_nums,
                write_queue_nums=config.write_queue_nums,
                perm=config.perm,
                order=order,
            )
        ]


def _routes(response: nameserver_pb2.GetRouteInfoByTopicResponse, order: bool) -> list[BrokerRoute]:
    masters = {
        b.broker_name: b.broker_addrs.get(MASTER_ID, "") for b in response.route.broker_datas
    }
    routes = []
    for queue_data in response.route.queue_datas:
        v2_addr = response.grpc_v2_addrs.get(masters.get(queue_data.broker_name, ""), "")
        if not v2_addr:
            continue
        try:
            host, port = parse_host_port(v2_addr)
        except ValueError:
            log.warning(
                "broker %s registered an unusable v2 address %r; left out of routes",
                queue_data.broker_name,
                v2_addr,
            )
            continue
        routes.append(
            BrokerRoute(
                broker_name=queue_data.broker_name,
                host=host,
                port=port,
                read_queue_nums=queue_data.read_queue_nums,
                write_queue_nums=queue_data.write_queue_nums,
                perm=queue_data.perm,
                order=order,
            )
        )
    return sorted(routes, key=lambda r: r.broker_name)
