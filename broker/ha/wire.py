"""The Data frames of a replication stream, encoded and decoded without a protobuf object.

A frame is a ``MasterFrame{data: Data}`` of ``pocketmq/v1/ha.proto``, byte for
byte what protobuf writes (fields in number order, zero values left out)::

    0x12 len  ┬ 0x08 offset  0x10 epoch  0x18 epoch_start_offset      (varints)
              │ 0x20 master_max_offset  0x28 master_min_offset
              │ 0x32 len records ............................. (whole records)
              └ 0x38 confirm_offset (when set)  0x40 lazy_ack (when true)

Why by hand: the records are nearly all of a frame's bytes, and through
protobuf objects a master copies them three times (log → bytes → message →
wire) and a replica twice more (wire → message → bytes). :func:`encode_data`
copies them once, from the master's mapped log into the frame;
:func:`decode_master_frame` hands the replica a ``memoryview`` into the
received frame. Every other frame (Welcome, Refuse, or anything this decoder
does not expect, such as a field repeated) goes through protobuf.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pocketmq.common.errors import PocketMQError
from pocketmq.v1 import ha_pb2

__all__ = ["DataFrame", "FrameError", "decode_master_frame", "encode_data", "serialize"]

_U64 = (1 << 64) - 1
_DATA_TAG = b"\x12"  # MasterFrame.data: field 2, length-delimited
_RECORDS_TAG = b"\x32"  # Data.records: field 6, length-delimited
# Data's fields: 1..5 and 7 (confirm_offset, optional) and 8 (lazy_ack) varints, 6 records


class FrameError(PocketMQError, ValueError):
    """A frame that is not a well-formed MasterFrame."""


@dataclass(slots=True, kw_only=True)
class DataFrame:
    """A decoded ``Data`` frame: the fields of ``ha_pb2.Data``, records as a view."""

    offset: int = 0
    epoch: int = 0
    epoch_start_offset: int = 0
    master_max_offset: int = 0
    master_min_offset: int = 0
    records: bytes | memoryview = b""
    confirm_offset: int | None = None  # None: the field is absent (no read gate)
    lazy_ack: bool = False


_ONE_BYTE = [bytes((n,)) for n in range(0x80)]


def _varint(value: int) -> bytes:
    value &= _U64
    if value < 0x80:
        return _ONE_BYTE[value]
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_data(
    *,
    offset: int,
    epoch: int,
    epoch_start_offset: int,
    master_max_offset: int,
    master_min_offset: int,
    records: bytes | bytearray | memoryview,
    confirm_offset: int | None = None,
    lazy_ack: bool = False,
) -> bytes:
    """``MasterFrame{data: Data{...}}`` as protobuf serializes it; *records* copied once."""
    parts: list[bytes | bytearray | memoryview] = [_DATA_TAG, b""]  # [1]: the length, last
    for tag, value in (
        (b"\x08", offset),
        (b"\x10", epoch),
        (b"\x18", epoch_start_offset),
        (b"\x20", master_max_offset),
        (b"\x28", master_min_offset),
    ):
        if value:
            parts.append(tag)
            parts.append(_varint(value))
    size = len(records)
    if size:
        parts.append(_RECORDS_TAG)
        parts.append(_varint(size))
        parts.append(records)
    if confirm_offset is not None:
        parts.append(b"\x38")
        parts.append(_varint(confirm_offset))
    if lazy_ack:
        parts.append(b"\x40\x01")
    parts[1] = _varint(sum(map(len, parts)) - 1)
    return b"".join(parts)


def serialize(frame: bytes | ha_pb2.MasterFrame) -> bytes:
    """The Replicate stream's response serializer: encoded frames pass as they are."""
    return frame if isinstance(frame, bytes) else frame.SerializeToString()


def _read_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise FrameError("a varint runs past its field or is longer than 10 bytes")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value & _U64, pos
        shift += 7


def _skip(buf: bytes, pos: int, end: int, wire_type: int) -> int:
    if wire_type == 0:
        return _read_varint(buf, pos, end)[1]
    if wire_type == 1:
        pos += 8
    elif wire_type == 2:
        size, pos = _read_varint(buf, pos, end)
        pos += size
    elif wire_type == 5:
        pos += 4
    else:
        raise FrameError(f"wire type {wire_type} is not used by this protocol")
    if pos > end:
        raise FrameError("a field runs past the end of the frame")
    return pos


def _decode_data(raw: bytes, pos: int, end: int) -> DataFrame | None:
    """Data's fields in raw[pos:end]; None when a field is repeated (protobuf merges)
    or a known field comes in another wire type."""
    values = [0, 0, 0, 0, 0, 0, 0, 0, 0]  # by field number: Data's 1..8
    records: bytes | memoryview = b""
    seen = 0  # bit n: field n was read
    while pos < end:
        key = raw[pos]
        if key < 0x80:
            pos += 1
        else:  # a field number past 15: a newer master's
            key, pos = _read_varint(raw, pos, end)
        number, wire_type = key >> 3, key & 7
        if not 1 <= number <= 8:
            pos = _skip(raw, pos, end, wire_type)
            continue
        if seen >> number & 1:
            return None
        seen |= 1 << number
        if number == 6:
            if wire_type != 2:
                return None
            size, pos = _read_varint(raw, pos, end)
            if pos + size > end:
                raise FrameError(f"records of {size} bytes run past the end of the frame")
            records = memoryview(raw)[pos : pos + size]
            pos += size
            continue
        if wire_type != 0:
            return None
        if pos < end and raw[pos] < 0x80:
            values[number] = raw[pos]
            pos += 1
        else:
            value, pos = _read_varint(raw, pos, end)
            values[number] = value - (1 << 64) if value >> 63 else value
    return DataFrame(
        offset=values[1],
        epoch=values[2],
        epoch_start_offset=values[3],
        master_max_offset=values[4],
        master_min_offset=values[5],
        records=records,
        confirm_offset=values[7] if seen >> 7 & 1 else None,
        lazy_ack=values[8] != 0,
    )


def decode_master_frame(raw: bytes) -> DataFrame | ha_pb2.MasterFrame:
    """The Replicate stream's response deserializer: a :class:`DataFrame` for a
    Data frame (its records a view into *raw*), the protobuf message otherwise."""
    if raw[:1] == _DATA_TAG:
        size, pos = _read_varint(raw, 1, len(raw))
        if pos + size == len(raw):
            frame = _decode_data(raw, pos, len(raw))
            if frame is not None:
                return frame
    message = ha_pb2.MasterFrame.FromString(raw)
    if message.WhichOneof("kind") != "data":
        return message
    data: Any = message.data
    return DataFrame(
        offset=data.offset,
        epoch=data.epoch,
        epoch_start_offset=data.epoch_start_offset,
        master_max_offset=data.master_max_offset,
        master_min_offset=data.master_min_offset,
        records=data.records,
        confirm_offset=(data.confirm_offset if data.HasField("confirm_offset") else None),
        lazy_ack=data.lazy_ack,
    )
