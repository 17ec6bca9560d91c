"""Idempotent-producer state of one partition replica (KIP-98; Kafka's ``ProducerStateManager``).

Owns, per producer id seen in the partition's log: the producer epoch of its
last batch and the sequence and offset ranges of its last
:data:`NUM_BATCHES_TO_RETAIN` batches of that epoch (Kafka's
``ProducerStateEntry``). The partition leader asks it, before appending a
produce request, whether each batch is

* a **duplicate** of a cached batch (same epoch, same first and last sequence):
  the retry of a batch whose answer was lost; the leader answers NONE with the
  original offsets and appends nothing (Kafka answers the same; older brokers
  answered DUPLICATE_SEQUENCE_NUMBER, which clients take as success);
* from an **older epoch** than the producer's: INVALID_PRODUCER_EPOCH;
* **out of order**: a new epoch not starting at sequence 0, or a sequence
  that does not follow the last one (``last + 1``, wrapping from
  ``INT32_MAX`` to 0): OUT_OF_ORDER_SEQUENCE_NUMBER;
* from an **unknown producer** that does not start at sequence 0:
  UNKNOWN_PRODUCER_ID (Kafka before KIP-360). The state is a function of the
  log, so an unknown producer is one none of whose batches is in the log
  (never written, truncated away, or removed by retention); the client must
  start over with a new producer id (InitProducerId) and sequence 0. This
  refuses rather than guesses: accepting any sequence (Kafka since KIP-360)
  would also accept a batch whose predecessors were lost.

Every replica keeps the same state: the leader after each append
(:meth:`ProducerStateManager.append`), followers from the headers of what they
replicate (no checks: the leader already made them), recovery and truncation
by replaying the log's batch headers (:meth:`ProducerStateManager.rebuild`),
retention by dropping what fell below the log start offset
(:meth:`ProducerStateManager.truncate_head`). So a follower that becomes leader
dedupes the retries of batches its predecessor acknowledged, and
``rebuild(log) == incremental state`` holds at every step.

Callers: :mod:`kraftlog.broker.partition`. Pure: no clock, no I/O; batches come
in as :class:`ProducerBatch` values read from the 61-byte headers (records are
never decoded). Not thread-safe.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kraftlog.error_codes import ErrorCode
from kraftlog.storage import batch_header as bh

NUM_BATCHES_TO_RETAIN = 5
"""Kafka's ``ProducerStateEntry.NUM_BATCHES_TO_RETAIN``: a producer has at most
five requests in flight per partition (``max.in.flight.requests.per.connection``),
so the retry of any of them is among its last five batches."""
INT32_MAX = (1 << 31) - 1
NO_PRODUCER_ID = bh.NO_PRODUCER_ID
NO_PRODUCER_EPOCH = bh.NO_PRODUCER_EPOCH


def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment`` wrapping past ``INT32_MAX`` to 0 (Kafka's DefaultRecordBatch.incrementSequence)."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def in_sequence(last_sequence: int, next_sequence: int) -> bool:
    """True when ``next_sequence`` directly follows ``last_sequence`` (wrapping at ``INT32_MAX``)."""
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == INT32_MAX)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerBatch:
    """What a batch header says about its producer (no offsets: a leader has not assigned them yet)."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_offset_delta: int
    """Records in the batch minus one; the last sequence is ``base_sequence`` plus this."""

    @property
    def last_sequence(self) -> int:
        return increment_sequence(self.base_sequence, self.last_offset_delta)

    @classmethod
    def of(cls, header: bh.BatchHeader) -> ProducerBatch | None:
        """The producer fields of ``header``; None for a non-idempotent (producerId -1) or control batch."""
        producer_id = header.producer_id
        if producer_id < 0 or header.is_control:
            return None
        return cls(producer_id=producer_id, producer_epoch=header.producer_epoch,
                   base_sequence=header.base_sequence, last_offset_delta=header.last_offset_delta)


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchMetadata:
    """One appended batch of a producer: its sequence range and where it went (Kafka's BatchMetadata)."""

    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerEntry:
    """A producer's state in this partition (Kafka's ProducerStateEntry).

    Invariant: ``batches`` holds 1..NUM_BATCHES_TO_RETAIN batches, oldest first,
    all written with ``producer_epoch``, in offset and sequence order.
    """

    producer_id: int
    producer_epoch: int
    batches: tuple[BatchMetadata, ...]

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset

    def find_duplicate(self, batch: ProducerBatch) -> BatchMetadata | None:
        """The cached batch ``batch`` retries: same epoch and the same sequence range."""
        if batch.producer_epoch != self.producer_epoch:
            return None
        last = batch.last_sequence
        for cached in self.batches:
            if cached.first_sequence == batch.base_sequence and cached.last_sequence == last:
                return cached
        return None

    def with_batch(self, batch: ProducerBatch, *, first_offset: int, last_offset: int) -> ProducerEntry:
        """This entry after ``batch`` was appended at ``[first_offset, last_offset]``.

        A new epoch forgets the previous epoch's batches (Kafka's maybeUpdateProducerEpoch).
        """
        added = BatchMetadata(first_sequence=batch.base_sequence, last_sequence=batch.last_sequence,
                              first_offset=first_offset, last_offset=last_offset)
        kept = self.batches if batch.producer_epoch == self.producer_epoch else ()
        return ProducerEntry(producer_id=self.producer_id, producer_epoch=batch.producer_epoch,
                             batches=(*kept, added)[-NUM_BATCHES_TO_RETAIN:])


def _new_entry(batch: ProducerBatch, *, first_offset: int, last_offset: int) -> ProducerEntry:
    return ProducerEntry(producer_id=batch.producer_id, producer_epoch=batch.producer_epoch, batches=(
        BatchMetadata(first_sequence=batch.base_sequence, last_sequence=batch.last_sequence,
                      first_offset=first_offset, last_offset=last_offset),))


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendCheck:
    """The verdict on a produce request's batches (:meth:`ProducerStateManager.check_leader_append`).

    ``error`` NONE and ``duplicate`` None: append them. ``duplicate`` set: every
    batch was already written; answer NONE with these offsets and append
    nothing. Otherwise ``error`` says why nothing may be appended, and
    ``batch_index`` which batch of the request (0-based) was refused.
    """

    error: ErrorCode = ErrorCode.NONE
    message: str = ""
    batch_index: int = -1
    duplicate: BatchMetadata | None = None


class ProducerStateManager:
    """The producers of one partition replica. See the module docstring."""

    def __init__(self, name: str = "") -> None:
        self._name = name
        self._producers: dict[int, ProducerEntry] = {}

    @property
    def producers(self) -> Mapping[int, ProducerEntry]:
        """Producer id -> entry (read-only view)."""
        return self._producers

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    def __len__(self) -> int:
        return len(self._producers)

    # ================================================================== leader check

    def check_leader_append(self, batches: Sequence[ProducerBatch | None]) -> AppendCheck:
        """Check a produce request's batches, in order, against the state (Kafka's
        analyzeAndValidateProducerState with origin CLIENT). Changes nothing.

        ``batches`` has one item per batch of the request, None for a batch
        without a producer id (never checked). Batches of the same producer
        within the request must follow each other. A request whose batches are
        all duplicates of contiguous written batches is answered as a
        duplicate; a request mixing duplicates with other batches is refused
        with INVALID_RECORD (a retry must resend exactly what it sent).
        """
        pending: dict[int, ProducerEntry] = {}
        duplicates: list[BatchMetadata] = []
        fresh = 0
        for index, batch in enumerate(batches):
            if batch is None:
                fresh += 1
                continue
            entry = pending.get(batch.producer_id) or self._producers.get(batch.producer_id)
            duplicate = entry.find_duplicate(batch) if entry is not None else None
            if duplicate is not None:
                duplicates.append(duplicate)
                continue
            error, message = self._check_batch(entry, batch)
            if error is not ErrorCode.NONE:
                return AppendCheck(error=error, message=f"batch {index}: {message}", batch_index=index)
            fresh += 1
            # Offsets are not known before the append; only sequences matter for the next check.
            pending[batch.producer_id] = (_new_entry(batch, first_offset=-1, last_offset=-1) if entry is None
                                          else entry.with_batch(batch, first_offset=-1, last_offset=-1))
        if not duplicates:
            return AppendCheck()
        contiguous = all(b.first_offset == a.last_offset + 1 for a, b in itertools.pairwise(duplicates))
        if fresh or not contiguous:
            return AppendCheck(
                error=ErrorCode.INVALID_RECORD,
                message=f"{self._name}: the request mixes {len(duplicates)} already written batch(es) "
                        f"(first at offset {duplicates[0].first_offset}) with {fresh} new one(s); "
                        "a retry must resend exactly the batches it sent")
        return AppendCheck(duplicate=BatchMetadata(
            first_sequence=duplicates[0].first_sequence, last_sequence=duplicates[-1].last_sequence,
            first_offset=duplicates[0].first_offset, last_offset=duplicates[-1].last_offset))

    def _check_batch(self, entry: ProducerEntry | None, batch: ProducerBatch) -> tuple[ErrorCode, str]:
        pid, epoch, seq = batch.producer_id, batch.producer_epoch, batch.base_sequence
        if epoch < 0 or seq < 0:
            # Kafka's LogValidator: a batch with a producer id needs an epoch and a sequence.
            return (ErrorCode.INVALID_RECORD,
                    f"producer {pid} batch has producer epoch {epoch} and base sequence {seq}; "
                    "both must be >= 0 when producerId is set")
        if entry is None:
            if seq != 0:
                return (ErrorCode.UNKNOWN_PRODUCER_ID,
                        f"{self._name} has no state for producer {pid} (epoch {epoch}) and its batch "
                        f"starts at sequence {seq}, not 0; get a new producer id and start at 0")
            return ErrorCode.NONE, ""
        if epoch < entry.producer_epoch:
            return (ErrorCode.INVALID_PRODUCER_EPOCH,
                    f"producer {pid} epoch {epoch} is older than its epoch {entry.producer_epoch} "
                    f"in {self._name}")
        if epoch > entry.producer_epoch:
            if seq != 0:
                return (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                        f"producer {pid} new epoch {epoch} (was {entry.producer_epoch}) must start at "
                        f"sequence 0, not {seq}, in {self._name}")
            return ErrorCode.NONE, ""
        if not in_sequence(entry.last_sequence, seq):
            return (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {pid} epoch {epoch}: sequence {seq} does not follow the last written "
                    f"sequence {entry.last_sequence} (offset {entry.last_offset}) in {self._name}")
        return ErrorCode.NONE, ""

    # ================================================================== updates

    def append(self, batch: ProducerBatch, *, first_offset: int, last_offset: int) -> None:
        """Record that ``batch`` is in the log at ``[first_offset, last_offset]`` (leader, follower, replay).

        Not checked (a follower takes what its leader wrote, Kafka's origin
        REPLICATION); offsets must grow.
        """
        entry = self._producers.get(batch.producer_id)
        self._producers[batch.producer_id] = (
            _new_entry(batch, first_offset=first_offset, last_offset=last_offset) if entry is None
            else entry.with_batch(batch, first_offset=first_offset, last_offset=last_offset))

    def append_headers(self, headers: Iterable[bh.BatchHeader]) -> None:
        """:meth:`append` every idempotent batch of ``headers``, which carry their offsets."""
        for header in headers:
            batch = ProducerBatch.of(header)
            if batch is not None:
                self.append(batch, first_offset=header.base_offset, last_offset=header.last_offset)

    def truncate_head(self, log_start_offset: int) -> int:
        """Forget batches wholly below ``log_start_offset`` (retention); returns producers dropped.

        A producer left with no batch is dropped: its next batch must then
        start at sequence 0 (UNKNOWN_PRODUCER_ID otherwise), as after a
        rebuild from what is left of the log.
        """
        dropped = 0
        for producer_id, entry in list(self._producers.items()):
            if entry.batches[0].last_offset >= log_start_offset:
                continue
            kept = tuple(b for b in entry.batches if b.last_offset >= log_start_offset)
            if kept:
                self._producers[producer_id] = ProducerEntry(
                    producer_id=producer_id, producer_epoch=entry.producer_epoch, batches=kept)
            else:
                del self._producers[producer_id]
                dropped += 1
        return dropped

    def has_batches_from(self, offset: int) -> bool:
        """True when some producer's last batch ends at or after ``offset``.

        When False, cutting the log at ``offset`` removes no batch of a known
        producer, so the state after the cut is the state now (no rebuild needed).
        """
        return any(entry.last_offset >= offset for entry in self._producers.values())

    def clear(self) -> None:
        self._producers.clear()

    def restore(self, entries: Iterable[ProducerEntry]) -> None:
        """Replace the state with ``entries`` (a snapshot's)."""
        self._producers = {entry.producer_id: entry for entry in entries}

    def rebuild(self, headers: Iterable[bh.BatchHeader]) -> None:
        """Replace the state with the replay of ``headers`` (the whole log, oldest first)."""
        self._producers.clear()
        self.append_headers(headers)
