"""The broker's reconciler: metadata deltas in, local replicas converged (pure core).

Owns the decision of what this broker does with its replicas when the metadata
log moves (KIP-500: nothing is pushed, the broker converges on the image, like
a Kubernetes operator on its spec). On every delta it takes
``TopicsDelta.local_changes(broker_id)`` and:

* creates the replica (log + :class:`~kraftlog.broker.partition.Partition`) of a
  partition newly assigned here: NonExistentReplica -> NewReplica -> OnlineReplica;
* makes it leader (the fetcher for it stops) or follower (the fetcher restarts
  from the new leader when the leader or leader epoch changed); a stale delta
  (leader or partition epoch below ours) is ignored by the partition itself,
  the leader epoch fencing Kafka's ReplicaManager applies to a LeaderAndIsr request;
* deletes a replica the metadata removed (topic deleted or reassigned away):
  OnlineReplica -> OfflineReplica -> ReplicaDeletionStarted -> ReplicaDeletionSuccessful
  -> NonExistentReplica, or ReplicaDeletionIneligible when the log cannot be
  removed (retried by the next full reconcile). Only the metadata decides: a
  replica still assigned is never deleted.

:meth:`Reconciler.reconcile_all` compares the whole image with local state
(level-triggered) and converges the same way.

Cost (issue 16): :meth:`Reconciler.apply_delta` does work proportional to what the
delta changed for this broker (``local_changes``), never to the partitions hosted. The
level-triggered safety net that retries what a delta could not do (a replica whose log
could not be created or deleted) is :meth:`Reconciler.reconcile_step`: one full pass
spread over many small steps, each converging at most ``max_partitions`` replicas against
the *current* image, so a broker with 10,000 replicas never stops its event loop for a
whole pass; the driver runs a pass rarely (``RECONCILE_PASS_INTERVAL_S`` in the process).

A delta may itself be large (10 CreateTopics of 100 partitions committed together, or a
broker fenced with 3,333 leaderships): with ``max_partitions`` :meth:`Reconciler.apply_delta`
converges only that many of its replicas at once and queues the rest, in order;
:meth:`Reconciler.drain_pending` converges the next slice, each against the *current* image
(so a replica changed again meanwhile converges once, on its latest state). The driver
drains between event-loop turns, so a broker creating or moving thousands of replicas keeps
answering health checks and fetches, and its followers start fetching the first replicas
while the last are still being created (else their leaders, as busy, would find them out of
sync after ``replica.lag.time.max.ms`` and shrink thousands of ISRs at once).

Callers: the broker process's metadata publisher (:mod:`kraftlog.server.broker_server`),
which then starts and stops replica fetchers as :class:`ReconcileResult` says.
Log creation and deletion are injected (:class:`ReplicaStore`), so this module does
no I/O of its own. Must not: import asyncio, grpc, protobuf or a clock; talk to the
network. Single-threaded: one owner calls it.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from kraftlog.broker import partition as partition_mod
from kraftlog.broker import replica_manager as rm
from kraftlog.ids import TopicPartition, Uuid
from kraftlog.metadata import delta as dl
from kraftlog.metadata import image as im
from kraftlog.metadata.records import NO_LEADER

logger = logging.getLogger(__name__)

ReplicaState = rm.ReplicaState


class ReplicaStore(Protocol):
    """Where replicas' logs live (the process implements it over the log directories)."""

    def open_partition(self, info: im.PartitionInfo) -> partition_mod.Partition:
        """Open (creating or recovering) the log of ``info`` and wrap it in a Partition."""
        ...

    def delete_partition(self, partition: partition_mod.Partition) -> None:
        """Close and remove the replica's log directory; raises OSError when it cannot."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchTarget:
    """A followed partition: fetch it from ``leader_id`` at ``leader_epoch``."""

    topic_partition: TopicPartition
    topic_id: Uuid
    leader_id: int
    leader_epoch: int


@dataclass(slots=True, kw_only=True)
class ReconcileResult:
    """What the driver must do to the replica fetchers after one reconcile."""

    start_fetching: list[FetchTarget] = field(default_factory=list)
    """(Re)start these, replacing any current fetch of the same partition."""
    stop_fetching: list[TopicPartition] = field(default_factory=list)
    created: list[TopicPartition] = field(default_factory=list)
    deleted: list[TopicPartition] = field(default_factory=list)
    became_leader: list[TopicPartition] = field(default_factory=list)
    became_follower: list[TopicPartition] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.start_fetching or self.stop_fetching or self.created or self.deleted
                    or self.became_leader or self.became_follower)


def _tp(info: im.PartitionInfo) -> TopicPartition:
    return TopicPartition(topic=info.topic_name, partition=info.partition_id)


class Reconciler:
    """Converges broker ``broker_id``'s replicas on the metadata image. See the module docstring."""

    def __init__(self, *, broker_id: int, manager: rm.ReplicaManager, store: ReplicaStore) -> None:
        self.broker_id = broker_id
        self.manager = manager
        self.store = store
        self.image: im.MetadataImage = im.EMPTY
        # The full pass in progress (reconcile_step): what is left of it, in order.
        self._pass: list[tuple[Uuid, int]] = []
        self._pass_local: list[tuple[TopicPartition, Uuid]] = []
        self.passes_completed = 0
        # Delta work not done yet (apply_delta with max_partitions), in delta order: a
        # deletion carries the replica's info as the delta saw it; an assignment only its
        # (topic id, partition), looked up in the current image when its turn comes.
        self._pending: collections.deque[tuple[im.PartitionInfo | None, tuple[Uuid, int]]] = \
            collections.deque()
        self._pending_assigned: set[tuple[Uuid, int]] = set()

    # -- entry points ----------------------------------------------------------------------------

    def apply_delta(self, delta: dl.MetadataDelta, image: im.MetadataImage, *,
                    now_ms: int, max_partitions: int | None = None) -> ReconcileResult:
        """Converge on what ``delta`` changed for this broker (the loader's publication).

        With ``max_partitions``: at most that many replicas now (work queued by earlier
        deltas first); the rest waits for :meth:`drain_pending` (see :attr:`pending`)."""
        self.image = image
        topics = delta.topics_delta
        if max_partitions is None and not self._pending:
            if topics is None:
                return ReconcileResult()
            changes = topics.local_changes(self.broker_id)
            return self._apply(deletes=changes.deletes,
                               assigned=changes.leaders + changes.followers, now_ms=now_ms)
        if topics is not None:
            changes = topics.local_changes(self.broker_id)
            for info in changes.deletes:
                self._pending.append((info, (info.topic_id, info.partition_id)))
            for info in (*changes.leaders, *changes.followers):
                key = (info.topic_id, info.partition_id)
                if key not in self._pending_assigned:  # queued already: converges on the latest
                    self._pending_assigned.add(key)
                    self._pending.append((None, key))
        return self.drain_pending(image, max_partitions=max_partitions, now_ms=now_ms)

    @property
    def pending(self) -> int:
        """Replicas queued by :meth:`apply_delta` and not converged yet."""
        return len(self._pending)

    def drain_pending(self, image: im.MetadataImage, *, max_partitions: int | None,
                      now_ms: int) -> ReconcileResult:
        """Converge up to ``max_partitions`` (None: all) queued replicas, oldest first,
        against ``image``. A queued deletion is skipped when ``image`` assigns the replica
        here again (same topic id): it is kept, as a full pass would keep it."""
        self.image = image
        result = ReconcileResult()
        budget = len(self._pending) if max_partitions is None else max_partitions
        while self._pending and budget > 0:
            deleted, key = self._pending.popleft()
            budget -= 1
            topic = image.topics.get_topic(key[0])
            current = topic.partition_info(key[1]) if topic is not None else None
            if deleted is not None:
                if current is None or self.broker_id not in current.registration.replicas:
                    self._delete(deleted, result)
                continue
            self._pending_assigned.discard(key)
            if current is not None:
                self._converge(current, result, now_ms)
        return result

    def reconcile_all(self, image: im.MetadataImage, *, now_ms: int) -> ReconcileResult:
        """Level-triggered pass: every replica the image assigns here, and every local one it
        no longer assigns (or whose topic id changed: a deleted and re-created topic)."""
        self.image = image
        assigned = list(image.topics.partitions_on_broker(self.broker_id))
        wanted = {(_tp(info), info.topic_id) for info in assigned}
        deletes: list[im.PartitionInfo] = []
        for tp, partition in list(self.manager.partitions.items()):
            if (tp, partition.topic_id) in wanted:
                continue
            state = self.manager.replica_state(tp)
            if state is ReplicaState.REPLICA_DELETION_STARTED:
                continue
            deletes.append(im.PartitionInfo(
                topic_id=partition.topic_id, topic_name=tp.topic, partition_id=tp.partition,
                registration=im.PartitionRegistration(replicas=partition.replicas, isr=(),
                                                      leader=partition.leader_id)))
        return self._apply(deletes=tuple(deletes), assigned=tuple(assigned), now_ms=now_ms)

    def reconcile_step(self, image: im.MetadataImage, *, max_partitions: int,
                       now_ms: int) -> tuple[ReconcileResult, bool]:
        """One step of a full pass (:meth:`reconcile_all` cut into pieces): converges at most
        ``max_partitions`` replicas, each against ``image`` (the current one, not the one the
        pass started with); returns the result and whether the pass is now complete.

        A pass lists what the image assigns here and what is hosted here when it starts
        (O(partitions) once per pass), then walks the lists: an assigned replica is converged
        if the image still assigns it; a hosted one the image no longer assigns (or whose
        topic id changed) is deleted."""
        self.image = image
        if not self._pass and not self._pass_local:
            self._pass = [(info.topic_id, info.partition_id)
                          for info in image.topics.partitions_on_broker(self.broker_id)]
            self._pass.reverse()  # popped from the end: image order
            self._pass_local = [(tp, p.topic_id) for tp, p in self.manager.partitions.items()]
            self._pass_local.reverse()
        budget = max(1, max_partitions)
        assigned: list[im.PartitionInfo] = []
        while self._pass and budget > 0:
            topic_id, partition_id = self._pass.pop()
            budget -= 1
            topic = image.topics.get_topic(topic_id)
            info = topic.partition_info(partition_id) if topic is not None else None
            if info is not None:
                assigned.append(info)
        deletes: list[im.PartitionInfo] = []
        while not self._pass and self._pass_local and budget > 0:
            tp, topic_id = self._pass_local.pop()
            budget -= 1
            partition = self.manager.get_partition(tp)
            if partition is None or partition.topic_id != topic_id:
                continue
            topic = image.topics.get_topic(topic_id)
            registration = topic.partition(tp.partition) if topic is not None else None
            if (registration is not None and topic is not None and topic.name == tp.topic
                    and self.broker_id in registration.replicas):
                continue
            if self.manager.replica_state(tp) is ReplicaState.REPLICA_DELETION_STARTED:
                continue
            deletes.append(im.PartitionInfo(
                topic_id=topic_id, topic_name=tp.topic, partition_id=tp.partition,
                registration=im.PartitionRegistration(replicas=partition.replicas, isr=(),
                                                      leader=partition.leader_id)))
        result = self._apply(deletes=deletes, assigned=assigned, now_ms=now_ms)
        done = not self._pass and not self._pass_local
        if done:
            self.passes_completed += 1
        return result, done

    # -- convergence -----------------------------------------------------------------------------

    def _apply(self, *, deletes: Iterable[im.PartitionInfo], assigned: Iterable[im.PartitionInfo],
               now_ms: int) -> ReconcileResult:
        result = ReconcileResult()
        for info in deletes:
            self._delete(info, result)
        for info in assigned:
            self._converge(info, result, now_ms)
        return result

    def _delete(self, info: im.PartitionInfo, result: ReconcileResult) -> None:
        tp = _tp(info)
        partition = self.manager.get_partition(tp)
        if partition is None or partition.topic_id != info.topic_id:
            return
        manager = self.manager
        result.stop_fetching.append(tp)
        state = manager.replica_state(tp)
        if state is not ReplicaState.OFFLINE_REPLICA:
            if state is ReplicaState.REPLICA_DELETION_STARTED:
                manager.transition_replica(tp, ReplicaState.REPLICA_DELETION_INELIGIBLE)
            manager.transition_replica(tp, ReplicaState.OFFLINE_REPLICA)
        manager.transition_replica(tp, ReplicaState.REPLICA_DELETION_STARTED)
        try:
            self.store.delete_partition(partition)
        except OSError as exc:
            logger.error("broker=%d partition=%s event=replica_deletion_failed error=%r",
                         self.broker_id, tp, str(exc))
            manager.transition_replica(tp, ReplicaState.REPLICA_DELETION_INELIGIBLE)
            return
        manager.transition_replica(tp, ReplicaState.REPLICA_DELETION_SUCCESSFUL)
        manager.remove_partition(tp)
        result.deleted.append(tp)

    def _converge(self, info: im.PartitionInfo, result: ReconcileResult, now_ms: int) -> None:
        try:
            self._converge_replica(info, result, now_ms)
        except OSError as exc:
            # A failing disk under this replica: creating its log, or writing its leader
            # epoch on a role change. The creation is retried by the next full reconcile
            # (in a directory still online); a hosted replica's whole directory goes offline.
            tp = _tp(info)
            if self.manager.get_partition(tp) is None:
                logger.error("broker=%d partition=%s event=replica_creation_failed error=%r",
                             self.broker_id, tp, str(exc))
                return
            result.stop_fetching.extend(self.manager.handle_storage_error(tp, exc))

    def _converge_replica(self, info: im.PartitionInfo, result: ReconcileResult,
                          now_ms: int) -> None:
        tp = _tp(info)
        registration = info.registration
        if self.broker_id not in registration.replicas:
            return
        partition = self.manager.get_partition(tp)
        if partition is not None and partition.topic_id != info.topic_id:
            # The topic was deleted and re-created under the same name: the old replica goes.
            self._delete(im.PartitionInfo(
                topic_id=partition.topic_id, topic_name=tp.topic, partition_id=tp.partition,
                registration=registration), result)
            partition = self.manager.get_partition(tp)
            if partition is not None:
                return  # deletion failed; retried by the next full reconcile
        if partition is None:
            partition = self.store.open_partition(info)
            self.manager.add_partition(partition)
            result.created.append(tp)
        if self.manager.replica_state(tp) is ReplicaState.NEW_REPLICA:
            self.manager.transition_replica(tp, ReplicaState.ONLINE_REPLICA)
        if self.manager.replica_state(tp) is not ReplicaState.ONLINE_REPLICA:
            return
        if registration.leader == self.broker_id:
            was_leader = partition.is_leader
            self.manager.make_leader(tp, leader_epoch=registration.leader_epoch,
                                     partition_epoch=registration.partition_epoch,
                                     replicas=registration.replicas, isr=registration.isr,
                                     now_ms=now_ms)
            if partition.is_leader and not was_leader:
                result.stop_fetching.append(tp)
                result.became_leader.append(tp)
            return
        if (not partition.is_leader and partition.leader_id == registration.leader
                and partition.leader_epoch == registration.leader_epoch
                and partition.partition_epoch == registration.partition_epoch
                and partition.replicas == registration.replicas):
            return  # already converged (a periodic full reconcile)
        was_leader = partition.is_leader
        restart = self.manager.make_follower(tp, leader_id=registration.leader,
                                             leader_epoch=registration.leader_epoch,
                                             partition_epoch=registration.partition_epoch,
                                             replicas=registration.replicas)
        if was_leader and not partition.is_leader:
            result.became_follower.append(tp)
        if partition.leader_id == NO_LEADER:
            result.stop_fetching.append(tp)
        elif restart:
            result.start_fetching.append(FetchTarget(
                topic_partition=tp, topic_id=info.topic_id, leader_id=partition.leader_id,
                leader_epoch=partition.leader_epoch))
            if not was_leader:
                result.became_follower.append(tp)
