"""The broker's reconciler (pure): metadata deltas in, local replicas and fetch changes out.

Real partition logs in tmp dirs; metadata built by replaying records into deltas, as the
MetadataLoader does. No clock, no network.
"""

from __future__ import annotations

import pathlib
import shutil

import pytest

from kraftlog.broker import partition as partition_mod
from kraftlog.broker import reconciler as rc
from kraftlog.broker import replica_manager as rm
from kraftlog.ids import TopicPartition, Uuid
from kraftlog.metadata import delta as dl
from kraftlog.metadata import image as im
from kraftlog.metadata import records as r
from tests.broker.harness import Metadata, open_partition

BROKER = 2
TOPIC_ID = Uuid(bytes(range(1, 17)))
OTHER_ID = Uuid(bytes(range(2, 18)))
TP = TopicPartition(topic="t", partition=0)
NOW = 10_000_000


class Store:
    """Logs under ``root``; deletion can be made to fail."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.fail_deletes = False
        self.opened: list[TopicPartition] = []

    def open_partition(self, info: im.PartitionInfo) -> partition_mod.Partition:
        tp = TopicPartition(topic=info.topic_name, partition=info.partition_id)
        self.opened.append(tp)
        opened = open_partition(self.root / tp.dir_name, BROKER, topic=info.topic_name,
                                index=info.partition_id)
        opened.topic_id = info.topic_id  # the harness opens every log under one topic id
        return opened

    def delete_partition(self, partition: partition_mod.Partition) -> None:
        if self.fail_deletes:
            raise OSError("disk says no")
        partition.log.close()
        shutil.rmtree(partition.log.directory)


@pytest.fixture
def setup(tmp_path: pathlib.Path) -> tuple[rc.Reconciler, Store, Metadata]:
    store = Store(tmp_path)
    manager = rm.ReplicaManager(broker_id=BROKER)
    return rc.Reconciler(broker_id=BROKER, manager=manager, store=store), store, Metadata()


def create(metadata: Metadata, *, leader: int, topic_id: Uuid = TOPIC_ID,
           replicas: tuple[int, ...] = (1, 2, 3)) -> tuple[dl.MetadataDelta, im.MetadataImage]:
    return metadata.commit(r.TopicRecord(name="t", topic_id=topic_id),
                           r.PartitionRecord(topic_id=topic_id, partition_id=0,
                                             replicas=replicas, isr=replicas, leader=leader))


def test_new_follower_replica_is_created_online_and_fetches_from_the_leader(setup: tuple[
        rc.Reconciler, Store, Metadata]) -> None:
    reconciler, _store, metadata = setup
    delta, image = create(metadata, leader=1)
    result = reconciler.apply_delta(delta, image, now_ms=NOW)
    assert result.created == [TP]
    assert reconciler.manager.replica_state(TP) is rm.ReplicaState.ONLINE_REPLICA
    assert result.start_fetching == [rc.FetchTarget(topic_partition=TP, topic_id=TOPIC_ID,
                                                    leader_id=1, leader_epoch=0)]
    partition = reconciler.manager.get_partition(TP)
    assert partition is not None and partition.leader_id == 1 and not partition.is_leader


def test_election_of_this_broker_makes_it_leader_and_stops_fetching(setup: tuple[
        rc.Reconciler, Store, Metadata]) -> None:
    reconciler, _store, metadata = setup
    reconciler.apply_delta(*create(metadata, leader=1), now_ms=NOW)
    delta, image = metadata.commit(r.PartitionChangeRecord(topic_id=TOPIC_ID, partition_id=0,
                                                           leader=BROKER, isr=(2, 3)))
    result = reconciler.apply_delta(delta, image, now_ms=NOW)
    assert result.stop_fetching == [TP] and result.became_leader == [TP]
    assert result.start_fetching == []
    partition = reconciler.manager.get_partition(TP)
    assert partition is not None and partition.is_leader and partition.leader_epoch == 1
    assert partition.isr == frozenset({2, 3})


def test_a_new_leader_elsewhere_restarts_the_fetch_at_the_new_epoch(setup: tuple[
        rc.Reconciler, Store, Metadata]) -> None:
    reconciler, _store, metadata = setup
    reconciler.apply_delta(*create(metadata, leader=1), now_ms=NOW)
    delta, image = metadata.commit(r.PartitionChangeRecord(topic_id=TOPIC_ID, partition_id=0,
                                                           leader=3))
    result = reconciler.apply_delta(delta, image, now_ms=NOW)
    assert [(t.leader_id, t.leader_epoch) for t in result.start_fetching] == [(3, 1)]
    # An ISR-only change keeps the leader epoch: the fetch goes on undisturbed.
    delta, image = metadata.commit(r.PartitionChangeRecord(topic_id=TOPIC_ID, partition_id=0,
                                                           isr=(2, 3)))
    assert reconciler.apply_delta(delta, image, now_ms=NOW).start_fetching == []


def test_stale_leader_epoch_is_ignored(setup: tuple[rc.Reconciler, Store, Metadata]) -> None:
    reconciler, _store, metadata = setup
    old_delta, old_image = create(metadata, leader=1)
    reconciler.apply_delta(old_delta, old_image, now_ms=NOW)
    delta, image = metadata.commit(r.PartitionChangeRecord(topic_id=TOPIC_ID, partition_id=0,
                                                           leader=3))
    reconciler.apply_delta(delta, image, now_ms=NOW)
    # The first delta again (epoch 0 < 1): nothing moves backwards.
    result = reconciler.apply_delta(old_delta, old_image, now_ms=NOW)
    partition = reconciler.manager.get_partition(TP)
    assert partition is not None and partition.leader_id == 3 and partition.leader_epoch == 1
    assert result.start_fetching == []


def test_topic_deletion_deletes_the_replica_through_the_deletion_states(setup: tuple[
        rc.Reconciler, Store, Metadata], tmp_path: pathlib.Path) -> None:
    reconciler, _store, metadata = setup
    reconciler.apply_delta(*create(metadata, leader=1), now_ms=NOW)
    assert (tmp_path / TP.dir_name).is_dir()
    delta, image = metadata.commit(r.RemoveTopicRecord(topic_id=TOPIC_ID))
    result = reconciler.apply_delta(delta, image, now_ms=NOW)
    assert result.deleted == [TP] and result.stop_fetching == [TP]
    assert reconciler.manager.get_partition(TP) is None
    assert reconciler.manager.replica_state(TP) is rm.ReplicaState.NON_EXISTENT_REPLICA
    assert not (tmp_path / TP.dir_name).exists()


def test_reassignment_away_deletes_only_once_metadata_drops_the_replica(setup: tuple[
        rc.Reconciler, Store, Metadata]) -> None:
    reconciler, _store, metadata = setup
    reconciler.apply_delta(*create(metadata, leader=1), now_ms=NOW)
    # Still assigned (being removed, but in replicas): kept.
    delta, image = metadata.commit(r.PartitionChangeRecord(
        topic_id=TOPIC_ID, partition_id=0, replicas=(1, 2, 3, 4), adding_replicas=(4,),
        removing_replicas=(2,)))
    assert reconciler.apply_delta(delta, image, now_ms=NOW).deleted == []
    assert reconciler.manager.get_partition(TP) is not None
    delta, image = metadata.commit(r.PartitionChangeRecord(
        topic_id=TOPIC_ID, partition_id=0, replicas=(1, 3, 4), isr=(1, 3, 4),
        adding_replicas=(), removing_replicas=()))
    assert reconciler.apply_delta(delta, image, now_ms=NOW).deleted == [TP]


def test_failed_deletion_is_ineligible_then_retried_by_a_full_reconcile(setup: tuple[
        rc.Reconciler, Store, Metadata]) -> None:
    reconciler, store, metadata = setup
    reconciler.apply_delta(*create(metadata, leader=1), now_ms=NOW)
    store.fail_deletes = True
    delta, image = metadata.commit(r.RemoveTopicRecord(topic_id=TOPIC_ID))
    assert reconciler.apply_delta(delta, image, now_ms=NOW).deleted == []
    assert reconciler.manager.replica_state(TP) is rm.ReplicaState.REPLICA_DELETION_INELIGIBLE
    store.fail_deletes = False
    assert reconciler.reconcile_all(image, now_ms=NOW).deleted == [TP]
    assert reconciler.manager.get_partition(TP) is None


def test_full_reconcile_is_idempotent_and_replaces_a_recreated_topic(setup: tuple[
        rc.Reconciler, Store, Metadata]) -> None:
    reconciler, store, metadata = setup
    _delta, image = create(metadata, leader=BROKER)
    first = reconciler.reconcile_all(image, now_ms=NOW)
    assert first.created == [TP] and first.became_leader == [TP]
    assert reconciler.reconcile_all(image, now_ms=NOW).empty
    # Deleted and re-created under the same name while we were not looking.
    metadata.commit(r.RemoveTopicRecord(topic_id=TOPIC_ID))
    _delta, image = create(metadata, leader=1, topic_id=OTHER_ID)
    result = reconciler.reconcile_all(image, now_ms=NOW)
    assert result.deleted == [TP] and result.created == [TP]
    partition = reconciler.manager.get_partition(TP)
    assert partition is not None and partition.topic_id == OTHER_ID
    assert store.opened == [TP, TP]


def test_replicas_of_other_brokers_are_not_created_here(setup: tuple[
        rc.Reconciler, Store, Metadata]) -> None:
    reconciler, store, metadata = setup
    delta, image = create(metadata, leader=1, replicas=(1, 3))
    assert reconciler.apply_delta(delta, image, now_ms=NOW).empty
    assert store.opened == []


# ---------------------------------------------------------------------------- cost (issue 16)

MANY = 40


def many_partitions(reconciler: rc.Reconciler, metadata: Metadata) -> im.MetadataImage:
    """Topic "t" with MANY partitions on broker BROKER, leading the even ones."""
    delta, image = metadata.commit(r.TopicRecord(name="t", topic_id=TOPIC_ID), *(
        r.PartitionRecord(topic_id=TOPIC_ID, partition_id=i, replicas=(1, 2, 3), isr=(1, 2, 3),
                          leader=BROKER if i % 2 == 0 else 1) for i in range(MANY)))
    reconciler.apply_delta(delta, image, now_ms=NOW)
    assert len(reconciler.manager.partitions) == MANY
    return image


class RoleCalls:
    """Counts the replica manager's role changes (the reconciler's per-partition work)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, manager: rm.ReplicaManager) -> None:
        self.calls: list[TopicPartition] = []
        for name in ("make_leader", "make_follower"):
            original = getattr(manager, name)

            def counted(tp: TopicPartition, *args: object, _original: object = original,
                        **kwargs: object) -> object:
                self.calls.append(tp)
                return _original(tp, *args, **kwargs)  # type: ignore[operator]

            monkeypatch.setattr(manager, name, counted)


def test_a_delta_touching_one_partition_does_work_for_that_partition_only(
        setup: tuple[rc.Reconciler, Store, Metadata], monkeypatch: pytest.MonkeyPatch) -> None:
    reconciler, store, metadata = setup
    many_partitions(reconciler, metadata)
    calls = RoleCalls(monkeypatch, reconciler.manager)
    opened = len(store.opened)
    delta, image = metadata.commit(r.PartitionChangeRecord(topic_id=TOPIC_ID, partition_id=7,
                                                           leader=BROKER))
    result = reconciler.apply_delta(delta, image, now_ms=NOW)
    assert calls.calls == [TopicPartition(topic="t", partition=7)]
    assert result.became_leader == [TopicPartition(topic="t", partition=7)]
    assert len(store.opened) == opened


def test_the_full_pass_is_spread_over_steps_of_a_bounded_size(
        setup: tuple[rc.Reconciler, Store, Metadata], monkeypatch: pytest.MonkeyPatch) -> None:
    reconciler, _store, metadata = setup
    image = many_partitions(reconciler, metadata)
    calls = RoleCalls(monkeypatch, reconciler.manager)
    steps = 0
    done = False
    while not done:
        before = len(calls.calls)
        result, done = reconciler.reconcile_step(image, max_partitions=7, now_ms=NOW)
        steps += 1
        assert len(calls.calls) - before <= 7
        assert result.empty  # everything already converged
        assert steps <= 2 * MANY
    # Converged followers are skipped before any call; converged leaders are a no-op call.
    assert len(calls.calls) == MANY // 2 and reconciler.passes_completed == 1
    # The assigned replicas (MANY) and then the hosted ones (MANY), 7 at a time.
    assert steps == -(-2 * MANY // 7)


def test_a_spread_pass_still_deletes_what_the_image_no_longer_assigns_and_retries_creations(
        setup: tuple[rc.Reconciler, Store, Metadata]) -> None:
    reconciler, store, metadata = setup
    image = many_partitions(reconciler, metadata)
    gone = TopicPartition(topic="t", partition=3)
    partition = reconciler.manager.get_partition(gone)
    assert partition is not None
    # A replica whose creation failed earlier: the pass creates it.
    missing = TopicPartition(topic="t", partition=5)
    reconciler.manager.transition_replica(missing, rm.ReplicaState.OFFLINE_REPLICA)
    reconciler.manager.transition_replica(missing, rm.ReplicaState.REPLICA_DELETION_STARTED)
    reconciler.manager.transition_replica(missing, rm.ReplicaState.REPLICA_DELETION_SUCCESSFUL)
    reconciler.manager.remove_partition(missing)
    # The image moves partition 3 away from this broker (another image than the pass began with).
    _delta, moved = metadata.commit(r.PartitionChangeRecord(topic_id=TOPIC_ID, partition_id=3,
                                                            replicas=(1, 3), isr=(1, 3), leader=1))
    created: list[TopicPartition] = []
    deleted: list[TopicPartition] = []
    done = False
    first = True
    while not done:
        result, done = reconciler.reconcile_step(image if first else moved, max_partitions=5,
                                                 now_ms=NOW)
        first = False
        created += result.created
        deleted += result.deleted
    assert created == [missing] and deleted == [gone]
    assert reconciler.manager.get_partition(gone) is None
    assert store.opened.count(missing) == 2


def test_a_large_delta_converges_in_slices_in_order_each_on_the_latest_state(
        setup: tuple[rc.Reconciler, Store, Metadata], monkeypatch: pytest.MonkeyPatch) -> None:
    reconciler, store, metadata = setup
    delta, image = metadata.commit(r.TopicRecord(name="t", topic_id=TOPIC_ID), *(
        r.PartitionRecord(topic_id=TOPIC_ID, partition_id=i, replicas=(1, 2, 3), isr=(1, 2, 3),
                          leader=1) for i in range(MANY)))
    first = reconciler.apply_delta(delta, image, now_ms=NOW, max_partitions=7)
    assert [tp.partition for tp in first.created] == list(range(7))
    assert reconciler.pending == MANY - 7 and len(reconciler.manager.partitions) == 7
    # Partition 20 changes leader before its turn: it converges once, on the new leader.
    delta, image = metadata.commit(r.PartitionChangeRecord(topic_id=TOPIC_ID, partition_id=20,
                                                           leader=BROKER))
    second = reconciler.apply_delta(delta, image, now_ms=NOW, max_partitions=7)
    assert [tp.partition for tp in second.created] == list(range(7, 14))
    assert reconciler.pending == MANY - 14
    calls = RoleCalls(monkeypatch, reconciler.manager)
    created = [tp.partition for tp in first.created + second.created]
    became_leader = []
    while reconciler.pending:
        result = reconciler.drain_pending(image, max_partitions=7, now_ms=NOW)
        assert len(result.created) <= 7
        created += [tp.partition for tp in result.created]
        became_leader += result.became_leader
    assert created == list(range(MANY)) and len(store.opened) == MANY
    assert became_leader == [TopicPartition(topic="t", partition=20)]
    assert calls.calls.count(TopicPartition(topic="t", partition=20)) == 1


def test_a_queued_deletion_keeps_a_replica_assigned_here_again(
        setup: tuple[rc.Reconciler, Store, Metadata]) -> None:
    reconciler, _store, metadata = setup
    reconciler.apply_delta(*create(metadata, leader=1), now_ms=NOW)
    filler = [r.PartitionRecord(topic_id=OTHER_ID, partition_id=i, replicas=(1, 2, 3),
                                isr=(1, 2, 3), leader=1) for i in range(5)]
    delta, image = metadata.commit(r.TopicRecord(name="u", topic_id=OTHER_ID), *filler)
    reconciler.apply_delta(delta, image, now_ms=NOW, max_partitions=1)
    # Moved away (queued behind the filler), then back before the deletion's turn.
    away = metadata.commit(r.PartitionChangeRecord(topic_id=TOPIC_ID, partition_id=0,
                                                   replicas=(1, 3), isr=(1, 3)))
    reconciler.apply_delta(*away, now_ms=NOW, max_partitions=1)
    back = metadata.commit(r.PartitionChangeRecord(topic_id=TOPIC_ID, partition_id=0,
                                                   replicas=(1, 2, 3), isr=(1, 3)))
    reconciler.apply_delta(*back, now_ms=NOW, max_partitions=1)
    deleted = []
    while reconciler.pending:
        deleted += reconciler.drain_pending(back[1], max_partitions=1, now_ms=NOW).deleted
    assert deleted == [] and reconciler.manager.get_partition(TP) is not None
    # Without the way back, the queued deletion happens.
    reconciler.apply_delta(*metadata.commit(r.PartitionChangeRecord(
        topic_id=TOPIC_ID, partition_id=0, replicas=(1, 3), isr=(1, 3))), now_ms=NOW,
        max_partitions=0)
    result = reconciler.drain_pending(metadata.image, max_partitions=None, now_ms=NOW)
    assert result.deleted == [TP]
