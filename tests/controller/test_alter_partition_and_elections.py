"""AlterPartition (ISR changes from leaders), ElectLeaders, ELR, unclean elections, rebalance."""

from __future__ import annotations

import pytest

from kraftlog.controller import api
from kraftlog.controller.controller_config import ControllerConfig
from kraftlog.error_codes import ErrorCode
from kraftlog.ids import Uuid
from kraftlog.metadata.records import LeaderRecoveryState, PartitionChangeRecord
from tests.controller.harness import Harness, check_invariants


@pytest.fixture
def h() -> Harness:
    harness = Harness()
    harness.bootstrap()
    harness.start_brokers({1: "", 2: "", 3: ""})
    harness.create_topic("t", assignments=[[1, 2, 3]])
    return harness


def _alter(h: Harness, new_isr: list[int], **kwargs: object) -> api.AlterPartitionPartitionResult:
    return h.alter_partition("t", 0, new_isr, **kwargs)  # type: ignore[arg-type]


def test_shrink_and_expand_isr_bump_only_the_partition_epoch(h: Harness) -> None:
    result = _alter(h, [1, 2])
    assert result.error.code == ErrorCode.NONE
    assert (result.isr, result.leader_id, result.leader_epoch, result.partition_epoch) == (
        (1, 2),
        1,
        0,
        1,
    )
    assert h.partition("t").isr == (1, 2)
    result = _alter(h, [1, 2, 3])
    assert result.isr == (1, 2, 3) and result.partition_epoch == 2 and result.leader_epoch == 0


def test_alter_partition_record_holds_only_the_isr(h: Harness) -> None:
    request = api.AlterPartitionRequest(
        broker_id=1,
        broker_epoch=h.epochs[1],
        topics=(
            api.AlterPartitionTopicData(
                topic_id=h.topic_id("t"),
                partitions=(
                    api.AlterPartitionPartitionData(
                        partition_index=0,
                        leader_epoch=0,
                        partition_epoch=0,
                        new_isr_with_epochs=(
                            api.BrokerState(broker_id=1),
                            api.BrokerState(broker_id=3),
                        ),
                    ),
                ),
            ),
        ),
    )
    result = h.state.alter_partition(request)
    assert result.records == (
        PartitionChangeRecord(topic_id=h.topic_id("t"), partition_id=0, isr=(1, 3)),
    )


def test_same_isr_writes_nothing_and_answers_the_current_state(h: Harness) -> None:
    request_result = _alter(h, [1, 2, 3])
    assert request_result.error.code == ErrorCode.NONE and request_result.partition_epoch == 0


def test_stale_leader_epoch_is_fenced_leader_epoch(h: Harness) -> None:
    assert _alter(h, [1, 2], leader_epoch=5).error.code == ErrorCode.FENCED_LEADER_EPOCH


def test_stale_partition_epoch_is_invalid_update_version(h: Harness) -> None:
    _alter(h, [1, 2])
    assert _alter(h, [1], partition_epoch=0).error.code == ErrorCode.INVALID_UPDATE_VERSION


def test_a_follower_proposing_is_not_leader_or_follower(h: Harness) -> None:
    assert _alter(h, [1, 2], leader=2).error.code == ErrorCode.NOT_LEADER_OR_FOLLOWER


@pytest.mark.parametrize(
    "isr", [[1, 4], [1, 1, 2], [2, 3]], ids=["non-replica", "dup", "no-leader"]
)
def test_malformed_isr_is_invalid_request(h: Harness, isr: list[int]) -> None:
    h.register(4)
    h.heartbeat(4)
    assert _alter(h, isr).error.code == ErrorCode.INVALID_REQUEST


def test_fenced_replica_in_new_isr_is_ineligible_replica(h: Harness) -> None:
    _alter(h, [1, 2])
    h.heartbeat(3, want_fence=True)
    result = _alter(h, [1, 2, 3])
    assert (
        result.error.code == ErrorCode.INELIGIBLE_REPLICA and "3 (fenced)" in result.error.message
    )


def test_shutting_down_replica_in_new_isr_is_ineligible_replica(h: Harness) -> None:
    h.create_topic("u", assignments=[[3]])
    h.heartbeat(3, want_shut_down=True)  # leads u-0: controlled shutdown, not fenced
    registration = h.state.cluster.get(3)
    assert (
        registration is not None and registration.in_controlled_shutdown and not registration.fenced
    )
    result = h.alter_partition("t", 0, [1, 2, 3])
    assert result.error.code == ErrorCode.INELIGIBLE_REPLICA


def test_stale_broker_epoch_of_a_new_isr_member_is_ineligible_replica(h: Harness) -> None:
    _alter(h, [1, 2])
    result = _alter(h, [1, 2, 3], broker_epochs={3: h.epochs[3] - 1})
    assert result.error.code == ErrorCode.INELIGIBLE_REPLICA and "stale" in result.error.message


def test_stale_leader_broker_epoch_is_stale_broker_epoch_for_the_request(h: Harness) -> None:
    request = api.AlterPartitionRequest(broker_id=1, broker_epoch=h.epochs[1] + 1)
    response = h.apply(h.state.alter_partition(request))
    assert response.error.code == ErrorCode.STALE_BROKER_EPOCH


def test_unknown_topic_id_and_partition(h: Harness) -> None:
    request = api.AlterPartitionRequest(
        broker_id=1,
        broker_epoch=h.epochs[1],
        topics=(
            api.AlterPartitionTopicData(
                topic_id=Uuid.from_bits(9, 9),
                partitions=(
                    api.AlterPartitionPartitionData(
                        partition_index=0, leader_epoch=0, new_isr_with_epochs=()
                    ),
                ),
            ),
            api.AlterPartitionTopicData(
                topic_id=h.topic_id("t"),
                partitions=(
                    api.AlterPartitionPartitionData(
                        partition_index=7, leader_epoch=0, new_isr_with_epochs=()
                    ),
                ),
            ),
        ),
    )
    response = h.apply(h.state.alter_partition(request))
    assert response.topics[0].partitions[0].error.code == ErrorCode.UNKNOWN_TOPIC_ID
    assert response.topics[1].partitions[0].error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_recovering_leader_cannot_grow_the_isr_and_recovered_cannot_go_back(h: Harness) -> None:
    result = _alter(h, [1, 2], leader_recovery_state=LeaderRecoveryState.RECOVERING)
    assert result.error.code == ErrorCode.INVALID_REQUEST  # partition is RECOVERED
    assert _alter(h, [1], leader_recovery_state=LeaderRecoveryState.RECOVERING).error.code == (
        ErrorCode.INVALID_REQUEST
    )


# -- elections on fencing --------------------------------------------------------------


def test_leader_moves_to_the_next_isr_member_in_replica_order(h: Harness) -> None:
    h.heartbeat(1, want_fence=True)
    partition = h.partition("t")
    assert partition.leader == 2 and partition.isr == (2, 3) and partition.leader_epoch == 1


def test_unclean_election_only_when_enabled_by_topic_config() -> None:
    h = Harness()
    h.start_brokers({1: "", 2: ""})
    h.create_topic("t", assignments=[[1, 2]])
    h.alter_partition("t", 0, [1])  # 2 fell out of the ISR
    h.heartbeat(1, want_fence=True)
    assert h.partition("t").leader == -1
    assert h.set_topic_config("t", "unclean.leader.election.enable", "true").code == ErrorCode.NONE
    h.apply(h.state.elect_leaders(api.ElectLeadersRequest(election_type=api.ElectionType.UNCLEAN)))
    partition = h.partition("t")
    assert partition.leader == 2 and partition.isr == (2,)
    assert partition.leader_recovery_state is LeaderRecoveryState.RECOVERING
    # The unclean leader finishes recovering and then may grow the ISR.
    assert h.alter_partition("t", 0, [2]).leader_recovery_state is LeaderRecoveryState.RECOVERED
    check_invariants(h.state)


def test_unclean_election_happens_on_fencing_when_the_topic_allows_it() -> None:
    h = Harness()
    h.start_brokers({1: "", 2: ""})
    h.create_topic("t", assignments=[[1, 2]], configs={"unclean.leader.election.enable": "true"})
    h.alter_partition("t", 0, [1])
    h.heartbeat(1, want_fence=True)
    assert h.partition("t").leader == 2


def test_elr_keeps_members_that_left_below_min_isr_and_elects_from_it() -> None:
    h = Harness(ControllerConfig(eligible_leader_replicas_enable=True))
    h.start_brokers({1: "", 2: "", 3: ""})
    h.create_topic("t", assignments=[[1, 2, 3]], configs={"min.insync.replicas": "2"})
    h.heartbeat(3, want_fence=True)
    assert h.partition("t").isr == (1, 2) and h.partition("t").elr == ()
    h.heartbeat(2, want_fence=True)
    partition = h.partition("t")
    assert partition.isr == (1,) and partition.elr == (2,)
    h.heartbeat(1, want_fence=True)
    partition = h.partition("t")
    assert partition.leader == -1 and partition.isr == () and set(partition.elr) == {1, 2}
    # Broker 2 comes back: it is an eligible leader replica, so a clean election picks it.
    h.heartbeat(2)
    partition = h.partition("t")
    assert partition.leader == 2 and partition.isr == (2,) and partition.elr == (1,)
    check_invariants(h.state)


def test_unclean_restart_drops_the_broker_from_the_elr() -> None:
    h = Harness(ControllerConfig(eligible_leader_replicas_enable=True))
    h.start_brokers({1: "", 2: ""})
    h.create_topic("t", assignments=[[1, 2]], configs={"min.insync.replicas": "2"})
    h.heartbeat(2, want_fence=True)
    h.heartbeat(1, want_fence=True)
    assert set(h.partition("t").elr) == {1, 2}
    h.advance(60_000)
    assert h.register(2, generation=1, previous_broker_epoch=-1).error.code == ErrorCode.NONE
    assert h.partition("t").elr == (1,)


# -- ElectLeaders ----------------------------------------------------------------------


def test_preferred_election_moves_leadership_back(h: Harness) -> None:
    h.heartbeat(1, want_fence=True)
    h.heartbeat(1)
    h.alter_partition("t", 0, [2, 3, 1])
    assert h.partition("t").leader == 2
    assert h.elect(api.ElectionType.PREFERRED, "t") == [api.NONE]
    assert h.partition("t").leader == 1


def test_preferred_election_when_preferred_leads_is_election_not_needed(h: Harness) -> None:
    assert [e.code for e in h.elect(api.ElectionType.PREFERRED, "t")] == [
        ErrorCode.ELECTION_NOT_NEEDED
    ]


def test_preferred_election_with_preferred_out_of_isr_is_preferred_leader_not_available(
    h: Harness,
) -> None:
    h.heartbeat(1, want_fence=True)
    h.heartbeat(1)  # unfenced but not back in the ISR
    codes = [e.code for e in h.elect(api.ElectionType.PREFERRED, "t")]
    assert codes == [ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE]


def test_unclean_election_with_a_leader_is_election_not_needed(h: Harness) -> None:
    assert [e.code for e in h.elect(api.ElectionType.UNCLEAN, "t")] == [
        ErrorCode.ELECTION_NOT_NEEDED
    ]


def test_unclean_election_with_no_live_replica_is_eligible_leaders_not_available() -> None:
    h = Harness()
    h.start_brokers({1: "", 2: ""})
    h.create_topic("t", assignments=[[1]])
    h.heartbeat(1, want_fence=True)
    assert [e.code for e in h.elect(api.ElectionType.UNCLEAN, "t")] == [
        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    ]


def test_elect_unknown_topic_or_partition(h: Harness) -> None:
    assert [e.code for e in h.elect(api.ElectionType.PREFERRED, "t", [5])] == [
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    ]
    assert [e.code for e in h.elect(api.ElectionType.PREFERRED, "nope", [0])] == [
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    ]


def test_elect_all_partitions_reports_only_those_that_needed_it(h: Harness) -> None:
    h.create_topic("u", assignments=[[2, 1]])
    h.heartbeat(2, want_fence=True)
    h.heartbeat(2)
    h.alter_partition("u", 0, [1, 2])
    response = h.apply(h.state.elect_leaders(api.ElectLeadersRequest()))
    assert [
        (r.topic, [p.partition_id for p in r.partition_result])
        for r in response.replica_election_results
    ] == [("u", [0])]
    assert h.partition("u").leader == 2


# -- auto leader rebalance -------------------------------------------------------------


def test_auto_rebalance_elects_preferred_leaders_that_are_in_sync(h: Harness) -> None:
    h.heartbeat(1, want_fence=True)
    h.heartbeat(1)
    assert h.apply(h.state.maybe_balance_partition_leaders()) is False
    assert h.partition("t").leader == 2  # preferred replica not in the ISR yet
    h.alter_partition("t", 0, [2, 3, 1])
    h.apply(h.state.maybe_balance_partition_leaders())
    assert h.partition("t").leader == 1


def test_auto_rebalance_is_off_when_disabled() -> None:
    h = Harness(ControllerConfig(auto_leader_rebalance_enable=False))
    h.start_brokers({1: "", 2: ""})
    h.create_topic("t", assignments=[[1, 2]])
    h.heartbeat(1, want_fence=True)
    h.heartbeat(1)
    h.alter_partition("t", 0, [2, 1])
    assert h.state.maybe_balance_partition_leaders().records == ()


def test_auto_rebalance_stops_at_the_election_limit_and_asks_to_run_again() -> None:
    h = Harness(ControllerConfig(max_elections_per_imbalance=2))
    h.start_brokers({1: "", 2: ""})
    h.create_topic("t", assignments=[[1, 2]] * 3)
    h.heartbeat(1, want_fence=True)
    h.heartbeat(1)
    for p in range(3):
        h.alter_partition("t", p, [2, 1])
    result = h.state.maybe_balance_partition_leaders()
    assert len(result.records) == 2 and result.response is True
    h.apply(result)
    assert len(h.state.maybe_balance_partition_leaders().records) == 1


def test_topic_config_overrides_the_static_unclean_default() -> None:
    h = Harness(ControllerConfig(unclean_leader_election_enable=True))
    h.start_brokers({1: "", 2: ""})
    h.create_topic(
        "strict", assignments=[[1, 2]], configs={"unclean.leader.election.enable": "false"}
    )
    h.create_topic("loose", assignments=[[1, 2]])
    h.alter_partition("strict", 0, [1])
    h.alter_partition("loose", 0, [1])
    h.heartbeat(1, want_fence=True)
    assert h.partition("strict").leader == -1
    assert h.partition("loose").leader == 2
    assert h.partition("loose").leader_recovery_state is LeaderRecoveryState.RECOVERING


def test_the_same_partition_twice_in_elect_leaders_is_invalid_request(h: Harness) -> None:
    codes = [e.code for e in h.elect(api.ElectionType.PREFERRED, "t", [0, 0])]
    assert codes == [ErrorCode.ELECTION_NOT_NEEDED, ErrorCode.INVALID_REQUEST]
