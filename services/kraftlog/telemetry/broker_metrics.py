"""The broker's Prometheus metrics (Kafka's ``kafka.server`` / ``kafka.network`` / ``kafka.log``
groups), served on the broker's ``/metrics`` endpoint (``kraftlog.metrics.port`` /
``kraftlog broker --metrics-port``).

Owns :class:`BrokerMetrics` and the pure :func:`partition_stats`. Kafka name -> name here:

==============================================  ===============================================
ReplicaManager UnderReplicatedPartitions        ``kraftlog_broker_under_replicated_partitions``
ReplicaManager UnderMinIsrPartitionCount        ``kraftlog_broker_under_min_isr_partition_count``
ReplicaManager AtMinIsrPartitionCount           ``kraftlog_broker_at_min_isr_partition_count``
ReplicaManager OfflineReplicaCount              ``kraftlog_broker_offline_replica_count``
                                                (hosted replicas whose partition has no leader)
ReplicaManager LeaderCount / PartitionCount     ``kraftlog_broker_leader_count`` /
                                                ``kraftlog_broker_partition_count``
ReplicaManager IsrShrinksPerSec / IsrExpandsPerSec
                                                ``kraftlog_broker_isr_shrinks_total`` /
                                                ``kraftlog_broker_isr_expands_total``
RequestMetrics RequestsPerSec {request}         ``kraftlog_broker_requests_total{request,outcome}``
RequestMetrics TotalTimeMs {request}            ``kraftlog_broker_request_latency_seconds{request}``
ReplicaFetcherManager MaxLag (leader's view)    ``kraftlog_broker_replica_max_lag``: the largest
                                                lag, in messages, of a follower of a partition
                                                this broker leads
Log Size {topic, partition}                     ``kraftlog_broker_log_size_bytes{topic,partition}``
                                                and their sum ``kraftlog_broker_log_size_bytes_total``
ReplicationQuotaManager byte-rate (KIP-73)      ``kraftlog_broker_replication_throttled_byte_rate{quota}``
                                                and its bound ``kraftlog_broker_replication_throttle_bytes_per_second{quota}``
                                                (-1 = unbounded)
==============================================  ===============================================

Request rates are counters (Prometheus derives the rate: ``rate(..._total[1m])``); the
request counters and latencies are pushed by the broker's data-path gRPC interceptor
(:class:`kraftlog.telemetry.grpc_tracing.DataPathInterceptor`), the ISR counters by the
AlterPartition answers the controller accepted, and the partition gauges are a snapshot
taken on the event loop once a second (:meth:`BrokerMetrics.sample`) and swapped in
whole, so a scrape (another thread) never sees half a sample.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

logger = logging.getLogger(__name__)

REQUEST_LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                             1.0, 2.5, 5.0, 10.0)
UNBOUNDED_RATE = 2**63 - 1
"""A quota bound this large means no throttle (``replication_quota.UNLIMITED_RATE``)."""


class PartitionLike(Protocol):
    """What :func:`partition_stats` reads of a ``broker.partition.Partition``."""

    @property
    def topic(self) -> str: ...

    @property
    def index(self) -> int: ...

    @property
    def is_leader(self) -> bool: ...

    @property
    def leader_id(self) -> int: ...

    @property
    def replicas(self) -> tuple[int, ...]: ...

    @property
    def isr(self) -> frozenset[int]: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def log(self) -> Any: ...

    @property
    def config(self) -> Any: ...

    def replica_status(self, replica_id: int) -> Any: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionStats:
    """The broker-wide gauges of one sample."""

    partitions: int = 0
    leaders: int = 0
    offline: int = 0
    under_replicated: int = 0
    under_min_isr: int = 0
    at_min_isr: int = 0
    max_follower_lag: int = 0
    log_sizes: tuple[tuple[str, int, int], ...] = ()
    """(topic, partition, bytes) per hosted replica."""


def partition_stats(partitions: Iterable[PartitionLike]) -> PartitionStats:
    """Kafka's ReplicaManager gauges over the hosted replicas. The ISR counts are the
    leader's (a follower does not know the ISR, as in Kafka)."""
    count = leaders = offline = under_replicated = under_min = at_min = max_lag = 0
    sizes: list[tuple[str, int, int]] = []
    for p in partitions:
        count += 1
        sizes.append((p.topic, p.index, int(p.log.size_in_bytes)))
        if p.leader_id < 0:
            offline += 1
        if not p.is_leader:
            continue
        leaders += 1
        isr = len(p.isr)
        if isr < len(p.replicas):
            under_replicated += 1
        min_isr = int(p.config.min_insync_replicas)
        if isr < min_isr:
            under_min += 1
        elif isr == min_isr:
            at_min += 1
        end = p.log_end_offset
        for replica in p.replicas:
            status = p.replica_status(replica) if replica != p.leader_id else None
            if status is not None and status.log_end_offset >= 0:
                max_lag = max(max_lag, end - status.log_end_offset)
            elif status is not None:
                max_lag = max(max_lag, end)  # never fetched: all of the log is missing
    return PartitionStats(partitions=count, leaders=leaders, offline=offline,
                          under_replicated=under_replicated, under_min_isr=under_min,
                          at_min_isr=at_min, max_follower_lag=max_lag, log_sizes=tuple(sizes))


class QuotaLike(Protocol):
    """What :meth:`BrokerMetrics.sample` reads of a ``broker.replication_quota.ReplicationQuota``."""

    @property
    def bound(self) -> int: ...

    def rate(self, now_ms: int) -> float: ...


class _Snapshot(Collector):
    """The partition and quota gauges, from the last :meth:`BrokerMetrics.sample`."""

    def __init__(self) -> None:
        self.stats = PartitionStats()
        self.quotas: tuple[tuple[str, int, float], ...] = ()

    def collect(self) -> Iterator[Metric]:
        stats, quotas = self.stats, self.quotas  # one read each: a consistent sample

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            return GaugeMetricFamily(f"kraftlog_broker_{name}", doc, value=value)

        yield gauge("partition_count", "replicas hosted by this broker", stats.partitions)
        yield gauge("leader_count", "partitions this broker leads", stats.leaders)
        yield gauge("offline_replica_count", "hosted replicas whose partition has no leader",
                    stats.offline)
        yield gauge("under_replicated_partitions",
                    "led partitions whose ISR is smaller than their replica set",
                    stats.under_replicated)
        yield gauge("under_min_isr_partition_count",
                    "led partitions whose ISR is below min.insync.replicas", stats.under_min_isr)
        yield gauge("at_min_isr_partition_count",
                    "led partitions whose ISR is exactly min.insync.replicas", stats.at_min_isr)
        yield gauge("replica_max_lag",
                    "largest lag, in messages, of a follower of a partition led here",
                    stats.max_follower_lag)
        sizes = GaugeMetricFamily("kraftlog_broker_log_size_bytes",
                                  "bytes of a hosted replica's log (all segments)",
                                  labels=["topic", "partition"])
        for topic, partition, size in stats.log_sizes:
            sizes.add_metric([topic, str(partition)], size)
        yield sizes
        yield gauge("log_size_bytes_total", "bytes of all hosted replicas' logs",
                    sum(size for _, _, size in stats.log_sizes))
        rates = GaugeMetricFamily("kraftlog_broker_replication_throttled_byte_rate",
                                  "measured byte rate of throttled replication traffic (KIP-73)",
                                  labels=["quota"])
        bounds = GaugeMetricFamily("kraftlog_broker_replication_throttle_bytes_per_second",
                                   "the replication throttle's bound, -1 = unbounded",
                                   labels=["quota"])
        for name, bound, rate in quotas:
            rates.add_metric([name], rate)
            bounds.add_metric([name], bound)
        yield rates
        yield bounds


class BrokerMetrics:
    """The broker's metric groups on ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter("kraftlog_broker_requests",
                                "data-path requests handled, by API and outcome "
                                "(ok, or failed = the call ended with a gRPC error)",
                                ["request", "outcome"], registry=registry)
        self.request_latency = Histogram(
            "kraftlog_broker_request_latency_seconds",
            "time from receiving a data-path request to its answer (purgatory waits included)",
            ["request"], buckets=REQUEST_LATENCY_BUCKETS_S, registry=registry)
        self.isr_shrinks = Counter("kraftlog_broker_isr_shrinks",
                                   "ISR shrinks of partitions led here that the controller "
                                   "accepted", registry=registry)
        self.isr_expands = Counter("kraftlog_broker_isr_expands",
                                   "ISR expansions of partitions led here that the controller "
                                   "accepted", registry=registry)
        self._snapshot = _Snapshot()
        self.sample_failures = 0
        registry.register(self._snapshot)
        # Label children resolved once: the interceptor calls observe_request per request.
        self._children: dict[tuple[str, bool], tuple[Any, Any]] = {}

    def observe_request(self, api: str, seconds: float, ok: bool) -> None:
        """One data-path call (the :data:`~kraftlog.telemetry.grpc_tracing.RequestObserver`)."""
        children = self._children.get((api, ok))
        if children is None:
            children = self._children[(api, ok)] = (
                self.requests.labels(request=api, outcome="ok" if ok else "failed"),
                self.request_latency.labels(request=api))
        children[0].inc()
        children[1].observe(seconds)

    def observe_isr_change(self, *, old_size: int, new_size: int) -> None:
        """An accepted ISR change of a partition led here."""
        if new_size < old_size:
            self.isr_shrinks.inc()
        elif new_size > old_size:
            self.isr_expands.inc()

    def sample(self, partitions: Iterable[PartitionLike],
               quotas: Iterable[tuple[str, QuotaLike]], now_ms: int) -> None:
        """Take the gauges' values (on the event loop). Never raises: a failing sample keeps
        the previous values and is logged, the broker goes on."""
        try:
            self._snapshot.quotas = tuple(
                (name, -1 if q.bound >= UNBOUNDED_RATE else q.bound, q.rate(now_ms))
                for name, q in quotas)
            self._snapshot.stats = partition_stats(partitions)
        except Exception:
            self.sample_failures += 1
            if self.sample_failures == 1:
                logger.exception("event=metrics_sample_failed")
