"""Three ``kraftlog controller`` processes export their spans to a real OTLP receiver in this
process: the startup election and the election after a kill -9 of the leader are each one
``raft.election`` trace whose spans come from more than one process, carrying the election's
attributes; every metrics endpoint scrapes and parses. Bounded: every wait has a
deadline and every child is killed in a ``finally``.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kraftlog.raft import transport
from kraftlog.v1 import raft_pb2
from tests.quorum_cluster import free_ports
from tests.telemetry.otlp_receiver import OtlpReceiver, ReceivedSpan

pytestmark = pytest.mark.slow

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


def wait_for(probe: Callable[[], T | None], *, timeout_s: float, what: str,
             logs: Callable[[], str]) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}\n{logs()}")
        time.sleep(0.05)


class Cluster:
    def __init__(self, root: pathlib.Path, env: dict[str, str]) -> None:
        self.root = root
        ports = free_ports(2 * len(NODES))
        self.ports = dict(zip(NODES, ports[:3], strict=True))
        self.metrics_ports = dict(zip(NODES, ports[3:], strict=True))
        self.env = {**os.environ, **env}
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in self.ports.items())
        for i in NODES:
            data = root / f"node-{i}"
            done = subprocess.run(
                [sys.executable, "-m", "kraftlog", "storage", "format", "--cluster-id",
                 CLUSTER_ID, "--node-id", str(i), "--data-dir", str(data)],
                capture_output=True, text=True, timeout=30, check=False)
            assert done.returncode == 0, done.stderr
            lines = [f"node.id={i}", "process.roles=controller",
                     f"controller.quorum.voters={voters}",
                     f"listeners=CONTROLLER://127.0.0.1:{self.ports[i]}",
                     f"metadata.log.dir={data}", "kraftlog.metrics.host=127.0.0.1"]
            lines += [f"{k}={v}" for k, v in TIMEOUTS.items()]
            (root / f"node-{i}.properties").write_text("\n".join(lines) + "\n")

    def start(self, node: int) -> None:
        with (self.root / f"node-{node}.log").open("ab") as log:
            self.procs[node] = subprocess.Popen(
                [sys.executable, "-m", "kraftlog", "controller", "--config",
                 str(self.root / f"node-{node}.properties"), "--log-format", "json",
                 "--metrics-port", str(self.metrics_ports[node])],
                stdout=log, stderr=log, env=self.env, start_new_session=True)

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

    def leader(self) -> tuple[int, int] | None:
        """(leader id, epoch) when exactly one live node says it leads and has committed."""
        answers = [self.describe(node) for node in self.procs]
        leaders = [a for a in answers if a is not None and a.error.code == 0
                   and a.high_watermark >= 1]
        return (leaders[0].leader_id, leaders[0].leader_epoch) if len(leaders) == 1 else None

    def scrape(self, node: int) -> dict[str, list[Any]]:
        url = f"http://127.0.0.1:{self.metrics_ports[node]}/metrics"
        with urllib.request.urlopen(url, timeout=2) as answer:
            text = answer.read().decode()
        samples: dict[str, list[Any]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples.setdefault(sample.name, []).append(sample)
        return samples

    def logs(self) -> str:
        return "\n".join(f"--- node {i}\n" + (self.root / f"node-{i}.log").read_text()[-3000:]
                         for i in NODES if (self.root / f"node-{i}.log").exists())


def value(samples: dict[str, list[Any]], name: str, **labels: str) -> float:
    for sample in samples[name]:
        if all(sample.labels.get(k) == v for k, v in labels.items()):
            return float(sample.value)
    raise AssertionError(f"no sample {name}{labels} in {samples.get(name)}")


def won_election_trace(spans: list[ReceivedSpan], *, after_epoch: int,
                       ) -> tuple[ReceivedSpan, list[ReceivedSpan]] | None:
    """A won ``raft.election`` past ``after_epoch`` whose trace spans several processes and
    holds a voter's ``raft.vote``."""
    for election in spans:
        if election.name != "raft.election" \
                or election.attributes.get("raft.election.outcome") != "won" \
                or election.attributes["raft.epoch"] <= after_epoch:
            continue
        trace = [s for s in spans if s.trace_id == election.trace_id]
        ids = {s.span_id: s for s in trace}
        voters = [s for s in trace if s.name == "raft.vote"
                  and s.instance != election.instance]
        # Processes export in batches: wait until each vote's chain up to the election's
        # vote request has arrived.
        complete = all(v.parent_span_id in ids and ids[v.parent_span_id].parent_span_id in ids
                       and ids[ids[v.parent_span_id].parent_span_id].parent_span_id in ids
                       for v in voters)
        if voters and complete and len({s.instance for s in trace}) >= 2:
            return election, trace
    return None


def check_election(election: ReceivedSpan, trace: list[ReceivedSpan], *, leader: int,
                   epoch: int, reason: str) -> None:
    attrs = election.attributes
    assert election.instance == f"controller-{leader}"
    assert election.resource["service.name"] == "kraftlog-controller"
    assert attrs["kraftlog.node.id"] == leader and attrs["raft.epoch"] == epoch
    assert attrs["raft.election.reason"] == reason
    assert sorted(attrs["raft.voters"]) == list(NODES)
    assert leader in attrs["raft.votes.granted"] and len(attrs["raft.votes.granted"]) >= 2
    assert attrs["raft.votes.rejected"] == [] or isinstance(attrs["raft.votes.rejected"], list)
    assert attrs["raft.election.duration_ms"] >= 0
    assert list(election.events)[:1] == ["prospective"] and "candidate" in election.events \
        and election.events[-1] == "leader"
    assert election.parent_span_id == ""  # the root of its own trace
    by_id = {s.span_id: s for s in trace}
    requests = [s for s in trace if s.name == "raft.vote_request"]
    assert requests and all(s.parent_span_id == election.span_id for s in requests)
    assert {s.attributes["raft.pre_vote"] for s in requests} == {True, False}
    # On a voter: raft.vote <- server span <- client span <- raft.vote_request <- election.
    for vote in (s for s in trace if s.name == "raft.vote" and s.instance != election.instance):
        server = by_id[vote.parent_span_id]
        assert server.name == "kraftlog.v1.RaftService/Vote" and server.instance == vote.instance
        client = by_id[server.parent_span_id]
        assert client.instance == election.instance
        assert by_id[client.parent_span_id].name == "raft.vote_request"
        assert vote.attributes["raft.candidate_id"] == leader


def test_leader_kill_is_one_election_trace_across_processes_and_metrics_scrape(
        tmp_path: pathlib.Path) -> None:
    with OtlpReceiver() as receiver:
        cluster = Cluster(tmp_path, receiver.env())
        try:
            for node in NODES:
                cluster.start(node)
            first_leader, first_epoch = wait_for(cluster.leader, timeout_s=15,
                                                 what="a first leader", logs=cluster.logs)
            election, trace = receiver.wait_for(
                lambda spans: won_election_trace(spans, after_epoch=0), timeout_s=10)
            check_election(election, trace, leader=first_leader, epoch=first_epoch,
                           reason="startup")
            # A follower's leader change continues the election trace (BeginQuorumEpoch
            # carried its context) and links to the election span.
            receiver.wait_for(lambda spans: [
                s for s in spans if s.name == "raft.leader_change"
                and (election.trace_id, election.span_id) in s.links
                and s.attributes["raft.leader_id"] == first_leader], timeout_s=10)

            for node in NODES:
                samples = wait_for(lambda n=node: _scrape_when(cluster, n, first_epoch),
                                   timeout_s=5, what=f"node {node} metrics", logs=cluster.logs)
                is_leader = node == first_leader
                assert value(samples, "kraftlog_raft_current_state",
                             kraftlog_raft_current_state="leader") == float(is_leader)
                assert value(samples, "kraftlog_raft_current_leader") == first_leader
                assert value(samples, "kraftlog_raft_log_end_offset") >= 1
                assert value(samples, "kraftlog_raft_current_epoch") == first_epoch
                assert "process_cpu_seconds_total" in samples
            leader_samples = cluster.scrape(first_leader)
            assert value(leader_samples, "kraftlog_raft_election_latency_seconds_count") >= 1
            assert value(leader_samples, "kraftlog_raft_elections_total", outcome="won") >= 1

            cluster.kill(first_leader)
            second_leader, second_epoch = wait_for(
                lambda: (lambda found: found if found and found[0] != first_leader else None)(
                    cluster.leader()), timeout_s=10, what="a new leader", logs=cluster.logs)
            election, trace = receiver.wait_for(
                lambda spans: won_election_trace(spans, after_epoch=first_epoch),
                timeout_s=10)
            check_election(election, trace, leader=second_leader, epoch=second_epoch,
                           reason="fetch timeout")
            # The vote requests to the dead leader failed, and say so.
            dead = receiver.wait_for(lambda spans: [
                s for s in spans if s.trace_id == election.trace_id
                and s.name == "raft.vote_request"
                and s.attributes["raft.voter_id"] == first_leader], timeout_s=5)
            assert all(s.status_code == 2 for s in dead)  # STATUS_CODE_ERROR
            # --log-format json: one object per line, the role change's fields as fields.
            changes = [entry for entry in map(json.loads, (
                tmp_path / f"node-{second_leader}.log").read_text().splitlines())
                if entry.get("to") == "Leader"]
            assert changes and changes[-1]["node"] == second_leader \
                and changes[-1]["epoch"] == second_epoch and changes[-1]["from"] == "Candidate"
        finally:
            cluster.kill_all()


def _scrape_when(cluster: Cluster, node: int, epoch: int) -> dict[str, list[Any]] | None:
    try:
        samples = cluster.scrape(node)
    except OSError:
        return None
    sampled = samples.get("kraftlog_raft_current_epoch")
    # The log offsets are sampled once a second; the status gauges move at once.
    return samples if sampled and sampled[0].value >= epoch \
        and value(samples, "kraftlog_raft_current_leader") >= 0 \
        and value(samples, "kraftlog_raft_high_watermark") >= 1 else None
