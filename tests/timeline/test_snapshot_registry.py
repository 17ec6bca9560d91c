"""SnapshotRegistry: creating, reading, deleting and reverting in-memory snapshots."""

from __future__ import annotations

import pytest

from kraftlog import errors as kraftlog_errors
from kraftlog.timeline import errors, snapshot_registry, timeline_hash_map, timeline_value


def _registry_with_map() -> tuple[
    snapshot_registry.SnapshotRegistry, timeline_hash_map.TimelineHashMap[str, int]
]:
    registry = snapshot_registry.SnapshotRegistry()
    return registry, timeline_hash_map.TimelineHashMap(registry)


def test_new_registry_has_no_snapshots() -> None:
    registry = snapshot_registry.SnapshotRegistry()
    assert registry.epochs() == []
    assert registry.latest_epoch() is None
    assert registry.latest_snapshot is None
    assert not registry.has_snapshot(0)
    assert len(registry) == 0


def test_snapshots_are_kept_in_epoch_order_and_minus_one_is_a_valid_epoch() -> None:
    registry = snapshot_registry.SnapshotRegistry()
    for epoch in (-1, 0, 7, 100):
        snapshot = registry.get_or_create_snapshot(epoch)
        assert snapshot.epoch == epoch
    assert registry.epochs() == [-1, 0, 7, 100]
    assert registry.latest_epoch() == 100
    assert registry.has_snapshot(7) and not registry.has_snapshot(8)
    assert registry.snapshot(7).epoch == 7


def test_get_or_create_at_the_latest_epoch_returns_the_same_snapshot() -> None:
    registry = snapshot_registry.SnapshotRegistry()
    first = registry.get_or_create_snapshot(3)
    assert registry.get_or_create_snapshot(3) is first
    assert registry.epochs() == [3]


def test_creating_an_older_snapshot_is_rejected_with_the_kept_epochs() -> None:
    registry = snapshot_registry.SnapshotRegistry()
    registry.get_or_create_snapshot(3)
    registry.get_or_create_snapshot(9)
    with pytest.raises(errors.SnapshotEpochError, match=r"epoch 5.*newer epoch 9.*3, 9") as info:
        registry.get_or_create_snapshot(5)
    assert info.value.epoch == 5
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, kraftlog_errors.KraftlogError)
    with pytest.raises(errors.SnapshotEpochError):
        registry.get_or_create_snapshot(3)  # an older, still-kept epoch is not "latest"
    assert registry.epochs() == [3, 9]


def test_snapshot_at_latest_epoch_sentinel_is_rejected() -> None:
    registry = snapshot_registry.SnapshotRegistry()
    with pytest.raises(errors.SnapshotEpochError, match="LATEST_EPOCH"):
        registry.get_or_create_snapshot(snapshot_registry.LATEST_EPOCH)


def test_unknown_epoch_errors_name_the_epoch_and_are_not_key_errors() -> None:
    registry = snapshot_registry.SnapshotRegistry()
    registry.get_or_create_snapshot(1)
    with pytest.raises(
        errors.SnapshotNotFoundError, match=r"revert at epoch 2.*epochs are: 1"
    ) as info:
        registry.revert_to_snapshot(2)
    assert info.value.epoch == 2 and info.value.kept_epochs == (1,)
    assert isinstance(info.value, LookupError) and not isinstance(info.value, KeyError)
    with pytest.raises(errors.SnapshotNotFoundError, match="delete a snapshot at epoch 0"):
        registry.delete_snapshot(0)
    with pytest.raises(errors.SnapshotNotFoundError, match="read at epoch 5"):
        registry.snapshot(5)
    registry.check_readable(snapshot_registry.LATEST_EPOCH)
    with pytest.raises(errors.SnapshotNotFoundError):
        registry.check_readable(4)


def test_error_message_elides_a_long_list_of_epochs() -> None:
    registry = snapshot_registry.SnapshotRegistry()
    for epoch in range(1000):
        registry.get_or_create_snapshot(epoch)
    with pytest.raises(errors.SnapshotNotFoundError) as info:
        registry.snapshot(5000)
    message = str(info.value)
    assert "0, 1, 2" in message and "997, 998, 999" in message and "(984 more)" in message
    assert len(message) < 300


def test_delete_snapshots_up_to_keeps_the_target_epoch() -> None:
    registry = snapshot_registry.SnapshotRegistry()
    for epoch in (1, 2, 3, 5):
        registry.get_or_create_snapshot(epoch)
    registry.delete_snapshots_up_to(3)
    assert registry.epochs() == [3, 5]
    registry.delete_snapshots_up_to(4)  # need not be a kept epoch
    assert registry.epochs() == [5]
    registry.delete_snapshots_up_to(100)
    assert registry.epochs() == []
    assert registry.latest_snapshot is None
    registry.get_or_create_snapshot(2)  # an empty registry accepts any epoch again
    assert registry.epochs() == [2]


def test_delete_snapshot_in_the_middle_keeps_the_neighbours_readable() -> None:
    registry, tmap = _registry_with_map()
    tmap["a"] = 1
    registry.get_or_create_snapshot(1)
    tmap["a"] = 2
    registry.get_or_create_snapshot(2)
    tmap["a"] = 3
    tmap["b"] = 30
    registry.get_or_create_snapshot(3)
    tmap["a"] = 4
    registry.delete_snapshot(2)
    assert registry.epochs() == [1, 3]
    assert dict(tmap.items(1)) == {"a": 1}
    assert dict(tmap.items(3)) == {"a": 3, "b": 30}
    assert dict(tmap) == {"a": 4, "b": 30}
    registry.delete_snapshot(3)  # the latest: later changes are recorded against epoch 1
    tmap["b"] = 31
    assert dict(tmap.items(1)) == {"a": 1}
    registry.revert_to_snapshot(1)
    assert dict(tmap) == {"a": 1}


def test_deleting_a_middle_snapshot_the_map_did_not_change_in_keeps_delta_order() -> None:
    registry, tmap = _registry_with_map()
    registry.get_or_create_snapshot(1)
    tmap["x"] = 1
    registry.get_or_create_snapshot(2)
    registry.get_or_create_snapshot(3)
    tmap["x"] = 2
    registry.get_or_create_snapshot(4)
    tmap["x"] = 3
    # Deleting 3 moves its delta to epoch 2, which must stay ordered before 4.
    registry.delete_snapshot(3)
    assert tmap.get("x", epoch=1) is None
    assert tmap.get("x", epoch=2) == 1
    assert tmap.get("x", epoch=4) == 2
    registry.revert_to_snapshot(2)
    assert dict(tmap) == {"x": 1}


def test_revert_restores_every_structure_and_drops_newer_snapshots() -> None:
    registry, tmap = _registry_with_map()
    counter = timeline_value.TimelineInteger(registry)
    tmap["a"] = 1
    registry.get_or_create_snapshot(10)
    tmap["a"] = 2
    tmap["b"] = 2
    counter.increment()
    registry.get_or_create_snapshot(11)
    del tmap["a"]
    counter.increment()
    registry.get_or_create_snapshot(12)
    registry.revert_to_snapshot(10)
    assert registry.epochs() == [10]
    assert dict(tmap) == {"a": 1}
    assert counter.get() == 0
    # The target snapshot is kept with no changes since it; new epochs may reuse dropped ones.
    tmap["c"] = 3
    registry.get_or_create_snapshot(11)
    assert dict(tmap.items(10)) == {"a": 1}
    assert dict(tmap.items(11)) == {"a": 1, "c": 3}


def test_revert_to_the_latest_snapshot_undoes_only_changes_since_it() -> None:
    registry, tmap = _registry_with_map()
    tmap["a"] = 1
    registry.get_or_create_snapshot(1)
    tmap["a"] = 2
    registry.get_or_create_snapshot(2)
    tmap["a"] = 3
    tmap["b"] = 4
    registry.revert_to_snapshot(2)
    assert dict(tmap) == {"a": 2}
    assert registry.epochs() == [1, 2]
    assert dict(tmap.items(1)) == {"a": 1}


def test_reset_drops_snapshots_and_empties_every_registered_structure() -> None:
    registry, tmap = _registry_with_map()
    counter = timeline_value.TimelineInteger(registry, initial=5)
    tmap["a"] = 1
    counter.increment()
    registry.get_or_create_snapshot(1)
    tmap["b"] = 2
    registry.reset()
    assert registry.epochs() == []
    assert dict(tmap) == {}
    assert counter.get() == 5
    tmap["c"] = 3
    registry.get_or_create_snapshot(0)
    assert dict(tmap.items(0)) == {"c": 3}


class _RecordingRevertable:
    """A third-party Revertable: proves the protocol is enough to take part."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int | None]] = []

    def revert_snapshot_delta(self, epoch: int) -> None:
        self.calls.append(("revert", epoch, None))

    def merge_snapshot_delta(self, epoch: int, into_epoch: int | None) -> None:
        self.calls.append(("merge", epoch, into_epoch))

    def reset(self) -> None:
        self.calls.append(("reset", 0, None))


def test_custom_revertable_is_called_once_per_attached_snapshot_newest_first() -> None:
    registry = snapshot_registry.SnapshotRegistry()
    custom = _RecordingRevertable()
    registry.register(custom)
    for epoch in (1, 2, 3, 4):
        registry.get_or_create_snapshot(epoch).attach(custom)
    registry.snapshot(4).attach(custom)  # idempotent
    registry.delete_snapshot(2)
    registry.delete_snapshots_up_to(2)
    registry.revert_to_snapshot(3)
    registry.reset()
    assert custom.calls == [
        ("merge", 2, 1),
        ("merge", 1, None),
        ("revert", 4, None),
        ("revert", 3, None),
        ("reset", 0, None),
    ]


def test_deleting_a_newer_snapshot_keeps_the_older_snapshots_value_for_a_shared_key() -> None:
    # Pinned from the stateful test: both snapshots recorded key 0 and the
    # newer delta is not larger, so the merge must keep the older entry.
    registry, tmap = _registry_with_map()
    tmap["k"] = 0
    registry.get_or_create_snapshot(-2)
    tmap.clear()
    registry.get_or_create_snapshot(-1)
    tmap["k"] = 0
    registry.delete_snapshot(-1)
    assert tmap._changed == {"k": 1}  # the merged delta holds "k" once
    assert dict(tmap.items(-2)) == {"k": 0}
    assert tmap.len_at(-2) == 1
    registry.revert_to_snapshot(-2)
    assert dict(tmap) == {"k": 0}
