"""``pocketmq store verify|dump``: inspect a data directory offline (read-only).

``dump --body`` adds each record's body. ``verify`` shows how far it is on
stderr, every second, when stderr is a terminal or ``--progress`` is given
(:mod:`pocketmq.common.progress`), against the bytes the log holds (not the size
of its pre-allocated segments). On the directory of a running broker (it holds
the ``lock`` file) ``verify`` says so on stderr first: the files change while
they are read, so the newest records may show up as problems.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from typing import Any

from pocketmq.broker.store.verify import (
    held_by_a_broker,
    iter_stored_messages,
    iter_stored_records,
    verify_store,
)
from pocketmq.common.errors import CorruptRecordError
from pocketmq.common.message import decode_properties, decode_record
from pocketmq.common.progress import Progress, stream_sink

__all__ = ["register"]

VERIFY_PROGRESS_INTERVAL_S = 1.0


def register(subparsers: Any) -> None:
    store = subparsers.add_parser("store", help="inspect a broker's data directory offline")
    sub = store.add_subparsers(dest="store_command", metavar="ACTION", required=True)

    verify = sub.add_parser("verify", help="check every record, consume queue and index entry")
    verify.add_argument("data_dir", metavar="DIR")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.add_argument(
        "--index-slots",
        type=int,
        default=None,
        metavar="N",
        help="the broker's index_slots (default: what the store recorded "
        "in storeGeometry.json, else the default geometry)",
    )
    verify.add_argument(
        "--progress",
        action="store_true",
        help="show progress on stderr even when it is not a terminal "
        "(on a terminal it is always shown)",
    )
    verify.set_defaults(func=_verify)

    dump = sub.add_parser("dump", help="print the records of the commit log")
    dump.add_argument("data_dir", metavar="DIR")
    dump.add_argument("--topic", help="only this topic")
    dump.add_argument("--queue", type=int, help="only this queue id")
    dump.add_argument("--limit", type=int, default=0, help="stop after N records (0: all)")
    dump.add_argument("--json", action="store_true", help="one JSON object per line")
    dump.add_argument(
        "--body",
        action="store_true",
        help="with each record's body (UTF-8, or base64 in JSON when it is not)",
    )
    dump.set_defaults(func=_dump)


def _check_dir(path: str) -> str | None:
    if not os.path.isdir(os.path.join(path, "commitlog")):
        return f"{path} is not a PocketMQ data directory (it has no commitlog/ folder)"
    return None


def _warn_if_running(path: str) -> None:
    if held_by_a_broker(path):
        print(
            f"note: a broker is running on {path} (it holds {os.path.join(path, 'lock')}); "
            "what it writes meanwhile may be reported as problems. Stop it for an exact "
            "check.",
            file=sys.stderr,
        )


def _verify(args: argparse.Namespace) -> int:
    problem = _check_dir(args.data_dir)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    _warn_if_running(args.data_dir)

    progress = None
    if args.progress or sys.stderr.isatty():
        progress = Progress(
            "verifying the commit log",
            sink=stream_sink(sys.stderr),
            interval_s=VERIFY_PROGRESS_INTERVAL_S,
        )
    report = verify_store(
        args.data_dir, index_slots=args.index_slots, progress=progress.update if progress else None
    )
    if progress is not None:
        progress.done = report.log_end_offset - report.log_min_offset
        progress.finish()
    if args.json:
        print(
            json.dumps(
                {
                    "ok": report.ok,
                    "records": report.records,
                    "bytes": report.bytes,
                    "log_min_offset": report.log_min_offset,
                    "log_end_offset": report.log_end_offset,
                    "queues": report.queues,
                    "units": report.units,
                    "index_entries": report.index_entries,
                    "problems": report.problems,
                },
                indent=2,
            )
        )
    else:
        print(
            f"commit log   {report.log_min_offset} .. {report.log_end_offset}: "
            f"{report.records} records, {report.bytes} bytes"
        )
        print(f"consume queues {report.queues}: {report.units} units")
        print(f"index        {report.index_entries} entries")
        for text in report.problems:
            print(f"PROBLEM: {text}")
        print("OK" if report.ok else f"{len(report.problems)} problem(s) found")
    return 0 if report.ok else 1


def _body(stored: bytes) -> tuple[str, str]:
    """(body text, "utf-8") or (base64, "base64") of a stored record."""
    try:
        body = decode_record(stored, check_crc=False).body
    except CorruptRecordError:
        return "", "unreadable"
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(body).decode(), "base64"


def _dump(args: argparse.Namespace) -> int:
    problem = _check_dir(args.data_dir)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    shown = 0
    records = (
        iter_stored_records(args.data_dir)
        if args.body
        else ((r, b"") for r in iter_stored_messages(args.data_dir))
    )
    for rec, stored in records:
        if args.topic is not None and rec.topic != args.topic:
            continue
        if args.queue is not None and rec.queue_id != args.queue:
            continue
        props = decode_properties(rec.properties.decode("utf-8", "replace"))
        body = _body(stored) if args.body else None
        if args.json:
            row = {
                "phys_offset": rec.phys_offset,
                "size": rec.size,
                "topic": rec.topic,
                "queue_id": rec.queue_id,
                "queue_offset": rec.queue_offset,
                "sysflag": rec.sysflag,
                "store_timestamp_ms": rec.store_timestamp_ms,
                "properties": props,
            }
            if body is not None:
                row["body"], row["body_encoding"] = body
            print(json.dumps(row, ensure_ascii=False))
        else:
            print(
                f"{rec.phys_offset:>12} {rec.topic}:{rec.queue_id}@{rec.queue_offset} "
                f"size={rec.size} tags={props.get('TAGS', '')} "
                f"keys={props.get('KEYS', '')} uniq={props.get('UNIQ_KEY', '')}"
                + (f" body={body[0]!r}" if body is not None else "")
            )
        shown += 1
        if args.limit and shown >= args.limit:
            break
    return 0
