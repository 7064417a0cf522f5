"""Trace records are ordinary messages: the Spark source reads a trace topic, and Spark
SQL takes the JSON lines apart for analysis."""

from __future__ import annotations

from pocketmq.client import Message
from pocketmq.client.sync import SyncProducer


def test_a_trace_topic_is_readable_through_the_spark_source(spark, cluster, topic):
    from pyspark.sql import functions as F

    trace_topic = f"{topic}-trace"[:120]
    cluster.create_topic(trace_topic, queues=1)
    producer = SyncProducer(
        group="spark-traced", namesrv=cluster.namesrv, enable_trace=True, trace_topic=trace_topic
    )
    try:
        sent = [
            producer.send(Message(topic=topic, body=b"t%d" % i, keys=[f"k{i}"])) for i in range(12)
        ]
    finally:
        producer.shutdown()  # flushes the trace records

    rows = (
        spark.read.format("pocketmq")
        .option("namesrv", cluster.namesrv)
        .option("subscribe", trace_topic)
        .load()
        .select(F.explode(F.split(F.col("body").cast("string"), "\n")).alias("line"))
        .select(
            F.get_json_object("line", "$.type").alias("type"),
            F.get_json_object("line", "$.msg_id").alias("msg_id"),
            F.get_json_object("line", "$.status").alias("status"),
            F.get_json_object("line", "$.queue_offset").cast("long").alias("offset"),
        )
        .where(F.col("type") == "Pub")
        .collect()
    )

    by_id = {row.msg_id: row for row in rows}
    assert sorted(by_id) == sorted(r.msg_id for r in sent)
    assert all(
        by_id[r.msg_id].status == "SEND_OK" and by_id[r.msg_id].offset == r.queue_offset
        for r in sent
    )
