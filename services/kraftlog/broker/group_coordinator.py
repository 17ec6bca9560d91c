"""The broker's group coordinator for committed offsets: ownership, loading, validation (pure core).

Owns which ``__consumer_offsets`` partitions this broker coordinates and in what
state, the way Kafka's group coordinator does (``GroupCoordinator.onElection`` /
``onResignation`` when a broker gains or loses an offsets partition's leadership)::

    (not owned) --become leader (epoch e)--> LOADING(e) --log replayed--> ACTIVE(e)
    LOADING / ACTIVE --become follower, replica removed--> (not owned)   [unload]
    LOADING / ACTIVE(e) --leader again at epoch e' != e--> LOADING(e')   [reload: another
                                                                          leader may have
                                                                          written between]

:meth:`GroupCoordinatorState.plan` compares the partitions the broker leads (with
their leader epochs, from the replica manager) with what it owns and says what to
load and unload: level-triggered, like the reconciler, so a missed notification
is repaired by the next pass. A group's requests are answered only by the owner
of ``partition_for(group)`` in ACTIVE state: NOT_COORDINATOR when this broker does
not lead it, COORDINATOR_LOAD_IN_PROGRESS while it loads.

Also here: OffsetCommit validation (INVALID_GROUP_ID, ILLEGAL_GENERATION for a
generation without the membership protocol, UNKNOWN_TOPIC_OR_PARTITION,
OFFSET_METADATA_TOO_LARGE, INVALID_REQUEST) and Kafka's mapping of append errors
to commit errors (``GroupMetadataManager.storeOffsets``).

Callers: :mod:`kraftlog.broker.group_coordinator_driver` (the asyncio task that reads
logs, appends commits, expires offsets). Must not: import asyncio, grpc, protobuf
or a clock; do I/O. Single-threaded.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from kraftlog.broker import group_offsets as go
from kraftlog.error_codes import ErrorCode
from kraftlog.ids import TopicPartition
from kraftlog.storage.compression import CompressionType

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupCoordinatorConfig:
    """Broker settings of the offsets coordinator (Kafka's names; units in the names)."""

    offsets_topic_num_partitions: int = go.DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS
    """``offsets.topic.num.partitions``: partitions of ``__consumer_offsets`` when created."""
    offsets_topic_replication_factor: int = go.DEFAULT_OFFSETS_TOPIC_REPLICATION_FACTOR
    """``offsets.topic.replication.factor``."""
    offsets_topic_segment_bytes: int = go.DEFAULT_OFFSETS_TOPIC_SEGMENT_BYTES
    """``offsets.topic.segment.bytes``: the topic's ``segment.bytes``."""
    offsets_retention_ms: int = go.DEFAULT_OFFSETS_RETENTION_MINUTES * 60_000
    """``offsets.retention.minutes`` in ms: a committed offset older than this expires."""
    offsets_retention_check_interval_ms: int = go.DEFAULT_OFFSETS_RETENTION_CHECK_INTERVAL_MS
    """``offsets.retention.check.interval.ms``: how often expired offsets are looked for."""
    offsets_load_buffer_size: int = go.DEFAULT_OFFSETS_LOAD_BUFFER_SIZE
    """``offsets.load.buffer.size``: bytes read from the log per step of a load."""
    offsets_commit_timeout_ms: int = go.DEFAULT_OFFSETS_COMMIT_TIMEOUT_MS
    """``offsets.commit.timeout.ms``: how long a commit waits for every in-sync replica."""
    offset_metadata_max_bytes: int = go.DEFAULT_OFFSET_METADATA_MAX_BYTES
    """``offset.metadata.max.bytes``: the largest metadata string of a commit."""
    offsets_topic_compression_codec: CompressionType = CompressionType.NONE
    """``offsets.topic.compression.codec``: how the coordinator compresses its batches."""

    def __post_init__(self) -> None:
        for name in ("offsets_topic_num_partitions", "offsets_topic_replication_factor",
                     "offsets_topic_segment_bytes", "offsets_retention_ms",
                     "offsets_retention_check_interval_ms", "offsets_load_buffer_size",
                     "offsets_commit_timeout_ms"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name.replace('_', '.')} must be >= 1, "
                                 f"got {getattr(self, name)}")
        if self.offset_metadata_max_bytes < 0:
            raise ValueError("offset.metadata.max.bytes must be >= 0")
        if self.offsets_topic_compression_codec is CompressionType.SNAPPY:
            raise ValueError("offsets.topic.compression.codec=2 (snappy) is not supported: "
                             "use 0 (none), 1 (gzip), 3 (lz4) or 4 (zstd)")


class LoadState(enum.Enum):
    LOADING = "Loading"
    ACTIVE = "Active"


class OwnedPartition:
    """A ``__consumer_offsets`` partition this broker coordinates. Identity matters: a commit
    started against one instance never touches a later one (reload after a new epoch)."""

    __slots__ = ("cache", "leader_epoch", "load_started_ms", "partition", "state")

    def __init__(self, partition: int, leader_epoch: int, now_ms: int) -> None:
        self.partition = partition
        self.leader_epoch = leader_epoch
        self.state = LoadState.LOADING
        self.cache = go.OffsetCache(partition)
        self.load_started_ms = now_ms


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """What :meth:`GroupCoordinatorState.plan` wants done."""

    load: tuple[tuple[int, int], ...] = ()
    """(partition, leader epoch) to load (a LOADING entry is already registered)."""
    unloaded: tuple[OwnedPartition, ...] = ()
    """Partitions given up (their groups are gone from memory)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CoordinatorLookup:
    """Whether this broker coordinates a group now."""

    error: ErrorCode
    message: str
    partition: int
    owned: OwnedPartition | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitEntry:
    """One partition of an OffsetCommit request."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int = go.NO_LEADER_EPOCH
    metadata: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitCheck:
    """Validation result: per-entry errors and the accepted entries."""

    errors: dict[tuple[str, int], tuple[ErrorCode, str]]
    accepted: dict[TopicPartition, CommitEntry]


_APPEND_ERRORS: dict[ErrorCode, ErrorCode] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}


def commit_error_for_append(error: ErrorCode) -> ErrorCode:
    """Kafka's mapping of a ``__consumer_offsets`` append error to the commit's error."""
    return _APPEND_ERRORS.get(error, error)


def validate_commit(entries: Iterable[CommitEntry], *, metadata_max_bytes: int,
                    partition_exists: Callable[[TopicPartition], bool]) -> CommitCheck:
    """Per-partition checks of an OffsetCommit (the group-level ones come first, elsewhere)."""
    errors: dict[tuple[str, int], tuple[ErrorCode, str]] = {}
    accepted: dict[TopicPartition, CommitEntry] = {}
    for entry in entries:
        where = (entry.topic, entry.partition)
        try:
            tp = TopicPartition(topic=entry.topic, partition=entry.partition)
        except ValueError as exc:
            errors[where] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(exc))
            continue
        if tp in accepted or where in errors:
            accepted.pop(tp, None)
            errors[where] = (ErrorCode.INVALID_REQUEST, f"{tp} is given twice")
            continue
        if not partition_exists(tp):
            errors[where] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"{tp} does not exist")
            continue
        size = len(entry.metadata.encode("utf-8"))
        if size > min(metadata_max_bytes, go.MAX_STRING_BYTES):
            errors[where] = (ErrorCode.OFFSET_METADATA_TOO_LARGE,
                             f"metadata of {tp} is {size} bytes; offset.metadata.max.bytes is "
                             f"{metadata_max_bytes}")
            continue
        if entry.offset < 0:
            errors[where] = (ErrorCode.INVALID_REQUEST,
                             f"committed offset of {tp} must be >= 0, got {entry.offset}")
            continue
        if entry.leader_epoch < go.NO_LEADER_EPOCH:
            errors[where] = (ErrorCode.INVALID_REQUEST,
                             f"committed leader epoch of {tp} must be >= -1, "
                             f"got {entry.leader_epoch}")
            continue
        accepted[tp] = entry
    return CommitCheck(errors=errors, accepted=accepted)


def check_group(group_id: str, *, generation_id: int | None, member_id: str
                ) -> tuple[ErrorCode, str]:
    """Group-level checks of OffsetCommit. Without the membership protocol every group is
    empty, so only simple commits (no generation, or generation < 0) are accepted, as Kafka
    does for a group without members; a generation names a group that does not exist here."""
    if not group_id:
        return ErrorCode.INVALID_GROUP_ID, "the group id must not be empty"
    if len(group_id.encode("utf-8")) > go.MAX_STRING_BYTES:
        return (ErrorCode.INVALID_GROUP_ID,
                f"the group id is {len(group_id.encode('utf-8'))} bytes; at most "
                f"{go.MAX_STRING_BYTES} fit a Kafka string")
    if generation_id is not None and generation_id >= 0:
        return (ErrorCode.ILLEGAL_GENERATION,
                f"group {group_id!r} has no generation {generation_id} (no member of it joined "
                f"here: commit with generation -1 and no member id)")
    del member_id  # accepted and ignored with generation < 0, as Kafka does for empty groups
    return ErrorCode.NONE, ""


class GroupCoordinatorState:
    """The partitions this broker coordinates. See the module docstring."""

    def __init__(self, *, broker_id: int, config: GroupCoordinatorConfig) -> None:
        self.broker_id = broker_id
        self.config = config
        self.num_partitions = config.offsets_topic_num_partitions
        """Partitions of ``__consumer_offsets``: the existing topic's count once it exists."""
        self._owned: dict[int, OwnedPartition] = {}

    def owned(self) -> dict[int, OwnedPartition]:
        return dict(self._owned)

    def partition_for(self, group_id: str) -> int:
        return go.partition_for(group_id, self.num_partitions)

    def set_partition_count(self, count: int) -> None:
        """The topic exists with ``count`` partitions (every broker sees the same image)."""
        if count > 0:
            self.num_partitions = count

    # -- immigration / emigration ------------------------------------------------------------

    def plan(self, leading: Mapping[int, int], *, now_ms: int) -> Plan:
        """Converge on ``leading`` (partition -> leader epoch of the partitions led here)."""
        unloaded: list[OwnedPartition] = []
        for partition, owned in sorted(self._owned.items()):
            epoch = leading.get(partition)
            if epoch is None or epoch != owned.leader_epoch:
                unloaded.append(self._owned.pop(partition))
        load: list[tuple[int, int]] = []
        for partition, epoch in sorted(leading.items()):
            if partition not in self._owned:
                self._owned[partition] = OwnedPartition(partition, epoch, now_ms)
                load.append((partition, epoch))
        return Plan(load=tuple(load), unloaded=tuple(unloaded))

    def loading(self, partition: int, leader_epoch: int) -> OwnedPartition | None:
        """The LOADING entry a load of (``partition``, ``leader_epoch``) fills; None once it is
        no longer wanted (unloaded, or superseded by a newer epoch)."""
        owned = self._owned.get(partition)
        if owned is None or owned.leader_epoch != leader_epoch or owned.state is not LoadState.LOADING:
            return None
        return owned

    def complete_load(self, owned: OwnedPartition) -> bool:
        """Make a filled LOADING entry ACTIVE; False when it was superseded meanwhile."""
        if self._owned.get(owned.partition) is not owned or owned.state is not LoadState.LOADING:
            return False
        owned.state = LoadState.ACTIVE
        return True

    def fail_load(self, owned: OwnedPartition) -> None:
        """Drop a load that failed; the next :meth:`plan` tries again."""
        if self._owned.get(owned.partition) is owned:
            del self._owned[owned.partition]

    def is_current(self, owned: OwnedPartition) -> bool:
        """Whether ``owned`` is still the ACTIVE entry of its partition."""
        return self._owned.get(owned.partition) is owned and owned.state is LoadState.ACTIVE

    def lookup(self, group_id: str) -> CoordinatorLookup:
        """NONE with the owned partition, or NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS."""
        partition = self.partition_for(group_id)
        owned = self._owned.get(partition)
        if owned is None:
            return CoordinatorLookup(
                error=ErrorCode.NOT_COORDINATOR, partition=partition,
                message=f"broker {self.broker_id} is not the coordinator of group {group_id!r} "
                        f"({go.GROUP_METADATA_TOPIC_NAME}-{partition})")
        if owned.state is LoadState.LOADING:
            return CoordinatorLookup(
                error=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, partition=partition, owned=owned,
                message=f"broker {self.broker_id} is loading the offsets of "
                        f"{go.GROUP_METADATA_TOPIC_NAME}-{partition}")
        return CoordinatorLookup(error=ErrorCode.NONE, message="", partition=partition,
                                 owned=owned)
