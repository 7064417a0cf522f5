"""``pocketmq message trace MSG_ID``: a message's life, from the trace topic.

::

    pocketmq message trace MSGID [--trace-topic RMQ_SYS_TRACE_TOPIC] [--json]

Reads what traced clients (``enable_trace=True``) and brokers with
``trace_topic_enable`` wrote about the message (:mod:`pocketmq.client.trace_view`)
and prints who produced it and when, where it was stored, which groups and
clients consumed it, how long each attempt took, its retries and its
dead-lettering. ``--json`` prints the same as one object, with every raw record.
"""

from __future__ import annotations

import argparse
from typing import Any

from pocketmq.cli.table import dump_json, render, time_ms
from pocketmq.client import AdminClient
from pocketmq.client.errors import NotFoundError
from pocketmq.client.trace_view import message_life, query_trace
from pocketmq.common.trace import DEFAULT_TRACE_TOPIC

__all__ = ["add_trace", "render_life"]


def add_trace(actions: Any, leaf: Any) -> None:
    """Add ``trace`` to ``pocketmq message``'s actions (*leaf* as in admin_cmd)."""
    parser = leaf(
        actions,
        "trace",
        _message_trace,
        "a message's life from the trace topic: produced, stored, consumed, retried, dead-lettered",
    )
    parser.add_argument("msg_id", metavar="MSGID", help="unique id (or offset message id)")
    parser.add_argument(
        "--trace-topic",
        default=DEFAULT_TRACE_TOPIC,
        help=f"where traces are written (default {DEFAULT_TRACE_TOPIC})",
    )


async def _message_trace(admin: AdminClient, args: argparse.Namespace) -> int:
    records = await query_trace(admin, args.msg_id, trace_topic=args.trace_topic)
    if not records:
        raise NotFoundError(
            f"no trace of message {args.msg_id!r} in {args.trace_topic!r}; "
            "was it sent or consumed with enable_trace=True (or through a "
            "broker with trace_topic_enable)?"
        )
    life = message_life(args.msg_id, records)
    print(dump_json(life) if args.json else render_life(life))
    return 0


def _ms(value: float | None) -> str | None:
    return None if value is None else f"{value:.1f}"


def render_life(life: dict[str, Any]) -> str:
    """The text form of :func:`~pocketmq.client.trace_view.message_life`'s result."""
    parts = [_render_identity(life)]
    if life["produced"]:
        parts.append("Produced\n" + _render_produced(life["produced"]))
    if life["broker"]:
        parts.append("Broker\n" + _render_broker_events(life["broker"]))
    if life["transactions"]:
        parts.append("Transaction\n" + _render_transactions(life["transactions"]))
    if life["consumed"]:
        parts.append("Consumed\n" + _render_consumed(life["consumed"]))
    else:
        parts.append("Consumed: no traced consumption yet")
    parts.extend(_dead_letter_line(dead) for dead in life["dead_lettered"])
    return "\n\n".join(parts)


def _render_identity(life: dict[str, Any]) -> str:
    """The FIELD/VALUE table naming the message: id, topic, tags, keys."""
    return render(
        ["FIELD", "VALUE"],
        [
            ["Message ID", life["msg_id"]],
            ["Topic", life["topic"] or None],
            ["Tags", life["tags"] or None],
            ["Keys", life["keys"]],
        ],
    )


def _render_produced(produced: list[dict[str, Any]]) -> str:
    """One row per traced send: who sent it, how long it took, where it landed."""
    return render(
        [
            "TIME",
            "GROUP",
            "CLIENT",
            "COST MS",
            "STATUS",
            "TYPE",
            "BROKER",
            "QUEUE",
            "OFFSET",
            "STORE HOST",
        ],
        [
            [
                time_ms(p["ts"]),
                p["group"],
                p["client_id"],
                _ms(p["cost_ms"]),
                p["status"],
                p["msg_type"],
                p["broker"] or None,
                _num(p["queue_id"]),
                _num(p["queue_offset"]),
                p["store_host"] or None,
            ]
            for p in produced
        ],
    )


def _render_broker_events(events: list[dict[str, Any]]) -> str:
    """One row per broker-side trace record (store, delay, retry, DLQ...)."""
    return render(
        ["TIME", "EVENT", "BROKER", "TOPIC", "STORED IN", "QUEUE", "OFFSET", "STATUS"],
        [
            [
                time_ms(b["store_time"] or b["ts"]),
                b["type"],
                b["broker"],
                b["topic"],
                b["stored_topic"] or None,
                _num(b["queue_id"]),
                _num(b["queue_offset"]),
                b["status"] or None,
            ]
            for b in events
        ],
    )


def _render_transactions(transactions: list[dict[str, Any]]) -> str:
    """One row per traced transaction end (commit, rollback, from a check or not)."""
    return render(
        ["TIME", "GROUP", "CLIENT", "STATE", "FROM CHECK"],
        [
            [
                time_ms(t["ts"]),
                t["group"],
                t["client_id"],
                t["transaction_state"],
                t["from_transaction_check"],
            ]
            for t in transactions
        ],
    )


def _render_consumed(consumed: list[dict[str, Any]]) -> str:
    """One row per traced delivery attempt; ATTEMPT counts from 1."""
    return render(
        [
            "TIME",
            "GROUP",
            "CLIENT",
            "ATTEMPT",
            "COST MS",
            "STATUS",
            "READ FROM",
            "BROKER",
            "QUEUE",
            "OFFSET",
        ],
        [
            [
                time_ms(c["ts"]),
                c["group"],
                c["client_id"],
                c["attempt"] + 1,
                _ms(c["cost_ms"]),
                c["status"],
                c["read_from"],
                c["broker"] or None,
                _num(c["queue_id"]),
                _num(c["queue_offset"]),
            ]
            for c in consumed
        ],
    )


def _dead_letter_line(dead: dict[str, Any]) -> str:
    return (
        f"Dead-lettered: group {dead['group']} moved it to {dead['dlq_topic']} "
        f"at {time_ms(dead['ts'])}"
        + (" (the broker stored the copy)" if dead["broker_confirmed"] else "")
    )


def _num(value: int) -> int | None:
    return None if value < 0 else value
