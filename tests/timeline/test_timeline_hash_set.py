"""TimelineHashSet: a MutableSet whose state at every kept snapshot stays readable."""

from __future__ import annotations

import pytest

from kraftlog.timeline import errors, snapshot_registry, timeline_hash_set


def _new() -> tuple[snapshot_registry.SnapshotRegistry, timeline_hash_set.TimelineHashSet[int]]:
    registry = snapshot_registry.SnapshotRegistry()
    return registry, timeline_hash_set.TimelineHashSet(registry)


def test_without_snapshots_it_behaves_like_a_set() -> None:
    _, tset = _new()
    tset.add(1)
    tset.add(2)
    tset.add(2)
    tset |= {3, 4}
    tset.discard(4)
    tset.discard(40)
    tset.remove(3)
    with pytest.raises(KeyError):
        tset.remove(3)
    assert tset == {1, 2}
    assert len(tset) == 2 and 1 in tset and 3 not in tset
    assert (tset | {9}) == {1, 2, 9} and isinstance(tset & {1}, set)
    assert tset.pop() == 2  # LIFO
    tset.clear()
    assert len(tset) == 0
    with pytest.raises(KeyError, match="empty"):
        tset.pop()


def test_reads_at_a_snapshot_see_the_membership_when_it_was_taken() -> None:
    registry, tset = _new()
    tset.add(1)
    tset.add(2)
    registry.get_or_create_snapshot(5)
    tset.discard(1)
    tset.add(3)
    assert tset.contains(1, 5) and not tset.contains(1)
    assert not tset.contains(3, 5) and tset.contains(3)
    assert tset.len_at(5) == 2
    assert set(tset.at(5)) == {1, 2}
    assert tset.at(5) == {1, 2}
    assert 2 in tset.at(5) and 3 not in tset.at(5)
    assert set(tset) == {2, 3}


def test_adding_a_present_element_records_nothing() -> None:
    registry, tset = _new()
    tset.add(1)
    registry.get_or_create_snapshot(1)
    tset.add(1)
    tset.discard(2)
    assert tset._deltas == {}


def test_clear_and_revert_restore_membership() -> None:
    registry, tset = _new()
    for element in range(5):
        tset.add(element)
    registry.get_or_create_snapshot(1)
    tset.discard(0)
    tset.add(10)
    registry.get_or_create_snapshot(2)
    tset.clear()
    assert set(tset.at(1)) == {0, 1, 2, 3, 4}
    assert set(tset.at(2)) == {1, 2, 3, 4, 10}
    registry.revert_to_snapshot(2)
    assert set(tset) == {1, 2, 3, 4, 10}
    registry.revert_to_snapshot(1)
    assert set(tset) == {0, 1, 2, 3, 4}


def test_unknown_epoch_and_iteration_while_changing_are_errors() -> None:
    registry, tset = _new()
    tset.add(1)
    tset.add(2)
    registry.get_or_create_snapshot(1)
    with pytest.raises(errors.SnapshotNotFoundError, match="epoch 0"):
        tset.contains(1, 0)
    with pytest.raises(errors.SnapshotNotFoundError):
        tset.at(0)
    iterator = iter(tset.at(1))
    next(iterator)
    tset.add(3)
    with pytest.raises(RuntimeError, match="TimelineHashSet changed during iteration"):
        next(iterator)
