"""``spark.read.format("pocketmq-store").load(DATA_DIR)``: the commit log, read from its files.

For audit, export and analytics without a broker: the reader maps commit-log
segments read-only through the store's public offline reader
(:func:`pocketmq.broker.store.commitlog_segments` and
:func:`~pocketmq.broker.store.open_segment`, as ``pocketmq store verify`` reads),
never opens the store, never takes its ``lock`` and never runs recovery, so it
works on a stopped broker's directory and on a live one's alike. Each segment is
read by one Spark partition per ``maxBytesPerPartition`` (128 MiB) of its
records: the driver walks the segment's records by TOTALSIZE (8 bytes read per
record) to find where each part's first record starts (a segment no larger than a
part is one part, and is not walked: walking faulted in every page of it)::

    DATA/commitlog/00000000000000000000   -> partitions 0..7 (128 MiB of records each)
    DATA/commitlog/00000000001073741824   -> partitions 8..   ...

A task maps its segment and decodes it in blocks of up to
:data:`~pocketmq.spark.pull.ROWS_PER_BATCH` rows straight into Arrow buffers
(:func:`~pocketmq.spark.arrowcodec.decode_block`, compiled when the extension
is built), one record batch per block, with no Python object per record. The
decoder walks the records by TOTALSIZE, checking magic, size, PHYSICALOFFSET (a
record whose PHYSICALOFFSET is not where it lies is not finished yet) and the
body CRC; the rows are the ones a pull would return, in the same schema, and
equal to what the SDK's ``decode_messages`` makes of the records. It skips
what a consume queue would not show: BLANK fillers and prepared or rolled-back
transaction halves. Topics are filtered in the decoder (the filter is asked
once per distinct topic), tags on the batch (``pyarrow.compute``).

Where the records end: at the first zero TOTALSIZE (the unwritten rest of the
last segment) or a BLANK (the unusable tail of a full one). A record that fails
its checks in the last segment is taken for a write in progress and ends the
read quietly; anywhere else it is damage, reported as data loss (an error
unless ``failOnDataLoss`` is false, then a warning and the rest of that
part is skipped). Options: ``subscribe`` or ``subscribePattern`` (topics to
keep; default all), ``tagExpression``, ``brokerName`` (the ``broker`` column,
null by default: a data directory does not record its broker's name),
``maxBytesPerPartition`` (bytes of a segment per task, 128 MiB),
``failOnDataLoss``.
"""

from __future__ import annotations

import logging
import mmap
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from pocketmq.broker.store import (
    CommitLogSegment,
    commitlog_segments,
    is_data_directory,
    open_segment,
)
from pocketmq.spark import arrowcodec
from pocketmq.spark.arrowcodec import MODE_DISPATCHED, MODE_SEGMENT, Stop
from pocketmq.spark.errors import OptionError
from pocketmq.spark.options import StoreOptions, parse_store_options, tag_set
from pocketmq.spark.pull import ROWS_PER_BATCH, data_loss, keep_tags
from pocketmq.spark.remote import freeze_worker_heap
from pocketmq.spark.schema import SCHEMA, check_read_schema

__all__ = ["PocketMQStoreDataSource", "SegmentPart", "read_segment"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SegmentPart(InputPartition):
    """One commit-log segment and what to keep of it."""

    path: str
    file_from_offset: int
    file_size: int
    last: bool  # the newest segment at planning time: its tail may be in flight
    opts: StoreOptions
    start: int = 0  # the part's first record, a byte position in the segment
    end: int | None = None  # records starting here or later are the next part's


def _segments(opts: StoreOptions) -> list[SegmentPart]:
    if not is_data_directory(opts.data_dir):
        raise OptionError(
            f"path {opts.data_dir!r} is not a PocketMQ data directory (it has no "
            "commitlog/ folder); give the broker's --data-dir"
        )
    segments = commitlog_segments(opts.data_dir)
    parts: list[SegmentPart] = []
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        starts = _record_starts(segment, opts.max_bytes_per_partition)
        ends: list[int | None] = [*starts[1:], None]
        parts.extend(
            SegmentPart(
                segment.path,
                segment.file_from_offset,
                segment.file_size,
                last,
                opts,
                start,
                end,
            )
            for start, end in zip(starts, ends, strict=True)
        )
    return parts


def _record_starts(segment: CommitLogSegment, every: int) -> list[int]:
    """Where the segment's parts start; [0] for an empty segment or one already deleted
    (its one part then reports the deletion as data loss when it is read). A segment no
    larger than *every* is one part: no record of it needs reading on the driver."""
    if segment.file_size <= every:
        return [0]
    try:
        with open_segment(segment) as buf:
            if not len(buf):
                return [0]
            return arrowcodec.record_starts(buf, segment.file_size, segment.file_from_offset, every)
    except FileNotFoundError:
        return [0]


def topic_filter(opts: StoreOptions) -> Callable[[bytes], bool] | None:
    """The decoder's topic test (UTF-8 topic bytes -> keep?), or None: every topic."""
    topics = frozenset(opts.topics)
    pattern = re.compile(opts.pattern) if opts.pattern else None
    if not topics and pattern is None:
        return None

    def wanted(raw: bytes) -> bool:
        topic = raw.decode()
        return (not topics or topic in topics) and (
            pattern is None or pattern.fullmatch(topic) is not None
        )

    return wanted


def read_segment(part: SegmentPart) -> Iterator[pa.RecordBatch]:
    """The rows of one segment (Spark's ``read(partition)``), a batch per decoded block."""
    freeze_worker_heap()
    opts = part.opts
    tags = tag_set(opts.tag_expression)
    wanted = topic_filter(opts)
    segment = CommitLogSegment(
        path=part.path, file_from_offset=part.file_from_offset, file_size=part.file_size
    )
    try:
        with open_segment(segment) as buf:
            yield from _decoded(part, buf, tags, wanted)
    except FileNotFoundError:
        data_loss(
            f"segment {part.path} was deleted (retention) before it was read",
            opts.fail_on_data_loss,
        )


def _decoded(
    part: SegmentPart,
    buf: mmap.mmap | bytes,
    tags: frozenset[str] | None,
    wanted: Callable[[bytes], bool] | None,
) -> Iterator[pa.RecordBatch]:
    opts, limit, pos = part.opts, len(buf), part.start
    while limit:
        block = arrowcodec.decode_block(
            buf,
            pos,
            limit,
            end_pos=part.end,
            broker=opts.broker_name,
            mode=MODE_SEGMENT | MODE_DISPATCHED,
            base_phys=part.file_from_offset,
            check_crc=True,
            max_rows=ROWS_PER_BATCH,
            topic_filter=wanted,
        )
        batch = block.batch if tags is None else keep_tags(block.batch, tags)
        if batch.num_rows:
            yield batch
        if block.stop is Stop.DAMAGED:
            _damaged(part, part.file_from_offset + block.stop_pos, block.reason)
        if block.stop is not Stop.FULL:
            break
        pos = block.stop_pos


def _damaged(part: SegmentPart, offset: int, reason: str) -> None:
    if part.last:
        log.debug(
            "segment %s: records end at %d (%s): a write in progress", part.path, offset, reason
        )
        return
    data_loss(
        f"segment {part.path}: the record at commit-log offset {offset} is damaged "
        f"({reason}); the rest of the segment cannot be read",
        part.opts.fail_on_data_loss,
    )


class _StoreReader(DataSourceReader):
    def __init__(self, opts: StoreOptions) -> None:
        self._opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        return _segments(self._opts)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_segment(partition) if isinstance(partition, SegmentPart) else iter(())


class PocketMQStoreDataSource(DataSource):
    """``format("pocketmq-store")``: read a data directory's commit log (batch only)."""

    @classmethod
    def name(cls) -> str:
        return "pocketmq-store"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        check_read_schema(schema, "pocketmq-store")
        return _StoreReader(parse_store_options(self.options))
