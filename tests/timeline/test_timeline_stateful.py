"""Stateful property test: timeline map, set and value against full copies at every snapshot.

The model is the obvious, slow MVCC: a dict, a set and a value for LATEST,
plus a complete copy of all three taken at every snapshot. Hypothesis drives
random puts, removes, clears, snapshots, reverts and deletions; after every
step the LATEST state and every kept snapshot's view must equal the model.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kraftlog.timeline import (
    errors,
    snapshot_registry,
    timeline_hash_map,
    timeline_hash_set,
    timeline_value,
)

KEYS = st.integers(min_value=0, max_value=5)
VALUES = st.integers(min_value=0, max_value=20)
MAYBE_VALUES = st.none() | VALUES

_Copy = tuple[dict[int, int], frozenset[int], int | None]


class TimelineMachine(RuleBasedStateMachine):
    """Drives one registry holding a map, a set and a value, mirrored by the model."""

    @initialize()
    def start(self) -> None:
        self.registry = snapshot_registry.SnapshotRegistry()
        self.tmap: timeline_hash_map.TimelineHashMap[int, int] = timeline_hash_map.TimelineHashMap(
            self.registry
        )
        self.tset: timeline_hash_set.TimelineHashSet[int] = timeline_hash_set.TimelineHashSet(
            self.registry
        )
        self.tvalue: timeline_value.TimelineValue[int | None] = timeline_value.TimelineValue(
            self.registry, None
        )
        self.model_map: dict[int, int] = {}
        self.model_set: set[int] = set()
        self.model_value: int | None = None
        self.copies: dict[int, _Copy] = {}

    def _kept(self) -> list[int]:
        return list(self.copies)

    # -- writes at LATEST ------------------------------------------------------

    @rule(key=KEYS, value=VALUES)
    def put(self, key: int, value: int) -> None:
        self.tmap[key] = value
        self.model_map[key] = value

    @rule(key=KEYS)
    def remove(self, key: int) -> None:
        if key in self.model_map:
            del self.tmap[key]
            del self.model_map[key]
        else:
            with pytest.raises(KeyError):
                del self.tmap[key]

    @rule()
    def clear_map(self) -> None:
        self.tmap.clear()
        self.model_map.clear()

    @rule(element=KEYS)
    def set_add(self, element: int) -> None:
        self.tset.add(element)
        self.model_set.add(element)

    @rule(element=KEYS)
    def set_discard(self, element: int) -> None:
        self.tset.discard(element)
        self.model_set.discard(element)

    @rule()
    def set_clear(self) -> None:
        self.tset.clear()
        self.model_set.clear()

    @rule(value=MAYBE_VALUES)
    def value_set(self, value: int | None) -> None:
        self.tvalue.set(value)
        self.model_value = value

    # -- snapshots -------------------------------------------------------------

    @rule(step=st.integers(min_value=0, max_value=3))
    def create_snapshot(self, step: int) -> None:
        latest = self.registry.latest_epoch()
        if latest is not None and step == 0:
            before = self.registry.latest_snapshot
            assert self.registry.get_or_create_snapshot(latest) is before
            return  # idempotent: the existing snapshot keeps its (older) state
        epoch = (-2 if latest is None else latest) + max(step, 1)
        assert self.registry.get_or_create_snapshot(epoch).epoch == epoch
        self.copies[epoch] = (dict(self.model_map), frozenset(self.model_set), self.model_value)

    @precondition(lambda self: len(self.copies) >= 1)
    @rule(back=st.integers(min_value=1, max_value=3))
    def create_older_snapshot_is_rejected(self, back: int) -> None:
        latest = self.registry.latest_epoch()
        assert latest is not None
        with pytest.raises(errors.SnapshotEpochError):
            self.registry.get_or_create_snapshot(latest - back)

    @precondition(lambda self: len(self.copies) >= 1)
    @rule(data=st.data())
    def revert(self, data: st.DataObject) -> None:
        epoch = data.draw(st.sampled_from(self._kept()), label="revert_to")
        self.registry.revert_to_snapshot(epoch)
        copied_map, copied_set, copied_value = self.copies[epoch]
        self.model_map = dict(copied_map)
        self.model_set = set(copied_set)
        self.model_value = copied_value
        self.copies = {e: c for e, c in self.copies.items() if e <= epoch}

    @precondition(lambda self: len(self.copies) >= 1)
    @rule(data=st.data(), past=st.integers(min_value=0, max_value=1))
    def delete_snapshots_up_to(self, data: st.DataObject, past: int) -> None:
        epoch = data.draw(st.sampled_from(self._kept()), label="delete_up_to") + past
        self.registry.delete_snapshots_up_to(epoch)
        self.copies = {e: c for e, c in self.copies.items() if e >= epoch}

    @precondition(lambda self: len(self.copies) >= 1)
    @rule(data=st.data())
    def delete_snapshot(self, data: st.DataObject) -> None:
        epoch = data.draw(st.sampled_from(self._kept()), label="delete")
        self.registry.delete_snapshot(epoch)
        del self.copies[epoch]

    @rule()
    def reset(self) -> None:
        self.registry.reset()
        self.model_map.clear()
        self.model_set.clear()
        self.model_value = None
        self.copies.clear()

    # -- reads -----------------------------------------------------------------

    @precondition(lambda self: len(self.copies) >= 1)
    @rule(data=st.data(), key=KEYS)
    def read_at_kept_epoch(self, data: st.DataObject, key: int) -> None:
        epoch = data.draw(st.sampled_from(self._kept()), label="read_at")
        copied_map, copied_set, copied_value = self.copies[epoch]
        assert self.tmap.get(key, epoch=epoch) == copied_map.get(key)
        assert self.tmap.contains(key, epoch) == (key in copied_map)
        assert (key in self.tmap.at(epoch)) == (key in copied_map)
        assert self.tset.contains(key, epoch) == (key in copied_set)
        assert self.tvalue.get(epoch) == copied_value

    @rule(epoch=st.integers(min_value=-3, max_value=60))
    def read_at_unknown_epoch_is_rejected(self, epoch: int) -> None:
        if epoch in self.copies:
            return
        with pytest.raises(errors.SnapshotNotFoundError):
            self.tmap.get(0, epoch=epoch)
        with pytest.raises(errors.SnapshotNotFoundError):
            self.tset.len_at(epoch)
        with pytest.raises(errors.SnapshotNotFoundError):
            self.tvalue.get(epoch)

    # -- invariants --------------------------------------------------------------

    @invariant()
    def latest_state_equals_model(self) -> None:
        assert dict(self.tmap) == self.model_map
        assert self.tmap.len_at() == len(self.model_map)
        assert set(self.tset) == self.model_set
        assert self.tvalue.get() == self.model_value
        assert self.registry.epochs() == self._kept()

    @invariant()
    def every_kept_snapshot_equals_its_copy(self) -> None:
        for epoch, (copied_map, copied_set, copied_value) in self.copies.items():
            items = list(self.tmap.items(epoch))
            assert len(items) == len(copied_map), epoch  # no key yielded twice
            assert dict(items) == copied_map, epoch
            assert self.tmap.len_at(epoch) == len(copied_map), epoch
            assert set(self.tset.at(epoch)) == copied_set, epoch
            assert self.tset.len_at(epoch) == len(copied_set), epoch
            assert self.tvalue.get(epoch) == copied_value, epoch

    @invariant()
    def deltas_exist_only_for_kept_epochs_in_order(self) -> None:
        kept = set(self.copies)
        for structure in (self.tmap, self.tset, self.tvalue):
            delta_epochs = list(structure._deltas)
            assert delta_epochs == sorted(delta_epochs)
            assert set(delta_epochs) <= kept

    @invariant()
    def changed_index_counts_the_deltas_holding_each_key(self) -> None:
        for table in (self.tmap, self.tset):
            expected: dict[int, int] = {}
            for delta in table._deltas.values():
                for key in delta:
                    expected[key] = expected.get(key, 0) + 1
            assert table._changed == expected


TimelineMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_timeline_matches_full_copy_model = TimelineMachine.TestCase
