"""The producer: ``send`` records to partition leaders in batches, with acks and retries.

Owns :class:`Producer`, a synchronous, thread-safe API that a CLI, a Spark task
(plain Python, no event loop) and a benchmark can all call::

    with Producer(ProducerConfig(bootstrap_servers=("127.0.0.1:19101",), acks=Acks.ALL)) as p:
        future = p.send("events", b"value", key=b"user-1")
        metadata = future.result(timeout=10)      # RecordMetadata(partition=.., offset=..)
        p.flush()

``send`` picks the partition (explicit, else murmur2 of the key as Kafka's
default partitioner does, else the sticky partition; :mod:`.partitioner`),
appends the record to that partition's open batch (:mod:`.accumulator`) and
returns a :class:`RecordFuture` (the part of ``concurrent.futures.Future`` a
producer needs) resolving to a :class:`RecordMetadata`, or raising a
:class:`~kraftlog.client.errors.KafkaApiError` named for the broker's error
(NOT_ENOUGH_REPLICAS, MESSAGE_TOO_LARGE, ...).

``send`` encodes the record into its batch there and then
(:class:`kraftlog.storage.record_batch.RecordsBuilder`). One background *sender* thread
drains ready batches (``batch.size`` reached, ``linger.ms`` passed, or a flush), seals
each as a Kafka RecordBatch v2 (header and CRC, with ``compression.type``), and sends
one Produce request per leader broker carrying every ready partition it leads, without
waiting for other brokers: a request on the broker's ProduceStream
(:mod:`.produce_stream`; many in flight, answered by correlation id), or a unary
Produce call (gRPC futures) to a broker that answered ProduceStream UNIMPLEMENTED. A
request whose stream ends unanswered is a lost answer like a unary call's transport
failure. A partition may have up to
``max.in.flight.requests.per.connection`` requests unanswered, counted from its
oldest unanswered one (a window: an answered request after an unanswered one still
counts, and a batch waiting for its retry keeps its place). Retriable errors
(:data:`kraftlog.client.errors.RETRIABLE_CODES`,
connection failures) put a batch back in its queue, in creation order, after
``retry.backoff.ms`` and refresh metadata (taking a ``current_leader`` hint,
KIP-951, at once), until ``retries`` or ``delivery.timeout.ms`` runs out; a
retried batch is resent only when its partition has nothing in flight, so it
keeps its place before every batch created after it.

Idempotence (``enable.idempotence``, on by default with acks=all; KIP-98): before its
first send the producer gets a producer id from a broker's InitProducerId, and each
batch carries (producer id, epoch, base sequence), the sequence counting records per
partition. A batch's bytes are built once, so a retry resends the same sequence and a
broker that already wrote it answers with the original offset instead of writing it
twice. Each request then carries one batch per partition. The window above keeps a
retried batch within the last 5 batches the broker remembers per producer (Kafka's
``NUM_BATCHES_TO_RETAIN``), so at most 5 are allowed. A batch refused with
OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID that was sent while an earlier
batch of its partition was unanswered (requests may reach the broker out of order)
is simply resent after it. When every earlier batch was answered before it was
sent, the broker lost the producer's state or the sequence broke
(a batch failed for good): the producer takes a new id; partitions with requests in
flight under the old id send nothing new until those are answered.

Exactly once means a batch that may already be written never gets a new identity
(Kafka's producer: unresolved sequences, KIP-360). A batch gets its identity (producer
id, epoch, base sequence) when it is first drained, and an attempt that ends without a
definite refusal (:data:`kraftlog.client.errors.NOT_APPENDED_CODES`; a lost answer,
REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER, a
transport failure) marks it ``maybe_written``. Such a batch keeps its identity across
a new producer id and is resent with it, so a broker that has it answers with its
original offset; if a broker refuses it with a sequence error at the head of its
partition, it fails to the application (its records may be in the log) instead of
being renumbered. Only batches that cannot be in any log are numbered afresh under the
new id.

Edge module: threads, gRPC, the clock.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import NamedTuple

import grpc

from kraftlog.client import accumulator as acc
from kraftlog.client import errors as client_errors
from kraftlog.client import metadata_client as md
from kraftlog.client import partitioner
from kraftlog.client import produce_stream as ps
from kraftlog.client.config import Acks, ProducerConfig
from kraftlog.error_codes import ErrorCode
from kraftlog.errors import KraftlogError
from kraftlog.ids import TopicPartition
from kraftlog.security import tls
from kraftlog.storage import batch_header as bh
from kraftlog.storage import record_batch as rb
from kraftlog.v1 import broker_pb2

logger = logging.getLogger(__name__)

HeaderItem = tuple[str, bytes | None]
_RPC_GRACE_S = 5.0
"""How much longer than request.timeout.ms an RPC may take before the client gives up on it."""


class RecordMetadata(NamedTuple):
    """Where an acknowledged record landed. ``offset`` is -1 with acks=0 (not known).

    A NamedTuple, not a frozen dataclass: one is built per record on the sender thread.
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    """The record's CreateTime, or the broker's LogAppendTime when the topic uses it."""


class _InFlight:
    """One Produce request's batches of one partition, in its partition's window from
    its first sending until it and every request sent before it are ``done``
    (acknowledged, or failed for good). While a batch waits to be resent
    (``waiting``) its entry keeps its place: the batches sent after it still count, so
    however often it is retried, at most max.in.flight - 1 newer batches can be in
    the log before it is answered (the broker keeps a producer's last 5).

    ``first_in_line``: every batch before it was done when it was sent, i.e. written
    or failed for good. Only then does a sequence error (OUT_OF_ORDER_SEQUENCE_NUMBER,
    UNKNOWN_PRODUCER_ID) say the broker lost the producer's state or the sequence
    broke; otherwise the broker may have handled it before an earlier request (gRPC
    requests are not handled in sending order, and answers come back in any order),
    and it is resent once those are answered.
    """

    __slots__ = ("batches", "done", "first_in_line", "waiting")

    def __init__(self, batches: list[acc.ProducerBatch[_BatchResult]], *,
                 first_in_line: bool, waiting: bool = False) -> None:
        self.batches = batches
        self.done = False
        self.first_in_line = first_in_line
        self.waiting = waiting


class _Acknowledged(NamedTuple):
    """A batch's acknowledgement (each future makes its RecordMetadata from it when asked,
    so resolving a batch builds nothing per record)."""

    topic: str
    partition: int
    base_offset: int
    """The batch's first offset, -1 when not known (acks=0)."""
    log_append_time_ms: int
    """The broker's LogAppendTime, -1 when the topic uses CreateTime."""


class _BatchResult:
    """One batch's outcome, shared by the futures of its records (Kafka's
    ``ProduceRequestResult``): resolving a batch is one assignment, not one per record.
    Its fields change only under ``cond`` (the producer's one futures condition)."""

    __slots__ = ("ack", "callbacks", "cond", "done", "error")

    def __init__(self, cond: threading.Condition) -> None:
        self.cond = cond
        self.done = False
        self.ack: _Acknowledged | None = None
        self.error: BaseException | None = None
        self.callbacks: list[tuple[Callable[[RecordFuture], object], RecordFuture]] | None = None


class RecordFuture:
    """The outcome of one ``send``: a RecordMetadata, or the error that failed the record.

    The subset of :class:`concurrent.futures.Future` a producer needs (``result``,
    ``exception``, ``done``, ``add_done_callback``; no cancel, as in Kafka). It is
    light on purpose, one is made per record: the record's batch holds the outcome
    (:class:`_BatchResult`) and the future only where its record sits in it, so a whole
    batch is resolved at once, and the RecordMetadata is made from the batch's
    acknowledgement only when asked for (Kafka's ``FutureRecordMetadata``). Callbacks
    run on the thread that resolves the future (the gRPC callback thread) or at once
    when added to a done future; keep them short.
    """

    __slots__ = ("_batch", "_index", "_timestamp_ms")

    def __init__(self, batch: _BatchResult, index: int, timestamp_ms: int) -> None:
        self._batch = batch
        self._index = index
        """The record's offset delta in its batch."""
        self._timestamp_ms = timestamp_ms
        """The record's CreateTime (what RecordMetadata reports unless LogAppendTime)."""

    def done(self) -> bool:
        return self._batch.done

    def _wait(self, timeout: float | None) -> _BatchResult:
        batch = self._batch
        if not batch.done:
            with batch.cond:
                if not batch.cond.wait_for(lambda: batch.done, timeout):
                    raise client_errors.ClientTimeoutError(
                        f"the record was not acknowledged within {timeout} s")
        return batch

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Its RecordMetadata; raises the record's error, or ClientTimeoutError after
        ``timeout`` seconds."""
        batch = self._wait(timeout)
        if batch.error is not None:
            raise batch.error
        ack = batch.ack
        assert ack is not None
        return RecordMetadata(
            ack.topic, ack.partition,
            ack.base_offset + self._index if ack.base_offset >= 0 else -1,
            ack.log_append_time_ms if ack.log_append_time_ms >= 0 else self._timestamp_ms)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The record's error, None when it was acknowledged."""
        return self._wait(timeout).error

    def add_done_callback(self, fn: Callable[[RecordFuture], object]) -> None:
        batch = self._batch
        with batch.cond:
            if not batch.done:
                if batch.callbacks is None:
                    batch.callbacks = []
                batch.callbacks.append((fn, self))
                return
        fn(self)


def _resolve(batch: _BatchResult, ack: _Acknowledged | None,
             error: BaseException | None) -> None:
    """Complete a batch's futures, then run their callbacks. A batch already done stays
    as it was."""
    with batch.cond:
        if batch.done:
            return
        batch.ack = ack
        batch.error = error
        batch.done = True
        callbacks = batch.callbacks
        batch.callbacks = None
        batch.cond.notify_all()
    for fn, future in callbacks or ():
        try:
            fn(future)
        except Exception:
            logger.exception("a RecordFuture callback failed")


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


_INT64_MAX = (1 << 63) - 1


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _headers(headers: Iterable[HeaderItem | rb.Header]) -> tuple[rb.Header, ...]:
    out: list[rb.Header] = []
    for item in headers:
        if isinstance(item, rb.Header):
            out.append(item)
            continue
        key, value = item
        if not isinstance(key, str):
            raise ValueError(f"header key must be str, got {type(key).__name__}")
        if value is not None and not isinstance(value, bytes | bytearray):
            raise ValueError(f"header {key!r} value must be bytes or None")
        out.append(rb.Header(key=key, value=None if value is None else bytes(value)))
    return tuple(out)


class Producer:
    """Thread-safe Kafka-style producer. See the module docstring."""

    def __init__(self, config: ProducerConfig, *, rng: random.Random | None = None) -> None:
        self.config = config
        self._channels = md.BrokerChannels(
            retry_backoff_ms=config.retry_backoff_ms,
            client_tls=tls.client_tls_from_properties(dict(config.security),
                                                      what="bootstrap.servers"))
        self.metadata = md.MetadataCache(config.bootstrap_servers, self._channels,
                                         retry_backoff_ms=config.retry_backoff_ms,
                                         metadata_max_age_ms=config.metadata_max_age_ms)
        self._sticky = partitioner.StickyPartitioner(
            rng or random.Random(), batch_size=config.batch_size,
            queue_sizes=(self._queue_sizes if config.partitioner_adaptive_partitioning_enable
                         else None))
        self._tps: dict[tuple[str, int], TopicPartition] = {}
        self._futures_cond = threading.Condition()
        self._accumulator: acc.RecordAccumulator[_BatchResult] = acc.RecordAccumulator(
            batch_size=config.batch_size, linger_ms=config.linger_ms,
            new_result=lambda: _BatchResult(self._futures_cond))
        self._mutex = threading.RLock()
        """``_lock``'s lock: send() enters it directly (a Condition's __enter__ is a Python call)."""
        self._lock = threading.Condition(self._mutex)
        self._in_flight: dict[TopicPartition, deque[_InFlight]] = {}
        """Per partition, its requests in sending order from the oldest unanswered one
        (absent when none): the window that max.in.flight.requests.per.connection bounds."""
        self._max_in_flight = config.max_in_flight_requests_per_connection
        # send()'s limits, read once per record.
        self._max_block_s = config.max_block_ms / 1000
        self._max_record_size = config.max_request_size - bh.HEADER_SIZE
        self._buffer_memory = config.buffer_memory
        self._flushes = 0
        self._closing = False
        self._closed = False
        self._sender = threading.Thread(target=self._run_sender, name="kraftlog-producer-sender",
                                        daemon=True)
        self._sender_error: BaseException | None = None
        # Idempotence state: owned by the sender thread, reset under _lock.
        self._producer_id = bh.NO_PRODUCER_ID
        self._producer_epoch = bh.NO_PRODUCER_EPOCH
        self._next_sequence: dict[TopicPartition, int] = {}
        self._idempotent = config.idempotent
        self._streams: dict[str, ps.ProduceStream] = {}
        """One ProduceStream per broker address, reopened after it ends."""
        self._unary_only: set[str] = set()
        """Brokers that answered ProduceStream UNIMPLEMENTED: unary Produce to them."""
        self._streams_lock = threading.Lock()
        self._sender.start()

    # -- public API ---------------------------------------------------------------------------

    def send(self, topic: str, value: bytes | None, key: bytes | None = None,
             headers: Iterable[HeaderItem | rb.Header] = (), partition: int | None = None,
             timestamp_ms: int | None = None) -> RecordFuture:
        """Queue one record; the future resolves to its RecordMetadata or raises its error.

        Blocks up to ``max.block.ms`` for the topic's metadata or for buffer space.
        Raises (at once, not through the future) UnknownTopicError,
        BrokersUnavailableError, ClientTimeoutError, KafkaApiError(MESSAGE_TOO_LARGE)
        for a record larger than ``max.request.size``, ValueError for bad arguments,
        ClientClosedError after close().
        """
        if self._closing:
            raise client_errors.ClientClosedError("send() after close()")
        if type(value) is not bytes and value is not None:
            if not isinstance(value, bytearray | memoryview):
                raise ValueError(f"value must be bytes or None, got {type(value).__name__}")
            value = bytes(value)
        if type(key) is not bytes and key is not None:
            if not isinstance(key, bytearray | memoryview):
                raise ValueError(f"key must be bytes or None, got {type(key).__name__}")
            key = bytes(key)
        if timestamp_ms is None:
            timestamp = time.time_ns() // 1_000_000
        elif type(timestamp_ms) is not int or not 0 <= timestamp_ms <= _INT64_MAX:
            raise ValueError(f"timestamp_ms must be a non-negative int64 or None, "
                             f"got {timestamp_ms!r}")
        else:
            timestamp = timestamp_ms
        now = time.monotonic()
        deadline = now + self._max_block_s
        info = self.metadata.topic(topic, deadline=deadline)
        count = info.partition_count
        if partition is not None:
            if not 0 <= partition < count:
                raise client_errors.UnknownTopicError(
                    topic, f"partition {partition} of topic {topic!r} does not exist "
                    f"(it has {count} partitions)")
            chosen = partition
        elif key is not None:
            chosen = partitioner.partition_for_key(key, count)
        else:
            chosen = -1
        if headers:
            record_headers = _headers(headers)
            size = acc.estimate_fields(key, value, record_headers)
        else:
            record_headers = ()
            size = acc.RECORD_OVERHEAD_BYTES + (0 if key is None else len(key)) + (
                0 if value is None else len(value))
        if size > self._max_record_size:
            raise client_errors.KafkaApiError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"the record is {size} bytes, more than max.request.size="
                f"{self.config.max_request_size}")
        accumulator = self._accumulator
        with self._mutex:
            while (accumulator.buffered_bytes + size > self._buffer_memory
                   and accumulator.buffered_bytes > 0):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise client_errors.ClientTimeoutError(
                        f"no room in buffer.memory={self.config.buffer_memory} within "
                        f"max.block.ms={self.config.max_block_ms}")
                self._lock.wait(remaining)
            if self._closing:
                raise client_errors.ClientClosedError("send() after close()")
            if chosen < 0:
                chosen = self._sticky.take(topic, count, size)
            tp = self._tps.get((topic, chosen))
            if tp is None:
                tp = self._tps[(topic, chosen)] = TopicPartition(topic=topic, partition=chosen)
            # The clock read above, in _now_ms()'s units (one monotonic read per send).
            batch = accumulator.append(tp, key, value, record_headers, timestamp,
                                       now_ms=int(now * 1000), size=size)
            index = batch.builder.count - 1
            if index == 0 or batch.closed:  # a new batch, or a full one: wake the sender
                self._lock.notify_all()
        return RecordFuture(batch.result, index, timestamp)

    def _queue_sizes(self, topic: str, num_partitions: int) -> list[int]:
        """Batches queued per partition of ``topic`` (the adaptive partitioner's load; called
        from send() under ``_lock``)."""
        tps = self._tps
        return [self._accumulator.queued(tp) if (tp := tps.get((topic, p))) is not None else 0
                for p in range(num_partitions)]

    def flush(self, timeout_ms: int | None = None) -> None:
        """Send everything queued and wait for every answer (ClientTimeoutError on timeout)."""
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        with self._lock:
            self._flushes += 1
            self._lock.notify_all()
            try:
                while self._accumulator.pending_records > 0:
                    if self._sender_error is not None:
                        raise client_errors.ClientError(
                            f"the producer's sender thread failed: {self._sender_error}")
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise client_errors.ClientTimeoutError(
                            f"flush did not finish in {timeout_ms} ms "
                            f"({self._accumulator.pending_records} records pending)")
                    self._lock.wait(0.5 if remaining is None else min(remaining, 0.5))
            finally:
                self._flushes -= 1

    def partitions_for(self, topic: str, timeout_ms: int | None = None) -> list[md.PartitionInfo]:
        """The topic's partitions (leader, epoch, replicas, ISR) from fresh-enough metadata."""
        wait = self.config.max_block_ms if timeout_ms is None else timeout_ms
        return list(self.metadata.topic(topic, deadline=time.monotonic() + wait / 1000).partitions)

    def close(self, timeout_ms: int | None = None) -> None:
        """Flush (up to ``timeout_ms``, default: without bound), then stop.

        Records still unsent when the timeout passes fail with ClientClosedError.
        """
        if self._closed:
            return
        with contextlib.suppress(client_errors.ClientError):
            self.flush(timeout_ms)
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        self._sender.join(timeout=None if timeout_ms is None else max(timeout_ms / 1000, 1.0))
        with self._lock:
            leftovers = self._accumulator.abort_all()
            for window in self._in_flight.values():
                for entry in window:
                    if not entry.done and not entry.waiting:  # waiting ones are queued
                        leftovers.extend(entry.batches)
            self._in_flight.clear()
            self._closed = True
        self._fail(leftovers, client_errors.ClientClosedError(
            "the producer was closed before the record was acknowledged"))
        self._release(leftovers)
        with self._streams_lock:
            streams = list(self._streams.values())
            self._streams.clear()
        for stream in streams:
            stream.close()
        self._channels.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- sender thread -----------------------------------------------------------------------

    def _run_sender(self) -> None:
        try:
            while self._run_once():
                pass
        except BaseException as exc:  # reported to flush() callers
            logger.exception("producer sender thread failed")
            with self._lock:
                self._sender_error = exc
                self._lock.notify_all()
            raise

    def _run_once(self) -> bool:
        """One sender round: expire, pick ready partitions, send. False when closed and idle."""
        with self._streams_lock:
            streams = list(self._streams.values())
        now_s = time.monotonic()
        for stream in streams:
            stream.expire(now_s)
        with self._lock:
            now = _now_ms()
            expired = self._accumulator.expired(now, self.config.delivery_timeout_ms)
            self._forget_waiting(expired)
            flushing = self._flushes > 0 or self._closing
            muted = [tp for tp in self._in_flight if not self._may_send(tp)]
            ready, next_ms = self._accumulator.ready(now, flushing=flushing, muted=muted)
            if not ready and not expired:
                if self._closing and not self._accumulator.has_queued() and not self._in_flight:
                    return False
                wait_ms = 1000 if next_ms is None else max(1, next_ms - now)
                self._lock.wait(wait_ms / 1000)
                return True
        self._fail(expired, lambda batch: client_errors.ClientTimeoutError(
            f"{batch.record_count} record(s) for {batch.tp} expired: delivery.timeout.ms="
            f"{self.config.delivery_timeout_ms} passed"))
        self._release(expired)
        if not ready:
            return True
        if self._idempotent and self._producer_id < 0 and not self._init_producer_id():
            with self._lock:
                self._lock.wait(self.config.retry_backoff_ms / 1000)
            return True
        self.metadata.maybe_refresh(deadline=time.monotonic()
                                    + self.config.request_timeout_ms / 1000)
        by_leader: dict[str, list[TopicPartition]] = {}
        unknown: list[TopicPartition] = []
        for tp in ready:
            leader = self.metadata.leader(tp)
            if leader is None:
                unknown.append(tp)
            else:
                by_leader.setdefault(leader.address, []).append(tp)
        if unknown:
            self.metadata.request_update()
        drained: dict[str, dict[TopicPartition, _InFlight]] = {}
        with self._lock:
            now = _now_ms()
            for tp in unknown:
                # No leader known: look again after a backoff, without spinning.
                self._accumulator.backoff(tp, now + self.config.retry_backoff_ms)
            if self._idempotent and self._producer_id < 0:
                by_leader = {}  # an answer dropped the producer id since: a new one first
            for address, tps in by_leader.items():
                for tp in tps:
                    if not self._may_send(tp):
                        continue  # answers came back since ready(): a retry now leads
                    # Idempotent: one batch per partition and request, as Kafka sends.
                    batches = self._accumulator.drain(
                        tp, self.config.max_request_size,
                        max_batches=1 if self._idempotent else None)
                    if batches:
                        for batch in batches:
                            self._assign_identity(batch)
                        drained.setdefault(address, {})[tp] = self._enter_window(tp, batches)
        for address, partitions in drained.items():
            self._send_request(address, partitions)
        return True

    def _may_send(self, tp: TopicPartition) -> bool:
        """Whether ``tp`` may send its first queued batch now (call under ``_lock``).

        A fresh batch: while the window has room and holds no request in flight under
        an older producer id (those are answered before anything is numbered under
        the new one). A batch to resend (it leads its queue, in creation order): only
        when nothing of its partition is in flight, as Kafka does. Asked before the
        accumulator says what is ready, and again when draining: the lock is released
        in between (metadata, InitProducerId) and answers may change the head."""
        window = self._in_flight.get(tp)
        if window is None:
            return True
        head = self._accumulator.first(tp)
        if head is None:
            return False
        sent = [entry for entry in window if not entry.done and not entry.waiting]
        if head.attempts > 0:
            return not sent
        return len(window) < self._max_in_flight and not (self._idempotent and any(
            not self._is_current(entry.batches[0]) for entry in sent))

    def _enter_window(self, tp: TopicPartition, batches: list[acc.ProducerBatch[_BatchResult]]
                      ) -> _InFlight:
        """The window entry of ``batches``, just drained to be sent (call under ``_lock``):
        a batch to resend takes its waiting entry's place, a fresh one goes last."""
        window = self._in_flight.get(tp)
        if window is None:
            window = self._in_flight[tp] = deque()
        if batches[0].attempts > 0:
            for index, entry in enumerate(window):
                if entry.waiting and entry.batches[0] is batches[0]:
                    window[index] = _InFlight(batches, first_in_line=index == 0)
                    return window[index]
        entry = _InFlight(batches, first_in_line=not window)
        window.append(entry)
        return entry

    def _forget_waiting(self, batches: Sequence[acc.ProducerBatch[_BatchResult]]) -> None:
        """Batches taken out of the queue for good (expired) no longer wait in their
        windows (call under ``_lock``)."""
        for batch in batches:
            window = self._in_flight.get(batch.tp)
            if window is None:
                continue
            for entry in window:
                if entry.waiting and entry.batches[0] is batch:
                    entry.waiting = False
                    entry.done = True
            self._slide(batch.tp, window)

    def _slide(self, tp: TopicPartition, window: deque[_InFlight]) -> None:
        while window and window[0].done:
            window.popleft()
        if not window:
            del self._in_flight[tp]

    def _on_sequence_error(self, entry: _InFlight) -> bool:
        """React to OUT_OF_ORDER_SEQUENCE_NUMBER / UNKNOWN_PRODUCER_ID on ``entry``; True
        when its batches must fail to the application rather than be retried.

        Sent behind an unanswered batch, the error says nothing about the producer's
        state (see :class:`_InFlight`): retry as is. At the head of its partition, the
        broker lost the producer's state or the sequence broke: under the current
        producer id, take a new one; a batch that may be written by an earlier attempt
        then fails (renumbering it could write it twice), the others are retried and
        numbered afresh."""
        with self._lock:
            if not entry.first_in_line:
                return False
            if self._is_current(entry.batches[0]):
                self._reset_producer_id()
            return any(batch.maybe_written for batch in entry.batches)

    def _is_current(self, batch: acc.ProducerBatch[_BatchResult]) -> bool:
        """Whether ``batch`` is numbered under the producer's current id and epoch."""
        return (batch.producer_id == self._producer_id
                and batch.producer_epoch == self._producer_epoch)

    def _assign_identity(self, batch: acc.ProducerBatch[_BatchResult]) -> None:
        """Number a batch just drained (call under ``_lock``, in drain order, with a
        producer id): the next sequence of its partition under the current producer id.
        A batch that has an identity keeps it (a resend)."""
        if self._idempotent and batch.producer_id < 0:
            assert self._producer_id >= 0, "batches are numbered only under a producer id"
            sequence = self._next_sequence.get(batch.tp, 0)
            self._next_sequence[batch.tp] = (sequence + batch.record_count) % (1 << 31)
            batch.producer_id = self._producer_id
            batch.producer_epoch = self._producer_epoch
            batch.base_sequence = sequence

    def _encode(self, batch: acc.ProducerBatch[_BatchResult]) -> bytes:
        """The batch's RecordBatch bytes, built once per identity (a retry resends them)."""
        if batch.encoded is None:
            if batch.producer_id < 0:
                batch.encoded = batch.builder.build(compression=self.config.compression_type)
            else:
                batch.encoded = batch.builder.build(
                    compression=self.config.compression_type, producer_id=batch.producer_id,
                    producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence)
        return batch.encoded

    def _init_producer_id(self) -> bool:
        """Get a producer id from a broker (InitProducerId); False to try again later."""
        addresses = list(self.metadata.brokers().values()) or list(self.config.bootstrap_servers)
        problems = []
        for address in addresses:
            try:
                answer = self._channels.stub(address).InitProducerId(
                    broker_pb2.InitProducerIdRequest(producer_id=-1, producer_epoch=-1),
                    timeout=self.config.request_timeout_ms / 1000)
            except grpc.RpcError as exc:
                if md.rpc_error_text(exc) == "UNIMPLEMENTED":
                    # A broker from before idempotent produce: send as Kafka's producer
                    # does to brokers without InitProducerId, without sequence numbers.
                    logger.warning("%s does not serve InitProducerId; producing without "
                                   "idempotence", address)
                    self._idempotent = False
                    return True
                problems.append(f"{address}: {md.rpc_error_text(exc)}")
                continue
            except client_errors.ClientClosedError:
                return False
            code = client_errors.code_of(answer.error.code)
            if code is ErrorCode.NONE:
                with self._lock:
                    self._producer_id = answer.producer_id
                    self._producer_epoch = answer.producer_epoch
                    self._next_sequence.clear()
                logger.debug("producer id %d epoch %d", answer.producer_id,
                             answer.producer_epoch)
                return True
            problems.append(f"{address}: {code.name} {answer.error.message}".rstrip())
        logger.info("InitProducerId failed, will retry: %s", "; ".join(problems))
        return False

    def _reset_producer_id(self) -> None:
        """Drop the producer id (a new one is fetched before the next drain; call under
        ``_lock``). Queued batches that cannot be in a log are numbered afresh under the
        new one; those that may be written keep their identity, and so do batches in
        flight until their answers say otherwise (:meth:`_finish_partition`)."""
        self._producer_id = bh.NO_PRODUCER_ID
        self._producer_epoch = bh.NO_PRODUCER_EPOCH
        self._next_sequence.clear()
        self._accumulator.renumber_unwritten()

    def _send_request(self, address: str, partitions: dict[TopicPartition, _InFlight]) -> None:
        # Built in place with add(): upb copies a submessage passed to a constructor
        # (measured here: 9-13 ms per MiB of records, vs ~0.15 ms this way).
        request = broker_pb2.ProduceRequest(acks=int(self.config.acks),
                                            timeout_ms=self.config.request_timeout_ms)
        topics: dict[str, broker_pb2.ProduceRequest.TopicProduceData] = {}
        failed: list[tuple[TopicPartition, Exception]] = []
        for tp, entry in partitions.items():
            try:
                data = b"".join([self._encode(batch) for batch in entry.batches])
            except (ValueError, KraftlogError) as exc:
                failed.append((tp, exc))
                continue
            topic = topics.get(tp.topic)
            if topic is None:
                topic = topics[tp.topic] = request.topic_data.add(name=tp.topic)
            topic.partition_data.add(index=tp.partition, records=data)
        for tp, problem in failed:
            self._finish_partition(tp, partitions.pop(tp), error=problem, retriable=False)
        if not partitions:
            return
        for entry in partitions.values():
            for batch in entry.batches:
                batch.attempts += 1
        self._send_built(address, request, partitions)

    def _send_built(self, address: str, request: broker_pb2.ProduceRequest,
                    partitions: dict[TopicPartition, _InFlight]) -> None:
        """Send a built request: on the broker's ProduceStream (opened if it has none),
        else unary."""
        timeout_s = self.config.request_timeout_ms / 1000 + _RPC_GRACE_S
        try:
            stream = self._stream(address)
            if stream is not None and stream.send(
                    request, deadline=time.monotonic() + timeout_s,
                    on_answer=lambda response, status: self._on_stream_answer(
                        address, request, partitions, response, status)):
                return
            call = self._channels.stub(address).Produce.future(request, timeout=timeout_s)
        except client_errors.ClientClosedError as exc:
            for tp, entry in partitions.items():
                self._finish_partition(tp, entry, error=exc, retriable=False)
            return
        call.add_done_callback(lambda done: self._on_unary_answer(address, partitions, done))

    def _stream(self, address: str) -> ps.ProduceStream | None:
        """The open ProduceStream to ``address``, a new one if its last ended; None for a
        broker without ProduceStream."""
        with self._streams_lock:
            if address in self._unary_only:
                return None
            stream = self._streams.get(address)
            if stream is None or stream.closed:
                stream = self._streams[address] = ps.ProduceStream(
                    self._channels.stub(address), address)
            return stream

    def _on_stream_answer(self, address: str, request: broker_pb2.ProduceRequest,
                          sent: dict[TopicPartition, _InFlight],
                          response: broker_pb2.ProduceResponse | None, status: str) -> None:
        """Runs on the stream's reader thread: an answer, or the stream's end (``status``)."""
        if response is not None:
            self._on_response(address, sent, response)
        elif status == "UNIMPLEMENTED":
            # A broker from before ProduceStream read nothing: the same request goes unary.
            with self._streams_lock:
                if address not in self._unary_only:
                    logger.info("%s does not serve ProduceStream; producing with unary calls",
                                address)
                self._unary_only.add(address)
            self._send_built(address, request, sent)
        else:
            self._on_failure(address, sent, status)

    def _on_unary_answer(self, address: str, sent: dict[TopicPartition, _InFlight],
                         call: grpc.Future) -> None:
        """Runs on a gRPC thread when a unary Produce RPC ends."""
        try:
            response: broker_pb2.ProduceResponse = call.result()
        except grpc.RpcError as exc:
            self._on_failure(address, sent, md.rpc_error_text(exc))
            return
        except BaseException as exc:  # cancelled on close
            for tp, entry in sent.items():
                self._finish_partition(tp, entry, error=client_errors.ClientError(str(exc)),
                                       retriable=False)
            return
        self._on_response(address, sent, response)

    def _on_failure(self, address: str, sent: dict[TopicPartition, _InFlight],
                    status: str) -> None:
        """A request without an answer (transport failure, deadline, a closed stream): its
        batches may be written, so they keep their identity and are retried."""
        self.metadata.report_unreachable(address)
        code = (ErrorCode.REQUEST_TIMED_OUT if status == "DEADLINE_EXCEEDED"
                else ErrorCode.NETWORK_EXCEPTION)
        for tp, entry in sent.items():
            self._finish_partition(tp, entry, error=client_errors.KafkaApiError(
                code, f"Produce to {address} failed: {status}"), retriable=True,
                maybe_written=True)

    def _on_response(self, address: str, sent: dict[TopicPartition, _InFlight],
                     response: broker_pb2.ProduceResponse) -> None:
        """Complete, retry or fail each partition's batches from a Produce answer."""
        answered: set[TopicPartition] = set()
        for topic in response.responses:
            for part in topic.partition_responses:
                tp = TopicPartition(topic=topic.name, partition=part.index)
                answered_entry = sent.get(tp)
                if answered_entry is None or tp in answered:
                    continue
                entry = answered_entry
                answered.add(tp)
                code = client_errors.code_of(part.error.code)
                if code is ErrorCode.NONE:
                    self._finish_partition(tp, entry, base_offset=part.base_offset,
                                           log_append_time_ms=part.log_append_time_ms)
                    continue
                if client_errors.needs_metadata_refresh(code):
                    self.metadata.request_update()
                    if part.HasField("current_leader"):
                        self.metadata.apply_leader_hint(tp, part.current_leader)
                if self._idempotent and code in (ErrorCode.UNKNOWN_PRODUCER_ID,
                                                       ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER):
                    # This attempt was not written; an earlier one may have been.
                    if self._on_sequence_error(entry):
                        why = ("the batch may already be written by an earlier attempt, "
                               "so it is not resent under a new producer id")
                        self._finish_partition(tp, entry, error=client_errors.error_for(
                            code, f"{part.error.message}; {why}" if part.error.message
                            else why, topic=tp.topic, context=f"{tp} on {address}"))
                        continue
                    self._finish_partition(tp, entry, error=client_errors.error_for(
                        code, part.error.message, topic=tp.topic, context=f"{tp} on {address}"),
                        retriable=True)
                    continue
                self._finish_partition(tp, entry, error=client_errors.error_for(
                    code, part.error.message, topic=tp.topic, context=f"{tp} on {address}"),
                    retriable=client_errors.is_retriable(code),
                    maybe_written=not client_errors.was_not_appended(code))
        for tp, entry in sent.items():
            if tp not in answered:
                self._finish_partition(tp, entry, error=client_errors.KafkaApiError(
                    ErrorCode.UNKNOWN_SERVER_ERROR, f"{address} did not answer for {tp}"),
                    retriable=True, maybe_written=True)

    def _finish_partition(self, tp: TopicPartition, entry: _InFlight, *,
                          error: Exception | None = None, retriable: bool = False,
                          maybe_written: bool = False,
                          base_offset: int = -1, log_append_time_ms: int = -1) -> None:
        """Complete or requeue ``entry`` (a request's batches of ``tp``) and slide the
        partition's window past the requests that are done. ``maybe_written``: the
        attempt ended without a definite refusal, so its batches keep their identity.

        Futures are resolved before the batches are released, so a flush() that
        returns has every future of its records already done.
        """
        with self._lock:
            window = self._in_flight.get(tp)
            if window is None or entry not in window:
                return  # close() already failed these batches
            batches = entry.batches
            if maybe_written:
                for batch in batches:
                    batch.maybe_written = True
            retry = (error is not None and retriable and not self._closed
                     and all(self._can_retry(batch) for batch in batches))
            if retry:
                for batch in batches:
                    if not self._is_current(batch) and not batch.maybe_written:
                        # Numbered under an older producer id and in no log: renumber.
                        batch.forget_identity()
                self._accumulator.reenqueue(
                    batches, retry_at_ms=_now_ms() + self.config.retry_backoff_ms)
                # Each batch keeps the request's place while it waits (a retried batch
                # is resent alone, so one entry per batch).
                index = window.index(entry)
                del window[index]
                for offset, batch in enumerate(batches):
                    window.insert(index + offset,
                                  _InFlight([batch], first_in_line=False, waiting=True))
            else:
                entry.done = True
                self._slide(tp, window)
            self._lock.notify_all()
        if retry:
            logger.debug("retrying %s after %s", tp, error)
            return
        if error is not None:
            self._fail(batches, error)
        else:
            self._succeed(tp, batches, base_offset, log_append_time_ms)
        self._release(batches)

    def _succeed(self, tp: TopicPartition, batches: Sequence[acc.ProducerBatch[_BatchResult]],
                 base_offset: int, log_append_time_ms: int) -> None:
        known = base_offset >= 0 and self.config.acks is not Acks.NONE
        offset = base_offset
        for batch in batches:
            _resolve(batch.result, _Acknowledged(
                tp.topic, tp.partition, offset if known else -1, log_append_time_ms), None)
            offset += batch.record_count

    def _release(self, batches: Sequence[acc.ProducerBatch[_BatchResult]]) -> None:
        with self._lock:
            for batch in batches:
                self._accumulator.complete(batch)
            self._lock.notify_all()

    def _can_retry(self, batch: acc.ProducerBatch[_BatchResult]) -> bool:
        deadline = batch.created_ms + self.config.delivery_timeout_ms
        return (batch.attempts <= self.config.retries
                and _now_ms() + self.config.retry_backoff_ms < deadline)

    def _fail(self, batches: Sequence[acc.ProducerBatch[_BatchResult]],
              error: Exception | Callable[[acc.ProducerBatch[_BatchResult]], Exception]
              ) -> None:
        for batch in batches:
            exc = error(batch) if callable(error) and not isinstance(error, Exception) else error
            assert isinstance(exc, Exception)
            _resolve(batch.result, None, exc)
