"""Log compaction for ``cleanup.policy=compact``: Kafka's Cleaner and the LogCleanerManager's arithmetic.

Owned here: deciding whether a log is due for cleaning (:func:`cleanable_range`:
the dirty ratio, ``min.compaction.lag.ms``, ``max.compaction.lag.ms``, the
high watermark and the active segment bound the cleanable section) and the
cleaning itself (:func:`clean`): an offset map ``key -> last offset`` over the
dirty section, then a rewrite of every segment from the log start to the end of
the cleanable section keeping, per key, only its latest record.

Kafka's rules kept (docs "Log Compaction", KIP-58, KIP-354, KIP-534):

* Offsets never change. A retained record keeps its offset; a rewritten batch
  keeps its base offset, last offset (lastOffsetDelta), leader epoch and
  producer id/epoch/base sequence, so producer state rebuilt from headers is
  unchanged; its CRC and record count are recomputed. Compressed batches are
  decompressed, filtered and recompressed with the same codec.
* Records with a null key are dropped (Kafka refuses them at produce time on a
  compacted topic; a broker that does not still gets them removed here).
* A tombstone (null value) that is the latest for its key is kept; the first
  cleaning that keeps it stamps its batch with a delete horizon (KIP-534:
  attribute bit 6, baseTimestamp = now + ``delete.retention.ms``, record
  timestamp deltas re-encoded against it so record timestamps do not change).
  A later cleaning at or after the horizon drops it.
* Control batches (transaction markers) are kept as they are.
* The last batch of each producer id in the cleaned section is kept, as an
  empty batch if all its records go (Kafka's "retain empty batch" rule), so a
  restart can rebuild that producer's state.

One departure, so that replication keeps working: offsets of removed batches
are not left as holes. Each run of removed batches with one leader epoch
becomes a single empty filler batch (61 bytes, no producer) spanning exactly
those offsets. Followers (``Log.append_as_follower``) require batches to be
contiguous, and a replica that catches up through a cleaned section must be
able to append it; consumers skip empty batches. The cleaned segments thus
cover exactly the offsets they covered before, which also makes a ``.swap``
recovery replace every segment of its group.

Segments are rewritten in groups: consecutive cleaned outputs go into one new
segment while it stays within ``segment.bytes`` (by cleaned size, so a log of
small cleaned segments shrinks to few), each group swapped in through
:meth:`kraftlog.storage.log.Log.replace_segments` (``.cleaned`` -> ``.swap`` ->
delete old -> rename; a crash at any step is finished by ``Log.open``).

A cleaning has three steps so that the costly middle one can leave the thread
that owns the log: :func:`plan_clean` (owner's thread: a snapshot of the
segments), :func:`prepare_clean` (any thread: reads those files through its own
descriptors, builds the map, writes ``.cleaned`` files, touches no log object),
:func:`commit_clean` (owner's thread: checks the planned segments are still
there unchanged, else abandons, then swaps). :func:`clean` runs all three.

Callers: :mod:`kraftlog.broker.log_cleaner` (which owns the
``cleaner-offset-checkpoint`` files and the schedule). Pure core: no clock
(``now_ms`` is passed in), no threads of its own.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from kraftlog.errors import ConfigError, CorruptRecordError, KraftlogError
from kraftlog.storage import batch_header as bh
from kraftlog.storage import compression as codecs
from kraftlog.storage import log as log_mod
from kraftlog.storage import segment as segment_mod
from kraftlog.storage import varint

logger = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1

DEFAULT_MIN_CLEANABLE_DIRTY_RATIO = 0.5
DEFAULT_DELETE_RETENTION_MS = 24 * 60 * 60 * 1000
DEFAULT_MIN_COMPACTION_LAG_MS = 0
DEFAULT_MAX_COMPACTION_LAG_MS = LONG_MAX
DEFAULT_DEDUPE_BUFFER_SIZE = 128 * 1024 * 1024
OFFSET_MAP_ENTRY_BYTES = 24
"""Kafka's SkimpyOffsetMap entry: a 16-byte MD5 of the key plus an 8-byte offset."""
DEDUPE_BUFFER_LOAD_FACTOR = 0.9
"""``log.cleaner.io.buffer.load.factor``."""

# Topic config name, broker default name (Kafka's synonyms).
_RATIO_KEYS = ("min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio")
_DELETE_RETENTION_KEYS = ("delete.retention.ms", "log.cleaner.delete.retention.ms")
_MIN_LAG_KEYS = ("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms")
_MAX_LAG_KEYS = ("max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms")
_POLICY_KEYS = ("cleanup.policy", "log.cleanup.policy")
DEDUPE_BUFFER_SIZE_KEY = "log.cleaner.dedupe.buffer.size"

_CODEC_MASK = bh.COMPRESSION_CODEC_MASK
_TIMESTAMP_TYPE_MASK = bh.TIMESTAMP_TYPE_MASK
_CONTROL_MASK = bh.CONTROL_FLAG_MASK
_HORIZON_MASK = bh.DELETE_HORIZON_FLAG_MASK


# ====================================================================== configuration

def is_compacted(policy: str | Sequence[str] | None) -> bool:
    """True when a ``cleanup.policy`` value (``compact``, ``compact,delete``, a list) contains ``compact``."""
    if policy is None:
        return False
    items = policy.split(",") if isinstance(policy, str) else policy
    return any(item.strip().lower() == "compact" for item in items)


def cleanup_policy(props: Mapping[str, str]) -> str | None:
    """The ``cleanup.policy`` of a topic's configs, else the broker's ``log.cleanup.policy``, else None."""
    for key in _POLICY_KEYS:
        if key in props:
            return props[key]
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class CleanerConfig:
    """The compaction settings of one log (topic configs over the broker's ``log.cleaner.*`` defaults)."""

    min_cleanable_dirty_ratio: float = DEFAULT_MIN_CLEANABLE_DIRTY_RATIO
    """``min.cleanable.dirty.ratio``: clean once dirty bytes / cleanable bytes reach this."""

    delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS
    """``delete.retention.ms`` (ms): how long a tombstone survives after the cleaning that first kept it."""

    min_compaction_lag_ms: int = DEFAULT_MIN_COMPACTION_LAG_MS
    """``min.compaction.lag.ms`` (ms): a segment whose newest record is younger stays uncleaned."""

    max_compaction_lag_ms: int = DEFAULT_MAX_COMPACTION_LAG_MS
    """``max.compaction.lag.ms`` (ms): a dirty segment older than this is cleaned whatever the ratio."""

    max_offset_map_keys: int = int(DEFAULT_DEDUPE_BUFFER_SIZE / OFFSET_MAP_ENTRY_BYTES * DEDUPE_BUFFER_LOAD_FACTOR)
    """Keys one cleaning may map (``log.cleaner.dedupe.buffer.size`` / 24 bytes x 0.9); the
    dirty section is cut at a segment boundary when more keys would be needed."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise ConfigError(f"min.cleanable.dirty.ratio must be in [0, 1], got {self.min_cleanable_dirty_ratio}")
        if self.delete_retention_ms < 0:
            raise ConfigError(f"delete.retention.ms must be >= 0, got {self.delete_retention_ms}")
        if self.min_compaction_lag_ms < 0:
            raise ConfigError(f"min.compaction.lag.ms must be >= 0, got {self.min_compaction_lag_ms}")
        if self.max_compaction_lag_ms < 1:
            raise ConfigError(f"max.compaction.lag.ms must be >= 1, got {self.max_compaction_lag_ms}")
        if self.max_offset_map_keys < 1:
            raise ConfigError(f"{DEDUPE_BUFFER_SIZE_KEY} leaves room for no key ({self.max_offset_map_keys})")

    @classmethod
    def from_properties(cls, props: Mapping[str, str | int | float]) -> CleanerConfig:
        """Build from Kafka names: topic names (``delete.retention.ms``) win over broker defaults
        (``log.cleaner.delete.retention.ms``). Raises ConfigError naming a bad key."""
        values: dict[str, int | float] = {}
        ratio = _first(props, _RATIO_KEYS)
        if ratio is not None:
            key, raw = ratio
            try:
                values["min_cleanable_dirty_ratio"] = float(str(raw).strip())
            except ValueError:
                raise ConfigError(f"config {key} must be a number, got {raw!r}") from None
        for field, keys in (("delete_retention_ms", _DELETE_RETENTION_KEYS),
                            ("min_compaction_lag_ms", _MIN_LAG_KEYS),
                            ("max_compaction_lag_ms", _MAX_LAG_KEYS)):
            found = _first(props, keys)
            if found is not None:
                values[field] = _parse_int(*found)
        if DEDUPE_BUFFER_SIZE_KEY in props:
            size = _parse_int(DEDUPE_BUFFER_SIZE_KEY, props[DEDUPE_BUFFER_SIZE_KEY])
            values["max_offset_map_keys"] = int(size / OFFSET_MAP_ENTRY_BYTES * DEDUPE_BUFFER_LOAD_FACTOR)
        return cls(**values)  # type: ignore[arg-type]


def _first(props: Mapping[str, str | int | float], keys: Sequence[str]) -> tuple[str, str | int | float] | None:
    for key in keys:
        if key in props:
            return key, props[key]
    return None


def _parse_int(key: str, raw: str | int | float) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    try:
        return int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"config {key} must be an integer, got {raw!r}") from None


# ====================================================================== what to clean

@dataclass(frozen=True, slots=True, kw_only=True)
class CleanableRange:
    """Kafka's LogToClean: where the clean and dirty sections of a log are and how big."""

    first_dirty_offset: int
    """Where the last cleaning ended (the checkpoint), clamped into the log."""
    end_offset: int
    """First uncleanable offset, on a segment boundary: the base of the first segment that is
    active, reaches the high watermark, or is younger than ``min.compaction.lag.ms``."""
    clean_bytes: int
    dirty_bytes: int
    max_compaction_lag_exceeded: bool
    """The first dirty segment's first batch is older than ``max.compaction.lag.ms``."""

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    def is_due(self, config: CleanerConfig, *, now_ms: int, delete_horizon_ms: int | None = None) -> bool:
        """Clean now? Dirty bytes and a ratio at the threshold (or an overdue segment), or a known
        tombstone horizon that has passed (KIP-534: such a log is cleaned whatever its ratio)."""
        if self.dirty_bytes > 0 and (self.dirty_ratio >= config.min_cleanable_dirty_ratio
                                     or self.max_compaction_lag_exceeded):
            return True
        return (delete_horizon_ms is not None and now_ms >= delete_horizon_ms
                and self.clean_bytes + self.dirty_bytes > 0)


def _upper(segments: Sequence[segment_mod.LogSegment], i: int) -> int:
    return segments[i + 1].base_offset if i + 1 < len(segments) else segments[i].next_offset


def first_dirty_offset(log: log_mod.Log, checkpoint_offset: int | None) -> int:
    """The checkpointed end of the clean section, reset to the log start when it is outside the log
    (Kafka's cleanableOffsets: a truncated or deleted-from log starts over)."""
    if checkpoint_offset is None or not log.log_start_offset <= checkpoint_offset <= log.log_end_offset:
        if checkpoint_offset is not None:
            logger.warning("log=%s event=reset_cleaner_checkpoint checkpoint=%d log_start_offset=%d "
                           "log_end_offset=%d", log.directory, checkpoint_offset, log.log_start_offset,
                           log.log_end_offset)
        return log.log_start_offset
    return checkpoint_offset


def cleanable_range(log: log_mod.Log, *, checkpoint_offset: int | None, high_watermark: int, now_ms: int,
                    config: CleanerConfig) -> CleanableRange:
    """Measure a log's clean and dirty sections (Kafka's LogCleanerManager.cleanableOffsets + LogToClean).

    Only whole inactive segments wholly below ``high_watermark`` are
    cleanable; from the first dirty one on, a segment whose newest timestamp
    is within ``min.compaction.lag.ms`` of ``now_ms`` ends the section too.
    """
    segments = log.segment_handles()
    first_dirty = first_dirty_offset(log, checkpoint_offset)
    end = segments[0].base_offset
    clean_bytes = dirty_bytes = 0
    overdue = False
    seen_dirty = False
    for i, seg in enumerate(segments[:-1]):
        upper = _upper(segments, i)
        if upper > high_watermark:
            break
        dirty = upper > first_dirty
        if dirty:
            if config.min_compaction_lag_ms > 0 and seg.size > 0 \
                    and now_ms - seg.largest_timestamp < config.min_compaction_lag_ms:
                break
            if not seen_dirty:
                seen_dirty = True
                first_ts = seg.rolling_based_timestamp if seg.rolling_based_timestamp is not None else seg.created_ms
                overdue = seg.size > 0 and now_ms - first_ts > config.max_compaction_lag_ms
            dirty_bytes += seg.size
        else:
            clean_bytes += seg.size
        end = upper
    return CleanableRange(first_dirty_offset=first_dirty, end_offset=end, clean_bytes=clean_bytes, dirty_bytes=dirty_bytes,
                          max_compaction_lag_exceeded=overdue)


# ====================================================================== records

_Rec = tuple[int, int, int, int, int, int, bytes | None, bool]
"""One record of a (decompressed) records section, as the cleaner needs it: (start, end,
position of its attributes byte, position after its timestamp delta, timestamp delta,
offset delta, key, value is null). A tuple: one is built per record."""
_START: Final = 0
_END: Final = 1
_ATTR_AT: Final = 2
_AFTER_TS: Final = 3
_TS_DELTA: Final = 4
_OFFSET_DELTA: Final = 5
_KEY: Final = 6
_TOMBSTONE: Final = 7


def _parse_records(data: bytes, count: int) -> list[_Rec]:
    """Walk ``count`` records; ValueError/IndexError if malformed.

    Every varint goes through :func:`varint.decode_varlong` (its one- and two-byte fast
    path covers nearly all of them). The records were validated when they were produced:
    this walk only finds where each field lies, it does not recheck widths.
    """
    out: list[_Rec] = []
    append = out.append
    read = varint.decode_varlong
    pos = 0
    end = len(data)
    for _ in range(count):
        start = pos
        length, pos = read(data, pos)
        limit = pos + length
        if length <= 0 or limit > end:
            raise ValueError(f"record at byte {start} has length {length} ({end - pos} bytes remain)")
        attr_at = pos
        timestamp_delta, after_ts = read(data, pos + 1)
        offset_delta, pos = read(data, after_ts)
        key_len, pos = read(data, pos)
        key: bytes | None = None
        if key_len >= 0:
            key = data[pos:pos + key_len]
            pos += key_len
        value_len, pos = read(data, pos)
        if value_len > 0 and pos + value_len > limit:
            raise ValueError(f"record at byte {start} overruns its length {length}")
        append((start, limit, attr_at, after_ts, timestamp_delta, offset_delta, key, value_len < 0))
        pos = limit
    if pos != end:
        raise ValueError(f"{end - pos} bytes follow the {count} declared records")
    return out


class _Batch:
    """One batch of a segment: its header fields and where its bytes are (plain attributes: one per batch)."""

    __slots__ = (
        "attributes",
        "base_offset",
        "base_sequence",
        "base_timestamp",
        "codec",
        "count",
        "crc",
        "epoch",
        "is_control",
        "last_offset",
        "last_offset_delta",
        "max_timestamp",
        "position",
        "producer_epoch",
        "producer_id",
        "size",
    )

    base_offset: int
    epoch: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    count: int
    crc: int

    def __init__(self, buf: bytes, position: int) -> None:
        (self.base_offset, length, self.epoch, magic, self.crc, self.attributes, self.last_offset_delta,
         self.base_timestamp, self.max_timestamp, self.producer_id, self.producer_epoch, self.base_sequence,
         self.count) = bh.HEADER.unpack_from(buf, position)
        if magic != bh.MAGIC or length < bh.MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batch with magic {magic}, length {length}", position=position)
        self.position = position
        self.size = length + bh.LOG_OVERHEAD
        self.last_offset = self.base_offset + self.last_offset_delta
        self.codec = self.attributes & _CODEC_MASK
        self.is_control = bool(self.attributes & _CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & _HORIZON_MASK)

    def records(self, buf: bytes) -> tuple[bytes, list[_Rec]] | None:
        """The records section (decompressed) and its records; None for a codec kraftlog cannot read."""
        end = self.position + self.size
        if bh.BatchHeader(buf, self.position).compute_crc() != self.crc:
            raise CorruptRecordError(f"batch at base offset {self.base_offset} fails its CRC", position=self.position)
        section = buf[self.position + bh.RECORDS_OFFSET:end]
        codec = self.codec
        if codec == codecs.CompressionType.SNAPPY:
            return None
        data = section if codec == codecs.CompressionType.NONE else codecs.decompress(codec, section)
        try:
            return data, _parse_records(data, self.count)
        except (ValueError, IndexError) as exc:
            raise CorruptRecordError(f"batch at base offset {self.base_offset}: {exc}",
                                     position=self.position) from None


def _batches(buf: bytes) -> Iterator[_Batch]:
    position = 0
    while position < len(buf):
        batch = _Batch(buf, position)
        yield batch
        position += batch.size


class CleaningAbandoned(KraftlogError):
    """The log changed under a cleaning prepared off its owner's thread (a segment was deleted,
    truncated or replaced); nothing was swapped in. Not a fault: the next pass tries again."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentRef:
    """An inactive segment as the owner's thread saw it when it planned a cleaning."""

    base_offset: int
    upper: int
    """The next segment's base offset: the segment holds offsets in [base_offset, upper)."""
    size: int
    path: str


def _segment_bytes(ref: SegmentRef) -> bytes:
    """The segment's bytes, read through a descriptor of our own (a deletion meanwhile leaves it readable)."""
    if ref.size == 0:
        return b""
    try:
        with open(ref.path, "rb") as f:
            data = f.read(ref.size)
    except FileNotFoundError:
        raise CleaningAbandoned(f"{ref.path} was deleted before the cleaner read it") from None
    if len(data) != ref.size:
        raise CleaningAbandoned(f"{ref.path} is {len(data)} bytes, not the {ref.size} planned (truncated)")
    return data


def filler_batch(base_offset: int, last_offset: int, epoch: int) -> bytes:
    """An empty batch covering [base_offset, last_offset]: the offsets of removed batches (no producer)."""
    return bh.encode_batch(b"", base_offset=base_offset, partition_leader_epoch=epoch, attributes=0,
                           last_offset_delta=last_offset - base_offset, base_timestamp=bh.NO_TIMESTAMP,
                           max_timestamp=bh.NO_TIMESTAMP, producer_id=bh.NO_PRODUCER_ID,
                           producer_epoch=bh.NO_PRODUCER_EPOCH, base_sequence=bh.NO_SEQUENCE,
                           record_count=0)


# ====================================================================== cleaning

@dataclass(frozen=True, slots=True, kw_only=True)
class CleanResult:
    """What one :func:`clean` did (Kafka's CleanerStats, the parts we report)."""

    first_dirty_offset: int
    end_offset: int
    """The new checkpoint: everything below is clean."""
    bytes_read: int
    bytes_written: int
    records_read: int
    records_retained: int
    map_keys: int
    segments_before: int
    segments_after: int
    earliest_delete_horizon_ms: int | None
    """The soonest delete horizon of a tombstone still in the log; a cleaning at or after it removes it."""


@dataclass(slots=True)
class _Stats:
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    horizon: int | None = None


# An output piece: kept batch bytes, or a removed batch (base, last, epoch) to fill.
_Piece = bytes | tuple[int, int, int]


def _build_offset_map(segments: Sequence[SegmentRef], first_dirty: int,
                      max_keys: int) -> tuple[dict[bytes, int], int, dict[int, int], int]:
    """Key -> last offset over the dirty section; the producers' last batch offsets over all segments.

    Returns (map, end offset actually mapped, producer id -> last offset, bytes
    read). The map stops at a segment boundary once ``max_keys`` would be
    exceeded (but always covers at least the first dirty segment).
    """
    offset_map: dict[bytes, int] = {}
    last_of_producer: dict[int, int] = {}
    end = first_dirty
    bytes_read = 0
    for ref in segments:
        buf = _segment_bytes(ref)
        bytes_read += len(buf)
        upper = ref.upper
        dirty = upper > first_dirty
        seg_map: dict[bytes, int] = {}
        for batch in _batches(buf):
            if batch.producer_id >= 0:
                last_of_producer[batch.producer_id] = batch.last_offset
            if not dirty or batch.is_control or batch.last_offset < first_dirty:
                continue
            parsed = batch.records(buf)
            if parsed is None:
                continue
            base = batch.base_offset
            for rec in parsed[1]:
                key = rec[_KEY]
                if key is not None:
                    seg_map[key] = base + rec[_OFFSET_DELTA]
        if dirty:
            if offset_map and len(offset_map) + sum(1 for key in seg_map if key not in offset_map) > max_keys:
                break
            offset_map.update(seg_map)
            end = upper
    return offset_map, end, last_of_producer, bytes_read


class _Survivors:
    """The offsets the offset map points at, sorted: in the dirty section only they can survive."""

    __slots__ = ("first_dirty", "offsets")

    def __init__(self, offset_map: Mapping[bytes, int], first_dirty: int) -> None:
        self.offsets = sorted(offset_map.values())
        self.first_dirty = first_dirty

    def none_in(self, batch: _Batch) -> bool:
        """True when the batch lies in the dirty section and no mapped offset falls in it."""
        if batch.base_offset < self.first_dirty:
            return False
        i = bisect.bisect_left(self.offsets, batch.base_offset)
        return i == len(self.offsets) or self.offsets[i] > batch.last_offset


def _filter_batch(buf: bytes, batch: _Batch, offset_map: Mapping[bytes, int], survivors: _Survivors, *,
                  now_ms: int, delete_retention_ms: int, keep_empty: bool, stats: _Stats) -> bytes | None:
    """The batch with only its retained records (its own bytes when all stay); None when it goes."""
    original = buf[batch.position:batch.position + batch.size]
    if batch.is_control or batch.codec == codecs.CompressionType.SNAPPY:
        return original  # markers stay; SNAPPY cannot be looked inside: kept whole
    if survivors.none_in(batch):
        # Every record of a dirty batch is superseded (or has a null key): no need to decode it.
        stats.records_read += batch.count
        return _empty_copy(batch) if keep_empty else None
    parsed = batch.records(buf)
    if parsed is None:
        return original
    data, records = parsed
    stats.records_read += len(records)
    horizon_set = batch.has_delete_horizon
    horizon = batch.base_timestamp if horizon_set else now_ms + delete_retention_ms
    kept: list[_Rec] = []
    kept_tombstone = False
    base = batch.base_offset
    for rec in records:
        key = rec[_KEY]
        if key is None:
            continue
        latest = offset_map.get(key)
        if latest is not None and base + rec[_OFFSET_DELTA] < latest:
            continue
        if rec[_TOMBSTONE]:
            if horizon_set and now_ms >= horizon:
                continue
            kept_tombstone = True
        kept.append(rec)
    stats.records_retained += len(kept)
    if kept_tombstone:
        stats.horizon = horizon if stats.horizon is None else min(stats.horizon, horizon)
    stamp_horizon = kept_tombstone and not horizon_set
    if len(kept) == len(records) and not stamp_horizon:
        return original
    if not kept and not keep_empty:
        return None
    attributes = batch.attributes
    base_timestamp = batch.base_timestamp
    if stamp_horizon:
        attributes |= _HORIZON_MASK
        base_timestamp = horizon
    log_append_time = bool(attributes & _TIMESTAMP_TYPE_MASK)
    parts: list[bytes] = []
    max_timestamp = bh.NO_TIMESTAMP
    for rec in kept:
        timestamp = batch.base_timestamp + rec[_TS_DELTA]
        if timestamp > max_timestamp:
            max_timestamp = timestamp
        if stamp_horizon:
            body = data[rec[_ATTR_AT]:rec[_ATTR_AT] + 1] + varint.encode_varlong(timestamp - base_timestamp) \
                + data[rec[_AFTER_TS]:rec[_END]]
            parts.append(varint.encode_varint(len(body)))
            parts.append(body)
        else:
            parts.append(data[rec[_START]:rec[_END]])
    if log_append_time or not kept:
        max_timestamp = batch.max_timestamp
    section = b"".join(parts)
    codec = batch.codec
    if not kept:
        # An empty batch has no records section to compress.
        attributes &= ~_CODEC_MASK
    elif codec != codecs.CompressionType.NONE:
        section = codecs.compress(codecs.CompressionType(codec), section)
    return bh.encode_batch(section, base_offset=base, partition_leader_epoch=batch.epoch,
                           attributes=attributes, last_offset_delta=batch.last_offset_delta,
                           base_timestamp=base_timestamp, max_timestamp=max_timestamp,
                           producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
                           base_sequence=batch.base_sequence, record_count=len(kept))


def _empty_copy(batch: _Batch) -> bytes:
    """The batch with no records, its header otherwise kept (a producer's last batch)."""
    return bh.encode_batch(b"", base_offset=batch.base_offset, partition_leader_epoch=batch.epoch,
                           attributes=batch.attributes & ~_CODEC_MASK,
                           last_offset_delta=batch.last_offset_delta,
                           base_timestamp=batch.base_timestamp, max_timestamp=batch.max_timestamp,
                           producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
                           base_sequence=batch.base_sequence, record_count=0)


def _clean_segment(ref: SegmentRef, offset_map: Mapping[bytes, int], survivors: _Survivors,
                   last_of_producer: Mapping[int, int], *, now_ms: int, delete_retention_ms: int,
                   stats: _Stats) -> tuple[list[_Piece], int, bool]:
    """The segment's output pieces, their byte size (fillers counted) and whether anything changed."""
    buf = _segment_bytes(ref)
    pieces: list[_Piece] = []
    size = 0
    changed = False
    for batch in _batches(buf):
        keep_empty = batch.producer_id >= 0 and last_of_producer.get(batch.producer_id) == batch.last_offset
        out = _filter_batch(buf, batch, offset_map, survivors, now_ms=now_ms, delete_retention_ms=delete_retention_ms,
                            keep_empty=keep_empty, stats=stats)
        if out is None:
            previous = pieces[-1] if pieces else None
            if not (isinstance(previous, tuple) and previous[2] == batch.epoch):
                size += bh.HEADER_SIZE  # a new filler batch starts (the run's merge rule of _assemble)
            pieces.append((batch.base_offset, batch.last_offset, batch.epoch))
            changed = True
        else:
            pieces.append(out)
            size += len(out)
            changed = changed or len(out) != batch.size or out != buf[batch.position:batch.position + batch.size]
    return pieces, size, changed


def _continues_run(before: Sequence[_Piece], after: Sequence[_Piece]) -> bool:
    """True when ``after`` starts with a removed batch that :func:`_assemble` merges into ``before``'s last filler."""
    if not before or not after:
        return False
    last, first = before[-1], after[0]
    return (isinstance(last, tuple) and isinstance(first, tuple) and last[2] == first[2]
            and last[1] + 1 == first[0])


def _assemble(pieces: Sequence[_Piece]) -> bytes:
    """Kept batches in order, each run of removed batches of one epoch as one filler batch."""
    out: list[bytes] = []
    run: tuple[int, int, int] | None = None
    for piece in pieces:
        if isinstance(piece, tuple):
            base, last, epoch = piece
            if run is not None and run[2] == epoch and run[1] + 1 == base:
                run = (run[0], last, epoch)
                continue
            if run is not None:
                out.append(filler_batch(*run))
            run = piece
            continue
        if run is not None:
            out.append(filler_batch(*run))
            run = None
        out.append(piece)
    if run is not None:
        out.append(filler_batch(*run))
    return b"".join(out)


def _write_cleaned(directory: str, base_offset: int, data: bytes) -> str:
    """Write and fsync ``<base>.log.cleaned``; returns its path."""
    path = os.path.join(directory, segment_mod.file_name(base_offset, segment_mod.LOG_SUFFIX)
                        + segment_mod.CLEANED_SUFFIX)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)
    return path


@dataclass(frozen=True, slots=True, kw_only=True)
class CleanPlan:
    """What one cleaning covers, taken on the log owner's thread (:func:`plan_clean`).

    Everything :func:`prepare_clean` needs is plain data; ``handles`` are the
    live segment objects, kept only so :func:`commit_clean` can check that the
    log still holds exactly them. The preparing thread never touches them.
    """

    directory: str
    segments: tuple[SegmentRef, ...]
    handles: tuple[segment_mod.LogSegment, ...]
    first_dirty_offset: int
    segment_bytes: int
    now_ms: int
    config: CleanerConfig


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedGroup:
    """Consecutive segments that become one; ``cleaned_path`` None when they stay as they are."""

    first: int
    """Index of the group's first segment in the plan."""
    count: int
    cleaned_path: str | None
    size: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedClean:
    """The ``.cleaned`` files written for a plan, waiting for :func:`commit_clean` (or :func:`abort_clean`)."""

    plan: CleanPlan
    groups: tuple[PreparedGroup, ...]
    end_offset: int
    bytes_read: int
    records_read: int
    records_retained: int
    map_keys: int
    earliest_delete_horizon_ms: int | None


def plan_clean(log: log_mod.Log, cleanable: CleanableRange, *, now_ms: int, config: CleanerConfig) -> CleanPlan:
    """Snapshot the inactive segments up to ``cleanable.end_offset`` (on the log owner's thread)."""
    segments = log.segment_handles()
    refs: list[SegmentRef] = []
    handles: list[segment_mod.LogSegment] = []
    for i, seg in enumerate(segments[:-1]):
        upper = _upper(segments, i)
        if upper > cleanable.end_offset:
            break
        refs.append(SegmentRef(base_offset=seg.base_offset, upper=upper, size=seg.size, path=seg.log_path))
        handles.append(seg)
    return CleanPlan(directory=log.directory, segments=tuple(refs), handles=tuple(handles),
                     first_dirty_offset=cleanable.first_dirty_offset, segment_bytes=log.config.segment_bytes,
                     now_ms=now_ms, config=config)


def prepare_clean(plan: CleanPlan) -> PreparedClean:
    """Build the offset map and write the ``.cleaned`` file of every group that changes (Kafka's Cleaner.doClean).

    Safe on a worker thread: it reads the planned files through descriptors of
    its own and writes only ``<base>.log.cleaned`` files; the log is not
    touched. The map covers [first dirty, end) and stops at a segment boundary
    past ``max_offset_map_keys``; the segments below the mapped end are
    rewritten in groups that stay within ``segment.bytes`` by cleaned size.
    Raises CleaningAbandoned when a planned file went away or shrank,
    CorruptRecordError for an unreadable batch; no ``.cleaned`` file is left then.
    """
    config = plan.config
    offset_map, end, last_of_producer, map_bytes_read = _build_offset_map(
        plan.segments, plan.first_dirty_offset, config.max_offset_map_keys)
    stats = _Stats()
    survivors = _Survivors(offset_map, plan.first_dirty_offset)
    groups: list[PreparedGroup] = []
    start = 0
    pieces: list[_Piece] = []
    size = 0
    changed = False

    def close_group(stop: int) -> None:
        if stop == start:
            return
        path: str | None = None
        if changed:
            data = _assemble(pieces)
            path = _write_cleaned(plan.directory, plan.segments[start].base_offset, data)
            stats.bytes_written += len(data)
            written = len(data)
        else:
            written = sum(ref.size for ref in plan.segments[start:stop])
            stats.bytes_written += written
        groups.append(PreparedGroup(first=start, count=stop - start, cleaned_path=path, size=written))

    try:
        for i, ref in enumerate(plan.segments):
            if ref.upper > end:
                close_group(i)
                break
            seg_pieces, seg_size, seg_changed = _clean_segment(
                ref, offset_map, survivors, last_of_producer, now_ms=plan.now_ms,
                delete_retention_ms=config.delete_retention_ms, stats=stats)
            # Joining the group, its first removed run may extend the group's last filler.
            joined_size = seg_size - (bh.HEADER_SIZE if i > start and _continues_run(pieces, seg_pieces) else 0)
            if i > start and (size + joined_size > plan.segment_bytes
                              or ref.upper - plan.segments[start].base_offset > INT32_MAX):
                close_group(i)
                start, pieces, size, changed = i, [], 0, False
                joined_size = seg_size
            # Two segments made one is a change even when each kept every byte.
            changed = changed or seg_changed or i > start
            pieces.extend(seg_pieces)
            size += joined_size
        else:
            close_group(len(plan.segments))
    except BaseException:
        _remove_cleaned(groups)
        raise
    return PreparedClean(plan=plan, groups=tuple(groups), end_offset=end, bytes_read=map_bytes_read,
                         records_read=stats.records_read, records_retained=stats.records_retained,
                         map_keys=len(offset_map), earliest_delete_horizon_ms=stats.horizon)


def _remove_cleaned(groups: Iterable[PreparedGroup]) -> None:
    for group in groups:
        if group.cleaned_path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(group.cleaned_path)


def abort_clean(prepared: PreparedClean) -> None:
    """Delete the ``.cleaned`` files of a prepared cleaning that will not be committed."""
    _remove_cleaned(prepared.groups)


def commit_clean(log: log_mod.Log, prepared: PreparedClean, *, now_ms: int,
                 on_step: Callable[[str], None] | None = None) -> CleanResult:
    """Swap every prepared group in with :meth:`Log.replace_segments` (on the log owner's thread).

    First checks that the log still holds every planned segment, unchanged in
    size and place; if not, deletes the ``.cleaned`` files and raises
    CleaningAbandoned (nothing swapped, the checkpoint must not move).
    ``on_step`` is passed on to the swaps (crash tests).
    """
    plan = prepared.plan
    live = log.segment_handles()
    index = {id(seg): i for i, seg in enumerate(live)}
    first = index.get(id(plan.handles[0])) if plan.handles else None
    intact = not plan.handles or (first is not None and first + len(plan.handles) < len(live) and all(
        live[first + k] is seg and seg.size == ref.size
        for k, (seg, ref) in enumerate(zip(plan.handles, plan.segments, strict=True))))
    if not intact:
        abort_clean(prepared)
        raise CleaningAbandoned(f"{log.directory}: segments changed while the cleaning was prepared")
    before = len(live)
    for n, group in enumerate(prepared.groups):
        if group.cleaned_path is None:
            continue
        try:
            log.replace_segments(group.cleaned_path, plan.handles[group.first:group.first + group.count],
                                 now_ms=now_ms, on_step=on_step)
        except KraftlogError:
            _remove_cleaned(prepared.groups[n:])
            raise
    result = CleanResult(first_dirty_offset=plan.first_dirty_offset, end_offset=prepared.end_offset,
                         bytes_read=prepared.bytes_read, bytes_written=sum(g.size for g in prepared.groups),
                         records_read=prepared.records_read, records_retained=prepared.records_retained,
                         map_keys=prepared.map_keys, segments_before=before,
                         segments_after=len(log.segment_handles()),
                         earliest_delete_horizon_ms=prepared.earliest_delete_horizon_ms)
    logger.info("log=%s event=cleaned first_dirty_offset=%d end_offset=%d bytes_read=%d bytes_written=%d "
                "records_read=%d records_retained=%d map_keys=%d segments_before=%d segments_after=%d",
                log.directory, result.first_dirty_offset, result.end_offset, result.bytes_read,
                result.bytes_written, result.records_read, result.records_retained, result.map_keys,
                result.segments_before, result.segments_after)
    return result


def clean(log: log_mod.Log, cleanable: CleanableRange, *, now_ms: int, config: CleanerConfig,
          on_step: Callable[[str], None] | None = None) -> CleanResult:
    """Plan, prepare and commit a cleaning in one go, on the log owner's thread.

    See :func:`prepare_clean` and :func:`commit_clean`; a failure leaves no
    ``.cleaned`` file behind unless the process dies (``Log.open`` removes it).
    """
    return commit_clean(log, prepare_clean(plan_clean(log, cleanable, now_ms=now_ms, config=config)),
                        now_ms=now_ms, on_step=on_step)
