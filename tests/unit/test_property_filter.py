"""The broker's SQL92 filter plumbing without a network: the compiler's refusals and
cache, reads of a real store that skip what does not match, and the client's heartbeat
fingerprint, unchanged for tag subscriptions."""

from __future__ import annotations

import pytest
from storekit import open_store, small_config

from pocketmq.broker.errors import FailedPreconditionError, IllegalArgumentError
from pocketmq.broker.property_filter import FilterCompiler, read_filtered, record_properties
from pocketmq.broker.store.results import GetStatus
from pocketmq.client.heartbeat import consumer_fingerprint
from pocketmq.client.remoting import ConsumerInfo
from pocketmq.common.filter import MessageSelector
from pocketmq.common.message import encode_record, pack_host


def test_the_compiler_answers_none_for_tags_and_caches_sql():
    filters = FilterCompiler()
    assert filters.compile("", "TagA || TagB") is None
    assert filters.compile("TAG", "*") is None
    first = filters.compile("SQL92", "a > 1")
    assert first is not None and filters.compile("sql92", "a > 1") is first


def test_the_compiler_refuses_bad_expressions_unknown_types_and_sql_when_switched_off():
    with pytest.raises(IllegalArgumentError, match="line 1, column 4") as err:
        FilterCompiler().compile("SQL92", "a >")
    assert err.value.reason == "SUBSCRIPTION_PARSE_FAILED"
    with pytest.raises(IllegalArgumentError, match="'XPATH' is unknown"):
        FilterCompiler().compile("XPATH", "a")
    with pytest.raises(FailedPreconditionError, match="enable_property_filter"):
        FilterCompiler(enable_property_filter=False).compile("SQL92", "a > 1")
    assert FilterCompiler(enable_property_filter=False).compile("TAG", "*") is None


def rec(n: int) -> bytes:
    return encode_record(
        topic="orders",
        body=b"m%d" % n,
        properties={"n": str(n)},
        born_timestamp_ms=1,
        born_host=pack_host(("127.0.0.1", 1)),
        store_host=pack_host(("127.0.0.1", 0)),
    )


def test_a_filtered_read_skips_non_matches_and_stops_at_its_scan_bound(tmp_path):
    store = open_store(small_config(tmp_path))
    try:
        for n in range(2000):
            assert store.put_batch(rec(n)).ok
        sql = FilterCompiler().compile("SQL92", "n = 5 OR n = 1999")
        assert sql is not None
        first = read_filtered(
            store, "orders", 0, 0, max_count=32, max_bytes=1 << 20, tag_codes=None, sql=sql
        )
        assert (first.status, first.queue_offsets, first.next_begin_offset) == (
            GetStatus.FOUND,
            [5],
            800,
        )  # 800 examined, at most
        second = read_filtered(
            store, "orders", 0, 800, max_count=32, max_bytes=1 << 20, tag_codes=None, sql=sql
        )
        assert (second.status, second.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, 1600)
        last = read_filtered(
            store, "orders", 0, 1600, max_count=32, max_bytes=1 << 20, tag_codes=None, sql=sql
        )
        assert (last.queue_offsets, last.next_begin_offset) == ([1999], 2000)
        end = read_filtered(
            store, "orders", 0, 2000, max_count=32, max_bytes=1 << 20, tag_codes=None, sql=sql
        )
        assert end.status is GetStatus.OFFSET_OVERFLOW_ONE
    finally:
        store.shutdown()


def test_record_properties_reads_a_stored_record_and_none_for_damage():
    assert record_properties(rec(7)) == {"n": "7"}
    assert record_properties(b"\0" * 30) is None


def test_a_tag_subscription_keeps_the_fingerprint_it_had_before_selectors():
    plain = ConsumerInfo(group="g", subscriptions={"t": "A || B"})
    selector = ConsumerInfo(group="g", subscriptions={"t": MessageSelector.by_tag("A || B")})
    sql = ConsumerInfo(group="g", subscriptions={"t": MessageSelector.by_sql("A = 'B'")})
    assert consumer_fingerprint(plain) == consumer_fingerprint(selector)
    assert consumer_fingerprint(sql) != consumer_fingerprint(plain)
