"""The store's seam to the operating system's file calls.

Every call that can fail because of the disk (allocating a segment, syncing it,
measuring free space) goes through a :class:`StoreIO`, so that fault tests can
inject ``ENOSPC`` or a full disk without a tiny filesystem, and so that the
store can turn read-only on the first write failure instead of limping on.
"""

from __future__ import annotations

import os

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

    def reserve(self, fd: int, end: int) -> None:
        """Give bytes ``[0, end)`` of a sparse file disk blocks before they are written.

        Through :meth:`allocate` (so fault tests see one call); its ``ftruncate``
        fallback may shrink the file, which is then re-extended to its size.
        """
        size = os.fstat(fd).st_size
        self.allocate(fd, end)
        if os.fstat(fd).st_size < size:
            os.ftruncate(fd, size)

    def sync(self, fd: int) -> None:
        """Make every write to *fd*, through ``write`` or a shared mapping, durable."""
        os.fdatasync(fd)

    def available_bytes(self, path: str) -> int:
        """Bytes the broker's user may still write on the filesystem holding *path*
        (``f_bavail``: what is reserved for root on ext4 does not count)."""
        st = os.statvfs(path)
        return st.f_bavail * st.f_frsize

    def disk_used_ratio(self, path: str) -> float:
        """Share of the filesystem holding *path* in use (0.0 .. 1.0), as ``df`` shows it
        and RocketMQ computes it (``UtilAll.getDiskPartitionSpaceUsedPercent``).

        ``used / (used + available)``, used being ``total - free`` and available what the
        broker's user may write (``f_bavail``). Blocks reserved for root are neither, so
        a filesystem whose available space is gone reads full (1.0), and a large reserve
        does not read as use: with ``1 - available / total`` instead, a filesystem that
        keeps 60 % for root read 71 % full at 29 % used, and the space check deleted
        unexpired segments there.
        """
        st = os.statvfs(path)
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
        usable = used + st.f_bavail * st.f_frsize
        if usable <= 0:
            return 1.0 if st.f_blocks else 0.0  # nothing the broker may write
        return used / usable
