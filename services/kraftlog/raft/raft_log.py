"""What the raft core needs from the replicated log (``__cluster_metadata-0``).

A narrow, batch-bytes-based :class:`RaftLog` protocol so that the same core runs
over :class:`~.memory_log.MemoryRaftLog` (simulator, unit tests) and over the
segmented storage engine (a later adapter around ``kraftlog.storage.log.Log``).
Everything in and out is Kafka RecordBatch v2 bytes; the log patches offsets
and the partition leader epoch into headers and keeps a leader-epoch cache
(``leader-epoch-checkpoint``) for :meth:`RaftLog.end_offset_for_epoch`.

Offsets: ``start_offset <= high_watermark <= end_offset`` (the HW may briefly
exceed the end offset on a follower only if the caller breaks the rule; the
log clamps it). ``flushed_offset`` is the end of the durable prefix: entries at
or beyond it may vanish in a crash. Snapshots (KIP-630) are identified by
:class:`~.messages.OffsetAndEpoch` (end offset exclusive, epoch of the last
contained entry) and stored whole as bytes produced by :mod:`.snapshot`.

Implementations raise :class:`kraftlog.errors.OffsetOutOfRangeError` for reads
or truncations outside the log, :class:`kraftlog.errors.CorruptRecordError` for
bad batches, and :class:`kraftlog.errors.InvariantViolation` for a truncation
below the high watermark. The protocol does no role logic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from kraftlog.raft.messages import OffsetAndEpoch


@dataclass(frozen=True, slots=True, kw_only=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int


class PendingFlush(Protocol):
    """A flush begun by :meth:`RaftLog.begin_flush`: everything below ``target`` becomes
    durable once :meth:`run` returns."""

    @property
    def target(self) -> int:
        ...

    def run(self) -> None:
        """The blocking part (an fsync). Touches no state the log's owner uses, so it may
        run on another thread while the owner keeps appending; raises OSError on a disk
        error. Call it at most once."""
        ...


class RaftLog(Protocol):
    @property
    def start_offset(self) -> int:
        """First offset held in the log (the latest snapshot's end offset after cleaning)."""
        ...

    @property
    def end_offset(self) -> int:
        """One past the last appended offset (flushed or not)."""
        ...

    @property
    def flushed_offset(self) -> int:
        """Offsets below this survive a crash."""
        ...

    @property
    def high_watermark(self) -> int:
        ...

    def last_fetched_epoch(self) -> int:
        """Epoch of the last entry; the snapshot's epoch for an empty log after a snapshot; 0."""
        ...

    def update_high_watermark(self, offset: int) -> None:
        """Raise the HW to ``min(offset, end_offset)``; never lowers it."""
        ...

    def append_as_leader(self, batches: bytes, epoch: int) -> LogAppendInfo:
        """Validate (CRC), assign offsets from ``end_offset`` and stamp ``epoch``, append."""
        ...

    def append_as_follower(self, batches: bytes) -> LogAppendInfo:
        """Append batches that already carry offsets and epochs; the first must start at
        ``end_offset``, offsets must increase and epochs never decrease."""
        ...

    def read(self, start_offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one containing ``start_offset``; at least one batch when
        any exists, so an oversized batch still makes progress. ``b""`` at the end."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """The largest epoch <= ``epoch`` this log (or its snapshot) knows and the offset where
        it ends; ``(start_offset, -1)`` when every known epoch is larger."""
        ...

    def truncate_to(self, offset: int) -> None:
        """Drop every entry at or after ``offset`` (>= HW). An offset inside a batch drops
        that whole batch (Kafka truncates whole batches), never one below the HW."""
        ...

    def flush(self) -> None:
        """Make everything appended so far durable (group commit: one call per batch set)."""
        ...

    def begin_flush(self) -> PendingFlush | None:
        """Start making everything appended so far durable, in two steps: the caller runs the
        returned flush's :meth:`~PendingFlush.run` (on any thread), then hands it to
        :meth:`complete_flush`; ``flushed_offset`` moves only then. ``None``: nothing was
        left to flush, or the log flushed synchronously before returning (``flushed_offset``
        already moved). Appends may continue meanwhile; they are not covered."""
        ...

    def complete_flush(self, flush: PendingFlush) -> None:
        """Raise ``flushed_offset`` to ``flush.target`` (after ``flush.run()`` returned), unless
        the log was truncated or reset since :meth:`begin_flush`; then it does nothing."""
        ...

    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        ...

    def write_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        """Store a complete snapshot durably and atomically (named per :mod:`.snapshot`)."""
        ...

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> bytes | None:
        ...

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        """Advance the log start to the snapshot's end offset (<= HW) and drop older
        snapshots; False when nothing changed."""
        ...

    def reset_to_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """Discard the whole log and start it at a stored snapshot's end offset (a follower
        that fetched the snapshot)."""
        ...
