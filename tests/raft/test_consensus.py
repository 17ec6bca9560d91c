"""Golden, hand-driven message exchanges for the raft core (after etcd-io/raft's tests)."""

from __future__ import annotations

import pytest

from kraftlog.errors import InvariantViolation, NotLeaderError
from kraftlog.ids import Epoch, NodeId
from kraftlog.raft import consensus
from kraftlog.raft import control_records as cr
from kraftlog.raft import epoch_state as es
from kraftlog.raft import messages as m
from kraftlog.raft.epoch_state import Role
from kraftlog.raft.error_codes import ErrorCode
from kraftlog.raft.memory_log import MemoryRaftLog
from kraftlog.raft.quorum_state_store import ElectionState, MemoryQuorumStateStore
from kraftlog.storage import record_batch as rb
from tests.raft.harness import CLUSTER, CONFIG, Node, batch, elect, fetch, leader_of, run, vote

K = consensus.RaftEventKind


# -- Vote --------------------------------------------------------------------------------------

def test_vote_granted_to_up_to_date_candidate_is_persisted_before_the_reply() -> None:
    node = Node(1)
    response = node.client.handle_request(2, vote(2, 1), 0)
    assert response == m.VoteResponse(error_code=ErrorCode.NONE, leader_epoch=1, leader_id=-1,
                                      vote_granted=True)
    assert node.store.read() == ElectionState(epoch=Epoch(1), voted_id=NodeId(2),
                                              voters=frozenset({1, 2, 3}))


def test_vote_rejected_when_candidate_log_is_behind_but_epoch_is_adopted() -> None:
    node = Node(1)
    node.log.append_as_leader(batch(b"a", b"b"), 1)
    response = node.client.handle_request(2, vote(2, 2, last_epoch=1, last_offset=1), 0)
    assert isinstance(response, m.VoteResponse) and not response.vote_granted
    assert node.client.role is Role.UNATTACHED and node.client.epoch == 2
    later_epoch_longer = node.client.handle_request(3, vote(3, 2, last_epoch=1, last_offset=2), 0)
    assert isinstance(later_epoch_longer, m.VoteResponse) and later_epoch_longer.vote_granted


def test_one_vote_per_epoch_but_duplicates_are_granted_again() -> None:
    node = Node(1)
    assert node.client.handle_request(2, vote(2, 1), 0).vote_granted  # type: ignore[union-attr]
    assert not node.client.handle_request(3, vote(3, 1), 0).vote_granted  # type: ignore[union-attr]
    assert node.client.handle_request(2, vote(2, 1), 0).vote_granted  # type: ignore[union-attr]


def test_stale_epoch_vote_is_fenced() -> None:
    node = Node(1)
    node.client.handle_request(2, vote(2, 4), 0)
    response = node.client.handle_request(3, vote(3, 3), 0)
    assert isinstance(response, m.VoteResponse)
    assert (response.error_code, response.vote_granted, response.leader_epoch) == (
        ErrorCode.FENCED_LEADER_EPOCH, False, 4)


@pytest.mark.parametrize(("request_", "code"), [
    (m.VoteRequest(cluster_id="other", candidate_epoch=1, candidate_id=2, voter_id=1,
                   last_offset_epoch=0, last_offset=0), ErrorCode.INCONSISTENT_CLUSTER_ID),
    (vote(9, 1), ErrorCode.INCONSISTENT_VOTER_SET),
    (vote(2, 1, voter=3), ErrorCode.INCONSISTENT_VOTER_SET),
    (vote(2, 1, last_offset=-5), ErrorCode.INVALID_REQUEST),
])
def test_bad_vote_requests_get_specific_errors(request_: m.VoteRequest, code: ErrorCode) -> None:
    node = Node(1)
    response = node.client.handle_request(2, request_, 0)
    assert isinstance(response, m.VoteResponse) and response.error_code is code
    assert node.client.epoch == 0


def test_pre_vote_never_changes_state() -> None:
    node = Node(1)
    writes = node.store.writes
    response = node.client.handle_request(2, vote(2, 5, pre_vote=True), 0)
    assert isinstance(response, m.VoteResponse) and response.vote_granted
    assert node.client.epoch == 0 and node.store.writes == writes
    # A follower of a live leader refuses pre-votes (KIP-996).
    node.client.handle_request(3, m.BeginQuorumEpochRequest(
        cluster_id=CLUSTER, leader_id=3, leader_epoch=1, voter_id=1), 0)
    refused = node.client.handle_request(2, vote(2, 2, pre_vote=True), 0)
    assert isinstance(refused, m.VoteResponse) and not refused.vote_granted
    assert refused.leader_id == 3 and node.client.role is Role.FOLLOWER


# -- elections ---------------------------------------------------------------------------------

def test_election_prevote_then_vote_then_leader_with_leader_change_record() -> None:
    node = Node(1)
    elect(node)
    assert node.client.epoch == 1
    assert node.store.read() == ElectionState(epoch=Epoch(1), leader_id=NodeId(1),
                                              voters=frozenset({1, 2, 3}))
    [control] = rb.decode_batches(node.log.read(0, 1 << 20))
    assert control.is_control and control.partition_leader_epoch == 1
    assert cr.decode_key(control.records[0].key) is cr.ControlRecordType.LEADER_CHANGE
    change = cr.decode_leader_change(control.records[0].value)
    assert change == cr.LeaderChangeMessage(leader_id=1, voters=(1, 2, 3), granting_voters=(1, 2))
    begins = node.sink.take(m.BeginQuorumEpochRequest)
    assert sorted(d for d, _ in begins) == [2, 3]
    kinds = node.kinds()
    assert kinds.index(K.PRE_VOTE_STARTED) < kinds.index(K.ELECTION_STARTED) \
        < kinds.index(K.ELECTION_WON)


def test_majority_rejection_backs_off_without_waiting_for_the_timeout() -> None:
    node = Node(1)
    node.client.poll(1000)
    for dest, req in node.sink.take(m.VoteRequest):
        node.client.handle_response(dest, req, m.VoteResponse(
            error_code=ErrorCode.NONE, leader_epoch=0, leader_id=-1, vote_granted=False), 1001)
    node.client.poll(1001)
    assert K.ELECTION_BACKOFF in node.kinds()
    state = node.client.quorum.state
    assert state.role is Role.PROSPECTIVE
    assert state.backoff_deadline_ms is not None  # type: ignore[attr-defined]
    assert state.backoff_deadline_ms <= 1001 + CONFIG.election_backoff_max_ms  # type: ignore[attr-defined]


def test_binary_exponential_backoff_is_capped_and_jittered() -> None:
    import random
    rng = random.Random(3)
    samples = [consensus.binary_exponential_backoff_ms(r, rng, 1000) for r in (1, 2, 3, 8)
               for _ in range(20)]
    assert all(0 <= s <= 1000 for s in samples)
    assert len(set(samples)) > 3
    with pytest.raises(InvariantViolation):
        consensus.binary_exponential_backoff_ms(0, rng, 1000)


def test_single_voter_elects_itself() -> None:
    node = Node(1, voters=(1,))
    node.client.poll(1000)
    assert node.client.role is Role.LEADER and node.log.high_watermark == 1


# -- leader: HW, linger, purgatory, check-quorum, resign ------------------------------------

def test_high_watermark_waits_for_an_entry_of_the_current_epoch() -> None:
    log = MemoryRaftLog()
    log.append_as_leader(batch(b"a", b"b", b"c"), 1)
    log.flush()
    store = MemoryQuorumStateStore()
    store.write(ElectionState(epoch=Epoch(2), voters=frozenset({1, 2, 3})))
    node = Node(1, log=log, store=store)
    elect(node)
    assert node.client.epoch == 3
    # Follower 2 holds the old-epoch entries only: a majority has offset 3, not the
    # LeaderChange at 3, so nothing is committed yet.
    node.client.handle_request(2, fetch(2, 3, 3, 1), 1000)
    assert node.log.high_watermark == 0
    node.client.handle_request(2, fetch(2, 3, 4, 3), 1000)
    assert node.log.high_watermark == 4
    node.client.poll(1000)
    assert node.listener.values() == [b"a", b"b", b"c"]
    assert node.listener.leaders[-1] == (1, 3)


def test_proposals_linger_into_one_batch_then_commit() -> None:
    node = Node(1)
    elect(node)
    assert node.client.propose([b"x"], 1000) == 1
    assert node.client.propose([b"y", b"z"], 1002) == 3
    node.client.poll(1004)
    assert node.log.end_offset == 1  # still lingering
    node.client.poll(1005)
    assert node.log.end_offset == 4 and node.log.flushed_offset == 4
    assert len(rb.decode_batches(node.log.read(1, 1 << 20))) == 1
    node.client.handle_request(3, fetch(3, 1, 4, 1), 1006)
    node.client.poll(1006)
    assert node.log.high_watermark == 4 and node.listener.values() == [b"x", b"y", b"z"]


def test_propose_on_a_follower_raises_with_leader_hint() -> None:
    node = Node(1)
    node.client.handle_request(3, m.BeginQuorumEpochRequest(
        cluster_id=CLUSTER, leader_id=3, leader_epoch=2, voter_id=1), 0)
    with pytest.raises(NotLeaderError) as info:
        node.client.propose([b"x"], 0)
    assert info.value.leader_id == 3 and info.value.leader_endpoint == "h3:9093"


def test_fetch_purgatory_completes_on_append_and_on_deadline() -> None:
    node = Node(1)
    elect(node)
    node.client.handle_request(2, fetch(2, 1, 1, 1), 1000)
    node.client.poll(1000)
    assert node.client.handle_request(2, fetch(2, 1, 1, 1, wait=50), 1000, 7) is m.PENDING
    assert node.client.handle_request(3, fetch(3, 1, 1, 1, wait=50), 1000, 8) is m.PENDING
    node.client.propose([b"new"], 1001)
    wake = node.client.poll(1001)
    assert wake <= 1006 and not node.sink.completed
    node.client.poll(1006)
    done = node.sink.completed[7]
    assert isinstance(done, m.FetchResponse) and done.error_code is ErrorCode.NONE
    assert [r.value for b in rb.decode_batches(done.records) for r in b.records] == [b"new"]
    parked = node.client.handle_request(2, fetch(2, 1, 2, 1, wait=50), 1010, 9)
    assert parked is m.PENDING
    node.client.poll(1059)
    assert 9 not in node.sink.completed
    node.client.poll(1060)
    empty = node.sink.completed[9]
    assert isinstance(empty, m.FetchResponse) and empty.records == b""


def test_check_quorum_resigns_and_sends_end_quorum_epoch() -> None:
    node = Node(1)
    elect(node)
    node.sink.take()
    node.client.poll(1000 + CONFIG.check_quorum_timeout_ms - 1)
    assert node.client.role is Role.LEADER
    node.client.poll(1000 + CONFIG.check_quorum_timeout_ms + 1)
    assert node.client.role is Role.RESIGNED and K.RESIGNED in node.kinds()
    ends = node.sink.take(m.EndQuorumEpochRequest)
    assert sorted(d for d, _ in ends) == [2, 3]


def test_fetching_majority_keeps_the_leader() -> None:
    node = Node(1)
    elect(node)
    for t in range(1000, 1000 + 3 * CONFIG.check_quorum_timeout_ms, 100):
        node.client.handle_request(2, fetch(2, 1, 1, 1), t)
        node.client.poll(t)
    assert node.client.role is Role.LEADER


def test_graceful_resign_names_successors_by_fetch_offset() -> None:
    node = Node(1)
    elect(node)
    node.client.propose([b"a"], 1000)
    node.client.poll(1010)
    node.client.handle_request(2, fetch(2, 1, 1, 1), 1010)
    node.client.handle_request(3, fetch(3, 1, 2, 1), 1010)
    node.sink.take()
    assert node.client.resign(1011)
    node.client.poll(1011)
    [(_, end), _] = node.sink.take(m.EndQuorumEpochRequest)
    assert isinstance(end, m.EndQuorumEpochRequest) and end.preferred_successors == (3, 2)
    assert node.listener.leaders[-1] == (-1, 1)


def test_first_successor_skips_the_election_timeout() -> None:
    first, second = Node(2), Node(3)
    for follower in (first, second):
        follower.client.handle_request(1, m.BeginQuorumEpochRequest(
            cluster_id=CLUSTER, leader_id=1, leader_epoch=1, voter_id=follower.node_id), 0)
        follower.client.handle_request(1, m.EndQuorumEpochRequest(
            cluster_id=CLUSTER, leader_id=1, leader_epoch=1, preferred_successors=(2, 3)), 10)
        follower.client.poll(10)
    assert first.client.role is Role.PROSPECTIVE
    assert second.client.role is Role.FOLLOWER
    second.client.poll(10 + 100)
    assert second.client.role is Role.PROSPECTIVE


# -- Fetch validation, divergence, truncation ------------------------------------------------

@pytest.mark.parametrize(("request_", "code"), [
    (fetch(2, 1, -1, 0), ErrorCode.INVALID_REQUEST),
    (fetch(2, 1, 0, 0, max_bytes=0), ErrorCode.INVALID_REQUEST),
    (fetch(2, 0, 1, 0), ErrorCode.FENCED_LEADER_EPOCH),
    (fetch(2, 1, 1, 2), ErrorCode.INVALID_REQUEST),  # a log epoch above the fetcher's epoch
    (fetch(1, 1, 0, 0), ErrorCode.INVALID_REQUEST),  # in the leader's own name
    (fetch(2, 5, 1, 1), ErrorCode.UNKNOWN_LEADER_EPOCH),
    (m.FetchRequest(cluster_id="x", replica_id=2, current_leader_epoch=1, fetch_offset=0,
                    last_fetched_epoch=0, max_wait_ms=0, max_bytes=10),
     ErrorCode.INCONSISTENT_CLUSTER_ID),
])
def test_fetch_validation_errors(request_: m.FetchRequest, code: ErrorCode) -> None:
    node = Node(1)
    elect(node)
    response = node.client.handle_request(2, request_, 1000)
    assert isinstance(response, m.FetchResponse) and response.error_code is code
    assert (response.leader_id, response.leader_epoch) == (1, 1)


def test_fetch_to_a_follower_names_the_leader() -> None:
    node = Node(2)
    node.client.handle_request(1, m.BeginQuorumEpochRequest(
        cluster_id=CLUSTER, leader_id=1, leader_epoch=4, voter_id=2), 0)
    response = node.client.handle_request(3, fetch(3, 4, 0, 0), 0)
    assert isinstance(response, m.FetchResponse)
    assert (response.error_code, response.leader_id) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, 1)


def test_leader_answers_a_diverging_epoch() -> None:
    log = MemoryRaftLog()
    log.append_as_leader(batch(b"a", b"b"), 1)
    log.flush()
    store = MemoryQuorumStateStore()
    store.write(ElectionState(epoch=Epoch(2), voters=frozenset({1, 2, 3})))
    node = Node(1, log=log, store=store)
    elect(node)  # epoch 3, LeaderChange at offset 2
    response = node.client.handle_request(2, fetch(2, 3, 5, 2), 1000)
    assert isinstance(response, m.FetchResponse)
    assert response.diverging_epoch == m.OffsetAndEpoch(offset=2, epoch=1)
    assert response.records == b""


def test_follower_truncates_to_the_diverging_point_then_catches_up() -> None:
    nodes = {1: Node(1, seed=1), 2: Node(2, seed=2), 3: Node(3, seed=3)}
    # Node 3 has an uncommitted suffix of epoch 1 that nobody else has.
    nodes[3].log.append_as_leader(batch(b"stale1", b"stale2"), 1)
    nodes[3].log.flush()
    for n in (1, 2):
        nodes[n].store.write(ElectionState(epoch=Epoch(1), voters=frozenset({1, 2, 3})))
    nodes[3].store.write(ElectionState(epoch=Epoch(1), voters=frozenset({1, 2, 3})))
    nodes = {k: Node(k, log=v.log, store=v.store, seed=k) for k, v in nodes.items()}
    # Node 1 or 2 wins epoch 2 without node 3 (partitioned away).
    pair = {1: nodes[1], 2: nodes[2]}
    run(pair, 0, 400)
    leader = leader_of(pair)
    leader.client.propose([b"fresh"], 400)
    run(pair, 400, 420)
    run(nodes, 420, 500)
    assert K.TRUNCATED in nodes[3].kinds()
    values = [r.value for b in rb.decode_batches(nodes[3].log.read(0, 1 << 20))
              if not b.is_control for r in b.records]
    assert values == [b"fresh"]


def test_follower_refuses_to_truncate_below_its_high_watermark() -> None:
    node = Node(2)
    node.client.handle_request(1, m.BeginQuorumEpochRequest(
        cluster_id=CLUSTER, leader_id=1, leader_epoch=1, voter_id=2), 0)
    node.client.poll(0)
    [(_, request)] = node.sink.take(m.FetchRequest)
    assert isinstance(request, m.FetchRequest)
    records = rb.build_batch([rb.RecordInput(value=b"a"), rb.RecordInput(value=b"b")],
                             partition_leader_epoch=1)
    node.client.handle_response(1, request, m.FetchResponse(
        error_code=ErrorCode.NONE, leader_epoch=1, leader_id=1, high_watermark=2,
        log_start_offset=0, records=records), 1)
    assert node.log.high_watermark == 2 and node.log.flushed_offset == 2
    node.client.poll(1)
    [(_, again)] = node.sink.take(m.FetchRequest)
    # A leader's answer is input: the refusal keeps the log and backs off, it never crashes.
    node.client.handle_response(1, again, m.FetchResponse(
        error_code=ErrorCode.NONE, leader_epoch=1, leader_id=1, high_watermark=2,
        diverging_epoch=m.OffsetAndEpoch(offset=1, epoch=1)), 2)
    assert (node.log.end_offset, node.log.high_watermark) == (2, 2)
    assert K.TRUNCATED not in node.kinds() and node.client.role is Role.FOLLOWER
    node.client.poll(2)
    assert node.sink.take(m.FetchRequest) == []  # backing off


def test_stale_duplicate_fetch_response_is_ignored() -> None:
    node = Node(2)
    node.client.handle_request(1, m.BeginQuorumEpochRequest(
        cluster_id=CLUSTER, leader_id=1, leader_epoch=1, voter_id=2), 0)
    node.client.poll(0)
    [(_, request)] = node.sink.take(m.FetchRequest)
    response = m.FetchResponse(error_code=ErrorCode.NONE, leader_epoch=1, leader_id=1,
                               high_watermark=0,
                               records=rb.build_batch([rb.RecordInput(value=b"a")],
                                                      partition_leader_epoch=1))
    node.client.handle_response(1, request, response, 1)
    node.client.handle_response(1, request, response, 2)
    assert node.log.end_offset == 1


# -- observers and describe ------------------------------------------------------------------

def test_observer_finds_the_leader_replicates_and_never_votes() -> None:
    nodes = {n: Node(n, seed=n) for n in (1, 2, 3, 100)}
    run(nodes, 0, 600)
    leader = leader_of(nodes)
    leader.client.propose([b"seen-by-observer"], 600)
    run(nodes, 600, 620)
    observer = nodes[100]
    assert observer.client.role is Role.FOLLOWER
    assert observer.listener.values() == [b"seen-by-observer"]
    # Its fetched entries are not fsynced (they never count towards the HW); a voter's are.
    assert observer.log.flushed_offset < observer.log.end_offset == leader.log.end_offset
    follower = next(n for i, n in nodes.items() if i in (1, 2, 3) and n is not leader)
    assert follower.log.flushed_offset == follower.log.end_offset == leader.log.end_offset
    response = observer.client.handle_request(2, vote(2, 9, 5, 100, voter=100), 620)
    assert isinstance(response, m.VoteResponse)
    assert response.error_code is ErrorCode.INCONSISTENT_VOTER_SET
    described = leader.client.handle_request(0, m.DescribeQuorumRequest(), 620)
    assert isinstance(described, m.DescribeQuorumResponse)
    assert [v.replica_id for v in described.current_voters] == [1, 2, 3]
    assert [o.replica_id for o in described.observers] == [100]
    assert described.observers[0].log_end_offset == leader.log.end_offset
    observed = described.observers[0]
    assert 600 <= observed.last_caught_up_timestamp == observed.last_fetch_timestamp <= 620
    assert described.high_watermark == leader.log.high_watermark


def test_leader_forgets_observers_that_stopped_fetching() -> None:
    """Kafka's OBSERVER_SESSION_TIMEOUT_MS: Fetches naming many replica ids do not grow the
    leader's observer map for ever; describe and the leader's poll both drop the idle ones."""
    node = Node(1, voters=(1,))
    node.client.poll(1000)
    timeout_ms = es.OBSERVER_SESSION_TIMEOUT_MS
    for observer in range(100, 150):
        node.client.handle_request(observer, fetch(observer, 1, 0, 0), 1000)
    node.client.handle_request(100, fetch(100, 1, 0, 0), 1000 + timeout_ms - 1)
    state = node.client.quorum.state
    assert isinstance(state, es.LeaderState) and len(state.observers) == 50
    described = node.client.handle_request(0, m.DescribeQuorumRequest(), 1000 + timeout_ms)
    assert isinstance(described, m.DescribeQuorumResponse)
    assert [o.replica_id for o in described.observers] == [100]
    # Without a describe, the leader's poll expires them too (at most every 30 s).
    for observer in range(200, 210):
        node.client.handle_request(observer, fetch(observer, 1, 0, 0), 2000 + timeout_ms)
    node.client.poll(2000 + 2 * timeout_ms)
    assert sorted(state.observers) == []


def test_describe_quorum_on_non_leader() -> None:
    node = Node(2)
    response = node.client.handle_request(0, m.DescribeQuorumRequest(), 0)
    assert isinstance(response, m.DescribeQuorumResponse)
    assert response.error_code is ErrorCode.NOT_LEADER_OR_FOLLOWER


# -- snapshots -----------------------------------------------------------------------------

def test_empty_follower_fetches_the_latest_snapshot_in_chunks() -> None:
    nodes = {1: Node(1, seed=1), 2: Node(2, seed=2)}  # node 3 has not started yet
    run(nodes, 0, 600)
    leader = leader_of(nodes)
    leader.client.propose([f"value-{i}".encode() for i in range(30)], 600)
    run(nodes, 600, 620)
    end = leader.client.listener_next_offset
    assert end == leader.log.high_watermark == 31
    writer = leader.client.create_snapshot(end, now_ms=620)
    writer.append(leader.listener.values())
    snapshot_id = leader.client.freeze_snapshot(writer)
    assert leader.log.start_offset == 31 and snapshot_id == m.OffsetAndEpoch(offset=31, epoch=1)
    fresh = Node(3, now_ms=620)
    nodes[3] = fresh
    run(nodes, 620, 900)
    assert [r.snapshot_id for r in fresh.listener.snapshots] == [snapshot_id]
    assert list(fresh.listener.snapshots[0].records) == [f"value-{i}".encode() for i in range(30)]
    assert fresh.log.start_offset == 31 and K.SNAPSHOT_LOADED in fresh.kinds()
    leader.client.propose([b"after"], 900)
    run(nodes, 900, 920)
    assert fresh.listener.values() == [b"after"]


def test_fetch_snapshot_errors() -> None:
    node = Node(1)
    elect(node)
    missing = node.client.handle_request(2, m.FetchSnapshotRequest(
        cluster_id=CLUSTER, replica_id=2, current_leader_epoch=1,
        snapshot_id=m.OffsetAndEpoch(offset=5, epoch=1), position=0, max_bytes=10), 1000)
    assert isinstance(missing, m.FetchSnapshotResponse)
    assert missing.error_code is ErrorCode.SNAPSHOT_NOT_FOUND


def test_snapshot_must_end_at_or_below_the_high_watermark() -> None:
    node = Node(1)
    elect(node)
    with pytest.raises(InvariantViolation, match="must be in"):
        node.client.create_snapshot(1, now_ms=1000)


def test_deferred_leader_flush_hw_needs_the_leaders_flush_or_two_followers() -> None:
    """With the leader's fsync off the poll (the driver runs it on a thread), the HW is the
    majority of *durable* copies: the leader's counts only once its flush completed; until
    then two followers' fetch offsets are the majority of three."""
    node = Node(1)
    elect(node)
    node.client.defer_leader_flush = True
    node.client.handle_request(2, fetch(2, 1, 1, 1), 1000)
    node.client.poll(1000)
    assert node.log.high_watermark == 1
    node.client.propose([b"a"], 1001)
    node.client.poll(1001 + CONFIG.append_linger_ms)
    assert node.log.end_offset == 2 and node.log.flushed_offset == 1
    assert node.client.needs_leader_flush()
    pending = node.log.begin_flush()
    assert pending is not None and pending.target == 2
    node.client.propose([b"b"], 1002)  # appended while the fsync runs: not covered by it
    node.client.poll(1002 + CONFIG.append_linger_ms)
    assert node.log.end_offset == 3
    # One follower holds everything, the leader nothing durable past 1: no majority.
    node.client.handle_request(2, fetch(2, 1, 3, 1), 1020)
    node.client.poll(1020)
    assert node.log.high_watermark == 1 and node.listener.values() == []
    # The flush completes: leader (2) + follower 2 (3) -> HW 2, never past the flushed 2.
    pending.run()
    node.log.complete_flush(pending)
    node.client.poll(1021)
    assert node.log.flushed_offset == 2 and node.log.high_watermark == 2
    assert node.listener.values() == [b"a"]
    # Offset 3 is not durable on the leader: follower 3 joining makes two followers of
    # three, a majority without the leader.
    node.client.handle_request(3, fetch(3, 1, 3, 1), 1022)
    node.client.poll(1022)
    assert node.log.flushed_offset == 2 and node.log.high_watermark == 3
    assert node.listener.values() == [b"a", b"b"]


def test_a_follower_is_caught_up_once_its_log_reaches_the_leaders_high_watermark() -> None:
    # The controller's "caught-up" readiness (a rolling restart waits for it).
    node = Node(2)
    assert not node.client.is_caught_up()  # no leader known
    node.client.handle_request(1, m.BeginQuorumEpochRequest(
        cluster_id=CLUSTER, leader_id=1, leader_epoch=1, voter_id=2), 0)
    node.client.poll(0)
    assert not node.client.is_caught_up()  # following, no Fetch answered yet
    [(_, request)] = node.sink.take(m.FetchRequest)
    # The leader has committed 3 records; this answer carries only 2 of them.
    node.client.handle_response(1, request, m.FetchResponse(
        error_code=ErrorCode.NONE, leader_epoch=1, leader_id=1, high_watermark=3,
        log_start_offset=0, records=rb.build_batch(
            [rb.RecordInput(value=b"a"), rb.RecordInput(value=b"b")], partition_leader_epoch=1)), 1)
    assert node.log.end_offset == 2 and not node.client.is_caught_up()
    node.client.poll(1)
    [(_, again)] = node.sink.take(m.FetchRequest)
    node.client.handle_response(1, again, m.FetchResponse(
        error_code=ErrorCode.NONE, leader_epoch=1, leader_id=1, high_watermark=3,
        log_start_offset=0, records=rb.build_batch([rb.RecordInput(value=b"c")], base_offset=2,
                                                   partition_leader_epoch=1)), 2)
    assert node.log.end_offset == 3 and node.client.is_caught_up()
    # A new epoch starts over: nothing heard from its leader yet.
    node.client.handle_request(3, m.BeginQuorumEpochRequest(
        cluster_id=CLUSTER, leader_id=3, leader_epoch=2, voter_id=2), 3)
    assert not node.client.is_caught_up()
    leader = Node(1)
    elect(leader)
    assert leader.client.is_caught_up()
