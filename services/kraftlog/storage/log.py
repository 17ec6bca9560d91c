"""The segmented log of one partition: Kafka's UnifiedLog/LocalLog plus LogLoader, local only.

Owned here: the ordered segments of a partition directory (``<logdir>/topic-0/``
or ``__cluster_metadata-0/``); the log start offset, log end offset and
recovery point; appends as leader (offsets and leader epoch stamped into the
batch headers) and as follower (offsets kept, contiguity checked); whole-batch
byte-range reads; offset-by-timestamp; truncation; retention; the flush policy;
and recovery when the directory is opened after an unclean shutdown.

Callers: the broker's partition logic and the raft replicated log (the
metadata log uses :meth:`LogConfig.for_metadata_log`, which fsyncs every
append). They own the checkpoints: after :meth:`Log.flush`, a truncation or a
log start offset change they write ``recovery-point-offset-checkpoint`` /
``log-start-offset-checkpoint`` and pass the values back to :meth:`Log.open`.

Rules kept here:

* No per-record Python work on append or read: batch headers only (followers, fetches
  and reads serve byte ranges).
* No clock: every time-dependent method takes ``now_ms``.
* Data below the recovery point was fsynced; recovery never drops it. Finding
  corruption there raises :class:`kraftlog.errors.CorruptRecordError` naming the
  file and byte instead of truncating (the disk lied; an operator must look).
* Not thread-safe: one owner calls it (the partition's task or the raft driver).
"""

from __future__ import annotations

import bisect
import itertools
import logging
import mmap
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from kraftlog.errors import (
    CorruptFileError,
    CorruptRecordError,
    InvariantViolation,
    OffsetOutOfRangeError,
    UnexpectedAppendOffsetError,
)
from kraftlog.storage import atomic_file, file_handles, varint
from kraftlog.storage import batch_header as bh
from kraftlog.storage import segment as segment_mod
from kraftlog.storage.log_config import LogConfig
from kraftlog.storage.segment import LogSegment

logger = logging.getLogger(__name__)

# ListOffsets special timestamps (ListOffsetsRequest.EARLIEST/LATEST/MAX_TIMESTAMP).
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
NO_TIMESTAMP = -1


class EpochCacheUpdater(Protocol):
    """What the log needs of the leader-epoch cache (``leader_epoch.LeaderEpochFileCache``).

    The log keeps it in step with its own contents (KIP-101): an entry per
    epoch that wrote a batch, cut from the end on truncation and from the start
    when the log start offset advances.
    """

    def assign(self, epoch: int, start_offset: int) -> object: ...

    def truncate_from_end(self, end_offset: int) -> object: ...

    def truncate_from_start(self, start_offset: int) -> object: ...

    def latest_epoch(self) -> int | None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendInfo:
    """The outcome of an append (Kafka's LogAppendInfo, the parts we track)."""

    first_offset: int
    last_offset: int
    """Last offset appended; ``first_offset - 1`` for an empty follower append."""
    max_timestamp: int
    offset_of_max_timestamp: int
    batch_count: int
    record_count: int
    """Sum of the batches' recordCount header fields (no record was decoded)."""
    valid_bytes: int
    log_start_offset: int
    log_append_time_ms: int = NO_TIMESTAMP
    """The time written into every batch under ``message.timestamp.type=LogAppendTime``, else -1
    (ProduceResponse's logAppendTimeMs)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LogOffsetMetadata:
    """An offset and where it sits on disk (Kafka's LogOffsetMetadata)."""

    message_offset: int
    segment_base_offset: int
    relative_position_in_segment: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchData:
    """Whole batches read from the log, as one byte string (Kafka's FetchDataInfo)."""

    fetch_offset_metadata: LogOffsetMetadata
    records: bytes
    first_offset: int | None
    """Base offset of the first returned batch (may be below the requested offset); None when empty."""
    next_offset: int
    """Offset to fetch next: one past the last returned batch; the requested offset when empty."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentInfo:
    """A read-only description of one segment."""

    base_offset: int
    next_offset: int
    size_in_bytes: int
    max_timestamp: int
    """Largest batch maxTimestamp in the segment, -1 when it has none."""


class OffsetAndTimestamp(NamedTuple):
    """Answer of :meth:`Log.offset_for_timestamp` (Kafka's TimestampAndOffset)."""

    offset: int
    timestamp: int


def _writable_view(buf: bytes | bytearray | memoryview) -> memoryview:
    """A writable byte view of the caller's buffer, copying only when it is read-only."""
    if isinstance(buf, bytearray):
        return memoryview(buf)
    if isinstance(buf, memoryview) and not buf.readonly:
        return buf.cast("B") if buf.format != "B" else buf
    return memoryview(bytearray(buf))


class Log:
    """A partition's segmented log. Create with :meth:`open`.

    Invariants: segments are sorted by base offset and never overlap; the last
    one is the active segment (the only one appended to); ``log_start_offset``
    is in [first base offset, log end offset]; ``recovery_point`` <= log end offset.
    """

    def __init__(self, directory: str, config: LogConfig, segments: list[LogSegment], *,
                 log_start_offset: int, recovery_point: int, epoch_cache: EpochCacheUpdater | None,
                 now_ms: int, handles: file_handles.FileHandleCache = file_handles.UNBOUNDED) -> None:
        if not segments:
            raise InvariantViolation(f"{directory}: a log needs at least one segment")
        self._directory = directory
        self._config = config
        self._handles = handles
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        self._epoch_cache = epoch_cache
        self._last_flush_ms = now_ms
        self._dir_dirty = False
        self._closed = False

    # ================================================================== opening / recovery

    @classmethod
    def open(cls, directory: str | os.PathLike[str], config: LogConfig, *, now_ms: int,
             recovery_point: int = 0, log_start_offset: int = 0,
             epoch_cache: EpochCacheUpdater | None = None,
             handles: file_handles.FileHandleCache = file_handles.UNBOUNDED) -> Log:
        """Open (creating if needed) a partition directory, recovering it after an unclean shutdown.

        ``recovery_point`` and ``log_start_offset`` come from the
        ``recovery-point-offset-checkpoint`` / ``log-start-offset-checkpoint``
        files. Segments wholly below the recovery point are trusted (their
        indexes are sanity-checked and rebuilt if needed); the segment holding
        the recovery point and later ones are CRC-scanned and cut at the first
        invalid batch (Kafka's LogLoader). Raises CorruptRecordError if data
        below the recovery point is damaged. ``handles`` bounds the descriptors
        this log's segment files hold open, together with every other log that
        shares it (the default never closes one).
        """
        path = os.fspath(directory)
        os.makedirs(path, exist_ok=True)
        _remove_temp_files_and_complete_swaps(path)
        bases = _segment_bases(path)
        segments: list[LogSegment] = []
        try:
            for base in bases:
                segments.append(LogSegment.open_existing(path, base, config=config, now_ms=now_ms,
                                                         handles=handles))
            segments = _load_segments(path, segments, recovery_point)
        except BaseException:
            for seg in segments:
                seg.close_handles()
            raise
        if not segments:
            segments = [LogSegment.create(path, log_start_offset, config=config, now_ms=now_ms, handles=handles)]
        log_end_offset = segments[-1].next_offset
        if log_end_offset < log_start_offset:
            # The log start checkpoint is ahead of everything on disk (records
            # were deleted up to it): start empty there, as Kafka's LogLoader does.
            logger.warning("log=%s event=start_at_log_start_offset log_end_offset=%d log_start_offset=%d",
                           path, log_end_offset, log_start_offset)
            for seg in segments:
                seg.delete()
            segments = [LogSegment.create(path, log_start_offset, config=config, now_ms=now_ms, handles=handles)]
            log_end_offset = log_start_offset
        if recovery_point > log_end_offset:
            logger.warning("log=%s event=recovery_point_beyond_log_end recovery_point=%d log_end_offset=%d",
                           path, recovery_point, log_end_offset)
        log = cls(path, config, segments,
                  log_start_offset=max(log_start_offset, segments[0].base_offset),
                  recovery_point=min(recovery_point, log_end_offset),
                  epoch_cache=epoch_cache, now_ms=now_ms, handles=handles)
        if epoch_cache is not None:
            epoch_cache.truncate_from_end(log_end_offset)
            epoch_cache.truncate_from_start(log.log_start_offset)
        return log

    # ================================================================== state

    @property
    def directory(self) -> str:
        return self._directory

    @property
    def config(self) -> LogConfig:
        return self._config

    def reconfigure(self, config: LogConfig) -> None:
        """Use ``config`` from now on (a topic's configs changed): it governs the next roll,
        retention and flush; segments already written keep their index files."""
        self._config = config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def recovery_point(self) -> int:
        """Offsets below this are fsynced; recovery never cuts below it."""
        return self._recovery_point

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segments(self) -> tuple[SegmentInfo, ...]:
        return tuple(
            SegmentInfo(base_offset=s.base_offset, next_offset=s.next_offset, size_in_bytes=s.size,
                        max_timestamp=s.max_timestamp_so_far)
            for s in self._segments)

    @property
    def log_end_offset_metadata(self) -> LogOffsetMetadata:
        active = self._segments[-1]
        return LogOffsetMetadata(message_offset=active.next_offset, segment_base_offset=active.base_offset,
                                 relative_position_in_segment=active.size)

    def _check_open(self) -> None:
        if self._closed:
            raise InvariantViolation(f"log {self._directory} is closed")

    # ================================================================== append

    def append_as_leader(self, buf: bytes | bytearray | memoryview, *, leader_epoch: int,
                         now_ms: int) -> AppendInfo:
        """Assign offsets from the log end and stamp ``leader_epoch`` into every batch, then append.

        Every batch's size, magic, codec, counts and CRC are checked first
        (Kafka's LogValidator). A writable ``buf`` has its headers patched in
        place and is written with one ``pwrite``; a read-only one (``bytes``)
        is not copied: each batch is written as its stamped 16-byte prefix plus
        a view of the rest (``pwritev``). With ``message.timestamp.type=LogAppendTime``
        each batch also gets maxTimestamp = ``now_ms`` and the LogAppendTime
        attribute bit, and its CRC is recomputed (the one case a broker changes
        CRC-covered bytes). Raises CorruptRecordError for an empty, partial or
        corrupt buffer (UnsupportedCompressionTypeError for an unknown codec
        id); then nothing was written and ``buf`` is unchanged.
        """
        self._check_open()
        log_append_time = self._config.message_timestamp_type is bh.TimestampType.LOG_APPEND_TIME
        view = memoryview(buf).cast("B") if isinstance(buf, memoryview) else memoryview(buf)
        if log_append_time:
            if not 0 <= now_ms <= varint.INT64_MAX:
                raise ValueError(f"now_ms must be a non-negative int64 for LogAppendTime, got {now_ms}")
            # maxTimestamp and the CRC change: those bytes must be patched.
            view = _writable_view(view)
        if len(view) == 0:
            raise CorruptRecordError("cannot append an empty set of record batches", position=0)
        # A read-only buffer (the bytes of an RPC) is not copied: its batches
        # go to the file as pieces, each with its stamped header prefix.
        in_place = not view.readonly
        first_offset = self.log_end_offset
        active = self._segments[-1]
        stamp = bh.stamp_range(view, 0, len(view), next_offset=first_offset,
                                         leader_epoch=leader_epoch, cursor=active.index_cursor(),
                                         in_place=in_place)
        if log_append_time:
            stamp = _set_log_append_time(view, stamp, now_ms)
        try:
            active = self._segment_for_append(len(view), stamp, now_ms)
        except CorruptRecordError:
            bh.unstamp(view, stamp)
            raise
        try:
            if in_place:
                active.write_at(view, active.size)
            else:
                active.write_pieces_at(bh.stamped_pieces(view, stamp, leader_epoch=leader_epoch),
                                       active.size)
        except BaseException:
            active.discard_uncommitted()
            raise
        active.commit_stamped(view, stamp)
        if self._epoch_cache is not None:
            latest = self._epoch_cache.latest_epoch()
            if leader_epoch >= 0 and (latest is None or leader_epoch > latest):
                self._epoch_cache.assign(leader_epoch, first_offset)
        info = AppendInfo(first_offset=first_offset, last_offset=stamp.next_offset - 1,
                          max_timestamp=stamp.max_timestamp, offset_of_max_timestamp=stamp.offset_of_max_timestamp,
                          batch_count=stamp.batch_count, record_count=stamp.record_count,
                          valid_bytes=len(view), log_start_offset=self._log_start_offset,
                          log_append_time_ms=now_ms if log_append_time else NO_TIMESTAMP)
        self._maybe_flush_after_append(now_ms)
        return info

    def _segment_for_append(self, size: int, stamp: bh.StampedRange, now_ms: int) -> LogSegment:
        """The active segment, rolled first if this append must start a new one (Kafka's maybeRoll)."""
        if self._needs_roll(size, stamp, now_ms):
            return self._roll(now_ms)
        return self._segments[-1]

    def _needs_roll(self, size: int, stamp: bh.StampedRange, now_ms: int) -> bool:
        last_offset = stamp.next_offset - 1
        if last_offset - stamp.first_offset > segment_mod.INT32_MAX:
            raise CorruptRecordError(
                f"append spans offsets [{stamp.first_offset}, {last_offset}], more than one segment can index",
                path=f"append to {self._directory}")
        return self._segments[-1].should_roll(
            messages_size=size, max_timestamp_in_messages=stamp.max_timestamp, last_offset=last_offset,
            segment_bytes=self._config.segment_bytes, segment_ms=self._config.segment_ms, now_ms=now_ms)

    def append_as_follower(self, buf: bytes | bytearray | memoryview, *, now_ms: int) -> AppendInfo:
        """Append batches that already carry offsets (replication); they must start at the log end.

        Validates sizes, magic and CRC of every batch. Raises
        UnexpectedAppendOffsetError (an OffsetOutOfRangeError) when the first
        batch does not start at the log end offset, CorruptRecordError for an
        invalid batch or a gap/overlap between batches. An empty buffer
        appends nothing.
        """
        self._check_open()
        view = memoryview(buf).cast("B") if isinstance(buf, memoryview) else memoryview(buf)
        log_end = self.log_end_offset
        where = f"follower append to {self._directory}"
        if len(view) == 0:
            return AppendInfo(first_offset=log_end, last_offset=log_end - 1, max_timestamp=NO_TIMESTAMP,
                              offset_of_max_timestamp=-1, batch_count=0, record_count=0, valid_bytes=0,
                              log_start_offset=self._log_start_offset)
        scan = bh.scan_valid_prefix(view, 0, check_crc=True)
        if scan.error is not None or scan.valid_bytes != len(view):
            reason = scan.error or f"incomplete batch ({len(view) - scan.valid_bytes} trailing bytes)"
            raise CorruptRecordError(f"invalid batch: {reason}", path=where, position=scan.valid_bytes)
        infos = segment_mod.walk_batches(view)
        first_base = infos[0][0]
        if first_base != log_end:
            raise UnexpectedAppendOffsetError(
                f"{where}: first batch has offset {first_base} but the log end offset is {log_end} "
                f"({'gap' if first_base > log_end else 'overlap'})",
                first_offset=first_base, last_offset=infos[-1][1], log_end_offset=log_end)
        expected = log_end
        max_ts = NO_TIMESTAMP
        offset_of_max = -1
        for base, last, position, _size, batch_max_ts, _epoch in infos:
            if base != expected:
                raise CorruptRecordError(
                    f"batch offset {base} does not follow offset {expected - 1} "
                    f"({'gap' if base > expected else 'overlap'})", path=where, position=position)
            if batch_max_ts > max_ts:
                max_ts, offset_of_max = batch_max_ts, last
            expected = last + 1
        self._append(view, infos, now_ms=now_ms)
        if self._epoch_cache is not None:
            latest = self._epoch_cache.latest_epoch()
            latest = -1 if latest is None else latest
            for base, _last, _position, _size, _max_ts, epoch in infos:
                if epoch >= 0 and epoch > latest:
                    self._epoch_cache.assign(epoch, base)
                    latest = epoch
        result = AppendInfo(first_offset=log_end, last_offset=infos[-1][1], max_timestamp=max_ts,
                            offset_of_max_timestamp=offset_of_max, batch_count=len(infos),
                            record_count=scan.record_count, valid_bytes=len(view),
                            log_start_offset=self._log_start_offset)
        self._maybe_flush_after_append(now_ms)
        return result

    def _append(self, view: memoryview, infos: Sequence[segment_mod.BatchInfo], *, now_ms: int) -> None:
        max_ts = max(info[4] for info in infos)
        last_offset = infos[-1][1]
        if last_offset - infos[0][0] > segment_mod.INT32_MAX:
            raise CorruptRecordError(
                f"append spans offsets [{infos[0][0]}, {last_offset}], more than one segment can index",
                path=f"append to {self._directory}")
        active = self._segments[-1]
        if active.should_roll(messages_size=len(view), max_timestamp_in_messages=max_ts, last_offset=last_offset,
                              segment_bytes=self._config.segment_bytes, segment_ms=self._config.segment_ms,
                              now_ms=now_ms):
            active = self._roll(now_ms)
        active.append(view, infos)

    def _maybe_flush_after_append(self, now_ms: int) -> None:
        # Kafka's UnifiedLog.append flushes once log.flush.interval.messages
        # offsets are unflushed; 1 is the metadata log's fsync-per-append mode.
        if self.log_end_offset - self._recovery_point >= self._config.flush_interval_messages:
            self.flush()
            self._last_flush_ms = now_ms

    # ================================================================== roll

    def roll(self, now_ms: int) -> None:
        """Start a new active segment at the log end offset (no-op if the active one is empty)."""
        self._check_open()
        if self._segments[-1].size > 0:
            self._roll(now_ms)

    def _roll(self, now_ms: int) -> LogSegment:
        old = self._segments[-1]
        new_base = old.next_offset
        if old.size == 0:
            # An empty active segment at the same offset is simply replaced.
            old.delete()
            self._segments.pop()
            self._bases.pop()
        else:
            old.on_become_inactive()
        segment = LogSegment.create(self._directory, new_base, config=self._config, now_ms=now_ms,
                                    handles=self._handles)
        self._segments.append(segment)
        self._bases.append(new_base)
        self._dir_dirty = True
        logger.info("log=%s event=roll base_offset=%d", self._directory, new_base)
        return segment

    # ================================================================== read

    def read(self, start_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_message: bool = True) -> FetchData:
        """Whole batches starting with the one that holds ``start_offset``, about ``max_bytes`` long.

        ``max_offset`` (exclusive, e.g. the high watermark) hides batches
        whose last offset reaches it. Reading at the log end returns nothing;
        an offset outside [log start, log end] raises OffsetOutOfRangeError.
        With ``min_one_message`` an oversized first batch is returned whole.
        """
        self._check_open()
        log_end = self.log_end_offset
        if start_offset < self._log_start_offset or start_offset > log_end:
            raise OffsetOutOfRangeError(
                f"{self._directory}: offset {start_offset} is outside the log "
                f"[{self._log_start_offset}, {log_end}]")
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        i = max(0, bisect.bisect_right(self._bases, start_offset) - 1)
        if start_offset < log_end and (max_offset is None or start_offset < max_offset):
            for seg in itertools.islice(self._segments, i, None):
                if max_offset is not None and seg.base_offset >= max_offset:
                    break
                found = seg.read(start_offset, max_bytes, max_offset=max_offset, min_one_message=min_one_message)
                if found is not None:
                    return FetchData(
                        fetch_offset_metadata=LogOffsetMetadata(
                            message_offset=start_offset, segment_base_offset=seg.base_offset,
                            relative_position_in_segment=found.position),
                        records=found.records, first_offset=found.first_offset if found.records else None,
                        next_offset=found.next_offset if found.records else start_offset)
        seg = self._segments[i]
        return FetchData(
            fetch_offset_metadata=LogOffsetMetadata(
                message_offset=start_offset, segment_base_offset=seg.base_offset,
                relative_position_in_segment=seg.size if start_offset >= seg.next_offset else 0),
            records=b"", first_offset=None, next_offset=start_offset)

    def offset_for_timestamp(self, timestamp: int) -> OffsetAndTimestamp | None:
        """The first offset whose record timestamp is >= ``timestamp`` (ListOffsets), or None.

        Also answers Kafka's special timestamps: -2 (earliest: log start
        offset), -1 (latest: log end offset), -3 (the record with the largest
        timestamp). Only the one matching batch is decoded.
        """
        self._check_open()
        if timestamp == EARLIEST_TIMESTAMP:
            return OffsetAndTimestamp(self._log_start_offset, NO_TIMESTAMP)
        if timestamp == LATEST_TIMESTAMP:
            return OffsetAndTimestamp(self.log_end_offset, NO_TIMESTAMP)
        if timestamp == MAX_TIMESTAMP:
            best: tuple[int, int] | None = None
            for seg in self._segments:
                if seg.max_timestamp_so_far >= 0 and (best is None or seg.max_timestamp_so_far > best[1]):
                    best = (seg.offset_of_max_timestamp_so_far, seg.max_timestamp_so_far)
            if best is None or best[0] < self._log_start_offset:
                return None
            return OffsetAndTimestamp(*best)
        if timestamp < 0:
            raise ValueError(f"timestamp must be >= 0 or one of -1, -2, -3, got {timestamp}")
        for seg in self._segments:
            if seg.max_timestamp_so_far < timestamp or seg.next_offset <= self._log_start_offset:
                continue
            found = seg.find_offset_by_timestamp(timestamp, self._log_start_offset)
            if found is not None:
                return OffsetAndTimestamp(*found)
        return None

    # ================================================================== truncation

    def truncate_to(self, offset: int) -> bool:
        """Remove everything at and after ``offset`` (a follower cutting a diverged tail).

        Batches are never split: an offset inside a batch removes that whole
        batch. Returns False when there was nothing to remove. Callers then
        rewrite the recovery-point checkpoint (as Kafka's LogManager.truncateTo does).
        """
        self._check_open()
        if offset < 0:
            raise OffsetOutOfRangeError(f"{self._directory}: cannot truncate to negative offset {offset}")
        if offset >= self.log_end_offset:
            return False
        if offset < self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        while len(self._segments) > 1 and self._segments[-1].base_offset > offset:
            self._delete_segment(self._segments.pop(), reason=f"truncation to {offset}")
            self._bases.pop()
        active = self._segments[-1]
        removed = active.truncate_to(offset)
        logger.info("log=%s event=truncate offset=%d log_end_offset=%d removed_bytes=%d",
                    self._directory, offset, active.next_offset, removed)
        new_end = active.next_offset
        self._log_start_offset = min(self._log_start_offset, new_end)
        self._recovery_point = min(self._recovery_point, new_end)
        if self._epoch_cache is not None:
            self._epoch_cache.truncate_from_end(new_end)
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start empty at ``offset`` (a follower far behind the leader's log start)."""
        self._check_open()
        if offset < 0:
            raise OffsetOutOfRangeError(f"{self._directory}: cannot start the log at negative offset {offset}")
        # No clock here (the signature is Kafka's): the new segment inherits the
        # old active segment's creation time, which only matters for
        # log.roll.ms on batches without timestamps.
        now_ms = self._segments[-1].created_ms
        for seg in self._segments:
            self._delete_segment(seg, reason=f"truncate fully and start at {offset}")
        self._segments = [LogSegment.create(self._directory, offset, config=self._config, now_ms=now_ms,
                                            handles=self._handles)]
        self._bases = [offset]
        self._dir_dirty = True
        self._log_start_offset = offset
        self._recovery_point = offset
        if self._epoch_cache is not None:
            self._epoch_cache.truncate_from_end(offset)
        logger.info("log=%s event=truncate_fully start_offset=%d", self._directory, offset)

    def _delete_segment(self, seg: LogSegment, *, reason: str) -> None:
        logger.info("log=%s event=delete_segment base_offset=%d size=%d reason=%r",
                    self._directory, seg.base_offset, seg.size, reason)
        seg.delete()
        self._dir_dirty = True

    # ================================================================== retention

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Advance the log start offset (DeleteRecords, raft snapshots) and drop segments wholly below it.

        Returns True when it moved. Raises OffsetOutOfRangeError beyond the log end offset.
        """
        self._check_open()
        if offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"{self._directory}: cannot move the log start offset to {offset}, beyond the log end offset "
                f"{self.log_end_offset}")
        if offset <= self._log_start_offset:
            return False
        self._log_start_offset = offset
        if self._epoch_cache is not None:
            self._epoch_cache.truncate_from_start(offset)
        self._delete_old_segments(lambda seg, nxt: nxt is not None and nxt.base_offset <= offset,
                                  high_watermark=self.log_end_offset, now_ms=self._segments[-1].created_ms,
                                  reason=f"log start offset {offset}")
        return True

    def delete_old_segments(self, now_ms: int, *, high_watermark: int | None = None) -> int:
        """Apply ``log.retention.ms``, ``log.retention.bytes`` and the log start offset; returns segments deleted.

        Only segments wholly below ``high_watermark`` (default: the log end)
        go, oldest first, stopping at the first one that must stay. An empty
        active segment is never deleted; if every segment goes, a new empty
        one is rolled first (Kafka's UnifiedLog.deleteOldSegments).
        """
        self._check_open()
        hw = self.log_end_offset if high_watermark is None else min(high_watermark, self.log_end_offset)
        deleted = 0
        retention_ms = self._config.retention_ms
        if retention_ms >= 0:
            deleted += self._delete_old_segments(
                lambda seg, _nxt: now_ms - seg.largest_timestamp > retention_ms,
                high_watermark=hw, now_ms=now_ms, reason=f"log.retention.ms={retention_ms}")
        retention_bytes = self._config.retention_bytes
        if retention_bytes >= 0 and self.size_in_bytes >= retention_bytes:
            excess = self.size_in_bytes - retention_bytes

            def over_size(seg: LogSegment, _nxt: LogSegment | None) -> bool:
                nonlocal excess
                if excess - seg.size >= 0:
                    excess -= seg.size
                    return True
                return False

            deleted += self._delete_old_segments(over_size, high_watermark=hw, now_ms=now_ms,
                                                 reason=f"log.retention.bytes={retention_bytes}")
        start = self._log_start_offset
        deleted += self._delete_old_segments(lambda _seg, nxt: nxt is not None and nxt.base_offset <= start,
                                             high_watermark=hw, now_ms=now_ms, reason=f"log start offset {start}")
        return deleted

    def _delete_old_segments(self, predicate: Callable[[LogSegment, LogSegment | None], bool], *,
                             high_watermark: int, now_ms: int, reason: str) -> int:
        deletable: list[LogSegment] = []
        for i, seg in enumerate(self._segments):
            nxt = self._segments[i + 1] if i + 1 < len(self._segments) else None
            upper = nxt.base_offset if nxt is not None else self.log_end_offset
            is_last_and_empty = nxt is None and seg.size == 0
            # Never beyond the high watermark, so the log start offset cannot pass it.
            if high_watermark >= upper and not is_last_and_empty and predicate(seg, nxt):
                deletable.append(seg)
            else:
                break
        if not deletable:
            return 0
        if len(deletable) == len(self._segments):
            self._roll(now_ms)
        del self._segments[:len(deletable)]
        del self._bases[:len(deletable)]
        for seg in deletable:
            self._delete_segment(seg, reason=reason)
        new_start = self._segments[0].base_offset
        if new_start > self._log_start_offset:
            self._log_start_offset = new_start
            if self._epoch_cache is not None:
                self._epoch_cache.truncate_from_start(new_start)
        self._recovery_point = max(self._recovery_point, min(new_start, self.log_end_offset))
        return len(deletable)

    # ================================================================== compaction (storage.cleaner)

    def segment_handles(self) -> tuple[LogSegment, ...]:
        """The live segments, oldest first; the last is the active one. For :mod:`kraftlog.storage.cleaner` only.

        A handle is valid until the next call that changes the segment list
        (roll, retention, truncation, :meth:`replace_segments`); callers on
        the owner's thread use it within one synchronous step.
        """
        self._check_open()
        return tuple(self._segments)

    def replace_segments(self, cleaned_log_path: str, old: Sequence[LogSegment], *, now_ms: int,
                         on_step: Callable[[str], None] | None = None) -> LogSegment:
        """Swap a cleaned ``<base>.log.cleaned`` file in for ``old``, a run of inactive segments (Kafka's replaceSegments).

        ``base`` is ``old[0].base_offset``; the cleaned file must be fsynced
        and hold exactly the offsets [base, old[-1].next_offset) (the cleaner
        keeps every offset covered). Steps, each survivable by a crash because
        :func:`_remove_temp_files_and_complete_swaps` finishes them on open:
        rename ``.cleaned`` -> ``.log.swap``; delete the old segments (each
        via ``.deleted``); rename ``.swap`` -> ``.log``; rebuild both indexes
        from a CRC scan of the new file. ``on_step(name)`` runs after each step
        ("swap", "delete:<base>", "rename"); tests raise from it to crash there.
        Raises InvariantViolation if ``old`` is not a run of inactive segments.
        An OSError part-way leaves this object behind the files: the log must
        be reopened (Kafka takes the log dir offline), which completes the swap.
        """
        self._check_open()
        if not old:
            raise InvariantViolation(f"{self._directory}: replace_segments needs at least one segment")
        first = next((i for i, seg in enumerate(self._segments) if seg is old[0]), None)
        if (first is None or first + len(old) >= len(self._segments)
                or any(a is not b for a, b in zip(self._segments[first:first + len(old)], old, strict=True))):
            raise InvariantViolation(
                f"{self._directory}: segments {[s.base_offset for s in old]} are not a run of inactive segments "
                f"of this log ({self._bases})")
        base = old[0].base_offset
        end_offset = old[-1].next_offset
        log_name = segment_mod.file_name(base, segment_mod.LOG_SUFFIX)
        expected = os.path.join(self._directory, log_name + segment_mod.CLEANED_SUFFIX)
        if os.path.abspath(cleaned_log_path) != os.path.abspath(expected):
            raise InvariantViolation(f"{self._directory}: cleaned file {cleaned_log_path} should be {expected}")
        swap_path = os.path.join(self._directory, log_name + segment_mod.SWAP_SUFFIX)
        step = on_step if on_step is not None else _no_step
        os.replace(cleaned_log_path, swap_path)
        atomic_file.fsync_dir(self._directory)
        step("swap")
        for seg in old:
            seg.delete()
            step(f"delete:{seg.base_offset}")
        atomic_file.fsync_dir(self._directory)
        os.replace(swap_path, os.path.join(self._directory, log_name))
        atomic_file.fsync_dir(self._directory)
        step("rename")
        new = LogSegment.open_existing(self._directory, base, config=self._config, now_ms=now_ms,
                                       handles=self._handles)
        try:
            # Every offset of the old run must be covered: a short file is a
            # corrupt cleaning output and raises instead of being cut.
            new.recover(min_valid_offset=end_offset)
            new.flush()
        except BaseException:
            new.close_handles()
            raise
        self._segments[first:first + len(old)] = [new]
        self._bases[first:first + len(old)] = [base]
        logger.info("log=%s event=replace_segments base_offset=%d replaced=%d size=%d next_offset=%d",
                    self._directory, base, len(old), new.size, new.next_offset)
        return new

    # ================================================================== flush / close

    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding offsets below ``offset`` (default: all) and advance the recovery point."""
        self._check_open()
        target = self.log_end_offset if offset is None else min(offset, self.log_end_offset)
        if target <= self._recovery_point:
            return
        for i, seg in enumerate(self._segments):
            if seg.base_offset >= target:
                break
            upper = self._segments[i + 1].base_offset if i + 1 < len(self._segments) else None
            if upper is None or upper > self._recovery_point:
                seg.flush()
        if self._dir_dirty:
            # New and deleted segment files must survive a crash too.
            atomic_file.fsync_dir(self._directory)
            self._dir_dirty = False
        self._recovery_point = target

    def maybe_flush(self, now_ms: int) -> bool:
        """Flush if ``log.flush.interval.messages`` or ``log.flush.interval.ms`` says so; True if it did."""
        self._check_open()
        unflushed = self.log_end_offset - self._recovery_point
        due_by_time = (self._config.flush_interval_ms is not None
                       and now_ms - self._last_flush_ms >= self._config.flush_interval_ms)
        if unflushed > 0 and (unflushed >= self._config.flush_interval_messages or due_by_time):
            self.flush()
            self._last_flush_ms = now_ms
            return True
        if due_by_time:
            self._last_flush_ms = now_ms
        return False

    def close(self) -> None:
        """Flush everything (recovery point = log end) and close the files."""
        if self._closed:
            return
        for seg in self._segments:
            seg.on_become_inactive()
        self.flush()
        for seg in self._segments:
            seg.flush()
            seg.close()
        self._closed = True

    def close_handlers(self) -> None:
        """Close the files without flushing (Kafka's closeHandlers: a failed log dir, or a simulated crash)."""
        if self._closed:
            return
        for seg in self._segments:
            seg.close_handles()
        self._closed = True


def _no_step(_name: str) -> None:
    """The default ``on_step`` of :meth:`Log.replace_segments`."""


def _set_log_append_time(view: memoryview, stamp: bh.StampedRange,
                         now_ms: int) -> bh.StampedRange:
    """``message.timestamp.type=LogAppendTime``: every validated batch gets maxTimestamp = now_ms.

    Kafka's LogValidator does this for uncompressed and compressed batches
    alike without touching records: readers take every record's timestamp from
    maxTimestamp when the attribute bit is set (KIP-32). The CRC covers both
    fields, so it is recomputed; this is the only case where a broker changes
    CRC-covered bytes. Kafka's shallow offset of the max timestamp is then the
    first batch's last offset. The index entries stamp_range planned from the
    producer's timestamps are dropped (start_cursor=NO_INDEX never matches a
    segment), so the segment re-walks the patched headers when it commits.
    """
    for position, _base, _epoch in stamp.originals:
        bh.BatchHeader(view, position).set_max_timestamp(
            bh.TimestampType.LOG_APPEND_TIME, now_ms)
    return stamp._replace(max_timestamp=now_ms, first_batch_max_timestamp=now_ms,
                          offset_of_max_timestamp=bh.BatchHeader(view, 0).last_offset,
                          start_cursor=bh.NO_INDEX)


# ====================================================================== loading helpers

def _segment_bases(directory: str) -> list[int]:
    bases: list[int] = []
    names = os.listdir(directory)
    logs = set()
    for name in names:
        if name.endswith(segment_mod.LOG_SUFFIX):
            base = segment_mod.parse_base_offset(name)
            if base is None or name != segment_mod.file_name(base, segment_mod.LOG_SUFFIX):
                logger.warning("log=%s event=ignore_file file=%s reason=not_a_segment_name", directory, name)
                continue
            bases.append(base)
            logs.add(base)
    for name in names:
        for suffix in (segment_mod.INDEX_SUFFIX, segment_mod.TIME_INDEX_SUFFIX):
            if name.endswith(suffix):
                base = segment_mod.parse_base_offset(name)
                if base is not None and base not in logs and name == segment_mod.file_name(base, suffix):
                    logger.warning("log=%s event=delete_orphan_index file=%s", directory, name)
                    os.unlink(os.path.join(directory, name))
    return sorted(bases)


def _remove_temp_files_and_complete_swaps(directory: str) -> None:
    """Kafka's LogLoader.removeTempFilesAndCollectSwapFiles plus the swap completion.

    ``.deleted`` (a deletion interrupted by a crash), ``.cleaned`` (an
    unfinished compaction output) and ``.tmp`` (an unfinished atomic write)
    files are removed. A ``.log.swap`` file is a complete replacement segment
    whose swap was interrupted: the segments it covers are removed and it is
    renamed into place; its indexes are rebuilt by the load that follows.
    Index ``.swap`` files are removed (rebuilt from the log).
    """
    swaps: list[str] = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.endswith((segment_mod.DELETED_SUFFIX, segment_mod.CLEANED_SUFFIX, segment_mod.TMP_SUFFIX)):
            logger.info("log=%s event=delete_stray_file file=%s", directory, name)
            os.unlink(path)
        elif name.endswith(segment_mod.SWAP_SUFFIX):
            if name.endswith(segment_mod.LOG_SUFFIX + segment_mod.SWAP_SUFFIX):
                swaps.append(name)
            else:
                logger.info("log=%s event=delete_stray_file file=%s", directory, name)
                os.unlink(path)
    for name in swaps:
        base = segment_mod.parse_base_offset(name)
        swap_path = os.path.join(directory, name)
        if base is None:
            logger.warning("log=%s event=delete_stray_file file=%s reason=not_a_segment_name", directory, name)
            os.unlink(swap_path)
            continue
        next_offset = _next_offset_of_file(swap_path, base)
        for other in _segment_bases(directory):
            if base <= other < max(next_offset, base + 1):
                for suffix in (segment_mod.LOG_SUFFIX, segment_mod.INDEX_SUFFIX, segment_mod.TIME_INDEX_SUFFIX):
                    doomed = os.path.join(directory, segment_mod.file_name(other, suffix))
                    if os.path.exists(doomed):
                        os.unlink(doomed)
                logger.info("log=%s event=replace_segment_by_swap base_offset=%d swap=%s", directory, other, name)
        for suffix in (segment_mod.INDEX_SUFFIX, segment_mod.TIME_INDEX_SUFFIX):
            stale = os.path.join(directory, segment_mod.file_name(base, suffix))
            if os.path.exists(stale):
                os.unlink(stale)
        os.replace(swap_path, os.path.join(directory, segment_mod.file_name(base, segment_mod.LOG_SUFFIX)))
        atomic_file.fsync_dir(directory)


def _next_offset_of_file(path: str, base_offset: int) -> int:
    """One past the last offset of the valid batches in a ``.log``-format file."""
    size = os.path.getsize(path)
    if size == 0:
        return base_offset
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mapped:
        view = memoryview(mapped)
        try:
            scan = bh.scan_valid_prefix(view, 0, check_crc=False)
        finally:
            view.release()
    return base_offset if scan.last_offset is None else scan.last_offset + 1


def _load_segments(directory: str, segments: list[LogSegment], recovery_point: int) -> list[LogSegment]:
    """Trust-and-check segments below the recovery point; recover the rest; cut after the first bad batch."""
    for i, seg in enumerate(segments):
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if next_base is not None and next_base <= recovery_point:
            try:
                seg.load()
                continue
            except (CorruptFileError, CorruptRecordError) as e:
                logger.warning("log=%s event=rebuild_index file=%s reason=%r", directory, seg.log_path, str(e))
            # Wholly below the recovery point: every byte up to the next segment must be valid.
            result = seg.recover(min_valid_offset=next_base)
            if result.truncated_bytes:
                logger.warning("log=%s event=truncate_segment file=%s position=%d dropped_bytes=%d reason=%r",
                               directory, seg.log_path, result.valid_bytes, result.truncated_bytes, result.reason)
            continue
        result = seg.recover(min_valid_offset=recovery_point)
        if result.reason is None:
            continue
        logger.warning("log=%s event=truncate_segment file=%s position=%d dropped_bytes=%d reason=%r",
                       directory, seg.log_path, result.valid_bytes, result.truncated_bytes, result.reason)
        for later in segments[i + 1:]:
            logger.warning("log=%s event=delete_segment_after_corruption file=%s dropped_bytes=%d",
                           directory, later.log_path, later.size)
            later.delete()
        segments = segments[:i + 1]
        break
    for prev, nxt in itertools.pairwise(segments):
        if prev.next_offset > nxt.base_offset:
            raise CorruptRecordError(
                f"segment ends at offset {prev.next_offset - 1}, overlapping the next segment {nxt.log_path}",
                path=prev.log_path, position=prev.size)
    return segments
