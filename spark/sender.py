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

from pocketmq.client.errors import (
    BusyError,
    ClientError,
    InvalidRequestError,
    PermissionDeniedError,
    RouteNotFoundError,
)
from pocketmq.client.heartbeat import local_ip
from pocketmq.client.message_codec import COMPRESS_OVER_BYTES, DEFAULT_MAX_BODY_BYTES
from pocketmq.client.model import RETRY_GROUP_TOPIC_PREFIX, MessageQueue
from pocketmq.client.route import RouteService
from pocketmq.common.message import pack_host
from pocketmq.common.validation import check_topic
from pocketmq.spark import arrowcodec
from pocketmq.spark.arrowcodec import EncodeSettings, SinkArrays
from pocketmq.spark.errors import ColumnError
from pocketmq.spark.options import SinkOptions
from pocketmq.spark.remote import remoting, run, submit

__all__ = ["MAX_CHUNK_BODY_BYTES", "MAX_IN_FLIGHT", "Columns", "SendTotals", "send_arrow"]

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 8                       # SendBatch calls of one task at a time
MAX_CHUNK_BODY_BYTES = 2 * 1024 * 1024  # under the broker's 4 MiB max_batch_size_bytes
SEND_ATTEMPTS = 3
BUSY_BACKOFF_S = 0.05

_Named = tuple[str | None, int]     # (broker or None, queue id) named by the columns


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
        self._hex = (ip_raw + struct.pack(">HI", os.getpid() & 0xFFFF,
                                          int.from_bytes(os.urandom(4), "big"))).hex().upper()
        self.counter = int.from_bytes(os.urandom(2), "big")

    def prefix(self) -> str:
        now = time.time()
        t = time.gmtime(now)
        month_start = calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0))
        return f"{self._hex}{int((now - month_start) * 1000) & 0xFFFFFFFF:08X}"


def _retry_elsewhere(exc: ClientError) -> bool:
    """As the producer decides: another broker may take what this one refused."""
    return (exc.retriable or isinstance(exc, PermissionDeniedError)
            or (isinstance(exc, InvalidRequestError) and exc.reason == "QUEUE_OUT_OF_RANGE"))


class ArrowSender:
    """One task's routes, ids and SendBatch calls in flight."""

    def __init__(self, opts: SinkOptions, cols: Columns) -> None:
        self.opts, self.cols = opts, cols
        self.remoting = remoting(opts.credentials)
        self.routes = RouteService(self.remoting.nameserver(list(opts.namesrv)).get_route)
        ip = local_ip()
        self.ids = UniqueIds(ip)
        self.born_host = pack_host((ip, 0))
        self.in_flight: deque[tuple[Future[int], int]] = deque()
        self.totals = SendTotals()
        self._queues: dict[str, list[MessageQueue]] = {}
        self._next: dict[str, int] = {}
        self._checked: set[str] = set()

    # -- queues ---------------------------------------------------------------------------
    def queues(self, topic: str) -> list[MessageQueue]:
        found = self._queues.get(topic)
        if found is None:
            found = self._queues[topic] = run(self.routes.write_queues(topic))
        return found

    def round_robin(self, topic: str) -> MessageQueue:
        queues = self.queues(topic)
        i = self._next.get(topic, 0)
        self._next[topic] = i + 1
        return queues[i % len(queues)]

    def named_queue(self, topic: str, broker: str | None, qid: int) -> MessageQueue:
        """The queue columns broker and queue_id name, checked against the writable ones."""
        queues = self.queues(topic)
        if broker is None:
            brokers = sorted({q.broker_name for q in queues})
            if len(brokers) != 1:
                raise ColumnError(f"queue_id {qid} of topic {topic!r} is ambiguous: brokers "
                                  f"{', '.join(brokers)} serve it; add a string column 'broker'")
            broker = brokers[0]
        queue = MessageQueue(topic, broker, qid)
        if queue not in queues:
            raise ColumnError(f"columns broker and queue_id name {queue}, which is not a "
                              f"writable queue of {topic!r} (writable: "
                              f"{', '.join(map(str, queues))})")
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
    async def _send(self, queue: MessageQueue, blob: bytes, named: bool) -> int:
        opts = self.opts
        for attempt in range(1, SEND_ATTEMPTS + 1):
            addr = self.routes.addr_of(queue.broker_name)
            try:
                if addr is None:
                    raise RouteNotFoundError(queue.topic, f"broker {queue.broker_name} has no "
                                             "known address")
                results = await self.remoting.broker(addr).send_batch_to(
                    blob, queue, producer_group=opts.producer_group,
                    timeout_s=opts.send_timeout_ms / 1000)
                return len(results)
            except ClientError as exc:
                if attempt == SEND_ATTEMPTS or not (_retry_elsewhere(exc)
                                                    or isinstance(exc, BusyError)):
                    raise
                log.warning("SendBatch to %s failed (attempt %d of %d): %s", queue, attempt,
                            SEND_ATTEMPTS, exc)
                if isinstance(exc, BusyError):
                    await asyncio.sleep(BUSY_BACKOFF_S * attempt)
                elif not named:            # another queue, on another broker if there is one
                    self.routes.invalidate(queue.topic)
                    queues = [q for q in await self.routes.write_queues(queue.topic)
                              if q.broker_name != queue.broker_name] or [queue]
                    queue = queues[attempt % len(queues)]
                    blob = arrowcodec.set_queue_id(blob, queue.queue_id)
        raise AssertionError("unreachable")

    def send(self, queue: MessageQueue, blob: bytes, rows: int, body_bytes: int,
             named: bool) -> None:
        self.in_flight.append((submit(self._send(queue, blob, named)), rows))
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
            properties=part.column(cols.properties) if cols.properties else None)
        picked: list[MessageQueue] = []

        def next_queue_id() -> int:
            picked.append(queue if queue is not None else self.round_robin(topic))
            return picked[-1].queue_id

        settings = EncodeSettings(
            topic=topic, born_host=self.born_host, born_timestamp_ms=int(time.time() * 1000),
            id_prefix=self.ids.prefix(), compress_over_bytes=COMPRESS_OVER_BYTES,
            max_body_bytes=DEFAULT_MAX_BODY_BYTES, chunk_rows=self.opts.send_batch_size,
            chunk_body_bytes=MAX_CHUNK_BODY_BYTES)
        try:
            chunks, self.ids.counter = arrowcodec.encode_chunks(
                arrays, 0, part.num_rows, settings, self.ids.counter, next_queue_id)
        except ValueError as exc:
            raise ColumnError(f"cannot send a row of this batch: {exc}") from None
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


def _targets(batch: pa.RecordBatch, cols: Columns, opts: SinkOptions,
             ) -> Iterator[tuple[str, _Named | None, pa.RecordBatch]]:
    """(topic, (broker, queue id) or None, rows) for each target of *batch*."""
    by_topic = opts.topic is None
    if by_topic and cols.topic is not None:
        nulls = batch.column(cols.topic).null_count
        if nulls:
            first = pc.index(pc.is_null(batch.column(cols.topic)), True).as_py()
            raise ColumnError(f"column {cols.topic!r} is null in row {first} of a batch and "
                              "the option topic is not set")
    keys = ([cols.topic] if by_topic and cols.topic else []) + (
        [cols.queue_id] + ([cols.broker] if cols.broker else []) if cols.queue_id else [])
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
            test = pc.is_null(column) if value is None else pc.fill_null(
                pc.equal(column, pa.scalar(value, column.type)), False)
            mask = test if mask is None else pc.and_(mask, test)
        part = batch if len(combos) == 1 else batch.filter(mask)
        topic = combo[cols.topic] if by_topic and cols.topic else opts.topic
        assert topic is not None
        qid = combo.get(cols.queue_id) if cols.queue_id else None
        named = None if qid is None else (combo.get(cols.broker) if cols.broker else None,
                                          int(qid))
        yield topic, named, part


def send_arrow(batches: Iterator[pa.RecordBatch], cols: Columns,
               opts: SinkOptions) -> SendTotals:
    """Send every row of *batches*; the body of a writer's ``write()``."""
    sender = ArrowSender(opts, cols)
    try:
        for batch in batches:
            if batch.num_rows:
                sender.write(batch)
        return sender.finish()
    finally:
        sender.close()
