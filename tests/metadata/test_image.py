"""MetadataImage queries brokers and admin use, and the image's immutability."""

from __future__ import annotations

import dataclasses

import pytest

from kraftlog.ids import Uuid
from kraftlog.metadata import delta as dl
from kraftlog.metadata import image as im
from kraftlog.metadata import records as r

T1 = Uuid.from_bits(1, 1)
T2 = Uuid.from_bits(2, 2)


def make_image() -> im.MetadataImage:
    records: list[r.MetadataRecord] = [
        r.RegisterBrokerRecord(broker_id=1, incarnation_id=T1, broker_epoch=1,
                               endpoints=(r.Endpoint(listener_name="PLAINTEXT", host="h1",
                                                     port=9092),)),
        r.TopicRecord(name="a", topic_id=T1),
        r.PartitionRecord(topic_id=T1, partition_id=0, replicas=(1, 2, 3), isr=(1, 2, 3),
                          leader=1),
        r.PartitionRecord(topic_id=T1, partition_id=1, replicas=(2, 3, 1), isr=(2,), leader=2),
        r.TopicRecord(name="b", topic_id=T2),
        r.PartitionRecord(topic_id=T2, partition_id=0, replicas=(3, 4), isr=(), leader=-1,
                          adding_replicas=(4,)),
    ]
    delta = dl.MetadataDelta(im.EMPTY)
    for offset, record in enumerate(records):
        delta.replay(record, offset, 1)
    return delta.apply()


IMAGE = make_image()


def keys(partitions: object) -> set[tuple[str, int]]:
    return {(p.topic_name, p.partition_id) for p in partitions}  # type: ignore[attr-defined]


def test_partitions_led_by_and_replicated_on_a_broker() -> None:
    assert keys(IMAGE.topics.partitions_led_by(1)) == {("a", 0)}
    assert keys(IMAGE.topics.partitions_led_by(2)) == {("a", 1)}
    assert keys(IMAGE.topics.partitions_on_broker(3)) == {("a", 0), ("a", 1), ("b", 0)}
    assert keys(IMAGE.topics.partitions_on_broker(9)) == set()


def test_under_replicated_offline_and_reassigning_partitions() -> None:
    assert keys(IMAGE.topics.under_replicated_partitions()) == {("a", 1), ("b", 0)}
    assert keys(IMAGE.topics.offline_partitions()) == {("b", 0)}
    assert keys(IMAGE.topics.reassigning_partitions()) == {("b", 0)}
    assert IMAGE.topics.partition_count == 3


def test_partition_registration_helpers() -> None:
    registration = IMAGE.topics.partition(T2, 0)
    assert registration is not None
    assert registration.preferred_leader == 3 and not registration.has_leader
    assert registration.target_replicas == (3, 4) and registration.is_reassigning
    assert registration.has_replica(4) and not registration.has_replica(1)
    removing = dataclasses.replace(registration, removing_replicas=(3,))
    assert removing.target_replicas == (4,)
    assert im.PartitionRegistration(replicas=(), isr=(), leader=-1).preferred_leader == -1


def test_partition_registration_round_trips_through_its_record() -> None:
    registration = IMAGE.topics.partition(T1, 1)
    assert registration is not None
    record = registration.to_record(T1, 1)
    assert im.PartitionRegistration.from_record(record) == registration


def test_broker_endpoint_by_listener() -> None:
    broker = IMAGE.cluster.broker(1)
    assert broker is not None and broker.endpoint("PLAINTEXT") is not None
    assert broker.endpoint("CONTROLLER") is None
    assert im.BrokerRegistration.from_record(broker.to_record()) == broker


def test_topic_partition_info() -> None:
    topic = IMAGE.topics.get_topic(T1)
    assert topic is not None
    info = topic.partition_info(1)
    assert info is not None and info.topic_name == "a" and info.registration.leader == 2
    assert topic.partition_info(7) is None


def test_image_maps_are_read_only() -> None:
    with pytest.raises(TypeError):
        IMAGE.topics.topics[T2] = IMAGE.topics.topics[T1]  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        IMAGE.provenance = im.EMPTY_PROVENANCE  # type: ignore[misc]


def test_empty_image() -> None:
    assert im.EMPTY.is_empty and not IMAGE.is_empty
    assert im.EMPTY.provenance.snapshot_end_offset == 0
