"""Partition state and the builder of PartitionChangeRecords (leader election, ISR, ELR, KIP-455).

Owns :class:`PartitionRegistration` (one partition's replicated state, and
``merge`` — how a PartitionChangeRecord applies, the same rule every replayer
uses), :class:`PartitionChangeBuilder` (Kafka's ``PartitionChangeBuilder``:
given target ISR / replicas / reassignment fields and an election kind, it
completes a reassignment when its targets are in the ISR, tracks eligible
leader replicas (KIP-966), elects a leader and returns the record holding only
the changed fields, or None), and the reassignment arithmetic (KIP-455).

Called by :mod:`kraftlog.controller.replication_control`. Reads no manager
state: who may lead is an injected predicate. Must not mutate anything.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from kraftlog.ids import Uuid
from kraftlog.metadata.records import (
    NO_LEADER,
    LeaderRecoveryState,
    PartitionChangeRecord,
    PartitionRecord,
)


class TopicIdPartition(NamedTuple):
    """A partition named by topic id (Kafka's ``TopicIdPartition``).

    A NamedTuple rather than a dataclass: it is the key of every partition index,
    and tuple hashing is several times cheaper on the replay path."""

    topic_id: Uuid
    partition_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionRegistration:
    """One partition's state as the metadata log defines it.

    Invariants the controller keeps (checked by tests, not here, since replay
    trusts committed records): ``isr`` ⊆ ``replicas``; ``leader`` is -1 or in
    ``isr``; ``adding``/``removing`` ⊆ ``replicas`` and disjoint; epochs only grow.
    """

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    @classmethod
    def from_record(cls, record: PartitionRecord) -> PartitionRegistration:
        return cls(
            replicas=record.replicas,
            isr=record.isr,
            leader=record.leader,
            leader_epoch=record.leader_epoch,
            partition_epoch=record.partition_epoch,
            removing_replicas=record.removing_replicas,
            adding_replicas=record.adding_replicas,
            leader_recovery_state=record.leader_recovery_state,
            elr=record.eligible_leader_replicas,
            last_known_elr=record.last_known_elr,
        )

    def to_record(self, tp: TopicIdPartition) -> PartitionRecord:
        """The full record of this state (for metadata snapshots)."""
        return PartitionRecord(
            topic_id=tp.topic_id,
            partition_id=tp.partition_id,
            replicas=self.replicas,
            isr=self.isr,
            leader=self.leader,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            removing_replicas=self.removing_replicas,
            adding_replicas=self.adding_replicas,
            leader_recovery_state=self.leader_recovery_state,
            eligible_leader_replicas=self.elr,
            last_known_elr=self.last_known_elr,
        )

    def merge(self, change: PartitionChangeRecord) -> PartitionRegistration:
        """Apply a change: set fields replace, the partition epoch always bumps, and a set
        ``leader`` (even the same broker) bumps the leader epoch (Kafka's ``merge``)."""
        leader, leader_epoch = self.leader, self.leader_epoch
        if change.leader is not None:
            leader, leader_epoch = change.leader, self.leader_epoch + 1
        return PartitionRegistration(
            replicas=self.replicas if change.replicas is None else change.replicas,
            isr=self.isr if change.isr is None else change.isr,
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=self.partition_epoch + 1,
            removing_replicas=(
                self.removing_replicas
                if change.removing_replicas is None
                else change.removing_replicas
            ),
            adding_replicas=(
                self.adding_replicas if change.adding_replicas is None else change.adding_replicas
            ),
            leader_recovery_state=(
                self.leader_recovery_state
                if change.leader_recovery_state is None
                else change.leader_recovery_state
            ),
            elr=self.elr
            if change.eligible_leader_replicas is None
            else change.eligible_leader_replicas,
            last_known_elr=(
                self.last_known_elr if change.last_known_elr is None else change.last_known_elr
            ),
        )

    @property
    def preferred_replica(self) -> int:
        return self.replicas[0] if self.replicas else NO_LEADER

    def has_preferred_leader(self) -> bool:
        return self.leader != NO_LEADER and self.leader == self.preferred_replica

    def is_reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    def original_replicas(self) -> tuple[int, ...]:
        """The replicas before the reassignment in progress (replicas minus adding)."""
        adding = set(self.adding_replicas)
        return tuple(r for r in self.replicas if r not in adding)


class Election(enum.Enum):
    """Which leaders an election may pick (Kafka's ``PartitionChangeBuilder.Election``)."""

    PREFERRED = "preferred"
    """Move leadership to the first replica if it is in the ISR and acceptable."""
    ONLINE = "online"
    """Keep an acceptable leader; otherwise the first acceptable ISR (or ELR) member."""
    UNCLEAN = "unclean"
    """Like ONLINE, then any acceptable replica (may lose data; ISR becomes [leader])."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReassignmentReplicas:
    """A reassignment's replica sets (Kafka's ``PartitionReassignmentReplicas``)."""

    replicas: tuple[int, ...]
    removing: tuple[int, ...]
    adding: tuple[int, ...]

    @classmethod
    def of(cls, current: PartitionRegistration, target: Sequence[int]) -> ReassignmentReplicas:
        """Start (or replace) a reassignment towards ``target`` (KIP-455).

        Replicas become target ∪ current, target first so its first replica is the
        preferred leader; removing = current − target; adding = target − current,
        plus replicas an earlier reassignment was still adding (they have not
        caught up yet, so they must still reach the ISR before completion).
        """
        target_set = set(target)
        current_set = set(current.replicas)
        still_adding = set(current.adding_replicas)
        removing = tuple(r for r in current.replicas if r not in target_set)
        adding = tuple(r for r in target if r not in current_set or r in still_adding)
        return cls(replicas=tuple(target) + removing, removing=removing, adding=adding)

    def maybe_complete(self, isr: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """(replicas, isr) once complete: every adding replica in the ISR and some
        non-removing replica in it; None while in progress or when there is none."""
        if not self.removing and not self.adding:
            return None
        removing = set(self.removing)
        new_isr = tuple(r for r in isr if r not in removing)
        if not new_isr or not set(self.adding).issubset(new_isr):
            return None
        return tuple(r for r in self.replicas if r not in removing), new_isr


@dataclass(frozen=True, slots=True, kw_only=True)
class ReassignmentRevert:
    """What cancelling a reassignment leaves (Kafka's ``PartitionReassignmentRevert``):
    the replicas it was adding go, the ones it was removing stay."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    unclean: bool

    @classmethod
    def of(cls, partition: PartitionRegistration) -> ReassignmentRevert:
        adding = set(partition.adding_replicas)
        replicas = tuple(r for r in partition.replicas if r not in adding)
        isr = tuple(r for r in partition.isr if r not in adding)
        if not isr:
            # Every ISR member was being added: only an unclean election can leave
            # the partition with a leader (Kafka does the same).
            return cls(replicas=replicas, isr=replicas, unclean=True)
        return cls(replicas=replicas, isr=isr, unclean=False)


class PartitionChangeBuilder:
    """Builds the PartitionChangeRecord moving one partition to a target state.

    Set the targets, then ``build()``: complete the reassignment if its targets
    are in the ISR; track ELR (KIP-966: when the ISR drops below
    ``min.insync.replicas``, members leaving the ISR become eligible leaders,
    except replicas that shut down uncleanly); elect; bump the leader epoch when
    replicas are removed; and return only the changed fields (None: no change).
    """

    def __init__(
        self,
        partition: PartitionRegistration,
        tp: TopicIdPartition,
        *,
        is_acceptable_leader: Callable[[int], bool],
        min_isr: int,
        elr_enabled: bool,
    ) -> None:
        self._partition = partition
        self._tp = tp
        self._is_acceptable_leader = is_acceptable_leader
        self._min_isr = min_isr
        self._elr_enabled = elr_enabled
        self.election = Election.ONLINE
        self.target_isr: tuple[int, ...] = partition.isr
        self.target_replicas: tuple[int, ...] = partition.replicas
        self.target_removing: tuple[int, ...] = partition.removing_replicas
        self.target_adding: tuple[int, ...] = partition.adding_replicas
        self.target_elr: tuple[int, ...] = partition.elr
        self.target_last_known_elr: tuple[int, ...] = partition.last_known_elr
        self.target_leader_recovery_state = partition.leader_recovery_state
        self.unclean_shutdown_replicas: frozenset[int] = frozenset()

    # -- steps of build(), in Kafka's order ----------------------------------------

    def _complete_reassignment_if_needed(self) -> None:
        reassignment = ReassignmentReplicas(
            replicas=self.target_replicas, removing=self.target_removing, adding=self.target_adding
        )
        completed = reassignment.maybe_complete(self.target_isr)
        if completed is None:
            return
        self.target_replicas, self.target_isr = completed
        self.target_removing = ()
        self.target_adding = ()

    def _maybe_populate_target_elr(self) -> None:
        if not self._elr_enabled:
            return
        if len(self.target_isr) >= self._min_isr:
            self.target_elr = ()
            self.target_last_known_elr = ()
            return
        isr_set = set(self.target_isr)
        # Only replicas can be eligible: a completed reassignment may just have removed some.
        replicas = set(self.target_replicas)
        candidates = [
            r for r in dict.fromkeys(self.target_elr + self._partition.isr) if r in replicas
        ]
        self.target_elr = tuple(
            r for r in candidates if r not in isr_set and r not in self.unclean_shutdown_replicas
        )
        elr_set = set(self.target_elr)
        known = [
            r for r in dict.fromkeys([*candidates, *self.target_last_known_elr]) if r in replicas
        ]
        self.target_last_known_elr = tuple(
            r for r in known if r not in isr_set and r not in elr_set
        )

    def _is_valid_new_leader(self, replica: int) -> bool:
        # An ISR member, or, once the ISR is empty, an eligible leader replica (KIP-966).
        in_isr = replica in self.target_isr
        in_elr = not self.target_isr and replica in self.target_elr
        return (in_isr or in_elr) and self._is_acceptable_leader(replica)

    def _elect(self) -> tuple[int, bool]:
        """(leader, unclean)."""
        current = self._partition.leader
        if self.election is Election.PREFERRED:
            preferred = self.target_replicas[0] if self.target_replicas else NO_LEADER
            if preferred != NO_LEADER and self._is_valid_new_leader(preferred):
                return preferred, False
            if current != NO_LEADER and self._is_valid_new_leader(current):
                return current, False
            for replica in self.target_replicas[1:]:
                if self._is_valid_new_leader(replica):
                    return replica, False
            return NO_LEADER, False
        if current != NO_LEADER and self._is_valid_new_leader(current):
            return current, False
        for replica in self.target_replicas:
            if self._is_valid_new_leader(replica):
                return replica, False
        if self.election is Election.UNCLEAN:
            for replica in self.target_replicas:
                if self._is_acceptable_leader(replica):
                    return replica, True
        return NO_LEADER, False

    def build(self) -> PartitionChangeRecord | None:
        partition = self._partition
        self._complete_reassignment_if_needed()
        self._maybe_populate_target_elr()

        leader_change: int | None = None
        isr_change: tuple[int, ...] | None = None
        recovery_change: LeaderRecoveryState | None = None
        leader, unclean = self._elect()
        if leader != partition.leader:
            if leader in self.target_elr and not self.target_isr:
                # Electing from the ELR makes that replica the whole ISR.
                self.target_isr = (leader,)
                self.target_elr = tuple(r for r in self.target_elr if r != leader)
            leader_change = leader
            if unclean:
                # Forcibly shrink the ISR to the new leader: this may lose data,
                # and the leader must recover before the ISR may grow (KIP-704).
                isr_change = (leader,)
                if partition.leader_recovery_state is not LeaderRecoveryState.RECOVERING:
                    recovery_change = LeaderRecoveryState.RECOVERING
        # Removing replicas bumps the leader epoch so that the removed replicas'
        # fetches are fenced (Kafka's triggerLeaderEpochBumpForReplicaReassignmentIfNeeded).
        if leader_change is None and not set(partition.replicas).issubset(self.target_replicas):
            leader_change = partition.leader

        elr_change: tuple[int, ...] | None = None
        last_known_change: tuple[int, ...] | None = None
        if isr_change is not None or not self._elr_enabled:
            self.target_elr = ()
            self.target_last_known_elr = ()
        if self.target_elr != partition.elr:
            elr_change = self.target_elr
        if self.target_last_known_elr != partition.last_known_elr:
            last_known_change = self.target_last_known_elr

        # Without ELR the ISR never becomes empty: its last member stays (leaderless).
        if (
            isr_change is None
            and (self.target_isr or self._elr_enabled)
            and self.target_isr != partition.isr
        ):
            isr_change = self.target_isr

        replicas_change = (
            self.target_replicas
            if self.target_replicas and self.target_replicas != partition.replicas
            else None
        )
        removing_change = (
            self.target_removing if self.target_removing != partition.removing_replicas else None
        )
        adding_change = (
            self.target_adding if self.target_adding != partition.adding_replicas else None
        )
        if (
            recovery_change is None
            and self.target_leader_recovery_state is not partition.leader_recovery_state
        ):
            recovery_change = self.target_leader_recovery_state

        record = PartitionChangeRecord(
            topic_id=self._tp.topic_id,
            partition_id=self._tp.partition_id,
            leader=leader_change,
            isr=isr_change,
            replicas=replicas_change,
            removing_replicas=removing_change,
            adding_replicas=adding_change,
            leader_recovery_state=recovery_change,
            eligible_leader_replicas=elr_change,
            last_known_elr=last_known_change,
        )
        if is_no_op(record):
            return None
        return record


def is_no_op(record: PartitionChangeRecord) -> bool:
    """Whether a change sets no field (Kafka's ``changeRecordIsNoOp``)."""
    return (
        record.leader is None
        and record.isr is None
        and record.replicas is None
        and record.removing_replicas is None
        and record.adding_replicas is None
        and record.leader_recovery_state is None
        and record.eligible_leader_replicas is None
        and record.last_known_elr is None
    )
