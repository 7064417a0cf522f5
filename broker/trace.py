"""BrokerTraceService: the broker's own side of message trace (RocketMQ's ``traceTopicEnable``).

With ``trace_topic_enable`` (off by default) the broker

* creates the trace topic ``msg_trace_topic_name`` (``RMQ_SYS_TRACE_TOPIC``, one
  queue, read-write) at start, so traced clients have somewhere to write;
* records, in the same JSON-lines format as the clients (:mod:`pocketmq.common.trace`):

  ``Store``           a sent message was stored: store time, queue and offset, and
                      where it lies (a delayed one is parked in SCHEDULE_TOPIC_XXXX or
                      rmq_sys_wheel_timer, a half message in RMQ_SYS_TRANS_HALF_TOPIC)
  ``Delivered``       a delayed, timed or retried message came due and was put into
                      its topic (from :mod:`.schedule` and :mod:`.timer_service`)
  ``EndTransaction``  a half message was committed or rolled back (:mod:`.transaction`)
  ``SendBack``        a consumer handed it back (:mod:`.send_back`): a retry copy parked
                      for ``%RETRY%{group}``, or its copy stored in ``%DLQ%{group}``

  and, for RocketMQ 5 clients (which trace nothing themselves), what a traced client
  would: Pub, SubBefore, SubAfter with ``source`` ``proxy`` (:mod:`.grpc_v2.client_trace`);

The hooks only append to a bounded deque (``MAX_QUEUED``; a full deque drops
and counts); the service writes what is queued every ``FLUSH_INTERVAL_S`` as
ordinary messages put straight into the local store (no network, no ACL: the
broker writes them itself), KEYS holding the traced ids so ``QueryMessage`` on
the trace topic finds them. Messages of the trace topic itself are never traced.
The service runs on masters only (it is started with the other services that
write: delayed delivery, timers, transaction checks).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any

from pocketmq.broker.store.api import MessageStore
from pocketmq.broker.store.batch import ScannedBatch
from pocketmq.broker.store.results import PutResult, PutStatus
from pocketmq.broker.topic_config import (
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
    BrokerTopicConfig,
    TopicConfigManager,
)
from pocketmq.common.aio import cancel_and_wait
from pocketmq.common.clock import Clock, SystemClock
from pocketmq.common.message import StoredMessage
from pocketmq.common.msgid import encode_offset_msg_id
from pocketmq.common.trace import TraceRecord, TraceType, pack_trace_messages

__all__ = ["PROXY_SOURCE", "BrokerTraceService"]

log = logging.getLogger(__name__)

MAX_QUEUED = 8192  # records waiting to be written; more are dropped (counted)
FLUSH_INTERVAL_S = 0.1  # how long a record waits at most
BATCH_MAX_RECORDS = 500  # records written per round
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROXY_SOURCE = "proxy"  # records of a RocketMQ 5 client's doings, written for it

_PARKED = {SCHEDULE_TOPIC: "Delay", TIMER_TOPIC: "Delay", TRANS_HALF_TOPIC: "Trans_Half"}


class BrokerTraceService:
    """Owns the queue of the broker's trace records and the task that writes them."""

    def __init__(
        self,
        store: MessageStore,
        *,
        topic: str,
        broker_name: str,
        store_host: tuple[str, int],
        clock: Clock | None = None,
        max_queued: int = MAX_QUEUED,
    ) -> None:
        self._store = store
        self.topic = topic
        self._broker_name = broker_name
        self._store_host = store_host
        self._host_text = f"{store_host[0]}:{store_host[1]}"
        self._clock = clock or SystemClock()
        self._max_queued = max_queued
        self._queue: deque[TraceRecord] = deque()
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0
        self.failed = 0
        self.written = 0

    # -- lifecycle ----------------------------------------------------------------------
    def ensure_topic(self, topics: TopicConfigManager) -> BrokerTopicConfig:
        """The trace topic, created with one read-write queue when missing (as RocketMQ)."""
        return topics.get_or_create(
            BrokerTopicConfig(topic_name=self.topic, read_queue_nums=1, write_queue_nums=1)
        )

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="BrokerTraceService"
            )

    async def stop(self) -> None:
        """Stop the task; write what is queued."""
        await cancel_and_wait(self._task)
        self._task = None
        while self._queue and self.run_once():
            pass

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_INTERVAL_S)
            try:
                while self.run_once() >= BATCH_MAX_RECORDS:
                    await asyncio.sleep(0)
            except Exception:
                log.exception("trace: writing records to %s failed", self.topic)

    def run_once(self) -> int:
        """Write up to one batch of queued records; the records taken."""
        count = min(BATCH_MAX_RECORDS, len(self._queue))
        records = [self._queue.popleft() for _ in range(count)]
        for body, keys in pack_trace_messages(records):
            lines = body.count(b"\n") + 1
            result = self._store.put_message(
                topic=self.topic,
                queue_id=0,
                body=body,
                properties={"KEYS": " ".join(keys)},
                born_timestamp_ms=self._clock.now_ms(),
                born_host=self._store_host,
            )
            if result.status is PutStatus.PUT_OK:
                self.written += lines
            else:
                self.failed += lines
                log.warning(
                    "trace: the store refused %d trace records (%s: %s)",
                    lines,
                    result.status.value,
                    result.error,
                )
        return count

    def _add(self, record: TraceRecord) -> None:
        if len(self._queue) >= self._max_queued:
            if not self.dropped:
                log.warning(
                    "trace: %d records are waiting to be written; dropping more", self._max_queued
                )
            self.dropped += 1
            return
        self._queue.append(record)

    def _record(self, kind: str, ts: int, **fields: Any) -> TraceRecord:
        return TraceRecord(
            type=kind,
            ts=ts,
            broker=self._broker_name,
            store_host=self._host_text,
            source="broker",
            **fields,
        )

    def _offset_msg_id(self, phys_offset: int) -> str:
        return encode_offset_msg_id(self._store_host[0], self._store_host[1], phys_offset)

    def offset_msg_id(self, phys_offset: int) -> str:
        """The offset message id of this broker's record at *phys_offset*."""
        return self._offset_msg_id(phys_offset)

    def add_for_client(self, kind: str, ts: int, **fields: Any) -> None:
        """Queue a record of what a RocketMQ 5 client did (``source`` ``proxy``: written by
        the broker on its behalf, :mod:`.grpc_v2.client_trace`); fields as TraceRecord's."""
        record = self._record(kind, ts, **fields)
        record.source = PROXY_SOURCE
        self._add(record)

    # -- hooks --------------------------------------------------------------------------
    def on_stored(self, scanned: ScannedBatch, result: PutResult) -> None:
        """SendMessageProcessor stored *scanned* (the records as sent) as *result* says."""
        if all(topic == self.topic for topic in scanned.topics):
            return
        properties = scanned.properties
        for i, topic in enumerate(scanned.topics):
            if topic == self.topic:
                continue
            props = properties[i]
            stored_in = result.topics[i] if i < len(result.topics) else topic
            self._add(
                self._record(
                    TraceType.STORE,
                    result.store_timestamp_ms,
                    msg_id=scanned.uniq_keys[i],
                    offset_msg_id=self._offset_msg_id(result.phys_offsets[i]),
                    topic=topic,
                    tags=props.get("TAGS", ""),
                    keys=[k for k in props.get("KEYS", "").split(" ") if k],
                    queue_id=scanned.queue_ids[i],
                    queue_offset=result.queue_offsets[i],
                    store_time=result.store_timestamp_ms,
                    status="PUT_OK",
                    stored_topic=stored_in if stored_in != topic else "",
                    msg_type=_PARKED.get(stored_in, "Normal"),
                    body_bytes=scanned.sizes[i],
                )
            )

    def on_delivered(
        self, msg: StoredMessage, *, topic: str, queue_id: int, result: PutResult, via: str
    ) -> None:
        """A message parked in *msg.topic* was put into *topic* (``via`` says by what)."""
        if topic == self.topic or not result.phys_offsets:
            return
        self._add(
            self._record(
                TraceType.DELIVERED,
                result.store_timestamp_ms,
                msg_id=msg.uniq_key,
                offset_msg_id=self._offset_msg_id(result.phys_offsets[0]),
                topic=topic,
                tags=msg.tags,
                keys=msg.keys,
                queue_id=queue_id,
                queue_offset=result.queue_offsets[0],
                store_time=result.store_timestamp_ms,
                born_time=msg.born_timestamp_ms,
                stored_topic=msg.topic,
                status=via,
                retry_times=msg.reconsume_times,
                msg_type="Delay",
            )
        )

    def on_transaction_end(
        self, half: StoredMessage, *, resolution: str, producer_group: str, from_check: bool
    ) -> None:
        """A half message was committed or rolled back."""
        self._add(
            self._record(
                TraceType.END_TRANSACTION,
                self._clock.now_ms(),
                msg_id=half.uniq_key,
                offset_msg_id=self._offset_msg_id(half.phys_offset),
                topic=half.properties.get(PROPERTY_REAL_TOPIC, half.topic),
                tags=half.tags,
                keys=half.keys,
                group=producer_group,
                transaction_state=resolution,
                status=resolution,
                from_transaction_check=from_check,
                stored_topic=half.topic,
                msg_type=f"Trans_{resolution.capitalize()}",
            )
        )

    def on_sent_back(
        self,
        msg: StoredMessage,
        *,
        group: str,
        to_topic: str,
        dead: bool,
        reconsume_times: int,
        result: PutResult,
    ) -> None:
        """A consumer of *group* handed *msg* back: a retry copy, or one for its DLQ."""
        if msg.topic == self.topic or not result.phys_offsets:
            return
        self._add(
            self._record(
                TraceType.SEND_BACK,
                result.store_timestamp_ms,
                msg_id=msg.uniq_key,
                offset_msg_id=self._offset_msg_id(result.phys_offsets[0]),
                topic=to_topic,
                tags=msg.tags,
                keys=msg.keys,
                group=group,
                queue_id=result.queue_ids[0],
                queue_offset=result.queue_offsets[0],
                store_time=result.store_timestamp_ms,
                retry_times=reconsume_times,
                stored_topic=result.topics[0] if result.topics[0] != to_topic else "",
                status="dead-lettered" if dead else "to retry",
                msg_type="Normal",
            )
        )

    @property
    def queued(self) -> int:
        return len(self._queue)

    def figures(self) -> dict[str, str]:
        return {
            "trace_written_total": str(self.written),
            "trace_dropped_total": str(self.dropped + self.failed),
            "trace_queued": str(len(self._queue)),
        }
