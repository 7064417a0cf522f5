"""Offline reads of commit-log files: ``spark.read.format("pocketmq-store")``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyspark.errors import AnalysisException, PythonException
from storekit import open_store, record, small_config

from pocketmq.common.message import SysFlag
from pocketmq.spark import register


@pytest.fixture
def store_spark(spark):
    register(spark)
    return spark


def store_read(spark, data_dir, **options):
    reader = spark.read.format("pocketmq-store")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(data_dir))


def row_tuple(r):
    return (
        r.topic,
        r.broker,
        r.queue_id,
        r.queue_offset,
        r.body,
        tuple(r.keys),
        r.tags,
        tuple(sorted(r.properties.items())),
        r.store_timestamp,
        r.born_timestamp,
        r.msg_id,
    )


def test_store_files_of_a_live_broker_give_the_rows_of_an_online_read(store_spark, cluster, topic):
    spark = store_spark
    cluster.send(topic, 30)
    online = (
        spark.read.format("pocketmq")
        .option("namesrv", cluster.namesrv)
        .option("subscribe", topic)
        .load()
        .collect()
    )

    offline = []
    for broker in ("broker-a", "broker-b"):
        offline += store_read(
            spark, cluster.data_dir(broker), subscribe=topic, brokerName=broker
        ).collect()

    assert len(online) == 30
    assert sorted(map(row_tuple, offline)) == sorted(map(row_tuple, online))
    tagged = store_read(
        spark,
        cluster.data_dir("broker-a"),
        subscribePattern=f"{topic}|x",
        tagExpression="TagA",
        brokerName="broker-a",
    ).collect()
    assert sorted(map(row_tuple, tagged)) == sorted(
        row_tuple(r) for r in online if r.tags == "TagA" and r.broker == "broker-a"
    )
    assert {r.broker for r in store_read(spark, cluster.data_dir("broker-a")).collect()} == {
        None
    }  # a data directory does not know its name


def _small_store(path: Path) -> tuple[list[bytes], list[int], int]:
    """A stopped store of 64 KiB segments: 300 messages and a prepared transaction half;
    returns the bodies, their commit-log offsets and the number of segments."""
    store = open_store(small_config(path))
    bodies = [f"m{i:03d}".encode() + b"." * 500 for i in range(300)]
    offsets = []
    for i, body in enumerate(bodies):
        result = store.put_batch(record(body=body, queue_id=i % 3, uniq=f"U{i}"))
        assert result.ok
        offsets += result.phys_offsets
        if i == 150:
            half = record(body=b"half", sysflag=SysFlag.TRANSACTION_PREPARED)
            assert store.put_batch(half).ok
    segments = len(store.commitlog.queue.files)
    store.shutdown()
    return bodies, offsets, segments


def test_one_partition_per_segment_and_damage_is_reported_as_data_loss(store_spark, tmp_path):
    spark = store_spark
    bodies, offsets, segments = _small_store(tmp_path / "data")
    df = store_read(spark, tmp_path / "data")
    assert segments >= 3
    assert df.rdd.getNumPartitions() == segments
    rows = df.collect()
    assert sorted(r.body for r in rows) == sorted(bodies)  # the half is not a message yet
    assert {r.msg_id for r in rows} == {f"U{i}" for i in range(300)}

    first = tmp_path / "data" / "commitlog" / f"{0:020d}"
    with open(first, "r+b") as f:  # flip a byte in the body of record 3
        f.seek(offsets[3] + 200)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(
        PythonException,
        match=r"segment .*00000000000000000000: the record at "
        r"commit-log offset \d+ is damaged",
    ):
        store_read(spark, tmp_path / "data").collect()
    survivors = store_read(spark, tmp_path / "data", failOnDataLoss="false").collect()
    assert 0 < len(survivors) < 300
    assert {r.body for r in survivors} <= set(bodies)


def test_segments_split_into_parts_read_every_record_exactly_once(store_spark, tmp_path):
    spark = store_spark
    bodies, _offsets, segments = _small_store(tmp_path / "data")
    df = store_read(spark, tmp_path / "data", maxBytesPerPartition="10000")
    assert df.rdd.getNumPartitions() > 3 * segments  # 64 KiB segments, ~10 KB parts
    rows = df.collect()
    assert sorted(r.body for r in rows) == sorted(bodies)
    assert len({r.msg_id for r in rows}) == 300


def test_store_reader_errors_name_the_path_or_option(store_spark, tmp_path):
    spark = store_spark
    with pytest.raises(AnalysisException, match="is not a PocketMQ data directory"):
        store_read(spark, tmp_path).collect()
    with pytest.raises(AnalysisException, match="needs a data directory"):
        spark.read.format("pocketmq-store").load().collect()
    with pytest.raises(AnalysisException, match="did you mean 'subscribe'"):
        store_read(spark, tmp_path, subscrib="x").collect()


def test_a_segment_no_larger_than_a_part_is_planned_as_one_part_without_reading_it(tmp_path):
    # Planning walks a segment's records only to split it; one part needs no walk. A
    # directory where the segment file should be shows whether planning opened it.
    from pocketmq.broker.store import CommitLogSegment
    from pocketmq.spark.store_source import _record_starts

    path = tmp_path / f"{0:020d}"
    path.mkdir()
    segment = CommitLogSegment(path=str(path), file_from_offset=0, file_size=4096)
    assert _record_starts(segment, 4096) == [0]
    with pytest.raises(OSError):
        _record_starts(segment, 1024)
