"""Reading one :class:`~pocketmq.spark.planning.QueueRange` in a Spark task.

The task pulls ``[start, end)`` (no long polling: the range is known to exist)
and decodes each reply straight into an Arrow record batch
(:func:`~pocketmq.spark.arrowcodec.decode_block`: compiled, no Python object
per message). Without a tag filter, offsets map one to one to messages, so
the range is cut into *windows* of as many messages as the broker returns per
queue (learnt from the first reply) and up to :data:`WINDOWS_PER_CALL` windows
(and :data:`CALL_BYTES`) go in one ``PullBatch`` call, with
:data:`CALLS_IN_FLIGHT` calls in flight, so the broker, the network and the
decoding overlap::

    loop thread:   PullBatch(w0..w63) PullBatch(w64..w127) PullBatch(w128..) ...
    task thread:                      (keep)               (keep) ... decode(w0..w255)

and the replies' records are decoded :data:`ROWS_PER_BATCH` rows (or
:data:`BATCH_BYTES`) at a time, into one record batch: Spark pays per batch too.
The calls are ``bulk`` (``PullBatchRequest.bulk``): a window asks for
:data:`BULK_WINDOW` messages, which a broker answers in one store read and one
reply where a consumer's pull gets 32 (``max_pull_messages``); a broker that
predates bulk pulls answers 32, and the windows are 32.

A window answered short (the reply hit the byte cap, or the call its 4 MiB
budget) has its rest pulled before the rows after it, so rows come in offset
order. Anything else unexpected (offsets gone, a gap) sends the read back to
plain PullMessage calls, one after another, for that window; with a tag
filter every pull is such a call (the broker filters, so offsets do not
predict counts), the next one sent before the current reply is decoded.

Offsets the broker no longer has (retention, a queue truncated after a crash)
are reported by :func:`data_loss`: an error with ``failOnDataLoss=true`` (the
default), a warning otherwise, and the read goes on from where the queue now
starts.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from pocketmq.client import (
    SQL92,
    TAG,
    ClientError,
    PullReply,
    PullStatus,
    QueuePull,
    RemoteError,
)
from pocketmq.common.errors import CorruptRecordError
from pocketmq.spark import arrowcodec
from pocketmq.spark.arrowcodec import Stop
from pocketmq.spark.errors import DataLossError
from pocketmq.spark.options import PullSettings, tag_set
from pocketmq.spark.planning import QueueRange
from pocketmq.spark.remote import freeze_worker_heap, remoting, submit

__all__ = ["ROWS_PER_BATCH", "data_loss", "keep_tags", "read_range"]

log = logging.getLogger(__name__)
T = TypeVar("T")

ROWS_PER_BATCH = 8192  # rows per record batch, at most
PULL_ATTEMPTS = 3
PULL_RETRY_DELAY_S = 0.5
WINDOWS_PER_CALL = 64  # windows of one queue per PullBatch call, at most
BULK_WINDOW = 1_024  # messages a window asks for (the broker's MAX_BULK_PULL_MESSAGES)
CALL_BYTES = 3 << 20  # what one PullBatch call should return (the broker stops at 4 MiB)
CALLS_IN_FLIGHT = 3  # PullBatch calls of one task at a time
BATCH_BYTES = 8 << 20  # records decoded into one batch from a broker, at most (about)


def data_loss(message: str, fail: bool) -> None:
    """Report offsets that are gone, as the ``failOnDataLoss`` option says."""
    if fail:
        raise DataLossError(
            f"{message}. Some data may have been lost: it was removed by "
            "retention or the queue was truncated or deleted before the query "
            "read it. If such loss is acceptable, set the source option "
            "failOnDataLoss to false"
        )
    log.warning("%s; reading on (failOnDataLoss=false)", message)


def keep_tags(batch: pa.RecordBatch, tags: frozenset[str]) -> pa.RecordBatch:
    """The rows of *batch* whose tag is one of *tags* (the broker filters on tag hash
    codes, which may collide; a store has no filter at all)."""
    return batch.filter(
        pc.is_in(batch.column("tags"), value_set=pa.array(sorted(tags), pa.string()))
    )


async def _retrying(part: QueueRange, what: str, call: Callable[[], Awaitable[T]]) -> T:
    for attempt in range(1, PULL_ATTEMPTS + 1):
        try:
            return await call()
        except ClientError as exc:
            if not exc.retriable or attempt == PULL_ATTEMPTS:
                raise
            log.warning(
                "%s of %s failed (attempt %d of %d): %s",
                what,
                part.queue,
                attempt,
                PULL_ATTEMPTS,
                exc,
            )
            await asyncio.sleep(PULL_RETRY_DELAY_S * attempt)
    raise AssertionError("unreachable")


async def _pull(part: QueueRange, offset: int, max_messages: int | None = None) -> PullReply:
    broker = remoting(part.pull.credentials).broker(part.addr)
    settings = part.pull
    count = min(max_messages or settings.pull_batch_size, part.end - offset)
    subscription, expression_type = _subscription(settings)
    return await _retrying(
        part,
        f"pull at {offset}",
        lambda: broker.pull(
            group=settings.consumer_group,
            queue=part.queue,
            offset=offset,
            max_messages=count,
            subscription=subscription,
            suspend_ms=0,
            expression_type=expression_type,
            timeout_s=settings.pull_timeout_ms / 1000,
        ),
    )


def _subscription(settings: PullSettings) -> tuple[str, str]:
    """(expression, type) the pulls name: the SQL92 filter if given, else the tags."""
    if settings.sql_filter:
        return settings.sql_filter, SQL92
    return settings.tag_expression, TAG


async def _pull_windows(
    part: QueueRange,
    windows: list[tuple[int, int]],
) -> list[PullReply | RemoteError | None]:
    broker = remoting(part.pull.credentials).broker(part.addr)
    settings = part.pull
    subscription, expression_type = _subscription(settings)
    pulls = [
        QueuePull(
            queue=part.queue,
            offset=a,
            max_messages=b - a,
            subscription=subscription,
            expression_type=expression_type,
        )
        for a, b in windows
    ]
    return await _retrying(
        part,
        f"PullBatch at {windows[0][0]}",
        lambda: broker.pull_batch(
            group=settings.consumer_group,
            pulls=pulls,
            suspend_ms=0,
            timeout_s=settings.pull_timeout_ms / 1000,
            bulk=True,
        ),
    )


def _next_offset(part: QueueRange, offset: int, reply: PullReply) -> int:
    """Where the pull after *reply* starts; ``part.end`` when the range is done."""
    queue = part.queue
    fail = part.pull.fail_on_data_loss
    nxt = reply.next_begin_offset
    if reply.status in (PullStatus.FOUND, PullStatus.NO_MATCHED_MSG):
        return nxt if nxt > offset else part.end
    # NO_NEW_MSG / OFFSET_ILLEGAL: the queue does not hold *offset* (any more).
    span = f"(the broker's queue now spans {reply.min_offset}..{reply.max_offset})"
    if nxt > offset:
        data_loss(f"{queue}: offsets {offset}..{min(nxt, part.end)} are gone {span}", fail)
        return nxt
    data_loss(f"{queue}: offsets {offset}..{part.end} are gone {span}", fail)
    return part.end


def _decode(part: QueueRange, records: bytes | list[bytes]) -> pa.RecordBatch:
    """The rows of a reply's records (or of several replies': not joined, which copied
    every byte once more) below ``part.end``; a damaged record is an error."""
    block = arrowcodec.decode_block(
        records,
        0,
        len(records) if isinstance(records, bytes) else sum(map(len, records)),
        broker=part.broker,
        max_queue_offset=part.end,
        max_rows=1 << 30,
        max_bytes=1 << 40,
    )
    if block.stop is Stop.DAMAGED:
        raise CorruptRecordError(block.stop_pos, f"{part.queue}: {block.reason}")
    return block.batch


def _rows(
    part: QueueRange, offset: int, reply: PullReply, tags: frozenset[str] | None
) -> pa.RecordBatch | None:
    if reply.status is not PullStatus.FOUND:
        return None
    batch = _decode(part, reply.records)
    if (
        tags is None
        and not part.pull.sql_filter
        and batch.num_rows
        and batch.column("queue_offset")[0].as_py() > offset
    ):
        data_loss(
            f"{part.queue}: offsets {offset}..{batch.column('queue_offset')[0]} are gone",
            part.pull.fail_on_data_loss,
        )
    if tags is not None:
        batch = keep_tags(batch, tags)
    return batch


def pulled_one_by_one(part: QueueRange, start: int, end: int) -> Iterator[pa.RecordBatch]:
    """Rows of ``[start, end)`` of *part* by PullMessage, the next pull already sent."""
    tags = tag_set(part.pull.tag_expression)
    piece = (
        part
        if (start, end) == (part.start, part.end)
        else QueueRange(part.topic, part.broker, part.addr, part.queue_id, start, end, part.pull)
    )
    offset = start
    future = submit(_pull(piece, offset)) if offset < end else None
    while future is not None:
        reply = future.result()
        nxt = _next_offset(piece, offset, reply)
        future = submit(_pull(piece, nxt)) if nxt < end else None
        batch = _rows(piece, offset, reply, tags)
        offset = nxt
        if batch is not None and batch.num_rows:
            yield batch


@dataclass
class _Call:
    windows: list[tuple[int, int]]
    future: Future[list[PullReply | RemoteError | None]]


def _clean(reply: PullReply | RemoteError | None, a: int, b: int) -> bool:
    """Whether *reply* holds exactly offsets ``a..next_begin_offset`` (no gap, none gone)."""
    return (
        isinstance(reply, PullReply)
        and reply.status is PullStatus.FOUND
        and a < reply.next_begin_offset <= b
        and reply.message_count == reply.next_begin_offset - a
    )


def pulled_in_windows(part: QueueRange) -> Iterator[pa.RecordBatch]:
    """Rows of *part* by pipelined PullBatch calls of several windows (no tag filter)."""
    (first,) = submit(
        _pull_windows(part, [(part.start, min(part.start + BULK_WINDOW, part.end))])
    ).result()
    if not isinstance(first, PullReply) or not _clean(first, part.start, part.end):
        yield from pulled_one_by_one(part, part.start, part.end)
        return
    window = max(first.next_begin_offset - part.start, 1)  # the broker's cap per queue
    per_call = max(1, min(WINDOWS_PER_CALL, CALL_BYTES // max(len(first.records), 1)))
    yield _decode(part, first.records)
    cursor = first.next_begin_offset  # the first offset no call covers yet
    calls: deque[_Call] = deque()

    def send() -> None:
        nonlocal cursor
        windows: list[tuple[int, int]] = []
        while cursor < part.end and len(windows) < per_call:
            windows.append((cursor, min(cursor + window, part.end)))
            cursor = windows[-1][1]
        if windows:
            calls.append(_Call(windows, submit(_pull_windows(part, windows))))

    for _ in range(CALLS_IN_FLIGHT):
        send()
    # Replies are decoded ROWS_PER_BATCH rows (or BATCH_BYTES) at a time, across calls:
    # fewer, larger batches cost Spark less per row (an Arrow IPC message, Python calls).
    records: list[bytes] = []
    rows = nbytes = 0
    try:
        while calls:
            call = calls.popleft()
            replies = call.future.result()
            send()
            for (a, b), reply in zip(call.windows, replies, strict=True):
                if isinstance(reply, PullReply) and _clean(reply, a, b):
                    records.append(reply.records)
                    rows += reply.message_count
                    nbytes += len(reply.records)
                    if reply.next_begin_offset == b:
                        continue
                    a = reply.next_begin_offset  # short: keep what came, pull the rest now
                if records:
                    yield _decode(part, records)
                    records, rows, nbytes = [], 0, 0
                yield from pulled_one_by_one(part, a, b)
            if rows >= ROWS_PER_BATCH or nbytes >= BATCH_BYTES or not calls:
                if records:
                    yield _decode(part, records)
                records, rows, nbytes = [], 0, 0
    finally:
        for call in calls:
            call.future.cancel()


def read_range(part: QueueRange) -> Iterator[pa.RecordBatch]:
    """Arrow record batches of the messages in *part* (Spark's ``read(partition)``)."""
    freeze_worker_heap()
    if tag_set(part.pull.tag_expression) is None and not part.pull.sql_filter:
        batches = pulled_in_windows(part)
    else:
        batches = pulled_one_by_one(part, part.start, part.end)
    for batch in batches:
        if batch.num_rows:
            yield batch
