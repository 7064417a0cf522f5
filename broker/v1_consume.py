"""The v1 broker's consumer-side RPCs: consumer offsets and queue offsets, orderly
consumption's queue locks, and clients' heartbeats, unregistration and command stream."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import grpc

from pocketmq.broker.client_manager import (
    ConsumerRegistration,
    MessageModel,
)
from pocketmq.broker.errors import (
    BrokerError,
    IllegalArgumentError,
)
from pocketmq.broker.v1_authz import (
    authorize_heartbeat,
    check_subscribe,
)
from pocketmq.broker.v1_rpc import (
    ServicerParts,
    _abort,
    _check_client_id,
    _check_given,
    _check_names,
    _command_pb,
    _consumer,
    _queue_refs,
    _queues,
    _rpc,
)
from pocketmq.security.interceptor import current_owner
from pocketmq.v1 import broker_pb2 as pb

__all__ = ["ConsumeRpcs"]

log = logging.getLogger(__name__)


class ConsumeRpcs(ServicerParts):
    """Offsets (query, commit, min / max, by timestamp), LockBatchMQ / UnlockBatchMQ,
    HeartBeat, UnregisterClient, GetConsumerListByGroup, ClientChannel."""

    # -- offsets ------------------------------------------------------------------------
    @_rpc
    async def QueryConsumerOffset(
        self,
        request: pb.QueryConsumerOffsetRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.QueryConsumerOffsetResponse:
        _check_names(topic=request.topic, group=request.consumer_group)
        offset = self._offsets.query(request.consumer_group, request.topic, request.queue_id)
        return pb.QueryConsumerOffsetResponse(offset=offset)

    @_rpc
    async def UpdateConsumerOffset(
        self,
        request: pb.UpdateConsumerOffsetRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.UpdateConsumerOffsetResponse:
        _check_names(topic=request.topic, group=request.consumer_group)
        self._admin.check_queue(request.topic, request.queue_id)
        # The real end, not the visible max: a new SYNC master's gate may stand below an
        # offset the consumer read (and the master held) before the election.
        max_offset = self._admin.end_offset(request.topic, request.queue_id)
        if request.offset > max_offset:
            raise IllegalArgumentError(
                f"offset {request.offset} of {request.topic}:{request.queue_id} is past the "
                f"queue's max offset {max_offset}; commit the next offset to consume, at most "
                "the max offset",
                reason="OFFSET_PAST_MAX",
            )
        if (
            self._admin.reset_fence(request.consumer_group, request.topic, request.queue_id)
            is not None
        ):
            log.debug(
                "offset %d of %s:%d for group %s predates an offset reset; ignored",
                request.offset,
                request.topic,
                request.queue_id,
                request.consumer_group,
            )
            return pb.UpdateConsumerOffsetResponse()
        self._offsets.commit(
            request.consumer_group, request.topic, request.queue_id, request.offset
        )
        return pb.UpdateConsumerOffsetResponse()

    @_rpc
    async def GetMinOffset(
        self, request: pb.GetQueueOffsetRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetQueueOffsetResponse:
        return pb.GetQueueOffsetResponse(
            offset=self._admin.min_offset(request.topic, request.queue_id)
        )

    @_rpc
    async def GetMaxOffset(
        self, request: pb.GetQueueOffsetRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetQueueOffsetResponse:
        return pb.GetQueueOffsetResponse(
            offset=self._admin.max_offset(request.topic, request.queue_id)
        )

    @_rpc
    async def SearchOffsetByTimestamp(
        self,
        request: pb.SearchOffsetByTimestampRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.GetQueueOffsetResponse:
        return pb.GetQueueOffsetResponse(
            offset=self._admin.offset_by_timestamp(
                request.topic, request.queue_id, request.timestamp_ms
            )
        )

    # -- orderly consumption ------------------------------------------------------------
    @_rpc
    async def LockBatchMQ(
        self, request: pb.LockBatchMQRequest, context: grpc.aio.ServicerContext
    ) -> pb.LockBatchMQResponse:
        _check_names(group=request.group)
        _check_client_id(request.client_id)
        queues = _queues(request.queues)
        check_subscribe(*{q.topic for q in queues})
        locked = self._locks.try_lock_batch(request.group, request.client_id, queues)
        return pb.LockBatchMQResponse(locked=_queue_refs(locked))

    @_rpc
    async def UnlockBatchMQ(
        self, request: pb.UnlockBatchMQRequest, context: grpc.aio.ServicerContext
    ) -> pb.UnlockBatchMQResponse:
        _check_names(group=request.group)
        _check_client_id(request.client_id)
        queues = _queues(request.queues)
        check_subscribe(*{q.topic for q in queues})
        self._locks.unlock_batch(request.group, request.client_id, queues)
        return pb.UnlockBatchMQResponse()

    # -- clients ------------------------------------------------------------------------
    @_rpc
    async def HeartBeat(
        self, request: pb.HeartBeatRequest, context: grpc.aio.ServicerContext
    ) -> pb.HeartBeatResponse:
        _check_client_id(request.client_id)
        for group in request.producer_groups:
            _check_names(group=group)
        consumers = [_consumer(c, self._pull.filters) for c in request.consumers if not c.unchanged]
        # Sent as a fingerprint only: its topics were checked when it was sent whole,
        # by the same owner (check_owner); the group is checked again here.
        unchanged = [(c.group, c.fingerprint) for c in request.consumers if c.unchanged]
        for group, _fingerprint in unchanged:
            _check_names(group=group)
        authorize_heartbeat(
            request.producer_groups,
            [*consumers, *(ConsumerRegistration(group=g) for g, _ in unchanged)],
        )
        owner = current_owner()
        self._clients.check_owner(request.client_id, owner)
        for consumer in consumers:
            if consumer.message_model is MessageModel.CLUSTERING:
                # Its retry topic exists before anything fails, as RocketMQ's heartbeat does.
                self._send_back.ensure_retry_topic(
                    consumer.group, max_topics=self._max_auto_retry_topics, requester=owner
                )
        unknown = self._clients.heartbeat(
            request.client_id,
            producer_groups=request.producer_groups,
            consumers=consumers,
            unchanged=unchanged,
            owner=owner,
        )
        return pb.HeartBeatResponse(unknown_groups=unknown, keeps_fingerprints=True)

    @_rpc
    async def UnregisterClient(
        self,
        request: pb.UnregisterClientRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.UnregisterClientResponse:
        _check_client_id(request.client_id)
        _check_given(groups=(request.producer_group, request.consumer_group))
        self._clients.unregister(
            request.client_id,
            producer_group=request.producer_group,
            consumer_group=request.consumer_group,
            owner=current_owner(),
        )
        return pb.UnregisterClientResponse()

    @_rpc
    async def GetConsumerListByGroup(
        self,
        request: pb.GetConsumerListByGroupRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.GetConsumerListByGroupResponse:
        _check_names(group=request.consumer_group)
        return pb.GetConsumerListByGroupResponse(
            consumer_ids=self._clients.consumer_ids(request.consumer_group)
        )

    async def ClientChannel(
        self, request: pb.ClientChannelRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ServerCommand]:
        try:
            _check_client_id(request.client_id)
            channel = self._clients.open_channel(request.client_id, owner=current_owner())
        except BrokerError as exc:
            await _abort(context, exc)
            raise AssertionError("context.abort returned") from None  # pragma: no cover
        try:
            async for command in channel.commands():
                yield _command_pb(command)
        finally:
            self._clients.close_channel(channel)
