"""The controller quorum against etcd, in one run.

Three ``kraftlog controller`` processes (the real QuorumController over raft, fsync on)
and three etcd members, on loopback, same cores. Printed as ratios:

- CreateTopics RPCs (1 partition, RF 3, 3 registered unfenced brokers), 256 in flight, each a
  single-topic request through the ControllerService, vs etcd puts/s at 256 in flight;
  target >= 1.0x;
- kill -9 the active controller -> first CreateTopics committed by the new one, median over
  K kills, with ``--partitions`` partitions created first (100,000 for the target's case;
  the default is smaller to keep the run short); target <= etcd's median + 0.5 s.

Also measured, same client and load: an *empty* ControllerService in a child process that
answers every CreateTopics at once (no raft, no state, nothing but grpc.aio and protobuf):
the most CreateTopics/s any Python gRPC controller could answer here, printed against etcd
as the target's ceiling on this machine (``--no-floor`` skips it).

The 100,000-partition snapshot load time is ``bench/metadata.py``.

    .venv/bin/python bench/controller.py [--quick] [--partitions 100000] [--no-floor]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

import grpc

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import quorum_dirs  # noqa: E402
from anchors import etcd  # noqa: E402

from kraftlog.raft import transport  # noqa: E402
from kraftlog.v1 import common_pb2, controller_pb2, controller_pb2_grpc  # noqa: E402

CLUSTER_ID = quorum_dirs.CLUSTER_ID
NODES = quorum_dirs.NODES
BROKERS = (101, 102, 103)


class ControllerCluster:
    def __init__(self, root: pathlib.Path, settings: dict[str, Any]) -> None:
        self.root = root
        self.ports = quorum_dirs.format_quorum(root, settings)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.channels: dict[int, Any] = {}

    def start(self, i: int) -> None:
        with (self.root / f"node-{i}.log").open("ab") as log:
            self.procs[i] = subprocess.Popen(
                [sys.executable, "-m", "kraftlog", "controller", "--config",
                 str(self.root / f"node-{i}.properties"), "--log-level", "WARNING"],
                stdout=log, stderr=log, start_new_session=True)

    def kill(self, i: int) -> None:
        proc = self.procs.pop(i)
        proc.kill()
        proc.wait(timeout=10)

    def stop(self) -> None:
        for i in list(self.procs):
            self.kill(i)

    def stub(self, i: int, tag: int = 0) -> controller_pb2_grpc.ControllerServiceStub:
        key = i * 100 + tag
        if key not in self.channels:
            self.channels[key] = grpc.aio.insecure_channel(
                f"127.0.0.1:{self.ports[i]}", options=[("grpc.kraftlog_bench_tag", tag)])
        return controller_pb2_grpc.ControllerServiceStub(self.channels[key])

    async def close(self) -> None:
        for channel in self.channels.values():
            await channel.close()
        self.channels.clear()

    async def active(self, timeout_s: float = 30) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for i in list(self.procs):
                try:
                    answer = await self.stub(i).DescribeCluster(
                        controller_pb2.DescribeClusterRequest(), timeout=1)
                except grpc.aio.AioRpcError:
                    continue
                if answer.error.code == common_pb2.NONE:
                    return i
            await asyncio.sleep(0.05)
        raise SystemExit(f"no active controller within {timeout_s} s; logs in {self.root}")


def topic_request(name: str, partitions: int = 1) -> controller_pb2.CreateTopicsRequest:
    return controller_pb2.CreateTopicsRequest(topics=[
        controller_pb2.CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=3)])


async def register_brokers(cluster: ControllerCluster, leader: int) -> None:
    epochs = {}
    for broker in BROKERS:
        answer = await cluster.stub(leader).BrokerRegistration(
            controller_pb2.BrokerRegistrationRequest(
                broker_id=broker, cluster_id=CLUSTER_ID,
                incarnation_id=common_pb2.Uuid(most_significant_bits=uuid.uuid4().int >> 64,
                                               least_significant_bits=broker),
                features=[common_pb2.SupportedFeature(name="metadata.version",
                                                      min_supported_version=1,
                                                      max_supported_version=1)],
                listeners=[common_pb2.Endpoint(host="127.0.0.1", port=9000 + broker,
                                               listener_name="PLAINTEXT")]), timeout=10)
        if answer.error.code != common_pb2.NONE:
            raise SystemExit(f"broker registration failed: {answer}")
        epochs[broker] = answer.broker_epoch
    for _ in range(100):
        fenced = 0
        for broker, epoch in epochs.items():
            answer = await cluster.stub(leader).BrokerHeartbeat(
                controller_pb2.BrokerHeartbeatRequest(broker_id=broker, broker_epoch=epoch,
                                                      current_metadata_offset=1 << 40),
                timeout=10)
            fenced += answer.is_fenced
        if not fenced:
            return
        await asyncio.sleep(0.05)
    raise SystemExit("brokers stayed fenced")


async def create_topics_load(cluster: ControllerCluster, leader: int, in_flight: int,
                             seconds: float) -> dict[str, Any]:
    pids = {i: proc.pid for i, proc in cluster.procs.items()}
    return await run_create_topics(
        [cluster.stub(leader, tag) for tag in range(4)], pids, leader, in_flight, seconds)


async def run_create_topics(stubs: list[controller_pb2_grpc.ControllerServiceStub],
                            pids: dict[int, int], active: int, in_flight: int,
                            seconds: float) -> dict[str, Any]:
    """``in_flight`` workers sending single-topic CreateTopics for ``seconds``; CPU per op
    of this process, of ``pids[active]`` and of the other ``pids``."""
    done = errors = 0
    stop_at = time.perf_counter() + seconds

    async def worker(w: int) -> None:
        nonlocal done, errors
        k = 0
        while time.perf_counter() < stop_at and done < 5_000_000:
            answer = await stubs[w % len(stubs)].CreateTopics(topic_request(f"load-{w}-{k}"),
                                                              timeout=30)
            k += 1
            if answer.error.code or answer.topics[0].error.code:
                errors += 1
            else:
                done += 1

    cpu_before = {i: _cpu_s(pid) for i, pid in pids.items()}
    client_before = time.process_time()
    started = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(in_flight)))
    elapsed = time.perf_counter() - started
    client_cpu_s = time.process_time() - client_before
    cpu_s = {i: _cpu_s(pid) - cpu_before[i] for i, pid in pids.items()}

    def per_op_us(seconds: float) -> int:
        return round(seconds / max(done, 1) * 1e6)

    return {"in_flight": in_flight, "ops": done, "errors": errors,
            "ops_per_s": round(done / elapsed, 1),
            # CPU per CreateTopics (user + system): this process (the bench's client), the
            # active controller, the two standbys. Wall-clock rates swing with whatever else
            # runs on the machine; these say where the time goes.
            "cpu_us_per_op": {"client": per_op_us(client_cpu_s),
                              "active": per_op_us(cpu_s[active]),
                              "standbys": [per_op_us(v) for i, v in sorted(cpu_s.items())
                                           if i != active]},
            "load_avg": _load_avg()}


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _load_avg() -> str:
    return " ".join(pathlib.Path("/proc/loadavg").read_text().split()[:3])


async def fill_partitions(cluster: ControllerCluster, leader: int, partitions: int) -> None:
    """Topics of 1,000 partitions each (the records of one topic fit one operation)."""
    per_topic = 1000
    for t in range(0, partitions, per_topic):
        answer = await cluster.stub(leader).CreateTopics(
            topic_request(f"bulk-{t // per_topic}", min(per_topic, partitions - t)), timeout=60)
        if answer.error.code or answer.topics[0].error.code:
            raise SystemExit(f"bulk create failed: {answer}")


async def wait_caught_up(cluster: ControllerCluster, node: int, timeout_s: float = 120) -> None:
    """Until the restarted ``node`` holds the leader's high watermark, so that the next kill
    measures a failover, not a failover plus a restart's catch-up (with 100,000 partitions
    a restarted controller needs seconds to load; killing the leader before that leaves a
    quorum that cannot commit until it has). Bounded."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for i in list(cluster.procs):
            try:
                view = await transport.describe_quorum(f"127.0.0.1:{cluster.ports[i]}",
                                                       timeout_s=1.0)
            except grpc.aio.AioRpcError:
                continue
            if view.error.code != common_pb2.NONE:
                continue
            ends = {r.replica_id: r.log_end_offset for r in view.current_voters}
            if ends.get(node, -1) >= view.high_watermark:
                return
        await asyncio.sleep(0.1)
    raise SystemExit(f"controller {node} did not catch up within {timeout_s:.0f} s of its restart")


async def failover_once(cluster: ControllerCluster, n: int) -> float:
    leader = await cluster.active()
    killed_at = time.perf_counter()
    cluster.kill(leader)
    for channel_key in [k for k in cluster.channels if k // 100 == leader]:
        await cluster.channels.pop(channel_key).close()
    while True:
        for i in list(cluster.procs):
            try:
                answer = await cluster.stub(i).CreateTopics(topic_request(f"failover-{n}"),
                                                            timeout=2)
            except grpc.aio.AioRpcError:
                continue
            if answer.error.code == common_pb2.NONE and answer.topics[0].error.code in (
                    common_pb2.NONE, common_pb2.TOPIC_ALREADY_EXISTS):
                elapsed_ms = (time.perf_counter() - killed_at) * 1000
                cluster.start(leader)
                await wait_caught_up(cluster, leader)
                return round(elapsed_ms, 1)
        await asyncio.sleep(0.01)
        if time.perf_counter() - killed_at > 60:
            raise SystemExit("no controller accepted a write within 60 s of the kill")


class EmptyController(controller_pb2_grpc.ControllerServiceServicer):
    """Answers every CreateTopics at once as created: the gRPC floor, nothing else."""

    async def CreateTopics(self, request: controller_pb2.CreateTopicsRequest,
                           context: Any) -> controller_pb2.CreateTopicsResponse:
        answer = controller_pb2.CreateTopicsResponse()
        for topic in request.topics:
            answer.topics.add(name=topic.name, num_partitions=topic.num_partitions,
                              replication_factor=topic.replication_factor)
        return answer


async def serve_empty(port: int) -> None:
    server = grpc.aio.server(options=transport.server_options())
    controller_pb2_grpc.add_ControllerServiceServicer_to_server(EmptyController(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


async def measure_floor(seconds: float) -> dict[str, Any]:
    """run_create_topics against an EmptyController in a child process."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, __file__, "--serve-empty-controller", str(port)],
                            start_new_session=True)
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}",
                                          options=[("grpc.kraftlog_bench_tag", tag)])
                for tag in range(4)]
    try:
        stubs = [controller_pb2_grpc.ControllerServiceStub(c) for c in channels]
        deadline = time.monotonic() + 30
        while True:
            try:
                await stubs[0].CreateTopics(topic_request("probe"), timeout=1)
                break
            except grpc.aio.AioRpcError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("the empty controller did not answer within 30 s") from None
                await asyncio.sleep(0.1)
        return await run_create_topics(stubs, {0: proc.pid}, 0, 256, seconds)
    finally:
        for channel in channels:
            await channel.close()
        proc.kill()
        proc.wait(timeout=10)


async def measure_controller(args: argparse.Namespace) -> dict[str, Any]:
    settings: dict[str, Any] = {"controller.quorum.election.timeout.ms": 1000,
                                "controller.quorum.fetch.timeout.ms": 1000,
                                "broker.session.timeout.ms": 600_000,
                                "auto.leader.rebalance.enable": "false"}
    if args.linger_ms is not None:
        settings["controller.quorum.append.linger.ms"] = args.linger_ms
    with tempfile.TemporaryDirectory(prefix="kraftlog-bench-controller-") as tmp:
        cluster = ControllerCluster(pathlib.Path(tmp), settings)
        try:
            for i in NODES:
                cluster.start(i)
            leader = await cluster.active()
            await register_brokers(cluster, leader)
            result: dict[str, Any] = {"settings": settings}
            result["load"] = await create_topics_load(cluster, leader, 256, args.seconds)
            if args.failovers:
                await fill_partitions(cluster, leader, args.partitions)
                result["partitions_before_failover"] = args.partitions
                samples = [await failover_once(cluster, n) for n in range(args.failovers)]
                result["failover_ms"] = samples
                result["failover_median_ms"] = sorted(samples)[len(samples) // 2]
            return result
        finally:
            await cluster.close()
            cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="controller quorum vs etcd")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--failovers", type=int, default=5,
                        help="kills of the active controller (0: the throughput row only)")
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--no-floor", action="store_true",
                        help="skip the empty-server (gRPC floor) row")
    parser.add_argument("--serve-empty-controller", type=int, metavar="PORT",
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_empty_controller:
        asyncio.run(serve_empty(args.serve_empty_controller))
        return
    if args.quick:
        args.seconds, args.failovers, args.partitions = 5, 3, 2000
    ours = asyncio.run(measure_controller(args))
    floor = None if args.no_floor else asyncio.run(measure_floor(args.seconds))
    anchor = asyncio.run(etcd.measure(seq_n=0, in_flight=256, load_seconds=args.seconds,
                                      size=100, failovers=args.failovers))
    throughput = ours["load"]["ops_per_s"] / anchor["load"]["ops_per_s"]
    rows: list[tuple[str, str, str, str, str, bool | None]] = [
        ("CreateTopics/s @256", f"{ours['load']['ops_per_s']:,.0f}",
         f"{anchor['load']['ops_per_s']:,.0f} puts/s", f"{throughput:.2f}x", ">= 1.0x",
         throughput >= 1.0),
    ]
    ratios: dict[str, float] = {"create_topics_vs_puts": round(throughput, 2)}
    if floor is not None:
        ceiling = floor["ops_per_s"] / anchor["load"]["ops_per_s"]
        ratios["empty_server_vs_puts"] = round(ceiling, 2)
        rows.append(("  empty gRPC server, same client (ceiling)",
                     f"{floor['ops_per_s']:,.0f}", "", f"{ceiling:.2f}x", "(info)", None))
    if args.failovers:
        failover_gap_ms = ours["failover_median_ms"] - anchor["failover_median_ms"]
        ratios["failover_gap_ms"] = round(failover_gap_ms, 1)
        rows.append((f"failover median ms ({args.partitions:,} partitions)",
                     f"{ours['failover_median_ms']}", f"{anchor['failover_median_ms']}",
                     f"{failover_gap_ms:+.0f} ms", "<= +500 ms", failover_gap_ms <= 500))
    print(f"{'metric':42} {'kraftlog':>10} {'etcd':>16} {'vs etcd':>10}  target")
    for name, mine, theirs, ratio, target, ok in rows:
        verdict = "" if ok is None else ("PASS" if ok else "MISS")
        print(f"{name:42} {mine:>10} {theirs:>16} {ratio:>10}  {target} {verdict}".rstrip())
    print(json.dumps({"bench": "controller", "kraftlog": ours, "etcd": anchor,
                      "empty_server": floor, "ratios": ratios,
                      "pass": all(r[-1] for r in rows if r[-1] is not None)}))


if __name__ == "__main__":
    main()
