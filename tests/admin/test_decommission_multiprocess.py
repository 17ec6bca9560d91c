"""``kraftlog cluster decommission`` on 3 controllers and 3 brokers (real processes).

Broker 6 leads one partition and follows another; the command (a subprocess, through a
broker's AdminService, KIP-590) moves both replicas off it with a throttle, prints the
progress, waits for the broker to stop (the test stops it, as lowering
``broker.replicaCount`` would, when the command says it is waiting), and unregisters it.
Then: no partition names broker 6, the cluster no longer lists it, every record written
before is still there, and the throttles are gone.
"""

from __future__ import annotations

import asyncio
import pathlib
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kraftlog.admin import admin_client as ac
from tests.quorum_cluster import Topic, consume, produce, running_cluster, wait_for

GONE = 6


def _admin(address: str, call: Callable[[ac.AdminClient], Awaitable[Any]]) -> Any:
    async def run() -> Any:
        async with ac.AdminClient(address, timeout_ms=10_000) as admin:
            return await call(admin)
    return asyncio.run(run())


def test_decommission_moves_replicas_off_waits_for_the_stop_and_unregisters(
        tmp_path: pathlib.Path) -> None:
    topics = [Topic(name="led", assignments=[[GONE, 4]]),
              Topic(name="followed", assignments=[[5, GONE]])]
    with running_cluster(tmp_path, topics=topics) as cluster:
        brokers = cluster.brokers
        values = {t.name: [f"{t.name}-{i}".encode() for i in range(200)] for t in topics}
        for topic, leader in (("led", GONE), ("followed", 5)):
            answer = wait_for(lambda t=topic, b=leader: produce(brokers, b, values[t], t)
                              if b in brokers.procs else None, timeout_s=10, what="a write")
            assert answer.responses[0].partition_responses[0].error.code == 0, answer
        address = f"127.0.0.1:{brokers.ports[4]}"
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "kraftlog", "cluster", "decommission", "--broker", str(GONE),
             "--throttle", "50000000", "--bootstrap-server", address,
             "--shutdown-timeout-s", "30", "--timeout-s", "30"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines: list[str] = []
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line.rstrip())
                if line.startswith(f"Waiting for broker {GONE} to stop"):
                    brokers.procs[GONE].terminate()  # the StatefulSet scaled down
                    brokers.procs.pop(GONE).wait(timeout=20)
            assert proc.stderr is not None
            assert proc.wait(timeout=60) == 0, "\n".join(lines) + proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        elapsed = time.monotonic() - started
        text = "\n".join(lines)
        assert f"Moving 2 partition(s) off broker {GONE}" in text, text
        assert "Throttle set to 50000000 B/s" in text and "Throttles removed" in text, text
        assert any("complete" in line for line in lines), text  # the progress table
        assert lines[-1] == f"Unregistered broker {GONE}", text
        assert elapsed < 30, (elapsed, text)

        cluster_view = _admin(address, lambda a: a.describe_cluster(include_fenced_brokers=True))
        assert sorted(b.broker_id for b in cluster_view.brokers) == [4, 5]
        described = _admin(address, lambda a: a.describe_topics(["led", "followed"]))
        for topic in described.topics:
            [part] = topic.partitions
            assert GONE not in part.replicas and len(part.replicas) == 2, topic
            read = wait_for(lambda t=topic.name, b=part.leader_id: consume(brokers, b, t) or None,
                            timeout_s=10, what=f"{topic.name} read back")
            assert read == values[topic.name]
        configs = _admin(address, lambda a: a.describe_configs(
            [ac.ConfigResource(type=ac.ResourceType.BROKER, name="4")],
            keys=["leader.replication.throttled.rate"]))
        rates = [c.value for r in configs.results for c in r.configs]
        assert rates == [str(2**63 - 1)], configs  # back to the default: no throttle

        # Again: nothing to do, one line, exit 1.
        again = subprocess.run(
            [sys.executable, "-m", "kraftlog", "cluster", "decommission", "--broker", str(GONE),
             "--bootstrap-server", address], capture_output=True, text=True, timeout=60,
            check=False)
        assert again.returncode == 1
        assert again.stderr.strip() == (f"kraftlog: error: broker {GONE} is not registered "
                                        "(brokers: [4, 5]); nothing to do")
