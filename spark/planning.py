"""Turning options into offset ranges and ranges into Spark input partitions.

A read is planned on the driver: the selected queues are found through the
nameserver, ``earliest``/``latest``/JSON/time are resolved to concrete offsets
by asking each queue's broker, and every queue with something to read becomes
one :class:`QueueRange` ``[start, end)``, a Spark task. Ranges are then split
as the Kafka source splits them:

* a range longer than ``maxRecordsPerPartition`` into equal parts no longer
  than it;
* if fewer ranges than ``minPartitions`` remain, each range into parts in
  proportion to its share of all offsets (at least one; rounded half up, as
  Java's ``Math.round``).

A streaming micro-batch is capped by ``maxOffsetsPerTrigger``, divided over
the queues in proportion to their backlog (:func:`rate_limit`, Kafka's rule).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from pyspark.sql.datasource import InputPartition

from pocketmq.client import MessageQueue
from pocketmq.spark.errors import OptionError
from pocketmq.spark.options import (
    EARLIEST,
    LATEST,
    ClientSecurity,
    OffsetSpec,
    PullSettings,
    SourceOptions,
)
from pocketmq.spark.remote import QueueAddrs, queue_offsets, topic_queues

__all__ = ["QueueRange", "plan_batch", "rate_limit", "resolve_offsets", "split_ranges"]


@dataclass(frozen=True)
class QueueRange(InputPartition):
    """Offsets ``[start, end)`` of one queue, read by one task with PullMessage."""

    topic: str
    broker: str
    addr: str
    queue_id: int
    start: int
    end: int
    pull: PullSettings

    @property
    def queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker, self.queue_id)

    @property
    def size(self) -> int:
        return self.end - self.start


def make_ranges(
    queues: QueueAddrs,
    start: Mapping[MessageQueue, int],
    end: Mapping[MessageQueue, int],
    pull: PullSettings,
) -> list[QueueRange]:
    """One range per queue with ``end > start``, in queue order."""
    return [
        QueueRange(mq.topic, mq.broker_name, queues[mq], mq.queue_id, start[mq], end[mq], pull)
        for mq in sorted(end)
        if mq in start and end[mq] > start[mq]
    ]


def _divide(r: QueueRange, parts: int) -> list[QueueRange]:
    if parts <= 1:
        return [r]
    bounds = [r.start + r.size * i // parts for i in range(parts + 1)]
    return [replace(r, start=a, end=b) for a, b in itertools.pairwise(bounds) if b > a]


def split_ranges(
    ranges: list[QueueRange], *, min_partitions: int | None, max_records: int
) -> list[QueueRange]:
    """Split long ranges (``maxRecordsPerPartition``), then to reach ``minPartitions``."""
    out = [part for r in ranges for part in _divide(r, math.ceil(r.size / max_records))]
    if min_partitions is None or len(out) >= min_partitions:
        return out
    total = sum(r.size for r in out)
    return [
        part
        for r in out
        for part in _divide(r, max(math.floor(r.size / total * min_partitions + 0.5), 1))
    ]


def rate_limit(
    start: Mapping[MessageQueue, int], latest: Mapping[MessageQueue, int], max_rows: int
) -> dict[MessageQueue, int]:
    """End offsets reading at most about *max_rows* in all, split by backlog.

    Each queue gets ``max_rows * its backlog / total backlog`` offsets, rounded
    down, but at least one while it has any (so a small queue is never starved).
    """
    backlog = {mq: max(latest[mq] - start[mq], 0) for mq in latest if mq in start}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(latest)
    out = dict(latest)
    for mq, size in backlog.items():
        share = max_rows * size / total
        take = math.ceil(share) if share < 1 else math.floor(share)
        out[mq] = min(latest[mq], start[mq] + take)
    return out


async def resolve_offsets(
    spec: OffsetSpec,
    queues: QueueAddrs,
    *,
    option: str,
    default: str,
    strict: bool,
    credentials: ClientSecurity | None = None,
) -> dict[MessageQueue, int]:
    """Concrete offsets for *queues* from *spec*; queues JSON does not name get *default*."""
    if spec.kind == "timestamp":
        return await queue_offsets(
            queues, "time", timestamp_ms=spec.timestamp_ms, credentials=credentials
        )
    if spec.kind in ("earliest", "latest"):
        return await queue_offsets(
            queues, "min" if spec.kind == "earliest" else "max", credentials=credentials
        )
    unknown = sorted(set(spec.offsets) - set(queues))
    if unknown and strict:
        raise OptionError(
            f"option {option} names {', '.join(map(str, unknown))}, which this "
            f"query does not read (it reads "
            f"{', '.join(map(str, sorted(queues))) or 'no queue'})"
        )
    wanted = {
        mq: spec.offsets.get(mq, EARLIEST if default == "earliest" else LATEST) for mq in queues
    }
    mins = await queue_offsets(
        {mq: queues[mq] for mq, o in wanted.items() if o == EARLIEST},
        "min",
        credentials=credentials,
    )
    maxs = await queue_offsets(
        {mq: queues[mq] for mq, o in wanted.items() if o == LATEST}, "max", credentials=credentials
    )
    return {mq: mins.get(mq, maxs.get(mq, offset)) for mq, offset in wanted.items()}


async def plan_batch(opts: SourceOptions) -> list[QueueRange]:
    """The input partitions of a batch read."""
    queues = await topic_queues(
        opts.namesrv, opts.selection, strict=True, credentials=opts.pull.credentials
    )
    start = await resolve_offsets(
        opts.starting,
        queues,
        option="startingOffsets",
        default="earliest",
        strict=True,
        credentials=opts.pull.credentials,
    )
    end = await resolve_offsets(
        opts.ending,
        queues,
        option="endingOffsets",
        default="latest",
        strict=True,
        credentials=opts.pull.credentials,
    )
    for mq in sorted(queues):
        if start[mq] > end[mq] and opts.ending.kind == "specific":
            raise OptionError(
                f"queue {mq}: startingOffsets gives {start[mq]}, beyond endingOffsets {end[mq]}"
            )
    ranges = make_ranges(queues, start, end, opts.pull)
    return split_ranges(
        ranges, min_partitions=opts.min_partitions, max_records=opts.max_records_per_partition
    )
