"""A follower's fetch state for one partition (the pure part of Kafka's ReplicaFetcherThread).

Owns, for one partition this broker follows, what the fetcher needs between
two Fetch round trips: whether to fetch now, wait (backoff), stop until the
metadata log brings a new leader epoch (fenced), or first learn the leader's
log end offset (after OFFSET_OUT_OF_RANGE); it builds the partition's entry of
the next Fetch (fetch offset = our log end offset, last fetched epoch = our
latest epoch, KIP-320) and applies the answer to the
:class:`~kraftlog.broker.partition.Partition`:

* ``diverging_epoch`` → truncate to where our logs agree (Kafka's
  ``getOffsetTruncationState``), then fetch again; a follower that does not
  know the leader's epoch truncates to the end of its own largest epoch below
  it and asks again, until both sides name the same epoch;
* records → append them as they are; high watermark = min(leader's, own log
  end); log start offset follows the leader's;
* OFFSET_OUT_OF_RANGE → behind the leader's log start: restart the log there;
  otherwise ask for the leader's log end (ListOffsets) and truncate to it if ahead;
* FENCED_LEADER_EPOCH → stop until the reconciler calls ``make_follower`` with
  a newer epoch (it then creates a new :class:`FollowerFetchState`);
  UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER and other errors → back off
  ``replica.fetch.backoff.ms`` and retry.

States::

    FETCHING --error--> DELAYED --backoff over--> FETCHING
    FETCHING --FENCED_LEADER_EPOCH--> FENCED (final: wait for metadata)
    FETCHING --OFFSET_OUT_OF_RANGE, not behind--> AWAITING_LEADER_END_OFFSET
             --handle_leader_end_offset--> FETCHING

Called by the replica fetcher task (one per source broker), which owns the
network, the clock and batching several partitions into one Fetch. Must not:
import asyncio, grpc or a clock; send anything; touch other partitions.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from kraftlog.broker import partition as partition_mod
from kraftlog.error_codes import ErrorCode
from kraftlog.errors import CorruptRecordError, OffsetOutOfRangeError
from kraftlog.ids import TopicPartition, Uuid
from kraftlog.storage import leader_epoch
from kraftlog.storage import log as storage_log

logger = logging.getLogger(__name__)

DEFAULT_REPLICA_FETCH_BACKOFF_MS = 1000
"""``replica.fetch.backoff.ms``."""
DEFAULT_REPLICA_FETCH_MAX_BYTES = 1024 * 1024
"""``replica.fetch.max.bytes``: the per-partition bound of a follower's fetch."""


class FollowerStatus(enum.Enum):
    FETCHING = "fetching"
    DELAYED = "delayed"
    """Backing off after an error until ``delayed_until_ms``."""
    AWAITING_LEADER_END_OFFSET = "awaiting_leader_end_offset"
    """OFFSET_OUT_OF_RANGE while not behind the leader's log start: the fetcher
    must ask the leader's log end offset (ListOffsets latest, replica id set)."""
    FENCED = "fenced"
    """The leader has a newer epoch than ours: wait for the metadata log."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FollowerFetchRequest:
    """One partition's entry in a follower's Fetch (FetchRequest.FetchPartition)."""

    topic_partition: TopicPartition
    topic_id: Uuid
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FollowerFetchResponse:
    """One partition's answer (FetchResponse.PartitionData)."""

    error: ErrorCode
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    diverging_epoch: partition_mod.EpochEndOffset | None = None


class FollowerAction(enum.Enum):
    """What handling an answer did (for logs, metrics and the fetcher's bookkeeping)."""

    APPENDED = "appended"
    """Records were appended (or none were due); fetch again."""
    TRUNCATED = "truncated"
    """The log was cut to the point of divergence; fetch again."""
    RESET = "reset"
    """The log was restarted at the leader's log start offset."""
    IGNORED = "ignored"
    """The answer was for a request that is no longer current."""
    BACKOFF = "backoff"
    FENCED = "fenced"
    LIST_OFFSETS = "list_offsets"
    """Ask the leader's log end offset, then call :meth:`FollowerFetchState.handle_leader_end_offset`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FollowerOutcome:
    action: FollowerAction
    error: ErrorCode = ErrorCode.NONE
    appended: storage_log.AppendInfo | None = None
    truncated_to: int | None = None
    high_watermark_changed: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetTruncationState:
    """Where to cut, and whether the logs then agree (Kafka's OffsetTruncationState)."""

    offset: int
    truncation_completed: bool


def offset_truncation_state(*, diverging: partition_mod.EpochEndOffset, follower_end_for_epoch:
                            partition_mod.EpochEndOffset, log_end_offset: int) -> OffsetTruncationState:
    """Kafka's ``AbstractFetcherThread.getOffsetTruncationState``, pure.

    ``diverging`` is the leader's (epoch, end offset) for our last fetched
    epoch; ``follower_end_for_epoch`` is our own answer for ``diverging.epoch``.
    """
    if diverging.end_offset == leader_epoch.UNDEFINED_EPOCH_OFFSET:
        # The leader cannot say where the epoch ends: keep the log (Kafka uses
        # the fetch offset, our log end). Our leader answers OFFSET_OUT_OF_RANGE instead.
        return OffsetTruncationState(offset=log_end_offset, truncation_completed=True)
    if diverging.epoch == leader_epoch.UNDEFINED_EPOCH or \
            follower_end_for_epoch.end_offset == leader_epoch.UNDEFINED_EPOCH_OFFSET:
        # Either side has no epoch to compare: trust the leader's end offset.
        return OffsetTruncationState(offset=min(diverging.end_offset, log_end_offset), truncation_completed=True)
    if follower_end_for_epoch.epoch != diverging.epoch:
        # We never had the leader's epoch: cut to where our largest epoch below
        # it ends, then ask again with that epoch.
        return OffsetTruncationState(offset=min(follower_end_for_epoch.end_offset, log_end_offset),
                                     truncation_completed=False)
    return OffsetTruncationState(
        offset=min(follower_end_for_epoch.end_offset, diverging.end_offset, log_end_offset),
        truncation_completed=True)


class FollowerFetchState:
    """The fetch state of one followed partition for one (leader, leader epoch). See the module docstring."""

    def __init__(self, partition: partition_mod.Partition, *, leader_id: int, leader_epoch: int,
                 fetch_backoff_ms: int = DEFAULT_REPLICA_FETCH_BACKOFF_MS,
                 partition_max_bytes: int = DEFAULT_REPLICA_FETCH_MAX_BYTES) -> None:
        if partition.is_leader:
            raise ValueError(f"{partition.topic_partition}: this broker leads it, it cannot follow")
        self.partition = partition
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.fetch_backoff_ms = fetch_backoff_ms
        self.partition_max_bytes = partition_max_bytes
        self.status = FollowerStatus.FETCHING
        self.delayed_until_ms = 0
        self._last_key: tuple[int, int, int] | None = None
        self._last_request: FollowerFetchRequest | None = None
        self.lag: int | None = None
        """The leader's high watermark minus our log end after the last append; None before one."""

    @property
    def is_replica_in_sync(self) -> bool:
        """Caught up with the leader's high watermark at the last answer (Kafka's
        ``PartitionFetchState.isReplicaInSync``): such a replica is never throttled."""
        return self.lag is not None and self.lag <= 0

    def _where(self) -> str:
        return (f"broker={self.partition.local_broker_id} partition={self.partition.topic_partition} "
                f"epoch={self.leader_epoch} leader={self.leader_id}")

    def is_fetchable(self, now_ms: int) -> bool:
        if self.status is FollowerStatus.DELAYED and now_ms >= self.delayed_until_ms:
            self.status = FollowerStatus.FETCHING
        return self.status is FollowerStatus.FETCHING

    def build_fetch_request(self, now_ms: int) -> FollowerFetchRequest | None:
        """This partition's entry of the next Fetch, or None while it must not fetch."""
        if not self.is_fetchable(now_ms):
            return None
        p = self.partition
        key = (p.log_end_offset, p.latest_epoch, p.log_start_offset)
        if self._last_request is not None and key == self._last_key:
            # The same request as last round (an idle partition): the same object, so a fetch
            # session sees "unchanged" by identity (issue 16).
            return self._last_request
        self._last_key = key
        self._last_request = FollowerFetchRequest(
            topic_partition=p.topic_partition, topic_id=p.topic_id, current_leader_epoch=self.leader_epoch,
            fetch_offset=key[0], last_fetched_epoch=key[1], log_start_offset=key[2],
            partition_max_bytes=self.partition_max_bytes)
        return self._last_request

    def _back_off(self, error: ErrorCode, now_ms: int, reason: str) -> FollowerOutcome:
        self.status = FollowerStatus.DELAYED
        self.delayed_until_ms = now_ms + self.fetch_backoff_ms
        logger.info("%s event=fetch_backoff error=%s backoff_ms=%d reason=%r", self._where(), error.name,
                    self.fetch_backoff_ms, reason)
        return FollowerOutcome(action=FollowerAction.BACKOFF, error=error)

    def handle_fetch_response(self, request: FollowerFetchRequest, response: FollowerFetchResponse, *,
                              now_ms: int) -> FollowerOutcome:
        """Apply the leader's answer to ``request`` (see the module docstring)."""
        p = self.partition
        if (self.status is not FollowerStatus.FETCHING or request.current_leader_epoch != self.leader_epoch
                or request.fetch_offset != p.log_end_offset or p.is_leader):
            # The log or our role moved since the request left: its answer no longer applies.
            return FollowerOutcome(action=FollowerAction.IGNORED, error=response.error)
        error = response.error
        if error is ErrorCode.NONE:
            if response.diverging_epoch is not None:
                return self._truncate_on_divergence(response.diverging_epoch)
            return self._append(response, now_ms)
        if error is ErrorCode.OFFSET_OUT_OF_RANGE:
            return self._handle_out_of_range(request, response)
        if error is ErrorCode.FENCED_LEADER_EPOCH:
            self.status = FollowerStatus.FENCED
            logger.info("%s event=fetch_fenced action=wait_for_metadata", self._where())
            return FollowerOutcome(action=FollowerAction.FENCED, error=error)
        return self._back_off(error, now_ms, "leader answered an error")

    def handle_idle_answer(self, request: FollowerFetchRequest, *, high_watermark: int,
                           log_start_offset: int) -> bool:
        """The fast path of :meth:`handle_fetch_response` for an answer without error, records
        or diverging epoch that changes nothing here (the same high watermark, no log start
        beyond ours): True when it was that and is handled; False to take the full path.

        An idle broker gets such an answer for every followed partition twice a second
        (issue 16), so it must cost no more than a few comparisons."""
        p = self.partition
        if (self.status is not FollowerStatus.FETCHING or request.current_leader_epoch != self.leader_epoch
                or request.fetch_offset != p.log_end_offset or p.is_leader
                or log_start_offset > p.log_start_offset):
            return False
        log_end = p.log_end_offset
        if min(max(high_watermark, p.log_start_offset), log_end) != p.high_watermark:
            return False
        self.lag = max(0, high_watermark - log_end)
        return True

    def _truncate_on_divergence(self, diverging: partition_mod.EpochEndOffset) -> FollowerOutcome:
        p = self.partition
        ours = p.end_offset_for_epoch(diverging.epoch)
        state = offset_truncation_state(diverging=diverging, follower_end_for_epoch=ours,
                                        log_end_offset=p.log_end_offset)
        p.truncate_to(state.offset)
        logger.info("%s event=truncate_on_diverging_epoch leader_epoch_end=%d@%d follower_epoch_end=%d@%d "
                    "truncate_to=%d completed=%s log_end_offset=%d", self._where(), diverging.epoch,
                    diverging.end_offset, ours.epoch, ours.end_offset, state.offset, state.truncation_completed,
                    p.log_end_offset)
        return FollowerOutcome(action=FollowerAction.TRUNCATED, truncated_to=state.offset)

    def _append(self, response: FollowerFetchResponse, now_ms: int) -> FollowerOutcome:
        p = self.partition
        info: storage_log.AppendInfo | None = None
        if response.records:
            try:
                info = p.append_records_to_follower(response.records, now_ms=now_ms)
            except (OffsetOutOfRangeError, CorruptRecordError) as exc:
                # A leader never sends this for the offset we asked; back off
                # rather than crash the fetcher for every partition it serves.
                logger.error("%s event=follower_append_failed error=%r", self._where(), str(exc))
                return self._back_off(ErrorCode.CORRUPT_MESSAGE, now_ms, str(exc))
        if response.log_start_offset > p.log_start_offset:
            p.maybe_increment_log_start_offset(response.log_start_offset)
        changed = p.update_follower_high_watermark(response.high_watermark)
        self.lag = max(0, response.high_watermark - p.log_end_offset)
        return FollowerOutcome(action=FollowerAction.APPENDED, appended=info, high_watermark_changed=changed)

    def _handle_out_of_range(self, request: FollowerFetchRequest,
                             response: FollowerFetchResponse) -> FollowerOutcome:
        p = self.partition
        if response.log_start_offset >= 0 and request.fetch_offset < response.log_start_offset:
            # Behind the leader's log start (retention moved on): start over there.
            p.truncate_fully_and_start_at(response.log_start_offset)
            logger.info("%s event=reset_to_leader_log_start offset=%d", self._where(), response.log_start_offset)
            return FollowerOutcome(action=FollowerAction.RESET, error=ErrorCode.OFFSET_OUT_OF_RANGE,
                                   truncated_to=response.log_start_offset)
        self.status = FollowerStatus.AWAITING_LEADER_END_OFFSET
        return FollowerOutcome(action=FollowerAction.LIST_OFFSETS, error=ErrorCode.OFFSET_OUT_OF_RANGE)

    def handle_leader_end_offset(self, leader_log_end_offset: int, *, now_ms: int) -> FollowerOutcome:
        """After OFFSET_OUT_OF_RANGE: the leader's log end offset (Kafka's handleOffsetOutOfRange)."""
        if self.status is not FollowerStatus.AWAITING_LEADER_END_OFFSET:
            return FollowerOutcome(action=FollowerAction.IGNORED)
        self.status = FollowerStatus.FETCHING
        p = self.partition
        if leader_log_end_offset < p.log_end_offset:
            p.truncate_to(leader_log_end_offset)
            return FollowerOutcome(action=FollowerAction.TRUNCATED, truncated_to=leader_log_end_offset)
        # Neither ahead nor behind: the range moved under us; try again later.
        return self._back_off(ErrorCode.OFFSET_OUT_OF_RANGE, now_ms,
                              "offset out of range but within the leader's log")
