"""Structured Streaming reads: ``spark.readStream.format("pocketmq")``."""

from __future__ import annotations

import json

import pytest
from pyspark.errors import StreamingQueryException
from waitkit import eventually_sync


def stream(spark, cluster, **options):
    reader = spark.readStream.format("pocketmq").option("namesrv", cluster.namesrv)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def archive(spark, cluster, out, checkpoint, **options):
    """Run an availableNow query from the source into Parquet; return its progress list."""
    query = (
        stream(spark, cluster, **options)
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "the availableNow query did not finish in 120 s"
    assert query.exception() is None
    return [p for p in query.recentProgress if p["numInputRows"] > 0]


def test_available_now_into_parquet_then_rerun_reads_only_new_messages(
    spark, cluster, topic, tmp_path
):
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    first = {r.msg_id for r in cluster.send(topic, 20)}

    archive(spark, cluster, out, checkpoint, subscribe=topic, startingOffsets="earliest")
    assert sorted(r.msg_id for r in spark.read.parquet(str(out)).collect()) == sorted(first)

    second = {r.msg_id for r in cluster.send(topic, 12, start=20)}
    batches = archive(
        spark, cluster, out, checkpoint, subscribe=topic, startingOffsets="earliest"
    )  # ignored: the checkpoint wins
    assert sum(p["numInputRows"] for p in batches) == 12
    ids = [r.msg_id for r in spark.read.parquet(str(out)).collect()]
    assert len(ids) == len(set(ids)) == 32
    assert set(ids) == first | second

    assert archive(spark, cluster, out, checkpoint, subscribe=topic) == []  # nothing new
    # The checkpoint holds the next offset of every queue, per topic and broker.
    last = max(
        (p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()),
        key=lambda p: int(p.name),
    )
    offsets = json.loads(last.read_text().splitlines()[-1])
    assert set(offsets[topic]) == {"broker-a", "broker-b"}
    assert sum(o for broker in offsets[topic].values() for o in broker.values()) == 32


def test_max_offsets_per_trigger_reads_the_backlog_in_several_batches(
    spark, cluster, topic, tmp_path
):
    sent = {r.msg_id for r in cluster.send(topic, 30)}

    batches = archive(
        spark,
        cluster,
        tmp_path / "out",
        tmp_path / "cp",
        subscribe=topic,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="8",
    )

    assert len(batches) >= 4
    assert all(p["numInputRows"] <= 8 for p in batches)
    ids = [r.msg_id for r in spark.read.parquet(str(tmp_path / "out")).collect()]
    assert sorted(ids) == sorted(sent)


def test_topics_matching_the_pattern_later_are_read_from_their_start(
    spark, cluster, topic, tmp_path
):
    base = f"{topic}-pat"
    cluster.create_topic(f"{base}-a")
    sent = {r.msg_id for r in cluster.send(f"{base}-a", 5)}
    options = dict(subscribePattern=f"{base}-.*", startingOffsets="earliest")
    archive(spark, cluster, tmp_path / "out", tmp_path / "cp", **options)

    cluster.create_topic(f"{base}-b")
    sent |= {r.msg_id for r in cluster.send(f"{base}-b", 7)}
    sent |= {r.msg_id for r in cluster.send(f"{base}-a", 3, start=5)}
    archive(spark, cluster, tmp_path / "out", tmp_path / "cp", **options)

    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted(r.msg_id for r in rows) == sorted(sent)
    assert {r.topic for r in rows} == {f"{base}-a", f"{base}-b"}


def test_processing_time_trigger_delivers_messages_sent_while_the_query_runs(
    spark, cluster, topic, tmp_path
):
    name = f"live_{topic.replace('-', '_')}"
    cluster.send(topic, 4)  # before the query: startingOffsets=latest skips
    query = (
        stream(spark, cluster, subscribe=topic, tagExpression="TagA")
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:

        def started() -> bool:
            assert query.isActive, query.exception()
            return query.lastProgress is not None  # the start offsets are fixed by now

        eventually_sync(started, timeout_s=60, what="the query's first progress")
        sent = cluster.send(topic, 10, start=4)
        wanted = sorted(r.msg_id for i, r in enumerate(sent) if i % 2 == 0)  # TagA

        def all_tag_a_arrived() -> bool:
            got = sorted(r.msg_id for r in spark.sql(f"select msg_id from {name}").collect())
            assert query.isActive, (got, query.exception())
            return got == wanted

        eventually_sync(all_tag_a_arrived, timeout_s=60, interval_s=0.1, what="the TagA rows")
    finally:
        query.stop()


def test_streaming_options_are_checked_when_the_query_starts(spark, cluster, topic, tmp_path):
    with pytest.raises(StreamingQueryException, match="option endingOffsets is for batch queries"):
        (
            stream(spark, cluster, subscribe=topic, endingOffsets="latest")
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path))
            .trigger(availableNow=True)
            .start()
            .awaitTermination(60)
        )
