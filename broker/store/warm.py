"""WarmMappedFileService: puts the commit log's next pages in the page cache, ahead of the writer.

Only for a commit log written through its mapping (``write_without_mmap``
off): a log written with ``pwrite`` has no fault to avoid, and a warmer would
make the kernel zero pages that the writes then fill whole (RocketMQ, too,
warms no file written without mmap).

The first write to a page of a fresh segment costs a page fault that allocates
and zeroes a page-cache page; on a virtual machine the hypervisor usually has
to back that page too (measured here: 2.3 µs per KiB, a third of a 1 KiB
put's whole cost, paid on the thread that appends). RocketMQ pays it up front
with ``warmMapedFileEnable``: a new segment is filled with zeros before it is
used. Writing is only safe into a segment nobody appends to yet, so this
service *reads* instead::

    segment:  [ written ........ | wrote_position ... warmed ...... | file_size ]
                                   <---- ahead_bytes (32 MiB) ---->
              this thread: pread(fd, 1 MiB at warmed) until warmed >= wrote_position + ahead

A read of the segment's reserved but unwritten range fills the page cache with
zero pages without changing a byte of the file, so it may run beside the
writer, in any order, without a lock; the writer's fault then only maps a
cached page. The read releases the GIL, so the work moves to another core.
The writer calls :meth:`notify` after each append; the service sleeps until
what is warm is a step (1 MiB) short of ``ahead_bytes`` ahead of the writer,
then reads that step (or, with ``populate_write``, faults it in writable
without storing a byte: the writer then takes no fault at all, but the pages
are dirty early and a flush may write them as zeros once before the writer
fills them; see :meth:`MappedFile.prefault`). Small steps keep the work smooth: at 2.3 µs per KiB, a
16 MiB burst took a core for 40 ms, and on a two-core machine that was a 40 ms
stall of the broker or its clients every few seconds at 5 MB/s (measured as
the send-to-handler p99).
"""

from __future__ import annotations

from pocketmq.broker.store.flush import ServiceThread
from pocketmq.broker.store.mapped_file import MappedFile
from pocketmq.broker.store.mapped_file_queue import MappedFileQueue

__all__ = ["WarmMappedFileService"]

STEP_BYTES = 1024 * 1024


class WarmMappedFileService(ServiceThread):
    name = "WarmMappedFileService"

    def __init__(
        self, log_queue: MappedFileQueue, *, ahead_bytes: int, populate_write: bool = False
    ) -> None:
        super().__init__(interval_s=1.0)
        self._queue = log_queue
        self._ahead = ahead_bytes
        self._populate_write = populate_write
        # wake when what is warm is less than this ahead of the writer: one step short
        self._due_ahead = max(ahead_bytes - STEP_BYTES, ahead_bytes // 2)
        self._buf = bytearray(min(STEP_BYTES, ahead_bytes))
        self._file: MappedFile | None = None
        self.warmed = 0  # file-relative end of what was read in _file
        self.bytes_warmed = 0  # in total, for tests and runtime info

    def notify(self, mf: MappedFile) -> None:
        """The writer appended to *mf* (cheap: one comparison, a wake-up when due)."""
        warm = self._file
        if warm is None or mf is not warm or mf.wrote_position + self._due_ahead > self.warmed:
            self._wakeup.set()

    def run_once(self, *, final: bool = False) -> None:
        mf = self._queue.last_file(create=False)
        if final or mf is None or mf.closed:
            return
        if mf is not self._file:
            self._file, self.warmed = mf, mf.wrote_position
        if self.warmed >= min(mf.wrote_position + self._due_ahead, mf.file_size):
            return  # not due yet
        while not self._stopped and self.warmed < min(
            mf.wrote_position + self._ahead, mf.file_size
        ):
            read = mf.prefault(self.warmed, self._buf, populate_write=self._populate_write)
            if read <= 0:
                return
            self.warmed += read
            self.bytes_warmed += read
