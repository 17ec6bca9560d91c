"""TimelineValue and TimelineInteger: one value whose past states stay readable."""

from __future__ import annotations

import pytest

from kraftlog.timeline import errors, snapshot_registry, timeline_value


def test_value_reads_at_each_snapshot_and_reverts() -> None:
    registry = snapshot_registry.SnapshotRegistry()
    value: timeline_value.TimelineValue[str | None] = timeline_value.TimelineValue(registry, None)
    registry.get_or_create_snapshot(1)
    value.set("a")
    value.set("b")  # only the first set after a snapshot saves the old value
    registry.get_or_create_snapshot(2)
    registry.get_or_create_snapshot(3)
    value.set("c")
    assert value._deltas == {1: None, 3: "b"}
    assert [value.get(epoch) for epoch in (1, 2, 3)] == [None, "b", "b"]
    assert value.get() == "c"
    registry.revert_to_snapshot(2)
    assert value.get() == "b"
    registry.revert_to_snapshot(1)
    assert value.get() is None


def test_deleting_snapshots_keeps_older_values_readable() -> None:
    registry = snapshot_registry.SnapshotRegistry()
    value = timeline_value.TimelineValue(registry, 0)
    registry.get_or_create_snapshot(1)
    value.set(1)
    registry.get_or_create_snapshot(2)
    value.set(2)
    registry.get_or_create_snapshot(3)
    value.set(3)
    registry.delete_snapshot(2)
    assert value.get(1) == 0 and value.get(3) == 2
    registry.delete_snapshot(3)
    assert value.get(1) == 0
    registry.delete_snapshots_up_to(2)
    assert value._deltas == {}
    with pytest.raises(errors.SnapshotNotFoundError, match="read at epoch 1"):
        value.get(1)


def test_integer_increments_and_decrements_and_resets_to_initial() -> None:
    registry = snapshot_registry.SnapshotRegistry()
    counter = timeline_value.TimelineInteger(registry, initial=10)
    assert counter.increment() == 11
    registry.get_or_create_snapshot(0)
    assert counter.increment(5) == 16
    assert counter.decrement(2) == 14
    assert counter.get(0) == 11
    assert repr(counter) == "TimelineInteger(14, deltas=1)"
    registry.reset()
    assert counter.get() == 10
