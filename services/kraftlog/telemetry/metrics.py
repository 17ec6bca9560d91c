"""Prometheus metrics: one registry and scrape endpoint per process, and the raft metrics.

Owns :class:`MetricsRegistry` (a ``prometheus_client`` registry with the process
collectors, served over HTTP at ``/metrics`` by :meth:`MetricsRegistry.serve`) and
:class:`RaftMetrics`, Kafka's ``kafka.server:type=raft-metrics`` under Prometheus
names. ``kraftlog controller`` creates both (``--metrics-port`` /
``kraftlog.metrics.port``, 0 = no endpoint) and adds
:class:`kraftlog.telemetry.controller_metrics.ControllerMetrics` to the same
:attr:`MetricsRegistry.registry`; ``kraftlog broker`` serves its own registry with
:class:`kraftlog.telemetry.broker_metrics.BrokerMetrics` (one class per group).

Names: ``kraftlog_<group>_<kafka metric name with _>``, base units as Prometheus wants
them (``_seconds``, ``_total``). Kafka's raft metric ``current-state`` becomes the
enum ``kraftlog_raft_current_state{kraftlog_raft_current_state="leader"} 1``,
``election-latency-avg/max`` and ``commit-latency-avg/max`` become histograms.

Updates come from the event loop; the HTTP server runs in its own thread, which
``prometheus_client`` makes safe. Nothing here calls into raft: values are pushed in.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Enum,
    Gauge,
    Histogram,
    Info,
    generate_latest,
    start_http_server,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from kraftlog import config as kconfig
from kraftlog.raft import consensus
from kraftlog.raft import snapshot as snap
from kraftlog.raft.epoch_state import Role

logger = logging.getLogger(__name__)

RAFT_STATES = tuple(role.value.lower() for role in Role)
"""Values of ``kraftlog_raft_current_state``: the raft roles, lower case."""
ELECTION_LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
COMMIT_LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                            2.5)


class MetricsRegistry:
    """The process's metrics and, once :meth:`serve` ran, its ``/metrics`` endpoint."""

    def __init__(self, *, process_collectors: bool = True) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        if process_collectors:
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.port = 0

    def serve(self, port: int, host: str = "0.0.0.0") -> int:
        """Start the scrape endpoint (a daemon thread); returns the bound port."""
        if self._server is not None:
            raise RuntimeError(f"metrics endpoint already serving on port {self.port}")
        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        self.port = int(self._server.server_address[1])
        logger.info("event=metrics_serving host=%s port=%s", host, self.port)
        return self.port

    def render(self) -> bytes:
        """The exposition text a scrape would return."""
        return bytes(generate_latest(self.registry))

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


class RaftMetrics:
    """Kafka's raft-metrics group: state, epoch, leader, offsets, election and commit latency."""

    def __init__(self, registry: CollectorRegistry, *, node_id: int, cluster_id: str = "") -> None:
        self.node_id = node_id
        Info("kraftlog_raft_node", "this quorum member's identity", registry=registry).info(
            {"node_id": str(node_id), "cluster_id": cluster_id})
        self.current_state = Enum("kraftlog_raft_current_state",
                                  "the raft role of this node (Kafka: current-state)",
                                  states=list(RAFT_STATES), registry=registry)
        self.current_leader = Gauge("kraftlog_raft_current_leader",
                                    "the current leader's node id, -1 if unknown",
                                    registry=registry)
        self.current_epoch = Gauge("kraftlog_raft_current_epoch", "the current quorum epoch",
                                   registry=registry)
        self.high_watermark = Gauge("kraftlog_raft_high_watermark",
                                    "the high watermark of the metadata log, -1 if unknown",
                                    registry=registry)
        self.log_end_offset = Gauge("kraftlog_raft_log_end_offset",
                                    "the end offset of the metadata log", registry=registry)
        self.log_end_epoch = Gauge("kraftlog_raft_log_end_epoch",
                                   "the epoch of the last entry of the metadata log",
                                   registry=registry)
        self.election_latency = Histogram(
            "kraftlog_raft_election_latency_seconds",
            "time from the start of a won election attempt (pre-vote) to leadership",
            buckets=ELECTION_LATENCY_BUCKETS_S, registry=registry)
        self.elections = Counter("kraftlog_raft_elections",
                                 "election attempts this node made, by outcome",
                                 ["outcome"], registry=registry)
        self.commit_latency = Histogram(
            "kraftlog_raft_commit_latency_seconds",
            "time from appending a batch on the leader to its commit (leader only)",
            buckets=COMMIT_LATENCY_BUCKETS_S, registry=registry)
        self.committed_records = Counter("kraftlog_raft_committed_records",
                                         "records delivered to the state machine as committed",
                                         registry=registry)
        self.current_state.state("unattached")
        self.current_leader.set(-1)
        self.high_watermark.set(-1)

    def set_status(self, *, role: str, epoch: int, leader_id: int) -> None:
        """``role``: a :class:`~kraftlog.raft.epoch_state.Role` value (any case)."""
        if role.lower() in RAFT_STATES:
            self.current_state.state(role.lower())
        self.current_epoch.set(epoch)
        self.current_leader.set(leader_id)

    def set_log(self, *, high_watermark: int, log_end_offset: int, log_end_epoch: int) -> None:
        self.high_watermark.set(high_watermark)
        self.log_end_offset.set(log_end_offset)
        self.log_end_epoch.set(log_end_epoch)

    def observe_election(self, outcome: str, duration_ms: int) -> None:
        """The end of one election attempt (``RaftTracer``'s ``on_election_done`` hook)."""
        self.elections.labels(outcome=outcome).inc()
        if outcome == "won":
            self.election_latency.observe(duration_ms / 1000)

    def observe_commit(self, latency_ms: int | None, records: int) -> None:
        self.committed_records.inc(records)
        if latency_ms is not None:
            self.commit_latency.observe(max(latency_ms, 0) / 1000)


class MeteredListener:
    """A :class:`~kraftlog.raft.consensus.RaftListener` that measures commits, then delegates.

    Commit latency is measured on the leader only: a batch's timestamp is the leader's
    monotonic clock at append (``RaftClient`` stamps it), meaningless on other nodes.
    """

    def __init__(self, inner: consensus.RaftListener, metrics: RaftMetrics, *,
                 now_ms: Callable[[], int], is_leader: Callable[[], bool]) -> None:
        self.inner = inner
        self._metrics = metrics
        self._now_ms = now_ms
        self._is_leader = is_leader

    def handle_commit(self, batches: Sequence[consensus.CommittedBatch]) -> None:
        leader = self._is_leader()
        now_ms = self._now_ms() if leader else 0
        for batch in batches:
            self._metrics.observe_commit(
                now_ms - batch.append_timestamp_ms if leader else None, len(batch.records))
        self.inner.handle_commit(batches)

    def handle_load_snapshot(self, reader: snap.SnapshotReader) -> None:
        self.inner.handle_load_snapshot(reader)

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        self.inner.handle_leader_change(leader_id, epoch)


CONFIG_KEYS = (
    kconfig.ConfigKey(name="kraftlog.metrics.port", type=kconfig.ConfigType.INT, default=0,
                      validator=kconfig.at_least(0),
                      doc="port of the Prometheus /metrics endpoint; 0 = no endpoint"),
    kconfig.ConfigKey(name="kraftlog.metrics.host", type=kconfig.ConfigType.STRING,
                      default="0.0.0.0", doc="address the metrics endpoint binds"),
)
"""The metrics-endpoint keys of the processes that serve one (controller, broker)."""
