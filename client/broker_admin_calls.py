"""The operators' calls to one broker: topics, groups, message look-ups, runtime figures.

:class:`BrokerAdminCalls` is a part of
:class:`~pocketmq.client.broker_client.BrokerClient` (which makes the call and
maps its errors); :class:`~pocketmq.client.admin.AdminClient` and the CLI use
them through ``admin.broker(addr)``. Each returns the rows of
:mod:`.admin_model`, naming the broker they came from.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from pocketmq.client.admin_model import (
    ConsumerGroup,
    QueueProgress,
    QueueReset,
    QueueStatus,
    TopicConfig,
)
from pocketmq.v1 import broker_pb2 as bpb
from pocketmq.v1 import common_pb2

__all__ = ["BrokerAdminCalls"]


class BrokerAdminCalls:
    """The admin RPCs of :class:`~pocketmq.client.broker_client.BrokerClient`."""

    addr: str
    #: (rpc, request, timeout_s) -> the reply; errors mapped (BrokerClient._call)
    _call: Callable[[str, object, float | None], Awaitable[Any]]

    async def create_topic(self, config: TopicConfig, *, timeout_s: float = 5.0) -> None:
        await self._call(
            "CreateTopic", bpb.CreateTopicRequest(topic_config=_topic_config_pb(config)), timeout_s
        )

    async def update_topic(self, config: TopicConfig, *, timeout_s: float = 5.0) -> None:
        await self._call(
            "UpdateTopic", bpb.UpdateTopicRequest(topic_config=_topic_config_pb(config)), timeout_s
        )

    async def delete_topic(self, topic: str, *, timeout_s: float = 5.0) -> None:
        await self._call("DeleteTopic", bpb.DeleteTopicRequest(topic=topic), timeout_s)

    async def create_topics(
        self,
        configs: Sequence[TopicConfig],
        *,
        update_existing: bool = False,
        timeout_s: float = 30.0,
    ) -> tuple[int, int, int]:
        """Create many topics in one call, all or none; (created, updated, unchanged)."""
        resp = await self._call(
            "CreateTopics",
            bpb.CreateTopicsRequest(
                topic_configs=[_topic_config_pb(c) for c in configs],
                update_existing=update_existing,
            ),
            timeout_s,
        )
        return resp.created, resp.updated, resp.unchanged

    async def delete_topics(
        self, topics: Sequence[str], *, ignore_missing: bool = False, timeout_s: float = 30.0
    ) -> int:
        """Delete many topics in one call, all or none; how many were deleted."""
        resp = await self._call(
            "DeleteTopics",
            bpb.DeleteTopicsRequest(topics=list(topics), ignore_missing=ignore_missing),
            timeout_s,
        )
        return int(resp.deleted)

    async def topic_configs(self, *, timeout_s: float = 5.0) -> dict[str, TopicConfig]:
        resp = await self._call("GetAllTopicConfig", bpb.GetAllTopicConfigRequest(), timeout_s)
        return {
            tc.topic_name: TopicConfig(
                topic=tc.topic_name,
                read_queue_nums=tc.read_queue_nums,
                write_queue_nums=tc.write_queue_nums,
                perm=tc.perm,
                order=tc.order,
            )
            for tc in resp.topic_configs
        }

    async def topic_status(
        self, topic: str, *, broker_name: str, timeout_s: float = 5.0
    ) -> list[QueueStatus]:
        resp = await self._call("GetTopicStatus", bpb.GetTopicStatusRequest(topic=topic), timeout_s)
        return [
            QueueStatus(
                broker_name=broker_name,
                queue_id=q.queue_id,
                min_offset=q.min_offset,
                max_offset=q.max_offset,
                last_store_timestamp_ms=q.last_store_timestamp_ms,
            )
            for q in resp.queues
        ]

    async def consume_progress(
        self, group: str, topic: str = "", *, broker_name: str, timeout_s: float = 5.0
    ) -> list[QueueProgress]:
        resp = await self._call(
            "GetConsumeProgress",
            bpb.GetConsumeProgressRequest(consumer_group=group, topic=topic),
            timeout_s,
        )
        return [
            QueueProgress(
                topic=q.topic,
                broker_name=broker_name,
                queue_id=q.queue_id,
                broker_offset=q.broker_offset,
                consumer_offset=q.consumer_offset,
                lag=q.lag,
                last_timestamp_ms=q.last_timestamp_ms,
            )
            for q in resp.queues
        ]

    async def consumer_groups(
        self, *, broker_name: str, timeout_s: float = 5.0
    ) -> list[ConsumerGroup]:
        resp = await self._call(
            "GetAllConsumerGroups", bpb.GetAllConsumerGroupsRequest(), timeout_s
        )
        return [
            ConsumerGroup(
                group=g.group,
                client_ids=list(g.client_ids),
                consume_type=_CONSUME_TYPE_NAMES.get(g.consume_type, ""),
                message_model=_MESSAGE_MODEL_NAMES.get(g.message_model, ""),
                subscribed_topics=list(g.subscribed_topics),
                offset_topics=list(g.offset_topics),
                brokers=[broker_name],
            )
            for g in resp.groups
        ]

    async def reset_consumer_offset(
        self,
        group: str,
        topic: str,
        *,
        timestamp_ms: int | None,
        latest: bool = False,
        broker_name: str,
        timeout_s: float = 5.0,
    ) -> tuple[list[QueueReset], list[str]]:
        """Move *group* on *topic*: to *timestamp_ms*, or (None) the earliest or latest."""
        if timestamp_ms is not None:
            position = bpb.RESET_TO_TIMESTAMP
        else:
            position = bpb.RESET_TO_LATEST if latest else bpb.RESET_TO_EARLIEST
        resp = await self._call(
            "ResetConsumerOffset",
            bpb.ResetConsumerOffsetRequest(
                consumer_group=group, topic=topic, position=position, timestamp_ms=timestamp_ms or 0
            ),
            timeout_s,
        )
        return (
            [
                QueueReset(
                    broker_name=broker_name,
                    queue_id=q.queue_id,
                    previous_offset=q.previous_offset,
                    offset=q.offset,
                )
                for q in resp.queues
            ],
            list(resp.notified_client_ids),
        )

    async def query_message(
        self,
        topic: str,
        key: str,
        *,
        max_num: int = 0,
        begin_timestamp_ms: int = 0,
        end_timestamp_ms: int = 0,
        timeout_s: float = 5.0,
    ) -> bytes:
        """Stored records of *topic* indexed under *key* (KEYS or UNIQ_KEY), newest first."""
        resp = await self._call(
            "QueryMessage",
            bpb.QueryMessageRequest(
                topic=topic,
                key=key,
                max_num=max_num,
                begin_timestamp_ms=begin_timestamp_ms,
                end_timestamp_ms=end_timestamp_ms,
            ),
            timeout_s,
        )
        return bytes(resp.records)

    async def view_message(self, offset_msg_id: str, *, timeout_s: float = 5.0) -> bytes:
        """The stored record an offset message id names."""
        resp = await self._call(
            "ViewMessage", bpb.ViewMessageRequest(offset_msg_id=offset_msg_id), timeout_s
        )
        return bytes(resp.record)

    async def runtime_info(self, *, timeout_s: float = 5.0) -> dict[str, str]:
        resp = await self._call(
            "GetBrokerRuntimeInfo", bpb.GetBrokerRuntimeInfoRequest(), timeout_s
        )
        return dict(resp.table)

    async def broker_config(self, *, timeout_s: float = 5.0) -> dict[str, str]:
        resp = await self._call("GetBrokerConfig", bpb.GetBrokerConfigRequest(), timeout_s)
        return dict(resp.table)


_CONSUME_TYPE_NAMES = {bpb.CONSUME_PASSIVELY: "push", bpb.CONSUME_ACTIVELY: "pull"}
_MESSAGE_MODEL_NAMES = {bpb.CLUSTERING: "clustering", bpb.BROADCASTING: "broadcasting"}


def _topic_config_pb(config: TopicConfig) -> common_pb2.TopicConfig:
    return common_pb2.TopicConfig(
        topic_name=config.topic,
        read_queue_nums=config.read_queue_nums,
        write_queue_nums=config.write_queue_nums,
        perm=config.perm,
        order=config.order,
    )
