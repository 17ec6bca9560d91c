"""Kafka's sparse per-segment indexes: ``.index`` (offset -> position) and ``.timeindex``.

Owned here: the two index file formats, byte for byte as Kafka writes them, an
in-memory copy of their entries for bisecting, appends, truncation and the
sanity check that decides whether a file must be rebuilt.

* ``.index`` (OffsetIndex): 8-byte entries, big-endian ``relativeOffset int32``
  + ``position int32``. An entry (O, P) says: the batch whose *last* offset is
  O starts at byte P of the ``.log`` file. A lookup for offset T returns the
  greatest entry with O <= T; the caller then scans batch headers forward from P.
* ``.timeindex`` (TimeIndex): 12-byte entries, ``timestamp int64`` +
  ``relativeOffset int32``. An entry (T, O) says: no batch before offset O has a
  timestamp above T. Timestamps strictly increase from entry to entry.

Callers: :mod:`kraftlog.storage.segment` only. Kafka memory-maps preallocated
index files; we keep the entries in ``array`` objects and append them to the
file with one ``os.write`` per log append, so a file never has a zero-filled
tail. The descriptor is opened on first write and may be closed by the
:class:`~kraftlog.storage.file_handles.FileHandleCache` between writes (issue 16).
A torn last entry (file size not a multiple of the entry size) or any
other inconsistency is reported by :meth:`OffsetIndex.load` /
:meth:`TimeIndex.load` as :class:`kraftlog.errors.CorruptFileError`, and the
segment rebuilds the index from the log.

This module must not read batches or decide recovery: it only stores entries.
"""

from __future__ import annotations

import array
import bisect
import contextlib
import os
import struct
import sys
from collections.abc import Iterable, Sequence

from kraftlog.errors import CorruptFileError, InvariantViolation
from kraftlog.storage import file_handles

INT32_MAX = 2**31 - 1
OFFSET_ENTRY_SIZE = 8
TIME_ENTRY_SIZE = 12
_LITTLE_ENDIAN = sys.byteorder == "little"


def _read_file(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _to_big_endian(values: array.array[int]) -> bytes:
    if _LITTLE_ENDIAN:
        values = array.array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def _from_big_endian(typecode: str, data: bytes) -> array.array[int]:
    values = array.array(typecode)
    values.frombytes(data)
    if _LITTLE_ENDIAN:
        values.byteswap()
    return values


class _IndexFile:
    """The append-only file behind an index: a lazily opened descriptor, pending bytes written per append."""

    __slots__ = ("_file", "_pending", "_synced")

    def __init__(self, path: str, handles: file_handles.FileHandleCache) -> None:
        self._file = file_handles.LazyFile(path, flags=os.O_WRONLY | os.O_APPEND, cache=handles)
        self._pending = bytearray()
        self._synced = True

    @property
    def path(self) -> str:
        return self._file.path

    def stage(self, data: bytes | array.array[int]) -> None:
        self._pending += data

    def write_pending(self) -> None:
        if not self._pending:
            return
        pending = self._pending
        fd = self._file.acquire()
        try:
            written = os.write(fd, pending)
            while written < len(pending):
                written += os.write(fd, memoryview(pending)[written:])
        finally:
            self._file.release()
        pending.clear()
        self._synced = False

    def rewrite(self, data: bytes) -> None:
        """Replace the whole file, creating it if need be (used after truncation and for rebuilds)."""
        self._pending.clear()
        self._file.create()
        fd = self._file.acquire()
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            self._file.release()
        self._synced = False

    def truncate(self, size: int) -> None:
        self.write_pending()
        with self._file.pinned() as fd:
            os.ftruncate(fd, size)
        self._synced = False

    def flush(self) -> None:
        self.write_pending()
        if not self._synced:
            # Any descriptor will do: the dirty pages belong to the file.
            with self._file.pinned() as fd:
                os.fsync(fd)
        self._synced = True

    def close(self) -> None:
        self.write_pending()
        self._file.close()

    def rename(self, new_path: str) -> None:
        self._file.rename(new_path)

    def delete(self) -> None:
        self.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class OffsetIndex:
    """The ``.index`` file of one segment: relative offset -> physical position, sparse.

    Invariant: relative offsets and positions both strictly increase.
    """

    __slots__ = ("_file", "_offsets", "_positions", "base_offset", "max_entries")

    def __init__(self, path: str, base_offset: int, *, max_index_bytes: int,
                 handles: file_handles.FileHandleCache = file_handles.UNBOUNDED) -> None:
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // OFFSET_ENTRY_SIZE)
        self._file = _IndexFile(path, handles)
        self._offsets: array.array[int] = array.array("i")
        self._positions: array.array[int] = array.array("i")

    @property
    def path(self) -> str:
        return self._file.path

    @classmethod
    def load(cls, path: str, base_offset: int, *, max_index_bytes: int, log_size: int,
             handles: file_handles.FileHandleCache = file_handles.UNBOUNDED) -> OffsetIndex:
        """Read an existing ``.index`` and sanity-check it against the log file's size.

        Raises CorruptFileError (naming the file and entry) when the file is
        missing, torn, out of order or points past the end of the log.
        """
        index = cls(path, base_offset, max_index_bytes=max_index_bytes, handles=handles)
        data = _read_file(path)
        if data is None:
            raise CorruptFileError(path, "offset index file is missing")
        if len(data) % OFFSET_ENTRY_SIZE:
            raise CorruptFileError(
                path, f"size {len(data)} is not a multiple of the entry size {OFFSET_ENTRY_SIZE}"
            )
        pairs = _from_big_endian("i", data)
        index._offsets = pairs[0::2]
        index._positions = pairs[1::2]
        index._check(log_size)
        return index

    def _check(self, log_size: int) -> None:
        previous_offset = -1
        previous_position = -1
        for n, (rel, pos) in enumerate(zip(self._offsets, self._positions, strict=True)):
            if rel <= previous_offset or pos <= previous_position or rel < 0 or pos < 0:
                raise CorruptFileError(
                    self.path,
                    f"entry {n} (relative offset {rel}, position {pos}) does not follow "
                    f"(relative offset {previous_offset}, position {previous_position})",
                )
            previous_offset, previous_position = rel, pos
        if previous_position >= log_size:
            raise CorruptFileError(
                self.path, f"last entry points at position {previous_position} but the log has {log_size} bytes"
            )

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def is_full(self) -> bool:
        return len(self._offsets) >= self.max_entries

    @property
    def last_entry(self) -> tuple[int, int]:
        """(absolute offset, position) of the last entry, or (base offset, 0) when empty."""
        if not self._offsets:
            return self.base_offset, 0
        return self.base_offset + self._offsets[-1], self._positions[-1]

    def entries(self) -> list[tuple[int, int]]:
        """All entries as (absolute offset, position); for tests and tools."""
        return [(self.base_offset + r, p) for r, p in zip(self._offsets, self._positions, strict=True)]

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """Greatest entry with offset <= target_offset, as (offset, position); (base, 0) if none."""
        rel = target_offset - self.base_offset
        if rel < 0:
            return self.base_offset, 0
        i = bisect.bisect_right(self._offsets, min(rel, INT32_MAX)) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._offsets[i], self._positions[i]

    def lookup_by_position(self, position: int) -> tuple[int, int]:
        """Greatest entry with position <= position, as (offset, position); (base, 0) if none."""
        i = bisect.bisect_right(self._positions, min(position, INT32_MAX)) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._offsets[i], self._positions[i]

    def append_all(self, relative_offsets: Sequence[int], positions: Sequence[int]) -> None:
        """Stage many entries at once (the append hot path: C-level array work, no per-entry Python).

        Both sequences must be strictly increasing and follow the last entry.
        """
        count = len(relative_offsets)
        if not count:
            return
        if len(positions) != count:
            raise InvariantViolation(f"{self.path}: {count} offsets but {len(positions)} positions")
        if self._offsets and (relative_offsets[0] <= self._offsets[-1] or positions[0] <= self._positions[-1]):
            raise InvariantViolation(
                f"{self.path}: index entry (offset {self.base_offset + relative_offsets[0]}, position "
                f"{positions[0]}) does not follow {self.last_entry}")
        if len(self._offsets) + count > self.max_entries:
            raise InvariantViolation(f"{self.path}: index would exceed {self.max_entries} entries")
        self._offsets.extend(relative_offsets)
        self._positions.extend(positions)
        pairs = array.array("i", bytes(OFFSET_ENTRY_SIZE * count))
        pairs[0::2] = self._offsets[-count:]
        pairs[1::2] = self._positions[-count:]
        if _LITTLE_ENDIAN:
            pairs.byteswap()
        self._file.stage(pairs)

    def write_pending(self) -> None:
        self._file.write_pending()

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= offset (Kafka's OffsetIndex.truncateTo)."""
        keep = bisect.bisect_left(self._offsets, offset - self.base_offset) if offset > self.base_offset else 0
        if keep == len(self._offsets):
            return
        del self._offsets[keep:]
        del self._positions[keep:]
        self._file.truncate(keep * OFFSET_ENTRY_SIZE)

    def reset(self, entries: Iterable[tuple[int, int]] = ()) -> None:
        """Replace all entries (index rebuild) and rewrite the file."""
        self._offsets = array.array("i")
        self._positions = array.array("i")
        pairs = array.array("i")
        for offset, position in entries:
            rel = offset - self.base_offset
            self._offsets.append(rel)
            self._positions.append(position)
            pairs.append(rel)
            pairs.append(position)
        self._file.rewrite(_to_big_endian(pairs))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def rename(self, new_path: str) -> None:
        self._file.rename(new_path)

    def delete(self) -> None:
        self._file.delete()


class TimeIndex:
    """The ``.timeindex`` file of one segment: timestamp -> offset, sparse.

    Invariant: timestamps strictly increase, offsets never decrease.
    """

    __slots__ = ("_file", "_offsets", "_timestamps", "base_offset", "max_entries")

    def __init__(self, path: str, base_offset: int, *, max_index_bytes: int,
                 handles: file_handles.FileHandleCache = file_handles.UNBOUNDED) -> None:
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // TIME_ENTRY_SIZE)
        self._file = _IndexFile(path, handles)
        self._timestamps: array.array[int] = array.array("q")
        self._offsets: array.array[int] = array.array("i")

    @property
    def path(self) -> str:
        return self._file.path

    @classmethod
    def load(cls, path: str, base_offset: int, *, max_index_bytes: int, next_offset: int,
             handles: file_handles.FileHandleCache = file_handles.UNBOUNDED) -> TimeIndex:
        """Read an existing ``.timeindex``; every entry must name an offset in [base, next_offset).

        Raises CorruptFileError naming the file and entry otherwise.
        """
        index = cls(path, base_offset, max_index_bytes=max_index_bytes, handles=handles)
        data = _read_file(path)
        if data is None:
            raise CorruptFileError(path, "time index file is missing")
        if len(data) % TIME_ENTRY_SIZE:
            raise CorruptFileError(path, f"size {len(data)} is not a multiple of the entry size {TIME_ENTRY_SIZE}")
        for timestamp, rel in struct.iter_unpack(">qi", data):
            index._timestamps.append(timestamp)
            index._offsets.append(rel)
        previous_ts: int | None = None
        previous_rel = -1
        for n, (ts, rel) in enumerate(zip(index._timestamps, index._offsets, strict=True)):
            if (previous_ts is not None and ts <= previous_ts) or rel < previous_rel or rel < 0:
                raise CorruptFileError(
                    path, f"entry {n} (timestamp {ts}, relative offset {rel}) is out of order"
                )
            if base_offset + rel >= next_offset:
                raise CorruptFileError(
                    path, f"entry {n} names offset {base_offset + rel} but the segment ends before {next_offset}"
                )
            previous_ts, previous_rel = ts, rel
        return index

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def is_full(self) -> bool:
        return len(self._offsets) >= self.max_entries

    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, absolute offset) of the last entry, or (-1, base offset) when empty."""
        if not self._offsets:
            return -1, self.base_offset
        return self._timestamps[-1], self.base_offset + self._offsets[-1]

    def entries(self) -> list[tuple[int, int]]:
        """All entries as (timestamp, absolute offset); for tests and tools."""
        return [(t, self.base_offset + r) for t, r in zip(self._timestamps, self._offsets, strict=True)]

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """Greatest entry with timestamp <= target, as (timestamp, offset); (-1, base) if none."""
        i = bisect.bisect_right(self._timestamps, target_timestamp) - 1
        if i < 0:
            return -1, self.base_offset
        return self._timestamps[i], self.base_offset + self._offsets[i]

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> None:
        """Stage (timestamp, offset) if timestamp is above the last entry's (Kafka's maybeAppend).

        ``skip_full_check`` lets the final entry written when a segment becomes
        inactive go in even if the index is full, as Kafka does.
        """
        if self._timestamps and timestamp <= self._timestamps[-1]:
            return
        if timestamp < 0:
            return
        rel = offset - self.base_offset
        if self._offsets and rel < self._offsets[-1]:
            raise InvariantViolation(
                f"{self.path}: time index entry (timestamp {timestamp}, offset {offset}) goes back from "
                f"{self.last_entry}"
            )
        if not skip_full_check and len(self._offsets) >= self.max_entries:
            raise InvariantViolation(f"{self.path}: time index is full ({self.max_entries} entries)")
        self._timestamps.append(timestamp)
        self._offsets.append(rel)
        self._file.stage(timestamp.to_bytes(8, "big", signed=True) + rel.to_bytes(4, "big", signed=True))

    def append_all(self, timestamps: Sequence[int], offsets: Sequence[int]) -> None:
        """Stage many (timestamp, absolute offset) entries; timestamps must strictly increase."""
        for timestamp, offset in zip(timestamps, offsets, strict=True):
            self.maybe_append(timestamp, offset)

    def write_pending(self) -> None:
        self._file.write_pending()

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= offset (Kafka's TimeIndex.truncateTo)."""
        keep = bisect.bisect_left(self._offsets, offset - self.base_offset) if offset > self.base_offset else 0
        if keep == len(self._offsets):
            return
        del self._offsets[keep:]
        del self._timestamps[keep:]
        self._file.truncate(keep * TIME_ENTRY_SIZE)

    def reset(self, entries: Iterable[tuple[int, int]] = ()) -> None:
        """Replace all entries (index rebuild) and rewrite the file."""
        self._timestamps = array.array("q")
        self._offsets = array.array("i")
        data = bytearray()
        for timestamp, offset in entries:
            rel = offset - self.base_offset
            self._timestamps.append(timestamp)
            self._offsets.append(rel)
            data += timestamp.to_bytes(8, "big", signed=True) + rel.to_bytes(4, "big", signed=True)
        self._file.rewrite(bytes(data))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def rename(self, new_path: str) -> None:
        self._file.rename(new_path)

    def delete(self) -> None:
        self._file.delete()
