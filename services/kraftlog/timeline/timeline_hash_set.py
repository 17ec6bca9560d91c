"""TimelineHashSet: a set whose past states, at every kept snapshot, stay readable.

Owns the snapshot-aware set the controller uses for memberships (e.g. fenced
brokers, partitions being reassigned), after Kafka's
``org.apache.kafka.timeline.TimelineHashSet``. A ``MutableSet``: plain reads
and all writes act on LATEST; ``contains``/``len_at``/``at`` read as of a kept
snapshot epoch. Same cost model as ``TimelineHashMap`` (it is the same table,
with no values).

Called by the controller's managers. Must not do I/O, read a clock or use
threads; not thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, MutableSet, Set
from typing import TypeVar, cast

from kraftlog.timeline import snapshot_registry, snapshottable

T = TypeVar("T")

LATEST_EPOCH = snapshot_registry.LATEST_EPOCH


class TimelineHashSet(snapshottable.SnapshottableTable[T, None], MutableSet[T]):
    """A ``MutableSet`` with reads at any kept snapshot epoch.

    Adding a present element or discarding an absent one records nothing.
    Iterating at LATEST while changing the set behaves like ``dict``/``set``;
    iterating at an old epoch raises ``RuntimeError`` on any change.
    """

    __slots__ = ()

    def __init__(self, registry: snapshot_registry.SnapshotRegistry) -> None:
        super().__init__(registry)

    @classmethod
    def _from_iterable(cls, it: Iterable[T]) -> set[T]:  # type: ignore[override]
        # The Set mixins (|, &, -, ^) build results with this; a result is a
        # plain set, since a new timeline structure would need a registry.
        return set(it)

    # -- MutableSet at LATEST ------------------------------------------------------

    def __contains__(self, element: object) -> bool:
        return element in self._data

    def __iter__(self) -> Iterator[T]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def add(self, element: T) -> None:
        """Add ``element`` at LATEST; a no-op (and no delta entry) if already present."""
        if element not in self._data:
            self._put(element, None)

    def discard(self, element: T) -> None:
        """Remove ``element`` at LATEST if present."""
        self._remove(element)

    def clear(self) -> None:
        """Remove every element; O(size), with the copy done in C."""
        self._clear()

    def pop(self) -> T:
        """Remove and return the most recently added element (LIFO, O(1))."""
        if not self._data:
            raise KeyError("pop from an empty TimelineHashSet")
        element = next(reversed(self._data))
        self._remove(element)
        return element

    # -- reads at an epoch -------------------------------------------------------

    def contains(self, element: T, epoch: int = LATEST_EPOCH) -> bool:
        """Whether ``element`` was present as of ``epoch``."""
        return self._get_at(element, epoch) is not snapshottable.ABSENT

    def len_at(self, epoch: int = LATEST_EPOCH) -> int:
        """Number of elements as of ``epoch``; O(changes since epoch)."""
        return self._len_at(epoch)

    def at(self, epoch: int = LATEST_EPOCH) -> Set[T]:
        """A read-only live view of this set as of ``epoch`` (checked on every access)."""
        self._registry.check_readable(epoch)
        return TimelineSetView(self, epoch)

    def __repr__(self) -> str:
        return f"TimelineHashSet(size={len(self._data)}, deltas={len(self._deltas)})"


class TimelineSetView(Set[T]):
    """Read-only view of a ``TimelineHashSet`` as of one epoch (returned by ``at``)."""

    __slots__ = ("_epoch", "_set")

    def __init__(self, timeline_set: TimelineHashSet[T], epoch: int) -> None:
        self._set = timeline_set
        self._epoch = epoch

    @classmethod
    def _from_iterable(cls, it: Iterable[T]) -> set[T]:  # type: ignore[override]
        return set(it)

    @property
    def epoch(self) -> int:
        """The snapshot epoch this view reads at (LATEST_EPOCH for the current state)."""
        return self._epoch

    def __contains__(self, element: object) -> bool:
        return self._set._get_at(cast(T, element), self._epoch) is not snapshottable.ABSENT

    def __iter__(self) -> Iterator[T]:
        for element, _ in self._set._iter_items_at(self._epoch):
            yield element

    def __len__(self) -> int:
        return self._set._len_at(self._epoch)

    def __repr__(self) -> str:
        return f"TimelineSetView(epoch={self._epoch}, size={len(self)})"
