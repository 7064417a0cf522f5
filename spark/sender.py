"""The sink's task side: Arrow batches to SendBatch calls, without a Python object per row.

Each record batch Spark hands a task is split by target (topic, and the queue
when the ``queue_id`` column names one) with Arrow compute, each part encoded
by :func:`~pocketmq.spark.arrowcodec.encode_chunks` into blobs of up to
``sendBatchSize`` records (and :data:`MAX_CHUNK_BODY_BYTES` of bodies), exactly
the records the SDK's ``Producer.send_batch`` would build (client-made
``UNIQ_KEY``, ``TAGS``, ``KEYS``, born host and time, bodies over 4 KiB
compressed), and each blob sent with one SendBatch call, up to
:data:`MAX_IN_FLIGHT` at a time per task::

    task thread:  split(b0) encode(b0) ─┬─ encode(b1) ─┬─ encode(b2) ...
    loop thread:            SendBatch(c0) SendBatch(c1) SendBatch(c2) ...   (<= 8 at once)

A blob without a named queue goes to the next writable queue of its topic
(round robin over every broker's queues, from the nameserver's route, as the
producer picks); one whose call fails in a way another broker may not goes to
the next queue (its QUEUEID patched), up to :data:`SEND_ATTEMPTS` times.

Exactly once (``idempotent``, the default): the task is a named idempotent
producer (``identity``: write, batch and partition, made by :mod:`.sink`). It
asks each broker it writes to for the identity's producer id once
(``InitProducerId``: a retried attempt of the task gets the next epoch, which
fences an attempt still running), picks queues in a fixed order (the write
queues sorted, the round robin starting at the partition id) and numbers the
records of each queue from 0, so the same rows get the same queues and
sequences in every attempt. A record the broker already stored is answered as
a duplicate and not stored again. A blob never moves to another queue: while
its outcome is unknown, or the broker asks for it again later (busy, an
earlier sequence still on its way), it is sent again, to the same queue, until
``sendTimeoutMs``.
"""

from __future__ import annotations

import asyncio
import calendar
import ipaddress
import logging
import os
import struct
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from pocketmq.client import (
    COMPRESS_OVER_BYTES,
    DEFAULT_MAX_BODY_BYTES,
    RETRY_GROUP_TOPIC_PREFIX,
    BrokerClient,
    BusyError,
    ClientError,
    InvalidRequestError,
    MessageQueue,
    PermissionDeniedError,
    RouteNotFoundError,
    RouteService,
    SendTimeoutError,
    back_off,
    frame_records,
    local_ip,
    outcome_unknown,
    try_again_here,
)
from pocketmq.common.message import pack_host
from pocketmq.common.validation import check_topic
from pocketmq.spark import arrowcodec
from pocketmq.spark.arrowcodec import EncodeSettings, SinkArrays
from pocketmq.spark.errors import ColumnError
from pocketmq.spark.options import SinkOptions
from pocketmq.spark.remote import freeze_worker_heap, remoting, run, submit

__all__ = ["MAX_CHUNK_BODY_BYTES", "MAX_IN_FLIGHT", "Columns", "SendTotals", "send_arrow"]

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 8  # SendBatch calls of one task at a time
MAX_CHUNK_BODY_BYTES = 2 * 1024 * 1024  # under the broker's 4 MiB max_batch_size_bytes
SEND_ATTEMPTS = 3
BUSY_BACKOFF_S = 0.05

_Named = tuple[str | None, int]  # (broker or None, queue id) named by the columns


@dataclass(frozen=True, slots=True)
class Columns:
    """The DataFrame's column names for each role (None: absent); see :mod:`.sink`."""

    body: str
    topic: str | None = None
    tags: str | None = None
    keys: str | None = None
    properties: str | None = None
    queue_id: str | None = None
    broker: str | None = None


@dataclass
class SendTotals:
    messages: int = 0
    body_bytes: int = 0
    calls: int = 0


class UniqueIds:
    """``UNIQ_KEY`` prefixes as the SDK's ``UniqueIdGenerator`` makes them: 20 hex digits
    of IP, pid and a random, 8 of ms since the month began; the encoder adds 4 of a
    counter."""

    def __init__(self, ip: str) -> None:
        try:
            ip_raw = ipaddress.ip_address(ip).packed[-4:]
        except ValueError:
            ip_raw = b"\x7f\0\0\1"
        self._hex = (
            (
                ip_raw
                + struct.pack(">HI", os.getpid() & 0xFFFF, int.from_bytes(os.urandom(4), "big"))
            )
            .hex()
            .upper()
        )
        self.counter = int.from_bytes(os.urandom(2), "big")

    def prefix(self) -> str:
        now = time.time()
        t = time.gmtime(now)
        month_start = calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0))
        return f"{self._hex}{int((now - month_start) * 1000) & 0xFFFFFFFF:08X}"


def _retry_elsewhere(exc: ClientError) -> bool:
    """As the producer decides: another broker may take what this one refused."""
    return (
        exc.retriable
        or isinstance(exc, PermissionDeniedError)
        or (isinstance(exc, InvalidRequestError) and exc.reason == "QUEUE_OUT_OF_RANGE")
    )


class ArrowSender:
    """One task's routes, ids and SendBatch calls in flight."""

    def __init__(
        self, opts: SinkOptions, cols: Columns, *, identity: str | None = None, first_queue: int = 0
    ) -> None:
        self.opts, self.cols = opts, cols
        self.identity = identity  # None: not idempotent
        self.first_queue = first_queue  # where each topic's round robin starts
        self.sessions: dict[str, tuple[int, int]] = {}  # broker -> (pid, epoch)
        self.next_seq: dict[MessageQueue, int] = {}
        self.remoting = remoting(opts.credentials)
        self.routes = RouteService(self.remoting.nameserver(list(opts.namesrv)).get_route)
        ip = local_ip()
        self.ids = UniqueIds(ip)
        self.born_host = pack_host((ip, 0))
        self.request_tail = BrokerClient.send_batch_tail(opts.producer_group)
        self.in_flight: deque[tuple[Future[int], int]] = deque()
        self.totals = SendTotals()
        self._queues: dict[str, list[MessageQueue]] = {}
        self._next: dict[str, int] = {}
        self._checked: set[str] = set()

    # -- queues ---------------------------------------------------------------------------
    def queues(self, topic: str) -> list[MessageQueue]:
        found = self._queues.get(topic)
        if found is None:
            found = self._queues[topic] = sorted(run(self.routes.write_queues(topic)))
        return found

    def session(self, queue: MessageQueue) -> tuple[int, int]:
        """(producer id, epoch) of this task's identity on the queue's broker."""
        found = self.sessions.get(queue.broker_name)
        if found is None:
            assert self.identity is not None
            addr = self.routes.addr_of(queue.broker_name)
            if addr is None:
                raise RouteNotFoundError(
                    queue.topic, f"broker {queue.broker_name} has no known address"
                )
            pid, epoch = run(self._init_producer_id(addr, queue.topic))
            found = self.sessions[queue.broker_name] = (pid, epoch)
            log.info(
                "pocketmq sink: %s is producer id %d epoch %d on %s",
                self.identity,
                pid,
                epoch,
                queue.broker_name,
            )
        return found

    async def _init_producer_id(self, addr: str, topic: str) -> tuple[int, int]:
        assert self.identity is not None  # the channel is made here, on the loop thread
        pid, epoch, _seqs = await self.remoting.broker(addr).init_producer_id(
            identity=self.identity,
            topics=[topic],
            producer_group=self.opts.producer_group,
            timeout_s=self.opts.send_timeout_ms / 1000,
        )
        return pid, epoch

    def round_robin(self, topic: str) -> MessageQueue:
        queues = self.queues(topic)
        i = self._next.get(topic, self.first_queue)
        self._next[topic] = i + 1
        return queues[i % len(queues)]

    def named_queue(self, topic: str, broker: str | None, qid: int) -> MessageQueue:
        """The queue columns broker and queue_id name, checked against the writable ones."""
        queues = self.queues(topic)
        if broker is None:
            brokers = sorted({q.broker_name for q in queues})
            if len(brokers) != 1:
                raise ColumnError(
                    f"queue_id {qid} of topic {topic!r} is ambiguous: brokers "
                    f"{', '.join(brokers)} serve it; add a string column 'broker'"
                )
            broker = brokers[0]
        queue = MessageQueue(topic, broker, qid)
        if queue not in queues:
            raise ColumnError(
                f"columns broker and queue_id name {queue}, which is not a "
                f"writable queue of {topic!r} (writable: "
                f"{', '.join(map(str, queues))})"
            )
        return queue

    def check_topic(self, topic: str) -> None:
        if topic in self._checked:
            return
        problem = check_topic(topic)
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            problem = f"topic {topic!r} is a consumer group's retry topic"
        if problem:
            raise ColumnError(f"cannot send to topic {topic!r}: {problem}")
        self._checked.add(topic)

    # -- sending --------------------------------------------------------------------------
    async def _send_blob(
        self, addr: str, queue: MessageQueue, blob: bytes, rows: int, timeout_s: float
    ) -> int:
        """One SendBatch of *blob* (*rows* records, all for *queue*): the number stored.

        The request is the blob framed as a ``SendBatchRequest``'s bytes (no protobuf
        message built, one copy less) asking ``omit_sent_columns``: the broker then
        answers without a UNIQ_KEY and queue id per record, which the sink never
        reads (building and parsing them cost the broker 0.5-0.6 us a row and this
        task about 0.5, A/B on 1 KiB rows); the empty ids stand in for them, one per
        record sent."""
        results = await self.remoting.broker(addr).send_batch_request(
            frame_records(blob, self.request_tail),
            queue,
            msg_ids=[""] * rows,
            timeout_s=timeout_s,
        )
        return len(results)

    async def _send_stamped(self, queue: MessageQueue, blob: bytes, rows: int) -> int:
        """The same records to the same queue until stored (or answered as duplicates)."""
        timeout_s = self.opts.send_timeout_ms / 1000
        deadline = time.monotonic() + timeout_s
        tries = 0
        while True:
            addr = self.routes.addr_of(queue.broker_name)
            try:
                if addr is None:
                    raise RouteNotFoundError(
                        queue.topic, f"broker {queue.broker_name} has no known address"
                    )
                return await self._send_blob(
                    addr,
                    queue,
                    blob,
                    rows,
                    max(0.001, min(timeout_s, deadline - time.monotonic())),
                )
            except ClientError as exc:
                if not (
                    outcome_unknown(exc)
                    or try_again_here(exc)
                    or isinstance(exc, BusyError | RouteNotFoundError)
                ):
                    raise
                tries += 1
                log.debug(
                    "SendBatch to %s: %s; the same records again (try %d)", queue, exc, tries + 1
                )
                if isinstance(exc, RouteNotFoundError):
                    self.routes.invalidate(queue.topic)
                    await self.routes.write_queues(queue.topic)
                if not await back_off(tries, deadline):
                    raise SendTimeoutError(
                        f"SendBatch to {queue} got no answer storing its records within "
                        f"{self.opts.send_timeout_ms} ms (sendTimeoutMs) after {tries} tries; "
                        f"last error: {exc}"
                    ) from exc

    async def _send(self, queue: MessageQueue, blob: bytes, rows: int, named: bool) -> int:
        if self.identity is not None:
            return await self._send_stamped(queue, blob, rows)
        opts = self.opts
        for attempt in range(1, SEND_ATTEMPTS + 1):
            addr = self.routes.addr_of(queue.broker_name)
            try:
                if addr is None:
                    raise RouteNotFoundError(
                        queue.topic, f"broker {queue.broker_name} has no known address"
                    )
                return await self._send_blob(addr, queue, blob, rows, opts.send_timeout_ms / 1000)
            except ClientError as exc:
                if attempt == SEND_ATTEMPTS or not (
                    _retry_elsewhere(exc) or isinstance(exc, BusyError)
                ):
                    raise
                log.warning(
                    "SendBatch to %s failed (attempt %d of %d): %s",
                    queue,
                    attempt,
                    SEND_ATTEMPTS,
                    exc,
                )
                if isinstance(exc, BusyError):
                    await asyncio.sleep(BUSY_BACKOFF_S * attempt)
                elif not named:  # another queue, on another broker if there is one
                    self.routes.invalidate(queue.topic)
                    queues = [
                        q
                        for q in await self.routes.write_queues(queue.topic)
                        if q.broker_name != queue.broker_name
                    ] or [queue]
                    queue = queues[attempt % len(queues)]
                    blob = arrowcodec.set_queue_id(blob, queue.queue_id)
        raise AssertionError("unreachable")

    def send(
        self, queue: MessageQueue, blob: bytes, rows: int, body_bytes: int, named: bool
    ) -> None:
        self.in_flight.append((submit(self._send(queue, blob, rows, named)), rows))
        self.totals.calls += 1
        self.totals.body_bytes += body_bytes
        while len(self.in_flight) >= MAX_IN_FLIGHT:
            self.totals.messages += self.in_flight.popleft()[0].result()

    def finish(self) -> SendTotals:
        while self.in_flight:
            self.totals.messages += self.in_flight.popleft()[0].result()
        return self.totals

    def close(self) -> None:
        for future, _rows in self.in_flight:
            future.cancel()

    # -- a batch --------------------------------------------------------------------------
    def write(self, batch: pa.RecordBatch) -> None:
        for topic, named, part in _targets(batch, self.cols, self.opts):
            self.check_topic(topic)
            self._write_part(topic, named, part)

    def _write_part(self, topic: str, named: _Named | None, part: pa.RecordBatch) -> None:
        cols = self.cols
        queue = self.named_queue(topic, *named) if named is not None else None
        body = part.column(cols.body)
        if not (pa.types.is_binary(body.type) or pa.types.is_string(body.type)):
            body = body.cast(pa.binary())
        arrays = SinkArrays(
            body=body,
            tags=part.column(cols.tags) if cols.tags else None,
            keys=part.column(cols.keys) if cols.keys else None,
            properties=part.column(cols.properties) if cols.properties else None,
        )
        picked: list[MessageQueue] = []

        def next_queue_id() -> int:
            picked.append(queue if queue is not None else self.round_robin(topic))
            return picked[-1].queue_id

        def next_stamped_queue(previous_rows: int) -> tuple[int, int, int, int]:
            if picked:
                self.next_seq[picked[-1]] += previous_rows
            target = queue if queue is not None else self.round_robin(topic)
            picked.append(target)
            pid, epoch = self.session(target)
            return target.queue_id, pid, epoch, self.next_seq.setdefault(target, 0)

        settings = EncodeSettings(
            topic=topic,
            born_host=self.born_host,
            born_timestamp_ms=int(time.time() * 1000),
            id_prefix=self.ids.prefix(),
            compress_over_bytes=COMPRESS_OVER_BYTES,
            max_body_bytes=DEFAULT_MAX_BODY_BYTES,
            chunk_rows=self.opts.send_batch_size,
            chunk_body_bytes=MAX_CHUNK_BODY_BYTES,
            stamped=self.identity is not None,
        )
        try:
            chunks, self.ids.counter = arrowcodec.encode_chunks(
                arrays,
                0,
                part.num_rows,
                settings,
                self.ids.counter,
                next_stamped_queue if settings.stamped else next_queue_id,
            )
        except ValueError as exc:
            raise ColumnError(f"cannot send a row of this batch: {exc}") from None
        if settings.stamped and chunks:
            self.next_seq[picked[-1]] += chunks[-1][1]
        sizes = _chunk_body_bytes(body, [rows for _blob, rows in chunks])
        for (blob, rows), target, nbytes in zip(chunks, picked, sizes, strict=True):
            self.send(target, blob, rows, nbytes, queue is not None)


def _chunk_body_bytes(body: pa.Array, rows: list[int]) -> list[int]:
    lengths = pc.binary_length(body)
    out, start = [], 0
    for n in rows:
        out.append(pc.sum(lengths.slice(start, n)).as_py() or 0)
        start += n
    return out


def _targets(
    batch: pa.RecordBatch,
    cols: Columns,
    opts: SinkOptions,
) -> Iterator[tuple[str, _Named | None, pa.RecordBatch]]:
    """(topic, (broker, queue id) or None, rows) for each target of *batch*."""
    by_topic = opts.topic is None
    if by_topic and cols.topic is not None:
        nulls = batch.column(cols.topic).null_count
        if nulls:
            first = pc.index(pc.is_null(batch.column(cols.topic)), True).as_py()
            raise ColumnError(
                f"column {cols.topic!r} is null in row {first} of a batch and "
                "the option topic is not set"
            )
    keys = ([cols.topic] if by_topic and cols.topic else []) + (
        [cols.queue_id] + ([cols.broker] if cols.broker else []) if cols.queue_id else []
    )
    if not keys:
        assert opts.topic is not None
        yield opts.topic, None, batch
        return
    table = pa.Table.from_batches([batch])
    combos = table.group_by(keys, use_threads=False).aggregate([]).to_pylist()
    for combo in combos:
        mask = None
        for name in keys:
            value = combo[name]
            column = batch.column(name)
            test = (
                pc.is_null(column)
                if value is None
                else pc.fill_null(pc.equal(column, pa.scalar(value, column.type)), False)
            )
            mask = test if mask is None else pc.and_(mask, test)
        part = batch if len(combos) == 1 else batch.filter(mask)
        topic = combo[cols.topic] if by_topic and cols.topic else opts.topic
        assert topic is not None
        qid = combo.get(cols.queue_id) if cols.queue_id else None
        named = None if qid is None else (combo.get(cols.broker) if cols.broker else None, int(qid))
        yield topic, named, part


def send_arrow(
    batches: Iterator[pa.RecordBatch],
    cols: Columns,
    opts: SinkOptions,
    *,
    identity: str | None = None,
    first_queue: int = 0,
) -> SendTotals:
    """Send every row of *batches*; the body of a writer's ``write()``. With an
    *identity*, as the named idempotent producer of that name (exactly once)."""
    freeze_worker_heap()
    sender = ArrowSender(opts, cols, identity=identity, first_queue=first_queue)
    try:
        for batch in batches:
            if batch.num_rows:
                sender.write(batch)
        return sender.finish()
    finally:
        sender.close()
