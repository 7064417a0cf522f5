"""The broker's gRPC client of one nameserver (REGISTER_BROKER, UNREGISTER_BROKER).

This module is the only broker code that sees the nameserver's protobuf; it
takes and returns the plain :class:`BrokerRegistration` record, so that
:mod:`.registration` can be tested with a fake client.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import grpc

from pocketmq.broker.topic_config import BrokerTopicConfig, DataVersion
from pocketmq.common.auth import Credentials, signed_metadata
from pocketmq.common.errors import PocketMQError
from pocketmq.v1 import common_pb2, nameserver_pb2, nameserver_pb2_grpc

__all__ = [
    "BrokerRegistration",
    "GrpcNameserverClient",
    "NameserverCallError",
    "RegisterReply",
    "topic_config_pb",
]


class NameserverCallError(PocketMQError):
    """A nameserver call failed; the message names the nameserver and why."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRegistration:
    cluster_name: str
    broker_name: str
    broker_addr: str  # "host:port" clients reach
    broker_id: int
    topic_configs: list[BrokerTopicConfig] = field(default_factory=list)
    data_version: DataVersion = field(default_factory=DataVersion)
    heartbeat_timeout_ms: int = 0  # 0 = the nameserver's default
    grpc_v2_addr: str = ""  # "host:port" of RocketMQ 5's MessagingService; "" = none
    ha_addr: str = ""  # "host:port" of the replication service; "" = none
    master_epoch: int = 0  # the master term this broker holds or follows
    # None: topic_configs is the whole table (chunk chunk_index of chunk_count);
    # a version: a delta on it (topic_configs changed, deleted_topics deleted since)
    base_version: DataVersion | None = None
    deleted_topics: list[str] = field(default_factory=list)
    chunk_index: int = 0
    chunk_count: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterReply:
    """A nameserver's answer to a registration."""

    topic_configs_accepted: bool = False
    master_addr: str = ""  # for a replica: its live master
    master_ha_addr: str = ""  # for a replica: where to replicate from
    master_epoch: int = 0  # the highest master epoch the nameserver knows
    stale_master: bool = False  # refused: a master of an older epoch (fenced)
    full_table_needed: bool = False  # a delta on a base it does not hold: send the table
    request_bytes: int = 0  # size of the registration sent (for stats)


def topic_config_pb(tc: BrokerTopicConfig) -> common_pb2.TopicConfig:
    """A topic config as the wire carries it (registrations, GetAllTopicConfig)."""
    return common_pb2.TopicConfig(
        topic_name=tc.topic_name,
        read_queue_nums=tc.read_queue_nums,
        write_queue_nums=tc.write_queue_nums,
        perm=tc.perm,
        order=tc.order,
        topic_sys_flag=tc.topic_sys_flag,
    )


def namesrv_channel(addr: str, tls_ca_file: str = "") -> grpc.aio.Channel:
    """A channel to a nameserver: TLS, trusting *tls_ca_file*, when one is given."""
    if not tls_ca_file:
        return grpc.aio.insecure_channel(addr)
    with open(tls_ca_file, "rb") as f:
        return grpc.aio.secure_channel(addr, grpc.ssl_channel_credentials(f.read()))


def signed(
    credentials: Credentials | None, method: str, request: Any
) -> tuple[tuple[str, str], ...] | None:
    """Call metadata signing *request* (common/auth.py), or None without credentials."""
    return None if credentials is None else signed_metadata(credentials, method, request)


class GrpcNameserverClient:
    def __init__(
        self, addr: str, *, tls_ca_file: str = "", credentials: Credentials | None = None
    ) -> None:
        self.addr = addr
        self._credentials = credentials
        self._channel = namesrv_channel(addr, tls_ca_file)
        self._stub = nameserver_pb2_grpc.NameServerStub(self._channel)

    async def register(self, reg: BrokerRegistration, *, timeout_s: float) -> RegisterReply:
        """Register; the reply says whether the topic configs were taken (a new version)
        and, for a replica, where its master is."""
        request = nameserver_pb2.RegisterBrokerRequest(
            cluster_name=reg.cluster_name,
            broker_name=reg.broker_name,
            broker_addr=reg.broker_addr,
            broker_id=reg.broker_id,
            topic_configs=[topic_config_pb(tc) for tc in reg.topic_configs],
            data_version=common_pb2.DataVersion(
                timestamp_ms=reg.data_version.timestamp_ms, counter=reg.data_version.counter
            ),
            heartbeat_timeout_ms=reg.heartbeat_timeout_ms,
            grpc_v2_addr=reg.grpc_v2_addr,
            ha_addr=reg.ha_addr,
            master_epoch=reg.master_epoch,
            deleted_topics=reg.deleted_topics,
            chunk_index=reg.chunk_index,
            chunk_count=reg.chunk_count if reg.chunk_count > 1 else 0,
        )
        if reg.base_version is not None:
            request.topic_table_kind = nameserver_pb2.TOPIC_TABLE_DELTA
            request.base_version.timestamp_ms = reg.base_version.timestamp_ms
            request.base_version.counter = reg.base_version.counter
        try:
            response = await self._stub.RegisterBroker(
                request,
                timeout=timeout_s,
                metadata=signed(
                    self._credentials, "/pocketmq.v1.NameServer/RegisterBroker", request
                ),
            )
        except grpc.aio.AioRpcError as exc:
            raise NameserverCallError(
                f"nameserver {self.addr}: {exc.code().name}: {exc.details()}"
            ) from None
        return RegisterReply(
            topic_configs_accepted=response.topic_configs_accepted,
            master_addr=response.master_addr,
            master_ha_addr=response.master_ha_addr,
            master_epoch=response.master_epoch,
            stale_master=response.stale_master,
            full_table_needed=response.full_table_needed,
            request_bytes=request.ByteSize(),
        )

    async def unregister(self, reg: BrokerRegistration, *, timeout_s: float) -> bool:
        """Unregister; True when the nameserver knew this broker."""
        request = nameserver_pb2.UnregisterBrokerRequest(
            cluster_name=reg.cluster_name,
            broker_name=reg.broker_name,
            broker_addr=reg.broker_addr,
            broker_id=reg.broker_id,
        )
        try:
            response = await self._stub.UnregisterBroker(
                request,
                timeout=timeout_s,
                metadata=signed(
                    self._credentials, "/pocketmq.v1.NameServer/UnregisterBroker", request
                ),
            )
        except grpc.aio.AioRpcError as exc:
            raise NameserverCallError(
                f"nameserver {self.addr}: {exc.code().name}: {exc.details()}"
            ) from None
        return bool(response.was_registered)

    async def close(self) -> None:
        await self._channel.close()
