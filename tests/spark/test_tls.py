"""The Spark source and sink, and ``pocketmq pipeline archive``, against a TLS cluster.

Options ``tlsCaFile`` (and ``tlsCertFile``/``tlsKeyFile`` for a broker that requires
client certificates); the command's ``--tls-ca``/``--tls-cert``/``--tls-key`` become
those options (issue 18, item 11).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from loopkit import LoopThread, single_broker
from pki import HAVE_OPENSSL, make_pki

from pocketmq.broker.config import BrokerConfig
from pocketmq.nameserver import NamesrvConfig
from pocketmq.spark.errors import OptionError
from pocketmq.spark.options import parse_sink_options, parse_source_options

pytestmark = pytest.mark.skipif(not HAVE_OPENSSL, reason="needs openssl")
POCKETMQ = str(Path(sys.executable).with_name("pocketmq"))  # .venv/bin/pocketmq
TOPIC = "sealed"


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    """A TLS nameserver and a broker that requires client certificates, on a loop thread
    of their own; yields (namesrv address, pki directory)."""
    root = tmp_path_factory.mktemp("spark-tls")
    pki = make_pki(root)
    loop = LoopThread("spark-tls")
    server_tls = {"tls_cert_file": str(pki / "server.pem"), "tls_key_file": str(pki / "server.key")}

    def broker_config(namesrv: str) -> BrokerConfig:
        return BrokerConfig(
            port=0,
            data_dir=str(root / "data"),
            namesrv_addrs=namesrv,
            namesrv_tls_ca_file=str(pki / "ca.pem"),
            tls_ca_file=str(pki / "ca.pem"),
            tls_require_client_auth=True,
            commitlog_file_size_bytes=16 * 1024 * 1024,
            index_slots=1000,
            index_entries=4000,
            **server_tls,
        )

    try:
        namesrv = NamesrvConfig(host="127.0.0.1", port=0, **server_tls)
        with single_broker(loop, namesrv, broker_config, TOPIC) as address:
            yield address, pki
    finally:
        loop.close()


def _tls_options(pki: Path) -> dict[str, str]:
    return {
        "tlsCaFile": str(pki / "ca.pem"),
        "tlsCertFile": str(pki / "client.pem"),
        "tlsKeyFile": str(pki / "client.key"),
    }


def test_the_sink_and_the_source_connect_with_tls_and_a_client_certificate(spark, tls_cluster):
    namesrv, pki = tls_cluster
    df = spark.createDataFrame([(f"tls-{i}",) for i in range(8)], "body string")
    writer = df.write.format("pocketmq").option("namesrv", namesrv).option("topic", TOPIC)
    writer.options(**_tls_options(pki)).mode("append").save()
    rows = (
        spark.read.format("pocketmq")
        .option("namesrv", namesrv)
        .option("subscribe", TOPIC)
        .options(**_tls_options(pki))
        .load()
        .collect()
    )
    assert sorted(r.body.decode() for r in rows) == sorted(f"tls-{i}" for i in range(8))


def test_pipeline_archive_passes_the_tls_flags_to_the_source(tls_cluster, tmp_path):
    namesrv, pki = tls_cluster
    out = tmp_path / "archive"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    result = subprocess.run(
        [
            POCKETMQ,
            "pipeline",
            "archive",
            "--topic",
            TOPIC,
            "--to",
            str(out),
            "--once",
            "--namesrv",
            namesrv,
            "--master",
            "local[1]",
            "--tls-ca",
            str(pki / "ca.pem"),
            "--tls-cert",
            str(pki / "client.pem"),
            "--tls-key",
            str(pki / "client.key"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert f"messages of {TOPIC}" in result.stdout
    assert any(p.name.startswith("date=") for p in out.iterdir())


def test_tls_options_are_parsed_and_half_a_pair_is_refused():
    source = parse_source_options(
        {"namesrv": "127.0.0.1:9876", "subscribe": "t", "tlsCaFile": "/ca.pem"}, streaming=False
    )
    assert source.pull.credentials is not None
    assert source.pull.credentials.tls_ca_file == "/ca.pem"
    sink = parse_sink_options(
        {"namesrv": "127.0.0.1:9876", "topic": "t", "accessKey": "a", "secretKey": "s"}
    )
    assert sink.credentials is not None and sink.credentials.access_key == "a"
    with pytest.raises(OptionError, match="tlsCertFile and tlsKeyFile go together"):
        parse_source_options(
            {
                "namesrv": "127.0.0.1:9876",
                "subscribe": "t",
                "tlsCaFile": "/ca.pem",
                "tlsCertFile": "/c.pem",
            },
            streaming=False,
        )
