"""Java ``String.hashCode`` as RocketMQ uses it for tag codes and index keys.

RocketMQ computes a consume-queue unit's tag code and an index file's key hash
with Java's ``String.hashCode``: ``h = 31*h + c`` over the UTF-16 code units of
the string, kept as a signed 32-bit integer. Stores written by PocketMQ keep
those values so that files, tag filters and key lookups agree with RocketMQ's.
"""

from __future__ import annotations

from functools import lru_cache

__all__ = ["index_slot", "java_string_hash", "tags_code"]

_MASK32 = 0xFFFFFFFF


def java_string_hash(text: str) -> int:
    """Return Java's ``String.hashCode`` of *text* as a signed 32-bit int."""
    h = 0
    if text.isascii():
        for byte in text.encode("ascii"):
            h = (31 * h + byte) & _MASK32
    else:
        # Java hashes UTF-16 code units: a character outside the BMP counts twice.
        data = text.encode("utf-16-be")
        for i in range(0, len(data), 2):
            h = (31 * h + ((data[i] << 8) | data[i + 1])) & _MASK32
    return h - (1 << 32) if h & 0x80000000 else h


@lru_cache(maxsize=65536)
def tags_code(tags: str) -> int:
    """Consume-queue tag code of a message's ``TAGS``; 0 when it has none."""
    return java_string_hash(tags) if tags else 0


def index_slot(key_hash: int, slot_count: int) -> int:
    """Slot of an index key: ``abs(hash) % slots`` as RocketMQ's IndexFile does.

    Java's ``Math.abs(Integer.MIN_VALUE)`` stays negative, and RocketMQ then
    uses 0; we keep that corner case identical.
    """
    if key_hash == -(1 << 31):
        return 0
    return abs(key_hash) % slot_count
