"""An in-memory :class:`~.raft_log.RaftLog` with a crash model, for the simulator and tests.

It keeps whole RecordBatch v2 byte strings (headers patched through
``kraftlog.storage.batch_header``, exactly as the segmented log does), a
leader-epoch cache, snapshots as bytes, and the durable prefix:

* ``flush()`` makes everything appended so far durable; ``begin_flush()`` /
  ``complete_flush()`` do it in two steps (what was appended at the first
  step becomes durable at the second, unless a truncation or crash came
  between), as the segmented log's fsync on another thread does;
* ``crash()`` models a power loss: the unflushed suffix is gone, the high
  watermark (not persisted for the metadata log) resets to the log start, and
  frozen snapshots plus a log-start advance survive (they are atomic renames
  and segment deletions, durable when they return).

Truncation is durable at once (the segmented log truncates files in place).
Used by ``tests/raft`` only through the protocol, plus ``crash()``. No I/O.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from kraftlog.errors import CorruptRecordError, InvariantViolation, OffsetOutOfRangeError
from kraftlog.raft.messages import OffsetAndEpoch
from kraftlog.raft.raft_log import LogAppendInfo, PendingFlush
from kraftlog.storage import batch_header as bh


@dataclass(frozen=True, slots=True, kw_only=True)
class _MemoryFlush:
    target: int
    generation: int

    def run(self) -> None:
        """Nothing to wait for in memory (the durability step is ``complete_flush``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Batch:
    base_offset: int
    last_offset: int
    epoch: int
    data: bytes


class MemoryRaftLog:
    """See the module docstring. ``name`` prefixes every error (e.g. ``node-2 log``)."""

    def __init__(self, name: str = "memory log") -> None:
        self.name = name
        self._batches: list[_Batch] = []
        self._bases: list[int] = []  # base offsets of _batches, for bisect
        self._start_offset = 0
        self._flushed_offset = 0
        self._flush_generation = 0  # bumped by truncation/reset/crash: older flushes lapse
        self._high_watermark = 0
        # Leader-epoch cache (KIP-101): (epoch, start offset), both increasing.
        self._epochs: list[tuple[int, int]] = []
        self._snapshots: dict[OffsetAndEpoch, bytes] = {}

    # -- offsets ----------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self._start_offset

    @property
    def end_offset(self) -> int:
        return self._batches[-1].last_offset + 1 if self._batches else self._start_offset

    @property
    def flushed_offset(self) -> int:
        return self._flushed_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    def last_fetched_epoch(self) -> int:
        if self._batches:
            return self._batches[-1].epoch
        snapshot = self.latest_snapshot_id()
        if snapshot is not None and snapshot.offset == self._start_offset:
            return snapshot.epoch
        return self._epochs[-1][0] if self._epochs else 0

    def update_high_watermark(self, offset: int) -> None:
        offset = min(offset, self.end_offset)
        if offset > self._high_watermark:
            self._high_watermark = offset

    # -- append -----------------------------------------------------------------------------

    def append_as_leader(self, batches: bytes, epoch: int) -> LogAppendInfo:
        buf = bytearray(batches)
        result = bh.stamp_batches(buf, first_offset=self.end_offset, leader_epoch=epoch)
        self._append_validated(bytes(buf))
        return LogAppendInfo(first_offset=result.first_offset, last_offset=result.last_offset)

    def append_as_follower(self, batches: bytes) -> LogAppendInfo:
        if not batches:
            raise CorruptRecordError(f"{self.name}: empty follower append at offset "
                                     f"{self.end_offset}")
        return self._append_validated(batches)

    def _append_validated(self, data: bytes) -> LogAppendInfo:
        parsed: list[_Batch] = []
        expected = self.end_offset
        last_epoch = self.last_fetched_epoch()
        position = 0
        for header in bh.iter_batches(data):
            header.validate()
            if header.base_offset != expected:
                raise CorruptRecordError(
                    f"{self.name}: batch at byte {position} has base offset "
                    f"{header.base_offset}, expected {expected}")
            if header.partition_leader_epoch < last_epoch:
                raise CorruptRecordError(
                    f"{self.name}: batch at offset {header.base_offset} has epoch "
                    f"{header.partition_leader_epoch} below the previous epoch {last_epoch}")
            size = header.size_in_bytes
            parsed.append(_Batch(base_offset=header.base_offset, last_offset=header.last_offset,
                                 epoch=header.partition_leader_epoch,
                                 data=bytes(data[position:position + size])))
            expected = header.last_offset + 1
            last_epoch = header.partition_leader_epoch
            position += size
        if position != len(data) or not parsed:
            raise CorruptRecordError(f"{self.name}: {len(data) - position} bytes of partial batch "
                                     f"after byte {position} (of {len(data)})")
        for batch in parsed:
            if not self._epochs or batch.epoch > self._epochs[-1][0]:
                self._epochs.append((batch.epoch, batch.base_offset))
            self._batches.append(batch)
            self._bases.append(batch.base_offset)
        return LogAppendInfo(first_offset=parsed[0].base_offset, last_offset=parsed[-1].last_offset)

    # -- read -------------------------------------------------------------------------------

    def read(self, start_offset: int, max_bytes: int) -> bytes:
        if start_offset < self._start_offset or start_offset > self.end_offset:
            raise OffsetOutOfRangeError(
                f"{self.name}: read at {start_offset} outside [{self._start_offset}, "
                f"{self.end_offset}]")
        index = bisect.bisect_right(self._bases, start_offset) - 1
        index = max(index, 0)
        out: list[bytes] = []
        size = 0
        for batch in self._batches[index:]:
            if batch.last_offset < start_offset:
                continue
            if out and size + len(batch.data) > max_bytes:
                break
            out.append(batch.data)
            size += len(batch.data)
        return b"".join(out)

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        snapshot = self.latest_snapshot_id()
        index = bisect.bisect_right(self._epochs, (epoch, float("inf"))) - 1
        if index >= 0 and (snapshot is None or self._epochs[index][0] >= snapshot.epoch):
            end = self._epochs[index + 1][1] if index + 1 < len(self._epochs) else self.end_offset
            return OffsetAndEpoch(offset=end, epoch=self._epochs[index][0])
        # No cached epoch at or below the request: the snapshot (if any) is the log's base.
        if snapshot is not None and snapshot.epoch <= epoch:
            return OffsetAndEpoch(offset=snapshot.offset, epoch=snapshot.epoch)
        return OffsetAndEpoch(offset=self._start_offset, epoch=-1)

    def epoch_of(self, offset: int) -> int:
        """Epoch of the entry at ``offset`` (the snapshot's epoch at its last offset)."""
        snapshot = self.latest_snapshot_id()
        if snapshot is not None and offset == snapshot.offset - 1:
            return snapshot.epoch
        index = bisect.bisect_right(self._bases, offset) - 1
        if index < 0 or offset > self._batches[index].last_offset:
            raise OffsetOutOfRangeError(f"{self.name}: no entry at offset {offset}")
        return self._batches[index].epoch

    # -- truncate / flush -------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        if offset < self._high_watermark:
            raise InvariantViolation(
                f"{self.name}: truncation to {offset} below the high watermark "
                f"{self._high_watermark} would lose committed entries")
        if offset < self._start_offset or offset > self.end_offset:
            raise OffsetOutOfRangeError(
                f"{self.name}: truncation to {offset} outside [{self._start_offset}, "
                f"{self.end_offset}]")
        index = bisect.bisect_left(self._bases, offset)
        if index > 0 and self._batches[index - 1].last_offset >= offset:
            # Inside a batch: the whole batch goes, as Kafka's log truncation does.
            index -= 1
            offset = self._bases[index]
            if offset < self._high_watermark:
                raise InvariantViolation(
                    f"{self.name}: truncation drops the batch at {offset}, below the high "
                    f"watermark {self._high_watermark}")
        self._drop_from(index, offset)

    def _drop_from(self, index: int, offset: int) -> None:
        del self._batches[index:]
        del self._bases[index:]
        while self._epochs and self._epochs[-1][1] >= offset:
            self._epochs.pop()
        if not self._batches:
            self._epochs.clear()
        self._flushed_offset = min(self._flushed_offset, self.end_offset)
        self._flush_generation += 1

    def flush(self) -> None:
        self._flushed_offset = self.end_offset

    def begin_flush(self) -> _MemoryFlush | None:
        if self._flushed_offset >= self.end_offset:
            return None
        return _MemoryFlush(target=self.end_offset, generation=self._flush_generation)

    def complete_flush(self, flush: PendingFlush) -> None:
        if not isinstance(flush, _MemoryFlush):
            raise TypeError(f"{self.name}: not a flush of this log: {flush!r}")
        if flush.generation == self._flush_generation:
            self._flushed_offset = max(self._flushed_offset, min(flush.target, self.end_offset))

    def crash(self) -> None:
        """Power loss: drop the unflushed suffix; the HW is forgotten (reset to log start)."""
        flushed = self._flushed_offset
        self._drop_from(bisect.bisect_left(self._bases, flushed), flushed)
        self._high_watermark = self._start_offset

    # -- snapshots --------------------------------------------------------------------------

    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        if not self._snapshots:
            return None
        return max(self._snapshots, key=lambda s: (s.offset, s.epoch))

    def write_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        self._snapshots[snapshot_id] = bytes(data)

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> bytes | None:
        return self._snapshots.get(snapshot_id)

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        if snapshot_id not in self._snapshots:
            raise InvariantViolation(f"{self.name}: no snapshot {snapshot_id} to clean up to")
        if snapshot_id.offset > self._high_watermark:
            raise InvariantViolation(
                f"{self.name}: snapshot {snapshot_id} ends beyond the high watermark "
                f"{self._high_watermark}")
        if snapshot_id.offset <= self._start_offset:
            return False
        index = bisect.bisect_left(self._bases, snapshot_id.offset)
        if index > 0 and self._batches[index - 1].last_offset >= snapshot_id.offset:
            raise InvariantViolation(f"{self.name}: snapshot {snapshot_id} ends inside a batch")
        del self._batches[:index]
        del self._bases[:index]
        self._start_offset = snapshot_id.offset
        # Keep the epoch entry covering the new start so end_offset_for_epoch stays exact.
        while len(self._epochs) > 1 and self._epochs[1][1] <= snapshot_id.offset:
            self._epochs.pop(0)
        if not self._batches:
            self._epochs.clear()
        for old in [s for s in self._snapshots if s.offset < snapshot_id.offset]:
            del self._snapshots[old]
        self._flushed_offset = max(self._flushed_offset, self._start_offset)
        return True

    def reset_to_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        if snapshot_id not in self._snapshots:
            raise InvariantViolation(f"{self.name}: cannot reset to missing snapshot {snapshot_id}")
        if snapshot_id.offset < self._high_watermark:
            raise InvariantViolation(
                f"{self.name}: resetting to snapshot {snapshot_id} would move below the "
                f"high watermark {self._high_watermark}")
        self._batches.clear()
        self._bases.clear()
        self._epochs.clear()
        self._start_offset = snapshot_id.offset
        self._flushed_offset = snapshot_id.offset
        self._flush_generation += 1
        self._high_watermark = snapshot_id.offset
        for old in [s for s in self._snapshots if s != snapshot_id]:
            del self._snapshots[old]
