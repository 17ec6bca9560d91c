"""QuorumState: the transition table, persist-before-switch, restart rules."""

from __future__ import annotations

import random

import pytest

from kraftlog.errors import InvariantViolation
from kraftlog.ids import Epoch, NodeId
from kraftlog.raft import epoch_state as es
from kraftlog.raft.epoch_state import Role
from kraftlog.raft.quorum_state import QuorumState
from kraftlog.raft.quorum_state_store import ElectionState, MemoryQuorumStateStore

VOTERS = frozenset({1, 2, 3})


def make(local: int = 1, store: MemoryQuorumStateStore | None = None,
         voters: frozenset[int] = VOTERS) -> tuple[QuorumState, MemoryQuorumStateStore]:
    store = store or MemoryQuorumStateStore()
    qs = QuorumState(local_id=NodeId(local), voters=voters, store=store, rng=random.Random(1),
                     election_timeout_ms=1000, fetch_timeout_ms=2000)
    qs.initialize(log_end_epoch=0, now_ms=0)
    return qs, store


def in_role(role: Role) -> QuorumState:
    qs, _ = make()
    qs.become_unattached(Epoch(5), 0)
    if role is Role.VOTED:
        qs.become_voted(Epoch(5), NodeId(2), 0)
    elif role is Role.FOLLOWER:
        qs.become_follower(Epoch(5), NodeId(2), 0)
    elif role in (Role.PROSPECTIVE, Role.CANDIDATE, Role.LEADER, Role.RESIGNED):
        p = qs.become_prospective(0)
        if role is not Role.PROSPECTIVE:
            p.election.record_granted(2)
            c = qs.become_candidate(0)
            if role is not Role.CANDIDATE:
                c.election.record_granted(3)
                qs.become_leader(epoch_start_offset=0, now_ms=0, check_quorum_timeout_ms=3000)
                if role is Role.RESIGNED:
                    qs.become_resigned([2, 3], 0)
    assert qs.role is role
    return qs


def test_fresh_voter_starts_unattached_in_epoch_0_and_persists() -> None:
    qs, store = make()
    assert qs.role is Role.UNATTACHED and qs.epoch == 0
    assert store.read() == ElectionState(epoch=Epoch(0), voters=VOTERS)


def test_full_election_path_persists_each_durable_step() -> None:
    qs = in_role(Role.LEADER)
    assert qs.epoch == 6
    store = qs._store
    assert store.read() == ElectionState(epoch=Epoch(6), leader_id=NodeId(1), voters=VOTERS)


@pytest.mark.parametrize(("role", "expected"), [
    (Role.LEADER, Role.RESIGNED),
    (Role.CANDIDATE, Role.PROSPECTIVE),
    (Role.VOTED, Role.VOTED),
    (Role.FOLLOWER, Role.FOLLOWER),
    (Role.UNATTACHED, Role.UNATTACHED),
])
def test_restart_resumes_from_persisted_state(role: Role, expected: Role) -> None:
    before = in_role(role)
    again, _ = make(store=before._store)  # type: ignore[arg-type]
    assert again.role is expected and again.epoch == before.epoch


def test_restarted_candidate_keeps_its_own_vote() -> None:
    before = in_role(Role.CANDIDATE)
    again, _ = make(store=before._store)  # type: ignore[arg-type]
    state = again.state
    assert isinstance(state, es.ProspectiveState) and state.voted_id == 1
    with pytest.raises(InvariantViolation, match="already voted for 1"):
        again.become_voted(again.epoch, NodeId(2), 0)


def test_log_epoch_ahead_of_file_moves_to_that_epoch() -> None:
    store = MemoryQuorumStateStore()
    store.write(ElectionState(epoch=Epoch(2), voted_id=NodeId(2), voters=VOTERS))
    qs = QuorumState(local_id=NodeId(1), voters=VOTERS, store=store, rng=random.Random(1),
                     election_timeout_ms=1000, fetch_timeout_ms=2000)
    qs.initialize(log_end_epoch=4, now_ms=0)
    assert qs.role is Role.UNATTACHED and qs.epoch == 4
    assert store.read() == ElectionState(epoch=Epoch(4), voters=VOTERS)


def test_observer_with_recorded_vote_refuses_to_start() -> None:
    store = MemoryQuorumStateStore()
    store.write(ElectionState(epoch=Epoch(2), voted_id=NodeId(2), voters=frozenset()))
    qs = QuorumState(local_id=NodeId(9), voters=VOTERS, store=store, rng=random.Random(1),
                     election_timeout_ms=1000, fetch_timeout_ms=2000)
    with pytest.raises(InvariantViolation, match="node 9 is not among voters"):
        qs.initialize(log_end_epoch=0, now_ms=0)


class FailingStore(MemoryQuorumStateStore):
    def write(self, state: ElectionState) -> None:
        raise OSError("disk full")


def test_failed_persist_leaves_the_in_memory_state_unchanged() -> None:
    qs, _ = make()
    qs._store = FailingStore()
    with pytest.raises(OSError):
        qs.become_unattached(Epoch(3), 0)
    assert qs.epoch == 0 and qs.role is Role.UNATTACHED


def test_prospective_persists_nothing() -> None:
    qs = in_role(Role.FOLLOWER)
    writes = qs._store.writes  # type: ignore[attr-defined]
    qs.become_prospective(10)
    assert qs._store.writes == writes  # type: ignore[attr-defined]


# (role, attempt, message fragment): every one must raise InvariantViolation with context.
ILLEGAL = [
    (Role.UNATTACHED, "candidate", "illegal transition Unattached(epoch=5) -> Candidate(epoch=6)"),
    (Role.UNATTACHED, "leader", "illegal transition Unattached(epoch=5) -> Leader"),
    (Role.UNATTACHED, "resigned", "-> Resigned(epoch=5)"),
    (Role.UNATTACHED, "unattached_same", "from epoch 5 to 5 is same"),
    (Role.UNATTACHED, "unattached_lower", "from epoch 5 to 4 is lower"),
    (Role.VOTED, "voted_other", "Voted(epoch=5, voted_id=2) -> Voted(epoch=5)"),
    (Role.VOTED, "candidate", "Voted(epoch=5, voted_id=2) -> Candidate"),
    (Role.PROSPECTIVE, "candidate", "has no pre-vote majority"),
    (Role.CANDIDATE, "leader", "without a granted majority"),
    (Role.CANDIDATE, "voted_other", "-> Voted"),
    (Role.LEADER, "follower_same", "Leader(epoch=6, epoch_start_offset=0, high_watermark=None) "
                                   "-> Follower(epoch=6)"),
    (Role.LEADER, "prospective", "-> Prospective"),
    (Role.FOLLOWER, "follower_same", "Follower(epoch=5, leader=2) -> Follower(epoch=5)"),
    (Role.FOLLOWER, "voted_other", "-> Voted(epoch=5)"),
    (Role.RESIGNED, "prospective", "Resigned(epoch=6, successors=[2, 3]) -> Prospective"),
    (Role.RESIGNED, "follower_same", "-> Follower(epoch=6)"),
]


def attempt(qs: QuorumState, what: str) -> None:
    epoch = qs.epoch
    if what == "candidate":
        qs.become_candidate(0)
    elif what == "leader":
        qs.become_leader(epoch_start_offset=0, now_ms=0, check_quorum_timeout_ms=1)
    elif what == "resigned":
        qs.become_resigned([], 0)
    elif what == "unattached_same":
        qs.become_unattached(epoch, 0)
    elif what == "unattached_lower":
        qs.become_unattached(Epoch(epoch - 1), 0)
    elif what == "voted_other":
        qs.become_voted(epoch, NodeId(3), 0)
    elif what == "follower_same":
        qs.become_follower(epoch, NodeId(3), 0)
    elif what == "prospective":
        qs.become_prospective(0)
    else:
        raise AssertionError(what)


@pytest.mark.parametrize(("role", "what", "fragment"), ILLEGAL)
def test_illegal_transition_raises_with_full_context(role: Role, what: str, fragment: str) -> None:
    qs = in_role(role)
    before = qs.state
    with pytest.raises(InvariantViolation) as info:
        attempt(qs, what)
    assert fragment in str(info.value)
    assert "node 1" in str(info.value)
    assert qs.state is before


def test_cannot_vote_for_self_or_follow_a_non_voter() -> None:
    qs, _ = make()
    with pytest.raises(InvariantViolation, match="cannot grant a vote to 1"):
        qs.become_voted(Epoch(0), NodeId(1), 0)
    with pytest.raises(InvariantViolation, match="cannot follow 7"):
        qs.become_follower(Epoch(1), NodeId(7), 0)


def test_lost_prevote_may_return_to_its_leader_but_not_another() -> None:
    qs = in_role(Role.FOLLOWER)
    qs.become_prospective(0)
    with pytest.raises(InvariantViolation, match="followed 2 in epoch 5; 3 cannot also lead it"):
        qs.become_follower(Epoch(5), NodeId(3), 0)
    qs.become_follower(Epoch(5), NodeId(2), 0)
    assert qs.role is Role.FOLLOWER


def test_observer_only_moves_between_unattached_and_follower() -> None:
    qs, _ = make(local=9)
    assert not qs.is_voter
    state = qs.state
    assert isinstance(state, es.UnattachedState) and state.election_deadline_ms is None
    with pytest.raises(InvariantViolation, match=r"node 9 \(observer\)"):
        qs.become_prospective(0)
    qs.become_follower(Epoch(3), NodeId(2), 0)
    qs.become_observer_unattached(10)
    assert qs.role is Role.UNATTACHED and qs.epoch == 3


def test_unattached_keeps_pending_election_timer_on_higher_epoch() -> None:
    qs, _ = make()
    state = qs.state
    assert isinstance(state, es.UnattachedState)
    deadline = state.election_deadline_ms
    new = qs.become_unattached(Epoch(4), 500)
    assert new.election_deadline_ms == deadline
