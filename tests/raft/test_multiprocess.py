"""Three ``kraftlog controller`` processes on loopback: elect, commit, kill -9 the leader,
re-elect, restart the dead node and catch up; SIGTERM resigns and exits 0; and the refusals
(unformatted dir, another node's dir, corrupt or lost quorum-state) exit 1 with one clear line.

There is no RPC to propose records yet, so commits are observed through what every epoch
commits by itself: the leader's LeaderChange control record, seen as the high watermark and
the voters' log end offsets in DescribeQuorum. Every wait is bounded; every child is killed in
a ``finally``.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kraftlog.raft import transport
from kraftlog.v1 import raft_pb2

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


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class Cluster:
    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.ports = dict(zip(NODES, free_ports(len(NODES)), strict=True))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in self.ports.items())
        for i in NODES:
            data = self.data_dir(i)
            done = kraftlog("storage", "format", "--cluster-id", CLUSTER_ID, "--node-id", str(i),
                            "--data-dir", str(data))
            assert done.returncode == 0, done.stderr
            lines = [f"node.id={i}", "process.roles=controller",
                     f"controller.quorum.voters={voters}",
                     f"listeners=CONTROLLER://127.0.0.1:{self.ports[i]}",
                     f"metadata.log.dir={data}"]
            lines += [f"{k}={v}" for k, v in TIMEOUTS.items()]
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

    def logs(self) -> str:
        return "\n".join(f"--- node {i}\n" + (self.root / f"node-{i}.log").read_text()[-3000:]
                         for i in NODES if (self.root / f"node-{i}.log").exists())


def wait_for(probe: Callable[[], T | None], *, timeout_s: float, what: str,
             cluster: Cluster | None = None) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}\n"
                                 + (cluster.logs() if cluster else ""))
        time.sleep(0.05)


def end_offsets(view: raft_pb2.DescribeQuorumResponse) -> dict[int, int]:
    return {r.replica_id: r.log_end_offset for r in view.current_voters}


def test_three_controllers_elect_commit_fail_over_and_catch_up(tmp_path: pathlib.Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        for node in NODES:
            cluster.start(node)
        # Elected, and the epoch's LeaderChange record committed on every voter.
        def all_committed() -> raft_pb2.DescribeQuorumResponse | None:
            view = cluster.leader_view()
            if view is None or view.high_watermark < 1:
                return None
            return view if set(end_offsets(view).values()) == {view.high_watermark} else None

        first = wait_for(all_committed, timeout_s=15,
                         what="a leader with a committed LeaderChange", cluster=cluster)
        old_leader, old_epoch, old_hw = first.leader_id, first.leader_epoch, first.high_watermark
        # gRPC health: SERVING on every member once it knows the leader.
        serving = health_pb2.HealthCheckResponse.SERVING
        wait_for(lambda: all(cluster.health(n, s) == serving for n in NODES
                             for s in ("", "kraftlog.v1.RaftService")) or None,
                 timeout_s=5, what="health SERVING everywhere", cluster=cluster)

        cluster.kill(old_leader)  # kill -9
        killed_at = time.monotonic()
        def new_leader_committed() -> raft_pb2.DescribeQuorumResponse | None:
            view = cluster.leader_view()
            if view is None or view.leader_epoch <= old_epoch or view.high_watermark <= old_hw:
                return None
            return view

        second = wait_for(new_leader_committed, timeout_s=FAILOVER_BOUND_S,
                          what="re-election after kill -9", cluster=cluster)
        failover_s = time.monotonic() - killed_at
        print(f"failover (kill -9 -> new leader's LeaderChange committed): {failover_s:.3f}s")
        assert second.leader_id != old_leader

        cluster.start(old_leader)
        def restarted_caught_up() -> raft_pb2.DescribeQuorumResponse | None:
            view = cluster.leader_view()
            if view is None or end_offsets(view).get(old_leader) != view.high_watermark:
                return None
            return view

        caught_up = wait_for(restarted_caught_up, timeout_s=15,
                             what="the restarted node catching up", cluster=cluster)
        assert len(set(end_offsets(caught_up).values())) == 1, end_offsets(caught_up)

        # A voter whose quorum-state is lost while its log is not empty refuses to start.
        follower = next(n for n in NODES if n != caught_up.leader_id)
        cluster.kill(follower)
        (cluster.data_dir(follower) / "__cluster_metadata-0" / "quorum-state").unlink()
        refused = kraftlog("controller", "--config", str(cluster.config(follower)))
        assert refused.returncode == 1
        assert "quorum-state" in refused.stderr and "missing" in refused.stderr
        assert "Traceback" not in refused.stderr

        # SIGTERM: the leader resigns gracefully and the process exits 0.
        leader = caught_up.leader_id
        proc = cluster.procs.pop(leader)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        log_text = (tmp_path / f"node-{leader}.log").read_text()
        assert f"node={leader}" in log_text and "to=Resigned" in log_text
    finally:
        cluster.kill_all()


def test_controller_refuses_unformatted_foreign_or_corrupt_storage(tmp_path: pathlib.Path) -> None:
    port = free_ports(1)[0]
    data = tmp_path / "data"
    config = tmp_path / "c.properties"
    config.write_text("\n".join([
        "node.id=1", "process.roles=controller", f"controller.quorum.voters=1@127.0.0.1:{port}",
        f"listeners=CONTROLLER://127.0.0.1:{port}", f"log.dirs={data}"]) + "\n")

    unformatted = kraftlog("controller", "--config", str(config))
    assert unformatted.returncode == 1
    assert "not formatted" in unformatted.stderr and "Traceback" not in unformatted.stderr

    assert kraftlog("storage", "format", "--cluster-id", CLUSTER_ID, "--node-id", "2",
                    "--data-dir", str(data)).returncode == 0
    foreign = kraftlog("controller", "--config", str(config))
    assert foreign.returncode == 1
    assert "node.id 2" in foreign.stderr and "Traceback" not in foreign.stderr

    (data / "__cluster_metadata-0" / "quorum-state").write_text('{"leaderEpoch": "x"')
    corrupt = kraftlog("controller", "--config", str(config), "--override", "node.id=2",
                       "--override", f"controller.quorum.voters=2@127.0.0.1:{port}")
    assert corrupt.returncode == 1
    assert "quorum-state" in corrupt.stderr and "Traceback" not in corrupt.stderr
    assert os.path.exists(data / "__cluster_metadata-0" / "quorum-state")
