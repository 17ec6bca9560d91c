"""Three ``kraftlog controller`` processes on loopback: elect, commit, kill -9 the leader,
re-elect, restart the dead node and catch up; SIGTERM resigns and exits 0; and the refusals
(unformatted dir, another node's dir, corrupt or lost quorum-state) exit 1 with one clear line.

Commits are observed at the raft layer: the high watermark and the voters' log end offsets
in DescribeQuorum (every epoch commits its LeaderChange record; the controller adds its
bootstrap and NoOp records). tests/controller/test_multiprocess.py drives the same processes
through ControllerService. Every wait is bounded; every child is killed in a ``finally``.
"""

from __future__ import annotations

import os
import pathlib
import signal
import time

from grpc_health.v1 import health_pb2

from kraftlog.v1 import raft_pb2
from tests.quorum_cluster import (
    CLUSTER_ID,
    FAILOVER_BOUND_S,
    NODES,
    Cluster,
    end_offsets,
    free_ports,
    kraftlog,
    wait_for,
)


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
        # A clean shutdown logs no error: open FetchStreams and parked Fetches end with
        # UNAVAILABLE (rpc_guard.stop_server) instead of grpc.aio's cancel tracebacks.
        assert " ERROR " not in log_text and "Traceback" not in log_text, log_text[-3000:]
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
