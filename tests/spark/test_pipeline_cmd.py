"""``pocketmq pipeline archive``: a topic into Parquet partitioned by date, exactly once."""

from __future__ import annotations

import datetime

from pocketmq.cli import main


def test_archive_once_writes_each_message_once_into_date_partitions(
    spark, cluster, topic, tmp_path, capsys
):
    out = tmp_path / "archive"
    argv = [
        "pipeline",
        "archive",
        "--topic",
        topic,
        "--to",
        str(out),
        "--once",
        "--namesrv",
        cluster.namesrv,
        "--max-offsets-per-trigger",
        "16",
    ]
    first = {r.msg_id for r in cluster.send(topic, 24)}

    assert main(argv) == 0
    assert f"archived 24 messages of {topic}" in capsys.readouterr().out

    later = {r.msg_id for r in cluster.send(topic, 9, start=24)}
    assert main(argv) == 0
    assert f"archived 9 messages of {topic}" in capsys.readouterr().out

    rows = spark.read.parquet(str(out)).collect()
    assert sorted(r.msg_id for r in rows) == sorted(first | later)
    days = {r.store_timestamp.astimezone(datetime.UTC).date() for r in rows}
    assert {r.date for r in rows} == days
    assert {p.name for p in out.iterdir() if p.name.startswith("date=")} == {
        f"date={d.isoformat()}" for d in days
    }
    assert (out / "_checkpoint" / "offsets").is_dir()


def test_archive_refuses_a_max_offsets_per_trigger_below_one(capsys):
    assert (
        main(
            [
                "pipeline",
                "archive",
                "--topic",
                "t",
                "--to",
                "/tmp/x",
                "--once",
                "--max-offsets-per-trigger",
                "0",
            ]
        )
        == 2
    )
    assert "--max-offsets-per-trigger must be >= 1" in capsys.readouterr().err


def test_archive_takes_an_interval_in_seconds_and_stops_cleanly_on_ctrl_c(cluster, topic, tmp_path):
    """As typed: `--interval 2` (seconds) runs, and Ctrl-C ends it between batches with
    exit 0 and no traceback."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from waitkit import eventually_sync

    cluster.send(topic, 5)
    out = tmp_path / "archive"
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("pocketmq")),
            "--log-level",
            "ERROR",
            "pipeline",
            "archive",
            "--topic",
            topic,
            "--to",
            str(out),
            "--interval",
            "2",
            "--namesrv",
            cluster.namesrv,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    try:

        def archived() -> bool:  # the first batch is committed
            assert proc.poll() is None, proc.communicate()[1].decode()[-3000:]
            return bool(list(out.glob("date=*/*.parquet")))

        eventually_sync(archived, timeout_s=240, interval_s=0.2, what="a batch archived")
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr.decode()[-3000:]
    assert b"Traceback" not in stderr, stderr.decode()[-3000:]
    assert f"messages of {topic}".encode() in stdout  # the summary line
    assert b"the next run resumes from the checkpoint" in stderr
