"""The v1 broker's admin RPCs: topics (one and in batches), topic status, consume
progress, runtime info and configuration, consumer groups and their offsets'
reset, consumer connections, and a manual promotion to master."""

from __future__ import annotations

import grpc

from pocketmq.broker.errors import (
    IllegalArgumentError,
)
from pocketmq.broker.namesrv_client import topic_config_pb
from pocketmq.broker.v1_rpc import (
    _CONSUME_TYPES,
    _MESSAGE_MODELS,
    _RESET_POSITIONS,
    ServicerParts,
    _check_names,
    _rpc,
    _topic_config,
)
from pocketmq.v1 import broker_pb2 as pb
from pocketmq.v1 import common_pb2

__all__ = ["AdminRpcs"]


class AdminRpcs(ServicerParts):
    """CreateTopic(s), UpdateTopic, DeleteTopic(s), GetAllTopicConfig, GetTopicStatus,
    GetConsumeProgress, GetBrokerRuntimeInfo / Config, GetAllConsumerGroups,
    ResetConsumerOffset, DeleteConsumerGroup, UpdateBrokerConfig, GetConsumerConnections,
    PromoteToMaster."""

    # -- admin --------------------------------------------------------------------------
    @_rpc
    async def CreateTopic(
        self, request: pb.CreateTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateTopicResponse:
        self._admin.create_topic(
            _topic_config(request.topic_config, default_queue_nums=self._default_queue_nums)
        )
        return pb.CreateTopicResponse()

    @_rpc
    async def UpdateTopic(
        self, request: pb.UpdateTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateTopicResponse:
        self._admin.update_topic(_topic_config(request.topic_config, default_queue_nums=None))
        return pb.UpdateTopicResponse()

    @_rpc
    async def DeleteTopic(
        self, request: pb.DeleteTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteTopicResponse:
        _check_names(topic=request.topic)
        self._admin.delete_topic(request.topic)
        return pb.DeleteTopicResponse()

    @_rpc
    async def CreateTopics(
        self, request: pb.CreateTopicsRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateTopicsResponse:
        result = self._admin.create_topics(
            [
                _topic_config(tc, default_queue_nums=self._default_queue_nums)
                for tc in request.topic_configs
            ],
            update_existing=request.update_existing,
        )
        version = self._admin.topic_data_version
        return pb.CreateTopicsResponse(
            created=len(result.created),
            updated=len(result.updated),
            unchanged=len(result.unchanged),
            data_version=common_pb2.DataVersion(
                timestamp_ms=version.timestamp_ms, counter=version.counter
            ),
        )

    @_rpc
    async def DeleteTopics(
        self, request: pb.DeleteTopicsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteTopicsResponse:
        for topic in request.topics:
            _check_names(topic=topic)
        deleted = self._admin.delete_topics(
            list(request.topics), ignore_missing=request.ignore_missing
        )
        version = self._admin.topic_data_version
        return pb.DeleteTopicsResponse(
            deleted=deleted,
            data_version=common_pb2.DataVersion(
                timestamp_ms=version.timestamp_ms, counter=version.counter
            ),
        )

    @_rpc
    async def GetAllTopicConfig(
        self,
        request: pb.GetAllTopicConfigRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.GetAllTopicConfigResponse:
        configs, version = self._admin.all_topics()
        return pb.GetAllTopicConfigResponse(
            topic_configs=[topic_config_pb(tc) for tc in configs],
            data_version=common_pb2.DataVersion(
                timestamp_ms=version.timestamp_ms, counter=version.counter
            ),
        )

    @_rpc
    async def GetTopicStatus(
        self, request: pb.GetTopicStatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetTopicStatusResponse:
        return pb.GetTopicStatusResponse(
            queues=[
                pb.QueueStatus(
                    queue_id=q.queue_id,
                    min_offset=q.min_offset,
                    max_offset=q.max_offset,
                    last_store_timestamp_ms=q.last_store_timestamp_ms,
                )
                for q in self._admin.topic_status(request.topic)
            ]
        )

    @_rpc
    async def GetConsumeProgress(
        self,
        request: pb.GetConsumeProgressRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.GetConsumeProgressResponse:
        progress = self._admin.consume_progress(request.consumer_group, request.topic)
        return pb.GetConsumeProgressResponse(
            total_lag=sum(p.lag for p in progress),
            queues=[
                pb.QueueProgress(
                    topic=p.topic,
                    queue_id=p.queue_id,
                    broker_offset=p.broker_offset,
                    consumer_offset=p.consumer_offset,
                    lag=p.lag,
                    last_timestamp_ms=p.last_timestamp_ms,
                )
                for p in progress
            ],
        )

    @_rpc
    async def GetBrokerRuntimeInfo(
        self,
        request: pb.GetBrokerRuntimeInfoRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.GetBrokerRuntimeInfoResponse:
        table = {**self._admin.runtime_info(), **self._transactions.figures()}
        for figures in self._figures:
            table.update(figures())
        return pb.GetBrokerRuntimeInfoResponse(table=table)

    @_rpc
    async def GetBrokerConfig(
        self, request: pb.GetBrokerConfigRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetBrokerConfigResponse:
        return pb.GetBrokerConfigResponse(table=self._admin.config_table())

    @_rpc
    async def GetAllConsumerGroups(
        self,
        request: pb.GetAllConsumerGroupsRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.GetAllConsumerGroupsResponse:
        return pb.GetAllConsumerGroupsResponse(
            groups=[
                pb.ConsumerGroupInfo(
                    group=g.group,
                    client_ids=g.client_ids,
                    consume_type=_CONSUME_TYPES.get(g.consume_type, pb.CONSUME_TYPE_UNSPECIFIED),
                    message_model=_MESSAGE_MODELS.get(
                        g.message_model, pb.MESSAGE_MODEL_UNSPECIFIED
                    ),
                    subscribed_topics=g.subscribed_topics,
                    offset_topics=g.offset_topics,
                )
                for g in self._admin.consumer_groups()
            ]
        )

    @_rpc
    async def ResetConsumerOffset(
        self,
        request: pb.ResetConsumerOffsetRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.ResetConsumerOffsetResponse:
        position = _RESET_POSITIONS.get(request.position)
        if position is None:
            raise IllegalArgumentError(
                f"position is {request.position}; give RESET_TO_EARLIEST "
                "(1), RESET_TO_LATEST (2), RESET_TO_TIMESTAMP (3) or "
                "RESET_TO_OFFSETS (4)"
            )
        moves, notified = self._admin.reset_offset(
            request.consumer_group,
            request.topic,
            position,
            request.timestamp_ms,
            dict(request.offsets),
        )
        return pb.ResetConsumerOffsetResponse(
            notified_client_ids=notified,
            queues=[
                pb.QueueOffsetReset(
                    queue_id=m.queue_id, previous_offset=m.previous_offset, offset=m.offset
                )
                for m in moves
            ],
        )

    @_rpc
    async def DeleteConsumerGroup(
        self,
        request: pb.DeleteConsumerGroupRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.DeleteConsumerGroupResponse:
        topics, retry_deleted = self._admin.delete_group(request.consumer_group)
        return pb.DeleteConsumerGroupResponse(
            offset_topics=topics, retry_topic_deleted=retry_deleted
        )

    @_rpc
    async def UpdateBrokerConfig(
        self,
        request: pb.UpdateBrokerConfigRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.UpdateBrokerConfigResponse:
        if self._update_config is None:
            raise IllegalArgumentError("this broker cannot change its configuration at runtime")
        return pb.UpdateBrokerConfigResponse(previous=self._update_config(dict(request.updates)))

    @_rpc
    async def GetConsumerConnections(
        self,
        request: pb.GetConsumerConnectionsRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.GetConsumerConnectionsResponse:
        return pb.GetConsumerConnectionsResponse(
            connections=[
                pb.ConsumerConnection(
                    client_id=client_id,
                    silent_ms=int(silent_s * 1000),
                    subscriptions=[f"{t}: {e}" for t, e in sorted(reg.subscriptions.items())],
                    consume_type=_CONSUME_TYPES.get(reg.consume_type, pb.CONSUME_TYPE_UNSPECIFIED),
                    message_model=_MESSAGE_MODELS.get(
                        reg.message_model, pb.MESSAGE_MODEL_UNSPECIFIED
                    ),
                )
                for client_id, reg, silent_s in self._admin.consumer_connections(
                    request.consumer_group
                )
            ]
        )

    @_rpc
    async def PromoteToMaster(
        self, request: pb.PromoteToMasterRequest, context: grpc.aio.ServicerContext
    ) -> pb.PromoteToMasterResponse:
        if self._promote is None:
            raise IllegalArgumentError(
                "this broker has no replication (ha_port is -1); it cannot be promoted"
            )
        if request.epoch < 0:
            raise IllegalArgumentError(
                f"epoch is {request.epoch}; give 0 (one above every epoch seen) or a larger epoch"
            )
        epoch, start, role = await self._promote(epoch=request.epoch, role=request.role)
        return pb.PromoteToMasterResponse(epoch=epoch, start_offset=start, role=role)
