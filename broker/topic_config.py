"""TopicConfigManager: the broker's topic table, persisted in ``config/topics.json``.

It owns which topics this broker serves, with how many read and write queues
and which permission bits, and the table's data version: a ``(timestamp,
counter)`` pair bumped on every change, so that a nameserver can tell an
unchanged registration from a new one cheaply. The file has RocketMQ's shape::

    {"dataVersion": {"timestamp": 1700000000000, "counter": 3},
     "topicConfigTable": {"TopicA": {"topicName": "TopicA", "readQueueNums": 8,
                                     "writeQueueNums": 8, "perm": 6, "order": false,
                                     "topicSysFlag": 0}, ...}}

and is saved through :class:`~pocketmq.broker.json_file.JsonFile` (temp file,
fsync, rename, previous version kept as ``.bak``) after every change, before
the change is answered. A save that fails (``ENOSPC``: DISK_FULL) undoes the
change in memory too, so the table never holds what the file does not.

The broker serves at most ``max_queues_total`` queues over all its topics (a
topic counts the larger of its read and write queue numbers); a create,
update or auto-create beyond it is refused, naming the key and the numbers.

System topics are created at load and can be neither deleted nor sent to by
producers (RocketMQ's ``TopicValidator``); unknown topics are created on first
send when ``auto_create_topic_enable`` is on, from the ``TBW102`` template.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pocketmq.broker.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
)
from pocketmq.broker.json_file import JsonFile
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.validation import check_topic

__all__ = [
    "AUTO_CREATE_TOPIC_KEY_TOPIC",
    "NOT_ALLOWED_READ_TOPICS",
    "NOT_ALLOWED_SEND_TOPICS",
    "SCHEDULE_TOPIC",
    "TIMER_TOPIC",
    "DataVersion",
    "Perm",
    "TopicConfig",
    "TopicConfigManager",
]

log = logging.getLogger(__name__)

MAX_QUEUE_NUMS = 1024
DEFAULT_MAX_QUEUES_TOTAL = 32_768   # under Linux's 65,530 mappings a process, with room

AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TIMER_TOPIC = "rmq_sys_wheel_timer"   # messages with a delivery time wait here (one queue)
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
SCHEDULE_DELAY_LEVELS = 18

# Topics only the broker itself writes (TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET).
NOT_ALLOWED_SEND_TOPICS = frozenset({
    SCHEDULE_TOPIC, TIMER_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC, SELF_TEST_TOPIC, OFFSET_MOVED_EVENT,
})
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
        return ("R" if perm & Perm.READ else "-") + ("W" if perm & Perm.WRITE else "-") + (
            "X" if perm & Perm.INHERIT else "-")


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicConfig:
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
            return f"perm is {self.perm}; it is a sum of 8 (priority), 4 (read), 2 (write), " \
                   "1 (inherit)"
        return None

    def to_json(self) -> dict[str, Any]:
        return {"topicName": self.topic_name, "readQueueNums": self.read_queue_nums,
                "writeQueueNums": self.write_queue_nums, "perm": self.perm,
                "order": self.order, "topicSysFlag": self.topic_sys_flag}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> TopicConfig:
        return cls(topic_name=str(raw["topicName"]), read_queue_nums=int(raw["readQueueNums"]),
                   write_queue_nums=int(raw["writeQueueNums"]), perm=int(raw["perm"]),
                   order=bool(raw.get("order", False)),
                   topic_sys_flag=int(raw.get("topicSysFlag", 0)))


@dataclass(frozen=True, slots=True)
class DataVersion:
    """RocketMQ's ``DataVersion``: changes whenever the table does."""

    timestamp_ms: int = 0
    counter: int = 0

    def next(self, now_ms: int) -> DataVersion:
        return DataVersion(now_ms, self.counter + 1)


TopicChangeListener = Callable[[], None]


class TopicConfigManager:
    """The topic table. Called on the event-loop thread only."""

    def __init__(self, config_dir: str, *, broker_name: str, cluster_name: str,
                 default_queue_nums: int = 8, auto_create_enable: bool = True,
                 schedule_queue_nums: int = SCHEDULE_DELAY_LEVELS,
                 max_queues_total: int = DEFAULT_MAX_QUEUES_TOTAL,
                 clock: Clock | None = None) -> None:
        self._max_queues_total = max_queues_total
        self._file = JsonFile(os.path.join(config_dir, "topics.json"))
        self._broker_name = broker_name
        self._cluster_name = cluster_name
        self._default_queue_nums = default_queue_nums
        self._auto_create_enable = auto_create_enable
        self._schedule_queue_nums = schedule_queue_nums  # one queue per delay level
        self._clock = clock or SystemClock()
        self._table: dict[str, TopicConfig] = {}
        self._system: frozenset[str] = frozenset()
        self.data_version = DataVersion()
        self._listeners: list[TopicChangeListener] = []

    # -- lifecycle ----------------------------------------------------------------------
    def load(self) -> None:
        """Read topics.json (or its .bak) and add the system topics that are missing."""
        data = self._file.load()
        if data is not None:
            version = data.get("dataVersion", {})
            self.data_version = DataVersion(int(version.get("timestamp", 0)),
                                            int(version.get("counter", 0)))
            for name, raw in data.get("topicConfigTable", {}).items():
                try:
                    self._table[name] = TopicConfig.from_json(raw)
                except (KeyError, TypeError, ValueError) as exc:
                    log.warning("skipping topic %r in %s: %r is not a topic config (%s)",
                                name, self._file.path, raw, exc)
        system = self._system_topics()
        self._system = frozenset(tc.topic_name for tc in system)
        missing = [tc for tc in system if tc.topic_name not in self._table]
        for tc in missing:
            self._table[tc.topic_name] = tc
        schedule = next(tc for tc in system if tc.topic_name == SCHEDULE_TOPIC)
        if self._table[SCHEDULE_TOPIC] != schedule:  # the delay levels were reconfigured
            log.info("topic %s now has %d queues, one per delay level", SCHEDULE_TOPIC,
                     schedule.write_queue_nums)
            self._table[SCHEDULE_TOPIC] = schedule
            missing.append(schedule)
        if missing or data is None:
            self._changed(dict(self._table))
        log.info("loaded %d topics from %s (data version %d)", len(self._table),
                 self._file.path, self.data_version.counter)

    def _system_topics(self) -> list[TopicConfig]:
        topics = [
            TopicConfig(topic_name=SELF_TEST_TOPIC, read_queue_nums=1, write_queue_nums=1),
            TopicConfig(topic_name=self._cluster_name, read_queue_nums=16, write_queue_nums=16,
                        perm=Perm.READ_WRITE),
            TopicConfig(topic_name=self._broker_name, read_queue_nums=1, write_queue_nums=1,
                        perm=Perm.READ_WRITE),
            TopicConfig(topic_name=OFFSET_MOVED_EVENT, read_queue_nums=1, write_queue_nums=1),
            TopicConfig(topic_name=SCHEDULE_TOPIC, read_queue_nums=self._schedule_queue_nums,
                        write_queue_nums=self._schedule_queue_nums),
            TopicConfig(topic_name=TIMER_TOPIC, read_queue_nums=1, write_queue_nums=1),
            TopicConfig(topic_name=TRANS_HALF_TOPIC, read_queue_nums=1, write_queue_nums=1),
            TopicConfig(topic_name=TRANS_OP_HALF_TOPIC, read_queue_nums=1, write_queue_nums=1),
            TopicConfig(topic_name=TRANS_CHECK_MAX_TIME_TOPIC, read_queue_nums=1,
                        write_queue_nums=1),
        ]
        if self._auto_create_enable:
            n = self._default_queue_nums
            topics.append(TopicConfig(topic_name=AUTO_CREATE_TOPIC_KEY_TOPIC,
                                      read_queue_nums=n, write_queue_nums=n,
                                      perm=Perm.READ_WRITE | Perm.INHERIT))
        return topics

    def add_change_listener(self, listener: TopicChangeListener) -> None:
        """Called after each persisted change (registration re-registers on it)."""
        self._listeners.append(listener)

    # -- reads --------------------------------------------------------------------------
    def get(self, topic: str) -> TopicConfig | None:
        return self._table.get(topic)

    def all(self) -> list[TopicConfig]:
        return sorted(self._table.values(), key=lambda tc: tc.topic_name)

    def is_system_topic(self, topic: str) -> bool:
        return topic in self._system

    @property
    def auto_create_enable(self) -> bool:
        return self._auto_create_enable

    # -- writes -------------------------------------------------------------------------
    def create(self, config: TopicConfig) -> TopicConfig:
        self._check(config)
        if config.topic_name in self._table:
            raise AlreadyExistsError(f"topic {config.topic_name!r} already exists on broker "
                                     f"{self._broker_name}; use UpdateTopic to change it")
        self._check_capacity(config)
        previous = dict(self._table)
        self._table[config.topic_name] = config
        self._changed(previous)
        log.info("created topic %s: %d read / %d write queues, perm %s", config.topic_name,
                 config.read_queue_nums, config.write_queue_nums, Perm.describe(config.perm))
        return config

    def update(self, config: TopicConfig) -> TopicConfig:
        self._check(config)
        old = self._table.get(config.topic_name)
        if old is None:
            raise NotFoundError(f"topic {config.topic_name!r} does not exist on broker "
                                f"{self._broker_name}; use CreateTopic to create it",
                                reason="TOPIC_NOT_EXIST")
        if old != config:
            self._check_capacity(config)
            previous = dict(self._table)
            self._table[config.topic_name] = config
            self._changed(previous)
            log.info("updated topic %s: %s -> %s", config.topic_name, old, config)
        return config

    def check_delete(self, topic: str) -> TopicConfig:
        """The config of *topic*, which :meth:`delete` would delete; raises why not."""
        if topic in self._system:
            raise PermissionDeniedError(f"topic {topic!r} is a system topic of broker "
                                        f"{self._broker_name} and cannot be deleted")
        old = self._table.get(topic)
        if old is None:
            raise NotFoundError(f"topic {topic!r} does not exist on broker {self._broker_name}",
                                reason="TOPIC_NOT_EXIST")
        return old

    def delete(self, topic: str) -> TopicConfig:
        old = self.check_delete(topic)
        previous = dict(self._table)
        del self._table[topic]
        self._changed(previous)
        log.info("deleted topic %s", topic)
        return old

    def get_or_auto_create(self, topic: str) -> TopicConfig:
        """The topic's config, creating it from the template when auto-create is on.

        Raises NotFoundError saying how to create the topic when it is off.
        """
        config = self._table.get(topic)
        if config is not None:
            return config
        template = self._table.get(AUTO_CREATE_TOPIC_KEY_TOPIC)
        if not self._auto_create_enable or template is None:
            raise NotFoundError(
                f"topic {topic!r} does not exist on broker {self._broker_name} and "
                f"auto_create_topic_enable is off; create it first with the CreateTopic "
                f"RPC", reason="TOPIC_NOT_EXIST")
        problem = check_topic(topic)
        if problem:
            raise InvalidRequestError(problem, reason="MESSAGE_ILLEGAL")
        config = TopicConfig(topic_name=topic, read_queue_nums=template.read_queue_nums,
                             write_queue_nums=template.write_queue_nums,
                             perm=template.perm & ~Perm.INHERIT)
        self._check_capacity(config)
        previous = dict(self._table)
        self._table[topic] = config
        self._changed(previous)
        log.info("auto-created topic %s with %d queues", topic, config.write_queue_nums)
        return config

    def get_or_create(self, config: TopicConfig) -> TopicConfig:
        """The topic's config, creating it as *config* when missing, auto-create or not.

        For topics the broker makes for itself (``%RETRY%`` and ``%DLQ%`` of a
        group, RocketMQ's ``createTopicInSendMessageBackMethod``); an existing
        topic is returned unchanged.
        """
        existing = self._table.get(config.topic_name)
        if existing is not None:
            return existing
        problem = config.problem()
        if problem:
            raise InvalidRequestError(problem)
        self._check_capacity(config)
        previous = dict(self._table)
        self._table[config.topic_name] = config
        self._changed(previous)
        log.info("created topic %s with %d queues", config.topic_name, config.write_queue_nums)
        return config

    def _check(self, config: TopicConfig) -> None:
        problem = config.problem()
        if problem:
            raise InvalidRequestError(problem)
        if config.topic_name in self._system:
            raise PermissionDeniedError(f"topic {config.topic_name!r} is a system topic of "
                                        f"broker {self._broker_name} and cannot be changed")

    def queues_total(self, *, without: str = "") -> int:
        """Queues of every topic (the larger of read and write), *without* one topic."""
        return sum(max(tc.read_queue_nums, tc.write_queue_nums)
                   for name, tc in self._table.items() if name != without)

    def _check_capacity(self, config: TopicConfig) -> None:
        others = self.queues_total(without=config.topic_name)
        wanted = max(config.read_queue_nums, config.write_queue_nums)
        if others + wanted > self._max_queues_total:
            raise FailedPreconditionError(
                f"topic {config.topic_name!r} with {wanted} queues would make "
                f"{others + wanted} queues on broker {self._broker_name}; it serves at most "
                f"{self._max_queues_total} (max_queues_total), and its other topics have "
                f"{others}", reason="QUEUE_LIMIT_EXCEEDED")

    def _changed(self, previous: dict[str, TopicConfig]) -> None:
        """Persist the changed table (undone, with a refusal, when the file cannot be
        written), then tell the listeners."""
        old_version = self.data_version
        self.data_version = self.data_version.next(self._clock.now_ms())
        try:
            self.persist()
        except OSError as exc:
            self._table, self.data_version = previous, old_version
            log.error("cannot save %s: %s; the change is undone", self._file.path, exc)
            raise self._file.refusal(exc) from None
        for listener in self._listeners:
            try:
                listener()
            except Exception:
                log.exception("topic change listener failed")

    def replace_all(self, configs: list[TopicConfig], data_version: DataVersion) -> bool:
        """Take a master's topic table and version (a replica's sync); False when the
        version is the one held. The broker's own system topics stay."""
        if data_version == self.data_version:
            return False
        previous = dict(self._table)
        table = {tc.topic_name: tc for tc in configs}
        for name in self._system:
            table.setdefault(name, previous[name])
        self._table = table
        old_version, self.data_version = self.data_version, data_version
        try:
            self.persist()
        except OSError as exc:
            self._table, self.data_version = previous, old_version
            raise self._file.refusal(exc) from None
        for listener in self._listeners:
            try:
                listener()
            except Exception:
                log.exception("topic change listener failed")
        return True

    def persist(self) -> None:
        self._file.save({
            "dataVersion": {"timestamp": self.data_version.timestamp_ms,
                            "counter": self.data_version.counter},
            "topicConfigTable": {name: tc.to_json() for name, tc in sorted(self._table.items())},
        })
