"""MetadataDelta replay rules, one by one, and the errors for records that cannot apply."""

from __future__ import annotations

import pytest

from kraftlog.errors import InvariantViolation
from kraftlog.ids import Uuid
from kraftlog.metadata import delta as dl
from kraftlog.metadata import image as im
from kraftlog.metadata import records as r

T1 = Uuid.from_bits(1, 1)
T2 = Uuid.from_bits(2, 2)
INC = Uuid.from_bits(9, 9)
TOPIC = r.ConfigResourceType.TOPIC


def build(*records: r.MetadataRecord, image: im.MetadataImage = im.EMPTY,
          first_offset: int = 0) -> im.MetadataImage:
    delta = dl.MetadataDelta(image)
    for offset, record in enumerate(records, start=first_offset):
        delta.replay(record, offset, 1)
    return delta.apply()


def register(broker_id: int, epoch: int = 10, **kw: object) -> r.RegisterBrokerRecord:
    return r.RegisterBrokerRecord(broker_id=broker_id, incarnation_id=INC, broker_epoch=epoch,
                                  **kw)  # type: ignore[arg-type]


def partition(topic_id: Uuid = T1, partition_id: int = 0, replicas: tuple[int, ...] = (1, 2, 3),
              **kw: object) -> r.PartitionRecord:
    fields: dict[str, object] = {"isr": replicas, "leader": replicas[0], "leader_epoch": 4,
                                 "partition_epoch": 7}
    fields.update(kw)
    return r.PartitionRecord(topic_id=topic_id, partition_id=partition_id,
                             replicas=replicas, **fields)  # type: ignore[arg-type]


BASE = build(register(1), register(2), register(3), r.TopicRecord(name="t1", topic_id=T1),
             partition(), partition(partition_id=1, replicas=(2, 3, 1)))


def change(topic_id: Uuid = T1, partition_id: int = 0, **kw: object) -> r.PartitionChangeRecord:
    return r.PartitionChangeRecord(topic_id=topic_id, partition_id=partition_id,
                                   **kw)  # type: ignore[arg-type]


def p0(image: im.MetadataImage) -> im.PartitionRegistration:
    found = image.topics.partition(T1, 0)
    assert found is not None
    return found


# -- partitions ----------------------------------------------------------------------------------

def test_partition_record_sets_the_full_state() -> None:
    registration = p0(BASE)
    assert registration.replicas == (1, 2, 3) and registration.leader == 1
    assert (registration.leader_epoch, registration.partition_epoch) == (4, 7)


def test_change_without_leader_bumps_only_the_partition_epoch() -> None:
    after = p0(build(change(isr=(1, 2)), image=BASE))
    assert after.isr == (1, 2)
    assert (after.leader, after.leader_epoch, after.partition_epoch) == (1, 4, 8)


def test_change_setting_the_same_leader_still_bumps_the_leader_epoch() -> None:
    after = p0(build(change(leader=1), image=BASE))
    assert (after.leader, after.leader_epoch, after.partition_epoch) == (1, 5, 8)


def test_change_to_no_leader_bumps_both_epochs() -> None:
    after = p0(build(change(leader=r.NO_LEADER, isr=()), image=BASE))
    assert not after.has_leader and after.isr == ()
    assert (after.leader_epoch, after.partition_epoch) == (5, 8)


def test_every_change_in_one_delta_counts() -> None:
    after = p0(build(change(isr=(1,)), change(leader=2), change(isr=(1, 2)), image=BASE))
    assert (after.leader, after.leader_epoch, after.partition_epoch) == (2, 5, 10)


def test_empty_tuple_replaces_and_none_keeps() -> None:
    base = build(partition(removing_replicas=(3,), adding_replicas=(4,),
                           eligible_leader_replicas=(2,), last_known_elr=(3,)), image=BASE)
    kept = p0(build(change(isr=(1, 2, 3)), image=base))
    assert kept.removing_replicas == (3,) and kept.adding_replicas == (4,)
    assert kept.elr == (2,) and kept.last_known_elr == (3,)
    cleared = p0(build(change(removing_replicas=(), adding_replicas=(),
                              eligible_leader_replicas=(), last_known_elr=()), image=base))
    assert cleared.removing_replicas == cleared.adding_replicas == ()
    assert cleared.elr == cleared.last_known_elr == ()


def test_leader_recovery_state_changes_only_when_set() -> None:
    recovering = build(change(leader=2, leader_recovery_state=r.LeaderRecoveryState.RECOVERING),
                       image=BASE)
    assert p0(recovering).leader_recovery_state is r.LeaderRecoveryState.RECOVERING
    assert p0(build(change(isr=(2,)), image=recovering)).leader_recovery_state \
        is r.LeaderRecoveryState.RECOVERING


def test_partition_record_for_an_existing_partition_replaces_it() -> None:
    after = build(partition(replicas=(3,), leader_epoch=0, partition_epoch=0), image=BASE)
    assert p0(after).replicas == (3,) and p0(after).partition_epoch == 0


def test_other_partitions_and_topics_are_shared_not_copied() -> None:
    two = build(r.TopicRecord(name="t2", topic_id=T2), partition(topic_id=T2), image=BASE)
    after = build(change(isr=(1,)), image=two)
    assert after.topics.topics[T2] is two.topics.topics[T2]
    assert after.topics.topics[T1].partitions[1] is two.topics.topics[T1].partitions[1]
    assert after.topics.ids_by_name is two.topics.ids_by_name
    assert after.cluster is two.cluster and after.configs is two.configs
    assert two.topics.partition(T1, 0) == p0(BASE)  # the old image did not change


# -- topics --------------------------------------------------------------------------------------

def test_topic_by_id_and_by_name() -> None:
    topic = BASE.topics.get_topic_by_name("t1")
    assert topic is not None and topic.topic_id == T1 and topic is BASE.topics.get_topic(T1)
    assert BASE.topics.get_topic_by_name("nope") is None


def test_remove_topic_removes_partitions_name_and_topic_configs() -> None:
    with_configs = build(
        r.ConfigRecord(resource_type=TOPIC, resource_name="t1", name="retention.ms", value="1"),
        r.ConfigRecord(resource_type=r.ConfigResourceType.BROKER, resource_name="1",
                       name="x", value="2"), image=BASE)
    after = build(r.RemoveTopicRecord(topic_id=T1), image=with_configs)
    assert after.topics.get_topic(T1) is None and after.topics.get_topic_by_name("t1") is None
    assert dict(after.configs.topic_configs("t1")) == {}
    assert dict(after.configs.broker_configs(1)) == {"x": "2"}


def test_topic_removed_and_recreated_under_the_same_name_in_one_delta() -> None:
    after = build(r.RemoveTopicRecord(topic_id=T1), r.TopicRecord(name="t1", topic_id=T2),
                  partition(topic_id=T2, replicas=(3,)),
                  r.ConfigRecord(resource_type=TOPIC, resource_name="t1", name="a", value="b"),
                  image=BASE)
    topic = after.topics.get_topic_by_name("t1")
    assert topic is not None and topic.topic_id == T2 and T1 not in after.topics.topics
    assert dict(after.configs.topic_configs("t1")) == {"a": "b"}


def test_topic_created_and_removed_in_one_delta_leaves_nothing() -> None:
    after = build(r.TopicRecord(name="t2", topic_id=T2), partition(topic_id=T2),
                  r.RemoveTopicRecord(topic_id=T2), image=BASE)
    assert after.topics == BASE.topics


# -- brokers -------------------------------------------------------------------------------------

def test_register_replaces_an_earlier_registration() -> None:
    after = build(register(1, epoch=20, rack="r9", fenced=False), image=BASE)
    broker = after.cluster.broker(1)
    assert broker is not None and broker.broker_epoch == 20 and broker.rack == "r9"
    assert not broker.fenced


def test_fence_unfence_and_registration_change_flip_flags() -> None:
    unfenced = build(r.UnfenceBrokerRecord(broker_id=2, broker_epoch=10), image=BASE)
    assert unfenced.cluster.is_active(2) and unfenced.cluster.unfenced_broker_ids() == [2]
    fenced = build(r.FenceBrokerRecord(broker_id=2, broker_epoch=10), image=unfenced)
    assert fenced.cluster.brokers[2].fenced
    shutting = build(r.BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=10,
                                                      fenced=False, in_controlled_shutdown=True),
                     image=fenced)
    broker = shutting.cluster.brokers[2]
    assert not broker.fenced and broker.in_controlled_shutdown
    assert not shutting.cluster.is_active(2)
    untouched = build(r.BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=10),
                      image=shutting)
    assert untouched.cluster.brokers[2] == broker


def test_unregister_removes_the_broker() -> None:
    after = build(r.UnregisterBrokerRecord(broker_id=3, broker_epoch=10), image=BASE)
    assert after.cluster.broker(3) is None and set(after.cluster.brokers) == {1, 2}


# -- configs, features, producer ids, no-op ------------------------------------------------------

def test_config_set_overwrite_and_delete() -> None:
    res = {"resource_type": TOPIC, "resource_name": "t1", "name": "retention.ms"}
    one = build(r.ConfigRecord(**res, value="1"), image=BASE)  # type: ignore[arg-type]
    two = build(r.ConfigRecord(**res, value="2"), image=one)  # type: ignore[arg-type]
    assert two.configs.topic_configs("t1")["retention.ms"] == "2"
    gone = build(r.ConfigRecord(**res, value=None), image=two)  # type: ignore[arg-type]
    assert not gone.configs.resources  # a resource with no configs left is dropped


def test_cluster_default_broker_config_uses_the_empty_name() -> None:
    after = build(r.ConfigRecord(resource_type=r.ConfigResourceType.BROKER, resource_name="",
                                 name="log.retention.ms", value="5"))
    assert dict(after.configs.broker_configs(None)) == {"log.retention.ms": "5"}


def test_feature_level_zero_removes_the_feature() -> None:
    on = build(r.FeatureLevelRecord(name="metadata.version", feature_level=21))
    assert on.features.level("metadata.version") == 21
    off = build(r.FeatureLevelRecord(name="metadata.version", feature_level=0), image=on)
    assert "metadata.version" not in off.features.levels and off.features.level("x") == 0


def test_producer_ids_record_sets_the_next_producer_id() -> None:
    assert im.EMPTY.producer_ids.next_producer_id == -1
    after = build(r.ProducerIdsRecord(broker_id=1, broker_epoch=10, next_producer_id=2000))
    assert after.producer_ids.next_producer_id == 2000


def test_no_op_changes_only_the_provenance() -> None:
    delta = dl.MetadataDelta(BASE)
    delta.replay(r.NoOpRecord(), 100, 3)
    after = delta.apply()
    assert after.provenance == im.MetadataProvenance(last_offset=100, last_epoch=3,
                                                     last_append_timestamp_ms=-1)
    assert after.same_state(BASE) and after.topics is BASE.topics
    assert delta.topics_delta is None and delta.cluster_delta is None


# -- errors --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("record", "message"), [
    (change(topic_id=T2), "unknown topic id"),
    (r.PartitionChangeRecord(topic_id=T1, partition_id=5, isr=()), "unknown partition t1-5"),
    (partition(topic_id=T2), "unknown topic id"),
    (r.RemoveTopicRecord(topic_id=T2), "cannot remove unknown topic"),
    (r.TopicRecord(name="t1", topic_id=T2), "topic 't1' .* already exists with id"),
    (r.TopicRecord(name="other", topic_id=T1), "topic id .* already exists"),
    (r.FenceBrokerRecord(broker_id=9, broker_epoch=10), "cannot fence broker 9: not registered"),
    (r.UnfenceBrokerRecord(broker_id=1, broker_epoch=11), "broker epoch 11: .* has epoch 10"),
    (r.UnregisterBrokerRecord(broker_id=9, broker_epoch=1), "cannot unregister broker 9"),
    (r.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=3), "cannot change broker 1"),
])
def test_records_that_cannot_apply_raise_naming_the_offset(record: r.MetadataRecord,
                                                             message: str) -> None:
    delta = dl.MetadataDelta(BASE)
    with pytest.raises(dl.ReplayError, match=f"offset 57: .*{message}") as caught:
        delta.replay(record, 57, 1)
    assert caught.value.offset == 57
    assert isinstance(caught.value, InvariantViolation)


def test_records_after_a_topic_removal_in_the_same_delta_see_it_gone() -> None:
    delta = dl.MetadataDelta(BASE)
    delta.replay(r.RemoveTopicRecord(topic_id=T1), 1, 1)
    with pytest.raises(dl.ReplayError, match="offset 2: unknown topic id"):
        delta.replay(change(isr=(1,)), 2, 1)


def test_a_broker_unregistered_earlier_in_the_delta_is_unknown() -> None:
    delta = dl.MetadataDelta(BASE)
    delta.replay(r.UnregisterBrokerRecord(broker_id=1, broker_epoch=10), 1, 1)
    with pytest.raises(dl.ReplayError, match="offset 2: cannot fence broker 1"):
        delta.replay(r.FenceBrokerRecord(broker_id=1, broker_epoch=10), 2, 1)


def test_replay_rejects_a_value_that_is_not_a_record() -> None:
    with pytest.raises(dl.ReplayError, match="not a metadata record"):
        dl.MetadataDelta(BASE).replay("TopicRecord", 3, 1)  # type: ignore[arg-type]


# -- snapshot deltas -----------------------------------------------------------------------------

def test_snapshot_delta_removes_what_the_snapshot_does_not_mention() -> None:
    base = build(r.FeatureLevelRecord(name="f", feature_level=1),
                 r.ConfigRecord(resource_type=TOPIC, resource_name="t1", name="a", value="1"),
                 r.ProducerIdsRecord(broker_id=1, broker_epoch=10, next_producer_id=5),
                 image=BASE)
    delta = dl.MetadataDelta(base, from_snapshot=True)
    records: list[r.MetadataRecord] = [register(2), r.TopicRecord(name="t2", topic_id=T2),
                                       partition(topic_id=T2)]
    for offset, record in enumerate(records):
        delta.replay(record, offset, 1)
    after = delta.apply()
    assert set(after.cluster.brokers) == {2}
    assert set(after.topics.topics) == {T2} and set(after.topics.ids_by_name) == {"t2"}
    assert not after.features.levels and not after.configs.resources
    assert after.producer_ids.next_producer_id == -1


def test_snapshot_delta_replaces_a_kept_topic_whole() -> None:
    delta = dl.MetadataDelta(BASE, from_snapshot=True)
    records: list[r.MetadataRecord] = [r.TopicRecord(name="t1", topic_id=T1),
                                       partition(partition_id=1, replicas=(3,))]
    for offset, record in enumerate(records):
        delta.replay(record, offset, 1)
    topic = delta.apply().topics.get_topic(T1)
    assert topic is not None and set(topic.partitions) == {1}
    assert topic.partitions[1].replicas == (3,)


def test_snapshot_delta_does_not_see_the_base_image_for_references() -> None:
    delta = dl.MetadataDelta(BASE, from_snapshot=True)
    with pytest.raises(dl.ReplayError, match="unknown topic id"):
        delta.replay(partition(), 0, 1)
    with pytest.raises(dl.ReplayError, match="not registered"):
        delta.replay(r.FenceBrokerRecord(broker_id=1, broker_epoch=10), 0, 1)
