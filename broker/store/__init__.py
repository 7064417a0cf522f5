"""The broker's message store: bytes and files only.

No gRPC, no protobuf, no event loop: this package imports only
``pocketmq.common`` and itself. Its parts, lowest first::

    io.StoreIO                 seam to the OS's file calls (fault injection)
    mapped_file(_queue)        mmap'ed fixed-size segments forming one log
    commitlog.CommitLog        the record log every topic shares
    consume_queue(_store)      20-byte units per (topic, queue)
    index_file / index_file_set hash index of keys
    checkpoint, data_dir       durability marks, lock and abort files
    flush, cleanup, recovery   the services around them
    message_store.DefaultMessageStore   the facade broker services use
    offline_reader             a data directory's commit log, read-only, for tools
                               outside the broker (the offline Spark source)
"""

from pocketmq.broker.store.api import ArrivalListener, MessageStore
from pocketmq.broker.store.config import FlushDiskType, StoreConfig
from pocketmq.broker.store.io import StoreIO
from pocketmq.broker.store.message_store import DefaultMessageStore
from pocketmq.broker.store.offline_reader import (
    CommitLogSegment,
    commitlog_segments,
    is_data_directory,
    open_segment,
)
from pocketmq.broker.store.results import (
    GetResult,
    GetStatus,
    PutResult,
    PutStatus,
    RecoveryReport,
)

__all__ = [
    "ArrivalListener",
    "CommitLogSegment",
    "DefaultMessageStore",
    "FlushDiskType",
    "GetResult",
    "GetStatus",
    "MessageStore",
    "PutResult",
    "PutStatus",
    "RecoveryReport",
    "StoreConfig",
    "StoreIO",
    "commitlog_segments",
    "is_data_directory",
    "open_segment",
]
