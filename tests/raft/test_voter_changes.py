"""KIP-853 in the raft core, driven by hand: the control records, the voter set history,
Add/Remove/UpdateRaftVoter's rules and error codes, directory ids as voter keys, the
bootstrap voter set copied into the log, and the voter set following the log (uncommitted
records count, truncation reverts them)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from kraftlog import ids as uuid
from kraftlog.errors import CorruptRecordError
from kraftlog.raft import consensus
from kraftlog.raft import control_records as cr
from kraftlog.raft import messages as m
from kraftlog.raft import snapshot as snap
from kraftlog.raft import voter_set as vs
from kraftlog.raft.epoch_state import Role
from kraftlog.raft.error_codes import ErrorCode
from kraftlog.raft.memory_log import MemoryRaftLog
from kraftlog.raft.quorum_state_store import MemoryQuorumStateStore
from kraftlog.storage import record_batch as rb
from tests.raft.harness import CLUSTER, CONFIG, RecordingListener, RecordingSink

RNG = random.Random(853)
DIRS = {n: uuid.random_directory_id(RNG) for n in range(1, 6)}


def endpoint(node: int) -> str:
    return f"h{node}:9093"


def voter_set(*nodes: int) -> vs.VoterSet:
    return vs.VoterSet(vs.VoterNode(voter_id=n, directory_id=DIRS[n], endpoint=endpoint(n))
                       for n in nodes)


class DynNode:
    """A node of a dynamic quorum: formatted with the bootstrap voters, or with none."""

    def __init__(self, node_id: int, bootstrap: vs.VoterSet | None, *,
                 directory: uuid.Uuid | None = None, now_ms: int = 0) -> None:
        self.node_id = node_id
        self.log = MemoryRaftLog(f"node-{node_id} log")
        if bootstrap is not None:
            self.log.write_snapshot(m.OffsetAndEpoch(offset=0, epoch=0), snap.SnapshotWriter(
                m.OffsetAndEpoch(offset=0, epoch=0), last_contained_log_timestamp=-1, now_ms=0,
                control=vs.control_batch_records(bootstrap, 1)).build())
        self.sink = RecordingSink()
        self.listener = RecordingListener()
        self.client = consensus.RaftClient(
            node_id=node_id, voters={}, cluster_id=CLUSTER, config=CONFIG, log=self.log,
            store=MemoryQuorumStateStore(), rng=random.Random(node_id), listener=self.listener,
            sink=self.sink, now_ms=now_ms, directory_id=directory or DIRS[node_id],
            local_endpoint=endpoint(node_id), bootstrap_servers=(1,))


def lone_leader(now_ms: int = 1000) -> DynNode:
    """Node 1, the only voter, elected: its first epoch copies the bootstrap voters."""
    node = DynNode(1, voter_set(1))
    for t in range(now_ms, now_ms + 10):
        node.client.poll(t)
    assert node.client.role is Role.LEADER
    return node


def fetch(node: int, epoch: int, offset: int, last_epoch: int, *,
          directory: uuid.Uuid | None = None) -> m.FetchRequest:
    return m.FetchRequest(cluster_id=CLUSTER, replica_id=node, current_leader_epoch=epoch,
                          fetch_offset=offset, last_fetched_epoch=last_epoch, max_wait_ms=0,
                          max_bytes=1 << 20,
                          replica_directory_id=DIRS[node] if directory is None else directory)


def catch_up(leader: DynNode, node: int, now_ms: int, **kwargs: object) -> m.FetchResponse:
    client = leader.client
    answer = client.handle_request(node, fetch(node, client.epoch, leader.log.end_offset,
                                               leader.log.last_fetched_epoch(), **kwargs),
                                   now_ms)
    assert isinstance(answer, m.FetchResponse) and answer.error_code is ErrorCode.NONE, answer
    client.poll(now_ms)
    return answer


def add(node: int, *, timeout_ms: int = 500, directory: uuid.Uuid | None = None,
        where: str | None = None) -> m.AddRaftVoterRequest:
    return m.AddRaftVoterRequest(cluster_id=CLUSTER, timeout_ms=timeout_ms, voter_id=node,
                                 voter_directory_id=DIRS[node] if directory is None else directory,
                                 endpoint=endpoint(node) if where is None else where)


def remove(node: int, directory: uuid.Uuid | None = None) -> m.RemoveRaftVoterRequest:
    return m.RemoveRaftVoterRequest(cluster_id=CLUSTER, voter_id=node,
                                    voter_directory_id=DIRS[node] if directory is None
                                    else directory)


# -- records and history ---------------------------------------------------------------------------

def test_voters_and_kraft_version_records_round_trip_and_refuse_garbage() -> None:
    record = voter_set(1, 2).to_record()
    assert vs.VoterSet.from_record(cr.decode_voters(cr.encode_voters(record))) == voter_set(1, 2)
    assert cr.decode_kraft_version(cr.encode_kraft_version(
        cr.KRaftVersionRecord(kraft_version=1))).kraft_version == 1
    value = cr.encode_voters(record)
    for bad in (value[:-1], value + b"\0", value[:2] + b"\x7f" + value[3:]):
        with pytest.raises(CorruptRecordError):
            cr.decode_voters(bad)
    twice = cr.VotersRecord(voters=record.voters + record.voters[:1])
    with pytest.raises(CorruptRecordError, match="twice"):
        cr.decode_voters(cr.encode_voters(twice))


def test_history_takes_the_latest_record_and_reverts_on_truncation() -> None:
    history = vs.VoterSetHistory(vs.VoterSet([]))
    history.add_voters(-1, voter_set(1))
    history.add_voters(10, voter_set(1, 2))
    history.add_voters(20, voter_set(1, 2, 3))
    assert history.latest() == voter_set(1, 2, 3) and history.latest_offset() == 20
    assert history.value_at_or_before(15) == voter_set(1, 2)
    assert history.truncate_new_entries(20)  # the uncommitted change is gone with the log
    assert history.latest() == voter_set(1, 2)
    assert not history.truncate_new_entries(15)
    assert voter_set(1, 2).has_overlapping_majority(voter_set(1, 2, 3))
    assert not voter_set(1, 2).has_overlapping_majority(voter_set(3, 4))


# -- the leader --------------------------------------------------------------------------------------

def test_the_first_leader_copies_the_bootstrap_voters_into_its_log() -> None:
    leader = lone_leader()
    history = leader.client.history
    assert history.latest() == voter_set(1) and history.latest_offset() == 2
    assert leader.client.kraft_version == 1
    # An observer with an empty log (--no-initial-controllers) learns them from the log.
    observer = DynNode(2, None)
    assert observer.client.voter_set == vs.VoterSet([]) and not observer.client.quorum.is_voter
    answer = leader.client.handle_request(2, fetch(2, leader.client.epoch, 0, 0), 1100)
    assert isinstance(answer, m.FetchResponse) and answer.records
    observer.client.handle_request(1, m.BeginQuorumEpochRequest(
        cluster_id=CLUSTER, leader_id=1, leader_epoch=leader.client.epoch, voter_id=2), 1100)
    observer.client.poll(1100)
    (_, request), = observer.sink.take(m.FetchRequest)
    assert isinstance(request, m.FetchRequest)
    observer.client.handle_response(1, request, answer, 1100)
    assert observer.client.voter_set == voter_set(1)


@pytest.mark.parametrize(("request_", "code"), [
    (m.RemoveRaftVoterRequest(cluster_id="other", voter_id=1, voter_directory_id=DIRS[1]),
     ErrorCode.INCONSISTENT_CLUSTER_ID),
    (add(2, timeout_ms=0), ErrorCode.INVALID_REQUEST),
    (add(2, where="no-port"), ErrorCode.INVALID_REQUEST),
    (add(2, directory=m.NO_DIRECTORY), ErrorCode.INVALID_REQUEST),
    (add(2, directory=uuid.Uuid.from_bits(0, 1)), ErrorCode.INVALID_REQUEST),
    (m.AddRaftVoterRequest(cluster_id=CLUSTER, timeout_ms=100, voter_id=-4,
                           voter_directory_id=DIRS[2], endpoint="h:1"), ErrorCode.INVALID_REQUEST),
    (add(1), ErrorCode.DUPLICATE_VOTER),
    (remove(3), ErrorCode.VOTER_NOT_FOUND),
    (remove(1, directory=DIRS[5]), ErrorCode.VOTER_NOT_FOUND),  # a replaced disk's id
    (remove(1), ErrorCode.INVALID_REQUEST),  # the last voter
    (m.UpdateRaftVoterRequest(cluster_id=CLUSTER, current_leader_epoch=0, voter_id=1,
                              voter_directory_id=DIRS[1], endpoint="h:1", min_kraft_version=0,
                              max_kraft_version=1), ErrorCode.FENCED_LEADER_EPOCH),
])
def test_voter_change_requests_get_kafka_error_codes(request_: m.VoterChangeRequest,
                                                     code: ErrorCode) -> None:
    leader = lone_leader()
    before = leader.log.end_offset
    answer = leader.client.handle_request(-1, request_, 1100, 77)
    assert isinstance(answer, m.VoterChangeResponse) and answer.error_code is code, answer
    assert leader.log.end_offset == before and leader.client.voter_set == voter_set(1)


def test_non_leaders_and_static_quorums_refuse_changes() -> None:
    follower = DynNode(2, voter_set(1, 2))
    answer = follower.client.handle_request(-1, add(3), 0, 1)
    assert isinstance(answer, m.VoterChangeResponse)
    assert answer.error_code is ErrorCode.NOT_LEADER_OR_FOLLOWER
    static = consensus.RaftClient(
        node_id=1, voters={1: "h1:9093"}, cluster_id=CLUSTER, config=CONFIG,
        log=MemoryRaftLog(), store=MemoryQuorumStateStore(), rng=random.Random(1),
        listener=RecordingListener(), sink=RecordingSink(), now_ms=0)
    for t in range(1000, 1010):
        static.poll(t)
    assert static.role is Role.LEADER
    answer = static.handle_request(-1, add(2), 1010, 2)
    assert isinstance(answer, m.VoterChangeResponse)
    assert answer.error_code is ErrorCode.UNSUPPORTED_VERSION


def test_add_waits_for_the_new_voter_to_catch_up_then_commits_under_the_new_majority() -> None:
    leader = lone_leader()
    client = leader.client
    # Not fetching at all: the request times out without touching the log.
    assert client.handle_request(-1, add(2, timeout_ms=300), 1100, 1) is m.PENDING
    client.poll(1399)
    assert 1 not in leader.sink.completed and leader.log.end_offset == 3
    client.poll(1400)
    timed_out = leader.sink.completed.pop(1)
    assert isinstance(timed_out, m.VoterChangeResponse)
    assert timed_out.error_code is ErrorCode.REQUEST_TIMED_OUT
    assert client.voter_set == voter_set(1)

    # Caught up (fetching at the leader's end): the whole new set is appended at once and
    # counts before it commits; the commit needs node 2 now (2 of 2).
    catch_up(leader, 2, 1500)
    assert client.handle_request(-1, add(2), 1500, 2) is m.PENDING
    record_offset = client.history.latest_offset()
    assert record_offset is not None and client.voter_set == voter_set(1, 2)
    client.poll(1501)
    assert leader.log.high_watermark <= record_offset and 2 not in leader.sink.completed
    # One change at a time: nothing else while this one is uncommitted.
    busy = client.handle_request(-1, add(3), 1501, 3)
    assert isinstance(busy, m.VoterChangeResponse)
    assert busy.error_code is ErrorCode.REQUEST_TIMED_OUT
    # Node 2's offsets from before it was a voter do not count (it had not flushed them).
    assert leader.log.high_watermark <= record_offset
    catch_up(leader, 2, 1502)
    catch_up(leader, 2, 1503)
    assert leader.log.high_watermark > record_offset
    done = leader.sink.completed.pop(2)
    assert isinstance(done, m.VoterChangeResponse) and done.error_code is ErrorCode.NONE


def _two_voter_leader() -> DynNode:
    leader = lone_leader()
    catch_up(leader, 2, 1100)
    assert leader.client.handle_request(-1, add(2), 1100, 5) is m.PENDING
    for t in (1101, 1102, 1103):
        catch_up(leader, 2, t)
    assert leader.sink.completed.pop(5).error_code is ErrorCode.NONE  # type: ignore[union-attr]
    return leader


def test_a_replaced_disk_neither_counts_nor_votes_as_the_old_voter() -> None:
    leader = _two_voter_leader()
    leader.client.propose([b"x"], 1200)
    leader.client.poll(1300)
    hw = leader.log.high_watermark
    # Node 2 with a new disk (new directory id): its fetches are an observer's.
    catch_up(leader, 2, 1301, directory=DIRS[5])
    assert leader.log.high_watermark == hw
    catch_up(leader, 2, 1302)
    assert leader.log.high_watermark > hw
    # Asked to vote as the voter on the old disk, the new disk says INVALID_VOTER_KEY ...
    replaced = DynNode(2, voter_set(1, 2), directory=DIRS[5])
    assert not replaced.client.quorum.is_voter
    answer = replaced.client.handle_request(1, m.VoteRequest(
        cluster_id=CLUSTER, candidate_epoch=5, candidate_id=1, voter_id=2, last_offset_epoch=1,
        last_offset=9, voter_directory_id=DIRS[2], candidate_directory_id=DIRS[1]), 0)
    assert isinstance(answer, m.VoteResponse)
    assert answer.error_code is ErrorCode.INVALID_VOTER_KEY and not answer.vote_granted
    # ... and a candidate claiming a voter's id from another disk gets no vote.
    voter = DynNode(1, voter_set(1, 2))
    answer = voter.client.handle_request(2, m.VoteRequest(
        cluster_id=CLUSTER, candidate_epoch=5, candidate_id=2, voter_id=1, last_offset_epoch=1,
        last_offset=9, voter_directory_id=DIRS[1], candidate_directory_id=DIRS[5]), 0)
    assert isinstance(answer, m.VoteResponse) and not answer.vote_granted
    assert answer.error_code is ErrorCode.INCONSISTENT_VOTER_SET


def test_a_leader_that_removes_itself_resigns_once_the_change_commits() -> None:
    leader = _two_voter_leader()
    assert leader.client.handle_request(-1, remove(1), 1200, 9) is m.PENDING
    record_offset = leader.client.history.latest_offset()
    assert record_offset is not None
    assert leader.client.role is Role.LEADER and not leader.client.quorum.is_voter
    # The new majority is node 2 alone: its fetch past the record commits it; the leader
    # answers, then hands over.
    catch_up(leader, 2, 1201)
    assert leader.sink.completed.pop(9).error_code is ErrorCode.NONE  # type: ignore[union-attr]
    assert leader.client.role is Role.RESIGNED
    assert [d for d, _ in leader.sink.take(m.EndQuorumEpochRequest)] == [2]


def test_a_follower_uses_an_uncommitted_voters_record_and_reverts_it_on_truncation() -> None:
    follower = DynNode(2, voter_set(1, 2))
    client = follower.client
    client.handle_request(1, m.BeginQuorumEpochRequest(
        cluster_id=CLUSTER, leader_id=1, leader_epoch=1, voter_id=2), 0)
    client.poll(0)
    (_, request), = follower.sink.take(m.FetchRequest)
    data = rb.build_batch([rb.RecordInput(value=b"a")], base_offset=0, partition_leader_epoch=1)
    control = rb.build_batch(vs.control_batch_records(voter_set(1, 2, 3), None), base_offset=1,
                             partition_leader_epoch=1, is_control=True)
    client.handle_response(1, request, m.FetchResponse(
        error_code=ErrorCode.NONE, leader_epoch=1, leader_id=1, high_watermark=1,
        records=data + control), 1)
    assert client.voter_set == voter_set(1, 2, 3)  # uncommitted, in force already
    client.poll(2)
    (_, request), = follower.sink.take(m.FetchRequest)
    client.handle_response(1, request, m.FetchResponse(
        error_code=ErrorCode.NONE, leader_epoch=1, leader_id=1, high_watermark=1,
        diverging_epoch=m.OffsetAndEpoch(offset=1, epoch=1)), 3)
    assert follower.log.end_offset == 1
    assert client.voter_set == voter_set(1, 2) and client.quorum.voters == {1, 2}


def test_a_follower_refuses_a_voters_record_that_does_not_decode() -> None:
    follower = DynNode(2, voter_set(1, 2))
    client = follower.client
    client.handle_request(1, m.BeginQuorumEpochRequest(
        cluster_id=CLUSTER, leader_id=1, leader_epoch=1, voter_id=2), 0)
    client.poll(0)
    (_, request), = follower.sink.take(m.FetchRequest)
    garbage = rb.build_batch([rb.RecordInput(key=cr.encode_key(cr.ControlRecordType.KRAFT_VOTERS),
                                             value=b"\x00\x00\xff\xff")],
                             base_offset=0, partition_leader_epoch=1, is_control=True)
    client.handle_response(1, request, m.FetchResponse(
        error_code=ErrorCode.NONE, leader_epoch=1, leader_id=1, high_watermark=0,
        records=garbage), 1)  # refused like a corrupt batch: nothing appended, no crash
    assert follower.log.end_offset == 0 and client.voter_set == voter_set(1, 2)


def test_a_restart_reads_the_voter_set_from_anywhere_in_the_log() -> None:
    """The start-up scan reads the whole log, not only its first fetch_max_bytes."""
    node = DynNode(1, voter_set(1))
    for _ in range(20):
        node.log.append_as_leader(rb.build_batch([rb.RecordInput(value=bytes(600))]), 1)
    node.log.append_as_leader(rb.build_batch(vs.control_batch_records(voter_set(1, 2), None),
                                             is_control=True), 1)
    node.log.flush()
    small = dataclasses.replace(CONFIG, fetch_max_bytes=2048)
    restarted = consensus.RaftClient(
        node_id=1, voters={}, cluster_id=CLUSTER, config=small, log=node.log,
        store=MemoryQuorumStateStore(), rng=random.Random(1), listener=RecordingListener(),
        sink=RecordingSink(), now_ms=0, directory_id=DIRS[1])
    assert restarted.voter_set == voter_set(1, 2) and restarted.history.latest_offset() == 20


def test_a_voter_that_moved_updates_its_endpoint_through_the_leader() -> None:
    leader = _two_voter_leader()
    moved = DynNode(2, None)
    moved.client.local_endpoint = "h2-new:9093"
    # It fetches the log (voters {1, 2} with its old endpoint) as a voter of epoch 1...
    moved.client.handle_request(1, m.BeginQuorumEpochRequest(
        cluster_id=CLUSTER, leader_id=1, leader_epoch=leader.client.epoch, voter_id=2), 1200)
    moved.client.poll(1200)
    (_, request), = moved.sink.take(m.FetchRequest)
    answer = leader.client.handle_request(2, request, 1200)
    assert isinstance(answer, m.FetchResponse)
    moved.client.handle_response(1, request, answer, 1200)
    assert moved.client.quorum.is_voter
    moved.client.poll(1201)
    (_, update), = moved.sink.take(m.UpdateRaftVoterRequest)
    # ... and the leader records the new endpoint (answering once that commits).
    assert leader.client.handle_request(2, update, 1201, 11) is m.PENDING
    assert leader.client.voter_set.get(2).endpoint == "h2-new:9093"  # type: ignore[union-attr]
    catch_up(leader, 2, 1202)
    assert leader.sink.completed.pop(11).error_code is ErrorCode.NONE  # type: ignore[union-attr]
