"""TimelineHashMap: a MutableMapping whose state at every kept snapshot stays readable."""

from __future__ import annotations

import pytest

from kraftlog.timeline import errors, snapshot_registry, timeline_hash_map


def _new() -> tuple[
    snapshot_registry.SnapshotRegistry, timeline_hash_map.TimelineHashMap[str, int]
]:
    registry = snapshot_registry.SnapshotRegistry()
    return registry, timeline_hash_map.TimelineHashMap(registry)


def test_without_snapshots_it_behaves_like_a_dict() -> None:
    registry, tmap = _new()
    tmap["a"] = 1
    tmap.update({"b": 2, "c": 3})
    assert tmap.setdefault("d", 4) == 4
    del tmap["c"]
    assert tmap.pop("b") == 2
    assert tmap.pop("zz", -1) == -1
    assert dict(tmap) == {"a": 1, "d": 4}
    assert len(tmap) == 2 and "a" in tmap and "c" not in tmap
    assert tmap.get("a") == 1 and tmap.get("c") is None and tmap.get("c", 9) == 9
    assert tmap == {"a": 1, "d": 4}
    assert list(tmap.keys()) == ["a", "d"] and list(tmap.values()) == [1, 4]
    assert tmap.popitem() == ("d", 4)  # LIFO like dict
    with pytest.raises(KeyError):
        del tmap["missing"]
    with pytest.raises(KeyError):
        _ = tmap["missing"]
    tmap.clear()
    assert len(tmap) == 0
    with pytest.raises(KeyError, match="empty"):
        tmap.popitem()
    assert registry.epochs() == []


def test_reads_at_a_snapshot_see_the_state_when_it_was_taken() -> None:
    registry, tmap = _new()
    tmap["a"] = 1
    tmap["b"] = 2
    registry.get_or_create_snapshot(100)
    tmap["a"] = 10
    del tmap["b"]
    tmap["c"] = 3
    assert tmap.get("a", epoch=100) == 1
    assert tmap.get("b", epoch=100) == 2
    assert tmap.get("c", epoch=100) is None
    assert tmap.get("c", -1, epoch=100) == -1
    assert tmap.contains("b", 100) and not tmap.contains("b")
    assert not tmap.contains("c", 100) and tmap.contains("c")
    assert tmap.len_at(100) == 2 and tmap.len_at() == 2
    assert dict(tmap.items(100)) == {"a": 1, "b": 2}
    assert sorted(tmap.keys(100)) == ["a", "b"]
    assert sorted(tmap.values(100)) == [1, 2]
    assert dict(tmap) == {"a": 10, "c": 3}


def test_a_key_changed_many_times_between_snapshots_is_copied_once() -> None:
    registry, tmap = _new()
    tmap["a"] = 0
    registry.get_or_create_snapshot(1)
    for value in range(1, 50):
        tmap["a"] = value
    assert tmap._deltas == {1: {"a": 0}}
    assert tmap.get("a", epoch=1) == 0


def test_snapshots_copy_nothing_when_nothing_changes() -> None:
    registry, tmap = _new()
    for index in range(1000):
        tmap[str(index)] = index
    for epoch in range(100):
        registry.get_or_create_snapshot(epoch)
    assert tmap._deltas == {}
    tmap["5"] = -5
    assert tmap._deltas == {99: {"5": 5}}  # only the newest snapshot records the change
    assert tmap.get("5", epoch=0) == 5
    assert tmap.len_at(0) == 1000


def test_each_snapshot_sees_its_own_value_across_several_snapshots() -> None:
    registry, tmap = _new()
    history: dict[int, dict[str, int]] = {}
    for epoch in range(10):
        tmap[f"k{epoch % 3}"] = epoch
        if epoch % 4 == 3:
            del tmap["k0"]
        registry.get_or_create_snapshot(epoch)
        history[epoch] = dict(tmap)
    tmap["late"] = 1
    for epoch, expected in history.items():
        assert dict(tmap.items(epoch)) == expected, epoch
        assert tmap.len_at(epoch) == len(expected)
        for key in ("k0", "k1", "k2", "late"):
            assert tmap.get(key, epoch=epoch) == expected.get(key)


def test_clear_after_a_snapshot_keeps_the_snapshot_view() -> None:
    registry, tmap = _new()
    tmap.update({"a": 1, "b": 2})
    registry.get_or_create_snapshot(1)
    tmap["a"] = 5
    tmap["new"] = 6
    tmap.clear()
    assert dict(tmap) == {}
    assert dict(tmap.items(1)) == {"a": 1, "b": 2}
    tmap["b"] = 7
    registry.revert_to_snapshot(1)
    assert dict(tmap) == {"a": 1, "b": 2}


def test_reading_at_an_epoch_without_a_snapshot_is_a_clear_error() -> None:
    registry, tmap = _new()
    registry.get_or_create_snapshot(1)
    registry.get_or_create_snapshot(2)
    registry.delete_snapshots_up_to(2)
    for read in (
        lambda: tmap.get("a", epoch=1),
        lambda: tmap.contains("a", 1),
        lambda: tmap.len_at(1),
        lambda: tmap.items(1),
        lambda: tmap.at(7),
    ):
        with pytest.raises(errors.SnapshotNotFoundError, match=r"epoch (1|7).*epochs are: 2"):
            read()


def test_a_view_fails_once_its_snapshot_is_gone() -> None:
    registry, tmap = _new()
    tmap["a"] = 1
    registry.get_or_create_snapshot(1)
    view = tmap.at(1)
    tmap["a"] = 2
    assert view["a"] == 1 and "a" in view and len(view) == 1 and view.get("b") is None
    registry.get_or_create_snapshot(2)
    registry.delete_snapshots_up_to(2)
    with pytest.raises(errors.SnapshotNotFoundError):
        _ = view["a"]
    with pytest.raises(errors.SnapshotNotFoundError):
        list(view)


def test_view_indexing_raises_key_error_for_absent_keys() -> None:
    registry, tmap = _new()
    registry.get_or_create_snapshot(1)
    tmap["late"] = 1
    view = tmap.at(1)
    with pytest.raises(KeyError):
        _ = view["late"]
    assert "late" not in view
    assert view == {}


def test_changing_the_map_while_iterating_a_snapshot_raises_runtime_error() -> None:
    registry, tmap = _new()
    tmap.update({"a": 1, "b": 2, "c": 3})
    registry.get_or_create_snapshot(1)
    tmap["a"] = 9
    iterator = iter(tmap.items(1))
    next(iterator)
    tmap["b"] = 10  # even a value change: it would make the rest of the view wrong
    with pytest.raises(RuntimeError, match="changed during iteration at epoch 1"):
        next(iterator)


def test_changing_the_map_while_iterating_latest_raises_like_dict() -> None:
    _, tmap = _new()
    tmap.update({"a": 1, "b": 2})
    with pytest.raises(RuntimeError):
        for key in tmap:
            tmap[key + "x"] = 0


def test_revert_while_iterating_a_snapshot_raises_runtime_error() -> None:
    registry, tmap = _new()
    tmap.update({"a": 1, "b": 2})
    registry.get_or_create_snapshot(1)
    registry.get_or_create_snapshot(2)
    tmap["c"] = 3
    iterator = iter(tmap.keys(1))
    next(iterator)
    registry.revert_to_snapshot(2)
    with pytest.raises(RuntimeError):
        next(iterator)


def test_values_can_be_none_and_are_not_confused_with_absence() -> None:
    registry = snapshot_registry.SnapshotRegistry()
    tmap: timeline_hash_map.TimelineHashMap[str, int | None] = timeline_hash_map.TimelineHashMap(
        registry
    )
    tmap["a"] = None
    registry.get_or_create_snapshot(1)
    del tmap["a"]
    assert tmap.contains("a", 1) and not tmap.contains("a")
    assert tmap.get("a", 5, epoch=1) is None
    assert dict(tmap.items(1)) == {"a": None}
    registry.revert_to_snapshot(1)
    assert dict(tmap) == {"a": None}


def test_repr_is_bounded() -> None:
    registry, tmap = _new()
    for index in range(10_000):
        tmap[str(index)] = index
    registry.get_or_create_snapshot(1)
    assert repr(tmap) == "TimelineHashMap(size=10000, deltas=0)"
    assert repr(tmap.at(1)) == "TimelineMapView(epoch=1, size=10000)"
