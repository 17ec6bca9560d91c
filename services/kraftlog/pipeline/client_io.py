"""The data source's I/O: find partitions, resolve offsets, read a range, produce rows.

Owns the calls the Spark classes make through :mod:`kraftlog.client`:

- :func:`discover` — the subscribed topic-partitions (``topicPattern`` asks a
  broker's Metadata for every topic and skips internal ``__`` topics);
- :func:`partition_offsets` — log start offsets and high watermarks (ListOffsets
  to each leader), :func:`resolve` — an :class:`~kraftlog.pipeline.options.OffsetSpec`
  made concrete (earliest, latest, JSON, timestamps via ``offsets_for_times``);
- :func:`read_range` — one task's records ``[from, until)`` from the leader, as
  Arrow batches; the broker serves only up to the high watermark, so every
  record is committed. A batch that does not decode (a bad CRC, records that do not
  parse: :class:`~kraftlog.client.CorruptRecordBatchError`) fails the task naming the
  topic, partition and offset once the rows before it were handed over, or, with
  ``failOnDataLoss=false``, is skipped with a warning (``kraftlog.pipeline`` logger);
- :func:`write_batches` — one task's rows through one Producer (acks=all),
  flushed at the end; the first failed record fails the task with the broker's
  error name.

Runs on the driver (discover, resolve) and in Spark tasks (read, write); each
call makes and closes its own client (gRPC channels must not cross a fork or a
pickle). Edge module: gRPC through the client, the clock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from kraftlog import client
from kraftlog.client import metadata_client as md
from kraftlog.errors import ConfigError
from kraftlog.ids import TopicPartition
from kraftlog.pipeline import arrow_convert
from kraftlog.pipeline.options import (
    EARLIEST,
    LATEST,
    DataLossError,
    OffsetKind,
    OffsetSpec,
    OptionError,
    Subscription,
    SubscriptionKind,
)
from kraftlog.pipeline.planning import OffsetRange
from kraftlog.security import tls
from kraftlog.v1 import broker_pb2

_log = logging.getLogger("kraftlog.pipeline")

TOPIC_WAIT_MS = 5000
"""How long a named topic may take to appear in metadata before the read fails."""
POLL_RECORDS = 8192
"""Records per poll, and so per Arrow batch handed to Spark."""


def consumer_config(bootstrap_servers: tuple[str, ...],
                    security: tuple[tuple[str, str], ...] = ()) -> client.ConsumerConfig:
    """The consumer settings of every read (the benchmark's anchor uses them too)."""
    return client.ConsumerConfig(
        bootstrap_servers=bootstrap_servers, auto_offset_reset=client.OffsetReset.NONE,
        max_poll_records=POLL_RECORDS, max_partition_fetch_bytes=4 * 1024 * 1024,
        fetch_max_wait_ms=200, default_api_timeout_ms=30000, security=security)


def _all_topics(config: client.ConsumerConfig) -> list[str]:
    bootstrap_servers = config.bootstrap_servers
    channels = md.BrokerChannels(client_tls=tls.client_tls_from_properties(
        dict(config.security), what="kafka.security.protocol"))
    failures: dict[str, str] = {}
    try:
        for address in bootstrap_servers:
            try:
                answer = channels.stub(address).Metadata(broker_pb2.MetadataRequest(topics=[]),
                                                         timeout=md.MAX_METADATA_RPC_S)
            except grpc.RpcError as exc:
                failures[address] = md.rpc_error_text(exc)
                continue
            return [t.name for t in answer.topics if t.error.code == 0]
    finally:
        channels.close()
    raise client.BrokersUnavailableError(failures, "bootstrap: metadata")


def discover(consumer: client.Consumer, subscription: Subscription) -> list[TopicPartition]:
    """Every partition of the subscribed topics, sorted. OptionError for an unknown topic."""
    if subscription.kind is SubscriptionKind.PATTERN:
        names = sorted(t for t in _all_topics(consumer.config)
                       if not t.startswith("__") and subscription.matches(t))
    else:
        names = list(subscription.topics)
    found: list[TopicPartition] = []
    deadline = time.monotonic() + TOPIC_WAIT_MS / 1000
    for name in names:
        try:
            info = consumer.metadata.topic(name, deadline=deadline)
        except client.UnknownTopicError as exc:
            raise OptionError(f"{subscription.kind.value}: topic {name!r} does not exist "
                              f"({exc})") from None
        found.extend(TopicPartition(topic=name, partition=p.partition) for p in info.partitions)
    return sorted(found)


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionOffsets:
    """Each partition's log start offset and high watermark, read together."""

    log_start: Mapping[TopicPartition, int]
    high_watermark: Mapping[TopicPartition, int]


def partition_offsets(consumer: client.Consumer, tps: Iterable[TopicPartition]
                      ) -> PartitionOffsets:
    wanted = list(tps)
    if not wanted:
        return PartitionOffsets(log_start={}, high_watermark={})
    consumer.assign(wanted)
    return PartitionOffsets(log_start=consumer.beginning_offsets(wanted),
                            high_watermark=consumer.end_offsets(wanted))


def resolve(consumer: client.Consumer, tps: list[TopicPartition], spec: OffsetSpec,
            known: PartitionOffsets) -> dict[TopicPartition, int]:
    """``spec`` as an offset per partition of ``tps`` (OptionError naming spec.option)."""
    if spec.kind is OffsetKind.EARLIEST:
        return {tp: known.log_start[tp] for tp in tps}
    if spec.kind is OffsetKind.LATEST:
        return {tp: known.high_watermark[tp] for tp in tps}
    given = dict(spec.offsets or {})
    if spec.kind is not OffsetKind.TIMESTAMP:
        extra = sorted(set(given) - set(tps))
        if extra:
            raise OptionError(f"{spec.option}: {extra[0]} is not a partition of the subscribed "
                              f"topics (they have {len(tps)} partitions)")
        missing = sorted(set(tps) - set(given))
        if missing:
            raise OptionError(f"{spec.option}: no offset for {missing[0]}; give every partition "
                              "of the subscribed topics (-2 earliest, -1 latest)")
    if spec.kind is OffsetKind.SPECIFIC:
        return {tp: (known.log_start[tp] if given[tp] == EARLIEST else
                     known.high_watermark[tp] if given[tp] == LATEST else given[tp])
                for tp in tps}
    times = ({tp: spec.timestamp_ms for tp in tps} if spec.kind is OffsetKind.TIMESTAMP
             else given)
    found = consumer.offsets_for_times(times) if times else {}
    # No record at or after the time: start (or end) at the high watermark, Kafka's
    # startingOffsetsByTimestampStrategy=latest.
    return {tp: known.high_watermark[tp] if found.get(tp) is None
            else found[tp].offset  # type: ignore[union-attr]
            for tp in tps}


def check_batch_offsets(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
                        known: PartitionOffsets, *, starting: OffsetSpec, ending: OffsetSpec,
                        fail_on_data_loss: bool) -> dict[TopicPartition, int]:
    """Check a batch read's ranges; returns the start offsets (moved past deleted data
    when failOnDataLoss=false)."""
    out = dict(start)
    for tp in sorted(start):
        begin, until = start[tp], end[tp]
        log_start, hw = known.log_start[tp], known.high_watermark[tp]
        if until > hw:
            raise OptionError(f"{ending.option}: offset {until} of {tp} is past its high "
                              f"watermark {hw} (only committed records can be read)")
        if begin > hw:
            raise OptionError(f"{starting.option}: offset {begin} of {tp} is past its high "
                              f"watermark {hw}")
        if until < begin:
            raise OptionError(f"{ending.option}: offset {until} of {tp} is before its start "
                              f"offset {begin} ({starting.option})")
        if begin < log_start:
            if fail_on_data_loss:
                raise DataLossError(
                    f"failOnDataLoss: offsets {begin}..{log_start - 1} of {tp} were deleted "
                    f"(log start offset is {log_start}); set failOnDataLoss=false to skip them")
            out[tp] = min(log_start, until)
    return out


def _fail_or_skip(fail_on_data_loss: bool, message: str) -> None:
    if fail_on_data_loss:
        raise DataLossError(f"failOnDataLoss: {message}; set failOnDataLoss=false to skip them")


def read_range(bootstrap_servers: tuple[str, ...], rng: OffsetRange, *,
               fail_on_data_loss: bool, poll_timeout_ms: int,
               security: tuple[tuple[str, str], ...] = ()) -> Iterator[Any]:
    """Arrow batches of every record in ``rng``, in offset order.

    Stops at ``until_offset``; a range whose head was deleted by retention raises
    DataLossError (or is read from the new log start, failOnDataLoss=false); a batch
    that does not decode raises DataLossError naming the partition and offset after
    the records before it (or is skipped with a warning, failOnDataLoss=false); no
    record for ``poll_timeout_ms`` raises ClientTimeoutError.
    """
    tp = TopicPartition(topic=rng.topic, partition=rng.partition)
    with client.Consumer(consumer_config(bootstrap_servers, security)) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, rng.from_offset)
        position = rng.from_offset
        idle_deadline = time.monotonic() + poll_timeout_ms / 1000
        while position < rng.until_offset:
            try:
                records = consumer.poll(max_records=POLL_RECORDS, timeout_ms=500)
            except client.OffsetOutOfRangeError:
                log_start = consumer.beginning_offsets([tp])[tp]
                if log_start <= position:
                    raise
                _fail_or_skip(fail_on_data_loss, f"offsets {position}..{log_start - 1} of {tp} "
                              f"were deleted while reading (log start offset is {log_start})")
                if log_start >= rng.until_offset:
                    return
                consumer.seek(tp, log_start)
                position = log_start
                continue
            except client.CorruptRecordBatchError as exc:
                skip_to = exc.next_offset
                if fail_on_data_loss or skip_to is None:
                    hint = ("; set failOnDataLoss=false to skip the batch" if skip_to is not None
                            else "")
                    raise DataLossError(f"failOnDataLoss: a corrupt batch stops the read of "
                                        f"{tp}: {exc}{hint}") from None
                _log.warning("kraftlog source: skipping offsets %d..%d of %s "
                             "(failOnDataLoss=false): %s", exc.offset, skip_to - 1, tp, exc)
                if skip_to >= rng.until_offset:
                    return
                consumer.seek(tp, skip_to)
                position = skip_to
                idle_deadline = time.monotonic() + poll_timeout_ms / 1000
                continue
            if records:
                if records[-1].offset >= rng.until_offset:
                    records = [r for r in records if r.offset < rng.until_offset]
                if records:
                    yield arrow_convert.records_to_batch(records)
                idle_deadline = time.monotonic() + poll_timeout_ms / 1000
            position = consumer.position(tp)
            if position < rng.until_offset and time.monotonic() > idle_deadline:
                raise client.ClientTimeoutError(
                    f"kafkaConsumer.pollTimeoutMs: no record of {tp} at offset {position} "
                    f"within {poll_timeout_ms} ms (reading up to {rng.until_offset})")


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteCounts:
    """What one write task produced."""

    records: int
    bytes: int
    """Keys plus values."""
    by_topic: Mapping[str, int]


def producer_config(bootstrap_servers: tuple[str, ...], properties: Mapping[str, str]
                    ) -> client.ProducerConfig:
    try:
        return client.ProducerConfig.from_properties(
            {"bootstrap.servers": ",".join(bootstrap_servers), **properties, "acks": "all"})
    except ConfigError as exc:
        raise OptionError(f"kafka.*: {exc}") from None


def write_batches(bootstrap_servers: tuple[str, ...], properties: Mapping[str, str],
                  batches: Iterable[Any], columns: arrow_convert.WriteColumns,
                  topic_option: str | None) -> WriteCounts:
    """Produce every row with one producer (acks=all), flush, and fail on the first error."""
    config = producer_config(bootstrap_servers, properties)
    lock = threading.Lock()
    failures: list[BaseException] = []

    def on_done(future: client.RecordFuture) -> None:
        error = future.exception()
        if error is not None:
            with lock:
                failures.append(error)

    records = size = 0
    by_topic: dict[str, int] = {}
    producer = client.Producer(config)
    try:
        for batch in batches:
            for topic, key, value, part, headers in arrow_convert.batch_to_rows(
                    batch, columns, topic_option):
                if failures:
                    break
                producer.send(topic, value, key=key, headers=headers,
                              partition=part).add_done_callback(on_done)
                records += 1
                size += len(key or b"") + len(value or b"")
                by_topic[topic] = by_topic.get(topic, 0) + 1
            if failures:
                break
        producer.flush(timeout_ms=config.delivery_timeout_ms)
    finally:
        producer.close(timeout_ms=5000)
    if failures:
        raise client.ClientError(f"kraftlog sink: {len(failures)} record(s) failed; first: "
                                 f"{failures[0]}")
    return WriteCounts(records=records, bytes=size, by_topic=by_topic)
