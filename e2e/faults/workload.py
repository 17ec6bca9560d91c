"""The client workload: idempotent acks=all producers of unique values and a reader.

Owns :class:`Workload`: ``producers`` threads, each with its own
:class:`kraftlog.client.Producer` (acks=all, enable.idempotence, its own producer id)
sending ``p<i>-<n>`` values (unique in the run) at a paced rate, keyed by the value so
murmur2 spreads them over the partitions; and one reader thread with a
:class:`kraftlog.client.Consumer` assigned every partition from the beginning. It
records, on one clock (seconds since the workload started):

- every acknowledgement: value, partition, offset (:class:`~.evidence.Ack`);
- every send that ended in an error, or was still open when the producer closed:
  indeterminate (:class:`~.evidence.Indeterminate`; written or not, nobody knows);
- sends ``send()`` refused at once (never handed to the producer: not written);
- every record the reader returned (:class:`~.evidence.Observation`).

The client namespace is the only place this runs (the driver runs in it). Every loop is
bounded by the stop event and by its own deadline. Edge module: threads, the client
library, the clock.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable

from e2e.faults import evidence as ev
from kraftlog import client

REQUEST_TIMEOUT_MS = 3000
"""The producers' ``request.timeout.ms``: a Produce answer lost to a fault is retried after it."""
DEFAULT_DELIVERY_TIMEOUT_MS = 4000
"""The producers' ``delivery.timeout.ms``: shorter than the longer faults, so batches expire
(indeterminate sends; a sequence gap the broker answers with OUT_OF_ORDER_SEQUENCE_NUMBER):
the paths where an idempotent producer can write a batch twice. With 10 s no batch of
the default schedule expires and those paths go untested."""
SEND_QUEUE_LIMIT = 3000
"""A producer waits while this many of its records are unacknowledged (a dead cluster
must not pile up an unbounded backlog)."""


class Workload:
    def __init__(self, *, bootstrap: tuple[str, ...], topic: str, partitions: int,
                 producers: int, rate_per_s: float, clock: Callable[[], float],
                 delivery_timeout_ms: int = DEFAULT_DELIVERY_TIMEOUT_MS) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.producer_count = producers
        self.rate_per_s = rate_per_s
        self.clock = clock
        self._lock = threading.Lock()
        self.acks: list[ev.Ack] = []
        self.indeterminate: list[ev.Indeterminate] = []
        self.unsent = 0
        self.observations: list[ev.Observation] = []
        self.reader_errors: list[str] = []
        self._open: dict[str, tuple[str, float]] = {}  # value -> (producer, sent_s)
        self._backlog: dict[str, int] = {f"p{i + 1}": 0 for i in range(producers)}
        self._stop_producing = threading.Event()
        self._stop_reading = threading.Event()
        self._producers = [client.Producer(client.ProducerConfig(
            bootstrap_servers=bootstrap, acks=client.Acks.ALL, enable_idempotence=True,
            linger_ms=5, request_timeout_ms=REQUEST_TIMEOUT_MS,
            delivery_timeout_ms=delivery_timeout_ms,
            max_block_ms=2000, retry_backoff_ms=100)) for _ in range(producers)]
        self._threads = [threading.Thread(target=self._produce, args=(i,), daemon=True,
                                          name=f"faults-producer-{i}")
                         for i in range(producers)]
        self._reader = threading.Thread(target=self._read, daemon=True, name="faults-reader")
        self.reader_positions: dict[int, int] = {}

    def start(self) -> None:
        for thread in self._threads:
            thread.start()
        self._reader.start()

    # -- producing ----------------------------------------------------------------------------

    def _produce(self, index: int) -> None:
        producer = self._producers[index]
        name = f"p{index + 1}"
        interval_s = self.producer_count / self.rate_per_s
        n = 0
        next_at = time.monotonic()
        while not self._stop_producing.is_set():
            with self._lock:
                backlog = self._backlog[name]
            if backlog >= SEND_QUEUE_LIMIT:
                self._stop_producing.wait(0.05)
                continue
            value = f"{name}-{n:07d}"
            n += 1
            sent_s = self.clock()
            with self._lock:
                self._open[value] = (name, sent_s)
                self._backlog[name] += 1
            try:
                future = producer.send(self.topic, value.encode(), key=value.encode())
            except (client.ClientError, ValueError):
                with self._lock:
                    del self._open[value]
                    self._backlog[name] -= 1
                    self.unsent += 1
            else:
                future.add_done_callback(functools.partial(self._done, name, value, sent_s))
            next_at += interval_s
            delay = next_at - time.monotonic()
            if delay > 0:
                self._stop_producing.wait(delay)
            else:
                next_at = time.monotonic()

    def _done(self, producer: str, value: str, sent_s: float, future: client.RecordFuture
              ) -> None:
        now = self.clock()
        error = future.exception()
        with self._lock:
            if self._open.pop(value, None) is None:
                return
            self._backlog[producer] -= 1
            if error is not None:
                self.indeterminate.append(ev.Indeterminate(
                    producer=producer, value=value, at_s=now,
                    error=f"{type(error).__name__}: {error}"[:300]))
                return
            meta = future.result()
            self.acks.append(ev.Ack(producer=producer, value=value, partition=meta.partition,
                                    offset=meta.offset, sent_s=sent_s, acked_s=now))

    def stop_producing(self, *, timeout_s: float) -> None:
        """Stop sending, wait up to ``timeout_s`` for the open sends, close the producers;
        sends still open then are indeterminate."""
        self._stop_producing.set()
        for thread in self._threads:
            thread.join(timeout=10)
        deadline = time.monotonic() + timeout_s
        for producer in self._producers:
            with contextlib.suppress(client.ClientError):
                producer.flush(timeout_ms=max(1, int((deadline - time.monotonic()) * 1000)))
        for producer in self._producers:
            with contextlib.suppress(client.ClientError):
                producer.close(timeout_ms=1000)
        with self._lock:
            now = self.clock()
            for value, (producer_name, _sent_s) in sorted(self._open.items()):
                self.indeterminate.append(ev.Indeterminate(
                    producer=producer_name, value=value, at_s=now,
                    error="still open when the producer closed"))
            self._open.clear()

    # -- reading ------------------------------------------------------------------------------

    def _new_consumer(self) -> client.Consumer:
        consumer = client.Consumer(client.ConsumerConfig(
            bootstrap_servers=self.bootstrap, auto_offset_reset=client.OffsetReset.EARLIEST,
            request_timeout_ms=5000, fetch_max_wait_ms=200, default_api_timeout_ms=5000))
        partitions = [client.TopicPartition(topic=self.topic, partition=p)
                      for p in range(self.partitions)]
        consumer.assign(partitions)
        for tp in partitions:
            position = self.reader_positions.get(tp.partition)
            if position is None:
                consumer.seek_to_beginning([tp])
            else:
                consumer.seek(tp, position)
        return consumer

    def _read(self) -> None:
        consumer: client.Consumer | None = None
        while not self._stop_reading.is_set():
            try:
                if consumer is None:
                    consumer = self._new_consumer()
                records = consumer.poll(max_records=2000, timeout_ms=300)
            except client.ClientError as exc:
                self.reader_errors.append(f"{self.clock():.2f}s {type(exc).__name__}: {exc}"[:300])
                if consumer is not None:
                    consumer.close()
                    consumer = None
                self._stop_reading.wait(0.3)
                continue
            now = self.clock()
            with self._lock:
                for record in records:
                    self.observations.append(ev.Observation(
                        partition=record.partition, offset=record.offset,
                        value=(record.value or b"").decode("utf-8", "replace"), at_s=now))
                    self.reader_positions[record.partition] = record.offset + 1
        if consumer is not None:
            consumer.close()

    def stop_reading(self) -> None:
        self._stop_reading.set()
        self._reader.join(timeout=15)

    def snapshot(self) -> tuple[list[ev.Ack], list[ev.Indeterminate], int, list[ev.Observation]]:
        with self._lock:
            return list(self.acks), list(self.indeterminate), self.unsent, list(self.observations)


def read_all(bootstrap: tuple[str, ...], topic: str, partitions: int, *, timeout_s: float
             ) -> dict[int, tuple[tuple[int, str], ...]]:
    """Every record of every partition, from the beginning to the end offsets (the high
    watermarks) of the moment; RuntimeError if that takes longer than ``timeout_s``."""
    consumer = client.Consumer(client.ConsumerConfig(
        bootstrap_servers=bootstrap, auto_offset_reset=client.OffsetReset.EARLIEST,
        request_timeout_ms=5000, default_api_timeout_ms=10000))
    try:
        tps = [client.TopicPartition(topic=topic, partition=p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(tps)
        ends = consumer.end_offsets(tps)
        out: dict[int, list[tuple[int, str]]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise RuntimeError(f"reading back took over {timeout_s:g}s: positions "
                                   f"{[consumer.position(tp) for tp in tps]}, ends "
                                   f"{[ends[tp] for tp in tps]}")
            for record in consumer.poll(max_records=5000, timeout_ms=500):
                if record.offset < ends[client.TopicPartition(topic=topic,
                                                              partition=record.partition)]:
                    out[record.partition].append(
                        (record.offset, (record.value or b"").decode("utf-8", "replace")))
        return {p: tuple(records) for p, records in out.items()}
    finally:
        consumer.close()
