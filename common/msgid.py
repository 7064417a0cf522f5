"""Message ids.

Offset message id (broker-made, RocketMQ's ``offsetMsgId``)::

    +--------------+---------------+------------------------+
    | store IP (4) | store port i32| commit-log offset i64  |   -> 32 upper-case hex
    +--------------+---------------+------------------------+
    (IPv6: 16-byte IP, 56 hex chars)

It locates a message without any index. The unique id (``UNIQ_KEY``) is made by
the client: 16 bytes of IP, pid, a per-process random, ms since the start of the
month and a counter, as RocketMQ 4's ``MessageClientIDSetter``; the broker
indexes it like a key.
"""

from __future__ import annotations

import calendar
import collections
import ipaddress
import itertools
import os
import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

__all__ = [
    "OffsetMessageId",
    "UniqueIdBlock",
    "UniqueIdGenerator",
    "decode_offset_msg_id",
    "encode_offset_msg_id",
]

_PORT_OFFSET = struct.Struct(">iq")


@dataclass(frozen=True, slots=True)
class OffsetMessageId:
    host: str
    port: int
    phys_offset: int


def encode_offset_msg_id(host: str, port: int, phys_offset: int) -> str:
    return (ipaddress.ip_address(host).packed + _PORT_OFFSET.pack(port, phys_offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> OffsetMessageId:
    """Decode an offset message id; ``ValueError`` says why one is not."""
    if len(msg_id) not in (32, 56):
        raise ValueError(
            f"offset message id {msg_id!r} has {len(msg_id)} characters; "
            "expected 32 (IPv4) or 56 (IPv6)"
        )
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise ValueError(f"offset message id {msg_id!r} is not hexadecimal") from None
    ip_len = len(raw) - _PORT_OFFSET.size
    port, offset = _PORT_OFFSET.unpack_from(raw, ip_len)
    return OffsetMessageId(str(ipaddress.ip_address(raw[:ip_len])), port, offset)


class UniqueIdGenerator:
    """Client-side unique ids, unique per process and cheap to make.

    The 20 hex digits of IP, pid and random are formatted once; each id only
    formats the 12 digits of ms-in-month and counter.
    """

    def __init__(self, ip: str = "127.0.0.1") -> None:
        try:
            ip_raw = ipaddress.ip_address(ip).packed[-4:]
        except ValueError:
            ip_raw = b"\x7f\0\0\1"
        self._prefix = ip_raw + struct.pack(
            ">HI", os.getpid() & 0xFFFF, int.from_bytes(os.urandom(4), "big")
        )
        self._prefix_hex = self._prefix.hex().upper()
        # next() on itertools.count is one C call, atomic under the GIL: no lock needed.
        self._counter = itertools.count()
        self._month_start, self._next_month_start = _month_bounds(time.time())
        self._ms = -1
        self._ms_prefix = ""  # prefix and the hex of _ms, reused within one millisecond

    def next_id(self) -> str:
        return f"{self._prefix_now()}{next(self._counter) & 0xFFFF:04X}"

    def next_ids(self, count: int) -> list[str]:
        """*count* ids at once (a batch): one clock read, the counter advanced *count*."""
        return list(self.next_block(count))

    def next_block(self, count: int) -> UniqueIdBlock:
        """*count* ids at once, as one value: no str per id until one is read (the
        client's compiled encoder writes them into the records itself)."""
        if count <= 0:
            return UniqueIdBlock(self._prefix_now(), 0, 0)
        # One C loop over the counter: no other thread takes a number in between.
        last = collections.deque(itertools.islice(self._counter, count), maxlen=1)[0]
        return UniqueIdBlock(self._prefix_now(), last - count + 1, count)

    def _prefix_now(self) -> str:
        """IP, pid, random and the ms-in-month of now: all of an id but its counter."""
        now = time.time()
        if now >= self._next_month_start:
            self._month_start, self._next_month_start = _month_bounds(now)
        ms = int((now - self._month_start) * 1000) & 0xFFFFFFFF
        if ms != self._ms:
            self._ms_prefix = f"{self._prefix_hex}{ms:08X}"
            self._ms = ms
        return self._ms_prefix


class UniqueIdBlock(Sequence[str]):
    """*size* unique ids made at once: id *i* is :attr:`prefix` followed by the 4
    upper-case hex digits of ``(first + i) & 0xFFFF``, as :meth:`UniqueIdGenerator.next_id`
    formats each."""

    __slots__ = ("first", "prefix", "size")

    def __init__(self, prefix: str, first: int, size: int) -> None:
        self.prefix = prefix  # IP, pid, random and ms-in-month: 28 hex digits
        self.first = first  # the counter of id 0
        self.size = size  # how many ids

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...
    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.size))]
        if index < 0:
            index += self.size
        if not 0 <= index < self.size:
            raise IndexError(f"id {index} of a block of {self.size}")
        return f"{self.prefix}{(self.first + index) & 0xFFFF:04X}"

    def __iter__(self) -> Iterator[str]:
        prefix, first = self.prefix, self.first
        return iter([f"{prefix}{(first + i) & 0xFFFF:04X}" for i in range(self.size)])

    def __repr__(self) -> str:
        return f"UniqueIdBlock({self.prefix!r}, {self.first}, {self.size})"


def _month_bounds(now: float) -> tuple[float, float]:
    """Epoch seconds of the start of *now*'s UTC month and of the next one."""
    t = time.gmtime(now)
    start = calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0))
    year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
    return float(start), float(calendar.timegm((year, month, 1, 0, 0, 0)))
