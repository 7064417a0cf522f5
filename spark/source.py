"""The ``pocketmq`` data source: batch and streaming reads from brokers, and the sink.

Which process runs what (Spark's Python data source API)::

    driver, planner process   DataSource.reader()/streamReader()/writer(): options
                              and columns are checked here; batch partitions()
    driver, query runner      every stream-reader method but read(); the instance
                              lives as long as the query, so its state survives
    executor workers          read(partition), writer.write(): they see only what
                              the pickled reader or partition carries

Streaming offsets are JSON per topic, broker and queue (``{"orders":
{"broker-a": {"0": 14}}}``: the next offset to read), kept by Spark in the
query's checkpoint; a restarted query resumes from the last committed batch,
with neither gap nor duplicate. Queues that appear while a query runs (a new
topic matching ``subscribePattern``, more queues for a topic) are read from
their earliest offset, as the Kafka source reads new partitions.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from pocketmq.client import MessageQueue
from pocketmq.spark.options import (
    SourceOptions,
    offsets_from_json,
    offsets_to_json,
    parse_sink_options,
    parse_source_options,
)
from pocketmq.spark.planning import (
    QueueRange,
    make_ranges,
    plan_batch,
    rate_limit,
    resolve_offsets,
    split_ranges,
)
from pocketmq.spark.pull import data_loss, read_range
from pocketmq.spark.remote import QueueAddrs, queue_offsets, run, topic_queues
from pocketmq.spark.schema import SCHEMA, check_read_schema
from pocketmq.spark.sink import PocketMQStreamWriter, PocketMQWriter, sink_columns

__all__ = ["PocketMQBatchReader", "PocketMQDataSource", "PocketMQStreamReader"]

log = logging.getLogger(__name__)

Offsets = dict[MessageQueue, int]


def _read(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    # Spark hands a lone InputPartition(None) to a query that planned no partition.
    return read_range(partition) if isinstance(partition, QueueRange) else iter(())


class PocketMQBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self._opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        return run(plan_batch(self._opts))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)


class PocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions) -> None:
        self._opts = opts
        self._addrs: QueueAddrs = {}
        self._target: Offsets | None = None  # trigger(availableNow=True): where to stop
        self._latest: Offsets | None = None  # for reportLatestOffset

    # -- helpers (query-runner process) ---------------------------------------------------
    def _discover(self) -> QueueAddrs:
        queues = run(
            topic_queues(
                self._opts.namesrv,
                self._opts.selection,
                strict=False,
                credentials=self._opts.pull.credentials,
            )
        )
        self._addrs.update(queues)
        return queues

    def _addresses(self, queues: Sequence[MessageQueue]) -> QueueAddrs:
        if any(mq not in self._addrs for mq in queues):
            self._discover()
        gone = [str(mq) for mq in queues if mq not in self._addrs]
        if gone:
            raise RuntimeError(
                f"no broker serves {', '.join(gone)} now (checked with the "
                f"nameservers {', '.join(self._opts.namesrv)}); the query "
                "resumes from its checkpoint once the broker is back"
            )
        return {mq: self._addrs[mq] for mq in queues}

    def _earliest(self, queues: Sequence[MessageQueue]) -> Offsets:
        return (
            run(
                queue_offsets(
                    self._addresses(queues), "min", credentials=self._opts.pull.credentials
                )
            )
            if queues
            else {}
        )

    # -- Spark's calls ---------------------------------------------------------------------
    def initialOffset(self) -> dict:
        queues = self._discover()
        start = run(
            resolve_offsets(
                self._opts.starting,
                queues,
                option="startingOffsets",
                default="latest",
                strict=False,
                credentials=self._opts.pull.credentials,
            )
        )
        return offsets_to_json(start)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = run(
            queue_offsets(self._discover(), "max", credentials=self._opts.pull.credentials)
        )

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self._opts.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = offsets_from_json(start, "the checkpoint's offsets")
        if self._target is not None:
            latest = dict(self._target)
        else:
            latest = run(
                queue_offsets(self._discover(), "max", credentials=self._opts.pull.credentials)
            )
        self._latest = latest
        new = [mq for mq in latest if mq not in begin]
        base = {**begin, **self._earliest(new)}
        # A new queue joins once it holds a message; an empty one would make an empty batch.
        latest = {mq: off for mq, off in latest.items() if mq in begin or off > base[mq]}
        end = rate_limit(base, latest, limit.max_rows) if isinstance(limit, ReadMaxRows) else latest
        merged = dict(begin)
        for mq, offset in end.items():
            if offset < begin.get(mq, offset):
                log.warning(
                    "queue %s now ends at %d, before offset %d this query reached (was "
                    "it truncated?); waiting for it to pass %d",
                    mq,
                    offset,
                    begin[mq],
                    begin[mq],
                )
                continue
            merged[mq] = offset
        return start if merged == begin else offsets_to_json(merged)

    def reportLatestOffset(self) -> dict | None:
        return offsets_to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin = offsets_from_json(start, "the checkpoint's offsets")
        stop = offsets_from_json(end, "the checkpoint's offsets")
        new = [mq for mq in stop if mq not in begin]
        for mq, first in self._earliest(new).items():
            if first > 0:
                data_loss(
                    f"{mq} appeared with its first message at offset {first}; offsets "
                    f"0..{first} are gone",
                    self._opts.pull.fail_on_data_loss,
                )
            begin[mq] = first
        queues = self._addresses([mq for mq in stop if stop[mq] > begin[mq]])
        ranges = make_ranges(queues, begin, {mq: stop[mq] for mq in queues}, self._opts.pull)
        return split_ranges(
            ranges,
            min_partitions=self._opts.min_partitions,
            max_records=self._opts.max_records_per_partition,
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)

    def commit(self, end: dict) -> None:
        log.debug("pocketmq source: offsets up to %s are processed", end)


class PocketMQDataSource(DataSource):
    """``format("pocketmq")``: read from brokers (batch and streaming) and write to topics."""

    @classmethod
    def name(cls) -> str:
        return "pocketmq"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        check_read_schema(schema, "pocketmq")
        return PocketMQBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        check_read_schema(schema, "pocketmq")
        return PocketMQStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> PocketMQWriter:
        opts = parse_sink_options(self.options)
        return PocketMQWriter(opts, sink_columns(schema, opts), overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> PocketMQStreamWriter:
        opts = parse_sink_options(self.options)
        return PocketMQStreamWriter(opts, sink_columns(schema, opts))
