"""Records <-> Arrow: the columns of Spark's Kafka source, built a column at a time.

Owns :data:`SCHEMA_DDL` (the DataFrame schema, exactly Spark's Kafka source's:
``key binary, value binary, topic string, partition int, offset long, timestamp
timestamp, timestampType int, headers array<struct<key:string,value:binary>>``),
its Arrow twin :func:`arrow_schema`, :func:`records_to_batch` (a poll's records ->
one ``pyarrow.RecordBatch``; Spark takes Arrow batches from a Python data
source without a per-row Python -> JVM conversion) and :func:`batch_to_rows`
(the sink's input columns -> per-row produce arguments).

Called inside Spark tasks by :mod:`kraftlog.pipeline.source`. Needs pyarrow
(the ``spark`` extra); no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

from kraftlog.client import ConsumerRecord, Header
from kraftlog.pipeline.options import OptionError

SCHEMA_DDL = ("key binary, value binary, topic string, partition int, offset long, "
              "timestamp timestamp, timestampType int, "
              "headers array<struct<key:string,value:binary>>")

_HEADER_TYPE = pa.struct([("key", pa.string()), ("value", pa.binary())])
_TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
_ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
    ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", _TIMESTAMP_TYPE),
    ("timestampType", pa.int32()), ("headers", pa.list_(_HEADER_TYPE))])


def arrow_schema() -> Any:
    """The Arrow schema of :data:`SCHEMA_DDL` (timestamps in microseconds, UTC)."""
    return _ARROW_SCHEMA


def records_to_batch(records: Sequence[ConsumerRecord]) -> Any:
    """One Arrow RecordBatch with a row per record, in order.

    Transposes the NamedTuples once (``zip(*records)`` runs in C) and builds each
    column from a tuple; headers, nearly always empty, get a list column of empty
    lists without touching each record.
    """
    (offsets, timestamps, keys, values, headers, topics, partitions, ts_types,
     _epochs) = zip(*records, strict=True)
    count = len(records)
    if topics[0] == topics[-1] and partitions[0] == partitions[-1] and (
            topics.count(topics[0]) == count):
        topic_col = pa.array([topics[0]] * count, pa.string())
    else:
        topic_col = pa.array(topics, pa.string())
    millis = pa.array(timestamps, pa.int64())
    ts_col = pa.Array.from_buffers(pa.timestamp("ms", tz="UTC"), count,
                                   millis.buffers()).cast(_TIMESTAMP_TYPE)
    if any(headers):
        header_col = pa.array([[{"key": h.key, "value": h.value} for h in hs]
                               for hs in headers], pa.list_(_HEADER_TYPE))
    else:
        header_col = pa.ListArray.from_arrays(
            pa.array([0] * (count + 1), pa.int32()), pa.array([], _HEADER_TYPE))
    return pa.RecordBatch.from_arrays([
        pa.array(keys, pa.binary()), pa.array(values, pa.binary()), topic_col,
        pa.array(partitions, pa.int32()), pa.array(offsets, pa.int64()), ts_col,
        pa.array(ts_types, pa.int32()), header_col], schema=_ARROW_SCHEMA)


# -- the sink's side ---------------------------------------------------------------------------

WRITE_COLUMNS = ("topic", "key", "value", "partition", "headers")


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteColumns:
    """Which sink columns a DataFrame has, checked against Spark's Kafka sink rules."""

    has_topic: bool
    has_key: bool
    has_partition: bool
    has_headers: bool


def check_write_schema(fields: Sequence[tuple[str, str]], *, topic_option: str | None
                       ) -> WriteColumns:
    """``fields``: (name, Spark simpleString type). OptionError naming the bad column.

    value: binary or string (required); key: binary or string; topic: string
    (required unless the ``topic`` option is set); partition: int; headers:
    array<struct<key:string,value:binary>>. Other columns are ignored, as Spark's
    Kafka sink does.
    """
    types = {name.lower(): kind for name, kind in fields}
    allowed = {"value": ("binary", "string"), "key": ("binary", "string"),
               "topic": ("string",), "partition": ("int",),
               "headers": ("array<struct<key:string,value:binary>>",)}
    if "value" not in types:
        raise OptionError("value: the DataFrame needs a 'value' column (binary or string)")
    for name, kinds in allowed.items():
        if name in types and types[name] not in kinds:
            raise OptionError(f"{name}: column type {types[name]} is not supported "
                              f"(use {' or '.join(kinds)})")
    if "topic" not in types and topic_option is None:
        raise OptionError("topic: give the 'topic' option or a 'topic' column")
    return WriteColumns(has_topic="topic" in types, has_key="key" in types,
                        has_partition="partition" in types, has_headers="headers" in types)


def _as_bytes(values: list[Any]) -> list[bytes | None]:
    return [v.encode() if isinstance(v, str) else v for v in values]


def batch_to_rows(batch: Any, columns: WriteColumns, topic_option: str | None
                  ) -> Iterator[tuple[str, bytes | None, bytes | None, int | None,
                                      tuple[Header, ...]]]:
    """(topic, key, value, partition, headers) per row of an Arrow batch.

    The ``topic`` option wins over the column (Spark's Kafka sink rule); a row
    without a topic raises OptionError.
    """
    names = {name.lower(): i for i, name in enumerate(batch.schema.names)}
    count = batch.num_rows
    values = _as_bytes(batch.column(names["value"]).to_pylist())
    keys = (_as_bytes(batch.column(names["key"]).to_pylist()) if columns.has_key
            else [None] * count)
    topics: list[str | None] = ([topic_option] * count if topic_option is not None
                                else batch.column(names["topic"]).to_pylist())
    parts: list[int | None] = (batch.column(names["partition"]).to_pylist()
                               if columns.has_partition else [None] * count)
    raw_headers = (batch.column(names["headers"]).to_pylist() if columns.has_headers
                   else [None] * count)
    for topic, key, value, part, hs in zip(topics, keys, values, parts, raw_headers,
                                           strict=True):
        if not topic:
            raise OptionError("topic: a row has a null topic and no 'topic' option is set")
        headers = tuple(Header(key=h["key"], value=h["value"]) for h in hs) if hs else ()
        yield topic, key, value, part, headers
