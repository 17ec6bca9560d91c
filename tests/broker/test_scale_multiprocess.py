"""3,000 partitions (RF 3) on three ``kraftlog broker`` processes: no fencing storm (issue 16).

Three controllers and three brokers on loopback with the short session timeouts of
tests/quorum_cluster.py (``broker.session.timeout.ms`` 1.5 s, heartbeats every 200 ms);
three topics of 1,000 partitions are created at once, so each broker creates 3,000
replicas (9,000 segment files, more than the 2,000-descriptor bound the brokers are given
here, so the handle cache evicts) while it keeps heartbeating. Checked: every partition
gets a leader and its full ISR on every broker's metadata; no broker is fenced (no
``event=brokers_fenced`` in the controllers' logs); every broker's gRPC health answers
SERVING to each check, 5 per second per broker, from the first CreateTopics to the end;
the descriptors a broker holds stay within the bound.
"""

from __future__ import annotations

import os
import pathlib
import threading
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kraftlog.v1 import broker_pb2, broker_pb2_grpc, common_pb2
from tests.quorum_cluster import BROKERS, NODES, running_cluster, wait_for

TOPICS = ("scale-a", "scale-b", "scale-c")
PARTITIONS_PER_TOPIC = 1000
MAX_OPEN_FILES = 2000


class HealthChecks:
    """gRPC health Check of each broker, ``hz`` per second, in threads, until :meth:`stop`."""

    def __init__(self, targets: list[str], hz: float) -> None:
        self.period_s = 1 / hz
        self.targets = targets
        self.failures: list[str] = []
        self.latencies_s: list[float] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(t,), daemon=True) for t in targets]

    def _run(self, target: str) -> None:
        with grpc.insecure_channel(target) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    answer = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2.0)
                    if answer.status != health_pb2.HealthCheckResponse.SERVING:
                        self.failures.append(f"{target}: {answer.status}")
                except grpc.RpcError as exc:
                    self.failures.append(f"{target}: {exc.code()}")
                self.latencies_s.append(time.monotonic() - started)
                self._stop.wait(max(0.0, self.period_s - (time.monotonic() - started)))

    def __enter__(self) -> HealthChecks:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(5)


def fully_replicated(stub: broker_pb2_grpc.BrokerServiceStub) -> bool | None:
    """True once the broker's metadata shows every partition of :data:`TOPICS` with a leader
    in a full ISR; None before (for wait_for)."""
    try:
        answer = stub.Metadata(broker_pb2.MetadataRequest(topics=list(TOPICS)), timeout=5)
    except grpc.RpcError:
        return None
    count = 0
    for topic in answer.topics:
        if topic.error.code != common_pb2.NONE:
            return None
        for p in topic.partitions:
            if p.leader_id < 0 or sorted(p.isr_nodes) != list(BROKERS) or p.leader_id not in p.isr_nodes:
                return None
            count += 1
    return True if count == len(TOPICS) * PARTITIONS_PER_TOPIC else None


def open_segment_files(pid: int, data_dir: pathlib.Path) -> int:
    prefix = str(data_dir) + os.sep
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(prefix):
                count += 1
        except OSError:
            continue
    return count


def test_three_thousand_partitions_without_fencing(tmp_path: pathlib.Path) -> None:
    started = time.monotonic()
    # Kafka's default replica.lag.time.max.ms (quorum_cluster's 3 s is for fast failover
    # tests): creating 3,000 replicas per broker takes longer than 3 s on this machine, and
    # a leader would (rightly) drop followers that have not created theirs yet.
    with running_cluster(tmp_path, broker_config={"kraftlog.log.max.open.files": MAX_OPEN_FILES,
                                                  "replica.lag.time.max.ms": 30_000},
                         serving_timeout_s=20) as running:
        brokers, controllers = running.brokers, running.controllers
        targets = [f"127.0.0.1:{brokers.ports[b]}" for b in BROKERS]
        with HealthChecks(targets, hz=5) as health:
            for topic in TOPICS:
                wait_for(lambda t=topic: controllers.create_topic(t, partitions=PARTITIONS_PER_TOPIC),
                         timeout_s=20, what=f"topic {topic} created")
            for broker in BROKERS:
                stub = brokers.stub(broker)
                wait_for(lambda s=stub: fully_replicated(s), timeout_s=40,
                         what=f"3,000 partitions led with full ISRs in broker {broker}'s metadata",
                         details=running.logs)
        fenced = [line for node in NODES
                  for line in (controllers.root / f"node-{node}.log").read_text().splitlines()
                  if "event=brokers_fenced" in line]
        assert not fenced, fenced
        assert not health.failures, health.failures[:10]
        assert len(health.latencies_s) >= 10
        for broker in BROKERS:
            held = open_segment_files(brokers.procs[broker].pid, tmp_path / f"broker-{broker}")
            # + the .lock, the metadata log's files and a checkpoint being written.
            assert held <= MAX_OPEN_FILES + 16, (broker, held)
    print(f"3,000 partitions: {time.monotonic() - started:.1f} s, health max "
          f"{max(health.latencies_s) * 1000:.0f} ms over {len(health.latencies_s)} checks")
