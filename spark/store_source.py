"""``spark.read.format("pocketmq-store").load(DATA_DIR)``: the commit log, read from its files.

For audit, export and analytics without a broker: the reader maps commit-log
segments read-only (:class:`~pocketmq.broker.store.mapped_file.MappedFile` in
its read-only mode, as ``pocketmq store verify`` does), never opens the store,
never takes its ``lock`` and never runs recovery, so it works on a stopped
broker's directory and on a live one's alike. One Spark partition per segment::

    DATA/commitlog/00000000000000000000   -> partition 0
    DATA/commitlog/00000000001073741824   -> partition 1   ...

A task walks its segment's records by TOTALSIZE, checking magic, size and
PHYSICALOFFSET (a record whose PHYSICALOFFSET is not where it lies is not
finished yet), and decodes runs of whole records with the SDK's
:func:`~pocketmq.client.message_codec.decode_messages` (body CRC checked), so the rows are the
ones a pull would return, in the same schema. It skips what a consume queue
would not show: BLANK fillers and prepared or rolled-back transaction halves.

Where the records end: at the first zero TOTALSIZE (the unwritten rest of the
last segment) or a BLANK (the unusable tail of a full one). A record that fails
its checks in the last segment is taken for a write in progress and ends the
read quietly; anywhere else it is damage, reported as data loss (an error
unless ``failOnDataLoss`` is false, then a warning and the rest of that
segment is skipped). Options: ``subscribe`` or ``subscribePattern`` (topics to
keep; default all), ``tagExpression``, ``brokerName`` (the ``broker`` column,
null by default: a data directory does not record its broker's name),
``failOnDataLoss``.
"""

from __future__ import annotations

import logging
import mmap
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from pocketmq.broker.store.commitlog import is_dispatched_to_queue
from pocketmq.broker.store.io import StoreIO
from pocketmq.broker.store.mapped_file import MappedFile
from pocketmq.broker.store.verify import open_commitlog_read_only
from pocketmq.client.message_codec import decode_messages
from pocketmq.client.model import MessageExt
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.message import (
    BLANK_MAGIC_CODE,
    HEAD,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
)
from pocketmq.spark.errors import OptionError
from pocketmq.spark.options import StoreOptions, parse_store_options, tag_set
from pocketmq.spark.pull import ROWS_PER_BATCH, data_loss
from pocketmq.spark.schema import SCHEMA, check_read_schema, record_batch

__all__ = ["PocketMQStoreDataSource", "SegmentPart", "read_segment"]

log = logging.getLogger(__name__)

CHUNK_BYTES = 4 * 1024 * 1024   # records decoded per decode_messages call, at most
_MAGICS = (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2)


@dataclass(frozen=True)
class SegmentPart(InputPartition):
    """One commit-log segment and what to keep of it."""

    path: str
    file_from_offset: int
    file_size: int
    last: bool                 # the newest segment at planning time: its tail may be in flight
    opts: StoreOptions


def _segments(opts: StoreOptions) -> list[SegmentPart]:
    if not os.path.isdir(os.path.join(opts.data_dir, "commitlog")):
        raise OptionError(f"path {opts.data_dir!r} is not a PocketMQ data directory (it has no "
                          "commitlog/ folder); give the broker's --data-dir")
    commitlog = open_commitlog_read_only(opts.data_dir)
    try:
        files = [(mf.path, mf.file_from_offset, commitlog.file_size)
                 for mf in commitlog.queue.files]
    finally:
        commitlog.queue.close()
    return [SegmentPart(path, start, size, i == len(files) - 1, opts)
            for i, (path, start, size) in enumerate(files)]


def _run_end(buf: mmap.mmap, pos: int, base: int, limit: int) -> tuple[int, str]:
    """End of the run of checked records from *pos* (at most CHUNK_BYTES), and why it ends:
    ``""`` (more follows), ``"end"`` (log end or BLANK) or a description of a bad record."""
    start = pos
    unpack = HEAD.unpack_from
    while pos - start < CHUNK_BYTES:
        if limit - pos < HEAD.size:
            return pos, "end"
        total, magic, _crc, _qid, _flag, _qo, phys, _sysflag, _born = unpack(buf, pos)
        if magic == BLANK_MAGIC_CODE or (total == 0 and magic == 0):
            return pos, "end"
        if magic not in _MAGICS:
            return pos, f"magic code is 0x{magic:08X}"
        if total < HEAD.size or pos + total > limit:
            return pos, f"TOTALSIZE {total} does not fit the {limit - pos} bytes left"
        if phys != base + pos:
            return pos, f"PHYSICALOFFSET says {phys} (unfinished or stale record)"
        pos += total
    return pos, ""


def _decode(raw: bytes, broker: str) -> tuple[list[MessageExt], int, str]:
    """Decode a run of records: (messages, bytes decoded, why it stopped early or "")."""
    try:
        return decode_messages(raw, broker, check_crc=True), len(raw), ""
    except CorruptRecordError as exc:  # a body CRC: keep the records before it
        return decode_messages(raw[:exc.offset], broker, check_crc=True), exc.offset, exc.reason


def read_segment(part: SegmentPart) -> Iterator[pa.RecordBatch]:
    """The rows of one segment (Spark's ``read(partition)``)."""
    opts = part.opts
    topics = set(opts.topics)
    pattern = re.compile(opts.pattern) if opts.pattern else None
    tags = tag_set(opts.tag_expression)
    broker = opts.broker_name or ""

    def wanted(m: MessageExt) -> bool:
        return (is_dispatched_to_queue(m.sysflag) and (not topics or m.topic in topics)
                and (pattern is None or pattern.fullmatch(m.topic) is not None)
                and (tags is None or m.tags in tags))

    try:
        mf = MappedFile(part.path, part.file_size, io=StoreIO(), create=False, read_only=True)
    except FileNotFoundError:
        data_loss(f"segment {part.path} was deleted (retention) before it was read",
                  opts.fail_on_data_loss)
        return
    try:
        buf, limit = mf.buffer, mf.file_size
        pos, pending = 0, []
        while buf is not None:
            end, stop = _run_end(buf, pos, part.file_from_offset, limit)
            messages, done, bad = _decode(buf[pos:end], broker)
            pending.extend(filter(wanted, messages))
            if len(pending) >= ROWS_PER_BATCH:
                yield record_batch(pending, opts.broker_name)
                pending = []
            if bad or stop not in ("", "end"):
                _damaged(part, part.file_from_offset + pos + done, bad or stop)
                break
            if stop == "end":
                break
            pos = end
        if pending:
            yield record_batch(pending, opts.broker_name)
    finally:
        mf.close()


def _damaged(part: SegmentPart, offset: int, reason: str) -> None:
    if part.last:
        log.debug("segment %s: records end at %d (%s): a write in progress", part.path,
                  offset, reason)
        return
    data_loss(f"segment {part.path}: the record at commit-log offset {offset} is damaged "
              f"({reason}); the rest of the segment cannot be read", part.opts.fail_on_data_loss)


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
