"""Controller spans from real ``kraftlog controller`` processes, exported over OTLP.

Brokers are played by the test (BrokerRegistration + BrokerHeartbeat RPCs). Two brokers
register and are unfenced, a topic with replication factor 2 is created, then the brokers
stop heartbeating: the active controller fences them, and the spans
``controller.broker_fenced`` and ``controller.partition_leader_election`` (reason
``fenced_broker``, old leader one of the brokers) reach the collector from the active
controller's process. Every wait is bounded; every child is killed in a ``finally``.
"""

from __future__ import annotations

import pathlib
import uuid

import grpc
import pytest

from kraftlog.v1 import common_pb2, controller_pb2, controller_pb2_grpc
from tests.quorum_cluster import CLUSTER_ID, NODES, Cluster, wait_for
from tests.telemetry.otlp_receiver import OtlpReceiver, ReceivedSpan

BROKERS = (101, 102)


def _stub(cluster: Cluster, node: int) -> controller_pb2_grpc.ControllerServiceStub:
    return controller_pb2_grpc.ControllerServiceStub(
        grpc.insecure_channel(f"127.0.0.1:{cluster.ports[node]}"))


def _active(cluster: Cluster) -> int | None:
    for node in cluster.procs:
        try:
            answer = _stub(cluster, node).DescribeCluster(
                controller_pb2.DescribeClusterRequest(), timeout=2)
        except grpc.RpcError:
            continue
        if answer.error.code == common_pb2.NONE:
            return node
    return None


def test_fencing_brokers_exports_fence_and_partition_election_spans(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with OtlpReceiver() as receiver:
        for key, value in receiver.env().items():
            monkeypatch.setenv(key, value)  # the controller processes inherit them
        cluster = Cluster(tmp_path, {"broker.session.timeout.ms": 1500,
                                     "broker.heartbeat.interval.ms": 200})
        try:
            for node in NODES:
                cluster.start(node)
            leader = wait_for(lambda: _active(cluster), timeout_s=20,
                              what="an active controller", cluster=cluster)
            stub = _stub(cluster, leader)
            epochs = {}
            for broker in BROKERS:
                answer = stub.BrokerRegistration(controller_pb2.BrokerRegistrationRequest(
                    broker_id=broker, cluster_id=CLUSTER_ID,
                    incarnation_id=common_pb2.Uuid(most_significant_bits=uuid.uuid4().int >> 64,
                                                   least_significant_bits=broker),
                    listeners=[common_pb2.Endpoint(host="127.0.0.1", port=9000 + broker,
                                                   listener_name="PLAINTEXT",
                                                   security_protocol="PLAINTEXT")],
                    features=[common_pb2.SupportedFeature(name="metadata.version",
                                                          min_supported_version=1,
                                                          max_supported_version=1)]),
                    timeout=5)
                assert answer.error.code == common_pb2.NONE, answer
                epochs[broker] = answer.broker_epoch

            def unfenced() -> bool | None:
                fenced = [b for b, e in epochs.items() if stub.BrokerHeartbeat(
                    controller_pb2.BrokerHeartbeatRequest(
                        broker_id=b, broker_epoch=e, current_metadata_offset=1 << 40),
                    timeout=5).is_fenced]
                return None if fenced else True

            wait_for(unfenced, timeout_s=10, what="brokers unfenced", cluster=cluster)
            created = stub.CreateTopics(controller_pb2.CreateTopicsRequest(topics=[
                controller_pb2.CreateTopicsRequest.CreatableTopic(
                    name="orders", num_partitions=1, replication_factor=2)]), timeout=10)
            assert created.topics[0].error.code == common_pb2.NONE, created
            # No more heartbeats: both brokers' sessions run out.

            def fenced_and_elected(spans: list[ReceivedSpan]) -> list[ReceivedSpan] | None:
                fences = {s.attributes["broker.id"] for s in spans
                          if s.name == "controller.broker_fenced"}
                elections = [s for s in spans if s.name == "controller.partition_leader_election"
                             and s.attributes["reason"] == "fenced_broker"]
                return elections if fences == set(BROKERS) and elections else None

            elections = receiver.wait_for(fenced_and_elected, timeout_s=15)
            election = elections[0]
            assert election.instance == f"controller-{leader}"
            assert election.attributes["topic"] == "orders"
            assert election.attributes["partition"] == 0
            assert election.attributes["old_leader"] in BROKERS
            assert election.attributes["controller.operation"] == "FenceStaleBrokers"
            assert election.status_code == 1  # STATUS_CODE_OK: its records committed
            fence = next(s for s in receiver.spans if s.name == "controller.broker_fenced")
            assert fence.attributes["reason"] == "fenced_broker"
        finally:
            cluster.kill_all()
