"""The Prometheus registry serves Kafka-like raft metrics that a scraper can parse, and the
metered listener measures commit latency on the leader only, delegating every call."""

from __future__ import annotations

import urllib.request
from collections.abc import Sequence
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from kraftlog.raft import consensus
from kraftlog.raft import snapshot as snap
from kraftlog.telemetry import metrics


def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_raft_metrics_render_with_kafka_like_names() -> None:
    registry = metrics.MetricsRegistry()
    raft = metrics.RaftMetrics(registry.registry, node_id=2, cluster_id="abc")
    raft.set_status(role="Leader", epoch=7, leader_id=2)
    raft.set_log(high_watermark=41, log_end_offset=42, log_end_epoch=7)
    raft.observe_election("won", 350)
    raft.observe_election("backoff", 90)
    raft.observe_commit(12, 3)
    raft.observe_commit(None, 2)  # a follower's commit: counted, not timed
    got = parse(registry.render().decode())
    assert got[("kraftlog_raft_current_state", (("kraftlog_raft_current_state", "leader"),))] == 1
    assert got[("kraftlog_raft_current_state", (("kraftlog_raft_current_state", "follower"),))] == 0
    assert got[("kraftlog_raft_current_epoch", ())] == 7
    assert got[("kraftlog_raft_current_leader", ())] == 2
    assert got[("kraftlog_raft_high_watermark", ())] == 41
    assert got[("kraftlog_raft_log_end_offset", ())] == 42
    assert got[("kraftlog_raft_log_end_epoch", ())] == 7
    assert got[("kraftlog_raft_election_latency_seconds_count", ())] == 1
    assert got[("kraftlog_raft_election_latency_seconds_sum", ())] == 0.35
    assert got[("kraftlog_raft_elections_total", (("outcome", "won"),))] == 1
    assert got[("kraftlog_raft_elections_total", (("outcome", "backoff"),))] == 1
    assert got[("kraftlog_raft_commit_latency_seconds_count", ())] == 1
    assert got[("kraftlog_raft_commit_latency_seconds_bucket", (("le", "0.025"),))] == 1
    assert got[("kraftlog_raft_committed_records_total", ())] == 5
    assert got[("kraftlog_raft_node_info", (("cluster_id", "abc"), ("node_id", "2")))] == 1
    assert ("process_cpu_seconds_total", ()) in got


def test_the_scrape_endpoint_serves_the_registry_over_http() -> None:
    registry = metrics.MetricsRegistry(process_collectors=False)
    metrics.RaftMetrics(registry.registry, node_id=1).set_status(role="Follower", epoch=3,
                                                                 leader_id=2)
    port = registry.serve(0, "127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            got = parse(answer.read().decode())
    finally:
        registry.close()
    assert got[("kraftlog_raft_current_leader", ())] == 2
    assert got[("kraftlog_raft_current_state", (("kraftlog_raft_current_state", "follower"),))] == 1


class _Inner:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def handle_commit(self, batches: Sequence[consensus.CommittedBatch]) -> None:
        self.calls.append(("commit", len(batches)))

    def handle_load_snapshot(self, reader: snap.SnapshotReader) -> None:
        self.calls.append(("snapshot", reader))

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        self.calls.append(("leader", (leader_id, epoch)))


def test_metered_listener_times_commits_on_the_leader_and_delegates() -> None:
    registry = metrics.MetricsRegistry(process_collectors=False)
    raft = metrics.RaftMetrics(registry.registry, node_id=1)
    inner = _Inner()
    leading = [True]
    listener = metrics.MeteredListener(inner, raft, now_ms=lambda: 1_000,
                                       is_leader=lambda: leading[0])
    batch = consensus.CommittedBatch(base_offset=0, last_offset=1, epoch=1,
                                     append_timestamp_ms=995, records=(b"a", b"b"))
    listener.handle_commit([batch])
    leading[0] = False
    listener.handle_commit([batch])
    listener.handle_leader_change(2, 3)
    got = parse(registry.render().decode())
    assert got[("kraftlog_raft_commit_latency_seconds_count", ())] == 1
    assert got[("kraftlog_raft_commit_latency_seconds_sum", ())] == 0.005
    assert got[("kraftlog_raft_committed_records_total", ())] == 4
    assert inner.calls == [("commit", 1), ("commit", 1), ("leader", (2, 3))]
