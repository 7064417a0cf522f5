"""The one table from broker outcomes to gRPC status codes.

Refusals raised by services (:mod:`.errors`) and the store's put statuses map
to a gRPC code here, and nowhere else. Store read statuses are never errors:
every ``GetStatus`` is an answer (``OK``) whose meaning the consumer reads
from the reply's ``PullStatus``; they are listed so the table is complete.
"""

from __future__ import annotations

import grpc

from pocketmq.broker.errors import (
    AlreadyExistsError,
    BrokerError,
    BrokerNotMasterError,
    DiskFullError,
    FailedPreconditionError,
    IllegalArgumentError,
    NoPermissionError,
    NotDurableError,
    PutRejectedError,
    ResourceNotFoundError,
    SequenceGapError,
    SystemBusyError,
)
from pocketmq.broker.store.results import GetStatus, PutStatus

__all__ = ["GRPC_CODES", "NOT_MASTER_METADATA_KEY", "REASON_METADATA_KEY", "grpc_code"]

# Trailing metadata key carrying BrokerError.reason (e.g. "MESSAGE_BODY_TOO_LARGE").
REASON_METADATA_KEY = "pocketmq-reason"
# With reason NOT_MASTER: a serialized pocketmq.v1.NotMaster (controller.proto), where the
# master of the broker name is now and in which epoch.
NOT_MASTER_METADATA_KEY = "pocketmq-not-master-bin"

Code = grpc.StatusCode

GRPC_CODES: dict[type[BrokerError] | PutStatus | GetStatus, grpc.StatusCode] = {
    # refusals by broker services
    IllegalArgumentError: Code.INVALID_ARGUMENT,
    ResourceNotFoundError: Code.NOT_FOUND,
    AlreadyExistsError: Code.ALREADY_EXISTS,
    NoPermissionError: Code.PERMISSION_DENIED,
    SystemBusyError: Code.RESOURCE_EXHAUSTED,
    DiskFullError: Code.RESOURCE_EXHAUSTED,
    FailedPreconditionError: Code.FAILED_PRECONDITION,
    BrokerNotMasterError: Code.FAILED_PRECONDITION,
    SequenceGapError: Code.OUT_OF_RANGE,
    NotDurableError: Code.UNAVAILABLE,  # retriable: the client consumes the original again
    # put statuses (PutRejectedError carries one)
    PutStatus.PUT_OK: Code.OK,
    PutStatus.FLUSH_DISK_TIMEOUT: Code.OK,  # stored; the reply says FLUSH_DISK_TIMEOUT
    PutStatus.MESSAGE_ILLEGAL: Code.INVALID_ARGUMENT,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: Code.INVALID_ARGUMENT,
    PutStatus.DISK_FULL: Code.RESOURCE_EXHAUSTED,
    PutStatus.SERVICE_NOT_AVAILABLE: Code.UNAVAILABLE,
    # read statuses: answers, never errors
    **{status: Code.OK for status in GetStatus},
}


def grpc_code(error: BrokerError) -> grpc.StatusCode:
    if isinstance(error, PutRejectedError):
        return GRPC_CODES[error.status]
    for cls in type(error).__mro__:
        code = GRPC_CODES.get(cls)
        if code is not None:
            return code
    return Code.INTERNAL
