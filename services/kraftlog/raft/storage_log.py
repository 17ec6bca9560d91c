"""The durable :class:`~.raft_log.RaftLog`: ``__cluster_metadata-0`` over the segmented log.

Owns one metadata partition directory (``<metadata.log.dir>/__cluster_metadata-0/``,
created by ``kraftlog storage format``) and everything in it that the raft layer
uses, as Kafka's ``KafkaMetadataLog`` does:

* ``*.log`` / ``*.index`` / ``*.timeindex`` segments through
  :class:`kraftlog.storage.log.Log` with :meth:`LogConfig.for_metadata_log`
  (fsync after every append; no retention by time or size: KIP-630 snapshots
  bound this log);
* ``leader-epoch-checkpoint`` through
  :class:`kraftlog.storage.leader_epoch.LeaderEpochFileCache`, which the
  segmented log keeps in step with its contents (KIP-101) and which answers
  :meth:`StorageRaftLog.end_offset_for_epoch` for the Fetch diverging-epoch
  check (KIP-595);
* snapshots (KIP-630) as ``<20-digit end offset>-<10-digit epoch>.checkpoint``
  files (names from :mod:`.snapshot`), written atomically: ``.checkpoint.part``,
  fsync, rename, fsync the directory (Kafka's ``FileRawSnapshotWriter``);
* ``recovery-point-offset-checkpoint``: Kafka's offset-checkpoint format with
  the one entry ``__cluster_metadata 0 <offset>``, kept *inside* the partition
  directory (the metadata log is not managed by a broker ``LogManager`` here).
  It is written on :meth:`StorageRaftLog.open` (after recovery, once the
  recovered log is fsynced) and :meth:`StorageRaftLog.close` (the log end,
  everything flushed), and rewritten whenever the recovery point goes *down*
  (truncation, reset to a snapshot) or the log start moves, before the call
  returns. It is not raised per append (that would add an fsync and a rename
  to every commit), so after a crash recovery CRC-scans from the last open or
  close; that is bounded because snapshots bound the log.
  A value that is too low only costs a longer scan; one that is too high
  would make a torn tail fatal, which is why truncation lowers it first.

Flushing (:meth:`StorageRaftLog.flush`, or :meth:`~StorageRaftLog.begin_flush` then
:meth:`~StorageRaftLog.complete_flush` so that the fsync can run on another thread while
the owner keeps appending): while everything unflushed lies in the active segment and
that segment's directory entry is already durable, a flush is one ``fsync`` of the
segment's ``.log`` file through a duplicated descriptor and touches no state of the
segmented log, whose own recovery point then lags (indexes are rebuilt above it after a
crash, so they need no fsync). Anything else (a roll since the last full flush, a new
log) takes the segmented log's full ``flush()`` at once, as does every
:data:`FULL_FLUSH_INTERVAL_BYTES` of fast flushes, which bounds the recovery scan.
``flushed_offset`` is the larger of the two.

Not persisted, as in KRaft: the high watermark (it restarts at the log start
and the leader re-establishes it). The log start offset is derived from the
snapshots on open: it is the latest snapshot's end offset (Kafka's
``KafkaMetadataLog`` likewise truncates fully to the latest snapshot when the
log is behind it or diverges from it, and drops older snapshots).

Behaviour (errors, offsets, epochs, snapshots) matches
:class:`~.memory_log.MemoryRaftLog` call for call; ``tests/raft/test_storage_log.py``
runs the same scenarios against both. Callers: the raft client through the
protocol, and the controller process that opens and closes it. Pure core: no
clock (time comes in through ``clock_ms``), no asyncio, no threads; one owner
calls it (only a :class:`SegmentSync`'s ``run`` may be called from another thread).
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

from kraftlog.errors import (
    CorruptFileError,
    CorruptRecordError,
    InvariantViolation,
    OffsetOutOfRangeError,
)
from kraftlog.ids import TopicPartition
from kraftlog.raft import snapshot as snap
from kraftlog.raft.messages import OffsetAndEpoch
from kraftlog.raft.raft_log import LogAppendInfo, PendingFlush
from kraftlog.storage import (
    atomic_file,
    checkpoint,
    leader_epoch,
    log_config,
    segment,
)
from kraftlog.storage import batch_header as bh
from kraftlog.storage import log as storage_log

logger = logging.getLogger(__name__)

METADATA_TOPIC_PARTITION = TopicPartition(topic="__cluster_metadata", partition=0)
TAIL_CACHE_BYTES = 1 << 20
"""Recently appended bytes kept in memory for reads (halved when exceeded)."""
FULL_FLUSH_INTERVAL_BYTES = 16 << 20
"""Active-segment bytes flushed by fsync alone before the segmented log's own flush runs
again (which raises its recovery point and so bounds the CRC scan after a crash)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentSync:
    """One pending fsync of the active segment (:meth:`StorageRaftLog.begin_flush`).

    Owns ``fd`` (a duplicate of the log's descriptor): :meth:`run` fsyncs and closes it and
    touches nothing else, so it may run on another thread."""

    target: int
    generation: int
    fd: int

    def run(self) -> None:
        try:
            os.fsync(self.fd)
        finally:
            os.close(self.fd)


class StorageRaftLog:
    """See the module docstring. Create with :meth:`open`; ``close()`` when done.

    Invariants: ``start_offset`` equals the latest snapshot's end offset when a
    snapshot exists (0 otherwise); ``start_offset <= high_watermark <= end_offset``;
    the epoch cache holds exactly the epochs of the batches in the log.
    """

    def __init__(self, directory: str, log: storage_log.Log, epoch_cache: leader_epoch.LeaderEpochFileCache,
                 snapshots: set[OffsetAndEpoch], *, clock_ms: Callable[[], int], name: str) -> None:
        self.name = name
        self._clock_ms = clock_ms
        self._directory = directory
        self._log = log
        self._epoch_cache = epoch_cache
        self._snapshots = snapshots
        self._high_watermark = log.log_start_offset
        self._recovery_checkpoint = checkpoint.OffsetCheckpointFile(
            os.path.join(directory, checkpoint.RECOVERY_POINT_OFFSET_CHECKPOINT))
        self._validated_snapshots: set[OffsetAndEpoch] = set()
        # The last snapshot read, kept so that FetchSnapshot's chunked reads of one
        # snapshot do not re-read the file per chunk (snapshot files are immutable).
        self._cached_snapshot: tuple[OffsetAndEpoch, bytes] | None = None
        # The most recently appended batches, (base offset, last offset, bytes as on disk),
        # contiguous and ending at the log end, at most TAIL_CACHE_BYTES. Raft reads the tail
        # it just appended at once (the Fetch answers that replicate it, the commit
        # delivery); served from here that costs no pread and no index walk.
        self._tail: list[tuple[int, int, memoryview]] = []
        self._tail_bytes = 0
        # Flushing by fsync of the active segment alone (see the module docstring): the end
        # of what those fsyncs made durable, and the segment they cover.
        self._synced_offset = log.recovery_point
        self._flush_generation = 0  # bumped by truncation/reset: pending flushes lapse
        self._sync_fd = -1  # O_RDONLY on the active segment's .log file, or -1
        self._sync_base = -1  # that segment's base offset
        self._full_flush_position = 0  # its byte size at the last full flush

    # -- open / close -----------------------------------------------------------------------

    @classmethod
    def open(cls, directory: str | os.PathLike[str], *, clock_ms: Callable[[], int],
             config: log_config.LogConfig | None = None, name: str | None = None) -> StorageRaftLog:
        """Open (creating if needed) a ``__cluster_metadata-0`` directory and recover it.

        ``clock_ms`` returns the current time in ms (segment roll by age needs it).
        Raises CorruptFileError for an unreadable checkpoint or a log whose start
        is not covered by a snapshot, CorruptRecordError for damage below the
        recovery point.
        """
        path = os.fspath(directory)
        label = name or f"metadata log {path}"
        os.makedirs(path, exist_ok=True)
        snapshots = _load_snapshot_ids(path)
        epoch_cache = leader_epoch.LeaderEpochFileCache(os.path.join(path, checkpoint.LEADER_EPOCH_CHECKPOINT))
        recovery_file = checkpoint.OffsetCheckpointFile(
            os.path.join(path, checkpoint.RECOVERY_POINT_OFFSET_CHECKPOINT))
        recovery_point = recovery_file.read().get(METADATA_TOPIC_PARTITION, 0)
        # Raft decides when to fsync (RaftLog.flush): a follower before it reports its new
        # end offset, a leader once its Fetch answers are on their way. No flush on append.
        default_config = log_config.LogConfig.for_metadata_log(
            flush_interval_messages=log_config.LONG_MAX)
        log = storage_log.Log.open(path, config or default_config, now_ms=clock_ms(),
                                   recovery_point=recovery_point, epoch_cache=epoch_cache)
        try:
            latest = max(snapshots, key=_snapshot_order) if snapshots else None
            start = log.log_start_offset
            if start > 0 and (latest is None or latest.offset < start):
                raise CorruptFileError(path, f"the log starts at offset {start} but the latest "
                                             f"snapshot is {latest}: offsets below {start} are lost")
            if latest is not None and latest.offset > start:
                # KafkaMetadataLog.truncateToLatestSnapshot: a log that is behind the
                # snapshot or disagrees with it at its last offset restarts at it.
                # The epoch check needs the cache to cover the snapshot's last offset; after
                # delete_before_snapshot it starts at the snapshot (segments are deleted
                # whole, so the first one may still begin below it) and agrees by construction.
                earliest = epoch_cache.earliest_entry()
                covered = earliest is not None and earliest.start_offset < latest.offset
                if latest.offset > log.log_end_offset or (
                        covered and epoch_cache.epoch_for_offset(latest.offset - 1) != latest.epoch):
                    logger.warning("log=%s event=truncate_to_snapshot snapshot=%s log_end_offset=%d",
                                   path, latest, log.log_end_offset)
                    log.truncate_fully_and_start_at(latest.offset)
                    epoch_cache.clear()
                else:
                    log.maybe_increment_log_start_offset(latest.offset)
            if log.log_end_offset == log.log_start_offset and len(epoch_cache):
                epoch_cache.clear()
            for old in [s for s in snapshots if s.offset < log.log_start_offset]:
                _delete_snapshot_file(path, old)
                snapshots.discard(old)
            # What recovery kept (CRC-checked, maybe only in the page cache after a
            # process crash) is made durable once, so flushed_offset == end_offset again.
            log.flush()
        except BaseException:
            log.close_handlers()
            raise
        result = cls(path, log, epoch_cache, snapshots, clock_ms=clock_ms, name=label)
        result._write_recovery_checkpoint()
        return result

    def close(self) -> None:
        """Flush everything, record the recovery point (= log end) and close the files."""
        self._clear_tail()
        self._close_sync_fd()
        self._flush_generation += 1
        self._log.close()
        self._write_recovery_checkpoint()

    def abandon(self) -> None:
        """Close the files without flushing or checkpointing (a failed disk; a crash in tests)."""
        self._clear_tail()
        self._close_sync_fd()
        self._flush_generation += 1
        self._log.close_handlers()

    def _write_recovery_checkpoint(self) -> None:
        self._recovery_checkpoint.write({METADATA_TOPIC_PARTITION: self._log.recovery_point})

    @property
    def directory(self) -> str:
        return self._directory

    # -- offsets ----------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self._log.log_start_offset

    @property
    def end_offset(self) -> int:
        return self._log.log_end_offset

    @property
    def flushed_offset(self) -> int:
        return min(max(self._synced_offset, self._log.recovery_point,
                       self._log.log_start_offset), self._log.log_end_offset)

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    def last_fetched_epoch(self) -> int:
        latest_epoch = self._epoch_cache.latest_epoch()
        if self.end_offset > self.start_offset and latest_epoch is not None:
            return latest_epoch
        snapshot = self.latest_snapshot_id()
        if snapshot is not None and snapshot.offset == self.start_offset:
            return snapshot.epoch
        return latest_epoch if latest_epoch is not None else 0

    def update_high_watermark(self, offset: int) -> None:
        offset = min(offset, self.end_offset)
        if offset > self._high_watermark:
            self._high_watermark = offset

    # -- append -----------------------------------------------------------------------------

    def append_as_leader(self, batches: bytes, epoch: int) -> LogAppendInfo:
        last_epoch = self.last_fetched_epoch()
        if epoch < last_epoch:
            raise CorruptRecordError(
                f"{self.name}: batch at offset {self.end_offset} has epoch {epoch} below the "
                f"previous epoch {last_epoch}")
        # A writable copy: the log stamps offsets and epoch into it in place, so it then holds
        # exactly the bytes on disk, for the tail cache.
        stamped = bytearray(batches)
        info = self._log.append_as_leader(stamped, leader_epoch=epoch, now_ms=self._now_ms())
        self._cache_tail(bytes(stamped))
        return LogAppendInfo(first_offset=info.first_offset, last_offset=info.last_offset)

    def append_as_follower(self, batches: bytes) -> LogAppendInfo:
        if not batches:
            raise CorruptRecordError(f"{self.name}: empty follower append at offset "
                                     f"{self.end_offset}")
        # Header checks first, with MemoryRaftLog's messages (the raft client treats
        # CorruptRecordError as a bad fetch); the segmented log then checks every CRC.
        expected = self.end_offset
        last_epoch = self.last_fetched_epoch()
        position = 0
        for header in bh.iter_batches(batches):
            if header.base_offset != expected:
                raise CorruptRecordError(
                    f"{self.name}: batch at byte {position} has base offset "
                    f"{header.base_offset}, expected {expected}")
            if header.partition_leader_epoch < last_epoch:
                raise CorruptRecordError(
                    f"{self.name}: batch at offset {header.base_offset} has epoch "
                    f"{header.partition_leader_epoch} below the previous epoch {last_epoch}")
            expected = header.last_offset + 1
            last_epoch = header.partition_leader_epoch
            position += header.size_in_bytes
        if position != len(batches) or position == 0:
            raise CorruptRecordError(f"{self.name}: {len(batches) - position} bytes of partial "
                                     f"batch after byte {position} (of {len(batches)})")
        try:
            info = self._log.append_as_follower(batches, now_ms=self._now_ms())
        except OffsetOutOfRangeError as exc:  # pragma: no cover - excluded by the checks above
            raise CorruptRecordError(f"{self.name}: {exc}") from exc
        self._cache_tail(bytes(batches))
        return LogAppendInfo(first_offset=info.first_offset, last_offset=info.last_offset)

    def _cache_tail(self, data: bytes) -> None:
        """Remember ``data`` (whole batches, just appended at the old log end) for reads."""
        view = memoryview(data)
        tail = self._tail
        for header in bh.iter_batches(view):
            if tail and tail[-1][1] + 1 != header.base_offset:
                self._clear_tail()  # not contiguous (cannot happen after an append; be safe)
            size = header.size_in_bytes
            tail.append((header.base_offset, header.last_offset,
                         view[header.position:header.position + size]))
            self._tail_bytes += size
        if self._tail_bytes > TAIL_CACHE_BYTES:
            drop = 0
            while self._tail_bytes > TAIL_CACHE_BYTES // 2 and drop < len(tail):
                self._tail_bytes -= len(tail[drop][2])
                drop += 1
            del tail[:drop]
        if tail and tail[-1][1] + 1 != self.end_offset:
            self._clear_tail()

    def _clear_tail(self) -> None:
        self._tail = []
        self._tail_bytes = 0

    def _read_tail(self, start_offset: int, max_bytes: int) -> bytes | None:
        """``read`` from the tail cache, or None if it does not hold ``start_offset``."""
        tail = self._tail
        if not tail or start_offset < tail[0][0] or start_offset >= self.end_offset:
            return None
        i = len(tail) - 1
        while tail[i][0] > start_offset:  # reads are near the end: walk back from it
            i -= 1
        pieces: list[memoryview] = []
        size = 0
        for j in range(i, len(tail)):
            data = tail[j][2]
            if pieces and size + len(data) > max_bytes:
                break
            pieces.append(data)
            size += len(data)
        return pieces[0].tobytes() if len(pieces) == 1 else b"".join(pieces)

    def _now_ms(self) -> int:
        return self._clock_ms()

    # -- read -------------------------------------------------------------------------------

    def read(self, start_offset: int, max_bytes: int) -> bytes:
        if start_offset < self.start_offset or start_offset > self.end_offset:
            raise OffsetOutOfRangeError(
                f"{self.name}: read at {start_offset} outside [{self.start_offset}, "
                f"{self.end_offset}]")
        cached = self._read_tail(start_offset, max_bytes)
        if cached is not None:
            return cached
        return self._log.read(start_offset, max_bytes).records

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """KIP-595's diverging-epoch lookup, answered from the leader-epoch cache.

        Same answers as MemoryRaftLog (not Kafka's ``LeaderEpochCache.endOffsetFor``,
        which answers the requested epoch for one below the earliest entry): the
        largest cached epoch <= ``epoch`` and where it ends; else the snapshot.
        """
        snapshot = self.latest_snapshot_id()
        entries = self._epoch_cache.entries()
        epochs = [entry.epoch for entry in entries]
        index = bisect.bisect_right(epochs, epoch) - 1
        if index >= 0 and (snapshot is None or entries[index].epoch >= snapshot.epoch):
            end = entries[index + 1].start_offset if index + 1 < len(entries) else self.end_offset
            return OffsetAndEpoch(offset=end, epoch=entries[index].epoch)
        # No cached epoch at or below the request: the snapshot (if any) is the log's base.
        if snapshot is not None and snapshot.epoch <= epoch:
            return OffsetAndEpoch(offset=snapshot.offset, epoch=snapshot.epoch)
        return OffsetAndEpoch(offset=self.start_offset, epoch=-1)

    def epoch_of(self, offset: int) -> int:
        """Epoch of the entry at ``offset`` (the snapshot's epoch at its last offset)."""
        snapshot = self.latest_snapshot_id()
        if snapshot is not None and offset == snapshot.offset - 1:
            return snapshot.epoch
        epoch = self._epoch_cache.epoch_for_offset(offset)
        if offset < self.start_offset or offset >= self.end_offset or epoch is None:
            raise OffsetOutOfRangeError(f"{self.name}: no entry at offset {offset}")
        return epoch

    # -- truncate / flush -------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        if offset < self._high_watermark:
            raise InvariantViolation(
                f"{self.name}: truncation to {offset} below the high watermark "
                f"{self._high_watermark} would lose committed entries")
        if offset < self.start_offset or offset > self.end_offset:
            raise OffsetOutOfRangeError(
                f"{self.name}: truncation to {offset} outside [{self.start_offset}, "
                f"{self.end_offset}]")
        if offset == self.end_offset:
            return
        base = self._batch_base_at(offset)
        if base is not None and base != offset:
            # Inside a batch: the whole batch goes, as Kafka's log truncation does.
            if base < self._high_watermark:
                raise InvariantViolation(
                    f"{self.name}: truncation drops the batch at {base}, below the high "
                    f"watermark {self._high_watermark}")
            offset = base
        self._clear_tail()
        self._log.truncate_to(offset)
        self._lapse_pending_flushes(offset)
        self._fsync_truncation()
        if self.end_offset == self.start_offset:
            self._epoch_cache.clear()
        # The recovery point went down: record it before anything is appended past it.
        self._write_recovery_checkpoint()

    def _fsync_truncation(self) -> None:
        """Make a truncation durable before anything is appended after it.

        The segmented log cuts the active segment with ftruncate and deletes later
        segments without an fsync; a power loss could then bring the cut tail back
        (valid CRCs, epochs the cache no longer lists) and resurrect entries a
        KIP-595 diverging-epoch truncation removed. Truncations are rare; one fsync
        of the active segment and one of the directory close that window.
        """
        active = self._log.segments[-1].base_offset
        path = os.path.join(self._directory, segment.file_name(active, segment.LOG_SUFFIX))
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        atomic_file.fsync_dir(self._directory)

    def _batch_base_at(self, offset: int) -> int | None:
        """Base offset of the batch holding ``offset`` (which must be in the log)."""
        headers = bh.iter_batches(self._log.read(offset, 1).records)
        first = next(headers, None)
        return None if first is None else first.base_offset

    def flush(self) -> None:
        pending = self.begin_flush()
        if pending is not None:
            pending.run()
            self.complete_flush(pending)

    def begin_flush(self) -> SegmentSync | None:
        end = self.end_offset
        if self.flushed_offset >= end:
            return None
        active = self._log.log_end_offset_metadata
        base, position = active.segment_base_offset, active.relative_position_in_segment
        if self._sync_fd < 0 or base != self._sync_base or self._log.recovery_point <= base \
                or position - self._full_flush_position >= FULL_FLUSH_INTERVAL_BYTES \
                or os.fstat(self._sync_fd).st_nlink == 0:  # (replaced: never fsync a ghost)
            # A full flush covered part of the active segment only after that segment was
            # created (and its directory entry fsynced with it) if its recovery point lies
            # beyond the segment's base; otherwise (a roll, a new or reset log) and now and
            # then to bound recovery, the segmented log flushes (and fsyncs the dir) itself.
            self._log.flush()
            self._synced_offset = end
            self._close_sync_fd()
            self._sync_base = base
            self._full_flush_position = position
            if self._log.recovery_point > base:
                self._sync_fd = os.open(
                    os.path.join(self._directory, segment.file_name(base, segment.LOG_SUFFIX)),
                    os.O_RDONLY)
            return None
        return SegmentSync(target=end, generation=self._flush_generation,
                           fd=os.dup(self._sync_fd))

    def complete_flush(self, flush: PendingFlush) -> None:
        if not isinstance(flush, SegmentSync):
            raise TypeError(f"{self.name}: not a flush of this log: {flush!r}")
        if flush.generation == self._flush_generation:
            self._synced_offset = max(self._synced_offset, min(flush.target, self.end_offset))

    def _lapse_pending_flushes(self, new_end: int) -> None:
        """A truncation or reset: flushes begun before it no longer say anything."""
        self._flush_generation += 1
        self._synced_offset = min(self._synced_offset, new_end)
        self._close_sync_fd()

    def _close_sync_fd(self) -> None:
        if self._sync_fd >= 0:
            os.close(self._sync_fd)
        self._sync_fd = -1
        self._sync_base = -1

    # -- snapshots (KIP-630) ----------------------------------------------------------------

    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        if not self._snapshots:
            return None
        return max(self._snapshots, key=_snapshot_order)

    def write_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        """Write ``.checkpoint.part``, fsync it, rename it into place, fsync the directory."""
        final = os.path.join(self._directory, snap.snapshot_file_name(snapshot_id))
        partial = final[:-len(snap.SUFFIX)] + snap.PARTIAL_SUFFIX
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(partial, final)
        atomic_file.fsync_dir(self._directory)
        self._snapshots.add(snapshot_id)
        self._validated_snapshots.discard(snapshot_id)
        self._cached_snapshot = None
        logger.info("log=%s event=snapshot_written snapshot=%s bytes=%d", self.name, snapshot_id,
                    len(data))

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> bytes | None:
        """The snapshot's bytes; raises CorruptRecordError naming the file if they are damaged."""
        if snapshot_id not in self._snapshots:
            return None
        cached = self._cached_snapshot
        if cached is not None and cached[0] == snapshot_id:
            return cached[1]
        path = os.path.join(self._directory, snap.snapshot_file_name(snapshot_id))
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise CorruptFileError(path, "snapshot file vanished while the log was open") from None
        if snapshot_id not in self._validated_snapshots:
            # Whole batches with valid CRCs, once per process: a torn or bit-rotted
            # snapshot must not reach the state machine or a fetching follower.
            scan = bh.scan_valid_prefix(data, 0, check_crc=True)
            if scan.error is not None or scan.valid_bytes != len(data) or not data:
                raise CorruptRecordError(f"snapshot {snapshot_id}: "
                                         f"{scan.error or 'empty file'}",
                                         path=path, position=scan.valid_bytes)
            self._validated_snapshots.add(snapshot_id)
        self._cached_snapshot = (snapshot_id, data)
        return data

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        """KIP-630 cleaning: advance the log start to the snapshot, drop segments and snapshots below."""
        if snapshot_id not in self._snapshots:
            raise InvariantViolation(f"{self.name}: no snapshot {snapshot_id} to clean up to")
        if snapshot_id.offset > self._high_watermark:
            raise InvariantViolation(
                f"{self.name}: snapshot {snapshot_id} ends beyond the high watermark "
                f"{self._high_watermark}")
        if snapshot_id.offset <= self.start_offset:
            return False
        if snapshot_id.offset < self.end_offset and self._batch_base_at(snapshot_id.offset) \
                != snapshot_id.offset:
            raise InvariantViolation(f"{self.name}: snapshot {snapshot_id} ends inside a batch")
        self._clear_tail()
        self._log.maybe_increment_log_start_offset(snapshot_id.offset)
        if self.end_offset == self.start_offset:
            self._epoch_cache.clear()
        self._delete_snapshots(lambda s: s.offset < snapshot_id.offset)
        self._write_recovery_checkpoint()
        return True

    def reset_to_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """A follower that fetched ``snapshot_id``: the log restarts empty at its end offset."""
        if snapshot_id not in self._snapshots:
            raise InvariantViolation(f"{self.name}: cannot reset to missing snapshot {snapshot_id}")
        if snapshot_id.offset < self._high_watermark:
            raise InvariantViolation(
                f"{self.name}: resetting to snapshot {snapshot_id} would move below the "
                f"high watermark {self._high_watermark}")
        self._clear_tail()
        self._log.truncate_fully_and_start_at(snapshot_id.offset)
        self._lapse_pending_flushes(snapshot_id.offset)
        self._epoch_cache.clear()
        atomic_file.fsync_dir(self._directory)  # the segment deletions and the new segment
        self._write_recovery_checkpoint()
        self._high_watermark = snapshot_id.offset
        self._delete_snapshots(lambda s: s != snapshot_id)

    def _delete_snapshots(self, doomed: Callable[[OffsetAndEpoch], bool]) -> None:
        victims = [s for s in self._snapshots if doomed(s)]
        for old in victims:
            _delete_snapshot_file(self._directory, old)
            self._snapshots.discard(old)
            self._validated_snapshots.discard(old)
        if victims:
            self._cached_snapshot = None
            atomic_file.fsync_dir(self._directory)


def _snapshot_order(snapshot_id: OffsetAndEpoch) -> tuple[int, int]:
    return (snapshot_id.offset, snapshot_id.epoch)


def _load_snapshot_ids(directory: str) -> set[OffsetAndEpoch]:
    """Complete snapshot ids in ``directory``; leftovers of interrupted writes/deletes are removed."""
    found: set[OffsetAndEpoch] = set()
    for name in sorted(os.listdir(directory)):
        if name.endswith((snap.PARTIAL_SUFFIX, snap.DELETED_SUFFIX)):
            logger.info("log=%s event=delete_stray_snapshot file=%s", directory, name)
            os.unlink(os.path.join(directory, name))
            continue
        snapshot_id = snap.parse_snapshot_file_name(name)
        if snapshot_id is not None:
            found.add(snapshot_id)
    return found


def _delete_snapshot_file(directory: str, snapshot_id: OffsetAndEpoch) -> None:
    # Kafka renames to .checkpoint.deleted and deletes later (readers may hold it);
    # nothing here reads a snapshot file after this call, so it goes at once.
    path = os.path.join(directory, snap.snapshot_file_name(snapshot_id))
    logger.info("log=%s event=delete_snapshot snapshot=%s", directory, snapshot_id)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
