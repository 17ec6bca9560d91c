"""A dynamic controller quorum (KIP-853) of ``kraftlog controller`` processes on loopback.

One controller formatted ``--standalone`` leads alone; of two formatted
``--no-initial-controllers`` and started at the same time, one is added live with
``kraftlog quorum add-controller`` and the other joins by itself
(``controller.quorum.auto.join.enable``); ``kraftlog quorum
describe`` shows kraft.version 1 and the directory ids; then the leader is removed with
``kraftlog quorum remove-controller``, resigns once that commits, and the two others elect
a leader among themselves and keep committing. A broker that knows the controllers only
through ``controller.quorum.bootstrap.servers`` follows the new leader and stays unfenced.
Every wait is bounded; every child is killed in a ``finally``.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kraftlog.raft import convert
from kraftlog.storage import meta_properties
from kraftlog.tools import cli
from kraftlog.v1 import raft_pb2
from tests.quorum_cluster import (
    CLUSTER_ID,
    SESSION,
    TIMEOUTS,
    format_in_process,
    free_ports,
    wait_for,
)

NODES = (1, 2, 3)
BROKER = 9


class DynamicCluster:
    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.ports = dict(zip((*NODES, BROKER), free_ports(len(NODES) + 1), strict=True))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        bootstrap = ",".join(f"127.0.0.1:{p}" for p in self.ports.values())
        for node in NODES:
            mode = (["--standalone", "--controller-endpoint", self.address(node)] if node == 1
                    else ["--no-initial-controllers"])
            done = format_in_process("storage", "format", "--cluster-id", CLUSTER_ID, "--node-id",
                            str(node), "--metadata-dir", str(self.data_dir(node)), *mode)
            assert done.returncode == 0, done.stderr
            lines = [f"node.id={node}", "process.roles=controller",
                     f"controller.quorum.bootstrap.servers={bootstrap}",
                     f"listeners=CONTROLLER://{self.address(node)}",
                     f"metadata.log.dir={self.data_dir(node)}",
                     f"controller.quorum.auto.join.enable={'true' if node == 3 else 'false'}"]
            lines += [f"{k}={v}" for k, v in TIMEOUTS.items()]
            self.config(node).write_text("\n".join(lines) + "\n")
        # A broker that knows the controllers only as bootstrap servers.
        done = format_in_process("storage", "format", "--cluster-id", CLUSTER_ID, "--node-id",
                                 str(BROKER), "--data-dir", str(self.data_dir(BROKER)))
        assert done.returncode == 0
        lines = [f"node.id={BROKER}", "process.roles=broker",
                 f"controller.quorum.bootstrap.servers={bootstrap}",
                 f"listeners=PLAINTEXT://{self.address(BROKER)}",
                 f"log.dirs={self.data_dir(BROKER)}",
                 *(f"{k}={v}" for k, v in {**TIMEOUTS, **SESSION}.items()
                   if k != "controller.quorum.election.timeout.ms"
                   and k != "controller.quorum.election.backoff.max.ms")]
        self.config(BROKER).write_text("\n".join(lines) + "\n")

    def address(self, node: int) -> str:
        return f"127.0.0.1:{self.ports[node]}"

    def data_dir(self, node: int) -> pathlib.Path:
        return self.root / f"node-{node}"

    def config(self, node: int) -> pathlib.Path:
        return self.root / f"node-{node}.properties"

    def directory_id(self, node: int) -> str:
        props = meta_properties.read(self.data_dir(node))
        assert props is not None and props.directory_id is not None
        return str(props.directory_id)

    def start(self, node: int) -> None:
        role = "broker" if node == BROKER else "controller"
        with (self.root / f"node-{node}.log").open("ab") as log:
            self.procs[node] = subprocess.Popen(
                [sys.executable, "-m", "kraftlog", role, "--config",
                 str(self.config(node))], stdout=log, stderr=log, start_new_session=True)

    def broker_serving(self) -> bool | None:
        try:
            with grpc.insecure_channel(self.address(BROKER)) as channel:
                answer = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service="kraftlog.v1.BrokerService"),
                    timeout=1.0)
        except grpc.RpcError:
            return None
        return True if answer.status == health_pb2.HealthCheckResponse.SERVING else None

    def kill_all(self) -> None:
        for proc in self.procs.values():
            proc.kill()
            proc.wait(timeout=10)
        self.procs.clear()

    def leader_view(self) -> raft_pb2.DescribeQuorumResponse | None:
        import asyncio

        import grpc

        from kraftlog.raft import transport
        views = []
        for node in [n for n in self.procs if n != BROKER]:
            try:
                views.append(asyncio.run(transport.describe_quorum(self.address(node),
                                                                   timeout_s=1.0)))
            except grpc.aio.AioRpcError:
                continue
        leaders = [v for v in views if v.error.code == 0]
        return leaders[0] if len(leaders) == 1 else None

    def voters_committed(self, expected: set[int]) -> raft_pb2.DescribeQuorumResponse | None:
        """The leader's view once its voters are ``expected`` and every one of them holds the
        leader's high watermark (the change committed and replicated)."""
        view = self.leader_view()
        if view is None or {v.replica_id for v in view.current_voters} != expected:
            return None
        ends = {v.replica_id: v.log_end_offset for v in view.current_voters}
        return view if min(ends.values()) >= view.high_watermark > 0 else None

    def logs(self) -> str:
        return "\n".join(f"--- node {n}\n" + (self.root / f"node-{n}.log").read_text()[-4000:]
                         for n in (*NODES, BROKER) if (self.root / f"node-{n}.log").exists())


def _kraftlog(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """The ``kraftlog`` command in this process (no interpreter start per call)."""
    capsys.readouterr()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_grow_a_standalone_quorum_to_three_live_and_remove_the_leader(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = DynamicCluster(tmp_path)
    started = time.monotonic()
    try:
        for node in (*NODES, BROKER):  # 2 and 3 start as observers; 3 will add itself
            cluster.start(node)
        first = wait_for(lambda: cluster.voters_committed({1}) or cluster.voters_committed({1, 3}),
                         timeout_s=15, what="node 1 leading", details=cluster.logs)
        assert first.leader_id == 1 and first.kraft_version == 1
        directory_1 = next(convert.uuid_from_proto(v.replica_directory_id)
                           for v in first.current_voters if v.replica_id == 1)
        assert str(directory_1) == cluster.directory_id(1)
        marks = [("node 1 leads", time.monotonic() - started)]

        # An operator adds controller 2 (running, fetching as an observer); meanwhile 3 joins
        # by itself (controller.quorum.auto.join.enable): one change at a time, so one of
        # them may be told REQUEST_TIMED_OUT and retry.
        code, out, err = _kraftlog(capsys, "quorum", "add-controller", "--bootstrap-controller",
                                   cluster.address(1), "--config", str(cluster.config(2)),
                                   "--timeout-ms", "15000")
        assert code == 0, err + cluster.logs()
        assert f"Added controller 2 with directory id {cluster.directory_id(2)}" in out
        wait_for(lambda: cluster.voters_committed({1, 2, 3}), timeout_s=15,
                 what="voters {1, 2, 3}", details=cluster.logs)
        marks.append(("voters 1,2,3", time.monotonic() - started))
        # Adding it again is Kafka's DUPLICATE_VOTER, one clear line, exit 1.
        code, _, err = _kraftlog(capsys, "quorum", "add-controller", "--bootstrap-controller",
                                 cluster.address(2), "--config", str(cluster.config(2)),
                                 "--timeout-ms", "5000")
        assert code == 1 and "DUPLICATE_VOTER" in err, err
        code, out, err = _kraftlog(capsys, "quorum", "describe", "--bootstrap-controller",
                                   cluster.address(3), "--status", "--output", "json")
        assert code == 0, err
        fields = json.loads(out)
        assert fields["kraftVersion"] == 1 and fields["currentVoters"] == [1, 2, 3]
        code, out, err = _kraftlog(capsys, "quorum", "describe", "--bootstrap-controller",
                                   cluster.address(2), "--replication", "--output", "json")
        directories = {r["nodeId"]: r["directoryId"] for r in json.loads(out)["replicas"]
                       if r["status"] != "Observer"}  # the broker is one
        assert directories == {n: cluster.directory_id(n) for n in NODES}

        # Remove the leader: it commits the change under the new majority, then resigns.
        leader = wait_for(cluster.leader_view, timeout_s=5, what="a leader")
        code, out, err = _kraftlog(
            capsys, "quorum", "remove-controller", "--bootstrap-controller", cluster.address(2),
            "--controller-id", str(leader.leader_id), "--controller-directory-id",
            cluster.directory_id(leader.leader_id), "--timeout-ms", "15000")
        assert code == 0, err + cluster.logs()
        rest = set(NODES) - {leader.leader_id}
        after = wait_for(lambda: cluster.voters_committed(rest), timeout_s=15,
                         what=f"voters {sorted(rest)} with a leader among them",
                         details=cluster.logs)
        assert after.leader_id in rest and after.leader_epoch > leader.leader_epoch

        def removed_observes() -> bool | None:
            view = cluster.leader_view()
            return (view is not None and any(o.replica_id == leader.leader_id
                                            for o in view.observers)) or None
        # The removed controller still runs, as an observer of the new quorum.
        wait_for(removed_observes, timeout_s=10, details=cluster.logs,
                 what="the removed controller fetching as an observer")
        # The broker (bootstrap servers only) fetches metadata from the new leader and
        # heartbeats to it: still registered and unfenced a session timeout later.
        wait_for(lambda: any(o.replica_id == BROKER for o in (cluster.leader_view() or after)
                             .observers) or None, timeout_s=10, details=cluster.logs,
                 what="the broker fetching from the new leader")
        time.sleep(SESSION["broker.session.timeout.ms"] / 1000)
        wait_for(cluster.broker_serving, timeout_s=10, details=cluster.logs,
                 what="the broker serving (unfenced) under the new leader")
        marks.append(("leader removed, broker still unfenced", time.monotonic() - started))
        print("dynamic quorum 1 -> 3 voters -> 2: "
              + ", ".join(f"{w} {t:.1f}s" for w, t in marks))
    finally:
        cluster.kill_all()
