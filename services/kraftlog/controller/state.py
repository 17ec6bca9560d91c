"""ControllerState: every manager over one SnapshotRegistry — the QuorumController's pure core.

Owns the controller's whole in-memory state and the one way it changes:
:meth:`ControllerState.replay` of a metadata record at its offset. Write
operations (``register_broker``, ``process_heartbeat``, ``create_topics``, ...)
read the current (LATEST, possibly uncommitted) state and return a
:class:`~kraftlog.controller.result.ControllerResult` without changing any
timeline structure; reads (``describe_cluster``, ``describe_configs``,
``list_partition_reassignments``) take the epoch to read at — the committed
offset, so clients never see uncommitted state.

The QuorumController (its event loop and raft I/O live elsewhere) drives it:

1. ``result = state.<operation>(request, ...)``; if ``result.records``:
2. append them to the metadata log (one batch if ``result.is_atomic``), at
   offsets ``o .. o+n-1``; ``state.replay(record, offset)`` each at once;
   ``state.registry.get_or_create_snapshot(o + n - 1)``;
3. answer ``result.response`` once ``o + n - 1`` commits; then
   ``state.registry.delete_snapshots_up_to(committed)``;
4. on losing leadership: ``state.registry.revert_to_snapshot(committed)``; a
   standby replays committed records only. Every structure that must revert
   is a timeline structure registered with ``state.registry``; the only other
   state is the active controller's broker sessions (``cluster.heartbeats``),
   which, as in Kafka, are not metadata: call :meth:`activate` on becoming active.

Must not: import asyncio/grpc/protobuf or read a clock (time comes in as
``now_ms``), or change timeline state outside ``replay``.
"""

from __future__ import annotations

import logging
import random

from kraftlog.controller import api
from kraftlog.controller.cluster_control import BrokerControlState, ClusterControlManager
from kraftlog.controller.configuration_control import ConfigurationControlManager
from kraftlog.controller.controller_config import ControllerConfig
from kraftlog.controller.feature_control import FeatureControlManager
from kraftlog.controller.partition_change import PartitionRegistration
from kraftlog.controller.producer_id_control import ProducerIdControlManager
from kraftlog.controller.replication_control import ReplicationControlManager
from kraftlog.controller.result import ControllerResult
from kraftlog.error_codes import ErrorCode
from kraftlog.errors import InvariantViolation
from kraftlog.metadata.records import (
    NO_LEADER,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from kraftlog.timeline import snapshot_registry, timeline_value

LATEST_EPOCH = snapshot_registry.LATEST_EPOCH

logger = logging.getLogger(__name__)


class ControllerState:
    """The managers of one controller, sharing one SnapshotRegistry (see module doc)."""

    def __init__(
        self, config: ControllerConfig | None = None, *, rng: random.Random | None = None
    ) -> None:
        self.config = config or ControllerConfig()
        self.registry = snapshot_registry.SnapshotRegistry()
        self.features = FeatureControlManager(self.registry)
        self.configuration = ConfigurationControlManager(self.registry, self.config)
        self.cluster = ClusterControlManager(self.registry, self.config)
        self.replication = ReplicationControlManager(
            self.registry,
            self.config,
            self.cluster,
            self.configuration,
            rng if rng is not None else random.Random(),
        )
        self.producer_ids = ProducerIdControlManager(self.registry)
        self._last_replayed_offset = timeline_value.TimelineInteger(self.registry, -1)

    # == lifecycle ========================================================================

    def activate(self, now_ms: int) -> None:
        """This controller became active: start every unfenced broker's session afresh
        (a full ``broker.session.timeout.ms`` to heartbeat to the new controller)."""
        heartbeats = self.cluster.heartbeats
        heartbeats.reset()
        for registration in self.cluster.registrations.values():
            heartbeats.start_session(registration.broker_id, now_ms)

    def reset(self) -> None:
        """Empty everything (before loading a metadata snapshot from scratch)."""
        self.registry.reset()
        self.cluster.heartbeats.reset()

    def bootstrap_records(self) -> tuple[MetadataRecord, ...]:
        """Records the first active controller writes to an empty metadata log."""
        return self.features.bootstrap_records()

    def last_replayed_offset(self, epoch: int = LATEST_EPOCH) -> int:
        return self._last_replayed_offset.get(epoch)

    # == replay ===========================================================================

    def replay(self, record: MetadataRecord, offset: int) -> None:
        """Apply one committed (or just-appended) record; the only way state changes."""
        cluster, replication = self.cluster, self.replication
        if isinstance(record, PartitionChangeRecord):
            old, new = replication.replay_partition_change(record)
            self._note_shutdown_progress(old, new, offset)
        elif isinstance(record, RegisterBrokerRecord):
            cluster.replay_register(record, offset)
        elif isinstance(record, BrokerRegistrationChangeRecord):
            cluster.replay_change(record)
            if record.in_controlled_shutdown:
                cluster.heartbeats.update_controlled_shutdown_offset(record.broker_id, offset)
        elif isinstance(record, FenceBrokerRecord):
            cluster.replay_fence(record)
        elif isinstance(record, UnfenceBrokerRecord):
            cluster.replay_unfence(record)
        elif isinstance(record, UnregisterBrokerRecord):
            cluster.replay_unregister(record)
        elif isinstance(record, TopicRecord):
            replication.replay_topic(record)
        elif isinstance(record, PartitionRecord):
            replication.replay_partition(record)
        elif isinstance(record, RemoveTopicRecord):
            self.configuration.delete_topic_configs(replication.replay_remove_topic(record))
        elif isinstance(record, ConfigRecord):
            self.configuration.replay(record)
        elif isinstance(record, FeatureLevelRecord):
            self.features.replay(record)
        elif isinstance(record, ProducerIdsRecord):
            self.producer_ids.replay(record)
        elif not isinstance(record, NoOpRecord):
            raise InvariantViolation(f"cannot replay unknown record {record!r} at offset {offset}")
        self._last_replayed_offset.set(offset)

    def _note_shutdown_progress(
        self, old: PartitionRegistration, new: PartitionRegistration, offset: int
    ) -> None:
        # A broker in controlled shutdown may stop once every active broker has
        # replayed the records that took its leaderships and ISR memberships
        # (Kafka's controlledShutdownOffset, set here from the records themselves).
        lost = set(old.isr) - set(new.isr)
        if old.leader != new.leader and old.leader != NO_LEADER:
            lost.add(old.leader)
        for broker_id in lost:
            registration = self.cluster.get(broker_id)
            if registration is not None and registration.in_controlled_shutdown:
                self.cluster.heartbeats.update_controlled_shutdown_offset(broker_id, offset)

    # == broker lifecycle =================================================================

    def register_broker(
        self, request: api.BrokerRegistrationRequest, now_ms: int, next_offset: int
    ) -> ControllerResult[api.BrokerRegistrationResponse]:
        """BrokerRegistration. ``next_offset`` is where the records will be appended: the
        RegisterBrokerRecord comes first, so the broker epoch is its offset (KIP-631)."""
        try:
            existing = self.cluster.validate_registration(request, now_ms)
            self.features.check_broker_supports(request.broker_id, request.features)
        except api.RequestError as exc:
            return ControllerResult(
                records=(), response=api.BrokerRegistrationResponse(error=exc.error)
            )
        records: list[MetadataRecord] = [
            RegisterBrokerRecord(
                broker_id=request.broker_id,
                incarnation_id=request.incarnation_id,
                broker_epoch=next_offset,
                endpoints=request.listeners,
                features=request.features,
                rack=request.rack,
                fenced=True,
                in_controlled_shutdown=False,
                log_dirs=request.log_dirs,
            )
        ]
        if existing is not None:
            # The previous incarnation's leaderships and ISR memberships end now. A
            # restart that was not clean (KIP-966: the broker does not present the
            # epoch it shut down with) also drops it from the ELRs: its log may be short.
            clean = (
                existing.incarnation_id == request.incarnation_id
                or request.previous_broker_epoch == existing.broker_epoch
            )
            budget = self.config.max_records_per_user_op
            if clean or not self.config.eligible_leader_replicas_enable:
                self.replication.handle_broker_fenced(request.broker_id, records, budget)
            else:
                self.replication.handle_broker_unclean_shutdown(request.broker_id, records, budget)
        self.cluster.heartbeats.start_session(request.broker_id, now_ms)
        return ControllerResult(
            records=tuple(records),
            response=api.BrokerRegistrationResponse(broker_epoch=next_offset),
            is_atomic=True,
        )

    def process_heartbeat(
        self, request: api.BrokerHeartbeatRequest, now_ms: int, committed_offset: int
    ) -> ControllerResult[api.BrokerHeartbeatResponse]:
        """BrokerHeartbeat. ``committed_offset`` is the offset of the last committed record."""
        try:
            registration = self.cluster.check_broker_epoch(request.broker_id, request.broker_epoch)
        except api.RequestError as exc:
            return ControllerResult(
                records=(), response=api.BrokerHeartbeatResponse(error=exc.error)
            )
        broker_id = registration.broker_id
        self.cluster.heartbeats.touch(broker_id, now_ms, request.current_metadata_offset)
        current = registration.control_state
        target = self.cluster.next_state(
            registration,
            request,
            has_leaderships=self.replication.has_leaderships(broker_id),
            committed_offset=committed_offset,
        )
        records: list[MetadataRecord] = []
        budget = self.config.max_records_per_user_op - 1
        epoch = registration.broker_epoch
        if target is BrokerControlState.FENCED or target is BrokerControlState.SHUTDOWN_NOW:
            if current is not BrokerControlState.FENCED:
                if request.offline_log_dirs:
                    # A failed log dir: the broker asks to be fenced so that its replicas
                    # leave the ISRs and its leaderships move (no per-replica directory
                    # assignment yet, KIP-858, so the whole broker steps aside).
                    logger.warning("broker=%d event=log_dirs_offline dirs=%s action=fence",
                                   broker_id, ",".join(str(d) for d in request.offline_log_dirs))
                self.replication.handle_broker_fenced(broker_id, records, budget)
                records.append(FenceBrokerRecord(broker_id=broker_id, broker_epoch=epoch))
        elif target is BrokerControlState.UNFENCED:
            if current is BrokerControlState.FENCED:
                records.append(UnfenceBrokerRecord(broker_id=broker_id, broker_epoch=epoch))
                self.replication.handle_broker_unfenced(broker_id, records, budget)
        else:  # CONTROLLED_SHUTDOWN: move leaderships off and leave the ISRs
            if current is not BrokerControlState.CONTROLLED_SHUTDOWN:
                records.append(
                    BrokerRegistrationChangeRecord(
                        broker_id=broker_id, broker_epoch=epoch, in_controlled_shutdown=True
                    )
                )
            # Also on later heartbeats, in case an earlier round stopped at the budget.
            self.replication.handle_broker_fenced(broker_id, records, budget)
        return ControllerResult(
            records=tuple(records),
            response=api.BrokerHeartbeatResponse(
                is_caught_up=request.current_metadata_offset >= registration.register_offset,
                is_fenced=target.fenced,
                should_shut_down=target is BrokerControlState.SHUTDOWN_NOW,
            ),
            is_atomic=True,
        )

    def maybe_fence_stale_brokers(self, now_ms: int) -> ControllerResult[tuple[int, ...]]:
        """Fence the broker whose session (``broker.session.timeout.ms``) expired longest
        ago: move its leaderships away and drop it from ISRs. The response names the broker
        fenced; call again at once while it names one.

        One broker per call, as Kafka's ``maybeFenceOneStaleBroker``: each broker's records
        are computed from the current state, which would not include the other's. With
        none stale, it finishes moving leaderships off a fenced broker when an earlier
        operation stopped at the record budget."""
        budget = self.config.max_records_per_user_op - 1
        records: list[MetadataRecord] = []
        stale = self.cluster.stale_brokers(now_ms)
        if stale:
            broker_id = stale[0]
            registration = self.cluster.get(broker_id)
            assert registration is not None
            self.replication.handle_broker_fenced(broker_id, records, budget)
            records.append(
                FenceBrokerRecord(broker_id=broker_id, broker_epoch=registration.broker_epoch)
            )
            return ControllerResult(records=tuple(records), response=(broker_id,), is_atomic=True)
        for registration in self.cluster.registrations.values():
            if registration.fenced and self.replication.has_leaderships(registration.broker_id):
                self.replication.handle_broker_fenced(registration.broker_id, records, budget)
                break
        return ControllerResult(records=tuple(records), response=())

    def unregister_broker(
        self, request: api.UnregisterBrokerRequest
    ) -> ControllerResult[api.UnregisterBrokerResponse]:
        registration = self.cluster.get(request.broker_id)
        if registration is None:
            return ControllerResult(
                records=(),
                response=api.UnregisterBrokerResponse(
                    error=api.ApiError(
                        code=ErrorCode.BROKER_ID_NOT_REGISTERED,
                        message=f"Broker ID {request.broker_id} is not currently registered",
                    )
                ),
            )
        records: list[MetadataRecord] = []
        self.replication.handle_broker_unclean_shutdown(
            request.broker_id, records, self.config.max_records_per_user_op - 1
        )
        records.append(
            UnregisterBrokerRecord(
                broker_id=request.broker_id, broker_epoch=registration.broker_epoch
            )
        )
        return ControllerResult(
            records=tuple(records), response=api.UnregisterBrokerResponse(), is_atomic=True
        )

    # == topics, partitions, elections =====================================================

    def create_topics(
        self, request: api.CreateTopicsRequest
    ) -> ControllerResult[api.CreateTopicsResponse]:
        return self.replication.create_topics(request)

    def delete_topics(
        self, request: api.DeleteTopicsRequest
    ) -> ControllerResult[api.DeleteTopicsResponse]:
        return self.replication.delete_topics(request)

    def create_partitions(
        self, request: api.CreatePartitionsRequest
    ) -> ControllerResult[api.CreatePartitionsResponse]:
        return self.replication.create_partitions(request)

    def alter_partition(
        self, request: api.AlterPartitionRequest
    ) -> ControllerResult[api.AlterPartitionResponse]:
        return self.replication.alter_partition(request)

    def alter_partition_reassignments(
        self, request: api.AlterPartitionReassignmentsRequest
    ) -> ControllerResult[api.AlterPartitionReassignmentsResponse]:
        return self.replication.alter_partition_reassignments(request)

    def elect_leaders(
        self, request: api.ElectLeadersRequest
    ) -> ControllerResult[api.ElectLeadersResponse]:
        return self.replication.elect_leaders(request)

    def maybe_balance_partition_leaders(self) -> ControllerResult[bool]:
        """Auto leader rebalance (``auto.leader.rebalance.enable``); the response says
        whether to run again at once (it stopped at ``max_elections_per_imbalance``)."""
        if not self.config.auto_leader_rebalance_enable:
            return ControllerResult(records=(), response=False)
        records: list[MetadataRecord] = []
        again = self.replication.maybe_balance_partition_leaders(records)
        return ControllerResult(records=tuple(records), response=again)

    def no_op_record(self) -> ControllerResult[None]:
        """What an idle active controller appends every ``metadata.max.idle.interval.ms``."""
        return ControllerResult(records=(NoOpRecord(),), response=None)

    # == configs, producer ids ============================================================

    def incremental_alter_configs(
        self, request: api.IncrementalAlterConfigsRequest
    ) -> ControllerResult[api.IncrementalAlterConfigsResponse]:
        return self.configuration.incremental_alter_configs(
            request, topic_exists=self.replication.topic_exists
        )

    def allocate_producer_ids(
        self, request: api.AllocateProducerIdsRequest
    ) -> ControllerResult[api.AllocateProducerIdsResponse]:
        try:
            self.cluster.check_broker_epoch(request.broker_id, request.broker_epoch)
        except api.RequestError as exc:
            return ControllerResult(
                records=(), response=api.AllocateProducerIdsResponse(error=exc.error)
            )
        return self.producer_ids.generate_next_block(request.broker_id, request.broker_epoch)

    # == reads (at a committed epoch) =====================================================

    def list_partition_reassignments(
        self, request: api.ListPartitionReassignmentsRequest, epoch: int
    ) -> api.ListPartitionReassignmentsResponse:
        return self.replication.list_partition_reassignments(request, epoch)

    def describe_configs(
        self, request: api.DescribeConfigsRequest, epoch: int
    ) -> api.DescribeConfigsResponse:
        return self.configuration.describe_configs(
            request, epoch, topic_exists=lambda name: self.replication.topic_exists(name, epoch)
        )

    def describe_cluster(
        self, request: api.DescribeClusterRequest, epoch: int, *, controller_id: int = -1
    ) -> api.DescribeClusterResponse:
        brokers = [
            api.DescribeClusterBroker(
                broker_id=r.broker_id,
                endpoints=r.endpoints,
                rack=r.rack,
                is_fenced=r.fenced,
                in_controlled_shutdown=r.in_controlled_shutdown,
                broker_epoch=r.broker_epoch,
            )
            for r in self.cluster.registrations.values(epoch)
            if request.include_fenced_brokers or not r.fenced
        ]
        return api.DescribeClusterResponse(
            cluster_id=self.config.cluster_id,
            controller_id=controller_id,
            brokers=tuple(sorted(brokers, key=lambda b: b.broker_id)),
        )
