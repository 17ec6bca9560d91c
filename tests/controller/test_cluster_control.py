"""Broker registration, heartbeats, fencing, controlled shutdown and unregistration."""

from __future__ import annotations

from kraftlog.controller import api
from kraftlog.controller.controller_config import ControllerConfig
from kraftlog.error_codes import ErrorCode
from kraftlog.ids import ZERO_UUID
from kraftlog.metadata.records import (
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from tests.controller.harness import METADATA_VERSION, Harness, check_invariants, incarnation


def _request(broker_id: int, **overrides: object) -> api.BrokerRegistrationRequest:
    fields: dict[str, object] = {
        "broker_id": broker_id,
        "cluster_id": "",
        "incarnation_id": incarnation(broker_id),
        "listeners": (api.Endpoint(listener_name="PLAINTEXT", host="h", port=9092),),
        "features": (METADATA_VERSION,),
    }
    fields.update(overrides)
    return api.BrokerRegistrationRequest(**fields)  # type: ignore[arg-type]


def test_broker_epoch_is_the_offset_of_the_register_broker_record() -> None:
    h = Harness()
    h.bootstrap()
    h.next_offset = 41
    result = h.state.register_broker(_request(1), h.now_ms, h.next_offset)
    assert isinstance(result.records[0], RegisterBrokerRecord)
    assert result.records[0].broker_epoch == 41 and result.records[0].fenced
    assert result.response.broker_epoch == 41 and result.is_atomic
    h.apply(result)
    registration = h.state.cluster.get(1)
    assert registration is not None
    assert registration.broker_epoch == 41 and registration.register_offset == 41


def test_generating_a_registration_changes_no_state() -> None:
    h = Harness()
    h.state.register_broker(_request(1), 0, 0)
    assert h.state.cluster.get(1) is None


def test_registration_with_another_cluster_id_is_inconsistent_cluster_id() -> None:
    h = Harness(ControllerConfig(cluster_id="abc"))
    response = h.apply(h.state.register_broker(_request(1, cluster_id="xyz"), 0, 0))
    assert response.error.code == ErrorCode.INCONSISTENT_CLUSTER_ID
    assert "abc" in response.error.message and response.broker_epoch == -1


def test_registration_with_bad_id_incarnation_or_listener_is_invalid_registration() -> None:
    h = Harness()
    for request in (
        _request(-1),
        _request(1, incarnation_id=ZERO_UUID),
        _request(1, listeners=(api.Endpoint(listener_name="P", host="h", port=0),)),
    ):
        result = h.state.register_broker(request, 0, 0)
        assert result.response.error.code == ErrorCode.INVALID_REGISTRATION
        assert result.records == ()


def test_broker_not_supporting_the_finalized_metadata_version_is_unsupported_version() -> None:
    h = Harness()
    h.bootstrap()
    response = h.apply(h.state.register_broker(_request(1, features=()), 0, h.next_offset))
    assert response.error.code == ErrorCode.UNSUPPORTED_VERSION
    assert "metadata.version" in response.error.message


def test_another_incarnation_within_the_session_is_duplicate_broker_registration() -> None:
    h = Harness()
    h.start_brokers({1: ""})
    h.advance(1000)
    response = h.register(1, generation=1)
    assert response.error.code == ErrorCode.DUPLICATE_BROKER_REGISTRATION


def test_a_clean_restart_presenting_its_previous_epoch_registers_within_the_session() -> None:
    # KIP-966: the new incarnation shows the epoch its predecessor shut down cleanly with.
    h = Harness()
    h.start_brokers({1: ""})
    h.advance(1000)
    old_epoch = h.epochs[1]
    wrong = h.register(1, generation=1, previous_broker_epoch=old_epoch - 1)
    assert wrong.error.code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    response = h.register(1, generation=1, previous_broker_epoch=old_epoch)
    assert response.error.code == ErrorCode.NONE and response.broker_epoch > old_epoch


def test_another_incarnation_after_the_session_expired_registers_and_is_fenced() -> None:
    h = Harness()
    h.start_brokers({1: "", 2: ""})
    h.create_topic("t", assignments=[[1, 2]])
    assert h.partition("t").leader == 1
    h.advance(h.state.config.broker_session_timeout_ms + 1)
    h.heartbeat(2)
    old_epoch = h.epochs[1]
    response = h.register(1, generation=1, previous_broker_epoch=old_epoch)
    assert response.error.code == ErrorCode.NONE and response.broker_epoch > old_epoch
    registration = h.state.cluster.get(1)
    assert registration is not None and registration.fenced
    # The previous incarnation's leadership went with it.
    assert h.partition("t").leader == 2 and h.partition("t").isr == (2,)
    check_invariants(h.state)


def test_same_incarnation_may_re_register_within_its_session() -> None:
    h = Harness()
    h.start_brokers({1: ""})
    first = h.epochs[1]
    response = h.register(1)
    assert response.error.code == ErrorCode.NONE and response.broker_epoch > first


def test_heartbeat_from_unknown_broker_is_broker_id_not_registered() -> None:
    h = Harness()
    response = h.heartbeat(5, epoch=3)
    assert response.error.code == ErrorCode.BROKER_ID_NOT_REGISTERED


def test_heartbeat_with_an_old_broker_epoch_is_stale_broker_epoch() -> None:
    h = Harness()
    h.start_brokers({1: ""})
    response = h.heartbeat(1, epoch=h.epochs[1] - 1)
    assert response.error.code == ErrorCode.STALE_BROKER_EPOCH


def test_broker_is_unfenced_only_once_caught_up_to_its_registration() -> None:
    h = Harness()
    h.bootstrap()
    h.register(1)
    register_offset = h.epochs[1]
    behind = h.heartbeat(1, offset=register_offset - 1)
    assert behind.is_fenced and not behind.is_caught_up
    assert h.state.cluster.get(1).fenced  # type: ignore[union-attr]
    result = h.state.process_heartbeat(
        api.BrokerHeartbeatRequest(
            broker_id=1, broker_epoch=register_offset, current_metadata_offset=register_offset
        ),
        h.now_ms,
        h.committed,
    )
    assert isinstance(result.records[0], UnfenceBrokerRecord)
    caught_up = h.apply(result)
    assert caught_up.is_caught_up and not caught_up.is_fenced
    assert not h.state.cluster.get(1).fenced  # type: ignore[union-attr]


def test_want_fence_keeps_or_makes_a_broker_fenced() -> None:
    h = Harness()
    h.start_brokers({1: ""})
    response = h.heartbeat(1, want_fence=True)
    assert response.is_fenced and h.state.cluster.get(1).fenced  # type: ignore[union-attr]
    assert h.heartbeat(1, want_fence=True).is_fenced


def test_session_timeout_fences_and_moves_leadership_and_shrinks_isr() -> None:
    h = Harness()
    h.start_brokers({1: "", 2: "", 3: ""})
    h.create_topic("t", assignments=[[1, 2, 3], [2, 3, 1]])
    h.advance(5000)
    assert h.apply(h.state.maybe_fence_stale_brokers(h.now_ms)) == ()
    h.heartbeat(2)
    h.heartbeat(3)
    h.advance(5000)  # broker 1 now silent for 10 s > 9 s
    result = h.state.maybe_fence_stale_brokers(h.now_ms)
    assert isinstance(result.records[-1], FenceBrokerRecord)
    assert h.apply(result) == (1,)
    assert h.state.cluster.get(1).fenced  # type: ignore[union-attr]
    p0, p1 = h.partition("t", 0), h.partition("t", 1)
    assert p0.leader == 2 and p0.isr == (2, 3) and p0.leader_epoch == 1
    assert p1.leader == 2 and p1.isr == (2, 3) and p1.leader_epoch == 0
    check_invariants(h.state)


def test_stale_brokers_are_fenced_one_per_operation_oldest_first() -> None:
    h = Harness()
    h.start_brokers({1: "", 2: "", 3: ""})
    h.create_topic("t", assignments=[[1, 2, 3]])
    h.advance(1000)
    h.heartbeat(2)
    h.advance(9500)  # 1 and 3 silent since 0, 2 since 1000: all stale, 2 last
    assert [h.apply(h.state.maybe_fence_stale_brokers(h.now_ms)) for _ in range(4)] == [
        (1,),
        (3,),
        (2,),
        (),
    ]
    partition = h.partition("t")
    assert partition.leader == -1
    assert all(h.state.cluster.get(b).fenced for b in (1, 2, 3))  # type: ignore[union-attr]
    check_invariants(h.state)


def test_fencing_the_last_isr_member_leaves_the_partition_leaderless() -> None:
    h = Harness(ControllerConfig(eligible_leader_replicas_enable=False))
    h.start_brokers({1: "", 2: ""})
    h.create_topic("t", assignments=[[1]])
    h.advance(10_000)
    h.heartbeat(2)
    h.apply(h.state.maybe_fence_stale_brokers(h.now_ms))
    partition = h.partition("t")
    # Without ELR the last member stays in the ISR, so it can lead again cleanly.
    assert partition.leader == -1 and partition.isr == (1,)
    h.heartbeat(1)
    assert h.partition("t").leader == 1


def test_a_new_active_controller_gives_every_broker_a_full_session() -> None:
    h = Harness()
    h.start_brokers({1: ""})
    h.advance(60_000)
    h.state.activate(h.now_ms)
    assert h.apply(h.state.maybe_fence_stale_brokers(h.now_ms)) == ()
    h.advance(10_000)
    assert h.apply(h.state.maybe_fence_stale_brokers(h.now_ms)) == (1,)


def test_controlled_shutdown_moves_leadership_then_allows_shutdown() -> None:
    h = Harness()
    h.start_brokers({1: "", 2: "", 3: ""})
    h.create_topic("t", assignments=[[1, 2, 3], [2, 1, 3]])
    result = h.state.process_heartbeat(
        api.BrokerHeartbeatRequest(
            broker_id=1,
            broker_epoch=h.epochs[1],
            current_metadata_offset=h.committed,
            want_shut_down=True,
        ),
        h.now_ms,
        h.committed,
    )
    assert isinstance(result.records[0], BrokerRegistrationChangeRecord)
    first = h.apply(result)
    assert not first.should_shut_down and not first.is_fenced
    registration = h.state.cluster.get(1)
    assert registration is not None and registration.in_controlled_shutdown
    assert h.partition("t", 0).leader == 2 and 1 not in h.partition("t", 0).isr
    assert 1 not in h.partition("t", 1).isr
    assert not h.state.replication.has_leaderships(1)
    # Brokers 2 and 3 have not replayed the moves yet: not yet.
    h.heartbeat(2, offset=h.committed - 5)
    h.heartbeat(3, offset=h.committed - 5)
    assert not h.heartbeat(1, want_shut_down=True).should_shut_down
    h.heartbeat(2)
    h.heartbeat(3)
    done = h.heartbeat(1, want_shut_down=True)
    assert done.should_shut_down and done.is_fenced
    assert h.state.cluster.get(1).fenced  # type: ignore[union-attr]
    check_invariants(h.state)


def test_broker_leading_nothing_may_shut_down_at_once() -> None:
    h = Harness()
    h.start_brokers({1: "", 2: ""})
    h.create_topic("t", assignments=[[2, 1]])
    response = h.heartbeat(1, want_shut_down=True)
    assert response.should_shut_down and response.is_fenced
    assert h.partition("t").isr == (2,)


def test_fenced_broker_asking_to_shut_down_is_told_to_at_once() -> None:
    h = Harness()
    h.bootstrap()
    h.register(1)
    response = h.heartbeat(1, offset=0, want_shut_down=True)
    assert response.should_shut_down and response.is_fenced


def test_unregister_unknown_broker_is_broker_id_not_registered() -> None:
    h = Harness()
    response = h.apply(h.state.unregister_broker(api.UnregisterBrokerRequest(broker_id=9)))
    assert response.error.code == ErrorCode.BROKER_ID_NOT_REGISTERED


def test_unregister_removes_the_broker_from_partitions_and_the_cluster() -> None:
    h = Harness()
    h.start_brokers({1: "", 2: ""})
    h.create_topic("t", assignments=[[1, 2]])
    result = h.state.unregister_broker(api.UnregisterBrokerRequest(broker_id=1))
    assert isinstance(result.records[-1], UnregisterBrokerRecord)
    h.apply(result)
    assert h.state.cluster.get(1) is None
    assert h.partition("t").leader == 2 and h.partition("t").isr == (2,)
    check_invariants(h.state)


def test_describe_cluster_reads_at_the_given_epoch_and_hides_fenced_brokers() -> None:
    h = Harness(ControllerConfig(cluster_id="c1"))
    h.start_brokers({1: "r1"})
    before = h.committed
    h.register(2, rack="r2")
    latest = h.state.describe_cluster(
        api.DescribeClusterRequest(include_fenced_brokers=True), h.committed
    )
    assert [b.broker_id for b in latest.brokers] == [1, 2] and latest.cluster_id == "c1"
    assert latest.brokers[1].is_fenced and latest.brokers[0].rack == "r1"
    unfenced = h.state.describe_cluster(api.DescribeClusterRequest(), h.committed, controller_id=7)
    assert [b.broker_id for b in unfenced.brokers] == [1] and unfenced.controller_id == 7
    old = h.state.describe_cluster(api.DescribeClusterRequest(include_fenced_brokers=True), before)
    assert [b.broker_id for b in old.brokers] == [1]


def test_producer_id_blocks_are_consecutive_and_need_a_current_broker_epoch() -> None:
    h = Harness()
    h.start_brokers({1: ""})
    first = h.apply(
        h.state.allocate_producer_ids(
            api.AllocateProducerIdsRequest(broker_id=1, broker_epoch=h.epochs[1])
        )
    )
    second = h.apply(
        h.state.allocate_producer_ids(
            api.AllocateProducerIdsRequest(broker_id=1, broker_epoch=h.epochs[1])
        )
    )
    assert (first.producer_id_start, first.producer_id_len) == (0, 1000)
    assert (second.producer_id_start, second.producer_id_len) == (1000, 1000)
    stale = h.state.allocate_producer_ids(
        api.AllocateProducerIdsRequest(broker_id=1, broker_epoch=h.epochs[1] + 1)
    )
    assert stale.response.error.code == ErrorCode.STALE_BROKER_EPOCH and stale.records == ()
    unknown = h.state.allocate_producer_ids(
        api.AllocateProducerIdsRequest(broker_id=4, broker_epoch=0)
    )
    assert unknown.response.error.code == ErrorCode.BROKER_ID_NOT_REGISTERED


def test_no_op_record_is_one_noop() -> None:
    h = Harness()
    result = h.state.no_op_record()
    assert len(result.records) == 1
    h.apply(result)
    assert h.state.last_replayed_offset() == 0


def test_shutdown_waits_until_the_leadership_moves_are_committed() -> None:
    h = Harness()
    h.start_brokers({1: "", 2: ""})
    h.create_topic("t", assignments=[[1, 2]])
    h.heartbeat(1, want_shut_down=True)
    moved_at = h.committed
    h.heartbeat(2)
    request = api.BrokerHeartbeatRequest(
        broker_id=1, broker_epoch=h.epochs[1], current_metadata_offset=moved_at, want_shut_down=True
    )
    # The moves are replayed but, as far as this call knows, not committed yet.
    early = h.state.process_heartbeat(request, h.now_ms, committed_offset=moved_at - 1)
    assert not early.response.should_shut_down and early.records == ()
    granted = h.state.process_heartbeat(request, h.now_ms, committed_offset=moved_at)
    assert granted.response.should_shut_down
