"""The compiled write path agrees with its pure-Python references, and both run the store.

Every function of ``_speedups`` is checked against the reference it replaces
(:mod:`pocketmq.broker.store.speedups` lists them): same results on valid
input, the same ``BatchError`` kind and message on forged and garbage blobs,
the same bytes written into a commit-log segment or an index file. The
compiled half is skipped, with the reason, where the extension is not built;
the store tests at the end run over whichever implementations are there.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storekit import open_store, record, small_config

from pocketmq.broker.store import GetStatus, PutStatus, speedups
from pocketmq.broker.store.batch import BatchError, py_queue_units, py_scan_batch
from pocketmq.broker.store.commitlog import py_patch_batch
from pocketmq.broker.store.consume_queue import CQ_UNIT
from pocketmq.broker.store.index_file import (
    HASH_SLOT,
    INDEX_ENTRY,
    INDEX_HEADER,
    IndexFile,
    py_insert_entries,
)
from pocketmq.broker.store.index_file_set import IndexFileSet, py_index_key_hashes
from pocketmq.common.clock import ManualClock
from pocketmq.common.hashing import java_string_hash
from pocketmq.common.message import (
    HEAD,
    MAX_PROPERTIES_LENGTH,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    POS_BORNHOST,
    POS_QUEUEID,
    POS_QUEUEOFFSET,
    POS_SYSFLAG,
    SysFlag,
    body_crc,
    pack_host,
)
from pocketmq.common.validation import MAX_TOPIC_LENGTH

try:
    native: Any = importlib.import_module("pocketmq.broker.store._speedups")
except ImportError as exc:  # no compiler where the package was installed
    native = None
    _NOT_BUILT = f"the compiled extension is not built ({exc})"
else:
    _NOT_BUILT = ""

needs_native = pytest.mark.skipif(native is None, reason=_NOT_BUILT)
MAX = 4 * 1024 * 1024
HOST4 = pack_host(("10.0.0.1", 1))
HOST6 = pack_host(("::1", 2))
T0 = 1_700_000_000_000
fuzz = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- building records, good and bad -------------------------------------------------------
def raw_record(
    topic: bytes,
    props: bytes,
    body: bytes = b"x",
    *,
    v2: bool = False,
    queue_id: int = 0,
    sysflag: int = 0,
    born: bytes = HOST4,
    store: bytes = HOST4,
) -> bytes:
    """A record laid out by hand, so that topic and properties may be anything."""
    sysflag |= SysFlag.BORNHOST_V6 if len(born) == 20 else 0
    sysflag |= SysFlag.STOREHOST_V6 if len(store) == 20 else 0
    topic_len = struct.pack(">H" if v2 else ">B", len(topic))
    fixed = POS_BORNHOST + len(born) + 8 + len(store) + 12
    total = fixed + 4 + len(body) + len(topic_len) + len(topic) + 2 + len(props)
    return b"".join(
        (
            HEAD.pack(
                total,
                MESSAGE_MAGIC_CODE_V2 if v2 else MESSAGE_MAGIC_CODE,
                body_crc(body),
                queue_id,
                0,
                0,
                0,
                sysflag,
                T0,
            ),
            born,
            bytes(8),
            store,
            bytes(12),
            struct.pack(">i", len(body)),
            body,
            topic_len,
            topic,
            struct.pack(">H", len(props)),
            props,
        )
    )


texts = st.text(max_size=12)  # any code point but lone surrogates, \x01 and \x02 included
topic_names = st.text(alphabet="abcXYZ0189%|_-", min_size=1, max_size=24)


@st.composite
def good_records(draw: st.DrawFn, store: bytes = HOST4) -> bytes:
    props: dict[str, str] = draw(st.dictionaries(texts, texts, max_size=3))
    for name in ("TAGS", "KEYS", "UNIQ_KEY"):
        if draw(st.booleans()):
            props[name] = (
                " ".join(draw(st.lists(texts, max_size=4))) if name == "KEYS" else draw(texts)
            )
    return raw_record(
        draw(topic_names).encode(),
        "".join(f"{k}\x01{v}\x02" for k, v in props.items()).encode(),
        draw(st.binary(max_size=40)),
        v2=draw(st.booleans()),
        queue_id=draw(st.integers(-3, 9)),
        sysflag=draw(st.sampled_from([0, 1, 2, 4, 8, 12])),
        born=draw(st.sampled_from([HOST4, HOST6])),
        store=store,
    )


@st.composite
def forged_records(draw: st.DrawFn) -> bytes:
    """Topics and properties of arbitrary bytes and lengths, wrong hosts, big bodies."""
    v2 = draw(st.booleans())
    topic = draw(
        st.one_of(
            st.binary(max_size=300 if v2 else 255),
            st.text(alphabet="ab%", min_size=120, max_size=140).map(str.encode),
        )
    )
    props = draw(
        st.one_of(
            st.binary(max_size=60),
            st.just(b"a\x01b\x02" * 9000),
            texts.map(lambda t: f"TAGS\x01{t}\x02KEYS\x01{t} x\x02".encode()),
        )
    )
    return raw_record(
        topic,
        props,
        draw(st.binary(max_size=40)),
        v2=v2,
        born=draw(st.sampled_from([HOST4, HOST6])),
        store=draw(st.sampled_from([HOST4, HOST4, HOST6])),
    )


@st.composite
def damaged(draw: st.DrawFn, blob: bytes) -> bytes:
    """*blob* cut, extended, or with a byte or a 4-byte field overwritten."""
    how = draw(st.sampled_from(["cut", "extend", "byte", "int"]))
    at = draw(st.integers(0, len(blob)))
    if how == "cut":
        return blob[:at]
    if how == "extend":
        return blob[:at] + draw(st.binary(min_size=1, max_size=60)) + blob[at:]
    if how == "byte":
        return blob[:at] + bytes([draw(st.integers(0, 255))]) + blob[at + 1 :]
    value = draw(st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(-2, 300)))
    return blob[:at] + struct.pack(">i", value) + blob[at + 4 :]


def outcome(scan: Callable[..., Any], blob: bytes, **kw: Any) -> tuple[Any, ...]:
    try:
        return ("ok", scan(blob, **kw))
    except BatchError as exc:
        return ("error", exc.kind, str(exc))


# -- the compiled functions agree with their references ---------------------------------
@needs_native
def test_the_layout_numbers_of_the_c_source_are_the_python_ones():
    expected = {
        "HEAD_SIZE": HEAD.size,
        "POS_QUEUEID": POS_QUEUEID,
        "POS_QUEUEOFFSET": POS_QUEUEOFFSET,
        "POS_SYSFLAG": POS_SYSFLAG,
        "POS_BORNHOST": POS_BORNHOST,
        "HOST_V4_SIZE": len(HOST4),
        "HOST_V6_SIZE": len(HOST6),
        "TAIL_AFTER_STOREHOST": struct.calcsize(">iq"),  # RECONSUMETIMES, PREPARED..OFFSET
        "MESSAGE_MAGIC_CODE": MESSAGE_MAGIC_CODE,
        "MESSAGE_MAGIC_CODE_V2": MESSAGE_MAGIC_CODE_V2,
        "SYSFLAG_BORNHOST_V6": SysFlag.BORNHOST_V6,
        "SYSFLAG_STOREHOST_V6": SysFlag.STOREHOST_V6,
        "SYSFLAG_TRANSACTION_MASK": SysFlag.TRANSACTION_MASK,
        "SYSFLAG_TRANSACTION_PREPARED": SysFlag.TRANSACTION_PREPARED,
        "SYSFLAG_TRANSACTION_ROLLBACK": SysFlag.TRANSACTION_ROLLBACK,
        "MAX_TOPIC_LENGTH": MAX_TOPIC_LENGTH,
        "MAX_PROPERTIES_LENGTH": MAX_PROPERTIES_LENGTH,
        "CQ_UNIT_SIZE": CQ_UNIT.size,
        "INDEX_HEADER_SIZE": INDEX_HEADER.size,
        "HASH_SLOT_SIZE": HASH_SLOT.size,
        "INDEX_ENTRY_SIZE": INDEX_ENTRY.size,
    }
    layout = native.LAYOUT
    assert layout == expected


@needs_native
@fuzz
@given(st.lists(good_records(), min_size=1, max_size=8), st.sampled_from([MAX, 20]), st.booleans())
def test_scan_of_valid_batches_matches_the_reference(records, max_body_size, allow_empty):
    blob = b"".join(records)
    kw = dict(max_body_size=max_body_size, allow_empty_body=allow_empty)
    expected = outcome(py_scan_batch, blob, **kw)
    assert outcome(native.scan_batch, blob, **kw) == expected
    if expected[0] == "ok":
        assert expected[1].blob is blob


@needs_native
@fuzz
@given(st.lists(good_records(store=HOST6), min_size=1, max_size=4))
def test_scan_with_an_ipv6_store_host_matches_the_reference(records):
    blob = b"".join(records)
    kw = dict(max_body_size=MAX, store_host_size=20)
    assert outcome(native.scan_batch, blob, **kw) == outcome(py_scan_batch, blob, **kw)


@needs_native
@fuzz
@given(st.data(), st.lists(st.one_of(good_records(), forged_records()), min_size=1, max_size=4))
def test_scan_of_forged_and_damaged_blobs_fails_like_the_reference(data, records):
    blob = data.draw(damaged(b"".join(records)))
    expected = outcome(py_scan_batch, blob, max_body_size=30)
    assert outcome(native.scan_batch, blob, max_body_size=30) == expected


@needs_native
def test_scan_of_more_records_than_its_lists_make_room_for_matches_the_reference():
    # scan_batch makes room for 4096 records at once; the lists grow past that as usual
    blob = b"".join(record(topic=f"T{i % 3}", queue_id=i % 5, uniq=f"u{i}") for i in range(5000))
    expected = outcome(py_scan_batch, blob, max_body_size=MAX)
    assert outcome(native.scan_batch, blob, max_body_size=MAX) == expected
    assert len(expected[1]) == 5000
    bad = blob + b"\x00" * 10  # 5000 good records, then a cut head: refused whole
    assert outcome(native.scan_batch, bad, max_body_size=MAX) == outcome(
        py_scan_batch, bad, max_body_size=MAX
    )


@needs_native
@fuzz
@given(st.binary(max_size=400))
def test_scan_of_garbage_fails_like_the_reference(garbage):
    expected = outcome(py_scan_batch, garbage, max_body_size=MAX)
    assert outcome(native.scan_batch, garbage, max_body_size=MAX) == expected


@needs_native
def test_scan_reads_bytearrays_and_memoryviews_and_names_its_bad_arguments():
    blob = record(tags="t", keys="a b")
    for view in (bytearray(blob), memoryview(blob)):
        assert native.scan_batch(view, max_body_size=MAX) == py_scan_batch(view, max_body_size=MAX)
    with pytest.raises(TypeError, match="max_body_size"):
        native.scan_batch(blob)
    with pytest.raises(ValueError, match="store_host_size"):
        native.scan_batch(blob, max_body_size=MAX, store_host_size=9)
    with pytest.raises(TypeError):
        native.scan_batch("not bytes", max_body_size=MAX)


@needs_native
@given(st.one_of(st.text(), st.text(alphabet=st.characters(min_codepoint=0x10000))))
def test_java_string_hash_matches_the_reference_outside_the_bmp_too(text):
    assert native.java_string_hash(text) == java_string_hash(text)


@needs_native
def test_java_string_hash_of_a_lone_surrogate_fails_like_the_reference():
    with pytest.raises(UnicodeEncodeError):
        java_string_hash("a\ud800")
    with pytest.raises(UnicodeEncodeError):
        native.java_string_hash("a\ud800")


@needs_native
@given(
    st.lists(
        st.tuples(
            st.one_of(topic_names, st.text(max_size=5)), st.lists(st.text(max_size=8), max_size=4)
        ),
        max_size=8,
    ),
    st.integers(-1, 9),
)
def test_index_key_hashes_match_the_reference(records, after_phys):
    topics = [t for t, _ in records]
    keys = [k for _, k in records]
    phys = list(range(len(records)))
    assert native.index_key_hashes(topics, keys, phys, after_phys) == py_index_key_hashes(
        topics, keys, phys, after_phys
    )


@needs_native
@fuzz
@given(
    st.data(),
    st.lists(good_records(), min_size=1, max_size=6),
    st.integers(0, 64),
    st.integers(0, 2**40),
)
def test_patch_writes_the_same_bytes_and_queue_offsets_as_the_reference(data, records, rel, base):
    blob = b"".join(records)
    batch = py_scan_batch(blob, max_body_size=MAX)
    table = {
        (t, q): data.draw(st.integers(0, 2**40))
        for t, q in zip(batch.topics, batch.queue_ids, strict=True)
        if data.draw(st.booleans())
    }
    results = []
    for patch in (py_patch_batch, native.patch_batch):
        buf = bytearray(rel) + bytearray(blob) + bytearray(7)
        mine = dict(table)
        returned = patch(buf, rel, base, batch, mine, T0 + 5, HOST4)
        results.append((bytes(buf), mine, returned))
    assert results[0] == results[1]


@needs_native
def test_patch_refuses_positions_outside_the_buffer():
    blob = record()
    batch = py_scan_batch(blob, max_body_size=MAX)
    with pytest.raises(ValueError, match="does not fit"):
        native.patch_batch(bytearray(60), 0, 0, batch, {}, T0, HOST4)  # STOREHOST ends at 72
    with pytest.raises(ValueError, match="outside"):
        native.patch_batch(bytearray(len(blob)), len(blob) + 1, 0, batch, {}, T0, HOST4)
    with pytest.raises(TypeError):
        native.patch_batch(bytes(len(blob)), 0, 0, batch, {}, T0, HOST4)  # read-only


@needs_native
@fuzz
@given(st.data(), st.lists(good_records(), min_size=1, max_size=10))
def test_queue_units_match_the_reference(data, records):
    batch = py_scan_batch(b"".join(records), max_body_size=MAX)
    n = len(batch)
    phys = sorted(data.draw(st.lists(st.integers(0, 2**50), min_size=n, max_size=n)))
    queue_offsets = data.draw(st.lists(st.integers(0, 2**40), min_size=n, max_size=n))
    assert native.queue_units(batch, phys, queue_offsets) == py_queue_units(
        batch, phys, queue_offsets
    )


@st.composite
def runs_of_queues(draw: st.DrawFn) -> bytes:
    """Records of a few topics and queues, so that neighbours often share a queue (the
    runs patch_batch and queue_units keep), or of more queues than they keep runs for
    (8); transaction records among them."""
    wide = draw(st.booleans())
    n = draw(st.integers(1, 40 if wide else 14))
    return b"".join(
        raw_record(
            draw(st.sampled_from([b"a", b"b", b"c"] if wide else [b"a", b"b"])),
            b"",
            queue_id=draw(st.sampled_from([0, 1, 2, 3, 4] if wide else [0, 0, 1])),
            sysflag=draw(
                st.sampled_from(
                    [0, 0, 0, SysFlag.TRANSACTION_PREPARED, SysFlag.TRANSACTION_ROLLBACK]
                )
            ),
        )
        for _ in range(n)
    )


@needs_native
@fuzz
@given(st.data(), runs_of_queues(), st.booleans())
def test_patch_and_queue_units_of_runs_of_one_queue_match_the_reference(data, blob, native_scan):
    # the native scan gives every record of a topic one str; the reference one str each
    scan = native.scan_batch if native_scan else py_scan_batch
    batch = scan(blob, max_body_size=MAX)
    table = {
        (t, q): data.draw(st.integers(0, 2**40))
        for t, q in zip(batch.topics, batch.queue_ids, strict=True)
        if data.draw(st.booleans())
    }
    results = []
    for patch, units in (
        (py_patch_batch, py_queue_units),
        (native.patch_batch, native.queue_units),
    ):
        buf = bytearray(blob)
        mine = dict(table)
        phys, queue_offsets = patch(buf, 0, 1000, batch, mine, T0, HOST4)
        results.append((bytes(buf), mine, phys, queue_offsets, units(batch, phys, queue_offsets)))
    assert results[0] == results[1]


class _Topic(str):
    pass


@needs_native
def test_patch_and_queue_units_refuse_a_topic_that_is_not_exactly_a_str_mid_run():
    blob = record(topic="T") + record(topic="T")
    batch = py_scan_batch(blob, max_body_size=MAX)
    batch.topics[1] = _Topic("T")  # equal to the run's topic, but its == could run Python
    with pytest.raises(TypeError, match="must be str and int"):
        native.patch_batch(bytearray(blob), 0, 0, batch, {}, T0, HOST4)
    with pytest.raises(TypeError, match="must be str and int"):
        native.queue_units(batch, [0, 100], [0, 1])


@needs_native
def test_a_patch_that_fails_keeps_the_queue_offsets_it_took_before():
    blob = record(topic="T") + record(topic="T")
    batch = py_scan_batch(blob, max_body_size=MAX)
    table = {("T", 0): 5}
    # the second record's STOREHOST (bytes 64..72 of it) would end past the buffer
    short = bytearray(blob[: batch.sizes[0] + 60])
    with pytest.raises(ValueError, match="does not fit"):
        native.patch_batch(short, 0, 0, batch, table, T0, HOST4)
    assert table == {("T", 0): 6}


@needs_native
@fuzz
@given(st.data(), st.integers(1, 9), st.integers(2, 40))
def test_insert_entries_writes_the_same_index_bytes_as_the_reference(data, slots, entries):
    size = IndexFile.size_for(slots, entries)
    entry_base = INDEX_HEADER.size + slots * HASH_SLOT.size
    count = data.draw(st.integers(1, entries - 1))
    todo = data.draw(st.integers(0, entries - count))
    first = data.draw(st.integers(0, 3))
    n = first + todo
    hashes = data.draw(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=n, max_size=n))
    phys = data.draw(st.lists(st.integers(0, 2**62), min_size=n, max_size=n))
    start = bytearray(data.draw(st.binary(min_size=size, max_size=size)))  # stale slots too
    time_diff_s = data.draw(st.integers(0, 2**31 - 1))
    results = []
    for insert in (py_insert_entries, native.insert_entries):
        mm = bytearray(start)
        added = insert(mm, slots, entry_base, count, hashes, phys, first, todo, time_diff_s)
        results.append((bytes(mm), added))
    assert results[0] == results[1]


@needs_native
def test_insert_entries_refuses_entries_past_the_file():
    size = IndexFile.size_for(4, 8)
    base = INDEX_HEADER.size + 4 * HASH_SLOT.size
    with pytest.raises(ValueError, match="do not fit"):
        native.insert_entries(bytearray(size), 4, base, 7, [1, 2], [0, 0], 0, 2, 0)
    with pytest.raises(ValueError, match="not all in the lists"):
        native.insert_entries(bytearray(size), 4, base, 1, [1], [0], 0, 2, 0)
    with pytest.raises(OverflowError):
        native.insert_entries(bytearray(size), 4, base, 1, [2**31], [0], 0, 1, 0)


# -- switching implementations ------------------------------------------------------------
@contextlib.contextmanager
def implementation(kind: str) -> Iterator[None]:
    """Bind every picked name, wherever a store module imported it, to *kind*'s function."""
    if kind == "c" and native is None:
        pytest.skip(_NOT_BUILT)
    swapped = []
    for (_module, name), (reference, _chosen) in speedups.picked().items():
        versions = {reference, getattr(native, name, reference)}
        want = reference if kind == "python" else getattr(native, name)
        for module_name, module in list(sys.modules.items()):
            if module_name.startswith("pocketmq.") and getattr(module, name, None) in versions:
                swapped.append((module, name, getattr(module, name)))
                setattr(module, name, want)
    try:
        yield
    finally:
        for module, name, before in reversed(swapped):
            setattr(module, name, before)


IMPLEMENTATIONS = ["python", "c"]


@needs_native
@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(["A", "B"]),
                st.lists(
                    st.text(alphabet="kx\u00e9\U0001f600", min_size=1, max_size=3), max_size=3
                ),
            ),
            min_size=1,
            max_size=6,
        ),
        min_size=1,
        max_size=8,
    )
)
def test_index_files_built_by_both_paths_are_byte_identical(tmp_path_factory, puts):
    images = []
    for kind in IMPLEMENTATIONS:
        directory = tmp_path_factory.mktemp(kind)
        service = IndexFileSet(str(directory), slots=5, entries=9, clock=ManualClock())
        service.load(clean_shutdown=True, checkpoint_timestamp_ms=0)
        with implementation(kind):
            phys = 0
            for n, batch in enumerate(puts):
                offsets = [phys + 100 * i for i in range(len(batch))]
                phys = offsets[-1] + 100
                service.put_many(
                    [t for t, _ in batch], [k for _, k in batch], offsets, T0 + n * 1500
                )
        service.close()
        images.append(
            {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory))}
        )
    assert images[0] == images[1]


# -- the store on either implementation ------------------------------------------------------
def _store_scenario(data_dir: str) -> list[Any]:
    """Puts of every kind, reads, key queries, a restart: what a client would see."""
    clock = ManualClock(T0)
    config = small_config(data_dir)
    store = open_store(config, clock=clock)
    seen: list[Any] = []
    blob = b"".join(
        record(
            "orders", bytes([i]) * 30, i % 3, tags=f"t{i % 2}", keys=f"k{i} shared", uniq=f"U{i}"
        )
        for i in range(12)
    )
    prepared = record("orders", b"half", 1, keys="tx", sysflag=SysFlag.TRANSACTION_PREPARED)
    for put in (blob, prepared, record("audit", b"single", 0, uniq="A1")):
        result = store.put_batch(put)
        clock.advance(1.5)
        seen.append((result.status, result.queue_offsets, result.phys_offsets, result.uniq_keys))
    bad = bytearray(record(body=b"payload"))
    bad[-12] ^= 0xFF
    seen.append(store.put_batch(bytes(bad)).status)
    for reopen in (False, True):
        if reopen:
            store.shutdown()
            store = open_store(config, clock=clock)
        for topic, queue_id in (("orders", 0), ("orders", 1), ("orders", 2), ("audit", 0)):
            got = store.get_messages(topic, queue_id, 0)
            seen.append((got.status, got.records, got.next_begin_offset))
        for key in ("shared", "k4", "U7", "A1", "tx"):
            seen.append(store.query_by_key("audit" if key == "A1" else "orders", key))
    store.shutdown()
    return seen


@pytest.mark.parametrize("kind", IMPLEMENTATIONS)
def test_store_round_trip_on_each_implementation(tmp_path, kind):
    with implementation(kind):
        seen = _store_scenario(str(tmp_path / "data"))
    assert [s[0] for s in seen[:3]] == [PutStatus.PUT_OK] * 3
    assert seen[0][1] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert seen[1][1] == [0]  # prepared: no queue offset consumed
    assert seen[3] is PutStatus.MESSAGE_ILLEGAL
    reads = seen[4:8]
    assert [(status, len(records)) for status, records, _next in reads] == [
        (GetStatus.FOUND, 4),
        (GetStatus.FOUND, 4),
        (GetStatus.FOUND, 4),
        (GetStatus.FOUND, 1),
    ]
    assert len(seen[8]) == 12 and len(seen[9]) == 1 and seen[12] == []  # "tx" never indexed
    assert seen[4:13] == seen[13:22]  # the same after a restart


@needs_native
def test_both_implementations_store_the_same_files(tmp_path):
    images = []
    for kind in IMPLEMENTATIONS:
        data_dir = tmp_path / kind
        with implementation(kind):
            seen = _store_scenario(str(data_dir))
        files = {}
        for part in ("commitlog", "consumequeue", "index"):
            for path in sorted((data_dir / part).rglob("*")):
                if path.is_file():
                    rel = path.relative_to(data_dir)
                    # index files are named by the wall clock; compare them in order
                    key = str(rel.parent if part == "index" else rel)
                    files.setdefault(key, []).append(path.read_bytes())
        images.append((seen, files))
    assert images[0] == images[1]


def test_no_speedups_in_the_environment_runs_the_pure_python_references():
    code = (
        "from pocketmq.broker.store import batch, commitlog, index_file, index_file_set, "
        "speedups\n"
        "print(speedups.IMPLEMENTATION, batch.scan_batch is batch.py_scan_batch,"
        " commitlog.patch_batch is commitlog.py_patch_batch,"
        " index_file.insert_entries is index_file.py_insert_entries,"
        " index_file_set.index_key_hashes is index_file_set.py_index_key_hashes)"
    )
    env = {**os.environ, speedups.DISABLE_ENV: "1"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.split() == ["python", "True", "True", "True", "True"]


@needs_native
def test_the_compiled_functions_run_when_built_and_not_disabled():
    if os.environ.get(speedups.DISABLE_ENV, "") not in ("", "0"):
        pytest.skip(f"{speedups.DISABLE_ENV} is set in this run")
    assert speedups.IMPLEMENTATION == "c"
    assert {name for _module, name in speedups.picked()} == {
        "scan_batch",
        "queue_units",
        "patch_batch",
        "index_key_hashes",
        "insert_entries",
        "gather_records",
    }
    for (_module, name), (_reference, chosen) in speedups.picked().items():
        assert chosen is getattr(native, name)
