"""``kraftlog dev up --security mtls``: every listener SSL with client certificates, as
processes. A client without a certificate is refused; with the generated client properties
topics, produce (acks=all) and consume work; and the forged replica Fetch of the security
issue (the real follower paused, raw Fetches naming it sent to the leader) can no longer
keep the paused follower in the ISR: from a certificate that is not the follower's it is
CLUSTER_AUTHORIZATION_FAILED, from the follower's own with a broker epoch of -1 it is
STALE_BROKER_EPOCH (KIP-903), and the ISR shrinks as if nobody had fetched."""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import time

from kraftlog import client, rpc
from kraftlog import config as kconfig
from kraftlog.security import tls
from kraftlog.v1 import broker_pb2, broker_pb2_grpc, common_pb2
from tests.dev_cluster import DevCluster, kraftlog

LAG_MS = 1500


def keystore(cluster: DevCluster, name: str) -> tls.ClientTls:
    directory = cluster.directory / "tls"
    return tls.ClientTls(trusted=(directory / "ca.pem").read_bytes(),
                         keypair=tls.split_keystore((directory / f"{name}.pem").read_bytes(),
                                                    origin=name))


def forged_fetch(target: str, who: tls.ClientTls, *, replica_id: int, epoch: int,
                 offset: int) -> broker_pb2.FetchResponse:
    with rpc.sync_channel(target, client_tls=who) as channel:
        answer: broker_pb2.FetchResponse = broker_pb2_grpc.BrokerServiceStub(channel).Fetch(
            broker_pb2.FetchRequest(
                replica_id=replica_id, replica_epoch=epoch, max_wait_ms=0,
                topics=[broker_pb2.FetchRequest.FetchTopic(topic="demo", partitions=[
                    broker_pb2.FetchRequest.FetchPartition(
                        partition=0, current_leader_epoch=-1, fetch_offset=offset,
                        last_fetched_epoch=-1, log_start_offset=-1,
                        partition_max_bytes=1024)])]), timeout=5)
    return answer


def test_mtls_cluster_refuses_strangers_and_forged_replica_fetches(
        tmp_path: pathlib.Path) -> None:
    cluster = DevCluster(tmp_path / "cluster")
    try:
        cluster.up("--security", "mtls", "--controllers", "1", "--no-admin",
                   "--broker-config", f"replica.lag.time.max.ms={LAG_MS}")
        bootstrap = cluster.broker(101)
        secured = {"KRAFTLOG_BOOTSTRAP_SERVER": bootstrap,
                   "KRAFTLOG_COMMAND_CONFIG": str(cluster.directory / "client.properties")}

        refused = kraftlog("topics", "list", "--bootstrap-server", bootstrap,
                           "--timeout-ms", "1000")
        assert refused.returncode == 1 and "UNAVAILABLE" in refused.stderr, refused.stderr

        created = kraftlog("topics", "create", "--topic", "demo", "--partitions", "1",
                           "--replication-factor", "3", env=secured)
        assert created.returncode == 0, created.stderr

        # The client library takes the same properties (security.protocol, ssl.*).
        properties, _ = kconfig.load_properties(cluster.directory / "client.properties")
        with client.Producer(client.ProducerConfig.from_properties(
                {**properties, "acks": "all"})) as producer:
            for future in [producer.send("demo", str(i).encode()) for i in range(100)]:
                future.result(timeout=30)
        with client.Consumer(client.ConsumerConfig.from_properties(properties)) as consumer:
            consumer.assign_topic("demo")
            consumer.seek_to_beginning()
            values: list[bytes | None] = []
            deadline = time.monotonic() + 30
            while len(values) < 100 and time.monotonic() < deadline:
                values += [r.value for r in consumer.poll(timeout_ms=500)]
        assert values == [str(i).encode() for i in range(100)]

        admin_tls = keystore(cluster, "client")

        def isr() -> tuple[int, list[int]]:
            with rpc.sync_channel(bootstrap, client_tls=admin_tls) as channel:
                answer = broker_pb2_grpc.BrokerServiceStub(channel).Metadata(
                    broker_pb2.MetadataRequest(topics=["demo"]), timeout=5)
            part = answer.topics[0].partitions[0]
            return part.leader_id, sorted(part.isr_nodes)

        leader, members = isr()
        assert len(members) == 3
        follower = max(b for b in members if b != leader)
        pid = int((cluster.directory / f"broker-{follower}.pid").read_text())
        os.kill(pid, signal.SIGSTOP)
        try:
            stranger, own = admin_tls, keystore(cluster, f"broker-{follower}")
            deadline = time.monotonic() + 30
            codes: set[int] = set()
            while follower in isr()[1]:
                assert time.monotonic() < deadline, "forged fetches kept the follower in the ISR"
                for who, epoch in ((stranger, 0), (own, -1)):
                    answer = forged_fetch(cluster.broker(leader), who, replica_id=follower,
                                          epoch=epoch, offset=100)
                    codes.add(answer.error.code)
                time.sleep(0.1)
            assert codes == {common_pb2.CLUSTER_AUTHORIZATION_FAILED,
                             common_pb2.STALE_BROKER_EPOCH}
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        # Nothing here needs a clean shutdown: SIGKILL saves the controlled shutdowns' time.
        for pid_file in cluster.directory.glob("*.pid"):
            with contextlib.suppress(ValueError, OSError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
        cluster.destroy()
