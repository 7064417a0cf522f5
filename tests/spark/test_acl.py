"""The Spark source and sink against a broker with its ACL on: options accessKey/secretKey."""

from __future__ import annotations

import pytest
from loopkit import LoopThread, single_broker
from pyspark.errors import AnalysisException, PythonException

from pocketmq.broker.config import BrokerConfig
from pocketmq.nameserver import NamesrvConfig

ACL = """
[[accounts]]
access_key = "etl"
secret_key = "etl-secret"
default_topic_perm = "DENY"
default_group_perm = "SUB"
topic_perms = { audited = "PUB|SUB" }
"""
KEYS = {"accessKey": "etl", "secretKey": "etl-secret"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A nameserver and one ACL broker on a loop thread of their own; the namesrv address."""
    root = tmp_path_factory.mktemp("spark-acl")
    (root / "acl.toml").write_text(ACL)
    loop = LoopThread("spark-acl")

    def broker_config(namesrv: str) -> BrokerConfig:
        return BrokerConfig(
            port=0,
            data_dir=str(root / "data"),
            namesrv_addrs=namesrv,
            commitlog_file_size_bytes=16 * 1024 * 1024,
            index_slots=1000,
            index_entries=4000,
            acl_enable=True,
            acl_file=str(root / "acl.toml"),
        )

    try:
        namesrv = NamesrvConfig(host="127.0.0.1", port=0)
        with single_broker(loop, namesrv, broker_config, "audited") as address:
            yield address
    finally:
        loop.close()


def _read(spark, namesrv, **options):
    reader = spark.read.format("pocketmq").option("namesrv", namesrv).option("subscribe", "audited")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_the_sink_and_the_source_sign_with_the_given_keys(spark, secured):
    df = spark.createDataFrame([(f"row-{i}",) for i in range(12)], "body string")
    writer = df.write.format("pocketmq").option("namesrv", secured).option("topic", "audited")
    for key, value in KEYS.items():
        writer = writer.option(key, value)
    writer.mode("append").save()
    rows = _read(spark, secured, **KEYS).collect()
    assert sorted(r.body.decode() for r in rows) == sorted(f"row-{i}" for i in range(12))


def test_without_keys_the_broker_refuses_and_the_error_says_why(spark, secured):
    with pytest.raises((AnalysisException, PythonException), match="requires signed requests"):
        _read(spark, secured).collect()


def test_half_a_key_pair_is_an_option_error(spark, secured):
    with pytest.raises(
        (AnalysisException, PythonException), match="accessKey and secretKey go together"
    ):
        _read(spark, secured, accessKey="etl").collect()
