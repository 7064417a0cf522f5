"""AdminProcessor: topic administration, queue offsets, message queries, broker stats.

RocketMQ's ``AdminBrokerProcessor`` and ``QueryMessageProcessor``: create,
update, delete and list topics; min/max offset and last store time per
queue (``topicStatus``); a group's broker offset, consumer offset and lag per
queue (``consumerProgress``); the offset of a timestamp; messages by key and
by offset message id; the broker's runtime table and configuration; the
consumer groups it knows.

Offset reset (``resetOffsetByTime``): :meth:`AdminProcessor.reset_offset` stores
the group's new offsets of a topic, fences its queues until their consumers
pull from there and pushes ``ResetConsumerClientOffsetCommand`` to the group's online
consumers (:mod:`.offset_reset` says how, and owns the fences).
"""

from __future__ import annotations

import dataclasses
import errno
import logging
from dataclasses import dataclass
from typing import Any

from pocketmq import __version__
from pocketmq.broker.client_manager import (
    ClientManager,
    ConsumerRegistration,
    ConsumeType,
    MessageModel,
    ResetConsumerClientOffsetCommand,
)
from pocketmq.broker.consumer_offsets import ConsumerOffsetManager
from pocketmq.broker.errors import (
    DiskFullError,
    FailedPreconditionError,
    IllegalArgumentError,
    ResourceNotFoundError,
)
from pocketmq.broker.long_polling import PullRequestHolder
from pocketmq.broker.offset_reset import (
    OffsetReset,
    ResetFences,
    ResetPosition,
    reset_moves,
    reset_queue_ids,
)
from pocketmq.broker.send_back import retry_topic
from pocketmq.broker.store.api import MessageStore
from pocketmq.broker.topic_config import (
    BrokerTopicConfig,
    DataVersion,
    TopicBatchResult,
    TopicConfigManager,
)
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.msgid import decode_offset_msg_id
from pocketmq.common.validation import check_group, check_topic

__all__ = [
    "AdminProcessor",
    "BrokerQueueProgress",
    "BrokerQueueStatus",
    "ConsumerGroupInfo",
    "OffsetReset",
    "ResetPosition",
]

log = logging.getLogger(__name__)

MAX_QUERY_MESSAGES = 64  # maxMsgsNumBatch: cap on one key query
_SECRET_WORDS = ("secret", "password", "token")  # config keys shown masked


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupInfo:
    group: str
    client_ids: list[str]  # online members, sorted
    consume_type: ConsumeType | None  # None when no member is online
    message_model: MessageModel | None
    subscribed_topics: list[str]
    offset_topics: list[str]  # topics with stored offsets


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerQueueStatus:
    queue_id: int
    min_offset: int
    max_offset: int
    last_store_timestamp_ms: int  # 0 when the queue is empty


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerQueueProgress:
    topic: str
    queue_id: int
    broker_offset: int
    consumer_offset: int  # -1 when the group has none for this queue
    lag: int
    last_timestamp_ms: int  # store time of the last consumed message, 0 if none


class AdminProcessor:
    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        clients: ClientManager,
        hold: PullRequestHolder,
        *,
        broker_name: str,
        cluster_name: str,
        store_host: tuple[str, int],
        default_query_max: int = 32,
        clock: Clock | None = None,
        config: Any = None,
    ) -> None:
        self._store = store
        self._topics = topics
        self._offsets = offsets
        self._clients = clients
        self._hold = hold
        self._broker_name = broker_name
        self._cluster_name = cluster_name
        self._store_host = store_host
        self._default_query_max = default_query_max
        self._clock = clock or SystemClock()
        self._boot_timestamp_ms = self._clock.now_ms()
        self.config = config  # the broker's config dataclass, for GetBrokerConfig
        self._fences = ResetFences(self._clock)  # queues a reset moved (offset_reset.py)

    # -- topics -------------------------------------------------------------------------
    def create_topic(self, config: BrokerTopicConfig) -> BrokerTopicConfig:
        return self._topics.create(config)

    def update_topic(self, config: BrokerTopicConfig) -> BrokerTopicConfig:
        """Change a topic; queues it no longer has are deleted as a deleted topic's are."""
        old = self._topics.get(config.topic_name)
        dropped: set[int] = set()
        if (
            old is not None
            and config.problem() is None
            and not self._topics.is_system_topic(config.topic_name)
        ):
            kept = max(config.read_queue_nums, config.write_queue_nums)
            dropped = set(range(kept, max(old.read_queue_nums, old.write_queue_nums)))
        if dropped:
            # Recorded before topics.json changes: no crash can leave the dropped queues'
            # old messages to come back when the topic grows again.
            self._store_deletion(lambda: self._store.delete_queues(config.topic_name, dropped))
        updated = self._topics.update(config)
        if dropped:
            self._offsets.remove_queues(config.topic_name, dropped)
            self._persist_offsets()
        return updated

    def delete_topic(self, topic: str) -> None:
        """Remove the topic, its consume queues and every group's offsets of it.

        The store records the deletion durably first, so that no crash afterwards
        revives the topic's messages; then topics.json and the offsets are saved.
        """
        self._topics.check_delete(topic)
        self._store_deletion(lambda: self._store.delete_topics([topic]))
        self._topics.delete(topic)
        self._offsets.remove_topic(topic)
        self._persist_offsets()

    def create_topics(
        self, configs: list[BrokerTopicConfig], *, update_existing: bool = False
    ) -> TopicBatchResult:
        """Create (or update) many topics as one change of the table: all or none.
        Queues an updated topic no longer has are deleted first, as in update_topic."""
        self._topics.check_create_many(configs, update_existing=update_existing)
        dropped: dict[str, set[int]] = {}
        for config in configs:
            old = self._topics.get(config.topic_name)
            if old is not None:
                kept = max(config.read_queue_nums, config.write_queue_nums)
                gone = set(range(kept, max(old.read_queue_nums, old.write_queue_nums)))
                if gone:
                    dropped[config.topic_name] = gone
        for topic, queues in dropped.items():
            self._store_deletion(lambda t=topic, q=queues: self._store.delete_queues(t, q))
        result = self._topics.create_many(configs, update_existing=update_existing)
        if dropped:
            for topic, queues in dropped.items():
                self._offsets.remove_queues(topic, queues)
            self._persist_offsets()
        return result

    def delete_topics(self, topics: list[str], *, ignore_missing: bool = False) -> int:
        """Delete many topics, their queues and offsets, as one change: all or none.
        The store records the deletion durably first (one write), as in delete_topic."""
        olds = self._topics.check_delete_many(topics, ignore_missing=ignore_missing)
        if not olds:
            return 0
        names = [tc.topic_name for tc in olds]
        self._store_deletion(lambda: self._store.delete_topics(names))
        self._topics.delete_many(names)
        for name in names:
            self._offsets.remove_topic(name)
        self._persist_offsets()
        return len(names)

    @staticmethod
    def _store_deletion(delete: Any) -> None:
        try:
            delete()
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise DiskFullError(
                    f"disk full: cannot record the deletion ({exc.strerror}); "
                    "nothing was deleted; retry once space is freed"
                ) from None
            raise

    def _persist_offsets(self) -> None:
        try:
            self._offsets.persist()
        except OSError as exc:  # the periodic save tries again
            log.error("cannot save consumer offsets after a deletion: %s", exc)

    def all_topics(self) -> tuple[list[BrokerTopicConfig], DataVersion]:
        return self._topics.all(), self._topics.data_version

    @property
    def topic_data_version(self) -> DataVersion:
        return self._topics.data_version

    # -- queues -------------------------------------------------------------------------
    def topic_status(self, topic: str) -> list[BrokerQueueStatus]:
        config = self._existing_topic(topic)
        out = []
        for queue_id in range(max(config.read_queue_nums, config.write_queue_nums)):
            max_offset = self._store.max_offset(topic, queue_id)
            last = (
                self._store.store_timestamp(topic, queue_id, max_offset - 1)
                if max_offset > 0
                else None
            )
            out.append(
                BrokerQueueStatus(
                    queue_id=queue_id,
                    min_offset=self._store.min_offset(topic, queue_id),
                    max_offset=max_offset,
                    last_store_timestamp_ms=last or 0,
                )
            )
        return out

    def consume_progress(self, group: str, topic: str = "") -> list[BrokerQueueProgress]:
        problem = check_group(group)
        if problem:
            raise IllegalArgumentError(problem)
        if topic:
            self._existing_topic(topic)
            topics = [topic]
        else:
            topics = sorted(
                set(self._offsets.topics_of_group(group)) | self._clients.subscribed_topics(group)
            )
            topics = [t for t in topics if self._topics.get(t) is not None]
            if not topics:
                raise ResourceNotFoundError(
                    f"consumer group {group!r} has no offsets and no online "
                    "consumers on this broker",
                    reason="CONSUMER_NOT_ONLINE",
                )
        return [p for t in topics for p in self._topic_progress(group, t)]

    def _topic_progress(self, group: str, topic: str) -> list[BrokerQueueProgress]:
        config = self._topics.get(topic)
        assert config is not None
        out = []
        for queue_id in range(config.read_queue_nums):
            broker_offset = self._store.max_offset(topic, queue_id)
            stored = self._offsets.query(group, topic, queue_id)
            consumer_offset = -1 if stored is None else stored
            last = 0
            if consumer_offset > 0:
                last = self._store.store_timestamp(topic, queue_id, consumer_offset - 1) or 0
            out.append(
                BrokerQueueProgress(
                    topic=topic,
                    queue_id=queue_id,
                    broker_offset=broker_offset,
                    consumer_offset=consumer_offset,
                    lag=max(0, broker_offset - max(consumer_offset, 0)),
                    last_timestamp_ms=last,
                )
            )
        return out

    # -- consumer groups and offset resets ----------------------------------------------
    def consumer_groups(self) -> list[ConsumerGroupInfo]:
        """Groups with online consumers or stored offsets, sorted by name."""
        online = self._clients.consumer_groups()
        stored = self._offsets.group_topics()
        out = []
        for group in sorted(online.keys() | stored.keys()):
            members = online.get(group, {})
            first = next(iter(members.values()), None)
            out.append(
                ConsumerGroupInfo(
                    group=group,
                    client_ids=sorted(members),
                    consume_type=first.consume_type if first else None,
                    message_model=first.message_model if first else None,
                    subscribed_topics=sorted(
                        {t for r in members.values() for t in r.subscriptions}
                    ),
                    offset_topics=stored.get(group, []),
                )
            )
        return out

    def reset_offset(
        self,
        group: str,
        topic: str,
        position: ResetPosition,
        timestamp_ms: int = 0,
        offsets: dict[int, int] | None = None,
    ) -> tuple[list[OffsetReset], list[str]]:
        """Move *group* on every read queue of *topic* (OFFSETS: the queues of *offsets*
        only); returns the moves and the online consumers told."""
        problem = check_group(group)
        if problem:
            raise IllegalArgumentError(problem)
        config = self._existing_topic(topic)
        queue_ids = reset_queue_ids(config, position, timestamp_ms, offsets)
        moves = reset_moves(
            self._store, self._offsets, group, topic, queue_ids, position, timestamp_ms, offsets
        )
        # Saved before the answer: a crash right after must not undo the reset.
        self._offsets.commit_durably(group, topic, {m.queue_id: m.offset for m in moves})
        self._fences.fence(group, topic, moves if self._clients.consumer_ids(group) else [])
        notified = self._clients.send_to_consumers(
            group,
            ResetConsumerClientOffsetCommand(
                consumer_group=group,
                topic=topic,
                broker_name=self._broker_name,
                offsets={m.queue_id: m.offset for m in moves},
            ),
        )
        log.info(
            "group %s reset on %s to %s%s: %s; told %d online consumer(s)",
            group,
            topic,
            position.value,
            f" {timestamp_ms}" if position is ResetPosition.TIMESTAMP else "",
            {m.queue_id: m.offset for m in moves},
            len(notified),
        )
        return moves, notified

    def delete_group(self, group: str) -> tuple[list[str], bool]:
        """Forget *group*: its offsets and its retry topic (deleteSubGroup with
        removeOffset). Refused while members are online. Returns the topics whose
        offsets went and whether a retry topic was deleted; ResourceNotFoundError when this
        broker knows nothing of the group."""
        problem = check_group(group)
        if problem:
            raise IllegalArgumentError(problem)
        members = self._clients.consumer_ids(group)
        if members:
            raise FailedPreconditionError(
                f"consumer group {group!r} has {len(members)} online member(s) on broker "
                f"{self._broker_name} ({', '.join(members[:3])}); stop them first"
            )
        topics = self._offsets.topics_of_group(group)
        retry = retry_topic(group)
        has_retry = self._topics.get(retry) is not None
        if not topics and not has_retry:
            raise ResourceNotFoundError(
                f"broker {self._broker_name} knows no consumer group {group!r}",
                reason="SUBSCRIPTION_GROUP_NOT_EXIST",
            )
        for topic in topics:
            self._offsets.remove_group(group, topic)
        self._persist_offsets()
        if has_retry:
            self.delete_topic(retry)
        log.info(
            "consumer group %s deleted: offsets of %s%s",
            group,
            topics or "no topic",
            ", and its retry topic" if has_retry else "",
        )
        return topics, has_retry

    def consumer_connections(self, group: str) -> list[tuple[str, ConsumerRegistration, float]]:
        """The online members of *group*: (client id, registration, seconds silent)."""
        problem = check_group(group)
        if problem:
            raise IllegalArgumentError(problem)
        out = []
        for client_id in self._clients.consumer_ids(group):
            registration = self._clients.consumer_registration(group, client_id)
            if registration is not None:
                out.append((client_id, registration, self._clients.silent_seconds(client_id)))
        return out

    def reset_fence(self, group: str, topic: str, queue_id: int) -> int | None:
        """The offset a reset moved this queue to while its consumer has not pulled
        from there yet (its commits are then stale), else None."""
        return self._fences.get(group, topic, queue_id)

    def lift_reset_fence(self, group: str, topic: str, queue_id: int) -> None:
        """The queue's consumer pulled from the reset offset: its commits count again."""
        self._fences.lift(group, topic, queue_id)

    def min_offset(self, topic: str, queue_id: int) -> int:
        self.check_queue(topic, queue_id)
        return self._store.min_offset(topic, queue_id)

    def max_offset(self, topic: str, queue_id: int) -> int:
        self.check_queue(topic, queue_id)
        return self._store.max_offset(topic, queue_id)

    def end_offset(self, topic: str, queue_id: int) -> int:
        """The queue's real end (past the confirm offset): what an offset commit may name."""
        self.check_queue(topic, queue_id)
        return self._store.end_offset(topic, queue_id)

    def offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        self.check_queue(topic, queue_id)
        if timestamp_ms < 0:
            raise IllegalArgumentError(
                f"timestamp_ms is {timestamp_ms}; give milliseconds since the epoch"
            )
        return self._store.offset_by_timestamp(topic, queue_id, timestamp_ms)

    # -- messages -----------------------------------------------------------------------
    def query_by_key(
        self,
        topic: str,
        key: str,
        *,
        max_num: int = 0,
        begin_timestamp_ms: int = 0,
        end_timestamp_ms: int = 0,
    ) -> list[bytes]:
        problem = check_topic(topic)
        if problem:
            raise IllegalArgumentError(problem)
        if not key:
            raise IllegalArgumentError("key is empty; give a KEYS entry or a UNIQ_KEY")
        if max_num < 0:
            raise IllegalArgumentError(
                f"max_num is {max_num}; give 1..{MAX_QUERY_MESSAGES}, or 0 for the default"
            )
        if begin_timestamp_ms < 0 or end_timestamp_ms < 0:
            raise IllegalArgumentError(
                f"time range {begin_timestamp_ms}..{end_timestamp_ms} "
                "must be milliseconds since the epoch"
            )
        if end_timestamp_ms and begin_timestamp_ms > end_timestamp_ms:
            raise IllegalArgumentError(
                f"begin_timestamp_ms {begin_timestamp_ms} is after "
                f"end_timestamp_ms {end_timestamp_ms}"
            )
        count = min(max_num or self._default_query_max, MAX_QUERY_MESSAGES)
        return self._store.query_by_key(
            topic,
            key,
            max_count=count,
            begin_timestamp_ms=begin_timestamp_ms,
            end_timestamp_ms=end_timestamp_ms or None,
        )

    def view_message(self, offset_msg_id: str) -> bytes:
        try:
            msg_id = decode_offset_msg_id(offset_msg_id)
        except ValueError as exc:
            raise IllegalArgumentError(str(exc)) from None
        host, port = self._store_host
        if (msg_id.host, msg_id.port) != (host, port):
            raise IllegalArgumentError(
                f"offset message id {offset_msg_id} names broker {msg_id.host}:{msg_id.port}; "
                f"this is {host}:{port}; ask that broker"
            )
        record = self._store.read_record(msg_id.phys_offset) if msg_id.phys_offset >= 0 else None
        if record is None:
            raise ResourceNotFoundError(
                f"no message at commit-log offset {msg_id.phys_offset} "
                f"(offset message id {offset_msg_id}); it may have been deleted "
                "by retention",
                reason="MESSAGE_NOT_FOUND",
            )
        return record

    # -- broker -------------------------------------------------------------------------
    def runtime_info(self) -> dict[str, str]:
        info = dict(self._store.runtime_info())
        producer_groups, consumer_groups = self._clients.counts()
        info.update(
            {
                "broker_name": self._broker_name,
                "cluster_name": self._cluster_name,
                "broker_address": f"{self._store_host[0]}:{self._store_host[1]}",
                "version": __version__,
                "boot_timestamp_ms": str(self._boot_timestamp_ms),
                "topic_count": str(len(self._topics)),
                "topic_data_version": str(self._topics.data_version.counter),
                "producer_groups_online": str(producer_groups),
                "consumer_groups_online": str(consumer_groups),
                "pulls_parked": str(self._hold.parked_count),
            }
        )
        return info

    def config_table(self) -> dict[str, str]:
        """The broker's configuration as text: unset keys (None, or an empty secret) left
        out, a secret that is set shown as ``***``."""
        if self.config is None:
            return {}

        def text(value: Any) -> str:
            return str(value).lower() if isinstance(value, bool) else str(value)

        table = {}
        for f in dataclasses.fields(self.config):
            value = getattr(self.config, f.name)
            if value is None:
                continue
            if any(w in f.name for w in _SECRET_WORDS):
                if value in ("", None):
                    continue
                value = "***"
            table[f.name] = text(value)
        return table

    # -- checks -------------------------------------------------------------------------
    def _existing_topic(self, topic: str) -> BrokerTopicConfig:
        problem = check_topic(topic)
        if problem:
            raise IllegalArgumentError(problem)
        config = self._topics.get(topic)
        if config is None:
            raise ResourceNotFoundError(
                f"topic {topic!r} does not exist on broker {self._broker_name}",
                reason="TOPIC_NOT_EXIST",
            )
        return config

    def check_queue(self, topic: str, queue_id: int) -> None:
        """Refuse an unknown topic or a queue id outside its queues."""
        config = self._existing_topic(topic)
        queue_nums = max(config.read_queue_nums, config.write_queue_nums)
        if not 0 <= queue_id < queue_nums:
            raise IllegalArgumentError(
                f"queue id {queue_id} is out of range; topic {topic!r} "
                f"has {queue_nums} queues (0..{queue_nums - 1})"
            )
