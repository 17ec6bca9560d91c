"""TopicsDelta.local_changes: which partitions one broker must now lead, follow or delete
(Kafka's TopicsDelta.localChanges)."""

from __future__ import annotations

from kraftlog.ids import Uuid
from kraftlog.metadata import delta as dl
from kraftlog.metadata import image as im
from kraftlog.metadata import records as r

T1 = Uuid.from_bits(1, 1)
T2 = Uuid.from_bits(2, 2)


def partition(topic_id: Uuid, partition_id: int, replicas: tuple[int, ...],
              leader: int | None = None) -> r.PartitionRecord:
    return r.PartitionRecord(topic_id=topic_id, partition_id=partition_id, replicas=replicas,
                             isr=replicas, leader=replicas[0] if leader is None else leader,
                             leader_epoch=3, partition_epoch=5)


def replay(image: im.MetadataImage, *records: r.MetadataRecord,
           from_snapshot: bool = False) -> tuple[dl.MetadataDelta, im.MetadataImage]:
    delta = dl.MetadataDelta(image, from_snapshot=from_snapshot)
    for offset, record in enumerate(records):
        delta.replay(record, offset, 1)
    return delta, delta.apply()


def local(delta: dl.MetadataDelta, broker_id: int) -> dict[str, set[tuple[str, int]]]:
    topics = delta.topics_delta
    assert topics is not None
    changes = topics.local_changes(broker_id)
    return {kind: {(p.topic_name, p.partition_id) for p in getattr(changes, kind)}
            for kind in ("leaders", "followers", "deletes", "elected_leaders")}


_, BASE = replay(im.EMPTY, r.TopicRecord(name="t1", topic_id=T1), partition(T1, 0, (1, 2, 3)),
                 partition(T1, 1, (2, 3, 4)))


def test_a_new_topic_makes_leaders_and_followers() -> None:
    delta, _ = replay(im.EMPTY, r.TopicRecord(name="t1", topic_id=T1),
                      partition(T1, 0, (1, 2)), partition(T1, 1, (2, 1)),
                      partition(T1, 2, (3, 4)))
    assert local(delta, 1) == {"leaders": {("t1", 0)}, "followers": {("t1", 1)},
                               "deletes": set(), "elected_leaders": {("t1", 0)}}


def test_leader_change_moves_leadership_and_marks_the_new_leader_elected() -> None:
    delta, _ = replay(BASE, r.PartitionChangeRecord(topic_id=T1, partition_id=0, leader=2))
    assert local(delta, 2)["leaders"] == {("t1", 0)}
    assert local(delta, 2)["elected_leaders"] == {("t1", 0)}
    assert local(delta, 1)["followers"] == {("t1", 0)} and not local(delta, 1)["leaders"]


def test_isr_change_reports_the_leader_but_not_as_newly_elected() -> None:
    delta, _ = replay(BASE, r.PartitionChangeRecord(topic_id=T1, partition_id=0, isr=(1, 2)))
    changes = local(delta, 1)
    assert changes["leaders"] == {("t1", 0)} and changes["elected_leaders"] == set()
    assert local(delta, 3)["followers"] == {("t1", 0)}


def test_brokers_not_involved_see_nothing() -> None:
    delta, _ = replay(BASE, r.PartitionChangeRecord(topic_id=T1, partition_id=0, isr=(1, 2)))
    topics = delta.topics_delta
    assert topics is not None and topics.local_changes(4).is_empty


def test_replica_removed_by_reassignment_is_deleted_with_its_last_registration() -> None:
    delta, _ = replay(BASE, r.PartitionChangeRecord(topic_id=T1, partition_id=0, leader=1,
                                                    replicas=(1, 2), isr=(1, 2)))
    assert local(delta, 3)["deletes"] == {("t1", 0)}
    topics = delta.topics_delta
    assert topics is not None
    (deleted,) = topics.local_changes(3).deletes
    assert deleted.registration.replicas == (1, 2, 3)  # as the broker last knew it


def test_replica_added_by_reassignment_becomes_a_follower() -> None:
    delta, _ = replay(BASE, r.PartitionChangeRecord(topic_id=T1, partition_id=0,
                                                    replicas=(1, 2, 3, 5), adding_replicas=(5,)))
    assert local(delta, 5)["followers"] == {("t1", 0)}


def test_deleted_topic_deletes_every_local_replica() -> None:
    delta, _ = replay(BASE, r.RemoveTopicRecord(topic_id=T1))
    assert local(delta, 2)["deletes"] == {("t1", 0), ("t1", 1)}
    assert local(delta, 1)["deletes"] == {("t1", 0)}


def test_recreated_topic_deletes_old_replicas_and_creates_new_ones() -> None:
    delta, _ = replay(BASE, r.RemoveTopicRecord(topic_id=T1), r.TopicRecord(name="t1", topic_id=T2),
                      partition(T2, 0, (4, 1)))
    topics = delta.topics_delta
    assert topics is not None
    changes = topics.local_changes(1)
    assert {(p.topic_id, p.partition_id) for p in changes.deletes} == {(T1, 0)}
    assert {(p.topic_id, p.partition_id) for p in changes.followers} == {(T2, 0)}


def test_snapshot_load_reports_only_real_differences() -> None:
    # The snapshot repeats t1-0 unchanged, changes t1-1's leader, drops nothing else of t1
    # but a whole topic t2 the broker replicated.
    _, base = replay(BASE, r.TopicRecord(name="t2", topic_id=T2), partition(T2, 0, (3, 1)))
    moved = r.PartitionRecord(topic_id=T1, partition_id=1, replicas=(2, 3, 4), isr=(2, 3, 4),
                              leader=3, leader_epoch=4, partition_epoch=6)
    delta, after = replay(base, r.TopicRecord(name="t1", topic_id=T1), partition(T1, 0, (1, 2, 3)),
                          moved, from_snapshot=True)
    assert set(after.topics.topics) == {T1}
    assert local(delta, 3) == {"leaders": {("t1", 1)}, "followers": set(),
                               "deletes": {("t2", 0)}, "elected_leaders": {("t1", 1)}}
    assert local(delta, 1) == {"leaders": set(), "followers": set(), "deletes": {("t2", 0)},
                               "elected_leaders": set()}
