"""ReplicationControlManager: topics, partitions, leader election, ISR, reassignment.

Owns the topics and partitions (timeline maps replayed from Topic/Partition/
PartitionChange/RemoveTopic records) and the indexes kept with them (brokers
to the partitions they hold in ISR / ELR / lead, leaderless, imbalanced and
reassigning partitions). Generates the records of CreateTopics, DeleteTopics,
CreatePartitions, AlterPartition, ElectLeaders, AlterPartitionReassignments
(KIP-455), auto leader rebalance, and the leader/ISR moves of broker fencing,
unfencing, controlled shutdown and unregistration. After Kafka's
``ReplicationControlManager``; the election rules are in
:mod:`kraftlog.controller.partition_change`.

Called by ControllerState. Generation reads LATEST and changes nothing; only
the ``replay_*`` methods change state. Every structure here is registered with
the controller's SnapshotRegistry, so a revert restores all of it.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from kraftlog.controller import api, replica_placer
from kraftlog.controller.cluster_control import ClusterControlManager
from kraftlog.controller.configuration_control import ConfigurationControlManager
from kraftlog.controller.controller_config import ControllerConfig
from kraftlog.controller.partition_change import (
    Election,
    PartitionChangeBuilder,
    PartitionRegistration,
    ReassignmentReplicas,
    ReassignmentRevert,
    TopicIdPartition,
)
from kraftlog.controller.result import ControllerResult
from kraftlog.error_codes import ErrorCode
from kraftlog.errors import InvariantViolation
from kraftlog.ids import ZERO_UUID, Uuid, random_uuid
from kraftlog.metadata.records import (
    NO_LEADER,
    ConfigRecord,
    LeaderRecoveryState,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from kraftlog.timeline import snapshot_registry, timeline_hash_map, timeline_hash_set

LATEST_EPOCH = snapshot_registry.LATEST_EPOCH
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
_UNKNOWN_PARTITION = "This server does not host this topic-partition."

BrokerSets = timeline_hash_map.TimelineHashMap[
    int, timeline_hash_set.TimelineHashSet[TopicIdPartition]
]


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicInfo:
    """A topic; its partitions are ``0 .. num_partitions - 1`` in the partitions map."""

    name: str
    topic_id: Uuid
    num_partitions: int = 0


def validate_topic_name(name: str) -> None:
    """Kafka's ``Topic.validate``: raises INVALID_TOPIC_EXCEPTION."""
    if not name:
        raise api.RequestError(
            ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty"
        )
    if name in (".", ".."):
        raise api.RequestError(
            ErrorCode.INVALID_TOPIC_EXCEPTION, 'Topic name cannot be "." or ".."'
        )
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise api.RequestError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} "
            f"characters, topic name: {name}",
        )
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        raise api.RequestError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'",
        )


def _collision_key(name: str) -> str:
    # '.' and '_' collide in metric names, so Kafka refuses topics differing only there.
    return name.replace(".", "_")


class ReplicationControlManager:
    """Topics and partitions in timeline state, and the records that change them."""

    def __init__(
        self,
        registry: snapshot_registry.SnapshotRegistry,
        config: ControllerConfig,
        cluster: ClusterControlManager,
        configuration: ConfigurationControlManager,
        rng: random.Random,
    ) -> None:
        self._registry = registry
        self._config = config
        self._cluster = cluster
        self._configuration = configuration
        self._rng = rng
        self.topics: timeline_hash_map.TimelineHashMap[Uuid, TopicInfo] = (
            timeline_hash_map.TimelineHashMap(registry)
        )
        self.topics_by_name: timeline_hash_map.TimelineHashMap[str, Uuid] = (
            timeline_hash_map.TimelineHashMap(registry)
        )
        self.partitions: timeline_hash_map.TimelineHashMap[
            TopicIdPartition, PartitionRegistration
        ] = timeline_hash_map.TimelineHashMap(registry)
        # Names containing '.' or '_' by collision key (see _collision_key).
        self._collision_names: timeline_hash_map.TimelineHashMap[str, str] = (
            timeline_hash_map.TimelineHashMap(registry)
        )
        # Indexes, maintained at replay (Kafka's BrokersToIsrs / BrokersToElrs /
        # imbalancedPartitions / reassigningTopics).
        self._isr_members: BrokerSets = timeline_hash_map.TimelineHashMap(registry)
        self._elr_members: BrokerSets = timeline_hash_map.TimelineHashMap(registry)
        self._led_by: BrokerSets = timeline_hash_map.TimelineHashMap(registry)
        self._leaderless: timeline_hash_set.TimelineHashSet[TopicIdPartition] = (
            timeline_hash_set.TimelineHashSet(registry)
        )
        self._imbalanced: timeline_hash_set.TimelineHashSet[TopicIdPartition] = (
            timeline_hash_set.TimelineHashSet(registry)
        )
        self._reassigning: timeline_hash_set.TimelineHashSet[TopicIdPartition] = (
            timeline_hash_set.TimelineHashSet(registry)
        )

    # == replay ==========================================================================

    def replay_topic(self, record: TopicRecord) -> None:
        self.topics[record.topic_id] = TopicInfo(name=record.name, topic_id=record.topic_id)
        self.topics_by_name[record.name] = record.topic_id
        if "." in record.name or "_" in record.name:
            self._collision_names[_collision_key(record.name)] = record.name

    def replay_partition(self, record: PartitionRecord) -> None:
        topic = self.topics.get(record.topic_id)
        if topic is None:
            raise InvariantViolation(f"replaying {record!r}: unknown topic id {record.topic_id}")
        tp = TopicIdPartition(record.topic_id, record.partition_id)
        old = self.partitions.get(tp)
        if old is not None:
            self._index(tp, old, add=False)
        partition = PartitionRegistration.from_record(record)
        self.partitions[tp] = partition
        self._index(tp, partition, add=True)
        if record.partition_id >= topic.num_partitions:
            self.topics[record.topic_id] = TopicInfo(
                name=topic.name, topic_id=topic.topic_id, num_partitions=record.partition_id + 1
            )

    def replay_partition_change(
        self, record: PartitionChangeRecord
    ) -> tuple[PartitionRegistration, PartitionRegistration]:
        """Apply a change; returns (before, after) so the caller can note who lost what."""
        tp = TopicIdPartition(record.topic_id, record.partition_id)
        old = self.partitions.get(tp)
        if old is None:
            raise InvariantViolation(f"replaying {record!r}: unknown partition {tp}")
        new = old.merge(record)
        self.partitions[tp] = new
        self._reindex(tp, old, new)
        return old, new

    def replay_remove_topic(self, record: RemoveTopicRecord) -> str:
        """Remove a topic and its partitions; returns its name."""
        topic = self.topics.get(record.topic_id)
        if topic is None:
            raise InvariantViolation(f"replaying {record!r}: unknown topic id {record.topic_id}")
        for partition_id in range(topic.num_partitions):
            tp = TopicIdPartition(record.topic_id, partition_id)
            partition = self.partitions.pop(tp, None)
            if partition is not None:
                self._index(tp, partition, add=False)
        del self.topics[record.topic_id]
        del self.topics_by_name[topic.name]
        key = _collision_key(topic.name)
        if self._collision_names.get(key) == topic.name:
            del self._collision_names[key]
        return topic.name

    def _index(self, tp: TopicIdPartition, partition: PartitionRegistration, *, add: bool) -> None:
        for broker in partition.isr:
            self._update_member(self._isr_members, broker, tp, add)
        for broker in partition.elr:
            self._update_member(self._elr_members, broker, tp, add)
        if partition.leader == NO_LEADER:
            self._update_set(self._leaderless, tp, add)
        else:
            self._update_member(self._led_by, partition.leader, tp, add)
        if partition.is_reassigning():
            self._update_set(self._reassigning, tp, add)
        if not partition.has_preferred_leader():
            self._update_set(self._imbalanced, tp, add)

    def _reindex(
        self, tp: TopicIdPartition, old: PartitionRegistration, new: PartitionRegistration
    ) -> None:
        """Move ``tp`` in the indexes from ``old``'s entries to ``new``'s, touching only
        what changed (a fenced broker's ISR removal touches one set, not every member's)."""
        if old.isr != new.isr:
            for broker in set(old.isr).difference(new.isr):
                self._update_member(self._isr_members, broker, tp, False)
            for broker in set(new.isr).difference(old.isr):
                self._update_member(self._isr_members, broker, tp, True)
        if old.elr != new.elr:
            for broker in set(old.elr).difference(new.elr):
                self._update_member(self._elr_members, broker, tp, False)
            for broker in set(new.elr).difference(old.elr):
                self._update_member(self._elr_members, broker, tp, True)
        if old.leader != new.leader:
            if old.leader == NO_LEADER:
                self._leaderless.discard(tp)
            else:
                self._update_member(self._led_by, old.leader, tp, False)
            if new.leader == NO_LEADER:
                self._leaderless.add(tp)
            else:
                self._update_member(self._led_by, new.leader, tp, True)
        if old.is_reassigning() != new.is_reassigning():
            self._update_set(self._reassigning, tp, new.is_reassigning())
        if old.has_preferred_leader() != new.has_preferred_leader():
            self._update_set(self._imbalanced, tp, not new.has_preferred_leader())

    def _update_member(
        self, index: BrokerSets, broker: int, tp: TopicIdPartition, add: bool
    ) -> None:
        members = index.get(broker)
        if add:
            if members is None:
                members = timeline_hash_set.TimelineHashSet(self._registry)
                index[broker] = members
            members.add(tp)
        elif members is not None:
            members.discard(tp)

    @staticmethod
    def _update_set(
        members: timeline_hash_set.TimelineHashSet[TopicIdPartition],
        tp: TopicIdPartition,
        add: bool,
    ) -> None:
        if add:
            members.add(tp)
        else:
            members.discard(tp)

    # == reads ===========================================================================

    def topic_exists(self, name: str, epoch: int = LATEST_EPOCH) -> bool:
        return self.topics_by_name.contains(name, epoch)

    def partitions_with_broker_in_isr(self, broker_id: int) -> list[TopicIdPartition]:
        return sorted(self._isr_members.get(broker_id) or ())

    def partitions_with_broker_in_elr(self, broker_id: int) -> list[TopicIdPartition]:
        return sorted(self._elr_members.get(broker_id) or ())

    def partitions_led_by(self, broker_id: int) -> list[TopicIdPartition]:
        return sorted(self._led_by.get(broker_id) or ())

    def has_leaderships(self, broker_id: int) -> bool:
        return bool(self._led_by.get(broker_id))

    def leaderless_partitions(self) -> list[TopicIdPartition]:
        return sorted(self._leaderless)

    def imbalanced_partitions(self) -> list[TopicIdPartition]:
        return sorted(self._imbalanced)

    def topic_name(self, topic_id: Uuid) -> str:
        return self.topics[topic_id].name

    # == shared generation helpers =======================================================

    def _builder(
        self,
        tp: TopicIdPartition,
        partition: PartitionRegistration,
        *,
        is_acceptable_leader: Callable[[int], bool] | None = None,
    ) -> PartitionChangeBuilder:
        topic = self.topics[tp.topic_id].name
        builder = PartitionChangeBuilder(
            partition,
            tp,
            is_acceptable_leader=is_acceptable_leader or self._cluster.is_active,
            min_isr=self._configuration.effective_min_isr(topic),
            elr_enabled=self._config.eligible_leader_replicas_enable,
        )
        if self._configuration.unclean_leader_election_enabled(topic):
            builder.election = Election.UNCLEAN
        return builder

    def generate_leader_and_isr_updates(
        self,
        records: list[MetadataRecord],
        partitions: Iterable[TopicIdPartition],
        *,
        broker_to_remove: int = NO_LEADER,
        broker_to_add: int = NO_LEADER,
        unclean_shutdown_broker: int = NO_LEADER,
        budget: int,
    ) -> bool:
        """Append changes moving each partition off ``broker_to_remove`` (out of its ISR and
        leadership), letting ``broker_to_add`` lead although the registry still shows it
        fenced, and dropping ``unclean_shutdown_broker`` from ISR and ELR (KIP-966).
        Kafka's ``generateLeaderAndIsrUpdates``. Returns False if it stopped at ``budget``
        records (the caller goes on in a later operation)."""
        removed = {broker_to_remove, unclean_shutdown_broker} - {NO_LEADER}

        def acceptable(replica: int) -> bool:
            if replica in removed:
                return False
            return replica == broker_to_add or self._cluster.is_active(replica)

        for tp in partitions:
            if len(records) >= budget:
                return False
            partition = self.partitions[tp]
            builder = self._builder(tp, partition, is_acceptable_leader=acceptable)
            if unclean_shutdown_broker != NO_LEADER:
                builder.unclean_shutdown_replicas = frozenset({unclean_shutdown_broker})
                builder.target_elr = tuple(
                    r for r in builder.target_elr if r != unclean_shutdown_broker
                )
                builder.target_last_known_elr = tuple(
                    r for r in builder.target_last_known_elr if r != unclean_shutdown_broker
                )
            builder.target_isr = tuple(r for r in partition.isr if r not in removed)
            record = builder.build()
            if record is not None:
                records.append(record)
        return True

    def handle_broker_fenced(
        self, broker_id: int, records: list[MetadataRecord], budget: int
    ) -> bool:
        """Move leaderships off a broker being fenced and drop it from ISRs."""
        return self.generate_leader_and_isr_updates(
            records,
            self.partitions_with_broker_in_isr(broker_id),
            broker_to_remove=broker_id,
            budget=budget,
        )

    def handle_broker_unfenced(
        self, broker_id: int, records: list[MetadataRecord], budget: int
    ) -> bool:
        """Elect the broker where it is the only choice: leaderless partitions it replicates."""
        candidates = [
            tp for tp in self.leaderless_partitions() if broker_id in self.partitions[tp].replicas
        ]
        return self.generate_leader_and_isr_updates(
            records, candidates, broker_to_add=broker_id, budget=budget
        )

    def handle_broker_unclean_shutdown(
        self, broker_id: int, records: list[MetadataRecord], budget: int
    ) -> bool:
        """A broker restarted without a clean shutdown: out of ISRs, ELRs and last known ELRs."""
        affected = sorted(
            set(self.partitions_with_broker_in_isr(broker_id))
            | set(self.partitions_with_broker_in_elr(broker_id))
            | {tp for tp in self._leaderless if broker_id in self.partitions[tp].last_known_elr}
        )
        return self.generate_leader_and_isr_updates(
            records,
            affected,
            broker_to_remove=broker_id,
            unclean_shutdown_broker=broker_id,
            budget=budget,
        )

    def _fresh_topic_id(self, taken: set[Uuid]) -> Uuid:
        while True:
            topic_id = random_uuid(self._rng)
            if topic_id not in self.topics and topic_id not in taken:
                return topic_id

    def _validate_manual_assignment(
        self, partition_index: int, replicas: Sequence[int], replication_factor: int | None
    ) -> None:
        if not replicas:
            raise api.RequestError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "The manual partition assignment includes an empty replica list.",
            )
        seen: set[int] = set()
        for broker in replicas:
            if broker in seen:
                raise api.RequestError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes the broker {broker} more than once.",
                )
            seen.add(broker)
            if self._cluster.get(broker) is None:
                raise api.RequestError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes broker {broker}, but no such "
                    "broker is registered.",
                )
        if replication_factor is not None and len(replicas) != replication_factor:
            raise api.RequestError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes a partition with {len(replicas)} "
                f"replica(s), but this is not consistent with previous partitions, which have "
                f"{replication_factor} replica(s).",
            )

    def _new_partition_record(
        self, topic_id: Uuid, partition_id: int, replicas: tuple[int, ...], *, manual: bool
    ) -> PartitionRecord:
        isr = tuple(r for r in replicas if self._cluster.is_active(r))
        if not isr:
            raise api.RequestError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT
                if manual
                else ErrorCode.INVALID_REPLICATION_FACTOR,
                f"All brokers specified in the manual partition assignment for partition "
                f"{partition_id} are fenced or in controlled shutdown.",
            )
        return PartitionRecord(
            topic_id=topic_id,
            partition_id=partition_id,
            replicas=replicas,
            isr=isr,
            leader=isr[0],
            leader_epoch=0,
            partition_epoch=0,
        )

    def _check_budget(self, have: int, adding: int) -> None:
        if have + adding > self._config.max_records_per_user_op:
            raise api.RequestError(
                ErrorCode.POLICY_VIOLATION,
                f"Unable to perform this operation because it would require {have + adding} "
                f"records, more than the limit of {self._config.max_records_per_user_op} per "
                "operation.",
            )

    # == CreateTopics ====================================================================

    def create_topics(
        self, request: api.CreateTopicsRequest
    ) -> ControllerResult[api.CreateTopicsResponse]:
        names = [t.name for t in request.topics]
        duplicates = {n for n in names if names.count(n) > 1}
        records: list[MetadataRecord] = []
        results: list[api.CreatableTopicResult] = []
        created: dict[str, str] = {}  # collision key -> name, for this request
        taken_ids: set[Uuid] = set()
        for topic in request.topics:
            try:
                if topic.name in duplicates:
                    raise api.RequestError(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
                topic_records, result = self._create_topic(topic, created, taken_ids)
                self._check_budget(len(records), len(topic_records))
                if request.validate_only:
                    result = replace(result, topic_id=ZERO_UUID)
                else:
                    records.extend(topic_records)
                    created[_collision_key(topic.name)] = topic.name
                    taken_ids.add(result.topic_id)
                results.append(result)
            except api.RequestError as exc:
                results.append(api.CreatableTopicResult(name=topic.name, error=exc.error))
        return ControllerResult(
            records=tuple(records),
            response=api.CreateTopicsResponse(topics=tuple(results)),
            is_atomic=True,
        )

    def _create_topic(
        self, topic: api.CreatableTopic, created: dict[str, str], taken_ids: set[Uuid]
    ) -> tuple[list[MetadataRecord], api.CreatableTopicResult]:
        name = topic.name
        validate_topic_name(name)
        if name in self.topics_by_name or name in created.values():
            raise api.RequestError(
                ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
            )
        key = _collision_key(name)
        other = self._collision_names.get(key) or created.get(key)
        if other is not None and other != name:
            raise api.RequestError(
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                f"Topic '{name}' collides with existing topic: {other}",
            )
        config_records: list[ConfigRecord] = self._configuration.topic_creation_records(
            name, topic.configs
        )
        topic_id = self._fresh_topic_id(taken_ids)
        if topic.assignments:
            if topic.num_partitions != -1:
                raise api.RequestError(
                    ErrorCode.INVALID_REQUEST,
                    "A manual partition assignment was specified, but numPartitions was not "
                    "set to -1.",
                )
            if topic.replication_factor != -1:
                raise api.RequestError(
                    ErrorCode.INVALID_REQUEST,
                    "A manual partition assignment was specified, but replication factor was "
                    "not set to -1.",
                )
            ordered = sorted(topic.assignments, key=lambda a: a.partition_index)
            if [a.partition_index for a in ordered] != list(range(len(ordered))):
                raise api.RequestError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    "The manual partition assignment must name partitions 0 to "
                    f"{len(ordered) - 1} exactly once; got "
                    f"{sorted(a.partition_index for a in ordered)}.",
                )
            replication_factor = len(ordered[0].broker_ids)
            placements = []
            for assignment in ordered:
                self._validate_manual_assignment(
                    assignment.partition_index, assignment.broker_ids, replication_factor
                )
                placements.append(tuple(assignment.broker_ids))
            manual = True
        else:
            replication_factor = (
                self._config.default_replication_factor
                if topic.replication_factor == -1
                else topic.replication_factor
            )
            num_partitions = (
                self._config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
            )
            if replication_factor <= 0:
                raise api.RequestError(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    "Replication factor must be larger than 0, or -1 to use the default value.",
                )
            if num_partitions <= 0:
                raise api.RequestError(
                    ErrorCode.INVALID_PARTITIONS,
                    "Number of partitions was set to an invalid non-positive value.",
                )
            self._check_budget(0, 1 + num_partitions + len(config_records))
            placements = replica_placer.place(
                num_partitions=num_partitions,
                replication_factor=replication_factor,
                brokers=self._cluster.usable_brokers(),
                rng=self._rng,
            )
            manual = False
        records: list[MetadataRecord] = [TopicRecord(name=name, topic_id=topic_id)]
        for partition_id, replicas in enumerate(placements):
            records.append(
                self._new_partition_record(topic_id, partition_id, replicas, manual=manual)
            )
        records.extend(config_records)
        return records, api.CreatableTopicResult(
            name=name,
            topic_id=topic_id,
            num_partitions=len(placements),
            replication_factor=replication_factor,
        )

    # == DeleteTopics ====================================================================

    def delete_topics(
        self, request: api.DeleteTopicsRequest
    ) -> ControllerResult[api.DeleteTopicsResponse]:
        records: list[MetadataRecord] = []
        results: list[api.DeletableTopicResult] = []
        deleting: set[Uuid] = set()
        for state in request.topics:
            by_name, by_id = bool(state.name), state.topic_id != ZERO_UUID
            try:
                if by_name == by_id:
                    raise api.RequestError(
                        ErrorCode.INVALID_REQUEST,
                        "Exactly one of the topic name and the topic id must be set.",
                    )
                if by_name:
                    found = self.topics_by_name.get(state.name)
                    if found is None:
                        raise api.RequestError(
                            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, _UNKNOWN_PARTITION
                        )
                    topic_id = found
                else:
                    if state.topic_id not in self.topics:
                        raise api.RequestError(
                            ErrorCode.UNKNOWN_TOPIC_ID, "This server does not host this topic ID."
                        )
                    topic_id = state.topic_id
                name = self.topics[topic_id].name
                if name in INTERNAL_TOPICS:
                    raise api.RequestError(
                        ErrorCode.INVALID_TOPIC_EXCEPTION,
                        f"Topic {name} is an internal topic and cannot be deleted.",
                    )
                if topic_id in deleting:
                    raise api.RequestError(
                        ErrorCode.INVALID_REQUEST, f"Topic {name} is named more than once."
                    )
                deleting.add(topic_id)
                records.append(RemoveTopicRecord(topic_id=topic_id))
                results.append(api.DeletableTopicResult(name=name, topic_id=topic_id))
            except api.RequestError as exc:
                results.append(
                    api.DeletableTopicResult(
                        name=state.name, topic_id=state.topic_id, error=exc.error
                    )
                )
        return ControllerResult(
            records=tuple(records), response=api.DeleteTopicsResponse(responses=tuple(results))
        )

    # == CreatePartitions ================================================================

    def create_partitions(
        self, request: api.CreatePartitionsRequest
    ) -> ControllerResult[api.CreatePartitionsResponse]:
        names = [t.name for t in request.topics]
        duplicates = {n for n in names if names.count(n) > 1}
        records: list[MetadataRecord] = []
        results: list[api.CreatePartitionsTopicResult] = []
        for topic in request.topics:
            try:
                if topic.name in duplicates:
                    raise api.RequestError(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
                topic_records = self._create_partitions(topic)
                self._check_budget(len(records), len(topic_records))
                if not request.validate_only:
                    records.extend(topic_records)
                results.append(api.CreatePartitionsTopicResult(name=topic.name))
            except api.RequestError as exc:
                results.append(api.CreatePartitionsTopicResult(name=topic.name, error=exc.error))
        return ControllerResult(
            records=tuple(records),
            response=api.CreatePartitionsResponse(results=tuple(results)),
            is_atomic=True,
        )

    def _create_partitions(self, topic: api.CreatePartitionsTopic) -> list[MetadataRecord]:
        topic_id = self.topics_by_name.get(topic.name)
        if topic_id is None:
            raise api.RequestError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, _UNKNOWN_PARTITION)
        current = self.topics[topic_id].num_partitions
        if topic.count < current:
            raise api.RequestError(
                ErrorCode.INVALID_PARTITIONS,
                f"The topic {topic.name} currently has {current} partition(s); {topic.count} "
                "would not be an increase.",
            )
        if topic.count == current:
            raise api.RequestError(
                ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s)."
            )
        additional = topic.count - current
        self._check_budget(0, additional)
        first = self.partitions[TopicIdPartition(topic_id, 0)]
        replication_factor = len(first.original_replicas())
        if topic.assignments:
            if len(topic.assignments) != additional:
                raise api.RequestError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Attempted to add {additional} additional partition(s), but only "
                    f"{len(topic.assignments)} assignment(s) were specified.",
                )
            placements = []
            for offset, assignment in enumerate(topic.assignments):
                self._validate_manual_assignment(
                    current + offset, assignment.broker_ids, replication_factor
                )
                placements.append(tuple(assignment.broker_ids))
            manual = True
        else:
            placements = replica_placer.place(
                num_partitions=additional,
                replication_factor=replication_factor,
                brokers=self._cluster.usable_brokers(),
                rng=self._rng,
            )
            manual = False
        return [
            self._new_partition_record(topic_id, current + offset, replicas, manual=manual)
            for offset, replicas in enumerate(placements)
        ]

    # == AlterPartition ==================================================================

    def alter_partition(
        self, request: api.AlterPartitionRequest
    ) -> ControllerResult[api.AlterPartitionResponse]:
        try:
            self._cluster.check_broker_epoch(request.broker_id, request.broker_epoch)
        except api.RequestError as exc:
            # A leader that is not registered under this epoch is stale either way.
            return ControllerResult(
                records=(),
                response=api.AlterPartitionResponse(
                    error=api.ApiError(code=ErrorCode.STALE_BROKER_EPOCH, message=exc.error.message)
                ),
            )
        records: list[MetadataRecord] = []
        topic_results: list[api.AlterPartitionTopicResult] = []
        seen: set[TopicIdPartition] = set()
        for topic in request.topics:
            results: list[api.AlterPartitionPartitionResult] = []
            for data in topic.partitions:
                tp = TopicIdPartition(topic.topic_id, data.partition_index)
                try:
                    if tp in seen:
                        raise api.RequestError(
                            ErrorCode.INVALID_REQUEST,
                            f"Partition {data.partition_index} is named more than once.",
                        )
                    seen.add(tp)
                    results.append(self._alter_one_partition(request.broker_id, tp, data, records))
                except api.RequestError as exc:
                    results.append(
                        api.AlterPartitionPartitionResult(
                            partition_index=data.partition_index, error=exc.error
                        )
                    )
            topic_results.append(
                api.AlterPartitionTopicResult(topic_id=topic.topic_id, partitions=tuple(results))
            )
        return ControllerResult(
            records=tuple(records),
            response=api.AlterPartitionResponse(topics=tuple(topic_results)),
        )

    def _alter_one_partition(
        self,
        broker_id: int,
        tp: TopicIdPartition,
        data: api.AlterPartitionPartitionData,
        records: list[MetadataRecord],
    ) -> api.AlterPartitionPartitionResult:
        if tp.topic_id not in self.topics:
            raise api.RequestError(
                ErrorCode.UNKNOWN_TOPIC_ID, "This server does not host this topic ID."
            )
        partition = self.partitions.get(tp)
        if partition is None:
            raise api.RequestError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, _UNKNOWN_PARTITION)
        self._validate_alter_partition(broker_id, partition, data)
        builder = self._builder(tp, partition)
        builder.target_isr = tuple(s.broker_id for s in data.new_isr_with_epochs)
        builder.target_leader_recovery_state = data.leader_recovery_state
        record = builder.build()
        if record is not None:
            records.append(record)
            partition = partition.merge(record)
            if record.leader is not None and record.leader != broker_id:
                # Only a completed reassignment moving the leader away gets here.
                return api.AlterPartitionPartitionResult(
                    partition_index=tp.partition_id,
                    error=api.ApiError(
                        code=ErrorCode.NEW_LEADER_ELECTED,
                        message=f"The reassignment completed and elected leader {record.leader}.",
                    ),
                )
        return api.AlterPartitionPartitionResult(
            partition_index=tp.partition_id,
            leader_id=partition.leader,
            leader_epoch=partition.leader_epoch,
            isr=partition.isr,
            leader_recovery_state=partition.leader_recovery_state,
            partition_epoch=partition.partition_epoch,
        )

    def _validate_alter_partition(
        self,
        broker_id: int,
        partition: PartitionRegistration,
        data: api.AlterPartitionPartitionData,
    ) -> None:
        if data.leader_epoch != partition.leader_epoch:
            raise api.RequestError(
                ErrorCode.FENCED_LEADER_EPOCH,
                f"The leader epoch {data.leader_epoch} does not match the current leader epoch "
                f"{partition.leader_epoch}.",
            )
        if partition.leader != broker_id:
            raise api.RequestError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"Broker {broker_id} is not the leader; the leader is {partition.leader}.",
            )
        if data.partition_epoch != partition.partition_epoch:
            raise api.RequestError(
                ErrorCode.INVALID_UPDATE_VERSION,
                f"The partition epoch {data.partition_epoch} does not match the current "
                f"partition epoch {partition.partition_epoch}.",
            )
        new_isr = [s.broker_id for s in data.new_isr_with_epochs]
        replicas = set(partition.replicas)
        if len(set(new_isr)) != len(new_isr) or not set(new_isr).issubset(replicas):
            raise api.RequestError(
                ErrorCode.INVALID_REQUEST,
                f"The new ISR {new_isr} has duplicates or brokers that are not replicas "
                f"{list(partition.replicas)}.",
            )
        if partition.leader not in new_isr:
            raise api.RequestError(
                ErrorCode.INVALID_REQUEST, f"The new ISR {new_isr} does not include the leader."
            )
        if data.leader_recovery_state is LeaderRecoveryState.RECOVERING and len(new_isr) > 1:
            raise api.RequestError(
                ErrorCode.INVALID_REQUEST,
                "A leader that is still recovering cannot have an ISR larger than itself.",
            )
        if (
            partition.leader_recovery_state is LeaderRecoveryState.RECOVERED
            and data.leader_recovery_state is LeaderRecoveryState.RECOVERING
        ):
            raise api.RequestError(
                ErrorCode.INVALID_REQUEST,
                "The leader recovery state cannot go from RECOVERED back to RECOVERING.",
            )
        ineligible: list[str] = []
        for state in data.new_isr_with_epochs:
            registration = self._cluster.get(state.broker_id)
            if registration is None:
                ineligible.append(f"{state.broker_id} (not registered)")
            elif registration.fenced:
                ineligible.append(f"{state.broker_id} (fenced)")
            elif registration.in_controlled_shutdown:
                ineligible.append(f"{state.broker_id} (in controlled shutdown)")
            elif state.broker_epoch != -1 and state.broker_epoch != registration.broker_epoch:
                ineligible.append(
                    f"{state.broker_id} (broker epoch {state.broker_epoch} is stale; current is "
                    f"{registration.broker_epoch})"
                )
        if ineligible:
            raise api.RequestError(
                ErrorCode.INELIGIBLE_REPLICA,
                f"The new ISR contains ineligible replicas: {', '.join(ineligible)}.",
            )

    # == ElectLeaders ====================================================================

    def elect_leaders(
        self, request: api.ElectLeadersRequest
    ) -> ControllerResult[api.ElectLeadersResponse]:
        records: list[MetadataRecord] = []
        topic_results: list[api.ReplicaElectionResult] = []
        budget = self._config.max_records_per_user_op
        seen: set[TopicIdPartition] = set()
        if not request.topic_partitions:
            # Every partition; like Kafka, report only the ones that needed an election.
            for name in sorted(self.topics_by_name):
                topic = self.topics[self.topics_by_name[name]]
                results = []
                for partition_id in range(topic.num_partitions):
                    if len(records) >= budget:
                        break
                    error = self._elect_one(
                        TopicIdPartition(topic.topic_id, partition_id),
                        request.election_type,
                        records,
                    )
                    if error.code != ErrorCode.ELECTION_NOT_NEEDED:
                        results.append(api.PartitionResult(partition_id=partition_id, error=error))
                if results:
                    topic_results.append(
                        api.ReplicaElectionResult(topic=name, partition_result=tuple(results))
                    )
        else:
            for wanted in request.topic_partitions:
                topic_id = self.topics_by_name.get(wanted.topic)
                if topic_id is None:
                    unknown = api.ApiError(
                        code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, message=_UNKNOWN_PARTITION
                    )
                    partition_ids: Sequence[int] = wanted.partitions or (-1,)
                    topic_results.append(
                        api.ReplicaElectionResult(
                            topic=wanted.topic,
                            partition_result=tuple(
                                api.PartitionResult(partition_id=p, error=unknown)
                                for p in partition_ids
                            ),
                        )
                    )
                    continue
                topic = self.topics[topic_id]
                partition_ids = wanted.partitions or tuple(range(topic.num_partitions))
                results = []
                for partition_id in partition_ids:
                    tp = TopicIdPartition(topic_id, partition_id)
                    if tp in seen:
                        # Each election is computed from the current state: a second one
                        # for the same partition would not see the first.
                        error = api.ApiError(
                            code=ErrorCode.INVALID_REQUEST,
                            message=f"Partition {wanted.topic}:{partition_id} is named more "
                            "than once.",
                        )
                    elif tp not in self.partitions:
                        error = api.ApiError(
                            code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, message=_UNKNOWN_PARTITION
                        )
                    elif len(records) >= budget:
                        error = api.ApiError(
                            code=ErrorCode.POLICY_VIOLATION,
                            message=f"More than {budget} elections in one request; retry the rest.",
                        )
                    else:
                        seen.add(tp)
                        error = self._elect_one(tp, request.election_type, records)
                    results.append(api.PartitionResult(partition_id=partition_id, error=error))
                topic_results.append(
                    api.ReplicaElectionResult(topic=wanted.topic, partition_result=tuple(results))
                )
        return ControllerResult(
            records=tuple(records),
            response=api.ElectLeadersResponse(replica_election_results=tuple(topic_results)),
        )

    def _elect_one(
        self, tp: TopicIdPartition, election_type: api.ElectionType, records: list[MetadataRecord]
    ) -> api.ApiError:
        partition = self.partitions[tp]
        if election_type is api.ElectionType.PREFERRED:
            if partition.has_preferred_leader():
                return api.ApiError(
                    code=ErrorCode.ELECTION_NOT_NEEDED,
                    message="The preferred replica is already the leader.",
                )
        elif partition.leader != NO_LEADER:
            return api.ApiError(
                code=ErrorCode.ELECTION_NOT_NEEDED, message="The partition already has a leader."
            )
        builder = self._builder(tp, partition)
        builder.election = (
            Election.PREFERRED if election_type is api.ElectionType.PREFERRED else Election.UNCLEAN
        )
        record = builder.build()
        if record is not None:
            records.append(record)
        leader = partition.leader if record is None or record.leader is None else record.leader
        if election_type is api.ElectionType.PREFERRED and leader != partition.preferred_replica:
            return api.ApiError(
                code=ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                message=f"The preferred replica {partition.preferred_replica} is not an "
                "in-sync, unfenced replica.",
            )
        if leader == NO_LEADER:
            return api.ApiError(
                code=ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                message="No replica of the partition is alive.",
            )
        return api.NONE

    # == auto leader rebalance ===========================================================

    def maybe_balance_partition_leaders(self, records: list[MetadataRecord]) -> bool:
        """Preferred elections for imbalanced partitions whose preferred replica can lead.

        Returns True if it stopped at ``max_elections_per_imbalance`` (run again soon)."""
        limit = min(self._config.max_elections_per_imbalance, self._config.max_records_per_user_op)
        for tp in self.imbalanced_partitions():
            if len(records) >= limit:
                return True
            partition = self.partitions[tp]
            preferred = partition.preferred_replica
            if preferred not in partition.isr or not self._cluster.is_active(preferred):
                continue
            builder = self._builder(tp, partition)
            builder.election = Election.PREFERRED
            record = builder.build()
            if record is not None:
                records.append(record)
        return False

    # == reassignment (KIP-455) ==========================================================

    def alter_partition_reassignments(
        self, request: api.AlterPartitionReassignmentsRequest
    ) -> ControllerResult[api.AlterPartitionReassignmentsResponse]:
        records: list[MetadataRecord] = []
        responses: list[api.ReassignableTopicResponse] = []
        seen: set[tuple[str, int]] = set()
        budget = self._config.max_records_per_user_op
        for topic in request.topics:
            results: list[api.ReassignablePartitionResponse] = []
            for target in topic.partitions:
                try:
                    key = (topic.name, target.partition_index)
                    if key in seen:
                        raise api.RequestError(
                            ErrorCode.INVALID_REQUEST,
                            f"Partition {topic.name}:{target.partition_index} is named more "
                            "than once.",
                        )
                    seen.add(key)
                    if len(records) >= budget:
                        raise api.RequestError(
                            ErrorCode.POLICY_VIOLATION,
                            f"More than {budget} reassignments in one request; retry the rest.",
                        )
                    record = self._alter_reassignment(
                        topic.name, target, request.allow_replication_factor_change
                    )
                    if record is not None:
                        records.append(record)
                    error = api.NONE
                except api.RequestError as exc:
                    error = exc.error
                results.append(
                    api.ReassignablePartitionResponse(
                        partition_index=target.partition_index, error=error
                    )
                )
            responses.append(
                api.ReassignableTopicResponse(name=topic.name, partitions=tuple(results))
            )
        return ControllerResult(
            records=tuple(records),
            response=api.AlterPartitionReassignmentsResponse(responses=tuple(responses)),
            is_atomic=True,
        )

    def _alter_reassignment(
        self, topic_name: str, target: api.ReassignablePartition, allow_rf_change: bool
    ) -> PartitionChangeRecord | None:
        topic_id = self.topics_by_name.get(topic_name)
        if topic_id is None:
            raise api.RequestError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {topic_name}."
            )
        tp = TopicIdPartition(topic_id, target.partition_index)
        partition = self.partitions.get(tp)
        if partition is None:
            raise api.RequestError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"Unable to find partition {topic_name}:{target.partition_index}.",
            )
        if target.replicas is None:
            return self._cancel_reassignment(topic_name, tp, partition)
        self._validate_manual_assignment(target.partition_index, target.replicas, None)
        original = partition.original_replicas()
        if not allow_rf_change and len(target.replicas) != len(original):
            raise api.RequestError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"The replication factor is changed from {len(original)} to "
                f"{len(target.replicas)}, but allow_replication_factor_change is false.",
            )
        reassignment = ReassignmentReplicas.of(partition, target.replicas)
        builder = self._builder(tp, partition)
        builder.target_replicas = reassignment.replicas
        builder.target_removing = reassignment.removing
        builder.target_adding = reassignment.adding
        return builder.build()

    def _cancel_reassignment(
        self, topic_name: str, tp: TopicIdPartition, partition: PartitionRegistration
    ) -> PartitionChangeRecord | None:
        if not partition.is_reassigning():
            raise api.RequestError(
                ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                "No partition reassignment is in progress for the topic partition "
                f"{topic_name}:{tp.partition_id}.",
            )
        revert = ReassignmentRevert.of(partition)
        if revert.unclean and not self._configuration.unclean_leader_election_enabled(topic_name):
            raise api.RequestError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Unable to revert partition assignment for {topic_name}:{tp.partition_id} "
                "because it would require an unclean leader election.",
            )
        builder = self._builder(tp, partition)
        builder.target_isr = revert.isr
        builder.target_replicas = revert.replicas
        builder.target_removing = ()
        builder.target_adding = ()
        return builder.build()

    def list_partition_reassignments(
        self, request: api.ListPartitionReassignmentsRequest, epoch: int
    ) -> api.ListPartitionReassignmentsResponse:
        wanted: list[TopicIdPartition] = []
        if not request.topics:
            wanted = sorted(self._reassigning.at(epoch))
        else:
            for topic in request.topics:
                topic_id = self.topics_by_name.get(topic.topic, epoch=epoch)
                if topic_id is None:
                    continue  # as in Kafka, unknown topics are left out
                info = self.topics.get(topic_id, epoch=epoch)
                assert info is not None
                ids = topic.partitions or tuple(range(info.num_partitions))
                wanted.extend(TopicIdPartition(topic_id, p) for p in ids)
        by_topic: dict[str, list[api.OngoingPartitionReassignment]] = {}
        for tp in wanted:
            partition = self.partitions.get(tp, epoch=epoch)
            info = self.topics.get(tp.topic_id, epoch=epoch)
            if partition is None or info is None or not partition.is_reassigning():
                continue
            by_topic.setdefault(info.name, []).append(
                api.OngoingPartitionReassignment(
                    partition_index=tp.partition_id,
                    replicas=partition.replicas,
                    adding_replicas=partition.adding_replicas,
                    removing_replicas=partition.removing_replicas,
                )
            )
        return api.ListPartitionReassignmentsResponse(
            topics=tuple(
                api.OngoingTopicReassignment(
                    name=name,
                    partitions=tuple(sorted(parts, key=lambda p: p.partition_index)),
                )
                for name, parts in sorted(by_topic.items())
            )
        )
