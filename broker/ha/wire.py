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
# Data's varint fields by number; 7 is confirm_offset (optional), 8 lazy_ack
_VARINT_FIELDS = {
    1: "offset",
    2: "epoch",
    3: "epoch_start_offset",
    4: "master_max_offset",
    5: "master_min_offset",
    7: "confirm_offset",
    8: "lazy_ack",
}


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


def _varint(value: int) -> bytes:
    value &= _U64
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
    head = bytearray()
    for number, value in (
        (1, offset),
        (2, epoch),
        (3, epoch_start_offset),
        (4, master_max_offset),
        (5, master_min_offset),
    ):
        if value:
            head.append(number << 3)
            head += _varint(value)
    size = len(records)
    if size:
        head += _RECORDS_TAG
        head += _varint(size)
    tail = bytearray()
    if confirm_offset is not None:
        tail.append(7 << 3)
        tail += _varint(confirm_offset)
    if lazy_ack:
        tail += b"\x40\x01"
    inner = len(head) + size + len(tail)
    return b"".join((_DATA_TAG, _varint(inner), head, records, tail))


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
    """Data's fields in raw[pos:end]; None when a field is repeated (protobuf merges)."""
    frame = DataFrame()
    seen: set[int] = set()
    while pos < end:
        key, pos = _read_varint(raw, pos, end)
        number, wire_type = key >> 3, key & 7
        if number in seen:
            return None
        if number in _VARINT_FIELDS and wire_type == 0:
            seen.add(number)
            value, pos = _read_varint(raw, pos, end)
            if number == 8:
                frame.lazy_ack = value != 0
            else:
                setattr(frame, _VARINT_FIELDS[number], value - (1 << 64) if value >> 63 else value)
        elif number == 6 and wire_type == 2:
            seen.add(number)
            size, pos = _read_varint(raw, pos, end)
            if pos + size > end:
                raise FrameError(f"records of {size} bytes run past the end of the frame")
            frame.records = memoryview(raw)[pos : pos + size]
            pos += size
        elif number in _VARINT_FIELDS or number == 6:
            return None  # a known field in another wire type
        else:
            pos = _skip(raw, pos, end, wire_type)  # a newer master's field
    return frame


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
