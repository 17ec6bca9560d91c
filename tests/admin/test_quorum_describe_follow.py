"""``quorum describe`` finds the leader: a non-leader's answer names the leader, the tool asks
that node's ControllerService for the leader's endpoint, asks the leader, and takes the cluster
id from it; with no leader anywhere it gives up after ``--timeout-ms`` with one clear message.
In-process gRPC servers stand in for the controllers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kraftlog.raft import messages as m
from kraftlog.raft import transport
from kraftlog.raft.error_codes import ErrorCode
from kraftlog.tools import quorum_commands as qc
from kraftlog.v1 import common_pb2, controller_pb2, controller_pb2_grpc

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


class FakeRaft:
    """Answers DescribeQuorum as a leader (``leader_id`` == ``node_id``) or a follower would."""

    def __init__(self, node_id: int, leader_id: int) -> None:
        self.node_id = node_id
        self.leader_id = leader_id

    async def handle_request(self, source: int, request: m.RaftRequest) -> m.RaftResponse:
        if self.leader_id != self.node_id:
            return m.DescribeQuorumResponse(error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                            leader_id=self.leader_id, leader_epoch=4)
        voters = tuple(m.ReplicaDescription(replica_id=i, log_end_offset=10,
                                            last_fetch_timestamp=-1,
                                            last_caught_up_timestamp=1_000)
                       for i in (1, 2, 3))
        return m.DescribeQuorumResponse(error_code=ErrorCode.NONE, leader_id=self.node_id,
                                        leader_epoch=4, high_watermark=10,
                                        current_voters=voters)

    def leader_and_epoch(self) -> tuple[int, int]:
        return self.leader_id, 4


class FakeController(controller_pb2_grpc.ControllerServiceServicer):
    def __init__(self, raft: FakeRaft, endpoints: dict[int, int]) -> None:
        self.raft = raft
        self.endpoints = endpoints

    async def DescribeCluster(self, request: Any, context: Any) -> Any:
        leader = self.raft.leader_id
        hint = common_pb2.LeaderHint(leader_id=leader, leader_epoch=4)
        if leader in self.endpoints:
            hint.endpoint.CopyFrom(common_pb2.Endpoint(host="127.0.0.1",
                                                       port=self.endpoints[leader]))
        if leader != self.raft.node_id:
            return controller_pb2.DescribeClusterResponse(
                error=common_pb2.Error(code=common_pb2.NOT_CONTROLLER), active_controller=hint)
        return controller_pb2.DescribeClusterResponse(active_controller=hint,
                                                      cluster_id=CLUSTER_ID,
                                                      controller_id=leader)


async def _serve(rafts: list[FakeRaft]) -> tuple[list[Any], dict[int, int]]:
    servers: list[Any] = []
    ports: dict[int, int] = {}
    controllers: list[FakeController] = []
    for raft in rafts:
        server = transport.create_server(transport.RaftServicer(raft))
        controller = FakeController(raft, ports)
        controller_pb2_grpc.add_ControllerServiceServicer_to_server(controller, server)
        ports[raft.node_id] = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)
        controllers.append(controller)
    return servers, ports


def test_a_follower_points_the_tool_at_the_leader() -> None:
    async def scenario() -> qc.QuorumDescription:
        servers, ports = await _serve([FakeRaft(1, 2), FakeRaft(2, 2)])
        try:
            return await qc.describe([f"127.0.0.1:{ports[1]}"], timeout_ms=5000)
        finally:
            for server in servers:
                await server.stop(None)

    description = asyncio.run(scenario())
    assert description.answer.leader_id == 2 and description.cluster_id == CLUSTER_ID
    assert qc.status_fields(description)["CurrentVoters"] == [1, 2, 3]


def test_no_leader_anywhere_times_out_with_one_message() -> None:
    async def scenario() -> None:
        servers, ports = await _serve([FakeRaft(1, -1)])
        try:
            await qc.describe([f"127.0.0.1:{ports[1]}"], timeout_ms=400)
        finally:
            for server in servers:
                await server.stop(None)

    with pytest.raises(qc.QuorumUnavailableError, match="no quorum leader known after 400 ms"):
        asyncio.run(scenario())


def test_a_dead_bootstrap_entry_is_skipped() -> None:
    async def scenario() -> qc.QuorumDescription:
        servers, ports = await _serve([FakeRaft(3, 3)])
        try:
            return await qc.describe(["127.0.0.1:1", f"127.0.0.1:{ports[3]}"], timeout_ms=5000)
        finally:
            for server in servers:
                await server.stop(None)

    assert asyncio.run(scenario()).answer.leader_id == 3

