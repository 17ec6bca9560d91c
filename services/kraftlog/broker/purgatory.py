"""Delayed produce and fetch operations (Kafka's DelayedOperationPurgatory, DelayedProduce, DelayedFetch).

Owns the operations that wait: an acks=all produce until the high watermark of
each of its partitions reaches one past its last offset (then NONE, or
NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR fell below ``min.insync.replicas``
meanwhile, or NOT_LEADER_OR_FOLLOWER after losing leadership), or until
``timeout_ms`` (REQUEST_TIMED_OUT: the data may still commit); a fetch until
``min_bytes`` are readable, or something changed that answers it at once
(leadership, epochs, divergence, truncation), or ``max_wait_ms``.

Operations are watched by partition (:class:`TopicPartition` keys, Kafka's watch
lists). :meth:`Purgatory.check_and_complete` is called by the replica manager when a
partition changes (append, high watermark, role, replica state); :meth:`Purgatory.expire`
by its poll with the injected clock. Completed operations are returned to the
caller, which answers them; nothing here calls back into the network.

Cost model (issue 16): work is proportional to change, not to size. A change of
partition ``tp`` tries only the operations watching ``tp``, and each of them looks
again only at ``tp``: the first check of an operation evaluates every partition and
keeps the per-partition result (a fetch's readable bytes, a produce's partitions still
waiting), and a later check replaces just the changed partition's part. That is sound
because every change that can alter a partition's answer calls
:meth:`Purgatory.check_and_complete` for it (the owner's contract). An operation that
completes or expires leaves the watch lists of its keys at once (O(its keys)), never
by a sweep over every watched partition. A fetch records which of its partitions
changed while it waited (:attr:`DelayedFetch.changed`), so its owner re-reads only
those when the wait ends.

Must not: read a clock, run timers or threads, or hold request bytes longer
than the operation lives. Pure and single-threaded: one owner calls it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from kraftlog.broker import partition as partition_mod
from kraftlog.error_codes import ErrorCode
from kraftlog.ids import TopicPartition
from kraftlog.storage import log as storage_log
from kraftlog.storage import log_validator


class DelayedOperation(Protocol):
    """What the purgatory needs of an operation."""

    @property
    def op_id(self) -> int: ...

    @property
    def deadline_ms(self) -> int: ...

    @property
    def keys(self) -> Iterable[TopicPartition]: ...


OpT = TypeVar("OpT", bound=DelayedOperation)


TryComplete = Callable[[OpT, "TopicPartition | None"], bool]
"""``try_complete(op, changed)``: True when ``op`` can be answered now. ``changed`` is the
one partition that changed since ``op``'s last check, or None for its first check
(evaluate every partition)."""


class Purgatory(Generic[OpT]):
    """Operations waiting on partitions, completed by checks or expired by time.

    Invariant: an operation is in ``_pending`` until it completes exactly once,
    by ``try_complete`` returning True or by expiry; it is then removed from the
    watch list of each of its keys at once. The expiry heap may still hold
    completed ones and drops them lazily.
    """

    def __init__(self, *, try_complete: TryComplete[OpT], on_expire: Callable[[OpT], None]) -> None:
        self._try_complete = try_complete
        self._on_expire = on_expire
        self._pending: dict[int, OpT] = {}
        # key -> the operations watching it, by op id (insertion order = arrival order).
        self._watchers: dict[TopicPartition, dict[int, OpT]] = {}
        self._expiry: list[tuple[int, int, OpT]] = []
        self._sequence = 0

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, op_id: object) -> bool:
        return op_id in self._pending

    def watched_keys(self) -> int:
        """Partitions with at least one waiting operation (tests, metrics)."""
        return len(self._watchers)

    def try_complete_else_watch(self, op: OpT) -> bool:
        """Complete ``op`` now if it can be (True), else watch its keys until it can or expires."""
        if op.op_id in self._pending:
            raise ValueError(f"delayed operation {op.op_id} is already waiting")
        if self._try_complete(op, None):
            return True
        self.watch(op)
        return False

    def watch(self, op: OpT) -> None:
        """Watch ``op`` without a first check: its owner has just evaluated it as the first
        check would (and nothing can change in between: one owner, one thread)."""
        if op.op_id in self._pending:
            raise ValueError(f"delayed operation {op.op_id} is already waiting")
        self._pending[op.op_id] = op
        for key in op.keys:
            self._watchers.setdefault(key, {})[op.op_id] = op
        self._sequence += 1
        heapq.heappush(self._expiry, (op.deadline_ms, self._sequence, op))

    def check_and_complete(self, key: TopicPartition) -> list[OpT]:
        """``key`` changed: try the operations watching it (and only them, on ``key``
        only); returns those that completed."""
        watching = self._watchers.get(key)
        if not watching:
            return []
        completed: list[OpT] = []
        for op in list(watching.values()):
            if self._try_complete(op, key):
                del self._pending[op.op_id]
                self._unwatch(op)
                completed.append(op)
        return completed

    def expire(self, now_ms: int) -> list[OpT]:
        """Complete every operation whose deadline is at or before ``now_ms``, in deadline order."""
        expired: list[OpT] = []
        while self._expiry and self._expiry[0][0] <= now_ms:
            _deadline, _seq, op = heapq.heappop(self._expiry)
            if self._pending.pop(op.op_id, None) is None:
                continue
            self._unwatch(op)
            self._on_expire(op)
            expired.append(op)
        return expired

    def next_deadline_ms(self) -> int | None:
        """The earliest deadline of a pending operation (when the owner should poll next)."""
        while self._expiry and self._expiry[0][2].op_id not in self._pending:
            heapq.heappop(self._expiry)
        return self._expiry[0][0] if self._expiry else None

    def _unwatch(self, op: OpT) -> None:
        for key in op.keys:
            watching = self._watchers.get(key)
            if watching is not None:
                watching.pop(op.op_id, None)
                if not watching:
                    del self._watchers[key]


# ================================================================== produce


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducePartitionResponse:
    """One partition's produce outcome (ProduceResponse.PartitionProduceResponse)."""

    error: ErrorCode
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str = ""
    leader_id: int = -1
    """The leader as this broker knows it, with NOT_LEADER_OR_FOLLOWER (KIP-951)."""
    leader_epoch: int = -1
    record_errors: tuple[log_validator.RecordError, ...] = ()
    """The records the leader's validator refused (KIP-467)."""


class ProducePartitionStatus:
    """A partition of a delayed produce: the offset the high watermark must reach, and its answer so far."""

    __slots__ = ("acks_pending", "required_offset", "response")

    def __init__(self, *, required_offset: int, response: ProducePartitionResponse) -> None:
        self.required_offset = required_offset
        self.response = response
        # Partitions that failed their append answer at once; only the others wait.
        self.acks_pending = response.error is ErrorCode.NONE


class DelayedProduce:
    """An acks=all produce waiting for replication (Kafka's DelayedProduce)."""

    __slots__ = ("_deadline_ms", "_op_id", "_waiting", "statuses")

    def __init__(self, *, op_id: int, deadline_ms: int, statuses: Mapping[TopicPartition, ProducePartitionStatus]):
        self._op_id = op_id
        self._deadline_ms = deadline_ms
        self.statuses = dict(statuses)
        # The partitions still waiting for acks (their keys): fixed at creation, shrinking.
        self._waiting = [tp for tp, status in self.statuses.items() if status.acks_pending]

    @property
    def op_id(self) -> int:
        return self._op_id

    @property
    def deadline_ms(self) -> int:
        return self._deadline_ms

    @property
    def keys(self) -> Iterable[TopicPartition]:
        return self._waiting

    def responses(self) -> dict[TopicPartition, ProducePartitionResponse]:
        return {tp: status.response for tp, status in self.statuses.items()}


def _produce_check_one(check: Callable[[TopicPartition, int], tuple[bool, ErrorCode]],
                       tp: TopicPartition, status: ProducePartitionStatus) -> None:
    done, error = check(tp, status.required_offset)
    if error is not ErrorCode.NONE or done:
        status.acks_pending = False
        if error is not ErrorCode.NONE:
            status.response = ProducePartitionResponse(
                error=error, base_offset=status.response.base_offset,
                log_append_time_ms=status.response.log_append_time_ms,
                log_start_offset=status.response.log_start_offset)


def _produce_try_complete(check: Callable[[TopicPartition, int], tuple[bool, ErrorCode]],
                          op: DelayedProduce, changed: TopicPartition | None) -> bool:
    if changed is None:
        for tp, status in op.statuses.items():
            if status.acks_pending:
                _produce_check_one(check, tp, status)
    else:
        waiting = op.statuses.get(changed)
        if waiting is not None and waiting.acks_pending:
            _produce_check_one(check, changed, waiting)
    return not any(status.acks_pending for status in op.statuses.values())


def _produce_expire(op: DelayedProduce) -> None:
    for status in op.statuses.values():
        if status.acks_pending:
            status.acks_pending = False
            status.response = ProducePartitionResponse(
                error=ErrorCode.REQUEST_TIMED_OUT, base_offset=status.response.base_offset,
                log_append_time_ms=status.response.log_append_time_ms,
                log_start_offset=status.response.log_start_offset,
                error_message="not replicated to the in-sync replicas within the request timeout")


def produce_purgatory(check: Callable[[TopicPartition, int], tuple[bool, ErrorCode]]) -> Purgatory[DelayedProduce]:
    """A purgatory for delayed produces; ``check(tp, required_offset)`` is
    :meth:`Partition.check_enough_replicas_reach_offset` (or an error for a missing partition)."""
    return Purgatory(try_complete=lambda op, changed: _produce_try_complete(check, op, changed),
                     on_expire=_produce_expire)


# ================================================================== fetch


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchPartitionRequest:
    """One partition of a Fetch (FetchRequest.FetchPartition)."""

    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = partition_mod.NO_PARTITION_LEADER_EPOCH
    last_fetched_epoch: int = partition_mod.NO_PARTITION_LEADER_EPOCH
    log_start_offset: int = partition_mod.UNKNOWN_OFFSET
    """The follower's log start offset, -1 for consumers."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchParams:
    """The request-wide part of a Fetch (Kafka's FetchParams)."""

    replica_id: int = partition_mod.CONSUMER_REPLICA_ID
    max_wait_ms: int = 0
    min_bytes: int = 1
    max_bytes: int = 50 * 1024 * 1024
    isolation: partition_mod.FetchIsolation = partition_mod.FetchIsolation.HIGH_WATERMARK
    """For consumers; followers always read to the log end."""
    replica_epoch: int = -1
    """The follower's broker epoch (a fetch session is bound to it), -1 for consumers."""

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0

    @property
    def fetch_isolation(self) -> partition_mod.FetchIsolation:
        return partition_mod.FetchIsolation.LOG_END if self.is_from_follower else self.isolation


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchPartitionStatus:
    """A partition of a delayed fetch: where its first read started, and the request."""

    fetch_offset_metadata: storage_log.LogOffsetMetadata
    request: FetchPartitionRequest


class DelayedFetch:
    """A fetch waiting for ``min_bytes`` (Kafka's DelayedFetch); answered by reading again.

    Keeps each partition's readable bytes from its last check (``available``) and their
    sum, so a change of one partition costs one probe, not one per partition; and the
    partitions that changed while it waited (``changed``), the only ones whose first
    read may be stale when the wait ends.
    """

    __slots__ = ("_deadline_ms", "_op_id", "accumulated", "available", "changed", "params",
                 "partitions")

    def __init__(self, *, op_id: int, deadline_ms: int, params: FetchParams,
                 partitions: Mapping[TopicPartition, FetchPartitionStatus]) -> None:
        self._op_id = op_id
        self._deadline_ms = deadline_ms
        self.params = params
        self.partitions = dict(partitions)
        self.available: dict[TopicPartition, int] = {}
        """Bytes counted towards ``min_bytes`` per partition (capped at its max bytes)."""
        self.accumulated = 0
        """The sum of ``available``."""
        self.changed: set[TopicPartition] = set()
        """Partitions checked again after the first check: something about them moved."""

    @property
    def op_id(self) -> int:
        return self._op_id

    @property
    def deadline_ms(self) -> int:
        return self._deadline_ms

    @property
    def keys(self) -> Iterable[TopicPartition]:
        return self.partitions.keys()

    def requests(self) -> dict[TopicPartition, FetchPartitionRequest]:
        return {tp: status.request for tp, status in self.partitions.items()}


FetchProbe = Callable[[TopicPartition, FetchPartitionStatus, FetchParams], int | None]
"""Bytes readable for one waiting partition, or None when the fetch must be answered now."""


def _fetch_try_complete(probe: FetchProbe, op: DelayedFetch, changed: TopicPartition | None) -> bool:
    if changed is None:
        accumulated = 0
        for tp, status in op.partitions.items():
            available = probe(tp, status, op.params)
            if available is None:
                return True
            counted = min(available, status.request.partition_max_bytes)
            op.available[tp] = counted
            accumulated += counted
        op.accumulated = accumulated
        return accumulated >= op.params.min_bytes
    watched = op.partitions.get(changed)
    if watched is None:
        return False
    op.changed.add(changed)
    available = probe(changed, watched, op.params)
    if available is None:
        return True
    counted = min(available, watched.request.partition_max_bytes)
    op.accumulated += counted - op.available.get(changed, 0)
    op.available[changed] = counted
    return op.accumulated >= op.params.min_bytes


def fetch_purgatory(probe: FetchProbe) -> Purgatory[DelayedFetch]:
    """A purgatory for delayed fetches; expiry just completes them (the owner reads again)."""
    return Purgatory(try_complete=lambda op, changed: _fetch_try_complete(probe, op, changed),
                     on_expire=lambda _op: None)
