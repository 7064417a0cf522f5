"""A failed gRPC call as the client's error: which one, and what it says.

:data:`STATUS_ERRORS` maps the call's status code to a
:class:`~pocketmq.client.errors.RemoteError` subclass; the broker's reason code
(the ``pocketmq-reason`` trailer) picks a finer one where :data:`REASON_ERRORS`
names it, and ``NOT_MASTER`` carries where the master went (a
``pocketmq.v1.NotMaster`` in the ``pocketmq-not-master-bin`` trailer). Every
message names the server, the RPC and what the server said.
"""

from __future__ import annotations

import asyncio

import grpc
from google.protobuf.message import DecodeError

from pocketmq.client.errors import (
    BusyError,
    InvalidRequestError,
    NotFoundError,
    NotMasterError,
    OutOfOrderSequenceError,
    PermissionDeniedError,
    ProducerFencedError,
    RemoteError,
    ServerError,
    UnavailableError,
    UnsupportedError,
)
from pocketmq.client.tls_hint import tls_mismatch_hint
from pocketmq.v1 import controller_pb2

__all__ = ["REASON_ERRORS", "STATUS_ERRORS", "error_of", "remote_error"]

REASON_METADATA_KEY = "pocketmq-reason"
NOT_MASTER_METADATA_KEY = "pocketmq-not-master-bin"  # a pocketmq.v1.NotMaster, with NOT_MASTER

Code = grpc.StatusCode
STATUS_ERRORS: dict[grpc.StatusCode, type[RemoteError]] = {
    Code.UNAVAILABLE: UnavailableError,
    Code.DEADLINE_EXCEEDED: UnavailableError,
    Code.CANCELLED: UnavailableError,
    Code.RESOURCE_EXHAUSTED: BusyError,
    Code.NOT_FOUND: NotFoundError,
    Code.PERMISSION_DENIED: PermissionDeniedError,
    Code.UNAUTHENTICATED: PermissionDeniedError,
    Code.INVALID_ARGUMENT: InvalidRequestError,
    Code.ALREADY_EXISTS: InvalidRequestError,
    Code.FAILED_PRECONDITION: InvalidRequestError,
    Code.OUT_OF_RANGE: InvalidRequestError,
    Code.UNIMPLEMENTED: UnsupportedError,
}


#: refusals told apart by the broker's reason rather than the status code
REASON_ERRORS: dict[str, type[RemoteError]] = {
    "PRODUCER_FENCED": ProducerFencedError,
    "OUT_OF_ORDER_SEQUENCE": OutOfOrderSequenceError,
}


def remote_error(exc: grpc.aio.AioRpcError, addr: str, rpc: str) -> RemoteError:
    """The client error for a failed call; a call cancelled with its task stays a cancellation."""
    code = exc.code()
    task = asyncio.current_task()
    if code is Code.CANCELLED and task is not None and task.cancelling():
        raise asyncio.CancelledError
    reason = ""
    not_master = b""
    for key, value in exc.trailing_metadata() or ():
        if key == REASON_METADATA_KEY:
            reason = str(value)
        elif key == NOT_MASTER_METADATA_KEY:
            not_master = value if isinstance(value, bytes) else str(value).encode()
    return error_of(code, exc.details() or "no details", reason, not_master, addr, rpc)


def error_of(
    code: grpc.StatusCode, details: str, reason: str, not_master: bytes, addr: str, rpc: str
) -> RemoteError:
    """The client error of a refusal given as its parts (a failed call's status and
    trailers, or one SendStream answer's error fields)."""
    if reason == "NOT_MASTER":
        return _not_master_error(
            f"{rpc} to {addr} failed: {code.name}: {details}", addr, code.name, not_master
        )
    cls = REASON_ERRORS.get(reason) or STATUS_ERRORS.get(code, ServerError)
    hint = tls_mismatch_hint(details, addr) if code is Code.UNAVAILABLE else ""
    return cls(
        f"{rpc} to {addr} failed: {code.name}: {details}" + (f" ({hint})" if hint else ""),
        addr=addr,
        code=code.name,
        reason=reason,
    )


def _not_master_error(message: str, addr: str, code: str, detail: bytes) -> NotMasterError:
    """NOT_MASTER with its detail; a detail that does not parse redirects nowhere."""
    hint = controller_pb2.NotMaster()
    try:
        hint.ParseFromString(detail)
    except DecodeError:
        hint = controller_pb2.NotMaster()
    return NotMasterError(
        message,
        addr=addr,
        code=code,
        broker_name=hint.broker_name,
        master_addr=hint.master_addr,
        master_epoch=hint.master_epoch,
    )
