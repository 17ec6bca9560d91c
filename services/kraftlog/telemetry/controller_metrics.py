"""The controller's Prometheus metrics (Kafka's ``kafka.controller`` groups), on the quorum
member's ``/metrics`` endpoint next to :class:`kraftlog.telemetry.metrics.RaftMetrics`.

Owns :class:`ControllerMetrics` and :func:`image_stats`. Kafka name -> Prometheus name:

=============================================  ==================================================
KafkaController ActiveControllerCount          ``kraftlog_controller_active_controller_count``
ControllerEventManager EventQueueTimeMs        ``kraftlog_controller_event_queue_time_seconds``
ControllerEventManager EventQueueProcessingTimeMs
                                               ``kraftlog_controller_event_queue_processing_time_seconds``
KafkaController FencedBrokerCount              ``kraftlog_controller_fenced_broker_count``
KafkaController ActiveBrokerCount              ``kraftlog_controller_active_broker_count``
KafkaController GlobalTopicCount               ``kraftlog_controller_global_topic_count``
KafkaController GlobalPartitionCount           ``kraftlog_controller_global_partition_count``
KafkaController OfflinePartitionsCount         ``kraftlog_controller_offline_partitions_count``
KafkaController PreferredReplicaImbalanceCount ``kraftlog_controller_preferred_replica_imbalance_count``
KafkaController LastAppliedRecordOffset        ``kraftlog_controller_last_applied_record_offset``
KafkaController LastCommittedRecordOffset      ``kraftlog_controller_last_committed_record_offset``
=============================================  ==================================================

The event timings come from the QuorumController's event loop (its ``on_event_timed``
hook, one observation per event); the counts are read off the committed metadata image
(every quorum member has one, so standbys report them too, as Kafka's controllers do);
the raft process samples them once a second (``server/controller_server.py``). Values are pushed in;
nothing here calls into the controller.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Gauge, Histogram

from kraftlog.metadata import image as im

logger = logging.getLogger(__name__)

EVENT_TIME_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                        0.25, 0.5, 1.0, 2.5)


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageStats:
    """The cluster-wide counts of one metadata image."""

    fenced_brokers: int
    active_brokers: int
    topics: int
    partitions: int
    offline_partitions: int
    preferred_replica_imbalance: int


def image_stats(image: im.MetadataImage) -> ImageStats:
    """Count what Kafka's ControllerMetadataMetrics count, from ``image``."""
    brokers = image.cluster.brokers.values()
    fenced = sum(1 for b in brokers if b.fenced)
    partitions = offline = imbalanced = 0
    for info in image.topics.all_partitions():
        registration = info.registration
        partitions += 1
        if not registration.has_leader:
            offline += 1
        if registration.leader != registration.preferred_leader:
            imbalanced += 1
    return ImageStats(fenced_brokers=fenced, active_brokers=len(brokers) - fenced,
                      topics=len(image.topics.topics), partitions=partitions,
                      offline_partitions=offline, preferred_replica_imbalance=imbalanced)


class ControllerMetrics:
    """The controller's metric group on ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(f"kraftlog_controller_{name}", doc, registry=registry)

        self.active_controller_count = gauge(
            "active_controller_count", "1 on the active controller, 0 on the others")
        self.fenced_broker_count = gauge("fenced_broker_count", "registered brokers fenced")
        self.active_broker_count = gauge("active_broker_count",
                                         "registered brokers not fenced")
        self.global_topic_count = gauge("global_topic_count", "topics in the cluster")
        self.global_partition_count = gauge("global_partition_count",
                                            "partitions in the cluster")
        self.offline_partitions_count = gauge("offline_partitions_count",
                                              "partitions without a leader")
        self.preferred_replica_imbalance_count = gauge(
            "preferred_replica_imbalance_count",
            "partitions whose leader is not their preferred (first) replica")
        self.last_applied_record_offset = gauge(
            "last_applied_record_offset",
            "offset of the last record replayed into the controller's state, -1 if none")
        self.last_committed_record_offset = gauge(
            "last_committed_record_offset",
            "offset of the last record the controller saw committed, -1 if none")
        self.event_queue_time = Histogram(
            "kraftlog_controller_event_queue_time_seconds",
            "time an event (request, commit, leader change) waited in the controller's queue",
            buckets=EVENT_TIME_BUCKETS_S, registry=registry)
        self.event_queue_processing_time = Histogram(
            "kraftlog_controller_event_queue_processing_time_seconds",
            "time the controller spent handling one event",
            buckets=EVENT_TIME_BUCKETS_S, registry=registry)
        self.last_applied_record_offset.set(-1)
        self.last_committed_record_offset.set(-1)
        self._image_offset: int | None = None
        self._counted_parts: tuple[object, object] | None = None
        self.sample_failures = 0

    def observe_event(self, kind: str, queue_ns: int, process_ns: int) -> None:
        """One event handled (the QuorumController's ``on_event_timed`` hook)."""
        del kind  # Kafka's histograms are per queue, not per event kind
        self.event_queue_time.observe(max(queue_ns, 0) / 1e9)
        self.event_queue_processing_time.observe(max(process_ns, 0) / 1e9)

    def set_status(self, *, active: bool, last_applied_offset: int,
                   last_committed_offset: int) -> None:
        self.active_controller_count.set(1 if active else 0)
        self.last_applied_record_offset.set(last_applied_offset)
        self.last_committed_record_offset.set(last_committed_offset)

    def set_image(self, image: im.MetadataImage) -> None:
        """Recount from ``image`` (skipped when it is the one counted last). Never raises:
        a failure keeps the previous values and is logged once."""
        offset = image.provenance.last_offset
        if offset == self._image_offset:
            return
        self._image_offset = offset
        # Images share unchanged parts: NoOp records (every metadata.max.idle.interval.ms)
        # and most writes leave topics and brokers as they were, and a recount walks every
        # partition.
        parts = (image.topics, image.cluster)
        if self._counted_parts is not None and all(
                a is b for a, b in zip(parts, self._counted_parts, strict=True)):
            return
        self._counted_parts = parts
        try:
            stats = image_stats(image)
        except Exception:
            self.sample_failures += 1
            if self.sample_failures == 1:
                logger.exception("event=metrics_sample_failed")
            return
        self.fenced_broker_count.set(stats.fenced_brokers)
        self.active_broker_count.set(stats.active_brokers)
        self.global_topic_count.set(stats.topics)
        self.global_partition_count.set(stats.partitions)
        self.offline_partitions_count.set(stats.offline_partitions)
        self.preferred_replica_imbalance_count.set(stats.preferred_replica_imbalance)
