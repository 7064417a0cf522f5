"""The broker's errors::

    PocketMQError                          (pocketmq.common.errors)
     ├── BrokerError                       a request the broker refuses; ``reason``: a
     │    │                                RocketMQ-style code name; the client sees the
     │    │                                error of the same idea in pocketmq.client.errors
     │    ├── IllegalArgumentError         the request itself is wrong (a bad name, a size)
     │    ├── ResourceNotFoundError        a topic, message or group the broker does not have
     │    ├── AlreadyExistsError           CreateTopic of an existing topic
     │    ├── NoPermissionError            a system topic, a topic without the needed perm bit
     │    │    └── ClientOwnershipError    a client id another access key registered
     │    │                                (client_manager.py)
     │    ├── SystemBusyError              a bounded resource is full now; retry later
     │    ├── DiskFullError                a metadata file (topics.json, offsets) cannot be
     │    │                                written: no space left (reason DISK_FULL)
     │    ├── FailedPreconditionError      the state forbids it (a transaction resolved the
     │    │    │                           other way; an idempotent producer fenced by a newer
     │    │    │                           epoch: PRODUCER_FENCED)
     │    │    ├── BrokerNotMasterError    a write to a replica, a demoted or fenced master;
     │    │    │                           names the current master and its epoch (NOT_MASTER)
     │    │    └── RoleError               a role change the broker cannot make now
     │    │                                (ha/role.py)
     │    ├── SequenceGapError             an idempotent producer's record leaves a gap in its
     │    │                                queue's sequence (OUT_OF_ORDER_SEQUENCE)
     │    ├── NotDurableError              a copy the broker stored itself (a consumer's
     │    │                                send-back) is not yet durable as its role asks:
     │    │                                flush or replicas (FLUSH_DISK_TIMEOUT,
     │    │                                FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE)
     │    └── PutRejectedError             the store refused a put; carries its PutStatus
     ├── MetadataError                     topics.json / consumerOffset.json and their .bak
     │                                     are both unreadable: the broker will not start
     ├── V2Error                           a gRPC v2 (RocketMQ 5 proxy protocol) request
     │                                     refused with a v2 status code (grpc_v2/convert.py)
     ├── HandshakeRefusedError             a replica's Hello the master cannot serve;
     │                                     ``reason``: the Refuse.Reason name (ha/master.py)
     ├── FrameError                        also a ValueError: a replication frame that is not
     │                                     well formed (ha/wire.py)
     ├── MetadataTooLargeError             also a ValueError: a master's metadata snapshot
     │                                     past the replica's ha_max_metadata_bytes
     │                                     (ha/metadata.py)
     ├── SequenceAhead                     not a refusal: an idempotent producer's request
     │                                     ahead of its queue, held for the earlier ones;
     │                                     carries the SequenceGapError to answer if they do
     │                                     not come (idempotence.py)
     └── NameserverCallError               a call to a nameserver (register, unregister)
                                           failed; names the nameserver (namesrv_client.py)

The message store's errors derive from ``StoreError`` (pocketmq.common.errors).

Every message says what to change, with the numbers involved. The servicer
turns each BrokerError into a gRPC status in one table (:mod:`.grpc_status`) and
sends ``reason`` as trailing metadata, so clients can tell refusals apart without
parsing text; the v2 servicer maps them, and V2Error, to v2 status codes
(:func:`.grpc_v2.convert.status_of`).
"""

from __future__ import annotations

from pocketmq.broker.store.results import PutStatus
from pocketmq.common.errors import PocketMQError

__all__ = [
    "AlreadyExistsError",
    "BrokerError",
    "BrokerNotMasterError",
    "DiskFullError",
    "FailedPreconditionError",
    "IllegalArgumentError",
    "MetadataError",
    "NoPermissionError",
    "NotDurableError",
    "PutRejectedError",
    "ResourceNotFoundError",
    "SequenceGapError",
    "SystemBusyError",
]


class BrokerError(PocketMQError):
    """A request the broker refuses."""

    default_reason = "SYSTEM_ERROR"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason or self.default_reason


class MetadataError(PocketMQError):
    """A metadata file and its backup are both unreadable; a person must decide."""


class IllegalArgumentError(BrokerError):
    default_reason = "ILLEGAL_ARGUMENT"


class ResourceNotFoundError(BrokerError):
    default_reason = "NOT_FOUND"


class AlreadyExistsError(BrokerError):
    default_reason = "ALREADY_EXISTS"


class NoPermissionError(BrokerError):
    default_reason = "NO_PERMISSION"


class SystemBusyError(BrokerError):
    default_reason = "SYSTEM_BUSY"
    retriable = True


class DiskFullError(BrokerError):
    """No space left for a file the request must write; nothing was changed."""

    default_reason = "DISK_FULL"
    retriable = True


class FailedPreconditionError(BrokerError):
    default_reason = "FAILED_PRECONDITION"


class BrokerNotMasterError(FailedPreconditionError):
    """A write this broker does not take: it is not the master of *broker_name* (a
    replica, or a master demoted or fenced). *master_addr* / *master_epoch* name the
    master it knows ("" / 0 when none is known yet); the servicer sends them as the
    ``pocketmq-not-master-bin`` trailer so clients redirect without a route refresh."""

    default_reason = "NOT_MASTER"

    def __init__(
        self, message: str, *, broker_name: str, master_addr: str = "", master_epoch: int = 0
    ) -> None:
        super().__init__(message)
        self.broker_name = broker_name
        self.master_addr = master_addr
        self.master_epoch = master_epoch


class SequenceGapError(BrokerError):
    """A record's sequence leaves a gap; the producer retries the missing ones first."""

    default_reason = "OUT_OF_ORDER_SEQUENCE"


class NotDurableError(BrokerError):
    """A copy this broker stored on a client's behalf (a consumer's send-back) is not
    durable as the broker's role asks (flushed on SYNC_FLUSH, held by the in-sync
    replicas on a SYNC_MASTER); ``reason`` says which. The client keeps the original
    (it consumes it again) instead of counting on the copy: RocketMQ's SYSTEM_ERROR
    for a send-back whose put was not PUT_OK."""


class PutRejectedError(BrokerError):
    """The store answered a put with something other than PUT_OK; nothing was stored."""

    def __init__(self, status: PutStatus, message: str) -> None:
        super().__init__(message, reason=status.value)
        self.status = status
        self.retriable = status in (PutStatus.SERVICE_NOT_AVAILABLE, PutStatus.DISK_FULL)
