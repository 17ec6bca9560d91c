"""The raft core refuses requests that no correct peer sends, and leaves its state as it was.

Found by raw gRPC calls against a dev cluster: a Vote naming the receiver as
candidate crashed it with an InvariantViolation; a Vote in a real voter's name made the
active controller step down. Every test here drives :class:`RaftClient` by hand (no
simulator) and checks the answer's error code and that the role, the epoch and the
quorum-state file did not change. The vote backoff test counts the Vote sends a candidate
makes to a voter that is down, on virtual time.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging

import pytest

from kraftlog.raft import consensus
from kraftlog.raft import epoch_state as es
from kraftlog.raft import messages as m
from kraftlog.raft.epoch_state import Role
from kraftlog.raft.error_codes import ErrorCode
from tests.raft.harness import CLUSTER, CONFIG, Node, elect, fetch, vote


@dataclasses.dataclass(frozen=True)
class Snapshot:
    role: Role
    epoch: int
    leader: int
    writes: int
    stored: object


def snapshot(node: Node) -> Snapshot:
    return Snapshot(role=node.client.role, epoch=node.client.epoch,
                    leader=node.client.leader_hint(), writes=node.store.writes,
                    stored=node.store.read())


def follower_of(leader: int, node_id: int = 1, epoch: int = 1) -> Node:
    node = Node(node_id)
    node.client.handle_request(leader, m.BeginQuorumEpochRequest(
        cluster_id=CLUSTER, leader_id=leader, leader_epoch=epoch, voter_id=node_id), 0)
    assert node.client.role is Role.FOLLOWER
    return node


def begin(leader: int, epoch: int, voter: int = 1) -> m.BeginQuorumEpochRequest:
    return m.BeginQuorumEpochRequest(cluster_id=CLUSTER, leader_id=leader, leader_epoch=epoch,
                                     voter_id=voter)


def end(leader: int, epoch: int, successors: tuple[int, ...] = ()) -> m.EndQuorumEpochRequest:
    return m.EndQuorumEpochRequest(cluster_id=CLUSTER, leader_id=leader, leader_epoch=epoch,
                                   preferred_successors=successors)


# -- Vote ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("pre_vote", [False, True])
def test_a_vote_naming_the_receiver_as_candidate_is_refused(pre_vote: bool) -> None:
    node = Node(2)  # unattached: the state in which the self-vote used to crash the node
    before = snapshot(node)
    response = node.client.handle_request(2, vote(2, 6, voter=2, pre_vote=pre_vote), 0)
    assert isinstance(response, m.VoteResponse)
    assert (response.error_code, response.vote_granted) == (ErrorCode.INVALID_REQUEST, False)
    assert snapshot(node) == before


@pytest.mark.parametrize(("request_", "code"), [
    (vote(9, 3), ErrorCode.INCONSISTENT_VOTER_SET),                   # candidate not a voter
    (vote(2, 3, voter=3), ErrorCode.INCONSISTENT_VOTER_SET),          # meant for another voter
    (vote(2, 3, last_epoch=3), ErrorCode.INVALID_REQUEST),            # log holds the new epoch
    (vote(2, 3, last_epoch=2**31 - 1), ErrorCode.INVALID_REQUEST),
    (vote(2, -1), ErrorCode.INVALID_REQUEST),
    (vote(2, 3, last_offset=-1), ErrorCode.INVALID_REQUEST),
    (dataclasses.replace(vote(2, 3), cluster_id=""), ErrorCode.INCONSISTENT_CLUSTER_ID),
])
def test_bad_votes_change_nothing(request_: m.VoteRequest, code: ErrorCode) -> None:
    node = Node(1)
    before = snapshot(node)
    response = node.client.handle_request(request_.candidate_id, request_, 0)
    assert isinstance(response, m.VoteResponse)
    assert (response.error_code, response.vote_granted) == (code, False)
    assert snapshot(node) == before


def test_a_leader_ignores_a_vote_for_a_higher_epoch() -> None:
    node = Node(1)
    elect(node)
    before = snapshot(node)
    response = node.client.handle_request(2, vote(2, 7, last_epoch=1, last_offset=10**9), 1000)
    assert isinstance(response, m.VoteResponse)
    assert (response.error_code, response.vote_granted) == (ErrorCode.NONE, False)
    assert (response.leader_id, response.leader_epoch) == (1, 1)
    assert snapshot(node) == before and node.client.role is Role.LEADER


def test_a_follower_of_a_live_leader_ignores_a_vote_for_a_higher_epoch() -> None:
    node = follower_of(3)
    before = snapshot(node)
    response = node.client.handle_request(2, vote(2, 5, last_epoch=1, last_offset=10**9), 0)
    assert isinstance(response, m.VoteResponse) and not response.vote_granted
    assert snapshot(node) == before


def test_a_follower_whose_leader_resigned_still_votes() -> None:
    node = follower_of(3)
    node.client.handle_request(3, end(3, 1, (2, 1)), 10)
    response = node.client.handle_request(2, vote(2, 2, last_epoch=1, last_offset=5), 20)
    assert isinstance(response, m.VoteResponse) and response.vote_granted
    assert (node.client.role, node.client.epoch) == (Role.VOTED, 2)


# -- BeginQuorumEpoch / EndQuorumEpoch ------------------------------------------------------------

@pytest.mark.parametrize(("request_", "code"), [
    (begin(1, 4), ErrorCode.INCONSISTENT_VOTER_SET),       # names the receiver as leader
    (begin(9, 4), ErrorCode.INCONSISTENT_VOTER_SET),       # leader not a voter
    (begin(2, 4, voter=3), ErrorCode.INCONSISTENT_VOTER_SET),
    (end(1, 4), ErrorCode.INCONSISTENT_VOTER_SET),
    (end(9, 4), ErrorCode.INCONSISTENT_VOTER_SET),
    (end(2, 4, (3, 9)), ErrorCode.INCONSISTENT_VOTER_SET),  # a successor that is no voter
    (dataclasses.replace(begin(2, 4), cluster_id="other"), ErrorCode.INCONSISTENT_CLUSTER_ID),
])
def test_bad_begin_and_end_quorum_epoch_change_nothing(
        request_: m.BeginQuorumEpochRequest | m.EndQuorumEpochRequest, code: ErrorCode) -> None:
    node = follower_of(3)
    before = snapshot(node)
    response = node.client.handle_request(request_.leader_id, request_, 0)
    assert isinstance(response, m.BeginQuorumEpochResponse | m.EndQuorumEpochResponse)
    assert response.error_code is code
    assert snapshot(node) == before


def test_a_second_leader_of_the_same_epoch_is_refused_not_fatal() -> None:
    leader = Node(1)
    elect(leader)
    before = snapshot(leader)
    response = leader.client.handle_request(2, begin(2, 1), 1000)
    assert isinstance(response, m.BeginQuorumEpochResponse)
    assert response.error_code is ErrorCode.INVALID_REQUEST
    assert snapshot(leader) == before
    follower = follower_of(3)
    before = snapshot(follower)
    response = follower.client.handle_request(2, begin(2, 1), 0)
    assert isinstance(response, m.BeginQuorumEpochResponse)
    assert response.error_code is ErrorCode.INVALID_REQUEST
    assert snapshot(follower) == before


def test_a_flood_of_refused_requests_logs_one_warning_per_interval(
        caplog: pytest.LogCaptureFixture) -> None:
    follower = follower_of(3)
    caplog.set_level(logging.WARNING, logger="kraftlog.raft.consensus")
    for now_ms in range(0, 50):
        follower.client.handle_request(2, begin(2, 1), now_ms)
    follower.client.handle_request(2, begin(2, 1), consensus.REFUSAL_LOG_INTERVAL_MS)
    lines = [r.getMessage() for r in caplog.records if "claims to lead" in r.getMessage()]
    assert len(lines) == 2 and lines[1].endswith("(49 more since the last)"), lines


def test_a_response_naming_a_second_leader_is_ignored() -> None:
    node = follower_of(3)
    node.client.poll(CONFIG.fetch_timeout_ms + 1)  # fetch timeout: prospective, hint 3
    state = node.client.quorum.state
    assert isinstance(state, es.ProspectiveState) and state.leader_id_hint == 3
    [(dest, request)] = node.sink.take(m.VoteRequest)[:1]
    before = snapshot(node)
    node.client.handle_response(dest, request, m.VoteResponse(
        error_code=ErrorCode.NONE, leader_epoch=1, leader_id=2, vote_granted=False),
        CONFIG.fetch_timeout_ms + 2)
    assert snapshot(node) == before


# -- Fetch / FetchSnapshot --------------------------------------------------------------------------

def test_a_fetch_in_the_leaders_own_name_does_not_move_the_high_watermark() -> None:
    node = Node(1)
    elect(node)
    node.client.propose([b"a", b"b"], 1000)
    node.client.poll(1000 + CONFIG.append_linger_ms)
    assert node.log.end_offset == 3 and node.log.high_watermark == 0
    state = node.client.quorum.state
    assert isinstance(state, es.LeaderState)
    for claimed in (1, 3):
        response = node.client.handle_request(1, fetch(1, 1, claimed, 1), 1010)
        assert isinstance(response, m.FetchResponse)
        assert response.error_code is ErrorCode.INVALID_REQUEST
    assert node.log.high_watermark == 0 and 1 not in state.fetched_voters
    snapshot_request = m.FetchSnapshotRequest(
        cluster_id=CLUSTER, replica_id=1, current_leader_epoch=1,
        snapshot_id=m.OffsetAndEpoch(offset=1, epoch=1), position=0, max_bytes=10)
    answer = node.client.handle_request(1, snapshot_request, 1010)
    assert isinstance(answer, m.FetchSnapshotResponse)
    assert answer.error_code is ErrorCode.INVALID_REQUEST


# -- backoff to an unreachable voter -----------------------------------------------------------------

def test_vote_retries_to_a_dead_voter_back_off_exponentially() -> None:
    """Voter 3 is down (every send fails at once); voter 2 never answers the vote. Within
    one election timeout the candidate resends to 3 a handful of times, not every
    retry.backoff.ms (50 times here before the fix)."""
    node = Node(1)
    now = 1000
    node.client.poll(now)
    for dest, req in node.sink.take(m.VoteRequest):  # the pre-vote: 2 grants, 3 is down
        if dest == 2:
            node.client.handle_response(2, req, m.VoteResponse(
                error_code=ErrorCode.NONE, leader_epoch=0, leader_id=-1, vote_granted=True), now)
        else:
            node.client.handle_send_failure(dest, req, now)
    node.client.poll(now)
    state = node.client.quorum.state
    assert isinstance(state, es.CandidateState)
    deadline = state.election_deadline_ms
    assert deadline - now >= CONFIG.election_timeout_ms
    sends_to_dead = []
    while now < deadline:
        for dest, req in node.sink.take(m.VoteRequest):
            if dest == 3:
                sends_to_dead.append(now)
                node.client.handle_send_failure(3, req, now)
        now += 1
        node.client.poll(now)
    gaps = [b - a for a, b in itertools.pairwise(sends_to_dead)]
    cap = CONFIG.election_timeout_ms // 4
    assert gaps == sorted(gaps) and max(gaps) <= cap + 1, gaps
    # retry 10 ms, cap 25 ms, election timeout 100-200 ms: a few at 10-20 ms, then every 25.
    assert 3 <= len(sends_to_dead) <= 2 + (deadline - 1000) // cap, sends_to_dead
    # An answer resets the pacing: the next failure waits the base backoff again.
    node.client.handle_response(3, m.VoteRequest(
        cluster_id=CLUSTER, candidate_epoch=1, candidate_id=1, voter_id=3, last_offset_epoch=0,
        last_offset=0), m.VoteResponse(error_code=ErrorCode.NONE, leader_epoch=1, leader_id=-1,
                                       vote_granted=False), now)
    assert node.client.send_failure_backoff_ms(1) == CONFIG.retry_backoff_ms


def test_send_failure_backoff_doubles_up_to_a_quarter_of_the_election_timeout() -> None:
    node = Node(1)
    steps = [node.client.send_failure_backoff_ms(n) for n in range(1, 8)]
    assert steps == [10, 20, 25, 25, 25, 25, 25]
    big = consensus.RaftClient.send_failure_backoff_ms
    node.client.config = dataclasses.replace(CONFIG, retry_backoff_ms=20,
                                             election_timeout_ms=1000)
    assert [big(node.client, n) for n in range(1, 7)] == [20, 40, 80, 160, 250, 250]
