"""The broker's partitions and their data path (the pure part of Kafka's ReplicaManager).

Owns the map ``TopicPartition -> Partition`` of replicas hosted here, each
replica's :class:`ReplicaState` (the states of Kafka's ReplicaStateMachine, shown in
logs and DescribeLogDirs), the produce and fetch fan-out with an error per
partition, the delayed produce / fetch / DeleteRecords purgatories, the collection of pending
AlterPartition proposals, ISR expiry, the high watermarks for
``replication-offset-checkpoint``, and the leader side of the KIP-73
replication quota (:mod:`kraftlog.broker.replication_quota`): a follower
outside the ISR fetching a throttled partition gets no records while the quota
is exceeded, and the bytes sent for throttled partitions are recorded.

Callers: the broker's gRPC server (Produce, Fetch), the reconciler (adds and
removes partitions, role changes, replica states), the replica fetchers (via
the partitions), the AlterPartition sender. Like etcd-raft's ``Ready``, what
became answerable is collected and handed out by :meth:`ReplicaManager.take_completed`:
the server calls it after each call here and answers those requests.

Replica state transitions (Kafka's ReplicaStateMachine; target <- allowed sources)::

    NewReplica                <- NonExistentReplica
    OnlineReplica             <- NewReplica, OnlineReplica, OfflineReplica, ReplicaDeletionIneligible
    OfflineReplica            <- NewReplica, OnlineReplica, OfflineReplica, ReplicaDeletionIneligible
    ReplicaDeletionStarted    <- OfflineReplica
    ReplicaDeletionSuccessful <- ReplicaDeletionStarted
    ReplicaDeletionIneligible <- OfflineReplica, ReplicaDeletionStarted
    NonExistentReplica        <- ReplicaDeletionSuccessful

Errors per partition: UNKNOWN_TOPIC_OR_PARTITION (not hosted here; the server
may refine it to NOT_LEADER_OR_FOLLOWER when the metadata image knows the
partition), KAFKA_STORAGE_ERROR (replica offline: its log dir failed),
NOT_LEADER_OR_FOLLOWER (not leader, or being deleted), and those of
:class:`~kraftlog.broker.partition.Partition`. A bad ``acks`` answers
INVALID_REQUIRED_ACKS on every partition.

Idle cost (issue 16): work follows change, not the number of partitions. A change of
one partition wakes only the requests waiting on it, and each looks only at that
partition (:mod:`kraftlog.broker.purgatory`); a role change that changes nothing (a
periodic reconcile) wakes nobody; a waiting fetch that expires re-reads only the
partitions that changed while it waited and answers the others from its first read
(fresh log start offsets); :meth:`ReplicaManager.poll` checks ISRs for lagging
followers every ``replica.lag.time.max.ms / 2`` (Kafka's isr-expiration task) and
otherwise only the leaders whose high watermark is behind their log end.

Log directory failure (Kafka's LogDirFailureChannel): an ``OSError`` from a
replica's log (append, read, truncation, role change, retention, flush) takes the
whole log directory offline (:meth:`ReplicaManager.handle_storage_error`): every
replica in it becomes OfflineReplica and answers KAFKA_STORAGE_ERROR from then on,
and the directory is listed in :attr:`ReplicaManager.offline_log_dirs` for the
broker's heartbeat and DescribeLogDirs. A directory never comes back online in a
running broker: the operator replaces the disk and restarts it.

Must not: import asyncio, grpc, protobuf or a clock; create or delete log
directories (the reconciler does); block. Single-threaded: one owner calls it.
"""

from __future__ import annotations

import dataclasses
import enum
import heapq
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kraftlog.broker import delete_records as dr
from kraftlog.broker import fetch_session as fs
from kraftlog.broker import partition as partition_mod
from kraftlog.broker import purgatory
from kraftlog.broker import replication_quota as rq
from kraftlog.error_codes import ErrorCode
from kraftlog.errors import InvariantViolation
from kraftlog.ids import TopicPartition
from kraftlog.metadata.records import NO_LEADER
from kraftlog.storage import log as storage_log

logger = logging.getLogger(__name__)

VALID_ACKS = frozenset({-1, 0, 1})


class ReplicaState(enum.Enum):
    """A replica's lifecycle on this broker, with Kafka's state names."""

    NEW_REPLICA = "NewReplica"
    ONLINE_REPLICA = "OnlineReplica"
    OFFLINE_REPLICA = "OfflineReplica"
    REPLICA_DELETION_STARTED = "ReplicaDeletionStarted"
    REPLICA_DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"
    REPLICA_DELETION_INELIGIBLE = "ReplicaDeletionIneligible"
    NON_EXISTENT_REPLICA = "NonExistentReplica"


_S = ReplicaState
VALID_PREVIOUS_STATES: dict[ReplicaState, frozenset[ReplicaState]] = {
    _S.NEW_REPLICA: frozenset({_S.NON_EXISTENT_REPLICA}),
    _S.ONLINE_REPLICA: frozenset({_S.NEW_REPLICA, _S.ONLINE_REPLICA, _S.OFFLINE_REPLICA,
                                  _S.REPLICA_DELETION_INELIGIBLE}),
    _S.OFFLINE_REPLICA: frozenset({_S.NEW_REPLICA, _S.ONLINE_REPLICA, _S.OFFLINE_REPLICA,
                                   _S.REPLICA_DELETION_INELIGIBLE}),
    _S.REPLICA_DELETION_STARTED: frozenset({_S.OFFLINE_REPLICA}),
    _S.REPLICA_DELETION_SUCCESSFUL: frozenset({_S.REPLICA_DELETION_STARTED}),
    _S.REPLICA_DELETION_INELIGIBLE: frozenset({_S.OFFLINE_REPLICA, _S.REPLICA_DELETION_STARTED}),
    _S.NON_EXISTENT_REPLICA: frozenset({_S.REPLICA_DELETION_SUCCESSFUL}),
}
"""Kafka's ``ReplicaState.validPreviousStates``."""

_SERVING_STATES = frozenset({_S.NEW_REPLICA, _S.ONLINE_REPLICA})


class IllegalReplicaStateTransition(InvariantViolation):
    """A replica was asked to move between states the state machine does not connect."""

    def __init__(self, topic_partition: TopicPartition, current: ReplicaState, target: ReplicaState) -> None:
        allowed = ", ".join(sorted(s.value for s in VALID_PREVIOUS_STATES[target]))
        super().__init__(f"replica {topic_partition}: illegal transition {current.value} -> {target.value} "
                         f"(allowed from: {allowed})")
        self.topic_partition = topic_partition
        self.current = current
        self.target = target


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchPartitionResponse:
    """One partition's fetch answer (FetchResponse.PartitionData)."""

    error: ErrorCode
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    diverging_epoch: partition_mod.EpochEndOffset | None = None
    leader_id: int = NO_LEADER
    leader_epoch: int = -1
    error_message: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceOutcome:
    """The answer to :meth:`ReplicaManager.append_records`.

    ``delayed_op_id`` None: ``responses`` is the answer. Otherwise the answer
    comes later from :meth:`ReplicaManager.take_completed` under that id, and
    ``responses`` only shows the state at append time.
    """

    responses: dict[TopicPartition, purgatory.ProducePartitionResponse]
    delayed_op_id: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchOutcome:
    """The answer to :meth:`ReplicaManager.fetch_messages` (``responses`` None while it waits)."""

    responses: dict[TopicPartition, FetchPartitionResponse] | None
    delayed_op_id: int | None = None
    session_id: int = 0
    """The fetch session the answer belongs to (KIP-227), 0 for none."""
    error: ErrorCode = ErrorCode.NONE
    """A whole-request error (a fetch session's: FETCH_SESSION_ID_NOT_FOUND,
    INVALID_FETCH_SESSION_EPOCH); ``responses`` is then empty."""
    error_message: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class CompletedProduce:
    op_id: int
    responses: dict[TopicPartition, purgatory.ProducePartitionResponse]


@dataclass(frozen=True, slots=True, kw_only=True)
class CompletedFetch:
    op_id: int
    responses: dict[TopicPartition, FetchPartitionResponse]


@dataclass(frozen=True, slots=True, kw_only=True)
class CompletedDeleteRecords:
    op_id: int
    responses: dict[TopicPartition, dr.DeleteRecordsPartitionResponse]


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteRecordsOutcome:
    """The answer to :meth:`ReplicaManager.delete_records` (``responses`` final when
    ``delayed_op_id`` is None, else it comes from :meth:`ReplicaManager.take_completed`)."""

    responses: dict[TopicPartition, dr.DeleteRecordsPartitionResponse]
    delayed_op_id: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Completed:
    """Delayed requests that became answerable since the last :meth:`ReplicaManager.take_completed`."""

    produces: tuple[CompletedProduce, ...] = ()
    fetches: tuple[CompletedFetch, ...] = ()
    delete_records: tuple[CompletedDeleteRecords, ...] = ()


@dataclass(slots=True, kw_only=True)
class _SessionWait:
    """An incremental fetch waiting for news: its id, params and the news found so far."""

    op_id: int
    params: purgatory.FetchParams
    news: dict[TopicPartition, FetchPartitionResponse]


_NO_WAIT = _SessionWait(op_id=-1, params=purgatory.FetchParams(), news={})


class ReplicaManager:
    """The partitions hosted on broker ``broker_id``. See the module docstring."""

    def __init__(self, *, broker_id: int, leader_quota: rq.ReplicationQuota | None = None) -> None:
        self.broker_id = broker_id
        self.leader_quota = leader_quota or rq.ReplicationQuota(rq.QuotaType.LEADER)
        """KIP-73 leader-side replication quota (unlimited unless configured)."""
        self._partitions: dict[TopicPartition, partition_mod.Partition] = {}
        self._states: dict[TopicPartition, ReplicaState] = {}
        self._produce_purgatory = purgatory.produce_purgatory(self._check_enough_replicas)
        self._fetch_purgatory = purgatory.fetch_purgatory(self._fetch_bytes_available)
        self._next_op_id = 1
        self._completed_produces: list[CompletedProduce] = []
        self._completed_fetches: list[CompletedFetch] = []
        self._delete_records_purgatory = dr.delete_records_purgatory(self._low_watermark)
        self._completed_delete_records: list[CompletedDeleteRecords] = []
        # A waiting fetch's first read (op id -> answers): what it answers with, for the
        # partitions that did not change, when it expires.
        self._first_reads: dict[int, dict[TopicPartition, FetchPartitionResponse]] = {}
        self.fetch_sessions = fs.FetchSessionCache()
        """Followers' incremental fetch sessions (KIP-227)."""
        # A full fetch opening a session, waiting in the purgatory: op id -> session id (its
        # answer is recorded in the session as sent).
        self._op_sessions: dict[int, int] = {}
        # Incremental fetches waiting for news, by session id; their deadlines in a heap.
        self._session_waits: dict[int, _SessionWait] = {}
        self._session_deadlines: list[tuple[int, int, int]] = []
        # The latest time a caller gave: re-reads of completed fetches run at it.
        self._now_ms = 0
        self._offline_dirs: dict[str, str] = {}
        # Some partition may have an ISR proposal to send: set where one can appear (a follower's
        # fetch expands, poll shrinks, a retryable answer), cleared when they are taken. Lets the
        # server wake the AlterPartition sender only then, not after every request.
        self._alter_ready = False
        # Leaders whose high watermark may move with time alone or is behind their log end:
        # the only partitions poll() looks at between two ISR checks. A superset: poll drops
        # those that are settled (high watermark at the log end) or no longer lead.
        self._hw_behind: set[TopicPartition] = set()
        # Kafka's isr-expiration task: every replica.lag.time.max.ms / 2 (the smallest of the
        # hosted partitions'), poll() looks at every leader's ISR.
        self._isr_check_interval_ms = partition_mod.DEFAULT_REPLICA_LAG_TIME_MAX_MS // 2
        self._next_isr_check_ms = 0
        self.isr_checks = 0
        """Full ISR passes over every leader so far (tests, metrics)."""

    # ================================================================== partitions and replica states

    def add_partition(self, partition: partition_mod.Partition) -> None:
        """Host a new replica (NonExistentReplica -> NewReplica)."""
        tp = partition.topic_partition
        if tp in self._partitions:
            raise InvariantViolation(f"broker={self.broker_id} partition {tp} is already hosted here")
        self._partitions[tp] = partition
        self._states[tp] = ReplicaState.NON_EXISTENT_REPLICA
        self._isr_check_interval_ms = max(1, min(self._isr_check_interval_ms,
                                                 partition.config.replica_lag_time_max_ms // 2))
        self.transition_replica(tp, ReplicaState.NEW_REPLICA)

    def get_partition(self, tp: TopicPartition) -> partition_mod.Partition | None:
        return self._partitions.get(tp)

    @property
    def partitions(self) -> Mapping[TopicPartition, partition_mod.Partition]:
        return self._partitions

    def replica_state(self, tp: TopicPartition) -> ReplicaState:
        return self._states.get(tp, ReplicaState.NON_EXISTENT_REPLICA)

    def transition_replica(self, tp: TopicPartition, target: ReplicaState) -> None:
        """Move a hosted replica to ``target``; raises IllegalReplicaStateTransition if not allowed."""
        if tp not in self._partitions:
            raise InvariantViolation(f"broker={self.broker_id} partition {tp} is not hosted here")
        current = self._states[tp]
        if current not in VALID_PREVIOUS_STATES[target]:
            raise IllegalReplicaStateTransition(tp, current, target)
        self._states[tp] = target
        if current is not target:
            logger.info("broker=%d partition=%s event=replica_state from=%s to=%s", self.broker_id, tp,
                        current.value, target.value)
        if target not in _SERVING_STATES:
            # An offline or deleted replica answers nobody: release its waiters with errors.
            self._complete_waiting(tp)

    def remove_partition(self, tp: TopicPartition) -> partition_mod.Partition:
        """Forget a deleted replica (ReplicaDeletionSuccessful -> NonExistentReplica)."""
        self.transition_replica(tp, ReplicaState.NON_EXISTENT_REPLICA)
        partition = self._partitions.pop(tp)
        del self._states[tp]
        self._hw_behind.discard(tp)
        self._complete_waiting(tp)
        return partition

    # ================================================================== log directory failure

    @property
    def offline_log_dirs(self) -> Mapping[str, str]:
        """Log directory -> the error that took it offline."""
        return self._offline_dirs

    def handle_storage_error(self, tp: TopicPartition, error: OSError) -> list[TopicPartition]:
        """``tp``'s log failed with ``error``: its log directory goes offline (see the module
        doc); returns the replicas that went offline with it (none if it already was)."""
        partition = self._partitions.get(tp)
        if partition is None:
            return []
        return self.mark_log_dir_offline(log_dir_of(partition), reason=f"{tp}: {error}")

    def mark_log_dir_offline(self, log_dir: str, *, reason: str) -> list[TopicPartition]:
        """Take ``log_dir`` offline with every replica in it; returns those replicas."""
        if log_dir in self._offline_dirs:
            return []
        self._offline_dirs[log_dir] = reason
        offline: list[TopicPartition] = []
        for tp, partition in list(self._partitions.items()):
            if log_dir_of(partition) != log_dir:
                continue
            if self._states[tp] in _SERVING_STATES or self._states[tp] is _S.REPLICA_DELETION_INELIGIBLE:
                self.transition_replica(tp, ReplicaState.OFFLINE_REPLICA)
            partition.log.close_handlers()
            offline.append(tp)
        logger.error("broker=%d event=log_dir_offline dir=%s replicas=%d reason=%r", self.broker_id,
                     log_dir, len(offline), reason)
        return offline

    def is_offline(self, tp: TopicPartition) -> bool:
        """The replica's log directory is offline."""
        if not self._offline_dirs:
            return False  # the common case, asked for every partition every few seconds
        partition = self._partitions.get(tp)
        return partition is not None and log_dir_of(partition) in self._offline_dirs

    def _serving_partition(self, tp: TopicPartition) -> tuple[partition_mod.Partition | None, ErrorCode, str]:
        partition = self._partitions.get(tp)
        if partition is None:
            return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp} is not hosted on broker {self.broker_id}"
        state = self._states[tp]
        if state is ReplicaState.OFFLINE_REPLICA:
            return None, ErrorCode.KAFKA_STORAGE_ERROR, f"the log of {tp} on broker {self.broker_id} is offline"
        if state not in _SERVING_STATES:
            return None, ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{tp} is being deleted from broker {self.broker_id}"
        return partition, ErrorCode.NONE, ""

    # ================================================================== role changes

    def make_leader(self, tp: TopicPartition, *, leader_epoch: int, partition_epoch: int,
                    replicas: Iterable[int], isr: Iterable[int], now_ms: int) -> bool:
        """:meth:`Partition.make_leader` on a hosted replica, then answers what that settles."""
        self._now_ms = now_ms
        partition = self._require(tp)
        before = _role_of(partition)
        became = partition.make_leader(leader_epoch=leader_epoch, partition_epoch=partition_epoch,
                                       replicas=replicas, isr=isr, now_ms=now_ms)
        if _role_of(partition) != before:
            # Only a real change can answer a waiting request (a periodic reconcile of a
            # converged leader changes nothing, and must not wake its waiting fetches).
            self._hw_behind.add(tp)
            self._complete_waiting(tp)
        return became

    def make_follower(self, tp: TopicPartition, *, leader_id: int, leader_epoch: int, partition_epoch: int,
                      replicas: Iterable[int]) -> bool:
        """:meth:`Partition.make_follower`; waiting produces answer NOT_LEADER_OR_FOLLOWER."""
        partition = self._require(tp)
        before = _role_of(partition)
        restart = partition.make_follower(leader_id=leader_id, leader_epoch=leader_epoch,
                                          partition_epoch=partition_epoch, replicas=replicas)
        if _role_of(partition) != before:
            self._hw_behind.discard(tp)
            self._complete_waiting(tp)
        return restart

    def _require(self, tp: TopicPartition) -> partition_mod.Partition:
        partition = self._partitions.get(tp)
        if partition is None:
            raise InvariantViolation(f"broker={self.broker_id} partition {tp} is not hosted here")
        return partition

    # ================================================================== produce

    def append_records(self, entries: Mapping[TopicPartition, bytes | bytearray | memoryview], *,
                       required_acks: int, timeout_ms: int, now_ms: int) -> ProduceOutcome:
        """Append each partition's batches as leader; acks=all waits in the purgatory.

        acks=0 and acks=1 answer at once (the server sends nothing for acks=0).
        acks=-1 answers once every appended partition's high watermark passes its
        last offset, or after ``timeout_ms`` (REQUEST_TIMED_OUT).
        """
        self._now_ms = now_ms
        if required_acks not in VALID_ACKS:
            return ProduceOutcome(responses={tp: purgatory.ProducePartitionResponse(
                error=ErrorCode.INVALID_REQUIRED_ACKS,
                error_message=f"acks must be -1, 0 or 1, got {required_acks}") for tp in entries})
        responses: dict[TopicPartition, purgatory.ProducePartitionResponse] = {}
        required: dict[TopicPartition, int] = {}
        for tp, batches in entries.items():
            partition, error, message = self._serving_partition(tp)
            if partition is None:
                responses[tp] = purgatory.ProducePartitionResponse(error=error, error_message=message)
                continue
            self._note_session_followers(tp, partition)
            try:
                result = partition.append_records_to_leader(batches, required_acks=required_acks,
                                                            now_ms=now_ms)
            except OSError as exc:
                self.handle_storage_error(tp, exc)
                responses[tp] = purgatory.ProducePartitionResponse(
                    error=ErrorCode.KAFKA_STORAGE_ERROR,
                    error_message=f"the log of {tp} on broker {self.broker_id} failed: {exc}")
                continue
            if result.error is not ErrorCode.NONE or result.info is None:
                responses[tp] = purgatory.ProducePartitionResponse(
                    error=result.error, error_message=result.error_message, leader_id=partition.leader_id,
                    leader_epoch=partition.leader_epoch, record_errors=result.record_errors)
                continue
            info = result.info
            responses[tp] = purgatory.ProducePartitionResponse(
                error=ErrorCode.NONE, base_offset=info.first_offset, log_append_time_ms=info.log_append_time_ms,
                log_start_offset=info.log_start_offset)
            required[tp] = info.last_offset + 1
            self._hw_behind.add(tp)
            # New data for followers (and, if the HW moved, consumers and produces) waiting on it.
            self._complete_waiting(tp)
        if required_acks != -1 or not required:
            return ProduceOutcome(responses=responses)
        op = purgatory.DelayedProduce(
            op_id=self._new_op_id(), deadline_ms=now_ms + max(0, timeout_ms),
            statuses={tp: purgatory.ProducePartitionStatus(required_offset=required.get(tp, -1), response=resp)
                      for tp, resp in responses.items()})
        if self._produce_purgatory.try_complete_else_watch(op):
            return ProduceOutcome(responses=op.responses())
        return ProduceOutcome(responses=responses, delayed_op_id=op.op_id)

    def _check_enough_replicas(self, tp: TopicPartition, required_offset: int) -> tuple[bool, ErrorCode]:
        partition, error, _message = self._serving_partition(tp)
        if partition is None:
            return False, error
        return partition.check_enough_replicas_reach_offset(required_offset)

    # ================================================================== fetch

    def fetch_messages(self, params: purgatory.FetchParams,
                       partitions: Mapping[TopicPartition, purgatory.FetchPartitionRequest], *,
                       now_ms: int, session: fs.SessionRequest | None = None) -> FetchOutcome:
        """Read each partition; answer now or wait in the purgatory (Kafka's fetchMessages).

        Answers at once when ``max_wait_ms`` <= 0, nothing was asked, ``min_bytes``
        were read, any partition has an error or a diverging epoch; otherwise the
        fetch waits for ``min_bytes`` or ``max_wait_ms`` and then reads again.

        A follower's ``session`` (KIP-227, :mod:`kraftlog.broker.fetch_session`): epoch 0
        opens one (this fetch is full, and so is its answer), N > 0 continues one (only the
        partitions named and those changed here are read, only those with news answered;
        an idle one waits, reading nothing, until news or ``max_wait_ms``), -1 closes one.
        """
        self._now_ms = now_ms
        if session is not None and session.epoch is not None:
            if session.epoch == fs.FINAL_EPOCH or not params.is_from_follower:
                self._close_session(session.session_id, params.replica_id)
            elif session.epoch == fs.INITIAL_EPOCH:
                self._close_session(session.session_id, params.replica_id)
                opened = self.fetch_sessions.create(replica_id=params.replica_id,
                                                    replica_epoch=params.replica_epoch)
                opened.update(partitions, ())
                opened.last_fetch_ms = now_ms
                self.fetch_sessions.add_partitions(opened, partitions)
                outcome = self._fetch_full(params, partitions, now_ms)
                if outcome.responses is not None:
                    self._record_sent(opened.session_id, outcome.responses)
                else:
                    assert outcome.delayed_op_id is not None
                    self._op_sessions[outcome.delayed_op_id] = opened.session_id
                return dataclasses.replace(outcome, session_id=opened.session_id)
            else:
                return self._fetch_incremental(params, partitions, session, now_ms)
        return self._fetch_full(params, partitions, now_ms)

    def _note_session_followers(self, tp: TopicPartition, partition: partition_mod.Partition) -> None:
        """Before the log end moves: a follower whose session holds ``tp`` at our log end
        fetched it there at the session's last fetch, although an incremental fetch did not
        name it. Record that fetch, as a full fetch would have, so the follower is not taken
        for one that stopped being caught up a long time ago (replica.lag.time.max.ms)."""
        for session in self.fetch_sessions.sessions_of(tp):
            cached = session.partitions.get(tp)
            if (cached is None or session.last_fetch_ms < 0
                    or cached.request.fetch_offset != partition.log_end_offset):
                continue
            replica = partition.replica_status(session.replica_id)
            if replica is None or replica.last_fetch_time_ms >= session.last_fetch_ms:
                continue
            log_end = partition.log_end_offset
            partition.update_follower_fetch_state(
                session.replica_id, fetch_offset=log_end, leader_end_offset=log_end,
                now_ms=session.last_fetch_ms, log_start_offset=cached.request.log_start_offset,
                fetch_offset_metadata=partition.log.log_end_offset_metadata)

    def _close_session(self, session_id: int, replica_id: int) -> None:
        existing = self.fetch_sessions.get(session_id) if session_id else None
        if existing is not None and existing.replica_id == replica_id:
            self.fetch_sessions.remove(session_id)

    def _record_sent(self, session_id: int, responses: Mapping[TopicPartition, FetchPartitionResponse]) -> None:
        session = self.fetch_sessions.get(session_id)
        if session is None:
            return
        for tp, r in responses.items():
            session.has_news(tp, error=r.error, records=bool(r.records), diverging=r.diverging_epoch is not None,
                             high_watermark=r.high_watermark, log_start_offset=r.log_start_offset)
            cached = session.partitions.get(tp)
            if cached is not None:
                self._maybe_keep_dirty(session, tp, r, cached.request.fetch_offset)

    def _fetch_incremental(self, params: purgatory.FetchParams,
                           partitions: Mapping[TopicPartition, purgatory.FetchPartitionRequest],
                           request: fs.SessionRequest, now_ms: int) -> FetchOutcome:
        session = self.fetch_sessions.get(request.session_id)
        if (session is None or session.replica_id != params.replica_id
                or session.replica_epoch != params.replica_epoch):
            return FetchOutcome(responses={}, error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                                error_message=f"no fetch session {request.session_id} of broker "
                                              f"{params.replica_id} on broker {self.broker_id}")
        if request.epoch != session.epoch or session.session_id in self._session_waits:
            return FetchOutcome(responses={}, error=ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                                error_message=f"fetch session {session.session_id} expects epoch "
                                              f"{session.epoch}, got {request.epoch}")
        session.epoch = fs.next_epoch(session.epoch)
        session.last_fetch_ms = now_ms
        added = [tp for tp in partitions if tp not in session.partitions]
        session.update(partitions, request.forgotten)
        self.fetch_sessions.add_partitions(session, added)
        self.fetch_sessions.remove_partitions(session, request.forgotten)
        news = self._session_read(params, session, session.to_read(partitions), update_fetch_state=True)
        if params.max_wait_ms <= 0 or self._session_answerable(params, news):
            self._record_replication(params, news, now_ms)
            return FetchOutcome(responses=news, session_id=session.session_id)
        op_id = self._new_op_id()
        deadline_ms = now_ms + params.max_wait_ms
        self._session_waits[session.session_id] = _SessionWait(op_id=op_id, params=params, news=news)
        heapq.heappush(self._session_deadlines, (deadline_ms, op_id, session.session_id))
        return FetchOutcome(responses=None, delayed_op_id=op_id, session_id=session.session_id)

    def _session_read(self, params: purgatory.FetchParams, session: fs.FetchSession,
                      reads: Mapping[TopicPartition, purgatory.FetchPartitionRequest], *,
                      update_fetch_state: bool) -> dict[TopicPartition, FetchPartitionResponse]:
        """Read ``reads`` for ``session``; the answers with news (recorded as sent).

        Stays dirty (the next fetch reads it again, counting the follower's position): a
        partition that has data past its fetch offset but returned none (throttled, or the
        response's max bytes were used up), and one whose ISR does not hold the follower yet
        (it may join once it is eligible, KIP-841, or the high watermark reaches it: the
        leader must keep seeing its fetch offset; Kafka reads every session partition on
        every fetch for this)."""
        if not reads:
            return {}
        responses = self._read(params, reads, now_ms=self._now_ms, update_fetch_state=update_fetch_state)[0]
        news: dict[TopicPartition, FetchPartitionResponse] = {}
        for tp, r in responses.items():
            if session.has_news(tp, error=r.error, records=bool(r.records),
                                diverging=r.diverging_epoch is not None,
                                high_watermark=r.high_watermark, log_start_offset=r.log_start_offset):
                news[tp] = r
            self._maybe_keep_dirty(session, tp, r, reads[tp].fetch_offset)
        return news

    def _maybe_keep_dirty(self, session: fs.FetchSession, tp: TopicPartition, response: FetchPartitionResponse,
                          fetch_offset: int) -> None:
        """See :meth:`_session_read`: whether ``tp`` must be read at the session's next fetch
        even if nothing changes here."""
        if response.error is not ErrorCode.NONE or response.diverging_epoch is not None:
            return
        partition = self._partitions.get(tp)
        if partition is not None and (
                (not response.records and partition.log_end_offset > fetch_offset)
                or (partition.is_leader and session.replica_id not in partition.isr)):
            session.dirty.add(tp)

    @staticmethod
    def _session_answerable(params: purgatory.FetchParams,
                            news: Mapping[TopicPartition, FetchPartitionResponse]) -> bool:
        # As a sessionless fetch: min_bytes of records, or an error / divergence to act on.
        # A new high watermark alone waits for the deadline (as Kafka's DelayedFetch).
        return (sum(len(r.records) for r in news.values()) >= max(1, params.min_bytes)
                or any(r.error is not ErrorCode.NONE or r.diverging_epoch is not None for r in news.values()))

    def _session_changed(self, tp: TopicPartition) -> None:
        # A waiting incremental fetch reads the changed partition now, and answers if that
        # makes it answerable; sessions without a waiting fetch read it at their next one.
        # Only that partition: the session's other dirty ones (some stay dirty until their
        # follower joins the ISR) wait for their own change or the next fetch. Reading them
        # all on every change was O(dirty) per change: thousands of ISR answers at once made
        # a leader's loop read millions of partitions (issue 16).
        #
        # The waiting fetch's position is not counted by this read (as Kafka's DelayedFetch
        # completion). When this leader knows no position of the follower at all (it just
        # became leader: the fetch came in while it was not, and so counted nothing), the
        # fetch is answered now and the partition stays dirty, so the follower's next fetch,
        # even an idle one, is read and counted; else the high watermark would wait for the
        # follower's next change of fetch offset, i.e. the next append (test_process's
        # leader kill: acknowledged records unreadable from the new leader).
        for session in self.fetch_sessions.mark_dirty(tp):
            wait = self._session_waits.get(session.session_id)
            if wait is None:
                continue
            unknown = self._position_unknown(session.replica_id, tp)
            news = self._session_read(wait.params, session, session.take_changed(tp), update_fetch_state=False)
            if self._session_waits.get(session.session_id) is not wait:
                continue  # answered meanwhile (a storage error while reading woke it)
            wait.news.update(news)
            if unknown:
                session.dirty.add(tp)
            if unknown or self._session_answerable(wait.params, wait.news):
                self._answer_session(session.session_id)

    def _position_unknown(self, replica_id: int, tp: TopicPartition) -> bool:
        """Whether ``tp`` is led here and its leader knows no log end of follower ``replica_id``."""
        partition = self._partitions.get(tp)
        if partition is None or not partition.is_leader:
            return False
        replica = partition.replica_status(replica_id)
        return replica is not None and replica.log_end_offset == partition_mod.UNKNOWN_OFFSET

    def _answer_session(self, session_id: int) -> None:
        wait = self._session_waits.pop(session_id, None)
        if wait is None:
            return
        self._record_replication(wait.params, wait.news, self._now_ms)
        self._completed_fetches.append(CompletedFetch(op_id=wait.op_id, responses=wait.news))

    def _expire_sessions(self, now_ms: int) -> None:
        while self._session_deadlines and self._session_deadlines[0][0] <= now_ms:
            _deadline, op_id, session_id = heapq.heappop(self._session_deadlines)
            wait = self._session_waits.get(session_id)
            if wait is not None and wait.op_id == op_id:
                self._answer_session(session_id)

    def _fetch_full(self, params: purgatory.FetchParams,
                    partitions: Mapping[TopicPartition, purgatory.FetchPartitionRequest],
                    now_ms: int) -> FetchOutcome:
        throttled: set[TopicPartition] = set()
        responses, metadata = self._read(params, partitions, now_ms=now_ms, update_fetch_state=True,
                                         throttled=throttled)
        readable = sum(len(r.records) for r in responses.values())
        answer_now = (params.max_wait_ms <= 0 or not partitions or readable >= params.min_bytes
                      or any(r.error is not ErrorCode.NONE or r.diverging_epoch is not None
                             for r in responses.values()))
        if answer_now:
            self._record_replication(params, responses, now_ms)
            return FetchOutcome(responses=responses)
        op = purgatory.DelayedFetch(
            op_id=self._new_op_id(), deadline_ms=now_ms + params.max_wait_ms, params=params,
            partitions={tp: purgatory.FetchPartitionStatus(fetch_offset_metadata=metadata[tp], request=request)
                        for tp, request in partitions.items()})
        if readable == 0 and not throttled:
            # The read just found no bytes in any partition, which is what the first check
            # would find again: watch it without probing every partition a second time.
            self._fetch_purgatory.watch(op)
        elif self._fetch_purgatory.try_complete_else_watch(op):
            responses = self._read(params, partitions, now_ms=now_ms, update_fetch_state=False)[0]
            self._record_replication(params, responses, now_ms)
            return FetchOutcome(responses=responses)
        self._first_reads[op.op_id] = responses
        return FetchOutcome(responses=None, delayed_op_id=op.op_id)

    def _should_leader_throttle(self, tp: TopicPartition, partition: partition_mod.Partition,
                                params: purgatory.FetchParams, now_ms: int) -> bool:
        # Kafka's shouldLeaderThrottle: followers only, and never one in the ISR.
        return params.is_from_follower and self.leader_quota.should_throttle(
            tp, in_sync=params.replica_id in partition.isr, now_ms=now_ms)

    def _record_replication(self, params: purgatory.FetchParams,
                            responses: Mapping[TopicPartition, FetchPartitionResponse], now_ms: int) -> None:
        # Kafka records the bytes of throttled partitions sent to followers (in sync or
        # not) once the response is final: they count against the leader quota.
        if not params.is_from_follower:
            return
        quota = self.leader_quota
        sent = sum(len(r.records) for tp, r in responses.items() if r.records and quota.is_throttled(tp))
        quota.record(sent, now_ms)

    def _read(self, params: purgatory.FetchParams,
              partitions: Mapping[TopicPartition, purgatory.FetchPartitionRequest], *, now_ms: int,
              update_fetch_state: bool, throttled: set[TopicPartition] | None = None
              ) -> tuple[dict[TopicPartition, FetchPartitionResponse],
                         dict[TopicPartition, storage_log.LogOffsetMetadata]]:
        # Kafka's readFromLog: partitions share max_bytes in request order; only the
        # first partition with data may exceed its bound (one whole batch), so a
        # consumer always progresses.
        responses: dict[TopicPartition, FetchPartitionResponse] = {}
        metadata: dict[TopicPartition, storage_log.LogOffsetMetadata] = {}
        remaining = max(0, params.max_bytes)
        min_one_message = True
        isolation = params.fetch_isolation
        for tp, request in partitions.items():
            partition, error, message = self._serving_partition(tp)
            if partition is None:
                responses[tp] = FetchPartitionResponse(error=error, error_message=message)
                continue
            hw_before = partition.high_watermark
            # A throttled partition is read for nothing (KIP-73: no records, no error): the
            # follower's fetch offset still counts, only the data waits for the quota.
            held = self._should_leader_throttle(tp, partition, params, now_ms)
            if held and throttled is not None:
                throttled.add(tp)
            try:
                result = partition.read_records(
                    fetch_offset=request.fetch_offset,
                    max_bytes=0 if held else max(0, min(request.partition_max_bytes, remaining)),
                    isolation=isolation, now_ms=now_ms, replica_id=params.replica_id,
                    current_leader_epoch=request.current_leader_epoch,
                    last_fetched_epoch=request.last_fetched_epoch,
                    follower_log_start_offset=request.log_start_offset,
                    min_one_message=min_one_message and not held,
                    update_fetch_state=update_fetch_state)
            except OSError as exc:
                self.handle_storage_error(tp, exc)
                responses[tp] = FetchPartitionResponse(
                    error=ErrorCode.KAFKA_STORAGE_ERROR,
                    error_message=f"the log of {tp} on broker {self.broker_id} failed: {exc}")
                continue
            responses[tp] = FetchPartitionResponse(
                error=result.error, high_watermark=result.high_watermark,
                last_stable_offset=result.last_stable_offset, log_start_offset=result.log_start_offset,
                records=result.records, diverging_epoch=result.diverging_epoch, leader_id=result.leader_id,
                leader_epoch=result.leader_epoch, error_message=result.error_message)
            if result.fetch_offset_metadata is not None:
                metadata[tp] = result.fetch_offset_metadata
            if result.records:
                min_one_message = False
                remaining = max(0, remaining - len(result.records))
            if update_fetch_state:
                if params.is_from_follower and len(self._delete_records_purgatory):
                    self._check_delete_records(tp)  # the follower's log start offset may have moved
                if partition.high_watermark != hw_before:
                    # A follower's progress may settle waiting produces and consumer fetches.
                    self._complete_waiting(tp)
                if partition.high_watermark < result.log_end_offset:
                    self._hw_behind.add(tp)
                if partition.has_alter_partition_request_to_send:
                    self._alter_ready = True  # the follower caught up: ISR expansion proposed
        return responses, metadata

    def _fetch_bytes_available(self, tp: TopicPartition, status: purgatory.FetchPartitionStatus,
                               params: purgatory.FetchParams) -> int | None:
        partition, _error, _message = self._serving_partition(tp)
        if partition is None:
            return None
        available = partition.bytes_available(
            fetch_offset_metadata=status.fetch_offset_metadata, isolation=params.fetch_isolation,
            current_leader_epoch=status.request.current_leader_epoch,
            last_fetched_epoch=status.request.last_fetched_epoch)
        if available and self._should_leader_throttle(tp, partition, params, self._now_ms):
            return 0  # Kafka's DelayedFetch: throttled bytes do not complete a waiting fetch
        return available

    # ================================================================== DeleteRecords

    def delete_records(self, offsets: Mapping[TopicPartition, int], *, timeout_ms: int,
                       now_ms: int) -> DeleteRecordsOutcome:
        """Move each led partition's log start offset (Kafka's ReplicaManager.deleteRecords),
        then wait in the purgatory until every live replica's log start offset followed
        (:mod:`kraftlog.broker.delete_records`), or ``timeout_ms``."""
        self._now_ms = now_ms
        statuses: dict[TopicPartition, dr.DeleteRecordsStatus] = {}
        for tp, offset in offsets.items():
            partition, error, message = self._serving_partition(tp)
            required = -1
            if partition is not None:
                try:
                    error, required, message = partition.delete_records_on_leader(offset)
                except OSError as exc:
                    self.handle_storage_error(tp, exc)
                    error, message = ErrorCode.KAFKA_STORAGE_ERROR, f"the log of {tp} failed: {exc}"
                if error is ErrorCode.NONE:
                    # Followers in a fetch session hear of a partition only when it changes.
                    self.log_start_moved(tp)
            statuses[tp] = dr.DeleteRecordsStatus(
                required_offset=required,
                response=dr.DeleteRecordsPartitionResponse(error=error, error_message=message))
        op = dr.DelayedDeleteRecords(op_id=self._new_op_id(), deadline_ms=now_ms + max(0, timeout_ms),
                                     statuses=statuses)
        if self._delete_records_purgatory.try_complete_else_watch(op):
            return DeleteRecordsOutcome(responses=op.responses())
        return DeleteRecordsOutcome(responses=op.responses(), delayed_op_id=op.op_id)

    def _low_watermark(self, tp: TopicPartition) -> tuple[ErrorCode, int, str]:
        partition, error, message = self._serving_partition(tp)
        if partition is None:
            return error, -1, message
        error, low = partition.low_watermark_if_leader()
        if error is not ErrorCode.NONE:
            return error, -1, f"broker {self.broker_id} no longer leads {tp}"
        return ErrorCode.NONE, low, ""

    def _check_delete_records(self, tp: TopicPartition) -> None:
        for op in self._delete_records_purgatory.check_and_complete(tp):
            self._completed_delete_records.append(CompletedDeleteRecords(op_id=op.op_id, responses=op.responses()))

    @property
    def waiting_delete_records(self) -> int:
        return len(self._delete_records_purgatory)

    # ================================================================== completion plumbing

    def _new_op_id(self) -> int:
        op_id = self._next_op_id
        self._next_op_id += 1
        return op_id

    def _complete_waiting(self, tp: TopicPartition) -> None:
        for produce in self._produce_purgatory.check_and_complete(tp):
            self._completed_produces.append(CompletedProduce(op_id=produce.op_id, responses=produce.responses()))
        for fetch in self._fetch_purgatory.check_and_complete(tp):
            self._answer_fetch(fetch)
        self._check_delete_records(tp)
        self._session_changed(tp)

    def _answer_fetch(self, fetch: purgatory.DelayedFetch) -> None:
        # Kafka's DelayedFetch.onComplete: read again, without counting it as
        # the follower's progress a second time.
        first = self._first_reads.pop(fetch.op_id, None)
        requests = fetch.requests()
        if first is None:
            responses, _ = self._read(fetch.params, requests, now_ms=self._now_ms, update_fetch_state=False)
        else:
            responses = self._reread_changed(fetch, requests, first)
        self._record_replication(fetch.params, responses, self._now_ms)
        session_id = self._op_sessions.pop(fetch.op_id, None)
        if session_id is not None:
            self._record_sent(session_id, responses)
        self._completed_fetches.append(CompletedFetch(op_id=fetch.op_id, responses=responses))

    def _reread_changed(self, fetch: purgatory.DelayedFetch,
                        requests: Mapping[TopicPartition, purgatory.FetchPartitionRequest],
                        first: Mapping[TopicPartition, FetchPartitionResponse]
                        ) -> dict[TopicPartition, FetchPartitionResponse]:
        """The answer of a fetch whose wait ended: its first read for every partition that did
        not change meanwhile (no append, high watermark, role or state change: each of those
        checks the waiting fetch on that partition, see the purgatory's cost model), read
        again for the others. A partition that had bytes it did not return (throttled) is
        read again too, and so is one whose high watermark is not the one the first read
        answered (the first read itself may have moved it: a follower's progress). The log
        start offset, which retention moves without a check, is always current."""
        stale: dict[TopicPartition, purgatory.FetchPartitionRequest] = {}
        for tp, request in requests.items():
            response = first.get(tp)
            partition = self._partitions.get(tp)
            if (response is None or partition is None or tp in fetch.changed
                    or fetch.available.get(tp, 0) > 0
                    or partition.high_watermark != response.high_watermark):
                stale[tp] = request
        reread = self._read(fetch.params, stale, now_ms=self._now_ms, update_fetch_state=False)[0] \
            if stale else {}
        responses: dict[TopicPartition, FetchPartitionResponse] = {}
        for tp in requests:  # request order: the partitions share max_bytes in it
            response = reread.get(tp)
            if response is None:
                response = first[tp]
                partition = self._partitions.get(tp)
                if partition is not None and partition.log_start_offset != response.log_start_offset \
                        and response.error is ErrorCode.NONE:
                    response = dataclasses.replace(response, log_start_offset=partition.log_start_offset)
            responses[tp] = response
        return responses

    def take_completed(self) -> Completed:
        """Delayed requests answerable now, each exactly once, oldest first."""
        done = Completed(produces=tuple(self._completed_produces), fetches=tuple(self._completed_fetches),
                         delete_records=tuple(self._completed_delete_records))
        self._completed_produces.clear()
        self._completed_fetches.clear()
        self._completed_delete_records.clear()
        return done

    @property
    def waiting_produces(self) -> int:
        return len(self._produce_purgatory)

    @property
    def waiting_fetches(self) -> int:
        return len(self._fetch_purgatory)

    @property
    def waiting_session_fetches(self) -> int:
        return len(self._session_waits)

    def next_deadline_ms(self) -> int | None:
        """When :meth:`poll` must run next at the latest to expire a waiting request."""
        while self._session_deadlines and self._session_waits.get(
                self._session_deadlines[0][2], _NO_WAIT).op_id != self._session_deadlines[0][1]:
            heapq.heappop(self._session_deadlines)
        deadlines = [d for d in (self._produce_purgatory.next_deadline_ms(),
                                 self._fetch_purgatory.next_deadline_ms(),
                                 self._delete_records_purgatory.next_deadline_ms(),
                                 self._session_deadlines[0][0] if self._session_deadlines else None)
                     if d is not None]
        return min(deadlines) if deadlines else None

    def poll(self, now_ms: int) -> None:
        """Expire waiting requests; every ``replica.lag.time.max.ms / 2`` (Kafka's
        isr-expiration task) shrink the ISRs of lagging followers; move the high watermarks
        that time alone may release. Cheap when nothing changed: the server calls it often
        (its poll interval, and whenever a deadline is due)."""
        self._now_ms = now_ms
        for produce in self._produce_purgatory.expire(now_ms):
            self._completed_produces.append(CompletedProduce(op_id=produce.op_id, responses=produce.responses()))
        for fetch in self._fetch_purgatory.expire(now_ms):
            self._answer_fetch(fetch)
        for op in self._delete_records_purgatory.expire(now_ms):
            self._completed_delete_records.append(CompletedDeleteRecords(op_id=op.op_id, responses=op.responses()))
        self._expire_sessions(now_ms)
        if now_ms >= self._next_isr_check_ms:
            # Kafka's isr-expiration: every leader, every replica.lag.time.max.ms / 2.
            self._next_isr_check_ms = now_ms + self._isr_check_interval_ms
            self.isr_checks += 1
            for tp, partition in self._partitions.items():
                if self._states[tp] in _SERVING_STATES and partition.is_leader:
                    partition.maybe_shrink_isr(now_ms)
                    if partition.has_alter_partition_request_to_send:
                        self._alter_ready = True
                    if partition.high_watermark < partition.log_end_offset:
                        self._hw_behind.add(tp)
        # A follower outside the ISR that was caught up holds the HW back only for
        # replica.lag.time.max.ms; time passing alone may release it. Only leaders whose
        # high watermark is behind their log end can move.
        for tp in list(self._hw_behind):
            leader = self._partitions.get(tp)
            if leader is None or not leader.is_leader or self._states[tp] not in _SERVING_STATES:
                self._hw_behind.discard(tp)
                continue
            if leader.maybe_increment_high_watermark(now_ms):
                self._complete_waiting(tp)
            if leader.high_watermark >= leader.log_end_offset:
                self._hw_behind.discard(tp)

    def log_start_moved(self, tp: TopicPartition) -> None:
        """Retention or DeleteRecords moved ``tp``'s log start offset: followers' sessions
        must hear of it."""
        self._complete_waiting(tp)

    # ================================================================== AlterPartition

    @property
    def alter_partition_requests_ready(self) -> bool:
        """:meth:`take_alter_partition_requests` may have something to hand out. Set by the
        calls here that can create or re-arm a proposal (a follower's fetch, :meth:`poll`, a
        retryable answer); :meth:`poll`'s ISR pass also looks at every leader, so a proposal
        made on a partition directly is seen within ``replica.lag.time.max.ms / 2``."""
        return self._alter_ready

    def take_alter_partition_requests(self) -> list[partition_mod.AlterPartitionRequest]:
        """ISR proposals to send to the controller now (one in flight per partition)."""
        self._alter_ready = False
        requests: list[partition_mod.AlterPartitionRequest] = []
        for partition in self._partitions.values():
            request = partition.take_alter_partition_request()
            if request is not None:
                requests.append(request)
        return requests

    def handle_alter_partition_response(self, request: partition_mod.AlterPartitionRequest, *, error: ErrorCode,
                                        result: partition_mod.LeaderAndIsr | None,
                                        now_ms: int) -> partition_mod.AlterPartitionOutcome:
        self._now_ms = now_ms
        tp = TopicPartition(topic=request.topic, partition=request.partition_index)
        partition = self._partitions.get(tp)
        if partition is None or partition.topic_id != request.topic_id:
            return partition_mod.AlterPartitionOutcome()
        outcome = partition.handle_alter_partition_response(request, error=error, result=result, now_ms=now_ms)
        if partition.has_alter_partition_request_to_send:
            self._alter_ready = True  # a retryable error: the same proposal goes again
        self._hw_behind.add(tp)
        self._complete_waiting(tp)
        return outcome

    # ================================================================== checkpoints

    def high_watermarks(self) -> dict[TopicPartition, int]:
        """``replication-offset-checkpoint`` contents: the high watermark of every serving replica."""
        # Unsorted: the checkpoint file sorts its entries; sorting here too cost a sort of
        # every hosted replica per checkpoint interval.
        return {tp: p.high_watermark for tp, p in self._partitions.items()
                if self._states[tp] in _SERVING_STATES}


def _role_of(partition: partition_mod.Partition) -> tuple[object, ...]:
    """What a role change can change, compared before and after one (cheap: no copies)."""
    return (partition.leader_id, partition.leader_epoch, partition.partition_epoch,
            partition.replicas, partition.state)


def log_dir_of(partition: partition_mod.Partition) -> str:
    """The log directory holding ``partition``'s log (the parent of its ``<topic>-<n>`` dir)."""
    return os.path.dirname(os.path.normpath(partition.log.directory))
