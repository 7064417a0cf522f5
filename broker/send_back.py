"""SendBackProcessor: a consumer hands back a message it failed to consume.

RocketMQ's ``SendMessageProcessor.consumerSendMsgBack`` (CONSUMER_SEND_MSG_BACK).
The consumer names the message by its commit-log offset; the broker reads it
and stores a copy for the group, either to be tried again later or as dead::

    reconsume times + 1 > max reconsume times (0 = 16), or delay level < 0
        -> %DLQ%{group}, queue 0: never delivered by itself; properties
           DLQ_ORIGIN_TOPIC, DLQ_ORIGIN_MESSAGE_ID
    otherwise
        -> %RETRY%{group}, through the delay levels: level = 3 + reconsume times
           when the consumer says 0 (10 s, 30 s, 1 m, 2 m ... with the default
           levels), else the level it gives; it shows up in the retry topic
           once that delay has passed

Both copies keep the body, flag, born time and host and every property
(``UNIQ_KEY`` among them), carry the new reconsume count in RECONSUMETIMES and
add ``RETRY_TOPIC`` (the topic first sent to, kept across retries),
``ORIGIN_MESSAGE_ID`` (likewise) and ``MAX_RECONSUME_TIMES``. Both topics are
created on first use with one read-write queue, even with topic auto-creation
off; a push consumer's retry topic is also created when it first heartbeats,
so its route exists before anything fails.

:func:`decide_send_back` is the decision as a pure function; the service reads
the record, applies it and stores the copy.
"""

from __future__ import annotations

import enum
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pocketmq.broker.delay_levels import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DELIVER_MS,
    SCHEDULE_TOPIC,
    DelayLevels,
    schedule_properties,
)
from pocketmq.broker.durability import OK, ReplicaWait, wait_durable
from pocketmq.broker.errors import (
    IllegalArgumentError,
    NoPermissionError,
    NotDurableError,
    PutRejectedError,
    ResourceNotFoundError,
    SystemBusyError,
)
from pocketmq.broker.reput import reput
from pocketmq.broker.store.api import MessageStore
from pocketmq.broker.store.results import PutResult, PutStatus
from pocketmq.broker.topic_config import (
    NOT_ALLOWED_READ_TOPICS,
    BrokerTopicConfig,
    Perm,
    TopicConfigManager,
)
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.message import PROPERTY_IDEMPOTENCE, StoredMessage, decode_record
from pocketmq.common.msgid import encode_offset_msg_id
from pocketmq.common.validation import check_group

if TYPE_CHECKING:
    from pocketmq.broker.trace import BrokerTraceService

__all__ = [
    "DEFAULT_MAX_RECONSUME_TIMES",
    "DLQ_GROUP_TOPIC_PREFIX",
    "RETRY_GROUP_TOPIC_PREFIX",
    "SendBackDecision",
    "SendBackProcessor",
    "SendBackTarget",
    "decide_send_back",
    "dlq_topic",
    "refused_send_back",
    "retry_topic",
]

log = logging.getLogger(__name__)

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
DEFAULT_MAX_RECONSUME_TIMES = 16  # SubscriptionGroupConfig.retryMaxTimes
RETRY_QUEUE_NUMS = 1  # SubscriptionGroupConfig.retryQueueNums
DLQ_QUEUE_NUMS = 1  # MixAll.DLQ_NUMS_PER_GROUP
FIRST_RETRY_DELAY_LEVEL = 3  # delay level = 3 + reconsume times

PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
PROPERTY_DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"


def refused_send_back(phys_offset: int, group: str) -> str:
    """The one refusal for a record a group may not hand back, whatever the reason."""
    return (
        f"the message at commit-log offset {phys_offset} is not one consumer group "
        f"{group!r} may hand back: it must be of a topic the group subscribes to (or of "
        f"%RETRY%{group}) and one its caller may read (SUB)"
    )


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


class SendBackTarget(enum.Enum):
    RETRY = "RETRY"
    DLQ = "DLQ"


@dataclass(frozen=True, slots=True, kw_only=True)
class SendBackDecision:
    target: SendBackTarget
    topic: str
    reconsume_times: int  # the copy's count: the original's + 1
    delay_level: int  # 0 for the DLQ
    max_reconsume_times: int  # as applied (0 in the request means 16)


def decide_send_back(
    *, group: str, reconsume_times: int, delay_level: int, max_reconsume_times: int
) -> SendBackDecision:
    """Where a message handed back after *reconsume_times* earlier retries goes."""
    max_times = max_reconsume_times if max_reconsume_times > 0 else DEFAULT_MAX_RECONSUME_TIMES
    count = reconsume_times + 1
    if count > max_times or delay_level < 0:
        return SendBackDecision(
            target=SendBackTarget.DLQ,
            topic=dlq_topic(group),
            reconsume_times=count,
            delay_level=0,
            max_reconsume_times=max_times,
        )
    level = delay_level or FIRST_RETRY_DELAY_LEVEL + reconsume_times
    return SendBackDecision(
        target=SendBackTarget.RETRY,
        topic=retry_topic(group),
        reconsume_times=count,
        delay_level=level,
        max_reconsume_times=max_times,
    )


class SendBackProcessor:
    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        levels: DelayLevels,
        *,
        store_host: tuple[str, int],
        clock: Clock | None = None,
        replica_wait: ReplicaWait | None = None,
    ) -> None:
        """*replica_wait*: a SYNC_MASTER's wait for its replicas to hold the log up to an
        offset (as the send path's), so a copy is answered only once they do."""
        self._store = store
        self._replica_wait = replica_wait
        self._topics = topics
        self._levels = levels
        self._store_host = store_host
        self._clock = clock or SystemClock()
        self._random = random.Random()
        self.trace: BrokerTraceService | None = None  # trace_topic_enable (broker/trace.py)

    def ensure_retry_topic(
        self, group: str, *, max_topics: int | None = None, requester: str | None = None
    ) -> BrokerTopicConfig:
        """``%RETRY%{group}``, created with one read-write queue if missing.

        With *max_topics*, a new one is refused (SystemBusyError naming the *requester*'s
        access key) once the broker has that many retry topics.
        """
        if max_topics is not None and not self.has_retry_topic(group):
            count = self.retry_topic_count()
            if count >= max_topics:
                raise SystemBusyError(
                    f"the heartbeat of access key {requester!r} would create "
                    f"{retry_topic(group)!r}, but this broker already has {count} retry "
                    f"topics (limit {max_topics}, max_auto_retry_topics); delete unused "
                    "groups' retry topics or raise the limit",
                    reason="TOO_MANY_RETRY_TOPICS",
                )
        return self._topics.get_or_create(
            BrokerTopicConfig(
                topic_name=retry_topic(group),
                read_queue_nums=RETRY_QUEUE_NUMS,
                write_queue_nums=RETRY_QUEUE_NUMS,
                perm=Perm.READ_WRITE,
            )
        )

    def has_retry_topic(self, group: str) -> bool:
        return self._topics.get(retry_topic(group)) is not None

    def retry_topic_count(self) -> int:
        """Retry topics on this broker (a scan: call it only before creating one)."""
        return sum(
            1 for tc in self._topics.all() if tc.topic_name.startswith(RETRY_GROUP_TOPIC_PREFIX)
        )

    def _ensure_dlq_topic(self, group: str) -> BrokerTopicConfig:
        return self._topics.get_or_create(
            BrokerTopicConfig(
                topic_name=dlq_topic(group),
                read_queue_nums=DLQ_QUEUE_NUMS,
                write_queue_nums=DLQ_QUEUE_NUMS,
                perm=Perm.READ_WRITE,
            )
        )

    async def send_back(
        self,
        *,
        group: str,
        phys_offset: int,
        delay_level: int,
        origin_topic: str = "",
        origin_msg_id: str = "",
        max_reconsume_times: int = 0,
        authorize: Callable[[StoredMessage], None] | None = None,
    ) -> SendBackDecision:
        """Store the retry or dead-letter copy of the message at *phys_offset*.

        *authorize* sees the record before anything else does and raises to refuse
        it; the origin topic is compared only after, so that a refusal's status
        cannot tell a caller whether its guess of the record's topic was right.
        """
        msg = self._read_for(group, phys_offset, authorize, origin_topic)
        decision = decide_send_back(
            group=group,
            reconsume_times=msg.reconsume_times,
            delay_level=delay_level,
            max_reconsume_times=max_reconsume_times,
        )
        config = self._writable_target_topic(group, decision)
        result = self._store_copy(msg, decision, config, origin_msg_id, phys_offset)
        if self.trace is not None:
            self.trace.on_sent_back(
                msg,
                group=group,
                to_topic=decision.topic,
                dead=decision.target is SendBackTarget.DLQ,
                reconsume_times=decision.reconsume_times,
                result=result,
            )
        await self._durable(result, phys_offset, decision)
        log.debug(
            "message at commit-log offset %d of group %s -> %s (reconsume times %d, "
            "delay level %d)",
            phys_offset,
            group,
            decision.topic,
            decision.reconsume_times,
            decision.delay_level,
        )
        return decision

    async def _durable(
        self, result: PutResult, phys_offset: int, decision: SendBackDecision
    ) -> None:
        """Until the copy is as durable as a producer's SEND_OK would be (flushed on a
        SYNC_FLUSH store, held by the replicas on a SYNC_MASTER); NotDurableError when it
        is not: the consumer then keeps the original (a copy that makes it after all is a
        redelivery, never a loss)."""
        status = await wait_durable(result.flush_future, result.end_offset, self._replica_wait)
        if status != OK:
            raise NotDurableError(
                f"the {'retry' if decision.target is SendBackTarget.RETRY else 'dead-letter'} "
                f"copy of the message at commit-log offset "
                f"{phys_offset} is stored in {decision.topic} but not durable yet "
                f"({status}): consume the message again",
                reason=status,
            )

    def _read_for(
        self,
        group: str,
        phys_offset: int,
        authorize: Callable[[StoredMessage], None] | None,
        origin_topic: str,
    ) -> StoredMessage:
        """The record *group* hands back, once the group name, the record's topic,
        *authorize* and *origin_topic* (in that order) all allow it."""
        problem = check_group(group)
        if problem:
            raise IllegalArgumentError(f"ConsumerSendMsgBack: {problem}")
        msg = self._read(phys_offset)
        if msg.topic in NOT_ALLOWED_READ_TOPICS:
            raise NoPermissionError(
                refused_send_back(phys_offset, group), reason="SEND_BACK_NOT_ALLOWED"
            )
        if authorize is not None:
            authorize(msg)
        self._check_origin(msg, origin_topic)
        return msg

    def _writable_target_topic(self, group: str, decision: SendBackDecision) -> BrokerTopicConfig:
        """The group's DLQ or retry topic (created on first use); refused if read-only."""
        if decision.target is SendBackTarget.DLQ:
            config = self._ensure_dlq_topic(group)
        else:
            config = self.ensure_retry_topic(group)
        if not config.writable:
            raise NoPermissionError(
                f"topic {config.topic_name!r} is not writable on this "
                f"broker (perm {config.perm}); UpdateTopic with perm 6 "
                "so that failed messages can be handed back"
            )
        return config

    def _store_copy(
        self,
        msg: StoredMessage,
        decision: SendBackDecision,
        config: BrokerTopicConfig,
        origin_msg_id: str,
        phys_offset: int,
    ) -> PutResult:
        """Store the copy in a random queue of *config*; PutRejectedError if the store refuses."""
        queue_id = self._random.randrange(config.write_queue_nums)
        properties = self._copy_properties(msg, decision, origin_msg_id, phys_offset)
        result = self._put(msg, decision, queue_id, properties)
        if result.status is not PutStatus.PUT_OK:
            raise PutRejectedError(
                result.status,
                f"cannot store the {decision.target.value} "
                f"copy: {result.error or result.status.value}",
            )
        return result

    def _read(self, phys_offset: int) -> StoredMessage:
        if phys_offset < 0:
            raise IllegalArgumentError(
                f"phys_offset is {phys_offset}; a commit-log offset is "
                ">= 0 (MessageExt.phys_offset of the consumed message)"
            )
        raw = self._store.read_record(phys_offset)
        msg = None
        if raw is not None:
            try:
                msg = decode_record(raw, check_crc=True)
            except CorruptRecordError:
                msg = None
        if msg is None or msg.phys_offset != phys_offset:
            raise ResourceNotFoundError(
                f"no message starts at commit-log offset {phys_offset} on this "
                "broker; send it back to the broker it was pulled from (it may "
                "also have been deleted by retention)",
                reason="NO_MESSAGE",
            )
        return msg

    @staticmethod
    def _check_origin(msg: StoredMessage, origin_topic: str) -> None:
        first_topic = msg.properties.get(PROPERTY_RETRY_TOPIC, msg.topic)
        if origin_topic and origin_topic not in (msg.topic, first_topic):
            # Name only what the caller named: the record's topic may be none of its business.
            raise ResourceNotFoundError(
                f"the message at commit-log offset {msg.phys_offset} is not of "
                f"topic {origin_topic!r}; was the offset taken from another "
                "broker's message?",
                reason="NO_MESSAGE",
            )

    def _copy_properties(
        self, msg: StoredMessage, decision: SendBackDecision, origin_msg_id: str, phys_offset: int
    ) -> dict[str, str]:
        props = {
            k: v
            for k, v in msg.properties.items()
            if k
            not in (
                PROPERTY_DELAY,
                PROPERTY_REAL_TOPIC,
                PROPERTY_REAL_QUEUE_ID,
                PROPERTY_TIMER_DELIVER_MS,
                PROPERTY_IDEMPOTENCE,
            )
        }
        first_topic = props.setdefault(PROPERTY_RETRY_TOPIC, msg.topic)
        origin_id = (
            props.get(PROPERTY_ORIGIN_MESSAGE_ID)
            or origin_msg_id
            or props.get(PROPERTY_UNIQ_KEY)
            or encode_offset_msg_id(self._store_host[0], self._store_host[1], phys_offset)
        )
        props[PROPERTY_ORIGIN_MESSAGE_ID] = origin_id
        props[PROPERTY_MAX_RECONSUME_TIMES] = str(decision.max_reconsume_times)
        if decision.target is SendBackTarget.DLQ:
            props[PROPERTY_DLQ_ORIGIN_TOPIC] = first_topic
            props[PROPERTY_DLQ_ORIGIN_MESSAGE_ID] = origin_id
        return props

    def _put(
        self,
        msg: StoredMessage,
        decision: SendBackDecision,
        queue_id: int,
        properties: dict[str, str],
    ) -> PutResult:
        topic = decision.topic
        if decision.target is SendBackTarget.RETRY:
            level = self._levels.clamp(decision.delay_level)
            properties = schedule_properties(
                properties,
                real_topic=topic,
                real_queue_id=queue_id,
                level=level,
                deliver_ms=self._clock.now_ms() + self._levels.delay_ms(level),
            )
            topic, queue_id = SCHEDULE_TOPIC, level - 1
        return reput(
            self._store,
            msg,
            topic=topic,
            queue_id=queue_id,
            properties=properties,
            reconsume_times=decision.reconsume_times,
        )
