"""Shared machinery of the timeline structures: per-structure delta chains and the hash table.

Owns the copy-on-write bookkeeping that ``TimelineHashMap``, ``TimelineHashSet``
and ``TimelineValue`` share (Kafka's ``SnapshottableHashTable`` and
``TimelineObject`` internals): each structure keeps its own chain of deltas,
``epoch -> delta``, in increasing epoch order, holding only the snapshots in
which *it* changed. A read at epoch ``e`` walks the deltas at or after ``e``
and takes the first that has the key, else the current value; it therefore
skips the many snapshots in which this structure did not change (the
controller snapshots at every append, and most appends touch one or two
structures). Kafka walks every later snapshot instead.

Called only by the structures in this package and by ``SnapshotRegistry``
(through the ``Revertable`` protocol). Must not do I/O, read a clock or use
threads.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from typing import Final, Generic, TypeVar

from kraftlog.timeline import snapshot_registry

LATEST_EPOCH: Final[int] = snapshot_registry.LATEST_EPOCH

K = TypeVar("K")
V = TypeVar("V")
D = TypeVar("D")


class Absent(enum.Enum):
    """Marker type for 'the key was not present' in deltas and lookups."""

    ABSENT = 0


ABSENT: Final = Absent.ABSENT


class DeltaChain(Generic[D]):
    """A structure's deltas, one per snapshot it changed in; implements ``Revertable``.

    Invariant: ``_deltas`` keys are kept snapshot epochs in increasing order,
    and the structure is attached to each of those snapshots in the registry.
    """

    __slots__ = ("_deltas", "_registry")

    def __init__(self, registry: snapshot_registry.SnapshotRegistry) -> None:
        self._registry = registry
        self._deltas: dict[int, D] = {}
        registry.register(self)

    # -- hooks for subclasses ------------------------------------------------

    def _apply_delta(self, delta: D) -> None:
        raise NotImplementedError

    def _merge_deltas(self, older: D, newer: D) -> D:
        """Combine two deltas of adjacent snapshots; entries of ``older`` win."""
        raise NotImplementedError

    def _reset_state(self) -> None:
        raise NotImplementedError

    def _discard_delta(self, delta: D) -> None:
        """A delta is dropped unapplied (its snapshot was the oldest and is deleted)."""

    # -- Revertable ------------------------------------------------------------

    def revert_snapshot_delta(self, epoch: int) -> None:
        """Apply and discard this structure's delta for snapshot ``epoch`` (see ``Revertable``)."""
        # ABSENT, not None, marks "no delta": a TimelineValue's delta may be None.
        delta = self._deltas.pop(epoch, ABSENT)
        if delta is not ABSENT:
            self._apply_delta(delta)

    def merge_snapshot_delta(self, epoch: int, into_epoch: int | None) -> None:
        """Fold the delta of deleted snapshot ``epoch`` into ``into_epoch``'s (see ``Revertable``)."""
        newer = self._deltas.pop(epoch, ABSENT)
        if newer is ABSENT:
            return
        if into_epoch is None:
            self._discard_delta(newer)
            return
        older = self._deltas.get(into_epoch, ABSENT)
        if older is not ABSENT:
            self._deltas[into_epoch] = self._merge_deltas(older, newer)
            return
        # `into_epoch` directly precedes `epoch` in the registry, so the delta
        # moves without changing its rank; only dict order needs repair when
        # newer deltas exist (rare: deleting a middle snapshot).
        out_of_order = bool(self._deltas) and next(reversed(self._deltas)) > into_epoch
        self._deltas[into_epoch] = newer
        if out_of_order:
            self._deltas = dict(sorted(self._deltas.items()))

    def reset(self) -> None:
        """Forget every delta and return to the initial state (see ``Revertable``)."""
        self._deltas.clear()
        self._reset_state()

    # -- helpers ---------------------------------------------------------------

    def _deltas_from(self, epoch: int) -> list[D]:
        """Deltas recorded at or after ``epoch`` (a kept snapshot), oldest first."""
        return [delta for delta_epoch, delta in self._deltas.items() if delta_epoch >= epoch]


class SnapshottableTable(DeltaChain[dict[K, "V | Absent"]], Generic[K, V]):
    """A hash table with snapshot-aware reads; the engine under the timeline map and set.

    ``_data`` is the LATEST state. A delta maps a key to its value as of the
    snapshot, or ``ABSENT`` if it was not present then. ``_changed`` counts,
    per key, the deltas that hold it: a point read at an old epoch of a key
    that is in no delta (nearly all of them) is then one dict lookup, however
    many snapshots are in flight. ``_mod_count`` counts changes so that
    iteration at an old epoch can detect concurrent changes, the way ``dict``
    does for its own iterators.
    """

    __slots__ = ("_changed", "_data", "_mod_count")

    def __init__(self, registry: snapshot_registry.SnapshotRegistry) -> None:
        super().__init__(registry)
        self._data: dict[K, V] = {}
        self._changed: dict[K, int] = {}
        self._mod_count = 0

    # -- DeltaChain hooks ----------------------------------------------------

    def _apply_delta(self, delta: dict[K, V | Absent]) -> None:
        data = self._data
        for key, value in delta.items():
            if value is ABSENT:
                data.pop(key, None)
            else:
                data[key] = value
        self._forget_changes(delta)
        self._mod_count += 1

    def _merge_deltas(
        self, older: dict[K, V | Absent], newer: dict[K, V | Absent]
    ) -> dict[K, V | Absent]:
        # A key in both deltas now lives in one: count it once.
        self._forget_changes(older.keys() & newer.keys())
        # Update whichever is larger, so the merge costs the smaller delta.
        if len(newer) > len(older):
            newer.update(older)
            return newer
        for key, value in newer.items():
            older.setdefault(key, value)
        return older

    def _discard_delta(self, delta: dict[K, V | Absent]) -> None:
        self._forget_changes(delta)

    def _reset_state(self) -> None:
        self._data.clear()
        self._changed.clear()
        self._mod_count += 1

    def _forget_changes(self, keys: Iterable[K]) -> None:
        changed = self._changed
        for key in keys:
            count = changed[key] - 1
            if count:
                changed[key] = count
            else:
                del changed[key]

    # -- writes at LATEST ------------------------------------------------------

    def _latest_delta(self) -> dict[K, V | Absent] | None:
        """The delta of the newest snapshot, created and attached on first use; None if none."""
        latest = self._registry._latest
        if latest is None:
            return None
        delta = self._deltas.get(latest.epoch)
        if delta is None:
            delta = {}
            self._deltas[latest.epoch] = delta
            latest.attach(self)
        return delta

    def _put(self, key: K, value: V) -> None:
        data = self._data
        # Inlined `_latest_delta`: this is the controller's hottest write path.
        latest = self._registry._latest
        if latest is not None:
            delta = self._deltas.get(latest.epoch)
            if delta is None:
                delta = {}
                self._deltas[latest.epoch] = delta
                latest.attach(self)
            if key not in delta:
                delta[key] = data.get(key, ABSENT)
                changed = self._changed
                changed[key] = changed.get(key, 0) + 1
        data[key] = value
        self._mod_count += 1

    def _remove(self, key: K) -> V | Absent:
        data = self._data
        if key not in data:
            return ABSENT
        delta = self._latest_delta()
        if delta is not None and key not in delta:
            delta[key] = data[key]
            changed = self._changed
            changed[key] = changed.get(key, 0) + 1
        self._mod_count += 1
        return data.pop(key)

    def _clear(self) -> None:
        data = self._data
        if not data:
            return
        latest = self._registry._latest
        if latest is not None:
            # Every present key not yet in the delta gets its current value;
            # existing delta entries (older values, ABSENT) must win. Built by
            # dict copy + update so the copy runs in C.
            delta = self._deltas.get(latest.epoch)
            merged: dict[K, V | Absent] = dict(data)
            if delta is None:
                latest.attach(self)
                added: Iterable[K] = data.keys()
            else:
                added = data.keys() - delta.keys()
                merged.update(delta)
            changed = self._changed
            for key in added:
                changed[key] = changed.get(key, 0) + 1
            self._deltas[latest.epoch] = merged
        data.clear()
        self._mod_count += 1

    # -- reads at any kept epoch -------------------------------------------------

    def _get_at(self, key: K, epoch: int) -> V | Absent:
        if epoch != LATEST_EPOCH:
            self._registry.check_readable(epoch)
            if key not in self._changed:
                return self._data.get(key, ABSENT)
            for delta_epoch, delta in self._deltas.items():
                if delta_epoch >= epoch and key in delta:
                    return delta[key]
        return self._data.get(key, ABSENT)

    def _overlay(self, epoch: int) -> Mapping[K, V | Absent]:
        """Key -> value at ``epoch`` for every key changed since; read-only (may alias a delta)."""
        deltas = self._deltas_from(epoch)
        if not deltas:
            return {}
        if len(deltas) == 1:
            return deltas[0]
        overlay = dict(deltas[-1])
        for delta in reversed(deltas[:-1]):
            overlay.update(delta)  # older snapshots win
        return overlay

    def _len_at(self, epoch: int) -> int:
        if epoch == LATEST_EPOCH:
            return len(self._data)
        self._registry.check_readable(epoch)
        data = self._data
        size = len(data)
        for key, then in self._overlay(epoch).items():
            size += (then is not ABSENT) - (key in data)
        return size

    def _iter_items_at(self, epoch: int) -> Iterator[tuple[K, V]]:
        """Items as of ``epoch``; raises RuntimeError if the table changes while iterating."""
        self._registry.check_readable(epoch)
        return self._items_generator(epoch)

    def _items_generator(self, epoch: int) -> Iterator[tuple[K, V]]:
        data = self._data
        if epoch == LATEST_EPOCH:
            overlay: Mapping[K, V | Absent] = {}
        else:
            overlay = self._overlay(epoch)
        start = self._mod_count
        for key, value in data.items():
            if key in overlay:
                then = overlay[key]
                if then is ABSENT:
                    continue
                yield key, then
            else:
                yield key, value
            if self._mod_count != start:
                self._raise_changed(epoch)
        for key, then in overlay.items():
            if then is not ABSENT and key not in data:
                yield key, then
                if self._mod_count != start:
                    self._raise_changed(epoch)

    def _raise_changed(self, epoch: int) -> None:
        where = "LATEST" if epoch == LATEST_EPOCH else f"epoch {epoch}"
        raise RuntimeError(f"{type(self).__name__} changed during iteration at {where}")
