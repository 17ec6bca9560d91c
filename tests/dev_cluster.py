"""A ``kraftlog dev`` cluster driven through the CLI, for multi-process and e2e tests.

Imported as ``tests.dev_cluster`` (the repository root is on pytest's ``pythonpath``).
Every command has a timeout; :meth:`DevCluster.destroy` stops (then SIGKILLs) every
process it started, so callers call it in a ``finally``.
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
from typing import Any

COMMAND_TIMEOUT_S = 120


def free_base_port() -> int:
    """A base port whose whole dev range (base .. base+29, Kafka listeners included) is free right now."""
    for _ in range(50):
        base = random.randrange(20000, 32700, 100)  # below the ephemeral range
        sockets = []
        try:
            for port in range(base, base + 30):
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


def kraftlog(*args: str, env: dict[str, str] | None = None, stdin: str | None = None,
             timeout_s: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kraftlog", *args], capture_output=True,
                          text=True, timeout=timeout_s, check=False, input=stdin,
                          env={**os.environ, **(env or {})})


class DevCluster:
    """``kraftlog dev`` in ``directory`` on a free port range."""

    def __init__(self, directory: pathlib.Path) -> None:
        self.directory = directory
        self.base_port = free_base_port()

    @property
    def admin(self) -> str:
        return f"127.0.0.1:{self.base_port}"

    def controller(self, node_id: int = 1) -> str:
        return f"127.0.0.1:{self.base_port + node_id}"

    def broker(self, node_id: int) -> str:
        return f"127.0.0.1:{self.base_port + 11 + node_id - 101}"

    def dev(self, *args: str, timeout_s: float = COMMAND_TIMEOUT_S,
            ) -> subprocess.CompletedProcess[str]:
        return kraftlog("dev", *args, "--dir", str(self.directory), timeout_s=timeout_s)

    def up(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = self.dev("up", "--base-port", str(self.base_port), *args)
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    def cli(self, *args: str, stdin: str | None = None, timeout_s: float = COMMAND_TIMEOUT_S,
            ) -> subprocess.CompletedProcess[str]:
        """A ``kraftlog`` command with this cluster's admin service as the default."""
        return kraftlog(*args, env={"KRAFTLOG_ADMIN": self.admin}, stdin=stdin,
                        timeout_s=timeout_s)

    def cli_json(self, *args: str) -> Any:
        done = self.cli(*args, "--output", "json")
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout)

    def status(self) -> dict[str, Any]:
        done = self.dev("status", "--output", "json")
        assert done.returncode in (0, 3), done.stderr
        result: dict[str, Any] = json.loads(done.stdout)
        return result

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n" + p.read_text(errors="replace")[-3000:]
                         for p in sorted(self.directory.glob("*.log")))

    def destroy(self) -> None:
        if not self.directory.exists():
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.dev("down", "--timeout-s", "10", timeout_s=60)
        for pid_file in self.directory.glob("*.pid"):
            with contextlib.suppress(ValueError, ProcessLookupError, OSError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
