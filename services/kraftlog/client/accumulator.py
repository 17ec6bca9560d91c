"""The producer's per-partition batches: append, readiness (batch.size / linger.ms), drain, retry.

Owns :class:`RecordAccumulator` (after Kafka's ``RecordAccumulator``): records
are appended to the last open :class:`ProducerBatch` of their partition, encoded
there and then (:class:`kraftlog.storage.record_batch.RecordsBuilder`, Kafka's
``MemoryRecordsBuilder``: the sender only adds the header); a batch
closes when it reaches ``batch.size`` bytes (a record bigger than that gets a
batch of its own). A partition is *ready* when its first batch is closed, has
waited ``linger.ms``, or a flush or close asks for everything; the sender drains
ready partitions, at most ``max.request.size`` bytes each. The producer says
which partitions may not send their first batch now (*muted*: a full
``max.in.flight.requests.per.connection`` window, or a batch to resend while
requests are in flight). A failed batch goes back to its queue in creation order,
before every batch created after it.

Each batch carries one *result* handle, made by the ``new_result`` factory when the
batch is opened and opaque to this module (the producer's shared outcome of the
batch's records, Kafka's ``ProduceRequestResult``). Pure: the
caller passes ``now_ms`` (a monotonic clock), no locks here (the producer holds
its own around every call).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from kraftlog import errors
from kraftlog.ids import TopicPartition
from kraftlog.storage import batch_header as bh
from kraftlog.storage import record_batch as rb

H = TypeVar("H")

RECORD_OVERHEAD_BYTES = 21
"""Upper bound of a v2 record's framing (length, attributes, deltas, lengths), in bytes."""


def estimate_fields(key: bytes | None, value: bytes | None,
                    headers: tuple[rb.Header, ...]) -> int:
    """Bytes a record adds to an uncompressed batch, rounded up (used for batch.size)."""
    size = RECORD_OVERHEAD_BYTES
    if key is not None:
        size += len(key)
    if value is not None:
        size += len(value)
    for header in headers:
        size += len(header.key) + 10 + (len(header.value) if header.value is not None else 0)
    return size


@dataclass(slots=True, kw_only=True)
class ProducerBatch(Generic[H]):
    """Records bound for one partition, sent (and retried) together as one RecordBatch."""

    tp: TopicPartition
    created_ms: int
    result: H
    """The outcome its records' futures share (the producer's; opaque here)."""
    builder: rb.RecordsBuilder = field(default_factory=rb.RecordsBuilder)
    """Its records, encoded as appended; ``builder.count`` of them."""
    size_bytes: int = bh.HEADER_SIZE
    closed: bool = False
    attempts: int = 0
    retry_at_ms: int = 0
    """Not to be sent again before this time (retry.backoff.ms after a failure)."""
    encoded: bytes | None = None
    """The RecordBatch bytes once built; reused by retries so timestamps stay put."""
    order: int = 0
    """Creation order within the accumulator: a retried batch goes back in this order."""
    producer_id: int = bh.NO_PRODUCER_ID
    """The batch's identity with the idempotent producer: producer id, epoch and base
    sequence, assigned when it is first drained (-1 when it has none yet)."""
    producer_epoch: int = bh.NO_PRODUCER_EPOCH
    base_sequence: int = bh.NO_SEQUENCE
    maybe_written: bool = False
    """An attempt ended without a definite refusal (a lost answer, a timeout,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND, ...): the batch may be in the log under its
    identity. It then keeps that identity until a broker resolves it or it fails to
    the application; it is never renumbered (that could write it twice)."""

    def forget_identity(self) -> None:
        """Drop the identity and the bytes built with it, so the batch is numbered afresh
        at its next drain. Only for a batch that cannot be in any log."""
        if self.maybe_written:
            raise errors.InvariantViolation(
                f"a batch of {self.tp} that may be written keeps its identity "
                f"(producer id {self.producer_id}, base sequence {self.base_sequence})")
        self.producer_id = bh.NO_PRODUCER_ID
        self.producer_epoch = bh.NO_PRODUCER_EPOCH
        self.base_sequence = bh.NO_SEQUENCE
        self.encoded = None

    @property
    def record_count(self) -> int:
        return self.builder.count


class RecordAccumulator(Generic[H]):
    """Per-partition queues of batches. See the module docstring."""

    def __init__(self, *, batch_size: int, linger_ms: int, new_result: Callable[[], H]) -> None:
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self._new_result = new_result
        self._queues: dict[TopicPartition, deque[ProducerBatch[H]]] = {}
        self._created = 0
        self.buffered_bytes = 0
        """Bytes of records appended and not yet completed (buffer.memory accounting)."""
        self.pending_records = 0

    def append(self, tp: TopicPartition, key: bytes | None, value: bytes | None,
               headers: tuple[rb.Header, ...], timestamp_ms: int, *, now_ms: int,
               size: int | None = None) -> ProducerBatch[H]:
        """Encode one record into ``tp``'s open batch (a new one when there is none or the
        record does not fit) and return that batch: the record is its last
        (``builder.count - 1``). A batch that reached ``batch.size``, or that the record
        did not fit in, is closed (ready to send). ``size``: :func:`estimate_fields`,
        when the caller has it already. Raises ValueError for a record the encoder
        refuses (nothing is appended then)."""
        if size is None:
            size = estimate_fields(key, value, headers)
        queue = self._queues.get(tp)
        if queue is None:  # (not setdefault: that would build a deque on every append)
            queue = self._queues[tp] = deque()
        last = queue[-1] if queue else None
        if last is None or last.closed or last.attempts > 0 or (
                last.builder.count and last.size_bytes + size > self.batch_size):
            if last is not None:
                last.closed = True
            self._created += 1
            last = ProducerBatch(tp=tp, created_ms=now_ms, order=self._created,
                                 result=self._new_result())
            queue.append(last)
        try:
            last.builder.append(key, value, headers, timestamp_ms)
        except ValueError:
            if not last.builder.count:
                queue.pop()
            raise
        last.size_bytes += size
        self.buffered_bytes += size
        self.pending_records += 1
        if last.size_bytes >= self.batch_size:
            last.closed = True
        return last

    def ready(self, now_ms: int, *, flushing: bool, muted: Iterable[TopicPartition] = ()
              ) -> tuple[list[TopicPartition], int | None]:
        """Partitions whose first batch may be sent now, and the next time one may become ready.

        ``muted`` partitions (the producer's in-flight rules hold their first batch)
        are skipped; the producer wakes the sender when an answer changes that.
        """
        skip = set(muted)
        ready: list[TopicPartition] = []
        next_ms: int | None = None
        for tp, queue in self._queues.items():
            if not queue or tp in skip:
                continue
            head = queue[0]
            if head.retry_at_ms > now_ms:
                due = head.retry_at_ms
            elif head.closed or len(queue) > 1 or flushing or head.attempts > 0:
                ready.append(tp)
                continue
            else:
                due = head.created_ms + self.linger_ms
                if due <= now_ms:
                    ready.append(tp)
                    continue
            next_ms = due if next_ms is None else min(next_ms, due)
        return ready, next_ms

    def drain(self, tp: TopicPartition, max_bytes: int, *, max_batches: int | None = None,
              ) -> list[ProducerBatch[H]]:
        """Take the first batches of ``tp`` up to ``max_bytes`` and ``max_batches`` (always
        at least one).

        A batch being retried goes alone, so a retry never merges with newer data.
        """
        queue = self._queues.get(tp)
        if not queue:
            return []
        taken = [queue.popleft()]
        total = taken[0].size_bytes
        if taken[0].attempts == 0:
            while queue and queue[0].attempts == 0 and queue[0].retry_at_ms == 0 and (
                    total + queue[0].size_bytes <= max_bytes) and (
                    max_batches is None or len(taken) < max_batches):
                batch = queue.popleft()
                total += batch.size_bytes
                taken.append(batch)
        for batch in taken:
            batch.closed = True
        return taken

    def reenqueue(self, batches: list[ProducerBatch[H]], *, retry_at_ms: int) -> None:
        """Put in-flight batches back in their queue for a retry, in creation order: before
        every batch created after them (batches of several failed requests may come
        back in any order; they are resent oldest first)."""
        for batch in batches:
            batch.retry_at_ms = retry_at_ms
            queue = self._queues.get(batch.tp)
            if queue is None:
                queue = self._queues[batch.tp] = deque()
            index = 0
            while index < len(queue) and queue[index].order < batch.order:
                index += 1
            queue.insert(index, batch)

    def queued(self, tp: TopicPartition) -> int:
        """Batches of ``tp`` waiting to be sent (drained ones, in flight, do not count)."""
        queue = self._queues.get(tp)
        return len(queue) if queue else 0

    def first(self, tp: TopicPartition) -> ProducerBatch[H] | None:
        """The batch ``tp`` sends next, None when its queue is empty."""
        queue = self._queues.get(tp)
        return queue[0] if queue else None

    def renumber_unwritten(self) -> None:
        """Forget the identity of every queued batch that cannot be in a log (the
        idempotent producer numbers them afresh under a new producer id); a batch that
        may be written keeps its own (:attr:`ProducerBatch.maybe_written`)."""
        for queue in self._queues.values():
            for batch in queue:
                if not batch.maybe_written:
                    batch.forget_identity()

    def backoff(self, tp: TopicPartition, until_ms: int) -> None:
        """Hold ``tp``'s first batch until ``until_ms`` (its leader is not known yet)."""
        queue = self._queues.get(tp)
        if queue:
            queue[0].retry_at_ms = max(queue[0].retry_at_ms, until_ms)

    def complete(self, batch: ProducerBatch[H]) -> None:
        """A drained batch is done (acknowledged or failed for good): release its bytes."""
        self.buffered_bytes -= batch.size_bytes - bh.HEADER_SIZE
        self.pending_records -= batch.builder.count

    def expired(self, now_ms: int, delivery_timeout_ms: int) -> list[ProducerBatch[H]]:
        """Remove and return queued batches older than ``delivery_timeout_ms``."""
        out: list[ProducerBatch[H]] = []
        for queue in self._queues.values():
            while queue and queue[0].created_ms + delivery_timeout_ms <= now_ms:
                out.append(queue.popleft())
        return out

    def abort_all(self) -> list[ProducerBatch[H]]:
        """Remove and return every queued batch (close without waiting)."""
        out = [batch for queue in self._queues.values() for batch in queue]
        self._queues.clear()
        return out

    def has_queued(self) -> bool:
        return any(self._queues.values())
