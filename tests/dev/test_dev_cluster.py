"""``kraftlog dev``: the whole local cluster as processes, driven through the CLI.

Up (formats, waits until the quorum leads and the brokers serve), status, a SIGKILL of
the active controller and a new leader, restart, bad input, down and up again with the
same data and cluster id. Every wait is bounded; whatever runs is killed at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import random
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from kraftlog.dev import layout as lay

TIMEOUT_S = 90


def dev(directory: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kraftlog", "dev", *args, "--dir",
                           str(directory)], capture_output=True, text=True, timeout=TIMEOUT_S,
                          check=False)


def free_base_port() -> int:
    """A base port whose whole dev range (base .. base+20) is free right now."""
    for _ in range(50):
        base = random.randrange(20000, 60000, 100)
        sockets = []
        try:
            for port in range(base, base + 21):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
        return base
    raise AssertionError("no free port range")


def status(directory: pathlib.Path) -> dict[str, Any]:
    done = dev(directory, "status", "--output", "json")
    assert done.returncode in (0, 3), done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def leader_of(directory: pathlib.Path) -> str | None:
    leaders = [n["node"] for n in status(directory)["nodes"]
               if n["detail"].startswith("active controller")]
    return leaders[0] if len(leaders) == 1 else None


def kill_leftovers(directory: pathlib.Path) -> None:
    for pid_file in directory.glob("*.pid"):
        with contextlib.suppress(ValueError, ProcessLookupError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_dev_up_kill_restart_down_up(tmp_path: pathlib.Path) -> None:
    directory = tmp_path / "cluster"
    try:
        up = dev(directory, "up", "--no-admin", "--base-port", str(free_base_port()))
        assert up.returncode == 0, up.stdout + up.stderr
        assert "storage formatted" in up.stdout and "quorum has a leader" in up.stdout
        for broker in ("broker-101", "broker-102", "broker-103"):
            assert f"{broker} serving" in up.stdout
        layout = lay.load(directory)
        assert layout is not None
        nodes = status(directory)["nodes"]
        assert [n["state"] for n in nodes] == ["running"] * 6
        assert {n["detail"] for n in nodes if n["role"] == "broker"} == {"serving"}

        old_leader = leader_of(directory)
        assert old_leader is not None
        killed = dev(directory, "kill", "active-controller")
        assert killed.returncode == 0, killed.stderr
        assert f"{old_leader} killed (SIGKILL" in killed.stdout
        deadline = time.monotonic() + 20
        while leader_of(directory) in (None, old_leader):
            assert time.monotonic() < deadline, "no new active controller within 20 s"
            time.sleep(0.3)
        assert dev(directory, "status").returncode == 3  # one node is stopped
        restarted = dev(directory, "restart", old_leader)
        assert restarted.returncode == 0, restarted.stdout + restarted.stderr
        assert f"{old_leader} serving" in restarted.stdout
        assert dev(directory, "status").returncode == 0
        logs = dev(directory, "logs", old_leader, "-n", "5")
        assert logs.returncode == 0 and len(logs.stdout.splitlines()) == 5

        # Bad input: one clear line, exit 1 or 2, nothing stopped.
        for args, code, message in (
                (("kill", "broker-7"), 1, "no node 'broker-7'"),
                (("up", "--brokers", "4"), 1, "created with --brokers 3"),
                (("logs", "admin"), 1, "no node 'admin'"),
                (("logs", "1", "-n", "0"), 2, "positive number of lines"),
                (("up", "--controllers", "2"), 2, "invalid choice")):
            done = dev(directory, *args)
            assert done.returncode == code, (args, done.stdout, done.stderr)
            assert message in done.stderr, (args, done.stderr)
            assert "Traceback" not in done.stderr
        empty = subprocess.run([sys.executable, "-m", "kraftlog", "dev", "status", "--dir",
                                str(tmp_path / "none")], capture_output=True, text=True,
                               timeout=TIMEOUT_S, check=False)
        assert empty.returncode == 1 and "no dev cluster in" in empty.stderr

        down = dev(directory, "down")
        assert down.returncode == 0, down.stderr
        assert down.stdout.count(" stopped") == 6 and "killed" not in down.stdout
        assert [n["state"] for n in status(directory)["nodes"]] == ["stopped"] * 6
        again = dev(directory, "up")
        assert again.returncode == 0, again.stdout + again.stderr
        assert "storage formatted" not in again.stdout
        assert lay.load(directory) == layout  # same cluster id and shape
        assert dev(directory, "down", "--delete-data").returncode == 0
        assert not directory.exists()
    finally:
        if directory.exists():
            dev(directory, "down", "--timeout-s", "5")
            kill_leftovers(directory)
