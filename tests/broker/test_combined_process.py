"""``kraftlog server --roles controller,broker``: Kafka's combined mode in one process.

One node is controller and broker at once, on one metadata log: it elects itself,
registers its broker with its own controller, serves produce and fetch, shuts down
in order on SIGTERM (controlled shutdown answered by the still-running controller,
then the raft leader resigns; exit 0), and on restart registers at once (its clean
shutdown marker carries the broker epoch) and serves every acknowledged record.
"""

from __future__ import annotations

import pathlib
import signal
import subprocess
import sys
import time

import grpc

from kraftlog.storage import record_batch as rb
from kraftlog.v1 import broker_pb2, broker_pb2_grpc, common_pb2, controller_pb2, controller_pb2_grpc
from tests.quorum_cluster import CLUSTER_ID, free_ports, kraftlog, wait_for


def write_config(root: pathlib.Path) -> tuple[pathlib.Path, int, int]:
    controller_port, broker_port = free_ports(2)
    data = root / "data"
    done = kraftlog("storage", "format", "--cluster-id", CLUSTER_ID, "--node-id", "1",
                    "--data-dir", str(data))
    assert done.returncode == 0, done.stderr
    config = root / "server.properties"
    config.write_text("\n".join([
        "node.id=1", "process.roles=broker,controller",
        f"controller.quorum.voters=1@127.0.0.1:{controller_port}",
        f"listeners=PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}",
        f"log.dirs={data}", "default.replication.factor=1", "min.insync.replicas=1",
        "controller.quorum.election.timeout.ms=300"]) + "\n")
    return config, controller_port, broker_port


def start(root: pathlib.Path, config: pathlib.Path) -> subprocess.Popen[bytes]:
    with (root / "server.log").open("ab") as log:
        return subprocess.Popen([sys.executable, "-m", "kraftlog", "server", "--roles",
                                 "controller,broker", "--config", str(config)],
                                stdout=log, stderr=log, start_new_session=True)


def fetch_values(port: int) -> list[bytes] | None:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            answer = broker_pb2_grpc.BrokerServiceStub(channel).Fetch(broker_pb2.FetchRequest(
                replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                topics=[broker_pb2.FetchRequest.FetchTopic(topic="t", partitions=[
                    broker_pb2.FetchRequest.FetchPartition(
                        partition=0, current_leader_epoch=-1, fetch_offset=0,
                        last_fetched_epoch=-1, log_start_offset=-1,
                        partition_max_bytes=1 << 20)])]), timeout=2)
        except grpc.RpcError:
            return None
    if not answer.responses:  # not serving yet: a top-level error
        return None
    data = answer.responses[0].partitions[0]
    if data.error.code != common_pb2.NONE:
        return None
    return [r.value or b"" for b in rb.decode_batches(data.records) for r in b.records]


def test_combined_node_serves_both_roles_and_stops_in_order(tmp_path: pathlib.Path) -> None:
    config, controller_port, broker_port = write_config(tmp_path)
    proc = start(tmp_path, config)
    logs = lambda: (tmp_path / "server.log").read_text()[-4000:]  # noqa: E731
    try:
        def create() -> bool | None:
            with grpc.insecure_channel(f"127.0.0.1:{controller_port}") as channel:
                try:
                    answer = controller_pb2_grpc.ControllerServiceStub(channel).CreateTopics(
                        controller_pb2.CreateTopicsRequest(topics=[
                            controller_pb2.CreateTopicsRequest.CreatableTopic(
                                name="t", num_partitions=1, replication_factor=1)],
                            timeout_ms=2000), timeout=3)
                except grpc.RpcError:
                    return None
            if answer.error.code != common_pb2.NONE or \
                    answer.topics[0].error.code == common_pb2.INVALID_REPLICATION_FACTOR:
                return None  # no controller yet, or the broker is not unfenced yet
            assert answer.topics[0].error.code in (common_pb2.NONE,
                                                   common_pb2.TOPIC_ALREADY_EXISTS), answer
            return True
        wait_for(create, timeout_s=30, what="CreateTopics on the combined node")

        def produce() -> bool | None:
            batch = rb.build_batch([rb.RecordInput(value=b"v%d" % i, timestamp_ms=None)
                                    for i in range(5)], now_ms=int(time.time() * 1000))
            with grpc.insecure_channel(f"127.0.0.1:{broker_port}") as channel:
                try:
                    answer = broker_pb2_grpc.BrokerServiceStub(channel).Produce(
                        broker_pb2.ProduceRequest(acks=-1, timeout_ms=2000, topic_data=[
                            broker_pb2.ProduceRequest.TopicProduceData(name="t", partition_data=[
                                broker_pb2.ProduceRequest.PartitionProduceData(
                                    index=0, records=batch)])]), timeout=3)
                except grpc.RpcError:
                    return None
            code = answer.responses[0].partition_responses[0].error.code
            return True if code == common_pb2.NONE else None
        wait_for(produce, timeout_s=30, what="an acknowledged produce")
        expected = [b"v%d" % i for i in range(5)]
        assert wait_for(lambda: fetch_values(broker_port) or None, timeout_s=10,
                        what="fetch") == expected

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, logs()
        text = logs()
        assert "event=controlled_shutdown completed=True" in text, text
        assert text.index("controlled_shutdown completed=True") < text.index("graceful resign")

        proc = start(tmp_path, config)
        assert wait_for(lambda: fetch_values(broker_port) or None, timeout_s=30,
                        what="fetch after restart") == expected
        # The clean shutdown left its broker epoch behind (KIP-966): the new incarnation
        # registers at once instead of waiting out the old session as a duplicate.
        assert "DUPLICATE_BROKER_REGISTRATION" not in logs()
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_bad_roles_are_refused(tmp_path: pathlib.Path) -> None:
    config, _, _ = write_config(tmp_path)
    done = kraftlog("server", "--roles", "controller,zookeeper", "--config", str(config))
    assert done.returncode == 1
    assert "roles must be controller, broker or both" in done.stderr
    assert "Traceback" not in done.stderr
