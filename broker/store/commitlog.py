"""CommitLog: the one append-only log every topic's messages go into.

Records (layout in :mod:`pocketmq.common.message`) lie back to back in
segments of ``commitlog_file_size_bytes`` bytes. A record never straddles two
segments: when a put does not fit what is left (plus 8 bytes, so a BLANK head
always fits), the rest of the segment becomes one BLANK record and the put goes
to the next segment. A batch is appended whole into one segment with one copy,
then QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP and STOREHOST of each of its
records are patched in place in the mapping. With *write_without_mmap* the
mapping is read-only and the batch is patched in a reused scratch buffer, then
written with one ``pwrite``::

    blob ──copy──> scratch (patched) ──pwrite──> page cache  <──mmap── readers

The commit log also keeps the next queue offset of every (topic, queue): it is
assigned here, under the single writer, so consume-queue order equals log order.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from mmap import mmap

from pocketmq.broker.store import speedups
from pocketmq.broker.store.batch import ScannedBatch, is_dispatched_to_queue
from pocketmq.broker.store.io import StoreIO
from pocketmq.broker.store.mapped_file import MappedFile
from pocketmq.broker.store.mapped_file_queue import MappedFileQueue
from pocketmq.broker.store.warm import WarmMappedFileService
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.message import check_record
from pocketmq.common.record_layout import (
    BLANK_HEAD,
    BLANK_MAGIC_CODE,
    FIELD_STRUCT,
    HEAD,
    POS_QUEUEOFFSET,
    POS_SYSFLAG,
    QUEUE_AND_PHYS_OFFSET,
    STORE_TIMESTAMP,
    SysFlag,
    host_positions,
    store_timestamp_pos,
)

__all__ = [
    "AppendResult",
    "CommitLog",
    "ScannedRecord",
    "is_dispatched_to_queue",
    "patch_batch",
    "py_patch_batch",
]

log = logging.getLogger(__name__)

_SYSFLAG = FIELD_STRUCT["SYSFLAG"]
# enough of a record's start to hold STORETIMESTAMP whatever the size of BORNHOST
_STORE_TIMESTAMP_END = host_positions(SysFlag.BORNHOST_V6).store_timestamp + STORE_TIMESTAMP.size
END_FILE_MIN_BLANK_LENGTH = BLANK_HEAD.size


@dataclass(frozen=True, slots=True)
class AppendResult:
    phys_offsets: list[int]
    queue_offsets: list[int]
    wrote_end: int  # commit-log offset one past the batch


@dataclass(frozen=True, slots=True)
class ScannedRecord:
    """A record found by a recovery or verify scan: where it is and what dispatch needs."""

    phys_offset: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    sysflag: int
    store_timestamp_ms: int
    properties: bytes


def py_patch_batch(
    buf: mmap | bytearray | memoryview,
    rel: int,
    base: int,
    batch: ScannedBatch,
    table: dict[tuple[str, int], int],
    store_timestamp_ms: int,
    store_host: bytes,
) -> tuple[list[int], list[int]]:
    """Assign queue offsets and patch the broker's fields of a batch copied into *buf*.

    The batch's records lie in the writable *buf* from *rel* on; *base* is the
    log offset of ``buf[0]``. Each record dispatched to a queue takes the next
    queue offset of its (topic, queue id) from *table*, which is advanced; the
    others get 0. QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP and STOREHOST are
    written in place. Returns ``(phys_offsets, queue_offsets)``.
    """
    patch_offsets = QUEUE_AND_PHYS_OFFSET.pack_into
    patch_timestamp = STORE_TIMESTAMP.pack_into
    host_size = len(store_host)
    phys_offsets: list[int] = []
    queue_offsets: list[int] = []
    for pos, topic, queue_id, sysflag, ts_pos in zip(
        batch.positions,
        batch.topics,
        batch.queue_ids,
        batch.sysflags,
        batch.store_ts_positions,
        strict=True,
    ):
        at = rel + pos
        phys = base + at
        if is_dispatched_to_queue(sysflag):
            key = (topic, queue_id)
            queue_offset = table.get(key, 0)
            table[key] = queue_offset + 1
        else:
            queue_offset = 0
        patch_offsets(buf, at + POS_QUEUEOFFSET, queue_offset, phys)
        patch_timestamp(buf, at + ts_pos, store_timestamp_ms)
        host_at = at + ts_pos + STORE_TIMESTAMP.size  # STOREHOST follows STORETIMESTAMP
        buf[host_at : host_at + host_size] = store_host
        phys_offsets.append(phys)
        queue_offsets.append(queue_offset)
    return phys_offsets, queue_offsets


patch_batch = speedups.pick("patch_batch", py_patch_batch)


class CommitLog:
    def __init__(
        self,
        directory: str,
        file_size: int,
        *,
        io: StoreIO,
        store_host: bytes,
        write_without_mmap: bool = False,
    ) -> None:
        self.queue = MappedFileQueue(
            directory, file_size, io=io, write_without_mmap=write_without_mmap
        )
        self.write_without_mmap = write_without_mmap
        self._scratch = bytearray()  # write_without_mmap: the batch being patched
        self.file_size = file_size
        self.store_host = store_host
        self.queue_offsets: dict[tuple[str, int], int] = {}
        self.warm: WarmMappedFileService | None = None  # set by the store when enabled

    # -- positions -----------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        return self.queue.min_offset

    @property
    def max_offset(self) -> int:
        return self.queue.max_offset

    # -- append ----------------------------------------------------------------------
    def append_batch(
        self, blob: bytes | bytearray | memoryview, batch: ScannedBatch, store_timestamp_ms: int
    ) -> AppendResult:
        """Append a checked batch; assign queue offsets; patch broker fields in place.

        Raises ``OSError`` when a new segment cannot be created (disk full); then
        nothing was written and no queue offset was consumed.
        """
        size = len(blob)
        mf = self.queue.last_file()
        assert mf is not None
        if size + END_FILE_MIN_BLANK_LENGTH > mf.remaining:
            self._fill_blank(mf)
            mf = self.queue.last_file()
            assert mf is not None
        base = mf.file_from_offset
        if mf.write_without_mmap:
            rel = mf.wrote_position
            phys_offsets, queue_offsets = self._patch_and_write(mf, blob, batch, store_timestamp_ms)
        else:
            rel = mf.append(blob)
            phys_offsets, queue_offsets = patch_batch(
                mf.buffer, rel, base, batch, self.queue_offsets, store_timestamp_ms, self.store_host
            )
        if self.warm is not None:
            self.warm.notify(mf)
        return AppendResult(phys_offsets, queue_offsets, base + rel + size)

    def _patch_and_write(
        self,
        mf: MappedFile,
        blob: bytes | bytearray | memoryview,
        batch: ScannedBatch,
        store_timestamp_ms: int,
    ) -> tuple[list[int], list[int]]:
        """Copy *blob* into the scratch buffer, patch it there, pwrite it at the
        write position (write_without_mmap). A failed write gives back the queue
        offsets it took, so nothing of the batch is left behind but bytes past
        the write position, which the next append overwrites."""
        size = len(blob)
        if len(self._scratch) < size:
            self._scratch = bytearray(max(size, 2 * len(self._scratch)))
        scratch = self._scratch
        scratch[:size] = blob
        table = self.queue_offsets
        phys_offsets, queue_offsets = patch_batch(
            scratch,
            0,
            mf.file_from_offset + mf.wrote_position,
            batch,
            table,
            store_timestamp_ms,
            self.store_host,
        )
        try:
            with memoryview(scratch) as whole, whole[:size] as view:
                mf.append(view)
        except OSError:
            for topic, queue_id, sysflag, queue_offset in zip(
                batch.topics, batch.queue_ids, batch.sysflags, queue_offsets, strict=True
            ):
                key = (topic, queue_id)
                if is_dispatched_to_queue(sysflag) and queue_offset < table.get(key, 0):
                    table[key] = queue_offset  # the first one the batch took for it
            raise
        return phys_offsets, queue_offsets

    def _fill_blank(self, mf: MappedFile) -> None:
        remaining = mf.remaining
        if remaining >= END_FILE_MIN_BLANK_LENGTH:
            mf.append(BLANK_HEAD.pack(remaining, BLANK_MAGIC_CODE))
        # The rest of the segment is already zero; only the write position moves.
        mf.wrote_position = mf.file_size

    # -- reads -----------------------------------------------------------------------
    def read(self, phys_offset: int, size: int) -> bytes | None:
        mf = self.queue.find(phys_offset)
        if mf is None or mf.closed:
            return None
        data = mf.read(phys_offset - mf.file_from_offset, size)
        return data if len(data) == size else None

    def read_record(self, phys_offset: int) -> bytes | None:
        """The whole record at *phys_offset*, or None if there is none."""
        head = self.read(phys_offset, HEAD.size)
        if head is None:
            return None
        total, magic = BLANK_HEAD.unpack_from(head, 0)
        if magic == BLANK_MAGIC_CODE or total < HEAD.size:
            return None
        return self.read(phys_offset, total)

    def store_timestamp(self, phys_offset: int) -> int | None:
        head = self.read(phys_offset, _STORE_TIMESTAMP_END)
        if head is None:
            return None
        sysflag = _SYSFLAG.unpack_from(head, POS_SYSFLAG)[0]
        return STORE_TIMESTAMP.unpack_from(head, store_timestamp_pos(sysflag))[0]

    # -- scanning (recovery, verify, dump) ---------------------------------------------
    def scan(
        self, start: int, *, check_crc: bool = True, stop: int | None = None
    ) -> Iterator[ScannedRecord]:
        """Yield every record from *start* (a record or segment boundary) on.

        BLANK records move the scan to the next segment. The scan ends quietly
        where the log ends (a zero TOTALSIZE) and raises
        :class:`CorruptRecordError` at the first damaged record, including one
        whose PHYSICALOFFSET is not where it lies (a stale or unpatched record).
        """
        offset = start
        while stop is None or offset < stop:
            mf = self.queue.find(offset)
            if mf is None:
                return
            buf = mf.buffer
            pos = offset - mf.file_from_offset
            limit = mf.file_size
            if limit - pos < BLANK_HEAD.size:
                offset = mf.file_from_offset + mf.file_size
                continue
            total, magic = BLANK_HEAD.unpack_from(buf, pos)
            if total == 0 and magic == 0:
                return
            if magic == BLANK_MAGIC_CODE:
                if total != limit - pos:
                    raise CorruptRecordError(
                        offset,
                        f"BLANK record of {total} bytes, but {limit - pos} are left in the segment",
                    )
                offset = mf.file_from_offset + mf.file_size
                continue
            try:
                lay = check_record(buf, pos, limit, check_crc=check_crc)
            except CorruptRecordError as exc:  # name the log offset, not the file position
                raise CorruptRecordError(offset, exc.reason) from None
            (_t, _m, _c, queue_id, _f, queue_offset, phys, sysflag, _b) = HEAD.unpack_from(buf, pos)
            if phys != offset:
                raise CorruptRecordError(
                    offset, f"PHYSICALOFFSET says {phys}; a stale or unfinished record"
                )
            ts = STORE_TIMESTAMP.unpack_from(buf, pos + store_timestamp_pos(sysflag))[0]
            yield ScannedRecord(
                phys_offset=offset,
                size=lay.total_size,
                topic=bytes(buf[lay.topic_pos : lay.topic_pos + lay.topic_len]).decode(
                    "utf-8", "replace"
                ),
                queue_id=queue_id,
                queue_offset=queue_offset,
                sysflag=sysflag,
                store_timestamp_ms=ts,
                properties=bytes(buf[lay.props_pos : lay.props_pos + lay.props_len]),
            )
            offset += lay.total_size

    def skip_to(self, start: int, target: int) -> int | None:
        """Walk the TOTALSIZE chain from *start* without checking records.

        Return *target* if the chain lands on it (it is a record boundary),
        else None. Cheap: used by recovery to trust what a checkpoint vouches for.
        """
        offset = start
        while offset < target:
            mf = self.queue.find(offset)
            if mf is None:
                return None
            pos = offset - mf.file_from_offset
            if mf.file_size - pos < BLANK_HEAD.size:
                offset = mf.file_from_offset + mf.file_size
                continue
            total, magic = BLANK_HEAD.unpack_from(mf.buffer, pos)
            if magic == BLANK_MAGIC_CODE:
                offset = mf.file_from_offset + mf.file_size
            elif total <= 0:
                return None
            else:
                offset += total
        return offset if offset == target else None
