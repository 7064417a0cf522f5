"""MetadataSync: the topic configs, consumer offsets and delay progress a replica copies.

RocketMQ's SlaveSynchronize, both sides::

    master   parts(known) ─ one state taken at once: topics (unless the replica's
             version is this table's), offsets, delay progress, log_end_offset ─▶
             StreamMetadata parts (:mod:`.metadata`)
    replica  apply_topics(snapshot)      at once: records of a topic are served only
                                         once its config is here
             apply_progress(snapshot)    once this log holds log_end_offset; merged
                                         by maximum, or replaced after a cut tail
    promote  adopt_unconfigured_topics   topics copied before their config came
             clamp_progress              no offset past what this log holds

The replica's timing (when progress may apply) is :class:`~.replica.HaClient`'s;
this class only reads and writes the tables.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from pocketmq.broker.delay_levels import SCHEDULE_TOPIC
from pocketmq.broker.ha import metadata
from pocketmq.broker.namesrv_client import topic_config_pb
from pocketmq.v1 import common_pb2, ha_pb2

if TYPE_CHECKING:
    from pocketmq.broker.consumer_offsets import ConsumerOffsetManager
    from pocketmq.broker.schedule import ScheduleMessageService
    from pocketmq.broker.store.message_store import DefaultMessageStore
    from pocketmq.broker.topic_config import TopicConfigManager

__all__ = ["MetadataSync"]

log = logging.getLogger(__name__)


class MetadataSync:
    """One broker's side of the metadata sync, over its own tables; *epoch* gives the
    master epoch a snapshot carries."""

    def __init__(
        self,
        store: DefaultMessageStore,
        *,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        schedule: ScheduleMessageService | None,
        epoch: Callable[[], int],
    ) -> None:
        self._store = store
        self._topics = topics
        self._offsets = offsets
        self._schedule = schedule
        self._epoch = epoch

    # -- a master's side: the snapshot ----------------------------------------------------
    def parts(
        self,
        known: common_pb2.DataVersion | None = None,
        part_bytes: int = metadata.PART_BYTES,
    ) -> Iterator[ha_pb2.MetadataSnapshot]:
        """This master's topics, consumer offsets and delay progress, as taken now, in
        parts of at most about *part_bytes* (:mod:`.metadata`); no topics when *known*
        is this table's version."""
        version = self._topics.data_version
        omitted = known is not None and (known.timestamp_ms, known.counter) == (
            version.timestamp_ms,
            version.counter,
        )
        head = ha_pb2.MetadataSnapshot(
            data_version=common_pb2.DataVersion(
                timestamp_ms=version.timestamp_ms, counter=version.counter
            ),
            master_epoch=self._epoch(),
            log_end_offset=self._store.commitlog.max_offset,
            topics_omitted=omitted,
        )
        if self._schedule is not None:
            for level, offset in self._schedule.offsets.as_dict().items():
                head.delay_offsets[level] = offset
        # every table taken here, before the first part goes: one state, and
        # log_end_offset bounds the records its offsets count
        topics = [] if omitted else self._topics.all()
        offsets = self._offsets.entries()
        configs = (topic_config_pb(tc) for tc in topics)
        entries = (
            ha_pb2.OffsetEntry(group=g, topic=t, queue_id=q, offset=o) for g, t, q, o in offsets
        )
        return metadata.split(head, configs, entries, part_bytes)

    def snapshot(self, known: common_pb2.DataVersion | None = None) -> ha_pb2.MetadataSnapshot:
        """:meth:`parts` merged: the whole snapshot (GetMetadata's answer)."""
        return metadata.merged(self.parts(known))

    # -- a replica's side: applying it -------------------------------------------------------

    def apply_topics(self, snapshot: ha_pb2.MetadataSnapshot) -> None:
        """The master's topic table, as soon as it comes: records of a topic are served
        only once its config is here."""
        from pocketmq.broker.topic_config import BrokerTopicConfig, DataVersion

        if snapshot.topics_omitted:
            return  # the table this replica holds is the master's
        configs = [
            BrokerTopicConfig(
                topic_name=pb.topic_name,
                read_queue_nums=pb.read_queue_nums,
                write_queue_nums=pb.write_queue_nums,
                perm=pb.perm,
                order=pb.order,
                topic_sys_flag=pb.topic_sys_flag,
            )
            for pb in snapshot.topic_configs
        ]
        version = DataVersion(snapshot.data_version.timestamp_ms, snapshot.data_version.counter)
        if self._topics.replace_all(configs, version):
            log.info(
                "took %d topic configs of data version %d from the master",
                len(configs),
                version.counter,
            )

    def apply_progress(self, snapshot: ha_pb2.MetadataSnapshot, replace: bool = False) -> None:
        """The master's consumer offsets and delay progress, merged by maximum (never
        moved back), or taken as they are when *replace* (this log's diverged tail was
        cut: its own may count records the master never had). :class:`HaClient` calls
        it once this log holds the snapshot's ``log_end_offset``, so neither claims a
        record this replica lacks."""
        entries = [(e.group, e.topic, e.queue_id, e.offset) for e in snapshot.consumer_offsets]
        if replace:
            self._offsets.replace_all(entries)
        else:
            self._offsets.merge_max(entries)
        if self._schedule is not None:
            offsets = self._schedule.offsets
            levels = set(snapshot.delay_offsets) | (set(offsets.as_dict()) if replace else set())
            for level in levels:
                offset = snapshot.delay_offsets.get(level, 0)
                if replace or offset > offsets.get(level):
                    offsets.set(level, offset)
        if replace:
            log.warning(
                "took the master's consumer offsets (%d) and delay progress as they are: "
                "this replica's log had a diverged tail cut",
                len(entries),
            )

    # -- a promotion ----------------------------------------------------------------------
    def clamp_progress(self) -> None:
        """No consumer offset or delay progress past the records this log holds: the
        consumers of a new master would skip the records it stores at those queue
        offsets. The metadata sync keeps them below as a rule (log_end_offset); a
        replica promoted after its handshake cut a tail and before the master's next
        snapshot still holds its own, which may count the cut records."""
        store = self._store
        moved = self._offsets.clamp(store.max_offset)
        if self._schedule is not None:
            offsets = self._schedule.offsets
            for level, offset in offsets.as_dict().items():
                end = store.max_offset(SCHEDULE_TOPIC, level - 1)
                if offset > end:
                    offsets.set(level, end)
                    moved += 1
        if moved:
            log.warning(
                "promotion: %d consumer offsets or delay levels were past the end of their "
                "queue here and now point at it",
                moved,
            )

    def adopt_unconfigured_topics(self) -> None:
        """Topics whose records were copied before the metadata sync (every few seconds)
        brought their config: a new master serves them with as many queues as it holds
        (RocketMQ 5 rebuilds its topic-queue table on promotion the same way)."""
        from pocketmq.broker.topic_config import BrokerTopicConfig

        queues: dict[str, int] = {}
        for cq in self._store.consume_queues.all_queues():
            if self._topics.get(cq.topic) is None:
                queues[cq.topic] = max(queues.get(cq.topic, 0), cq.queue_id + 1)
        for topic, count in sorted(queues.items()):
            try:
                self._topics.get_or_create(
                    BrokerTopicConfig(
                        topic_name=topic, read_queue_nums=count, write_queue_nums=count
                    )
                )
            except Exception as exc:  # a refusal (queue bound, disk) leaves it unserved
                log.error("cannot adopt topic %s (%d queues) on promotion: %s", topic, count, exc)
                continue
            log.warning(
                "adopted topic %s with %d queues on promotion: its records were "
                "copied before its config",
                topic,
                count,
            )
