"""The AdminService finds the active controller: it skips controllers it cannot reach,
follows NOT_CONTROLLER hints, caches the answer, and when nobody is active it answers
NOT_CONTROLLER before the caller's deadline, naming every controller it tried. Its joins:
DescribeTopics = a broker's Metadata + the controller's configs (min.insync.replicas) and
reassignments, filtered by partition health; reassignment progress = the controller's
list + the brokers' DescribeLogDirs (bytes behind the leader per adding replica).
In-process gRPC servers stand in for the controllers and brokers."""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import socket
from typing import Any

import grpc.aio
import pytest
from google.protobuf import descriptor, symbol_database

from kraftlog.admin import admin_client as ac
from kraftlog.admin import admin_service, topic_health
from kraftlog.error_codes import ErrorCode
from kraftlog.raft import transport
from kraftlog.v1 import (
    admin_pb2,
    broker_pb2,
    broker_pb2_grpc,
    common_pb2,
    controller_pb2,
    controller_pb2_grpc,
)
from tests import proto_fuzz

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


class FakeController(controller_pb2_grpc.ControllerServiceServicer):
    """Active (answers) or standby (NOT_CONTROLLER with ``hint``)."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.active = False
        self.hint: tuple[int, str] | None = None
        self.calls: list[str] = []

    def _hint(self) -> common_pb2.LeaderHint:
        if self.active:
            return common_pb2.LeaderHint(leader_id=self.node_id, leader_epoch=5)
        if self.hint is None:
            return common_pb2.LeaderHint(leader_id=-1, leader_epoch=5)
        leader, address = self.hint
        host, _, port = address.rpartition(":")
        return common_pb2.LeaderHint(leader_id=leader, leader_epoch=5,
                                     endpoint=common_pb2.Endpoint(host=host, port=int(port)))

    def _refuse(self, response: Any) -> Any:
        response.error.CopyFrom(common_pb2.Error(code=common_pb2.NOT_CONTROLLER,
                                                 message="not the active controller"))
        response.active_controller.CopyFrom(self._hint())
        return response

    async def CreateTopics(self, request: controller_pb2.CreateTopicsRequest,
                           context: Any) -> Any:
        self.calls.append("CreateTopics")
        if not self.active:
            return self._refuse(controller_pb2.CreateTopicsResponse())
        return controller_pb2.CreateTopicsResponse(
            active_controller=self._hint(),
            topics=[controller_pb2.CreateTopicsResponse.CreatableTopicResult(
                name=t.name, num_partitions=t.num_partitions,
                replication_factor=t.replication_factor) for t in request.topics])

    async def DescribeCluster(self, request: controller_pb2.DescribeClusterRequest,
                              context: Any) -> Any:
        self.calls.append("DescribeCluster")
        if not self.active:
            return self._refuse(controller_pb2.DescribeClusterResponse())
        return controller_pb2.DescribeClusterResponse(
            active_controller=self._hint(), cluster_id=CLUSTER_ID, controller_id=self.node_id)


async def _serve(controllers: list[FakeController]) -> tuple[list[Any], list[str]]:
    servers, addresses = [], []
    for controller in controllers:
        server = grpc.aio.server(options=transport.server_options())
        controller_pb2_grpc.add_ControllerServiceServicer_to_server(controller, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)
        addresses.append(f"127.0.0.1:{port}")
    return servers, addresses


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


class FakeContext:
    def __init__(self, remaining_s: float) -> None:
        self.remaining_s = remaining_s

    def time_remaining(self) -> float:
        return self.remaining_s


def test_follows_hints_past_an_unreachable_controller_and_caches_the_active_one() -> None:
    async def scenario() -> None:
        first, second = FakeController(1), FakeController(2)
        servers, (a1, a2) = await _serve([first, second])
        second.active = True
        first.hint = (2, a2)
        dead = _closed_port()
        locator = admin_service.ClusterLocator(admin_service.AdminSettings(
            bootstrap_controllers=(dead, a1), retry_backoff_ms=20))
        servicer = admin_service.AdminServicer(locator)
        try:
            answer = await servicer.CreateTopics(controller_pb2.CreateTopicsRequest(topics=[
                controller_pb2.CreateTopicsRequest.CreatableTopic(
                    name="t", num_partitions=2, replication_factor=1)]), FakeContext(5.0))
            assert answer.error.code == common_pb2.NONE
            assert [t.name for t in answer.topics] == ["t"]
            assert locator.active_controller == a2
            assert first.calls == ["CreateTopics"]
            # Cached: the next call goes straight to the active controller.
            first.calls.clear()
            cluster = await servicer.DescribeCluster(controller_pb2.DescribeClusterRequest(),
                                                     FakeContext(5.0))
            assert cluster.cluster_id == CLUSTER_ID and first.calls == []
            # Leadership moves back: the stale target answers NOT_CONTROLLER with a hint.
            second.active, first.active = False, True
            second.hint = (1, a1)
            cluster = await servicer.DescribeCluster(controller_pb2.DescribeClusterRequest(),
                                                     FakeContext(5.0))
            assert cluster.controller_id == 1 and locator.active_controller == a1
        finally:
            await locator.close()
            for server in servers:
                await server.stop(0)
    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_no_active_controller_answers_not_controller_before_the_deadline() -> None:
    async def scenario() -> None:
        standby = FakeController(1)
        servers, (address,) = await _serve([standby])
        dead = _closed_port()
        locator = admin_service.ClusterLocator(admin_service.AdminSettings(
            bootstrap_controllers=(address, dead), retry_backoff_ms=20))
        servicer = admin_service.AdminServicer(locator)
        loop = asyncio.get_running_loop()
        try:
            started = loop.time()
            answer = await servicer.DescribeCluster(controller_pb2.DescribeClusterRequest(),
                                                    FakeContext(1.0))
            elapsed = loop.time() - started
            assert answer.error.code == common_pb2.NOT_CONTROLLER
            assert address in answer.error.message and dead in answer.error.message
            assert "UNAVAILABLE" in answer.error.message
            assert 0.5 < elapsed < 1.0  # retried until just before the caller's deadline
            assert len(standby.calls) > 3
        finally:
            await locator.close()
            for server in servers:
                await server.stop(0)
    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_admin_client_raises_the_cluster_error_through_a_served_admin() -> None:
    async def scenario() -> None:
        standby = FakeController(1)
        servers, (address,) = await _serve([standby])
        locator = admin_service.ClusterLocator(admin_service.AdminSettings(
            bootstrap_controllers=(address,), retry_backoff_ms=20))
        server = grpc.aio.server(options=transport.server_options())
        admin_service.add_to_server(admin_service.AdminServicer(locator), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with ac.AdminClient(f"127.0.0.1:{port}", timeout_ms=800) as admin:
                try:
                    await admin.describe_cluster()
                except ac.ClusterUnavailableError as exc:
                    assert exc.code is ErrorCode.NOT_CONTROLLER
                    assert "NOT_CONTROLLER" in str(exc) and address in str(exc)
                else:
                    raise AssertionError("describe_cluster succeeded without a controller")
        finally:
            await server.stop(0)
            await locator.close()
            for s in servers:
                await s.stop(0)
    asyncio.run(asyncio.wait_for(scenario(), 20))


# -- DescribeTopics and reassignment progress: the joins ------------------------------------------

class ClusterController(FakeController):
    """An active controller that knows brokers 4-6, topic configs and one reassignment."""

    def __init__(self, brokers: dict[int, str]) -> None:
        super().__init__(1)
        self.active = True
        self.brokers = brokers

    async def DescribeCluster(self, request: controller_pb2.DescribeClusterRequest,
                              context: Any) -> Any:
        B = controller_pb2.DescribeClusterResponse.DescribeClusterBroker
        return controller_pb2.DescribeClusterResponse(
            active_controller=self._hint(), cluster_id=CLUSTER_ID, controller_id=1,
            brokers=[B(broker_id=i, endpoints=[common_pb2.Endpoint(
                host="127.0.0.1", port=int(a.rpartition(":")[2]))])
                for i, a in sorted(self.brokers.items())])

    async def DescribeConfigs(self, request: controller_pb2.DescribeConfigsRequest,
                              context: Any) -> Any:
        R = controller_pb2.DescribeConfigsResponse
        results = []
        for resource in request.resources:
            own = resource.resource_name == "t"
            results.append(R.DescribeConfigsResult(
                resource_type=resource.resource_type, resource_name=resource.resource_name,
                configs=[
                    R.DescribeConfigsResourceResult(
                        name="min.insync.replicas", value="2" if own else "1",
                        config_source=(common_pb2.CONFIG_SOURCE_DYNAMIC_TOPIC_CONFIG if own
                                       else common_pb2.CONFIG_SOURCE_DEFAULT_CONFIG)),
                    R.DescribeConfigsResourceResult(
                        name="retention.ms", value="604800000",
                        config_source=common_pb2.CONFIG_SOURCE_DEFAULT_CONFIG)]))
        return R(active_controller=self._hint(), results=results)

    async def ListPartitionReassignments(
            self, request: controller_pb2.ListPartitionReassignmentsRequest,
            context: Any) -> Any:
        R = controller_pb2.ListPartitionReassignmentsResponse
        return R(active_controller=self._hint(), topics=[R.OngoingTopicReassignment(
            name="t", partitions=[R.OngoingPartitionReassignment(
                partition_index=1, replicas=[4, 6, 5], adding_replicas=[6],
                removing_replicas=[5])])])


class FakeBroker(broker_pb2_grpc.BrokerServiceServicer):
    def __init__(self, sizes: dict[tuple[str, int], int]) -> None:
        self.sizes = sizes

    async def Metadata(self, request: broker_pb2.MetadataRequest, context: Any) -> Any:
        M = broker_pb2.MetadataResponse
        topics = {
            "t": [M.MetadataResponsePartition(partition_index=0, leader_id=4,
                                              replica_nodes=[4, 5], isr_nodes=[4, 5]),
                  M.MetadataResponsePartition(partition_index=1, leader_id=4,
                                              replica_nodes=[4, 6, 5], isr_nodes=[4, 5]),
                  M.MetadataResponsePartition(partition_index=2, leader_id=-1,
                                              replica_nodes=[5, 4], isr_nodes=[5])],
            "u": [M.MetadataResponsePartition(partition_index=0, leader_id=5,
                                              replica_nodes=[5], isr_nodes=[5])]}
        response = M(cluster_id=CLUSTER_ID, controller_id=1, brokers=[
            M.MetadataResponseBroker(node_id=i) for i in (4, 5, 6)])
        for name in request.topics or sorted(topics):
            if name not in topics:
                response.topics.append(M.MetadataResponseTopic(name=name, error=common_pb2.Error(
                    code=common_pb2.UNKNOWN_TOPIC_OR_PARTITION, message="no such topic")))
            else:
                response.topics.append(M.MetadataResponseTopic(name=name,
                                                               partitions=topics[name]))
        return response

    async def DescribeLogDirs(self, request: broker_pb2.DescribeLogDirsRequest,
                              context: Any) -> Any:
        D = broker_pb2.DescribeLogDirsResponse
        topics = []
        for wanted in request.topics:
            parts = [D.DescribeLogDirsPartition(partition_index=p,
                                                partition_size=self.sizes[(wanted.topic, p)],
                                                log_end_offset=self.sizes[(wanted.topic, p)] // 10)
                     for p in wanted.partitions if (wanted.topic, p) in self.sizes]
            if parts:
                topics.append(D.DescribeLogDirsTopic(name=wanted.topic, partitions=parts))
        return D(results=[D.DescribeLogDirsResult(log_dir="/data", topics=topics)])


async def _joined_cluster() -> tuple[list[Any], admin_service.AdminServicer]:
    servers = []
    brokers: dict[int, str] = {}
    for broker_id, sizes in ((4, {("t", 1): 5000}), (6, {("t", 1): 1200})):
        server = grpc.aio.server(options=transport.server_options())
        broker_pb2_grpc.add_BrokerServiceServicer_to_server(FakeBroker(sizes), server)
        brokers[broker_id] = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
        await server.start()
        servers.append(server)
    controller_servers, (address,) = await _serve([ClusterController(brokers)])
    locator = admin_service.ClusterLocator(admin_service.AdminSettings(
        bootstrap_controllers=(address,), retry_backoff_ms=20))
    return servers + controller_servers, admin_service.AdminServicer(locator)


def test_describe_topics_joins_metadata_configs_and_reassignments() -> None:
    async def scenario() -> None:
        servers, servicer = await _joined_cluster()
        try:
            answer = await servicer.DescribeTopics(admin_pb2.DescribeTopicsRequest(
                topics=["t", "nope"]), FakeContext(5.0))
            assert answer.error.code == common_pb2.NONE
            nope, t = answer.topics
            assert nope.name == "nope" and nope.error.code == common_pb2.UNKNOWN_TOPIC_OR_PARTITION
            assert (t.partition_count, t.min_insync_replicas) == (3, 2)
            assert [(c.name, c.value) for c in t.configs] == [("min.insync.replicas", "2")]
            moving = t.partitions[1]
            assert (list(moving.adding_replicas), list(moving.removing_replicas)) == ([6], [5])
            assert t.replication_factor == 2  # partition 0: [4, 5]

            results = {}
            for flt in topic_health.HealthFilter:
                got = await servicer.DescribeTopics(admin_pb2.DescribeTopicsRequest(
                    health_filter=flt.value), FakeContext(5.0))  # type: ignore[arg-type]
                results[flt] = {x.name: [p.partition_index for p in x.partitions]
                                for x in got.topics}
            f = topic_health.HealthFilter
            assert results[f.ALL] == {"t": [0, 1, 2], "u": [0]}
            # Partition 1 is reassigning 5 -> 6: target factor 2, ISR [4, 5] is enough.
            assert results[f.UNDER_REPLICATED] == {"t": [2]}
            assert results[f.UNDER_MIN_ISR] == {"t": [2]}  # min ISR 2 on t, 1 on u
            assert results[f.AT_MIN_ISR] == {"t": [0, 1], "u": [0]}
            assert results[f.UNAVAILABLE] == {"t": [2]}
            bad = await servicer.DescribeTopics(admin_pb2.DescribeTopicsRequest(
                health_filter=9), FakeContext(5.0))  # type: ignore[arg-type]
            assert bad.error.code == common_pb2.INVALID_REQUEST
        finally:
            await servicer.locator.close()
            for server in servers:
                await server.stop(0)
    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_reassignment_progress_compares_adding_replicas_with_the_leader() -> None:
    async def scenario() -> None:
        servers, servicer = await _joined_cluster()
        try:
            answer = await servicer.ListPartitionReassignments(
                controller_pb2.ListPartitionReassignmentsRequest(), FakeContext(5.0))
            assert answer.error.code == common_pb2.NONE
            (topic,) = answer.topics
            (partition,) = topic.partitions
            (progress,) = partition.progress
            assert (progress.replica_id, progress.size_bytes, progress.leader_size_bytes,
                    progress.bytes_behind) == (6, 1200, 5000, 3800)
            assert (progress.log_end_offset, progress.leader_log_end_offset) == (120, 500)
            assert not progress.in_sync and progress.error.code == common_pb2.NONE
        finally:
            await servicer.locator.close()
            for server in servers:
                await server.stop(0)
    asyncio.run(asyncio.wait_for(scenario(), 20))


def _message_class(message: descriptor.Descriptor) -> Any:
    return symbol_database.Default().GetSymbol(message.full_name)


ADMIN_OWN_RPCS = ("DescribeTopics", "ListTopics", "ListPartitionReassignments",
                  "CancelPartitionReassignments", "DescribeLogDirs", "QuorumHistory",
                  "DescribeQuorum")


def test_hostile_requests_to_the_admin_service_get_error_codes_not_crashes(
        caplog: pytest.LogCaptureFixture) -> None:
    """Every AdminService RPC that does more than forward (the controller validates what is
    forwarded) with random edge-value requests: each answers a response (error codes in
    it), never an exception, and no answer names a server path."""
    rng = random.Random(5)
    service = admin_pb2.DESCRIPTOR.services_by_name["AdminService"]

    async def scenario() -> dict[str, collections.Counter[str]]:
        servers, servicer = await _joined_cluster()
        codes: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        try:
            for rpc in ADMIN_OWN_RPCS:
                method = service.methods_by_name[rpc]
                request_cls = _message_class(method.input_type)
                for _ in range(25):
                    request = proto_fuzz.hostile(request_cls, rng, strings=("t", "u"),
                                                 ints=(0, 1, 2, 4, 5, 6))
                    # The fake controller answers some forwarded RPCs NOT_CONTROLLER, which
                    # the locator retries until the deadline: keep it short (175 calls).
                    answer = await getattr(servicer, rpc)(request, FakeContext(0.5))
                    codes[rpc][common_pb2.ErrorCode.Name(answer.error.code)] += 1
                    assert "/tmp" not in str(answer) and "/work" not in str(answer)
            refused = await servicer.DescribeLogDirs(admin_pb2.AdminDescribeLogDirsRequest(
                broker_ids=[4, -1]), FakeContext(2.0))
            assert refused.error.code == common_pb2.INVALID_REQUEST and not refused.brokers
            refused = await servicer.DescribeLogDirs(admin_pb2.AdminDescribeLogDirsRequest(
                topics=[common_pb2.TopicPartitions(topic="t", partitions=[1, -3])]),
                FakeContext(2.0))
            assert refused.error.code == common_pb2.INVALID_REQUEST
        finally:
            for server in servers:
                await server.stop(None)
        return codes

    codes = asyncio.run(scenario())
    assert set(codes) == set(ADMIN_OWN_RPCS)
    # (The fakes' own unimplemented RPCs log errors in grpc; the admin service logs none.)
    assert not [r.getMessage() for r in caplog.records
                if r.levelno >= logging.ERROR and r.name.startswith("kraftlog")]
