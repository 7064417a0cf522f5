"""The compiled client codec (client/_codec.c) agrees with its pure-Python reference.

Every property runs both implementations on the same input and wants the same
bytes, the same messages, or the same error (type and text).
"""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pocketmq.client import message_codec as codec
from pocketmq.client.errors import InvalidMessageError
from pocketmq.client.model import SYSTEM_PROPERTIES, Message
from pocketmq.common.message import (
    BLANK_HEAD,
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    SysFlag,
    check_record,
    encode_record,
    pack_host,
)
from pocketmq.common.msgid import UniqueIdBlock

pytestmark = pytest.mark.skipif(
    codec.NATIVE is None, reason=f"the compiled codec is not in use ({codec._REASON})"
)

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
HOSTS = [
    pack_host(("10.0.0.7", 0)),
    pack_host(("127.0.0.1", 10911)),
    pack_host(("::1", 10911)),
    pack_host(("fe80::1:2", 65535)),
]


def outcome(fn, *args):
    """What *fn* returns, or the type and text of what it raises."""
    try:
        return ("ok", fn(*args))
    except Exception as exc:  # compared, not swallowed
        return ("error", type(exc), str(exc))


def both_encode(*args):
    native = codec.NATIVE
    assert native is not None
    return outcome(native.encode_messages, *args), outcome(codec.py_encode_messages, *args)


def both_decode(buf, broker="broker-a", check_crc=False):
    native = codec.NATIVE
    assert native is not None
    return (
        outcome(native.decode_messages, buf, broker, check_crc),
        outcome(codec.py_decode_messages, buf, broker, check_crc),
    )


# -- messages to encode ----------------------------------------------------------------
texts = st.text(max_size=20)
bodies = st.one_of(
    st.binary(max_size=64),
    st.binary(min_size=4000, max_size=9000),  # around the threshold
    st.builds(
        lambda chunk, n: chunk * n, st.binary(min_size=1, max_size=8), st.integers(600, 3000)
    ),  # compressible
    st.just(b""),
)


@st.composite
def messages(draw):
    timer = draw(st.sampled_from(["none", "level", "deliver", "delay"]))
    body = draw(bodies)
    wrap = draw(st.sampled_from([bytes, bytearray, memoryview]))
    return Message(
        topic=draw(st.text(min_size=1, max_size=40)),
        body=wrap(body),
        tags=draw(texts),
        keys=draw(st.lists(st.text(min_size=1, max_size=10), max_size=4)),
        properties=draw(st.dictionaries(texts, texts, max_size=40)),
        delay_level=draw(st.integers(1, 18)) if timer == "level" else 0,
        deliver_at_ms=draw(st.integers(1, 2**62)) if timer == "deliver" else 0,
        delay_ms=draw(st.integers(1, 2**40)) if timer == "delay" else 0,
        flag=draw(st.integers(-(2**31), 2**31 - 1)),
    )


@SETTINGS
@given(
    msgs=st.lists(messages(), min_size=0, max_size=8),
    born=st.sampled_from(HOSTS),
    queue_id=st.integers(0, 2**31 - 1),
    born_ms=st.integers(0, 2**62),
    compress_over=st.sampled_from([4096, 0, 1 << 30]),
    reconsume=st.integers(0, 16),
    data=st.data(),
)
def test_compiled_encoder_builds_the_same_bytes_as_the_reference(
    msgs, born, queue_id, born_ms, compress_over, reconsume, data
):
    keys = [data.draw(st.text(max_size=32)) for _ in msgs]
    native, reference = both_encode(msgs, keys, queue_id, born, born_ms, compress_over, reconsume)
    assert native == reference


def test_compiled_encoder_refuses_a_topic_too_long_for_a_record_as_the_reference():
    msg = Message(topic="é" * 64, body=b"x")  # 128 bytes of UTF-8
    native, reference = both_encode([msg], ["U"], 0, HOSTS[0], 0, 4096, 0)
    assert native == reference and native[1] is InvalidMessageError


def test_compiled_encoder_refuses_properties_too_long_for_a_record_as_the_reference():
    msg = Message(topic="t", body=b"x", properties={"big": "v" * 40_000})
    native, reference = both_encode([msg], ["U"], 0, HOSTS[0], 0, 4096, 0)
    assert native == reference and native[1] is InvalidMessageError


def test_compiled_encoder_refuses_unencodable_text_as_the_reference():
    msg = Message(topic="t", body=b"x", properties={"k": "\ud800"})
    native, reference = both_encode([msg], ["U"], 0, HOSTS[0], 0, 4096, 0)
    assert native[0] == reference[0] == "error" and native[1] is reference[1] is UnicodeEncodeError


def test_compiled_encoder_refuses_a_flag_past_32_bits_as_the_reference():
    msg = Message(topic="t", body=b"x", flag=2**31)
    native, reference = both_encode([msg], ["U"], 0, HOSTS[0], 0, 4096, 0)
    assert native == reference and native[1] is struct.error


def test_compiled_encoder_refuses_mismatched_unique_keys_as_the_reference():
    native, reference = both_encode([Message(topic="t", body=b"x")], [], 0, HOSTS[0], 0, 4096, 0)
    assert native == reference and native[1] is ValueError


def test_compiled_encoder_formats_non_string_property_values_as_the_reference():
    msg = Message(topic="t", body=b"x", properties={"n": 7, "f": 1.5})  # type: ignore[dict-item]
    native, reference = both_encode([msg], ["U"], 0, HOSTS[0], 0, 4096, 0)
    assert native == reference and native[0] == "ok"


@SETTINGS
@given(
    msgs=st.lists(messages(), min_size=1, max_size=6),
    prefix=st.text(alphabet="0123456789ABCDEF", min_size=0, max_size=28),
    first=st.integers(0, 2**40),
    stamp=st.none()
    | st.tuples(st.integers(0, 2**62), st.integers(0, 2**31), st.integers(0, 2**31)),
)
def test_compiled_encoder_writes_a_block_of_ids_as_the_reference(msgs, prefix, first, stamp):
    block = UniqueIdBlock(prefix, first, len(msgs))
    args = (0, HOSTS[1], 7, 4096, 0, stamp)
    native, reference = both_encode(msgs, block, *args)
    assert native == reference
    assert native == both_encode(msgs, list(block), *args)[0]


def test_compiled_encoder_refuses_a_block_of_ids_of_another_size_as_the_reference():
    block = UniqueIdBlock("AB", 0, 2)
    native, reference = both_encode([Message(topic="t", body=b"x")], block, 0, HOSTS[0], 0, 0, 0)
    assert native == reference and native[1] is ValueError


@SETTINGS
@given(
    data=st.one_of(st.binary(max_size=300), st.binary(min_size=1000, max_size=70_000)),
    value=st.integers(0, 2**32 - 1),
    offset=st.integers(0, 15),
)
def test_compiled_crc32_is_zlibs(data, value, offset):
    native = codec.NATIVE
    assert native is not None
    view = memoryview(b"\0" * offset + data)[offset:]  # any alignment
    assert native.crc32(view, value) == zlib.crc32(data, value)
    assert native.crc32(data) == zlib.crc32(data)


# -- batches to check ------------------------------------------------------------------
def both_check(msgs, max_body):
    native = codec.NATIVE
    assert native is not None
    return outcome(native.check_batch, msgs, max_body), outcome(
        codec.py_check_batch, msgs, max_body
    )


@st.composite
def batch_messages(draw, topic):
    """Messages that are mostly fine, each field now and then not (or of an odd type)."""
    odd = draw(st.sampled_from(["none", "topic", "body", "delay", "keys", "props", "type"]))
    fields = {
        "topic": topic,
        "body": b"x" * draw(st.integers(1, 12)),
        "tags": draw(texts),
        "keys": draw(st.lists(st.text(alphabet="ab", min_size=1, max_size=3), max_size=2)),
        "properties": draw(st.dictionaries(st.text("pq", min_size=1), st.text("v", min_size=1))),
    }
    if odd == "topic":
        fields["topic"] = draw(st.sampled_from(["other", "bad topic", "%RETRY%g", "", 5]))
    elif odd == "body":
        fields["body"] = draw(
            st.sampled_from([b"", b"y" * 13, bytearray(b"z"), memoryview(b"zz"), "text", None])
        )
    elif odd == "delay":
        name = draw(st.sampled_from(["delay_level", "deliver_at_ms", "delay_ms"]))
        fields[name] = draw(st.sampled_from([-1, 1, 19, 2**70, True, None, 1.5]))
        if draw(st.booleans()):
            fields["delay_ms" if name != "delay_ms" else "deliver_at_ms"] = 3
    elif odd == "keys":
        fields["keys"] = draw(st.sampled_from([("",), ("a b",), (b"k",), [7], ["ok", "x y"]]))
    elif odd == "props":
        fields["properties"] = draw(
            st.sampled_from(
                [
                    {"": "v"},
                    {"k": ""},
                    {"k\x01": "v"},
                    {"k": "v\x02"},
                    {"TAGS": "t"},
                    {"UNIQ_KEY": "u"},
                    {"n": 7},
                    {3: "v"},
                    {"k": None},
                ]
            )
        )
    msg = Message(**fields)
    if odd == "type":
        return draw(st.sampled_from([msg, "not a message", None]))
    return msg


@SETTINGS
@given(data=st.data(), n=st.integers(0, 5), max_body=st.sampled_from([12, 0, 2**40]))
def test_compiled_batch_check_finds_what_the_reference_finds(data, n, max_body):
    topic = data.draw(st.sampled_from(["t", "orders"]))
    msgs = [data.draw(batch_messages(topic)) for _ in range(n)]
    native, reference = both_check(msgs, max_body)
    assert native == reference


def test_compiled_batch_check_accepts_a_tuple_and_a_plain_batch():
    msgs = (Message(topic="t", body=b"x", keys=("a",), properties={"p": "v"}),) * 3
    assert both_check(msgs, 10) == (("ok", None), ("ok", None))


# -- blobs to decode -------------------------------------------------------------------
@st.composite
def stored_records(draw):
    """A record as the broker stores it: any hosts, magic, offsets and properties."""
    body = draw(bodies)
    sysflag = draw(st.sampled_from([0, SysFlag.TRANSACTION_PREPARED, SysFlag.MULTI_TAGS]))
    if draw(st.booleans()) and body:
        body, sysflag = zlib.compress(body), sysflag | SysFlag.COMPRESSED
    props = draw(
        st.one_of(
            st.dictionaries(
                st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "RETRY_TOPIC", "x", "é"]),
                st.text(max_size=12),
                max_size=6,
            ),
            st.text(max_size=60),  # any text, separators included
        )
    )
    topic = draw(
        st.one_of(st.text(min_size=1, max_size=30), st.just("%RETRY%group"), st.just("orders"))
    )
    assume(len(topic.encode()) <= 127)
    record = encode_record(
        topic=topic,
        body=body,
        queue_id=draw(st.integers(0, 1023)),
        flag=draw(st.integers(-(2**31), 2**31 - 1)),
        properties=props,
        sysflag=sysflag,
        born_timestamp_ms=draw(st.integers(0, 2**62)),
        born_host=draw(st.sampled_from(HOSTS)),
        store_timestamp_ms=draw(st.integers(0, 2**62)),
        store_host=draw(st.sampled_from(HOSTS)),
        reconsume_times=draw(st.integers(0, 16)),
        queue_offset=draw(st.integers(0, 2**40)),
        phys_offset=draw(st.one_of(st.integers(0, 2**62), st.integers(-(2**63), -1))),
    )
    return record


def v2_record(record: bytes) -> bytes:
    """The same record in the V2 layout (a 2-byte TOPICLEN; TOTALSIZE one byte larger)."""
    lay = check_record(record, 0, len(record), check_crc=False)
    out = bytearray(
        record[: lay.topic_pos - 1] + lay.topic_len.to_bytes(2, "big") + record[lay.topic_pos :]
    )
    struct.pack_into(">iI", out, 0, len(out), MESSAGE_MAGIC_CODE_V2)
    return bytes(out)


def blank(size: int) -> bytes:
    return BLANK_HEAD.pack(size, BLANK_MAGIC_CODE) + bytes(size - BLANK_HEAD.size)


@st.composite
def blobs(draw):
    parts = []
    for record in draw(st.lists(stored_records(), min_size=0, max_size=6)):
        parts.append(v2_record(record) if draw(st.booleans()) else record)
        if draw(st.integers(0, 9)) == 0:
            parts.append(blank(draw(st.integers(48, 200))))
    return b"".join(parts)


@SETTINGS
@given(blob=blobs(), check_crc=st.booleans(), broker=st.text(max_size=10))
def test_compiled_decoder_gives_the_same_messages_as_the_reference(blob, check_crc, broker):
    native, reference = both_decode(blob, broker, check_crc)
    assert native == reference
    assert native[0] == "ok"


@SETTINGS
@given(blob=blobs(), data=st.data(), check_crc=st.booleans())
def test_compiled_decoder_reports_damage_as_the_reference(blob, data, check_crc):
    assume(blob)
    damaged = bytearray(blob)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(damaged) - 1))
        damaged[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(damaged)))
    native, reference = both_decode(bytes(damaged[:cut]), "b", check_crc)
    assert native == reference


def test_compiled_decoder_reports_a_body_that_does_not_inflate_as_the_reference():
    record = encode_record(topic="t", body=b"not zlib at all", sysflag=SysFlag.COMPRESSED)
    native, reference = both_decode(record)
    assert native == reference and "does not inflate" in native[2]


def test_compiled_decoder_accepts_any_buffer():
    record = encode_record(topic="t", body=b"x", properties={"UNIQ_KEY": "U"})
    assert (
        codec.decode_messages(memoryview(record), "b")
        == codec.decode_messages(bytearray(record), "b")
        == codec.py_decode_messages(record, "b")
    )


words = st.text(
    st.characters(blacklist_characters="\x01\x02 ", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=12,
)


@SETTINGS
@given(
    msgs=st.lists(
        st.builds(
            Message,
            topic=words,
            body=bodies,
            tags=words,
            keys=st.lists(words, max_size=3),
            properties=st.dictionaries(  # check_message refuses the rest
                words.filter(lambda w: w not in SYSTEM_PROPERTIES), words, max_size=30
            ),
        ),
        min_size=1,
        max_size=5,
    ),
    born=st.sampled_from(HOSTS),
)
def test_what_the_compiled_encoder_builds_the_compiled_decoder_reads_back(msgs, born):
    keys = [f"U{i}" for i in range(len(msgs))]
    decoded = codec.decode_messages(codec.encode_messages(msgs, keys, 1, born, 5, 4096, 0), "b")
    assert [(m.topic, m.body, m.tags, m.keys, m.msg_id) for m in decoded] == [
        (m.topic, bytes(m.body), m.tags, list(m.keys), k) for m, k in zip(msgs, keys, strict=True)
    ]
    assert [
        {k: v for k, v in m.properties.items() if k not in ("TAGS", "KEYS", "UNIQ_KEY")}
        for m in decoded
    ] == [dict(m.properties) for m in msgs]


def test_both_decoders_hide_the_idempotence_stamp_alike() -> None:
    """PMQ_IDEM (an idempotent producer's stamp, the record's last property) is the
    broker's: neither decoder shows it, wherever it stands and however often."""
    records = b"".join(
        encode_record(topic="t", body=b"x", queue_id=0, properties=props)
        for props in (
            {"UNIQ_KEY": "U", "PMQ_IDEM": "1.0.0"},
            {"PMQ_IDEM": "1.0.1"},
            {"a": "1", "PMQ_IDEM": "2.0.5", "b": "2"},
            {"PMQ_IDEMX": "kept"},
        )
    )
    native, reference = both_decode(records)
    assert native == reference
    assert native[0] == "ok"
    assert [m.properties for m in native[1]] == [
        {"UNIQ_KEY": "U"},
        {},
        {"a": "1", "b": "2"},
        {"PMQ_IDEMX": "kept"},
    ]


# -- records framed as a SendBatchRequest ------------------------------------------------
@SETTINGS
@given(
    msgs=st.lists(messages(), min_size=0, max_size=5),
    tail=st.binary(max_size=40),
    stamp=st.none()
    | st.tuples(st.integers(0, 2**62), st.integers(0, 2**31), st.integers(0, 2**31)),
)
def test_compiled_encoder_frames_the_records_as_the_reference(msgs, tail, stamp):
    keys = [f"K{i}" for i in range(len(msgs))]
    args = (msgs, keys, 3, HOSTS[0], 9, 4096, 0, stamp)
    native, reference = both_encode(*args, tail)
    assert native == reference
    if native[0] == "ok":
        records = both_encode(*args)[0][1]
        assert native[1] == codec.frame_records(records, tail)
        if records:  # (empty records leave no field 1: the tail alone, whatever it is)
            assert codec.framed_records_size(native[1]) == len(records)


@pytest.mark.parametrize("size", [0, 1, 127, 128, 16383, 16384, 2**21 - 1, 2**21])
@pytest.mark.parametrize(("group", "omit"), [("", False), ("pg", True), ("g" * 200, False)])
def test_framed_records_are_the_bytes_protobuf_writes(size, group, omit):
    from pocketmq.v1 import broker_pb2 as bpb

    records = bytes(range(256)) * (size // 256) + b"r" * (size % 256)
    tail = bpb.SendBatchRequest(producer_group=group, omit_sent_columns=omit).SerializeToString()
    framed = codec.frame_records(records, tail)
    assert (
        framed
        == bpb.SendBatchRequest(
            records=records, producer_group=group, omit_sent_columns=omit
        ).SerializeToString()
    )
    assert codec.framed_records_size(framed) == size


def test_a_framed_batch_parses_back_as_the_request_it_stands_for():
    from pocketmq.v1 import broker_pb2 as bpb

    msgs = [Message(topic="t", body=b"x" * 1024, tags="a", keys=("k",)) for _ in range(256)]
    keys = UniqueIdBlock("AB" * 14, 65530, len(msgs))
    tail = bpb.SendBatchRequest(producer_group="pg", omit_sent_columns=True).SerializeToString()
    framed = codec.encode_messages(msgs, keys, 2, HOSTS[0], 5, 4096, 0, (7, 1, 40), tail)
    request = bpb.SendBatchRequest.FromString(framed)
    assert request.records == codec.encode_messages(msgs, keys, 2, HOSTS[0], 5, 4096, 0, (7, 1, 40))
    assert (request.producer_group, request.omit_sent_columns) == ("pg", True)
    assert request.SerializeToString() == framed


# -- hostile messages ------------------------------------------------------------------
class FreshTopic:
    """Not a Message: every read of an attribute makes a new object (nothing else holds
    the topic's str while the encoder uses it)."""

    body = b"x"
    tags = ""
    keys = ()
    delay_level = 0
    flag = 0
    deliver_at_ms = 0
    delay_ms = 0

    @property
    def topic(self) -> str:
        return "".join(["to", "pic-", str(id(self) % 7)])

    @property
    def properties(self) -> dict[str, str]:
        return {"".join(["k", "1"]): "".join(["v", "1"])}


class SubMessage(Message):
    """Reads its fields its own way: its slots are not what it says."""

    __slots__ = ()

    def __getattribute__(self, name: str) -> object:
        value = object.__getattribute__(self, name)
        return value.upper() if name == "tags" else value


def test_compiled_encoder_reads_any_object_as_the_reference():
    msgs = [FreshTopic(), SubMessage(topic="t", body=b"y", tags="a"), Message(topic="t", body=b"z")]
    native, reference = both_encode(msgs, ["a", "b", "c"], 0, HOSTS[0], 0, 4096, 0)
    assert native == reference and native[0] == "ok"
    assert [m.tags for m in codec.decode_messages(native[1], "b")] == ["", "A", ""]


def test_compiled_encoder_refuses_a_message_with_an_unset_field_as_the_reference():
    bare = object.__new__(Message)  # no __init__: every slot unset
    native, reference = both_encode([bare], ["a"], 0, HOSTS[0], 0, 4096, 0)
    assert native == reference and native[1] is AttributeError
    partial = object.__new__(Message)
    object.__setattr__(partial, "body", b"x")
    native, reference = both_encode([partial], ["a"], 0, HOSTS[0], 0, 4096, 0)
    assert native == reference and native[1] is AttributeError


class Shrinking:
    """A property value whose formatting empties the batch it is in."""

    def __init__(self, batch: list[Message]) -> None:
        self.batch = batch

    def __format__(self, spec: str) -> str:
        self.batch.clear()
        return "v"


def test_compiled_encoder_survives_a_batch_emptied_while_it_encodes():
    batch: list[Message] = []
    batch += [
        Message(topic="t", body=b"x", properties={"k": Shrinking(batch)}),  # type: ignore[dict-item]
        Message(topic="t", body=b"y" * 5000),
    ]
    native = codec.NATIVE
    assert native is not None
    out = native.encode_messages(batch, ["a", "b"], 0, HOSTS[0], 0, 4096, 0)
    assert batch == []  # emptied meanwhile; the encoder read the batch as it was
    assert len(codec.decode_messages(out, "b")) == 2
