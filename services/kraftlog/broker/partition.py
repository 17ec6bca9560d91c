"""One partition replica on this broker, as leader or follower (Kafka's ``Partition``).

Owns, for one ``<topic>-<index>`` replica whose log lives on this broker:

* the role as the metadata log last described it: leader id, leader epoch,
  partition epoch, the assignment, and (as leader) the ISR;
* as leader, each follower's fetch state (log end offset, last fetch time,
  last caught-up time), the high watermark (the minimum log end offset over
  the *maximal* ISR, never decreasing), ISR expansion and shrinking as a
  *pending* AlterPartition proposal (KIP-497), appends with the
  ``min.insync.replicas`` check after Kafka's LogValidator has parsed every record
  (:mod:`kraftlog.storage.log_validator`), and reads with leader-epoch fencing and
  diverging-epoch answers (KIP-320);
* as follower, the follower-side log operations the fetcher needs (append the
  leader's batches as they are, truncate, adopt the leader's high watermark);
* in both roles, the idempotent producers' state of the log (KIP-98,
  :mod:`kraftlog.broker.producer_state`): the leader checks every batch with a
  producer id against it (a retried batch is answered with its original offsets
  and not appended; gaps, stale epochs and unknown producers are refused),
  followers update it from the headers they replicate, truncation and recovery
  rebuild it (from the newest ``<offset>.snapshot``, :mod:`kraftlog.broker.producer_snapshot`,
  then the batch headers after it), retention trims it.

Role transitions (Kafka's makeLeader/makeFollower, driven by the reconciler
from metadata deltas; a delta whose leader epoch or partition epoch is below
ours is stale and ignored, the LeaderAndIsr fencing of the old controller)::

    none     --make_leader-->   leader    records the new epoch's start offset in the
                                          leader-epoch cache, resets follower states,
                                          keeps the high watermark
    leader   --make_leader-->   leader    same epoch, newer partition epoch: new ISR committed
    any      --make_follower--> follower  drops follower states and any pending ISR change;
                                          returns True when the fetcher must (re)start

ISR state (KIP-497; Kafka's ``PartitionState``)::

    Committed --maybe_expand_isr--> PendingExpandIsr --answer/metadata--> Committed
    Committed --maybe_shrink_isr--> PendingShrinkIsr --answer/metadata--> Committed

While a change is pending, no other change is proposed and the high watermark
uses the maximal ISR (current ∪ proposed), so it never advances on the word of
a replica set the controller has not accepted.

Callers: :mod:`kraftlog.broker.replica_manager` (produce, fetch, ISR expiry),
:mod:`kraftlog.broker.follower` (follower appends), the reconciler (role
changes). The caller gives the same ``LeaderEpochFileCache`` to
:meth:`kraftlog.storage.log.Log.open` and to this class.

Must not: import a clock, asyncio or grpc (time comes in as ``now_ms``), send
anything (AlterPartition proposals wait in :meth:`Partition.take_alter_partition_request`),
or touch another partition. Not thread-safe: one owner calls it.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from kraftlog.broker import producer_snapshot, producer_state
from kraftlog.error_codes import ErrorCode
from kraftlog.errors import (
    CorruptRecordError,
    InvariantViolation,
    OffsetOutOfRangeError,
)
from kraftlog.ids import TopicPartition, Uuid
from kraftlog.metadata.records import NO_LEADER, LeaderRecoveryState
from kraftlog.storage import batch_header, leader_epoch, log_validator
from kraftlog.storage import log as storage_log

logger = logging.getLogger(__name__)

DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30_000
"""``replica.lag.time.max.ms``: a follower not caught up for this long leaves the ISR."""
DEFAULT_MIN_INSYNC_REPLICAS = 1
"""``min.insync.replicas``."""
DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024 + 12
"""``max.message.bytes`` (Kafka's default, 1048588): the largest batch a leader accepts."""

UNKNOWN_OFFSET = -1
"""A follower's log end offset before its first fetch to this leader (Kafka's UnknownOffset)."""
NO_PARTITION_LEADER_EPOCH = -1
"""``current_leader_epoch`` / ``last_fetched_epoch`` of a request that skips the check."""
CONSUMER_REPLICA_ID = -1
"""``replica_id`` of a consumer's fetch."""
PRODUCER_STATE_SCAN_BYTES = 4 * 1024 * 1024
"""Bytes read per step when the producer state is rebuilt from the log's batch headers."""


class FetchIsolation(enum.Enum):
    """How far a read may go (Kafka's ``FetchIsolation``)."""

    LOG_END = "log_end"
    """Followers: up to the log end offset."""
    HIGH_WATERMARK = "high_watermark"
    """Consumers with READ_UNCOMMITTED: up to the high watermark."""
    TXN_COMMITTED = "txn_committed"
    """Consumers with READ_COMMITTED: up to the last stable offset, which is the
    high watermark here (no transactions)."""


class EpochCache(Protocol):
    """What a partition needs of its leader-epoch cache (``leader_epoch.LeaderEpochFileCache``)."""

    def assign(self, epoch: int, start_offset: int) -> object: ...

    def latest_epoch(self) -> int | None: ...

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]: ...

    def truncate_from_end(self, end_offset: int) -> object: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionConfig:
    """Per-partition settings; each field names its Kafka property and unit."""

    replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS
    """``replica.lag.time.max.ms`` (ms)."""
    min_insync_replicas: int = DEFAULT_MIN_INSYNC_REPLICAS
    """``min.insync.replicas``: acks=all produce needs an ISR at least this large."""
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    """``max.message.bytes`` (bytes): larger batches answer MESSAGE_TOO_LARGE."""
    eligible_leader_replicas_enable: bool = False
    """``eligible.leader.replicas.enable`` (KIP-966): the high watermark does not
    advance while the ISR is below ``min.insync.replicas``."""
    compacted: bool = False
    """``cleanup.policy`` contains ``compact``: every produced record needs a key
    (INVALID_RECORD otherwise, as Kafka's LogValidator answers)."""

    def __post_init__(self) -> None:
        if self.replica_lag_time_max_ms < 0:
            raise ValueError(f"replica.lag.time.max.ms must be >= 0, got {self.replica_lag_time_max_ms}")
        if self.min_insync_replicas < 1:
            raise ValueError(f"min.insync.replicas must be >= 1, got {self.min_insync_replicas}")
        if self.max_message_bytes < 0:
            raise ValueError(f"max.message.bytes must be >= 0, got {self.max_message_bytes}")


# ================================================================== AlterPartition values


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionRequest:
    """One partition's ISR proposal for the controller (AlterPartitionRequest.PartitionData)."""

    topic_id: Uuid
    topic: str
    partition_index: int
    leader_id: int
    leader_epoch: int
    new_isr: tuple[int, ...]
    """Sorted, the leader included."""
    partition_epoch: int
    """The partition epoch the proposal is based on (the controller fences stale ones)."""
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED
    based_on_isr: tuple[int, ...] = ()
    """The committed ISR the proposal changes (not sent): whether it expands or shrinks."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsr:
    """The controller's answer to an accepted AlterPartition (the state now in force)."""

    leader_id: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionOutcome:
    """What handling an AlterPartition answer did."""

    applied: bool = False
    """The proposal's result is now the committed ISR."""
    retry: bool = False
    """The same request should be sent again (it is handed out again by
    :meth:`Partition.take_alter_partition_request`)."""
    high_watermark_advanced: bool = False


# ================================================================== ISR states (KIP-497)


@dataclass(frozen=True, slots=True, kw_only=True)
class CommittedPartitionState:
    """The ISR as the controller last committed it; no change in flight."""

    isr: frozenset[int]
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr

    @property
    def is_inflight(self) -> bool:
        return False


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingExpandIsr:
    """An expansion was proposed. The high watermark already counts the new member:
    if the controller accepts, it must not have advanced past what that member holds."""

    new_in_sync_replica_id: int
    sent: AlterPartitionRequest
    last_committed: CommittedPartitionState

    @property
    def isr(self) -> frozenset[int]:
        return self.last_committed.isr

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.last_committed.isr | {self.new_in_sync_replica_id}

    @property
    def leader_recovery_state(self) -> LeaderRecoveryState:
        return self.last_committed.leader_recovery_state

    @property
    def is_inflight(self) -> bool:
        return True


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingShrinkIsr:
    """A shrink was proposed. The high watermark still waits for the members being
    removed until the controller accepts: if it refuses, they are still in the ISR."""

    out_of_sync_replica_ids: frozenset[int]
    sent: AlterPartitionRequest
    last_committed: CommittedPartitionState

    @property
    def isr(self) -> frozenset[int]:
        return self.last_committed.isr

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.last_committed.isr

    @property
    def leader_recovery_state(self) -> LeaderRecoveryState:
        return self.last_committed.leader_recovery_state

    @property
    def is_inflight(self) -> bool:
        return True


PartitionState = CommittedPartitionState | PendingExpandIsr | PendingShrinkIsr


# ================================================================== follower (remote replica) state


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaStatus:
    """A read-only view of what the leader knows of one follower (DescribeLogDirs, tests)."""

    replica_id: int
    log_end_offset: int
    log_start_offset: int
    last_fetch_time_ms: int
    last_caught_up_time_ms: int


class _RemoteReplica:
    """The leader's record of one follower's fetches (Kafka's ``Replica``/``ReplicaState``).

    Invariant: ``last_caught_up_time_ms`` only grows while this broker leads
    the same epoch; it is the last time the follower was known to hold
    everything the leader had at some fetch.
    """

    __slots__ = ("last_caught_up_time_ms", "last_fetch_leader_log_end_offset", "last_fetch_time_ms",
                 "log_end_offset", "log_end_offset_metadata", "log_start_offset", "replica_id")

    def __init__(self, replica_id: int) -> None:
        self.replica_id = replica_id
        self.log_end_offset = UNKNOWN_OFFSET
        self.log_end_offset_metadata: storage_log.LogOffsetMetadata | None = None
        self.log_start_offset = UNKNOWN_OFFSET
        self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET
        self.last_fetch_time_ms = 0
        self.last_caught_up_time_ms = 0

    def update_fetch_state(self, *, fetch_offset: int, fetch_offset_metadata: storage_log.LogOffsetMetadata | None,
                           log_start_offset: int, fetch_time_ms: int, leader_end_offset: int) -> None:
        # Kafka's Replica.updateFetchStateOrThrow: a follower that fetched from
        # the leader's end is caught up now; one that reached the end the leader
        # had at its previous fetch was caught up at that previous fetch.
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, fetch_time_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.log_end_offset_metadata = fetch_offset_metadata
        self.log_start_offset = log_start_offset
        self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = fetch_time_ms

    def reset(self, *, now_ms: int, leader_end_offset: int, is_new_leader: bool, in_sync: bool) -> None:
        """Kafka's resetReplicaState, on a new leader epoch."""
        if is_new_leader:
            # What a previous leader learnt is not ours: the follower must fetch
            # again before it counts. An ISR member gets the full lag time to do
            # so; anyone else has never been caught up as far as we know.
            self.last_caught_up_time_ms = now_ms if in_sync else 0
            self.log_end_offset = UNKNOWN_OFFSET
            self.log_end_offset_metadata = None
            self.log_start_offset = UNKNOWN_OFFSET
            self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET
            self.last_fetch_time_ms = 0
        else:
            # Same leader, new epoch: keep what we know; the next fetch is
            # measured against the end at the epoch change.
            self.last_fetch_leader_log_end_offset = leader_end_offset
            self.last_fetch_time_ms = now_ms

    def is_caught_up(self, *, leader_end_offset: int, now_ms: int, replica_lag_time_max_ms: int) -> bool:
        return (leader_end_offset == self.log_end_offset
                or now_ms - self.last_caught_up_time_ms <= replica_lag_time_max_ms)

    def status(self) -> ReplicaStatus:
        return ReplicaStatus(replica_id=self.replica_id, log_end_offset=self.log_end_offset,
                             log_start_offset=self.log_start_offset, last_fetch_time_ms=self.last_fetch_time_ms,
                             last_caught_up_time_ms=self.last_caught_up_time_ms)


# ================================================================== results


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAppendResult:
    """The outcome of :meth:`Partition.append_records_to_leader`."""

    error: ErrorCode
    info: storage_log.AppendInfo | None = None
    """Offsets given, when ``error`` is NONE."""
    error_message: str = ""
    high_watermark_advanced: bool = False
    record_errors: tuple[log_validator.RecordError, ...] = ()
    """The records at fault when the validator refused the batches (KIP-467)."""
    duplicate: bool = False
    """The batches were already in the log (an idempotent producer's retry): ``info`` gives
    their original offsets and nothing was appended."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EpochEndOffset:
    """Where an epoch ends on the leader (FetchResponse.diverging_epoch, OffsetForLeaderEpoch)."""

    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadResult:
    """The outcome of :meth:`Partition.read_records` (Kafka's LogReadInfo plus the error)."""

    error: ErrorCode
    records: bytes = b""
    high_watermark: int = -1
    """The high watermark before the read (Kafka reports the initial value)."""
    log_start_offset: int = -1
    log_end_offset: int = -1
    last_stable_offset: int = -1
    diverging_epoch: EpochEndOffset | None = None
    """Set for a follower whose last fetched epoch diverged; ``records`` is then empty."""
    fetch_offset_metadata: storage_log.LogOffsetMetadata | None = None
    """Where the fetch offset sits in the log (for the fetch purgatory's byte estimate)."""
    next_offset: int = -1
    leader_id: int = NO_LEADER
    """The leader as this broker knows it (a hint with NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH)."""
    leader_epoch: int = -1
    error_message: str = ""
    high_watermark_advanced: bool = False
    """A follower's fetch moved the leader's high watermark (delayed produces may complete)."""


# ================================================================== the partition


class Partition:
    """One replica of ``topic-index`` on broker ``local_broker_id``. See the module docstring.

    Invariants: ``log_start_offset <= high_watermark <= log_end_offset``; as leader the
    high watermark never decreases; the leader epoch and partition epoch never decrease;
    at most one ISR change is pending.
    """

    def __init__(self, topic_id: Uuid, topic: str, index: int, log: storage_log.Log, *,
                 epoch_cache: EpochCache, local_broker_id: int, config: PartitionConfig | None = None,
                 high_watermark: int = 0,
                 is_replica_isr_eligible: Callable[[int], bool] | None = None) -> None:
        self.topic_id = topic_id
        self.topic_partition = TopicPartition(topic=topic, partition=index)
        self.local_broker_id = local_broker_id
        self.config = config if config is not None else PartitionConfig()
        self._log = log
        self._epoch_cache = epoch_cache
        # A fenced or shutting-down broker may not join the ISR (KIP-841); the
        # metadata image knows, so the caller injects the predicate.
        self._is_replica_isr_eligible = is_replica_isr_eligible or (lambda _replica_id: True)
        self._leader_id = NO_LEADER
        self._leader_epoch = -1
        self._partition_epoch = -1
        self._leader_epoch_start_offset: int | None = None
        self._replicas: tuple[int, ...] = ()
        self._state: PartitionState = CommittedPartitionState(isr=frozenset())
        self._remote: dict[int, _RemoteReplica] = {}
        # The validator's settings, with the LogConfig and PartitionConfig they were built from.
        self._validation: tuple[object, object, log_validator.ValidationConfig] | None = None
        # The pending proposal was handed out; cleared by a new proposal or a retryable error
        # (one AlterPartition in flight per partition).
        self._alter_request_sent = False
        # The checkpointed value may be stale either way after a crash: clamp it to the log.
        self._high_watermark = min(max(high_watermark, log.log_start_offset), log.log_end_offset)
        self._high_watermark_metadata: storage_log.LogOffsetMetadata | None = None
        # KIP-98: every replica keeps the producers' state of what its log holds, so that
        # whoever leads next dedupes retries. Rebuilt here by replaying the log's headers.
        self._producers = producer_state.ProducerStateManager(str(self.topic_partition))
        self._reload_producer_state()

    # ================================================================== state

    @property
    def topic(self) -> str:
        return self.topic_partition.topic

    @property
    def index(self) -> int:
        return self.topic_partition.partition

    @property
    def log(self) -> storage_log.Log:
        return self._log

    @property
    def is_leader(self) -> bool:
        return self._leader_id == self.local_broker_id

    @property
    def leader_id(self) -> int:
        return self._leader_id

    @property
    def leader_epoch(self) -> int:
        return self._leader_epoch

    @property
    def partition_epoch(self) -> int:
        return self._partition_epoch

    @property
    def leader_epoch_start_offset(self) -> int | None:
        """The log end offset when this broker became leader of the current epoch; None as follower."""
        return self._leader_epoch_start_offset

    @property
    def replicas(self) -> tuple[int, ...]:
        return self._replicas

    @property
    def state(self) -> PartitionState:
        return self._state

    @property
    def isr(self) -> frozenset[int]:
        """The committed ISR (what ``min.insync.replicas`` is checked against); empty as follower."""
        return self._state.isr

    @property
    def maximal_isr(self) -> frozenset[int]:
        """The committed ISR plus a pending expansion (what the high watermark waits for)."""
        return self._state.maximal_isr

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def log_end_offset(self) -> int:
        return self._log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self._log.log_start_offset

    @property
    def latest_epoch(self) -> int:
        """The latest epoch in the leader-epoch cache, -1 if none (a follower's last fetched epoch)."""
        latest = self._epoch_cache.latest_epoch()
        return -1 if latest is None else latest

    @property
    def producers(self) -> producer_state.ProducerStateManager:
        """The idempotent producers' state of this replica's log (read it; the partition updates it)."""
        return self._producers

    def _reload_producer_state(self) -> None:
        """Rebuild the producer state: the newest usable ``<offset>.snapshot``, then the batch
        headers from there to the log end (from the log start when there is no snapshot).

        Done on open and after a truncation that removed some producer's batches; without a
        snapshot it costs one read of the whole log.
        """
        log = self._log
        loaded = producer_snapshot.load_latest(log.directory, log_start_offset=log.log_start_offset,
                                               log_end_offset=log.log_end_offset)
        if loaded is None:
            self._producers.rebuild(iter_log_headers(log))
            return
        offset, entries = loaded
        self._producers.restore(entries)
        self._producers.truncate_head(log.log_start_offset)
        self._producers.append_headers(iter_log_headers(log, start_offset=offset))

    def write_producer_snapshot(self) -> bool:
        """Write ``<log end>.snapshot`` if the whole log is flushed (True when written)."""
        log = self._log
        if log.recovery_point < log.log_end_offset:
            return False
        producer_snapshot.write(log.directory, log.log_end_offset, list(self._producers.producers.values()))
        return True

    def close(self) -> None:
        """Flush the log, snapshot the producer state at its end (a restart then replays nothing), close."""
        self._log.flush()
        self.write_producer_snapshot()
        self._log.close()

    def replica_status(self, replica_id: int) -> ReplicaStatus | None:
        remote = self._remote.get(replica_id)
        return None if remote is None else remote.status()

    def end_offset_for_epoch(self, epoch: int) -> EpochEndOffset:
        """OffsetForLeaderEpoch on the local log: ``(largest epoch <= epoch, its end offset)``.

        ``(-1, -1)`` when the cache cannot say (undefined, or above every epoch).
        """
        found_epoch, end_offset = self._epoch_cache.end_offset_for(epoch, self._log.log_end_offset)
        return EpochEndOffset(epoch=found_epoch, end_offset=end_offset)

    def _where(self) -> str:
        return f"broker={self.local_broker_id} partition={self.topic_partition} epoch={self._leader_epoch}"

    # ================================================================== role changes

    def _is_stale(self, leader_epoch: int, partition_epoch: int, what: str) -> bool:
        if leader_epoch < self._leader_epoch or partition_epoch < self._partition_epoch:
            logger.info("%s event=%s_ignored reason=stale leader_epoch=%d partition_epoch=%d "
                        "current_leader_epoch=%d current_partition_epoch=%d", self._where(), what,
                        leader_epoch, partition_epoch, self._leader_epoch, self._partition_epoch)
            return True
        return False

    def make_leader(self, *, leader_epoch: int, partition_epoch: int, replicas: Iterable[int],
                    isr: Iterable[int], now_ms: int,
                    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED) -> bool:
        """Become (or stay) leader as the metadata says; True when this broker was not leader before.

        A new leader epoch records its start offset (the log end now) in the
        leader-epoch cache and resets every follower's fetch state; a new
        partition epoch in the same leader epoch commits the ISR it carries
        (which ends a pending change). The high watermark is kept, and may advance
        at once (the ISR may now be just the leader). A RECOVERING partition (unclean
        election, KIP-704) is taken as RECOVERED; ISR proposals then say so.
        """
        replicas = tuple(replicas)
        new_isr = frozenset(isr)
        if self.local_broker_id not in replicas:
            raise InvariantViolation(
                f"{self._where()}: make_leader with replicas {replicas} that do not include this broker")
        if self._is_stale(leader_epoch, partition_epoch, "become_leader"):
            return False
        if (self.is_leader and leader_epoch == self._leader_epoch and partition_epoch == self._partition_epoch
                and replicas == self._replicas):
            # The same state again (a periodic reconcile): keep any pending ISR change.
            return False
        is_new_leader = not self.is_leader
        is_new_leader_epoch = leader_epoch > self._leader_epoch
        self._replicas = replicas
        if leader_recovery_state is LeaderRecoveryState.RECOVERING:
            # KIP-704: an unclean leader has nothing to recover without transactions; its next
            # AlterPartition tells the controller RECOVERED (as Kafka's makeLeader does).
            logger.info("%s event=leader_recovered_on_election", self._where())
        self._state = CommittedPartitionState(isr=new_isr)
        self._alter_request_sent = False
        # Followers still assigned keep what we know of them; new ones start unknown.
        self._remote = {r: self._remote.get(r) or _RemoteReplica(r)
                        for r in replicas if r != self.local_broker_id}
        if is_new_leader_epoch or self._leader_epoch_start_offset is None:
            start = self._log.log_end_offset
            # KIP-101: followers ask where our epochs end; this one starts here
            # even before we append to it.
            self._epoch_cache.assign(leader_epoch, start)
            for replica in self._remote.values():
                replica.reset(now_ms=now_ms, leader_end_offset=start, is_new_leader=is_new_leader,
                              in_sync=replica.replica_id in new_isr)
            self._leader_epoch = leader_epoch
            self._leader_epoch_start_offset = start
        if is_new_leader:
            self._high_watermark_metadata = None
        self._partition_epoch = partition_epoch
        self._leader_id = self.local_broker_id
        logger.info("%s event=become_leader new_leader=%s partition_epoch=%d isr=%s replicas=%s "
                    "leader_epoch_start_offset=%s high_watermark=%d log_end_offset=%d", self._where(),
                    is_new_leader, partition_epoch, sorted(new_isr), list(replicas),
                    self._leader_epoch_start_offset, self._high_watermark, self._log.log_end_offset)
        self.maybe_increment_high_watermark(now_ms)
        return is_new_leader

    def make_follower(self, *, leader_id: int, leader_epoch: int, partition_epoch: int,
                      replicas: Iterable[int]) -> bool:
        """Follow ``leader_id`` (NO_LEADER: none elected yet); True when the fetcher must (re)start.

        Follower states and any pending ISR change are dropped; the log is not
        touched here (the fetcher truncates via the diverging epoch on its
        first fetch, KIP-320). The high watermark is kept.
        """
        replicas = tuple(replicas)
        if leader_id == self.local_broker_id:
            raise InvariantViolation(f"{self._where()}: make_follower naming this broker as leader")
        if self._is_stale(leader_epoch, partition_epoch, "become_follower"):
            return False
        leader_changed = leader_id != self._leader_id
        is_new_leader_epoch = leader_epoch > self._leader_epoch
        self._leader_id = leader_id
        self._replicas = replicas
        self._state = CommittedPartitionState(isr=frozenset())
        self._alter_request_sent = False
        self._remote = {}
        self._leader_epoch = leader_epoch
        self._partition_epoch = partition_epoch
        self._leader_epoch_start_offset = None
        self._high_watermark_metadata = None
        restart = (is_new_leader_epoch or leader_changed) and leader_id != NO_LEADER
        logger.info("%s event=become_follower leader=%d partition_epoch=%d restart_fetcher=%s "
                    "high_watermark=%d log_end_offset=%d", self._where(), leader_id, partition_epoch,
                    restart, self._high_watermark, self._log.log_end_offset)
        return restart

    # ================================================================== leader: high watermark

    def maybe_increment_high_watermark(self, now_ms: int) -> bool:
        """Move the high watermark to the minimum log end offset over the maximal ISR; True if it moved.

        Also waits for a caught-up follower that is not in the ISR yet but may
        join (Kafka's ``shouldWaitForReplicaToJoinIsr``): otherwise the high
        watermark could pass its end and it could never meet the expansion rule.
        With ``eligible.leader.replicas.enable`` it does not move while the
        committed ISR is below ``min.insync.replicas`` (KIP-966).
        """
        if not self.is_leader:
            return False
        leader_end = self._log.log_end_offset
        new_hw = leader_end
        new_metadata: storage_log.LogOffsetMetadata | None = self._log.log_end_offset_metadata
        maximal = self._state.maximal_isr
        for replica in self._remote.values():
            if replica.log_end_offset >= new_hw:
                continue
            waits = replica.replica_id in maximal or (
                replica.is_caught_up(leader_end_offset=leader_end, now_ms=now_ms,
                                     replica_lag_time_max_ms=self.config.replica_lag_time_max_ms)
                and self._is_replica_isr_eligible(replica.replica_id))
            if waits:
                new_hw = replica.log_end_offset
                new_metadata = replica.log_end_offset_metadata
        if (self.config.eligible_leader_replicas_enable
                and len(self._state.isr) < self.config.min_insync_replicas):
            return False
        if new_hw <= self._high_watermark:
            return False
        old = self._high_watermark
        self._high_watermark = new_hw
        self._high_watermark_metadata = new_metadata
        logger.debug("%s event=high_watermark_advanced from=%d to=%d", self._where(), old, new_hw)
        return True

    # ================================================================== leader: follower fetch state, ISR

    def update_follower_fetch_state(self, replica_id: int, *, fetch_offset: int, leader_end_offset: int,
                                    now_ms: int, log_start_offset: int = UNKNOWN_OFFSET,
                                    fetch_offset_metadata: storage_log.LogOffsetMetadata | None = None) -> bool:
        """Record a follower's fetch at ``fetch_offset`` (its log end offset); True if the HW advanced.

        ``leader_end_offset`` is the leader's log end offset *before* the read,
        so that appends racing the fetch do not keep a follower out of sync.
        May propose an ISR expansion. Fetches from non-replicas are ignored.
        """
        replica = self._remote.get(replica_id)
        if not self.is_leader or replica is None:
            return False
        previous_end = replica.log_end_offset
        replica.update_fetch_state(fetch_offset=fetch_offset, fetch_offset_metadata=fetch_offset_metadata,
                                   log_start_offset=log_start_offset, fetch_time_ms=now_ms,
                                   leader_end_offset=leader_end_offset)
        self.maybe_expand_isr(replica_id, now_ms)
        if previous_end != replica.log_end_offset:
            return self.maybe_increment_high_watermark(now_ms)
        return False

    def _is_follower_in_sync(self, replica: _RemoteReplica) -> bool:
        # KIP-101/279: besides reaching the high watermark, a new member must
        # hold the start of this leader's epoch, or it could be elected with a
        # log that misses records this leader acknowledged in an earlier epoch.
        return (replica.log_end_offset >= self._high_watermark
                and self._leader_epoch_start_offset is not None
                and replica.log_end_offset >= self._leader_epoch_start_offset)

    def maybe_expand_isr(self, replica_id: int, now_ms: int) -> bool:
        """Propose adding ``replica_id`` to the ISR if it caught up; True when a proposal was made.

        Nothing is proposed while another change is pending (KIP-497: one in flight).
        """
        replica = self._remote.get(replica_id)
        if (not self.is_leader or replica is None or self._state.is_inflight
                or replica_id in self._state.isr or not self._is_replica_isr_eligible(replica_id)
                or not self._is_follower_in_sync(replica)):
            return False
        committed = self._committed_state()
        request = self._alter_request(committed.isr | {replica_id}, committed.leader_recovery_state)
        self._state = PendingExpandIsr(new_in_sync_replica_id=replica_id, sent=request, last_committed=committed)
        self._alter_request_sent = False
        logger.info("%s event=isr_expand_proposed replica=%d isr=%s new_isr=%s partition_epoch=%d "
                    "replica_log_end_offset=%d high_watermark=%d", self._where(), replica_id,
                    sorted(committed.isr), list(request.new_isr), self._partition_epoch,
                    replica.log_end_offset, self._high_watermark)
        return True

    def out_of_sync_replicas(self, now_ms: int) -> frozenset[int]:
        """ISR members (but the leader) not caught up within ``replica.lag.time.max.ms``."""
        leader_end = self._log.log_end_offset
        out: set[int] = set()
        for replica_id in self._state.isr:
            if replica_id == self.local_broker_id:
                continue
            replica = self._remote.get(replica_id)
            if replica is None or not replica.is_caught_up(
                    leader_end_offset=leader_end, now_ms=now_ms,
                    replica_lag_time_max_ms=self.config.replica_lag_time_max_ms):
                out.add(replica_id)
        return frozenset(out)

    def maybe_shrink_isr(self, now_ms: int) -> bool:
        """Propose removing lagging followers from the ISR; True when a proposal was made."""
        if not self.is_leader or self._state.is_inflight:
            return False
        out = self.out_of_sync_replicas(now_ms)
        if not out:
            return False
        committed = self._committed_state()
        request = self._alter_request(committed.isr - out, committed.leader_recovery_state)
        self._state = PendingShrinkIsr(out_of_sync_replica_ids=out, sent=request, last_committed=committed)
        self._alter_request_sent = False
        lag = {r: (self._remote[r].log_end_offset, now_ms - self._remote[r].last_caught_up_time_ms)
               for r in sorted(out) if r in self._remote}
        logger.info("%s event=isr_shrink_proposed out_of_sync=%s isr=%s new_isr=%s partition_epoch=%d "
                    "leader_end_offset=%d lag=%s", self._where(), sorted(out), sorted(committed.isr),
                    list(request.new_isr), self._partition_epoch, self._log.log_end_offset, lag)
        return True

    def _committed_state(self) -> CommittedPartitionState:
        if not isinstance(self._state, CommittedPartitionState):
            raise InvariantViolation(f"{self._where()}: an ISR change is already pending: {self._state}")
        return self._state

    def _alter_request(self, new_isr: frozenset[int], recovery: LeaderRecoveryState) -> AlterPartitionRequest:
        return AlterPartitionRequest(
            topic_id=self.topic_id, topic=self.topic, partition_index=self.index, leader_id=self.local_broker_id,
            leader_epoch=self._leader_epoch, new_isr=tuple(sorted(new_isr)), partition_epoch=self._partition_epoch,
            leader_recovery_state=recovery, based_on_isr=tuple(sorted(self._state.isr)))

    @property
    def pending_alter_partition(self) -> AlterPartitionRequest | None:
        """The proposal waiting for the controller, if any (in flight or not)."""
        return None if isinstance(self._state, CommittedPartitionState) else self._state.sent

    @property
    def has_alter_partition_request_to_send(self) -> bool:
        """:meth:`take_alter_partition_request` would hand out a proposal now."""
        return (not self._alter_request_sent and not isinstance(self._state, CommittedPartitionState)
                and self.is_leader)

    def take_alter_partition_request(self) -> AlterPartitionRequest | None:
        """The proposal to send now, once: None when none is pending or it is already in flight.

        After a retryable error (:meth:`handle_alter_partition_response`) it is handed out again.
        """
        request = self.pending_alter_partition
        if request is None or self._alter_request_sent or not self.is_leader:
            return None
        self._alter_request_sent = True
        return request

    def handle_alter_partition_response(self, request: AlterPartitionRequest, *, error: ErrorCode,
                                        result: LeaderAndIsr | None, now_ms: int) -> AlterPartitionOutcome:
        """Apply the controller's answer to ``request`` (Kafka's handleAlterPartitionUpdate/-Error).

        An answer to a proposal that is no longer pending is ignored. Errors:
        OPERATION_NOT_ATTEMPTED / INELIGIBLE_REPLICA drop the proposal (the ISR
        is recomputed on the next fetch or expiry check); UNKNOWN_TOPIC_OR_PARTITION,
        FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION and NEW_LEADER_ELECTED keep
        it pending until the metadata log brings the truth; anything else retries.
        """
        if self.pending_alter_partition != request or not self.is_leader:
            return AlterPartitionOutcome()
        if error is not ErrorCode.NONE:
            if error in (ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.INELIGIBLE_REPLICA):
                self._alter_request_sent = False
                self._state = self._state.last_committed if not isinstance(
                    self._state, CommittedPartitionState) else self._state
                logger.info("%s event=isr_change_rejected error=%s proposed_isr=%s", self._where(), error.name,
                            list(request.new_isr))
                return AlterPartitionOutcome()
            if error in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.FENCED_LEADER_EPOCH,
                         ErrorCode.INVALID_UPDATE_VERSION, ErrorCode.NEW_LEADER_ELECTED):
                # Our view is stale; the metadata log will replace it (make_leader/make_follower).
                # Until then the proposal stays pending and is not sent again.
                logger.info("%s event=isr_change_failed error=%s action=wait_for_metadata", self._where(),
                            error.name)
                return AlterPartitionOutcome()
            logger.info("%s event=isr_change_failed error=%s action=retry", self._where(), error.name)
            self._alter_request_sent = False
            return AlterPartitionOutcome(retry=True)
        if result is None:
            raise InvariantViolation(f"{self._where()}: AlterPartition answered NONE without a result")
        if result.leader_epoch != self._leader_epoch or result.partition_epoch < self._partition_epoch:
            logger.info("%s event=isr_change_answer_ignored answer_leader_epoch=%d answer_partition_epoch=%d "
                        "partition_epoch=%d", self._where(), result.leader_epoch, result.partition_epoch,
                        self._partition_epoch)
            return AlterPartitionOutcome()
        self._state = CommittedPartitionState(isr=frozenset(result.isr),
                                              leader_recovery_state=result.leader_recovery_state)
        self._alter_request_sent = False
        self._partition_epoch = result.partition_epoch
        logger.info("%s event=isr_updated isr=%s partition_epoch=%d", self._where(), sorted(result.isr),
                    result.partition_epoch)
        advanced = self.maybe_increment_high_watermark(now_ms)
        return AlterPartitionOutcome(applied=True, high_watermark_advanced=advanced)

    # ================================================================== leader: produce

    def _validation_config(self) -> log_validator.ValidationConfig:
        log_config = self._log.config
        cached = self._validation
        if (cached is None or cached[0] is not log_config or cached[1] is not self.config):
            cached = self._validation = (log_config, self.config, log_validator.ValidationConfig(
                timestamp_type=log_config.message_timestamp_type,
                timestamp_before_max_ms=log_config.message_timestamp_before_max_ms,
                timestamp_after_max_ms=log_config.message_timestamp_after_max_ms,
                compacted=self.config.compacted, max_message_bytes=self.config.max_message_bytes))
        return cached[2]

    def append_records_to_leader(self, batches: bytes | bytearray | memoryview, *, required_acks: int,
                                 now_ms: int) -> LeaderAppendResult:
        """Append a producer's batches, stamping offsets and our leader epoch (Kafka's appendRecordsToLeader).

        Errors: NOT_LEADER_OR_FOLLOWER; NOT_ENOUGH_REPLICAS for acks=all while the
        committed ISR is below ``min.insync.replicas`` (nothing is written);
        MESSAGE_TOO_LARGE for a batch above ``max.message.bytes``;
        RECORD_LIST_TOO_LARGE for more than a segment; what
        :func:`kraftlog.storage.log_validator.validate_batches` refuses (CORRUPT_MESSAGE,
        INVALID_RECORD, INVALID_TIMESTAMP, UNSUPPORTED_COMPRESSION_TYPE, MESSAGE_TOO_LARGE,
        with ``record_errors``); nothing is written then.
        """
        if not self.is_leader:
            return LeaderAppendResult(error=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                      error_message=f"broker {self.local_broker_id} is not the leader of "
                                                    f"{self.topic_partition} (leader {self._leader_id})")
        min_isr = self.config.min_insync_replicas
        if required_acks == -1 and len(self._state.isr) < min_isr:
            return LeaderAppendResult(
                error=ErrorCode.NOT_ENOUGH_REPLICAS,
                error_message=f"the ISR {sorted(self._state.isr)} of {self.topic_partition} is smaller than "
                              f"min.insync.replicas={min_isr}")
        inspected: list[tuple[producer_state.ProducerBatch | None, int]] = []
        size_error = self._check_sizes(batches, inspected)
        if size_error is not None:
            return size_error
        # Kafka's LogValidator: every record parsed (decompressed if need be) before anything
        # else looks at the batches; a refusal names the records at fault (KIP-467).
        rejection = log_validator.validate_batches(batches, self._validation_config(), now_ms=now_ms)
        if rejection is not None:
            logger.info("%s event=produce_rejected error=%s message=%r", self._where(), rejection.error.name,
                        rejection.message)
            return LeaderAppendResult(error=rejection.error, error_message=rejection.message,
                                      record_errors=rejection.record_errors)
        producers = [batch for batch, _delta in inspected]
        has_producer = any(batch is not None for batch in producers)
        if has_producer:
            check = self._producers.check_leader_append(producers)
            if check.duplicate is not None:
                return self._duplicate_append(check.duplicate)
            if check.error is not ErrorCode.NONE:
                logger.info("%s event=produce_rejected error=%s message=%r", self._where(), check.error.name,
                            check.message)
                return LeaderAppendResult(error=check.error, error_message=check.message)
        try:
            info = self._log.append_as_leader(batches, leader_epoch=self._leader_epoch, now_ms=now_ms)
        except CorruptRecordError as exc:
            # The validator checked what stamp_range checks; kept for a caller's buffer that
            # changed in between (it cannot, today).
            return LeaderAppendResult(error=ErrorCode.CORRUPT_MESSAGE, error_message=str(exc))
        if has_producer:
            offset = info.first_offset
            for batch, last_offset_delta in inspected:
                if batch is not None:
                    self._producers.append(batch, first_offset=offset, last_offset=offset + last_offset_delta)
                offset += last_offset_delta + 1
        return LeaderAppendResult(error=ErrorCode.NONE, info=info,
                                  high_watermark_advanced=self.maybe_increment_high_watermark(now_ms))

    def _duplicate_append(self, duplicate: producer_state.BatchMetadata) -> LeaderAppendResult:
        # Kafka answers a retried batch with the offsets it got the first time; an acks=all
        # produce still waits for the high watermark to pass them.
        logger.info("%s event=duplicate_produce first_sequence=%d last_sequence=%d first_offset=%d "
                    "last_offset=%d", self._where(), duplicate.first_sequence, duplicate.last_sequence,
                    duplicate.first_offset, duplicate.last_offset)
        info = storage_log.AppendInfo(
            first_offset=duplicate.first_offset, last_offset=duplicate.last_offset,
            max_timestamp=storage_log.NO_TIMESTAMP, offset_of_max_timestamp=-1, batch_count=0, record_count=0,
            valid_bytes=0, log_start_offset=self._log.log_start_offset)
        return LeaderAppendResult(error=ErrorCode.NONE, info=info, duplicate=True)

    def _check_sizes(self, batches: bytes | bytearray | memoryview,
                     inspected: list[tuple[producer_state.ProducerBatch | None, int]]
                     ) -> LeaderAppendResult | None:
        """Size checks; fills ``inspected`` with each batch's producer fields and last offset
        delta (one pass over the headers)."""
        total = len(batches)
        if total > self._log.config.segment_bytes:
            return LeaderAppendResult(
                error=ErrorCode.RECORD_LIST_TOO_LARGE,
                error_message=f"{total} bytes of batches exceed log.segment.bytes={self._log.config.segment_bytes}")
        limit = self.config.max_message_bytes
        try:
            for index, header in enumerate(batch_header.iter_batches(batches)):
                if header.size_in_bytes > limit:
                    return LeaderAppendResult(
                        error=ErrorCode.MESSAGE_TOO_LARGE,
                        error_message=f"batch {index} is {header.size_in_bytes} bytes, more than "
                                      f"max.message.bytes={limit}")
                inspected.append((producer_state.ProducerBatch.of(header), header.last_offset_delta))
        except CorruptRecordError as exc:
            return LeaderAppendResult(error=ErrorCode.CORRUPT_MESSAGE, error_message=str(exc))
        return None

    def check_enough_replicas_reach_offset(self, required_offset: int) -> tuple[bool, ErrorCode]:
        """For a delayed acks=all produce: ``(done, error)`` (Kafka's checkEnoughReplicasReachOffset).

        Done once the high watermark reaches ``required_offset`` (one past the
        produce's last offset); then NOT_ENOUGH_REPLICAS_AFTER_APPEND if the
        maximal ISR fell below ``min.insync.replicas`` meanwhile. Not leader:
        ``(False, NOT_LEADER_OR_FOLLOWER)``.
        """
        if not self.is_leader:
            return False, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self._high_watermark >= required_offset:
            if len(self._state.maximal_isr) >= self.config.min_insync_replicas:
                return True, ErrorCode.NONE
            return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return False, ErrorCode.NONE

    # ================================================================== reads

    def check_current_leader_epoch(self, current_leader_epoch: int) -> ErrorCode:
        """KIP-320 fencing: FENCED_LEADER_EPOCH below ours, UNKNOWN_LEADER_EPOCH above, -1 skips."""
        if current_leader_epoch == NO_PARTITION_LEADER_EPOCH:
            return ErrorCode.NONE
        if current_leader_epoch < self._leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if current_leader_epoch > self._leader_epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        return ErrorCode.NONE

    def _error_read(self, error: ErrorCode, message: str, offsets: ReadResult | None = None) -> ReadResult:
        if offsets is None:
            return ReadResult(error=error, error_message=message, leader_id=self._leader_id,
                              leader_epoch=self._leader_epoch)
        return dataclasses.replace(offsets, error=error, error_message=message)

    def read_records(self, *, fetch_offset: int, max_bytes: int, isolation: FetchIsolation, now_ms: int,
                     replica_id: int = CONSUMER_REPLICA_ID,
                     current_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
                     last_fetched_epoch: int = NO_PARTITION_LEADER_EPOCH,
                     follower_log_start_offset: int = UNKNOWN_OFFSET, fetch_only_leader: bool = True,
                     min_one_message: bool = True, update_fetch_state: bool = True) -> ReadResult:
        """Serve a Fetch for this partition (Kafka's Partition.fetchRecords/readRecords).

        Order of checks: leader epoch (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH),
        leadership (NOT_LEADER_OR_FOLLOWER), the follower being a replica; then,
        given a ``last_fetched_epoch``, the diverging-epoch check: if the
        follower's last epoch ends earlier on our log than its fetch offset, or
        we never had that epoch, the answer is ``diverging_epoch`` = (our
        largest epoch <= it, its end offset) and no records; OFFSET_OUT_OF_RANGE
        outside [log start, log end] (or when the epoch's end is unknown).
        Consumers read up to the high watermark. A follower's successful read
        records its fetch state (ISR expansion, high watermark).
        """
        epoch_error = self.check_current_leader_epoch(current_leader_epoch)
        if epoch_error is not ErrorCode.NONE:
            return self._error_read(epoch_error, f"request leader epoch {current_leader_epoch}, "
                                                 f"{self.topic_partition} is at {self._leader_epoch}")
        if fetch_only_leader and not self.is_leader:
            return self._error_read(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                    f"broker {self.local_broker_id} is not the leader of {self.topic_partition}")
        is_follower = replica_id >= 0
        if is_follower and replica_id not in self._remote:
            # The fetcher may know a reassignment we have not replayed yet (same epoch): let it retry.
            error = (ErrorCode.UNKNOWN_LEADER_EPOCH if current_leader_epoch == self._leader_epoch
                     and current_leader_epoch != NO_PARTITION_LEADER_EPOCH else ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return self._error_read(error, f"broker {replica_id} is not a replica of {self.topic_partition}")
        high_watermark = self._high_watermark
        log_start = self._log.log_start_offset
        log_end = self._log.log_end_offset
        if last_fetched_epoch != NO_PARTITION_LEADER_EPOCH:
            end = self.end_offset_for_epoch(last_fetched_epoch)
            diverged = end.epoch < last_fetched_epoch or end.end_offset < fetch_offset
            problem = ("" if end.epoch != leader_epoch.UNDEFINED_EPOCH
                       and end.end_offset != leader_epoch.UNDEFINED_EPOCH_OFFSET
                       else f"cannot determine the end offset of epoch {last_fetched_epoch} of "
                            f"{self.topic_partition}")
            if not problem and fetch_offset < log_start:
                problem = f"fetch offset {fetch_offset} is below the log start offset {log_start}"
            if problem or diverged:
                # Offsets as they were before the read (Kafka's LogReadInfo.initial*).
                offsets = ReadResult(
                    error=ErrorCode.NONE, high_watermark=high_watermark, log_start_offset=log_start,
                    log_end_offset=log_end, last_stable_offset=high_watermark, next_offset=fetch_offset,
                    leader_id=self._leader_id, leader_epoch=self._leader_epoch)
                if problem:
                    return self._error_read(ErrorCode.OFFSET_OUT_OF_RANGE, problem, offsets)
                return dataclasses.replace(offsets, diverging_epoch=end)
        max_offset = None if isolation is FetchIsolation.LOG_END else high_watermark
        try:
            data = self._log.read(fetch_offset, max_bytes, max_offset=max_offset, min_one_message=min_one_message)
        except OffsetOutOfRangeError as exc:
            return self._error_read(ErrorCode.OFFSET_OUT_OF_RANGE, str(exc), ReadResult(
                error=ErrorCode.NONE, high_watermark=high_watermark, log_start_offset=log_start,
                log_end_offset=log_end, last_stable_offset=high_watermark, next_offset=fetch_offset,
                leader_id=self._leader_id, leader_epoch=self._leader_epoch))
        advanced = False
        if is_follower and update_fetch_state:
            advanced = self.update_follower_fetch_state(
                replica_id, fetch_offset=fetch_offset, leader_end_offset=log_end, now_ms=now_ms,
                log_start_offset=follower_log_start_offset, fetch_offset_metadata=data.fetch_offset_metadata)
        # One result, built once: the read path runs per partition per Fetch (issue 16).
        return ReadResult(error=ErrorCode.NONE, high_watermark=high_watermark, log_start_offset=log_start,
                          log_end_offset=log_end, last_stable_offset=high_watermark,
                          next_offset=data.next_offset, leader_id=self._leader_id,
                          leader_epoch=self._leader_epoch, records=data.records,
                          fetch_offset_metadata=data.fetch_offset_metadata, high_watermark_advanced=advanced)

    def bytes_available(self, *, fetch_offset_metadata: storage_log.LogOffsetMetadata,
                        isolation: FetchIsolation, current_leader_epoch: int, last_fetched_epoch: int,
                        fetch_only_leader: bool = True) -> int | None:
        """For a waiting fetch: bytes readable past ``fetch_offset_metadata``, or None to answer now.

        None when the answer changed (fencing, leadership, a diverged or
        truncated log, a rolled segment: the estimate cannot be trusted), as in
        Kafka's DelayedFetch.tryComplete.
        """
        if self.check_current_leader_epoch(current_leader_epoch) is not ErrorCode.NONE:
            return None
        if fetch_only_leader and not self.is_leader:
            return None
        fetch_offset = fetch_offset_metadata.message_offset
        if last_fetched_epoch != NO_PARTITION_LEADER_EPOCH:
            end = self.end_offset_for_epoch(last_fetched_epoch)
            if end.epoch < last_fetched_epoch or end.end_offset < fetch_offset:
                return None
        end_metadata: storage_log.LogOffsetMetadata | None
        if isolation is FetchIsolation.LOG_END:
            end_metadata = self._log.log_end_offset_metadata
        else:
            end_metadata = self._high_watermark_metadata
            if end_metadata is None or end_metadata.message_offset != self._high_watermark:
                # Position unknown (after a restart or role change): any progress answers now.
                return None if self._high_watermark != fetch_offset else 0
        if end_metadata.message_offset == fetch_offset:
            return 0
        if end_metadata.message_offset < fetch_offset:
            return None
        if end_metadata.segment_base_offset != fetch_offset_metadata.segment_base_offset:
            return None
        return max(0, end_metadata.relative_position_in_segment - fetch_offset_metadata.relative_position_in_segment)

    # ================================================================== follower side

    def append_records_to_follower(self, batches: bytes | bytearray | memoryview, *,
                                   now_ms: int) -> storage_log.AppendInfo:
        """Append the leader's batches as they are (offsets and epochs kept).

        Raises OffsetOutOfRangeError when they do not start at our log end,
        CorruptRecordError for a bad batch, InvariantViolation as leader.
        """
        if self.is_leader:
            raise InvariantViolation(f"{self._where()}: follower append on the leader")
        info = self._log.append_as_follower(batches, now_ms=now_ms)
        if info.batch_count:
            # The leader checked them (Kafka's origin REPLICATION): just keep the same state.
            self._producers.append_headers(batch_header.iter_batches(batches))
        return info

    def update_follower_high_watermark(self, leader_high_watermark: int) -> bool:
        """A follower adopts ``min(leader's high watermark, own log end)``; True if it changed."""
        if self.is_leader:
            raise InvariantViolation(f"{self._where()}: follower high watermark update on the leader")
        new_hw = min(max(leader_high_watermark, self._log.log_start_offset), self._log.log_end_offset)
        if new_hw == self._high_watermark:
            return False
        self._high_watermark = new_hw
        return True

    def truncate_to(self, offset: int) -> bool:
        """Cut the log at ``offset`` (a follower's divergent tail); True if anything was removed.

        The high watermark follows the log down. Going below it means an
        unclean election lost acknowledged records: logged as a warning.
        """
        if self.is_leader:
            raise InvariantViolation(f"{self._where()}: truncation on the leader")
        if offset < self._high_watermark:
            logger.warning("%s event=truncate_below_high_watermark offset=%d high_watermark=%d",
                           self._where(), offset, self._high_watermark)
        # Replay the log's headers only if the cut removes some producer's batches.
        reload_producers = self._producers.has_batches_from(offset)
        # Before the cut: a snapshot above it would describe batches the log no longer has.
        producer_snapshot.delete_above(self._log.directory, offset)
        removed = self._log.truncate_to(offset)
        # Always cut the epoch cache too, even when no record went (Kafka's UnifiedLog.truncateTo):
        # a broker that led an epoch without appending keeps an entry at its log end that the new
        # leader never had, and would otherwise ask about that epoch forever.
        self._epoch_cache.truncate_from_end(self._log.log_end_offset)
        self._clamp_high_watermark()
        if removed and reload_producers:
            self._reload_producer_state()
            logger.info("%s event=truncate offset=%d log_end_offset=%d high_watermark=%d", self._where(),
                        offset, self._log.log_end_offset, self._high_watermark)
        return removed

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop the whole log and restart it at ``offset`` (a follower behind the leader's log start)."""
        if self.is_leader:
            raise InvariantViolation(f"{self._where()}: full truncation on the leader")
        producer_snapshot.delete_above(self._log.directory, -1)
        self._log.truncate_fully_and_start_at(offset)
        self._producers.clear()
        self._high_watermark = offset
        logger.info("%s event=truncate_fully start_offset=%d", self._where(), offset)

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Follow the leader's log start offset (as far as our log reaches)."""
        moved = self._log.maybe_increment_log_start_offset(min(offset, self._log.log_end_offset))
        self._clamp_high_watermark()
        if moved:
            self._producers.truncate_head(self._log.log_start_offset)
        return moved

    def delete_old_segments(self, now_ms: int) -> int:
        """Apply retention below the high watermark (followers may still need the rest); segments deleted.

        Producers whose every batch went are forgotten: their next batch must
        start at sequence 0 (UNKNOWN_PRODUCER_ID otherwise).
        """
        deleted = self._log.delete_old_segments(now_ms, high_watermark=self._high_watermark)
        if deleted:
            dropped = self._producers.truncate_head(self._log.log_start_offset)
            if dropped:
                logger.info("%s event=producers_expired count=%d log_start_offset=%d", self._where(), dropped,
                            self._log.log_start_offset)
        return deleted

    # ================================================================== DeleteRecords (leader)

    def delete_records_on_leader(self, offset: int) -> tuple[ErrorCode, int, str]:
        """Move the log start offset to ``offset`` (-1: the high watermark) and delete whole
        segments below it (Kafka's Partition.deleteRecordsOnLeader); returns (error, the
        offset asked for after -1 was resolved, message).

        NOT_LEADER_OR_FOLLOWER off the leader; OFFSET_OUT_OF_RANGE below -1 or past the
        high watermark (only committed records may go: a follower must never be asked to
        start past what it may have). Moving it backwards is no error: nothing changes.
        Raises OSError when the log's files fail.
        """
        if not self.is_leader:
            return (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1,
                    f"broker {self.local_broker_id} is not the leader of {self.topic_partition}")
        target = self._high_watermark if offset == -1 else offset
        if target < 0 or target > self._high_watermark:
            return (ErrorCode.OFFSET_OUT_OF_RANGE, -1,
                    f"cannot delete records of {self.topic_partition} below offset {offset}: it "
                    f"must be -1 (the high watermark) or between 0 and the high watermark "
                    f"{self._high_watermark}")
        if self.maybe_increment_log_start_offset(target):
            logger.info("%s event=delete_records log_start_offset=%d", self._where(), target)
        return ErrorCode.NONE, target, ""

    def low_watermark_if_leader(self) -> tuple[ErrorCode, int]:
        """The smallest log start offset among this leader and its live followers (Kafka's
        lowWatermarkIfLeader): what DeleteRecords waits on. A follower that has not
        fetched in this leader epoch counts as -1; a fenced or unregistered broker is
        not waited for."""
        if not self.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, -1
        low = self._log.log_start_offset
        for replica_id, replica in self._remote.items():
            if self._is_replica_isr_eligible(replica_id):
                low = min(low, replica.log_start_offset)
        return ErrorCode.NONE, low

    def _clamp_high_watermark(self) -> None:
        self._high_watermark = min(max(self._high_watermark, self._log.log_start_offset),
                                   self._log.log_end_offset)
        self._high_watermark_metadata = None


def iter_log_headers(log: storage_log.Log, *, start_offset: int = 0) -> Iterator[batch_header.BatchHeader]:
    """Every batch header of ``log`` from ``start_offset`` (at least its start offset) to its end.

    Reads the log in :data:`PRODUCER_STATE_SCAN_BYTES` steps (whole batches, headers only
    looked at; records are never decoded). Batches wholly below ``start_offset`` are skipped.
    """
    offset = max(start_offset, log.log_start_offset)
    end = log.log_end_offset
    while offset < end:
        data = log.read(offset, PRODUCER_STATE_SCAN_BYTES, min_one_message=True)
        if not data.records or data.next_offset <= offset:
            return
        for header in batch_header.iter_batches(data.records):
            if header.last_offset >= start_offset:
                yield header
        offset = data.next_offset
