"""End-to-end manager scenario, and timeline revert restoring every manager's state."""

from __future__ import annotations

from kraftlog.controller import api
from kraftlog.controller.state import ControllerState
from kraftlog.error_codes import ErrorCode
from kraftlog.ids import Uuid
from tests.controller.harness import Harness, check_invariants


def test_brokers_topic_failure_recovery_and_reassignment() -> None:
    h = Harness(seed=7)
    h.bootstrap()
    # Three brokers on three racks register; each is unfenced once caught up.
    for broker_id, rack in ((1, "rack-a"), (2, "rack-b"), (3, "rack-c")):
        assert h.register(broker_id, rack=rack).error.code == ErrorCode.NONE
        assert h.heartbeat(broker_id, offset=h.epochs[broker_id] - 1).is_fenced
    for broker_id in (1, 2, 3):
        assert not h.heartbeat(broker_id).is_fenced
    created = h.create_topic("payments", partitions=3, replication_factor=3)
    assert created.error.code == ErrorCode.NONE
    leaders = {h.partition("payments", p).leader for p in range(3)}
    assert leaders == {1, 2, 3}  # striped: one leadership per broker
    led_by_3 = [p for p in range(3) if h.partition("payments", p).leader == 3]
    check_invariants(h.state)

    # Broker 3 stops heartbeating: fenced after the session timeout.
    for _ in range(4):  # 8 s of silence: within broker.session.timeout.ms (9 s)
        h.advance(2000)
        h.heartbeat(1)
        h.heartbeat(2)
        assert h.apply(h.state.maybe_fence_stale_brokers(h.now_ms)) == ()
    h.advance(2000)
    assert h.apply(h.state.maybe_fence_stale_brokers(h.now_ms)) == (3,)
    for p in range(3):
        partition = h.partition("payments", p)
        assert 3 not in partition.isr and partition.leader in (1, 2)
    for p in led_by_3:
        assert h.partition("payments", p).leader_epoch == 1
    check_invariants(h.state)

    # Broker 3 comes back and catches up; each leader adds it back to the ISR.
    assert not h.heartbeat(3).is_fenced
    for p in range(3):
        result = h.alter_partition("payments", p, [*h.partition("payments", p).isr, 3])
        assert result.error.code == ErrorCode.NONE and 3 in result.isr
    check_invariants(h.state)

    # A fourth broker joins; partition 0 moves onto 2, 3, 4.
    h.register(4, rack="rack-a")
    h.heartbeat(4)
    old = h.partition("payments", 0)
    assert h.reassign("payments", 0, [4, 2, 3]) == api.NONE
    assert h.partition("payments", 0).adding_replicas == (4,)
    listed = h.state.list_partition_reassignments(
        api.ListPartitionReassignmentsRequest(), h.committed
    )
    assert [t.name for t in listed.topics] == ["payments"]
    result = h.alter_partition("payments", 0, [*h.partition("payments", 0).isr, 4])
    final = h.partition("payments", 0)
    assert final.replicas == (4, 2, 3) and set(final.isr) == {2, 3, 4}
    assert not final.is_reassigning() and final.leader_epoch > old.leader_epoch
    if old.leader == 1:
        assert result.error.code == ErrorCode.NEW_LEADER_ELECTED and final.leader == 4
    check_invariants(h.state)


def _fingerprint(state: ControllerState) -> tuple[object, ...]:
    """Everything observable of the timeline state, as plain values."""
    replication, cluster, configuration = state.replication, state.cluster, state.configuration
    return (
        dict(cluster.registrations.items()),
        dict(replication.topics.items()),
        dict(replication.topics_by_name.items()),
        dict(replication.partitions.items()),
        {b: replication.partitions_with_broker_in_isr(b) for b in range(6)},
        {b: replication.partitions_led_by(b) for b in range(6)},
        replication.leaderless_partitions(),
        replication.imbalanced_partitions(),
        configuration.resource_configs(api.ConfigResourceType.TOPIC, "a"),
        configuration.resource_configs(api.ConfigResourceType.BROKER, ""),
        state.features.finalized(),
        state.producer_ids.next_producer_id(),
        state.last_replayed_offset(),
    )


def test_revert_to_a_snapshot_restores_every_manager() -> None:
    h = Harness(seed=3)
    h.bootstrap()
    h.start_brokers({1: "x", 2: "y", 3: "z"})
    h.create_topic("a", partitions=2, replication_factor=2, configs={"retention.ms": "9"})
    committed = h.committed
    before = _fingerprint(h.state)
    h.state.registry.delete_snapshots_up_to(committed)

    # Uncommitted work on every manager.
    h.create_topic("b", partitions=3, replication_factor=3)
    h.apply(
        h.state.delete_topics(api.DeleteTopicsRequest(topics=(api.DeleteTopicState(name="a"),)))
    )
    h.register(4)
    h.heartbeat(4)
    h.heartbeat(1, want_fence=True)
    h.reassign("b", 0, [4, 2, 3])
    h.set_topic_config("b", "retention.ms", "1")
    h.apply(
        h.state.incremental_alter_configs(
            api.IncrementalAlterConfigsRequest(
                resources=(
                    api.AlterConfigsResource(
                        resource_type=api.ConfigResourceType.BROKER,
                        resource_name="",
                        configs=(api.AlterableConfig(name="log.retention.ms", value="5"),),
                    ),
                )
            )
        )
    )
    h.apply(
        h.state.allocate_producer_ids(
            api.AllocateProducerIdsRequest(broker_id=2, broker_epoch=h.epochs[2])
        )
    )
    h.apply(h.state.no_op_record())
    assert _fingerprint(h.state) != before

    h.state.registry.revert_to_snapshot(committed)
    assert _fingerprint(h.state) == before
    check_invariants(h.state)
    # Reads at the committed epoch saw the same state all along, and work goes on.
    assert h.create_topic("b").error.code == ErrorCode.NONE


def test_reads_at_the_committed_epoch_do_not_see_uncommitted_records() -> None:
    h = Harness()
    h.start_brokers({1: ""})
    committed = h.committed
    h.create_topic("t")
    h.reassign("t", 0, [1])
    h.register(2)
    described = h.state.describe_cluster(
        api.DescribeClusterRequest(include_fenced_brokers=True), committed
    )
    assert [b.broker_id for b in described.brokers] == [1]
    assert (
        h.state.describe_configs(
            api.DescribeConfigsRequest(
                resources=(
                    api.DescribeConfigsResource(
                        resource_type=api.ConfigResourceType.TOPIC, resource_name="t"
                    ),
                )
            ),
            committed,
        )
        .results[0]
        .error.code
        == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    )


def test_a_standby_replaying_the_log_reaches_the_same_state() -> None:
    h = Harness(seed=11)
    h.bootstrap()
    h.start_brokers({1: "a", 2: "b", 3: "c"})
    h.create_topic("t", partitions=4, replication_factor=2)
    h.heartbeat(2, want_fence=True)
    h.reassign("t", 1, [3, 1])
    standby = ControllerState(h.state.config)
    for offset, record in h.log:
        standby.replay(record, offset)
    assert _fingerprint(standby) == _fingerprint(h.state)


def test_reset_empties_every_manager_for_a_snapshot_load() -> None:
    h = Harness()
    h.bootstrap()
    h.start_brokers({1: ""})
    h.create_topic("t", configs={"retention.ms": "1"})
    h.state.reset()
    empty = ControllerState(h.state.config)
    assert _fingerprint(h.state) == _fingerprint(empty)


def test_generating_any_operation_changes_no_timeline_state() -> None:
    h = Harness(seed=5)
    h.bootstrap()
    h.start_brokers({1: "a", 2: "b", 3: "c"})
    h.create_topic("a", partitions=2, replication_factor=3)
    h.advance(20_000)
    state = h.state
    before = _fingerprint(state)
    topic_id = h.topic_id("a")
    state.create_topics(api.CreateTopicsRequest(topics=(api.CreatableTopic(name="b"),)))
    state.delete_topics(api.DeleteTopicsRequest(topics=(api.DeleteTopicState(name="a"),)))
    state.create_partitions(
        api.CreatePartitionsRequest(topics=(api.CreatePartitionsTopic(name="a", count=5),))
    )
    state.alter_partition(
        api.AlterPartitionRequest(
            broker_id=h.partition("a").leader,
            broker_epoch=h.epochs[h.partition("a").leader],
            topics=(
                api.AlterPartitionTopicData(
                    topic_id=topic_id,
                    partitions=(
                        api.AlterPartitionPartitionData(
                            partition_index=0,
                            leader_epoch=0,
                            partition_epoch=0,
                            new_isr_with_epochs=(
                                api.BrokerState(broker_id=h.partition("a").leader),
                            ),
                        ),
                    ),
                ),
            ),
        )
    )
    state.alter_partition_reassignments(
        api.AlterPartitionReassignmentsRequest(
            topics=(
                api.ReassignableTopic(
                    name="a",
                    partitions=(api.ReassignablePartition(partition_index=0, replicas=(1,)),),
                ),
            )
        )
    )
    state.elect_leaders(api.ElectLeadersRequest(election_type=api.ElectionType.UNCLEAN))
    state.incremental_alter_configs(
        api.IncrementalAlterConfigsRequest(
            resources=(
                api.AlterConfigsResource(
                    resource_type=api.ConfigResourceType.TOPIC,
                    resource_name="a",
                    configs=(api.AlterableConfig(name="retention.ms", value="1"),),
                ),
            )
        )
    )
    state.allocate_producer_ids(
        api.AllocateProducerIdsRequest(broker_id=1, broker_epoch=h.epochs[1])
    )
    state.unregister_broker(api.UnregisterBrokerRequest(broker_id=2))
    state.process_heartbeat(
        api.BrokerHeartbeatRequest(
            broker_id=1,
            broker_epoch=h.epochs[1],
            current_metadata_offset=h.committed,
            want_shut_down=True,
        ),
        h.now_ms,
        h.committed,
    )
    state.maybe_fence_stale_brokers(h.now_ms)
    state.maybe_balance_partition_leaders()
    state.register_broker(
        api.BrokerRegistrationRequest(
            broker_id=9, cluster_id="", incarnation_id=Uuid.from_bits(9, 9)
        ),
        h.now_ms,
        h.next_offset,
    )
    assert _fingerprint(state) == before
