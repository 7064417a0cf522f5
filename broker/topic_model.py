"""The topic table's values: a topic's configuration, its permission bits, the
table's data version, the system topics, and the results of batch changes.

:class:`BrokerTopicConfig` is stored in ``config/topics.json`` in RocketMQ's shape
(see :mod:`.topic_config`, whose :class:`~pocketmq.broker.topic_config.TopicConfigManager`
owns the table)::

    {"topicName": "TopicA", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6,
     "order": false, "topicSysFlag": 0}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pocketmq.common.model import DataVersion
from pocketmq.common.validation import check_topic

__all__ = [
    "AUTO_CREATE_TOPIC_KEY_TOPIC",
    "DEFAULT_MAX_QUEUES_TOTAL",
    "JOURNAL_MAX_NAMES",
    "MAX_BATCH_TOPICS",
    "MAX_QUEUE_NUMS",
    "NOT_ALLOWED_READ_TOPICS",
    "NOT_ALLOWED_SEND_TOPICS",
    "OFFSET_MOVED_EVENT",
    "PRODUCER_EPOCH_TOPIC",
    "SCHEDULE_DELAY_LEVELS",
    "SCHEDULE_TOPIC",
    "SELF_TEST_TOPIC",
    "TIMER_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "TRANS_HALF_TOPIC",
    "TRANS_OP_HALF_TOPIC",
    "BrokerTopicConfig",
    "DataVersion",
    "Perm",
    "TopicBatchResult",
    "TopicDelta",
]

MAX_QUEUE_NUMS = 1024
DEFAULT_MAX_QUEUES_TOTAL = 32_768  # under Linux's 65,530 mappings a process, with room

AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TIMER_TOPIC = "rmq_sys_wheel_timer"  # messages with a delivery time wait here (one queue)
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
PRODUCER_EPOCH_TOPIC = "rmq_sys_producer_epochs"  # raised epochs of named producers
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
SCHEDULE_DELAY_LEVELS = 18

# Topics only the broker itself writes (TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET).
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        TIMER_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
        PRODUCER_EPOCH_TOPIC,
    }
)
# Topics no client reads (admin tools excepted), with or without the ACL: the delayed,
# timed and uncommitted messages of every topic live in them.
NOT_ALLOWED_READ_TOPICS = NOT_ALLOWED_SEND_TOPICS


class Perm:
    """RocketMQ's ``PermName`` bits."""

    PRIORITY = 8
    READ = 4
    WRITE = 2
    INHERIT = 1
    READ_WRITE = READ | WRITE

    @staticmethod
    def describe(perm: int) -> str:
        return (
            ("R" if perm & Perm.READ else "-")
            + ("W" if perm & Perm.WRITE else "-")
            + ("X" if perm & Perm.INHERIT else "-")
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerTopicConfig:
    topic_name: str
    read_queue_nums: int = 8
    write_queue_nums: int = 8
    perm: int = Perm.READ_WRITE
    order: bool = False
    topic_sys_flag: int = 0

    @property
    def readable(self) -> bool:
        return bool(self.perm & Perm.READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & Perm.WRITE)

    def problem(self) -> str | None:
        """Why this config cannot be stored, or None."""
        name_problem = check_topic(self.topic_name)
        if name_problem:
            return name_problem
        for key in ("read_queue_nums", "write_queue_nums"):
            value = getattr(self, key)
            if not 1 <= value <= MAX_QUEUE_NUMS:
                return f"{key} is {value}; it must be 1..{MAX_QUEUE_NUMS}"
        if not 0 <= self.perm <= 15:
            return (
                f"perm is {self.perm}; it is a sum of 8 (priority), 4 (read), 2 (write), "
                "1 (inherit)"
            )
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "topicName": self.topic_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "order": self.order,
            "topicSysFlag": self.topic_sys_flag,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> BrokerTopicConfig:
        return cls(
            topic_name=str(raw["topicName"]),
            read_queue_nums=int(raw["readQueueNums"]),
            write_queue_nums=int(raw["writeQueueNums"]),
            perm=int(raw["perm"]),
            order=bool(raw.get("order", False)),
            topic_sys_flag=int(raw.get("topicSysFlag", 0)),
        )


#: Topics in one batch call at most (a request of this many stays far below gRPC's 4 MiB).
MAX_BATCH_TOPICS = 20_000
#: Changes remembered for registration deltas (topic names over all remembered records).
JOURNAL_MAX_NAMES = 200_000


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicBatchResult:
    """What one batch create-or-update did, by topic name."""

    created: list[str]
    updated: list[str]
    unchanged: list[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicDelta:
    """The changes between two data versions: topics now as they are, topics gone."""

    put: list[BrokerTopicConfig]
    deleted: list[str]
