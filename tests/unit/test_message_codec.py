"""The stored record layout, property encoding, hashing and ids."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.hashing import index_slot, java_string_hash, tags_code
from pocketmq.common.message import (
    MESSAGE_MAGIC_CODE,
    SysFlag,
    decode_properties,
    decode_record,
    encode_properties,
    encode_record,
    iter_records,
    pack_host,
    record_size,
)
from pocketmq.common.msgid import UniqueIdGenerator, decode_offset_msg_id, encode_offset_msg_id


def hand_built_record() -> bytes:
    body, topic, props = b"hello", b"orders", b"TAGS\x01paid\x02"
    parts = [
        struct.pack(">i", 91 + len(body) + len(topic) + len(props)),  # TOTALSIZE
        struct.pack(">I", 0xDAA320A7),  # MAGICCODE
        struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF),  # BODYCRC
        struct.pack(">i", 3),  # QUEUEID
        struct.pack(">i", 7),  # FLAG
        struct.pack(">q", 11),  # QUEUEOFFSET
        struct.pack(">q", 4096),  # PHYSICALOFFSET
        struct.pack(">i", 0),  # SYSFLAG
        struct.pack(">q", 1_700_000_000_000),  # BORNTIMESTAMP
        bytes([10, 0, 0, 1]) + struct.pack(">i", 5555),  # BORNHOST
        struct.pack(">q", 1_700_000_000_123),  # STORETIMESTAMP
        bytes([127, 0, 0, 1]) + struct.pack(">i", 10911),  # STOREHOST
        struct.pack(">i", 2),  # RECONSUMETIMES
        struct.pack(">q", 0),  # PREPARED TX OFFSET
        struct.pack(">i", len(body)) + body,
        bytes([len(topic)]) + topic,
        struct.pack(">h", len(props)) + props,
    ]
    return b"".join(parts)


def test_encode_record_matches_the_rocketmq_layout_byte_for_byte():
    record = encode_record(
        topic="orders",
        body=b"hello",
        queue_id=3,
        flag=7,
        properties={"TAGS": "paid"},
        born_timestamp_ms=1_700_000_000_000,
        born_host=pack_host(("10.0.0.1", 5555)),
        store_timestamp_ms=1_700_000_000_123,
        store_host=pack_host(("127.0.0.1", 10911)),
        reconsume_times=2,
        queue_offset=11,
        phys_offset=4096,
    )
    assert record == hand_built_record()


def test_decode_record_reads_every_field_of_a_hand_built_record():
    msg = decode_record(hand_built_record())
    assert (msg.queue_id, msg.flag, msg.queue_offset, msg.phys_offset) == (3, 7, 11, 4096)
    assert msg.born_host == ("10.0.0.1", 5555)
    assert msg.store_host == ("127.0.0.1", 10911)
    assert msg.store_timestamp_ms == 1_700_000_000_123
    assert (msg.topic, msg.body, msg.tags, msg.reconsume_times) == ("orders", b"hello", "paid", 2)


def test_ipv6_hosts_set_sysflag_bits_and_round_trip():
    record = encode_record(
        topic="t", body=b"x", born_host=pack_host(("::1", 1)), store_host=pack_host(("fe80::2", 2))
    )
    msg = decode_record(record)
    assert msg.sysflag & SysFlag.BORNHOST_V6 and msg.sysflag & SysFlag.STOREHOST_V6
    assert msg.born_host == ("::1", 1) and msg.store_host == ("fe80::2", 2)
    assert len(record) == record_size(1, 1, 0, born_host_size=20, store_host_size=20)


@pytest.mark.parametrize(
    ("offset", "value", "expected"),
    [
        (4, b"\0\0\0\0", "magic code"),
        (8, b"\0\0\0\1", "body CRC"),
        (0, struct.pack(">i", 5000), "TOTALSIZE"),
    ],
)
def test_decode_rejects_damaged_records_with_the_reason(offset, value, expected):
    raw = bytearray(hand_built_record())
    raw[offset : offset + len(value)] = value
    with pytest.raises(CorruptRecordError, match=expected):
        decode_record(bytes(raw))


def test_properties_drop_empty_pairs_and_keep_rocketmq_separators():
    assert encode_properties({"TAGS": "a", "KEYS": "", "": "x"}) == "TAGS\x01a\x02"
    assert decode_properties("TAGS\x01a\x02\x01b\x02KEYS\x01\x02") == {"TAGS": "a"}


@given(
    topic=st.from_regex(r"[a-zA-Z0-9_%|-]{1,127}", fullmatch=True),
    body=st.binary(max_size=2048),
    props=st.dictionaries(
        st.text("abcXYZ_", min_size=1, max_size=8),
        st.text(min_size=1, max_size=20).filter(lambda v: "\x01" not in v and "\x02" not in v),
        max_size=5,
    ),
    queue_id=st.integers(0, 2**31 - 1),
    reconsume=st.integers(0, 16),
    born_ts=st.integers(0, 2**62),
)
def test_records_round_trip(topic, body, props, queue_id, reconsume, born_ts):
    record = encode_record(
        topic=topic,
        body=body,
        queue_id=queue_id,
        properties=props,
        reconsume_times=reconsume,
        born_timestamp_ms=born_ts,
    )
    (msg,) = list(iter_records(record + record))[:1]
    assert (msg.topic, msg.body, msg.properties, msg.queue_id) == (topic, body, props, queue_id)
    assert msg.reconsume_times == reconsume and msg.born_timestamp_ms == born_ts
    assert msg.total_size == len(record)
    assert struct.unpack_from(">I", record, 4)[0] == MESSAGE_MAGIC_CODE


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Aa", 2112),
        ("BB", 2112),
        ("polygenelubricants", -(2**31)),
        ("\U0001f600", 1772899),
    ],
)
def test_java_string_hash_matches_java(text, expected):
    assert java_string_hash(text) == expected


def test_index_slot_of_integer_min_value_is_zero_as_in_rocketmq():
    assert index_slot(-(2**31), 7) == 0
    assert index_slot(-15, 7) == 1
    assert tags_code("") == 0


def test_offset_message_id_round_trips_and_rejects_garbage():
    msg_id = encode_offset_msg_id("127.0.0.1", 10911, 123456)
    assert msg_id == "7F00000100002A9F000000000001E240"
    decoded = decode_offset_msg_id(msg_id)
    assert (decoded.host, decoded.port, decoded.phys_offset) == ("127.0.0.1", 10911, 123456)
    with pytest.raises(ValueError, match="32"):
        decode_offset_msg_id("ABC")
    with pytest.raises(ValueError, match="hexadecimal"):
        decode_offset_msg_id("Z" * 32)


def test_unique_ids_are_distinct_and_32_hex_chars():
    gen = UniqueIdGenerator()
    ids = {gen.next_id() for _ in range(10_000)}
    assert len(ids) == 10_000
    assert all(len(i) == 32 for i in ids)


def test_ids_made_per_batch_are_distinct_from_each_other_and_from_single_ones():
    gen = UniqueIdGenerator()
    ids = [gen.next_id(), *gen.next_ids(5_000), gen.next_id(), *gen.next_ids(3)]
    assert len(set(ids)) == len(ids) == 5_005
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    assert {i[:20] for i in ids} == {ids[0][:20]}, "ip, pid and random prefix shared"


def test_a_block_of_ids_reads_as_the_ids_made_one_by_one():
    gen = UniqueIdGenerator()
    block = gen.next_block(300)
    ids = list(block)
    assert len(block) == 300 and len(set(ids)) == 300
    assert [block[i] for i in range(300)] == ids and block[-1] == ids[-1]
    assert block[10:13] == ids[10:13]
    assert {i[:28] for i in ids} == {block.prefix}
    assert [int(i[28:], 16) for i in ids] == [(block.first + i) & 0xFFFF for i in range(300)]
    with pytest.raises(IndexError):
        block[300]
    single = gen.next_id()
    assert single not in ids and int(single[28:], 16) == (block.first + 300) & 0xFFFF
    assert list(gen.next_block(0)) == []
