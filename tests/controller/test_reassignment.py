"""Partition reassignment (KIP-455): start, progress through the ISR, complete, cancel, list."""

from __future__ import annotations

import pytest

from kraftlog.controller import api
from kraftlog.error_codes import ErrorCode
from tests.controller.harness import Harness, check_invariants


@pytest.fixture
def h() -> Harness:
    harness = Harness()
    harness.bootstrap()
    harness.start_brokers({1: "", 2: "", 3: "", 4: "", 5: ""})
    harness.create_topic("t", assignments=[[1, 2, 3], [1, 2, 3]])
    return harness


def _listed(
    h: Harness, request: api.ListPartitionReassignmentsRequest | None = None
) -> list[tuple[str, int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
    response = h.state.list_partition_reassignments(
        request or api.ListPartitionReassignmentsRequest(), h.committed
    )
    return [
        (t.name, p.partition_index, p.replicas, p.adding_replicas, p.removing_replicas)
        for t in response.topics
        for p in t.partitions
    ]


def test_reassignment_adds_targets_then_completes_when_they_join_the_isr(h: Harness) -> None:
    assert h.reassign("t", 0, [4, 5, 3]) == api.NONE
    partition = h.partition("t", 0)
    assert partition.replicas == (4, 5, 3, 1, 2)
    assert partition.adding_replicas == (4, 5) and partition.removing_replicas == (1, 2)
    assert partition.leader == 1 and partition.isr == (1, 2, 3)
    assert _listed(h) == [("t", 0, (4, 5, 3, 1, 2), (4, 5), (1, 2))]
    # One new replica caught up: not complete yet.
    h.alter_partition("t", 0, [1, 2, 3, 4])
    assert h.partition("t", 0).is_reassigning()
    # The last one caught up: replicas become the target, the leader moves to 4.
    result = h.alter_partition("t", 0, [1, 2, 3, 4, 5])
    assert result.error.code == ErrorCode.NEW_LEADER_ELECTED
    partition = h.partition("t", 0)
    assert partition.replicas == (4, 5, 3) and partition.isr == (3, 4, 5)
    assert partition.leader == 4 and not partition.is_reassigning()
    assert _listed(h) == []
    check_invariants(h.state)


def test_reordering_replicas_completes_at_once(h: Harness) -> None:
    assert h.reassign("t", 0, [3, 2, 1]) == api.NONE
    partition = h.partition("t", 0)
    assert partition.replicas == (3, 2, 1) and not partition.is_reassigning()
    assert partition.leader == 1  # still a valid leader; preferred election is separate


def test_shrinking_to_isr_members_completes_at_once_with_an_epoch_bump(h: Harness) -> None:
    before = h.partition("t", 0)
    assert h.reassign("t", 0, [2, 3], allow_replication_factor_change=True) == api.NONE
    partition = h.partition("t", 0)
    assert partition.replicas == (2, 3) and partition.isr == (2, 3) and partition.leader == 2
    assert partition.leader_epoch == before.leader_epoch + 1


def test_removing_a_follower_keeps_the_leader_but_bumps_the_leader_epoch(h: Harness) -> None:
    assert h.reassign("t", 0, [1, 2], allow_replication_factor_change=True) == api.NONE
    partition = h.partition("t", 0)
    assert partition.leader == 1 and partition.leader_epoch == 1 and partition.replicas == (1, 2)


def test_cancel_reverts_to_the_original_replicas(h: Harness) -> None:
    h.reassign("t", 0, [4, 5, 3])
    h.alter_partition("t", 0, [1, 2, 3, 4])
    assert h.reassign("t", 0, None) == api.NONE
    partition = h.partition("t", 0)
    # The adding replicas go; the rest keep their order in the reassigning list
    # (target first), as in Kafka's PartitionReassignmentRevert.
    assert partition.replicas == (3, 1, 2) and partition.isr == (1, 2, 3)
    assert not partition.is_reassigning() and partition.leader == 1
    check_invariants(h.state)


def test_cancel_without_reassignment_is_no_reassignment_in_progress(h: Harness) -> None:
    assert h.reassign("t", 0, None).code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS


def test_cancel_needing_an_unclean_election_is_refused_unless_enabled(h: Harness) -> None:
    assert h.reassign("t", 1, [4, 5], allow_replication_factor_change=True) == api.NONE
    assert h.set_topic_config("t", "unclean.leader.election.enable", "true") == api.NONE
    for broker_id in (1, 2, 3):
        h.heartbeat(broker_id, want_fence=True)
    partition = h.partition("t", 1)
    # Only an adding replica is left to lead (uncleanly): the ISR holds no original replica.
    assert partition.leader == 4 and partition.isr == (4,) and partition.is_reassigning()
    assert h.set_topic_config("t", "unclean.leader.election.enable", "false") == api.NONE
    assert h.reassign("t", 1, None).code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert h.partition("t", 1).is_reassigning()
    assert h.set_topic_config("t", "unclean.leader.election.enable", "true") == api.NONE
    assert h.reassign("t", 1, None) == api.NONE
    partition = h.partition("t", 1)
    assert partition.replicas == (1, 2, 3) and not partition.is_reassigning()
    assert partition.leader == -1  # every original replica is fenced
    check_invariants(h.state)


def test_new_target_replaces_a_reassignment_and_keeps_unfinished_additions(h: Harness) -> None:
    h.reassign("t", 0, [4, 5, 3])
    assert h.reassign("t", 0, [4, 2, 3]) == api.NONE
    partition = h.partition("t", 0)
    assert partition.adding_replicas == (4,)  # 4 has still not caught up
    assert set(partition.removing_replicas) == {1, 5}
    h.alter_partition("t", 0, [1, 2, 3, 4])
    partition = h.partition("t", 0)
    assert partition.replicas == (4, 2, 3) and not partition.is_reassigning()


@pytest.mark.parametrize(
    ("replicas", "code"),
    [
        ((), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        ((1, 1, 2), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        ((1, 2, 9), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        ((1, 2), ErrorCode.INVALID_REPLICATION_FACTOR),
    ],
    ids=["empty", "duplicate", "unregistered", "rf-change"],
)
def test_bad_targets(h: Harness, replicas: tuple[int, ...], code: ErrorCode) -> None:
    assert h.reassign("t", 0, replicas, allow_replication_factor_change=False).code == code
    assert not h.partition("t", 0).is_reassigning()


def test_unknown_topic_or_partition(h: Harness) -> None:
    assert h.reassign("nope", 0, [1]).code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert h.reassign("t", 9, [1]).code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_many_partitions_in_one_request_with_errors_per_partition(h: Harness) -> None:
    request = api.AlterPartitionReassignmentsRequest(
        topics=(
            api.ReassignableTopic(
                name="t",
                partitions=(
                    api.ReassignablePartition(partition_index=0, replicas=(3, 4, 5)),
                    api.ReassignablePartition(partition_index=1, replicas=(3, 4, 5)),
                    api.ReassignablePartition(partition_index=1, replicas=(1, 2, 3)),
                    api.ReassignablePartition(partition_index=2, replicas=(1, 2, 3)),
                ),
            ),
        )
    )
    result = h.state.alter_partition_reassignments(request)
    assert result.is_atomic and len(result.records) == 2
    codes = [p.error.code for p in h.apply(result).responses[0].partitions]
    assert codes == [
        ErrorCode.NONE,
        ErrorCode.NONE,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ]


def test_list_named_partitions_reads_the_given_epoch_and_skips_unknown_topics(h: Harness) -> None:
    before = h.committed
    h.reassign("t", 1, [4, 2, 3])
    request = api.ListPartitionReassignmentsRequest(
        topics=(
            api.TopicPartitions(topic="t", partitions=(0, 1)),
            api.TopicPartitions(topic="nope"),
        )
    )
    assert _listed(h, request) == [("t", 1, (4, 2, 3, 1), (4,), (1,))]
    old = h.state.list_partition_reassignments(request, before)
    assert old.topics == ()


def test_shrink_waits_until_a_kept_replica_is_in_sync(h: Harness) -> None:
    h.alter_partition("t", 0, [1, 2])  # 3 fell behind
    assert h.reassign("t", 0, [3], allow_replication_factor_change=True) == api.NONE
    partition = h.partition("t", 0)
    assert partition.removing_replicas == (1, 2) and partition.adding_replicas == ()
    assert partition.leader == 1  # nothing kept is in sync yet
    result = h.alter_partition("t", 0, [1, 2, 3])
    assert result.error.code == ErrorCode.NEW_LEADER_ELECTED
    partition = h.partition("t", 0)
    assert (partition.replicas, partition.isr, partition.leader) == ((3,), (3,), 3)
    check_invariants(h.state)
