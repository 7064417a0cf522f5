"""Message encoding and pull-reply decoding against the common record layout."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pocketmq.client.errors import InvalidMessageError
from pocketmq.client.message_codec import (
    check_batch,
    check_message,
    decode_messages,
    encode_message,
    set_queue_id,
)
from pocketmq.client.model import Message
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.message import SysFlag, decode_record, encode_record, pack_host

BORN = pack_host(("10.0.0.7", 0))


def stored(record: bytes, *, queue_offset: int, phys_offset: int) -> bytes:
    """What the broker would store: offsets and store host patched in."""
    msg = decode_record(record)
    return encode_record(
        topic=msg.topic,
        body=msg.body,
        queue_id=msg.queue_id,
        flag=msg.flag,
        properties=msg.properties,
        sysflag=msg.sysflag,
        born_timestamp_ms=msg.born_timestamp_ms,
        born_host=BORN,
        store_timestamp_ms=123,
        store_host=pack_host(("127.0.0.1", 10911)),
        reconsume_times=msg.reconsume_times,
        queue_offset=queue_offset,
        phys_offset=phys_offset,
    )


def test_encoded_record_carries_the_clients_properties():
    record = encode_message(
        Message(topic="t", body=b"hi", tags="A", keys=["k1", "k2"], properties={"p": "v"}),
        queue_id=3,
        uniq_key="U1",
        born_host=BORN,
        born_timestamp_ms=42,
    )
    msg = decode_record(record)
    assert (msg.topic, msg.queue_id, msg.body, msg.born_timestamp_ms) == ("t", 3, b"hi", 42)
    assert msg.properties == {"p": "v", "TAGS": "A", "KEYS": "k1 k2", "UNIQ_KEY": "U1"}
    assert msg.store_host == ("0.0.0.0", 0)


def test_large_bodies_are_compressed_and_inflated_on_decode():
    body = b"abc" * 5000
    record = encode_message(
        Message(topic="t", body=body), queue_id=0, uniq_key="U", born_host=BORN, born_timestamp_ms=0
    )
    raw = decode_record(record)
    assert raw.sysflag & SysFlag.COMPRESSED and len(raw.body) < len(body)
    [msg] = decode_messages(stored(record, queue_offset=5, phys_offset=1000), "b")
    assert msg.body == body


def test_decode_fills_ids_and_position():
    record = encode_message(
        Message(topic="t", body=b"x", tags="T"),
        queue_id=2,
        uniq_key="U9",
        born_host=BORN,
        born_timestamp_ms=7,
    )
    [msg] = decode_messages(stored(record, queue_offset=5, phys_offset=0x1234), "broker-a")
    assert (msg.msg_id, msg.tags, msg.broker_name, msg.queue_id, msg.queue_offset) == (
        "U9",
        "T",
        "broker-a",
        2,
        5,
    )
    assert msg.offset_msg_id == "7F00000100002A9F0000000000001234"
    assert msg.phys_offset == 0x1234


def test_retry_topic_messages_show_their_original_topic():
    record = encode_record(
        topic="%RETRY%g", body=b"x", properties={"RETRY_TOPIC": "orders", "UNIQ_KEY": "U"}
    )
    [msg] = decode_messages(record, "b")
    assert msg.topic == "orders"


def test_a_damaged_reply_raises_naming_the_offset():
    record = encode_record(topic="t", body=b"x")
    with pytest.raises(CorruptRecordError, match="offset 0"):
        decode_messages(b"\0" * 4 + record[4:], "b")


@given(
    bodies=st.lists(st.binary(min_size=1, max_size=9000), min_size=1, max_size=5),
    tags=st.sampled_from(["", "A", "Tag-B"]),
)
def test_concatenated_records_round_trip(bodies, tags):
    blob = b"".join(
        stored(
            encode_message(
                Message(topic="t", body=b, tags=tags),
                queue_id=1,
                uniq_key=f"U{i}",
                born_host=BORN,
                born_timestamp_ms=i,
            ),
            queue_offset=i,
            phys_offset=i * 100,
        )
        for i, b in enumerate(bodies)
    )
    msgs = decode_messages(blob, "b")
    assert [m.body for m in msgs] == bodies
    assert [m.msg_id for m in msgs] == [f"U{i}" for i in range(len(bodies))]
    assert {m.tags for m in msgs} == {tags}


def test_set_queue_id_retargets_a_record():
    record = encode_message(
        Message(topic="t", body=b"x"), queue_id=1, uniq_key="U", born_host=BORN, born_timestamp_ms=0
    )
    assert decode_record(set_queue_id(record, 6)).queue_id == 6


@pytest.mark.parametrize(
    ("msg", "match"),
    [
        (Message(topic="bad topic", body=b"x"), "contains"),
        (Message(topic="t", body=b""), "empty"),
        (Message(topic="t", body=b"x" * 11), "11 bytes; the limit is 10"),
        (Message(topic="%RETRY%g", body=b"x"), "retry topic"),
        (Message(topic="t", body=b"x", keys=["a b"]), "space"),
        (Message(topic="t", body=b"x", properties={"TAGS": "x"}), "set by the client"),
        (Message(topic="t", body=b"x", delay_level=19), "delay_level"),
    ],
)
def test_check_message_refuses_what_the_broker_would(msg, match):
    with pytest.raises(InvalidMessageError, match=match):
        check_message(msg, max_body_bytes=10)


def test_a_lone_key_string_stays_one_key():
    assert Message(topic="t", body=b"x", keys="order-1").keys == ("order-1",)


@pytest.mark.parametrize(
    ("msgs", "match"),
    [
        ([], "no messages"),
        ([Message(topic="t", body=b"x"), Message(topic="u", body=b"x")], "one topic"),
        ([Message(topic="t", body=b"x"), Message(topic="t", body=b"x", delay_level=2)], "delayed"),
        ([Message(topic="bad topic", body=b"x")], "contains"),
        ([Message(topic="t", body=b"x"), Message(topic="t", body=b"")], "empty"),
        ([Message(topic="t", body=b"x" * 11)], "11 bytes; the limit is 10"),
        ([Message(topic="t", body=b"x", keys=["a b"])], "space"),
        ([Message(topic="t", body=b"x", properties={"KEYS": "x"})], "set by the client"),
        ([Message(topic="t", body=b"x", deliver_at_ms=1, delay_ms=2)], "at most one"),
    ],
)
def test_check_batch_refuses_what_the_broker_would(msgs, match):
    with pytest.raises(InvalidMessageError, match=match):
        check_batch(msgs, 10)


def test_check_batch_lets_a_plain_batch_through():
    check_batch(
        [
            Message(topic="t", body=b"x", tags="a", keys=("k",), properties={"p": "v"}),
            Message(topic="t", body=bytearray(b"y"), deliver_at_ms=5),
        ],
        10,
    )
