"""The store's seam to the operating system's file calls.

Every call that can fail because of the disk (allocating a segment, syncing it,
measuring free space) goes through a :class:`StoreIO`, so that fault tests can
inject ``ENOSPC`` or a full disk without a tiny filesystem, and so that the
store can turn read-only on the first write failure instead of limping on.
"""

from __future__ import annotations

import os
import shutil

__all__ = ["StoreIO"]


class StoreIO:
    """Real file operations. Subclass to inject faults."""

    def allocate(self, fd: int, size: int) -> None:
        """Reserve *size* bytes of disk for a new segment.

        Reserving up front turns a full disk into an ``OSError(ENOSPC)`` here
        rather than a ``SIGBUS`` when a page of a sparse mapping is first written.
        """
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            # Filesystems without fallocate (tmpfs on old kernels) still take ftruncate.
            if exc.errno not in (95, 22):  # EOPNOTSUPP, EINVAL
                raise
            os.ftruncate(fd, size)

    def sync(self, fd: int) -> None:
        """Make every write to *fd*, through ``write`` or a shared mapping, durable."""
        os.fdatasync(fd)

    def disk_used_ratio(self, path: str) -> float:
        """Fraction of the filesystem holding *path* that is in use (0.0 .. 1.0)."""
        usage = shutil.disk_usage(path)
        return usage.used / usage.total if usage.total else 0.0
