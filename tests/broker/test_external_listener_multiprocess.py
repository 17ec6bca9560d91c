"""A broker serves every broker listener: the Helm chart's EXTERNAL one next to PLAINTEXT.

Three brokers each listen on PLAINTEXT (advertised as 127.0.0.1, the "pod DNS" of this
test) and on EXTERNAL (advertised as ``localhost``, the "node address" an outside client
uses). Metadata answered on each port names that listener's endpoints (Kafka's rule:
the listener the request came in on), so a client that bootstraps from the EXTERNAL
ports is sent to EXTERNAL addresses only, and produces and reads back through them;
an admin command works through an EXTERNAL port too (KIP-590). A listener missing from
``advertised.listeners`` is refused at start.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import grpc

from kraftlog.client import config as client_config
from kraftlog.client import consumer as client_consumer
from kraftlog.client import producer as client_producer
from kraftlog.ids import TopicPartition
from kraftlog.v1 import broker_pb2, broker_pb2_grpc
from tests.quorum_cluster import BROKERS, RunningCluster, Topic, free_ports, running_cluster

TOPIC = "outside"


def _metadata(address: str) -> set[str]:
    with grpc.insecure_channel(address) as channel:
        answer = broker_pb2_grpc.BrokerServiceStub(channel).Metadata(
            broker_pb2.MetadataRequest(topics=[TOPIC]), timeout=5)
    return {f"{b.endpoint.listener_name}://{b.endpoint.host}:{b.endpoint.port}"
            for b in answer.brokers}


def test_each_listener_answers_metadata_with_its_own_endpoints(tmp_path: pathlib.Path) -> None:
    external = dict(zip(BROKERS, free_ports(len(BROKERS)), strict=True))

    def two_listeners(running: RunningCluster) -> None:
        for broker in BROKERS:
            internal = running.brokers.ports[broker]
            with running.brokers.config(broker).open("a") as config:
                config.write(
                    f"listeners=PLAINTEXT://127.0.0.1:{internal},"
                    f"EXTERNAL://127.0.0.1:{external[broker]}\n"
                    f"advertised.listeners=PLAINTEXT://127.0.0.1:{internal},"
                    f"EXTERNAL://localhost:{external[broker]}\n"
                    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT,"
                    "CONTROLLER:PLAINTEXT\n")

    with running_cluster(tmp_path, topics=[Topic(name=TOPIC, partitions=3)],
                         prepare=two_listeners) as cluster:
        internal = {b: f"127.0.0.1:{cluster.brokers.ports[b]}" for b in BROKERS}
        assert _metadata(internal[4]) == {f"PLAINTEXT://{a}" for a in internal.values()}
        outside = [f"localhost:{external[b]}" for b in BROKERS]
        assert _metadata(outside[0]) == {f"EXTERNAL://{a}" for a in outside}

        values = [f"v{i}".encode() for i in range(60)]
        with client_producer.Producer(client_config.ProducerConfig(
                bootstrap_servers=(outside[1],), acks=client_config.Acks.ALL)) as producer:
            for value in values:
                producer.send(TOPIC, value, key=value)
            producer.flush(timeout_ms=20_000)
        read: list[bytes] = []
        with client_consumer.Consumer(client_config.ConsumerConfig(
                bootstrap_servers=(outside[2],),
                auto_offset_reset=client_config.OffsetReset.EARLIEST)) as consumer:
            tps = [TopicPartition(topic=TOPIC, partition=p) for p in range(3)]
            consumer.assign(tps)
            for _ in range(40):
                read += [r.value or b"" for r in consumer.poll(timeout_ms=500)]
                if len(read) >= len(values):
                    break
        assert sorted(read) == sorted(values)

        described = subprocess.run(
            [sys.executable, "-m", "kraftlog", "topics", "describe", "--topic", TOPIC,
             "--bootstrap-server", outside[0]], capture_output=True, text=True, timeout=60,
            check=False)
        assert described.returncode == 0, described.stderr
        assert f"Topic: {TOPIC}" in described.stdout

        # A listener clients could not be told about is a configuration error.
        config = cluster.brokers.config(6)
        config.write_text(config.read_text() + f"advertised.listeners=PLAINTEXT://127.0.0.1:"
                                               f"{cluster.brokers.ports[6]}\n")
        cluster.brokers.kill(6)
        done = subprocess.run([sys.executable, "-m", "kraftlog", "broker", "--config",
                               str(config)], capture_output=True, text=True, timeout=60,
                              check=False)
        assert done.returncode == 1
        assert "listener EXTERNAL is not in advertised.listeners" in done.stderr, done.stderr
