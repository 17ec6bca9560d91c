"""The snapshot registry: which in-memory snapshots exist, and reverting to one.

Owns the ordered set of snapshot epochs and the list of structures
(``Revertable``) that take part in them. The quorum controller (single
threaded: one event queue, as Kafka's QuorumController) is the caller: after replaying the records it appended
at offset ``o`` it calls ``get_or_create_snapshot(o)``; when ``o`` commits it
calls ``delete_snapshots_up_to(o)`` so history is kept only for uncommitted
offsets; when it loses leadership it calls ``revert_to_snapshot(committed)``;
and it answers reads from the committed epoch. This is the design of Kafka's
``org.apache.kafka.timeline.SnapshotRegistry`` (KIP-500/KIP-631 controller).

Cost model (as in Kafka): creating a snapshot is O(1) and copies nothing. A
structure that changes after the newest snapshot copies the *old* value of
each key it touches into a delta owned by that snapshot, once per key per
snapshot (copy-on-write), and attaches itself to the snapshot. Reverting
applies the deltas of the newer snapshots, newest first; deleting a snapshot
folds its deltas into the previous snapshot's (or drops them if it is the
oldest). Every operation is O(changes), never O(size).

Must not do I/O, read a clock, or use threads: it is a pure core
(tests/test_layering.py). Not thread-safe by design.

Epochs: any ``int`` below ``LATEST_EPOCH``, strictly increasing; ``-1`` is a
valid epoch (the controller snapshots "nothing committed yet" at offset -1),
which is why LATEST is Kafka's ``Long.MAX_VALUE`` rather than -1.
"""

from __future__ import annotations

from typing import Final, Protocol

from kraftlog.timeline import errors

LATEST_EPOCH: Final[int] = 2**63 - 1
"""Reads at this epoch see the current, uncommitted state (Kafka's ``LATEST_EPOCH``)."""


class Revertable(Protocol):
    """A structure whose history the registry manages (Kafka's ``Revertable`` + ``Delta``).

    Contract: before its first change after snapshot ``s`` was created (``s`` being
    the registry's ``latest_snapshot``), the structure records what it needs to
    restore its state as of ``s`` in a delta keyed by ``s.epoch`` and calls
    ``s.attach(self)``. The registry then calls exactly one of the two delta
    methods below for that epoch, once.
    """

    def revert_snapshot_delta(self, epoch: int) -> None:
        """Apply and discard the delta held for snapshot ``epoch`` (called newest first)."""

    def merge_snapshot_delta(self, epoch: int, into_epoch: int | None) -> None:
        """Snapshot ``epoch`` is deleted: fold its delta into ``into_epoch``'s, or drop it if None.

        ``into_epoch`` is the previous kept snapshot. Where both deltas hold an
        entry, the older one (``into_epoch``'s) wins: it is the state at that time.
        """

    def reset(self) -> None:
        """Forget all deltas and return to the initial (empty) state."""


class Snapshot:
    """One in-memory snapshot: an epoch, its neighbours, and the structures holding deltas for it.

    Created only by ``SnapshotRegistry.get_or_create_snapshot``. ``epoch`` is read-only.
    """

    __slots__ = ("_next", "_owners", "_prev", "epoch")

    def __init__(self, epoch: int) -> None:
        self.epoch: Final[int] = epoch
        self._prev: Snapshot | None = None
        self._next: Snapshot | None = None
        # Keyed by id(): timeline maps and sets define __eq__ and so are
        # unhashable, and identity is what matters here.
        self._owners: dict[int, Revertable] = {}

    def attach(self, revertable: Revertable) -> None:
        """Record that ``revertable`` now holds a delta for this snapshot (idempotent)."""
        self._owners[id(revertable)] = revertable

    def __repr__(self) -> str:
        return f"Snapshot(epoch={self.epoch}, deltas={len(self._owners)})"


class SnapshotRegistry:
    """The ordered in-memory snapshots of a set of timeline structures.

    Invariants: ``_snapshots`` is in strictly increasing epoch order (dict
    insertion order, since epochs only grow); ``_oldest``/``_latest`` and the
    ``_prev``/``_next`` links describe the same order; a structure holds a delta
    for epoch ``e`` iff it is attached to snapshot ``e``.
    """

    __slots__ = ("_latest", "_oldest", "_revertables", "_snapshots")

    def __init__(self) -> None:
        self._snapshots: dict[int, Snapshot] = {}
        self._oldest: Snapshot | None = None
        # Read directly by the structures in this package on every write (the
        # hot path): None means no snapshot, so changes need no copy at all.
        self._latest: Snapshot | None = None
        self._revertables: list[Revertable] = []

    # -- registration --------------------------------------------------------

    def register(self, revertable: Revertable) -> None:
        """Associate ``revertable`` with this registry so ``reset()`` resets it.

        Structures register themselves on construction. The registry keeps a
        strong reference for its lifetime, as Kafka's does: timeline structures
        live as long as the controller that owns them.
        """
        self._revertables.append(revertable)

    # -- queries -------------------------------------------------------------

    @property
    def latest_snapshot(self) -> Snapshot | None:
        """The newest snapshot, the one changes at LATEST are recorded against; None if none."""
        return self._latest

    def latest_epoch(self) -> int | None:
        """Epoch of the newest snapshot, or None when there is none."""
        latest = self._latest
        return None if latest is None else latest.epoch

    def has_snapshot(self, epoch: int) -> bool:
        """Whether a snapshot at ``epoch`` is kept."""
        return epoch in self._snapshots

    def epochs(self) -> list[int]:
        """Kept snapshot epochs, oldest first."""
        return list(self._snapshots)

    def __len__(self) -> int:
        return len(self._snapshots)

    def snapshot(self, epoch: int) -> Snapshot:
        """The snapshot at ``epoch``; raises ``SnapshotNotFoundError`` naming the kept epochs."""
        try:
            return self._snapshots[epoch]
        except KeyError:
            raise errors.SnapshotNotFoundError(epoch, self.epochs()) from None

    def check_readable(self, epoch: int) -> None:
        """Raise ``SnapshotNotFoundError`` unless ``epoch`` is LATEST or a kept snapshot."""
        if epoch != LATEST_EPOCH and epoch not in self._snapshots:
            raise errors.SnapshotNotFoundError(epoch, self.epochs())

    # -- changes -------------------------------------------------------------

    def get_or_create_snapshot(self, epoch: int) -> Snapshot:
        """Return a snapshot of the current state at ``epoch``.

        Creating is O(1). If ``epoch`` equals the latest epoch, that snapshot is
        returned unchanged (idempotent, as in Kafka); an older epoch, or LATEST
        itself, raises ``SnapshotEpochError``.
        """
        latest = self._latest
        if latest is not None:
            if epoch == latest.epoch:
                return latest
            if epoch < latest.epoch:
                raise errors.SnapshotEpochError(
                    f"cannot create an in-memory snapshot at epoch {epoch}: there is already "
                    f"a snapshot at the newer epoch {latest.epoch}; snapshot epochs are: "
                    f"{errors.describe_epochs(self.epochs())}",
                    epoch=epoch,
                )
        if epoch >= LATEST_EPOCH:
            raise errors.SnapshotEpochError(
                f"cannot create an in-memory snapshot at epoch {epoch}: epochs must be "
                f"below LATEST_EPOCH ({LATEST_EPOCH})",
                epoch=epoch,
            )
        snapshot = Snapshot(epoch)
        snapshot._prev = latest
        if latest is None:
            self._oldest = snapshot
        else:
            latest._next = snapshot
        self._latest = snapshot
        self._snapshots[epoch] = snapshot
        return snapshot

    def revert_to_snapshot(self, epoch: int) -> None:
        """Restore every structure to its state as of snapshot ``epoch``; drop newer snapshots.

        The target snapshot is kept (with no changes since it). Cost is the
        number of changes recorded since ``epoch``. Unknown epoch raises
        ``SnapshotNotFoundError`` and changes nothing.
        """
        target = self._snapshots.get(epoch)
        if target is None:
            raise errors.SnapshotNotFoundError(epoch, self.epochs(), action="revert")
        # Newest first, so that for a key changed after several snapshots the
        # oldest delta (the state at `epoch`) is applied last and wins.
        snapshot = self._latest
        while snapshot is not None and snapshot is not target:
            for owner in snapshot._owners.values():
                owner.revert_snapshot_delta(snapshot.epoch)
            previous = snapshot._prev
            self._unlink(snapshot)
            snapshot = previous
        for owner in target._owners.values():
            owner.revert_snapshot_delta(target.epoch)
        target._owners.clear()

    def delete_snapshot(self, epoch: int) -> None:
        """Delete one snapshot; the state of the others is unchanged.

        Its deltas fold into the previous snapshot's (they are the state at
        ``epoch`` of keys that did not change between the two), or are dropped
        if it is the oldest.
        """
        snapshot = self._snapshots.get(epoch)
        if snapshot is None:
            raise errors.SnapshotNotFoundError(epoch, self.epochs(), action="delete a snapshot")
        previous = snapshot._prev
        into_epoch = None if previous is None else previous.epoch
        for owner in snapshot._owners.values():
            owner.merge_snapshot_delta(epoch, into_epoch)
            if previous is not None:
                previous.attach(owner)
        self._unlink(snapshot)

    def delete_snapshots_up_to(self, epoch: int) -> None:
        """Delete every snapshot with an epoch below ``epoch`` (not ``epoch`` itself).

        Called when ``epoch`` commits: older history can never be read or
        reverted to again. Each deleted snapshot is the oldest, so its deltas
        are simply dropped. ``epoch`` need not be a kept epoch.
        """
        snapshot = self._oldest
        while snapshot is not None and snapshot.epoch < epoch:
            for owner in snapshot._owners.values():
                owner.merge_snapshot_delta(snapshot.epoch, None)
            following = snapshot._next
            self._unlink(snapshot)
            snapshot = following

    def reset(self) -> None:
        """Delete all snapshots and reset every registered structure to its initial state.

        Used when a controller loads a metadata snapshot from scratch.
        """
        self.delete_snapshots_up_to(LATEST_EPOCH)
        for revertable in self._revertables:
            revertable.reset()

    def _unlink(self, snapshot: Snapshot) -> None:
        previous, following = snapshot._prev, snapshot._next
        if previous is None:
            self._oldest = following
        else:
            previous._next = following
        if following is None:
            self._latest = previous
        else:
            following._prev = previous
        snapshot._prev = snapshot._next = None
        snapshot._owners = {}
        del self._snapshots[snapshot.epoch]

    def __repr__(self) -> str:
        return (
            f"SnapshotRegistry(epochs=[{errors.describe_epochs(self.epochs())}], "
            f"structures={len(self._revertables)})"
        )
