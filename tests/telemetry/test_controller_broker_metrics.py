"""Controller and broker metric groups: counts read off a metadata image, event
timings, the broker's partition gauges, request and ISR counters, throttle rates — rendered
under their Kafka-like names and parsed back as a scraper would."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from kraftlog.ids import Uuid
from kraftlog.metadata import image as im
from kraftlog.telemetry import broker_metrics as bm
from kraftlog.telemetry import controller_metrics as cm
from kraftlog.telemetry import metrics

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(registry: metrics.MetricsRegistry) -> Samples:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(registry.render().decode())
            for s in family.samples}


def broker(broker_id: int, *, fenced: bool) -> im.BrokerRegistration:
    return im.BrokerRegistration(broker_id=broker_id, broker_epoch=1,
                                 incarnation_id=Uuid.from_bits(broker_id, 1), fenced=fenced)


def partition(replicas: tuple[int, ...], leader: int) -> im.PartitionRegistration:
    return im.PartitionRegistration(replicas=replicas, isr=replicas, leader=leader)


def cluster_image(offset: int) -> im.MetadataImage:
    a, b = Uuid.from_bits(1, 1), Uuid.from_bits(2, 2)
    return im.MetadataImage(
        provenance=im.MetadataProvenance(last_offset=offset, last_epoch=1,
                                         last_append_timestamp_ms=0),
        cluster=im.ClusterImage(brokers={1: broker(1, fenced=False), 2: broker(2, fenced=True),
                                         3: broker(3, fenced=False)}),
        topics=im.TopicsImage(topics={
            a: im.TopicImage(name="a", topic_id=a, partitions={
                0: partition((1, 3), 1),      # balanced
                1: partition((3, 1), 1),      # led by its second replica: imbalanced
                2: partition((2,), -1)}),     # offline (and so not on its preferred leader)
            b: im.TopicImage(name="b", topic_id=b, partitions={0: partition((3, 1), 3)})},
            ids_by_name={"a": a, "b": b}))


def test_image_stats_count_what_kafkas_controller_counts() -> None:
    stats = cm.image_stats(cluster_image(10))
    assert stats == cm.ImageStats(fenced_brokers=1, active_brokers=2, topics=2, partitions=4,
                                  offline_partitions=1, preferred_replica_imbalance=2)
    assert cm.image_stats(im.MetadataImage()) == cm.ImageStats(
        fenced_brokers=0, active_brokers=0, topics=0, partitions=0, offline_partitions=0,
        preferred_replica_imbalance=0)


def test_controller_metrics_render_with_kafka_like_names() -> None:
    registry = metrics.MetricsRegistry(process_collectors=False)
    ctl = cm.ControllerMetrics(registry.registry)
    got = parse(registry)
    assert got[("kraftlog_controller_active_controller_count", ())] == 0
    assert got[("kraftlog_controller_last_applied_record_offset", ())] == -1
    ctl.set_status(active=True, last_applied_offset=12, last_committed_offset=10)
    ctl.set_image(cluster_image(10))
    ctl.observe_event("CreateTopics", 2_000_000, 500_000)
    ctl.observe_event("_Commit", 100_000, 3_000_000_000)
    got = parse(registry)
    assert got[("kraftlog_controller_active_controller_count", ())] == 1
    assert got[("kraftlog_controller_last_applied_record_offset", ())] == 12
    assert got[("kraftlog_controller_last_committed_record_offset", ())] == 10
    assert got[("kraftlog_controller_fenced_broker_count", ())] == 1
    assert got[("kraftlog_controller_active_broker_count", ())] == 2
    assert got[("kraftlog_controller_global_topic_count", ())] == 2
    assert got[("kraftlog_controller_global_partition_count", ())] == 4
    assert got[("kraftlog_controller_offline_partitions_count", ())] == 1
    assert got[("kraftlog_controller_preferred_replica_imbalance_count", ())] == 2
    assert got[("kraftlog_controller_event_queue_time_seconds_count", ())] == 2
    assert got[("kraftlog_controller_event_queue_time_seconds_sum", ())] == 0.0021
    assert got[("kraftlog_controller_event_queue_time_seconds_bucket", (("le", "0.0025"),))] == 2
    assert got[("kraftlog_controller_event_queue_processing_time_seconds_bucket",
                (("le", "2.5"),))] == 1
    ctl.set_status(active=False, last_applied_offset=10, last_committed_offset=10)
    ctl.set_image(im.MetadataImage())
    got = parse(registry)
    assert got[("kraftlog_controller_active_controller_count", ())] == 0
    assert got[("kraftlog_controller_global_partition_count", ())] == 0


class FakeLog:
    def __init__(self, size: int) -> None:
        self.size_in_bytes = size


def fake_partition(topic: str, index: int, *, leader: int, me: int, replicas: tuple[int, ...],
                   isr: tuple[int, ...], end: int, followers: dict[int, int] | None = None,
                   min_isr: int = 2, size: int = 100) -> Any:
    statuses = {r: SimpleNamespace(log_end_offset=o) for r, o in (followers or {}).items()}
    return SimpleNamespace(
        topic=topic, index=index, is_leader=leader == me, leader_id=leader, replicas=replicas,
        isr=frozenset(isr), log_end_offset=end, log=FakeLog(size),
        config=SimpleNamespace(min_insync_replicas=min_isr),
        replica_status=lambda r: statuses.get(r) if leader == me else None)


def test_partition_stats_are_the_leaders_view() -> None:
    partitions = [
        # Led here, full ISR; follower 2 is 5 behind, follower 3 never fetched (-1).
        fake_partition("a", 0, leader=1, me=1, replicas=(1, 2, 3), isr=(1, 2, 3), end=40,
                       followers={2: 35, 3: 40}),
        # Led here, ISR at min.insync.replicas: under-replicated and at min ISR.
        fake_partition("a", 1, leader=1, me=1, replicas=(1, 2, 3), isr=(1, 2), end=10,
                       followers={2: 10, 3: -1}, size=50),
        # Led here, ISR below min: under-replicated and under min ISR.
        fake_partition("b", 0, leader=1, me=1, replicas=(1, 2), isr=(1,), end=0,
                       followers={2: 0}, size=0),
        # A follower replica here (the leader elsewhere) and an offline one.
        fake_partition("b", 1, leader=2, me=1, replicas=(2, 1), isr=(2, 1), end=7),
        fake_partition("c", 0, leader=-1, me=1, replicas=(1,), isr=(), end=7, size=1),
    ]
    stats = bm.partition_stats(partitions)
    assert (stats.partitions, stats.leaders, stats.offline) == (5, 3, 1)
    assert (stats.under_replicated, stats.under_min_isr, stats.at_min_isr) == (2, 1, 1)
    assert stats.max_follower_lag == 10  # replica 3 of a-1 never fetched: all 10 behind
    assert stats.log_sizes == (("a", 0, 100), ("a", 1, 50), ("b", 0, 0), ("b", 1, 100),
                               ("c", 0, 1))


def test_broker_metrics_render_requests_isr_changes_partitions_and_throttles() -> None:
    registry = metrics.MetricsRegistry(process_collectors=False)
    brk = bm.BrokerMetrics(registry.registry)
    got = parse(registry)
    assert got[("kraftlog_broker_partition_count", ())] == 0
    assert got[("kraftlog_broker_log_size_bytes_total", ())] == 0
    brk.observe_request("Produce", 0.002, True)
    brk.observe_request("Produce", 0.2, True)
    brk.observe_request("Produce", 0.003, False)
    brk.observe_request("Fetch", 0.4, True)
    brk.observe_isr_change(old_size=3, new_size=2)
    brk.observe_isr_change(old_size=2, new_size=3)
    brk.observe_isr_change(old_size=2, new_size=1)
    brk.observe_isr_change(old_size=2, new_size=2)  # no size change: neither
    leader = SimpleNamespace(bound=bm.UNBOUNDED_RATE, rate=lambda now_ms: 0.0)
    follower = SimpleNamespace(bound=1000, rate=lambda now_ms: 250.5)
    brk.sample([fake_partition("a", 0, leader=1, me=1, replicas=(1, 2), isr=(1,), end=9,
                               followers={2: 4}, size=4096)],
               [("leader", leader), ("follower", follower)], now_ms=5)
    got = parse(registry)
    assert got[("kraftlog_broker_requests_total", (("outcome", "ok"), ("request", "Produce")))] == 2
    assert got[("kraftlog_broker_requests_total",
                (("outcome", "failed"), ("request", "Produce")))] == 1
    assert got[("kraftlog_broker_requests_total", (("outcome", "ok"), ("request", "Fetch")))] == 1
    assert got[("kraftlog_broker_request_latency_seconds_count", (("request", "Produce"),))] == 3
    assert got[("kraftlog_broker_request_latency_seconds_bucket",
                (("le", "0.005"), ("request", "Produce")))] == 2
    assert got[("kraftlog_broker_isr_shrinks_total", ())] == 2
    assert got[("kraftlog_broker_isr_expands_total", ())] == 1
    assert got[("kraftlog_broker_partition_count", ())] == 1
    assert got[("kraftlog_broker_leader_count", ())] == 1
    assert got[("kraftlog_broker_under_replicated_partitions", ())] == 1
    assert got[("kraftlog_broker_under_min_isr_partition_count", ())] == 1
    assert got[("kraftlog_broker_at_min_isr_partition_count", ())] == 0
    assert got[("kraftlog_broker_offline_replica_count", ())] == 0
    assert got[("kraftlog_broker_replica_max_lag", ())] == 5
    assert got[("kraftlog_broker_log_size_bytes", (("partition", "0"), ("topic", "a")))] == 4096
    assert got[("kraftlog_broker_log_size_bytes_total", ())] == 4096
    assert got[("kraftlog_broker_replication_throttle_bytes_per_second",
                (("quota", "leader"),))] == -1
    assert got[("kraftlog_broker_replication_throttle_bytes_per_second",
                (("quota", "follower"),))] == 1000
    assert got[("kraftlog_broker_replication_throttled_byte_rate",
                (("quota", "follower"),))] == 250.5


def test_a_failing_sample_keeps_the_last_values_and_does_not_raise() -> None:
    registry = metrics.MetricsRegistry(process_collectors=False)
    brk = bm.BrokerMetrics(registry.registry)
    brk.sample([fake_partition("a", 0, leader=2, me=1, replicas=(2, 1), isr=(2, 1), end=1)],
               [], now_ms=0)
    broken = SimpleNamespace(topic="x", index=0)  # no log: partition_stats fails
    brk.sample([broken], [], now_ms=0)
    assert brk.sample_failures == 1
    assert parse(registry)[("kraftlog_broker_partition_count", ())] == 1


def test_an_image_with_the_same_topics_and_brokers_is_not_recounted(monkeypatch: Any) -> None:
    from types import SimpleNamespace

    from prometheus_client import CollectorRegistry

    from kraftlog.telemetry import controller_metrics as cm
    calls = []
    stats = cm.ImageStats(fenced_brokers=0, active_brokers=1, topics=1, partitions=1,
                          offline_partitions=0, preferred_replica_imbalance=0)
    monkeypatch.setattr(cm, "image_stats", lambda image: calls.append(image) or stats)
    metrics = cm.ControllerMetrics(CollectorRegistry())
    topics, cluster = object(), object()

    def image(offset: int, t: object = topics) -> Any:
        return SimpleNamespace(provenance=SimpleNamespace(last_offset=offset), topics=t,
                               cluster=cluster)
    metrics.set_image(image(1))
    metrics.set_image(image(2))  # a NoOp later: same parts
    assert len(calls) == 1
    metrics.set_image(image(3, object()))  # topics changed
    assert len(calls) == 2
