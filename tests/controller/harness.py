"""A single controller driven by hand: generate, then "commit" by replaying the records.

``Harness.apply`` plays the QuorumController's part: it assigns offsets, replays
each record, snapshots the registry at the batch's last offset and treats it as
committed. Time is a plain integer the test moves.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

from kraftlog.controller import api
from kraftlog.controller.controller_config import ControllerConfig
from kraftlog.controller.partition_change import PartitionRegistration, TopicIdPartition
from kraftlog.controller.result import ControllerResult
from kraftlog.controller.state import ControllerState
from kraftlog.error_codes import ErrorCode
from kraftlog.ids import Uuid
from kraftlog.metadata.records import MetadataRecord

R = TypeVar("R")

METADATA_VERSION = api.SupportedFeature(
    name="metadata.version", min_supported_version=1, max_supported_version=1
)


def incarnation(broker_id: int, generation: int = 0) -> Uuid:
    return Uuid.from_bits(broker_id + 1, generation + 1)


class Harness:
    def __init__(self, config: ControllerConfig | None = None, *, seed: int = 0) -> None:
        self.state = ControllerState(config or ControllerConfig(), rng=random.Random(seed))
        self.next_offset = 0
        self.committed = -1
        self.now_ms = 0
        self.log: list[tuple[int, MetadataRecord]] = []
        self.epochs: dict[int, int] = {}

    # -- the QuorumController's part ------------------------------------------------------

    def apply(self, result: ControllerResult[R]) -> R:
        """Replay the records at the next offsets (committing them) and return the response."""
        self.replay_all(result.records)
        return result.response

    def replay_all(self, records: Sequence[MetadataRecord]) -> None:
        for record in records:
            self.state.replay(record, self.next_offset)
            self.log.append((self.next_offset, record))
            self.next_offset += 1
        if records:
            self.committed = self.next_offset - 1
            self.state.registry.get_or_create_snapshot(self.committed)

    def bootstrap(self) -> None:
        self.replay_all(self.state.bootstrap_records())

    # -- brokers ------------------------------------------------------------------------

    def register(
        self,
        broker_id: int,
        *,
        rack: str = "",
        generation: int = 0,
        previous_broker_epoch: int = -1,
    ) -> api.BrokerRegistrationResponse:
        request = api.BrokerRegistrationRequest(
            broker_id=broker_id,
            cluster_id=self.state.config.cluster_id,
            incarnation_id=incarnation(broker_id, generation),
            listeners=(
                api.Endpoint(listener_name="PLAINTEXT", host="localhost", port=9092 + broker_id),
            ),
            features=(METADATA_VERSION,),
            rack=rack,
            previous_broker_epoch=previous_broker_epoch,
        )
        response = self.apply(self.state.register_broker(request, self.now_ms, self.next_offset))
        if response.error.code == ErrorCode.NONE:
            self.epochs[broker_id] = response.broker_epoch
        return response

    def heartbeat(
        self,
        broker_id: int,
        *,
        offset: int | None = None,
        want_fence: bool = False,
        want_shut_down: bool = False,
        epoch: int | None = None,
    ) -> api.BrokerHeartbeatResponse:
        request = api.BrokerHeartbeatRequest(
            broker_id=broker_id,
            broker_epoch=self.epochs.get(broker_id, -1) if epoch is None else epoch,
            current_metadata_offset=self.committed if offset is None else offset,
            want_fence=want_fence,
            want_shut_down=want_shut_down,
        )
        return self.apply(self.state.process_heartbeat(request, self.now_ms, self.committed))

    def start_brokers(self, racks: dict[int, str]) -> None:
        """Register and unfence brokers (rack per id)."""
        for broker_id, rack in racks.items():
            assert self.register(broker_id, rack=rack).error.code == ErrorCode.NONE
        for broker_id in racks:
            assert not self.heartbeat(broker_id).is_fenced

    def heartbeat_all(self) -> None:
        for broker_id in sorted(self.epochs):
            registration = self.state.cluster.get(broker_id)
            if registration is not None and not registration.fenced:
                self.heartbeat(broker_id)

    def advance(self, ms: int) -> None:
        self.now_ms += ms

    # -- topics -------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        *,
        partitions: int = 1,
        replication_factor: int = 1,
        assignments: Sequence[Sequence[int]] = (),
        configs: dict[str, str] | None = None,
    ) -> api.CreatableTopicResult:
        topic = api.CreatableTopic(
            name=name,
            num_partitions=-1 if assignments else partitions,
            replication_factor=-1 if assignments else replication_factor,
            assignments=tuple(
                api.CreatableReplicaAssignment(partition_index=i, broker_ids=tuple(a))
                for i, a in enumerate(assignments)
            ),
            configs=tuple(
                api.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()
            ),
        )
        response = self.apply(self.state.create_topics(api.CreateTopicsRequest(topics=(topic,))))
        return response.topics[0]

    def topic_id(self, name: str) -> Uuid:
        return self.state.replication.topics_by_name[name]

    def partition(self, name: str, partition_id: int = 0) -> PartitionRegistration:
        return self.state.replication.partitions[
            TopicIdPartition(self.topic_id(name), partition_id)
        ]

    def alter_partition(
        self,
        name: str,
        partition_id: int,
        new_isr: Sequence[int],
        *,
        leader: int | None = None,
        leader_epoch: int | None = None,
        partition_epoch: int | None = None,
        broker_epochs: dict[int, int] | None = None,
        leader_recovery_state: api.LeaderRecoveryState = api.LeaderRecoveryState.RECOVERED,
    ) -> api.AlterPartitionPartitionResult:
        current = self.partition(name, partition_id)
        leader_id = current.leader if leader is None else leader
        epochs = broker_epochs or {}
        request = api.AlterPartitionRequest(
            broker_id=leader_id,
            broker_epoch=self.epochs.get(leader_id, -1),
            topics=(
                api.AlterPartitionTopicData(
                    topic_id=self.topic_id(name),
                    partitions=(
                        api.AlterPartitionPartitionData(
                            partition_index=partition_id,
                            leader_epoch=current.leader_epoch
                            if leader_epoch is None
                            else leader_epoch,
                            new_isr_with_epochs=tuple(
                                api.BrokerState(
                                    broker_id=b, broker_epoch=epochs.get(b, self.epochs.get(b, -1))
                                )
                                for b in new_isr
                            ),
                            leader_recovery_state=leader_recovery_state,
                            partition_epoch=(
                                current.partition_epoch
                                if partition_epoch is None
                                else partition_epoch
                            ),
                        ),
                    ),
                ),
            ),
        )
        response = self.apply(self.state.alter_partition(request))
        assert response.error.code == ErrorCode.NONE, response.error
        return response.topics[0].partitions[0]

    def reassign(
        self, name: str, partition_id: int, replicas: Sequence[int] | None, **kwargs: bool
    ) -> api.ApiError:
        request = api.AlterPartitionReassignmentsRequest(
            topics=(
                api.ReassignableTopic(
                    name=name,
                    partitions=(
                        api.ReassignablePartition(
                            partition_index=partition_id,
                            replicas=None if replicas is None else tuple(replicas),
                        ),
                    ),
                ),
            ),
            **kwargs,
        )
        response = self.apply(self.state.alter_partition_reassignments(request))
        return response.responses[0].partitions[0].error

    def elect(
        self, election_type: api.ElectionType, name: str, partitions: Sequence[int] = (0,)
    ) -> list[api.ApiError]:
        request = api.ElectLeadersRequest(
            election_type=election_type,
            topic_partitions=(api.TopicPartitions(topic=name, partitions=tuple(partitions)),),
        )
        response = self.apply(self.state.elect_leaders(request))
        return [r.error for r in response.replica_election_results[0].partition_result]

    def set_topic_config(self, name: str, key: str, value: str) -> api.ApiError:
        request = api.IncrementalAlterConfigsRequest(
            resources=(
                api.AlterConfigsResource(
                    resource_type=api.ConfigResourceType.TOPIC,
                    resource_name=name,
                    configs=(api.AlterableConfig(name=key, value=value),),
                ),
            )
        )
        return self.apply(self.state.incremental_alter_configs(request)).responses[0].error


def check_invariants(state: ControllerState) -> None:
    """What must hold after any sequence of committed operations."""
    replication, cluster = state.replication, state.cluster
    for tp, partition in replication.partitions.items():
        replicas = set(partition.replicas)
        assert len(replicas) == len(partition.replicas), (tp, partition)
        assert set(partition.isr) <= replicas, (tp, partition)
        assert len(set(partition.isr)) == len(partition.isr), (tp, partition)
        assert set(partition.adding_replicas) <= replicas, (tp, partition)
        assert set(partition.removing_replicas) <= replicas, (tp, partition)
        assert not set(partition.adding_replicas) & set(partition.removing_replicas)
        assert not set(partition.elr) & set(partition.isr), (tp, partition)
        assert set(partition.elr) <= replicas, (tp, partition)
        if not state.config.eligible_leader_replicas_enable:
            assert partition.isr and not partition.elr, (tp, partition)
        if partition.leader != -1:
            assert partition.leader in partition.isr, (tp, partition)
            registration = cluster.get(partition.leader)
            assert registration is not None and not registration.fenced, (tp, partition)
        topic = replication.topics[tp.topic_id]
        assert tp.partition_id < topic.num_partitions
    for name, topic_id in replication.topics_by_name.items():
        assert replication.topics[topic_id].name == name
    # The indexes hold exactly what the partitions say.
    partitions = dict(replication.partitions.items())
    brokers = {b for p in partitions.values() for b in (*p.replicas, *p.elr)} | {-1}
    for broker in brokers:
        assert replication.partitions_with_broker_in_isr(broker) == sorted(
            tp for tp, p in partitions.items() if broker in p.isr
        )
        assert replication.partitions_with_broker_in_elr(broker) == sorted(
            tp for tp, p in partitions.items() if broker in p.elr
        )
        assert replication.partitions_led_by(broker) == sorted(
            tp for tp, p in partitions.items() if p.leader == broker and broker != -1
        )
    assert replication.leaderless_partitions() == sorted(
        tp for tp, p in partitions.items() if p.leader == -1
    )
    assert replication.imbalanced_partitions() == sorted(
        tp for tp, p in partitions.items() if not p.has_preferred_leader()
    )
