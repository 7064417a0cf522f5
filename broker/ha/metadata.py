"""The metadata a replica copies from its master, in parts (RocketMQ's SlaveSynchronize).

A master's topic table and consumer offsets grow with its topics and groups: a
broker of 100,000 topics has 2.8 MB of topic configs alone, and a long-named
table of offsets passes any one gRPC message's limit (the replica's HA channel
takes 6 MiB by default). ``StreamMetadata`` sends one snapshot as a stream of
``MetadataSnapshot`` parts, each of at most about ``PART_BYTES``::

    part 0   data_version, master_epoch, log_end_offset, topics_omitted,
             delay_offsets, then as many topic configs as fit
    part 1.. topic configs, then consumer offsets, as many as fit

Merged in order (protobuf's ``MergeFrom``: repeated fields append, map entries
and set scalars replace), the parts are the snapshot. The master takes every
table at one moment (before it sends the first part), so the parts describe
one state and ``log_end_offset`` bounds the records its offsets count; the
replica merges parts up to ``max_bytes`` in all and refuses a larger snapshot.

``known_data_version`` in the request is the replica's topic-table version:
when it is the master's own, the master leaves the topic configs out and says
so (``topics_omitted``), and a steady replica copies only the offsets.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from pocketmq.common.errors import PocketMQError
from pocketmq.v1 import ha_pb2

__all__ = ["PART_BYTES", "Assembler", "MetadataTooLargeError", "merged", "split"]

PART_BYTES = 1 << 20  # a part's payload, below any HA channel's receive limit
_ENTRY_OVERHEAD = 6  # a repeated field's tag and length prefix, at most


class MetadataTooLargeError(PocketMQError, ValueError):
    """A master's snapshot beyond the replica's bound (ha_max_metadata_bytes)."""


def split(
    head: ha_pb2.MetadataSnapshot,
    topic_configs: Iterable[Any],
    consumer_offsets: Iterable[ha_pb2.OffsetEntry],
    part_bytes: int = PART_BYTES,
) -> Iterator[ha_pb2.MetadataSnapshot]:
    """*head* (the scalar fields and delay offsets) and then the tables' entries, as
    parts of at most about *part_bytes* each (one entry larger than that goes alone).
    *topic_configs* are ``common_pb2.TopicConfig`` messages."""
    part = head
    size = head.ByteSize()
    for field, entries in (
        ("topic_configs", topic_configs),
        ("consumer_offsets", consumer_offsets),
    ):
        for entry in entries:
            n = entry.ByteSize() + _ENTRY_OVERHEAD
            if size + n > part_bytes and size > 0:
                yield part
                part, size = ha_pb2.MetadataSnapshot(), 0
            getattr(part, field).append(entry)
            size += n
    yield part


class Assembler:
    """Merges the parts of one snapshot as they come, up to *max_bytes* in all."""

    def __init__(self, max_bytes: int) -> None:
        self.snapshot = ha_pb2.MetadataSnapshot()
        self.size = 0
        self._max = max_bytes

    def add(self, part: ha_pb2.MetadataSnapshot) -> None:
        """Merge *part*; MetadataTooLargeError once the parts pass the bound."""
        self.size += part.ByteSize()
        if self.size > self._max:
            raise MetadataTooLargeError(
                f"the master's metadata passes {self._max} bytes "
                "(ha_max_metadata_bytes): raise it on this replica"
            )
        self.snapshot.MergeFrom(part)


def merged(parts: Iterable[ha_pb2.MetadataSnapshot]) -> ha_pb2.MetadataSnapshot:
    """The snapshot *parts* make (GetMetadata's one answer), without a bound."""
    whole = ha_pb2.MetadataSnapshot()
    for part in parts:
        whole.MergeFrom(part)
    return whole
