"""The AdminService's DeleteRecords (Kafka's AdminClient.deleteRecords): each partition goes
to its leader from a broker's Metadata, one request per leader; a leader that moved
(NOT_LEADER_OR_FOLLOWER) is looked up again and the partition resent; unknown topics and
partitions, and a partition given twice, answer their own errors. In-process gRPC servers
stand in for the controller and the brokers."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc.aio

from kraftlog.admin import admin_service
from kraftlog.error_codes import ErrorCode
from kraftlog.raft import transport
from kraftlog.v1 import broker_pb2, broker_pb2_grpc, common_pb2, controller_pb2, controller_pb2_grpc

Req = broker_pb2.DeleteRecordsRequest
Resp = broker_pb2.DeleteRecordsResponse


class Controller(controller_pb2_grpc.ControllerServiceServicer):
    def __init__(self, brokers: dict[int, int]) -> None:
        self.brokers = brokers

    async def DescribeCluster(self, request: Any, context: Any) -> Any:
        B = controller_pb2.DescribeClusterResponse.DescribeClusterBroker
        return controller_pb2.DescribeClusterResponse(
            active_controller=common_pb2.LeaderHint(leader_id=1, leader_epoch=1),
            cluster_id="c", controller_id=1, brokers=[
                B(broker_id=i, endpoints=[common_pb2.Endpoint(host="127.0.0.1", port=p)])
                for i, p in sorted(self.brokers.items())])


class State:
    def __init__(self) -> None:
        self.ports: dict[int, int] = {}
        self.leader_of_t1 = 5
        self.asked: list[tuple[int, list[tuple[str, int, int]]]] = []


class Broker(broker_pb2_grpc.BrokerServiceServicer):
    def __init__(self, broker_id: int, state: State) -> None:
        self.broker_id = broker_id
        self.state = state

    async def Metadata(self, request: broker_pb2.MetadataRequest, context: Any) -> Any:
        M = broker_pb2.MetadataResponse
        response = M(cluster_id="c", brokers=[
            M.MetadataResponseBroker(node_id=i, endpoint=common_pb2.Endpoint(
                host="127.0.0.1", port=p)) for i, p in sorted(self.state.ports.items())])
        for name in request.topics:
            if name != "t":
                response.topics.append(M.MetadataResponseTopic(name=name, error=common_pb2.Error(
                    code=common_pb2.UNKNOWN_TOPIC_OR_PARTITION, message="no such topic")))
                continue
            response.topics.append(M.MetadataResponseTopic(name="t", partitions=[
                M.MetadataResponsePartition(partition_index=0, leader_id=4),
                M.MetadataResponsePartition(partition_index=1, leader_id=self.state.leader_of_t1)]))
        return response

    async def DeleteRecords(self, request: Req, context: Any) -> Any:
        asked = [(t.name, p.partition_index, p.offset) for t in request.topics
                 for p in t.partitions]
        self.state.asked.append((self.broker_id, asked))
        assert request.timeout_ms > 0
        parts = []
        for _name, index, offset in asked:
            if self.broker_id == 5:  # it lost t-1's leadership to broker 4
                self.state.leader_of_t1 = 4
                error = common_pb2.Error(code=common_pb2.NOT_LEADER_OR_FOLLOWER, message="moved")
                parts.append(Resp.DeleteRecordsPartitionResult(
                    partition_index=index, low_watermark=-1, error=error))
            else:
                parts.append(Resp.DeleteRecordsPartitionResult(
                    partition_index=index, low_watermark=offset,
                    error=common_pb2.Error(code=common_pb2.NONE)))
        return Resp(topics=[Resp.DeleteRecordsTopicResult(name="t", partitions=parts)])


class Context:
    def time_remaining(self) -> float:
        return 5.0


def test_each_partition_goes_to_its_leader_and_follows_a_leader_move() -> None:
    async def scenario() -> None:
        state = State()
        servers = []
        for broker_id in (4, 5):
            server = grpc.aio.server(options=transport.server_options())
            broker_pb2_grpc.add_BrokerServiceServicer_to_server(Broker(broker_id, state), server)
            state.ports[broker_id] = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            servers.append(server)
        controller = grpc.aio.server(options=transport.server_options())
        controller_pb2_grpc.add_ControllerServiceServicer_to_server(Controller(state.ports),
                                                                    controller)
        port = controller.add_insecure_port("127.0.0.1:0")
        await controller.start()
        servers.append(controller)
        locator = admin_service.ClusterLocator(admin_service.AdminSettings(
            bootstrap_controllers=(f"127.0.0.1:{port}",), retry_backoff_ms=20))
        servicer = admin_service.AdminServicer(locator)
        P = Req.DeleteRecordsPartition
        try:
            answer = await servicer.DeleteRecords(Req(topics=[
                Req.DeleteRecordsTopic(name="t", partitions=[
                    P(partition_index=0, offset=10), P(partition_index=1, offset=3),
                    P(partition_index=7, offset=1), P(partition_index=2, offset=1),
                    P(partition_index=2, offset=4)]),
                Req.DeleteRecordsTopic(name="nope", partitions=[P(partition_index=0, offset=1)])]),
                Context())
        finally:
            await locator.close()
            for server in servers:
                await server.stop(0)
        assert answer.error.code == common_pb2.NONE
        found = {(t.name, p.partition_index): (ErrorCode(p.error.code), p.low_watermark)
                 for t in answer.topics for p in t.partitions}
        assert found == {("t", 0): (ErrorCode.NONE, 10), ("t", 1): (ErrorCode.NONE, 3),
                         ("t", 7): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
                         ("t", 2): (ErrorCode.INVALID_REQUEST, -1),
                         ("nope", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)}
        # One request per leader; t-1 went again, to its new leader.
        assert sorted(state.asked) == [(4, [("t", 0, 10)]), (4, [("t", 1, 3)]),
                                       (5, [("t", 1, 3)])]
        assert [t.name for t in answer.topics] == ["t", "nope"]
    asyncio.run(asyncio.wait_for(scenario(), 20))
