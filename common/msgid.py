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
import ipaddress
import itertools
import os
import struct
import time
from dataclasses import dataclass

__all__ = ["OffsetMessageId", "UniqueIdGenerator", "decode_offset_msg_id", "encode_offset_msg_id"]

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
        prefix, counter = self._prefix_now(), self._counter
        return [f"{prefix}{next(counter) & 0xFFFF:04X}" for _ in range(count)]

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


def _month_bounds(now: float) -> tuple[float, float]:
    """Epoch seconds of the start of *now*'s UTC month and of the next one."""
    t = time.gmtime(now)
    start = calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0))
    year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
    return float(start), float(calendar.timegm((year, month, 1, 0, 0, 0)))
