"""Message trace of producers: the Pub records of sends (:mod:`.trace` owns the dispatcher).

Each traced path hands :class:`~pocketmq.client.trace.TraceDispatcher` a builder
and its arguments; the dispatcher's task calls the builder, which formats the
lines (:mod:`pocketmq.common.trace`'s format)::

    send, send_batch     wrapped on the instance at start (install_producer_trace):
                         one Pub per message, SEND_OK ... or FAILED: error
    send_oneway          wrapped likewise for refusals before the hand-over; once
                         handed over, trace_oneway records the Pub when the broker's
                         answer (or the failure) arrives: msg_type Normal_Oneway
    transactions         the half's Pub (Trans_Half), EndTransaction records
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pocketmq.client.model import Message, MessageQueue, SendResult
from pocketmq.client.remote_values import SendReceipt
from pocketmq.common.msgid import decode_offset_msg_id
from pocketmq.common.trace import TraceRecord, TraceType, encode_trace_line, json_string

if TYPE_CHECKING:  # trace.py imports this module
    from pocketmq.client.trace import TraceDispatcher

__all__ = [
    "Lines",
    "install_producer_trace",
    "trace_end_transaction",
    "trace_half_message",
    "trace_oneway",
]

# What a builder makes: (JSON line, index keys) per record (common/trace.py).
Lines = list[tuple[str, list[str]]]


def install_producer_trace(producer: Any, dispatcher: TraceDispatcher) -> None:
    """Wrap *producer*'s ``send``, ``send_batch`` and ``send_oneway`` on the instance: each
    records a Pub (a one-way send's by :func:`trace_oneway` once handed over, or here
    when refused before)."""
    send, send_batch, send_oneway = producer.send, producer.send_batch, producer.send_oneway

    async def traced_send(msg: Message, **kwargs: Any) -> SendResult:
        born_ms, started = time.time_ns() // 1_000_000, time.perf_counter()
        try:
            result = await send(msg, **kwargs)
        except Exception as exc:
            dispatcher.add(
                _published,
                dispatcher,
                (msg,),
                None,
                born_ms,
                (time.perf_counter() - started) * 1000,
                exc,
            )
            raise
        dispatcher.add(
            _published,
            dispatcher,
            (msg,),
            (result,),
            born_ms,
            (time.perf_counter() - started) * 1000,
            None,
        )
        return result

    async def traced_send_batch(msgs: Sequence[Message], **kwargs: Any) -> Sequence[SendResult]:
        born_ms, started = time.time_ns() // 1_000_000, time.perf_counter()
        try:
            results = await send_batch(msgs, **kwargs)
        except Exception as exc:
            dispatcher.add(
                _published,
                dispatcher,
                tuple(msgs),
                None,
                born_ms,
                (time.perf_counter() - started) * 1000,
                exc,
            )
            raise
        dispatcher.add(
            _published,
            dispatcher,
            tuple(msgs),
            tuple(results),
            born_ms,
            (time.perf_counter() - started) * 1000,
            None,
        )
        return results

    async def traced_send_oneway(msg: Message) -> None:
        born_ms, started = time.time_ns() // 1_000_000, time.perf_counter()
        try:
            await send_oneway(msg)
        except Exception as exc:  # refused before it was handed over
            cost_ms = (time.perf_counter() - started) * 1000
            kind = f"{_msg_type(msg)}_Oneway"
            dispatcher.add(_published, dispatcher, (msg,), None, born_ms, cost_ms, exc, kind)
            raise

    producer.send = traced_send
    producer.send_batch = traced_send_batch
    producer.send_oneway = traced_send_oneway
    producer.trace_oneway = functools.partial(trace_oneway, dispatcher)


def trace_oneway(
    dispatcher: TraceDispatcher,
    msg: Message,
    queue: MessageQueue,
    msg_id: str,
    sent: asyncio.Future[SendReceipt],
) -> None:
    """A one-way send handed *msg* (unique id *msg_id*) over for *queue*: its Pub is
    recorded once *sent* settles (the caller returned long before), with what the
    producer learns then: the broker's status, queue and offset, or why it failed
    (``FAILED: ...``, the unique id and queue still named). ``msg_type`` ends in
    ``_Oneway`` (``Normal_Oneway``, ``Delay_Oneway``)."""
    born_ms, started = time.time_ns() // 1_000_000, time.perf_counter()

    def settled(future: asyncio.Future[SendReceipt]) -> None:
        cost_ms = (time.perf_counter() - started) * 1000
        kind = f"{_msg_type(msg)}_Oneway"
        if future.cancelled() or future.exception() is not None:
            error = None if future.cancelled() else future.exception()
            reason = f"{type(error).__name__}: {error}" if error else "cancelled before sent"
            dispatcher.add(_oneway_failed, dispatcher, msg, queue, msg_id, born_ms, cost_ms, reason)
            return
        receipt = future.result()
        stored = queue
        if (receipt.topic and receipt.topic != queue.topic) or receipt.queue_id != queue.queue_id:
            stored = MessageQueue(receipt.topic or queue.topic, queue.broker_name, receipt.queue_id)
        result = SendResult(
            status=receipt.status,
            msg_id=receipt.msg_id or msg_id,
            offset_msg_id=receipt.offset_msg_id,
            queue=stored,
            queue_offset=receipt.queue_offset,
        )
        dispatcher.add(_published, dispatcher, (msg,), (result,), born_ms, cost_ms, None, kind)

    sent.add_done_callback(settled)


def _oneway_failed(
    d: TraceDispatcher,
    msg: Message,
    queue: MessageQueue,
    msg_id: str,
    born_ms: int,
    cost_ms: float,
    reason: str,
) -> Lines:
    """The Pub line of a one-way send that failed: what was meant, and why not."""
    if msg.topic == d.topic:
        return []
    record = TraceRecord(
        type=TraceType.PUB,
        ts=born_ms,
        msg_id=msg_id,
        topic=msg.topic,
        tags=msg.tags,
        keys=list(msg.keys),
        group=d.group,
        client_id=d.client_id,
        client_host=d.client_host,
        broker=queue.broker_name,
        queue_id=queue.queue_id,
        born_time=born_ms,
        cost_ms=round(cost_ms, 3),
        body_bytes=len(msg.body),
        msg_type=f"{_msg_type(msg)}_Oneway",
        status=f"FAILED: {reason}"[:500],
    )
    return [encode_trace_line(record)]


def trace_half_message(
    dispatcher: TraceDispatcher | None,
    msg: Message,
    result: SendResult,
    born_ms: int,
    cost_ms: float,
) -> None:
    """A transactional producer stored its half message."""
    if dispatcher is not None:
        dispatcher.add(
            _published, dispatcher, (msg,), (result,), born_ms, cost_ms, None, "Trans_Half"
        )


def trace_end_transaction(
    dispatcher: TraceDispatcher | None,
    *,
    msg_id: str,
    offset_msg_id: str,
    topic: str,
    broker: str,
    state: str,
    from_check: bool,
    tags: str = "",
    keys: Sequence[str] = (),
) -> None:
    """A transactional producer ended (or left UNKNOWN) a transaction."""
    if dispatcher is None:
        return
    dispatcher.add(
        lambda: [
            encode_trace_line(
                TraceRecord(
                    type=TraceType.END_TRANSACTION,
                    ts=time.time_ns() // 1_000_000,
                    msg_id=msg_id,
                    offset_msg_id=offset_msg_id,
                    topic=topic,
                    tags=tags,
                    keys=list(keys),
                    group=dispatcher.group,
                    client_id=dispatcher.client_id,
                    client_host=dispatcher.client_host,
                    broker=broker,
                    transaction_state=state,
                    status=state,
                    from_transaction_check=from_check,
                    msg_type=f"Trans_{state.capitalize()}",
                )
            )
        ]
    )


def _store_host(d: TraceDispatcher, offset_msg_id: str) -> str:
    """ "host:port" of an offset message id, cached by its host part."""
    prefix = offset_msg_id[:-16]
    host = d.store_hosts.get(prefix)
    if host is None:
        try:
            decoded = decode_offset_msg_id(offset_msg_id)
        except ValueError:
            return ""
        ip = f"[{decoded.host}]" if ":" in decoded.host else decoded.host
        host = f"{ip}:{decoded.port}"
        if len(d.store_hosts) < 1024:
            d.store_hosts[prefix] = host
    return host


def _msg_type(msg: Message) -> str:
    return "Delay" if msg.delay_level or msg.deliver_at_ms or msg.delay_ms else "Normal"


def _published(
    d: TraceDispatcher,
    msgs: tuple[Message, ...],
    results: tuple[SendResult, ...] | None,
    born_ms: int,
    cost_ms: float,
    error: BaseException | None,
    msg_type: str = "",
) -> Lines:
    """The Pub lines of one send: formatted here, not by json.dumps, as they are the
    most frequent records (the same fields :meth:`TraceRecord.to_json` would give)."""
    out = []
    for i, msg in enumerate(msgs):
        if msg.topic == d.topic:
            continue  # traces of traces would feed on themselves
        head = f'{{"type":"Pub","ts":{born_ms}'
        tail = (
            f',"topic":{json_string(msg.topic)}'
            + (f',"tags":{json_string(msg.tags)}' if msg.tags else "")
            + (f',"keys":[{",".join(map(json_string, msg.keys))}]' if msg.keys else "")
            + d.identity
            + f',"born_time":{born_ms},"cost_ms":{cost_ms:.3f}'
            + f',"body_bytes":{len(msg.body)},"msg_type":"{msg_type or _msg_type(msg)}"'
        )
        keys = [k for k in msg.keys if k and " " not in k]
        if results is None:
            status = f"FAILED: {type(error).__name__}: {error}"[:500]
            out.append((f'{head}{tail},"status":{json_string(status)}}}', keys))
            continue
        result = results[i]
        q = result.queue
        out.append(
            (
                f'{head},"msg_id":"{result.msg_id}","offset_msg_id":"{result.offset_msg_id}"{tail}'
                f',"broker":{json_string(q.broker_name)},"queue_id":{q.queue_id}'
                f',"queue_offset":{result.queue_offset}'
                f',"store_host":"{_store_host(d, result.offset_msg_id)}"'
                f',"status":"{result.status.value}"}}',
                [result.msg_id, *keys],
            )
        )
    return out
