"""Three ``kraftlog controller`` processes hosting the QuorumController, driven over gRPC.

Brokers are played by the test (BrokerRegistration + BrokerHeartbeat RPCs). The scenario:
the active controller bootstraps the cluster, registers and unfences brokers, creates
topics; a follower is killed, the leader writes past a small snapshot threshold so its log
starts after the follower's end; the follower restarts and catches up through
FetchSnapshot (KIP-630), loading the snapshot into its controller; the leader is killed
and the new active controller still knows every topic (TOPIC_ALREADY_EXISTS) and answers
standbys' NOT_CONTROLLER hints. Every wait is bounded.
"""

from __future__ import annotations

import pathlib
import time
import uuid

import grpc

from kraftlog.v1 import common_pb2, controller_pb2, controller_pb2_grpc
from tests.quorum_cluster import CLUSTER_ID, NODES, Cluster, end_offsets, wait_for

NOT_CONTROLLER = common_pb2.NOT_CONTROLLER
SNAPSHOT_SETTINGS = {
    "metadata.log.max.record.bytes.between.snapshots": 2000,
    "metadata.max.idle.interval.ms": 200,
    "broker.session.timeout.ms": 60000,
}
BROKERS = (101, 102, 103)


def stub(cluster: Cluster, node: int) -> controller_pb2_grpc.ControllerServiceStub:
    channel = grpc.insecure_channel(f"127.0.0.1:{cluster.ports[node]}")
    return controller_pb2_grpc.ControllerServiceStub(channel)


def active_controller(cluster: Cluster) -> int | None:
    """The node whose DescribeCluster succeeds; checks the others' NOT_CONTROLLER hints."""
    answers: dict[int, controller_pb2.DescribeClusterResponse] = {}
    for node in cluster.procs:
        try:
            answers[node] = stub(cluster, node).DescribeCluster(
                controller_pb2.DescribeClusterRequest(include_fenced_brokers=True), timeout=2)
        except grpc.RpcError:
            continue
    active = [n for n, a in answers.items() if a.error.code == common_pb2.NONE]
    if len(active) != 1:
        return None
    for node, answer in answers.items():
        if node != active[0]:
            assert answer.error.code == NOT_CONTROLLER, answer
            if answer.active_controller.leader_id not in (-1, active[0]):
                return None  # a stale hint right after an election: look again
    return active[0]


def register_brokers(cluster: Cluster, node: int) -> dict[int, int]:
    epochs = {}
    for broker in BROKERS:
        answer = stub(cluster, node).BrokerRegistration(controller_pb2.BrokerRegistrationRequest(
            broker_id=broker, cluster_id=CLUSTER_ID,
            incarnation_id=common_pb2.Uuid(most_significant_bits=uuid.uuid4().int >> 64,
                                           least_significant_bits=broker),
            listeners=[common_pb2.Endpoint(host="127.0.0.1", port=9000 + broker,
                                           listener_name="PLAINTEXT",
                                           security_protocol="PLAINTEXT")],
            features=[common_pb2.SupportedFeature(name="metadata.version",
                                                  min_supported_version=1,
                                                  max_supported_version=1)],
            rack=f"rack-{broker % 2}"), timeout=5)
        assert answer.error.code == common_pb2.NONE, answer
        epochs[broker] = answer.broker_epoch
    return epochs


def heartbeat_until_unfenced(cluster: Cluster, node: int, epochs: dict[int, int]) -> None:
    def all_unfenced() -> bool | None:
        fenced = []
        for broker, epoch in epochs.items():
            answer = stub(cluster, node).BrokerHeartbeat(controller_pb2.BrokerHeartbeatRequest(
                broker_id=broker, broker_epoch=epoch, current_metadata_offset=1 << 40),
                timeout=5)
            assert answer.error.code == common_pb2.NONE, answer
            if answer.is_fenced:
                fenced.append(broker)
        return True if not fenced else None
    wait_for(all_unfenced, timeout_s=10, what="brokers unfenced", cluster=cluster)


def create_topic(cluster: Cluster, node: int, name: str) -> int:
    answer = stub(cluster, node).CreateTopics(controller_pb2.CreateTopicsRequest(
        topics=[controller_pb2.CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=3, replication_factor=3)]), timeout=10)
    assert answer.error.code == common_pb2.NONE, answer
    code: int = answer.topics[0].error.code
    return code


def snapshots(cluster: Cluster, node: int) -> list[int]:
    directory = cluster.data_dir(node) / "__cluster_metadata-0"
    return sorted(int(p.name.split("-")[0]) for p in directory.glob("*.checkpoint")
                  if int(p.name.split("-")[0]) > 0)


def test_controllers_bootstrap_create_topics_snapshot_catch_up_and_fail_over(
        tmp_path: pathlib.Path) -> None:
    cluster = Cluster(tmp_path, extra=SNAPSHOT_SETTINGS)
    try:
        for node in NODES:
            cluster.start(node)
        leader = wait_for(lambda: active_controller(cluster), timeout_s=20,
                          what="an active controller", cluster=cluster)
        epochs = register_brokers(cluster, leader)
        heartbeat_until_unfenced(cluster, leader, epochs)
        assert create_topic(cluster, leader, "orders") == common_pb2.NONE
        assert create_topic(cluster, leader, "orders") == common_pb2.TOPIC_ALREADY_EXISTS

        # A follower goes away; the leader writes past the snapshot threshold.
        follower = next(n for n in NODES if n != leader)
        cluster.kill(follower)
        stopped_at = end_offsets(wait_for(cluster.leader_view, timeout_s=5,
                                          what="a leader view", cluster=cluster))[follower]
        names = [f"topic-{i}" for i in range(25)]
        for name in names:
            assert create_topic(cluster, leader, name) == common_pb2.NONE
        wait_for(lambda: (snapshots(cluster, leader) and snapshots(cluster, leader)[-1]
                          > stopped_at) or None, timeout_s=15,
                 what=f"a snapshot on node {leader} past offset {stopped_at}", cluster=cluster)

        # Restarted, it is behind the leader's log start: it must fetch the snapshot.
        cluster.start(follower)

        def follower_caught_up() -> bool | None:
            view = cluster.leader_view()
            if view is None:
                return None
            return True if end_offsets(view)[follower] >= view.high_watermark - 5 else None
        wait_for(follower_caught_up, timeout_s=20, what="the restarted follower catching up",
                 cluster=cluster)
        follower_log = (tmp_path / f"node-{follower}.log").read_text()
        assert "controller_snapshot_loaded" in follower_log, follower_log[-3000:]

        # The active controller dies; its successor knows everything that was committed.
        cluster.kill(leader)
        started = time.monotonic()
        new_leader = wait_for(lambda: active_controller(cluster), timeout_s=20,
                              what="a new active controller", cluster=cluster)
        print(f"controller failover: {time.monotonic() - started:.2f}s")
        assert new_leader != leader
        for name in ["orders", *names]:
            assert create_topic(cluster, new_leader, name) == common_pb2.TOPIC_ALREADY_EXISTS
    finally:
        cluster.kill_all()
