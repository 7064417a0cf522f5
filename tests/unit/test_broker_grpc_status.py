"""The one table from broker outcomes to gRPC codes covers every outcome."""

from __future__ import annotations

import grpc
import pytest

from pocketmq.broker.errors import (
    AlreadyExistsError,
    IllegalArgumentError,
    NoPermissionError,
    PutRejectedError,
    ResourceNotFoundError,
    SystemBusyError,
)
from pocketmq.broker.grpc_status import GRPC_CODES, grpc_code
from pocketmq.broker.store.results import GetStatus, PutStatus


def test_every_put_and_get_status_has_a_code():
    assert set(PutStatus) | set(GetStatus) <= set(GRPC_CODES)


def test_every_get_status_is_an_answer_not_an_error():
    assert {GRPC_CODES[s] for s in GetStatus} == {grpc.StatusCode.OK}


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (IllegalArgumentError("x"), grpc.StatusCode.INVALID_ARGUMENT),
        (ResourceNotFoundError("x"), grpc.StatusCode.NOT_FOUND),
        (AlreadyExistsError("x"), grpc.StatusCode.ALREADY_EXISTS),
        (NoPermissionError("x"), grpc.StatusCode.PERMISSION_DENIED),
        (SystemBusyError("x"), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (PutRejectedError(PutStatus.DISK_FULL, "x"), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (PutRejectedError(PutStatus.SERVICE_NOT_AVAILABLE, "x"), grpc.StatusCode.UNAVAILABLE),
        (PutRejectedError(PutStatus.MESSAGE_ILLEGAL, "x"), grpc.StatusCode.INVALID_ARGUMENT),
        (
            PutRejectedError(PutStatus.PROPERTIES_SIZE_EXCEEDED, "x"),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
    ],
)
def test_errors_map_to_their_codes(error, code):
    assert grpc_code(error) is code


def test_store_refusals_that_may_pass_are_retriable():
    assert PutRejectedError(PutStatus.SERVICE_NOT_AVAILABLE, "x").retriable
    assert not PutRejectedError(PutStatus.MESSAGE_ILLEGAL, "x").retriable
