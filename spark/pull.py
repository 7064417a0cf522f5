"""Reading one :class:`~pocketmq.spark.planning.QueueRange` in a Spark task.

The task pulls ``[start, end)`` with PullMessage (no long polling: the range is
known to exist), decodes each reply with the SDK's
:func:`~pocketmq.client.message_codec.decode_messages` and yields Arrow record
batches of up to :data:`ROWS_PER_BATCH` rows. The next pull is sent before the
current reply is decoded, so the network and the decoding overlap::

    loop thread:   pull(o0) ····· pull(o1) ····· pull(o2) ·····
    task thread:           decode(r0)     decode(r1)     decode(r2)

Offsets the broker no longer has (retention, a queue truncated after a crash)
are reported by :func:`data_loss`: an error with ``failOnDataLoss=true`` (the
default), a warning otherwise, and the read goes on from where the queue now
starts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pyarrow as pa

from pocketmq.client.errors import ClientError
from pocketmq.client.message_codec import decode_messages
from pocketmq.client.model import MessageExt
from pocketmq.client.remoting import PullReply, PullStatus
from pocketmq.spark.errors import DataLossError
from pocketmq.spark.options import tag_set
from pocketmq.spark.planning import QueueRange
from pocketmq.spark.remote import remoting, submit
from pocketmq.spark.schema import record_batch

__all__ = ["ROWS_PER_BATCH", "data_loss", "read_range"]

log = logging.getLogger(__name__)

ROWS_PER_BATCH = 8192
PULL_ATTEMPTS = 3
PULL_RETRY_DELAY_S = 0.5


def data_loss(message: str, fail: bool) -> None:
    """Report offsets that are gone, as the ``failOnDataLoss`` option says."""
    if fail:
        raise DataLossError(f"{message}. Some data may have been lost: it was removed by "
                            "retention or the queue was truncated or deleted before the query "
                            "read it. If such loss is acceptable, set the source option "
                            "failOnDataLoss to false")
    log.warning("%s; reading on (failOnDataLoss=false)", message)


async def _pull(part: QueueRange, offset: int) -> PullReply:
    broker = remoting(part.pull.credentials).broker(part.addr)
    settings = part.pull
    for attempt in range(1, PULL_ATTEMPTS + 1):
        try:
            return await broker.pull(
                group=settings.consumer_group, queue=part.queue, offset=offset,
                max_messages=min(settings.pull_batch_size, part.end - offset),
                subscription=settings.tag_expression, suspend_ms=0,
                timeout_s=settings.pull_timeout_ms / 1000)
        except ClientError as exc:
            if not exc.retriable or attempt == PULL_ATTEMPTS:
                raise
            log.warning("pull of %s at %d failed (attempt %d of %d): %s", part.queue, offset,
                        attempt, PULL_ATTEMPTS, exc)
            await asyncio.sleep(PULL_RETRY_DELAY_S * attempt)
    raise AssertionError("unreachable")


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


def _messages(part: QueueRange, offset: int, reply: PullReply,
              tags: frozenset[str] | None) -> list[MessageExt]:
    if reply.status is not PullStatus.FOUND:
        return []
    messages = decode_messages(reply.records, part.broker)
    if tags is None and messages and messages[0].queue_offset > offset:
        data_loss(f"{part.queue}: offsets {offset}..{messages[0].queue_offset} are gone",
                  part.pull.fail_on_data_loss)
    end = part.end
    if messages[-1].queue_offset >= end or tags is not None:
        # The broker filters on tag hash codes, which may collide: check the strings.
        messages = [m for m in messages
                    if m.queue_offset < end and (tags is None or m.tags in tags)]
    return messages


def pulled(part: QueueRange) -> Iterator[list[MessageExt]]:
    """The messages of *part*, one list per pull, with the next pull already sent."""
    tags = tag_set(part.pull.tag_expression)
    offset = part.start
    future = submit(_pull(part, offset)) if offset < part.end else None
    while future is not None:
        reply = future.result()
        nxt = _next_offset(part, offset, reply)
        future = submit(_pull(part, nxt)) if nxt < part.end else None
        messages = _messages(part, offset, reply, tags)
        offset = nxt
        if messages:
            yield messages


def read_range(part: QueueRange) -> Iterator[pa.RecordBatch]:
    """Arrow record batches of the messages in *part* (Spark's ``read(partition)``)."""
    pending: list[MessageExt] = []
    for messages in pulled(part):
        pending.extend(messages)
        if len(pending) >= ROWS_PER_BATCH:
            yield record_batch(pending, part.broker)
            pending = []
    if pending:
        yield record_batch(pending, part.broker)
