"""Kafka RecordBatch v2 bytes: the header view brokers use and the full codec clients use.

Owns the on-disk/on-wire batch format (magic 2, KIP-98; Kafka's message-format
docs and ``DefaultRecordBatch``), big-endian::

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

Two audiences, two halves:

- Brokers and the raft log (the hot path) use :class:`BatchHeader`,
  :func:`iter_batches`, :func:`scan_valid_prefix`, :func:`stamp_range` (the
  leader append: checks, stamps and index planning in one pass) and
  :func:`stamp_batches`.
  They read and patch the 61-byte header through a ``memoryview`` and check the
  CRC with the hardware ``crc32c`` package; their cost is per batch, never per
  record, and they never copy or decompress the records section (DESIGN.md §3).
  A leader's one per-record pass over a client's batches is
  :mod:`kraftlog.storage.log_validator`'s, before it calls these.
- Clients, raft (control records) and tools (``kraftlog log dump``) use
  :func:`build_batch` and :func:`decode_batches`, which encode/decode every
  record with :mod:`kraftlog.storage.varint` and :mod:`kraftlog.storage.compression`.

Bad bytes raise :class:`~kraftlog.errors.CorruptRecordError` whose message and
``position`` name the byte where the batch (or field) starts; no ``IndexError``
or ``struct.error`` escapes. Bad *arguments* to the encoder raise ``ValueError``
naming the field. This module is a pure core: no I/O framework, no clock
(callers pass ``now_ms``).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import crc32c

from kraftlog.errors import CorruptRecordError, KraftlogError, UnsupportedCompressionTypeError
from kraftlog.storage import compression as codecs
from kraftlog.storage import varint
from kraftlog.storage.compression import CompressionType as CompressionType

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

_HEADER = struct.Struct(">qiibIhiqqqhii")
_FRAME = struct.Struct(">qi")  # baseOffset, batchLength: enough to step to the next batch
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_I8 = struct.Struct(">b")
_CONTROL_KEY = struct.Struct(">hh")
assert _HEADER.size == HEADER_SIZE
_MAX_CODEC_ID = max(CompressionType)


class TimestampType(enum.IntEnum):
    """Attributes bit 3: who set the timestamps (KIP-32)."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlRecordType(enum.IntEnum):
    """Type id in a control record's key (Kafka ``ControlRecordType``).

    Raft writes LEADER_CHANGE when a leader is elected (KIP-595) and
    SNAPSHOT_HEADER/FOOTER around a snapshot (KIP-630); KRAFT_VERSION and
    KRAFT_VOTERS come from KIP-853. UNKNOWN stands for an id this code does not know.
    """

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


CONTROL_RECORD_KEY_VERSION = 0


def encode_control_record_key(record_type: ControlRecordType) -> bytes:
    """The 4-byte key of a control record: version int16 (0), type int16."""
    if record_type is ControlRecordType.UNKNOWN:
        raise ValueError("cannot encode a control record key of type UNKNOWN")
    return _CONTROL_KEY.pack(CONTROL_RECORD_KEY_VERSION, int(record_type))


def decode_control_record_key(key: bytes | None) -> ControlRecordType:
    """Parse a control record's key; an unknown type id gives ``UNKNOWN``.

    Raises CorruptRecordError when the key is missing, shorter than 4 bytes or
    has a negative version (Kafka's ``ControlRecordType.parseTypeId``).
    """
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptRecordError(
            f"control record key must be at least {_CONTROL_KEY.size} bytes, got "
            f"{'null' if key is None else len(key)}"
        )
    version, type_id = _CONTROL_KEY.unpack_from(key, 0)
    if version < 0:
        raise CorruptRecordError(f"control record key has invalid negative version {version}")
    try:
        return ControlRecordType(type_id)
    except ValueError:
        return ControlRecordType.UNKNOWN


@dataclass(frozen=True, slots=True, kw_only=True)
class Header:
    """A record header: a UTF-8 key and an optional value (KIP-82)."""

    key: str
    value: bytes | None


class Record(NamedTuple):
    """A decoded record with absolute offset and timestamp.

    A NamedTuple, not a frozen dataclass: the decoder builds one per record, and a
    tuple costs about a quarter as much to make (build it with keywords all the same).
    """

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


class RecordInput(NamedTuple):
    """A record as a client hands it to :func:`build_batch`.

    ``timestamp_ms`` None means "now" (the encoder's ``now_ms``), as a Kafka
    producer stamps a record without a timestamp at send time. A NamedTuple, not a
    frozen dataclass, because ``Producer.send`` makes one per record (build it with
    keywords all the same); the encoder unpacks it in one step.
    """

    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[Header, ...] = ()
    timestamp_ms: int | None = None


def _as_view(buf: bytes | bytearray | memoryview) -> memoryview:
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    return view


def _check_range(field: str, value: int, bounds: tuple[int, int]) -> None:
    if not isinstance(value, int) or not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"{field}={value!r} is outside [{bounds[0]}, {bounds[1]}]")


def _compression_of(attributes: int, position: int) -> CompressionType:
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
        view = _as_view(buf)
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

    # -- derived --------------------------------------------------------------------------
    @property
    def compression(self) -> CompressionType:
        """The codec; raises CorruptRecordError for an id outside 0..4."""
        return _compression_of(self.attributes, self.position)

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
        _compression_of(self.attributes, self.position)

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
        _check_range("base_offset", offset, _INT64)
        _I64.pack_into(self._writable(), self.position + BASE_OFFSET_OFFSET, offset)

    def set_partition_leader_epoch(self, epoch: int) -> None:
        """Overwrite partitionLeaderEpoch (KIP-101). Outside the CRC range: no CRC update."""
        _check_range("partition_leader_epoch", epoch, _INT32)
        _I32.pack_into(self._writable(), self.position + PARTITION_LEADER_EPOCH_OFFSET, epoch)

    def set_max_timestamp(self, timestamp_type: TimestampType, max_timestamp: int) -> None:
        """Set the timestamp type bit and maxTimestamp, then recompute the CRC.

        How a broker applies ``message.timestamp.type=LogAppendTime`` (KIP-32)
        without decoding records: readers then take every record's timestamp from
        maxTimestamp. Like Kafka's ``DefaultRecordBatch.setMaxTimestamp`` it is a
        no-op when nothing changes. Header-only: the records section is only read
        by the CRC.
        """
        _check_range("max_timestamp", max_timestamp, _INT64)
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
    _check_range("position", position, (0, varint.INT64_MAX))
    view = _as_view(buf)
    if end is None:
        end = len(view)
    elif not position <= end <= len(view):
        raise ValueError(f"end={end} is outside [{position}, {len(view)}]")
    pos = position
    unpack_frame = _FRAME.unpack_from
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
    _check_range("position", position, (0, varint.INT64_MAX))
    view = _as_view(buf)
    end = len(view)
    start = min(position, end)
    pos = start
    batch_count = 0
    record_count = 0
    first_offset: int | None = None
    last_offset: int | None = None
    max_timestamp = NO_TIMESTAMP
    error: str | None = None
    unpack_header = _HEADER.unpack_from
    unpack_frame = _FRAME.unpack_from
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
        _compression_of(attributes, pos)
    except CorruptRecordError as exc:
        return exc
    return CorruptRecordError(
        f"batch at byte {pos} has record count {count} but last offset delta {last_offset_delta}; "
        "a produced batch needs count >= 1 and delta == count - 1",
        position=pos,
    )


def unstamp(buf: bytearray | memoryview, stamped: StampedRange) -> None:
    """Put back the baseOffset and partitionLeaderEpoch that :func:`stamp_range` overwrote."""
    _unstamp(_as_view(buf), stamped.originals)


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
    view = _as_view(buf)
    _check_range("next_offset", next_offset, (0, varint.INT64_MAX))
    _check_range("leader_epoch", leader_epoch, _INT32)
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
    view = _as_view(buf)
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
    view = _as_view(buf)
    if view.readonly:
        raise TypeError("stamp_batches needs a writable buffer (bytearray or writable memoryview)")
    _check_range("first_offset", first_offset, (0, varint.INT64_MAX))
    _check_range("leader_epoch", leader_epoch, _INT32)
    if len(view) == 0:
        raise CorruptRecordError("cannot append an empty set of record batches", position=0)
    stamped = stamp_range(view, 0, len(view), next_offset=first_offset, leader_epoch=leader_epoch)
    layout: list[tuple[int, int, int, int, int, int]] = []
    for pos, _base, _epoch in stamped.originals:
        base_offset, length = _FRAME.unpack_from(view, pos)
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


# ---------------------------------------------------------------------------------------
# Full encoder (clients, raft)
# ---------------------------------------------------------------------------------------


def _bytes_field(field: str, data: object) -> bytes:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ValueError(f"{field} must be bytes or None, got {type(data).__name__}")
    raw = bytes(data)
    if len(raw) > varint.INT32_MAX:
        raise ValueError(f"{field} is {len(raw)} bytes, more than int32 allows")
    return raw


def _encode_record(
    out: list[bytes], index: int, record: RecordInput, timestamp_delta: int
) -> None:
    enc = varint.encode_varint
    body: list[bytes] = [b"\x00", varint.encode_varlong(timestamp_delta), enc(index)]
    if record.key is None:
        body.append(enc(-1))
    else:
        key = _bytes_field(f"records[{index}].key", record.key)
        body.append(enc(len(key)))
        body.append(key)
    if record.value is None:
        body.append(enc(-1))
    else:
        value = _bytes_field(f"records[{index}].value", record.value)
        body.append(enc(len(value)))
        body.append(value)
    body.append(enc(len(record.headers)))
    for h_index, header in enumerate(record.headers):
        if not isinstance(header, Header) or not isinstance(header.key, str):
            raise ValueError(f"records[{index}].headers[{h_index}] must be a Header with a str key")
        h_key = header.key.encode("utf-8")
        body.append(enc(len(h_key)))
        body.append(h_key)
        if header.value is None:
            body.append(enc(-1))
        else:
            h_value = _bytes_field(f"records[{index}].headers[{h_index}].value", header.value)
            body.append(enc(len(h_value)))
            body.append(h_value)
    encoded = b"".join(body)
    out.append(enc(len(encoded)))
    out.append(encoded)


def _timestamp_of(index: int, record: object, log_append_time: bool, now_ms: int) -> int:
    if not isinstance(record, RecordInput):
        raise ValueError(f"records[{index}] must be a RecordInput, got {type(record).__name__}")
    timestamp = record.timestamp_ms
    if log_append_time or timestamp is None:
        return now_ms
    _check_range(f"records[{index}].timestamp_ms", timestamp, _INT64)
    return timestamp


def _check_control_key(index: int, key: object) -> None:
    if key is None or not isinstance(key, bytes | bytearray | memoryview) or (
            len(key) < _CONTROL_KEY.size):
        raise ValueError(
            f"records[{index}] of a control batch needs a control record key "
            "(version int16, type int16)"
        )


def _encode_records_general(
    records: Sequence[RecordInput], *, log_append_time: bool, now_ms: int, is_control: bool
) -> tuple[list[bytes], int, int]:
    """The records section's pieces, baseTimestamp and maxTimestamp, one field at a time.

    The reference encoder: :func:`_encode_records` must produce the same bytes (a
    property test checks it). Both encode a record with headers or an unusual field
    through the same :func:`_encode_record`.
    """
    timestamps = [_timestamp_of(index, record, log_append_time, now_ms)
                  for index, record in enumerate(records)]
    if is_control:
        for index, record in enumerate(records):
            _check_control_key(index, record.key)
    base_timestamp = timestamps[0]
    parts: list[bytes] = []
    for index, record in enumerate(records):
        delta = timestamps[index] - base_timestamp
        _check_range(f"records[{index}] timestamp delta", delta, _INT64)
        _encode_record(parts, index, record, delta)
    return parts, base_timestamp, max(timestamps)


def _encode_records(
    records: Sequence[RecordInput], *, log_append_time: bool, now_ms: int, is_control: bool
) -> tuple[list[bytes], int, int]:
    """What :func:`_encode_records_general` returns, through :class:`RecordsBuilder`'s fast
    path per record (its general path, field by field with every check, for anything
    unusual). Each record's type and timestamp are checked first, as the general
    encoder checks them, and a control batch's keys."""
    builder = RecordsBuilder()
    append = builder.append
    for index, record in enumerate(records):
        if type(record) is RecordInput:  # a subclass still works, through the checks
            key, value, headers, timestamp = record
            if log_append_time or timestamp is None:
                timestamp = now_ms
            elif type(timestamp) is not int or not (
                    varint.INT64_MIN <= timestamp <= varint.INT64_MAX):
                _check_range(f"records[{index}].timestamp_ms", timestamp, _INT64)
        else:
            timestamp = _timestamp_of(index, record, log_append_time, now_ms)
            key, value, headers = record.key, record.value, record.headers
        if is_control:
            _check_control_key(index, key)
        append(key, value, headers, timestamp)
    return builder.parts, builder.base_timestamp, builder.max_timestamp


def build_batch(
    records: Sequence[RecordInput],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    compression: CompressionType = CompressionType.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    now_ms: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes:
    """Encode one v2 batch holding ``records`` at consecutive offsets from ``base_offset``.

    Timestamps: a record without one gets ``now_ms``; with LOG_APPEND_TIME every
    record gets ``now_ms``. baseTimestamp is the first record's timestamp and
    maxTimestamp the largest (Kafka's ``MemoryRecordsBuilder``). A control batch
    (``is_control``) must carry control records: each key at least the 4-byte
    (version, type) of :func:`encode_control_record_key`.

    Raises ValueError (naming the field) for no records or out-of-range values,
    KraftlogError for SNAPPY.
    """
    if not records:
        raise ValueError("a record batch needs at least one record")
    count = len(records)
    _check_range("base_offset", base_offset, _INT64)
    _check_range("record count", count, (1, varint.INT32_MAX))
    _check_range("last offset", base_offset + count - 1, _INT64)
    _check_range("partition_leader_epoch", partition_leader_epoch, _INT32)
    _check_range("producer_id", producer_id, _INT64)
    _check_range("producer_epoch", producer_epoch, _INT16)
    _check_range("base_sequence", base_sequence, _INT32)
    _check_range("now_ms", now_ms, _INT64)
    codec = CompressionType(compression)
    ts_type = TimestampType(timestamp_type)

    parts, base_timestamp, max_timestamp = _encode_records(
        records, log_append_time=ts_type is TimestampType.LOG_APPEND_TIME, now_ms=now_ms,
        is_control=is_control)
    section = b"".join(parts)
    if codec is not CompressionType.NONE:
        section = codecs.compress(codec, section)

    return _seal(section, count=count, base_offset=base_offset,
                 partition_leader_epoch=partition_leader_epoch, codec=codec, ts_type=ts_type,
                 base_timestamp=base_timestamp, max_timestamp=max_timestamp,
                 producer_id=producer_id, producer_epoch=producer_epoch,
                 base_sequence=base_sequence, is_transactional=is_transactional,
                 is_control=is_control)


def _seal(section: bytes | bytearray, *, count: int, base_offset: int,
          partition_leader_epoch: int, codec: CompressionType, ts_type: TimestampType,
          base_timestamp: int, max_timestamp: int, producer_id: int, producer_epoch: int,
          base_sequence: int, is_transactional: bool, is_control: bool) -> bytes:
    """The batch: header (CRC over attributes..end) + ``section`` (compressed already)."""
    attributes = int(codec) | (int(ts_type) << 3)
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG_MASK
    if is_control:
        attributes |= CONTROL_FLAG_MASK
    batch_length = MIN_BATCH_LENGTH + len(section)
    _check_range("batch length", batch_length, _INT32)

    header = bytearray(HEADER_SIZE)
    _HEADER.pack_into(
        header, 0, base_offset, batch_length, partition_leader_epoch, MAGIC, 0, attributes,
        count - 1, base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence,
        count,
    )
    # The CRC covers attributes..end: the header's tail, then the section (crc32c
    # continues a running value), so the section is copied once, into the result.
    crc = crc32c.crc32c(section, crc32c.crc32c(memoryview(header)[ATTRIBUTES_OFFSET:]))
    _U32.pack_into(header, CRC_OFFSET, crc)
    return b"".join((header, section))


class RecordsBuilder:
    """One batch's records, encoded as they are appended (Kafka's ``MemoryRecordsBuilder``).

    The producer appends each record once, at ``send``; :meth:`build` then only adds the
    header (producer id, epoch and sequence are known only when the batch is sent, and
    change if it is renumbered), compresses and checksums. The first record's timestamp
    is the batch's baseTimestamp; later ones are stored as deltas from it (negative
    when earlier). Offsets deltas count from 0.

    :meth:`append` takes the common record (bytes or no key, bytes value, no headers,
    lengths and deltas under 16384) with a few tuple lookups and one list ``extend``
    (the pieces are joined once, by :meth:`build`: a ``bytearray`` grown 1 KiB at a time
    cost ~0.5 µs per record in reallocations); any other goes through the general
    encoder with its checks. ``timestamp_ms`` must be an int in int64 (the caller checks
    it: ``Producer.send`` refuses anything else).
    """

    __slots__ = ("base_timestamp", "count", "max_timestamp", "parts", "size")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        """The records section, uncompressed, in pieces."""
        self.size = 0
        """Bytes in ``parts``."""
        self.count = 0
        self.base_timestamp = 0
        self.max_timestamp = 0

    def append(self, key: bytes | None, value: bytes | None, headers: tuple[Header, ...],
               timestamp_ms: int) -> int:
        """Encode one record at the next offset delta; returns the bytes it took."""
        index = self.count
        if index == 0:
            self.base_timestamp = self.max_timestamp = timestamp_ms
        elif timestamp_ms > self.max_timestamp:
            self.max_timestamp = timestamp_ms
        delta = timestamp_ms - self.base_timestamp
        small = varint.NON_NEGATIVE
        n_small = varint.NON_NEGATIVE_TABLE_SIZE
        if (not headers and 0 <= delta < n_small and index < n_small
                and (key is None or (type(key) is bytes and len(key) < n_small))
                and type(value) is bytes and len(value) < n_small):
            delta_part = small[delta]
            index_part = small[index]
            value_part = small[len(value)]
            if key is None:
                size = 3 + len(delta_part) + len(index_part) + len(value_part) + len(value)
                length_part = small[size] if size < n_small else varint.encode_varint(size)
                # attributes, deltas, a null key (zigzag -1), the value, no headers
                self.parts.extend((length_part, b"\x00", delta_part, index_part, b"\x01",
                                   value_part, value, b"\x00"))
            else:
                key_part = small[len(key)]
                size = (2 + len(delta_part) + len(index_part) + len(key_part) + len(key)
                        + len(value_part) + len(value))
                length_part = small[size] if size < n_small else varint.encode_varint(size)
                self.parts.extend((length_part, b"\x00", delta_part, index_part, key_part,
                                   key, value_part, value, b"\x00"))
            added = len(length_part) + size
        else:
            _check_range(f"records[{index}] timestamp delta", delta, _INT64)
            parts: list[bytes] = []
            _encode_record(parts, index, RecordInput(key, value, headers, timestamp_ms), delta)
            self.parts.extend(parts)
            added = sum(len(part) for part in parts)
        self.count = index + 1
        self.size += added
        return added

    def build(self, *, base_offset: int = 0,
              partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
              compression: CompressionType = CompressionType.NONE,
              producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
              base_sequence: int = NO_SEQUENCE) -> bytes:
        """The CreateTime batch of the records appended so far (at least one).

        Raises ValueError (naming the field) for out-of-range header values, KraftlogError
        for SNAPPY."""
        if not self.count:
            raise ValueError("a record batch needs at least one record")
        _check_range("base_offset", base_offset, _INT64)
        _check_range("last offset", base_offset + self.count - 1, _INT64)
        _check_range("partition_leader_epoch", partition_leader_epoch, _INT32)
        _check_range("producer_id", producer_id, _INT64)
        _check_range("producer_epoch", producer_epoch, _INT16)
        _check_range("base_sequence", base_sequence, _INT32)
        codec = CompressionType(compression)
        section = b"".join(self.parts)
        if codec is not CompressionType.NONE:
            section = codecs.compress(codec, section)
        return _seal(section, count=self.count, base_offset=base_offset,
                     partition_leader_epoch=partition_leader_epoch, codec=codec,
                     ts_type=TimestampType.CREATE_TIME, base_timestamp=self.base_timestamp,
                     max_timestamp=self.max_timestamp, producer_id=producer_id,
                     producer_epoch=producer_epoch, base_sequence=base_sequence,
                     is_transactional=False, is_control=False)


# ---------------------------------------------------------------------------------------
# Full decoder (clients, tools)
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DecodedBatch:
    """A fully decoded batch: every header field plus its records.

    ``position`` is where the batch started in the decoded buffer.
    """

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    compression: CompressionType
    timestamp_type: TimestampType
    is_transactional: bool
    is_control: bool
    has_delete_horizon: bool
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    records: tuple[Record, ...]

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def size_in_bytes(self) -> int:
        return LOG_OVERHEAD + self.batch_length


class _RecordsCorrupt(Exception):
    """Internal: a problem at ``offset`` bytes into the (decompressed) records section."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


class _Unusual(Exception):
    """Internal: the fast record decoder met something it leaves to the general one."""


class _InPlaceGaveUp(Exception):
    """Internal: a batch decoded in place met something unusual; decode it from a copy
    (bounded by the batch, so the general decoder's checks and messages apply as ever)."""


def _read_varint(data: bytes, pos: int, what: str) -> tuple[int, int]:
    try:
        return varint.decode_varint(data, pos)
    except ValueError as exc:
        raise _RecordsCorrupt(f"bad {what}: {exc}", pos) from None


def _read_varlong(data: bytes, pos: int, what: str) -> tuple[int, int]:
    try:
        return varint.decode_varlong(data, pos)
    except ValueError as exc:
        raise _RecordsCorrupt(f"bad {what}: {exc}", pos) from None


def _read_bytes(data: bytes, pos: int, limit: int, what: str) -> tuple[bytes | None, int]:
    try:
        length, pos = varint.decode_varint(data, pos)
    except ValueError as exc:  # the message is formatted only when it is needed
        raise _RecordsCorrupt(f"bad {what} length: {exc}", pos) from None
    if length == -1:
        return None, pos
    if length < -1:
        raise _RecordsCorrupt(f"invalid {what} length {length}", pos)
    if pos + length > limit:
        raise _RecordsCorrupt(f"{what} length {length} runs past the end of its record", pos)
    return data[pos : pos + length], pos + length


def _decode_record(
    data: bytes, pos: int, index: int, count: int, base_offset: int, base_timestamp: int,
    log_append_time: int | None,
) -> tuple[Record, int]:
    """Decode record ``index`` starting at ``pos``, field by field; return it and the next
    position. The reference decoder, with every check and its message (the fast path
    in :func:`_decode_records` hands it anything unusual)."""
    start = pos
    end = len(data)
    if pos >= end:
        raise _RecordsCorrupt(
            f"record count says {count} records but the section ends after {index}", pos
        )
    length, pos = _read_varint(data, pos, "record length")
    if length <= 0 or pos + length > end:
        raise _RecordsCorrupt(
            f"record {index} has invalid length {length} ({end - pos} bytes remain)", start
        )
    limit = pos + length
    pos += 1  # record attributes int8: unused in v2
    timestamp_delta, pos = _read_varlong(data, pos, "timestamp delta")
    offset_delta, pos = _read_varint(data, pos, "offset delta")
    key, pos = _read_bytes(data, pos, limit, "key")
    value, pos = _read_bytes(data, pos, limit, "value")
    headers, pos = _decode_headers(data, pos, limit, index)
    if pos != limit:
        raise _RecordsCorrupt(
            f"record {index} declares {length} bytes but its fields use {pos - limit + length}",
            start,
        )
    timestamp = log_append_time if log_append_time is not None else (
        base_timestamp + timestamp_delta
    )
    return Record(base_offset + offset_delta, timestamp, key, value, headers), pos


def _decode_headers(data: bytes, pos: int, limit: int, index: int
                    ) -> tuple[tuple[Header, ...], int]:
    """Record ``index``'s header count and headers from ``pos``; return them and the next
    position (not yet checked against the record's end, ``limit``)."""
    header_count, pos = _read_varint(data, pos, "header count")
    if header_count < 0:
        raise _RecordsCorrupt(f"record {index} has negative header count {header_count}", pos)
    headers: list[Header] = []
    for _ in range(header_count):
        if pos >= limit:
            raise _RecordsCorrupt(f"record {index} ends inside its headers", pos)
        h_key_start = pos
        h_key, pos = _read_bytes(data, pos, limit, "header key")
        if h_key is None:
            raise _RecordsCorrupt(f"record {index} has a null header key", h_key_start)
        h_value, pos = _read_bytes(data, pos, limit, "header value")
        try:
            key_text = h_key.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _RecordsCorrupt(
                f"record {index} header key is not UTF-8: {exc}", h_key_start
            ) from None
        headers.append(Header(key=key_text, value=h_value))
    return tuple(headers), pos


def _check_section_end(pos: int, end: int, count: int) -> None:
    if pos != end:
        raise _RecordsCorrupt(
            f"record count mismatch: {end - pos} bytes remain after the {count} declared records",
            pos,
        )


def _decode_records_general(
    data: bytes, count: int, base_offset: int, base_timestamp: int, log_append_time: int | None
) -> list[Record]:
    """Every record of a records section through :func:`_decode_record` (the reference
    :func:`_decode_records` must agree with, byte for byte and error for error)."""
    records: list[Record] = []
    pos = 0
    for index in range(count):
        record, pos = _decode_record(
            data, pos, index, count, base_offset, base_timestamp, log_append_time)
        records.append(record)
    _check_section_end(pos, len(data), count)
    return records


def _decode_records(
    data: bytes, count: int, base_offset: int, base_timestamp: int, log_append_time: int | None,
    record_type: type[Any] = Record, tail: tuple[Any, ...] = (), section: slice | None = None,
) -> list[Any]:
    """:func:`_decode_records_general`'s result, with a fast path per record.

    Each record is built as ``record_type`` from a :class:`Record`'s five fields
    followed by ``tail`` (a Record when both are left out), so a caller that wants
    its own record type (the consumer's ConsumerRecord) builds it once instead of
    converting every Record.

    The common record (every varint before the headers at most two bytes, which
    covers lengths and deltas under 8192) is read inline: no call per field, a
    length read as one or two byte lookups; headers, when there are any, go
    through the general :func:`_decode_headers`. Anything else (a longer varint,
    a negative length other than a null key/value, a length that does not add up,
    the end of the data) raises :class:`_Unusual` before anything is kept,
    and that record is decoded again from its first byte by
    :func:`_decode_record`, which accepts it or raises the precise error. The fast
    path accepts only what the general one accepts, with the same result.
    """
    records: list[Any] = []
    append = records.append
    new_record = tuple.__new__
    # In place (``section``: where the records lie in a larger ``data``, e.g. a whole Fetch
    # answer): only the fast path runs, every record bounded by ``section.stop``; anything
    # else raises _InPlaceGaveUp, and the caller decodes a copy of the section instead.
    in_place = section is not None
    pos = 0 if section is None else section.start
    end = len(data) if section is None else section.stop
    no_headers: tuple[Header, ...] = ()
    for index in range(count):
        start = pos
        try:
            # Zigzag varints: raw value v encodes (v >> 1) ^ -(v & 1); an odd raw value
            # of a length is negative (1 means -1: null key or value).
            raw = data[pos]
            if raw < 0x80:
                pos += 1
            else:
                high = data[pos + 1]
                if high >= 0x80:
                    raise _Unusual
                raw = (raw & 0x7F) | (high << 7)
                pos += 2
            if raw & 1 or raw == 0:
                raise _Unusual
            limit = pos + (raw >> 1)
            if limit > end:
                raise _Unusual
            pos += 1  # record attributes int8: unused in v2
            raw = data[pos]
            if raw < 0x80:
                pos += 1
            else:
                high = data[pos + 1]
                if high >= 0x80:
                    raise _Unusual
                raw = (raw & 0x7F) | (high << 7)
                pos += 2
            timestamp_delta = (raw >> 1) ^ -(raw & 1)
            raw = data[pos]
            if raw < 0x80:
                pos += 1
            else:
                high = data[pos + 1]
                if high >= 0x80:
                    raise _Unusual
                raw = (raw & 0x7F) | (high << 7)
                pos += 2
            offset_delta = (raw >> 1) ^ -(raw & 1)
            raw = data[pos]
            if raw == 1:
                key = None
                pos += 1
            else:
                if raw < 0x80:
                    pos += 1
                else:
                    high = data[pos + 1]
                    if high >= 0x80:
                        raise _Unusual
                    raw = (raw & 0x7F) | (high << 7)
                    pos += 2
                if raw & 1:
                    raise _Unusual
                stop = pos + (raw >> 1)
                if stop > limit:
                    raise _Unusual
                key = data[pos:stop]
                pos = stop
            raw = data[pos]
            if raw == 1:
                value = None
                pos += 1
            else:
                if raw < 0x80:
                    pos += 1
                else:
                    high = data[pos + 1]
                    if high >= 0x80:
                        raise _Unusual
                    raw = (raw & 0x7F) | (high << 7)
                    pos += 2
                if raw & 1:
                    raise _Unusual
                stop = pos + (raw >> 1)
                if stop > limit:
                    raise _Unusual
                value = data[pos:stop]
                pos = stop
            if data[pos] == 0:  # no headers: the common case
                headers = no_headers
                pos += 1
            else:  # the general header decoder: its errors are the general path's
                headers, pos = _decode_headers(data, pos, limit, index)
            if pos != limit:
                raise _Unusual
            fields = (base_offset + offset_delta,
                      log_append_time if log_append_time is not None
                      else base_timestamp + timestamp_delta,
                      key, value, headers)
            append(new_record(record_type, fields + tail))  # cheaper than (*fields, *tail)
        except _RecordsCorrupt:  # from _decode_headers: bounded by the record, not the batch
            if in_place:
                raise _InPlaceGaveUp from None
            raise
        except (_Unusual, IndexError):
            if in_place:
                raise _InPlaceGaveUp from None
            record, pos = _decode_record(
                data, start, index, count, base_offset, base_timestamp, log_append_time)
            append(new_record(record_type, record + tail))
    if in_place and pos != end:
        raise _InPlaceGaveUp
    _check_section_end(pos, end, count)
    return records


_R = TypeVar("_R", bound=tuple[Any, ...])


def decode_batch_records(
    header: BatchHeader, record_type: type[_R], tail: tuple[Any, ...] = (), *,
    max_decompressed_bytes: int = codecs.MAX_DECOMPRESSED_BYTES,
) -> list[_R]:
    """Check ``header``'s batch (CRC included) and decode its records as ``record_type``.

    ``record_type`` is a NamedTuple whose first five fields are a :class:`Record`'s
    (offset, timestamp, key, value, headers); ``tail`` holds the values of the rest,
    the same for every record of the batch. Errors are :func:`decode_batches`'.
    """
    return _decode_section(header, max_decompressed_bytes, record_type, tail)[1]


def _decode_one(
    header: BatchHeader, max_decompressed_bytes: int
) -> DecodedBatch:
    (
        base_offset, batch_length, epoch, magic, crc, attributes, last_offset_delta,
        base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, count,
    ), records = _decode_section(header, max_decompressed_bytes, Record, ())
    codec = _compression_of(attributes, header.position)
    timestamp_type = (
        TimestampType.LOG_APPEND_TIME if attributes & TIMESTAMP_TYPE_MASK
        else TimestampType.CREATE_TIME
    )
    return DecodedBatch(
        position=header.position,
        base_offset=base_offset,
        batch_length=batch_length,
        partition_leader_epoch=epoch,
        magic=magic,
        crc=crc,
        attributes=attributes,
        compression=codec,
        timestamp_type=timestamp_type,
        is_transactional=bool(attributes & TRANSACTIONAL_FLAG_MASK),
        is_control=bool(attributes & CONTROL_FLAG_MASK),
        has_delete_horizon=bool(attributes & DELETE_HORIZON_FLAG_MASK),
        last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        record_count=count,
        records=tuple(records),
    )


def _decode_section(
    header: BatchHeader, max_decompressed_bytes: int, record_type: type[Any],
    tail: tuple[Any, ...],
) -> tuple[tuple[Any, ...], list[Any]]:
    """The batch's unpacked header fields and its records, built as ``record_type``."""
    header.validate()
    position = header.position
    (
        base_offset, batch_length, epoch, magic, crc, attributes, last_offset_delta,
        base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, count,
    ) = _HEADER.unpack_from(header._buf, position)
    codec = _compression_of(attributes, position)
    if count < 0:
        raise CorruptRecordError(
            f"batch at byte {position} has negative record count {count}", position=position
        )
    log_append_time = max_timestamp if attributes & TIMESTAMP_TYPE_MASK else None
    view = header._buf
    owner = view.obj
    if codec is CompressionType.NONE and type(owner) is bytes and view.nbytes == len(owner):
        # The batch lies in a bytes object (a Fetch answer): keys and values are sliced
        # straight out of it, without a copy of the section first.
        try:
            records = _decode_records(
                owner, count, base_offset, base_timestamp, log_append_time, record_type, tail,
                slice(position + RECORDS_OFFSET, position + LOG_OVERHEAD + batch_length))
            return (base_offset, batch_length, epoch, magic, crc, attributes,
                    last_offset_delta, base_timestamp, max_timestamp, producer_id,
                    producer_epoch, base_sequence, count), records
        except _InPlaceGaveUp:
            pass
    section = header.records_view
    if codec is CompressionType.NONE:
        data = bytes(section)
        where = "records section"
        section_start = position + RECORDS_OFFSET
    else:
        if codec is CompressionType.SNAPPY:
            raise UnsupportedCompressionTypeError(
                f"batch at byte {position} (base offset {base_offset}) is SNAPPY-compressed, which "
                "kraftlog cannot decompress (use gzip, lz4 or zstd)", position=position)
        try:
            data = codecs.decompress(codec, section, max_size=max_decompressed_bytes)
        except KraftlogError as exc:
            raise CorruptRecordError(
                f"batch at byte {position} (base offset {base_offset}): {exc}", position=position
            ) from exc
        where = f"decompressed {codec.name} records section"
        section_start = -1
    try:
        records = _decode_records(data, count, base_offset, base_timestamp, log_append_time,
                                  record_type, tail)
    except _RecordsCorrupt as exc:
        if section_start >= 0:
            at = section_start + exc.offset
            raise CorruptRecordError(
                f"batch at byte {position} (base offset {base_offset}): {exc} "
                f"(at byte {at})",
                position=at,
            ) from None
        raise CorruptRecordError(
            f"batch at byte {position} (base offset {base_offset}): {exc} "
            f"(at byte {exc.offset} of the {where})",
            position=position,
        ) from None
    return (base_offset, batch_length, epoch, magic, crc, attributes, last_offset_delta,
            base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence,
            count), records


def decode_batches(
    buf: bytes | bytearray | memoryview,
    *,
    allow_truncated_tail: bool = False,
    max_decompressed_bytes: int = codecs.MAX_DECOMPRESSED_BYTES,
) -> list[DecodedBatch]:
    """Fully decode every batch in ``buf`` (CRC-checked), records included.

    Raises CorruptRecordError naming the byte for any malformed batch or record,
    a record count that does not match the records section, a decompression
    failure, or (unless ``allow_truncated_tail``, for fetch responses cut at
    max bytes the way Kafka consumers tolerate) trailing bytes that are not a
    whole batch.
    """
    view = _as_view(buf)
    decoded: list[DecodedBatch] = []
    end = 0
    for header in iter_batches(view):
        decoded.append(_decode_one(header, max_decompressed_bytes))
        end = header.position + header.size_in_bytes
    if end != len(view) and not allow_truncated_tail:
        raise CorruptRecordError(
            f"incomplete batch at byte {end}: {len(view) - end} trailing bytes are not a whole batch",
            position=end,
        )
    return decoded
