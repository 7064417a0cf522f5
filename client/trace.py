"""Message trace on the client: RocketMQ's ``enableMsgTrace`` and AsyncTraceDispatcher.

A client made with ``enable_trace=True`` owns a :class:`TraceDispatcher`. The
traced paths hand it what happened and return at once::

    send / send_batch ──┐                                  (TraceDispatchService task)
    send_oneway settled ┤
    listener call ──────┼─▶ bounded deque ──every trace_flush_interval_ms, or once
    poll ───────────────┤   (trace_queue_capacity;      trace_batch_max_records wait──▶
    EndTransaction ─────┘    full: dropped, counted)    build TraceRecords, pack them into
                                                        messages (common/trace.py), send
                                                        them with an ordinary Producer

The hot path only appends a tuple (the records are built by the dispatcher),
never waits for the trace topic, and never fails because of it. Traces are
ordinary messages: a failed trace write (no route to the trace topic, no PUB
permission on it, a broker away) drops those records, counts them in
``failed`` and logs one warning per kind of failure; sends go on unaffected.
At shutdown the client flushes what is queued (within its send timeout).

Producers (:mod:`.trace_send`) are traced by wrapping ``send``, ``send_batch``
and ``send_oneway`` on the instance at start (:func:`install_producer_trace`), so
that an untraced producer's send path is exactly as before (a one-way send's Pub
is written when its hand-over settles, :func:`trace_oneway`); consumers by
wrapping the listener (:func:`trace_listener`) and recording each poll
(:meth:`TraceDispatcher.polled`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from pocketmq.client.consume_service import Listener
from pocketmq.client.errors import ClientError, PermissionDeniedError, RouteNotFoundError
from pocketmq.client.heartbeat import local_ip
from pocketmq.client.model import (
    PROPERTY_RETRY_TOPIC,
    ConsumeResult,
    Message,
    MessageExt,
    retry_topic,
)
from pocketmq.client.trace_send import (
    Lines,
    install_producer_trace,
    trace_end_transaction,
    trace_half_message,
    trace_oneway,
)
from pocketmq.common.aio import cancel_and_wait, wait_event
from pocketmq.common.trace import (
    TraceRecord,
    TraceType,
    encode_trace_line,
    json_string,
    pack_trace_lines,
)
from pocketmq.common.validation import MAX_GROUP_LENGTH

__all__ = [
    "TRACE_PRODUCER_GROUP_PREFIX",
    "TraceDispatcher",
    "close_trace",
    "dead_letter_rule",
    "install_producer_trace",
    "start_trace",
    "trace_end_transaction",
    "trace_half_message",
    "trace_listener",
    "trace_oneway",
]

log = logging.getLogger(__name__)

TRACE_PRODUCER_GROUP_PREFIX = "_INNER_TRACE_PRODUCER-"  # RocketMQ's TraceConstants
DEFAULT_MAX_RECONSUME_TIMES = 16

# A queued entry: (builder, its arguments); the dispatcher calls builder(*args).
_Entry = tuple[Callable[..., Lines], tuple[Any, ...]]


class TraceDispatcher:
    """Queues trace entries and writes them, in batches, to the trace topic."""

    def __init__(self, *, group: str, client_id: str, config: Any, namesrv: Sequence[str]) -> None:
        self.group = group
        self.client_id = client_id
        self.client_host = local_ip()
        # the fields every record of this client carries, formatted once for Pub lines
        self.identity = (
            f',"group":{json_string(group)},"client_id":{json_string(client_id)}'
            f',"client_host":{json_string(self.client_host)}'
        )
        self.store_hosts: dict[str, str] = {}  # offset msg id prefix -> "host:port"
        self.topic: str = config.trace_topic
        self._config = config
        self._namesrv = list(namesrv)
        self._capacity: int = config.trace_queue_capacity
        self._batch_max: int = config.trace_batch_max_records
        self._interval_s: float = config.trace_flush_interval_ms / 1000
        self._queue: deque[_Entry] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._producer: Any = None
        self._warned: set[str] = set()
        self.dropped = 0  # entries refused because the queue was full
        self.failed = 0  # records whose trace message could not be written
        self.written = 0  # records written to the trace topic

    # -- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        from pocketmq.client.config import ProducerConfig
        from pocketmq.client.producer import Producer

        cfg = self._config
        group = (TRACE_PRODUCER_GROUP_PREFIX + self.group)[:MAX_GROUP_LENGTH]
        self._producer = Producer(
            group=group,
            namesrv=self._namesrv,
            config=ProducerConfig(
                route_refresh_interval_s=cfg.route_refresh_interval_s,
                heartbeat_interval_s=cfg.heartbeat_interval_s,
                access_key=cfg.access_key,
                secret_key=cfg.secret_key,
                tls_ca_file=cfg.tls_ca_file,
                tls_cert_file=cfg.tls_cert_file,
                tls_key_file=cfg.tls_key_file,
            ),
        )
        await self._producer.start()
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"TraceDispatchService {self.group}"
        )

    async def close(self, timeout_s: float = 3.0) -> None:
        """Write what is queued (up to *timeout_s*), then stop."""
        await cancel_and_wait(self._task)
        self._task = None
        try:
            async with asyncio.timeout(timeout_s):
                while self._queue:
                    await self.run_once()
        except TimeoutError:
            log.warning(
                "trace of %s: %d entries not written within %.1f s of shutdown",
                self.group,
                len(self._queue),
                timeout_s,
            )
        if self._producer is not None:
            await self._producer.shutdown()

    # -- queueing (the traced paths) ----------------------------------------------------
    def add(self, builder: Callable[..., Lines], *args: Any) -> None:
        """Queue ``builder(*args)``; never blocks: a full queue drops it and counts it."""
        if len(self._queue) >= self._capacity:
            self.dropped += 1
            self._warn_once(
                "full",
                "trace queue of %s is full (%d entries, "
                "trace_queue_capacity); dropping traces, sends go on",
                self.group,
                self._capacity,
            )
            return
        self._queue.append((builder, args))
        if len(self._queue) >= self._batch_max:
            self._wake.set()

    @property
    def queued(self) -> int:
        return len(self._queue)

    def polled(self, messages: list[MessageExt]) -> None:
        """A pull consumer's poll handed *messages* to the application: consumed."""
        self.add(
            _consumed, self, messages, "success", 0.0, time.time_ns() // 1_000_000, uuid.uuid4().hex
        )

    # -- writing ------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            if len(self._queue) < self._batch_max:
                self._wake.clear()
                await wait_event(self._wake, self._interval_s)
            try:
                await self.run_once()
            except Exception:  # a bug here must not stop tracing for good
                log.exception("trace of %s: writing a batch failed", self.group)

    async def run_once(self) -> int:
        """Write up to one batch of what is queued; the records written."""
        entries = [self._queue.popleft() for _ in range(min(self._batch_max, len(self._queue)))]
        if not entries:
            return 0
        lines = [line for builder, args in entries for line in builder(*args)]
        messages = list(pack_trace_lines(lines))
        results = await asyncio.gather(
            *(
                self._producer.send(Message(topic=self.topic, body=body, keys=keys))
                for body, keys in messages
            ),
            return_exceptions=True,
        )
        written = 0
        for (body, _keys), result in zip(messages, results, strict=True):
            lines = body.count(b"\n") + 1
            if isinstance(result, BaseException):
                self.failed += lines
                self._write_failed(result)
            else:
                written += lines
        self.written += written
        return written

    def _write_failed(self, exc: BaseException) -> None:
        if isinstance(exc, PermissionDeniedError):
            self._warn_once(
                "acl",
                "trace of %s: no permission to write trace topic %r (%s); "
                "traces are dropped, sends are unaffected: grant this ACL user "
                "PUB on %s",
                self.group,
                self.topic,
                exc,
                self.topic,
            )
        elif isinstance(exc, RouteNotFoundError):
            self._warn_once(
                "route",
                "trace of %s: trace topic %r has no route (%s); traces "
                "are dropped: create it, or start a broker with "
                "trace_topic_enable",
                self.group,
                self.topic,
                exc,
            )
        elif isinstance(exc, ClientError):
            self._warn_once(
                type(exc).__name__,
                "trace of %s: writing to %r failed (%s); those traces are dropped",
                self.group,
                self.topic,
                exc,
            )
        else:
            log.error("trace of %s: unexpected error writing traces", self.group, exc_info=exc)

    def _warn_once(self, key: str, text: str, *args: object) -> None:
        if key in self._warned:
            log.debug(text, *args)
            return
        self._warned.add(key)
        log.warning(text, *args)


# -- starting ------------------------------------------------------------------------------
async def start_trace(client: Any) -> TraceDispatcher | None:
    """The started dispatcher of *client* (a producer or consumer), None when its
    config does not enable tracing. A dispatcher that cannot start is logged and
    the client runs untraced."""
    cfg = client.config
    if not cfg.enable_trace:
        return None
    dispatcher = TraceDispatcher(
        group=client.group, client_id=client.client_id, config=cfg, namesrv=client.namesrv
    )
    try:
        await dispatcher.start()
    except ClientError as exc:
        log.warning("%s: message trace cannot start (%s); running untraced", client.group, exc)
        return None
    return dispatcher


async def close_trace(dispatcher: TraceDispatcher | None, timeout_s: float) -> None:
    if dispatcher is not None:
        await dispatcher.close(timeout_s)


# -- consumers -----------------------------------------------------------------------------
def _consumed(
    d: TraceDispatcher,
    msgs: list[MessageExt],
    status: str,
    cost_ms: float,
    started_ms: int,
    request_id: str,
    dead_letter: Callable[[MessageExt], bool] | None = None,
) -> Lines:
    """SubBefore and SubAfter of each message of one listener call; a failure that
    *dead_letter* says sends the message to its DLQ has status ``dlq``."""
    out = []
    for msg in msgs:
        if msg.topic == d.topic:
            continue  # a consumer of the trace topic would trace its own traces
        common = dict(
            msg_id=msg.msg_id,
            offset_msg_id=msg.offset_msg_id,
            topic=msg.topic,
            tags=msg.tags,
            keys=list(msg.keys),
            group=d.group,
            client_id=d.client_id,
            client_host=d.client_host,
            retry_times=msg.reconsume_times,
            request_id=request_id,
        )
        # a redelivery is read from the group's retry topic, its topic is the original
        read_from = retry_topic(d.group) if PROPERTY_RETRY_TOPIC in msg.properties else ""
        out.append(
            TraceRecord(
                type=TraceType.SUB_BEFORE,
                ts=started_ms,
                broker=msg.broker_name,
                stored_topic=read_from,
                queue_id=msg.queue_id,
                queue_offset=msg.queue_offset,
                store_time=msg.store_timestamp_ms,
                born_time=msg.born_timestamp_ms,
                body_bytes=len(msg.body),
                **common,
            )
        )
        after_status = status
        if status != "success" and dead_letter is not None and dead_letter(msg):
            after_status = "dlq"
        out.append(
            TraceRecord(
                type=TraceType.SUB_AFTER,
                ts=started_ms + int(cost_ms),
                cost_ms=round(cost_ms, 3),
                status=after_status,
                **common,
            )
        )
    return [encode_trace_line(r) for r in out]


def _status(result: Any) -> str:
    if result is None or result is ConsumeResult.CONSUME_SUCCESS:
        return "success"
    if result in (ConsumeResult.RECONSUME_LATER, ConsumeResult.SUSPEND_CURRENT_QUEUE_A_MOMENT):
        return "retry_later"
    return "failed"


def dead_letter_rule(config: Any) -> Callable[[MessageExt], bool]:
    """Whether a failed attempt of a message sends it to %DLQ% (push consumer's rules:
    concurrent past max_reconsume_times, -1 = 16; orderly at it, -1 = never)."""
    max_times = config.max_reconsume_times
    if getattr(config, "message_model", "") == "broadcasting":
        return lambda msg: False
    if config.orderly:
        if max_times < 0:
            return lambda msg: False
        return lambda msg: msg.reconsume_times >= max_times
    if max_times <= 0:
        max_times = DEFAULT_MAX_RECONSUME_TIMES
    return lambda msg: msg.reconsume_times + 1 > max_times


def trace_listener(
    listener: Listener, dispatcher: TraceDispatcher, dead_letter: Callable[[MessageExt], bool]
) -> Listener:
    """*listener* recording SubBefore/SubAfter per message; a coroutine function if
    *listener* is one. A failed attempt that sends a message to its dead-letter
    queue is recorded with status ``dlq``."""

    def finish(
        batch: list[MessageExt], result: Any, started_ms: int, started: float, request_id: str
    ) -> None:
        dispatcher.add(
            _consumed,
            dispatcher,
            batch,
            _status(result),
            (time.perf_counter() - started) * 1000,
            started_ms,
            request_id,
            dead_letter,
        )

    if inspect.iscoroutinefunction(listener):

        async def traced(batch: list[MessageExt]) -> Any:
            started_ms, started = time.time_ns() // 1_000_000, time.perf_counter()
            request_id, result = uuid.uuid4().hex, "failed"
            try:
                result = await listener(batch)
                return result
            finally:
                finish(batch, result, started_ms, started, request_id)

        return traced

    def traced_inline(batch: list[MessageExt]) -> Any:
        started_ms, started = time.time_ns() // 1_000_000, time.perf_counter()
        request_id, result = uuid.uuid4().hex, "failed"
        try:
            result = listener(batch)
            return result
        finally:
            if not inspect.isawaitable(result):
                finish(batch, result, started_ms, started, request_id)

    return traced_inline
