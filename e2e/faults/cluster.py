"""The cluster under test: three controllers and three brokers, each in its own namespace.

Owns the run's layout (:data:`CONTROLLERS`, :data:`BROKERS`, :func:`hosts`: node ids,
namespace hosts and addresses), writing each node's ``server.properties`` and
formatting its storage (:func:`prepare`, as ``tests/quorum_cluster.py`` does on
loopback), and :class:`Nodes`, which starts each node as ``kraftlog controller|broker
--config FILE`` inside its namespace, signals it (SIGKILL, SIGSTOP/SIGCONT, SIGTERM)
and restarts it, and answers the nemesis's questions over gRPC: which controller is
active (DescribeQuorum), which broker leads a partition and whether every ISR is whole
(Metadata), what the quorum's high watermark is.

Every node listens on a fixed port of its own address: the addresses are private to
the run's namespaces, so nothing else can hold them. Timeouts are short (elections in
about a second, a dead broker fenced in 3 s) so a fault of a few seconds shows.
Every wait is bounded. Called by :mod:`.driver` inside the client namespace; edge
module (processes, gRPC, the clock).
"""

from __future__ import annotations

import contextlib
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import grpc

from e2e.faults import netns
from kraftlog.v1 import (
    broker_pb2,
    broker_pb2_grpc,
    common_pb2,
    controller_pb2,
    controller_pb2_grpc,
    raft_pb2,
    raft_pb2_grpc,
)

CLUSTER_ID = "RmF1bHRJbmplY3Rpb24xMQ"
CONTROLLERS = (1, 2, 3)
BROKERS = (4, 5, 6)
CONTROLLER_PORT = 9093
BROKER_PORT = 9092
CLIENT_HOST = "client"
RPC_TIMEOUT_S = 1.0

CONTROLLER_SETTINGS: Mapping[str, object] = {
    "controller.quorum.election.timeout.ms": 1000,
    "controller.quorum.fetch.timeout.ms": 2000,
    "controller.quorum.election.backoff.max.ms": 1000,
    "controller.quorum.request.timeout.ms": 1500,
    "controller.quorum.retry.backoff.ms": 50,
    "controller.quorum.fetch.max.wait.ms": 300,
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 300,
    "metadata.max.idle.interval.ms": 500,
    # Keep the whole metadata log (no snapshot moves its start) so its history is complete.
    "metadata.log.max.record.bytes.between.snapshots": 1 << 40,
    "metadata.log.max.snapshot.interval.ms": 0,
}
BROKER_SETTINGS: Mapping[str, object] = {
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 300,
    "replica.lag.time.max.ms": 3000,
    "replica.fetch.wait.max.ms": 200,
    "replica.fetch.backoff.ms": 100,
    "controller.quorum.request.timeout.ms": 1500,
    "controller.quorum.fetch.timeout.ms": 2000,
    "controller.quorum.fetch.max.wait.ms": 300,
    "controller.quorum.retry.backoff.ms": 50,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    node_id: int
    role: str
    """``controller`` or ``broker``."""

    @property
    def name(self) -> str:
        return f"{self.role}-{self.node_id}"

    @property
    def host(self) -> str:
        return f"{self.role[0]}{self.node_id}"

    @property
    def address(self) -> str:
        return f"{netns.SUBNET}.{10 + self.node_id}"

    @property
    def endpoint(self) -> str:
        port = CONTROLLER_PORT if self.role == "controller" else BROKER_PORT
        return f"{self.address}:{port}"


NODES = tuple([Node(node_id=i, role="controller") for i in CONTROLLERS]
              + [Node(node_id=i, role="broker") for i in BROKERS])
BY_ID = {n.node_id: n for n in NODES}


def hosts() -> list[netns.Host]:
    return [netns.Host(name=n.host, address=n.address) for n in NODES] + [
        netns.Host(name=CLIENT_HOST, address=f"{netns.SUBNET}.100")]


def data_dir(root: pathlib.Path, node: Node) -> pathlib.Path:
    return root / node.name


def config_path(root: pathlib.Path, node: Node) -> pathlib.Path:
    return root / f"{node.name}.properties"


def log_path(root: pathlib.Path, node: Node) -> pathlib.Path:
    return root / f"{node.name}.log"


def prepare(root: pathlib.Path) -> None:
    """Write every node's properties and format its storage (once per run)."""
    voters = ",".join(f"{n.node_id}@{n.endpoint}" for n in NODES if n.role == "controller")
    for node in NODES:
        data = data_dir(root, node)
        done = subprocess.run(
            [sys.executable, "-m", "kraftlog", "storage", "format", "--cluster-id", CLUSTER_ID,
             "--node-id", str(node.node_id), "--data-dir", str(data)],
            capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"formatting {data} failed: {done.stderr.strip()}")
        if node.role == "controller":
            lines = [f"node.id={node.node_id}", "process.roles=controller",
                     f"controller.quorum.voters={voters}",
                     f"listeners=CONTROLLER://{node.endpoint}", f"metadata.log.dir={data}"]
            settings = CONTROLLER_SETTINGS
        else:
            lines = [f"node.id={node.node_id}", "process.roles=broker",
                     f"controller.quorum.voters={voters}",
                     f"listeners=PLAINTEXT://{node.endpoint}", f"log.dirs={data}"]
            settings = BROKER_SETTINGS
        lines += [f"{k}={v}" for k, v in settings.items()]
        config_path(root, node).write_text("\n".join(lines) + "\n")


class Nodes:
    """The node processes of one run (started inside their namespaces)."""

    def __init__(self, root: pathlib.Path, network: netns.Network) -> None:
        self.root = root
        self.network = network
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.paused: set[int] = set()

    # -- processes ------------------------------------------------------------------------------

    def start(self, node_id: int) -> None:
        node = BY_ID[node_id]
        if node_id in self.procs and self.procs[node_id].poll() is None:
            return
        with log_path(self.root, node).open("ab") as log:
            log.write(f"=== start {time.strftime('%H:%M:%S')}\n".encode())
            log.flush()
            self.procs[node_id] = subprocess.Popen(
                self.network.exec_argv(node.host, [
                    sys.executable, "-m", "kraftlog", node.role, "--config",
                    str(config_path(self.root, node))]),
                stdout=log, stderr=log, start_new_session=True)

    def start_all(self) -> None:
        for node in NODES:
            self.start(node.node_id)

    def alive(self, node_id: int) -> bool:
        proc = self.procs.get(node_id)
        return proc is not None and proc.poll() is None

    def signal(self, node_id: int, signum: signal.Signals) -> None:
        proc = self.procs.get(node_id)
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)
        if signum is signal.SIGSTOP:
            self.paused.add(node_id)
        elif signum in (signal.SIGCONT, signal.SIGKILL):
            self.paused.discard(node_id)

    def kill(self, node_id: int) -> None:
        """SIGKILL and reap."""
        proc = self.procs.get(node_id)
        if proc is None:
            return
        self.signal(node_id, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)

    def stop(self, node_ids: Sequence[int], *, timeout_s: float = 30) -> list[str]:
        """SIGTERM (a clean stop), SIGKILL whoever outlives ``timeout_s``; what needed it."""
        notes = []
        for node_id in node_ids:
            self.signal(node_id, signal.SIGCONT)
            self.signal(node_id, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for node_id in node_ids:
            proc = self.procs.get(node_id)
            if proc is None:
                continue
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                notes.append(f"{BY_ID[node_id].name} did not stop within {timeout_s:g}s of "
                             "SIGTERM: SIGKILLed")
                self.kill(node_id)
        return notes

    def kill_all(self) -> None:
        for node_id in list(self.procs):
            self.kill(node_id)

    # -- questions ------------------------------------------------------------------------------

    def describe_quorum(self, node_id: int) -> raft_pb2.DescribeQuorumResponse | None:
        if not self.alive(node_id) or node_id in self.paused:
            return None
        try:
            with grpc.insecure_channel(BY_ID[node_id].endpoint) as channel:
                answer: raft_pb2.DescribeQuorumResponse = raft_pb2_grpc.RaftServiceStub(
                    channel).DescribeQuorum(raft_pb2.DescribeQuorumRequest(),
                                            timeout=RPC_TIMEOUT_S)
                return answer
        except grpc.RpcError:
            return None

    def active_controller(self) -> tuple[int, raft_pb2.DescribeQuorumResponse] | None:
        """The controller that answers DescribeQuorum as leader (highest epoch wins)."""
        best: tuple[int, raft_pb2.DescribeQuorumResponse] | None = None
        for node_id in CONTROLLERS:
            answer = self.describe_quorum(node_id)
            if answer is None or answer.error.code != common_pb2.NONE:
                continue
            if best is None or answer.leader_epoch > best[1].leader_epoch:
                best = (node_id, answer)
        return best

    def wait_active_controller(self, timeout_s: float) -> int | None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = self.active_controller()
            if found is not None:
                return found[0]
            time.sleep(0.2)
        return None

    def metadata(self, broker_id: int, topic: str) -> broker_pb2.MetadataResponse | None:
        if not self.alive(broker_id) or broker_id in self.paused:
            return None
        try:
            with grpc.insecure_channel(BY_ID[broker_id].endpoint) as channel:
                answer: broker_pb2.MetadataResponse = broker_pb2_grpc.BrokerServiceStub(
                    channel).Metadata(broker_pb2.MetadataRequest(topics=[topic]),
                                      timeout=RPC_TIMEOUT_S)
                return answer
        except grpc.RpcError:
            return None

    def partition_views(self, topic: str) -> dict[int, tuple[int, int, tuple[int, ...]]]:
        """Partition -> (leader, leader epoch, ISR) with the highest epoch any broker reports."""
        best: dict[int, tuple[int, int, tuple[int, ...]]] = {}
        for broker_id in BROKERS:
            answer = self.metadata(broker_id, topic)
            if answer is None or not answer.topics or \
                    answer.topics[0].error.code != common_pb2.NONE:
                continue
            for p in answer.topics[0].partitions:
                view = (p.leader_id, p.leader_epoch, tuple(sorted(p.isr_nodes)))
                if p.partition_index not in best or view[1] > best[p.partition_index][1]:
                    best[p.partition_index] = view
        return best

    def leader_of(self, topic: str, partition: int) -> int | None:
        view = self.partition_views(topic).get(partition)
        return view[0] if view is not None and view[0] in BROKERS else None

    def isr_whole(self, topic: str, partitions: int) -> bool:
        """Every broker answers, and each one's metadata shows every partition with a leader
        and all replicas in its ISR (so a broker with a stale image cannot say so early)."""
        for broker_id in BROKERS:
            answer = self.metadata(broker_id, topic)
            if answer is None or not answer.topics or \
                    answer.topics[0].error.code != common_pb2.NONE:
                return False
            found = answer.topics[0].partitions
            if len(found) != partitions or not all(
                    p.leader_id in BROKERS and len(p.isr_nodes) == len(BROKERS) for p in found):
                return False
        return True

    def create_topic(self, topic: str, *, partitions: int, min_insync_replicas: int,
                     timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        spec = controller_pb2.CreateTopicsRequest.CreatableTopic(
            name=topic, num_partitions=partitions, replication_factor=len(BROKERS))
        spec.configs.add(name="min.insync.replicas", value=str(min_insync_replicas))
        request = controller_pb2.CreateTopicsRequest(topics=[spec], timeout_ms=5000)
        last = "no controller answered"
        while time.monotonic() < deadline:
            active = self.active_controller()
            if active is not None:
                try:
                    with grpc.insecure_channel(BY_ID[active[0]].endpoint) as channel:
                        answer = controller_pb2_grpc.ControllerServiceStub(channel).CreateTopics(
                            request, timeout=6)
                except grpc.RpcError as exc:
                    last = f"CreateTopics: {exc.code()}"
                else:
                    code = answer.topics[0].error.code if answer.topics else answer.error.code
                    if answer.error.code == common_pb2.NONE and code in (
                            common_pb2.NONE, common_pb2.TOPIC_ALREADY_EXISTS):
                        return
                    last = f"CreateTopics answered {answer}"
            time.sleep(0.3)
        raise RuntimeError(f"could not create {topic} within {timeout_s:g}s: {last}")
