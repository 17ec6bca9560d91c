"""PartitionRegistration.merge and PartitionChangeBuilder, without the managers."""

from __future__ import annotations

from kraftlog.controller.partition_change import (
    Election,
    PartitionChangeBuilder,
    PartitionRegistration,
    ReassignmentReplicas,
    ReassignmentRevert,
    TopicIdPartition,
)
from kraftlog.ids import Uuid
from kraftlog.metadata.records import LeaderRecoveryState, PartitionChangeRecord

TP = TopicIdPartition(Uuid.from_bits(1, 2), 0)


def _partition(**fields: object) -> PartitionRegistration:
    values: dict[str, object] = {"replicas": (1, 2, 3), "isr": (1, 2, 3), "leader": 1}
    values.update(fields)
    return PartitionRegistration(**values)  # type: ignore[arg-type]


def _builder(
    partition: PartitionRegistration,
    *,
    active: set[int] | None = None,
    min_isr: int = 1,
    elr: bool = False,
) -> PartitionChangeBuilder:
    alive = {1, 2, 3, 4} if active is None else active
    return PartitionChangeBuilder(
        partition, TP, is_acceptable_leader=alive.__contains__, min_isr=min_isr, elr_enabled=elr
    )


def test_merge_bumps_partition_epoch_always_and_leader_epoch_when_leader_is_set() -> None:
    partition = _partition(leader_epoch=4, partition_epoch=9)
    isr_only = partition.merge(
        PartitionChangeRecord(topic_id=TP.topic_id, partition_id=0, isr=(1, 2))
    )
    assert (isr_only.isr, isr_only.leader_epoch, isr_only.partition_epoch) == ((1, 2), 4, 10)
    same_leader = partition.merge(
        PartitionChangeRecord(topic_id=TP.topic_id, partition_id=0, leader=1)
    )
    assert (same_leader.leader, same_leader.leader_epoch, same_leader.partition_epoch) == (1, 5, 10)


def test_unchanged_target_builds_nothing() -> None:
    assert _builder(_partition()).build() is None


def test_isr_shrink_sets_only_the_isr() -> None:
    builder = _builder(_partition())
    builder.target_isr = (1, 3)
    assert builder.build() == PartitionChangeRecord(
        topic_id=TP.topic_id, partition_id=0, isr=(1, 3)
    )


def test_leader_not_acceptable_moves_to_first_isr_member_in_replica_order() -> None:
    builder = _builder(_partition(replicas=(1, 2, 3), isr=(3, 2, 1)), active={2, 3})
    record = builder.build()
    assert record is not None and record.leader == 2 and record.isr is None


def test_no_acceptable_isr_member_means_no_leader_unless_unclean() -> None:
    partition = _partition(isr=(1,))
    assert _builder(partition, active={2}).build() == PartitionChangeRecord(
        topic_id=TP.topic_id, partition_id=0, leader=-1
    )
    builder = _builder(partition, active={2})
    builder.election = Election.UNCLEAN
    record = builder.build()
    assert record is not None and (record.leader, record.isr) == (2, (2,))
    assert record.leader_recovery_state is LeaderRecoveryState.RECOVERING


def test_preferred_election_picks_the_first_replica_when_in_sync() -> None:
    builder = _builder(_partition(leader=2))
    builder.election = Election.PREFERRED
    record = builder.build()
    assert record is not None and record.leader == 1


def test_removing_replicas_bumps_the_leader_epoch_with_the_same_leader() -> None:
    builder = _builder(_partition())
    builder.target_replicas = (1, 2)
    builder.target_isr = (1, 2)
    record = builder.build()
    assert record is not None and record.leader == 1 and record.replicas == (1, 2)


def test_reassignment_completes_when_adding_replicas_are_in_sync() -> None:
    partition = _partition(replicas=(4, 2, 3, 1), adding_replicas=(4,), removing_replicas=(1,))
    builder = _builder(partition)
    builder.target_isr = (1, 2, 3, 4)
    record = builder.build()
    assert record is not None
    assert (record.replicas, record.isr, record.leader) == ((4, 2, 3), (2, 3, 4), 4)
    assert (record.adding_replicas, record.removing_replicas) == ((), ())


def test_elr_tracks_isr_members_below_min_isr() -> None:
    builder = _builder(_partition(), min_isr=2, elr=True)
    builder.target_isr = (1,)
    record = builder.build()
    assert (
        record is not None
        and record.isr == (1,)
        and set(record.eligible_leader_replicas or ()) == {2, 3}
    )


def test_without_elr_the_last_isr_member_stays() -> None:
    builder = _builder(_partition(isr=(1,)), active={2})
    builder.target_isr = ()
    record = builder.build()
    assert record is not None and record.isr is None and record.leader == -1


def test_reassignment_replicas_put_target_first_and_keep_unfinished_additions() -> None:
    plan = ReassignmentReplicas.of(_partition(), (4, 5, 3))
    assert (plan.replicas, plan.adding, plan.removing) == ((4, 5, 3, 1, 2), (4, 5), (1, 2))
    ongoing = _partition(replicas=(4, 5, 3, 1, 2), adding_replicas=(4, 5), removing_replicas=(1, 2))
    replanned = ReassignmentReplicas.of(ongoing, (4, 2, 3))
    assert (replanned.replicas, replanned.adding, replanned.removing) == (
        (4, 2, 3, 5, 1),
        (4,),
        (5, 1),
    )


def test_revert_with_only_adding_replicas_in_sync_is_unclean() -> None:
    ongoing = _partition(
        replicas=(4, 1), isr=(4,), leader=4, adding_replicas=(4,), removing_replicas=(1,)
    )
    revert = ReassignmentRevert.of(ongoing)
    assert (revert.replicas, revert.isr, revert.unclean) == ((1,), (1,), True)


def test_elr_never_holds_a_replica_a_completed_reassignment_removed() -> None:
    partition = _partition(replicas=(1, 3), isr=(1, 3), removing_replicas=(3,))
    record = _builder(partition, min_isr=2, elr=True).build()
    assert record is not None and record.replicas == (1,) and record.isr == (1,)
    assert not record.eligible_leader_replicas
