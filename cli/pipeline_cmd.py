"""``pocketmq pipeline archive``: a topic into Parquet, partitioned by date, exactly once.

::

    pocketmq pipeline archive --topic orders --to /data/archive/orders \\
        [--checkpoint DIR] [--once] [--namesrv HOST:PORT]

A Structured Streaming query on Apache Spark (``pocketmq.spark``): the
``pocketmq`` source reads the topic's queues on every broker, and Spark's
file sink writes Parquet files under ``PATH/date=YYYY-MM-DD/`` (the UTC day of
each message's ``store_timestamp``), with the source's columns::

    topic broker queue_id queue_offset body keys tags properties
    store_timestamp born_timestamp msg_id | date (partition)

Exactly once: the checkpoint (default ``PATH/_checkpoint``; Spark skips
folders starting with ``_`` when it reads ``PATH``) keeps the queue offsets of
every micro-batch, and the file sink records each batch's files in
``PATH/_spark_metadata`` when it commits; a batch cut short by a crash is
redone after a restart, and readers going through Spark
(``spark.read.parquet(PATH)``) see only committed files. Stopping and starting
again resumes where the last committed batch ended.

``--access-key``/``--secret-key`` (or ``$POCKETMQ_ACCESS_KEY``...) and
``--tls-ca``/``--tls-cert``/``--tls-key`` are passed to the source as its
``accessKey``... options, as for every other client command.

``--once`` archives what the topic holds now and exits
(``trigger(availableNow=True)``); without it the query runs every
``--interval`` until Ctrl-C or SIGTERM, which stop it between batches. Exit
codes: 0 done, 1 the query failed (its error on stderr), 2 bad arguments or
no pyspark installed.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import threading
from typing import Any

from pocketmq.cli.credentials import add_security_options, security_kwargs
from pocketmq.client.config import DEFAULT_NAMESRV, NAMESRV_ENV

__all__ = ["register"]

DEFAULT_INTERVAL = "10 seconds"
_INTERVAL = re.compile(
    r"\s*(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|secs?|seconds?|m|mins?|"
    r"minutes?|h|hours?)?\s*",
    re.IGNORECASE,
)


def parse_interval(text: str) -> str:
    """``2``, ``2s``, ``500ms``, ``1 minute``... (a bare number is seconds) -> Spark's
    ``'N milliseconds'`` trigger interval."""
    match = _INTERVAL.fullmatch(text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"interval {text!r}: give seconds (2), or a number with a unit: 500ms, 2s, 1 minute, 1h"
        )
    unit = (match.group(2) or "s").lower()
    scale = (
        0.001
        if unit.startswith("mil") or unit == "ms"
        else 60
        if unit.startswith("m")
        else 3600
        if unit.startswith("h")
        else 1
    )
    millis = round(float(match.group(1)) * scale * 1000)
    if millis < 1:
        raise argparse.ArgumentTypeError(f"interval {text!r} is shorter than 1 ms")
    return f"{millis} milliseconds"


# The UTC day of store_timestamp, whatever spark.sql.session.timeZone says.
DATE_COLUMN = "date_from_unix_date(CAST(floor(unix_micros(store_timestamp) / 86400000000) AS INT))"


def register(subparsers: Any) -> None:
    pipeline = subparsers.add_parser(
        "pipeline",
        help="data pipelines on Apache Spark (needs pocketmq[spark])",
        description="Data pipelines on Apache Spark, built on the pocketmq data source.",
    )
    sub = pipeline.add_subparsers(dest="pipeline_command", metavar="PIPELINE", required=True)
    _add_archive(sub)


def _add_archive(sub: Any) -> None:
    """``pipeline archive``: where the Parquet goes and how often, then what it reads."""
    archive = sub.add_parser(
        "archive",
        help="archive a topic into Parquet files partitioned by date",
        description="Stream a topic into Parquet under PATH/date=YYYY-MM-DD/, exactly once "
        "(Spark's file sink and checkpoint).",
    )
    archive.add_argument("--topic", required=True, help="the topic to archive")
    archive.add_argument(
        "--to",
        required=True,
        metavar="PATH",
        help="output folder (local path or any URI Spark can write)",
    )
    archive.add_argument(
        "--checkpoint", metavar="DIR", help="the query's checkpoint (default: PATH/_checkpoint)"
    )
    archive.add_argument(
        "--once", action="store_true", help="archive what the topic holds now, then exit"
    )
    archive.add_argument(
        "--interval",
        default=parse_interval(DEFAULT_INTERVAL),
        type=parse_interval,
        metavar="SECONDS",
        help=f"time between micro-batches without --once: seconds, or with a "
        f"unit (500ms, 1 minute) (default: {DEFAULT_INTERVAL})",
    )
    _add_archive_source_options(archive)
    archive.add_argument(
        "--master", help="Spark master URL (default: local[*], or what spark-submit sets)"
    )
    add_security_options(archive)
    archive.set_defaults(func=_archive)


def _add_archive_source_options(archive: argparse.ArgumentParser) -> None:
    """What ``archive`` reads: the nameserver, where it starts, which tags, how much per batch."""
    archive.add_argument(
        "--namesrv",
        default=os.environ.get(NAMESRV_ENV) or DEFAULT_NAMESRV,
        help=f"nameserver address(es), 'h1:9876;h2:9876' (default: "
        f"${NAMESRV_ENV}, then {DEFAULT_NAMESRV})",
    )
    archive.add_argument(
        "--starting-offsets",
        choices=("earliest", "latest"),
        default="earliest",
        help="where a new archive starts (default: earliest); a restarted "
        "one resumes from its checkpoint",
    )
    archive.add_argument(
        "--tag-expression",
        default="*",
        help='only messages with these tags: "*" or "A || B" (default: *)',
    )
    archive.add_argument(
        "--max-offsets-per-trigger",
        type=int,
        metavar="N",
        help="at most N messages per micro-batch",
    )


# security_kwargs() key -> the pocketmq source's option (spark/options.py)
_SOURCE_SECURITY_OPTIONS = {
    "access_key": "accessKey",
    "secret_key": "secretKey",
    "tls_ca_file": "tlsCaFile",
    "tls_cert_file": "tlsCertFile",
    "tls_key_file": "tlsKeyFile",
}


def source_security_options(args: argparse.Namespace) -> dict[str, str]:
    """The source options of ``--access-key``/``--tls-ca``... (or the env), those given."""
    return {
        _SOURCE_SECURITY_OPTIONS[key]: value
        for key, value in security_kwargs(args).items()
        if value
    }


def _archive(args: argparse.Namespace) -> int:
    try:
        from pocketmq.spark import session
    except ImportError as exc:  # pragma: no cover - the spark extra is not installed
        print(
            f"pocketmq pipeline: {exc}; install the Spark extra: pip install 'pocketmq[spark]'",
            file=sys.stderr,
        )
        return 2
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession, functions

    if args.max_offsets_per_trigger is not None and args.max_offsets_per_trigger < 1:
        print("pocketmq pipeline archive: --max-offsets-per-trigger must be >= 1", file=sys.stderr)
        return 2
    path = args.to
    checkpoint = args.checkpoint or os.path.join(path, "_checkpoint")
    owned = SparkSession.getActiveSession() is None
    spark = session(
        f"pocketmq-archive-{args.topic}", master=args.master or ("local[*]" if owned else None)
    )
    try:
        reader = (
            spark.readStream.format("pocketmq")
            .option("namesrv", args.namesrv)
            .option("subscribe", args.topic)
            .option("startingOffsets", args.starting_offsets)
            .option("tagExpression", args.tag_expression)
            .options(**source_security_options(args))
        )
        if args.max_offsets_per_trigger is not None:
            reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
        rows = reader.load().withColumn("date", functions.expr(DATE_COLUMN))
        writer = (
            rows.writeStream.format("parquet")
            .partitionBy("date")
            .option("path", path)
            .option("checkpointLocation", checkpoint)
            .queryName(f"archive-{args.topic}")
        )
        writer = (
            writer.trigger(availableNow=True)
            if args.once
            else writer.trigger(processingTime=args.interval)
        )
        query = writer.start()
        return _wait(query, args, path, checkpoint, PySparkException)
    finally:
        if owned:
            spark.stop()


def _wait(
    query: Any, args: argparse.Namespace, path: str, checkpoint: str, spark_error: type[Exception]
) -> int:
    stop = threading.Event()
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        # Ctrl-C as SIGTERM: a KeyboardInterrupt raised inside a py4j call would leave
        # the gateway mid-answer and print a traceback per Spark thread.
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    print(
        f"archiving topic {args.topic} into {path} (checkpoint {checkpoint}); "
        + ("until it is caught up" if args.once else "Ctrl-C stops"),
        file=sys.stderr,
    )
    try:
        while query.isActive and not stop.is_set():
            query.awaitTermination(0.5)
    except KeyboardInterrupt:
        pass
    except spark_error as exc:
        print(f"pocketmq pipeline archive: the query failed: {exc}", file=sys.stderr)
        return 1
    finally:
        _stop_quietly(query, spark_error)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stop.is_set():
        print("stopped; the next run resumes from the checkpoint", file=sys.stderr)
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    print(
        f"archived {sum(p['numInputRows'] for p in batches)} messages of {args.topic} in "
        f"{len(batches)} micro-batch(es) into {path}"
    )
    return 0


def _stop_quietly(query: Any, spark_error: type[Exception]) -> None:
    """Stop the query if it runs; a query that already failed has said why."""
    try:
        if query.isActive:
            query.stop()
    except (spark_error, OSError) as exc:
        print(f"pocketmq pipeline archive: stopping the query: {exc}", file=sys.stderr)
