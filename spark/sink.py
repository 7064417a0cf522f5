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

Each Spark task encodes its Arrow batches straight into SendBatch blobs of
``sendBatchSize`` messages (compiled, no Python object per row; each blob to
one queue: the one named, or the next in a round robin over every broker's
queues) and keeps several calls in flight (:mod:`.sender` draws it). A task
reports what it sent in a :class:`SendCommitMessage`; the driver logs the
totals of each write or micro-batch.

Exactly once (option ``idempotent``, on by default): each task writes as the
named idempotent producer :func:`task_identity` (``spark/<write>/<batch>/
<partition>``), where *write* is the streaming query's id (stable across
restarts from the checkpoint) or, for a batch write, the option ``writeId`` or
an id the driver makes per job; *batch* is the micro-batch id (0 for a batch
write). Rows go to queues and get sequence numbers deterministically, so a
retried task, or a micro-batch re-run after a restart, sends the same records
under the same identity and the brokers store none of them twice (README,
"Spark": what exactly is guaranteed). ``idempotent=false`` is the Kafka sink's
at-least-once.

Only ``mode("append")`` is accepted for a batch write (Spark refuses the
default ``errorifexists`` for Python data sources; ``overwrite`` cannot
replace what a topic holds).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TypeAlias

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
    StructField,
    StructType,
)

from pocketmq.spark.errors import ColumnError, OptionError
from pocketmq.spark.options import SinkOptions
from pocketmq.spark.sender import Columns, send_arrow

#: Local properties Spark's MicroBatchExecution sets for the tasks of a micro-batch.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"

__all__ = [
    "PocketMQStreamWriter",
    "PocketMQWriter",
    "SendCommitMessage",
    "SinkColumns",
    "send_batches",
    "sink_columns",
    "task_identity",
]

log = logging.getLogger(__name__)

_INTEGERS = (ByteType, ShortType, IntegerType, LongType)


#: Which columns the input has, by their names in the DataFrame (None: absent).
SinkColumns: TypeAlias = Columns


def _type_name(dtype: DataType) -> str:
    return dtype.simpleString()


def sink_columns(schema: StructType, opts: SinkOptions) -> SinkColumns:
    """Check the DataFrame's columns on the driver; a :class:`ColumnError` names the culprit."""
    fields = {f.name.lower(): f for f in schema.fields}
    body = _body_column(fields, schema)
    topic = _typed_column(fields, "topic", (StringType,), "string")
    if topic is None and opts.topic is None:
        raise ColumnError(
            "no topic to send to: add a string column 'topic' or set the option topic"
        )
    keys = _keys_column(fields)
    props = _properties_column(fields)
    out = SinkColumns(
        body=body,
        topic=topic,
        tags=_typed_column(fields, "tags", (StringType,), "string"),
        keys=keys,
        properties=props,
        queue_id=_typed_column(fields, "queue_id", _INTEGERS, "an integer type"),
        broker=_typed_column(fields, "broker", (StringType,), "string"),
    )
    if out.broker is not None and out.queue_id is None:
        raise ColumnError(
            "column 'broker' names where column 'queue_id' is; without "
            "'queue_id' it means nothing (drop it or add 'queue_id')"
        )
    return out


def _typed_column(
    fields: dict[str, StructField], name: str, allowed: tuple[type, ...], wanted: str
) -> str | None:
    """The DataFrame's name of column *name* (None: absent); ColumnError if not *allowed*."""
    f = fields.get(name)
    if f is None:
        return None
    if not isinstance(f.dataType, allowed):
        raise ColumnError(
            f"column {f.name!r} is {_type_name(f.dataType)}; the pocketmq sink needs {wanted}"
        )
    return f.name


def _body_column(fields: dict[str, StructField], schema: StructType) -> str:
    """The one body column, 'body' or 'value', binary or string."""
    bodies = [n for n in ("body", "value") if n in fields]
    if not bodies:
        raise ColumnError(
            f"the pocketmq sink needs a column 'body' (or 'value'), binary or "
            f"string; the DataFrame has {', '.join(schema.names) or 'no columns'}"
        )
    if len(bodies) == 2:
        raise ColumnError(
            "the DataFrame has both 'body' and 'value'; give one of them as the "
            "message body (drop or rename the other)"
        )
    body = _typed_column(fields, bodies[0], (BinaryType, StringType), "binary or string")
    assert body is not None
    return body


def _keys_column(fields: dict[str, StructField]) -> str | None:
    """The 'keys' column's name: array<string> or string (None: absent)."""
    keys = fields.get("keys")
    if keys is not None and not (
        isinstance(keys.dataType, StringType)
        or (
            isinstance(keys.dataType, ArrayType)
            and isinstance(keys.dataType.elementType, StringType)
        )
    ):
        raise ColumnError(
            f"column {keys.name!r} is {_type_name(keys.dataType)}; the pocketmq "
            "sink needs array<string> or string"
        )
    return keys.name if keys is not None else None


def _properties_column(fields: dict[str, StructField]) -> str | None:
    """The 'properties' column's name: map<string,string> (None: absent)."""
    props = fields.get("properties")
    if props is not None and not (
        isinstance(props.dataType, MapType)
        and isinstance(props.dataType.keyType, StringType)
        and isinstance(props.dataType.valueType, StringType)
    ):
        raise ColumnError(
            f"column {props.name!r} is {_type_name(props.dataType)}; the "
            "pocketmq sink needs map<string,string>"
        )
    return props.name if props is not None else None


@dataclass
class SendCommitMessage(WriterCommitMessage):
    """What one task sent."""

    messages: int
    body_bytes: int
    send_calls: int


# -- the task side ----------------------------------------------------------------------------
def task_identity(write_id: str | None) -> tuple[str | None, int]:
    """(producer identity, partition id) of the running task; identity None when
    *write_id* is None (not idempotent) or outside a Spark task."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return None, 0
    partition = ctx.partitionId()
    if write_id is None:
        return None, partition
    query = ctx.getLocalProperty(QUERY_ID_PROPERTY)
    batch = ctx.getLocalProperty(BATCH_ID_PROPERTY) if query else None
    return f"spark/{query or write_id}/{batch or 0}/{partition}", partition


def _fail_first_attempt(batches: Iterator[pa.RecordBatch], limit: int) -> Iterator[pa.RecordBatch]:
    """Fault injection (option failFirstAttemptAfterRows): the first attempt of a task
    fails once at least *limit* of its rows were handed on to be sent."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None or ctx.attemptNumber() > 0:
        yield from batches
        return
    rows = 0
    for batch in batches:
        if rows >= limit:
            break
        yield batch
        rows += batch.num_rows
    raise RuntimeError(
        f"failFirstAttemptAfterRows: attempt 0 of partition "
        f"{ctx.partitionId()} fails after {rows} rows"
    )


def send_batches(
    batches: Iterator[pa.RecordBatch],
    cols: SinkColumns,
    opts: SinkOptions,
    write_id: str | None = None,
) -> SendCommitMessage:
    """Send every row of *batches*; the body of a writer's ``write()``. *write_id*: the
    write's part of the task's producer identity (None: not idempotent)."""
    identity, partition = task_identity(write_id if opts.idempotent else None)
    if opts.fail_first_attempt_after_rows is not None:
        batches = _fail_first_attempt(batches, opts.fail_first_attempt_after_rows)
    totals = send_arrow(batches, cols, opts, identity=identity, first_queue=partition)
    return SendCommitMessage(totals.messages, totals.body_bytes, totals.calls)


def _totals(messages: Sequence[WriterCommitMessage | None]) -> tuple[int, int, int, int]:
    done = [m for m in messages if isinstance(m, SendCommitMessage)]
    return (
        len(done),
        sum(m.messages for m in done),
        sum(m.body_bytes for m in done),
        sum(m.send_calls for m in done),
    )


# -- the driver side --------------------------------------------------------------------------
class PocketMQWriter(DataSourceArrowWriter):
    """``df.write.format("pocketmq").mode("append").save()``."""

    def __init__(self, opts: SinkOptions, cols: SinkColumns, overwrite: bool) -> None:
        if overwrite:
            raise OptionError(
                "mode('overwrite') cannot replace the messages of a topic; a "
                "topic is append-only: use mode('append')"
            )
        self._opts = opts
        self._cols = cols
        # Made here, on the driver, once per job; every task of the job shares it.
        self._write_id = opts.write_id or f"job-{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SendCommitMessage:
        return send_batches(iterator, self._cols, self._opts, self._write_id)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        tasks, sent, nbytes, calls = _totals(messages)
        log.info(
            "pocketmq sink: %d task(s) sent %d messages (%d body bytes) in %d SendBatch calls",
            tasks,
            sent,
            nbytes,
            calls,
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        tasks, sent, _nbytes, _calls = _totals(messages)
        log.warning(
            "pocketmq sink: the write failed; %d task(s) had sent %d messages, which "
            "stay in their topics",
            tasks,
            sent,
        )


class PocketMQStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("pocketmq")``: each micro-batch is sent as a batch write is."""

    def __init__(self, opts: SinkOptions, cols: SinkColumns) -> None:
        self._opts = opts
        self._cols = cols
        # The query id (a task-local property) names the write; this is the fallback.
        self._write_id = opts.write_id or f"stream-{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SendCommitMessage:
        return send_batches(iterator, self._cols, self._opts, self._write_id)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        tasks, sent, nbytes, calls = _totals(messages)
        log.info(
            "pocketmq sink: batch %d: %d task(s) sent %d messages (%d body bytes) in %d "
            "SendBatch calls",
            batchId,
            tasks,
            sent,
            nbytes,
            calls,
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        tasks, sent, _nbytes, _calls = _totals(messages)
        log.warning(
            "pocketmq sink: batch %d failed; %d task(s) had sent %d messages, which "
            "stay in their topics",
            batchId,
            tasks,
            sent,
        )
