"""PocketMQ on Apache Spark: a PySpark data source for topics and for store files.

Three formats, all pure Python (Spark's Python data source API, pyspark >= 4.2,
pyarrow; no JAR)::

    spark.read.format("pocketmq")          batch read from brokers (pipelined PullBatch)
    spark.readStream.format("pocketmq")    Structured Streaming read, offsets in the checkpoint
    df.write.format("pocketmq")            batch write (SendBatch), mode("append")
    df.writeStream.format("pocketmq")      streaming write
    spark.read.format("pocketmq-store")    .load(DATA_DIR): commit-log segment files, offline

``format("pocketmq")`` works without any call: Spark registers every
top-level module named ``pyspark_*`` that exposes ``DefaultSource``, and
PocketMQ installs ``pyspark_pocketmq``. Spark finds such modules by listing
``sys.path`` (``pkgutil.iter_modules``), which sees a regular install but not
an editable one (``pip install -e``, whose modules are found by an import hook):
there, call :func:`register` (or put the folder of ``pyspark_pocketmq.py`` on
``PYTHONPATH``). ``pocketmq-store`` always needs :func:`register`: Spark
discovers one format per module, and the store reader is a tool for scripts
rather than a format to leave lying in every session::

    from pocketmq.spark import register
    register(spark)

Columns, named as RocketMQ names them, with the Kafka source's counterparts
(the schema, fixed, is in :mod:`.schema`)::

    pocketmq          type                 Kafka source
    ----------------  -------------------  -----------------------------------
    topic             STRING               topic
    broker            STRING               (none: a queue is broker + queue id)
    queue_id          INT                  partition
    queue_offset      BIGINT               offset
    body              BINARY               value
    keys              ARRAY<STRING>        key
    tags              STRING               (none)
    properties        MAP<STRING,STRING>   headers (includeHeaders)
    store_timestamp   TIMESTAMP            timestamp (LogAppendTime)
    born_timestamp    TIMESTAMP            timestamp (CreateTime)
    msg_id            STRING               (none)

Source options, named and behaving as the Kafka source's (:mod:`.options`)::

    pocketmq                 Kafka source               meaning
    -----------------------  -------------------------  ---------------------------------
    namesrv                  kafka.bootstrap.servers    "h1:9876;h2:9876"; default
                                                        $POCKETMQ_NAMESRV, 127.0.0.1:9876
    subscribe                subscribe                  topics, comma-separated
    subscribePattern         subscribePattern           regex over the nameserver's topics
                                                        (Python re, full match)
    assign                   assign                     {"t": [0, 1]} or
                                                        {"t": {"broker-a": [0, 1]}}
    startingOffsets          startingOffsets            earliest | latest | JSON
                                                        {"t": {"broker-a": {"0": 23}}}
                                                        (-2 earliest, -1 latest); default
                                                        latest (streaming), earliest
                                                        (batch); a restarted query ignores
                                                        it and resumes from its checkpoint
    endingOffsets            endingOffsets              latest | JSON; batch only
    startingTimestamp        startingTimestamp          ms; each queue from its first
                                                        message stored at or after it
    maxOffsetsPerTrigger     maxOffsetsPerTrigger       cap of a micro-batch, split over
                                                        queues by backlog
    failOnDataLoss           failOnDataLoss             true: fail when offsets are gone
    minPartitions            minPartitions              split ranges to reach this many tasks
    maxRecordsPerPartition   maxRecordsPerPartition     split longer ranges (default 1000000)
    tagExpression            (none)                     "TagA || TagB", filtered at the
                                                        broker on tag codes
    sqlFilter                (none)                     SQL92 filter on message properties
                                                        ("region = 'eu' AND amount > 100"),
                                                        applied by the brokers; not with
                                                        tagExpression
    pullBatchSize            (fetch sizes)              messages asked per queue and pull
                                                        (1024; the broker caps it at its
                                                        max_pull_messages/max_pull_bytes)
    pullTimeoutMs            kafkaConsumer.pollTimeoutMs  deadline of one pull (30000)
    consumerGroup            groupIdPrefix              group named in pulls (no offsets
                                                        are committed)
    accessKey, secretKey     kafka.sasl.*               ACL keys: every call signed
    tlsCaFile                kafka.ssl.truststore.*     PEM CA of the servers; set = TLS
    tlsCertFile, tlsKeyFile  kafka.ssl.keystore.*       PEM client certificate and key,
                                                        for brokers that require one (the
                                                        files must exist on every executor)

Sink options: ``namesrv``, ``topic`` (wins over a ``topic`` column, as
Kafka's), ``producerGroup``, ``sendBatchSize`` (messages per SendBatch, 1024),
``sendTimeoutMs``, the source's ``accessKey``/``secretKey`` and ``tls*`` options,
``idempotent`` (true: each row stored once, see :mod:`.sink`),
``writeId`` (a batch write's stable name, so a re-run job stores nothing twice),
``failFirstAttemptAfterRows`` (fault injection for tests); its columns are drawn
in :mod:`.sink`. Store-reader
options are in :mod:`.store_source` (``maxBytesPerPartition``: 128 MiB of a
segment per task). Unknown options are refused with the nearest known name.
Errors are drawn in :mod:`.errors`.

No Python object per row: both readers decode records straight into Arrow
buffers and the sink encodes Arrow columns straight into records, in
``_arrowcodec.c`` (an optional extension; :mod:`.arrowcodec` picks it or its
pure-Python references, which give the same results). A broker read pulls
windows of each queue in pipelined ``PullBatch`` calls (:mod:`.pull`); the sink
keeps several ``SendBatch`` calls in flight (:mod:`.sender`).

Triggers: ``trigger(availableNow=True)`` reads what the queues hold when the
query starts (in several batches under ``maxOffsetsPerTrigger``) and stops;
``trigger(processingTime=...)`` reads on. ``pocketmq pipeline archive``
(``pocketmq.cli.pipeline_cmd``) is the shipped pipeline built on these.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["QUIET_CONF", "register", "session"]

#: Settings for a small local session: no UI, few shuffle partitions, a quick JVM start.
QUIET_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}


def register(spark: SparkSession) -> None:
    """Register ``pocketmq`` and ``pocketmq-store`` with *spark* (idempotent)."""
    from pocketmq.spark.source import PocketMQDataSource
    from pocketmq.spark.store_source import PocketMQStoreDataSource

    spark.dataSource.register(PocketMQDataSource)
    spark.dataSource.register(PocketMQStoreDataSource)


def session(
    app_name: str = "pocketmq",
    *,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    log_level: str = "WARN",
) -> SparkSession:
    """A SparkSession with both formats registered (the existing one, if any).

    Spark's Python workers run ``$PYSPARK_PYTHON``, else the first ``python3``
    on PATH, which need not have pyarrow or PocketMQ; this sets it to the
    running interpreter unless it is set already.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    for key, value in {**QUIET_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    register(spark)
    return spark
