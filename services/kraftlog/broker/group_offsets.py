"""Committed group offsets in ``__consumer_offsets``: placement, record formats, the cache (pure core).

Owns what Kafka's ``GroupMetadataManager`` / ``OffsetMetadataManager`` keep about
committed offsets, without the group membership protocol:

* which ``__consumer_offsets`` partition owns a group:
  ``Utils.abs(groupId.hashCode) % offsets.topic.num.partitions`` with Java's
  ``String.hashCode`` (:func:`java_string_hash`, :func:`partition_for`), so a group
  lands on the same partition as in Kafka;
* the record formats, byte for byte as Kafka writes them (non-flexible versions,
  big-endian, strings as int16 length + UTF-8)::

      key   (OffsetCommitKey, version 1):   int16 1, string group, string topic, int32 partition
      value (OffsetCommitValue, version 3): int16 3, int64 offset, int32 leaderEpoch,
                                            string metadata, int64 commitTimestamp

  A record with a null value (a tombstone) deletes the offset; log compaction
  keeps only the last record per key. Values of versions 0-3 are read (Kafka's
  older writers); keys of type 2 (GroupMetadataKey, membership) are skipped;
* :class:`OffsetCache`, one per ``__consumer_offsets`` partition this broker leads:
  group -> topic-partition -> :class:`OffsetAndMetadata`, filled by replaying the
  partition's log (:meth:`OffsetCache.replay_batches`, last value per key wins,
  tombstones delete) and kept current by acknowledged commits and expirations.
  Every entry remembers the log offset of the record it came from, and a record
  only replaces an entry written before it, so commits acknowledged out of order
  still leave the cache equal to what a reload of the log would give.

Callers: :mod:`kraftlog.broker.group_coordinator` (state and decisions) and its
driver. Must not: import asyncio, grpc, protobuf or a clock (times come in as
``now_ms``); do I/O (the driver reads the log and hands the bytes here).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from kraftlog.errors import CorruptRecordError
from kraftlog.ids import TopicPartition
from kraftlog.storage import record_batch as rb

GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
"""Kafka's internal topic of committed offsets (``Topic.GROUP_METADATA_TOPIC_NAME``)."""

DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS = 50
DEFAULT_OFFSETS_TOPIC_REPLICATION_FACTOR = 3
DEFAULT_OFFSETS_TOPIC_SEGMENT_BYTES = 100 * 1024 * 1024
DEFAULT_OFFSETS_RETENTION_MINUTES = 7 * 24 * 60
DEFAULT_OFFSETS_RETENTION_CHECK_INTERVAL_MS = 600_000
DEFAULT_OFFSETS_LOAD_BUFFER_SIZE = 5 * 1024 * 1024
DEFAULT_OFFSETS_COMMIT_TIMEOUT_MS = 5000
DEFAULT_OFFSET_METADATA_MAX_BYTES = 4096

OFFSET_COMMIT_KEY_VERSION = 1
"""The key version (record type) Kafka writes for an offset commit; 0 is the same layout."""
GROUP_METADATA_KEY_VERSION = 2
"""The key version of a group's membership record (not written here; skipped on load)."""
OFFSET_COMMIT_VALUE_VERSION = 3
NO_LEADER_EPOCH = -1
NO_OFFSET = -1
MAX_STRING_BYTES = 32767
"""A Kafka (non-compact) string carries an int16 length."""

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_INT32_MIN = -(2**31)


# -- placement -------------------------------------------------------------------------------------

def java_string_hash(value: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units,
    in signed 32-bit arithmetic."""
    units = value.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: ``Math.abs`` except that Integer.MIN_VALUE maps to 0."""
    return 0 if n == _INT32_MIN else abs(n)


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition that owns ``group_id`` (GroupCoordinator.partitionFor)."""
    if num_partitions <= 0:
        raise ValueError(f"offsets topic partition count must be positive, got {num_partitions}")
    return kafka_abs(java_string_hash(group_id)) % num_partitions


# -- values ----------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class OffsetKey:
    """The key of one committed offset: (group, topic, partition)."""

    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetAndMetadata:
    """A committed offset (Kafka's OffsetAndMetadata / OffsetCommitValue)."""

    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""
    commit_timestamp_ms: int
    record_offset: int = -1
    """Offset in ``__consumer_offsets`` of the record this came from (-1: not written yet)."""


# -- codecs ----------------------------------------------------------------------------------------

def _string(value: str, what: str) -> bytes:
    data = value.encode("utf-8")
    if len(data) > MAX_STRING_BYTES:
        raise ValueError(f"{what} is {len(data)} bytes; a Kafka string holds at most "
                         f"{MAX_STRING_BYTES}")
    return _INT16.pack(len(data)) + data


def encode_offset_key(key: OffsetKey) -> bytes:
    """OffsetCommitKey, version 1 (Kafka's layout; see the module docstring)."""
    return (_INT16.pack(OFFSET_COMMIT_KEY_VERSION) + _string(key.group, "group id")
            + _string(key.topic, "topic") + _INT32.pack(key.partition))


def encode_offset_value(value: OffsetAndMetadata) -> bytes:
    """OffsetCommitValue, version 3 (Kafka's layout; see the module docstring)."""
    return (_INT16.pack(OFFSET_COMMIT_VALUE_VERSION) + _INT64.pack(value.offset)
            + _INT32.pack(value.leader_epoch) + _string(value.metadata, "metadata")
            + _INT64.pack(value.commit_timestamp_ms))


def _corrupt(what: str, data: bytes, detail: str) -> CorruptRecordError:
    return CorruptRecordError(f"__consumer_offsets {what} ({len(data)} bytes): {detail}")


def _string_at(data: bytes, pos: int, what: str) -> tuple[str, int]:
    """A Kafka string at ``pos``: (text, position after it)."""
    (length,) = _INT16.unpack_from(data, pos)
    if length < 0:
        raise _corrupt(what, data, f"null string at byte {pos}")
    end = pos + 2 + length
    if end > len(data):
        raise _corrupt(what, data, f"truncated: a {length}-byte string at byte {pos}")
    try:
        return data[pos + 2:end].decode("utf-8"), end
    except UnicodeDecodeError as exc:
        raise _corrupt(what, data, f"string at byte {pos} is not UTF-8: {exc}") from None


def decode_key(data: bytes) -> OffsetKey | None:
    """The offset key in ``data``; None for a group metadata key (membership, not kept here).

    Raises CorruptRecordError for an unknown key version or malformed bytes."""
    try:
        (version,) = _INT16.unpack_from(data, 0)
        if version == GROUP_METADATA_KEY_VERSION:
            return None
        if version not in (0, OFFSET_COMMIT_KEY_VERSION):
            raise _corrupt("key", data, f"unknown key version {version}")
        group, pos = _string_at(data, 2, "key")
        topic, pos = _string_at(data, pos, "key")
        (partition,) = _INT32.unpack_from(data, pos)
    except struct.error:
        raise _corrupt("key", data, "truncated") from None
    if pos + 4 != len(data):
        raise _corrupt("key", data, f"{len(data) - pos - 4} trailing bytes")
    return OffsetKey(group=group, topic=topic, partition=partition)


def decode_offset_value(data: bytes, *, record_offset: int = -1) -> OffsetAndMetadata:
    """An OffsetCommitValue of version 0-3; CorruptRecordError otherwise."""
    try:
        (version,) = _INT16.unpack_from(data, 0)
        if not 0 <= version <= OFFSET_COMMIT_VALUE_VERSION:
            raise _corrupt("value", data, f"unsupported version {version}")
        (offset,) = _INT64.unpack_from(data, 2)
        pos = 10
        leader_epoch = NO_LEADER_EPOCH
        if version >= 3:
            (leader_epoch,) = _INT32.unpack_from(data, pos)
            pos += 4
        metadata, pos = _string_at(data, pos, "value")
        (commit_timestamp_ms,) = _INT64.unpack_from(data, pos)
        pos += 8
        if version == 1:
            pos += 8  # expireTimestamp: ignored, as Kafka does since KIP-211
    except struct.error:
        raise _corrupt("value", data, "truncated") from None
    if pos != len(data):
        raise _corrupt("value", data, f"{len(data) - pos} trailing bytes" if pos < len(data)
                       else "truncated")
    return OffsetAndMetadata(offset=offset, leader_epoch=leader_epoch, metadata=metadata,
                             commit_timestamp_ms=commit_timestamp_ms, record_offset=record_offset)


def commit_record(key: OffsetKey, value: OffsetAndMetadata | None) -> rb.RecordInput:
    """The record that stores ``value`` under ``key``, or deletes it (``value`` None: tombstone)."""
    return rb.RecordInput(key=encode_offset_key(key),
                          value=None if value is None else encode_offset_value(value),
                          timestamp_ms=None if value is None else value.commit_timestamp_ms)


# -- the cache of one partition -------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class LoadSummary:
    """What replaying a partition's log found."""

    records: int
    tombstones: int
    skipped: int
    """Records that are not offset commits (group metadata, control batches)."""
    next_offset: int


class OffsetCache:
    """Committed offsets of the groups of one ``__consumer_offsets`` partition. See module doc."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self._groups: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}

    @property
    def group_count(self) -> int:
        return len(self._groups)

    @property
    def offset_count(self) -> int:
        return sum(len(offsets) for offsets in self._groups.values())

    def groups(self) -> list[str]:
        return sorted(self._groups)

    def get(self, group: str, tp: TopicPartition) -> OffsetAndMetadata | None:
        offsets = self._groups.get(group)
        return None if offsets is None else offsets.get(tp)

    def offsets(self, group: str, partitions: Iterable[TopicPartition] | None = None
                ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets: every one (``partitions`` None) or those asked (None
        for a partition without a committed offset)."""
        committed = self._groups.get(group, {})
        if partitions is None:
            return dict(sorted(committed.items()))
        return {tp: committed.get(tp) for tp in partitions}

    def put(self, group: str, tp: TopicPartition, value: OffsetAndMetadata) -> bool:
        """Store ``value`` unless the entry came from a later record; returns whether it did."""
        offsets = self._groups.setdefault(group, {})
        current = offsets.get(tp)
        if current is not None and current.record_offset > value.record_offset >= 0:
            return False
        offsets[tp] = value
        return True

    def delete(self, group: str, tp: TopicPartition, *, record_offset: int) -> bool:
        """Drop the entry (a tombstone at ``record_offset``) unless a later record wrote it."""
        offsets = self._groups.get(group)
        current = None if offsets is None else offsets.get(tp)
        if offsets is None or current is None or current.record_offset > record_offset:
            return False
        del offsets[tp]
        if not offsets:
            del self._groups[group]
        return True

    def replay(self, key: OffsetKey, value: OffsetAndMetadata | None, record_offset: int) -> None:
        """One record of the log, in log order: the last value per key wins, a tombstone deletes."""
        tp = TopicPartition(topic=key.topic, partition=key.partition)
        if value is None:
            self.delete(key.group, tp, record_offset=record_offset)
        else:
            self.put(key.group, tp, value)

    def replay_batches(self, batches: Iterable[rb.DecodedBatch]) -> LoadSummary:
        """Replay decoded batches of this partition's log (CorruptRecordError on a bad record).

        Only the last record of each key in ``batches`` is decoded and applied: the same
        outcome as applying each in order (last value wins), for a fraction of the work
        on a log that compaction has not cleaned yet."""
        records = tombstones = skipped = 0
        next_offset = 0
        latest: dict[bytes, tuple[int, bytes | None]] = {}
        for batch in batches:
            next_offset = max(next_offset, batch.next_offset)
            if batch.is_control:
                skipped += batch.record_count
                continue
            for record in batch.records:
                if record.key is None:
                    skipped += 1
                    continue
                if record.value is None:
                    tombstones += 1
                else:
                    records += 1
                latest[record.key] = (record.offset, record.value)
        tps: dict[tuple[str, int], TopicPartition] = {}
        for raw_key, (record_offset, raw_value) in latest.items():
            key = decode_key(raw_key)
            if key is None:
                skipped += 1
                if raw_value is None:
                    tombstones -= 1
                else:
                    records -= 1
                continue
            tp = tps.get((key.topic, key.partition))
            if tp is None:
                tp = tps[(key.topic, key.partition)] = TopicPartition(topic=key.topic,
                                                                      partition=key.partition)
            if raw_value is None:
                self.delete(key.group, tp, record_offset=record_offset)
            else:
                self.put(key.group, tp, decode_offset_value(raw_value,
                                                            record_offset=record_offset))
        return LoadSummary(records=records, tombstones=tombstones, skipped=skipped,
                           next_offset=next_offset)

    def expired(self, *, now_ms: int, retention_ms: int) -> list[tuple[OffsetKey, int]]:
        """Offsets committed at least ``retention_ms`` before ``now_ms`` (Kafka's rule for
        groups without members: the commit timestamp), as (key, record offset) pairs."""
        out: list[tuple[OffsetKey, int]] = []
        for group, offsets in sorted(self._groups.items()):
            for tp, value in sorted(offsets.items()):
                if now_ms - value.commit_timestamp_ms >= retention_ms:
                    out.append((OffsetKey(group=group, topic=tp.topic, partition=tp.partition),
                                value.record_offset))
        return out

    def items(self) -> Iterator[tuple[str, Mapping[TopicPartition, OffsetAndMetadata]]]:
        yield from sorted(self._groups.items())
