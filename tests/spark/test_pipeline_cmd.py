"""``pocketmq pipeline archive``: a topic into Parquet partitioned by date, exactly once."""

from __future__ import annotations

import datetime

from pocketmq.cli import main


def test_archive_once_writes_each_message_once_into_date_partitions(spark, cluster, topic,
                                                                    tmp_path, capsys):
    out = tmp_path / "archive"
    argv = ["pipeline", "archive", "--topic", topic, "--to", str(out), "--once",
            "--namesrv", cluster.namesrv, "--max-offsets-per-trigger", "16"]
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
        f"date={d.isoformat()}" for d in days}
    assert (out / "_checkpoint" / "offsets").is_dir()


def test_archive_refuses_a_max_offsets_per_trigger_below_one(capsys):
    assert main(["pipeline", "archive", "--topic", "t", "--to", "/tmp/x", "--once",
                 "--max-offsets-per-trigger", "0"]) == 2
    assert "--max-offsets-per-trigger must be >= 1" in capsys.readouterr().err
