"""Replaying metadata records onto an image: :class:`MetadataDelta` and its per-part deltas.

Owns Kafka's replay rules (``org.apache.kafka.image.*Delta``):

* RegisterBrokerRecord replaces any earlier registration of the broker;
  UnregisterBrokerRecord removes it; FenceBrokerRecord / UnfenceBrokerRecord /
  BrokerRegistrationChangeRecord flip its flags (``None``: unchanged). All but
  Register name the broker epoch, which must be the registered one.
* TopicRecord creates a topic; RemoveTopicRecord removes it, its partitions
  and its topic configs. PartitionRecord sets a partition's full state;
  PartitionChangeRecord merges the fields it sets (every change bumps the
  partition epoch, one that sets ``leader`` also the leader epoch; see
  :meth:`~kraftlog.metadata.image.PartitionRegistration.merge`).
* ConfigRecord sets a value, or removes it when ``value`` is ``None``;
  FeatureLevelRecord sets a level, level 0 removes the feature;
  ProducerIdsRecord sets the next producer id; NoOpRecord changes nothing.

Committed metadata is trusted: a record that names an unknown topic,
partition or broker, a stale broker epoch, or a second topic of a name means
the log is corrupt or the controller has a bug, so replay raises
:class:`ReplayError` (an :class:`~kraftlog.errors.InvariantViolation`) naming
the offset, and the delta must be thrown away.

A delta made with ``from_snapshot=True`` is a snapshot load (Kafka's
``finishSnapshot``): the records describe the whole state, so anything of the
base image they do not mention is removed by :meth:`MetadataDelta.apply`, and
the delta still tells a broker what changed relative to the image it had
(:meth:`TopicsDelta.local_changes`).

Who calls it: :mod:`.loader` (brokers, standby controllers), tests, and the
controller when it wants an image of its own state. Must not: import protobuf,
do I/O, or copy parts of the image it does not change (see :mod:`.image`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kraftlog.errors import InvariantViolation
from kraftlog.ids import Uuid
from kraftlog.metadata import image as im
from kraftlog.metadata import records as r


class ReplayError(InvariantViolation):
    """A committed record cannot apply to the image: corruption or a controller bug. Fatal."""

    def __init__(self, offset: int, message: str):
        super().__init__(f"metadata record at offset {offset}: {message}")
        self.offset = offset


# -- features ------------------------------------------------------------------------------------

class FeaturesDelta:
    """Changed finalized feature levels; ``None`` marks a removed feature."""

    def __init__(self, image: im.FeaturesImage):
        self.image = image
        self._changes: dict[str, int | None] = {}

    @property
    def changes(self) -> Mapping[str, int | None]:
        return self._changes

    def replay(self, record: r.FeatureLevelRecord) -> None:
        self._changes[record.name] = record.feature_level if record.feature_level != 0 else None

    def finish_snapshot(self) -> None:
        for name in self.image.levels:
            self._changes.setdefault(name, None)

    def apply(self) -> im.FeaturesImage:
        levels = im.thaw(self.image.levels)
        for name, level in self._changes.items():
            if level is None:
                levels.pop(name, None)
            else:
                levels[name] = level
        return im.FeaturesImage(levels=im.frozen_map(levels))


# -- cluster -------------------------------------------------------------------------------------

class ClusterDelta:
    """Changed broker registrations; ``None`` marks an unregistered broker."""

    def __init__(self, image: im.ClusterImage, *, from_snapshot: bool = False):
        self.image = image
        self._from_snapshot = from_snapshot
        self._changes: dict[int, im.BrokerRegistration | None] = {}

    @property
    def changed_brokers(self) -> Mapping[int, im.BrokerRegistration | None]:
        return self._changes

    def broker(self, broker_id: int) -> im.BrokerRegistration | None:
        """The registration as of the records replayed so far."""
        if broker_id in self._changes:
            return self._changes[broker_id]
        if self._from_snapshot:
            return None  # a snapshot re-registers every broker it keeps
        return self.image.brokers.get(broker_id)

    def _registered(self, broker_id: int, broker_epoch: int, offset: int,
                    action: str) -> im.BrokerRegistration:
        broker = self.broker(broker_id)
        if broker is None:
            raise ReplayError(offset, f"cannot {action} broker {broker_id}: not registered")
        if broker.broker_epoch != broker_epoch:
            raise ReplayError(offset, f"cannot {action} broker {broker_id} at broker epoch "
                                      f"{broker_epoch}: its registration has epoch "
                                      f"{broker.broker_epoch}")
        return broker

    def replay_register(self, record: r.RegisterBrokerRecord) -> None:
        self._changes[record.broker_id] = im.BrokerRegistration.from_record(record)

    def replay_unregister(self, record: r.UnregisterBrokerRecord, offset: int) -> None:
        self._registered(record.broker_id, record.broker_epoch, offset, "unregister")
        self._changes[record.broker_id] = None

    def replay_fence(self, record: r.FenceBrokerRecord, offset: int) -> None:
        broker = self._registered(record.broker_id, record.broker_epoch, offset, "fence")
        self._changes[record.broker_id] = broker.with_state(fenced=True)

    def replay_unfence(self, record: r.UnfenceBrokerRecord, offset: int) -> None:
        broker = self._registered(record.broker_id, record.broker_epoch, offset, "unfence")
        self._changes[record.broker_id] = broker.with_state(fenced=False)

    def replay_change(self, record: r.BrokerRegistrationChangeRecord, offset: int) -> None:
        broker = self._registered(record.broker_id, record.broker_epoch, offset, "change")
        self._changes[record.broker_id] = broker.with_state(
            fenced=record.fenced, in_controlled_shutdown=record.in_controlled_shutdown)

    def finish_snapshot(self) -> None:
        for broker_id in self.image.brokers:
            self._changes.setdefault(broker_id, None)

    def apply(self) -> im.ClusterImage:
        brokers = im.thaw(self.image.brokers)
        for broker_id, registration in self._changes.items():
            if registration is None:
                brokers.pop(broker_id, None)
            else:
                brokers[broker_id] = registration
        return im.ClusterImage(brokers=im.frozen_map(brokers))


# -- topics --------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class LocalReplicaChanges:
    """What one broker must do after a delta (Kafka's ``LocalReplicaChanges``).

    ``deletes``: replicas it held and no longer holds (topic deleted, or moved
    off it by a reassignment), with their last registration. ``leaders`` /
    ``followers``: partitions it now leads / follows whose registration
    changed (new partition epoch) or that are new. ``elected_leaders``: the
    subset of ``leaders`` with a new leader epoch (it just became leader, or
    was re-elected), where it must start a new leader epoch.
    """

    deletes: tuple[im.PartitionInfo, ...] = ()
    leaders: tuple[im.PartitionInfo, ...] = ()
    followers: tuple[im.PartitionInfo, ...] = ()
    elected_leaders: tuple[im.PartitionInfo, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not (self.deletes or self.leaders or self.followers)


class TopicDelta:
    """Changes to one topic. ``base`` is its image before the delta, ``None`` when created.

    ``replaced`` (snapshot loads only): the topic's partitions are exactly
    those replayed; partitions of ``base`` not replayed are gone.
    """

    def __init__(self, *, topic_id: Uuid, name: str, base: im.TopicImage | None,
                 replaced: bool = False):
        self.topic_id = topic_id
        self.name = name
        self.base = base
        self.replaced = replaced
        self._partitions: dict[int, im.PartitionRegistration] = {}

    @property
    def partition_changes(self) -> Mapping[int, im.PartitionRegistration]:
        return self._partitions

    @property
    def created(self) -> bool:
        return self.base is None

    def partition(self, partition_id: int) -> im.PartitionRegistration | None:
        """The registration as of the records replayed so far."""
        found = self._partitions.get(partition_id)
        if found is not None or self.base is None or self.replaced:
            return found
        return self.base.partitions.get(partition_id)

    def set_partition(self, partition_id: int, registration: im.PartitionRegistration) -> None:
        self._partitions[partition_id] = registration

    def _previous(self, partition_id: int) -> im.PartitionRegistration | None:
        return None if self.base is None else self.base.partitions.get(partition_id)

    def apply(self) -> im.TopicImage:
        base = self.base
        if base is not None and not self.replaced:
            if not self._partitions and base.name == self.name:
                return base
            partitions = im.thaw(base.partitions)
            partitions.update(self._partitions)
        else:
            partitions = dict(self._partitions)
        return im.TopicImage(name=self.name, topic_id=self.topic_id,
                             partitions=im.frozen_map(partitions))

    def collect_local_changes(self, broker_id: int, changes: _LocalChangesBuilder) -> None:
        """Add this topic's changes for ``broker_id`` (Kafka's ``TopicDelta.localChanges``)."""
        for partition_id, registration in self._partitions.items():
            previous = self._previous(partition_id)
            info = im.PartitionInfo(topic_id=self.topic_id, topic_name=self.name,
                                    partition_id=partition_id, registration=registration)
            if broker_id not in registration.replicas:
                if previous is not None and broker_id in previous.replicas:
                    changes.deletes.append(im.PartitionInfo(
                        topic_id=self.topic_id, topic_name=self.name,
                        partition_id=partition_id, registration=previous))
            elif previous is not None and previous.partition_epoch == registration.partition_epoch:
                continue  # replayed without a change (a snapshot repeating the same state)
            elif registration.leader == broker_id:
                changes.leaders.append(info)
                if previous is None or previous.leader_epoch != registration.leader_epoch:
                    changes.elected_leaders.append(info)
            else:
                changes.followers.append(info)
        if self.replaced and self.base is not None:
            for partition_id, previous in self.base.partitions.items():
                if partition_id not in self._partitions and broker_id in previous.replicas:
                    changes.deletes.append(im.PartitionInfo(
                        topic_id=self.topic_id, topic_name=self.base.name,
                        partition_id=partition_id, registration=previous))


@dataclass(slots=True)
class _LocalChangesBuilder:
    deletes: list[im.PartitionInfo]
    leaders: list[im.PartitionInfo]
    followers: list[im.PartitionInfo]
    elected_leaders: list[im.PartitionInfo]


class TopicsDelta:
    """Created, changed and deleted topics relative to ``image``."""

    def __init__(self, image: im.TopicsImage, *, from_snapshot: bool = False):
        self.image = image
        self._from_snapshot = from_snapshot
        self._changed: dict[Uuid, TopicDelta] = {}
        self._deleted: dict[Uuid, im.TopicImage] = {}
        # Names of topics created by this delta (TopicRecord), to refuse a second one.
        self._created_names: dict[str, Uuid] = {}

    @property
    def changed_topics(self) -> Mapping[Uuid, TopicDelta]:
        """Topics created or changed (a deleted-then-recreated id appears in both)."""
        return self._changed

    @property
    def deleted_topics(self) -> Mapping[Uuid, im.TopicImage]:
        """Topics of the base image this delta deletes, as they were."""
        return self._deleted

    def created_topic_ids(self) -> list[Uuid]:
        return [topic_id for topic_id, delta in self._changed.items() if delta.created]

    def _live_in_image(self, topic_id: Uuid) -> im.TopicImage | None:
        if self._from_snapshot or topic_id in self._deleted:
            return None
        return self.image.topics.get(topic_id)

    def topic(self, topic_id: Uuid, offset: int) -> TopicDelta:
        """The delta of a topic that exists as of the records replayed so far."""
        delta = self._changed.get(topic_id)
        if delta is not None:
            return delta
        base = self._live_in_image(topic_id)
        if base is None:
            raise ReplayError(offset, f"unknown topic id {topic_id}")
        delta = TopicDelta(topic_id=topic_id, name=base.name, base=base)
        self._changed[topic_id] = delta
        return delta

    def _name_owner(self, name: str) -> Uuid | None:
        owner = self._created_names.get(name)
        if owner is not None or self._from_snapshot:
            return owner
        owner = self.image.ids_by_name.get(name)
        return None if owner is None or owner in self._deleted else owner

    def replay_topic(self, record: r.TopicRecord, offset: int) -> None:
        topic_id = record.topic_id
        if topic_id in self._changed or self._live_in_image(topic_id) is not None:
            raise ReplayError(offset, f"topic id {topic_id} ({record.name!r}) already exists")
        owner = self._name_owner(record.name)
        if owner is not None:
            raise ReplayError(offset, f"topic {record.name!r} ({topic_id}) already exists "
                                      f"with id {owner}")
        base = self.image.topics.get(topic_id) if self._from_snapshot else None
        # In a snapshot load, a topic the image already has is replaced whole but keeps its
        # base, so that local_changes compares against what the broker had.
        self._changed[topic_id] = TopicDelta(topic_id=topic_id, name=record.name, base=base,
                                             replaced=base is not None)
        self._created_names[record.name] = topic_id

    def replay_remove_topic(self, record: r.RemoveTopicRecord, offset: int) -> str:
        """Remove the topic; returns its name (so its configs can go too)."""
        topic_id = record.topic_id
        delta = self._changed.pop(topic_id, None)
        if delta is None:
            base = self._live_in_image(topic_id)
            if base is None:
                raise ReplayError(offset, f"cannot remove unknown topic id {topic_id}")
            self._deleted[topic_id] = base
            return base.name
        if delta.base is not None:
            self._deleted[topic_id] = delta.base
        if self._created_names.get(delta.name) == topic_id:
            del self._created_names[delta.name]
        return delta.name

    def replay_partition(self, record: r.PartitionRecord, offset: int) -> None:
        delta = self.topic(record.topic_id, offset)
        delta.set_partition(record.partition_id, im.PartitionRegistration.from_record(record))

    def replay_partition_change(self, record: r.PartitionChangeRecord, offset: int) -> None:
        delta = self.topic(record.topic_id, offset)
        current = delta.partition(record.partition_id)
        if current is None:
            raise ReplayError(offset, f"unknown partition {delta.name}-{record.partition_id} "
                                      f"(topic id {record.topic_id})")
        delta.set_partition(record.partition_id, current.merge(record))

    def finish_snapshot(self) -> None:
        for topic_id, topic in self.image.topics.items():
            if topic_id not in self._changed:
                self._deleted.setdefault(topic_id, topic)

    def apply(self) -> im.TopicsImage:
        topics = im.thaw(self.image.topics)
        names_changed = bool(self._deleted)
        for topic_id in self._deleted:
            del topics[topic_id]
        for topic_id, delta in self._changed.items():
            topics[topic_id] = delta.apply()
            if delta.base is None or delta.base.name != delta.name or topic_id in self._deleted:
                names_changed = True
        if not names_changed:
            return im.TopicsImage(topics=im.frozen_map(topics), ids_by_name=self.image.ids_by_name)
        ids_by_name = im.thaw(self.image.ids_by_name)
        for topic_id, old in self._deleted.items():
            if ids_by_name.get(old.name) == topic_id:
                del ids_by_name[old.name]
        for topic_id, delta in self._changed.items():
            if delta.base is not None and ids_by_name.get(delta.base.name) == topic_id:
                del ids_by_name[delta.base.name]
        for topic_id, delta in self._changed.items():
            ids_by_name[delta.name] = topic_id
        return im.TopicsImage(topics=im.frozen_map(topics), ids_by_name=im.frozen_map(ids_by_name))

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        """What ``broker_id`` must now lead, follow, or delete (Kafka's ``localChanges``)."""
        changes = _LocalChangesBuilder([], [], [], [])
        for topic_id, old in self._deleted.items():
            for partition_id, registration in old.partitions.items():
                if broker_id in registration.replicas:
                    changes.deletes.append(im.PartitionInfo(
                        topic_id=topic_id, topic_name=old.name, partition_id=partition_id,
                        registration=registration))
        for delta in self._changed.values():
            delta.collect_local_changes(broker_id, changes)
        return LocalReplicaChanges(deletes=tuple(changes.deletes), leaders=tuple(changes.leaders),
                                   followers=tuple(changes.followers),
                                   elected_leaders=tuple(changes.elected_leaders))


# -- configs -------------------------------------------------------------------------------------

class ConfigsDelta:
    """Each changed resource's complete new configs ({} = none left)."""

    def __init__(self, image: im.ConfigsImage, *, from_snapshot: bool = False):
        self.image = image
        self._from_snapshot = from_snapshot
        self._changes: dict[im.ConfigResource, dict[str, str]] = {}

    @property
    def changes(self) -> Mapping[im.ConfigResource, Mapping[str, str]]:
        return self._changes

    def _configs(self, resource: im.ConfigResource) -> dict[str, str]:
        configs = self._changes.get(resource)
        if configs is None:
            # A snapshot lists every config of a resource, so it starts from none.
            configs = {} if self._from_snapshot else im.thaw(self.image.configs(resource))
            self._changes[resource] = configs
        return configs

    def replay(self, record: r.ConfigRecord) -> None:
        configs = self._configs(im.ConfigResource(resource_type=record.resource_type,
                                                  resource_name=record.resource_name))
        if record.value is None:
            configs.pop(record.name, None)
        else:
            configs[record.name] = record.value

    def delete_resource(self, resource: im.ConfigResource) -> None:
        """Drop every config of ``resource`` (its topic was removed)."""
        if resource in self._changes or resource in self.image.resources:
            self._changes[resource] = {}

    def finish_snapshot(self) -> None:
        for resource in self.image.resources:
            self._changes.setdefault(resource, {})

    def apply(self) -> im.ConfigsImage:
        resources = im.thaw(self.image.resources)
        for resource, configs in self._changes.items():
            if configs:
                resources[resource] = im.frozen_map(dict(configs))
            else:
                resources.pop(resource, None)
        return im.ConfigsImage(resources=im.frozen_map(resources))


# -- producer ids --------------------------------------------------------------------------------

class ProducerIdsDelta:
    def __init__(self, image: im.ProducerIdsImage):
        self.image = image
        self.next_producer_id = image.next_producer_id

    def replay(self, record: r.ProducerIdsRecord) -> None:
        self.next_producer_id = record.next_producer_id

    def apply(self) -> im.ProducerIdsImage:
        return im.ProducerIdsImage(next_producer_id=self.next_producer_id)


# -- the whole delta -----------------------------------------------------------------------------

class MetadataDelta:
    """Records replayed onto ``image``; :meth:`apply` gives the next image.

    A part's delta is ``None`` until a record touches it (publishers check that
    cheaply), and :meth:`apply` reuses untouched parts of ``image`` as they are.
    Not thread-safe and single-use in spirit: keep replaying after ``apply`` if
    you like, but each ``apply`` builds from ``image``, not from the last result.
    """

    def __init__(self, image: im.MetadataImage, *, from_snapshot: bool = False):
        self.image = image
        self.from_snapshot = from_snapshot
        self._features: FeaturesDelta | None = None
        self._cluster: ClusterDelta | None = None
        self._topics: TopicsDelta | None = None
        self._configs: ConfigsDelta | None = None
        self._producer_ids: ProducerIdsDelta | None = None
        self._last_offset = image.provenance.last_offset
        self._last_epoch = image.provenance.last_epoch
        self._last_append_timestamp_ms = image.provenance.last_append_timestamp_ms
        self._finished_snapshot = False
        if from_snapshot:
            # A snapshot that holds none of a part still empties it.
            self._features_delta()
            self._cluster_delta()
            self._topics_delta()
            self._configs_delta()
            self._producer_ids = ProducerIdsDelta(self.image.producer_ids)
            self._producer_ids.next_producer_id = -1

    # Parts, None when untouched.

    @property
    def features_delta(self) -> FeaturesDelta | None:
        return self._features

    @property
    def cluster_delta(self) -> ClusterDelta | None:
        return self._cluster

    @property
    def topics_delta(self) -> TopicsDelta | None:
        return self._topics

    @property
    def configs_delta(self) -> ConfigsDelta | None:
        return self._configs

    @property
    def producer_ids_delta(self) -> ProducerIdsDelta | None:
        return self._producer_ids

    def _features_delta(self) -> FeaturesDelta:
        if self._features is None:
            self._features = FeaturesDelta(self.image.features)
        return self._features

    def _cluster_delta(self) -> ClusterDelta:
        if self._cluster is None:
            self._cluster = ClusterDelta(self.image.cluster, from_snapshot=self.from_snapshot)
        return self._cluster

    def _topics_delta(self) -> TopicsDelta:
        if self._topics is None:
            self._topics = TopicsDelta(self.image.topics, from_snapshot=self.from_snapshot)
        return self._topics

    def _configs_delta(self) -> ConfigsDelta:
        if self._configs is None:
            self._configs = ConfigsDelta(self.image.configs, from_snapshot=self.from_snapshot)
        return self._configs

    # Replay.

    def replay(self, record: r.MetadataRecord, offset: int, epoch: int) -> None:
        """Apply one committed record, at log ``offset`` in a batch of leader ``epoch``."""
        # Most frequent first: partition changes and (in snapshots) partitions.
        if isinstance(record, r.PartitionChangeRecord):
            self._topics_delta().replay_partition_change(record, offset)
        elif isinstance(record, r.PartitionRecord):
            self._topics_delta().replay_partition(record, offset)
        elif isinstance(record, r.TopicRecord):
            self._topics_delta().replay_topic(record, offset)
        elif isinstance(record, r.RemoveTopicRecord):
            name = self._topics_delta().replay_remove_topic(record, offset)
            self._configs_delta().delete_resource(im.ConfigResource(
                resource_type=r.ConfigResourceType.TOPIC, resource_name=name))
        elif isinstance(record, r.RegisterBrokerRecord):
            self._cluster_delta().replay_register(record)
        elif isinstance(record, r.UnregisterBrokerRecord):
            self._cluster_delta().replay_unregister(record, offset)
        elif isinstance(record, r.FenceBrokerRecord):
            self._cluster_delta().replay_fence(record, offset)
        elif isinstance(record, r.UnfenceBrokerRecord):
            self._cluster_delta().replay_unfence(record, offset)
        elif isinstance(record, r.BrokerRegistrationChangeRecord):
            self._cluster_delta().replay_change(record, offset)
        elif isinstance(record, r.ConfigRecord):
            self._configs_delta().replay(record)
        elif isinstance(record, r.FeatureLevelRecord):
            self._features_delta().replay(record)
        elif isinstance(record, r.ProducerIdsRecord):
            if self._producer_ids is None:
                self._producer_ids = ProducerIdsDelta(self.image.producer_ids)
            self._producer_ids.replay(record)
        elif not isinstance(record, r.NoOpRecord):
            raise ReplayError(offset, f"not a metadata record: {record!r}")
        self._last_offset = offset
        self._last_epoch = epoch

    def set_provenance(self, provenance: im.MetadataProvenance) -> None:
        """Where the next image stands (the loader sets it per batch, and per snapshot)."""
        self._last_offset = provenance.last_offset
        self._last_epoch = provenance.last_epoch
        self._last_append_timestamp_ms = provenance.last_append_timestamp_ms

    @property
    def provenance(self) -> im.MetadataProvenance:
        return im.MetadataProvenance(last_offset=self._last_offset, last_epoch=self._last_epoch,
                                     last_append_timestamp_ms=self._last_append_timestamp_ms)

    def apply(self) -> im.MetadataImage:
        """The image after every record replayed so far."""
        if self.from_snapshot and not self._finished_snapshot:
            for part in (self._features, self._cluster, self._topics, self._configs):
                if part is not None:
                    part.finish_snapshot()
            self._finished_snapshot = True
        image = self.image
        return im.MetadataImage(
            provenance=self.provenance,
            features=image.features if self._features is None else self._features.apply(),
            cluster=image.cluster if self._cluster is None else self._cluster.apply(),
            topics=image.topics if self._topics is None else self._topics.apply(),
            configs=image.configs if self._configs is None else self._configs.apply(),
            producer_ids=(image.producer_ids if self._producer_ids is None
                          else self._producer_ids.apply()))
