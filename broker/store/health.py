"""StoreHealth: whether a message store takes writes, and why not.

::

    running ─┬─ I/O error of a write or a flush ──▶ read-only for the rest of the run
             │                                       (reads go on; puts SERVICE_NOT_AVAILABLE)
             └─ ENOSPC, or free space below ───────▶ disk full: puts refused with DISK_FULL
                disk_min_free_bytes                  until the periodic disk check
                                                     (:mod:`.cleanup`) sees space again

A full disk is not a broken one, so it never makes the store read-only. Each
refusal carries the reason a person can act on: the errno's text and the
directory, or the figures of the disk check.
"""

from __future__ import annotations

import errno
import logging
from dataclasses import dataclass

from pocketmq.broker.store.results import PutResult, PutStatus

__all__ = ["StoreHealth"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class StoreHealth:
    root: str  # the store's data directory, named in every reason
    disk_full: bool = False
    disk_full_reason: str = ""  # what refused the last allocation (ENOSPC), if that did
    read_only_reason: str = ""
    running: bool = False

    def on_io_error(self, exc: OSError) -> None:
        """An I/O error of a write or a flush (any thread): disk full on ENOSPC,
        read-only for good on anything else."""
        if exc.errno == errno.ENOSPC:
            self.disk_full = True
            self.disk_full_reason = (
                f"disk full: a flush in {self.root} failed ({exc.strerror}); writes "
                "resume once space is freed"
            )
            log.error("%s", self.disk_full_reason)
            return
        if not self.read_only_reason:
            self.read_only_reason = f"{exc.strerror or exc} (errno {exc.errno})"
            log.error(
                "store %s is read-only after an I/O error: %s", self.root, self.read_only_reason
            )

    def refuse_disk_full(self, reason: str) -> PutResult:
        """Mark the disk full for *reason* (an allocation refused) and answer the put."""
        self.disk_full = True
        self.disk_full_reason = f"{reason}; writes resume once space is freed"
        log.error("store %s: %s", self.root, self.disk_full_reason)
        return PutResult(status=PutStatus.DISK_FULL, error=self.disk_full_reason)
