"""Forged batch blobs: one field of one record lies; the whole batch is refused, nothing stored.

A batch travels in the commit-log layout and the broker stores it with one
copy after checking it (``broker/store/batch.py``); these tests make sure the
check holds against records built to mislead it: a TOTALSIZE, MAGICCODE,
BODYCRC, BODYLEN, TOPICLEN or PROPLEN that does not match the bytes (lengths
that overflow included), host-size flags that move every later field, a queue
id out of range, a blob cut short or followed by junk. Each record of the
batch but one is valid, and the forged one may be anywhere in it.
"""

from __future__ import annotations

import itertools
import os
import struct

import grpc
from fuzzkit import QUEUES, TOPIC, Method
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pocketmq.common.message import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    POS_BODYCRC,
    POS_MAGIC,
    POS_QUEUEID,
    POS_SYSFLAG,
    POS_TOTALSIZE,
    SysFlag,
    encode_record,
    pack_host,
)
from pocketmq.v1 import broker_pb2 as pb

SCALE = int(os.environ.get("POCKETMQ_FUZZ_SCALE", "1"))
SEND_BATCH = Method("broker", "/pocketmq.v1.Broker/SendBatch", "SendBatch", None, False)
POS_BODYLEN = 84  # with IPv4 hosts: 48 + BORNHOST 8 + STORETIMESTAMP 8 + STOREHOST 8 + 12
I32, U32 = struct.Struct(">i"), struct.Struct(">I")
U8, I16 = struct.Struct(">B"), struct.Struct(">h")


@st.composite
def records(draw) -> bytes:
    props = draw(
        st.dictionaries(
            st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "a", "b"]),
            st.text(min_size=1, max_size=20).filter(lambda v: "\x01" not in v and "\x02" not in v),
            max_size=3,
        )
    )
    return encode_record(
        topic=TOPIC,
        body=draw(st.binary(min_size=1, max_size=300)),
        queue_id=draw(st.integers(0, QUEUES - 1)),
        properties=props,
        born_host=pack_host(("10.0.0.1", 4000)),
        store_host=pack_host(("127.0.0.1", 0)),
    )


def field_positions(record: bytes) -> dict[str, tuple[int, struct.Struct]]:
    body_len = I32.unpack_from(record, POS_BODYLEN)[0]
    topic_len_pos = POS_BODYLEN + 4 + body_len
    prop_len_pos = topic_len_pos + 1 + record[topic_len_pos]
    return {
        "TOTALSIZE": (POS_TOTALSIZE, I32),
        "MAGICCODE": (POS_MAGIC, U32),
        "BODYCRC": (POS_BODYCRC, I32),
        "BODYLEN": (POS_BODYLEN, I32),
        "TOPICLEN": (topic_len_pos, U8),
        "PROPLEN": (prop_len_pos, I16),
    }


def interesting(layout: struct.Struct) -> st.SearchStrategy[int]:
    bits = layout.size * 8
    low, high = (
        (0, 2**bits - 1) if layout.format[-1] in "BI" else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    )
    edges = [
        v
        for v in (0, 1, -1, high, low, 2 ** (bits - 1) - 1, MESSAGE_MAGIC_CODE_V2, BLANK_MAGIC_CODE)
        if low <= v <= high
    ]
    return st.one_of(st.sampled_from(edges), st.integers(low, high))


@st.composite
def forged_batch(draw) -> tuple[bytes, str]:
    batch = draw(st.lists(records(), min_size=1, max_size=4))
    victim = draw(st.integers(0, len(batch) - 1))
    record = bytearray(batch[victim])
    how = draw(
        st.sampled_from(
            [
                "TOTALSIZE",
                "MAGICCODE",
                "BODYCRC",
                "BODYLEN",
                "TOPICLEN",
                "PROPLEN",
                "SYSFLAG",
                "QUEUEID",
                "CUT",
                "JUNK",
            ]
        )
    )
    if how in ("CUT", "JUNK"):
        blob = b"".join(batch)
        if how == "CUT":
            # inside a record: a cut between two whole records leaves a valid, shorter batch
            ends = set(itertools.accumulate(map(len, batch)))
            return blob[: draw(st.integers(1, len(blob) - 1).filter(lambda n: n not in ends))], how
        return blob + draw(st.binary(min_size=1, max_size=100)), how
    if how == "SYSFLAG":  # host-size bits that move every field after BORNHOST
        flags = draw(
            st.sampled_from(
                [
                    SysFlag.BORNHOST_V6,
                    SysFlag.STOREHOST_V6,
                    SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6,
                ]
            )
        )
        I32.pack_into(record, POS_SYSFLAG, I32.unpack_from(record, POS_SYSFLAG)[0] ^ flags)
    elif how == "QUEUEID":
        I32.pack_into(
            record,
            POS_QUEUEID,
            draw(st.one_of(st.integers(QUEUES, 2**31 - 1), st.integers(-(2**31), -1))),
        )
    else:
        pos, layout = field_positions(bytes(record))[how]
        original = layout.unpack_from(record, pos)[0]
        layout.pack_into(record, pos, draw(interesting(layout).filter(lambda v: v != original)))
    batch[victim] = bytes(record)
    return b"".join(batch), how


@settings(
    max_examples=150 * SCALE,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(forged=forged_batch())
def test_a_forged_record_makes_the_whole_batch_refused(untouched, forged):
    blob, how = forged
    payload = pb.SendBatchRequest(records=blob).SerializeToString()
    before = untouched.puts()
    code, details = untouched.call(SEND_BATCH, payload)
    assert code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND), (
        how,
        code,
        details,
    )
    assert details, how
    assert untouched.puts() == before, (how, "a batch with a forged record was stored")


@settings(
    max_examples=3,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(batch=st.lists(records(), min_size=1, max_size=4))
def test_the_unforged_batches_are_stored(servers, batch):
    """The generator's valid records are accepted: the refusals above are the forgeries'."""
    blob = b"".join(batch)
    before = servers.puts()
    code, details = servers.call(SEND_BATCH, pb.SendBatchRequest(records=blob).SerializeToString())
    assert (code, details) == (grpc.StatusCode.OK, "")
    assert servers.puts() == before + len(batch)
