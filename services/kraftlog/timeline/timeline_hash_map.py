"""TimelineHashMap: a dict whose past states, at every kept snapshot, stay readable.

Owns the snapshot-aware mapping the controller keeps its metadata in (topics
by id, partitions, brokers, configs), after Kafka's
``org.apache.kafka.timeline.TimelineHashMap``. It is a ``MutableMapping``:
plain reads and all writes act on the LATEST (uncommitted) state; reads that
take an ``epoch`` see the state as of that kept snapshot, which is how the
controller answers clients from committed state while uncommitted records are
already replayed.

Called by the controller's managers. Must not do I/O, read a clock or use
threads; not thread-safe.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, MutableMapping, ValuesView
from typing import TypeVar, cast, overload

from kraftlog.timeline import snapshot_registry, snapshottable

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")

LATEST_EPOCH = snapshot_registry.LATEST_EPOCH


class TimelineHashMap(snapshottable.SnapshottableTable[K, V], MutableMapping[K, V]):
    """A ``MutableMapping`` with reads at any kept snapshot epoch.

    Writes copy a key's old value into the newest snapshot's delta the first
    time the key changes after that snapshot, so a snapshot costs O(changes).
    Reads at LATEST are plain ``dict`` reads; reads at an old epoch cost the
    number of this map's deltas since that epoch. Iterating at LATEST while
    changing the map behaves like ``dict``; iterating at an old epoch raises
    ``RuntimeError`` on any change.
    """

    __slots__ = ()

    def __init__(self, registry: snapshot_registry.SnapshotRegistry) -> None:
        super().__init__(registry)

    # -- MutableMapping at LATEST ----------------------------------------------

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def __setitem__(self, key: K, value: V) -> None:
        self._put(key, value)

    def __delitem__(self, key: K) -> None:
        if self._remove(key) is snapshottable.ABSENT:
            raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        """Remove every key; O(size), with the copy done in C."""
        self._clear()

    def popitem(self) -> tuple[K, V]:
        """Remove and return the most recently inserted item, like ``dict.popitem`` (LIFO)."""
        if not self._data:
            raise KeyError("popitem(): TimelineHashMap is empty")
        key = next(reversed(self._data))
        value = self._data[key]
        self._remove(key)
        return key, value

    # -- reads at an epoch -------------------------------------------------------

    @overload
    def get(self, key: K, /, *, epoch: int = ...) -> V | None: ...

    @overload
    def get(self, key: K, default: V | T, /, *, epoch: int = ...) -> V | T: ...

    def get(
        self, key: K, default: V | T | None = None, /, *, epoch: int = LATEST_EPOCH
    ) -> V | T | None:
        """Value of ``key`` as of ``epoch`` (default LATEST), or ``default`` if absent then.

        Raises ``SnapshotNotFoundError`` if ``epoch`` is not a kept snapshot.
        """
        value = self._get_at(key, epoch)
        return default if value is snapshottable.ABSENT else value

    def contains(self, key: K, epoch: int = LATEST_EPOCH) -> bool:
        """Whether ``key`` was present as of ``epoch``."""
        return self._get_at(key, epoch) is not snapshottable.ABSENT

    def len_at(self, epoch: int = LATEST_EPOCH) -> int:
        """Number of keys as of ``epoch``; O(changes since epoch)."""
        return self._len_at(epoch)

    def at(self, epoch: int = LATEST_EPOCH) -> Mapping[K, V]:
        """A read-only live view of this map as of ``epoch``.

        Checks the epoch now and on every access: once the snapshot is deleted
        or reverted past, the view raises ``SnapshotNotFoundError``.
        """
        self._registry.check_readable(epoch)
        return TimelineMapView(self, epoch)

    def keys(self, epoch: int = LATEST_EPOCH) -> KeysView[K]:
        """Keys as of ``epoch`` (a live view; at LATEST, the underlying dict's)."""
        if epoch == LATEST_EPOCH:
            return self._data.keys()
        return self.at(epoch).keys()

    def items(self, epoch: int = LATEST_EPOCH) -> ItemsView[K, V]:
        """Items as of ``epoch`` (a live view; at LATEST, the underlying dict's)."""
        if epoch == LATEST_EPOCH:
            return self._data.items()
        return self.at(epoch).items()

    def values(self, epoch: int = LATEST_EPOCH) -> ValuesView[V]:
        """Values as of ``epoch`` (a live view; at LATEST, the underlying dict's)."""
        if epoch == LATEST_EPOCH:
            return self._data.values()
        return self.at(epoch).values()

    def __repr__(self) -> str:
        return f"TimelineHashMap(size={len(self._data)}, deltas={len(self._deltas)})"


class TimelineMapView(Mapping[K, V]):
    """Read-only view of a ``TimelineHashMap`` as of one epoch (returned by ``at``)."""

    __slots__ = ("_epoch", "_map")

    def __init__(self, timeline_map: TimelineHashMap[K, V], epoch: int) -> None:
        self._map = timeline_map
        self._epoch = epoch

    @property
    def epoch(self) -> int:
        """The snapshot epoch this view reads at (LATEST_EPOCH for the current state)."""
        return self._epoch

    def __getitem__(self, key: K) -> V:
        value = self._map._get_at(key, self._epoch)
        if value is snapshottable.ABSENT:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        # Keys are only ever K; `object` is Mapping's signature. An unhashable
        # key raises TypeError, as it does for dict.
        return self._map._get_at(cast(K, key), self._epoch) is not snapshottable.ABSENT

    def __iter__(self) -> Iterator[K]:
        for key, _ in self._map._iter_items_at(self._epoch):
            yield key

    def __len__(self) -> int:
        return self._map._len_at(self._epoch)

    def items(self) -> ItemsView[K, V]:
        return _ItemsAt(self)

    def values(self) -> ValuesView[V]:
        return _ValuesAt(self)

    def __repr__(self) -> str:
        return f"TimelineMapView(epoch={self._epoch}, size={len(self)})"


class _ItemsAt(ItemsView[K, V]):
    """Items of a view in one pass over the table (the default re-looks up every key)."""

    __slots__ = ()
    _mapping: TimelineMapView[K, V]

    def __iter__(self) -> Iterator[tuple[K, V]]:
        view = self._mapping
        return view._map._iter_items_at(view._epoch)


class _ValuesAt(ValuesView[V]):
    """Values of a view in one pass over the table."""

    __slots__ = ()
    _mapping: TimelineMapView[object, V]

    def __iter__(self) -> Iterator[V]:
        view = self._mapping
        for _, value in view._map._iter_items_at(view._epoch):
            yield value
