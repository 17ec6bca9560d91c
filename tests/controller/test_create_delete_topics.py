"""CreateTopics, DeleteTopics and CreatePartitions: records, placement and every error path."""

from __future__ import annotations

import collections

import pytest

from kraftlog.controller import api
from kraftlog.controller.controller_config import ControllerConfig
from kraftlog.error_codes import ErrorCode
from kraftlog.ids import Uuid
from kraftlog.metadata.records import ConfigRecord, PartitionRecord, RemoveTopicRecord, TopicRecord
from tests.controller.harness import Harness, check_invariants


@pytest.fixture
def h() -> Harness:
    harness = Harness()
    harness.bootstrap()
    harness.start_brokers({1: "a", 2: "b", 3: "c"})
    return harness


def _create(
    h: Harness, *topics: api.CreatableTopic, validate_only: bool = False
) -> list[api.CreatableTopicResult]:
    request = api.CreateTopicsRequest(topics=topics, validate_only=validate_only)
    return list(h.apply(h.state.create_topics(request)).topics)


def test_create_topic_writes_topic_partition_and_config_records_atomically(h: Harness) -> None:
    request = api.CreateTopicsRequest(
        topics=(
            api.CreatableTopic(
                name="orders",
                num_partitions=2,
                replication_factor=3,
                configs=(api.CreatableTopicConfig(name="retention.ms", value="1000"),),
            ),
        )
    )
    result = h.state.create_topics(request)
    assert result.is_atomic
    kinds = [type(r) for r in result.records]
    assert kinds == [TopicRecord, PartitionRecord, PartitionRecord, ConfigRecord]
    assert h.state.replication.topics_by_name.get("orders") is None  # generation changes nothing
    topic = h.apply(result).topics[0]
    assert topic.error.code == ErrorCode.NONE
    assert (topic.num_partitions, topic.replication_factor) == (2, 3)
    assert h.topic_id("orders") == topic.topic_id
    for partition_id in range(2):
        partition = h.partition("orders", partition_id)
        assert partition.isr == partition.replicas and partition.leader == partition.replicas[0]
        assert (partition.leader_epoch, partition.partition_epoch) == (0, 0)
    assert (
        h.state.configuration.get(api.ConfigResourceType.TOPIC, "orders", "retention.ms") == "1000"
    )


def test_defaults_come_from_num_partitions_and_default_replication_factor() -> None:
    h = Harness(ControllerConfig(num_partitions=4, default_replication_factor=2))
    h.start_brokers({1: "", 2: ""})
    result = _create(h, api.CreatableTopic(name="t"))[0]
    assert (result.num_partitions, result.replication_factor) == (4, 2)


def test_placement_is_rack_aware_and_spreads_leaders(h: Harness) -> None:
    h.register(4, rack="a")
    h.register(5, rack="b")
    h.register(6, rack="c")
    for broker_id in (4, 5, 6):
        h.heartbeat(broker_id)
    h.create_topic("t", partitions=12, replication_factor=3)
    racks = {b: h.state.cluster.get(b).rack for b in range(1, 7)}  # type: ignore[union-attr]
    leaders = collections.Counter()
    for partition_id in range(12):
        replicas = h.partition("t", partition_id).replicas
        assert len({racks[b] for b in replicas}) == 3, replicas
        leaders[replicas[0]] += 1
    assert sorted(leaders.values()) == [2] * 6


def test_validate_only_checks_but_creates_nothing(h: Harness) -> None:
    result = h.state.create_topics(
        api.CreateTopicsRequest(
            topics=(api.CreatableTopic(name="t", num_partitions=3, replication_factor=2),),
            validate_only=True,
        )
    )
    assert result.records == ()
    topic = result.response.topics[0]
    assert topic.error.code == ErrorCode.NONE and topic.topic_id == Uuid(bytes(16))
    assert topic.num_partitions == 3


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "a" * 250, "has space", "bad/char", "ünïcode"],
)
def test_illegal_topic_names_are_invalid_topic_exception(h: Harness, name: str) -> None:
    result = _create(h, api.CreatableTopic(name=name))[0]
    assert result.error.code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_legal_topic_name_of_249_characters_is_accepted(h: Harness) -> None:
    assert _create(h, api.CreatableTopic(name="a-._" * 62 + "b"))[0].error.code == ErrorCode.NONE


def test_existing_topic_is_topic_already_exists(h: Harness) -> None:
    h.create_topic("t")
    result = _create(h, api.CreatableTopic(name="t"))[0]
    assert result.error.code == ErrorCode.TOPIC_ALREADY_EXISTS


def test_names_differing_only_in_dot_and_underscore_collide(h: Harness) -> None:
    h.create_topic("a.b")
    assert (
        _create(h, api.CreatableTopic(name="a_b"))[0].error.code
        == ErrorCode.INVALID_TOPIC_EXCEPTION
    )
    results = _create(h, api.CreatableTopic(name="x_y"), api.CreatableTopic(name="x.y"))
    assert [r.error.code for r in results] == [ErrorCode.NONE, ErrorCode.INVALID_TOPIC_EXCEPTION]


def test_duplicate_name_in_one_request_is_invalid_request_for_each(h: Harness) -> None:
    results = _create(h, api.CreatableTopic(name="t"), api.CreatableTopic(name="t"))
    assert [r.error.code for r in results] == [ErrorCode.INVALID_REQUEST] * 2


def test_more_replicas_than_unfenced_brokers_is_invalid_replication_factor(h: Harness) -> None:
    result = _create(h, api.CreatableTopic(name="t", replication_factor=4))[0]
    assert result.error.code == ErrorCode.INVALID_REPLICATION_FACTOR
    h.heartbeat(3, want_fence=True)
    assert _create(h, api.CreatableTopic(name="t", replication_factor=3))[0].error.code == (
        ErrorCode.INVALID_REPLICATION_FACTOR
    )


@pytest.mark.parametrize("rf", [0, -2])
def test_non_positive_replication_factor_is_invalid_replication_factor(h: Harness, rf: int) -> None:
    result = _create(h, api.CreatableTopic(name="t", replication_factor=rf))[0]
    assert result.error.code == ErrorCode.INVALID_REPLICATION_FACTOR


@pytest.mark.parametrize("count", [0, -5])
def test_non_positive_partition_count_is_invalid_partitions(h: Harness, count: int) -> None:
    result = _create(h, api.CreatableTopic(name="t", num_partitions=count))[0]
    assert result.error.code == ErrorCode.INVALID_PARTITIONS


def test_too_many_records_for_one_operation_is_policy_violation() -> None:
    h = Harness(ControllerConfig(max_records_per_user_op=10))
    h.start_brokers({1: ""})
    result = _create(h, api.CreatableTopic(name="t", num_partitions=10))[0]
    assert result.error.code == ErrorCode.POLICY_VIOLATION
    assert (
        _create(h, api.CreatableTopic(name="u", num_partitions=9))[0].error.code == ErrorCode.NONE
    )


def _assigned(*lists: tuple[int, ...], **kwargs: int) -> api.CreatableTopic:
    return api.CreatableTopic(
        name="t",
        assignments=tuple(
            api.CreatableReplicaAssignment(partition_index=i, broker_ids=b)
            for i, b in enumerate(lists)
        ),
        **kwargs,
    )


def test_manual_assignment_is_used_with_fenced_replicas_left_out_of_the_isr(h: Harness) -> None:
    h.heartbeat(3, want_fence=True)
    assert _create(h, _assigned((3, 2), (1, 3)))[0].error.code == ErrorCode.NONE
    assert h.partition("t", 0).isr == (2,) and h.partition("t", 0).leader == 2
    assert h.partition("t", 1).replicas == (1, 3) and h.partition("t", 1).isr == (1,)


@pytest.mark.parametrize(
    ("topic", "code"),
    [
        (_assigned((1, 2), num_partitions=1), ErrorCode.INVALID_REQUEST),
        (_assigned((1, 2), replication_factor=2), ErrorCode.INVALID_REQUEST),
        (_assigned(()), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (_assigned((1, 1)), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (_assigned((1, 9)), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (_assigned((1, 2), (3,)), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (
            api.CreatableTopic(
                name="t",
                assignments=(api.CreatableReplicaAssignment(partition_index=1, broker_ids=(1,)),),
            ),
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ),
    ],
    ids=["partitions-set", "rf-set", "empty", "duplicate", "unregistered", "uneven", "gap"],
)
def test_bad_manual_assignments(h: Harness, topic: api.CreatableTopic, code: ErrorCode) -> None:
    assert _create(h, topic)[0].error.code == code


def test_manual_assignment_with_only_fenced_brokers_is_invalid_replica_assignment(
    h: Harness,
) -> None:
    h.heartbeat(3, want_fence=True)
    assert _create(h, _assigned((3,)))[0].error.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("no.such.config", "1"),
        ("retention.ms", "soon"),
        ("min.insync.replicas", "0"),
        ("cleanup.policy", "keep"),
        ("unclean.leader.election.enable", "yes"),
    ],
)
def test_bad_topic_config_is_invalid_config(h: Harness, name: str, value: str) -> None:
    topic = api.CreatableTopic(
        name="t", configs=(api.CreatableTopicConfig(name=name, value=value),)
    )
    result = _create(h, topic)[0]
    assert result.error.code == ErrorCode.INVALID_CONFIG, result.error
    assert h.state.replication.topics_by_name.get("t") is None


def test_one_bad_topic_does_not_stop_the_others(h: Harness) -> None:
    results = _create(h, api.CreatableTopic(name="ok"), api.CreatableTopic(name="bad!"))
    assert [r.error.code for r in results] == [ErrorCode.NONE, ErrorCode.INVALID_TOPIC_EXCEPTION]
    assert h.state.replication.topic_exists("ok")


# -- DeleteTopics -------------------------------------------------------------------------


def _delete(h: Harness, *states: api.DeleteTopicState) -> list[api.DeletableTopicResult]:
    return list(h.apply(h.state.delete_topics(api.DeleteTopicsRequest(topics=states))).responses)


def test_delete_by_name_and_by_id_removes_topic_partitions_and_configs(h: Harness) -> None:
    h.create_topic("a", partitions=2, configs={"retention.ms": "5"})
    h.create_topic("b")
    b_id = h.topic_id("b")
    result = h.state.delete_topics(
        api.DeleteTopicsRequest(
            topics=(api.DeleteTopicState(name="a"), api.DeleteTopicState(topic_id=b_id))
        )
    )
    assert all(isinstance(r, RemoveTopicRecord) for r in result.records)
    results = h.apply(result).responses
    assert [(r.name, r.error.code) for r in results] == [
        ("a", ErrorCode.NONE),
        ("b", ErrorCode.NONE),
    ]
    replication = h.state.replication
    assert len(replication.topics) == 0 and len(replication.partitions) == 0
    assert h.state.configuration.get(api.ConfigResourceType.TOPIC, "a", "retention.ms") is None
    assert replication.leaderless_partitions() == [] and replication.partitions_led_by(1) == []
    h.create_topic("a")  # the name is free again
    check_invariants(h.state)


def test_delete_unknown_name_is_unknown_topic_or_partition(h: Harness) -> None:
    assert (
        _delete(h, api.DeleteTopicState(name="nope"))[0].error.code
        == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    )


def test_delete_unknown_id_is_unknown_topic_id(h: Harness) -> None:
    result = _delete(h, api.DeleteTopicState(topic_id=Uuid.from_bits(7, 7)))[0]
    assert result.error.code == ErrorCode.UNKNOWN_TOPIC_ID


def test_delete_with_both_or_neither_name_and_id_is_invalid_request(h: Harness) -> None:
    h.create_topic("t")
    both = api.DeleteTopicState(name="t", topic_id=h.topic_id("t"))
    codes = [r.error.code for r in _delete(h, both, api.DeleteTopicState())]
    assert codes == [ErrorCode.INVALID_REQUEST] * 2


def test_delete_the_same_topic_twice_in_one_request_is_invalid_request(h: Harness) -> None:
    h.create_topic("t")
    results = _delete(
        h, api.DeleteTopicState(name="t"), api.DeleteTopicState(topic_id=h.topic_id("t"))
    )
    assert [r.error.code for r in results] == [ErrorCode.NONE, ErrorCode.INVALID_REQUEST]


def test_delete_internal_topic_is_invalid_topic_exception(h: Harness) -> None:
    h.create_topic("__consumer_offsets")
    assert _delete(h, api.DeleteTopicState(name="__consumer_offsets"))[0].error.code == (
        ErrorCode.INVALID_TOPIC_EXCEPTION
    )


# -- CreatePartitions ---------------------------------------------------------------------


def _grow(h: Harness, name: str, count: int, *assignments: tuple[int, ...]) -> api.ApiError:
    request = api.CreatePartitionsRequest(
        topics=(
            api.CreatePartitionsTopic(
                name=name,
                count=count,
                assignments=tuple(
                    api.CreatePartitionsAssignment(broker_ids=a) for a in assignments
                ),
            ),
        )
    )
    return h.apply(h.state.create_partitions(request)).results[0].error


def test_create_partitions_adds_partitions_with_the_topics_replication_factor(h: Harness) -> None:
    h.create_topic("t", partitions=1, replication_factor=2)
    assert _grow(h, "t", 4).code == ErrorCode.NONE
    assert h.state.replication.topics[h.topic_id("t")].num_partitions == 4
    assert all(len(h.partition("t", p).replicas) == 2 for p in range(4))
    assert _grow(h, "t", 5, (3, 1)).code == ErrorCode.NONE
    assert h.partition("t", 4).replicas == (3, 1) and h.partition("t", 4).leader == 3
    check_invariants(h.state)


def test_create_partitions_of_unknown_topic_is_unknown_topic_or_partition(h: Harness) -> None:
    assert _grow(h, "nope", 3).code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("count", [1, 2])
def test_create_partitions_not_increasing_is_invalid_partitions(h: Harness, count: int) -> None:
    h.create_topic("t", partitions=2)
    assert _grow(h, "t", count).code == ErrorCode.INVALID_PARTITIONS


def test_create_partitions_with_wrong_assignments_is_invalid_replica_assignment(h: Harness) -> None:
    h.create_topic("t", partitions=1, replication_factor=2)
    assert _grow(h, "t", 3, (1, 2)).code == ErrorCode.INVALID_REPLICA_ASSIGNMENT  # too few
    assert _grow(h, "t", 2, (1,)).code == ErrorCode.INVALID_REPLICA_ASSIGNMENT  # wrong RF
    assert _grow(h, "t", 2, (1, 8)).code == ErrorCode.INVALID_REPLICA_ASSIGNMENT  # unregistered


def test_create_partitions_beyond_unfenced_brokers_is_invalid_replication_factor(
    h: Harness,
) -> None:
    h.create_topic("t", partitions=1, replication_factor=3)
    h.heartbeat(3, want_fence=True)
    assert _grow(h, "t", 2).code == ErrorCode.INVALID_REPLICATION_FACTOR


def test_create_partitions_validate_only_changes_nothing(h: Harness) -> None:
    h.create_topic("t")
    request = api.CreatePartitionsRequest(
        topics=(api.CreatePartitionsTopic(name="t", count=3),), validate_only=True
    )
    result = h.state.create_partitions(request)
    assert result.records == () and result.response.results[0].error.code == ErrorCode.NONE
