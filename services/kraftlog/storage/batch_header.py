"""Kafka RecordBatch v2 headers: the layout, an in-place view, and the broker's header-only paths.

Owns the batch header format (magic 2, KIP-98; Kafka's message-format docs and
``DefaultRecordBatch``), big-endian::

    offset  field                 type
         0  baseOffset            int64   \\ LOG_OVERHEAD (12 bytes)
         8  batchLength           int32   /  bytes after this field
        12  partitionLeaderEpoch  int32     (KIP-101; outside the CRC so a leader can stamp it)
        16  magic                 int8 = 2
        17  crc                   uint32    CRC-32C of bytes 21..end of batch
        21  attributes            int16     bits 0-2 codec, 3 timestamp type, 4 transactional,
                                            5 control, 6 delete horizon (KIP-534)
        23  lastOffsetDelta       int32
        27  baseTimestamp         int64
        35  maxTimestamp          int64
        43  producerId            int64
        51  producerEpoch         int16
        53  baseSequence          int32
        57  recordCount           int32
        61  records...                      (one compressed block when the codec is not NONE)

This is the one place that layout is written down: every other module reads or writes a
header through :data:`HEADER` (or :data:`FRAME` / :data:`HEADER_PREFIX`, its leading
fields), the offsets below, :class:`BatchHeader` or :func:`encode_batch`
(tests/storage/test_batch_header.py fails when a module spells the struct out itself).

Called by brokers and the raft log (the hot path): :class:`BatchHeader`,
:func:`iter_batches`, :func:`scan_valid_prefix` (recovery), :func:`stamp_range` (the
leader append: checks, stamps and index planning in one pass) and :func:`stamp_batches`.
They read and patch the 61-byte header through a ``memoryview`` and check the CRC with
the hardware ``crc32c`` package; their cost is per batch, never per record. Also by the
records codec (:mod:`kraftlog.storage.record_batch`), the log validator, the cleaner,
segments and ``kraftlog log dump``, for the header fields.

It must not look inside the records section: no record parsing, no decompression
(followers, fetches and reads touch only headers). Bad bytes raise
:class:`~kraftlog.errors.CorruptRecordError` naming the byte where the batch starts; no
``IndexError`` or ``struct.error`` escapes. Pure core: no I/O framework, no clock.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import crc32c

from kraftlog.errors import CorruptRecordError, UnsupportedCompressionTypeError
from kraftlog.storage import varint
from kraftlog.storage.compression import CompressionType

MAGIC = 2
LOG_OVERHEAD = 12
"""baseOffset int64 + batchLength int32: the part of a batch that batchLength does not count."""
HEADER_SIZE = 61
"""The full v2 batch header; the records section starts here."""
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
"""The smallest possible batchLength (an empty records section)."""

BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

NO_TIMESTAMP = -1
"""Kafka's RecordBatch.NO_TIMESTAMP: what max_timestamp reports when nothing had a timestamp."""
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

_INT16 = (-(1 << 15), (1 << 15) - 1)
_INT32 = (varint.INT32_MIN, varint.INT32_MAX)
_INT64 = (varint.INT64_MIN, varint.INT64_MAX)

HEADER = struct.Struct(">qiibIhiqqqhii")
"""The whole header, field by field in the order of the table above."""
FRAME = struct.Struct(">qi")
"""baseOffset, batchLength: enough to step to the next batch."""
HEADER_PREFIX = struct.Struct(">qiibIhiqq")
"""The fields up to maxTimestamp: what a segment's walk needs, one unpack per batch."""
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_I8 = struct.Struct(">b")
assert HEADER.size == HEADER_SIZE
_MAX_CODEC_ID = max(CompressionType)


class TimestampType(enum.IntEnum):
    """Attributes bit 3: who set the timestamps (KIP-32)."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1



def as_view(buf: bytes | bytearray | memoryview) -> memoryview:
    """``buf`` as a one-dimensional memoryview of bytes (zero-copy)."""
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    return view


def check_range(field: str, value: int, bounds: tuple[int, int]) -> None:
    """ValueError naming ``field`` unless ``value`` is an int in ``bounds`` (inclusive)."""
    if not isinstance(value, int) or not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"{field}={value!r} is outside [{bounds[0]}, {bounds[1]}]")


def compression_of(attributes: int, position: int) -> CompressionType:
    """The codec of attributes bits 0-2; UnsupportedCompressionTypeError (a CorruptRecordError)
    naming the batch at ``position`` for an id Kafka does not define."""
    codec = attributes & COMPRESSION_CODEC_MASK
    try:
        return CompressionType(codec)
    except ValueError:
        raise UnsupportedCompressionTypeError(
            f"batch at byte {position} has unknown compression codec id {codec} "
            f"(Kafka's codecs are 0-{_MAX_CODEC_ID})",
            position=position,
        ) from None



class BatchHeader:
    """A zero-copy view of one batch's header inside a larger buffer.

    Reads go straight to the buffer (nothing is cached, so the view never goes
    stale). Setters patch the buffer in place and need a writable buffer
    (``bytearray`` or a writable ``memoryview``). The view holds a
    ``memoryview``: while it lives, a ``bytearray`` it looks into cannot be resized.

    Construction only requires the 61 header bytes to be present; the CRC and
    :attr:`view` need the whole batch (``validate()`` checks that).
    """

    __slots__ = ("_buf", "position")

    _buf: memoryview
    position: int

    def __init__(self, buf: bytes | bytearray | memoryview, position: int = 0) -> None:
        view = as_view(buf)
        available = len(view) - position
        if position < 0 or available < HEADER_SIZE:
            raise CorruptRecordError(
                f"truncated batch header at byte {position}: need {HEADER_SIZE} bytes, "
                f"{max(available, 0)} available",
                position=position,
            )
        self._buf = view
        self.position = position

    @classmethod
    def _at(cls, view: memoryview, position: int) -> BatchHeader:
        # For iter_batches, which has already checked that the whole batch is present.
        header = cls.__new__(cls)
        header._buf = view
        header.position = position
        return header

    # -- raw fields -----------------------------------------------------------------------
    @property
    def base_offset(self) -> int:
        value: int = _I64.unpack_from(self._buf, self.position + BASE_OFFSET_OFFSET)[0]
        return value

    @property
    def batch_length(self) -> int:
        value: int = _I32.unpack_from(self._buf, self.position + LENGTH_OFFSET)[0]
        return value

    @property
    def partition_leader_epoch(self) -> int:
        value: int = _I32.unpack_from(self._buf, self.position + PARTITION_LEADER_EPOCH_OFFSET)[0]
        return value

    @property
    def magic(self) -> int:
        value: int = _I8.unpack_from(self._buf, self.position + MAGIC_OFFSET)[0]
        return value

    @property
    def crc(self) -> int:
        value: int = _U32.unpack_from(self._buf, self.position + CRC_OFFSET)[0]
        return value

    @property
    def attributes(self) -> int:
        value: int = _I16.unpack_from(self._buf, self.position + ATTRIBUTES_OFFSET)[0]
        return value

    @property
    def last_offset_delta(self) -> int:
        value: int = _I32.unpack_from(self._buf, self.position + LAST_OFFSET_DELTA_OFFSET)[0]
        return value

    @property
    def base_timestamp(self) -> int:
        value: int = _I64.unpack_from(self._buf, self.position + BASE_TIMESTAMP_OFFSET)[0]
        return value

    @property
    def max_timestamp(self) -> int:
        value: int = _I64.unpack_from(self._buf, self.position + MAX_TIMESTAMP_OFFSET)[0]
        return value

    @property
    def producer_id(self) -> int:
        value: int = _I64.unpack_from(self._buf, self.position + PRODUCER_ID_OFFSET)[0]
        return value

    @property
    def producer_epoch(self) -> int:
        value: int = _I16.unpack_from(self._buf, self.position + PRODUCER_EPOCH_OFFSET)[0]
        return value

    @property
    def base_sequence(self) -> int:
        value: int = _I32.unpack_from(self._buf, self.position + BASE_SEQUENCE_OFFSET)[0]
        return value

    @property
    def record_count(self) -> int:
        value: int = _I32.unpack_from(self._buf, self.position + RECORDS_COUNT_OFFSET)[0]
        return value

    @property
    def buffer(self) -> memoryview:
        """The whole buffer this view looks into (the batch starts at :attr:`position`)."""
        return self._buf

    # -- derived --------------------------------------------------------------------------
    @property
    def compression(self) -> CompressionType:
        """The codec; raises CorruptRecordError for an id outside 0..4."""
        return compression_of(self.attributes, self.position)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        """KIP-534: when set, baseTimestamp is the compaction delete horizon."""
        return bool(self.attributes & DELETE_HORIZON_FLAG_MASK)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def size_in_bytes(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def view(self) -> memoryview:
        """The whole batch's bytes (zero-copy), e.g. to append to a segment.

        Raises CorruptRecordError when the buffer does not hold the whole batch.
        """
        return self._buf[self.position : self._end()]

    @property
    def records_view(self) -> memoryview:
        """The (possibly compressed) records section after the header (zero-copy)."""
        return self._buf[self.position + RECORDS_OFFSET : self._end()]

    # -- checks ---------------------------------------------------------------------------
    def _end(self) -> int:
        length = self.batch_length
        if length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"batch at byte {self.position} has invalid batch length {length} "
                f"(minimum {MIN_BATCH_LENGTH})",
                position=self.position,
            )
        end = self.position + LOG_OVERHEAD + length
        if end > len(self._buf):
            raise CorruptRecordError(
                f"truncated batch at byte {self.position}: {LOG_OVERHEAD + length} bytes declared, "
                f"{len(self._buf) - self.position} available",
                position=self.position,
            )
        return end

    def compute_crc(self) -> int:
        """CRC-32C over attributes..end of batch (hardware ``crc32c``)."""
        end = self._end()
        value: int = crc32c.crc32c(self._buf[self.position + ATTRIBUTES_OFFSET : end])
        return value

    def validate(self) -> None:
        """Check magic, batch length (against the buffer too), codec id and CRC.

        Raises CorruptRecordError naming the batch's byte position and base offset.
        """
        magic = self.magic
        if magic != MAGIC:
            raise CorruptRecordError(
                f"batch at byte {self.position} has unsupported magic {magic} (expected {MAGIC})",
                position=self.position,
            )
        computed = self.compute_crc()
        stored = self.crc
        if computed != stored:
            raise CorruptRecordError(
                f"batch at byte {self.position} (base offset {self.base_offset}) fails its CRC: "
                f"stored 0x{stored:08x}, computed 0x{computed:08x}",
                position=self.position,
            )
        compression_of(self.attributes, self.position)

    def is_valid(self) -> bool:
        """``validate()`` as a bool."""
        try:
            self.validate()
        except CorruptRecordError:
            return False
        return True

    # -- in-place patches -----------------------------------------------------------------
    def _writable(self) -> memoryview:
        if self._buf.readonly:
            raise TypeError("cannot patch a batch header in a read-only buffer; use a bytearray")
        return self._buf

    def set_base_offset(self, offset: int) -> None:
        """Overwrite baseOffset. It is outside the CRC range, so the CRC stays valid."""
        check_range("base_offset", offset, _INT64)
        _I64.pack_into(self._writable(), self.position + BASE_OFFSET_OFFSET, offset)

    def set_partition_leader_epoch(self, epoch: int) -> None:
        """Overwrite partitionLeaderEpoch (KIP-101). Outside the CRC range: no CRC update."""
        check_range("partition_leader_epoch", epoch, _INT32)
        _I32.pack_into(self._writable(), self.position + PARTITION_LEADER_EPOCH_OFFSET, epoch)

    def set_max_timestamp(self, timestamp_type: TimestampType, max_timestamp: int) -> None:
        """Set the timestamp type bit and maxTimestamp, then recompute the CRC.

        How a broker applies ``message.timestamp.type=LogAppendTime`` (KIP-32)
        without decoding records: readers then take every record's timestamp from
        maxTimestamp. Like Kafka's ``DefaultRecordBatch.setMaxTimestamp`` it is a
        no-op when nothing changes. Header-only: the records section is only read
        by the CRC.
        """
        check_range("max_timestamp", max_timestamp, _INT64)
        buf = self._writable()
        attributes = self.attributes
        if timestamp_type is TimestampType.LOG_APPEND_TIME:
            new_attributes = attributes | TIMESTAMP_TYPE_MASK
        else:
            new_attributes = attributes & ~TIMESTAMP_TYPE_MASK
        if new_attributes == attributes and self.max_timestamp == max_timestamp:
            return
        end = self._end()
        _I16.pack_into(buf, self.position + ATTRIBUTES_OFFSET, new_attributes)
        _I64.pack_into(buf, self.position + MAX_TIMESTAMP_OFFSET, max_timestamp)
        crc = crc32c.crc32c(buf[self.position + ATTRIBUTES_OFFSET : end])
        _U32.pack_into(buf, self.position + CRC_OFFSET, crc)

    def __repr__(self) -> str:
        return (
            f"BatchHeader(position={self.position}, base_offset={self.base_offset}, "
            f"last_offset={self.last_offset}, batch_length={self.batch_length}, "
            f"partition_leader_epoch={self.partition_leader_epoch}, magic={self.magic}, "
            f"crc=0x{self.crc:08x}, attributes=0x{self.attributes & 0xFFFF:04x}, "
            f"record_count={self.record_count}, max_timestamp={self.max_timestamp})"
        )


def iter_batches(buf: bytes | bytearray | memoryview, position: int = 0,
                 end: int | None = None) -> Iterator[BatchHeader]:
    """Walk consecutive whole batches from ``position`` to ``end`` (default: the end of
    ``buf``; a part of a larger buffer, e.g. one partition's records in a whole Fetch
    answer, keeps byte positions, and batch decoding slices values straight out of a
    ``bytes`` buffer).

    Stops without error at an incomplete tail (fewer than 12 bytes, or fewer
    than the batch's declared size; also what a garbage huge length looks like).
    Raises CorruptRecordError for a batchLength below the v2 minimum (49) or a
    magic other than 2. Does not check CRCs: call ``validate()`` on each header.
    Mirrors Kafka's ``FileLogInputStream.nextBatch``.
    """
    check_range("position", position, (0, varint.INT64_MAX))
    view = as_view(buf)
    if end is None:
        end = len(view)
    elif not position <= end <= len(view):
        raise ValueError(f"end={end} is outside [{position}, {len(view)}]")
    pos = position
    unpack_frame = FRAME.unpack_from
    while end - pos >= LOG_OVERHEAD:
        length = unpack_frame(view, pos)[1]
        if length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"batch at byte {pos} has invalid batch length {length} "
                f"(minimum {MIN_BATCH_LENGTH})",
                position=pos,
            )
        size = LOG_OVERHEAD + length
        if end - pos < size:
            return
        magic = view[pos + MAGIC_OFFSET]
        if magic != MAGIC:
            raise CorruptRecordError(
                f"batch at byte {pos} has unsupported magic {magic} (expected {MAGIC})",
                position=pos,
            )
        yield BatchHeader._at(view, pos)
        pos += size


@dataclass(frozen=True, slots=True, kw_only=True)
class ScanResult:
    """What :func:`scan_valid_prefix` found.

    ``valid_bytes`` counts from the scan's start position. ``max_timestamp`` is
    NO_TIMESTAMP (-1) when no batch carried one. ``error`` says why the scan
    stopped before the end of the buffer, and is None when every byte was valid.
    """

    valid_bytes: int
    batch_count: int
    first_offset: int | None
    last_offset: int | None
    max_timestamp: int
    record_count: int
    error: str | None


def scan_valid_prefix(
    buf: bytes | bytearray | memoryview, position: int = 0, *, check_crc: bool = True
) -> ScanResult:
    """Measure the longest prefix (from ``position``) made of whole, valid batches.

    The log-recovery primitive (Kafka's ``LogSegment.recover``): a batch is
    valid when its length is at least the v2 minimum and fits in the buffer,
    magic is 2, the CRC matches (unless ``check_crc`` is False), its offsets are
    non-negative with lastOffsetDelta >= 0 and recordCount >= 0, and its
    baseOffset is above the previous batch's last offset. Never raises for bad
    bytes: it reports the first problem in ``error``.
    """
    check_range("position", position, (0, varint.INT64_MAX))
    view = as_view(buf)
    end = len(view)
    start = min(position, end)
    pos = start
    batch_count = 0
    record_count = 0
    first_offset: int | None = None
    last_offset: int | None = None
    max_timestamp = NO_TIMESTAMP
    error: str | None = None
    unpack_header = HEADER.unpack_from
    unpack_frame = FRAME.unpack_from
    while pos < end:
        remaining = end - pos
        if remaining < LOG_OVERHEAD:
            error = f"incomplete batch at byte {pos}: only {remaining} bytes remain"
            break
        length = unpack_frame(view, pos)[1]
        if length < MIN_BATCH_LENGTH:
            error = (
                f"invalid batch length {length} at byte {pos} (minimum {MIN_BATCH_LENGTH})"
            )
            break
        size = LOG_OVERHEAD + length
        if remaining < size:
            error = f"incomplete batch at byte {pos}: {size} bytes declared, {remaining} remain"
            break
        (
            base_offset, _length, _epoch, magic, crc, _attributes, last_offset_delta,
            _base_ts, batch_max_ts, _pid, _pepoch, _seq, count,
        ) = unpack_header(view, pos)
        if magic != MAGIC:
            error = f"batch at byte {pos} has unsupported magic {magic} (expected {MAGIC})"
            break
        if check_crc:
            computed = crc32c.crc32c(view[pos + ATTRIBUTES_OFFSET : pos + size])
            if computed != crc:
                error = (
                    f"batch at byte {pos} (base offset {base_offset}) fails its CRC: "
                    f"stored 0x{crc:08x}, computed 0x{computed:08x}"
                )
                break
        if base_offset < 0 or last_offset_delta < 0 or count < 0:
            error = (
                f"batch at byte {pos} has invalid base offset {base_offset}, "
                f"last offset delta {last_offset_delta} or record count {count}"
            )
            break
        if last_offset is not None and base_offset <= last_offset:
            error = (
                f"batch at byte {pos} has base offset {base_offset}, not above the previous "
                f"batch's last offset {last_offset}"
            )
            break
        if first_offset is None:
            first_offset = base_offset
        last_offset = base_offset + last_offset_delta
        max_timestamp = max(max_timestamp, batch_max_ts)
        record_count += count
        batch_count += 1
        pos += size
    return ScanResult(
        valid_bytes=pos - start,
        batch_count=batch_count,
        first_offset=first_offset,
        last_offset=last_offset,
        max_timestamp=max_timestamp,
        record_count=record_count,
        error=error,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class StampResult:
    """What :func:`stamp_batches` assigned.

    ``offset_of_max_timestamp`` is the *last* offset of the first batch carrying
    ``max_timestamp`` (Kafka's "shallow" offset of the max timestamp, which the
    time index stores); both are -1 when no batch has a timestamp.
    """

    first_offset: int
    last_offset: int
    batch_count: int
    record_count: int
    max_timestamp: int
    offset_of_max_timestamp: int
    batches: tuple[tuple[int, int, int, int, int, int], ...] = ()
    """Each batch as (base_offset, last_offset, position, size_in_bytes,
    max_timestamp, partition_leader_epoch) after stamping."""


class IndexCursor(NamedTuple):
    """Where a segment's sparse indexes stand: the input and output of :func:`stamp_range`.

    A NamedTuple rather than a frozen dataclass: two are built per append on
    the produce hot path, and a frozen dataclass costs several times more to build.

    Kafka indexes a batch once more than ``index.interval.bytes`` were appended
    since the last offset index entry; the entry maps the batch's last offset to
    its start position, and the time index gets (max timestamp so far, its
    offset) when that timestamp grew past the time index's last entry.
    """

    base_offset: int
    """The segment's base offset: index entries hold offsets relative to it."""
    position: int
    """The segment file position of the appended buffer's first byte."""
    interval_bytes: int
    """``index.interval.bytes``."""
    bytes_since_entry: int
    """Log bytes appended since the last offset index entry."""
    max_timestamp: int
    """Largest batch maxTimestamp of the segment so far (-1: none)."""
    offset_of_max_timestamp: int
    last_indexed_timestamp: int
    """Timestamp of the time index's last entry (-1: none)."""


NO_INDEX = IndexCursor(base_offset=0, position=0, interval_bytes=varint.INT64_MAX, bytes_since_entry=0,
                       max_timestamp=NO_TIMESTAMP, offset_of_max_timestamp=-1,
                       last_indexed_timestamp=NO_TIMESTAMP)
"""A cursor that never asks for an index entry (callers that keep no index)."""


class StampedRange(NamedTuple):
    """What :func:`stamp_range` validated, stamped and found to index in ``buf[start:end]``.

    A NamedTuple for the same reason as :class:`IndexCursor`.
    """

    start: int
    end: int
    """One past the last stamped batch (a batch boundary)."""
    first_offset: int
    next_offset: int
    """One past the last assigned offset; ``next_offset - first_offset`` records were stamped."""
    batch_count: int
    max_timestamp: int
    """Largest batch maxTimestamp in the range (-1: none)."""
    offset_of_max_timestamp: int
    first_batch_max_timestamp: int
    start_cursor: IndexCursor
    """The index cursor the range was planned with."""
    cursor: IndexCursor
    """The index cursor after the range."""
    index_offsets: list[int]
    """Last offset (relative to the cursor's base offset) of every batch that gets an offset index entry..."""
    index_positions: list[int]
    """...and its file position (cursor position + position in ``buf``)."""
    time_index_timestamps: list[int]
    time_index_offsets: list[int]
    originals: list[tuple[int, int, int]]
    """(position, baseOffset, partitionLeaderEpoch) of each batch before stamping, for :func:`unstamp`."""
    stamps: list[tuple[int, int, int]]
    """With ``in_place=False``: (position, new baseOffset, batchLength) of each batch, not yet written."""

    @property
    def record_count(self) -> int:
        """Records stamped: offsets are consecutive because lastOffsetDelta == recordCount - 1."""
        return self.next_offset - self.first_offset


# The header fields a leader append checks, in one unpack per batch:
# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes,
# lastOffsetDelta, (baseTimestamp skipped), maxTimestamp, (producer fields
# skipped), recordCount.
_APPEND_CHECK = struct.Struct(">qiibIhi8xq14xi")
# baseOffset, batchLength (rewritten unchanged), partitionLeaderEpoch: the three
# leading fields are adjacent, so a leader stamps a batch with one call.
_STAMP = struct.Struct(">qii")
_DELTA_AND_MAX = struct.Struct(">i8xq")  # lastOffsetDelta, (baseTimestamp), maxTimestamp


def _leader_batch_error(view: memoryview, pos: int, end: int) -> CorruptRecordError:
    """Why the batch at ``pos`` cannot be appended by a leader (the slow path of stamp_range)."""
    remaining = end - pos
    if remaining < HEADER_SIZE:
        return CorruptRecordError(
            f"partial batch at byte {pos}: {remaining} bytes left, a batch header needs {HEADER_SIZE}",
            position=pos,
        )
    (
        _base, length, _epoch, magic, crc, attributes, last_offset_delta, _max_ts, count,
    ) = _APPEND_CHECK.unpack_from(view, pos)
    if length < MIN_BATCH_LENGTH:
        return CorruptRecordError(
            f"batch at byte {pos} has invalid batch length {length} (minimum {MIN_BATCH_LENGTH})",
            position=pos,
        )
    size = LOG_OVERHEAD + length
    if remaining < size:
        return CorruptRecordError(
            f"partial batch at byte {pos}: {size} bytes declared, {remaining} present", position=pos
        )
    if magic != MAGIC:
        return CorruptRecordError(
            f"batch at byte {pos} has unsupported magic {magic} (expected {MAGIC})", position=pos
        )
    computed = crc32c.crc32c(view[pos + ATTRIBUTES_OFFSET : pos + size])
    if computed != crc:
        return CorruptRecordError(
            f"batch at byte {pos} fails its CRC: stored 0x{crc:08x}, computed 0x{computed:08x}",
            position=pos,
        )
    try:
        compression_of(attributes, pos)
    except CorruptRecordError as exc:
        return exc
    return CorruptRecordError(
        f"batch at byte {pos} has record count {count} but last offset delta {last_offset_delta}; "
        "a produced batch needs count >= 1 and delta == count - 1",
        position=pos,
    )


def unstamp(buf: bytearray | memoryview, stamped: StampedRange) -> None:
    """Put back the baseOffset and partitionLeaderEpoch that :func:`stamp_range` overwrote."""
    _unstamp(as_view(buf), stamped.originals)


def _unstamp(view: memoryview, originals: Sequence[tuple[int, int, int]]) -> None:
    pack_i64 = _I64.pack_into
    pack_i32 = _I32.pack_into
    for pos, base, epoch in originals:
        pack_i64(view, pos + BASE_OFFSET_OFFSET, base)
        pack_i32(view, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def stamp_range(
    buf: bytes | bytearray | memoryview,
    start: int,
    stop: int,
    *,
    next_offset: int,
    leader_epoch: int,
    cursor: IndexCursor = NO_INDEX,
    in_place: bool = True,
) -> StampedRange:
    """The leader-append hot path: validate, stamp and plan index entries for whole batches.

    Walks batches from ``start`` (a batch boundary) until the first boundary at
    or after ``stop``; batches may extend to the end of ``buf``. Each batch must
    be whole, have magic 2, a known codec, a matching CRC-32C, at least one
    record and lastOffsetDelta == recordCount - 1 (Kafka's
    ``LogValidator.validateBatch``; otherwise offsets would have gaps or
    overlaps). Each valid batch gets baseOffset (consecutive from
    ``next_offset``) and partitionLeaderEpoch; both lie outside the CRC, so no
    CRC is recomputed. One pass, one header unpack, one CRC call over a
    memoryview and one pack per batch: per-batch Python is what bounds append
    throughput next to the page-cache copy.

    With ``in_place=False`` (a read-only buffer, e.g. the bytes of an RPC)
    nothing is patched: the new (position, baseOffset, batchLength) of each
    batch are returned in ``stamps`` and :func:`stamped_pieces` turns them
    into the pieces to write, so the records are never copied.

    Index entries are planned from ``cursor`` (the segment's index state, see
    :class:`IndexCursor`) in the same pass; the segment applies them when it
    commits the append. On a bad batch every stamp made by this call is undone
    and CorruptRecordError names the byte: the buffer is as it was.
    """
    view = as_view(buf)
    check_range("next_offset", next_offset, (0, varint.INT64_MAX))
    check_range("leader_epoch", leader_epoch, _INT32)
    end = len(view)
    pos = start
    offset = next_offset
    unpack = _APPEND_CHECK.unpack_from
    stamp = _STAMP.pack_into
    crc_of = crc32c.crc32c
    originals: list[tuple[int, int, int]] = []
    keep = originals.append
    stamps: list[tuple[int, int, int]] = []
    plan = stamps.append
    index_offsets: list[int] = []
    index_positions: list[int] = []
    add_index_offset = index_offsets.append
    add_index_position = index_positions.append
    time_stamps: list[int] = []
    time_offsets: list[int] = []
    (relative_base, file_position, interval, since, segment_max, segment_offset_of_max,
     last_indexed) = cursor
    max_ts = NO_TIMESTAMP
    offset_of_max = -1
    # Constants as locals: this loop runs once per batch on every produce.
    overhead = LOG_OVERHEAD
    min_length = MIN_BATCH_LENGTH
    magic_v2 = MAGIC
    codec_mask = COMPRESSION_CODEC_MASK
    max_codec = _MAX_CODEC_ID
    crc_start = ATTRIBUTES_OFFSET
    try:
        while pos < stop:
            # unpack_from raises struct.error on a partial header: diagnosed below.
            base, length, epoch, magic, crc, attributes, delta, batch_max, count = unpack(view, pos)
            next_pos = pos + overhead + length
            if (length < min_length or next_pos > end or magic != magic_v2 or delta != count - 1
                    or count <= 0 or attributes & codec_mask > max_codec
                    or crc_of(view[pos + crc_start : next_pos]) != crc):
                raise _leader_batch_error(view, pos, end)
            if in_place:
                keep((pos, base, epoch))
                stamp(view, pos, offset, length, leader_epoch)
            else:
                plan((pos, offset, length))
            last = offset + delta
            if batch_max > max_ts:
                max_ts = batch_max
                offset_of_max = last
                if batch_max > segment_max:
                    segment_max = batch_max
                    segment_offset_of_max = last
            if since > interval:
                add_index_offset(last - relative_base)
                add_index_position(file_position + pos)
                if segment_max > last_indexed:
                    time_stamps.append(segment_max)
                    time_offsets.append(segment_offset_of_max)
                    last_indexed = segment_max
                since = next_pos - pos
            else:
                since += next_pos - pos
            pos = next_pos
            offset = last + 1
    except (CorruptRecordError, struct.error) as exc:
        _unstamp(view, originals)  # empty unless in_place
        if isinstance(exc, CorruptRecordError):
            raise
        if end - pos < HEADER_SIZE:
            raise _leader_batch_error(view, pos, end) from None
        # Only an offset past int64 can fail the pack: the arguments were checked.
        raise ValueError(f"next_offset={next_offset} leaves no room for the records at byte {pos}") from None
    if offset - 1 > varint.INT64_MAX:
        _unstamp(view, originals)
        raise ValueError(f"next_offset={next_offset} leaves no room for {offset - next_offset} records")
    first_batch_max = _I64.unpack_from(view, start + MAX_TIMESTAMP_OFFSET)[0] if pos > start else NO_TIMESTAMP
    return StampedRange(
        start=start,
        end=pos,
        first_offset=next_offset,
        next_offset=offset,
        batch_count=len(originals) + len(stamps),
        max_timestamp=max_ts,
        offset_of_max_timestamp=offset_of_max,
        first_batch_max_timestamp=first_batch_max,
        start_cursor=cursor,
        cursor=IndexCursor(relative_base, file_position, interval, since, segment_max, segment_offset_of_max,
                           last_indexed),
        index_offsets=index_offsets,
        index_positions=index_positions,
        time_index_timestamps=time_stamps,
        time_index_offsets=time_offsets,
        originals=originals,
        stamps=stamps,
    )


def stamped_pieces(
    buf: bytes | bytearray | memoryview, stamped: StampedRange, *, leader_epoch: int
) -> list[bytes | memoryview]:
    """The pieces to write for a range stamped with ``in_place=False``, for ``os.pwritev``.

    Per batch: its new 16-byte prefix (baseOffset, batchLength,
    partitionLeaderEpoch) and a view of the rest of the batch. The batches
    reach the file stamped although ``buf`` is read-only, and no record byte
    is copied in user space.
    """
    view = as_view(buf)
    pieces: list[bytes | memoryview] = []
    add = pieces.append
    prefix = _STAMP.pack
    rest = PARTITION_LEADER_EPOCH_OFFSET + 4
    for pos, offset, length in stamped.stamps:
        add(prefix(offset, length, leader_epoch))
        add(view[pos + rest : pos + LOG_OVERHEAD + length])
    return pieces


def stamp_batches(
    buf: bytearray | memoryview, *, first_offset: int, leader_epoch: int
) -> StampResult:
    """Leader append: validate every batch, then assign offsets and the leader epoch.

    The checks and stamps of :func:`stamp_range` over the whole buffer, which
    must be non-empty and hold whole batches only. Nothing is modified if it
    fails.

    Raises CorruptRecordError (with the byte position) for bad bytes,
    ValueError for out-of-range arguments, TypeError for a read-only buffer.
    """
    view = as_view(buf)
    if view.readonly:
        raise TypeError("stamp_batches needs a writable buffer (bytearray or writable memoryview)")
    check_range("first_offset", first_offset, (0, varint.INT64_MAX))
    check_range("leader_epoch", leader_epoch, _INT32)
    if len(view) == 0:
        raise CorruptRecordError("cannot append an empty set of record batches", position=0)
    stamped = stamp_range(view, 0, len(view), next_offset=first_offset, leader_epoch=leader_epoch)
    layout: list[tuple[int, int, int, int, int, int]] = []
    for pos, _base, _epoch in stamped.originals:
        base_offset, length = FRAME.unpack_from(view, pos)
        delta, max_ts = _DELTA_AND_MAX.unpack_from(view, pos + LAST_OFFSET_DELTA_OFFSET)
        layout.append((base_offset, base_offset + delta, pos, LOG_OVERHEAD + length, max_ts, leader_epoch))
    return StampResult(
        first_offset=first_offset,
        last_offset=stamped.next_offset - 1,
        batch_count=stamped.batch_count,
        record_count=stamped.record_count,
        max_timestamp=stamped.max_timestamp,
        offset_of_max_timestamp=stamped.offset_of_max_timestamp,
        batches=tuple(layout),
    )


def encode_batch(section: bytes | bytearray, *, base_offset: int, partition_leader_epoch: int,
                 attributes: int, last_offset_delta: int, base_timestamp: int, max_timestamp: int,
                 producer_id: int, producer_epoch: int, base_sequence: int,
                 record_count: int) -> bytes:
    """A whole batch: its header, CRC-32C included, in front of ``section``.

    ``section`` is the records section as stored (compressed already when the codec in
    ``attributes`` is not NONE); this function does not look inside it. The field values
    are the caller's to check (the records codec's encoder and the cleaner); ValueError
    when batchLength would not fit in int32.
    """
    batch_length = MIN_BATCH_LENGTH + len(section)
    check_range("batch length", batch_length, _INT32)
    header = bytearray(HEADER_SIZE)
    HEADER.pack_into(
        header, 0, base_offset, batch_length, partition_leader_epoch, MAGIC, 0, attributes,
        last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch,
        base_sequence, record_count,
    )
    # The CRC covers attributes..end: the header's tail, then the section (crc32c
    # continues a running value), so the section is copied once, into the result.
    crc = crc32c.crc32c(section, crc32c.crc32c(memoryview(header)[ATTRIBUTES_OFFSET:]))
    _U32.pack_into(header, CRC_OFFSET, crc)
    return b"".join((header, section))
