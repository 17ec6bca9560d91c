"""The asyncio driver and the gRPC transport, in process: three nodes on 127.0.0.1 ephemeral
ports with durable logs in tmp dirs elect a leader, commit proposals, and re-elect after the
leader stops (crash-like and graceful). Every wait is bounded."""

from __future__ import annotations

import asyncio
import pathlib
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc
import pytest

from kraftlog import ids as uuid
from kraftlog.ids import Epoch
from kraftlog.raft import consensus, convert, driver, raft_log, transport
from kraftlog.raft import messages as msg
from kraftlog.raft.epoch_state import Role
from kraftlog.raft.error_codes import ErrorCode
from kraftlog.raft.memory_log import MemoryRaftLog
from kraftlog.raft.quorum_state_store import (
    QUORUM_STATE_FILE_NAME,
    ElectionState,
    FileQuorumStateStore,
    MemoryQuorumStateStore,
)
from kraftlog.raft.raft_config import RaftConfig
from kraftlog.raft.snapshot import SnapshotReader
from kraftlog.raft.storage_log import StorageRaftLog
from kraftlog.storage import record_batch
from kraftlog.v1 import common_pb2, raft_pb2, raft_pb2_grpc
from tests.raft.harness import CLUSTER as SIM_CLUSTER  # type: ignore[import-not-found]
from tests.raft.harness import Node as SimNode

CLUSTER = "driver-test-cluster"
CONFIG = RaftConfig(election_timeout_ms=300, election_backoff_max_ms=300, fetch_timeout_ms=600,
                    append_linger_ms=5, request_timeout_ms=500, retry_backoff_ms=50,
                    fetch_max_wait_ms=200, snapshot_chunk_bytes=256)


class Listener:
    def __init__(self) -> None:
        self.values: list[bytes] = []
        self.snapshot_values: list[bytes] = []

    def handle_commit(self, batches: Sequence[consensus.CommittedBatch]) -> None:
        self.values.extend(v for b in batches for v in b.records)

    def handle_load_snapshot(self, reader: SnapshotReader) -> None:
        self.snapshot_values = list(reader.records)
        self.values = []

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        pass


class Node:
    def __init__(self, node_id: int, root: pathlib.Path) -> None:
        self.node_id = node_id
        self.dir = root / f"node-{node_id}" / "__cluster_metadata-0"
        self.servicer = transport.RaftServicer()
        self.server: Any = transport.create_server(self.servicer)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.listener = Listener()
        self.log: StorageRaftLog | None = None
        self.driver: driver.RaftDriver | None = None

    async def start(self, voters: dict[int, str]) -> None:
        await self.server.start()
        self.log = StorageRaftLog.open(self.dir, clock_ms=lambda: time.time_ns() // 1_000_000)
        self.driver = driver.RaftDriver(
            node_id=self.node_id, voters=voters, cluster_id=CLUSTER, config=CONFIG, log=self.log,
            store=FileQuorumStateStore(self.dir / QUORUM_STATE_FILE_NAME, cluster_id=CLUSTER),
            listener=self.listener, rng=random.Random(self.node_id))
        self.servicer.handler = self.driver
        self.driver.start()

    async def stop(self, *, graceful: bool) -> None:
        if self.driver is not None:
            await self.driver.stop(graceful=graceful)
        await self.server.stop(None)
        if self.log is not None:
            self.log.close()
            self.log = None

    @property
    def status(self) -> driver.Status:
        assert self.driver is not None
        return self.driver.status


async def start_cluster(root: pathlib.Path) -> dict[int, Node]:
    nodes = {i: Node(i, root) for i in (1, 2, 3)}
    voters = {i: f"127.0.0.1:{n.port}" for i, n in nodes.items()}
    for n in nodes.values():
        await n.start(voters)
    return nodes


async def wait_until(condition: Callable[[], bool], *, timeout_s: float, what: str,
                     nodes: dict[int, Node] | None = None) -> float:
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout_s:
            statuses = {i: (n.driver.running, n.status) for i, n in (nodes or {}).items()
                        if n.driver is not None}
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}: {statuses}")
        await asyncio.sleep(0.01)
    return time.monotonic() - start


def single_leader(nodes: dict[int, Node]) -> Node | None:
    live = [n for n in nodes.values() if n.driver is not None and n.driver.running]
    leaders = [n for n in live if n.status.role is Role.LEADER]
    if len(leaders) != 1:
        return None
    leader = leaders[0]
    if all(n.status.leader_id == leader.node_id and n.status.epoch == leader.status.epoch
           for n in live):
        return leader
    return None


async def propose_when_ready(leader: Node, values: list[bytes]) -> int:
    assert leader.driver is not None
    return await leader.driver.propose(values)


def run(coro_fn: Callable[[pathlib.Path], Any], tmp_path: pathlib.Path) -> None:
    async def bounded() -> None:
        await asyncio.wait_for(coro_fn(tmp_path), timeout=30)

    asyncio.run(bounded())


def test_three_drivers_elect_commit_and_reelect_after_the_leader_crashes(
        tmp_path: pathlib.Path) -> None:
    async def scenario(root: pathlib.Path) -> None:
        nodes = await start_cluster(root)
        try:
            await wait_until(lambda: single_leader(nodes) is not None, timeout_s=10,
                             what="a leader all nodes agree on")
            leader = single_leader(nodes)
            assert leader is not None
            offset = await propose_when_ready(leader, [b"a", b"b", b"c"])
            assert offset >= 2
            await wait_until(lambda: all(n.listener.values == [b"a", b"b", b"c"]
                                         for n in nodes.values()),
                             timeout_s=5, what="the records committed on every node")
            first_epoch = leader.status.epoch

            await leader.stop(graceful=False)  # like a crash: no EndQuorumEpoch
            survivors = {i: n for i, n in nodes.items() if n is not leader}
            await wait_until(lambda: single_leader(survivors) is not None, timeout_s=10,
                             what="a new leader among the survivors")
            new_leader = single_leader(survivors)
            assert new_leader is not None and new_leader.status.epoch > first_epoch
            await propose_when_ready(new_leader, [b"d"])
            await wait_until(lambda: all(n.listener.values == [b"a", b"b", b"c", b"d"]
                                         for n in survivors.values()),
                             timeout_s=5, what="the new leader's record committed")
            with pytest.raises(transport.DriverStoppedError):
                assert leader.driver is not None
                await leader.driver.propose([b"x"])
        finally:
            for n in nodes.values():
                await n.stop(graceful=False)

    run(scenario, tmp_path)


def test_graceful_stop_resigns_and_a_successor_takes_over_quickly(tmp_path: pathlib.Path) -> None:
    async def scenario(root: pathlib.Path) -> None:
        nodes = await start_cluster(root)
        try:
            await wait_until(lambda: single_leader(nodes) is not None, timeout_s=10,
                             what="a leader")
            leader = single_leader(nodes)
            assert leader is not None
            epoch = leader.status.epoch
            await leader.stop(graceful=True)
            survivors = {i: n for i, n in nodes.items() if n is not leader}
            elapsed_s = await wait_until(
                lambda: (lead := single_leader(survivors)) is not None
                and lead.status.epoch > epoch, timeout_s=10, what="the successor", nodes=nodes)
            # A preferred successor skips its election timeout (KIP-595): well under the
            # fetch timeout a follower would otherwise wait.
            assert elapsed_s < CONFIG.fetch_timeout_ms / 1000 + 1.0
        finally:
            for n in nodes.values():
                await n.stop(graceful=False)

    run(scenario, tmp_path)


def test_a_new_voter_catches_up_from_a_snapshot_fetched_in_chunks_over_grpc(
        tmp_path: pathlib.Path) -> None:
    async def scenario(root: pathlib.Path) -> None:
        nodes = {i: Node(i, root) for i in (1, 2, 3)}
        voters = {i: f"127.0.0.1:{n.port}" for i, n in nodes.items()}
        try:
            for i in (1, 2):  # node 3 starts later, with an empty log
                await nodes[i].start(voters)
            await wait_until(lambda: single_leader({i: nodes[i] for i in (1, 2)}) is not None,
                             timeout_s=10, what="a leader of two", nodes=nodes)
            leader = single_leader({i: nodes[i] for i in (1, 2)})
            assert leader is not None and leader.driver is not None
            values = [f"value-{i}".encode() for i in range(40)]
            await leader.driver.propose(values)
            await wait_until(lambda: leader.listener.values == values, timeout_s=5,
                             what="the values committed on the leader", nodes=nodes)

            def snapshot(client: consensus.RaftClient, now_ms: int) -> msg.OffsetAndEpoch:
                writer = client.create_snapshot(client.listener_next_offset, now_ms=now_ms)
                writer.append(values)
                return client.freeze_snapshot(writer)

            snapshot_id = await leader.driver.call(snapshot)
            assert leader.log is not None and leader.log.start_offset == snapshot_id.offset

            await nodes[3].start(voters)
            await wait_until(lambda: nodes[3].listener.snapshot_values == values, timeout_s=10,
                             what="node 3 loading the snapshot", nodes=nodes)
            await leader.driver.propose([b"after"])
            await wait_until(lambda: nodes[3].listener.values == [b"after"], timeout_s=5,
                             what="node 3 following on after the snapshot", nodes=nodes)
            assert nodes[3].log is not None and nodes[3].log.start_offset == snapshot_id.offset
        finally:
            for n in nodes.values():
                await n.stop(graceful=False)

    run(scenario, tmp_path)


def test_the_server_answers_invalid_requests_and_kip_853_rpcs_with_error_codes(
        tmp_path: pathlib.Path) -> None:
    async def scenario(root: pathlib.Path) -> None:
        nodes = await start_cluster(root)
        try:
            target = f"127.0.0.1:{nodes[1].port}"
            async with grpc.aio.insecure_channel(target) as channel:
                stub = raft_pb2_grpc.RaftServiceStub(channel)
                fetch = await stub.Fetch(raft_pb2.RaftFetchRequest(
                    cluster_id=CLUSTER, replica_id=2, fetch_offset=-5), timeout=2)
                assert fetch.error.code == common_pb2.INVALID_REQUEST
                assert "fetch_offset" in fetch.error.message
                other = await stub.Vote(raft_pb2.VoteRequest(
                    cluster_id=CLUSTER, candidate_id=2, candidate_epoch=1,
                    topic_partition=common_pb2.TopicPartition(topic="other", partition=0)),
                    timeout=2)
                assert other.error.code == common_pb2.UNKNOWN_TOPIC_OR_PARTITION
                add = await stub.AddRaftVoter(raft_pb2.AddRaftVoterRequest(voter_id=4),
                                              timeout=2)
                assert add.error.code == common_pb2.INVALID_REQUEST
                assert "voter_directory_id" in add.error.message
                remove = await stub.RemoveRaftVoter(raft_pb2.RemoveRaftVoterRequest(
                    cluster_id=CLUSTER, voter_id=-3), timeout=2)
                assert remove.error.code == common_pb2.INVALID_REQUEST
                wrong_cluster = await stub.Vote(raft_pb2.VoteRequest(
                    cluster_id="nope", candidate_id=2, candidate_epoch=1), timeout=2)
                assert wrong_cluster.error.code == common_pb2.INCONSISTENT_CLUSTER_ID
            await wait_until(lambda: single_leader(nodes) is not None, timeout_s=10,
                             what="a leader")
            leader = single_leader(nodes)
            assert leader is not None
            async with grpc.aio.insecure_channel(f"127.0.0.1:{leader.port}") as channel:
                # Static voters (kraft.version 0): the leader refuses any change.
                add = await raft_pb2_grpc.RaftServiceStub(channel).AddRaftVoter(
                    raft_pb2.AddRaftVoterRequest(
                        cluster_id=CLUSTER, voter_id=4, timeout_ms=1000,
                        voter_directory_id=convert.uuid_to_proto(uuid.random_directory_id()),
                        listeners=convert.endpoint_to_proto("127.0.0.1:1")), timeout=2)
                assert add.error.code == common_pb2.UNSUPPORTED_VERSION, add
            described = await transport.describe_quorum(f"127.0.0.1:{leader.port}")
            assert described.leader_id == leader.node_id
            assert described.kraft_version == 0
            assert {r.replica_id for r in described.current_voters} == {1, 2, 3}
            now_ms = time.time() * 1000
            own = next(r for r in described.current_voters if r.replica_id == leader.node_id)
            # Timestamps leave the driver as wall-clock milliseconds.
            assert abs(own.last_caught_up_timestamp - now_ms) < 60_000
        finally:
            for n in nodes.values():
                await n.stop(graceful=False)

    run(scenario, tmp_path)


def test_a_successor_counts_a_pre_vote_granted_by_a_voter_that_still_names_the_old_leader(
) -> None:
    """Found by the graceful-stop test above (a livelock on real time): the voter that grants
    the pre-vote still names the resigned leader of the same epoch in its answer; the
    prospective successor must count the grant (Kafka: a prospective with a leader
    ``hasLeader()``, so ``maybeHandleCommonResponse`` does not follow it again)."""
    node = SimNode(2)

    def role() -> Role:
        current: Role = node.client.role
        return current

    node.client.handle_request(1, msg.BeginQuorumEpochRequest(
        cluster_id=SIM_CLUSTER, leader_id=1, leader_epoch=1, voter_id=2), 10)
    assert role() is Role.FOLLOWER
    node.client.handle_request(1, msg.EndQuorumEpochRequest(
        cluster_id=SIM_CLUSTER, leader_id=1, leader_epoch=1, preferred_successors=(2, 3)), 20)
    node.client.poll(20)
    assert role() is Role.PROSPECTIVE
    [to_three] = [r for d, r in node.sink.take(msg.VoteRequest) if d == 3]
    node.client.handle_response(3, to_three, msg.VoteResponse(
        error_code=ErrorCode.NONE, leader_epoch=1, leader_id=1, vote_granted=True), 21)
    node.client.poll(21)
    assert role() is Role.CANDIDATE


class _EchoHandler:
    """Answers every Fetch with its fetch offset as the high watermark; offset 99 never."""

    async def handle_request(self, source: int, request: msg.RaftRequest) -> msg.RaftResponse:
        assert isinstance(request, msg.FetchRequest)
        if request.fetch_offset == 99:
            await asyncio.sleep(30)
        return msg.FetchResponse(error_code=ErrorCode.NONE, leader_epoch=1, leader_id=1,
                                 high_watermark=request.fetch_offset, log_start_offset=0)

    def leader_and_epoch(self) -> tuple[int, int]:
        return 1, 1


class _CountingServicer(transport.RaftServicer):
    def __init__(self, handler: transport.RequestHandler) -> None:
        super().__init__(handler)
        self.streams = 0
        self.unary_fetches = 0

    async def Fetch(self, request: raft_pb2.RaftFetchRequest,
                    context: Any) -> raft_pb2.RaftFetchResponse:
        self.unary_fetches += 1
        return await super().Fetch(request, context)

    async def FetchStream(self, request_iterator: Any,
                          context: Any) -> Any:
        self.streams += 1
        async for answer in super().FetchStream(request_iterator, context):
            yield answer


class _ServerWithoutFetchStream(_CountingServicer):
    """A peer from before FetchStream: the generated servicer's UNIMPLEMENTED answer."""

    def FetchStream(self, request_iterator: Any, context: Any) -> Any:
        return raft_pb2_grpc.RaftServiceServicer.FetchStream(self, request_iterator, context)


class _Outcomes:
    def __init__(self) -> None:
        self.items: asyncio.Queue[tuple[str, msg.RaftRequest, msg.RaftResponse | None]] = \
            asyncio.Queue()

    def deliver_response(self, destination: int, request: msg.RaftRequest,
                         response: msg.RaftResponse) -> None:
        self.items.put_nowait(("response", request, response))

    def deliver_send_failure(self, destination: int, request: msg.RaftRequest) -> None:
        self.items.put_nowait(("failure", request, None))


def _fetch(offset: int) -> msg.FetchRequest:
    return msg.FetchRequest(cluster_id=CLUSTER, replica_id=2, current_leader_epoch=1,
                            fetch_offset=offset, last_fetched_epoch=1, max_wait_ms=0,
                            max_bytes=1024)


def test_fetches_share_one_stream_a_timed_out_one_is_not_reused_and_old_peers_get_unary_fetch(
) -> None:
    async def scenario() -> None:
        servicers = {1: _CountingServicer(_EchoHandler()),
                     3: _ServerWithoutFetchStream(_EchoHandler())}
        servers = {i: transport.create_server(s) for i, s in servicers.items()}
        ports = {i: server.add_insecure_port("127.0.0.1:0") for i, server in servers.items()}
        for server in servers.values():
            await server.start()
        outcomes = _Outcomes()
        peers = transport.RaftPeers({i: f"127.0.0.1:{port}" for i, port in ports.items()},
                                    outcomes, request_timeout_ms=300, retry_backoff_ms=20)

        async def exchange(destination: int, offset: int) -> tuple[str, int]:
            peers.send(destination, _fetch(offset))
            kind, request, response = await asyncio.wait_for(outcomes.items.get(), 5)
            assert isinstance(request, msg.FetchRequest) and request.fetch_offset == offset
            return kind, -1 if not isinstance(response, msg.FetchResponse) \
                else response.high_watermark

        try:
            for offset in range(5):
                assert await exchange(1, offset) == ("response", offset)
            assert (servicers[1].streams, servicers[1].unary_fetches) == (1, 0)
            # No answer within request.timeout.ms: a failure, and that stream is dropped, so
            # its late answer can never be taken for the answer to the next fetch.
            assert await exchange(1, 99) == ("failure", -1)
            assert await exchange(1, 5) == ("response", 5)
            assert (servicers[1].streams, servicers[1].unary_fetches) == (2, 0)
            # A peer without FetchStream answers UNIMPLEMENTED: the same fetch goes out as a
            # unary Fetch, and so do the next ones.
            assert await exchange(3, 7) == ("response", 7)
            assert await exchange(3, 8) == ("response", 8)
            assert servicers[3].unary_fetches == 2
        finally:
            await peers.close()
            for server in servers.values():
                await server.stop(None)

    asyncio.run(asyncio.wait_for(scenario(), timeout=30))


class _GatedFlush:
    """A MemoryRaftLog flush whose ``run`` waits for the test (a slow fsync) or fails."""

    def __init__(self, inner: raft_log.PendingFlush, log: _SlowFlushLog) -> None:
        self.inner = inner
        self.log = log

    @property
    def target(self) -> int:
        return self.inner.target

    def run(self) -> None:
        self.log.threads.add(threading.get_ident())
        if not self.log.release.wait(10):
            raise OSError("test: flush never released")
        if self.log.fail:
            raise OSError(5, "test: fsync failed")
        self.inner.run()


class _SlowFlushLog(MemoryRaftLog):
    def __init__(self) -> None:
        super().__init__("slow-flush log")
        self.release = threading.Event()
        self.fail = False
        self.threads: set[int] = set()

    def begin_flush(self) -> raft_log.PendingFlush | None:
        inner = super().begin_flush()
        return None if inner is None else _GatedFlush(inner, self)

    def complete_flush(self, flush: raft_log.PendingFlush) -> None:
        super().complete_flush(flush.inner if isinstance(flush, _GatedFlush) else flush)


def test_the_leaders_fsync_runs_off_the_loop_and_counts_only_when_done(
        tmp_path: pathlib.Path) -> None:
    async def scenario(_: pathlib.Path) -> None:
        log = _SlowFlushLog()
        listener = Listener()
        raft = driver.RaftDriver(node_id=1, voters={1: "127.0.0.1:1"}, cluster_id=CLUSTER,
                                 config=CONFIG, log=log, store=MemoryQuorumStateStore(),
                                 listener=listener, rng=random.Random(1))
        raft.start()
        try:
            await wait_until(lambda: raft.status.role is Role.LEADER, timeout_s=5,
                             what="a single voter elects itself")
            offset = await raft.propose([b"x"])
            await wait_until(lambda: log.threads != set(), timeout_s=5, what="the fsync starts")
            assert threading.get_ident() not in log.threads
            # The fsync is stuck; the loop is not: calls are answered, nothing commits.
            ends = [await raft.call(lambda client, _now: client.log.end_offset)
                    for _ in range(3)]
            assert ends == [offset + 1] * 3
            assert log.flushed_offset == offset and log.high_watermark <= offset
            assert listener.values == []
            log.release.set()
            await wait_until(lambda: listener.values == [b"x"], timeout_s=5,
                             what="the commit once the leader's copy is durable")
            assert log.flushed_offset == log.high_watermark == offset + 1
            # A failed fsync is fatal, as it is on the loop thread.
            log.fail = True
            await raft.propose([b"y"])
            with pytest.raises(OSError, match="fsync failed"):
                await asyncio.wait_for(raft.wait(), 5)
            assert listener.values == [b"x"]
        finally:
            log.release.set()
            await raft.stop(graceful=False)

    run(scenario, tmp_path)


def test_a_follower_with_an_epoch_the_leader_never_saw_truncates_it_over_grpc(
        tmp_path: pathlib.Path) -> None:
    """Node 3 holds an uncommitted entry of epoch 2 (it led epoch 2 briefly), the leader's
    log starts at a later epoch: the leader answers its Fetch with the diverging epoch
    (log start, -1), which must survive the protobuf conversion so node 3 truncates and
    catches up (it used to be rejected as malformed: node 3 then never fetched again)."""
    async def scenario(root: pathlib.Path) -> None:
        nodes = {i: Node(i, root) for i in (1, 2, 3)}
        for node in nodes.values():  # everyone saw epoch 2 (node 3 led it): the next is 3
            node.dir.mkdir(parents=True)
            FileQuorumStateStore(node.dir / QUORUM_STATE_FILE_NAME, cluster_id=CLUSTER).write(
                ElectionState(epoch=Epoch(2), voters=frozenset({1, 2, 3})))
        stale = StorageRaftLog.open(nodes[3].dir, clock_ms=lambda: time.time_ns() // 1_000_000)
        stale.append_as_leader(rb_batch(b"never committed"), 2)
        stale.flush()
        stale.close()
        voters = {i: f"127.0.0.1:{n.port}" for i, n in nodes.items()}
        try:
            for i in (1, 2):  # a majority without node 3, so node 3 cannot win
                await nodes[i].start(voters)
            pair = {i: nodes[i] for i in (1, 2)}
            await wait_until(lambda: single_leader(pair) is not None, timeout_s=10,
                             what="a leader of nodes 1 and 2")
            leader = single_leader(pair)
            assert leader is not None
            await propose_when_ready(leader, [b"a"])
            await nodes[3].start(voters)
            await wait_until(lambda: nodes[3].listener.values == [b"a"], timeout_s=10,
                             what="node 3 truncating its epoch-2 entry and catching up",
                             nodes=nodes)
            assert nodes[3].log is not None and nodes[3].log.last_fetched_epoch() > 2
        finally:
            for n in nodes.values():
                await n.stop(graceful=False)

    run(scenario, tmp_path)


def rb_batch(*values: bytes) -> bytes:
    return record_batch.build_batch([record_batch.RecordInput(value=v) for v in values])


def test_forged_votes_over_grpc_neither_crash_nor_unseat_the_leader(
        tmp_path: pathlib.Path) -> None:
    """Raw gRPC calls that once did harm, on a live three-node quorum: a Vote naming the
    receiver as candidate ended the process (InvariantViolation); the same Vote in a real voter's
    name made the leader resign; undecodable bytes were answered UNKNOWN with a traceback."""
    async def scenario(root: pathlib.Path) -> None:
        nodes = await start_cluster(root)
        try:
            await wait_until(lambda: single_leader(nodes) is not None, timeout_s=10,
                             what="a leader", nodes=nodes)
            leader = single_leader(nodes)
            assert leader is not None
            epoch = leader.status.epoch
            for node in nodes.values():
                other = next(i for i in nodes if i != node.node_id)
                async with grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as channel:
                    stub = raft_pb2_grpc.RaftServiceStub(channel)
                    for candidate, code in ((node.node_id, common_pb2.INVALID_REQUEST),
                                            (other, common_pb2.NONE),
                                            (9, common_pb2.INCONSISTENT_VOTER_SET)):
                        answer = await stub.Vote(raft_pb2.VoteRequest(
                            cluster_id=CLUSTER, candidate_id=candidate, voter_id=node.node_id,
                            candidate_epoch=epoch + 1, last_offset_epoch=epoch,
                            last_offset=10**9), timeout=2)
                        assert (answer.error.code, answer.vote_granted) == (code, False)
                    with pytest.raises(grpc.aio.AioRpcError) as raised:
                        await channel.unary_unary("/kraftlog.v1.RaftService/Vote")(
                            b"\xff\xff\xff\xff\x0f", timeout=2)
                    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            await asyncio.sleep(0.3)
            assert all(n.driver is not None and n.driver.running for n in nodes.values())
            assert single_leader(nodes) is leader and leader.status.epoch == epoch
        finally:
            for n in nodes.values():
                await n.stop(graceful=False)

    run(scenario, tmp_path)
