"""The rows both readers yield, and how messages become Arrow record batches.

One schema for the broker source and the store reader, in RocketMQ's words::

    column           Spark type            from MessageExt              Kafka source
    ---------------  --------------------  ---------------------------  ------------------
    topic            STRING                topic                        topic
    broker           STRING                broker_name                  (none)
    queue_id         INT                   queue_id                     partition
    queue_offset     BIGINT                queue_offset                 offset
    body             BINARY                body (inflated)              value
    keys             ARRAY<STRING>         keys                         key (one, binary)
    tags             STRING                tags ('' -> null)            (none)
    properties       MAP<STRING,STRING>    properties less TAGS, KEYS,  headers
                                           UNIQ_KEY (own columns) and
                                           PMQ_IDEM (idempotence stamp)
    store_timestamp  TIMESTAMP             store_timestamp_ms           timestamp
                                                                        (LogAppendTime)
    born_timestamp   TIMESTAMP             born_timestamp_ms            (CreateTime)
    msg_id           STRING                msg_id (UNIQ_KEY)            (none)

Readers yield ``pyarrow.RecordBatch`` values (about twice as fast as tuples
through Spark's Python data source path). Spark accepts a batch only when its
schema equals ``to_arrow_schema(SCHEMA, timezone="UTC")`` exactly: int32 for
INT, ``timestamp[us, tz=UTC]``, plain (not large) binary and string, every
field nullable, in this order; :data:`ARROW_SCHEMA` is that schema and
:func:`record_batch` builds against it.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pocketmq.client import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, MessageExt
from pocketmq.common.message import PROPERTY_IDEMPOTENCE

__all__ = ["ARROW_SCHEMA", "COLUMNS", "SCHEMA", "check_read_schema", "record_batch"]

SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("broker", StringType()),
        StructField("queue_id", IntegerType()),
        StructField("queue_offset", LongType()),
        StructField("body", BinaryType()),
        StructField("keys", ArrayType(StringType())),
        StructField("tags", StringType()),
        StructField("properties", MapType(StringType(), StringType())),
        StructField("store_timestamp", TimestampType()),
        StructField("born_timestamp", TimestampType()),
        StructField("msg_id", StringType()),
    ]
)
COLUMNS = tuple(f.name for f in SCHEMA.fields)
ARROW_SCHEMA: pa.Schema = to_arrow_schema(SCHEMA, timezone="UTC")

_OWN_COLUMN_PROPERTIES = frozenset(
    {PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY, PROPERTY_IDEMPOTENCE}
)  # the last: not the user's
_TYPES = {f.name: f.type for f in ARROW_SCHEMA}
_TIMESTAMP_MS = pa.timestamp("ms", tz="UTC")


def check_read_schema(schema: StructType, fmt: str) -> None:
    """Refuse a user schema (``.schema(...)``) other than the source's own."""
    if schema.simpleString() != SCHEMA.simpleString():
        raise ValueError(
            f"the {fmt} source has a fixed schema; drop .schema(...) or give "
            f"exactly {SCHEMA.simpleString()} (got {schema.simpleString()})"
        )


def _timestamps(values_ms: list[int]) -> pa.Array:
    return pa.array(values_ms, type=_TIMESTAMP_MS).cast(_TYPES["store_timestamp"])


def record_batch(messages: Sequence[MessageExt], broker: str | None) -> pa.RecordBatch:
    """The rows of *messages*, all read from *broker* (None: unknown, a null column)."""
    n = len(messages)
    key_offsets = [0]
    key_values: list[str] = []
    prop_offsets = [0]
    prop_keys: list[str] = []
    prop_values: list[str] = []
    own = _OWN_COLUMN_PROPERTIES
    for m in messages:
        key_values.extend(m.keys)
        key_offsets.append(len(key_values))
        for name, value in m.properties.items():
            if name not in own:
                prop_keys.append(name)
                prop_values.append(value)
        prop_offsets.append(len(prop_keys))
    keys = pa.ListArray.from_arrays(
        pa.array(key_offsets, pa.int32()), pa.array(key_values, pa.string()), type=_TYPES["keys"]
    )
    properties = pa.MapArray.from_arrays(
        pa.array(prop_offsets, pa.int32()),
        pa.array(prop_keys, pa.string()),
        pa.array(prop_values, pa.string()),
        type=_TYPES["properties"],
    )
    columns = [
        pa.array([m.topic for m in messages], pa.string()),
        pa.nulls(n, pa.string()) if broker is None else pa.array([broker] * n, pa.string()),
        pa.array([m.queue_id for m in messages], pa.int32()),
        pa.array([m.queue_offset for m in messages], pa.int64()),
        pa.array([m.body for m in messages], pa.binary()),
        keys,
        pa.array([m.tags or None for m in messages], pa.string()),
        properties,
        _timestamps([m.store_timestamp_ms for m in messages]),
        _timestamps([m.born_timestamp_ms for m in messages]),
        pa.array([m.msg_id or None for m in messages], pa.string()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
