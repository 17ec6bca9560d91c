"""Kafka RecordBatch v2 records: the codec clients, raft and tools use to build and read batches.

Owns the records inside a batch (KIP-98's v2 record: length, attributes, timestamp delta,
offset delta, key, value and KIP-82 headers, each length a zigzag varint), control
record keys, and whole-batch encoding and decoding with compression. The header in front
of the records is :mod:`kraftlog.storage.batch_header`'s: this module packs and reads it
only through that module.

Called by clients (the producer's :class:`RecordsBuilder`, the consumer's
:func:`decode_batch_records`), raft (control records, snapshots) and tools
(``kraftlog log dump``): :func:`build_batch`, :func:`decode_batches`. They encode/decode
every record with :mod:`kraftlog.storage.varint` (the common one- and two-byte varints
inline, for speed; see :func:`_decode_records`) and :mod:`kraftlog.storage.compression`.
A broker never calls it on its data path (followers, fetches and reads touch only headers): a leader's one per-record pass
over a client's batches is :mod:`kraftlog.storage.log_validator`'s, and what the validator
accepts this decoder decodes.

Bad bytes raise :class:`~kraftlog.errors.CorruptRecordError` whose message and
``position`` name the byte where the batch (or field) starts; no ``IndexError``
or ``struct.error`` escapes. Bad *arguments* to the encoder raise ``ValueError``
naming the field. Pure core: no I/O framework, no clock (callers pass ``now_ms``).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from kraftlog.errors import CorruptRecordError, KraftlogError, UnsupportedCompressionTypeError
from kraftlog.storage import batch_header as bh
from kraftlog.storage import compression as codecs
from kraftlog.storage import varint

# The encoder's argument types, named here for its callers (the same objects).
from kraftlog.storage.batch_header import TimestampType as TimestampType
from kraftlog.storage.compression import CompressionType as CompressionType

_INT16 = (-(1 << 15), (1 << 15) - 1)
_INT32 = (varint.INT32_MIN, varint.INT32_MAX)
_INT64 = (varint.INT64_MIN, varint.INT64_MAX)
_CONTROL_KEY = struct.Struct(">hh")


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
    bh.check_range(f"records[{index}].timestamp_ms", timestamp, _INT64)
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
        bh.check_range(f"records[{index}] timestamp delta", delta, _INT64)
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
                bh.check_range(f"records[{index}].timestamp_ms", timestamp, _INT64)
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
    partition_leader_epoch: int = bh.NO_PARTITION_LEADER_EPOCH,
    compression: CompressionType = CompressionType.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    now_ms: int = 0,
    producer_id: int = bh.NO_PRODUCER_ID,
    producer_epoch: int = bh.NO_PRODUCER_EPOCH,
    base_sequence: int = bh.NO_SEQUENCE,
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
    bh.check_range("base_offset", base_offset, _INT64)
    bh.check_range("record count", count, (1, varint.INT32_MAX))
    bh.check_range("last offset", base_offset + count - 1, _INT64)
    bh.check_range("partition_leader_epoch", partition_leader_epoch, _INT32)
    bh.check_range("producer_id", producer_id, _INT64)
    bh.check_range("producer_epoch", producer_epoch, _INT16)
    bh.check_range("base_sequence", base_sequence, _INT32)
    bh.check_range("now_ms", now_ms, _INT64)
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
        attributes |= bh.TRANSACTIONAL_FLAG_MASK
    if is_control:
        attributes |= bh.CONTROL_FLAG_MASK
    return bh.encode_batch(
        section, base_offset=base_offset, partition_leader_epoch=partition_leader_epoch,
        attributes=attributes, last_offset_delta=count - 1, base_timestamp=base_timestamp,
        max_timestamp=max_timestamp, producer_id=producer_id, producer_epoch=producer_epoch,
        base_sequence=base_sequence, record_count=count)


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
            bh.check_range(f"records[{index}] timestamp delta", delta, _INT64)
            parts: list[bytes] = []
            _encode_record(parts, index, RecordInput(key, value, headers, timestamp_ms), delta)
            self.parts.extend(parts)
            added = sum(len(part) for part in parts)
        self.count = index + 1
        self.size += added
        return added

    def build(self, *, base_offset: int = 0,
              partition_leader_epoch: int = bh.NO_PARTITION_LEADER_EPOCH,
              compression: CompressionType = CompressionType.NONE,
              producer_id: int = bh.NO_PRODUCER_ID, producer_epoch: int = bh.NO_PRODUCER_EPOCH,
              base_sequence: int = bh.NO_SEQUENCE) -> bytes:
        """The CreateTime batch of the records appended so far (at least one).

        Raises ValueError (naming the field) for out-of-range header values, KraftlogError
        for SNAPPY."""
        if not self.count:
            raise ValueError("a record batch needs at least one record")
        bh.check_range("base_offset", base_offset, _INT64)
        bh.check_range("last offset", base_offset + self.count - 1, _INT64)
        bh.check_range("partition_leader_epoch", partition_leader_epoch, _INT32)
        bh.check_range("producer_id", producer_id, _INT64)
        bh.check_range("producer_epoch", producer_epoch, _INT16)
        bh.check_range("base_sequence", base_sequence, _INT32)
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
        return bh.LOG_OVERHEAD + self.batch_length


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
            # varint.decode_varint's one- and two-byte case, inline for speed (the reader
            # is varint.py; see its docstring). Zigzag: raw value v encodes
            # (v >> 1) ^ -(v & 1); an odd raw value of a length is negative (1 means -1:
            # null key or value).
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
    header: bh.BatchHeader, record_type: type[_R], tail: tuple[Any, ...] = (), *,
    max_decompressed_bytes: int = codecs.MAX_DECOMPRESSED_BYTES,
) -> list[_R]:
    """Check ``header``'s batch (CRC included) and decode its records as ``record_type``.

    ``record_type`` is a NamedTuple whose first five fields are a :class:`Record`'s
    (offset, timestamp, key, value, headers); ``tail`` holds the values of the rest,
    the same for every record of the batch. Errors are :func:`decode_batches`'.
    """
    return _decode_section(header, max_decompressed_bytes, record_type, tail)[1]


def _decode_one(
    header: bh.BatchHeader, max_decompressed_bytes: int
) -> DecodedBatch:
    (
        base_offset, batch_length, epoch, magic, crc, attributes, last_offset_delta,
        base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, count,
    ), records = _decode_section(header, max_decompressed_bytes, Record, ())
    codec = bh.compression_of(attributes, header.position)
    timestamp_type = (
        TimestampType.LOG_APPEND_TIME if attributes & bh.TIMESTAMP_TYPE_MASK
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
        is_transactional=bool(attributes & bh.TRANSACTIONAL_FLAG_MASK),
        is_control=bool(attributes & bh.CONTROL_FLAG_MASK),
        has_delete_horizon=bool(attributes & bh.DELETE_HORIZON_FLAG_MASK),
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
    header: bh.BatchHeader, max_decompressed_bytes: int, record_type: type[Any],
    tail: tuple[Any, ...],
) -> tuple[tuple[Any, ...], list[Any]]:
    """The batch's unpacked header fields and its records, built as ``record_type``."""
    header.validate()
    position = header.position
    (
        base_offset, batch_length, epoch, magic, crc, attributes, last_offset_delta,
        base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, count,
    ) = bh.HEADER.unpack_from(header.buffer, position)
    codec = bh.compression_of(attributes, position)
    if count < 0:
        raise CorruptRecordError(
            f"batch at byte {position} has negative record count {count}", position=position
        )
    log_append_time = max_timestamp if attributes & bh.TIMESTAMP_TYPE_MASK else None
    view = header.buffer
    owner = view.obj
    if codec is CompressionType.NONE and type(owner) is bytes and view.nbytes == len(owner):
        # The batch lies in a bytes object (a Fetch answer): keys and values are sliced
        # straight out of it, without a copy of the section first.
        try:
            records = _decode_records(
                owner, count, base_offset, base_timestamp, log_append_time, record_type, tail,
                slice(position + bh.RECORDS_OFFSET, position + bh.LOG_OVERHEAD + batch_length))
            return (base_offset, batch_length, epoch, magic, crc, attributes,
                    last_offset_delta, base_timestamp, max_timestamp, producer_id,
                    producer_epoch, base_sequence, count), records
        except _InPlaceGaveUp:
            pass
    section = header.records_view
    if codec is CompressionType.NONE:
        data = bytes(section)
        where = "records section"
        section_start = position + bh.RECORDS_OFFSET
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
    view = bh.as_view(buf)
    decoded: list[DecodedBatch] = []
    end = 0
    for header in bh.iter_batches(view):
        decoded.append(_decode_one(header, max_decompressed_bytes))
        end = header.position + header.size_in_bytes
    if end != len(view) and not allow_truncated_tail:
        raise CorruptRecordError(
            f"incomplete batch at byte {end}: {len(view) - end} trailing bytes are not a whole batch",
            position=end,
        )
    return decoded
