"""The Arrow codec (``pocketmq.spark.arrowcodec``): compiled and reference paths agree with
the SDK's codec, record for record and byte for byte. No Spark session needed."""

from __future__ import annotations

import dataclasses
import zlib

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pocketmq.broker.store.producer_state import idempotence_of
from pocketmq.client.message_codec import decode_messages, encode_message
from pocketmq.client.model import SYSTEM_PROPERTIES, Message
from pocketmq.common.message import (
    BLANK_HEAD,
    BLANK_MAGIC_CODE,
    SysFlag,
    encode_record,
    pack_host,
)
from pocketmq.spark import arrowcodec
from pocketmq.spark.arrowcodec import (
    MODE_DISPATCHED,
    MODE_SEGMENT,
    EncodeSettings,
    SinkArrays,
    Stop,
    py_decode_block,
    py_encode_chunks,
    py_set_queue_id,
)
from pocketmq.spark.schema import ARROW_SCHEMA, record_batch

needs_native = pytest.mark.skipif(
    arrowcodec.NATIVE is None, reason="the compiled codec is not built"
)

# Text with what trips codecs: non-ASCII, astral characters, the separators' neighbours.
TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x01\x02\x00"), max_size=12)
WORD = TEXT.filter(lambda s: s != "" and " " not in s)
RAW_TEXT = st.binary(max_size=12).filter(lambda b: b"\x01" not in b and b"\x02" not in b)


@st.composite
def records(draw: st.DrawFn) -> bytes:
    """One stored record: unicode or raw (possibly invalid UTF-8) topics and properties,
    empty and compressed bodies, keys with empty pieces, IPv6 hosts, retry topics."""
    topic = draw(
        st.one_of(
            WORD,
            st.just("%RETRY%group"),
            RAW_TEXT.map(lambda b: b.decode("latin-1")).filter(
                lambda s: 0 < len(s.encode()) <= 127
            ),
        )
    )
    props: dict[str, str] = draw(st.dictionaries(WORD, TEXT, max_size=4))
    if draw(st.booleans()):
        props["TAGS"] = draw(TEXT)
    if draw(st.booleans()):
        props["KEYS"] = " ".join(draw(st.lists(TEXT, max_size=3)))
    if draw(st.booleans()):
        props["UNIQ_KEY"] = draw(TEXT)
    if topic.startswith("%RETRY%") and draw(st.booleans()):
        props["RETRY_TOPIC"] = draw(WORD)
    body = draw(
        st.one_of(
            st.binary(max_size=64),
            st.just(b""),
            st.binary(min_size=1, max_size=8).map(lambda b: b * 700),
        )
    )
    sysflag = 0
    if len(body) > 100 and draw(st.booleans()):
        body, sysflag = zlib.compress(body, 5), SysFlag.COMPRESSED
    v6 = draw(st.booleans())
    host = pack_host(("::1", 9) if v6 else ("10.0.0.9", 4321))
    raw_props = "".join(f"{k}\x01{v}\x02" for k, v in props.items())
    if draw(st.booleans()):  # a repeated name, a pair without value, stray bytes
        raw_props += draw(st.sampled_from(["a\x01x\x02a\x01y\x02", "k\x01\x02", "junk"]))
    record = encode_record(
        topic=topic,
        body=body,
        properties=raw_props,
        sysflag=sysflag,
        queue_id=draw(st.integers(0, 2**31 - 1)),
        queue_offset=draw(st.integers(0, 2**40)),
        born_timestamp_ms=draw(st.integers(0, 2**44)),
        born_host=host,
        store_timestamp_ms=draw(st.integers(0, 2**44)),
        store_host=host,
    )
    if draw(st.integers(0, 9)) == 0:  # invalid UTF-8 in the properties
        marker = record.rfind(b"\x02")
        if marker > 0:
            record = record[:marker] + b"\xff" + record[marker + 1 :]
    return record


def _blank(size: int = 64) -> bytes:
    return BLANK_HEAD.pack(size, BLANK_MAGIC_CODE) + b"\0" * (size - BLANK_HEAD.size)


def sdk_batch(blob: bytes, broker: str | None) -> pa.RecordBatch:
    return record_batch(decode_messages(blob, broker or ""), broker)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.one_of(records(), st.just(_blank())), max_size=12),
    st.sampled_from(["broker-a", None]),
    st.sampled_from([1, 3, 1000]),
)
def test_arrow_decode_equals_the_sdk_decode_on_random_records(blobs, broker, max_rows):
    blob = b"".join(blobs)
    try:
        expected = sdk_batch(blob, broker)
    except Exception:  # damaged on purpose (a \xff in a length): see below
        assume(False)
    for decode in {arrowcodec.decode_block, py_decode_block}:
        got, pos = [], 0
        while True:
            block = decode(blob, pos, len(blob), broker=broker, max_rows=max_rows)
            got.append(block.batch)
            assert block.stop in (Stop.LIMIT, Stop.FULL), block.reason
            if block.stop is Stop.LIMIT:
                break
            pos = block.stop_pos
        table = pa.Table.from_batches(got, schema=ARROW_SCHEMA)
        assert table.equals(pa.Table.from_batches([expected])), decode


@given(st.lists(records(), min_size=1, max_size=6))
@settings(max_examples=100, deadline=None)
def test_compiled_and_reference_decoders_stop_at_the_same_damaged_byte(blobs):
    blob = bytearray(b"".join(blobs))
    blob[len(blob) // 2] ^= 0x5A
    results = [
        decode(bytes(blob), 0, len(blob), broker="b", check_crc=True)
        for decode in (arrowcodec.decode_block, py_decode_block)
    ]
    assert results[0].batch.equals(results[1].batch)
    assert (results[0].stop, results[0].stop_pos) == (results[1].stop, results[1].stop_pos)


@needs_native
@given(st.binary(max_size=300), st.integers(min_value=0, max_value=3000))
@settings(max_examples=300, deadline=None)
def test_the_compiled_body_crc_is_zlibs_crc32_at_every_length(head, extra):
    # short bodies go to zlib; from 64 bytes on they are folded (PCLMULQDQ) in 16-byte
    # steps and zlib takes the tail: lengths on both sides of each boundary
    assert arrowcodec.NATIVE is not None
    data = head + bytes(range(256)) * (extra // 256) + bytes(extra % 256)
    for n in {len(head), len(data), 63, 64, 65, 79, 80, 1024, 1040}:
        assert arrowcodec.NATIVE.crc32(data[:n]) == zlib.crc32(data[:n]), n


def test_segment_mode_skips_transaction_halves_checks_offsets_and_ends_at_a_blank():
    recs = []
    for i, sysflag in enumerate([0, 0x4, 0x8, 0xC, 0]):
        recs.append(
            encode_record(
                topic="t",
                body=b"b%d" % i,
                sysflag=sysflag,
                queue_offset=i,
                phys_offset=1000 + sum(map(len, recs)),
            )
        )
    blob = b"".join(recs) + _blank() + b"tail never read"
    for decode in (arrowcodec.decode_block, py_decode_block):
        block = decode(
            blob,
            0,
            len(blob),
            broker=None,
            mode=MODE_SEGMENT | MODE_DISPATCHED,
            base_phys=1000,
            check_crc=True,
        )
        assert block.stop is Stop.END and block.stop_pos == sum(map(len, recs))
        assert block.batch.column("body").to_pylist() == [b"b0", b"b2", b"b4"]
        assert block.batch.column("broker").null_count == 3
        moved = decode(blob, 0, len(blob), broker=None, mode=MODE_SEGMENT, base_phys=999)
        assert (moved.stop, moved.stop_pos, moved.batch.num_rows) == (Stop.DAMAGED, 0, 0)
        assert "PHYSICALOFFSET says 1000" in moved.reason


@given(st.lists(st.binary(max_size=300), min_size=1, max_size=40), st.integers(1, 2000))
@settings(max_examples=100, deadline=None)
def test_a_segment_read_in_parts_gives_each_record_once(bodies, every):
    recs: list[bytes] = []
    for i, body in enumerate(bodies):
        recs.append(
            encode_record(
                topic="t", body=body, queue_offset=i, phys_offset=5000 + sum(map(len, recs))
            )
        )
    segment = b"".join(recs) + b"\0" * 100
    starts = arrowcodec.record_starts(segment, len(segment), 5000, every)
    assert starts == arrowcodec.py_record_starts(segment, len(segment), 5000, every)
    ends = [*starts[1:], None]
    parts = [
        arrowcodec.decode_block(
            segment,
            a,
            len(segment),
            end_pos=b,
            broker=None,
            mode=MODE_SEGMENT,
            base_phys=5000,
            max_rows=7,
        )
        for a, b in zip(starts, ends, strict=True)
    ]
    whole = py_decode_block(
        segment, 0, len(segment), broker=None, mode=MODE_SEGMENT, base_phys=5000, max_rows=1000
    )
    assert all(p.stop in (Stop.LIMIT, Stop.END, Stop.FULL) for p in parts)
    got = []
    for a, b in zip(starts, ends, strict=True):
        pos = a
        while True:
            block = arrowcodec.decode_block(
                segment,
                pos,
                len(segment),
                end_pos=b,
                broker=None,
                mode=MODE_SEGMENT,
                base_phys=5000,
                max_rows=7,
            )
            got.append(block.batch)
            if block.stop is not Stop.FULL:
                break
            pos = block.stop_pos
    assert pa.Table.from_batches(got).equals(pa.Table.from_batches([whole.batch]))


def test_topic_filter_is_asked_once_per_topic_and_sees_the_retry_topic():
    blob = b"".join(
        encode_record(topic=t, body=b"x", properties=p)
        for t, p in [("a", {}), ("b", {}), ("a", {}), ("%RETRY%g", {"RETRY_TOPIC": "b"})]
    )
    for decode in (arrowcodec.decode_block, py_decode_block):
        asked: list[bytes] = []

        def wanted(raw: bytes, asked: list[bytes] = asked) -> bool:
            asked.append(raw)
            return raw == b"b"

        block = decode(blob, 0, len(blob), broker="x", topic_filter=wanted)
        assert block.batch.column("topic").to_pylist() == ["b", "b"]
        assert sorted(asked) == [b"a", b"b"]


@needs_native
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(records(), st.integers(1, 3)), min_size=1, max_size=6))
def test_the_compiled_topic_filter_keeps_what_the_reference_keeps_in_runs_of_one_topic(runs):
    # Records come in runs of one topic (the compiled decoder reuses the previous
    # record's answer), retry records name their topic in a property, and some text is
    # not UTF-8 (decoded with replacement): every row kept must be one the filter wants.
    blob = b"".join(record * times for record, times in runs)

    def wanted(raw: bytes) -> bool:
        return sum(raw) % 2 == 0

    try:
        expected = py_decode_block(blob, 0, len(blob), broker="b", topic_filter=wanted)
    except Exception:  # damaged on purpose (a \xff in a length)
        assume(False)
    got = arrowcodec.decode_block(blob, 0, len(blob), broker="b", topic_filter=wanted)
    assert (got.stop, got.stop_pos) == (expected.stop, expected.stop_pos)
    assert got.batch.equals(expected.batch)
    assert all(wanted(t.encode()) for t in got.batch.column("topic").to_pylist())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.lists(records(), max_size=4), min_size=1, max_size=5),
    st.sampled_from([1, 2, 1000]),
)
def test_a_list_of_buffers_decodes_as_their_concatenation(groups, max_rows):
    # Pull replies are decoded together without being joined; stops (FULL every
    # max_rows rows) and stop_pos count bytes of the concatenation.
    buffers = [b"".join(group) for group in groups]
    joined = b"".join(buffers)
    try:
        sdk_batch(joined, "b")
    except Exception:  # damaged on purpose (a \xff in a length)
        assume(False)
    for decode in {arrowcodec.decode_block, py_decode_block}:
        got, want, pos = [], [], 0
        while True:
            block = decode(buffers, pos, len(joined), broker="b", max_rows=max_rows)
            whole = decode(joined, pos, len(joined), broker="b", max_rows=max_rows)
            assert (block.stop, block.stop_pos) == (whole.stop, whole.stop_pos)
            got.append(block.batch)
            want.append(whole.batch)
            if block.stop is not Stop.FULL:
                break
            pos = block.stop_pos
        assert pa.Table.from_batches(got).equals(pa.Table.from_batches(want)), decode


def test_the_properties_column_never_shows_the_idempotence_stamp():
    blob = b"".join(
        encode_record(topic="a", body=b"x", properties=p)
        for p in [{"UNIQ_KEY": "U1", "PMQ_IDEM": "7.0.0"}, {"k": "v", "PMQ_IDEM": "7.0.1"}, {}]
    )
    for decode in (arrowcodec.decode_block, py_decode_block):
        block = decode(blob, 0, len(blob), broker="x")
        assert block.batch.column("properties").to_pylist() == [[], [("k", "v")], []]


# -- encoding --------------------------------------------------------------------------------
SETTINGS = EncodeSettings(
    topic="orders",
    born_host=pack_host(("10.1.2.3", 0)),
    born_timestamp_ms=1_700_000_000_123,
    id_prefix="0A010203" + "1" * 20,
    compress_over_bytes=4096,
    max_body_bytes=4 << 20,
    chunk_rows=3,
    chunk_body_bytes=5000,
)


@st.composite
def sink_rows(draw: st.DrawFn) -> tuple[SinkArrays, int]:
    n = draw(st.integers(1, 9))
    body = draw(
        st.lists(
            st.one_of(
                st.binary(min_size=1, max_size=40),
                st.binary(min_size=1, max_size=4).map(lambda b: b * 1500),
            ),
            min_size=n,
            max_size=n,
        )
    )
    as_text = draw(st.booleans())
    body_col = pa.array(
        [b.hex() for b in body] if as_text else body, pa.string() if as_text else pa.binary()
    )
    tags = pa.array(draw(st.lists(st.one_of(st.none(), TEXT), min_size=n, max_size=n)), pa.string())
    if draw(st.booleans()):
        keys = pa.array(
            draw(
                st.lists(st.one_of(st.none(), st.lists(WORD, max_size=3)), min_size=n, max_size=n)
            ),
            pa.list_(pa.string()),
        )
    else:
        keys = pa.array(
            draw(
                st.lists(
                    st.one_of(st.none(), st.lists(WORD, min_size=1, max_size=3).map(" ".join)),
                    min_size=n,
                    max_size=n,
                )
            ),
            pa.string(),
        )
    props = pa.array(
        draw(
            st.lists(
                st.one_of(
                    st.none(),
                    st.lists(
                        st.tuples(
                            WORD.filter(lambda k: k not in SYSTEM_PROPERTIES),
                            TEXT.filter(bool),
                        ),
                        max_size=3,
                    ),
                ),
                min_size=n,
                max_size=n,
            )
        ),
        pa.map_(pa.string(), pa.string()),
    )
    start = draw(st.integers(0, n - 1))
    arrays = SinkArrays(body=body_col, tags=tags, keys=keys, properties=props)
    return (
        arrays
        if start == 0
        else SinkArrays(
            body=body_col.slice(start),
            tags=tags.slice(start),
            keys=keys.slice(start),
            properties=props.slice(start),
        )
    ), n - start


def _queues():
    count = iter(range(100))
    return lambda: next(count) % 4


@needs_native
@settings(max_examples=200, deadline=None)
@given(sink_rows(), st.integers(0, 0xFFFF + 5))
def test_arrow_encode_equals_the_sdk_encode_byte_for_byte(rows, counter):
    arrays, n = rows
    native = arrowcodec.encode_chunks(arrays, 0, n, SETTINGS, counter, _queues())
    reference = py_encode_chunks(arrays, 0, n, SETTINGS, counter, _queues())
    assert native == reference
    blob = b"".join(chunk for chunk, _rows in native[0])
    assert len(decode_messages(blob, "b", check_crc=True)) == n
    assert py_set_queue_id(blob, 7) == arrowcodec.set_queue_id(blob, 7)


def _stamped_queues():
    """(queue id, pid, epoch, first seq) per chunk, numbering each of 4 queues from 0."""
    picked: list[int] = []
    next_seq = [0] * 4

    def next_queue(previous_rows: int) -> tuple[int, int, int, int]:
        if picked:
            next_seq[picked[-1]] += previous_rows
        picked.append(len(picked) % 4)
        return picked[-1], (1 << 62) + 5, 3, next_seq[picked[-1]]

    return next_queue


@needs_native
@settings(max_examples=100, deadline=None)
@given(sink_rows(), st.integers(0, 0xFFFF + 5))
def test_stamped_encode_numbers_each_queue_without_gaps_in_both_encoders(rows, counter):
    arrays, n = rows
    stamped = dataclasses.replace(SETTINGS, stamped=True)
    native = arrowcodec.encode_chunks(arrays, 0, n, stamped, counter, _stamped_queues())
    assert native == py_encode_chunks(arrays, 0, n, stamped, counter, _stamped_queues())
    seqs: dict[int, list[int]] = {}
    for blob, _rows in native[0]:
        pos = 0
        while pos < len(blob):
            size = int.from_bytes(blob[pos : pos + 4], "big")
            pid, epoch, seq = idempotence_of(blob, pos + size)
            assert (pid, epoch) == ((1 << 62) + 5, 3)
            seqs.setdefault(int.from_bytes(blob[pos + 12 : pos + 16], "big"), []).append(seq)
            pos += size
    assert all(s == list(range(len(s))) for s in seqs.values())
    messages = decode_messages(b"".join(c for c, _ in native[0]), "b", check_crc=True)
    assert len(messages) == n and all(len(m.msg_id) == 32 for m in messages)


@pytest.mark.parametrize(
    ("column", "value", "says"),
    [
        ("body", pa.array([b""], pa.binary()), "empty"),
        ("body", pa.array([None], pa.binary()), "null"),
        ("keys", pa.array(["a  b"], pa.string()), "key"),
        ("keys", pa.array([["a b"]], pa.list_(pa.string())), "key"),
        ("properties", pa.array([[("TAGS", "x")]], pa.map_(pa.string(), pa.string())), "TAGS"),
        ("properties", pa.array([[("k", "a\x01b")]], pa.map_(pa.string(), pa.string())), "x01"),
    ],
)
def test_a_row_the_broker_would_refuse_is_an_error_naming_the_row(column, value, says):
    fields = {"body": pa.array([b"x"], pa.binary()), column: value}
    arrays = SinkArrays(**fields)
    for encode in {arrowcodec.encode_chunks, py_encode_chunks}:
        with pytest.raises(ValueError, match=f"row 0: .*{says}"):
            encode(arrays, 0, 1, SETTINGS, 0, _queues())


def test_a_message_encoded_from_arrow_decodes_back_with_every_field():
    arrays = SinkArrays(
        body=pa.array([b"x" * 5000, b"y"]),
        tags=pa.array(["T", None]),
        keys=pa.array([["k1", "k2"], None], pa.list_(pa.string())),
        properties=pa.array([[("p", "1")], None], pa.map_(pa.string(), pa.string())),
    )
    chunks, counter = arrowcodec.encode_chunks(arrays, 0, 2, SETTINGS, 0xFFFF, lambda: 3)
    assert counter == 0x10001 and [rows for _b, rows in chunks] == [1, 1]
    msgs = [m for blob, _rows in chunks for m in decode_messages(blob, "b", check_crc=True)]
    assert [(m.body, m.tags, m.keys, m.properties.get("p"), m.queue_id) for m in msgs] == [
        (b"x" * 5000, "T", ["k1", "k2"], "1", 3),
        (b"y", "", [], None, 3),
    ]
    assert [m.msg_id for m in msgs] == [SETTINGS.id_prefix + "FFFF", SETTINGS.id_prefix + "0000"]
    assert msgs[0].sysflag & SysFlag.COMPRESSED
    expected = encode_message(
        Message(topic="orders", body=b"y"),
        queue_id=3,
        uniq_key=SETTINGS.id_prefix + "0000",
        born_host=SETTINGS.born_host,
        born_timestamp_ms=SETTINGS.born_timestamp_ms,
    )
    assert chunks[1][0] == expected
