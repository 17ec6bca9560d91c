"""Per-log settings, named and defaulted as Kafka's LogConfig / server.properties.

Owned here: the values that shape one partition's segmented log (segment size
and age, index density, retention, flush policy) and their validation. The
:class:`kraftlog.storage.log.Log` reads them; brokers and the raft layer build
them from ``server.properties`` via :meth:`LogConfig.from_properties`, and the
metadata log uses :meth:`LogConfig.for_metadata_log` (fsync after every append,
no retention by time or size: KIP-630 snapshots bound that log instead).

This module does no I/O and never reads the clock; every duration is a plain
integer with its unit in the name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from kraftlog.errors import ConfigError
from kraftlog.storage.batch_header import TimestampType

INT32_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1

DEFAULT_SEGMENT_BYTES = 1024 * 1024 * 1024
DEFAULT_SEGMENT_MS = 7 * 24 * 60 * 60 * 1000
DEFAULT_SEGMENT_INDEX_BYTES = 10 * 1024 * 1024
DEFAULT_INDEX_INTERVAL_BYTES = 4096
DEFAULT_RETENTION_MS = 7 * 24 * 60 * 60 * 1000
# Smallest segment Kafka accepts is LegacyRecord.RECORD_OVERHEAD_V0 (14 bytes);
# anything smaller could not hold one batch header.
MIN_SEGMENT_BYTES = 14
# An index needs room for at least one entry (offset index entry = 8 bytes,
# time index entry = 12 bytes).
MIN_SEGMENT_INDEX_BYTES = 12

# Kafka property name -> LogConfig field. Broker-level ``log.*`` names and the
# topic-level names (``segment.bytes`` ...) are both accepted, like Kafka's
# topic-config override of the broker default.
_PROPERTY_FIELDS: dict[str, str] = {
    "log.segment.bytes": "segment_bytes",
    "segment.bytes": "segment_bytes",
    "log.roll.ms": "segment_ms",
    "segment.ms": "segment_ms",
    "log.index.size.max.bytes": "segment_index_bytes",
    "segment.index.bytes": "segment_index_bytes",
    "log.index.interval.bytes": "index_interval_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "log.retention.ms": "retention_ms",
    "retention.ms": "retention_ms",
    "log.retention.bytes": "retention_bytes",
    "retention.bytes": "retention_bytes",
    "log.flush.interval.messages": "flush_interval_messages",
    "flush.messages": "flush_interval_messages",
    "log.flush.interval.ms": "flush_interval_ms",
    "flush.ms": "flush_interval_ms",
    "log.message.timestamp.before.max.ms": "message_timestamp_before_max_ms",
    "message.timestamp.before.max.ms": "message_timestamp_before_max_ms",
    "log.message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
    "message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
}
# Kafka's names for message.timestamp.type values.
_TIMESTAMP_TYPE_NAMES: dict[str, TimestampType] = {
    "CreateTime": TimestampType.CREATE_TIME,
    "LogAppendTime": TimestampType.LOG_APPEND_TIME,
}
# log.roll.hours / log.retention.{minutes,hours} are Kafka's coarser spellings;
# the *.ms form wins when both are given (as in KafkaConfig).
_COARSE_FIELDS: dict[str, tuple[str, int]] = {
    "log.roll.hours": ("segment_ms", 60 * 60 * 1000),
    "log.retention.minutes": ("retention_ms", 60 * 1000),
    "log.retention.hours": ("retention_ms", 60 * 60 * 1000),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class LogConfig:
    """Settings of one partition log. Every field names its Kafka property and unit."""

    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    """``log.segment.bytes`` (bytes): roll when an append would push the active segment past this."""

    segment_ms: int = DEFAULT_SEGMENT_MS
    """``log.roll.ms`` (ms): roll when the active segment's first batch is older than this."""

    segment_index_bytes: int = DEFAULT_SEGMENT_INDEX_BYTES
    """``log.index.size.max.bytes`` (bytes): size limit of each index file; a full index rolls."""

    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    """``log.index.interval.bytes`` (bytes): log bytes between two sparse index entries."""

    retention_ms: int = DEFAULT_RETENTION_MS
    """``log.retention.ms`` (ms): delete segments whose newest timestamp is older; -1 = keep forever."""

    retention_bytes: int = -1
    """``log.retention.bytes`` (bytes): delete oldest segments while the log is larger; -1 = no limit."""

    flush_interval_messages: int = LONG_MAX
    """``log.flush.interval.messages`` (offsets): fsync once this many offsets are unflushed; 1 = every append."""

    flush_interval_ms: int | None = None
    """``log.flush.interval.ms`` (ms): fsync when the last flush is older than this; None = never by time."""

    message_timestamp_type: TimestampType = TimestampType.CREATE_TIME
    """``log.message.timestamp.type``: ``CreateTime`` keeps the producer's timestamps;
    ``LogAppendTime`` makes the leader overwrite each batch's maxTimestamp with its clock."""

    message_timestamp_before_max_ms: int = LONG_MAX
    """``log.message.timestamp.before.max.ms`` (ms): with CreateTime, how far before the leader's
    clock a produced record's timestamp may lie (KIP-937; Kafka's default: no limit)."""

    message_timestamp_after_max_ms: int = LONG_MAX
    """``log.message.timestamp.after.max.ms`` (ms): how far after it (Kafka 3.6's default: no limit)."""

    def __post_init__(self) -> None:
        if self.segment_bytes < MIN_SEGMENT_BYTES or self.segment_bytes > INT32_MAX:
            raise ConfigError(
                f"log.segment.bytes must be in [{MIN_SEGMENT_BYTES}, {INT32_MAX}], got {self.segment_bytes}"
            )
        if self.segment_ms < 1:
            raise ConfigError(f"log.roll.ms must be >= 1, got {self.segment_ms}")
        if self.segment_index_bytes < MIN_SEGMENT_INDEX_BYTES or self.segment_index_bytes > INT32_MAX:
            raise ConfigError(
                f"log.index.size.max.bytes must be in [{MIN_SEGMENT_INDEX_BYTES}, {INT32_MAX}], "
                f"got {self.segment_index_bytes}"
            )
        if self.index_interval_bytes < 0 or self.index_interval_bytes > INT32_MAX:
            raise ConfigError(f"log.index.interval.bytes must be in [0, {INT32_MAX}], got {self.index_interval_bytes}")
        if self.retention_ms < -1:
            raise ConfigError(f"log.retention.ms must be >= -1, got {self.retention_ms}")
        if self.retention_bytes < -1:
            raise ConfigError(f"log.retention.bytes must be >= -1, got {self.retention_bytes}")
        if self.flush_interval_messages < 1:
            raise ConfigError(f"log.flush.interval.messages must be >= 1, got {self.flush_interval_messages}")
        if self.flush_interval_ms is not None and self.flush_interval_ms < 0:
            raise ConfigError(f"log.flush.interval.ms must be >= 0, got {self.flush_interval_ms}")
        for name, value in (("log.message.timestamp.before.max.ms", self.message_timestamp_before_max_ms),
                            ("log.message.timestamp.after.max.ms", self.message_timestamp_after_max_ms)):
            if not 0 <= value <= LONG_MAX:
                raise ConfigError(f"{name} must be in [0, {LONG_MAX}], got {value}")
        if not isinstance(self.message_timestamp_type, TimestampType):
            raise ConfigError(
                f"log.message.timestamp.type must be a TimestampType, got {self.message_timestamp_type!r}")

    @property
    def flush_every_append(self) -> bool:
        """True in metadata-log mode: every append is fsynced before it returns."""
        return self.flush_interval_messages == 1

    @classmethod
    def for_metadata_log(cls, **overrides: int | None) -> LogConfig:
        """The ``__cluster_metadata`` log: fsync every append, never delete by time or size.

        KRaft bounds the metadata log with snapshots (KIP-630) and advances its
        log start offset explicitly; ``metadata.log.segment.bytes`` and
        ``metadata.log.segment.ms`` may still be passed as ``segment_bytes`` /
        ``segment_ms``.
        """
        base = cls(flush_interval_messages=1, retention_ms=-1, retention_bytes=-1)
        return dataclasses.replace(base, **overrides)  # type: ignore[arg-type]

    @classmethod
    def from_properties(cls, props: Mapping[str, str | int]) -> LogConfig:
        """Build from Kafka property names (``log.segment.bytes=...``); unknown keys are ignored.

        Raises ConfigError naming the key for a value that is not an integer.
        """
        return cls(**_values_from(props))  # type: ignore[arg-type]

    def with_overrides(self, props: Mapping[str, str | int]) -> LogConfig:
        """This config with the settings ``props`` names replaced (a topic's configs over the
        broker's defaults, as Kafka builds a log's LogConfig); ConfigError for a bad value."""
        values = _values_from(props)
        return dataclasses.replace(self, **values) if values else self  # type: ignore[arg-type]


def _values_from(props: Mapping[str, str | int]) -> dict[str, int | TimestampType | None]:
    """The LogConfig fields ``props`` sets, parsed."""
    values: dict[str, int | TimestampType | None] = {}
    for key in ("log.message.timestamp.type", "message.timestamp.type"):
        if key in props:
            name = str(props[key]).strip()
            if name not in _TIMESTAMP_TYPE_NAMES:
                raise ConfigError(
                    f"config {key} must be one of {', '.join(_TIMESTAMP_TYPE_NAMES)}, got {props[key]!r}")
            values["message_timestamp_type"] = _TIMESTAMP_TYPE_NAMES[name]
    for key, (field, unit_ms) in _COARSE_FIELDS.items():
        if key in props:
            values[field] = _parse_int(key, props[key]) * unit_ms
    for key, field in _PROPERTY_FIELDS.items():
        if key in props:
            raw = props[key]
            if field == "flush_interval_ms" and str(raw).strip().lower() in ("", "null"):
                values[field] = None
            else:
                values[field] = _parse_int(key, raw)
    return values


def _parse_int(key: str, raw: str | int) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    try:
        return int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"config {key} must be an integer, got {raw!r}") from None
