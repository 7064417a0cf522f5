"""The message look-ups of :class:`~pocketmq.client.admin.AdminClient`.

Message look-ups answer :class:`~pocketmq.client.model.MessageExt`:

* an offset message id (store address + commit-log offset) is read straight
  from the broker it names (``ViewMessage``);
* a unique id (``UNIQ_KEY``, made by the producer) and a key are found through
  the index of every broker serving the topic (``QueryMessage``), which is why
  a unique id needs its topic. Each broker name is asked at its master, or, when
  the route lists none or it does not answer, at its replicas (lowest id first):
  they hold the same index;
* a queue and an offset are read with one pull (group ``TOOLS_CONSUMER``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from pocketmq.client.errors import NotFoundError, UnavailableError
from pocketmq.client.message_codec import decode_messages
from pocketmq.client.model import MessageExt, MessageQueue
from pocketmq.client.remoting import BrokerClient, PullStatus
from pocketmq.client.route import TopicRoute
from pocketmq.common.msgid import decode_offset_msg_id

__all__ = ["DEFAULT_QUERY_MAX", "TOOLS_CONSUMER_GROUP", "MessageAdmin"]

TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"  # RocketMQ's group for reads by admin tools
DEFAULT_QUERY_MAX = 32


class MessageAdmin:
    """Mixed into AdminClient, which provides ``broker``, ``cluster_info``,
    ``topic_route``, ``_route_masters`` and ``timeout_s``."""

    timeout_s: float
    broker: Callable[[str], BrokerClient]
    cluster_info: Callable[[], Awaitable[Any]]
    topic_route: Callable[[str], Awaitable[TopicRoute]]
    _route_masters: Callable[[str], Awaitable[dict[str, str]]]

    async def query_message(
        self,
        topic: str,
        key: str,
        *,
        max_num: int = DEFAULT_QUERY_MAX,
        begin_timestamp_ms: int = 0,
        end_timestamp_ms: int = 0,
    ) -> list[MessageExt]:
        """Messages of *topic* with *key* among their KEYS (``queryMsgByKey``), newest first."""
        found = await self._query_index(topic, key, max_num, begin_timestamp_ms, end_timestamp_ms)
        return [m for m in found if key in m.keys]

    async def query_by_unique_key(self, topic: str, msg_id: str) -> list[MessageExt]:
        """Messages of *topic* whose unique id (UNIQ_KEY) is *msg_id*
        (``queryMsgByUniqueKey``); more than one when a send was retried."""
        found = await self._query_index(topic, msg_id, DEFAULT_QUERY_MAX, 0, 0)
        return [m for m in found if m.msg_id == msg_id]

    async def _query_index(
        self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int
    ) -> list[MessageExt]:
        route = await self.topic_route(topic)

        async def one(name: str) -> list[MessageExt]:
            members = route.broker_addrs.get(name, {})
            last: UnavailableError | None = None
            for broker_id in sorted(members):  # the master (id 0) first
                try:
                    records = await self.broker(members[broker_id]).query_message(
                        topic,
                        key,
                        max_num=max_num,
                        begin_timestamp_ms=begin_ms,
                        end_timestamp_ms=end_ms,
                        timeout_s=self.timeout_s,
                    )
                except UnavailableError as exc:
                    if not exc.unreachable:
                        raise
                    last = exc
                    continue
                return decode_messages(records, name)
            if last is not None:
                raise last
            return []

        names = sorted(
            {qd.broker_name for qd in route.queue_datas if route.broker_addrs.get(qd.broker_name)}
        )
        rows = await asyncio.gather(*(one(n) for n in names))
        found = [m for per_broker in rows for m in per_broker]
        return sorted(found, key=lambda m: m.store_timestamp_ms, reverse=True)[:max_num]

    async def offset_msg_id_broker(self, msg_id: str) -> tuple[str, str] | None:
        """(broker name, address) of the live broker an offset message id names, or None
        when *msg_id* is not one (it may be a unique id)."""
        try:
            decoded = decode_offset_msg_id(msg_id)
        except ValueError:
            return None
        host = f"[{decoded.host}]" if ":" in decoded.host else decoded.host
        addr = f"{host}:{decoded.port}"
        name = (await self.cluster_info()).name_of(addr)
        return None if name is None else (name, addr)

    async def view_message(self, offset_msg_id: str) -> MessageExt:
        """The message an offset message id names, read from its broker (``viewMessage``)."""
        located = await self.offset_msg_id_broker(offset_msg_id)
        if located is None:
            raise NotFoundError(
                f"{offset_msg_id!r} does not name a live broker of this "
                "cluster; it is not an offset message id here"
            )
        name, addr = located
        record = await self.broker(addr).view_message(offset_msg_id, timeout_s=self.timeout_s)
        return decode_messages(record, name)[0]

    async def messages_by_id(self, msg_id: str, topic: str | None = None) -> list[MessageExt]:
        """``queryMsgById``: *msg_id* as an offset message id of a live broker, else as a
        unique id searched in *topic*'s index; ValueError when that needs a topic."""
        if await self.offset_msg_id_broker(msg_id) is not None:
            return [await self.view_message(msg_id)]
        if not topic:
            raise ValueError(
                f"{msg_id!r} is not the offset message id of a live broker, so it "
                "is taken as a unique id (UNIQ_KEY); unique ids are found through "
                "the index of the topic's brokers: give the topic"
            )
        found = await self.query_by_unique_key(topic, msg_id)
        if not found:
            raise NotFoundError(
                f"no message of topic {topic!r} has unique id {msg_id!r} (nor "
                "is it an offset message id of a live broker)"
            )
        return found

    async def message_at(self, queue: MessageQueue, offset: int) -> MessageExt:
        """The message at *offset* of *queue* (``queryMsgByOffset``); NotFoundError
        naming the queue's range when there is none."""
        masters = await self._route_masters(queue.topic)
        addr = masters.get(queue.broker_name)
        if addr is None:
            raise NotFoundError(
                f"broker {queue.broker_name!r} does not serve topic "
                f"{queue.topic!r}; it is on {', '.join(sorted(masters))}"
            )
        reply = await self.broker(addr).pull(
            group=TOOLS_CONSUMER_GROUP,
            queue=queue,
            offset=offset,
            max_messages=1,
            subscription="*",
            suspend_ms=0,
            timeout_s=self.timeout_s,
        )
        found = (
            decode_messages(reply.records, queue.broker_name)
            if reply.status is PullStatus.FOUND
            else []
        )
        if not found or found[0].queue_offset != offset:
            raise NotFoundError(
                f"no message at offset {offset} of {queue}; the queue holds "
                f"offsets {reply.min_offset}..{reply.max_offset - 1}"
            )
        return found[0]
