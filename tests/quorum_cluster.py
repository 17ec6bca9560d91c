"""``kraftlog controller`` (and ``kraftlog broker``) processes on loopback, for multi-process tests.

Imported as ``tests.quorum_cluster`` (the repository root is on pytest's
``pythonpath``). Every wait is bounded; callers kill every child in a
``finally`` (:meth:`Cluster.kill_all`), or let :func:`running_cluster` start and kill the
usual 3 controllers + 3 brokers.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import pathlib
import random
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kraftlog.raft import transport
from kraftlog.storage import record_batch as rb
from kraftlog.tools import cli as kraftlog_cli
from kraftlog.v1 import (
    broker_pb2,
    broker_pb2_grpc,
    common_pb2,
    controller_pb2,
    controller_pb2_grpc,
    raft_pb2,
)

T = TypeVar("T")
CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
NODES = (1, 2, 3)
TIMEOUTS = {
    "controller.quorum.election.timeout.ms": 300,
    "controller.quorum.fetch.timeout.ms": 600,
    "controller.quorum.election.backoff.max.ms": 300,
    "controller.quorum.request.timeout.ms": 500,
    "controller.quorum.retry.backoff.ms": 50,
    "controller.quorum.fetch.max.wait.ms": 200,
}
FAILOVER_BOUND_S = 5.0


def kraftlog(*args: str, timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kraftlog", *args], capture_output=True,
                          text=True, timeout=timeout_s, check=False)


def format_in_process(*args: str, timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
    """``kraftlog storage format`` in this interpreter: :func:`kraftlog`'s answer without a new
    process start per node (``timeout_s`` is unused; formatting does not block)."""
    assert args[:2] == ("storage", "format"), args
    code = kraftlog_cli.main(list(args))
    return subprocess.CompletedProcess(["kraftlog", *args], code, "", "")


FormatStorage = Callable[..., subprocess.CompletedProcess[str]]


# Listeners get ports below the kernel's ephemeral range (32768-60999 here), so no outgoing
# connection of an already running process can take a port between the check and the child's
# bind; and a port is handed out at most once per test session.
_LISTEN_PORTS = range(20000, 32768)
_handed_out: set[int] = set()


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports, free now and never handed out before in this run."""
    chosen: list[int] = []
    for _ in range(100 * count):
        if len(chosen) == count:
            break
        port = random.choice(_LISTEN_PORTS)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        chosen.append(port)
    if len(chosen) < count:
        raise AssertionError(f"found only {len(chosen)} of {count} free ports")
    return chosen


class Cluster:
    def __init__(self, root: pathlib.Path, extra: Mapping[str, object] | None = None, *,
                 format_storage: FormatStorage | None = None) -> None:
        """``format_storage``: how each data dir is formatted (default: :func:`kraftlog`, a
        ``kraftlog storage format`` process)."""
        self.root = root
        self.ports = dict(zip(NODES, free_ports(len(NODES)), strict=True))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in self.ports.items())
        for i in NODES:
            data = self.data_dir(i)
            done = (format_storage or kraftlog)("storage", "format", "--cluster-id", CLUSTER_ID, "--node-id", str(i),
                            "--data-dir", str(data))
            assert done.returncode == 0, done.stderr
            lines = [f"node.id={i}", "process.roles=controller",
                     f"controller.quorum.voters={voters}",
                     f"listeners=CONTROLLER://127.0.0.1:{self.ports[i]}",
                     f"metadata.log.dir={data}"]
            lines += [f"{k}={v}" for k, v in {**TIMEOUTS, **(extra or {})}.items()]
            self.config(i).write_text("\n".join(lines) + "\n")

    def data_dir(self, node: int) -> pathlib.Path:
        return self.root / f"node-{node}"

    def config(self, node: int) -> pathlib.Path:
        return self.root / f"node-{node}.properties"

    def start(self, node: int) -> None:
        log = (self.root / f"node-{node}.log").open("ab")
        self.procs[node] = subprocess.Popen(
            [sys.executable, "-m", "kraftlog", "controller", "--config", str(self.config(node))],
            stdout=log, stderr=log, start_new_session=True)
        log.close()

    def kill(self, node: int) -> None:
        proc = self.procs.pop(node)
        proc.kill()
        proc.wait(timeout=10)

    def kill_all(self) -> None:
        for node in list(self.procs):
            self.kill(node)

    def describe(self, node: int) -> raft_pb2.DescribeQuorumResponse | None:
        try:
            return asyncio.run(transport.describe_quorum(f"127.0.0.1:{self.ports[node]}",
                                                         timeout_s=1.0))
        except grpc.aio.AioRpcError:
            return None

    def health(self, node: int, service: str = "") -> int:
        with grpc.insecure_channel(f"127.0.0.1:{self.ports[node]}") as channel:
            answer = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=1.0)
            status: int = answer.status
            return status

    def leader_view(self) -> raft_pb2.DescribeQuorumResponse | None:
        """The DescribeQuorum answer of the live node that says it leads, if exactly one does."""
        answers = [self.describe(node) for node in self.procs]
        leaders = [a for a in answers if a is not None and a.error.code == 0]
        return leaders[0] if len(leaders) == 1 else None

    def create_topic(self, name: str, *, partitions: int = 1, replication_factor: int = 3,
                     min_insync_replicas: int | None = None,
                     assignments: list[list[int]] | None = None,
                     configs: Mapping[str, str] | None = None) -> bool | None:
        """CreateTopics through whichever live controller is active; True once created (or
        already there), None while no controller answers (for :func:`wait_for`).
        ``assignments``: the replicas of each partition (the first is the leader);
        ``configs``: topic configs (``cleanup.policy``, ...)."""
        topic = controller_pb2.CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=-1 if assignments else partitions,
            replication_factor=-1 if assignments else replication_factor)
        for index, replicas in enumerate(assignments or ()):
            topic.assignments.add(partition_index=index, broker_ids=replicas)
        if min_insync_replicas is not None:
            topic.configs.add(name="min.insync.replicas", value=str(min_insync_replicas))
        for key, value in (configs or {}).items():
            topic.configs.add(name=key, value=value)
        request = controller_pb2.CreateTopicsRequest(topics=[topic], timeout_ms=5000)
        for node in self.procs:
            try:
                with grpc.insecure_channel(f"127.0.0.1:{self.ports[node]}") as channel:
                    answer = controller_pb2_grpc.ControllerServiceStub(channel).CreateTopics(
                        request, timeout=5)
            except grpc.RpcError:
                continue
            if answer.error.code == common_pb2.NONE:
                code = answer.topics[0].error.code
                assert code in (common_pb2.NONE, common_pb2.TOPIC_ALREADY_EXISTS), answer
                return True
        return None

    def logs(self) -> str:
        return "\n".join(f"--- node {i}\n" + (self.root / f"node-{i}.log").read_text()[-3000:]
                         for i in NODES if (self.root / f"node-{i}.log").exists())


def wait_for(probe: Callable[[], T | None], *, timeout_s: float, what: str,
             cluster: Cluster | None = None, details: Callable[[], str] | None = None) -> T:
    """Poll ``probe`` until it answers; on timeout fail with ``what`` and the logs of the
    moment (``cluster.logs()`` or ``details()``, read then, not when the wait began)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}\n"
                                 + (cluster.logs() if cluster else "")
                                 + (details() if details else ""))
        time.sleep(0.05)


def wait_for_full_isr(producer: Any, topic: str, partitions: int, *,
                      timeout_s: float = 15) -> None:
    """Wait until a client ``Producer``'s metadata shows every partition of ``topic`` with a
    leader and an ISR of 3 (refreshing the metadata on each try)."""
    def full_isr() -> bool | None:
        producer.metadata.request_update()
        parts = producer.partitions_for(topic, timeout_ms=5000)
        return True if len(parts) == partitions and all(
            len(p.isr) == 3 and p.leader_id >= 0 for p in parts) else None

    wait_for(full_isr, timeout_s=timeout_s, what=f"{partitions} partitions of {topic} with a full ISR")


def end_offsets(view: raft_pb2.DescribeQuorumResponse) -> dict[int, int]:
    return {r.replica_id: r.log_end_offset for r in view.current_voters}


BROKERS = (4, 5, 6)
TOPIC = "events"  # the topic tests/broker/test_process.py uses
SESSION = {"broker.session.timeout.ms": 1500, "broker.heartbeat.interval.ms": 200,
           "metadata.max.idle.interval.ms": 200}


class Brokers:
    def __init__(self, root: pathlib.Path, cluster: Cluster,
                 extra: Mapping[str, object] | None = None, *,
                 format_storage: FormatStorage | None = None) -> None:
        """``extra``: configs written after the defaults (so they win); ``format_storage`` as
        for :class:`Cluster`."""
        self.root = root
        self.ports = dict(zip(BROKERS, free_ports(len(BROKERS)), strict=True))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in cluster.ports.items())
        for broker in BROKERS:
            data = root / f"broker-{broker}"
            done = (format_storage or kraftlog)("storage", "format", "--cluster-id", CLUSTER_ID, "--node-id",
                            str(broker), "--data-dir", str(data))
            assert done.returncode == 0, done.stderr
            lines = [f"node.id={broker}", "process.roles=broker",
                     f"controller.quorum.voters={voters}",
                     f"listeners=PLAINTEXT://127.0.0.1:{self.ports[broker]}",
                     f"log.dirs={data}", "replica.fetch.wait.max.ms=200",
                     "replica.fetch.backoff.ms=100", "replica.lag.time.max.ms=3000",
                     "controller.quorum.request.timeout.ms=500",
                     "controller.quorum.fetch.timeout.ms=600",
                     "controller.quorum.fetch.max.wait.ms=200",
                     "controller.quorum.retry.backoff.ms=50",
                     f"broker.heartbeat.interval.ms={SESSION['broker.heartbeat.interval.ms']}",
                     f"broker.session.timeout.ms={SESSION['broker.session.timeout.ms']}"]
            lines += [f"{k}={v}" for k, v in (extra or {}).items()]
            self.config(broker).write_text("\n".join(lines) + "\n")

    def config(self, broker: int) -> pathlib.Path:
        return self.root / f"broker-{broker}.properties"

    def start(self, broker: int) -> None:
        log = (self.root / f"broker-{broker}.log").open("ab")
        self.procs[broker] = subprocess.Popen(
            [sys.executable, "-m", "kraftlog", "broker", "--config", str(self.config(broker))],
            stdout=log, stderr=log, start_new_session=True)
        log.close()

    def kill(self, broker: int) -> None:
        proc = self.procs.pop(broker)
        proc.kill()
        proc.wait(timeout=10)

    def kill_all(self) -> None:
        for broker in list(self.procs):
            self.kill(broker)

    def stub(self, broker: int) -> broker_pb2_grpc.BrokerServiceStub:
        channel = grpc.insecure_channel(f"127.0.0.1:{self.ports[broker]}")
        return broker_pb2_grpc.BrokerServiceStub(channel)

    def serving(self, broker: int) -> bool:
        try:
            with grpc.insecure_channel(f"127.0.0.1:{self.ports[broker]}") as channel:
                answer = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service="kraftlog.v1.BrokerService"),
                    timeout=1.0)
        except grpc.RpcError:
            return False
        return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)

    def logs(self) -> str:
        return "\n".join(f"--- broker {b}\n" + (self.root / f"broker-{b}.log").read_text()[-4000:]
                         for b in BROKERS if (self.root / f"broker-{b}.log").exists())

    def all_serving(self, brokers: Sequence[int] = BROKERS) -> bool | None:
        """True once every one of ``brokers`` serves BrokerService (registered and unfenced),
        None before (for :func:`wait_for`)."""
        return True if all(self.serving(b) for b in brokers) else None


# -- a running cluster, as most multi-process tests start one -----------------------------------

@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Topic:
    """A topic :func:`running_cluster` creates (through :meth:`Cluster.create_topic`)."""

    name: str
    partitions: int = 1
    replication_factor: int = 3
    min_insync_replicas: int | None = None
    assignments: list[list[int]] | None = None
    """The replicas of each partition, the first its leader (instead of ``partitions`` and
    ``replication_factor``)."""
    configs: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RunningCluster:
    controllers: Cluster
    brokers: Brokers

    @property
    def bootstrap(self) -> tuple[str, ...]:
        """Every broker's address, in :data:`BROKERS` order."""
        return tuple(f"127.0.0.1:{self.brokers.ports[b]}" for b in BROKERS)

    def logs(self) -> str:
        return self.controllers.logs() + "\n" + self.brokers.logs()


@contextlib.contextmanager
def running_cluster(root: pathlib.Path, *, topics: Sequence[Topic] = (),
                    broker_config: Mapping[str, object] | None = None,
                    node_config: Callable[[int], Mapping[str, object]] | None = None,
                    broker_ids: Sequence[int] = BROKERS,
                    prepare: Callable[[RunningCluster], None] | None = None,
                    serving_timeout_s: float = 20, topic_timeout_s: float = 10,
                    ) -> Iterator[RunningCluster]:
    """Controllers :data:`NODES` (:data:`SESSION` timeouts, data under ``root/controllers``)
    and brokers :data:`BROKERS` (``broker_config`` added to theirs, data under ``root``),
    ``node_config(node id)`` added to each one's configs, every data dir formatted in this
    process, then ``prepare`` called (to reformat or rewrite what a test needs); started (only ``broker_ids`` of the brokers), waited for until they serve,
    then ``topics`` created. Yields them running; an AssertionError inside gets every process's
    log tail appended (any other failure prints them); every process is killed on the way out."""
    controllers = Cluster(root / "controllers", extra=SESSION, format_storage=format_in_process)
    brokers = Brokers(root, controllers, broker_config, format_storage=format_in_process)
    running = RunningCluster(controllers=controllers, brokers=brokers)
    if node_config is not None:
        for path, node in [*((controllers.config(n), n) for n in NODES),
                           *((brokers.config(b), b) for b in BROKERS)]:
            with path.open("a") as config:
                config.writelines(f"{k}={v}\n" for k, v in node_config(node).items())
    try:
        if prepare is not None:
            prepare(running)
        for node in controllers.ports:
            controllers.start(node)
        for broker in broker_ids:
            brokers.start(broker)
        try:
            wait_for(lambda: brokers.all_serving(broker_ids), timeout_s=serving_timeout_s,
                     what=f"brokers {', '.join(map(str, broker_ids))} registered and unfenced")
            for topic in topics:
                wait_for(lambda t=topic: controllers.create_topic(
                    t.name, partitions=t.partitions, replication_factor=t.replication_factor,
                    min_insync_replicas=t.min_insync_replicas, assignments=t.assignments,
                    configs=t.configs),
                    timeout_s=topic_timeout_s, what=f"topic {topic.name} created")
            yield running
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{running.logs()}") from None
        except GeneratorExit:
            raise
        except BaseException:
            print(running.logs())  # pytest shows it with the failure (pytest.fail, RpcError, ...)
            raise
    finally:
        brokers.kill_all()
        controllers.kill_all()


# -- the data path, as a test drives it ---------------------------------------------------------

def partition_state(brokers: Brokers, broker: int, topic: str = TOPIC
                    ) -> tuple[int, int, tuple[int, ...]] | None:
    """(leader, leader epoch, ISR) of ``<topic>-0`` in ``broker``'s metadata image."""
    try:
        answer = brokers.stub(broker).Metadata(broker_pb2.MetadataRequest(topics=[topic]),
                                               timeout=2)
    except grpc.RpcError:
        return None
    found = answer.topics[0]
    if found.error.code != common_pb2.NONE or not found.partitions:
        return None
    p = found.partitions[0]
    return p.leader_id, p.leader_epoch, tuple(sorted(p.isr_nodes))


def produce(brokers: Brokers, broker: int, values: list[bytes], topic: str = TOPIC
            ) -> broker_pb2.ProduceResponse:
    """One acks=all batch of ``values`` to ``<topic>-0`` on ``broker``."""
    batch = rb.build_batch([rb.RecordInput(value=v, timestamp_ms=None) for v in values],
                           now_ms=int(time.time() * 1000))
    return brokers.stub(broker).Produce(broker_pb2.ProduceRequest(
        acks=-1, timeout_ms=5000, topic_data=[broker_pb2.ProduceRequest.TopicProduceData(
            name=topic, partition_data=[broker_pb2.ProduceRequest.PartitionProduceData(
                index=0, records=batch)])]), timeout=10)


def consume_records(brokers: Brokers, broker: int, topic: str = TOPIC
                    ) -> list[tuple[int, bytes]] | None:
    """(offset, value) of every committed record of ``<topic>-0`` read from ``broker``, None
    on an error."""
    out: list[tuple[int, bytes]] = []
    offset = 0
    while True:
        try:
            answer = brokers.stub(broker).Fetch(broker_pb2.FetchRequest(
                replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                topics=[broker_pb2.FetchRequest.FetchTopic(topic=topic, partitions=[
                    broker_pb2.FetchRequest.FetchPartition(
                        partition=0, current_leader_epoch=-1, fetch_offset=offset,
                        last_fetched_epoch=-1, log_start_offset=-1,
                        partition_max_bytes=1 << 20)])]), timeout=5)
        except grpc.RpcError:
            return None
        data = answer.responses[0].partitions[0]
        if data.error.code != common_pb2.NONE:
            return None
        if not data.records:
            return out
        for decoded in rb.decode_batches(data.records):
            for record in decoded.records:
                if record.offset >= offset:
                    out.append((record.offset, record.value or b""))
                    offset = record.offset + 1


def consume(brokers: Brokers, broker: int, topic: str = TOPIC) -> list[bytes] | None:
    """Every committed record value of ``<topic>-0`` read from ``broker``, None on an error."""
    records = consume_records(brokers, broker, topic)
    return None if records is None else [value for _offset, value in records]
