"""Batch reads from brokers: ``spark.read.format("pocketmq")``."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from pyspark.errors import AnalysisException


def read(spark, cluster, **options):
    reader = spark.read.format("pocketmq").option("namesrv", cluster.namesrv)
    for key, value in options.items():
        reader = reader.option(key, value if isinstance(value, str) else json.dumps(value))
    return reader.load()


def test_format_pocketmq_is_found_without_a_register_call(spark_fixture):
    assert spark_fixture.discovered


def test_batch_read_returns_every_message_sent_with_its_queue_and_offset(spark, cluster, topic):
    sent = cluster.send(topic, 40)

    rows = read(spark, cluster, subscribe=topic).collect()

    assert len(rows) == 40
    by_id = {row.msg_id: row for row in rows}
    for i, result in enumerate(sent):
        row = by_id[result.msg_id]
        assert row.topic == topic
        assert row.body == f"{topic}-{i}".encode()
        assert (row.broker, row.queue_id, row.queue_offset) == (
            result.queue.broker_name,
            result.queue.queue_id,
            result.queue_offset,
        )
        assert row.tags == ("TagA", "TagB")[i % 2]
        assert row.keys == [f"k{i}"]
        assert row.properties == {"seq": str(i)}
        assert row.born_timestamp <= row.store_timestamp
    offsets = defaultdict(list)
    for row in rows:
        offsets[(row.broker, row.queue_id)].append(row.queue_offset)
    assert len(offsets) == 8  # 2 brokers x 4 queues
    assert all(sorted(o) == list(range(len(o))) for o in offsets.values())


def test_batch_read_options_pick_queues_ranges_tags_and_times(spark, cluster, topic):
    sent = cluster.send(topic, 48)
    everything = read(spark, cluster, subscribe=topic).collect()
    q = sent[0].queue

    one_queue = read(
        spark,
        cluster,
        assign={topic: {q.broker_name: [q.queue_id]}},
        startingOffsets={topic: {q.broker_name: {str(q.queue_id): 1}}},
        endingOffsets={topic: {q.broker_name: {str(q.queue_id): 4}}},
    ).collect()
    assert sorted(r.queue_offset for r in one_queue) == [1, 2, 3]
    assert {(r.broker, r.queue_id) for r in one_queue} == {(q.broker_name, q.queue_id)}

    tagged = read(spark, cluster, subscribe=topic, tagExpression="TagB").collect()
    assert sorted(r.msg_id for r in tagged) == sorted(
        r.msg_id for r in everything if r.tags == "TagB"
    )

    filtered = read(spark, cluster, subscribe=topic, sqlFilter="seq >= 40 OR seq = 3").collect()
    assert sorted(int(r.properties["seq"]) for r in filtered) == [3, *range(40, 48)]

    cut = sorted(r.store_timestamp for r in everything)[30]
    cut_ms = int(cut.timestamp() * 1000)
    later = read(spark, cluster, subscribe=topic, startingTimestamp=str(cut_ms)).collect()
    assert sorted(r.msg_id for r in later) == sorted(
        r.msg_id for r in everything if int(r.store_timestamp.timestamp() * 1000) >= cut_ms
    )

    split = read(spark, cluster, subscribe=topic, minPartitions="20")
    assert split.rdd.getNumPartitions() >= 20
    assert split.count() == 48
    capped = read(spark, cluster, subscribe=topic, maxRecordsPerPartition="2")
    assert capped.rdd.getNumPartitions() == 24  # 8 queues of 6 messages, 3 parts each
    assert sorted(r.msg_id for r in capped.collect()) == sorted(r.msg_id for r in everything)


def error_of(spark, cluster, **options) -> str:
    with pytest.raises(AnalysisException) as info:
        read(spark, cluster, **options).collect()
    return str(info.value)


def test_bad_options_fail_with_errors_that_name_the_option(spark, cluster, topic):
    assert (
        "exactly one of the options subscribe, subscribePattern and assign; got none"
        in error_of(spark, cluster)
    )
    assert "got subscribe and assign" in error_of(
        spark, cluster, subscribe=topic, assign={topic: [0]}
    )
    assert "did you mean 'startingOffsets'" in error_of(
        spark, cluster, subscribe=topic, startingOffset="earliest"
    )
    assert "option startingOffsets is neither a keyword nor JSON" in error_of(
        spark, cluster, subscribe=topic, startingOffsets="{oops"
    )
    assert "option startingOffsets is 'latest', which a batch query cannot start from" in error_of(
        spark, cluster, subscribe=topic, startingOffsets="latest"
    )
    assert "option maxOffsetsPerTrigger is for streaming queries" in error_of(
        spark, cluster, subscribe=topic, maxOffsetsPerTrigger="10"
    )
    assert "option pullBatchSize is 0; it must be >= 1" in error_of(
        spark, cluster, subscribe=topic, pullBatchSize="0"
    )
    assert "option failOnDataLoss is 'maybe'; give true or false" in error_of(
        spark, cluster, subscribe=topic, failOnDataLoss="maybe"
    )
    assert "option tagExpression is '||', which names no tag" in error_of(
        spark, cluster, subscribe=topic, tagExpression="||"
    )
    assert "option sqlFilter 'seq >' does not parse: line 1, column 6" in error_of(
        spark, cluster, subscribe=topic, sqlFilter="seq >"
    )
    assert "give at most one of the options tagExpression and sqlFilter" in error_of(
        spark, cluster, subscribe=topic, sqlFilter="seq > 1", tagExpression="TagA"
    )
    assert "topic 'no-such-topic' does not exist" in error_of(
        spark, cluster, subscribe="no-such-topic"
    )
    assert "option assign names queue 9 of" in error_of(spark, cluster, assign={topic: [9]})
    assert "option endingOffsets names" in error_of(
        spark, cluster, subscribe=topic, endingOffsets={topic: {"broker-z": {"0": 1}}}
    )
    with pytest.raises(AnalysisException) as refused:
        spark.read.format("pocketmq").option("subscribe", topic).load("/x").collect()
    assert "format('pocketmq-store')" in str(refused.value)


def test_a_queue_longer_than_a_bulk_window_is_read_whole_and_in_order(spark, cluster, topic):
    # 1 queue per broker, 2,600 rows of 4,000-byte bodies (under the 4 KiB over which
    # bodies are compressed): about 1,300 a queue, more than one bulk window of 1,024,
    # and 1,024 of them are more than a PullBatch's 4 MiB, so windows come back short.
    from pyspark.sql import functions as F

    topic = f"{topic}-q1"
    cluster.create_topic(topic, queues=1)
    rows = 2_600
    body = F.concat(F.format_string("%06d", F.col("id")), F.expr("repeat('x', 3994)"))
    spark.range(0, rows, 1, 2).select(body.alias("body")).write.format("pocketmq").option(
        "namesrv", cluster.namesrv
    ).option("topic", topic).mode("append").save()

    read_back = read(spark, cluster, subscribe=topic).select("broker", "queue_offset", "body")
    got = read_back.collect()

    assert sorted(int(r.body[:6]) for r in got) == list(range(rows))
    assert all(r.body[6:] == b"x" * 3994 for r in got)
    by_queue = defaultdict(list)
    for r in got:
        by_queue[r.broker].append(r.queue_offset)
    assert len(by_queue) == 2
    assert all(offsets == list(range(len(offsets))) for offsets in by_queue.values())
    assert all(len(offsets) > 1_024 for offsets in by_queue.values())
