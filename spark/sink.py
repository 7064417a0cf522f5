"""The ``pocketmq`` sink: ``df.write`` / ``df.writeStream`` ``.format("pocketmq")``.

Columns of the DataFrame (matched by name, case-insensitively; others ignored)::

    column       type                     meaning                        Kafka sink
    -----------  -----------------------  -----------------------------  ----------
    body|value   BINARY or STRING         the message body (required;    value
                                          a string is sent as UTF-8)
    topic        STRING                   the topic, unless the option   topic
                                          ``topic`` is set (it wins)
    tags         STRING                   the message's tag              (none)
    keys         ARRAY<STRING> or STRING  keys (indexed by the broker)   key
    properties   MAP<STRING,STRING>       user properties                headers
    queue_id     INT (any integer)        the queue; null: the producer  partition
                                          picks one
    broker       STRING                   the broker of ``queue_id``;    (none)
                                          needed when several brokers
                                          serve the topic

Each Spark task owns one :class:`~pocketmq.client.producer.Producer` and hands
it the rows in chunks of ``sendBatchSize`` messages (each chunk one SendBatch
call, to one queue: the one named, or the next in the producer's round robin
over every broker's queues), up to :data:`MAX_IN_FLIGHT` chunks at a time. A
task reports what it sent in a :class:`SendCommitMessage`; the driver logs the
totals of each write or micro-batch. Like the Kafka sink, it is at-least-once:
a task Spark retries sends its rows again.

Only ``mode("append")`` is accepted for a batch write (Spark refuses the
default ``errorifexists`` for Python data sources; ``overwrite`` cannot
replace what a topic holds).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

from pocketmq.client.model import Message, MessageQueue, SendResult
from pocketmq.client.producer import Producer
from pocketmq.spark.errors import ColumnError, OptionError
from pocketmq.spark.options import SinkOptions
from pocketmq.spark.remote import run, submit

__all__ = ["PocketMQStreamWriter", "PocketMQWriter", "SendCommitMessage", "SinkColumns",
           "sink_columns"]

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 4                   # SendBatch calls of one task at a time
MAX_CHUNK_BODY_BYTES = 2 * 1024 * 1024  # under the broker's 4 MiB max_batch_size_bytes

_INTEGERS = (ByteType, ShortType, IntegerType, LongType)


@dataclass(frozen=True, slots=True)
class SinkColumns:
    """Which columns the input has, by their names in the DataFrame (None: absent)."""

    body: str
    topic: str | None = None
    tags: str | None = None
    keys: str | None = None
    properties: str | None = None
    queue_id: str | None = None
    broker: str | None = None


def _type_name(dtype: DataType) -> str:
    return dtype.simpleString()


def sink_columns(schema: StructType, opts: SinkOptions) -> SinkColumns:
    """Check the DataFrame's columns on the driver; a :class:`ColumnError` names the culprit."""
    fields = {f.name.lower(): f for f in schema.fields}

    def column(name: str, allowed: tuple[type, ...], wanted: str) -> str | None:
        f = fields.get(name)
        if f is None:
            return None
        if not isinstance(f.dataType, allowed):
            raise ColumnError(f"column {f.name!r} is {_type_name(f.dataType)}; the pocketmq "
                              f"sink needs {wanted}")
        return f.name

    bodies = [n for n in ("body", "value") if n in fields]
    if not bodies:
        raise ColumnError(f"the pocketmq sink needs a column 'body' (or 'value'), binary or "
                          f"string; the DataFrame has {', '.join(schema.names) or 'no columns'}")
    if len(bodies) == 2:
        raise ColumnError("the DataFrame has both 'body' and 'value'; give one of them as the "
                          "message body (drop or rename the other)")
    body = column(bodies[0], (BinaryType, StringType), "binary or string")
    assert body is not None
    topic = column("topic", (StringType,), "string")
    if topic is None and opts.topic is None:
        raise ColumnError("no topic to send to: add a string column 'topic' or set the option "
                          "topic")
    keys = fields.get("keys")
    if keys is not None and not (isinstance(keys.dataType, StringType) or (
            isinstance(keys.dataType, ArrayType)
            and isinstance(keys.dataType.elementType, StringType))):
        raise ColumnError(f"column {keys.name!r} is {_type_name(keys.dataType)}; the pocketmq "
                          "sink needs array<string> or string")
    props = fields.get("properties")
    if props is not None and not (isinstance(props.dataType, MapType)
                                  and isinstance(props.dataType.keyType, StringType)
                                  and isinstance(props.dataType.valueType, StringType)):
        raise ColumnError(f"column {props.name!r} is {_type_name(props.dataType)}; the "
                          "pocketmq sink needs map<string,string>")
    out = SinkColumns(
        body=body, topic=topic, tags=column("tags", (StringType,), "string"),
        keys=keys.name if keys is not None else None,
        properties=props.name if props is not None else None,
        queue_id=column("queue_id", _INTEGERS, "an integer type"),
        broker=column("broker", (StringType,), "string"))
    if out.broker is not None and out.queue_id is None:
        raise ColumnError("column 'broker' names where column 'queue_id' is; without "
                          "'queue_id' it means nothing (drop it or add 'queue_id')")
    return out


@dataclass
class SendCommitMessage(WriterCommitMessage):
    """What one task sent."""

    messages: int
    body_bytes: int
    send_calls: int


# -- the task side ----------------------------------------------------------------------------
_Target = tuple[str, str | None, int | None]   # topic, broker, queue id (None: any)


def _column(batch: pa.RecordBatch, name: str | None) -> list | None:  # type: ignore[type-arg]
    return None if name is None else batch.column(name).to_pylist()


def _rows(batch: pa.RecordBatch, cols: SinkColumns,
          opts: SinkOptions) -> Iterator[tuple[_Target, Message]]:
    n = batch.num_rows
    bodies = batch.column(cols.body).to_pylist()
    topics = [opts.topic] * n if opts.topic is not None else _column(batch, cols.topic)
    assert topics is not None
    tags = _column(batch, cols.tags) or [None] * n
    keys = _column(batch, cols.keys) or [None] * n
    props = _column(batch, cols.properties) or [None] * n
    queue_ids = _column(batch, cols.queue_id) or [None] * n
    brokers = _column(batch, cols.broker) or [None] * n
    for i in range(n):
        body, topic = bodies[i], topics[i]
        if body is None:
            raise ColumnError(f"column {cols.body!r} is null in row {i} of a batch; every "
                              "message needs a body")
        if topic is None:
            raise ColumnError(f"column {cols.topic!r} is null in row {i} of a batch and the "
                              "option topic is not set")
        key = keys[i]
        message = Message(
            topic=topic, body=body.encode() if isinstance(body, str) else body,
            tags=tags[i] or "",
            keys=() if key is None else (key.split(" ") if isinstance(key, str) else key),
            properties=dict(props[i]) if props[i] else {})
        qid = queue_ids[i]
        yield (topic, brokers[i] if qid is not None else None, qid), message


class _TaskSender:
    """One task's producer and its chunks in flight."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts
        self.producer: Producer = run(self._start())
        self.in_flight: deque[Future[list[SendResult]]] = deque()
        self.sent = self.body_bytes = self.calls = 0
        self._queues: dict[str, list[MessageQueue]] = {}

    async def _start(self) -> Producer:
        opts = self.opts
        access_key, secret_key = opts.credentials or ("", "")
        producer = Producer(group=opts.producer_group, namesrv=list(opts.namesrv),
                            send_timeout_ms=opts.send_timeout_ms, access_key=access_key,
                            secret_key=secret_key)
        await producer.start()
        return producer

    def _queue(self, target: _Target) -> MessageQueue | None:
        """The queue *target* names, checked against the topic's writable queues."""
        topic, broker, qid = target
        if qid is None:
            return None
        queues = self._queues.get(topic)
        if queues is None:   # also teaches the producer the brokers' addresses
            queues = self._queues[topic] = run(self.producer.fetch_publish_queues(topic))
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

    def send(self, target: _Target, chunk: list[Message]) -> None:
        self.in_flight.append(submit(self.producer.send_batch(chunk,
                                                              queue=self._queue(target))))
        self.calls += 1
        self.body_bytes += sum(len(m.body) for m in chunk)
        while len(self.in_flight) >= MAX_IN_FLIGHT:
            self.sent += len(self.in_flight.popleft().result())

    def finish(self) -> SendCommitMessage:
        while self.in_flight:
            self.sent += len(self.in_flight.popleft().result())
        return SendCommitMessage(self.sent, self.body_bytes, self.calls)

    def close(self) -> None:
        for future in self.in_flight:
            future.cancel()
        run(self.producer.shutdown())


def send_batches(batches: Iterator[pa.RecordBatch], cols: SinkColumns,
                 opts: SinkOptions) -> SendCommitMessage:
    """Send every row of *batches*; the body of a writer's ``write()``."""
    sender = _TaskSender(opts)
    try:
        chunks: dict[_Target, list[Message]] = {}
        sizes: dict[_Target, int] = {}
        for batch in batches:
            for target, message in _rows(batch, cols, opts):
                chunk = chunks.setdefault(target, [])
                chunk.append(message)
                sizes[target] = sizes.get(target, 0) + len(message.body)
                if len(chunk) >= opts.send_batch_size or sizes[target] >= MAX_CHUNK_BODY_BYTES:
                    sender.send(target, chunks.pop(target))
                    sizes.pop(target)
        for target, chunk in chunks.items():
            sender.send(target, chunk)
        return sender.finish()
    finally:
        sender.close()


def _totals(messages: Sequence[WriterCommitMessage | None]) -> tuple[int, int, int, int]:
    done = [m for m in messages if isinstance(m, SendCommitMessage)]
    return (len(done), sum(m.messages for m in done), sum(m.body_bytes for m in done),
            sum(m.send_calls for m in done))


# -- the driver side --------------------------------------------------------------------------
class PocketMQWriter(DataSourceArrowWriter):
    """``df.write.format("pocketmq").mode("append").save()``."""

    def __init__(self, opts: SinkOptions, cols: SinkColumns, overwrite: bool) -> None:
        if overwrite:
            raise OptionError("mode('overwrite') cannot replace the messages of a topic; a "
                              "topic is append-only: use mode('append')")
        self._opts = opts
        self._cols = cols

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SendCommitMessage:
        return send_batches(iterator, self._cols, self._opts)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        tasks, sent, nbytes, calls = _totals(messages)
        log.info("pocketmq sink: %d task(s) sent %d messages (%d body bytes) in %d SendBatch "
                 "calls", tasks, sent, nbytes, calls)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        tasks, sent, _nbytes, _calls = _totals(messages)
        log.warning("pocketmq sink: the write failed; %d task(s) had sent %d messages, which "
                    "stay in their topics (at-least-once)", tasks, sent)


class PocketMQStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("pocketmq")``: each micro-batch is sent as a batch write is."""

    def __init__(self, opts: SinkOptions, cols: SinkColumns) -> None:
        self._opts = opts
        self._cols = cols

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SendCommitMessage:
        return send_batches(iterator, self._cols, self._opts)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        tasks, sent, nbytes, calls = _totals(messages)
        log.info("pocketmq sink: batch %d: %d task(s) sent %d messages (%d body bytes) in %d "
                 "SendBatch calls", batchId, tasks, sent, nbytes, calls)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        tasks, sent, _nbytes, _calls = _totals(messages)
        log.warning("pocketmq sink: batch %d failed; %d task(s) had sent %d messages, which "
                    "stay in their topics (at-least-once)", batchId, tasks, sent)
