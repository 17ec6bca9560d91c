"""``kraftlog dev``: the whole local cluster as processes, driven through the CLI.

Up (formats, waits until the quorum leads and the brokers serve), status, a SIGKILL of
the active controller and a new leader, restart, bad input, down and up again with the
same data and cluster id. Every wait is bounded; whatever runs is killed at the end.
"""

from __future__ import annotations

import pathlib
import time

from kraftlog.dev import layout as lay
from tests.dev_cluster import DevCluster, kraftlog


def leader_of(cluster: DevCluster) -> str | None:
    leaders = [n["node"] for n in cluster.status()["nodes"]
               if n["detail"].startswith("active controller")]
    return leaders[0] if len(leaders) == 1 else None


def test_dev_up_kill_restart_down_up(tmp_path: pathlib.Path) -> None:
    cluster = DevCluster(tmp_path / "cluster")
    directory = cluster.directory
    try:
        up = cluster.up("--no-admin")
        assert "storage formatted" in up.stdout and "quorum has a leader" in up.stdout
        for broker in ("broker-101", "broker-102", "broker-103"):
            assert f"{broker} serving" in up.stdout
        layout = lay.load(directory)
        assert layout is not None
        nodes = cluster.status()["nodes"]
        assert [n["state"] for n in nodes] == ["running"] * 6
        assert {n["detail"] for n in nodes if n["role"] == "broker"} == {"serving"}

        old_leader = leader_of(cluster)
        assert old_leader is not None
        killed = cluster.dev("kill", "active-controller")
        assert killed.returncode == 0, killed.stderr
        assert f"{old_leader} killed (SIGKILL" in killed.stdout
        deadline = time.monotonic() + 20
        while leader_of(cluster) in (None, old_leader):
            assert time.monotonic() < deadline, "no new active controller within 20 s"
            time.sleep(0.3)
        assert cluster.dev("status").returncode == 3  # one node is stopped
        restarted = cluster.dev("restart", old_leader)
        assert restarted.returncode == 0, restarted.stdout + restarted.stderr
        assert f"{old_leader} serving" in restarted.stdout
        assert cluster.dev("status").returncode == 0
        logs = cluster.dev("logs", old_leader, "-n", "5")
        assert logs.returncode == 0 and len(logs.stdout.splitlines()) == 5

        # Bad input: one clear line, exit 1 or 2, nothing stopped.
        for args, code, message in (
                (("kill", "broker-7"), 1, "no node 'broker-7'"),
                (("up", "--brokers", "4"), 1, "created with --brokers 3"),
                (("logs", "admin"), 1, "no node 'admin'"),
                (("logs", "1", "-n", "0"), 2, "positive number of lines"),
                (("up", "--controllers", "2"), 2, "invalid choice")):
            done = cluster.dev(*args)
            assert done.returncode == code, (args, done.stdout, done.stderr)
            assert message in done.stderr, (args, done.stderr)
            assert "Traceback" not in done.stderr
        empty = kraftlog("dev", "status", "--dir", str(tmp_path / "none"))
        assert empty.returncode == 1 and "no dev cluster in" in empty.stderr

        down = cluster.dev("down")
        assert down.returncode == 0, down.stderr
        assert down.stdout.count(" stopped") == 6 and "killed" not in down.stdout
        assert [n["state"] for n in cluster.status()["nodes"]] == ["stopped"] * 6
        again = cluster.dev("up")
        assert again.returncode == 0, again.stdout + again.stderr
        assert "storage formatted" not in again.stdout
        assert lay.load(directory) == layout  # same cluster id and shape
        assert cluster.dev("down", "--delete-data").returncode == 0
        assert not directory.exists()
    finally:
        cluster.destroy()
