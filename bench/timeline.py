"""Micro-benchmark of the timeline package: snapshot + revert cost on 100,000 keys.

Run: ``.venv/bin/python bench/timeline.py``. Not a test. The anchor is the
naive MVCC a controller could use instead: a full ``dict.copy()`` per
snapshot. Each line prints the timeline cost, the anchor's cost, and the ratio
(anchor / timeline, so > 1 means the timeline is faster). The controller
pattern being modelled: replay a few records, snapshot at their offset,
occasionally revert to the committed offset.
"""

from __future__ import annotations

import time

from kraftlog.timeline import snapshot_registry, timeline_hash_map

KEYS = 100_000
ROUNDS = 200
CHANGES_PER_SNAPSHOT = 5


def _timeline_snapshot_and_revert() -> float:
    registry = snapshot_registry.SnapshotRegistry()
    partitions: timeline_hash_map.TimelineHashMap[int, int] = timeline_hash_map.TimelineHashMap(
        registry
    )
    for key in range(KEYS):
        partitions[key] = key
    start = time.perf_counter()
    for round_index in range(ROUNDS):
        committed = round_index * 2
        registry.get_or_create_snapshot(committed)
        for change in range(CHANGES_PER_SNAPSHOT):
            partitions[(round_index * 7919 + change) % KEYS] = -1
        registry.get_or_create_snapshot(committed + 1)
        partitions[round_index] = -2
        registry.revert_to_snapshot(committed)
        registry.delete_snapshots_up_to(committed)
    return time.perf_counter() - start


def _copy_snapshot_and_revert() -> float:
    partitions = {key: key for key in range(KEYS)}
    start = time.perf_counter()
    for round_index in range(ROUNDS):
        snapshots = {round_index * 2: partitions.copy()}
        for change in range(CHANGES_PER_SNAPSHOT):
            partitions[(round_index * 7919 + change) % KEYS] = -1
        snapshots[round_index * 2 + 1] = partitions.copy()
        partitions[round_index] = -2
        partitions = snapshots[round_index * 2]
    return time.perf_counter() - start


def _timeline_writes_with_snapshot_per_append() -> float:
    registry = snapshot_registry.SnapshotRegistry()
    partitions: timeline_hash_map.TimelineHashMap[int, int] = timeline_hash_map.TimelineHashMap(
        registry
    )
    start = time.perf_counter()
    for offset in range(KEYS):
        partitions[offset] = offset
        registry.get_or_create_snapshot(offset)
        if offset % 100 == 99:  # a commit every 100 appends drops the history below it
            registry.delete_snapshots_up_to(offset - 50)
    return time.perf_counter() - start


def _plain_dict_writes() -> float:
    partitions: dict[int, int] = {}
    start = time.perf_counter()
    for offset in range(KEYS):
        partitions[offset] = offset
    return time.perf_counter() - start


def _plain_dict_reads() -> float:
    partitions = {key: key for key in range(KEYS)}
    start = time.perf_counter()
    for key in range(KEYS):
        partitions.get(key)
    return time.perf_counter() - start


def _committed_reads(in_flight: int) -> float:
    registry = snapshot_registry.SnapshotRegistry()
    partitions: timeline_hash_map.TimelineHashMap[int, int] = timeline_hash_map.TimelineHashMap(
        registry
    )
    for key in range(KEYS):
        partitions[key] = key
    registry.get_or_create_snapshot(0)
    for offset in range(1, in_flight + 1):
        partitions[offset] = -offset
        registry.get_or_create_snapshot(offset)
    start = time.perf_counter()
    for key in range(KEYS):
        partitions.get(key, epoch=0)
    return time.perf_counter() - start


def _print(name: str, timeline_s: float, anchor_s: float, anchor: str) -> None:
    print(
        f"{name:<48} timeline {timeline_s * 1e3:9.1f} ms   {anchor:<22} {anchor_s * 1e3:9.1f} ms"
        f"   ratio {anchor_s / timeline_s:8.2f}x"
    )


def main() -> None:
    _print(
        f"snapshot+{CHANGES_PER_SNAPSHOT} changes+revert x{ROUNDS} on {KEYS} keys",
        _timeline_snapshot_and_revert(),
        _copy_snapshot_and_revert(),
        "dict.copy() snapshots",
    )
    _print(
        f"{KEYS} puts, snapshot after each",
        _timeline_writes_with_snapshot_per_append(),
        _plain_dict_writes(),
        "plain dict puts",
    )
    for in_flight in (0, 10, 100):
        _print(
            f"{KEYS} committed reads, {in_flight} snapshots in flight",
            _committed_reads(in_flight),
            _plain_dict_reads(),
            "plain dict gets",
        )


if __name__ == "__main__":
    main()
