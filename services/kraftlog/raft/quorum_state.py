"""QuorumState: the current role of this node and the only legal ways to change it.

Transition table (voters). "same"/"higher" compare the new epoch with the
current one; "next" is current + 1. Anything not listed raises
:class:`kraftlog.errors.InvariantViolation` naming both states, both epochs and
the ids involved::

    from \\ to   Unattached  Voted  Prospective  Candidate  Leader  Follower      Resigned
    Unattached   higher      same   same         -          -       same/higher   -
    Voted        higher      -      same         -          -       same/higher   -
    Prospective  higher      same*  same         next       -       same**/higher -
    Candidate    higher      -      same         -          same*** same/higher   -
    Leader       higher      -      -            -          -       higher        same
    Follower     higher      -      same         -          -       higher        -
    Resigned     higher      -      -            -          -       higher        -

    *   a Prospective may grant its vote only if it holds none in this epoch
    **  a lost pre-vote returns to the leader it followed (KIP-996)
    *** only with a granted majority

    Unattached -> Prospective   election timeout expired (a Voted voter too)
    Follower   -> Prospective   fetch timeout expired (KIP-996: pre-vote first)
    Prospective-> Prospective   retry after a lost or timed-out pre-vote round
    Prospective-> Candidate     a majority granted the pre-vote: bump the epoch
    Candidate  -> Prospective   the election was lost or timed out (after backoff)
    Leader     -> Resigned      graceful shutdown or failed check-quorum
    Resigned   -> Unattached    election timeout expired (epoch + 1) or higher epoch
    any        -> Unattached    learned of a higher epoch (Vote, Fetch, Begin/EndQuorumEpoch)
    any        -> Follower      learned the leader of an epoch >= ours

Observers (not in the voter set) only ever move between Unattached and Follower:
Follower -> Unattached (same epoch) on fetch timeout, so they go back to asking the
voters who leads. With voters in the log (KIP-853, ``static_voters=False``) the set
changes under a running node (:meth:`QuorumState.set_voters`), but only while it
follows or leads, the roles whose log moves; a node restarted as an observer keeps a
vote it granted as a voter (Voted -> Unattached/Follower as for voters), so it can
never vote twice in that epoch should it be added back. In that mode a leader or
candidate need not be in this node's (maybe stale) voter set, as in Kafka, and the
quorum-state file records no voters.

A durable transition writes the new :class:`ElectionState` to the store first
and switches in memory only after the write returned; a crash between the two
restarts into the persisted state, never into one that was not written.
Prospective and Resigned persist nothing new (pre-vote never changes durable
state; a resigned leader is restarted as Resigned in the same epoch).

Called by the raft client core only. No I/O besides the injected store, no
clock (deadlines are computed from the ``now_ms`` callers pass), randomness
only from the injected ``random.Random``.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping

from kraftlog.errors import InvariantViolation
from kraftlog.ids import Epoch, NodeId, Uuid
from kraftlog.raft import epoch_state as es
from kraftlog.raft.epoch_state import Role
from kraftlog.raft.quorum_state_store import (
    ElectionState,
    QuorumStateStore,
    check_configured_voters,
)

_SAME, _HIGHER, _NEXT = "same", "higher", "next"

# (from, to) -> allowed epoch relations. Mirrors the table in the module docstring.
TRANSITIONS: dict[tuple[Role, Role], frozenset[str]] = {
    (Role.UNATTACHED, Role.UNATTACHED): frozenset({_HIGHER}),
    (Role.UNATTACHED, Role.VOTED): frozenset({_SAME}),
    (Role.UNATTACHED, Role.PROSPECTIVE): frozenset({_SAME}),
    (Role.UNATTACHED, Role.FOLLOWER): frozenset({_SAME, _HIGHER}),
    (Role.VOTED, Role.UNATTACHED): frozenset({_HIGHER}),
    (Role.VOTED, Role.PROSPECTIVE): frozenset({_SAME}),
    (Role.VOTED, Role.FOLLOWER): frozenset({_SAME, _HIGHER}),
    (Role.PROSPECTIVE, Role.UNATTACHED): frozenset({_HIGHER}),
    (Role.PROSPECTIVE, Role.VOTED): frozenset({_SAME}),
    (Role.PROSPECTIVE, Role.PROSPECTIVE): frozenset({_SAME}),
    (Role.PROSPECTIVE, Role.CANDIDATE): frozenset({_NEXT}),
    (Role.PROSPECTIVE, Role.FOLLOWER): frozenset({_SAME, _HIGHER}),
    (Role.CANDIDATE, Role.UNATTACHED): frozenset({_HIGHER}),
    (Role.CANDIDATE, Role.PROSPECTIVE): frozenset({_SAME}),
    (Role.CANDIDATE, Role.LEADER): frozenset({_SAME}),
    (Role.CANDIDATE, Role.FOLLOWER): frozenset({_SAME, _HIGHER}),
    (Role.LEADER, Role.UNATTACHED): frozenset({_HIGHER}),
    (Role.LEADER, Role.FOLLOWER): frozenset({_HIGHER}),
    (Role.LEADER, Role.RESIGNED): frozenset({_SAME}),
    (Role.FOLLOWER, Role.UNATTACHED): frozenset({_HIGHER}),
    (Role.FOLLOWER, Role.PROSPECTIVE): frozenset({_SAME}),
    (Role.FOLLOWER, Role.FOLLOWER): frozenset({_HIGHER}),
    (Role.RESIGNED, Role.UNATTACHED): frozenset({_HIGHER}),
    (Role.RESIGNED, Role.FOLLOWER): frozenset({_HIGHER}),
}

OBSERVER_TRANSITIONS: dict[tuple[Role, Role], frozenset[str]] = {
    (Role.UNATTACHED, Role.UNATTACHED): frozenset({_HIGHER}),
    # KIP-853: a node whose log does not show it as a voter yet may be one (its addition
    # is not fetched yet): asked by a candidate by its id and directory, it votes.
    (Role.UNATTACHED, Role.VOTED): frozenset({_SAME}),
    (Role.VOTED, Role.UNATTACHED): frozenset({_HIGHER}),
    (Role.VOTED, Role.FOLLOWER): frozenset({_SAME, _HIGHER}),
    (Role.UNATTACHED, Role.FOLLOWER): frozenset({_SAME, _HIGHER}),
    (Role.FOLLOWER, Role.UNATTACHED): frozenset({_SAME, _HIGHER}),
    (Role.FOLLOWER, Role.FOLLOWER): frozenset({_HIGHER}),
    # A leader that appended its own removal (KIP-853) leads on as an observer until the
    # change commits, then resigns.
    (Role.LEADER, Role.RESIGNED): frozenset({_SAME}),
    (Role.LEADER, Role.UNATTACHED): frozenset({_HIGHER}),
    (Role.LEADER, Role.FOLLOWER): frozenset({_HIGHER}),
    (Role.RESIGNED, Role.UNATTACHED): frozenset({_HIGHER}),
    (Role.RESIGNED, Role.FOLLOWER): frozenset({_HIGHER}),
}


def _relation(current: int, new: int) -> str | None:
    if new == current:
        return _SAME
    if new == current + 1:
        return _NEXT
    if new > current:
        return _HIGHER
    return None


class QuorumState:
    """The role of ``local_id`` among ``voters``; see the module docstring for the table."""

    def __init__(self, *, local_id: NodeId, voters: Iterable[int], store: QuorumStateStore,
                 rng: random.Random, election_timeout_ms: int, fetch_timeout_ms: int,
                 static_voters: bool = True, local_is_voter: bool | None = None) -> None:
        self.local_id = local_id
        self.voters = frozenset(voters)
        self.static_voters = static_voters
        self._local_is_voter = (local_id in self.voters) if local_is_voter is None \
            else local_is_voter
        self._store = store
        self._rng = rng
        self._election_timeout_ms = election_timeout_ms
        self._fetch_timeout_ms = fetch_timeout_ms
        self._state: es.EpochState | None = None

    # -- queries ---------------------------------------------------------------------------

    @property
    def state(self) -> es.EpochState:
        if self._state is None:
            raise InvariantViolation(f"node {self.local_id}: QuorumState used before initialize()")
        return self._state

    @property
    def epoch(self) -> Epoch:
        return self.state.epoch

    @property
    def role(self) -> Role:
        return self.state.role

    @property
    def is_voter(self) -> bool:
        return self._local_is_voter

    def set_voters(self, voters: Iterable[int], *, local_is_voter: bool) -> None:
        """The voter set changed (KIP-853: a VotersRecord appended, fetched or truncated
        away). Only a Leader or Follower's log moves, so only they see a change; the
        caller adjusts the leader's replica states."""
        if self.static_voters:
            raise InvariantViolation(f"node {self.local_id}: the static voter set "
                                     f"{sorted(self.voters)} cannot change")
        state = self.state
        if not isinstance(state, es.LeaderState | es.FollowerState):
            raise InvariantViolation(f"node {self.local_id}: voter set changed while "
                                     f"{state.describe()}")
        self.voters = frozenset(voters)
        self._local_is_voter = local_is_voter

    def _persisted_voters(self) -> frozenset[int]:
        # With voters in the log the file records none (Kafka's data_version 1 drops them):
        # a changed set must not make the node refuse its own file at restart.
        return self.voters if self.static_voters else frozenset()

    def leader_id(self) -> NodeId | None:
        return self.state.leader_id()

    def remote_voters(self) -> list[int]:
        return sorted(v for v in self.voters if v != self.local_id)

    def random_election_deadline_ms(self, now_ms: int) -> int:
        """election.timeout.ms plus up to the same again at random (KIP-595 jitter)."""
        return now_ms + self._election_timeout_ms + self._rng.randrange(
            max(1, self._election_timeout_ms))

    # -- startup ---------------------------------------------------------------------------

    def initialize(self, *, log_end_epoch: int, now_ms: int) -> None:
        """Resume from the store (KafkaRaftClient's QuorumState.initialize).

        A restarted leader comes back Resigned so it cannot vote in its own epoch
        and cannot reuse (offset, epoch) pairs whose unflushed writes it lost; a
        restarted candidate comes back Prospective still holding its own vote.
        """
        existing = self._store.read()
        if existing is not None and self.static_voters:
            check_configured_voters(existing, self.voters, source=self._store.describe())
        stored = existing or ElectionState(epoch=Epoch(0), voters=self._persisted_voters())
        if not self.is_voter and stored.voted_id is not None and self.static_voters:
            raise InvariantViolation(
                f"node {self.local_id} is not among voters {sorted(self.voters)} but "
                f"{self._store.describe()} records a vote for {stored.voted_id} in epoch "
                f"{stored.epoch}: was this node's id or the voter set changed?")
        state: es.EpochState
        if stored.epoch < log_end_epoch:
            # The log outran the file (it was copied or the file is older): never reuse an
            # epoch the log has already seen.
            state = self._unattached(Epoch(log_end_epoch), now_ms)
        elif stored.leader_id == self.local_id:
            state = es.ResignedState(stored.epoch, local_id=self.local_id, voters=self.voters,
                                     preferred_successors=[],
                                     election_deadline_ms=self.random_election_deadline_ms(now_ms))
        elif stored.voted_id == self.local_id:
            state = es.ProspectiveState(stored.epoch, local_id=self.local_id, voters=self.voters,
                                        leader_id_hint=None, voted_id=self.local_id, retries=1,
                                        election_deadline_ms=self.random_election_deadline_ms(now_ms))
        elif stored.voted_id is not None:
            state = es.VotedState(stored.epoch, voted_id=stored.voted_id,
                                  election_deadline_ms=self.random_election_deadline_ms(now_ms))
        elif stored.leader_id is not None:
            state = es.FollowerState(stored.epoch, leader_id=stored.leader_id, leader_endpoint="",
                                     fetch_deadline_ms=now_ms + self._fetch_timeout_ms)
        else:
            state = self._unattached(stored.epoch, now_ms)
        if not self.is_voter and isinstance(state, es.ResignedState | es.ProspectiveState):
            # A leader or candidate removed from the voter set before it restarted: it
            # keeps the epoch (and its own vote), as an observer.
            state = (es.VotedState(stored.epoch, voted_id=self.local_id,
                                   election_deadline_ms=self.random_election_deadline_ms(now_ms))
                     if stored.voted_id == self.local_id else self._unattached(stored.epoch, now_ms))
        new_election = state.election_state(self._persisted_voters())
        if new_election != existing:
            self._store.write(new_election)
        self._state = state

    def _unattached(self, epoch: Epoch, now_ms: int) -> es.UnattachedState:
        deadline = self.random_election_deadline_ms(now_ms) if self.is_voter else None
        return es.UnattachedState(epoch, election_deadline_ms=deadline)

    # -- transitions -----------------------------------------------------------------------

    def _check(self, to: Role, new_epoch: int, detail: str) -> None:
        current = self.state
        table = TRANSITIONS if self.is_voter else OBSERVER_TRANSITIONS
        allowed = table.get((current.role, to), frozenset())
        relation = _relation(current.epoch, new_epoch)
        ok = relation in allowed or (relation == _NEXT and _HIGHER in allowed)
        if not ok:
            kind = "voter" if self.is_voter else "observer"
            raise InvariantViolation(
                f"node {self.local_id} ({kind}): illegal transition {current.describe()} -> "
                f"{to.value}(epoch={new_epoch}) [{detail}]; from epoch {current.epoch} to "
                f"{new_epoch} is {relation or 'lower'}, allowed: {sorted(allowed) or 'never'}")

    def _switch(self, new: es.EpochState) -> None:
        """Persist first, then switch in memory (crash between them is safe)."""
        election = new.election_state(self._persisted_voters())
        old_election = self.state.election_state(self._persisted_voters())
        if election != old_election:
            if election.epoch < old_election.epoch:
                raise InvariantViolation(
                    f"node {self.local_id}: would persist epoch {election.epoch} after "
                    f"{old_election.epoch}")
            self._store.write(election)
        self._state = new

    def become_unattached(self, epoch: Epoch, now_ms: int) -> es.UnattachedState:
        self._check(Role.UNATTACHED, epoch, "unattached")
        current = self.state
        new = self._unattached(epoch, now_ms)
        # Keep a pending election timer rather than restarting it: learning of a higher epoch
        # must not let a node postpone elections forever (Kafka keeps the remaining time).
        if self.is_voter and isinstance(current, es.UnattachedState | es.VotedState):
            new.election_deadline_ms = current.election_deadline_ms
        self._switch(new)
        return new

    def become_voted(self, epoch: Epoch, candidate_id: NodeId, now_ms: int) -> es.VotedState:
        if candidate_id == self.local_id or (self.static_voters
                                             and candidate_id not in self.voters):
            raise InvariantViolation(
                f"node {self.local_id}: cannot grant a vote to {candidate_id} in epoch {epoch}; "
                f"voters are {sorted(self.voters)}")
        current = self.state
        if isinstance(current, es.ProspectiveState) and current.voted_id not in (None, candidate_id):
            raise InvariantViolation(
                f"node {self.local_id}: {current.describe()} already voted for "
                f"{current.voted_id} in epoch {epoch}, cannot vote for {candidate_id}")
        self._check(Role.VOTED, epoch, f"voted_id={candidate_id}")
        # A fresh timer: the candidate we voted for has at least our chance to win.
        new = es.VotedState(epoch, voted_id=candidate_id,
                            election_deadline_ms=self.random_election_deadline_ms(now_ms))
        self._switch(new)
        return new

    def become_prospective(self, now_ms: int) -> es.ProspectiveState:
        current = self.state
        self._check(Role.PROSPECTIVE, current.epoch, "election or fetch timeout")
        leader_hint: NodeId | None = None
        voted: NodeId | None = None
        retries = 1
        if isinstance(current, es.FollowerState):
            leader_hint = current.leader_id_
        elif isinstance(current, es.VotedState):
            voted = current.voted_id
        elif isinstance(current, es.CandidateState):
            voted = self.local_id
            retries = current.retries + 1
        elif isinstance(current, es.ProspectiveState):
            leader_hint, voted, retries = (current.leader_id_hint, current.voted_id,
                                           current.retries + 1)
        new = es.ProspectiveState(current.epoch, local_id=self.local_id, voters=self.voters,
                                  leader_id_hint=leader_hint, voted_id=voted, retries=retries,
                                  election_deadline_ms=self.random_election_deadline_ms(now_ms))
        self._switch(new)
        return new

    def become_candidate(self, now_ms: int) -> es.CandidateState:
        current = self.state
        new_epoch = Epoch(current.epoch + 1)
        self._check(Role.CANDIDATE, new_epoch, "pre-vote granted")
        if isinstance(current, es.ProspectiveState) and not current.election.is_granted():
            raise InvariantViolation(
                f"node {self.local_id}: {current.describe()} has no pre-vote majority of "
                f"{sorted(self.voters)}")
        retries = current.retries if isinstance(current, es.ProspectiveState) else 1
        new = es.CandidateState(new_epoch, local_id=self.local_id, voters=self.voters,
                                retries=retries,
                                election_deadline_ms=self.random_election_deadline_ms(now_ms))
        self._switch(new)
        return new

    def become_leader(self, *, epoch_start_offset: int, now_ms: int,
                      check_quorum_timeout_ms: int,
                      voter_directories: Mapping[int, Uuid] | None = None) -> es.LeaderState:
        current = self.state
        self._check(Role.LEADER, current.epoch, "won election")
        if not isinstance(current, es.CandidateState) or not current.election.is_granted():
            raise InvariantViolation(
                f"node {self.local_id}: {current.describe()} cannot lead epoch {current.epoch} "
                f"without a granted majority of {sorted(self.voters)}")
        new = es.LeaderState(current.epoch, local_id=self.local_id, voters=self.voters,
                             epoch_start_offset=epoch_start_offset,
                             check_quorum_deadline_ms=now_ms + check_quorum_timeout_ms,
                             voter_directories=voter_directories)
        self._switch(new)
        return new

    def become_follower(self, epoch: Epoch, leader_id: NodeId, now_ms: int, *,
                        leader_endpoint: str = "") -> es.FollowerState:
        if leader_id == self.local_id or (self.static_voters and leader_id not in self.voters):
            raise InvariantViolation(
                f"node {self.local_id}: cannot follow {leader_id} in epoch {epoch}; voters are "
                f"{sorted(self.voters)}")
        current = self.state
        if isinstance(current, es.ProspectiveState) and epoch == current.epoch \
                and current.leader_id_hint not in (None, leader_id):
            raise InvariantViolation(
                f"node {self.local_id}: {current.describe()} followed "
                f"{current.leader_id_hint} in epoch {epoch}; {leader_id} cannot also lead it")
        self._check(Role.FOLLOWER, epoch, f"leader_id={leader_id}")
        new = es.FollowerState(epoch, leader_id=leader_id, leader_endpoint=leader_endpoint,
                               fetch_deadline_ms=now_ms + self._fetch_timeout_ms)
        self._switch(new)
        return new

    def become_observer_unattached(self, now_ms: int) -> es.UnattachedState:
        """An observer lost its leader (fetch timeout): same epoch, ask the voters again."""
        current = self.state
        if self.is_voter:
            raise InvariantViolation(
                f"node {self.local_id}: voter in {current.describe()} cannot use the observer "
                "fetch-timeout transition")
        self._check(Role.UNATTACHED, current.epoch, "observer fetch timeout")
        new = es.UnattachedState(current.epoch, election_deadline_ms=None)
        self._switch(new)
        return new

    def become_resigned(self, preferred_successors: list[int], now_ms: int) -> es.ResignedState:
        current = self.state
        self._check(Role.RESIGNED, current.epoch, f"successors={preferred_successors}")
        new = es.ResignedState(current.epoch, local_id=self.local_id, voters=self.voters,
                               preferred_successors=preferred_successors,
                               election_deadline_ms=self.random_election_deadline_ms(now_ms))
        self._switch(new)
        return new

    def reset_fetch_deadline(self, now_ms: int) -> None:
        current = self.state
        if isinstance(current, es.FollowerState):
            current.fetch_deadline_ms = now_ms + self._fetch_timeout_ms
