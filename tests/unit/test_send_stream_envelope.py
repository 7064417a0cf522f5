"""The SendStream envelope: the client's header + a serialized SendBatchRequest is the
protobuf SendStreamRequest byte for byte, and the broker's hand parser reads what
protobuf reads (and refuses what it cannot read, naming the request when it can)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pocketmq.broker.v1_send_stream import _MalformedEnvelope, parse_envelope
from pocketmq.client.send_stream import envelope_header, signature_fields
from pocketmq.common.auth import Credentials, sign_stream_request
from pocketmq.v1 import broker_pb2 as pb

u64 = st.integers(min_value=0, max_value=2**64 - 1)


@given(
    request_id=u64,
    deadline_ms=u64,
    records=st.binary(max_size=300),
    group=st.text(max_size=20),
    omit=st.booleans(),
)
def test_header_and_batch_are_the_protobuf_envelope_and_parse_back(
    request_id: int, deadline_ms: int, records: bytes, group: str, omit: bool
) -> None:
    batch = pb.SendBatchRequest(
        records=records, producer_group=group, omit_sent_columns=omit
    ).SerializeToString()
    raw = envelope_header(request_id, deadline_ms, len(batch)) + batch
    expected = pb.SendStreamRequest(
        request_id=request_id,
        deadline_ms=deadline_ms,
        batch=pb.SendBatchRequest.FromString(batch),
    )
    assert pb.SendStreamRequest.FromString(raw) == expected
    if request_id and deadline_ms:  # protobuf leaves zeros out; the parser takes both forms
        assert raw == expected.SerializeToString()
    for form in (raw, expected.SerializeToString()):
        envelope = parse_envelope(form)
        assert envelope.request_id == request_id
        assert envelope.deadline_ms == deadline_ms
        assert bytes(envelope.records) == records
        assert envelope.producer_group == group
        assert envelope.omit_sent_columns is omit


def test_unknown_fields_are_skipped_as_protobuf_skips_them() -> None:
    batch = pb.SendBatchRequest(records=b"r", producer_group="g").SerializeToString()
    extra_batch = batch + b"\x20\x01" + b"\x2a\x02xy"  # fields 4 (varint) and 5 (bytes)
    raw = b"\x08\x07" + b"\x25\0\0\0\0" + b"\x1a" + bytes([len(extra_batch)]) + extra_batch
    envelope = parse_envelope(raw)
    assert (envelope.request_id, bytes(envelope.records), envelope.producer_group) == (
        7,
        b"r",
        "g",
    )


@pytest.mark.parametrize(
    ("raw", "request_id", "words"),
    [
        (b"\x08", None, "ends inside a varint"),
        (b"\x08" + b"\xff" * 10 + b"\x01", None, "exceeds 64 bits"),
        (b"\x08\x05", 5, "carries no batch"),
        (b"\x08\x05\x1a\x05abc", 5, "only 3 follow"),
        (b"\x08\x05\x1a\x03\x12\x01\xff", 5, "not UTF-8"),
        (b"\x08\x05\x1a\x00\x1a\x00", 5, "comes twice"),
        (b"\x08\x05\x1a\x02\x0a\x05", 5, "only 0 follow"),
        (b"\x08\x05\x1f", 5, "wire type 7"),
        (b"\x0a\x00", None, "field 1 has wire type 2"),
    ],
)
def test_a_malformed_envelope_is_refused_naming_the_problem(
    raw: bytes, request_id: int | None, words: str
) -> None:
    with pytest.raises(_MalformedEnvelope) as refused:
        parse_envelope(raw)
    assert refused.value.request_id == request_id
    assert words in str(refused.value)


@given(st.binary(max_size=64))
def test_any_bytes_are_refused_or_read_as_protobuf_reads_them(raw: bytes) -> None:
    try:
        envelope = parse_envelope(raw)
    except _MalformedEnvelope:
        return
    decoded = pb.SendStreamRequest.FromString(raw)
    assert (envelope.request_id, envelope.deadline_ms) == (decoded.request_id, decoded.deadline_ms)
    assert bytes(envelope.records) == decoded.batch.records
    assert envelope.producer_group == decoded.batch.producer_group


def test_a_signed_envelope_carries_a_signature_of_its_batch_that_protobuf_reads_too() -> None:
    keys = Credentials("app", "app-secret")
    batch = pb.SendBatchRequest(records=b"r" * 100, producer_group="pg").SerializeToString()
    raw = envelope_header(9, 1500, len(batch)) + batch + signature_fields(keys, batch)
    decoded = pb.SendStreamRequest.FromString(raw)
    envelope = parse_envelope(raw)
    assert envelope.signed == (
        decoded.access_key,
        decoded.timestamp_ms,
        decoded.nonce,
        decoded.signature,
    )
    assert decoded.access_key == "app" and decoded.timestamp_ms > 0
    assert bytes(envelope.batch) == batch
    expected = sign_stream_request("app-secret", decoded.timestamp_ms, "app", decoded.nonce, batch)
    assert decoded.signature == expected
    assert (
        sign_stream_request("app-secret", decoded.timestamp_ms, "app", decoded.nonce, batch[1:])
        != expected
    )
