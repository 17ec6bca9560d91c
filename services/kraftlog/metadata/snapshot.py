"""Metadata snapshots (KIP-630): an image as records, when to take one, and writing it.

Owns :func:`image_records` (the records that rebuild an image from nothing,
in Kafka's order: features, brokers with their fence state, each topic and its
partitions, configs, producer ids), :class:`SnapshotPolicy` (Kafka's
``metadata.log.max.record.bytes.between.snapshots`` and
``metadata.log.max.snapshot.interval.ms``), and :func:`write_image`, which
fills a raft :class:`~kraftlog.raft.snapshot.SnapshotWriter` in chunks.

Callers: the active and standby controllers' snapshot generator (policy, then
``RaftClient.create_snapshot(image.provenance.snapshot_end_offset)``, then
:func:`write_image`, then ``freeze_snapshot``), the loader (catching a new
publisher up), tests and the benchmark. Loading a snapshot is
:func:`kraftlog.metadata.loader.replay_snapshot`.

Pure: the record encoder is injected (production passes
:func:`kraftlog.metadata.record_convert.encode`); no protobuf, clock or I/O here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice

from kraftlog.errors import InvariantViolation
from kraftlog.metadata import image as im
from kraftlog.metadata import records as r
from kraftlog.raft import snapshot as raft_snapshot

METADATA_VERSION = "metadata.version"
"""The feature Kafka writes first in every snapshot: readers need it before anything else."""

DEFAULT_MAX_BYTES_BETWEEN_SNAPSHOTS = 20 * 1024 * 1024
"""Kafka's ``metadata.log.max.record.bytes.between.snapshots`` default (20 MiB)."""

DEFAULT_MAX_SNAPSHOT_INTERVAL_MS = 60 * 60 * 1000
"""Kafka's ``metadata.log.max.snapshot.interval.ms`` default (1 hour)."""

DEFAULT_CHUNK_RECORDS = 10_000
"""Records encoded and handed to the writer at a time: bounds the encoded bytes held at once."""


def image_records(image: im.MetadataImage) -> Iterator[r.MetadataRecord]:
    """Records that, replayed into an empty delta, rebuild ``image`` (provenance aside)."""
    levels = image.features.levels
    if METADATA_VERSION in levels:
        yield r.FeatureLevelRecord(name=METADATA_VERSION, feature_level=levels[METADATA_VERSION])
    for name, level in levels.items():
        if name != METADATA_VERSION:
            yield r.FeatureLevelRecord(name=name, feature_level=level)
    for broker in image.cluster.brokers.values():
        # The registration carries fenced / in_controlled_shutdown: one record per broker.
        yield broker.to_record()
    for topic in image.topics.topics.values():
        topic_id = topic.topic_id
        yield r.TopicRecord(name=topic.name, topic_id=topic_id)
        for partition_id, registration in topic.partitions.items():
            yield registration.to_record(topic_id, partition_id)
    for resource, configs in image.configs.resources.items():
        for name, value in configs.items():
            yield r.ConfigRecord(resource_type=resource.resource_type,
                                 resource_name=resource.resource_name, name=name, value=value)
    if image.producer_ids.next_producer_id != -1:
        # Kafka writes the block owner as -1/-1 in snapshots: only the next id matters.
        yield r.ProducerIdsRecord(broker_id=-1, broker_epoch=-1,
                                  next_producer_id=image.producer_ids.next_producer_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotPolicy:
    """When to snapshot the metadata log (Kafka's SnapshotGenerator rules).

    A snapshot is due once ``max_bytes_between_snapshots`` bytes of records
    were appended since the last one, or, when ``max_interval_ms`` > 0, once
    that long passed since the last one and at least one byte was appended
    (an idle log gets no new snapshot). ``max_interval_ms`` = 0 disables the
    time rule.
    """

    max_bytes_between_snapshots: int = DEFAULT_MAX_BYTES_BETWEEN_SNAPSHOTS
    max_interval_ms: int = DEFAULT_MAX_SNAPSHOT_INTERVAL_MS

    def __post_init__(self) -> None:
        if self.max_bytes_between_snapshots < 1:
            raise ValueError("metadata.log.max.record.bytes.between.snapshots must be >= 1, "
                             f"got {self.max_bytes_between_snapshots}")
        if self.max_interval_ms < 0:
            raise ValueError("metadata.log.max.snapshot.interval.ms must be >= 0, "
                             f"got {self.max_interval_ms}")

    def snapshot_reason(self, *, bytes_since_last_snapshot: int, now_ms: int,
                        last_snapshot_ms: int) -> str | None:
        """Why a snapshot is due now (for the log line), or ``None`` if it is not."""
        if bytes_since_last_snapshot >= self.max_bytes_between_snapshots:
            return (f"{bytes_since_last_snapshot} bytes appended since the last snapshot "
                    f"(metadata.log.max.record.bytes.between.snapshots="
                    f"{self.max_bytes_between_snapshots})")
        elapsed_ms = now_ms - last_snapshot_ms
        if self.max_interval_ms > 0 and bytes_since_last_snapshot > 0 \
                and elapsed_ms >= self.max_interval_ms:
            return (f"{elapsed_ms} ms since the last snapshot "
                    f"(metadata.log.max.snapshot.interval.ms={self.max_interval_ms})")
        return None

    def should_snapshot(self, *, bytes_since_last_snapshot: int, now_ms: int,
                        last_snapshot_ms: int) -> bool:
        return self.snapshot_reason(bytes_since_last_snapshot=bytes_since_last_snapshot,
                                    now_ms=now_ms, last_snapshot_ms=last_snapshot_ms) is not None


def write_image(writer: raft_snapshot.SnapshotWriter, image: im.MetadataImage, *,
                encode: Callable[[r.MetadataRecord], bytes],
                chunk_records: int = DEFAULT_CHUNK_RECORDS) -> int:
    """Append ``image``'s records to ``writer`` in chunks; returns the record count.

    The caller then ``build()``s / freezes the writer. The snapshot must cover
    at least what the image holds: its end offset may be past the image's
    last record (control batches follow it), never at or before it.
    """
    if chunk_records < 1:
        raise ValueError(f"chunk_records must be >= 1, got {chunk_records}")
    end_offset = writer.snapshot_id.offset
    if end_offset <= image.provenance.last_offset:
        raise InvariantViolation(
            f"snapshot {writer.snapshot_id} ends at offset {end_offset} but the image already "
            f"holds the record at offset {image.provenance.last_offset}")
    records = image_records(image)
    count = 0
    while True:
        chunk = [encode(record) for record in islice(records, chunk_records)]
        if not chunk:
            return count
        writer.append(chunk)
        count += len(chunk)
