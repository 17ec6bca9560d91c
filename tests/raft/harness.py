"""Hand-driving helpers for the raft core's golden tests (no simulator, no randomness in flight)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from kraftlog.raft import consensus
from kraftlog.raft import messages as m
from kraftlog.raft.epoch_state import Role
from kraftlog.raft.error_codes import ErrorCode
from kraftlog.raft.memory_log import MemoryRaftLog
from kraftlog.raft.quorum_state_store import MemoryQuorumStateStore
from kraftlog.raft.raft_config import RaftConfig
from kraftlog.raft.snapshot import SnapshotReader
from kraftlog.storage import record_batch as rb

CLUSTER = "golden"
CONFIG = RaftConfig(election_timeout_ms=100, election_backoff_max_ms=100, fetch_timeout_ms=200,
                    append_linger_ms=5, request_timeout_ms=150, retry_backoff_ms=10,
                    fetch_max_wait_ms=50, snapshot_chunk_bytes=64)


class RecordingSink:
    def __init__(self) -> None:
        self.sent: list[tuple[int, m.RaftRequest]] = []
        self.completed: dict[int, m.RaftResponse] = {}

    def send(self, destination: int, request: m.RaftRequest) -> None:
        self.sent.append((destination, request))

    def complete(self, request_id: int, response: m.RaftResponse) -> None:
        self.completed[request_id] = response

    def take(self, kind: type | None = None) -> list[tuple[int, m.RaftRequest]]:
        out = [(d, r) for d, r in self.sent if kind is None or isinstance(r, kind)]
        self.sent = [(d, r) for d, r in self.sent if not (kind is None or isinstance(r, kind))]
        return out


class RecordingListener:
    def __init__(self) -> None:
        self.committed: list[consensus.CommittedBatch] = []
        self.snapshots: list[SnapshotReader] = []
        self.leaders: list[tuple[int, int]] = []

    def handle_commit(self, batches: Sequence[consensus.CommittedBatch]) -> None:
        self.committed.extend(batches)

    def handle_load_snapshot(self, reader: SnapshotReader) -> None:
        self.snapshots.append(reader)

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        self.leaders.append((leader_id, epoch))

    def values(self) -> list[bytes]:
        return [v for b in self.committed for v in b.records]


class Node:
    def __init__(self, node_id: int, voters: Sequence[int] = (1, 2, 3), *,
                 log: MemoryRaftLog | None = None, store: MemoryQuorumStateStore | None = None,
                 now_ms: int = 0, seed: int = 7) -> None:
        self.node_id = node_id
        self.log = log or MemoryRaftLog(f"node-{node_id} log")
        self.store = store or MemoryQuorumStateStore()
        self.sink = RecordingSink()
        self.listener = RecordingListener()
        self.events: list[consensus.RaftEvent] = []
        self.client = consensus.RaftClient(
            node_id=node_id, voters={v: f"h{v}:9093" for v in voters}, cluster_id=CLUSTER,
            config=CONFIG, log=self.log, store=self.store, rng=random.Random(seed),
            listener=self.listener, sink=self.sink, now_ms=now_ms, on_event=self.events.append)

    def kinds(self) -> list[consensus.RaftEventKind]:
        return [e.kind for e in self.events]


def batch(*values: bytes) -> bytes:
    return rb.build_batch([rb.RecordInput(value=v) for v in values])


_NEXT_ID = [1000]
_PARKED: dict[int, tuple[int, int, m.RaftRequest]] = {}
"""Fetches parked by ``handle_request`` across pump() calls: request id -> (requester,
responder, request). Request ids are unique for the whole test session."""


def pump(nodes: dict[int, Node], now_ms: int, *, rounds: int = 50) -> None:
    """Deliver every queued request and response synchronously until the cluster is quiet."""
    next_id = _NEXT_ID
    parked = _PARKED
    for _ in range(rounds):
        moved = False
        for node in nodes.values():
            node.client.poll(now_ms)
        for source, node in nodes.items():
            for request_id, response in list(node.sink.completed.items()):
                del node.sink.completed[request_id]
                requester, _, request = parked.pop(request_id)
                nodes[requester].client.handle_response(source, request, response, now_ms)
                moved = True
            for destination, request in node.sink.take():
                moved = True
                if destination not in nodes:
                    continue
                next_id[0] += 1
                answer = nodes[destination].client.handle_request(source, request, now_ms,
                                                                  next_id[0])
                if isinstance(answer, m.Pending):
                    parked[next_id[0]] = (source, destination, request)
                else:
                    node.client.handle_response(destination, request, answer, now_ms)
        if not moved:
            return


def run(nodes: dict[int, Node], start_ms: int, end_ms: int, *, step_ms: int = 5) -> None:
    """Pump the cluster every ``step_ms`` of virtual time."""
    for now_ms in range(start_ms, end_ms + 1, step_ms):
        pump(nodes, now_ms)


def leader_of(nodes: dict[int, Node]) -> Node:
    leaders = [n for n in nodes.values() if n.client.role.value == "Leader"]
    assert len(leaders) == 1, [n.client.quorum.state.describe() for n in nodes.values()]
    return leaders[0]


def vote(candidate: int, epoch: int, last_epoch: int = 0, last_offset: int = 0, *,
         voter: int = 1, pre_vote: bool = False) -> m.VoteRequest:
    return m.VoteRequest(cluster_id=CLUSTER, candidate_epoch=epoch, candidate_id=candidate,
                         voter_id=voter, last_offset_epoch=last_epoch, last_offset=last_offset,
                         pre_vote=pre_vote)


def fetch(replica: int, epoch: int, offset: int, last_epoch: int, *, wait: int = 0,
          max_bytes: int = 1 << 20) -> m.FetchRequest:
    return m.FetchRequest(cluster_id=CLUSTER, replica_id=replica, current_leader_epoch=epoch,
                          fetch_offset=offset, last_fetched_epoch=last_epoch, max_wait_ms=wait,
                          max_bytes=max_bytes)


def elect(node: Node, now_ms: int = 0) -> None:
    """Drive node through pre-vote and vote with grants from node 2."""
    node.client.poll(now_ms + 1000)
    assert node.client.role is Role.PROSPECTIVE
    for dest, req in node.sink.take(m.VoteRequest):
        assert isinstance(req, m.VoteRequest) and req.pre_vote
        if dest == 2:
            node.client.handle_response(2, req, m.VoteResponse(
                error_code=ErrorCode.NONE, leader_epoch=req.candidate_epoch - 1, leader_id=-1,
                vote_granted=True), now_ms + 1000)
    node.client.poll(now_ms + 1000)
    assert node.client.role is Role.CANDIDATE
    for dest, req in node.sink.take(m.VoteRequest):
        assert isinstance(req, m.VoteRequest) and not req.pre_vote
        if dest == 2:
            node.client.handle_response(2, req, m.VoteResponse(
                error_code=ErrorCode.NONE, leader_epoch=req.candidate_epoch, leader_id=-1,
                vote_granted=True), now_ms + 1000)
    node.client.poll(now_ms + 1000)
    assert node.client.role is Role.LEADER
