"""The cluster metadata as one immutable value: what brokers and standby controllers read.

Owns :class:`MetadataImage` and its parts, after Kafka's ``org.apache.kafka.image``:
:class:`ClusterImage` (broker registrations), :class:`TopicsImage` (topics by
id and by name, each with its :class:`PartitionRegistration` values),
:class:`ConfigsImage`, :class:`FeaturesImage`, :class:`ProducerIdsImage`, and
:class:`MetadataProvenance` (the last record applied). The queries brokers and
admin need live here too (partitions a broker leads or replicates,
under-replicated partitions, topic by name).

Who calls it: :mod:`.delta` builds new images (never anything else);
:mod:`.loader` publishes them; brokers, standby controllers and the admin
service read them; :mod:`.snapshot` turns one back into records.

Immutability and sharing: every mapping is a read-only ``MappingProxyType``
over a dict nobody else holds, and an image is never changed after it is
built. A delta builds the next image reusing every part it did not touch: an
untouched ``TopicsImage`` is the same object, and a changed one copies only
the topic map (one entry per topic) and the partition maps of the topics that
changed, so one partition change on a 100,000-partition image costs the size
of the topic map plus one topic, not the whole image (Kafka uses persistent
maps for the same reason). Must not: import protobuf, do I/O, or validate
records (that is replay's job, in :mod:`.delta`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TypeVar

from kraftlog.ids import Uuid
from kraftlog.metadata import records as r

_K = TypeVar("_K")
_V = TypeVar("_V")


def frozen_map(items: dict[_K, _V]) -> Mapping[_K, _V]:
    """A read-only view of ``items``; the caller hands the dict over and keeps no reference."""
    return MappingProxyType(items)


def thaw(items: Mapping[_K, _V]) -> dict[_K, _V]:
    """A new dict with ``items``'s entries (for building the next image).

    ``dict(proxy)`` walks a ``MappingProxyType`` key by key through the mapping
    protocol; ``proxy.copy()`` is the C-level dict copy, ~20x faster, which is
    what keeps a small delta on a big image cheap.
    """
    if isinstance(items, MappingProxyType):
        copied: dict[_K, _V] = items.copy()
        return copied
    return dict(items)


_EMPTY_MAP: Mapping[object, object] = MappingProxyType({})


def _empty() -> Mapping[_K, _V]:
    return _EMPTY_MAP  # type: ignore[return-value]


# -- provenance ----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataProvenance:
    """Where an image stands in the metadata log (Kafka's ``MetadataProvenance``).

    ``last_offset`` is the offset of the last record (or the last offset a
    snapshot covers) applied, -1 for the empty image; ``last_epoch`` that
    record's batch epoch; ``last_append_timestamp_ms`` that batch's timestamp.
    """

    last_offset: int
    last_epoch: int
    last_append_timestamp_ms: int

    @property
    def snapshot_end_offset(self) -> int:
        """The end offset (exclusive) of a snapshot of an image with this provenance."""
        return self.last_offset + 1


EMPTY_PROVENANCE = MetadataProvenance(last_offset=-1, last_epoch=-1, last_append_timestamp_ms=-1)


# -- cluster -------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRegistration:
    """One registered broker, as its last RegisterBrokerRecord and later changes left it."""

    broker_id: int
    broker_epoch: int
    incarnation_id: Uuid
    endpoints: tuple[r.Endpoint, ...] = ()
    features: tuple[r.SupportedFeature, ...] = ()
    rack: str = ""
    fenced: bool = True
    in_controlled_shutdown: bool = False
    log_dirs: tuple[Uuid, ...] = ()

    @classmethod
    def from_record(cls, record: r.RegisterBrokerRecord) -> BrokerRegistration:
        return cls(broker_id=record.broker_id, broker_epoch=record.broker_epoch,
                   incarnation_id=record.incarnation_id, endpoints=record.endpoints,
                   features=record.features, rack=record.rack, fenced=record.fenced,
                   in_controlled_shutdown=record.in_controlled_shutdown,
                   log_dirs=record.log_dirs)

    def to_record(self) -> r.RegisterBrokerRecord:
        """The record that recreates this registration, fence state included (snapshots)."""
        return r.RegisterBrokerRecord(
            broker_id=self.broker_id, incarnation_id=self.incarnation_id,
            broker_epoch=self.broker_epoch, endpoints=self.endpoints, features=self.features,
            rack=self.rack, fenced=self.fenced,
            in_controlled_shutdown=self.in_controlled_shutdown, log_dirs=self.log_dirs)

    def with_state(self, *, fenced: bool | None = None,
                   in_controlled_shutdown: bool | None = None) -> BrokerRegistration:
        """A copy with the given flags changed (``None``: unchanged)."""
        return dataclasses.replace(
            self, fenced=self.fenced if fenced is None else fenced,
            in_controlled_shutdown=(self.in_controlled_shutdown if in_controlled_shutdown is None
                                    else in_controlled_shutdown))

    def endpoint(self, listener_name: str) -> r.Endpoint | None:
        """The endpoint of ``listener_name``, ``None`` when the broker has no such listener."""
        for endpoint in self.endpoints:
            if endpoint.listener_name == listener_name:
                return endpoint
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterImage:
    """Registered brokers by id."""

    brokers: Mapping[int, BrokerRegistration] = dataclasses.field(default_factory=_empty)

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self.brokers.get(broker_id)

    def is_active(self, broker_id: int) -> bool:
        """Registered, not fenced and not in controlled shutdown: may lead partitions."""
        broker = self.brokers.get(broker_id)
        return broker is not None and not broker.fenced and not broker.in_controlled_shutdown

    def unfenced_broker_ids(self) -> list[int]:
        """Ids of the registered, unfenced brokers, ascending."""
        return sorted(b.broker_id for b in self.brokers.values() if not b.fenced)


# -- topics and partitions -----------------------------------------------------------------------

def _without(items: tuple[int, ...], removed: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(i for i in items if i not in removed) if removed else items


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionRegistration:
    """One partition's replication state (Kafka's ``PartitionRegistration``)."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: r.LeaderRecoveryState = r.LeaderRecoveryState.RECOVERED
    elr: tuple[int, ...] = ()
    """Eligible leader replicas (KIP-966)."""
    last_known_elr: tuple[int, ...] = ()

    @classmethod
    def from_record(cls, record: r.PartitionRecord) -> PartitionRegistration:
        return cls(replicas=record.replicas, isr=record.isr, leader=record.leader,
                   leader_epoch=record.leader_epoch, partition_epoch=record.partition_epoch,
                   removing_replicas=record.removing_replicas,
                   adding_replicas=record.adding_replicas,
                   leader_recovery_state=record.leader_recovery_state,
                   elr=record.eligible_leader_replicas, last_known_elr=record.last_known_elr)

    def to_record(self, topic_id: Uuid, partition_id: int) -> r.PartitionRecord:
        return r.PartitionRecord(
            topic_id=topic_id, partition_id=partition_id, replicas=self.replicas, isr=self.isr,
            leader=self.leader, leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch, removing_replicas=self.removing_replicas,
            adding_replicas=self.adding_replicas,
            leader_recovery_state=self.leader_recovery_state,
            eligible_leader_replicas=self.elr, last_known_elr=self.last_known_elr)

    def merge(self, change: r.PartitionChangeRecord) -> PartitionRegistration:
        """The registration after ``change`` (Kafka's ``PartitionRegistration.merge``).

        Every change bumps the partition epoch by one. One that sets ``leader``,
        even to the current leader, also bumps the leader epoch by one: the
        controller uses that to fence the old leader's requests when replicas
        leave without a leader change.
        """
        if change.leader is None:
            leader, leader_epoch = self.leader, self.leader_epoch
        else:
            leader, leader_epoch = change.leader, self.leader_epoch + 1
        return PartitionRegistration(
            replicas=self.replicas if change.replicas is None else change.replicas,
            isr=self.isr if change.isr is None else change.isr,
            leader=leader, leader_epoch=leader_epoch, partition_epoch=self.partition_epoch + 1,
            removing_replicas=(self.removing_replicas if change.removing_replicas is None
                               else change.removing_replicas),
            adding_replicas=(self.adding_replicas if change.adding_replicas is None
                             else change.adding_replicas),
            leader_recovery_state=(self.leader_recovery_state
                                   if change.leader_recovery_state is None
                                   else change.leader_recovery_state),
            elr=self.elr if change.eligible_leader_replicas is None
            else change.eligible_leader_replicas,
            last_known_elr=(self.last_known_elr if change.last_known_elr is None
                            else change.last_known_elr))

    @property
    def has_leader(self) -> bool:
        return self.leader != r.NO_LEADER

    @property
    def preferred_leader(self) -> int:
        """The first replica (Kafka's preferred leader), -1 for an empty assignment."""
        return self.replicas[0] if self.replicas else r.NO_LEADER

    @property
    def is_reassigning(self) -> bool:
        """A KIP-455 reassignment is in progress."""
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """The replicas once the reassignment in progress completes (all, when none is)."""
        return _without(self.replicas, self.removing_replicas)

    @property
    def is_under_replicated(self) -> bool:
        """Fewer in-sync replicas than replicas (Kafka's UnderReplicatedPartitions)."""
        return len(self.isr) < len(self.replicas)

    def has_replica(self, broker_id: int) -> bool:
        return broker_id in self.replicas


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionInfo:
    """One partition with the names to address it: what queries and local changes return."""

    topic_id: Uuid
    topic_name: str
    partition_id: int
    registration: PartitionRegistration


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicImage:
    """One topic: its name, id, and partitions by index."""

    name: str
    topic_id: Uuid
    partitions: Mapping[int, PartitionRegistration] = dataclasses.field(default_factory=_empty)

    def partition(self, partition_id: int) -> PartitionRegistration | None:
        return self.partitions.get(partition_id)

    def partition_info(self, partition_id: int) -> PartitionInfo | None:
        registration = self.partitions.get(partition_id)
        if registration is None:
            return None
        return PartitionInfo(topic_id=self.topic_id, topic_name=self.name,
                             partition_id=partition_id, registration=registration)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicsImage:
    """Topics by id (``topics``) and the id of each name (``ids_by_name``).

    ``ids_by_name`` maps to ids rather than topic images so that a partition
    change shares it unchanged; only a create or delete copies it.
    """

    topics: Mapping[Uuid, TopicImage] = dataclasses.field(default_factory=_empty)
    ids_by_name: Mapping[str, Uuid] = dataclasses.field(default_factory=_empty)

    def get_topic(self, topic_id: Uuid) -> TopicImage | None:
        return self.topics.get(topic_id)

    def get_topic_by_name(self, name: str) -> TopicImage | None:
        topic_id = self.ids_by_name.get(name)
        return None if topic_id is None else self.topics.get(topic_id)

    def partition(self, topic_id: Uuid, partition_id: int) -> PartitionRegistration | None:
        topic = self.topics.get(topic_id)
        return None if topic is None else topic.partitions.get(partition_id)

    @property
    def partition_count(self) -> int:
        return sum(len(t.partitions) for t in self.topics.values())

    def all_partitions(self) -> Iterator[PartitionInfo]:
        for topic in self.topics.values():
            for partition_id, registration in topic.partitions.items():
                yield PartitionInfo(topic_id=topic.topic_id, topic_name=topic.name,
                                    partition_id=partition_id, registration=registration)

    # Scans, O(partitions): fine for admin calls and a broker's start-up; the
    # broker's steady state uses TopicsDelta.local_changes instead.

    def partitions_led_by(self, broker_id: int) -> Iterator[PartitionInfo]:
        return (p for p in self.all_partitions() if p.registration.leader == broker_id)

    def partitions_on_broker(self, broker_id: int) -> Iterator[PartitionInfo]:
        """Partitions that have ``broker_id`` among their replicas (leader or follower)."""
        return (p for p in self.all_partitions() if broker_id in p.registration.replicas)

    def under_replicated_partitions(self) -> Iterator[PartitionInfo]:
        return (p for p in self.all_partitions() if p.registration.is_under_replicated)

    def offline_partitions(self) -> Iterator[PartitionInfo]:
        """Partitions without a leader (Kafka's OfflinePartitionsCount)."""
        return (p for p in self.all_partitions() if not p.registration.has_leader)

    def reassigning_partitions(self) -> Iterator[PartitionInfo]:
        return (p for p in self.all_partitions() if p.registration.is_reassigning)


# -- configs, features, producer ids -------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class ConfigResource:
    """A config's owner: a topic by name, a broker by id ("" = the cluster-wide default)."""

    resource_type: r.ConfigResourceType
    resource_name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigsImage:
    """Dynamic configs: resource -> {config name: value}; resources without any are absent."""

    resources: Mapping[ConfigResource, Mapping[str, str]] = dataclasses.field(
        default_factory=_empty)

    def configs(self, resource: ConfigResource) -> Mapping[str, str]:
        return self.resources.get(resource, _empty())

    def topic_configs(self, topic_name: str) -> Mapping[str, str]:
        return self.configs(ConfigResource(resource_type=r.ConfigResourceType.TOPIC,
                                           resource_name=topic_name))

    def broker_configs(self, broker_id: int | None) -> Mapping[str, str]:
        """A broker's dynamic configs; ``None`` gives the cluster-wide broker default."""
        name = "" if broker_id is None else str(broker_id)
        return self.configs(ConfigResource(resource_type=r.ConfigResourceType.BROKER,
                                           resource_name=name))


@dataclass(frozen=True, slots=True, kw_only=True)
class FeaturesImage:
    """Finalized feature levels (KIP-584); a feature not present is at level 0."""

    levels: Mapping[str, int] = dataclasses.field(default_factory=_empty)

    def level(self, name: str) -> int:
        return self.levels.get(name, 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerIdsImage:
    """The next producer id to hand out; -1 before the first block (Kafka's EMPTY)."""

    next_producer_id: int = -1


# -- the whole image -----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataImage:
    """Everything the metadata log says, as of ``provenance``."""

    provenance: MetadataProvenance = EMPTY_PROVENANCE
    features: FeaturesImage = FeaturesImage()
    cluster: ClusterImage = ClusterImage()
    topics: TopicsImage = TopicsImage()
    configs: ConfigsImage = ConfigsImage()
    producer_ids: ProducerIdsImage = ProducerIdsImage()

    @property
    def is_empty(self) -> bool:
        """No state at all (provenance aside)."""
        return (not self.features.levels and not self.cluster.brokers
                and not self.topics.topics and not self.configs.resources
                and self.producer_ids.next_producer_id == -1)

    def same_state(self, other: MetadataImage) -> bool:
        """Equal apart from provenance (a replayed snapshot vs the image it was made of)."""
        return dataclasses.replace(other, provenance=self.provenance) == self


EMPTY = MetadataImage()
"""The image before any record."""
