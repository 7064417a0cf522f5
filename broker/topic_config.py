"""TopicConfigManager: the broker's topic table, persisted in ``config/topics.json``.

The values it holds (:class:`BrokerTopicConfig`, :class:`Perm`, :class:`DataVersion`, the
system topics' names) live in :mod:`.topic_model` and are re-exported here.

It owns which topics this broker serves, with how many read and write queues
and which permission bits, and the table's data version: a ``(timestamp,
counter)`` pair bumped on every change, so that a nameserver can tell an
unchanged registration from a new one cheaply. The file has RocketMQ's shape::

    {"dataVersion": {"timestamp": 1700000000000, "counter": 3},
     "topicConfigTable": {"TopicA": {"topicName": "TopicA", "readQueueNums": 8,
                                     "writeQueueNums": 8, "perm": 6, "order": false,
                                     "topicSysFlag": 0}, ...}}

and is the snapshot half of :class:`~pocketmq.broker.topic_store.TopicTableStore`:
each change (one topic, or a batch of up to :data:`MAX_BATCH_TOPICS`) is one
record appended and fsynced to ``config/topics.log`` before it is answered, and
the snapshot is rewritten in the background once the log is as large as it. A
change that cannot be appended (``ENOSPC``: DISK_FULL) is refused with nothing
changed, so the table never holds what the disk does not.

The broker serves at most ``max_queues_total`` queues over all its topics (a
topic counts the larger of its read and write queue numbers); a create,
update or auto-create beyond it is refused, naming the key and the numbers.

System topics are created at load and can be neither deleted nor sent to by
producers (RocketMQ's ``TopicValidator``); unknown topics are created on first
send when ``auto_create_topic_enable`` is on, from the ``TBW102`` template.
"""

from __future__ import annotations

import errno
import logging
from collections import deque
from collections.abc import Callable

from pocketmq.broker.errors import (
    AlreadyExistsError,
    BrokerError,
    DiskFullError,
    FailedPreconditionError,
    IllegalArgumentError,
    NoPermissionError,
    ResourceNotFoundError,
)
from pocketmq.broker.topic_log import LogRecord
from pocketmq.broker.topic_model import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    DEFAULT_MAX_QUEUES_TOTAL,
    JOURNAL_MAX_NAMES,
    MAX_BATCH_TOPICS,
    MAX_QUEUE_NUMS,
    NOT_ALLOWED_READ_TOPICS,
    NOT_ALLOWED_SEND_TOPICS,
    OFFSET_MOVED_EVENT,
    PRODUCER_EPOCH_TOPIC,
    SCHEDULE_DELAY_LEVELS,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TIMER_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    BrokerTopicConfig,
    DataVersion,
    Perm,
    TopicBatchResult,
    TopicDelta,
)
from pocketmq.broker.topic_store import DEFAULT_MIN_COMPACT_BYTES, TopicTableStore
from pocketmq.common.clock import Clock, SystemClock
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
    "TopicConfigManager",
    "TopicDelta",
]

log = logging.getLogger(__name__)

TopicChangeListener = Callable[[], None]


class TopicConfigManager:
    """The topic table. Called on the event-loop thread only.

    Every change, one topic or a batch, is one record of ``topics.log`` (see
    :mod:`.topic_store`), so its cost does not grow with the table; the data
    version's counter moves by one per change, and the last changes are kept in
    memory (:meth:`changes_since`) so that registration can send deltas.
    """

    def __init__(
        self,
        config_dir: str,
        *,
        broker_name: str,
        cluster_name: str,
        default_queue_nums: int = 8,
        auto_create_enable: bool = True,
        schedule_queue_nums: int = SCHEDULE_DELAY_LEVELS,
        max_queues_total: int = DEFAULT_MAX_QUEUES_TOTAL,
        clock: Clock | None = None,
        min_compact_bytes: int = DEFAULT_MIN_COMPACT_BYTES,
    ) -> None:
        self._max_queues_total = max_queues_total
        self._store = TopicTableStore(config_dir, min_compact_bytes=min_compact_bytes)
        self._file = self._store.snapshot
        self._broker_name = broker_name
        self._cluster_name = cluster_name
        self._default_queue_nums = default_queue_nums
        self._auto_create_enable = auto_create_enable
        self._schedule_queue_nums = schedule_queue_nums  # one queue per delay level
        self._clock = clock or SystemClock()
        self._table: dict[str, BrokerTopicConfig] = {}
        self._queues_total = 0
        self._system: frozenset[str] = frozenset()
        self.data_version = DataVersion()
        self._listeners: list[TopicChangeListener] = []
        # (counter, names changed) of the last changes, oldest first
        self._journal: deque[tuple[int, tuple[str, ...]]] = deque()
        self._journal_names = 0

    # -- lifecycle ----------------------------------------------------------------------
    def load(self) -> None:
        """Read topics.json (or its .bak) and replay topics.log over it, then add the
        system topics that are missing."""
        loaded = self._store.load()
        self.data_version = DataVersion(loaded.timestamp_ms, loaded.counter)
        for name, raw in loaded.table.items():
            try:
                self._table[name] = BrokerTopicConfig.from_json(raw)
            except (KeyError, TypeError, ValueError) as exc:
                log.warning(
                    "skipping topic %r in %s: %r is not a topic config (%s)",
                    name,
                    self._file.path,
                    raw,
                    exc,
                )
        self._queues_total = sum(_queues(tc) for tc in self._table.values())
        if loaded.cut_bytes:
            log.warning(
                "topics.log had a torn or damaged tail: %d bytes cut; the topic "
                "table is at data version %d",
                loaded.cut_bytes,
                loaded.counter,
            )
        self.last_load = loaded
        system = self._system_topics()
        self._system = frozenset(tc.topic_name for tc in system)
        puts = {tc.topic_name: tc for tc in system if tc.topic_name not in self._table}
        schedule = next(tc for tc in system if tc.topic_name == SCHEDULE_TOPIC)
        if self._table.get(SCHEDULE_TOPIC, schedule) != schedule:  # delay levels changed
            log.info(
                "topic %s now has %d queues, one per delay level",
                SCHEDULE_TOPIC,
                schedule.write_queue_nums,
            )
            puts[SCHEDULE_TOPIC] = schedule
        if puts or not loaded.snapshot_found:
            self._commit(puts, [])
        if not loaded.snapshot_found or self._store.log.compacting:
            self.persist()  # a first snapshot, or the one a crash interrupted
        log.info(
            "loaded %d topics from %s and %d changes from %s (data version %d)",
            len(self._table),
            self._file.path,
            loaded.replayed,
            self._store.log.path,
            self.data_version.counter,
        )

    def _system_topics(self) -> list[BrokerTopicConfig]:
        topics = [
            BrokerTopicConfig(topic_name=SELF_TEST_TOPIC, read_queue_nums=1, write_queue_nums=1),
            BrokerTopicConfig(
                topic_name=self._cluster_name,
                read_queue_nums=16,
                write_queue_nums=16,
                perm=Perm.READ_WRITE,
            ),
            BrokerTopicConfig(
                topic_name=self._broker_name,
                read_queue_nums=1,
                write_queue_nums=1,
                perm=Perm.READ_WRITE,
            ),
            BrokerTopicConfig(topic_name=OFFSET_MOVED_EVENT, read_queue_nums=1, write_queue_nums=1),
            BrokerTopicConfig(
                topic_name=SCHEDULE_TOPIC,
                read_queue_nums=self._schedule_queue_nums,
                write_queue_nums=self._schedule_queue_nums,
            ),
            BrokerTopicConfig(topic_name=TIMER_TOPIC, read_queue_nums=1, write_queue_nums=1),
            BrokerTopicConfig(topic_name=TRANS_HALF_TOPIC, read_queue_nums=1, write_queue_nums=1),
            BrokerTopicConfig(
                topic_name=TRANS_OP_HALF_TOPIC, read_queue_nums=1, write_queue_nums=1
            ),
            BrokerTopicConfig(
                topic_name=TRANS_CHECK_MAX_TIME_TOPIC, read_queue_nums=1, write_queue_nums=1
            ),
        ]
        if self._auto_create_enable:
            n = self._default_queue_nums
            topics.append(
                BrokerTopicConfig(
                    topic_name=AUTO_CREATE_TOPIC_KEY_TOPIC,
                    read_queue_nums=n,
                    write_queue_nums=n,
                    perm=Perm.READ_WRITE | Perm.INHERIT,
                )
            )
        return topics

    def add_change_listener(self, listener: TopicChangeListener) -> None:
        """Called after each persisted change (registration re-registers on it)."""
        self._listeners.append(listener)

    async def stop(self) -> None:
        """Let a background compaction finish, then compact what is left."""
        await self._store.wait_compacted()
        self.persist()
        self._store.close()

    # -- reads --------------------------------------------------------------------------
    def get(self, topic: str) -> BrokerTopicConfig | None:
        return self._table.get(topic)

    def all(self) -> list[BrokerTopicConfig]:
        return sorted(self._table.values(), key=lambda tc: tc.topic_name)

    def __len__(self) -> int:
        return len(self._table)

    def is_system_topic(self, topic: str) -> bool:
        return topic in self._system

    @property
    def auto_create_enable(self) -> bool:
        return self._auto_create_enable

    @property
    def store(self) -> TopicTableStore:
        return self._store

    def changes_since(self, counter: int) -> TopicDelta | None:
        """What changed after data version *counter*, or None when the journal no longer
        reaches back that far (send the whole table)."""
        if counter == self.data_version.counter:
            return TopicDelta(put=[], deleted=[])
        if (
            counter > self.data_version.counter
            or not self._journal
            or self._journal[0][0] > counter + 1
        ):
            return None
        names: set[str] = set()
        for record_counter, changed in reversed(self._journal):
            if record_counter <= counter:
                break
            names.update(changed)
        put = [self._table[n] for n in sorted(names) if n in self._table]
        return TopicDelta(put=put, deleted=sorted(n for n in names if n not in self._table))

    # -- writes -------------------------------------------------------------------------
    def create(self, config: BrokerTopicConfig) -> BrokerTopicConfig:
        self._check(config)
        if config.topic_name in self._table:
            raise AlreadyExistsError(
                f"topic {config.topic_name!r} already exists on broker "
                f"{self._broker_name}; use UpdateTopic to change it"
            )
        self._check_capacity([config])
        self._commit({config.topic_name: config}, [])
        log.info(
            "created topic %s: %d read / %d write queues, perm %s",
            config.topic_name,
            config.read_queue_nums,
            config.write_queue_nums,
            Perm.describe(config.perm),
        )
        return config

    def update(self, config: BrokerTopicConfig) -> BrokerTopicConfig:
        self._check(config)
        old = self._table.get(config.topic_name)
        if old is None:
            raise ResourceNotFoundError(
                f"topic {config.topic_name!r} does not exist on broker "
                f"{self._broker_name}; use CreateTopic to create it",
                reason="TOPIC_NOT_EXIST",
            )
        if old != config:
            self._check_capacity([config])
            self._commit({config.topic_name: config}, [])
            log.info("updated topic %s: %s -> %s", config.topic_name, old, config)
        return config

    def check_create_many(
        self, configs: list[BrokerTopicConfig], *, update_existing: bool = False
    ) -> TopicBatchResult:
        """What :meth:`create_many` would do; raises the first refusal, naming the entry."""
        if len(configs) > MAX_BATCH_TOPICS:
            raise IllegalArgumentError(
                f"{len(configs)} topics in one batch; send at most {MAX_BATCH_TOPICS} per call"
            )
        seen: dict[str, int] = {}
        created, updated, unchanged = [], [], []
        for i, config in enumerate(configs):
            where = f"topic_configs[{i}] ({config.topic_name!r})"
            problem = config.problem()
            if problem:
                raise IllegalArgumentError(f"{where}: {problem}")
            name = config.topic_name
            if name in self._system:
                raise NoPermissionError(
                    f"{where} is a system topic of broker {self._broker_name} and cannot be changed"
                )
            if name in seen:
                raise IllegalArgumentError(
                    f"{where} is also topic_configs[{seen[name]}]; give each topic once"
                )
            seen[name] = i
            old = self._table.get(name)
            if old is None:
                created.append(name)
            elif not update_existing:
                raise AlreadyExistsError(
                    f"{where} already exists on broker "
                    f"{self._broker_name}; leave it out, or ask for "
                    "existing topics to be updated"
                )
            elif old == config:
                unchanged.append(name)
            else:
                updated.append(name)
        self._check_capacity(configs)
        return TopicBatchResult(created=created, updated=updated, unchanged=unchanged)

    def create_many(
        self, configs: list[BrokerTopicConfig], *, update_existing: bool = False
    ) -> TopicBatchResult:
        """Create (and with *update_existing*, update) many topics as one change: all of
        them or, on any refusal, none."""
        result = self.check_create_many(configs, update_existing=update_existing)
        puts = {tc.topic_name: tc for tc in configs if tc.topic_name not in result.unchanged}
        if puts:
            self._commit(puts, [])
        log.info(
            "batch: created %d topics, updated %d, %d unchanged",
            len(result.created),
            len(result.updated),
            len(result.unchanged),
        )
        return result

    def check_delete(self, topic: str) -> BrokerTopicConfig:
        """The config of *topic*, which :meth:`delete` would delete; raises why not."""
        if topic in self._system:
            raise NoPermissionError(
                f"topic {topic!r} is a system topic of broker "
                f"{self._broker_name} and cannot be deleted"
            )
        old = self._table.get(topic)
        if old is None:
            raise ResourceNotFoundError(
                f"topic {topic!r} does not exist on broker {self._broker_name}",
                reason="TOPIC_NOT_EXIST",
            )
        return old

    def check_delete_many(
        self, topics: list[str], *, ignore_missing: bool = False
    ) -> list[BrokerTopicConfig]:
        """The configs :meth:`delete_many` would delete; raises the first refusal."""
        if len(topics) > MAX_BATCH_TOPICS:
            raise IllegalArgumentError(
                f"{len(topics)} topics in one batch; send at most {MAX_BATCH_TOPICS} per call"
            )
        out: dict[str, BrokerTopicConfig] = {}
        for topic in topics:
            if ignore_missing and topic not in self._table and topic not in self._system:
                continue
            out[topic] = self.check_delete(topic)
        return list(out.values())

    def delete(self, topic: str) -> BrokerTopicConfig:
        old = self.check_delete(topic)
        self._commit({}, [topic])
        log.info("deleted topic %s", topic)
        return old

    def delete_many(
        self, topics: list[str], *, ignore_missing: bool = False
    ) -> list[BrokerTopicConfig]:
        """Delete many topics as one change: all of them or none."""
        olds = self.check_delete_many(topics, ignore_missing=ignore_missing)
        if olds:
            self._commit({}, [tc.topic_name for tc in olds])
        log.info("batch: deleted %d topics", len(olds))
        return olds

    def get_or_auto_create(self, topic: str) -> BrokerTopicConfig:
        """The topic's config, creating it from the template when auto-create is on.

        Raises ResourceNotFoundError saying how to create the topic when it is off.
        """
        config = self._table.get(topic)
        if config is not None:
            return config
        template = self._table.get(AUTO_CREATE_TOPIC_KEY_TOPIC)
        if not self._auto_create_enable or template is None:
            raise ResourceNotFoundError(
                f"topic {topic!r} does not exist on broker {self._broker_name} and "
                f"auto_create_topic_enable is off; create it first with the CreateTopic "
                f"RPC",
                reason="TOPIC_NOT_EXIST",
            )
        problem = check_topic(topic)
        if problem:
            raise IllegalArgumentError(problem, reason="MESSAGE_ILLEGAL")
        config = BrokerTopicConfig(
            topic_name=topic,
            read_queue_nums=template.read_queue_nums,
            write_queue_nums=template.write_queue_nums,
            perm=template.perm & ~Perm.INHERIT,
        )
        self._check_capacity([config])
        self._commit({topic: config}, [])
        log.info("auto-created topic %s with %d queues", topic, config.write_queue_nums)
        return config

    def get_or_create(self, config: BrokerTopicConfig) -> BrokerTopicConfig:
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
            raise IllegalArgumentError(problem)
        self._check_capacity([config])
        self._commit({config.topic_name: config}, [])
        log.info("created topic %s with %d queues", config.topic_name, config.write_queue_nums)
        return config

    def _check(self, config: BrokerTopicConfig) -> None:
        problem = config.problem()
        if problem:
            raise IllegalArgumentError(problem)
        if config.topic_name in self._system:
            raise NoPermissionError(
                f"topic {config.topic_name!r} is a system topic of "
                f"broker {self._broker_name} and cannot be changed"
            )

    def queues_total(self, *, without: str = "") -> int:
        """Queues of every topic (the larger of read and write), *without* one topic."""
        old = self._table.get(without) if without else None
        return self._queues_total - (_queues(old) if old is not None else 0)

    def _check_capacity(self, configs: list[BrokerTopicConfig]) -> None:
        grow = 0
        for config in configs:
            old = self._table.get(config.topic_name)
            grow += _queues(config) - (_queues(old) if old is not None else 0)
        if self._queues_total + grow <= self._max_queues_total:
            return
        if len(configs) == 1:
            config = configs[0]
            others = self.queues_total(without=config.topic_name)
            raise FailedPreconditionError(
                f"topic {config.topic_name!r} with {_queues(config)} queues would make "
                f"{others + _queues(config)} queues on broker {self._broker_name}; it serves "
                f"at most {self._max_queues_total} (max_queues_total), and its other topics "
                f"have {others}",
                reason="QUEUE_LIMIT_EXCEEDED",
            )
        raise FailedPreconditionError(
            f"these {len(configs)} topics would make {self._queues_total + grow} queues on "
            f"broker {self._broker_name}; it serves at most {self._max_queues_total} "
            f"(max_queues_total) and has {self._queues_total} now; none was created",
            reason="QUEUE_LIMIT_EXCEEDED",
        )

    def _commit(self, puts: dict[str, BrokerTopicConfig], deletes: list[str]) -> None:
        """Append the change to topics.log (refused, with nothing changed, when it cannot
        be written), apply it, then tell the listeners."""
        version = self.data_version.next(self._clock.now_ms())
        try:
            self._store.append(
                LogRecord(
                    timestamp_ms=version.timestamp_ms,
                    counter=version.counter,
                    put=[tc.to_json() for tc in puts.values()],
                    delete=deletes,
                )
            )
        except OSError as exc:
            log.error("cannot append to %s: %s; the change is refused", self._store.log.path, exc)
            raise _refusal(self._store.log.path, exc) from None
        for name, config in puts.items():
            old = self._table.get(name)
            self._queues_total += _queues(config) - (_queues(old) if old is not None else 0)
            self._table[name] = config
        for name in deletes:
            old = self._table.pop(name, None)
            if old is not None:
                self._queues_total -= _queues(old)
        self.data_version = version
        self._remember(version.counter, (*puts, *deletes))
        if self._store.needs_compaction:
            self._store.compact_in_background(
                dict(self._table), version.timestamp_ms, version.counter
            )
        self._notify()

    def _remember(self, counter: int, names: tuple[str, ...]) -> None:
        self._journal.append((counter, names))
        self._journal_names += len(names)
        while self._journal_names > JOURNAL_MAX_NAMES and len(self._journal) > 1:
            self._journal_names -= len(self._journal.popleft()[1])

    def _notify(self) -> None:
        for listener in self._listeners:
            try:
                listener()
            except Exception:
                log.exception("topic change listener failed")

    def replace_all(self, configs: list[BrokerTopicConfig], data_version: DataVersion) -> bool:
        """Take a master's topic table and version (a replica's sync); False when the
        version is the one held. The broker's own system topics stay."""
        if data_version == self.data_version:
            return False
        table = {tc.topic_name: tc for tc in configs}
        for name in self._system:
            table.setdefault(name, self._table[name])
        try:
            self._store.replace(table, data_version.timestamp_ms, data_version.counter)
        except OSError as exc:
            raise self._file.refusal(exc) from None
        self._table, self.data_version = table, data_version
        self._queues_total = sum(_queues(tc) for tc in table.values())
        self._journal.clear()  # deltas from before are meaningless now: full table
        self._journal_names = 0
        self._notify()
        return True

    def persist(self) -> None:
        """Compact now (topics.json at the current version, topics.log emptied), unless
        a background compaction is under way."""
        if self._store.compacting:
            return
        self._store.compact(
            dict(self._table), self.data_version.timestamp_ms, self.data_version.counter
        )


def _queues(config: BrokerTopicConfig) -> int:
    return max(config.read_queue_nums, config.write_queue_nums)


def _refusal(path: str, exc: OSError) -> BrokerError:
    """The error a change gets when its record cannot be appended (nothing changed)."""
    what = f"{path} (the change log of topics.json)"
    if exc.errno == errno.ENOSPC:
        return DiskFullError(
            f"disk full: cannot write {what} ({exc.strerror}); nothing was "
            "changed; retry once space is freed"
        )
    return BrokerError(
        f"cannot write {what}: {exc.strerror or exc} (errno {exc.errno}); nothing was changed"
    )
