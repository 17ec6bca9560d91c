"""tests.quorum_cluster's running_cluster: the configs it writes, and on a failure inside it
every process it started is killed and the AssertionError carries every process's log tail
(a multi-process test's only evidence)."""

from __future__ import annotations

import pathlib
import subprocess
from typing import Any

import pytest

from tests import quorum_cluster


def test_a_failed_start_names_the_logs_and_kills_every_process(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[subprocess.Popen[bytes]] = []
    for kind in (quorum_cluster.Cluster, quorum_cluster.Brokers):
        def start(self: Any, node: int, real: Any = kind.start) -> None:
            real(self, node)
            started.append(self.procs[node])
        monkeypatch.setattr(kind, "start", start)
    prepared: list[str] = []

    def prepare(running: quorum_cluster.RunningCluster) -> None:
        prepared.append(running.brokers.config(4).read_text())
        prepared.append(running.controllers.config(2).read_text())

    with pytest.raises(AssertionError) as failed, quorum_cluster.running_cluster(
            tmp_path, serving_timeout_s=0, prepare=prepare,
            broker_config={"log.flush.interval.messages": 7},
            node_config=lambda node: {"kraftlog.metrics.port": 9000 + node}):
        raise AssertionError("not reached: the brokers cannot serve at once")
    message = str(failed.value)
    assert message.startswith("timed out after 0s waiting for brokers 4, 5, 6 registered")
    assert "--- node 1" in message and "--- broker 6" in message
    assert len(started) == 6 and all(proc.poll() is not None for proc in started)
    broker_config, controller_config = prepared
    assert "log.flush.interval.messages=7\n" in broker_config
    assert "kraftlog.metrics.port=9004\n" in broker_config
    assert "kraftlog.metrics.port=9002\n" in controller_config
    assert "log.flush.interval.messages" not in controller_config
