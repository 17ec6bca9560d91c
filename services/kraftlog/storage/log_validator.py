"""Kafka's LogValidator: what a leader checks in a client's batches before it appends them.

Owns the record-level validation of a produce (Kafka's ``LogValidator.validateMessagesAndAssignOffsets``,
``validateBatch``, ``validateRecord``, ``validateTimestamp``; KIP-32, KIP-98, KIP-467).
:func:`validate_batches` walks every batch of one partition's data and refuses the whole of it
when anything is wrong; nothing of a refused produce may be appended. Per batch:

* the frame and header: whole batches only, batchLength >= 49, magic 2, CRC-32C, a known codec
  (CORRUPT_MESSAGE); SNAPPY, which kraftlog cannot decompress, is UNSUPPORTED_COMPRESSION_TYPE;
* recordCount >= 1 and lastOffsetDelta == recordCount - 1; no control batch, no transactional
  batch (kraftlog has no transaction coordinator); a producer id of -1 or >= 0, and with a
  producer id, a producer epoch and base sequence >= 0 (INVALID_RECORD);
* the records section, decompressed when the codec is not NONE, at most ``max.message.bytes``
  once decompressed (MESSAGE_TOO_LARGE); a codec's bytes that do not decompress are
  CORRUPT_MESSAGE;
* every record parsed (INVALID_RECORD, with the record's index): its length varint > 0 and
  inside the section, its offset delta equal to its index (0..n-1), its key/value lengths -1
  or >= 0 and inside the record, its header count >= 0, each header key non-null UTF-8, every
  varint at most 5 bytes (10 for the timestamp delta) and in range, the fields using exactly
  the declared length, and exactly recordCount records filling the section;
* keys: every record of a compacted topic has one (INVALID_RECORD per keyless record);
* timestamps, for a topic with ``message.timestamp.type=CreateTime``: a batch flagged
  LogAppendTime is refused, each record's timestamp (other than -1) must lie in
  [now - ``message.timestamp.before.max.ms``, now + ``message.timestamp.after.max.ms``]
  (INVALID_TIMESTAMP per record), and the header's maxTimestamp must be the records' largest
  (INVALID_RECORD: the time index and retention trust it; Kafka rewrites it, a header-only
  leader cannot). With LogAppendTime the leader overwrites the timestamps, so none is checked.

Everything the validator accepts, :func:`kraftlog.storage.record_batch.decode_batches`
decodes: a consumer can never get stuck on an accepted batch (a property test holds the two
together).

Cost: the data path pays one pass over each record's varints, with no object per record:
the common 1- and 2-byte varints are read inline, keys and values are skipped, not sliced;
a longer varint goes through :mod:`kraftlog.storage.varint`. Timestamps are checked on the
batch's smallest and largest only; the per-record errors are worked out again only for a
batch that fails.

Called by :meth:`kraftlog.broker.partition.Partition.append_records_to_leader` for
client produces only; a follower's append (replication) stays header-only. Pure: no I/O, no
clock (``now_ms`` comes in).
"""

from __future__ import annotations

from dataclasses import dataclass

import crc32c

from kraftlog.error_codes import ErrorCode
from kraftlog.errors import CorruptRecordError
from kraftlog.storage import batch_header as bh
from kraftlog.storage import compression as codecs
from kraftlog.storage import varint

LONG_MAX = (1 << 63) - 1
DEFAULT_TIMESTAMP_BEFORE_MAX_MS = LONG_MAX
"""``log.message.timestamp.before.max.ms``: Kafka's default, no lower bound."""
DEFAULT_TIMESTAMP_AFTER_MAX_MS = LONG_MAX
"""``log.message.timestamp.after.max.ms``: Kafka 3.6's default, no upper bound."""
DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024 + 12
"""``max.message.bytes`` (Kafka's 1048588)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidationConfig:
    """The topic's settings the validator applies; each names its Kafka property."""

    timestamp_type: bh.TimestampType = bh.TimestampType.CREATE_TIME
    """``message.timestamp.type``."""
    timestamp_before_max_ms: int = DEFAULT_TIMESTAMP_BEFORE_MAX_MS
    """``message.timestamp.before.max.ms`` (ms): how far a CreateTime timestamp may lie in the past."""
    timestamp_after_max_ms: int = DEFAULT_TIMESTAMP_AFTER_MAX_MS
    """``message.timestamp.after.max.ms`` (ms): how far it may lie in the future."""
    compacted: bool = False
    """``cleanup.policy`` contains ``compact``: every record needs a key."""
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    """``max.message.bytes`` (bytes): the largest decompressed records section accepted."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordError:
    """One refused record (KIP-467's ProduceResponse ``record_errors`` entry)."""

    batch_index: int
    """The record's index inside its batch (KIP-467 calls it batch_index)."""
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Rejection:
    """Why a partition's batches were refused: the error code, one line, and the records at fault."""

    error: ErrorCode
    message: str
    record_errors: tuple[RecordError, ...] = ()


class _Bad(Exception):
    """Internal: record ``index`` of the batch being scanned is malformed."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index
        self.message = message


def validate_batches(buf: bytes | bytearray | memoryview, config: ValidationConfig, *,
                     now_ms: int) -> Rejection | None:
    """Check a client's batches for one partition; None when they may be appended.

    Never raises for bad bytes: every problem comes back as a :class:`Rejection` naming
    the batch (its index and byte position) and, for record problems, the records.
    """
    view = bh.as_view(buf)
    owner = view.obj
    # Records are read from the buffer that owns them (bytes indexing is the fast path);
    # anything else is copied once.
    if type(owner) in (bytes, bytearray) and view.nbytes == len(owner):  # type: ignore[arg-type]
        data: bytes | bytearray = owner  # type: ignore[assignment]
    else:
        data = bytes(view)
    end = len(data)
    if end == 0:
        return Rejection(error=ErrorCode.CORRUPT_MESSAGE, message="no record batches")
    pos = 0
    batch = 0
    while pos < end:
        rejection, size = _validate_batch(data, pos, end, batch, config, now_ms)
        if rejection is not None:
            return rejection
        pos += size
        batch += 1
    return None


def _where(batch: int, pos: int) -> str:
    return f"batch {batch} (at byte {pos})"


def _validate_batch(data: bytes | bytearray, pos: int, end: int, batch: int,
                    config: ValidationConfig, now_ms: int) -> tuple[Rejection | None, int]:
    """One batch at ``pos``: (the rejection or None, its size in bytes)."""
    where = _where(batch, pos)
    remaining = end - pos
    if remaining < bh.HEADER_SIZE:
        return _corrupt(f"{where} is partial: {remaining} bytes left, a batch header needs "
                        f"{bh.HEADER_SIZE}"), 0
    (_base, length, _epoch, magic, crc, attributes, last_offset_delta, base_timestamp,
     max_timestamp, producer_id, producer_epoch, base_sequence, count) = bh.HEADER.unpack_from(data, pos)
    if length < bh.MIN_BATCH_LENGTH:
        return _corrupt(f"{where} has invalid batch length {length} (minimum {bh.MIN_BATCH_LENGTH})"), 0
    size = bh.LOG_OVERHEAD + length
    if size > remaining:
        return _corrupt(f"{where} is partial: {size} bytes declared, {remaining} present"), 0
    if magic != bh.MAGIC:
        return _corrupt(f"{where} has unsupported magic {magic} (expected {bh.MAGIC})"), 0
    stop = pos + size
    computed = crc32c.crc32c(memoryview(data)[pos + bh.ATTRIBUTES_OFFSET : stop])
    if computed != crc:
        return _corrupt(f"{where} fails its CRC: stored 0x{crc:08x}, computed 0x{computed:08x}"), 0
    codec_id = attributes & bh.COMPRESSION_CODEC_MASK
    if codec_id > max(codecs.CompressionType):
        return _corrupt(f"{where} has unknown compression codec id {codec_id}"), 0
    codec = codecs.CompressionType(codec_id)
    if codec is codecs.CompressionType.SNAPPY:
        return Rejection(error=ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                         message=f"{where} is SNAPPY-compressed, which kraftlog cannot decompress "
                                 "(use gzip, lz4 or zstd)"), 0
    header_problem = _header_problem(attributes, last_offset_delta, count, producer_id,
                                     producer_epoch, base_sequence)
    if header_problem is not None:
        return Rejection(error=ErrorCode.INVALID_RECORD, message=f"{where}: {header_problem}"), 0
    log_append_time = config.timestamp_type is bh.TimestampType.LOG_APPEND_TIME
    if not log_append_time and attributes & bh.TIMESTAMP_TYPE_MASK:
        # Kafka: a producer may not set LogAppendTime on a CreateTime topic; every record is at fault.
        reason = "the producer set timestamp type LogAppendTime on a CreateTime topic"
        return Rejection(error=ErrorCode.INVALID_TIMESTAMP, message=f"{where}: {reason}",
                         record_errors=tuple(RecordError(batch_index=i, message=reason)
                                             for i in range(count))), 0
    if codec is codecs.CompressionType.NONE:
        section, start, section_end = data, pos + bh.RECORDS_OFFSET, stop
    else:
        try:
            section = codecs.decompress(codec, memoryview(data)[pos + bh.RECORDS_OFFSET : stop],
                                        max_size=config.max_message_bytes)
        except codecs.DecompressedTooLargeError:
            return Rejection(error=ErrorCode.MESSAGE_TOO_LARGE,
                             message=f"{where}: its {codec.name} records decompress to more than "
                                     f"max.message.bytes={config.max_message_bytes}"), 0
        except CorruptRecordError as exc:
            return _corrupt(f"{where}: {exc}"), 0
        start, section_end = 0, len(section)
    try:
        min_delta, max_delta, keyless = _scan_records(section, start, section_end, count,
                                                      config.compacted)
    except _Bad as bad:
        return Rejection(error=ErrorCode.INVALID_RECORD, message=f"{where}: {bad.message}",
                         record_errors=(RecordError(batch_index=bad.index, message=bad.message),)), 0
    if keyless:
        reason = "a compacted topic cannot accept a record without a key"
        return Rejection(error=ErrorCode.INVALID_RECORD,
                         message=f"{where}: {len(keyless)} of its {count} records have no key "
                                 f"(record {keyless[0]} first); {reason}",
                         record_errors=tuple(RecordError(batch_index=i, message=reason)
                                             for i in keyless)), 0
    if log_append_time:
        return None, size
    low = now_ms - config.timestamp_before_max_ms
    high = now_ms + config.timestamp_after_max_ms
    if base_timestamp + min_delta < low or base_timestamp + max_delta > high:
        errors = _timestamp_errors(section, start, count, base_timestamp, low, high)
        if errors:
            return Rejection(error=ErrorCode.INVALID_TIMESTAMP,
                             message=f"{where}: {len(errors)} of its {count} records have a "
                                     f"timestamp outside [{low}, {high}]",
                             record_errors=tuple(errors)), 0
    if base_timestamp + max_delta != max_timestamp:
        return Rejection(error=ErrorCode.INVALID_RECORD,
                         message=f"{where}: maxTimestamp {max_timestamp} in its header, but its "
                                 f"records' largest timestamp is {base_timestamp + max_delta}"), 0
    return None, size


def _corrupt(message: str) -> Rejection:
    return Rejection(error=ErrorCode.CORRUPT_MESSAGE, message=message)


def _header_problem(attributes: int, last_offset_delta: int, count: int, producer_id: int,
                    producer_epoch: int, base_sequence: int) -> str | None:
    """Kafka's validateBatch for a client's batch, or None."""
    if count <= 0:
        return f"invalid record count {count}"
    if last_offset_delta != count - 1:
        return (f"record count {count} and last offset delta {last_offset_delta} disagree "
                "(a batch's offsets run 0..count-1)")
    if attributes & bh.CONTROL_FLAG_MASK:
        return "clients may not write control batches"
    if attributes & bh.TRANSACTIONAL_FLAG_MASK:
        return "transactional batches are not supported (kraftlog has no transaction coordinator)"
    if producer_id < bh.NO_PRODUCER_ID:
        return f"invalid producer id {producer_id}"
    if producer_id >= 0 and (producer_epoch < 0 or base_sequence < 0):
        return (f"producer id {producer_id} needs a producer epoch and base sequence >= 0, "
                f"got epoch {producer_epoch} and sequence {base_sequence}")
    return None


def _slow_varint(data: bytes | bytearray, pos: int, index: int, what: str, *,
                 long: bool = False) -> tuple[int, int]:
    """A varint the inline path does not take (3+ bytes, or near the end): value, next pos."""
    try:
        return (varint.decode_varlong if long else varint.decode_varint)(data, pos)  # type: ignore[arg-type]
    except ValueError as exc:
        raise _Bad(index, f"record {index} has a bad {what}: {exc}") from None


def _scan_records(data: bytes | bytearray, pos: int, end: int, count: int,
                  compacted: bool) -> tuple[int, int, list[int]]:
    """Check the ``count`` records in ``data[pos:end]``; return the smallest and largest
    timestamp delta and the indexes of keyless records (only when ``compacted``).

    One pass, nothing built per record. Each varint is read inline when it takes one or two
    bytes (zigzag: raw ``r`` stands for ``(r >> 1) ^ -(r & 1)``), else by
    :func:`_slow_varint`: :func:`kraftlog.storage.varint.decode_varint`'s fast path,
    copied for speed (the reader is varint.py; see its docstring). Reads may run past a record's end into the bytes after it (never
    past ``len(data)``, which raises IndexError): every record must end exactly where its
    length says, and before ``end``, so such a read always ends in a refusal.
    """
    min_delta = LONG_MAX
    max_delta = -LONG_MAX
    keyless: list[int] = []
    index = 0
    try:
        for index in range(count):
            if pos >= end:
                raise _Bad(index, f"the records section ends after {index} of {count} records")
            # length (varint, > 0): an even raw value r > 0 stands for r >> 1
            raw = data[pos]
            if raw < 0x80:
                pos += 1
            else:
                high = data[pos + 1]
                if high < 0x80:
                    raw = (raw & 0x7F) | (high << 7)
                    pos += 2
                else:
                    value, pos = _slow_varint(data, pos, index, "length")
                    raw = (value << 1) ^ (value >> 63)
            limit = pos + (raw >> 1)
            if raw & 1 or raw == 0 or limit > end:
                length = (raw >> 1) ^ -(raw & 1)
                raise _Bad(index, f"record {index} has invalid length {length} "
                                  f"({end - pos} bytes remain in the section)")
            # attributes (int8, unused in v2), then the timestamp delta (varlong)
            raw = data[pos + 1]
            if raw < 0x80:
                pos += 2
                delta = (raw >> 1) ^ -(raw & 1)
            else:
                high = data[pos + 2]
                if high < 0x80:
                    raw = (raw & 0x7F) | (high << 7)
                    pos += 3
                    delta = (raw >> 1) ^ -(raw & 1)
                else:
                    delta, pos = _slow_varint(data, pos + 1, index, "timestamp delta", long=True)
            if delta < min_delta:
                min_delta = delta
            if delta > max_delta:
                max_delta = delta
            # offset delta (varint): must be the record's index, whose zigzag is index * 2
            raw = data[pos]
            if raw < 0x80:
                pos += 1
            else:
                high = data[pos + 1]
                if high < 0x80:
                    raw = (raw & 0x7F) | (high << 7)
                    pos += 2
                else:
                    value, pos = _slow_varint(data, pos, index, "offset delta")
                    raw = (value << 1) ^ (value >> 63)
            if raw != index + index:
                raise _Bad(index, f"record {index} has offset delta {(raw >> 1) ^ -(raw & 1)}, "
                                  f"expected {index}")
            # key: a length varint (-1 = null: zigzag 1) and the bytes, skipped
            raw = data[pos]
            if raw < 0x80:
                pos += 1
            else:
                high = data[pos + 1]
                if high < 0x80:
                    raw = (raw & 0x7F) | (high << 7)
                    pos += 2
                else:
                    value, pos = _slow_varint(data, pos, index, "key length")
                    raw = (value << 1) ^ (value >> 63)
            if raw == 1:
                if compacted:
                    keyless.append(index)
            elif raw & 1:
                raise _Bad(index, f"record {index} has invalid key length {(raw >> 1) ^ -1}")
            else:
                pos += raw >> 1
            # value: the same
            raw = data[pos]
            if raw < 0x80:
                pos += 1
            else:
                high = data[pos + 1]
                if high < 0x80:
                    raw = (raw & 0x7F) | (high << 7)
                    pos += 2
                else:
                    value, pos = _slow_varint(data, pos, index, "value length")
                    raw = (value << 1) ^ (value >> 63)
            if not raw & 1:
                pos += raw >> 1
            elif raw != 1:
                raise _Bad(index, f"record {index} has invalid value length {(raw >> 1) ^ -1}")
            # headers: the count (0: none, the common case), then (key, value) pairs
            if pos >= limit:
                raise _Bad(index, f"record {index}'s key and value run past the end of the record")
            if data[pos] == 0:
                pos += 1
            else:
                pos = _scan_headers(data, pos, limit, index)
            if pos != limit:
                raise _Bad(index, f"record {index}'s fields do not fill its declared length exactly "
                                  f"({pos - limit:+d} bytes)")
    except IndexError:
        raise _Bad(index, f"record {index} is truncated: the data ends inside it") from None
    if pos != end:
        raise _Bad(count - 1, f"{end - pos} bytes follow the {count} records the batch declares")
    return min_delta, max_delta, keyless


def _scan_headers(data: bytes | bytearray, pos: int, limit: int, index: int) -> int:
    """Record ``index``'s headers from ``pos`` (its header count); the position after them."""
    header_count, pos = _slow_varint(data, pos, index, "header count")
    if header_count < 0:
        raise _Bad(index, f"record {index} has invalid header count {header_count}")
    for number in range(header_count):
        if pos >= limit:
            raise _Bad(index, f"record {index} ends inside header {number} of {header_count}")
        key_size, pos = _slow_varint(data, pos, index, "header key length")
        if key_size < 0:
            raise _Bad(index, f"record {index} header {number} has invalid key length {key_size}")
        key_end = pos + key_size
        if key_end > limit:
            raise _Bad(index, f"record {index} header {number}'s key runs past the end of the record")
        try:
            bytes(data[pos:key_end]).decode("utf-8")
        except UnicodeDecodeError:
            raise _Bad(index, f"record {index} header {number}'s key is not UTF-8") from None
        pos = key_end
        value_size, pos = _slow_varint(data, pos, index, "header value length")
        if value_size < -1:
            raise _Bad(index, f"record {index} header {number} has invalid value length {value_size}")
        if value_size > 0:
            pos += value_size
            if pos > limit:
                raise _Bad(index, f"record {index} header {number}'s value runs past the end of "
                                  "the record")
    return pos


def _timestamp_errors(data: bytes | bytearray, pos: int, count: int, base_timestamp: int,
                      low: int, high: int) -> list[RecordError]:
    """The records whose timestamp (not -1) lies outside [low, high] (the slow path, for a batch
    whose smallest or largest timestamp is out of bounds; the records were already checked)."""
    errors: list[RecordError] = []
    for index in range(count):
        length, body = varint.decode_varint(data, pos)  # type: ignore[arg-type]
        delta, _ = varint.decode_varlong(data, body + 1)  # type: ignore[arg-type]
        timestamp = base_timestamp + delta
        if timestamp != bh.NO_TIMESTAMP and not low <= timestamp <= high:
            errors.append(RecordError(batch_index=index,
                                      message=f"timestamp {timestamp} of record {index} is out of "
                                              f"range [{low}, {high}]"))
        pos = body + length
    return errors
