"""Writes to topics: ``df.write`` / ``df.writeStream`` ``.format("pocketmq")``."""

from __future__ import annotations

import pytest
from pyspark.errors import AnalysisException, PythonException


def read(spark, cluster, topic):
    return (
        spark.read.format("pocketmq")
        .option("namesrv", cluster.namesrv)
        .option("subscribe", topic)
        .load()
    )


def write(df, cluster, **options):
    writer = df.write.format("pocketmq").option("namesrv", cluster.namesrv).mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def test_written_rows_read_back_with_their_tags_keys_and_properties(spark, cluster, topic):
    rows = [
        (f"body-{i}", "TagX" if i % 2 else "TagY", [f"key{i}", "shared"], {"n": str(i)})
        for i in range(30)
    ]
    df = spark.createDataFrame(
        rows, "body string, tags string, keys array<string>, properties map<string,string>"
    ).repartition(3)

    write(df, cluster, topic=topic, sendBatchSize="4")

    back = read(spark, cluster, topic).collect()
    assert sorted((r.body.decode(), r.tags, r.keys, r.properties) for r in back) == sorted(rows)
    assert len({(r.broker, r.queue_id) for r in back}) > 1  # spread over the queues
    assert all(r.msg_id for r in back)


def test_rows_naming_a_topic_and_queue_go_to_that_queue(spark, cluster, topic):
    other = f"{topic}-2"
    cluster.create_topic(other)
    rows = [
        (t, bytearray(f"v{i}".encode()), 2, "broker-b", f"k{i}")
        for i, t in enumerate([topic, other] * 5)
    ]
    df = spark.createDataFrame(
        rows, "topic string, value binary, queue_id int, broker string, keys string"
    )

    write(df, cluster)

    for name in (topic, other):
        back = read(spark, cluster, name).collect()
        assert sorted(r.body for r in back) == sorted(bytes(v) for t, v, *_ in rows if t == name)
        assert {(r.broker, r.queue_id) for r in back} == {("broker-b", 2)}
        assert sorted(r.queue_offset for r in back) == [0, 1, 2, 3, 4]


def test_a_stream_copies_one_topic_into_another_queue_for_queue(spark, cluster, topic, tmp_path):
    target = f"{topic}-copy"
    cluster.create_topic(target)
    cluster.send(topic, 25)
    source = (
        spark.readStream.format("pocketmq")
        .option("namesrv", cluster.namesrv)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    query = (
        source.writeStream.format("pocketmq")
        .option("namesrv", cluster.namesrv)
        .option("topic", target)
        .option("checkpointLocation", str(tmp_path))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None

    def placed(name):
        return sorted(
            (r.body, r.tags, r.keys, r.properties["seq"], r.broker, r.queue_id, r.queue_offset)
            for r in read(spark, cluster, name).collect()
        )

    assert placed(target) == placed(topic)


def error_of(spark, cluster, df, mode="append", **options) -> str:
    writer = df.write.format("pocketmq").option("namesrv", cluster.namesrv).mode(mode)
    for key, value in options.items():
        writer = writer.option(key, value)
    with pytest.raises((AnalysisException, PythonException)) as info:
        writer.save()
    return str(info.value)


def test_a_missing_or_mistyped_column_is_named_in_the_error(spark, cluster, topic):
    def df(schema, row):
        return spark.createDataFrame([row], schema)

    assert "needs a column 'body' (or 'value')" in error_of(
        spark, cluster, df("payload string", ("x",)), topic=topic
    )
    assert "column 'body' is int; the pocketmq sink needs binary or string" in error_of(
        spark, cluster, df("body int", (1,)), topic=topic
    )
    assert "no topic to send to: add a string column 'topic' or set the option topic" in error_of(
        spark, cluster, df("body string", ("x",))
    )
    assert "column 'keys' is int" in error_of(
        spark, cluster, df("body string, keys int", ("x", 1)), topic=topic
    )
    assert "mode('overwrite') cannot replace the messages of a topic" in error_of(
        spark, cluster, df("body string", ("x",)), mode="overwrite", topic=topic
    )
    assert "did you mean 'topic'" in error_of(
        spark, cluster, df("body string", ("x",)), topik=topic
    )
    assert "queue_id 1 of topic" in error_of(
        spark, cluster, df("body string, queue_id int", ("x", 1)), topic=topic
    )


def test_a_round_trip_through_a_topic_keeps_every_column(spark, cluster, topic):
    """Arrow in, SendBatch blobs, PullBatch replies, Arrow out: every column compared, and
    the same rows again from the brokers' store files."""
    from pocketmq.spark import register

    register(spark)
    rows = [
        (
            bytearray(b"\x00\xffbin%d" % i + (b"z" * 6000 if i % 7 == 0 else b"")),
            None if i % 3 == 0 else f"Tag{i % 2}-ü",
            [] if i % 5 == 0 else [f"k{i}", "日本"],
            {} if i % 4 == 0 else {"n": str(i), "ключ": "значение 🚀"},
            i % 4,
            "broker-a" if i % 2 else "broker-b",
        )
        for i in range(40)
    ]
    df = spark.createDataFrame(
        rows,
        "body binary, tags string, keys array<string>, "
        "properties map<string,string>, queue_id int, "
        "broker string",
    )
    write(df, cluster, topic=topic, sendBatchSize="3")

    back = read(spark, cluster, topic).collect()
    assert len(back) == 40
    sent = {bytes(r[0]): r for r in rows}
    per_queue: dict[tuple[str, int], list[int]] = {}
    for r in back:
        _body, tags, keys, props, queue_id, broker = sent[r.body]
        assert (r.topic, r.broker, r.queue_id) == (topic, broker, queue_id)
        assert (r.tags, r.keys, r.properties) == (tags, keys, props)
        assert r.msg_id and len(r.msg_id) == 32
        assert r.born_timestamp <= r.store_timestamp
        per_queue.setdefault((r.broker, r.queue_id), []).append(r.queue_offset)
    assert all(sorted(o) == list(range(len(o))) for o in per_queue.values())

    offline = []
    for name in ("broker-a", "broker-b"):
        offline += (
            spark.read.format("pocketmq-store")
            .option("subscribe", topic)
            .option("brokerName", name)
            .load(cluster.data_dir(name))
            .collect()
        )
    assert sorted(map(tuple, offline)) == sorted(map(tuple, back))


def stored_bodies(spark, cluster, topic) -> list[bytes]:
    return sorted(r.body for r in read(spark, cluster, topic).collect())


@pytest.mark.parametrize("idempotent", ["true", "false"])
def test_a_task_retried_after_writing_part_of_its_rows_stores_each_row_once(
    spark, cluster, topic, idempotent
):
    """Each task's first attempt fails after handing on its first Arrow batch (some of its
    SendBatch calls answered, others cut off); Spark retries it (local[2,2]). Exactly once
    by default; the at-least-once sink (idempotent=false) stores the retried rows twice."""
    rows = [(f"row-{i:04d}",) for i in range(600)]
    df = spark.createDataFrame(rows, "body string").repartition(2)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        write(
            df,
            cluster,
            topic=topic,
            sendBatchSize="10",
            failFirstAttemptAfterRows="200",
            idempotent=idempotent,
        )
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    stored = stored_bodies(spark, cluster, topic)
    expected = sorted(r[0].encode() for r in rows)
    if idempotent == "true":
        assert stored == expected
    else:
        assert sorted(set(stored)) == expected and len(stored) > len(expected)
