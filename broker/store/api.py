"""The narrow interface broker services see of the message store.

Everything above the store (long polling, the gRPC servicer, delay and
transaction services) programs against this protocol; ``DefaultMessageStore``
is the file-backed implementation. Calls are made from the broker's event-loop
thread; none of them blocks on the disk (flushes run in worker threads).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Protocol

from pocketmq.broker.store.batch import ScannedBatch
from pocketmq.broker.store.flush import DurationHistogram
from pocketmq.broker.store.producer_state import ProducerStateTable
from pocketmq.broker.store.results import GetResult, PutResult, PutStatus, RecoveryReport
from pocketmq.common.progress import ProgressCallback

__all__ = ["ArrivalListener", "MessageStore"]

# Called right after records are dispatched: (topic, queue_id, new max queue offset).
ArrivalListener = Callable[[str, int, int], None]


class MessageStore(Protocol):
    def start(self, *, progress: ProgressCallback | None = None) -> RecoveryReport:
        """Lock the data directory, recover, start flush and cleanup services;
        *progress* hears how far recovery's long phases are."""
        ...

    def shutdown(self) -> None:
        """Flush everything, write the checkpoint, remove ``abort``, unlock."""
        ...

    # -- writes ----------------------------------------------------------------------
    def scan(
        self, blob: bytes | bytearray | memoryview, *, allow_empty_body: bool = True
    ) -> ScannedBatch:
        """Check every record as put_batch would (raises BatchError); nothing is stored."""
        ...

    def put_batch(
        self, blob: bytes | bytearray | memoryview, *, scanned: ScannedBatch | None = None
    ) -> PutResult:
        """Store records already in the commit-log layout (one or many, any queues).

        Each record's length and CRC are checked (or were, by :meth:`scan`, when
        *scanned* is given); QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP and
        STOREHOST are patched in place; the blob is copied once. A batch is
        stored whole or not at all.
        """
        ...

    def put_message(
        self,
        *,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: dict[str, str] | None = None,
        flag: int = 0,
        sysflag: int = 0,
        born_timestamp_ms: int = 0,
        born_host: tuple[str, int] = ("127.0.0.1", 0),
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
    ) -> PutResult:
        """Encode and store one message (used by broker-internal producers)."""
        ...

    # -- reads -----------------------------------------------------------------------
    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_count: int | None = None,
        max_bytes: int | None = None,
        tag_codes: frozenset[int] | None = None,
    ) -> GetResult:
        """Read stored records from queue *offset*; ``tag_codes`` None matches all."""
        ...

    def get_message_blob(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_count: int | None = None,
        max_bytes: int | None = None,
        tag_codes: frozenset[int] | None = None,
    ) -> GetResult:
        """:meth:`get_messages`, the records back to back in ``GetResult.blob`` (pulls).

        An implementation may answer with ``records`` instead; readers use
        ``GetResult.records_blob``.
        """
        ...

    def read_record(self, phys_offset: int) -> bytes | None:
        """The stored record at a commit-log offset (what an offset msg id names)."""
        ...

    def log_end_offset(self) -> int:
        """The commit log's end: where the next record is appended."""
        ...

    def flush_request(self, end_offset: int) -> Future[PutStatus] | None:
        """On a SYNC_FLUSH store, a future resolved once every byte below *end_offset* is
        durable (PUT_OK, or FLUSH_DISK_TIMEOUT as a put's); None on an ASYNC_FLUSH one."""
        ...

    @property
    def producers(self) -> ProducerStateTable:
        """Idempotent producers' state: ids, epochs and each queue's last sequences,
        advanced by every put of stamped records and rebuilt from the log on start."""
        ...

    def query_by_key(
        self,
        topic: str,
        key: str,
        *,
        max_count: int | None = None,
        begin_timestamp_ms: int = 0,
        end_timestamp_ms: int | None = None,
    ) -> list[bytes]:
        """Records of *topic* whose ``KEYS`` or ``UNIQ_KEY`` hold *key*, newest first."""
        ...

    def min_offset(self, topic: str, queue_id: int) -> int:
        """The first queue offset still held (retention moves it up; 0 for no queue)."""
        ...

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The queue's end a consumer may read to: on a master that waits for replicas,
        the records above the confirm offset are not counted yet (0 for no queue)."""
        ...

    def end_offset(self, topic: str, queue_id: int) -> int:
        """The queue's real end, records above the confirm offset included (the bound
        for offset commits)."""
        ...

    def store_timestamp(self, topic: str, queue_id: int, offset: int) -> int | None:
        """STORETIMESTAMP (ms) of the record at queue *offset*; None when not held."""
        ...

    def offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset stored at or after *timestamp_ms*: min offset when every
        record is newer, the end when every one is older."""
        ...

    def queue_ids(self, topic: str) -> list[int]:
        """The ids of *topic*'s queues in the store, sorted."""
        ...

    def topics(self) -> list[str]:
        """Every topic with a queue in the store, sorted."""
        ...

    def delete_topics(self, topics: Iterable[str]) -> None:
        """Delete topics for good: recorded durably first, so no recovery revives them;
        raises OSError (ENOSPC) when that cannot be written, and then deletes nothing."""
        ...

    def delete_queues(self, topic: str, queue_ids: Iterable[int]) -> None:
        """Delete some queues of a topic for good, as delete_topics."""
        ...

    # -- notifications -----------------------------------------------------------------
    def add_arrival_listener(self, listener: ArrivalListener) -> None:
        """Call *listener* after each dispatch that adds records to a queue."""
        ...

    # -- housekeeping and figures --------------------------------------------------------
    def run_cleanup_once(self) -> int:
        """Retention and disk-space checks; returns commit-log segments deleted."""
        ...

    def runtime_info(self) -> dict[str, str]:
        """Figures for operators: offsets, put totals, disk use, health."""
        ...

    @property
    def flush_durations(self) -> Mapping[str, DurationHistogram]:
        """How long each sync took, by kind: ``commitlog`` (group commit or the flush
        service) and ``consume_queue`` (consume queues, index and checkpoint). Filled by
        the flush threads, read by the broker's metrics (an empty mapping: no figures)."""
        ...
