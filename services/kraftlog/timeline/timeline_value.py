"""TimelineValue and TimelineInteger: one value whose past states stay readable.

Owns snapshot-aware scalars for the controller (e.g. the next producer-id
block, the highest broker epoch, counters of fenced brokers or offline
partitions), after Kafka's ``TimelineObject``/``TimelineInteger``/
``TimelineLong`` (Python's ``int`` covers both of the latter). ``set`` writes
LATEST; ``get(epoch)`` reads as of a kept snapshot.

Called by the controller's managers. Must not do I/O, read a clock or use
threads; not thread-safe.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from kraftlog.timeline import snapshot_registry, snapshottable

T = TypeVar("T")

LATEST_EPOCH = snapshot_registry.LATEST_EPOCH


class TimelineValue(snapshottable.DeltaChain[T], Generic[T]):
    """A single value with reads at any kept snapshot epoch.

    The first ``set`` after a snapshot saves the old value in that snapshot's
    delta; later sets before the next snapshot save nothing. ``reset()``
    (through the registry) restores ``initial``.
    """

    __slots__ = ("_initial", "_value")

    def __init__(self, registry: snapshot_registry.SnapshotRegistry, initial: T) -> None:
        super().__init__(registry)
        self._initial = initial
        self._value = initial

    def get(self, epoch: int = LATEST_EPOCH) -> T:
        """The value as of ``epoch`` (default LATEST); ``SnapshotNotFoundError`` if not kept."""
        if epoch == LATEST_EPOCH:
            return self._value
        self._registry.check_readable(epoch)
        for delta_epoch, then in self._deltas.items():
            if delta_epoch >= epoch:
                return then
        return self._value

    def set(self, value: T) -> None:
        """Set the LATEST value."""
        latest = self._registry._latest
        if latest is not None and latest.epoch not in self._deltas:
            self._deltas[latest.epoch] = self._value
            latest.attach(self)
        self._value = value

    # -- DeltaChain hooks ----------------------------------------------------

    def _apply_delta(self, delta: T) -> None:
        self._value = delta

    def _merge_deltas(self, older: T, newer: T) -> T:
        return older

    def _reset_state(self) -> None:
        self._value = self._initial

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._value!r}, deltas={len(self._deltas)})"


class TimelineInteger(TimelineValue[int]):
    """An integer ``TimelineValue`` (initially 0) with increment/decrement helpers."""

    __slots__ = ()

    def __init__(self, registry: snapshot_registry.SnapshotRegistry, initial: int = 0) -> None:
        super().__init__(registry, initial)

    def increment(self, amount: int = 1) -> int:
        """Add ``amount`` at LATEST and return the new value."""
        value = self._value + amount
        self.set(value)
        return value

    def decrement(self, amount: int = 1) -> int:
        """Subtract ``amount`` at LATEST and return the new value."""
        return self.increment(-amount)
