"""One log segment: a ``.log`` file of whole record batches plus its two sparse indexes.

Owned here (after Kafka's ``LogSegment``): the files ``<base>.log``,
``<base>.index`` and ``<base>.timeindex`` of one segment, named by the 20-digit
zero-padded base offset; appending batches and the index entries that go with
them; translating an offset to a byte position with the offset index plus a
short header scan; byte-range reads of whole batches; truncation; the
recovery scan that finds the valid prefix of the file and rebuilds both indexes
from it; offset-by-timestamp lookup; flush and delete.

Called by :mod:`kraftlog.storage.log` only. It never decodes records on the
append or read path: it looks at the 61-byte v2 batch headers and moves bytes.
Offsets and leader epochs are stamped, and CRCs checked, by
:mod:`kraftlog.storage.batch_header` before bytes reach this module. It never
reads the clock (``now_ms`` is passed in) and knows nothing about other
segments, retention or the recovery point: the Log decides those.

The three files are :class:`~kraftlog.storage.file_handles.LazyFile` objects:
opened on first use, pinned for the length of one operation, and possibly
closed by the shared :class:`~kraftlog.storage.file_handles.FileHandleCache`
between operations (issue 16: 10,000 replicas would otherwise hold 30,000
descriptors). Everything a segment needs between operations (size, next
offset, index entries, timestamps) is kept in memory, so a closed descriptor
costs one ``open`` on the next use and nothing else.
"""

from __future__ import annotations

import array
import contextlib
import logging
import mmap
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from kraftlog.errors import CorruptFileError, CorruptRecordError, InvariantViolation
from kraftlog.storage import batch_header as bh
from kraftlog.storage import file_handles, record_batch
from kraftlog.storage import index as index_mod
from kraftlog.storage.log_config import LogConfig

logger = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
TMP_SUFFIX = ".tmp"
INT32_MAX = 2**31 - 1
NO_TIMESTAMP = -1

# One HEADER_PREFIX unpack per batch (the fields through maxTimestamp) is what keeps the
# per-batch walk on append and read cheap next to the byte copy; validation stays in
# batch_header.
_PEEK_SIZE = bh.HEADER_PREFIX.size
# pwritev takes at most IOV_MAX buffers (1024 on Linux): 512 batches per call.
_IOV_MAX = 1024


BatchInfo = tuple[int, int, int, int, int, int]
"""One batch seen by :func:`walk_batches`: (base_offset, last_offset, position,
size_in_bytes, max_timestamp, partition_leader_epoch). A plain tuple, unpacked by
name at each use, because building one per batch is on the append hot path
(about 4x cheaper than a frozen dataclass)."""


def walk_batches(buf: bytes | bytearray | memoryview, start: int = 0, end: int | None = None) -> list[BatchInfo]:
    """Header-only walk over ``buf[start:end]``, whole batches already validated by batch_header.

    Positions are relative to ``buf``. Raises CorruptRecordError if the range
    does not end on a batch boundary.
    """
    infos: list[BatchInfo] = []
    append = infos.append
    position = start
    end = len(buf) if end is None else end
    unpack = bh.HEADER_PREFIX.unpack_from
    overhead = bh.LOG_OVERHEAD
    min_length = bh.HEADER_SIZE - bh.LOG_OVERHEAD
    while position < end:
        if end - position < bh.HEADER_SIZE:
            raise CorruptRecordError(f"partial batch header ({end - position} bytes)", position=position)
        base, length, epoch, _magic, _crc, _attrs, delta, _base_ts, max_ts = unpack(buf, position)
        size = length + overhead
        if length < min_length or position + size > end:
            raise CorruptRecordError(f"batch length {length} does not fit the buffer", position=position)
        append((base, base + delta, position, size, max_ts, epoch))
        position += size
    return infos


def file_name(base_offset: int, suffix: str) -> str:
    """``00000000000000000042.log`` and friends: Kafka's 20-digit zero-padded base offset."""
    return f"{base_offset:020d}{suffix}"


def parse_base_offset(name: str) -> int | None:
    """The base offset of a segment file name, or None when the name is not one."""
    stem = name.split(".", 1)[0]
    if len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveryResult:
    """What :meth:`LogSegment.recover` kept and dropped."""

    valid_bytes: int
    truncated_bytes: int
    next_offset: int
    reason: str | None
    """Why the scan stopped before the end of the file; None when all bytes were valid."""


class SegmentRead(NamedTuple):
    """Bytes of whole batches read from one segment.

    A NamedTuple, not a frozen dataclass: one is built per fetch, and it is
    several times cheaper to build.
    """

    position: int
    """Byte position of the first returned batch in the ``.log`` file."""
    first_offset: int
    """Base offset of the first returned batch."""
    records: bytes
    next_offset: int
    """Offset to read next: one past the last returned batch (``first_offset`` when empty)."""


class LogSegment:
    """A segment's files and in-memory state.

    Invariants: ``size`` is the ``.log`` file's length and ends on a batch
    boundary; every index entry points at a batch start below ``size``;
    ``next_offset`` is one past the last batch's last offset (``base_offset``
    when empty).
    """

    __slots__ = (
        "_bytes_since_last_index_entry",
        "_closed",
        "_file",
        "_handles",
        "_read_hint_offset",
        "_read_hint_position",
        "_synced",
        "base_offset",
        "created_ms",
        "directory",
        "index",
        "index_interval_bytes",
        "log_path",
        "max_index_bytes",
        "max_timestamp_so_far",
        "next_offset",
        "offset_of_max_timestamp_so_far",
        "rolling_based_timestamp",
        "size",
        "time_index",
    )

    def __init__(self, directory: str, base_offset: int, *, config: LogConfig, now_ms: int,
                 file: file_handles.LazyFile, size: int, handles: file_handles.FileHandleCache) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.log_path = file.path
        self.index_interval_bytes = config.index_interval_bytes
        self.max_index_bytes = config.segment_index_bytes
        self._handles = handles
        self.index = index_mod.OffsetIndex(
            os.path.join(directory, file_name(base_offset, INDEX_SUFFIX)), base_offset,
            max_index_bytes=config.segment_index_bytes, handles=handles)
        self.time_index = index_mod.TimeIndex(
            os.path.join(directory, file_name(base_offset, TIME_INDEX_SUFFIX)), base_offset,
            max_index_bytes=config.segment_index_bytes, handles=handles)
        self._file = file
        self._closed = False
        self._synced = True
        self.size = size
        self.next_offset = base_offset
        self.max_timestamp_so_far = NO_TIMESTAMP
        self.offset_of_max_timestamp_so_far = base_offset
        self.rolling_based_timestamp: int | None = None
        self.created_ms = now_ms
        self._bytes_since_last_index_entry = 0
        # Where the last read stopped: (next offset, its byte position). A
        # sequential reader (a follower, a consumer) asks for exactly that
        # offset next, so its translation costs no header reads (the same
        # shortcut Kafka's fetch path gets from LogOffsetMetadata positions).
        self._read_hint_offset = -1
        self._read_hint_position = 0

    # ------------------------------------------------------------------ opening

    @classmethod
    def create(cls, directory: str, base_offset: int, *, config: LogConfig, now_ms: int,
               handles: file_handles.FileHandleCache = file_handles.UNBOUNDED) -> LogSegment:
        """A new, empty segment (any files left at that name are emptied)."""
        path = os.path.join(directory, file_name(base_offset, LOG_SUFFIX))
        file = file_handles.LazyFile(path, flags=os.O_RDWR, cache=handles)
        file.create()
        try:
            segment = cls(directory, base_offset, config=config, now_ms=now_ms, file=file, size=0,
                          handles=handles)
            segment.index.reset()
            segment.time_index.reset()
        except BaseException:
            file.close()
            raise
        return segment

    @classmethod
    def open_existing(cls, directory: str, base_offset: int, *, config: LogConfig, now_ms: int,
                      handles: file_handles.FileHandleCache = file_handles.UNBOUNDED) -> LogSegment:
        """An existing segment (its files open on first use); call :meth:`load` or :meth:`recover` next.

        Raises FileNotFoundError when the ``.log`` file does not exist."""
        path = os.path.join(directory, file_name(base_offset, LOG_SUFFIX))
        size = os.stat(path).st_size
        file = file_handles.LazyFile(path, flags=os.O_RDWR, cache=handles)
        return cls(directory, base_offset, config=config, now_ms=now_ms, file=file, size=size, handles=handles)

    def load(self) -> None:
        """Trust the ``.log`` (it is below the recovery point) but sanity-check both indexes.

        Finds the next offset by scanning headers from the last offset index
        entry to the end of the file. Raises CorruptFileError if an index is
        missing or inconsistent, or if the file does not end on a batch
        boundary; the Log then calls :meth:`recover` instead.
        """
        self.index = index_mod.OffsetIndex.load(
            self.index.path, self.base_offset, max_index_bytes=self.max_index_bytes, log_size=self.size,
            handles=self._handles)
        if self.size == 0:
            next_offset = self.base_offset
        else:
            with self._file.pinned() as fd:
                next_offset = self._load_log(fd)
        self.next_offset = next_offset
        self.time_index = index_mod.TimeIndex.load(
            self.time_index.path, self.base_offset,
            max_index_bytes=self.max_index_bytes, next_offset=next_offset, handles=self._handles)
        # Kafka reads maxTimestampSoFar from the time index's last entry: when
        # the segment became inactive its final (max) entry was appended.
        timestamp, offset = self.time_index.last_entry
        first_batch_timestamp = self.rolling_based_timestamp
        if first_batch_timestamp is not None and timestamp < first_batch_timestamp:
            # A rolled segment's time index ends with its max timestamp, which
            # is at least the first batch's: an emptied or cut file is caught here.
            raise CorruptFileError(
                self.time_index.path,
                f"last entry timestamp {timestamp} is below the first batch's max timestamp {first_batch_timestamp}")
        self.max_timestamp_so_far = timestamp
        self.offset_of_max_timestamp_so_far = offset
        self._bytes_since_last_index_entry = self.size - self.index.last_entry[1]

    def _load_log(self, fd: int) -> int:
        """:meth:`load`'s header walk of the ``.log``: its next offset, after checking the last index entry."""
        last_offset, position = self.index.last_entry
        next_offset = self.base_offset
        if self.size > 0:
            first = self._peek(fd, 0)
            if first is None:
                raise CorruptFileError(self.log_path, "first batch header is unreadable")
            self.rolling_based_timestamp = first[4] if first[4] >= 0 else None
            if len(self.index):
                header = self._peek(fd, position)
                if header is None or header[2] != last_offset:
                    raise CorruptFileError(
                        self.index.path,
                        f"last entry (offset {last_offset}, position {position}) does not match the batch there")
            next_offset = first[0]
            while position < self.size:
                header = self._peek(fd, position)
                if header is None or position + header[1] > self.size:
                    raise CorruptFileError(self.log_path, f"incomplete batch at byte {position}")
                next_offset = header[2] + 1
                position += header[1]
        return next_offset

    def recover(self, *, min_valid_offset: int) -> RecoveryResult:
        """Scan the whole file (sizes, magic, CRC, offsets), rebuild both indexes, cut any bad tail.

        ``min_valid_offset`` is the recovery point: if the valid prefix ends
        before it, flushed data is damaged and this raises CorruptRecordError
        naming the file and byte position, changing nothing.
        """
        valid_bytes = 0
        reason: str | None = None
        infos: list[BatchInfo] = []
        with self._mapped() as view:
            if view is not None:
                scan = bh.scan_valid_prefix(view, 0, check_crc=True)
                valid_bytes = scan.valid_bytes
                reason = scan.error
                if reason is None and valid_bytes < len(view):
                    reason = f"incomplete batch ({len(view) - valid_bytes} trailing bytes)"
                infos = walk_batches(view, 0, valid_bytes)
        # Offsets must be relative to this segment (Kafka's ensureOffsetInRange).
        for n, (base, last, position, _size, _max_ts, _epoch) in enumerate(infos):
            if base < self.base_offset or last - self.base_offset > INT32_MAX:
                reason = (f"batch offsets [{base}, {last}] do not belong to a segment "
                          f"with base offset {self.base_offset}")
                valid_bytes = position
                del infos[n:]
                break
        next_offset = infos[-1][1] + 1 if infos else self.base_offset
        if reason is not None and next_offset < min_valid_offset:
            raise CorruptRecordError(
                f"corrupt batch below the recovery point {min_valid_offset} (valid data ends at offset "
                f"{next_offset}): {reason}", path=self.log_path, position=valid_bytes)
        truncated = self.size - valid_bytes
        if truncated:
            with self._file.pinned() as fd:
                os.ftruncate(fd, valid_bytes)
            self._synced = False
            self.size = valid_bytes
        self._rebuild_state(infos)
        return RecoveryResult(valid_bytes=valid_bytes, truncated_bytes=truncated, next_offset=next_offset,
                              reason=reason)

    def _rebuild_state(self, infos: Sequence[BatchInfo]) -> None:
        """Recompute indexes and timestamps from a header walk (Kafka's LogSegment.recover)."""
        offset_entries: list[tuple[int, int]] = []
        time_entries: list[tuple[int, int]] = []
        max_ts = NO_TIMESTAMP
        offset_of_max = self.base_offset
        since = 0
        for _base, last, position, size, batch_max_ts, _epoch in infos:
            if batch_max_ts > max_ts:
                max_ts = batch_max_ts
                offset_of_max = last
            if (since > self.index_interval_bytes and len(offset_entries) < self.index.max_entries
                    and len(time_entries) < self.time_index.max_entries):
                offset_entries.append((last, position))
                if max_ts >= 0 and (not time_entries or max_ts > time_entries[-1][0]):
                    time_entries.append((max_ts, offset_of_max))
                since = 0
            since += size
        self.index.reset(offset_entries)
        self.time_index.reset(time_entries)
        self.max_timestamp_so_far = max_ts
        self.offset_of_max_timestamp_so_far = offset_of_max
        # End with the (max timestamp, offset) entry, as a segment that became
        # inactive has: once this segment is trusted on a later open, its max
        # timestamp is read back from the time index's last entry.
        self.on_become_inactive()
        self._bytes_since_last_index_entry = since
        self.next_offset = infos[-1][1] + 1 if infos else self.base_offset
        self.rolling_based_timestamp = infos[0][4] if infos and infos[0][4] >= 0 else None

    @contextlib.contextmanager
    def _mapped(self) -> Iterator[memoryview | None]:
        """A read-only view of the whole ``.log`` file (None when it is empty)."""
        if self.size == 0:
            yield None
            return
        with self._file.pinned() as fd, mmap.mmap(fd, self.size, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                yield view
            finally:
                view.release()

    # ------------------------------------------------------------------ state

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    @property
    def largest_timestamp(self) -> int:
        """Kafka's ``largestTimestamp``: newest batch timestamp, else the file's mtime (ms)."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return os.stat(self.log_path).st_mtime_ns // 1_000_000

    def should_roll(self, *, messages_size: int, max_timestamp_in_messages: int, last_offset: int,
                    segment_bytes: int, segment_ms: int, now_ms: int) -> bool:
        """Kafka's ``LogSegment.shouldRoll``: size, age, full index, or relative-offset overflow."""
        if self.size == 0:
            return False
        if self.size > segment_bytes - messages_size:
            return True
        if self.rolling_based_timestamp is not None:
            # Time-based rolling compares record timestamps when the segment
            # has them (LogSegment.timeWaitedForRoll), else wall time since creation.
            waited_ms = max_timestamp_in_messages - self.rolling_based_timestamp
        else:
            waited_ms = now_ms - self.created_ms
        if waited_ms > segment_ms:
            return True
        if self.index.is_full or self.time_index.is_full:
            return True
        return last_offset - self.base_offset > INT32_MAX

    # ------------------------------------------------------------------ append

    def append(self, view: memoryview, infos: Sequence[BatchInfo]) -> None:
        """Write whole, validated batches at the end of the file and index them (follower appends).

        ``infos`` are the buffer's batches as :func:`walk_batches` returns them.
        One ``pwrite`` loop for the bytes, one write per index file.
        """
        if not infos:
            return
        self._check_append(infos[0][0], infos[-1][1])
        start = self.size
        try:
            self.write_at(view, start)
        except BaseException:
            self.discard_uncommitted()
            raise
        self._index_batches(infos, start)
        self._commit(len(view), infos[-1][1] + 1, infos[0][4])

    def index_cursor(self) -> bh.IndexCursor:
        """The index state a leader append plans its entries from (:func:`batch_header.stamp_range`)."""
        return bh.IndexCursor(
            base_offset=self.base_offset, position=self.size, interval_bytes=self.index_interval_bytes,
            bytes_since_entry=self._bytes_since_last_index_entry, max_timestamp=self.max_timestamp_so_far,
            offset_of_max_timestamp=self.offset_of_max_timestamp_so_far,
            last_indexed_timestamp=self.time_index.last_entry[0])

    def write_at(self, view: memoryview, position: int) -> None:
        """``pwrite`` bytes at ``position`` (at or past the end) without committing them.

        Until :meth:`commit_stamped` (or :meth:`append`) the bytes are not part
        of the segment: reads stop at ``size`` and :meth:`discard_uncommitted`
        cuts them off. pwrite at our own size, not the fd's file position:
        after a truncation the position would still point past the new end.
        """
        remaining = view
        at = position
        fd = self._file.acquire()
        try:
            while remaining:
                written = os.pwrite(fd, remaining, at)
                remaining = remaining[written:]
                at += written
        finally:
            self._file.release()
        self._synced = False

    def write_pieces_at(self, pieces: Sequence[bytes | memoryview], position: int) -> None:
        """:meth:`write_at` for a buffer given as pieces (:func:`batch_header.stamped_pieces`): ``pwritev``."""
        at = position
        fd = self._file.acquire()
        try:
            for first in range(0, len(pieces), _IOV_MAX):
                group = pieces[first:first + _IOV_MAX]
                written = os.pwritev(fd, group, at)
                expected = sum(len(piece) for piece in group)
                if written < expected:
                    # A short write (rare for regular files): finish piece by piece.
                    self.write_at(memoryview(b"".join(group))[written:], at + written)
                at += expected
        finally:
            self._file.release()
        self._synced = False

    def discard_uncommitted(self) -> None:
        """Cut the file back to ``size``: undo :meth:`write_at` of an append that failed."""
        with self._file.pinned() as fd:
            os.ftruncate(fd, self.size)

    def commit_stamped(self, view: memoryview, stamped: bh.StampedRange) -> None:
        """Make ``view``, written by :meth:`write_at` at ``size``, part of the segment, with its index entries.

        ``stamped`` is the :func:`batch_header.stamp_range` result for all of
        ``view``. Its planned index entries are used when it was planned from
        this segment's current :meth:`index_cursor` and both indexes have room;
        otherwise (a roll in between, a full index, or a caller that planned
        nothing) they are recomputed from a header walk.
        """
        self._check_append(stamped.first_offset, stamped.next_offset - 1)
        planned = len(stamped.index_offsets)
        room = min(self.index.max_entries - len(self.index), self.time_index.max_entries - len(self.time_index))
        if stamped.start_cursor != self.index_cursor() or planned > room:
            infos = walk_batches(view)
            if stamped.stamps:
                # view is the caller's read-only buffer: its headers still carry
                # the producer's offsets, the stamps carry the assigned ones.
                infos = [(offset, offset + last - base, position, size, max_ts, epoch)
                         for (base, last, position, size, max_ts, epoch), (_, offset, _) in
                         zip(infos, stamped.stamps, strict=True)]
            self._index_batches(infos, self.size)
        else:
            self.index.append_all(stamped.index_offsets, stamped.index_positions)
            self.index.write_pending()
            if stamped.time_index_timestamps:
                self.time_index.append_all(stamped.time_index_timestamps, stamped.time_index_offsets)
                self.time_index.write_pending()
            cursor = stamped.cursor
            self._bytes_since_last_index_entry = cursor.bytes_since_entry
            self.max_timestamp_so_far = cursor.max_timestamp
            self.offset_of_max_timestamp_so_far = cursor.offset_of_max_timestamp
        self._commit(len(view), stamped.next_offset, stamped.first_batch_max_timestamp)

    def _check_append(self, first_offset: int, last_offset: int) -> None:
        if first_offset < self.next_offset or last_offset - self.base_offset > INT32_MAX:
            raise InvariantViolation(
                f"{self.log_path}: append of offsets [{first_offset}, {last_offset}] to a segment "
                f"with base {self.base_offset} and next offset {self.next_offset}")

    def _commit(self, length: int, next_offset: int, first_batch_max_timestamp: int) -> None:
        if self.size == 0:
            self.rolling_based_timestamp = first_batch_max_timestamp if first_batch_max_timestamp >= 0 else None
        self.size += length
        self.next_offset = next_offset

    def _index_batches(self, infos: Sequence[BatchInfo], start: int) -> None:
        """Index entries for batches written at ``start`` (the walk that :func:`batch_header.stamp_range` plans)."""
        since = self._bytes_since_last_index_entry
        interval = self.index_interval_bytes
        max_ts = self.max_timestamp_so_far
        offset_of_max = self.offset_of_max_timestamp_so_far
        # Room left in the indexes: a full index stops indexing (lookups then
        # scan a little further) and makes the next append roll.
        room = min(self.index.max_entries - len(self.index), self.time_index.max_entries - len(self.time_index))
        base_offset = self.base_offset
        index_offsets: array.array[int] = array.array("i")
        index_positions: array.array[int] = array.array("i")
        time_stamps: list[int] = []
        time_offsets: list[int] = []
        last_indexed_ts = self.time_index.last_entry[0]
        for _base, last, position, size, batch_max_ts, _epoch in infos:
            if batch_max_ts > max_ts:
                max_ts = batch_max_ts
                offset_of_max = last
            # Kafka indexes a batch once more than index.interval.bytes were
            # appended since the last entry; the entry maps the batch's last
            # offset to its start position, and the time index gets the max
            # timestamp so far if it grew.
            if since > interval and room > 0:
                index_offsets.append(last - base_offset)
                index_positions.append(start + position)
                if max_ts > last_indexed_ts:
                    time_stamps.append(max_ts)
                    time_offsets.append(offset_of_max)
                    last_indexed_ts = max_ts
                room -= 1
                since = 0
            since += size
        self.index.append_all(index_offsets, index_positions)
        self.time_index.append_all(time_stamps, time_offsets)
        self.index.write_pending()
        self.time_index.write_pending()
        self._bytes_since_last_index_entry = since
        self.max_timestamp_so_far = max_ts
        self.offset_of_max_timestamp_so_far = offset_of_max

    # ------------------------------------------------------------------ reading

    def _peek(self, fd: int, position: int) -> tuple[int, int, int, int, int] | None:
        """(base offset, size in bytes, last offset, leader epoch, max timestamp) of the batch at position."""
        data = os.pread(fd, _PEEK_SIZE, position)
        if len(data) < _PEEK_SIZE:
            return None
        base, length, epoch, _magic, _crc, _attrs, delta, _base_ts, max_ts = bh.HEADER_PREFIX.unpack(data)
        if length < bh.HEADER_SIZE - bh.LOG_OVERHEAD:
            raise CorruptRecordError(f"impossible batch length {length}", path=self.log_path, position=position)
        return base, length + bh.LOG_OVERHEAD, base + delta, epoch, max_ts

    def translate_offset(self, offset: int, start_position: int = 0) -> tuple[int, int] | None:
        """(position, base offset) of the first batch whose last offset is >= offset, or None.

        Uses the offset index to jump close, then reads batch headers forward
        (Kafka's ``LogSegment.translateOffset`` + ``FileRecords.searchForOffsetWithSize``).
        """
        fd = self._file.acquire()
        try:
            return self._translate_offset(fd, offset, start_position)
        finally:
            self._file.release()

    def _translate_offset(self, fd: int, offset: int, start_position: int = 0) -> tuple[int, int] | None:
        if offset == self._read_hint_offset and self._read_hint_position >= start_position:
            if self._read_hint_position < self.size:
                return self._read_hint_position, offset
            return None
        _, position = self.index.lookup(offset)
        position = max(position, start_position)
        while position < self.size:
            header = self._peek(fd, position)
            if header is None:
                break
            if header[2] >= offset:
                return position, header[0]
            position += header[1]
        return None

    def read(self, start_offset: int, max_size: int, *, max_offset: int | None,
             min_one_message: bool) -> SegmentRead | None:
        """Whole batches from the one holding ``start_offset``, at most ``max_size`` bytes.

        Returns None when the segment holds nothing at or after
        ``start_offset``. Batches whose last offset is >= ``max_offset`` are
        excluded. With ``min_one_message`` a first batch larger than
        ``max_size`` is returned whole (Kafka's KIP-74 semantics), so a
        consumer always makes progress.
        """
        fd = self._file.acquire()
        try:
            return self._read(fd, start_offset, max_size, max_offset=max_offset, min_one_message=min_one_message)
        finally:
            self._file.release()

    def _read(self, fd: int, start_offset: int, max_size: int, *, max_offset: int | None,
              min_one_message: bool) -> SegmentRead | None:
        found = self._translate_offset(fd, start_offset)
        if found is None:
            return None
        start, first_base = found
        limit_position = self.size
        if max_offset is not None and max_offset < self.next_offset:
            bound = self._translate_offset(fd, max_offset, start)
            if bound is not None:
                limit_position = bound[0]
        if limit_position <= start:
            return SegmentRead(position=start, first_offset=first_base, records=b"", next_offset=first_base)
        end_limit = min(limit_position, start + max_size)
        # The index names batch starts; begin the boundary search at the
        # greatest indexed batch that still fits, then walk a few headers.
        _, indexed = self.index.lookup_by_position(end_limit)
        end = max(start, indexed)
        next_offset: int | None = None
        while end < end_limit:
            header = self._peek(fd, end)
            if header is None:
                break
            if end + header[1] > end_limit:
                next_offset = header[0]
                self._read_hint_offset, self._read_hint_position = next_offset, end
                break
            end += header[1]
            next_offset = header[2] + 1
        if end == start:
            if not min_one_message:
                return SegmentRead(position=start, first_offset=first_base, records=b"", next_offset=first_base)
            header = self._peek(fd, start)
            if header is None:
                raise CorruptRecordError("unreadable batch header", path=self.log_path, position=start)
            end = start + header[1]
            next_offset = header[2] + 1
        if next_offset is None:
            # The walk started exactly at the boundary: the next batch (or the
            # segment end) says where the returned bytes stop in offset terms.
            header = self._peek(fd, end) if end < self.size else None
            next_offset = header[0] if header is not None else self.next_offset
            self._read_hint_offset, self._read_hint_position = next_offset, end
        data = os.pread(fd, end - start, start)
        if len(data) != end - start:
            raise CorruptRecordError(
                f"short read: wanted {end - start} bytes, got {len(data)}", path=self.log_path, position=start)
        return SegmentRead(position=start, first_offset=first_base, records=data, next_offset=next_offset)

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp`` at/after ``starting_offset``.

        The time index narrows the scan; the matching batch is the first one
        whose max timestamp reaches the target, and only that batch is decoded
        to find the record (ListOffsets is not on the produce/fetch path).
        """
        _, indexed_offset = self.time_index.lookup(timestamp)
        _, position = self.index.lookup(max(indexed_offset, starting_offset))
        with self._file.pinned() as fd:
            return self._scan_for_timestamp(fd, position, timestamp, starting_offset)

    def _scan_for_timestamp(self, fd: int, position: int, timestamp: int,
                            starting_offset: int) -> tuple[int, int] | None:
        while position < self.size:
            header = self._peek(fd, position)
            if header is None:
                break
            _base, size, last, _epoch, max_ts = header
            if max_ts >= timestamp and last >= starting_offset:
                data = os.pread(fd, size, position)
                for batch in record_batch.decode_batches(data):
                    for record in batch.records:
                        if record.timestamp_ms >= timestamp and record.offset >= starting_offset:
                            return record.offset, record.timestamp_ms
            position += size
        return None

    # ------------------------------------------------------------------ changes

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= offset; returns the bytes removed.

        Like Kafka's ``LogSegment.truncateTo`` the cut is at the start of the
        batch holding ``offset``: batches are never split, so an offset inside a
        batch removes that whole batch and ``next_offset`` becomes its base.
        """
        with self._file.pinned() as fd:
            found = self._translate_offset(fd, offset)
            if found is None:
                return 0
            position, base = found
            offset = min(offset, base)
            self._read_hint_offset = -1
            # Indexes first: a crash in between leaves a longer log, which load() accepts.
            self.index.truncate_to(offset)
            self.time_index.truncate_to(offset)
            os.ftruncate(fd, position)
        removed = self.size - position
        self._synced = False
        self.size = position
        # Recompute what the cut may have removed: the max timestamp (batches
        # after the last time index entry are walked) and the index cursor.
        ts, ts_offset = self.time_index.last_entry
        max_ts, offset_of_max = ts, ts_offset
        _, walk_from = self.index.lookup(ts_offset) if ts >= 0 else (0, 0)
        with self._mapped() as view:
            infos = walk_batches(view, walk_from) if view is not None else []
        for _base, last, _position, _size, batch_max_ts, _epoch in infos:
            if batch_max_ts > max_ts:
                max_ts, offset_of_max = batch_max_ts, last
        self.max_timestamp_so_far = max_ts
        self.offset_of_max_timestamp_so_far = offset_of_max if max_ts >= 0 else self.base_offset
        self.next_offset = offset if position > 0 else self.base_offset
        if position == 0:
            self.rolling_based_timestamp = None
        self._bytes_since_last_index_entry = self.size - self.index.last_entry[1]
        return removed

    def on_become_inactive(self) -> None:
        """The final time index entry (Kafka's onBecomeInactiveSegment): records the segment's max timestamp."""
        self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far,
                                     skip_full_check=True)
        self.time_index.write_pending()

    def flush(self) -> None:
        """fsync the ``.log`` and both indexes."""
        if not self._synced:
            # Any descriptor will do: the dirty pages belong to the file, not to
            # a descriptor the handle cache may have closed since the writes.
            with self._file.pinned() as fd:
                os.fsync(fd)
            self._synced = True
        self.index.flush()
        self.time_index.flush()

    def close(self) -> None:
        """Write the final time index entry and close every file (no fsync: the Log flushes first)."""
        if self._closed:
            return
        self._closed = True
        self.on_become_inactive()
        self.index.close()
        self.time_index.close()
        self._file.close()

    def close_handles(self) -> None:
        """Close the descriptors (crash simulation and error paths)."""
        if self._closed:
            return
        self._closed = True
        self.index.close()
        self.time_index.close()
        self._file.close()

    def delete(self) -> None:
        """Rename every file to ``.deleted`` then remove it (a crash in between is cleaned on open)."""
        self.close_handles()
        for path in (self.log_path, self.index.path, self.time_index.path):
            doomed = path + DELETED_SUFFIX
            try:
                os.replace(path, doomed)
            except FileNotFoundError:
                continue
            os.unlink(doomed)
