"""Reading a message's trace back: ``pocketmq message trace MSG_ID``.

:func:`query_trace` finds the trace messages whose KEYS hold the id through the
trace topic's index (``QueryMessage``, at most 64 a call, so it pages back in
time) and keeps the records of that message; :func:`message_life` folds them
into the message's life::

    produced      Pub records: group, client, when, cost, status, where stored
    broker        the broker's own records: stored, delayed delivery, commit/rollback
    transactions  EndTransaction records of transactional producers
    consumed      one row per listener call: SubBefore + SubAfter paired by request id
                  (group, client, attempt = reconsume times, cost, status); for a
                  RocketMQ 5 client, one per delivery (the broker's ``proxy`` records)
    dead_lettered the consume attempts that sent it to %DLQ%{group}, and whether the
                  broker traced the dead-letter copy

An offset message id is accepted too: trace messages are indexed by unique id
(as RocketMQ's), so one that finds nothing is read from its broker
(``ViewMessage``) and its unique id looked up instead.
"""

from __future__ import annotations

from typing import Any

from pocketmq.client.admin import AdminClient
from pocketmq.client.errors import NotFoundError
from pocketmq.client.model import MessageExt, dlq_topic
from pocketmq.common.trace import DEFAULT_TRACE_TOPIC, TraceRecord, TraceType, decode_trace_body

__all__ = ["message_life", "query_trace"]

PAGE_MESSAGES = 64  # the broker's cap on one key query (MAX_QUERY_MESSAGES)
MAX_PAGES = 16  # trace messages read per id at most: 16 x 64


async def _trace_messages(admin: AdminClient, topic: str, key: str) -> list[MessageExt]:
    """Every trace message with *key* in its KEYS, paging back through store time."""
    seen: dict[str, MessageExt] = {}
    end_ms = 0
    for _ in range(MAX_PAGES):
        page = await admin.query_message(topic, key, max_num=PAGE_MESSAGES, end_timestamp_ms=end_ms)
        fresh = [m for m in page if m.offset_msg_id not in seen]
        for msg in fresh:
            seen[msg.offset_msg_id] = msg
        if len(page) < PAGE_MESSAGES or not fresh:
            break
        end_ms = min(m.store_timestamp_ms for m in page)
    return list(seen.values())


async def query_trace(
    admin: AdminClient, msg_id: str, *, trace_topic: str = DEFAULT_TRACE_TOPIC
) -> list[TraceRecord]:
    """The trace records of message *msg_id* (unique or offset id), oldest first."""
    records = await _records_of(admin, msg_id, trace_topic)
    if not records and await admin.offset_msg_id_broker(msg_id) is not None:
        try:
            unique = (await admin.view_message(msg_id)).msg_id
        except NotFoundError:
            unique = ""
        if unique:
            records = await _records_of(admin, unique, trace_topic)
    return records


async def _records_of(admin: AdminClient, msg_id: str, trace_topic: str) -> list[TraceRecord]:
    records: dict[str, TraceRecord] = {}
    for msg in await _trace_messages(admin, trace_topic, msg_id):
        for record in decode_trace_body(msg.body):
            if msg_id in (record.msg_id, record.offset_msg_id):
                records.setdefault(repr(record.to_json()), record)
    return sorted(records.values(), key=lambda r: (r.ts, _ORDER.get(r.type, 9)))


_ORDER = {
    TraceType.PUB: 0,
    TraceType.STORE: 1,
    TraceType.END_TRANSACTION: 2,
    TraceType.DELIVERED: 3,
    TraceType.SUB_BEFORE: 4,
    TraceType.SUB_AFTER: 5,
}


def message_life(msg_id: str, records: list[TraceRecord]) -> dict[str, Any]:
    """The life of *msg_id* from its records (see the module docstring); JSON-ready."""
    produced = [r for r in records if r.type == TraceType.PUB]
    first = produced[0] if produced else (records[0] if records else None)
    life: dict[str, Any] = {
        "msg_id": next((r.msg_id for r in records if r.msg_id), msg_id),
        "topic": first.topic if first else "",
        "tags": first.tags if first else "",
        "keys": first.keys if first else [],
        "produced": [
            _row(
                r,
                "group",
                "client_id",
                "client_host",
                "ts",
                "cost_ms",
                "status",
                "broker",
                "queue_id",
                "queue_offset",
                "store_host",
                "offset_msg_id",
                "msg_type",
            )
            for r in produced
        ],
        "broker": [
            _row(
                r,
                "type",
                "ts",
                "broker",
                "store_host",
                "topic",
                "stored_topic",
                "queue_id",
                "queue_offset",
                "store_time",
                "status",
                "msg_type",
                "offset_msg_id",
                "retry_times",
            )
            for r in records
            if r.source == "broker"
        ],
        "transactions": [
            _row(r, "group", "client_id", "ts", "transaction_state", "from_transaction_check")
            for r in records
            if r.type == TraceType.END_TRANSACTION and r.source == "client"
        ],
        "consumed": _attempts(records),
    }
    life["dead_lettered"] = _dead_lettered(life["consumed"], records)
    life["records"] = [r.to_json() for r in records]
    return life


def _dead_lettered(
    consumed: list[dict[str, Any]], records: list[TraceRecord]
) -> list[dict[str, Any]]:
    """Each group that sent the message to its DLQ: from the consumer's ``dlq`` attempt,
    ``broker_confirmed`` when the broker traced the dead-letter copy (SendBack)."""
    stored = {
        r.topic: r for r in records if r.type == TraceType.SEND_BACK and r.status == "dead-lettered"
    }
    out = []
    for attempt in consumed:
        if attempt["status"] == "dlq":
            topic = dlq_topic(attempt["group"])
            out.append(
                {
                    "group": attempt["group"],
                    "client_id": attempt["client_id"],
                    "ts": attempt["ts"],
                    "dlq_topic": topic,
                    "broker_confirmed": stored.pop(topic, None) is not None,
                }
            )
    for topic, record in stored.items():  # traced by the broker alone
        out.append(
            {
                "group": record.group,
                "client_id": "",
                "ts": record.ts,
                "dlq_topic": topic,
                "broker_confirmed": True,
            }
        )
    return out


def _row(record: TraceRecord, *names: str) -> dict[str, Any]:
    return {name: getattr(record, name) for name in names}


def _attempts(records: list[TraceRecord]) -> list[dict[str, Any]]:
    """One row per listener call of this message: its SubBefore with its SubAfter."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for r in records:
        if r.type not in (TraceType.SUB_BEFORE, TraceType.SUB_AFTER) or r.source == "broker":
            continue
        row = rows.setdefault(
            (r.request_id, r.offset_msg_id),
            {
                "group": r.group,
                "client_id": r.client_id,
                "client_host": r.client_host,
                "ts": r.ts,
                "attempt": r.retry_times,
                "broker": "",
                "queue_id": -1,
                "queue_offset": -1,
                "topic": r.topic,
                "read_from": r.topic,
                "offset_msg_id": r.offset_msg_id,
                "cost_ms": None,
                "status": "in progress",
            },
        )
        if r.type == TraceType.SUB_BEFORE:
            row.update(
                ts=r.ts,
                broker=r.broker,
                queue_id=r.queue_id,
                queue_offset=r.queue_offset,
                read_from=r.stored_topic or r.topic,
            )
        else:
            row.update(cost_ms=r.cost_ms, status=r.status)
    return sorted(rows.values(), key=lambda row: (row["ts"], row["attempt"]))
