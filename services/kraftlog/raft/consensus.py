"""The raft client core: Kafka's ``KafkaRaftClient`` as a single-threaded, sans-I/O engine.

Inputs, all carrying the caller's clock as ``now_ms``:

* :meth:`RaftClient.poll` runs the current role (``poll_leader``,
  ``poll_prospective``, ``poll_candidate``, ``poll_follower``, ``poll_unattached``,
  ``poll_voted``, ``poll_resigned``), completes parked fetches, delivers committed
  batches to the listener, and returns the absolute time of the next wake-up;
* :meth:`RaftClient.handle_request` answers an inbound RPC, or returns ``PENDING``
  for a Fetch parked in the purgatory (completed later through
  ``MessageSink.complete``);
* :meth:`RaftClient.handle_response` / :meth:`RaftClient.handle_send_failure`
  for answers to what we sent through ``MessageSink.send``;
* :meth:`RaftClient.propose`, :meth:`RaftClient.resign`,
  :meth:`RaftClient.create_snapshot` for the state machine.

Driver contract (the order etcd's ``Ready`` documents): call ``poll`` after every
input and sleep until the returned time or the next message. Every durable
change happens inside these calls before any message that depends on it is
sent: the quorum-state is written before a vote is granted or a role switches
(:mod:`.quorum_state`), and log entries are flushed before their offset counts
towards the high watermark (leader) or is reported in the next Fetch (follower).

Protocol rules implemented here (KIP-595 unless noted): vote and pre-vote
(KIP-996) granting, BeginQuorumEpoch, EndQuorumEpoch with successors ordered by
fetch offset, Fetch validation with diverging-epoch and snapshot answers,
follower truncation (never below the HW), leader HW from a majority once an
entry of its own epoch is committed, the LeaderChange record that starts every
epoch, append linger, check-quorum, binary exponential election backoff, and
KIP-630 snapshot fetching in chunks.

Dynamic voters (KIP-853): the voter set is the latest VotersRecord of the log or
snapshot, uncommitted included (:class:`~.voter_set.VoterSetHistory`), and reverts when
a truncation removes it; with none the static ``voters`` apply (kraft.version 0). The
leader answers AddRaftVoter / RemoveRaftVoter / UpdateRaftVoter one change at a time
(none while a VotersRecord is uncommitted), adds a voter only once it has caught up
(fetched to the leader's end within ``controller.quorum.fetch.timeout.ms``), appends the
whole new set and answers when it commits under the new majority; a leader that removed
itself resigns once that commits. A voter is (id, directory id): a replaced disk does
not vote or count as the old voter. An observer with ``auto_join`` adds itself (first
removing the voter of its id with another directory).

The core owns no thread, socket, clock or protobuf (tests/test_layering.py); the
module is not named ``client`` so that the layering test checks it.
"""

from __future__ import annotations

import enum
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from kraftlog import ids as uuid
from kraftlog.errors import CorruptRecordError, InvariantViolation, NotLeaderError
from kraftlog.ids import Epoch, NodeId
from kraftlog.raft import control_records as cr
from kraftlog.raft import epoch_state as es
from kraftlog.raft import messages as m
from kraftlog.raft import snapshot as snap
from kraftlog.raft import voter_set as vs
from kraftlog.raft.epoch_state import Role
from kraftlog.raft.error_codes import ErrorCode
from kraftlog.raft.quorum_state import QuorumState
from kraftlog.raft.quorum_state_store import QuorumStateStore
from kraftlog.raft.raft_config import RaftConfig
from kraftlog.raft.raft_log import RaftLog
from kraftlog.storage import batch_header as bh
from kraftlog.storage import record_batch as rb

logger = logging.getLogger(__name__)

RETRY_BACKOFF_BASE_MS = 100
"""Unit of the election backoff (Kafka's ``RETRY_BACKOFF_BASE_MS``)."""
REFUSAL_LOG_INTERVAL_MS = 10_000
"""At most one warning per kind of refused peer message in this long (a flood of forged
requests must not become a flood of log lines)."""
_NEVER = 1 << 62


class RaftEventKind(enum.Enum):
    """What happened. Every entry into Prospective is a ROLE_CHANGE followed by a
    PRE_VOTE_STARTED whose detail is the reason (so observers see one ordering)."""

    ROLE_CHANGE = "role_change"
    PRE_VOTE_STARTED = "pre_vote_started"
    ELECTION_STARTED = "election_started"
    ELECTION_WON = "election_won"
    ELECTION_LOST = "election_lost"
    ELECTION_BACKOFF = "election_backoff"
    LEADER_CHANGE = "leader_change"
    RESIGNED = "resigned"
    TRUNCATED = "truncated"
    SNAPSHOT_LOADED = "snapshot_loaded"
    VOTERS_CHANGED = "voters_changed"


_ELECTION_KINDS = frozenset({RaftEventKind.PRE_VOTE_STARTED, RaftEventKind.ELECTION_STARTED,
                             RaftEventKind.ELECTION_LOST, RaftEventKind.ELECTION_BACKOFF})

@dataclass(frozen=True, slots=True, kw_only=True)
class RaftEvent:
    """An observability event; tracing spans hang off these (every
    election and leader change is a span with its epoch, candidates, outcome and duration)."""

    kind: RaftEventKind
    node_id: int
    epoch: int
    leader_id: int
    now_ms: int
    detail: str = ""
    voters: tuple[int, ...] = ()
    """Election events emitted while Prospective or Candidate (PRE_VOTE_STARTED,
    ELECTION_STARTED/LOST/BACKOFF; not ELECTION_WON): the voter set of the election..."""
    granted: tuple[int, ...] = ()
    """...the voters that granted so far (the candidate itself included)..."""
    rejected: tuple[int, ...] = ()
    """...and those that rejected. Empty for other kinds."""


class CommittedBatch:
    """One committed data batch as the state machine sees it.

    The record values are decoded on first use of :attr:`records` (Kafka's
    ``BatchReader`` is lazy the same way), so a listener that only needs offsets,
    or one that already holds the records (the active controller), pays nothing
    per record. Built either from the batch's bytes or from the values.
    """

    __slots__ = ("_data", "_records", "append_timestamp_ms", "base_offset", "epoch",
                 "last_offset", "size_in_bytes")

    def __init__(self, *, base_offset: int, last_offset: int, epoch: int,
                 append_timestamp_ms: int, records: Sequence[bytes] | None = None,
                 data: bytes | memoryview | None = None) -> None:
        if (records is None) == (data is None):
            raise ValueError("a CommittedBatch needs exactly one of records or data")
        self.base_offset = base_offset
        self.last_offset = last_offset
        self.epoch = epoch
        self.append_timestamp_ms = append_timestamp_ms
        self._records = None if records is None else tuple(records)
        self._data = data
        self.size_in_bytes = (len(data) if data is not None
                              else sum(len(v) for v in self._records or ()))

    @property
    def records(self) -> tuple[bytes, ...]:
        if self._records is None:
            assert self._data is not None
            (batch,) = rb.decode_batches(self._data)
            self._records = tuple(r.value or b"" for r in batch.records)
            self._data = None
        return self._records

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CommittedBatch):
            return NotImplemented
        return (self.base_offset, self.last_offset, self.epoch, self.append_timestamp_ms,
                self.records) == (other.base_offset, other.last_offset, other.epoch,
                                  other.append_timestamp_ms, other.records)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"CommittedBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"epoch={self.epoch})")


class RaftListener(Protocol):
    """The replicated state machine (the controller plugs in here)."""

    def handle_commit(self, batches: Sequence[CommittedBatch]) -> None: ...

    def handle_load_snapshot(self, reader: snap.SnapshotReader) -> None: ...

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        """``leader_id`` is -1 when unknown. A local leader is reported only once every
        entry before its epoch start has been delivered (Kafka does the same)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class _ParkedFetch:
    source: int
    request: m.FetchRequest
    deadline_ms: int
    high_watermark: int
    epoch: int


@dataclass(slots=True, kw_only=True)
class _PendingVoterChange:
    """The one voter change a leader is working on (KIP-853 allows one at a time)."""

    request_id: int
    epoch: int
    deadline_ms: int
    new_voters: vs.VoterSet
    wait_for_voter: tuple[int, uuid.Uuid] | None
    """Add: the new voter, appended only once it is caught up; None: append at once."""
    ack_when_committed: bool = True
    record_offset: int | None = None


def binary_exponential_backoff_ms(retries: int, rng: random.Random, max_ms: int) -> int:
    """Random in [0, base * 2^retries), capped (Kafka's binaryExponentialElectionBackoffMs)."""
    if retries < 1:
        raise InvariantViolation(f"election backoff needs retries >= 1, got {retries}")
    return min(RETRY_BACKOFF_BASE_MS * rng.randrange(2 << min(retries - 1, 20)), max_ms)


def successor_backoff_ms(position: int, max_ms: int) -> int:
    """EndQuorumEpoch: the first preferred successor skips the election timeout, later ones
    wait exponentially longer (Kafka's strictExponentialElectionBackoffMs)."""
    if position <= 0:
        return 0
    return min(RETRY_BACKOFF_BASE_MS << min(position - 1, 20), max_ms)


class RaftClient:
    """One quorum member or observer. See the module docstring for the driver contract."""

    def __init__(self, *, node_id: int, voters: Mapping[int, str], cluster_id: str,
                 config: RaftConfig, log: RaftLog, store: QuorumStateStore, rng: random.Random,
                 listener: RaftListener, sink: m.MessageSink, now_ms: int,
                 on_event: Callable[[RaftEvent], None] | None = None,
                 directory_id: uuid.Uuid = m.NO_DIRECTORY, local_endpoint: str = "",
                 bootstrap_servers: Sequence[int] = (), auto_join: bool = False) -> None:
        self.node_id = NodeId(node_id)
        self.directory_id = directory_id
        self.local_endpoint = local_endpoint
        self.bootstrap_servers = tuple(bootstrap_servers)
        """Destinations an observer asks who leads when it knows no voter (Kafka's
        ``controller.quorum.bootstrap.servers``; the driver maps them to addresses)."""
        self.auto_join = auto_join
        self._static_endpoints = dict(voters)
        self._learned_endpoints: dict[int, str] = {}
        self.cluster_id = cluster_id
        self.config = config
        self.log = log
        self.rng = rng
        self.listener = listener
        self.sink = sink
        self.on_event = on_event
        self.history = vs.VoterSetHistory(vs.VoterSet.static(voters))
        self._read_control_records_from_start()
        if not voters and self.history.latest_offset() is None and not self.bootstrap_servers:
            raise InvariantViolation(f"node {node_id}: no voters: none configured, none in the "
                                     "log or a snapshot, and no bootstrap servers")
        voter_set = self.history.latest()
        self.quorum = QuorumState(local_id=self.node_id, voters=voter_set.ids(), store=store,
                                  rng=rng, election_timeout_ms=config.election_timeout_ms,
                                  fetch_timeout_ms=config.fetch_timeout_ms,
                                  static_voters=bool(voters)
                                  and self.history.latest_offset() is None,
                                  local_is_voter=voter_set.is_voter(node_id, directory_id))
        self.quorum.initialize(log_end_epoch=log.last_fetched_epoch(), now_ms=now_ms)
        self._pending_change: _PendingVoterChange | None = None
        self._change_in_flight_until = 0  # auto-join: our own Add/RemoveRaftVoter
        self._auto_join_after_ms = 0
        self._in_flight: dict[int, int] = {}
        self._backoff_until: dict[int, int] = {}
        # Sends to each destination that failed (no answer) since its last answer: the pause
        # before the next one doubles with each (see _note_send_failure). Kept across role
        # changes, so a dead voter is not hammered afresh by every election.
        self._send_failures: dict[int, int] = {}
        self._purgatory: dict[int, _ParkedFetch] = {}
        # kind of refusal -> (when it was last logged, how many went unlogged since)
        self._refusals_logged: dict[str, tuple[int, int]] = {}
        self._listener_next_offset = 0
        self._fired_leader: tuple[int, int] | None = None
        # When set, poll() leaves the leader's fsync to its driver (``flush_leader_log()``,
        # or the log's begin_flush/complete_flush on another thread), which starts it once
        # the Fetch answers that poll completed are on their way: followers then append and
        # fsync while the leader does, as etcd's leader writes its WAL in parallel with
        # replication. Each poll counts whatever the log reports flushed by then; the
        # leader's copy counts towards the HW only once flushed, so the HW never passes
        # the leader's flushed offset unless a majority of followers holds the entries.
        self.defer_leader_flush = False
        # Added to now_ms for the timestamps written into batches: the driver's core clock
        # is monotonic, while record timestamps (and `kraftlog quorum history`) are wall
        # time in ms since the Unix epoch, as in Kafka. 0 under the simulator.
        self.wall_clock_offset_ms = 0
        self._log_state_change("started", now_ms)

    # -- voter set (KIP-853) -----------------------------------------------------------------

    def endpoint_of(self, node_id: int) -> str:
        """``host:port`` of a node: the voter set's, one a leader told us, or the static one."""
        voter = self.history.latest().get(node_id)
        if voter is not None and voter.endpoint:
            return voter.endpoint
        if node_id == self.node_id and self.local_endpoint:
            return self.local_endpoint
        return self._learned_endpoints.get(node_id) or self._static_endpoints.get(node_id, "")

    @property
    def voter_set(self) -> vs.VoterSet:
        return self.history.latest()

    @property
    def kraft_version(self) -> int:
        return self.history.kraft_version()

    def _read_control_records_from_start(self) -> None:
        log = self.log
        latest = log.latest_snapshot_id()
        if latest is not None and latest.offset == log.start_offset:
            data = log.read_snapshot(latest)
            if data is not None:
                self.history.load_snapshot(latest.offset, data)
        self.history.next_offset = max(self.history.next_offset, log.start_offset)
        while self.history.next_offset < log.end_offset:
            data = log.read(self.history.next_offset, self.config.fetch_max_bytes)
            if not data:
                break
            before = self.history.next_offset
            self.history.scan(data, min_offset=before)
            if self.history.next_offset <= before:
                break

    def _apply_voter_set(self, now_ms: int, why: str) -> None:
        """The latest voter set changed (appended, fetched, truncated away, snapshot)."""
        if self.quorum.static_voters:
            if self.quorum.is_voter:
                self._warn_refused("voters_record_static", now_ms,
                                   "ignored a VotersRecord: this node runs static voters %s",
                                   sorted(self.quorum.voters))
                return
            # An observer (a broker) configured with controller.quorum.voters in a dynamic
            # quorum: the log's voter set wins, so it follows leaders the static list lacks.
            self.quorum.static_voters = False
        voter_set = self.history.latest()
        self.quorum.set_voters(voter_set.ids(),
                               local_is_voter=voter_set.is_voter(self.node_id, self.directory_id))
        state = self.quorum.state
        if isinstance(state, es.LeaderState) and state.update_voters(
                {v.voter_id: v.directory_id for v in voter_set.nodes()},
                since_offset=self.history.latest_offset() or 0):
            self._on_leader_high_watermark(state)
        logger.info("[node=%s epoch=%s] event=voters_changed voters=%s local_is_voter=%s "
                    "reason=%s", self.node_id, self.epoch, voter_set.describe(),
                    self.quorum.is_voter, why)
        self._emit(RaftEventKind.VOTERS_CHANGED, now_ms, f"{voter_set.describe()} ({why})")

    def _may_follow(self, leader_id: int) -> bool:
        """A peer may name ``leader_id`` leader: a known voter, or any other node once the
        voters live in the log (this node's set may be stale, as Kafka allows)."""
        return leader_id >= 0 and leader_id != self.node_id and (
            leader_id in self.quorum.voters or not self.quorum.static_voters)

    # -- small helpers ---------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self.quorum.epoch

    @property
    def role(self) -> Role:
        return self.quorum.role

    def is_caught_up(self) -> bool:
        """This node holds everything the quorum has committed: it leads, or it follows and
        its log reaches the high watermark of its leader's last Fetch answer in this epoch
        (a controller's readiness: a rolling restart moves on only when it is true)."""
        state = self.quorum.state
        if isinstance(state, es.LeaderState):
            return True
        return (isinstance(state, es.FollowerState)
                and 0 <= state.leader_high_watermark <= self.log.end_offset)

    def leader_hint(self) -> int:
        if self.quorum.role is Role.RESIGNED:
            return m.NO_ID
        leader = self.quorum.leader_id()
        return m.NO_ID if leader is None else int(leader)

    def _emit(self, kind: RaftEventKind, now_ms: int, detail: str = "") -> None:
        if self.on_event is not None:
            state = self.quorum.state
            tally: dict[str, tuple[int, ...]] = {}
            if kind in _ELECTION_KINDS \
                    and isinstance(state, es.ProspectiveState | es.CandidateState):
                tally = {"voters": tuple(sorted(state.election.voters)),
                         "granted": tuple(sorted(state.election.granted)),
                         "rejected": tuple(sorted(state.election.rejected))}
            self.on_event(RaftEvent(kind=kind, node_id=self.node_id, epoch=self.epoch,
                                    leader_id=self.leader_hint(), now_ms=now_ms, detail=detail,
                                    **tally))

    def _log_state_change(self, why: str, now_ms: int) -> None:
        logger.info("[node=%s epoch=%s] state=%s reason=%s now_ms=%s", self.node_id, self.epoch,
                    self.quorum.state.describe(), why, now_ms)

    def _warn_refused(self, kind: str, now_ms: int, message: str, *args: object) -> None:
        """Log a refused peer message, at most once per REFUSAL_LOG_INTERVAL_MS per kind."""
        last_ms, skipped = self._refusals_logged.get(kind, (None, 0))
        if last_ms is not None and now_ms - last_ms < REFUSAL_LOG_INTERVAL_MS:
            self._refusals_logged[kind] = (last_ms, skipped + 1)
            return
        self._refusals_logged[kind] = (now_ms, 0)
        logger.warning("[node=%s epoch=%s] " + message + " (%d more since the last)",
                       self.node_id, self.epoch, *args, skipped)

    def _after_transition(self, why: str, now_ms: int) -> None:
        # A new role talks to everyone afresh; stale answers are recognised by their request.
        self._in_flight.clear()
        self._backoff_until.clear()
        self._log_state_change(why, now_ms)
        self._emit(RaftEventKind.ROLE_CHANGE, now_ms, f"{self.role.value}: {why}")

    def _send(self, destination: int, request: m.RaftRequest, now_ms: int) -> bool:
        if destination in self._in_flight or self._backoff_until.get(destination, 0) > now_ms:
            return False
        self._in_flight[destination] = now_ms + self.config.request_timeout_ms
        self.sink.send(destination, request)
        return True

    def _is_log_up_to_date(self, last_epoch: int, last_offset: int) -> bool:
        return (last_epoch, last_offset) >= (self.log.last_fetched_epoch(), self.log.end_offset)

    # -- poll ----------------------------------------------------------------------------------

    def poll(self, now_ms: int) -> int:
        """Advance timers and roles; returns the absolute time of the next wake-up."""
        for destination, deadline in list(self._in_flight.items()):
            if deadline <= now_ms:
                del self._in_flight[destination]
                self._note_send_failure(destination, now_ms)
        wakeup = _NEVER
        for _ in range(8):  # a poll may pass through a few roles (e.g. prospective -> leader)
            role_before, epoch_before = self.role, self.epoch
            wakeup = self._poll_role(now_ms)
            if (self.role, self.epoch) == (role_before, epoch_before):
                break
        self._complete_parked_fetches(now_ms)
        self._fail_stale_voter_change(now_ms)
        self._deliver_committed(now_ms)
        self._maybe_fire_leader_change()
        for deadline in self._in_flight.values():
            wakeup = min(wakeup, deadline)
        for until in self._backoff_until.values():
            if until > now_ms:
                wakeup = min(wakeup, until)
        for parked in self._purgatory.values():
            wakeup = min(wakeup, parked.deadline_ms)
        if self._pending_change is not None:
            wakeup = min(wakeup, self._pending_change.deadline_ms)
        return max(wakeup, now_ms + 1) if wakeup <= now_ms else wakeup

    def _poll_role(self, now_ms: int) -> int:
        state = self.quorum.state
        if isinstance(state, es.LeaderState):
            return self.poll_leader(state, now_ms)
        if isinstance(state, es.CandidateState):
            return self.poll_candidate(state, now_ms)
        if isinstance(state, es.ProspectiveState):
            return self.poll_prospective(state, now_ms)
        if isinstance(state, es.FollowerState):
            return self.poll_follower(state, now_ms)
        if isinstance(state, es.ResignedState):
            return self.poll_resigned(state, now_ms)
        if isinstance(state, es.VotedState):
            return self.poll_voted(state, now_ms)
        if isinstance(state, es.UnattachedState):
            return self.poll_unattached(state, now_ms)
        raise InvariantViolation(f"node {self.node_id}: unknown state {state.describe()}")

    def poll_leader(self, state: es.LeaderState, now_ms: int) -> int:
        if len(self.quorum.voters) <= 1:
            # Alone there is no majority to lose; the window starts afresh once a voter is
            # added (KIP-853), rather than having expired long ago.
            state.check_quorum_deadline_ms = now_ms + self.config.check_quorum_timeout_ms
        elif not state.check_quorum(
                now_ms, check_quorum_timeout_ms=self.config.check_quorum_timeout_ms):
            self._resign(state, [], now_ms, why="check-quorum: no majority fetched within "
                         f"{self.config.check_quorum_timeout_ms} ms")
            return now_ms
        if state.accumulated and state.linger_deadline_ms is not None \
                and now_ms >= state.linger_deadline_ms:
            self._drain_accumulator(state, now_ms)
        if now_ms >= state.next_observer_expiry_ms:
            state.next_observer_expiry_ms = now_ms + es.OBSERVER_EXPIRY_INTERVAL_MS
            self._expire_observers(state, now_ms)
        if self.defer_leader_flush:
            # What is durable already (a log that syncs on append) counts at once.
            self._note_leader_flushed(state, now_ms)
        else:
            self._flush_leader_log(state, now_ms)
        self._poll_voter_change(state, now_ms)
        removed_at = self.history.latest_offset()
        if not self.quorum.is_voter and removed_at is not None \
                and self.log.high_watermark > removed_at:
            # KIP-853: a leader that removed itself leads until the change commits, then
            # hands over to the remaining voters.
            self._resign(state, state.successors_by_fetch_offset(), now_ms,
                         why="removed from the voter set")
            return now_ms
        for voter in self.quorum.remote_voters():
            if voter not in state.acknowledged:
                self._send(voter, m.BeginQuorumEpochRequest(
                    cluster_id=self.cluster_id, leader_id=self.node_id, leader_epoch=state.epoch,
                    voter_id=voter, leader_endpoint=self.endpoint_of(self.node_id)), now_ms)
        wakeup = state.check_quorum_deadline_ms
        if state.linger_deadline_ms is not None and state.accumulated:
            wakeup = min(wakeup, state.linger_deadline_ms)
        return wakeup

    def poll_candidate(self, state: es.CandidateState, now_ms: int) -> int:
        if state.election.is_granted():
            self._become_leader(state, now_ms)
            return now_ms
        if state.backoff_deadline_ms is not None:
            if now_ms >= state.backoff_deadline_ms:
                self.quorum.become_prospective(now_ms)
                self._after_transition("election backoff over", now_ms)
                self._emit(RaftEventKind.PRE_VOTE_STARTED, now_ms, "election backoff over")
                return now_ms
            return state.backoff_deadline_ms
        if state.election.is_rejected():
            self._start_backoff(state, now_ms, "a majority rejected the vote")
            return now_ms
        if now_ms >= state.election_deadline_ms:
            self._emit(RaftEventKind.ELECTION_LOST, now_ms, "election timed out")
            self.quorum.become_prospective(now_ms)
            self._after_transition("election timeout", now_ms)
            self._emit(RaftEventKind.PRE_VOTE_STARTED, now_ms, "election timed out")
            return now_ms
        self._send_vote_requests(state.election, state.epoch, pre_vote=False, now_ms=now_ms)
        return state.election_deadline_ms

    def poll_prospective(self, state: es.ProspectiveState, now_ms: int) -> int:
        if state.election.is_granted():
            candidate = self.quorum.become_candidate(now_ms)
            self._after_transition("pre-vote granted by a majority", now_ms)
            self._emit(RaftEventKind.ELECTION_STARTED, now_ms,
                       f"retries={candidate.retries} voters={sorted(self.quorum.voters)}")
            return now_ms
        lost = ""
        if state.backoff_deadline_ms is not None:
            if now_ms < state.backoff_deadline_ms:
                return state.backoff_deadline_ms
            lost = "pre-vote backoff over"
        elif state.election.is_rejected():
            self._start_backoff(state, now_ms, "a majority rejected the pre-vote")
            return state.backoff_deadline_ms or now_ms
        elif now_ms >= state.election_deadline_ms:
            lost = "pre-vote timed out"
        if lost:
            if state.leader_id_hint is not None:
                # KIP-996: a follower whose pre-vote failed goes back to its leader.
                self.quorum.become_follower(state.epoch, state.leader_id_hint, now_ms)
            else:
                self.quorum.become_prospective(now_ms)
            self._after_transition(lost, now_ms)
            if self.role is Role.PROSPECTIVE:
                self._emit(RaftEventKind.PRE_VOTE_STARTED, now_ms, lost)
            return now_ms
        self._send_vote_requests(state.election, state.epoch + 1, pre_vote=True, now_ms=now_ms)
        return state.election_deadline_ms

    def _start_backoff(self, state: es.CandidateState | es.ProspectiveState, now_ms: int,
                       why: str) -> None:
        backoff = binary_exponential_backoff_ms(state.retries, self.rng,
                                                self.config.election_backoff_max_ms)
        state.backoff_deadline_ms = now_ms + backoff
        self._emit(RaftEventKind.ELECTION_LOST, now_ms, why)
        self._emit(RaftEventKind.ELECTION_BACKOFF, now_ms, f"{backoff} ms after {why}")

    def _send_vote_requests(self, election: es.EpochElection, candidate_epoch: int, *,
                            pre_vote: bool, now_ms: int) -> None:
        voter_set = self.history.latest()
        for voter in sorted(election.unrecorded()):
            node = voter_set.get(voter)
            self._send(voter, m.VoteRequest(
                cluster_id=self.cluster_id, candidate_epoch=candidate_epoch,
                candidate_id=self.node_id, voter_id=voter,
                last_offset_epoch=self.log.last_fetched_epoch(), last_offset=self.log.end_offset,
                pre_vote=pre_vote, candidate_directory_id=self.directory_id,
                voter_directory_id=m.NO_DIRECTORY if node is None else node.directory_id),
                now_ms)

    def poll_follower(self, state: es.FollowerState, now_ms: int) -> int:
        if now_ms >= state.fetch_deadline_ms:
            if self.quorum.is_voter:
                self.quorum.become_prospective(now_ms)
            else:
                self.quorum.become_observer_unattached(now_ms)
            self._after_transition(f"no answer from leader {state.leader_id_} within "
                                   f"{self.config.fetch_timeout_ms} ms", now_ms)
            if self.role is Role.PROSPECTIVE:
                # The leader resigned (EndQuorumEpoch shortened our deadline) or went silent.
                self._emit(RaftEventKind.PRE_VOTE_STARTED, now_ms,
                           "EndQuorumEpoch" if state.leader_resigned else "fetch timeout")
            return now_ms
        request: m.RaftRequest
        if state.snapshot_id is not None:
            request = m.FetchSnapshotRequest(
                cluster_id=self.cluster_id, replica_id=self.node_id,
                current_leader_epoch=state.epoch, snapshot_id=state.snapshot_id,
                position=len(state.snapshot_buffer), max_bytes=self.config.snapshot_chunk_bytes)
        else:
            request = self._fetch_request(state.epoch)
        self._send(state.leader_id_, request, now_ms)
        self._maybe_auto_join(state, now_ms)
        return state.fetch_deadline_ms

    def _fetch_request(self, epoch: int) -> m.FetchRequest:
        return m.FetchRequest(
            cluster_id=self.cluster_id, replica_id=self.node_id, current_leader_epoch=epoch,
            fetch_offset=self.log.end_offset, last_fetched_epoch=self.log.last_fetched_epoch(),
            max_wait_ms=self.config.fetch_max_wait_ms, max_bytes=self.config.fetch_max_bytes,
            high_watermark=self.log.high_watermark, replica_directory_id=self.directory_id)

    def poll_unattached(self, state: es.UnattachedState, now_ms: int) -> int:
        if state.election_deadline_ms is None:
            return self._poll_observer_without_leader(state, now_ms)
        if now_ms >= state.election_deadline_ms:
            self.quorum.become_prospective(now_ms)
            self._after_transition("election timeout", now_ms)
            self._emit(RaftEventKind.PRE_VOTE_STARTED, now_ms, "election timeout")
            return now_ms
        return state.election_deadline_ms

    def _poll_observer_without_leader(self, state: es.EpochState, now_ms: int) -> int:
        # An observer asks a random voter (or bootstrap server, when it knows no voter yet);
        # the answer names the leader (or a newer epoch).
        targets = sorted(v for v in self.quorum.voters if v != self.node_id) \
            or list(self.bootstrap_servers)
        if targets:
            self._send(self.rng.choice(targets), self._fetch_request(state.epoch), now_ms)
        return now_ms + self.config.request_timeout_ms

    def poll_voted(self, state: es.VotedState, now_ms: int) -> int:
        if not self.quorum.is_voter:
            return self._poll_observer_without_leader(state, now_ms)  # removed since voting
        if now_ms >= state.election_deadline_ms:
            self.quorum.become_prospective(now_ms)
            self._after_transition("election timeout after voting", now_ms)
            self._emit(RaftEventKind.PRE_VOTE_STARTED, now_ms, "election timeout")
            return now_ms
        return state.election_deadline_ms

    def poll_resigned(self, state: es.ResignedState, now_ms: int) -> int:
        if now_ms >= state.election_deadline_ms:
            self.quorum.become_unattached(Epoch(state.epoch + 1), now_ms)
            self._after_transition("resigned leader's election timeout", now_ms)
            return now_ms
        for voter in sorted(state.unacknowledged):
            self._send(voter, m.EndQuorumEpochRequest(
                cluster_id=self.cluster_id, leader_id=self.node_id, leader_epoch=state.epoch,
                preferred_successors=tuple(state.preferred_successors)), now_ms)
        return state.election_deadline_ms

    # -- leader internals ------------------------------------------------------------------------

    def _become_leader(self, state: es.CandidateState, now_ms: int) -> None:
        granted = sorted(state.election.granted)
        epoch_start = self.log.end_offset
        voter_set = self.history.latest()
        leader = self.quorum.become_leader(
            epoch_start_offset=epoch_start, now_ms=now_ms,
            check_quorum_timeout_ms=self.config.check_quorum_timeout_ms,
            voter_directories={v.voter_id: v.directory_id for v in voter_set.nodes()})
        # KIP-595: the first entry of every epoch is a LeaderChange control record; committing
        # it commits every older entry before it, which a leader may not do on its own.
        value = cr.encode_leader_change(cr.LeaderChangeMessage(
            leader_id=self.node_id, voters=tuple(sorted(self.quorum.voters)),
            granting_voters=tuple(granted)))
        timestamp_ms = now_ms + self.wall_clock_offset_ms
        records = [rb.RecordInput(key=cr.encode_key(cr.ControlRecordType.LEADER_CHANGE),
                                  value=value, timestamp_ms=timestamp_ms)]
        bootstrap = self.history.latest_offset() == -1
        if bootstrap:
            # KIP-853: the voter set still comes from the bootstrap snapshot that `storage
            # format` wrote, which is never fetched: the first leader copies it into the log,
            # where observers and new voters read it.
            records += [r._replace(timestamp_ms=timestamp_ms) for r in
                        vs.control_batch_records(voter_set, self.history.kraft_version())]
        batch = rb.build_batch(records, now_ms=timestamp_ms, is_control=True)
        info = self.log.append_as_leader(batch, leader.epoch)
        if bootstrap:
            self.history.add_kraft_version(info.last_offset - 1, self.history.kraft_version())
            self.history.add_voters(info.last_offset, voter_set)
        if info.first_offset != epoch_start:
            raise InvariantViolation(f"node {self.node_id}: LeaderChange landed at "
                                     f"{info.first_offset}, expected {epoch_start}")
        leader.next_offset = info.last_offset + 1
        self._after_transition(f"won election with votes {granted}", now_ms)
        self._emit(RaftEventKind.ELECTION_WON, now_ms, f"granted={granted}")
        self._emit(RaftEventKind.LEADER_CHANGE, now_ms, f"leader={self.node_id}")
        self._flush_leader_log(leader, now_ms)

    def needs_leader_flush(self) -> bool:
        """A leader with appended entries not yet durable (see ``defer_leader_flush``)."""
        return self.role is Role.LEADER and self.log.flushed_offset < self.log.end_offset

    def flush_leader_log(self, now_ms: int) -> bool:
        """Make the leader's appended entries durable; True if it flushed anything. Call
        ``poll`` afterwards: the high watermark may have moved."""
        state = self.quorum.state
        if not isinstance(state, es.LeaderState) or not self.needs_leader_flush():
            return False
        self._flush_leader_log(state, now_ms)
        return True

    def _flush_leader_log(self, state: es.LeaderState, now_ms: int) -> None:
        if self.log.flushed_offset < self.log.end_offset:
            self.log.flush()
        self._note_leader_flushed(state, now_ms)

    def _note_leader_flushed(self, state: es.LeaderState, now_ms: int) -> None:
        # Only durable entries count towards the HW, the leader's own copy included.
        if state.update_local_end_offset(self.log.flushed_offset, now_ms):
            self._on_leader_high_watermark(state)

    def _on_leader_high_watermark(self, state: es.LeaderState) -> None:
        if state.high_watermark is not None:
            self.log.update_high_watermark(state.high_watermark)

    def _drain_accumulator(self, state: es.LeaderState, now_ms: int) -> None:
        pending = state.accumulated
        first_offset = state.next_offset - len(pending)
        state.accumulated = []
        state.accumulated_bytes = 0
        state.linger_deadline_ms = None
        batch = rb.build_batch(
            [rb.RecordInput(value=value, timestamp_ms=now_ms + self.wall_clock_offset_ms)
             for value in pending],
            now_ms=now_ms + self.wall_clock_offset_ms)
        info = self.log.append_as_leader(batch, state.epoch)
        if info.first_offset != first_offset or info.last_offset != state.next_offset - 1:
            raise InvariantViolation(
                f"node {self.node_id} epoch {state.epoch}: proposals promised offsets "
                f"{first_offset}..{state.next_offset - 1} but were appended at "
                f"{info.first_offset}..{info.last_offset}")

    def _resign(self, state: es.LeaderState, successors: list[int], now_ms: int, *,
                why: str) -> None:
        dropped = len(state.accumulated)
        self.quorum.become_resigned(successors, now_ms)
        self._after_transition(why, now_ms)
        self._emit(RaftEventKind.RESIGNED, now_ms,
                   f"{why}; successors={successors}; dropped {dropped} unappended proposals")

    # -- public API for the state machine ------------------------------------------------------

    def propose(self, records: Sequence[bytes], now_ms: int, *, epoch: int | None = None) -> int:
        """Queue records for the current epoch; returns the offset the last one will have.

        They are appended together after ``append_linger_ms`` (one batch, one flush) and
        reach ``handle_commit`` once committed. Raises NotLeaderError with a hint otherwise.
        """
        state = self.quorum.state
        if not isinstance(state, es.LeaderState):
            raise NotLeaderError(f"node {self.node_id} is {state.describe()}, not the leader",
                                 leader_id=self.leader_hint(),
                                 leader_endpoint=self.endpoint_of(self.leader_hint()))
        if epoch is not None and epoch != state.epoch:
            # Kafka's prepareAppend(epoch, records): the caller activated in another epoch
            # (e.g. this node led epoch 1 and leads epoch 3 after a poll it did not see).
            raise NotLeaderError(f"node {self.node_id} leads epoch {state.epoch}, not {epoch}",
                                 leader_id=self.node_id,
                                 leader_endpoint=self.endpoint_of(self.node_id))
        if not records:
            raise ValueError("propose() needs at least one record")
        values = [bytes(value) for value in records]
        state.accumulated.extend(values)
        state.accumulated_bytes += sum(map(len, values))
        state.next_offset += len(values)
        if state.linger_deadline_ms is None:
            state.linger_deadline_ms = now_ms + self.config.append_linger_ms
        if state.accumulated_bytes >= self.config.max_batch_bytes:
            self._drain_accumulator(state, now_ms)
        return state.next_offset - 1

    def resign(self, now_ms: int) -> bool:
        """Graceful shutdown: a leader resigns naming successors by fetch offset (KIP-595)."""
        state = self.quorum.state
        if not isinstance(state, es.LeaderState):
            return False
        self._resign(state, state.successors_by_fetch_offset(), now_ms, why="graceful resign")
        return True

    def create_snapshot(self, end_offset: int, *, now_ms: int,
                        last_contained_log_timestamp: int = -1) -> snap.SnapshotWriter:
        """A writer for a snapshot ending at ``end_offset`` (<= HW, a batch boundary)."""
        if end_offset > self.log.high_watermark or end_offset <= self.log.start_offset:
            raise InvariantViolation(
                f"node {self.node_id}: snapshot end offset {end_offset} must be in "
                f"({self.log.start_offset}, high watermark {self.log.high_watermark}]")
        batches = rb.decode_batches(self.log.read(end_offset - 1, 1))
        if not batches or batches[0].last_offset != end_offset - 1:
            raise InvariantViolation(f"node {self.node_id}: snapshot end offset {end_offset} "
                                     "is not a batch boundary")
        snapshot_id = m.OffsetAndEpoch(offset=end_offset, epoch=batches[0].partition_leader_epoch)
        control: list[rb.RecordInput] = []
        if not self.quorum.static_voters:
            # KIP-853: the snapshot carries the voter set as of its end, so a replica that
            # starts from it knows the voters without the log before it.
            control = vs.control_batch_records(
                self.history.value_at_or_before(end_offset - 1),
                self.history.kraft_version_at_or_before(end_offset - 1))
        return snap.SnapshotWriter(snapshot_id, now_ms=now_ms,
                                   last_contained_log_timestamp=last_contained_log_timestamp,
                                   control=control)

    def freeze_snapshot(self, writer: snap.SnapshotWriter) -> m.OffsetAndEpoch:
        """Store the snapshot durably, then let the log start advance to it (KIP-630)."""
        data = writer.build()
        snap.read_snapshot_records(writer.snapshot_id, data)
        self.log.write_snapshot(writer.snapshot_id, data)
        if self._listener_next_offset >= writer.snapshot_id.offset:
            self.log.delete_before_snapshot(writer.snapshot_id)
        return writer.snapshot_id

    # -- inbound requests ------------------------------------------------------------------------

    def handle_request(self, source: int, request: m.RaftRequest, now_ms: int,
                       request_id: int | None = None) -> m.RaftResponse | m.Pending:
        """Answer ``request``; a Fetch with nothing to return may be parked (``PENDING``) when
        the driver supplied a ``request_id`` to complete it with later."""
        if isinstance(request, m.VoteRequest):
            return self.handle_vote_request(request, now_ms)
        if isinstance(request, m.BeginQuorumEpochRequest):
            return self.handle_begin_quorum_epoch_request(request, now_ms)
        if isinstance(request, m.EndQuorumEpochRequest):
            return self.handle_end_quorum_epoch_request(request, now_ms)
        if isinstance(request, m.FetchRequest):
            return self.handle_fetch_request(source, request, now_ms, request_id)
        if isinstance(request, m.FetchSnapshotRequest):
            return self.handle_fetch_snapshot_request(request, now_ms)
        if isinstance(request, m.AddRaftVoterRequest | m.RemoveRaftVoterRequest
                      | m.UpdateRaftVoterRequest):
            return self.handle_voter_change_request(request, now_ms, request_id)
        return self.handle_describe_quorum_request(now_ms)

    def _vote_response(self, error: ErrorCode, granted: bool) -> m.VoteResponse:
        return m.VoteResponse(error_code=error, leader_epoch=self.epoch,
                              leader_id=self.leader_hint(), vote_granted=granted)

    def handle_vote_request(self, request: m.VoteRequest, now_ms: int) -> m.VoteResponse:
        # Every refusal below leaves the state (durable or not) as it was.
        if request.cluster_id != self.cluster_id:
            return self._vote_response(ErrorCode.INCONSISTENT_CLUSTER_ID, False)
        if request.candidate_id == self.node_id:
            # No node asks itself for a vote: granting it would be a vote nobody asked for.
            return self._vote_response(ErrorCode.INVALID_REQUEST, False)
        if request.voter_id != self.node_id:
            return self._vote_response(ErrorCode.INCONSISTENT_VOTER_SET, False)
        if request.voter_directory_id not in (m.NO_DIRECTORY, self.directory_id):
            # KIP-853: addressed to another replica of this id (a replaced disk).
            return self._vote_response(ErrorCode.INVALID_VOTER_KEY, False)
        candidate = self.history.latest().get(request.candidate_id)
        # With voters in the log this node may be a voter whose log does not hold its own
        # addition yet: it votes all the same (KIP-853), when the request names its
        # directory; a replaced disk has another directory and is refused above.
        if (self.quorum.static_voters and not self.quorum.is_voter) or (
                candidate is None and self.quorum.static_voters) or (
                candidate is not None and not candidate.matches(request.candidate_id,
                                                                 request.candidate_directory_id)):
            # With voters in the log an unknown candidate may be a voter this node has not
            # fetched yet (Kafka grants it too); a known id on another disk is never the voter.
            return self._vote_response(ErrorCode.INCONSISTENT_VOTER_SET, False)
        # A candidate's log never holds its candidate epoch yet (Kafka's isIllegalEpoch; our
        # pre-vote carries epoch + 1 too, so the same strict rule holds for it).
        if request.last_offset < 0 or request.last_offset_epoch < 0 or request.candidate_epoch < 0 \
                or request.last_offset_epoch >= request.candidate_epoch:
            return self._vote_response(ErrorCode.INVALID_REQUEST, False)
        if request.candidate_epoch < self.epoch:
            return self._vote_response(ErrorCode.FENCED_LEADER_EPOCH, False)
        up_to_date = self._is_log_up_to_date(request.last_offset_epoch, request.last_offset)
        state = self.quorum.state
        # KIP-996: a replica that is following a live leader (or is it) refuses pre-votes, so
        # a partitioned node cannot disrupt a healthy quorum. It refuses the vote that follows
        # a pre-vote too, without adopting the candidate's epoch (the Raft thesis, 4.2.3: a
        # server that hears from its leader ignores RequestVote): an honest candidate won its
        # pre-vote among voters that had no live leader, so this only turns away a candidate
        # that skipped or raced the pre-vote, or a forged request, which would otherwise
        # make the leader step down.
        has_live_leader = isinstance(state, es.LeaderState) or (
            isinstance(state, es.FollowerState) and not state.leader_resigned)
        if request.pre_vote:
            # Answering a pre-vote never changes any state, durable or not.
            return self._vote_response(ErrorCode.NONE, up_to_date and not has_live_leader)
        if has_live_leader:
            return self._vote_response(ErrorCode.NONE, False)
        if request.candidate_epoch > self.epoch:
            self.quorum.become_unattached(Epoch(request.candidate_epoch), now_ms)
            self._after_transition(f"vote request from {request.candidate_id} with epoch "
                                   f"{request.candidate_epoch}", now_ms)
            state = self.quorum.state
        granted = False
        can_vote = isinstance(state, es.UnattachedState) or (
            isinstance(state, es.ProspectiveState) and state.leader_id_hint is None
            and state.voted_id in (None, request.candidate_id))
        if isinstance(state, es.VotedState):
            granted = state.voted_id == request.candidate_id
        elif can_vote and up_to_date:
            # Persisted by QuorumState before we answer.
            self.quorum.become_voted(Epoch(request.candidate_epoch),
                                     NodeId(request.candidate_id), now_ms)
            self._after_transition(f"granted vote to {request.candidate_id}", now_ms)
            granted = True
        return self._vote_response(ErrorCode.NONE, granted)

    def _validate_voter_request(self, cluster_id: str, leader_id: int,
                                leader_epoch: int, now_ms: int) -> ErrorCode | None:
        if cluster_id != self.cluster_id:
            return ErrorCode.INCONSISTENT_CLUSTER_ID
        if not self._may_follow(leader_id) or (self.quorum.static_voters
                                                and not self.quorum.is_voter):
            return ErrorCode.INCONSISTENT_VOTER_SET
        if leader_epoch < self.epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if self._conflicting_leader(leader_id, leader_epoch):
            self._warn_refused("second_leader_request", now_ms,
                               "refused: %s claims to lead epoch %s, which %s", leader_id,
                               leader_epoch, self.quorum.state.describe())
            return ErrorCode.INVALID_REQUEST
        return None

    def _conflicting_leader(self, leader_id: int, epoch: int) -> bool:
        """Whether ``leader_id`` leading ``epoch`` contradicts what this node knows: another
        leader of that same epoch (this node included). Two leaders in one epoch never
        happen among correct voters, so such a claim is refused, never acted on."""
        state = self.quorum.state
        if epoch != state.epoch:
            return False
        if isinstance(state, es.LeaderState | es.ResignedState):
            return True  # this node leads (or led) that epoch itself
        if isinstance(state, es.FollowerState):
            return state.leader_id_ != leader_id
        if isinstance(state, es.ProspectiveState):
            return state.leader_id_hint not in (None, leader_id)
        return False

    def _maybe_follow(self, leader_id: int, epoch: int, now_ms: int, why: str) -> None:
        """Adopt ``leader_id`` as leader of ``epoch`` (>= ours) unless already following it."""
        state = self.quorum.state
        if epoch == state.epoch:
            if isinstance(state, es.FollowerState) and state.leader_id_ == leader_id:
                return
            if isinstance(state, es.LeaderState | es.FollowerState | es.ResignedState):
                raise InvariantViolation(
                    f"node {self.node_id}: {state.describe()} told that {leader_id} leads the "
                    f"same epoch {epoch} ({why}): two leaders in one epoch")
        self.quorum.become_follower(Epoch(epoch), NodeId(leader_id), now_ms,
                                    leader_endpoint=self.endpoint_of(leader_id))
        self._after_transition(why, now_ms)
        self._emit(RaftEventKind.LEADER_CHANGE, now_ms, f"leader={leader_id}")

    def handle_begin_quorum_epoch_request(self, request: m.BeginQuorumEpochRequest,
                                          now_ms: int) -> m.BeginQuorumEpochResponse:
        error = self._validate_voter_request(request.cluster_id, request.leader_id,
                                             request.leader_epoch, now_ms)
        if error is None and request.voter_id != self.node_id:
            error = ErrorCode.INCONSISTENT_VOTER_SET
        if error is None:
            self._maybe_follow(request.leader_id, request.leader_epoch, now_ms,
                               f"BeginQuorumEpoch from {request.leader_id}")
        return m.BeginQuorumEpochResponse(error_code=error or ErrorCode.NONE,
                                          leader_epoch=self.epoch, leader_id=self.leader_hint())

    def handle_end_quorum_epoch_request(self, request: m.EndQuorumEpochRequest,
                                        now_ms: int) -> m.EndQuorumEpochResponse:
        error = self._validate_voter_request(request.cluster_id, request.leader_id,
                                             request.leader_epoch, now_ms)
        if error is None and self.quorum.static_voters \
                and not set(request.preferred_successors) <= self.quorum.voters:
            error = ErrorCode.INCONSISTENT_VOTER_SET
        if error is None:
            if request.leader_epoch > self.epoch:
                self.quorum.become_unattached(Epoch(request.leader_epoch), now_ms)
                self._after_transition(f"EndQuorumEpoch from {request.leader_id}", now_ms)
            state = self.quorum.state
            if isinstance(state, es.FollowerState) and state.leader_id_ == request.leader_id \
                    and not state.leader_resigned:
                state.leader_resigned = True
                successors = list(request.preferred_successors)
                if self.node_id in successors:
                    backoff = successor_backoff_ms(successors.index(self.node_id),
                                                   self.config.election_backoff_max_ms)
                else:
                    backoff = self.config.election_backoff_max_ms
                state.fetch_deadline_ms = min(state.fetch_deadline_ms, now_ms + backoff)
        return m.EndQuorumEpochResponse(error_code=error or ErrorCode.NONE,
                                        leader_epoch=self.epoch, leader_id=self.leader_hint())

    def _validate_leader_only(self, cluster_id: str, leader_epoch: int) -> ErrorCode | None:
        if cluster_id != self.cluster_id:
            return ErrorCode.INCONSISTENT_CLUSTER_ID
        if leader_epoch < self.epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if leader_epoch > self.epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        if self.role is not Role.LEADER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return None

    def _fetch_error(self, error: ErrorCode, message: str = "") -> m.FetchResponse:
        leader = self.leader_hint()
        return m.FetchResponse(error_code=error, leader_epoch=self.epoch, leader_id=leader,
                               error_message=message,
                               leader_endpoint=self.endpoint_of(leader) if leader >= 0 else "")

    def handle_fetch_request(self, source: int, request: m.FetchRequest, now_ms: int,
                             request_id: int | None = None) -> m.FetchResponse | m.Pending:
        if request.fetch_offset < 0 or request.max_bytes <= 0 or request.max_wait_ms < 0 \
                or request.last_fetched_epoch < 0 or request.replica_id != source \
                or request.replica_id == self.node_id \
                or request.last_fetched_epoch > request.current_leader_epoch:
            return self._fetch_error(ErrorCode.INVALID_REQUEST,
                                     f"bad fetch_offset={request.fetch_offset} "
                                     f"last_fetched_epoch={request.last_fetched_epoch} "
                                     f"max_bytes={request.max_bytes} "
                                     f"max_wait_ms={request.max_wait_ms} "
                                     f"current_leader_epoch={request.current_leader_epoch} "
                                     f"from {source}")
        error = self._validate_leader_only(request.cluster_id, request.current_leader_epoch)
        if error is not None:
            return self._fetch_error(error)
        state = self.quorum.state
        assert isinstance(state, es.LeaderState)
        response = self._try_complete_fetch(state, source, request, now_ms)
        if (not response.records and response.diverging_epoch is None
                and response.snapshot_id is None and request.max_wait_ms > 0
                and request_id is not None
                and not 0 <= request.high_watermark < self.log.high_watermark):
            self._purgatory[request_id] = _ParkedFetch(
                source=source, request=request, deadline_ms=now_ms + request.max_wait_ms,
                high_watermark=self.log.high_watermark, epoch=state.epoch)
            return m.PENDING
        return response

    def _try_complete_fetch(self, state: es.LeaderState, source: int, request: m.FetchRequest,
                            now_ms: int) -> m.FetchResponse:
        log = self.log
        latest = log.latest_snapshot_id()
        offset, last_epoch = request.fetch_offset, request.last_fetched_epoch

        def answer(**fields: object) -> m.FetchResponse:
            return m.FetchResponse(error_code=ErrorCode.NONE, leader_epoch=state.epoch,
                                   leader_id=self.node_id, high_watermark=log.high_watermark,
                                   log_start_offset=log.start_offset,
                                   leader_endpoint=self.endpoint_of(self.node_id),
                                   **fields)  # type: ignore[arg-type]

        if latest is not None and (offset < log.start_offset or (
                offset == log.start_offset and last_epoch != latest.epoch)):
            return answer(snapshot_id=latest)
        if offset < log.start_offset:
            raise InvariantViolation(f"node {self.node_id}: log start {log.start_offset} > 0 "
                                     "without a snapshot")
        if offset > 0:
            end = log.end_offset_for_epoch(last_epoch)
            if end.epoch != last_epoch or end.offset < offset:
                # Where the logs agree lies before our log start: only the snapshot can
                # bring the follower back (truncating it that far could cross its HW).
                if latest is not None and (end.offset < log.start_offset or end.epoch < 0):
                    return answer(snapshot_id=latest)
                return answer(diverging_epoch=end)
        state.acknowledged.add(source)
        if state.update_replica_fetch(source, offset, leader_end_offset=log.end_offset,
                                      now_ms=now_ms, directory_id=request.replica_directory_id):
            self._on_leader_high_watermark(state)
        records = log.read(offset, request.max_bytes)
        return answer(records=records)

    def _complete_parked_fetches(self, now_ms: int) -> None:
        for request_id, parked in list(self._purgatory.items()):
            still_leader = self.role is Role.LEADER and self.epoch == parked.epoch
            if (not still_leader or self.log.end_offset > parked.request.fetch_offset
                    or self.log.high_watermark != parked.high_watermark
                    or now_ms >= parked.deadline_ms):
                del self._purgatory[request_id]
                response = self.handle_fetch_request(parked.source, parked.request, now_ms, None)
                assert not isinstance(response, m.Pending)
                self.sink.complete(request_id, response)

    def handle_fetch_snapshot_request(self, request: m.FetchSnapshotRequest,
                                      now_ms: int) -> m.FetchSnapshotResponse:
        def error(code: ErrorCode, message: str = "") -> m.FetchSnapshotResponse:
            return m.FetchSnapshotResponse(error_code=code, leader_epoch=self.epoch,
                                           leader_id=self.leader_hint(), error_message=message)

        failure = self._validate_leader_only(request.cluster_id, request.current_leader_epoch)
        if failure is not None:
            return error(failure)
        if request.max_bytes <= 0:
            return error(ErrorCode.INVALID_REQUEST, f"max_bytes {request.max_bytes}")
        if request.replica_id == self.node_id:
            # The leader's own progress is its log's; a request in its name must not move it.
            return error(ErrorCode.INVALID_REQUEST, f"replica_id {request.replica_id} is the "
                                                    "leader itself")
        data = self.log.read_snapshot(request.snapshot_id)
        if data is None:
            return error(ErrorCode.SNAPSHOT_NOT_FOUND, f"no snapshot {request.snapshot_id}")
        if not 0 <= request.position <= len(data):
            return error(ErrorCode.POSITION_OUT_OF_RANGE,
                         f"position {request.position} outside snapshot of {len(data)} bytes")
        chunk = min(request.max_bytes, self.config.snapshot_chunk_bytes)
        state = self.quorum.state
        if isinstance(state, es.LeaderState):
            state.acknowledged.add(request.replica_id)
            state.replica(request.replica_id).last_fetch_ms = now_ms
            if request.replica_id in state.voters:
                state.fetched_voters.add(request.replica_id)
        return m.FetchSnapshotResponse(
            error_code=ErrorCode.NONE, leader_epoch=self.epoch, leader_id=self.node_id,
            snapshot_id=request.snapshot_id, size=len(data), position=request.position,
            unaligned_records=data[request.position:request.position + chunk])

    def _expire_observers(self, state: es.LeaderState, now_ms: int) -> None:
        expired = state.expire_observers(now_ms)
        if expired:
            logger.info("[node=%s epoch=%s] event=observers_expired ids=%s idle_ms=%d", self.node_id,
                        state.epoch, ",".join(map(str, expired)), es.OBSERVER_SESSION_TIMEOUT_MS)

    def handle_describe_quorum_request(self, now_ms: int) -> m.DescribeQuorumResponse:
        state = self.quorum.state
        if not isinstance(state, es.LeaderState):
            return m.DescribeQuorumResponse(error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                            leader_id=self.leader_hint(), leader_epoch=self.epoch)
        # Only live observers are described, as Kafka's describeQuorum clears the inactive first.
        self._expire_observers(state, now_ms)

        def describe(replica: es.ReplicaState) -> m.ReplicaDescription:
            return m.ReplicaDescription(
                replica_id=replica.node_id, replica_directory_id=replica.directory_id,
                log_end_offset=-1 if replica.end_offset is None else replica.end_offset,
                last_fetch_timestamp=-1 if replica.last_fetch_ms is None else replica.last_fetch_ms,
                last_caught_up_timestamp=-1 if replica.last_caught_up_ms is None
                else replica.last_caught_up_ms)

        return m.DescribeQuorumResponse(
            error_code=ErrorCode.NONE, leader_id=self.node_id, leader_epoch=state.epoch,
            high_watermark=-1 if state.high_watermark is None else state.high_watermark,
            current_voters=tuple(describe(r) for r in state.voters.values()),
            observers=tuple(describe(r) for r in sorted(state.observers.values(),
                                                        key=lambda r: r.node_id)),
            voter_endpoints=tuple((v, self.endpoint_of(v)) for v in sorted(state.voters)
                                  if self.endpoint_of(v)),
            kraft_version=self.history.kraft_version())

    # -- inbound responses -------------------------------------------------------------------------

    def handle_send_failure(self, destination: int, request: m.RaftRequest, now_ms: int) -> None:
        """The transport could not deliver ``request`` or got no answer in time."""
        if isinstance(request, m.AddRaftVoterRequest | m.RemoveRaftVoterRequest
                      | m.UpdateRaftVoterRequest):
            self._change_in_flight_until = 0  # auto-join retries after its pause
            return
        self._in_flight.pop(destination, None)
        self._note_send_failure(destination, now_ms)

    def send_failure_backoff_ms(self, failures: int) -> int:
        """The pause after ``failures`` (>= 1) sends in a row got no answer: the retry backoff,
        doubled for each further failure, at most a quarter of the election timeout (so an
        election still reaches a voter that comes back several times before it times out)."""
        base = self.config.retry_backoff_ms
        cap = max(base, self.config.election_timeout_ms // 4)
        return min(base << min(max(failures, 1) - 1, 20), cap)

    def _note_send_failure(self, destination: int, now_ms: int) -> None:
        # A peer that is down fails every call at once (connection refused): without the
        # doubling a candidate resent its Vote every retry.backoff.ms through the election.
        failures = self._send_failures.get(destination, 0) + 1
        self._send_failures[destination] = failures
        self._backoff_until[destination] = now_ms + self.send_failure_backoff_ms(failures)

    def handle_response(self, source: int, request: m.RaftRequest, response: m.RaftResponse,
                        now_ms: int) -> None:
        """``response`` answers ``request``, which we sent to ``source`` (maybe long ago)."""
        if isinstance(response, m.VoterChangeResponse):
            self._handle_voter_change_response(request, response, now_ms)
            return
        self._in_flight.pop(source, None)
        self._send_failures.pop(source, None)
        if isinstance(response, m.VoteResponse) and isinstance(request, m.VoteRequest):
            self._handle_vote_response(source, request, response, now_ms)
        elif isinstance(response, m.FetchResponse) and isinstance(request, m.FetchRequest):
            self._handle_fetch_response(source, request, response, now_ms)
        elif isinstance(response, m.FetchSnapshotResponse) \
                and isinstance(request, m.FetchSnapshotRequest):
            self._handle_fetch_snapshot_response(source, request, response, now_ms)
        elif isinstance(response, m.BeginQuorumEpochResponse | m.EndQuorumEpochResponse):
            if self._maybe_handle_common_response(response.leader_id, response.leader_epoch,
                                                  now_ms):
                return
            state = self.quorum.state
            if response.error_code is not ErrorCode.NONE:
                self._backoff_until[source] = now_ms + self.config.retry_backoff_ms
            elif isinstance(state, es.LeaderState) \
                    and isinstance(request, m.BeginQuorumEpochRequest) \
                    and request.leader_epoch == state.epoch:
                state.acknowledged.add(source)
            elif isinstance(state, es.ResignedState) \
                    and isinstance(request, m.EndQuorumEpochRequest) \
                    and request.leader_epoch == state.epoch:
                state.unacknowledged.discard(source)

    def _maybe_handle_common_response(self, leader_id: int, epoch: int, now_ms: int) -> bool:
        """Learn a newer epoch or this epoch's leader from any response (Kafka's
        maybeHandleCommonResponse). True when the response must not be processed further."""
        if epoch > self.epoch:
            if self._may_follow(leader_id):
                self._maybe_follow(leader_id, epoch, now_ms, f"response names leader {leader_id}")
            else:
                self.quorum.become_unattached(Epoch(epoch), now_ms)
                self._after_transition(f"response carries epoch {epoch}", now_ms)
            return True
        if epoch == self.epoch and self._may_follow(leader_id) \
                and self.role in (Role.UNATTACHED, Role.VOTED, Role.PROSPECTIVE, Role.CANDIDATE) \
                and getattr(self.quorum.state, "leader_id_hint", None) != leader_id:
            if self._conflicting_leader(leader_id, epoch):
                # A peer's claim, not our state: ignore the answer rather than act on it.
                self._warn_refused("second_leader_response", now_ms,
                                   "ignored a response naming %s leader of epoch %s: %s",
                                   leader_id, epoch, self.quorum.state.describe())
                return True
            self._maybe_follow(leader_id, epoch, now_ms, f"response names leader {leader_id}")
            return True
        return False

    def _handle_vote_response(self, source: int, request: m.VoteRequest,
                              response: m.VoteResponse, now_ms: int) -> None:
        if self._maybe_handle_common_response(response.leader_id, response.leader_epoch, now_ms):
            return
        state = self.quorum.state
        if response.error_code not in (ErrorCode.NONE, ErrorCode.FENCED_LEADER_EPOCH):
            self._backoff_until[source] = now_ms + self.config.retry_backoff_ms
            return
        granted = response.error_code is ErrorCode.NONE and response.vote_granted
        if (request.pre_vote and isinstance(state, es.ProspectiveState) \
                and request.candidate_epoch == state.epoch + 1) or (not request.pre_vote and isinstance(state, es.CandidateState) \
                and request.candidate_epoch == state.epoch):
            election = state.election
        else:
            return  # an answer to an election we are no longer running
        if granted:
            election.record_granted(source)
        else:
            election.record_rejected(source)

    def _handle_fetch_response(self, source: int, request: m.FetchRequest,
                               response: m.FetchResponse, now_ms: int) -> None:
        if response.leader_endpoint and response.leader_id >= 0 \
                and response.leader_id != self.node_id:
            self._learned_endpoints[response.leader_id] = response.leader_endpoint
        if self._maybe_handle_common_response(response.leader_id, response.leader_epoch, now_ms):
            return
        state = self.quorum.state
        if not isinstance(state, es.FollowerState) or state.leader_id_ != source \
                or request.current_leader_epoch != state.epoch:
            return
        if response.error_code is not ErrorCode.NONE:
            self._backoff_until[source] = now_ms + self.config.retry_backoff_ms
            return
        if response.leader_epoch != state.epoch or request.fetch_offset != self.log.end_offset \
                or request.last_fetched_epoch != self.log.last_fetched_epoch() \
                or state.snapshot_id is not None:
            return  # stale (duplicated or delayed) answer
        self.quorum.reset_fetch_deadline(now_ms)
        if response.diverging_epoch is not None:
            if not self._truncate_to_diverging(response.diverging_epoch, now_ms):
                self._note_send_failure(source, now_ms)
        elif response.snapshot_id is not None:
            state.snapshot_id = response.snapshot_id
            state.snapshot_buffer = bytearray()
        else:
            if response.records:
                try:
                    # Control records are validated before the append: a leader's VotersRecord
                    # that does not decode is refused like a corrupt batch, never half-applied.
                    control = [] if (self.quorum.static_voters and self.quorum.is_voter) \
                        else vs.read_control_records(response.records,
                                                     min_offset=self.log.end_offset)[0]
                    self.log.append_as_follower(response.records)
                except CorruptRecordError as exc:
                    logger.warning("[node=%s epoch=%s] rejected fetched records from %s: %s",
                                   self.node_id, self.epoch, source, exc)
                    self._backoff_until[source] = now_ms + self.config.retry_backoff_ms
                    return
                # (A static voter ignores VotersRecords anyway: no header walk on its hot path.)
                self.history.next_offset = max(self.history.next_offset, self.log.end_offset)
                if self.history.apply(control):
                    self._apply_voter_set(now_ms, f"fetched from {source}")
                # A voter flushes before its next Fetch reports the new end offset: the
                # leader counts it towards the HW. An observer's offset never counts, so it
                # leaves the fsync to segment rolls and shutdown, as Kafka's appendAsFollower
                # does: a crash loses at most an unflushed tail, fetched again on restart.
                # (After the scan: an observer that just fetched its own addition flushes
                # everything now; the leader counts a new voter only from past that record.)
                if self.quorum.is_voter:
                    self.log.flush()
            if response.high_watermark >= 0:
                state.leader_high_watermark = response.high_watermark
                self.log.update_high_watermark(min(response.high_watermark, self.log.end_offset))

    def _truncate_to_diverging(self, diverging: m.OffsetAndEpoch, now_ms: int) -> bool:
        """Truncate to where the leader's log diverges; False (nothing done) when that would
        cut below the high watermark."""
        local = self.log.end_offset_for_epoch(diverging.epoch)
        target = min(diverging.offset, local.offset)
        if target < self.log.high_watermark:
            # Committed entries are never truncated. A correct leader never asks for it (its
            # log holds every committed entry), so the answer is refused, not obeyed.
            self._warn_refused("truncate_below_hw", now_ms,
                               "refused to truncate to %s below the high watermark %s "
                               "(leader's diverging epoch %s)", target,
                               self.log.high_watermark, diverging)
            return False
        before = self.log.end_offset
        self.log.truncate_to(max(target, self.log.start_offset))
        if self.history.truncate_new_entries(self.log.end_offset):
            self._apply_voter_set(now_ms, f"truncated to {self.log.end_offset}")
        self._emit(RaftEventKind.TRUNCATED, now_ms,
                   f"from {before} to {self.log.end_offset} (diverging {diverging})")
        return True

    def _handle_fetch_snapshot_response(self, source: int, request: m.FetchSnapshotRequest,
                                        response: m.FetchSnapshotResponse, now_ms: int) -> None:
        if self._maybe_handle_common_response(response.leader_id, response.leader_epoch, now_ms):
            return
        state = self.quorum.state
        if not isinstance(state, es.FollowerState) or state.leader_id_ != source \
                or state.snapshot_id != request.snapshot_id \
                or request.position != len(state.snapshot_buffer):
            return
        if response.error_code is ErrorCode.SNAPSHOT_NOT_FOUND:
            state.snapshot_id = None  # the leader has a newer one: Fetch will name it
            return
        if response.error_code is not ErrorCode.NONE:
            self._backoff_until[source] = now_ms + self.config.retry_backoff_ms
            return
        if response.snapshot_id != request.snapshot_id or response.position != request.position:
            return
        self.quorum.reset_fetch_deadline(now_ms)
        state.snapshot_buffer.extend(response.unaligned_records)
        if len(state.snapshot_buffer) < response.size:
            return
        snapshot_id = state.snapshot_id
        data = bytes(state.snapshot_buffer)
        state.snapshot_id = None
        state.snapshot_buffer = bytearray()
        try:
            reader = snap.read_snapshot_records(snapshot_id, data)
        except CorruptRecordError as exc:
            logger.warning("[node=%s epoch=%s] discarding fetched snapshot: %s", self.node_id,
                           self.epoch, exc)
            return
        self.log.write_snapshot(snapshot_id, data)
        self.log.reset_to_snapshot(snapshot_id)
        before = self.history.latest()
        self.history.load_snapshot(snapshot_id.offset, data)
        if self.history.latest() != before:
            self._apply_voter_set(now_ms, f"snapshot {snapshot_id}")
        self._load_snapshot(reader, now_ms)

    # -- voter changes (KIP-853) -------------------------------------------------------------------

    def _voter_change_response(self, error: ErrorCode, message: str = ""
                               ) -> m.VoterChangeResponse:
        leader = self.leader_hint()
        return m.VoterChangeResponse(error_code=error, leader_epoch=self.epoch, leader_id=leader,
                                     error_message=message,
                                     leader_endpoint=self.endpoint_of(leader) if leader >= 0
                                     else "")

    def handle_voter_change_request(self, request: m.VoterChangeRequest, now_ms: int,
                                    request_id: int | None) -> m.VoterChangeResponse | m.Pending:
        """AddRaftVoter / RemoveRaftVoter / UpdateRaftVoter, answered by the leader when the
        change commits (``PENDING`` until then) or with Kafka's error code at once."""
        answer = self._voter_change_response
        if request.cluster_id != self.cluster_id:
            return answer(ErrorCode.INCONSISTENT_CLUSTER_ID,
                          f"cluster id {request.cluster_id!r} is not {self.cluster_id!r}")
        if request.voter_id < 0:
            return answer(ErrorCode.INVALID_REQUEST, f"voter id {request.voter_id} is negative")
        if request.voter_directory_id in uuid.RESERVED_DIRECTORY_IDS:
            return answer(ErrorCode.INVALID_REQUEST,
                          f"voter directory id {request.voter_directory_id} is reserved")
        if isinstance(request, m.AddRaftVoterRequest | m.UpdateRaftVoterRequest):
            try:
                vs.split_endpoint(request.endpoint)
            except ValueError as exc:
                return answer(ErrorCode.INVALID_REQUEST, str(exc))
        if isinstance(request, m.AddRaftVoterRequest) and request.timeout_ms <= 0:
            return answer(ErrorCode.INVALID_REQUEST, f"timeout_ms {request.timeout_ms}")
        if isinstance(request, m.UpdateRaftVoterRequest):
            if request.current_leader_epoch < self.epoch:
                return answer(ErrorCode.FENCED_LEADER_EPOCH)
            if request.current_leader_epoch > self.epoch:
                return answer(ErrorCode.UNKNOWN_LEADER_EPOCH)
        state = self.quorum.state
        if not isinstance(state, es.LeaderState):
            return answer(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"node {self.node_id} is "
                          f"{state.describe()}")
        if self.history.kraft_version() < vs.KRAFT_VERSION_DYNAMIC:
            return answer(ErrorCode.UNSUPPORTED_VERSION, "kraft.version is 0: the voter set "
                          "is the static controller.quorum.voters (format with --standalone "
                          "or --initial-controllers for dynamic voters)")
        pending_at = self.history.latest_offset()
        if self._pending_change is not None or (
                pending_at is not None and pending_at >= self.log.high_watermark):
            return answer(ErrorCode.REQUEST_TIMED_OUT, "another voter change is in progress "
                          "(one at a time; retry when it has committed)")
        if state.high_watermark is None:
            return answer(ErrorCode.REQUEST_TIMED_OUT, "the leader has not committed an entry "
                          "of its epoch yet; retry")
        current = self.history.latest()
        key = (request.voter_id, request.voter_directory_id)
        wait: tuple[int, uuid.Uuid] | None = None
        new: vs.VoterSet | None
        if isinstance(request, m.AddRaftVoterRequest):
            if request.voter_directory_id == m.NO_DIRECTORY:
                return answer(ErrorCode.INVALID_REQUEST, "a new voter needs its directory id")
            new = current.with_voter(vs.VoterNode(voter_id=request.voter_id,
                                                  directory_id=request.voter_directory_id,
                                                  endpoint=request.endpoint))
            if new is None:
                return answer(ErrorCode.DUPLICATE_VOTER,
                              f"node {request.voter_id} is already a voter")
            wait = key
            timeout_ms = request.timeout_ms
        elif isinstance(request, m.RemoveRaftVoterRequest):
            new = current.without_voter(*key)
            if new is None:
                return answer(ErrorCode.VOTER_NOT_FOUND, f"no voter {request.voter_id} with "
                              f"directory {request.voter_directory_id} in {current.describe()}")
            if not len(new):
                return answer(ErrorCode.INVALID_REQUEST, "cannot remove the last voter")
            timeout_ms = self.config.request_timeout_ms
        else:
            if not request.min_kraft_version <= self.history.kraft_version() \
                    <= request.max_kraft_version:
                return answer(ErrorCode.INVALID_REQUEST, "the voter does not support "
                              f"kraft.version {self.history.kraft_version()}")
            new = current.with_updated(vs.VoterNode(
                voter_id=request.voter_id, directory_id=request.voter_directory_id,
                endpoint=request.endpoint, min_kraft_version=request.min_kraft_version,
                max_kraft_version=request.max_kraft_version))
            if new is None:
                return answer(ErrorCode.VOTER_NOT_FOUND, f"no voter {request.voter_id} with "
                              f"directory {request.voter_directory_id}")
            if new == current:
                return answer(ErrorCode.NONE)
            timeout_ms = self.config.request_timeout_ms
        if request_id is None:
            return answer(ErrorCode.REQUEST_TIMED_OUT, "this request cannot wait for its commit")
        self._pending_change = _PendingVoterChange(
            request_id=request_id, epoch=state.epoch, deadline_ms=now_ms + timeout_ms,
            new_voters=new, wait_for_voter=wait,
            ack_when_committed=getattr(request, "ack_when_committed", True))
        logger.info("[node=%s epoch=%s] event=voter_change_started %s -> %s", self.node_id,
                    self.epoch, current.describe(), new.describe())
        self._poll_voter_change(state, now_ms)
        return m.PENDING

    def _finish_voter_change(self, error: ErrorCode, message: str = "") -> None:
        change, self._pending_change = self._pending_change, None
        if change is not None:
            self.sink.complete(change.request_id, self._voter_change_response(error, message))

    def _poll_voter_change(self, state: es.LeaderState, now_ms: int) -> None:
        change = self._pending_change
        if change is None:
            return
        if change.record_offset is None:
            if change.wait_for_voter is not None and not state.is_caught_up(
                    *change.wait_for_voter, now_ms=now_ms,
                    max_lag_ms=self.config.fetch_timeout_ms):
                if now_ms >= change.deadline_ms:
                    self._finish_voter_change(
                        ErrorCode.REQUEST_TIMED_OUT, f"voter {change.wait_for_voter[0]} did not "
                        "catch up with the leader's log in time (is it running and fetching?)")
                return
            change.record_offset = self._append_voters_record(state, change.new_voters, now_ms)
            if not change.ack_when_committed:
                self._finish_voter_change(ErrorCode.NONE)
                return
        if self.log.high_watermark > change.record_offset:
            self._finish_voter_change(ErrorCode.NONE)
        elif now_ms >= change.deadline_ms:
            self._finish_voter_change(ErrorCode.REQUEST_TIMED_OUT, "the new voter set was "
                                      "appended but has not committed yet")

    def _fail_stale_voter_change(self, now_ms: int) -> None:
        change = self._pending_change
        if change is not None and (self.role is not Role.LEADER or self.epoch != change.epoch):
            self._finish_voter_change(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                      "leadership changed before the voter change committed")

    def _append_voters_record(self, state: es.LeaderState, voters: vs.VoterSet,
                              now_ms: int) -> int:
        """Append the whole new voter set (one control record); returns its offset. The new
        majority counts at once (KIP-853), before the record commits."""
        current = self.history.latest()
        if not current.has_overlapping_majority(voters):
            raise InvariantViolation(f"node {self.node_id}: voter change {current.describe()} "
                                     f"-> {voters.describe()} is more than one voter")
        if state.accumulated:
            self._drain_accumulator(state, now_ms)  # keep the offsets promised to proposals
        timestamp_ms = now_ms + self.wall_clock_offset_ms
        batch = rb.build_batch([r._replace(timestamp_ms=timestamp_ms)
                                for r in vs.control_batch_records(voters, None)],
                               now_ms=timestamp_ms, is_control=True)
        info = self.log.append_as_leader(batch, state.epoch)
        if info.first_offset != state.next_offset:
            raise InvariantViolation(f"node {self.node_id}: VotersRecord landed at "
                                     f"{info.first_offset}, expected {state.next_offset}")
        state.next_offset = info.last_offset + 1
        self.history.add_voters(info.last_offset, voters)
        self._apply_voter_set(now_ms, "appended by this leader")
        return info.last_offset

    def _maybe_auto_join(self, state: es.FollowerState, now_ms: int) -> None:
        """``controller.quorum.auto.join.enable``: an observer controller adds itself once it
        is caught up; if its id votes with another directory (a replaced disk), it removes
        that voter first. A voter whose endpoint in the voter set is not the one it
        advertises now (it moved) tells the leader with UpdateRaftVoter, as Kafka's do."""
        own = self.history.latest().get(self.node_id)
        if self.quorum.is_voter and own is not None and self.local_endpoint \
                and own.directory_id == self.directory_id and own.endpoint != self.local_endpoint \
                and now_ms >= max(self._change_in_flight_until, self._auto_join_after_ms):
            self._change_in_flight_until = now_ms + 2 * self.config.request_timeout_ms
            self.sink.send(state.leader_id_, m.UpdateRaftVoterRequest(
                cluster_id=self.cluster_id, current_leader_epoch=state.epoch,
                voter_id=self.node_id, voter_directory_id=self.directory_id,
                endpoint=self.local_endpoint, min_kraft_version=vs.KRAFT_VERSION_STATIC,
                max_kraft_version=vs.KRAFT_VERSION_DYNAMIC))
            return
        if not self.auto_join or self.quorum.is_voter \
                or self.history.kraft_version() < vs.KRAFT_VERSION_DYNAMIC \
                or self.directory_id == m.NO_DIRECTORY or not self.local_endpoint \
                or now_ms < max(self._change_in_flight_until, self._auto_join_after_ms) \
                or self.log.high_watermark == 0:
            return  # (whether it is caught up is the leader's call: it waits for that)
        stale = self.history.latest().get(self.node_id)
        request: m.VoterChangeRequest
        if stale is not None:
            request = m.RemoveRaftVoterRequest(cluster_id=self.cluster_id, voter_id=self.node_id,
                                               voter_directory_id=stale.directory_id)
        else:
            request = m.AddRaftVoterRequest(
                cluster_id=self.cluster_id, timeout_ms=self.config.request_timeout_ms,
                voter_id=self.node_id, voter_directory_id=self.directory_id,
                endpoint=self.local_endpoint)
        self._change_in_flight_until = now_ms + 2 * self.config.request_timeout_ms
        self.sink.send(state.leader_id_, request)

    def _handle_voter_change_response(self, request: m.RaftRequest,
                                      response: m.VoterChangeResponse, now_ms: int) -> None:
        self._change_in_flight_until = 0
        if response.error_code is not ErrorCode.NONE:
            # Not caught up yet, another change in progress, ...: try again a little later.
            self._auto_join_after_ms = now_ms + self.config.fetch_timeout_ms // 2
            logger.info("[node=%s epoch=%s] event=auto_join_refused request=%s error=%s %s",
                        self.node_id, self.epoch, type(request).__name__,
                        response.error_code.name, response.error_message)

    # -- listener ------------------------------------------------------------------------------

    def _load_snapshot(self, reader: snap.SnapshotReader, now_ms: int) -> None:
        self.listener.handle_load_snapshot(reader)
        self._listener_next_offset = reader.snapshot_id.offset
        self._emit(RaftEventKind.SNAPSHOT_LOADED, now_ms, f"snapshot {reader.snapshot_id}")

    def _deliver_committed(self, now_ms: int) -> None:
        log = self.log
        if self._listener_next_offset < log.start_offset:
            latest = log.latest_snapshot_id()
            data = None if latest is None else log.read_snapshot(latest)
            if latest is None or data is None:
                raise InvariantViolation(f"node {self.node_id}: log starts at "
                                         f"{log.start_offset} but holds no snapshot to load")
            self._load_snapshot(snap.read_snapshot_records(latest, data), now_ms)
        high_watermark = log.high_watermark
        while self._listener_next_offset < high_watermark:
            data = log.read(self._listener_next_offset, self.config.fetch_max_bytes)
            committed: list[CommittedBatch] = []
            progressed = False
            for batch in bh.iter_batches(data):  # headers only: records decode lazily
                if batch.last_offset >= high_watermark:
                    break
                if not batch.is_control:
                    committed.append(CommittedBatch(
                        base_offset=batch.base_offset, last_offset=batch.last_offset,
                        epoch=batch.partition_leader_epoch,
                        append_timestamp_ms=batch.max_timestamp, data=batch.view))
                self._listener_next_offset = batch.last_offset + 1
                progressed = True
            if committed:
                self.listener.handle_commit(committed)
            if not progressed:
                break
        latest = log.latest_snapshot_id()
        if latest is not None and latest.offset > log.start_offset \
                and latest.offset <= min(self._listener_next_offset, log.high_watermark):
            log.delete_before_snapshot(latest)

    def _maybe_fire_leader_change(self) -> None:
        state = self.quorum.state
        if isinstance(state, es.LeaderState):
            if self._listener_next_offset < state.epoch_start_offset:
                return
            key = (int(self.node_id), state.epoch)
        else:
            key = (self.leader_hint(), state.epoch)
        if key != self._fired_leader:
            self._fired_leader = key
            self.listener.handle_leader_change(key[0], key[1])

    @property
    def listener_next_offset(self) -> int:
        return self._listener_next_offset
