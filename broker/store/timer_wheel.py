"""TimerWheel: one slot per second, ``DATA/timerwheel``.

RocketMQ 5's ``TimerWheel``. One memory-mapped file of ``slots`` fixed-size
entries; the entry for wheel second ``s`` (ms since the epoch // 1000) is entry
``s % slots``, and says where the chain of that second's units begins and
ends in the timer log (:mod:`.timer_log`). An entry, 32 bytes, big-endian
(``SLOT``)::

    ┌────────┬───────────┬──────────┬───────┬───────┐
    │ second │ first_pos │ last_pos │ count │ crc   │
    │ i64    │ i64       │ i64      │ i32   │ u32   │
    └────────┴───────────┴──────────┴───────┴───────┘
     0        8           16         24      28      32

    second     the wheel second the entry holds; any other second at this index is empty
    first_pos  timer-log position of the second's oldest unit
    last_pos   of its newest unit: the chain is walked from here through prev_pos
    count      units linked
    crc        zlib CRC-32 of bytes 0..28, so that a torn entry is seen

An all-zero entry is empty (second 0 is never live). RocketMQ's ``Slot`` has
the same shape with a magic where ours has the CRC. With the default 604,800
slots (7 days at one second) the file is 19,353,600 bytes.

Writes go straight into the mapping; :meth:`TimerWheel.flush` makes them
durable. A delivered second's entry is cleared (zeroed), so the file holds
only seconds still waiting and a scan of it skips zero pages. The wheel is an
index over the timer log: whatever the file holds after a crash, the timer
store can rebuild any entry from the log's units, and does when an entry fails
its CRC or points past the log's end.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from pocketmq.broker.store.io import StoreIO

__all__ = ["SLOT", "SLOT_SIZE", "Slot", "TimerWheel"]

log = logging.getLogger(__name__)

SLOT = struct.Struct(">qqqiI")  # second, first_pos, last_pos, count, crc (the diagram above)
SLOT_SIZE = SLOT.size  # 32
_COVERED = struct.Struct(">qqqi")  # what the CRC covers
_ZERO = bytes(SLOT_SIZE)
_PAGE = 4096  # a multiple of SLOT_SIZE
_ZERO_PAGE = bytes(_PAGE)

assert SLOT_SIZE == 32


@dataclass(frozen=True, slots=True)
class Slot:
    second: int
    first_pos: int
    last_pos: int
    count: int


def encode_slot(second: int, first_pos: int, last_pos: int, count: int) -> bytes:
    covered = _COVERED.pack(second, first_pos, last_pos, count)
    return covered + struct.pack(">I", zlib.crc32(covered))


class TimerWheel:
    """The wheel file. Calls on the owner's thread; :meth:`flush` may run in a worker."""

    def __init__(self, path: str, slots: int, *, io: StoreIO | None = None) -> None:
        if slots < 2:
            raise ValueError(f"a timer wheel needs at least 2 slots, got {slots}")
        self.path = path
        self.slots = slots
        self.size_bytes = slots * SLOT_SIZE
        self._io = io or StoreIO()
        #: the file existed with another slot count (or not at all): its entries are gone
        self.reset = False
        exists = os.path.exists(path)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            actual = os.fstat(self._fd).st_size
            if not exists or actual != self.size_bytes:
                if exists:
                    log.warning(
                        "timer wheel %s is %d bytes, expected %d (%d slots); starting "
                        "it afresh and rebuilding it from the timer log",
                        path,
                        actual,
                        self.size_bytes,
                        slots,
                    )
                os.ftruncate(self._fd, 0)
                self._io.allocate(self._fd, self.size_bytes)
                self.reset = True
            self._mm = mmap.mmap(
                self._fd, self.size_bytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE
            )
        except BaseException:
            os.close(self._fd)
            raise

    def index(self, second: int) -> int:
        return second % self.slots

    # -- entries -----------------------------------------------------------------------
    def get(self, second: int) -> Slot | None:
        """The entry of *second*, or None when its index holds nothing for it (or is torn)."""
        at = self.index(second) * SLOT_SIZE
        held, first, last, count, crc = SLOT.unpack_from(self._mm, at)
        if held != second or zlib.crc32(self._mm[at : at + _COVERED.size]) != crc:
            return None
        return Slot(held, first, last, count)

    def put(self, second: int, first_pos: int, last_pos: int, count: int) -> None:
        at = self.index(second) * SLOT_SIZE
        self._mm[at : at + SLOT_SIZE] = encode_slot(second, first_pos, last_pos, count)

    def clear(self, second: int) -> None:
        """Empty the entry of *second* (if it still holds that second)."""
        at = self.index(second) * SLOT_SIZE
        if SLOT.unpack_from(self._mm, at)[0] == second:
            self._mm[at : at + SLOT_SIZE] = _ZERO

    def entries(self) -> Iterator[tuple[int, Slot | None]]:
        """``(index, entry)`` for every non-empty entry; entry None when it fails its CRC."""
        raw = self._mm[:]  # one copy: the scan never holds a view of the mapping
        # Delivered seconds are cleared, so most pages are zero: skip them whole.
        for page in range(0, len(raw), _PAGE):
            chunk = raw[page : page + _PAGE]
            if chunk == _ZERO_PAGE[: len(chunk)]:
                continue
            for i, (second, first, last, count, crc) in enumerate(SLOT.iter_unpack(chunk)):
                at = i * SLOT_SIZE
                if chunk[at : at + SLOT_SIZE] == _ZERO:
                    continue
                index = (page + at) // SLOT_SIZE
                if zlib.crc32(chunk[at : at + _COVERED.size]) != crc:
                    yield index, None
                else:
                    yield index, Slot(second, first, last, count)

    def wipe(self) -> None:
        """Empty every entry (before a rebuild from the timer log)."""
        chunk = bytes(min(self.size_bytes, 1 << 20))
        for at in range(0, self.size_bytes, len(chunk)):
            stop = min(at + len(chunk), self.size_bytes)
            self._mm[at:stop] = chunk[: stop - at]

    # -- durability ---------------------------------------------------------------------
    def flush(self) -> None:
        """Write the changed pages of the mapping to disk (worker-thread safe)."""
        self._mm.flush()

    def close(self) -> None:
        if not self._mm.closed:
            self._mm.close()
            os.close(self._fd)
