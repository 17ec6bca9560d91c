"""One object per raft role, each holding only that role's fields (KIP-595, KIP-996).

These are the values behind :class:`~.quorum_state.QuorumState`: ``UnattachedState``,
``VotedState``, ``ProspectiveState``, ``CandidateState``, ``LeaderState``,
``FollowerState`` and ``ResignedState``. Each knows its epoch, what it would
persist (:meth:`EpochState.election_state`) and its own timers as absolute
deadlines in milliseconds of the injected clock.

Voted is kept as its own role (Kafka 3.x naming) rather than folded into
Unattached as Kafka 4 does: "I granted my vote in this epoch" is the one fact
that must never be lost, and a separate type makes every place that could drop
it visible in the transition table.

Only :class:`~.quorum_state.QuorumState` creates these; the raft client reads and
updates the per-role fields (tallies, replica fetch state, deadlines). Nothing
here does I/O, reads a clock or draws randomness.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

from kraftlog import ids as uuid
from kraftlog.ids import Epoch, NodeId
from kraftlog.raft.messages import NO_DIRECTORY, OffsetAndEpoch
from kraftlog.raft.quorum_state_store import ElectionState


class Role(enum.Enum):
    UNATTACHED = "Unattached"
    VOTED = "Voted"
    PROSPECTIVE = "Prospective"
    CANDIDATE = "Candidate"
    LEADER = "Leader"
    FOLLOWER = "Follower"
    RESIGNED = "Resigned"


def majority_size(voter_count: int) -> int:
    return voter_count // 2 + 1


class EpochState:
    """Base of every role: the epoch and how it is persisted."""

    __slots__ = ("epoch",)
    role: Role

    def __init__(self, epoch: Epoch) -> None:
        self.epoch = epoch

    def election_state(self, voters: frozenset[int]) -> ElectionState:
        return ElectionState(epoch=self.epoch, voters=voters)

    def leader_id(self) -> NodeId | None:
        return None

    def describe(self) -> str:
        return f"{self.role.value}(epoch={self.epoch})"


class UnattachedState(EpochState):
    """An epoch with no known leader and no vote granted.

    ``election_deadline_ms`` is ``None`` for observers, who never start elections.
    """

    __slots__ = ("election_deadline_ms",)
    role = Role.UNATTACHED

    def __init__(self, epoch: Epoch, *, election_deadline_ms: int | None) -> None:
        super().__init__(epoch)
        self.election_deadline_ms = election_deadline_ms


class VotedState(EpochState):
    """This voter granted its one vote of ``epoch`` to ``voted_id``."""

    __slots__ = ("election_deadline_ms", "voted_id")
    role = Role.VOTED

    def __init__(self, epoch: Epoch, *, voted_id: NodeId, election_deadline_ms: int) -> None:
        super().__init__(epoch)
        self.voted_id = voted_id
        self.election_deadline_ms = election_deadline_ms

    def election_state(self, voters: frozenset[int]) -> ElectionState:
        return ElectionState(epoch=self.epoch, voted_id=self.voted_id, voters=voters)

    def describe(self) -> str:
        return f"Voted(epoch={self.epoch}, voted_id={self.voted_id})"


class EpochElection:
    """A vote tally over a fixed voter set (shared by Prospective and Candidate)."""

    __slots__ = ("granted", "rejected", "voters")

    def __init__(self, voters: Iterable[int], local_id: NodeId) -> None:
        self.voters = frozenset(voters)
        self.granted: set[int] = {local_id}
        self.rejected: set[int] = set()

    def record_granted(self, node: int) -> None:
        if node in self.voters and node not in self.rejected:
            self.granted.add(node)

    def record_rejected(self, node: int) -> None:
        if node in self.voters and node not in self.granted:
            self.rejected.add(node)

    def is_granted(self) -> bool:
        return len(self.granted) >= majority_size(len(self.voters))

    def is_rejected(self) -> bool:
        """A majority can no longer be reached: back off now (KIP-595)."""
        return len(self.voters) - len(self.rejected) < majority_size(len(self.voters))

    def unrecorded(self) -> set[int]:
        return set(self.voters) - self.granted - self.rejected


class ProspectiveState(EpochState):
    """Pre-vote (KIP-996): asking whether an election at ``epoch + 1`` could win.

    It stays in the current epoch and remembers the leader it last followed and
    the vote it already granted in this epoch (both persisted unchanged), so a
    lost pre-vote returns it to that leader or keeps the vote.
    ``backoff_deadline_ms`` is set while waiting to retry after a lost round.
    """

    __slots__ = ("backoff_deadline_ms", "election", "election_deadline_ms",
                 "leader_id_hint", "retries", "voted_id")
    role = Role.PROSPECTIVE

    def __init__(self, epoch: Epoch, *, local_id: NodeId, voters: Iterable[int],
                 leader_id_hint: NodeId | None, voted_id: NodeId | None, retries: int,
                 election_deadline_ms: int) -> None:
        super().__init__(epoch)
        self.leader_id_hint = leader_id_hint
        self.voted_id = voted_id
        self.retries = retries
        self.election = EpochElection(voters, local_id)
        self.election_deadline_ms = election_deadline_ms
        self.backoff_deadline_ms: int | None = None

    def election_state(self, voters: frozenset[int]) -> ElectionState:
        # Unchanged from the state it came from: pre-vote never changes durable state.
        return ElectionState(epoch=self.epoch, leader_id=self.leader_id_hint,
                             voted_id=self.voted_id if self.leader_id_hint is None else None,
                             voters=voters)

    def describe(self) -> str:
        return (f"Prospective(epoch={self.epoch}, retries={self.retries}, "
                f"granted={sorted(self.election.granted)}, "
                f"rejected={sorted(self.election.rejected)})")


class CandidateState(EpochState):
    """Asking for votes in ``epoch`` (already persisted with a vote for itself)."""

    __slots__ = ("backoff_deadline_ms", "election", "election_deadline_ms", "local_id", "retries")
    role = Role.CANDIDATE

    def __init__(self, epoch: Epoch, *, local_id: NodeId, voters: Iterable[int], retries: int,
                 election_deadline_ms: int) -> None:
        super().__init__(epoch)
        self.local_id = local_id
        self.retries = retries
        self.election = EpochElection(voters, local_id)
        self.election_deadline_ms = election_deadline_ms
        self.backoff_deadline_ms: int | None = None

    def election_state(self, voters: frozenset[int]) -> ElectionState:
        return ElectionState(epoch=self.epoch, voted_id=self.local_id, voters=voters)

    def describe(self) -> str:
        return (f"Candidate(epoch={self.epoch}, retries={self.retries}, "
                f"granted={sorted(self.election.granted)}, "
                f"rejected={sorted(self.election.rejected)})")


class ReplicaState:
    """What a leader knows about one replica's fetching (DescribeQuorum reports it)."""

    __slots__ = (
        "counts_after",
        "directory_id",
        "end_offset",
        "is_voter",
        "last_caught_up_ms",
        "last_fetch_leader_end_offset",
        "last_fetch_ms",
        "node_id",
    )

    def __init__(self, node_id: int, *, is_voter: bool,
                 directory_id: uuid.Uuid = NO_DIRECTORY) -> None:
        self.node_id = node_id
        self.is_voter = is_voter
        self.directory_id = directory_id
        # KIP-853: a voter added at offset X counts towards the HW only with a fetch offset
        # past X: its fetches as an observer reported offsets it had not flushed.
        self.counts_after = -1
        self.end_offset: int | None = None
        self.last_fetch_ms: int | None = None
        self.last_caught_up_ms: int | None = None
        self.last_fetch_leader_end_offset: int | None = None

    def update_fetch(self, fetch_offset: int, *, leader_end_offset: int, now_ms: int) -> None:
        """Record a Fetch; "caught up" as Kafka's ReplicaState defines it.

        A replica fetching at the leader's end offset is caught up now; one that
        reached the end offset the leader had at its previous fetch was caught up
        as of that previous fetch.
        """
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_ms = now_ms
        elif (self.last_fetch_leader_end_offset is not None
              and self.last_fetch_ms is not None
              and fetch_offset >= self.last_fetch_leader_end_offset):
            self.last_caught_up_ms = self.last_fetch_ms
        self.end_offset = fetch_offset
        self.last_fetch_ms = now_ms
        self.last_fetch_leader_end_offset = leader_end_offset


OBSERVER_SESSION_TIMEOUT_MS = 300_000
"""An observer that has not fetched for this long is forgotten by the leader (Kafka's
``LeaderState.OBSERVER_SESSION_TIMEOUT_MS``): brokers come and go, and a Fetch may name any
replica id, so the observer map must not only grow."""
OBSERVER_EXPIRY_INTERVAL_MS = 30_000
"""How often :meth:`LeaderState.expire_observers` walks the map from the leader's poll."""


class LeaderState(EpochState):
    """Leading ``epoch``: replica fetch state, HW, linger buffer, check-quorum timer.

    Invariants: ``high_watermark`` is ``None`` until a majority of voters holds
    ``epoch_start_offset + 1`` (the LeaderChange record of this epoch, KIP-595:
    a leader may not advance the HW over entries of older epochs on their own)
    and never decreases afterwards. ``voters`` is the latest voter set of the log
    (KIP-853: a change counts from its append, before it commits); the leader itself
    may be missing from it after it appended its own removal, and then its own
    progress (``local``) no longer counts. Observers are keyed by (id, directory id),
    so a replica whose disk was replaced never moves its old voter's progress.
    """

    __slots__ = ("accumulated", "accumulated_bytes", "acknowledged", "check_quorum_deadline_ms",
                 "epoch_start_offset",
                 "fetched_voters", "high_watermark", "linger_deadline_ms", "local", "local_id",
                 "next_observer_expiry_ms", "next_offset", "observers", "voters")
    role = Role.LEADER

    def __init__(self, epoch: Epoch, *, local_id: NodeId, voters: Iterable[int],
                 epoch_start_offset: int, check_quorum_deadline_ms: int,
                 voter_directories: Mapping[int, uuid.Uuid] | None = None) -> None:
        super().__init__(epoch)
        self.local_id = local_id
        self.epoch_start_offset = epoch_start_offset
        self.high_watermark: int | None = None
        directories = voter_directories or {}
        self.voters: dict[int, ReplicaState] = {
            v: ReplicaState(v, is_voter=True, directory_id=directories.get(v, NO_DIRECTORY))
            for v in sorted(voters)}
        self.local = self.voters.get(local_id) or ReplicaState(local_id, is_voter=False)
        self.observers: dict[tuple[int, uuid.Uuid], ReplicaState] = {}
        self.next_observer_expiry_ms = 0
        """When the leader's poll next walks ``observers`` for expired ones."""
        self.check_quorum_deadline_ms = check_quorum_deadline_ms
        self.fetched_voters: set[int] = set()
        # Proposed values waiting for the linger timer; they are promised the offsets
        # next_offset - len(accumulated) .. next_offset - 1, in order.
        self.accumulated: list[bytes] = []
        self.accumulated_bytes = 0
        self.linger_deadline_ms: int | None = None
        self.next_offset = epoch_start_offset
        # Voters that answered BeginQuorumEpoch or fetched in this epoch: no more Begin to them.
        self.acknowledged: set[int] = {local_id}

    def election_state(self, voters: frozenset[int]) -> ElectionState:
        return ElectionState(epoch=self.epoch, leader_id=self.local_id, voters=voters)

    def leader_id(self) -> NodeId | None:
        return self.local_id

    def replica(self, node_id: int, directory_id: uuid.Uuid = NO_DIRECTORY) -> ReplicaState:
        """The voter ``node_id`` if ``directory_id`` is its directory (or either names none),
        else the observer (``node_id``, ``directory_id``), created on first use."""
        state = self.voters.get(node_id)
        if state is not None and (directory_id == NO_DIRECTORY
                                  or state.directory_id in (NO_DIRECTORY, directory_id)):
            return state
        key = (node_id, directory_id)
        state = self.observers.get(key)
        if state is None:
            state = self.observers[key] = ReplicaState(node_id, is_voter=False,
                                                       directory_id=directory_id)
        return state

    def is_caught_up(self, node_id: int, directory_id: uuid.Uuid, *, now_ms: int,
                     max_lag_ms: int) -> bool:
        """Whether that replica reached the leader's end offset within ``max_lag_ms`` (KIP-853:
        a voter is added only once it is caught up, so adding it cannot stall commits)."""
        state = self.observers.get((node_id, directory_id)) or self.voters.get(node_id)
        if state is None or (state.directory_id != directory_id):
            return False
        return state.last_caught_up_ms is not None \
            and now_ms - state.last_caught_up_ms <= max_lag_ms

    def update_voters(self, voters: Mapping[int, uuid.Uuid], *, since_offset: int) -> bool:
        """Switch to a new voter set (id -> directory id) recorded at ``since_offset``, keeping
        what is known of each replica's progress (a new voter's counts only past that
        offset); True when the HW advanced under the new majority."""
        old_voters = self.voters
        new: dict[int, ReplicaState] = {}
        for node_id, directory in sorted(voters.items()):
            state = old_voters.get(node_id)
            if state is None or state.directory_id != directory:
                state = self.observers.pop((node_id, directory), None) \
                    or ReplicaState(node_id, is_voter=True, directory_id=directory)
                state.counts_after = since_offset
            state.is_voter = True
            new[node_id] = state
        for node_id, state in old_voters.items():
            if new.get(node_id) is not state:
                state.is_voter = False
                self.observers[(node_id, state.directory_id)] = state
        if self.local_id in new:
            new[self.local_id] = self.local
            self.local.is_voter = True
            self.observers.pop((self.local_id, self.local.directory_id), None)
        else:
            self.observers.pop((self.local_id, self.local.directory_id), None)
        self.voters = new
        self.fetched_voters &= set(new)
        return self.maybe_advance_high_watermark()

    def update_local_end_offset(self, end_offset: int, now_ms: int) -> bool:
        local = self.local
        local.end_offset = end_offset
        local.last_fetch_ms = now_ms
        local.last_caught_up_ms = now_ms
        return self.maybe_advance_high_watermark()

    def update_replica_fetch(self, node_id: int, fetch_offset: int, *, leader_end_offset: int,
                             now_ms: int, directory_id: uuid.Uuid = NO_DIRECTORY) -> bool:
        """Record a follower's Fetch; returns True when the HW advanced."""
        replica = self.replica(node_id, directory_id)
        replica.update_fetch(fetch_offset, leader_end_offset=leader_end_offset, now_ms=now_ms)
        if replica.is_voter:
            self.fetched_voters.add(node_id)
            return self.maybe_advance_high_watermark()
        return False

    def maybe_advance_high_watermark(self) -> bool:
        """HW = the largest offset a majority of voters holds, once it covers this epoch.

        Returns True when it moved. It never moves backwards: a voter that
        restarted and reports a smaller fetch offset cannot un-commit anything.
        """
        if not self.voters:
            return False
        offsets = sorted((r.end_offset if r.end_offset is not None
                          and r.end_offset > r.counts_after else -1
                          for r in self.voters.values()), reverse=True)
        candidate = offsets[majority_size(len(offsets)) - 1]
        if candidate <= self.epoch_start_offset:
            return False
        if self.high_watermark is None or candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    def expire_observers(self, now_ms: int, *, timeout_ms: int = OBSERVER_SESSION_TIMEOUT_MS) -> list[int]:
        """Forget observers whose last Fetch is ``timeout_ms`` or more ago (Kafka's
        ``clearInactiveObservers``); returns their node ids, in order."""
        expired = sorted((key for key, replica in self.observers.items()
                          if replica.last_fetch_ms is None or now_ms - replica.last_fetch_ms >= timeout_ms),
                         key=lambda key: key[0])
        for key in expired:
            del self.observers[key]
        return [node_id for node_id, _ in expired]

    def check_quorum(self, now_ms: int, *, check_quorum_timeout_ms: int) -> bool:
        """True while a majority fetched within the window (KIP-595 check-quorum)."""
        counted = self.fetched_voters | ({self.local_id} & self.voters.keys())
        if len(counted) >= majority_size(len(self.voters)):
            self.fetched_voters.clear()
            self.check_quorum_deadline_ms = now_ms + check_quorum_timeout_ms
            return True
        return now_ms < self.check_quorum_deadline_ms

    def successors_by_fetch_offset(self) -> list[int]:
        """Other voters, most caught-up first (EndQuorumEpoch's preferred successors)."""
        others = [r for r in self.voters.values() if r.node_id != self.local_id]
        others.sort(key=lambda r: (-(r.end_offset if r.end_offset is not None else -1),
                                   r.node_id))
        return [r.node_id for r in others]

    def describe(self) -> str:
        return (f"Leader(epoch={self.epoch}, epoch_start_offset={self.epoch_start_offset}, "
                f"high_watermark={self.high_watermark})")


class FollowerState(EpochState):
    """Following ``leader_id`` in ``epoch``; fetching from it.

    ``fetch_deadline_ms``: when no successful Fetch answer arrives by then the
    voter turns Prospective (an observer turns Unattached). ``snapshot_id`` is
    set while a snapshot is being fetched in chunks (KIP-630), the chunks so far
    in ``snapshot_buffer``.
    """

    __slots__ = ("fetch_deadline_ms", "leader_endpoint", "leader_high_watermark", "leader_id_",
                 "leader_resigned", "snapshot_buffer", "snapshot_id")
    role = Role.FOLLOWER

    def __init__(self, epoch: Epoch, *, leader_id: NodeId, leader_endpoint: str,
                 fetch_deadline_ms: int) -> None:
        super().__init__(epoch)
        self.leader_id_ = leader_id
        self.leader_endpoint = leader_endpoint
        self.fetch_deadline_ms = fetch_deadline_ms
        self.snapshot_id: OffsetAndEpoch | None = None
        self.snapshot_buffer = bytearray()
        # Set by EndQuorumEpoch from our leader: it is gone, so pre-votes may be granted.
        self.leader_resigned = False
        # The high watermark of the leader's last Fetch answer in this epoch; -1 before one.
        self.leader_high_watermark = -1

    def election_state(self, voters: frozenset[int]) -> ElectionState:
        return ElectionState(epoch=self.epoch, leader_id=self.leader_id_, voters=voters)

    def leader_id(self) -> NodeId | None:
        return self.leader_id_

    def describe(self) -> str:
        return f"Follower(epoch={self.epoch}, leader={self.leader_id_})"


class ResignedState(EpochState):
    """A leader that stepped down (shutdown, check-quorum) and tells the voters so.

    Not persisted: the file still names this node leader of ``epoch``, so a
    restarted leader comes back Resigned and can never vote in its own epoch.
    ``unacknowledged`` are the voters still to receive EndQuorumEpoch.
    """

    __slots__ = ("election_deadline_ms", "local_id", "preferred_successors", "unacknowledged")
    role = Role.RESIGNED

    def __init__(self, epoch: Epoch, *, local_id: NodeId, voters: Iterable[int],
                 preferred_successors: list[int], election_deadline_ms: int) -> None:
        super().__init__(epoch)
        self.local_id = local_id
        self.preferred_successors = preferred_successors
        self.unacknowledged = set(voters) - {local_id}
        self.election_deadline_ms = election_deadline_ms

    def election_state(self, voters: frozenset[int]) -> ElectionState:
        return ElectionState(epoch=self.epoch, leader_id=self.local_id, voters=voters)

    def leader_id(self) -> NodeId | None:
        return self.local_id

    def describe(self) -> str:
        return f"Resigned(epoch={self.epoch}, successors={self.preferred_successors})"
