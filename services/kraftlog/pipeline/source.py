"""The ``kraftlog`` Spark data source: batch and streaming read, batch and streaming write.

Built on PySpark's Python Data Source API (``pyspark.sql.datasource``, PySpark
4.2+ for read limits and ``Trigger.AvailableNow``)::

    from kraftlog import pipeline
    pipeline.register(spark)
    df = (spark.read.format("kraftlog").option("bootstrap", "127.0.0.1:19101")
          .option("topic", "events").option("startingOffsets", "earliest").load())
    df.write.format("kraftlog").option("bootstrap", ...).option("topic", "copy").save()
    stream = spark.readStream.format("kraftlog").option(...).load()

    query = (df.writeStream.format("kraftlog").option("bootstrap", ...).option("topic", "copy")
             .option("checkpointLocation", "/tmp/cp").start())

Batch read: the driver resolves start and end offsets per partition
(:mod:`kraftlog.pipeline.client_io`) and plans one input partition per
topic-partition range (:mod:`kraftlog.pipeline.planning`); each task reads its
range from the leader and yields Arrow batches. Write: one producer per task
(acks=all), flushed at the end; the commit message carries the task's counts.
Streaming write (``DataSourceStreamArrowWriter``): the same per task, for every
micro-batch; Spark commits the batch id once every task's producer has flushed, and
the driver logs the batch's counts (``kraftlog.pipeline`` logger). Delivery is
at least once: a micro-batch Spark retries after a failure is produced again
(there are no transactions to take the first attempt back).
Streaming read: offsets are Spark's Kafka JSON (``{"topic":{"0":23}}``);
``maxOffsetsPerTrigger`` is the default read limit; new partitions are read
from their log start; ``failOnDataLoss`` decides whether deleted offsets fail
the query. A batch that does not decode fails the task after the rows before it,
naming the topic, partition and offset (``failOnDataLoss=false``: skipped with a
warning), in batch and streaming reads alike (:func:`client_io.read_range`). The schema is Spark's Kafka source's (:data:`SCHEMA_DDL`).

Options: :mod:`kraftlog.pipeline.options`. Edge module: Spark.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from kraftlog import client
from kraftlog.ids import TopicPartition
from kraftlog.pipeline import arrow_convert, client_io, planning
from kraftlog.pipeline.options import (
    DataLossError,
    ReadOptions,
    WriteOptions,
    parse_read_options,
    parse_write_options,
)

SCHEMA_DDL = arrow_convert.SCHEMA_DDL
NAME = "kraftlog"
_log = logging.getLogger("kraftlog.pipeline")


class RangePartition(InputPartition):
    """One Spark input partition: an :class:`~kraftlog.pipeline.planning.OffsetRange`."""

    def __init__(self, rng: planning.OffsetRange) -> None:
        super().__init__(rng)
        self.rng = rng


def _read(options: ReadOptions, partition: InputPartition) -> Iterator[Any]:
    if not isinstance(partition, RangePartition):
        if partition.value is None:
            return  # Spark runs one task with InputPartition(None) when there is no range
        raise TypeError(f"not a kraftlog input partition: {partition!r}")
    rng = partition.rng
    yield from client_io.read_range(options.bootstrap_servers, rng,
                                    fail_on_data_loss=options.fail_on_data_loss,
                                    poll_timeout_ms=options.poll_timeout_ms,
                                    security=options.security)


def _consumer(options: ReadOptions) -> client.Consumer:
    return client.Consumer(client_io.consumer_config(options.bootstrap_servers,
                                                     options.security))


class KraftlogBatchReader(DataSourceReader):
    """Plans offset ranges on the driver; reads one range per task."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        options = self.options
        with _consumer(options) as consumer:
            tps = client_io.discover(consumer, options.subscription)
            known = client_io.partition_offsets(consumer, tps)
            start = client_io.resolve(consumer, tps, options.starting, known)
            end = client_io.resolve(consumer, tps, options.ending, known)
        start = client_io.check_batch_offsets(
            start, end, known, starting=options.starting, ending=options.ending,
            fail_on_data_loss=options.fail_on_data_loss)
        return [RangePartition(r) for r in planning.plan_ranges(
            start, end, options.max_records_per_partition)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.options, partition)


class KraftlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over per-partition offsets. See the module docstring."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._available_now: dict[TopicPartition, int] | None = None
        """Set by prepareForTriggerAvailableNow: no offset past these is ever returned."""

    def initialOffset(self) -> dict[str, Any]:
        options = self.options
        with _consumer(options) as consumer:
            tps = client_io.discover(consumer, options.subscription)
            known = client_io.partition_offsets(consumer, tps)
            start = client_io.resolve(consumer, tps, options.starting, known)
        return planning.offsets_to_json(start)

    def prepareForTriggerAvailableNow(self) -> None:
        with _consumer(self.options) as consumer:
            tps = client_io.discover(consumer, self.options.subscription)
            self._available_now = dict(
                client_io.partition_offsets(consumer, tps).high_watermark)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def _latest(self) -> dict[TopicPartition, int]:
        with _consumer(self.options) as consumer:
            tps = client_io.discover(consumer, self.options.subscription)
            latest = dict(client_io.partition_offsets(consumer, tps).high_watermark)
        if self._available_now is not None:
            target = self._available_now
            latest = {tp: min(hw, target[tp]) for tp, hw in latest.items() if tp in target}
        return latest

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = planning.offsets_from_json(start)
        latest = self._latest()
        # A partition that vanished keeps its offset here; partitions() decides
        # whether that is data loss.
        for tp, offset in begin.items():
            latest.setdefault(tp, offset)
        # New partitions are read from their log start: count them from 0 for the limit.
        counted = {tp: begin.get(tp, 0) for tp in latest}
        if isinstance(limit, ReadMaxRows):
            latest = planning.rate_limit(counted, latest, limit.max_rows)
        for tp, offset in begin.items():
            if latest[tp] < offset and self._available_now is not None:
                latest[tp] = offset  # never move backwards under AvailableNow
        return planning.offsets_to_json(latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin = planning.offsets_from_json(start)
        until = planning.offsets_from_json(end)
        options = self.options
        with _consumer(options) as consumer:
            live = set(client_io.discover(consumer, options.subscription))
            known = client_io.partition_offsets(consumer, sorted(live & set(until)))
        starts: dict[TopicPartition, int] = {}
        ends: dict[TopicPartition, int] = {}
        for tp, last in until.items():
            if tp not in live:
                if tp in begin and begin[tp] < last:
                    self._data_loss(f"{tp} no longer exists; offsets {begin[tp]}..{last - 1} "
                                    "cannot be read")
                continue
            first = begin.get(tp, known.log_start[tp])
            log_start = known.log_start[tp]
            if first < log_start:
                self._data_loss(f"offsets {first}..{log_start - 1} of {tp} were deleted "
                                f"(log start offset is {log_start})")
                first = log_start
            if last < first:
                self._data_loss(f"{tp}'s offset went back from {first} to {last}")
                continue
            starts[tp], ends[tp] = first, last
        return [RangePartition(r) for r in planning.plan_ranges(
            starts, ends, options.max_records_per_partition)]

    def _data_loss(self, message: str) -> None:
        if self.options.fail_on_data_loss:
            raise DataLossError(f"failOnDataLoss: {message}; set failOnDataLoss=false to "
                                "skip them")

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: Spark's checkpoint holds the offsets (no consumer group)."""


@dataclass(frozen=True, kw_only=True)
class KraftlogCommitMessage(WriterCommitMessage):
    """What one write task produced: records, key+value bytes, records per topic."""

    records: int
    bytes: int
    by_topic: dict[str, int] = field(default_factory=dict)


class KraftlogWriter(DataSourceArrowWriter):
    """One producer per task (acks=all), flushed before the task's commit message."""

    def __init__(self, options: WriteOptions, columns: arrow_convert.WriteColumns) -> None:
        self.options = options
        self.columns = columns
        self.committed: list[KraftlogCommitMessage] = []

    def write(self, iterator: Iterator[Any]) -> KraftlogCommitMessage:
        counts = client_io.write_batches(
            self.options.bootstrap_servers, self.options.producer_properties, iterator,
            self.columns, self.options.topic)
        return KraftlogCommitMessage(records=counts.records, bytes=counts.bytes,
                                     by_topic=dict(counts.by_topic))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self.committed = [m for m in messages if isinstance(m, KraftlogCommitMessage)]

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Produced records cannot be taken back (no transactions): nothing to undo."""


@dataclass(frozen=True, kw_only=True)
class BatchCounts:
    """One committed micro-batch of a streaming write: the sum of its tasks' messages."""

    batch_id: int
    tasks: int
    records: int
    bytes: int
    by_topic: dict[str, int]


def sum_messages(batch_id: int, messages: Sequence[WriterCommitMessage | None]) -> BatchCounts:
    done = [m for m in messages if isinstance(m, KraftlogCommitMessage)]
    by_topic: dict[str, int] = {}
    for message in done:
        for topic, count in message.by_topic.items():
            by_topic[topic] = by_topic.get(topic, 0) + count
    return BatchCounts(batch_id=batch_id, tasks=len(done),
                       records=sum(m.records for m in done), bytes=sum(m.bytes for m in done),
                       by_topic=by_topic)


class KraftlogStreamWriter(DataSourceStreamArrowWriter):
    """A streaming sink: every micro-batch is written as a batch write is (one producer
    per task, acks=all, flushed before the task's commit message)."""

    def __init__(self, options: WriteOptions, columns: arrow_convert.WriteColumns) -> None:
        self.options = options
        self.columns = columns
        self.committed: list[BatchCounts] = []

    def write(self, iterator: Iterator[Any]) -> KraftlogCommitMessage:
        counts = client_io.write_batches(
            self.options.bootstrap_servers, self.options.producer_properties, iterator,
            self.columns, self.options.topic)
        return KraftlogCommitMessage(records=counts.records, bytes=counts.bytes,
                                     by_topic=dict(counts.by_topic))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        counts = sum_messages(batchId, messages)
        self.committed.append(counts)
        _log.info("kraftlog sink: batch=%d tasks=%d records=%d bytes=%d topics=%s",
                  counts.batch_id, counts.tasks, counts.records, counts.bytes,
                  ",".join(f"{t}:{n}" for t, n in sorted(counts.by_topic.items())) or "-")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Records already acknowledged stay (no transactions); Spark retries the batch."""
        counts = sum_messages(batchId, messages)
        _log.warning("kraftlog sink: batch=%d aborted after %d records from %d tasks were "
                     "acknowledged", batchId, counts.records, counts.tasks)


class KraftlogDataSource(DataSource):
    """``format("kraftlog")``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return KraftlogBatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KraftlogStreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> KraftlogWriter:
        options = parse_write_options(self.options)
        columns = arrow_convert.check_write_schema(
            [(f.name, f.dataType.simpleString()) for f in schema.fields],
            topic_option=options.topic)
        return KraftlogWriter(options, columns)

    def streamWriter(self, schema: StructType, overwrite: bool) -> KraftlogStreamWriter:
        options = parse_write_options(self.options, streaming=True)
        columns = arrow_convert.check_write_schema(
            [(f.name, f.dataType.simpleString()) for f in schema.fields],
            topic_option=options.topic)
        return KraftlogStreamWriter(options, columns)
