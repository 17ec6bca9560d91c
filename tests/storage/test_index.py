"""Offset and time index files: Kafka's byte format, lookups, truncation, corruption detection."""

from __future__ import annotations

import array
import pathlib
import struct

import pytest

from kraftlog.errors import CorruptFileError, InvariantViolation
from kraftlog.storage import index


def _offset_index(tmp_path: pathlib.Path, base: int = 100, max_bytes: int = 1024) -> index.OffsetIndex:
    idx = index.OffsetIndex(str(tmp_path / "00000000000000000100.index"), base, max_index_bytes=max_bytes)
    idx.reset()
    return idx


def _append(idx: index.OffsetIndex, entries: list[tuple[int, int]]) -> None:
    idx.append_all(array.array("i", [o - idx.base_offset for o, _ in entries]),
                   array.array("i", [p for _, p in entries]))
    idx.write_pending()


def test_offset_index_file_is_kafka_format_relative_offset_and_position_big_endian(tmp_path: pathlib.Path) -> None:
    idx = _offset_index(tmp_path)
    _append(idx, [(105, 4200), (111, 9000)])
    idx.close()
    data = pathlib.Path(idx.path).read_bytes()
    assert data == struct.pack(">iiii", 5, 4200, 11, 9000)


def test_offset_index_lookup_returns_greatest_entry_at_or_below_target(tmp_path: pathlib.Path) -> None:
    idx = _offset_index(tmp_path)
    _append(idx, [(105, 4200), (111, 9000), (120, 13000)])
    assert idx.lookup(99) == (100, 0)
    assert idx.lookup(104) == (100, 0)
    assert idx.lookup(105) == (105, 4200)
    assert idx.lookup(119) == (111, 9000)
    assert idx.lookup(10**12) == (120, 13000)
    assert idx.lookup_by_position(8999) == (105, 4200)
    assert idx.lookup_by_position(9000) == (111, 9000)
    assert idx.lookup_by_position(10) == (100, 0)


def test_offset_index_truncate_drops_entries_at_and_after_offset(tmp_path: pathlib.Path) -> None:
    idx = _offset_index(tmp_path)
    _append(idx, [(105, 4200), (111, 9000), (120, 13000)])
    idx.truncate_to(111)
    assert idx.entries() == [(105, 4200)]
    assert pathlib.Path(idx.path).stat().st_size == 8
    idx.truncate_to(50)
    assert idx.entries() == []


def test_offset_index_rejects_out_of_order_and_overfull_appends(tmp_path: pathlib.Path) -> None:
    idx = _offset_index(tmp_path, max_bytes=16)
    _append(idx, [(105, 4200)])
    with pytest.raises(InvariantViolation, match="does not follow"):
        _append(idx, [(104, 5000)])
    _append(idx, [(106, 5000)])
    assert idx.is_full
    with pytest.raises(InvariantViolation, match="exceed"):
        _append(idx, [(107, 6000)])


def test_offset_index_load_round_trips(tmp_path: pathlib.Path) -> None:
    idx = _offset_index(tmp_path)
    _append(idx, [(105, 4200), (111, 9000)])
    idx.close()
    loaded = index.OffsetIndex.load(idx.path, 100, max_index_bytes=1024, log_size=10000)
    assert loaded.entries() == [(105, 4200), (111, 9000)]
    assert loaded.last_entry == (111, 9000)


@pytest.mark.parametrize(
    ("data", "log_size", "complaint"),
    [
        (struct.pack(">ii", 5, 4200) + b"\x00\x00\x00", 10000, "not a multiple"),
        (struct.pack(">iiii", 5, 4200, 5, 9000), 10000, "does not follow"),
        (struct.pack(">iiii", 5, 4200, 9, 100), 10000, "does not follow"),
        (struct.pack(">ii", 5, 4200), 4000, "points at position 4200"),
        (struct.pack(">ii", -3, 10), 10000, "does not follow"),
    ],
    ids=["torn-entry", "repeated-offset", "position-goes-back", "past-log-end", "negative-offset"],
)
def test_offset_index_load_detects_corruption(tmp_path: pathlib.Path, data: bytes, log_size: int,
                                              complaint: str) -> None:
    path = tmp_path / "00000000000000000100.index"
    path.write_bytes(data)
    with pytest.raises(CorruptFileError, match=complaint) as info:
        index.OffsetIndex.load(str(path), 100, max_index_bytes=1024, log_size=log_size)
    assert str(path) in str(info.value)


def test_missing_index_file_is_reported(tmp_path: pathlib.Path) -> None:
    with pytest.raises(CorruptFileError, match="missing"):
        index.OffsetIndex.load(str(tmp_path / "x.index"), 0, max_index_bytes=1024, log_size=0)
    with pytest.raises(CorruptFileError, match="missing"):
        index.TimeIndex.load(str(tmp_path / "x.timeindex"), 0, max_index_bytes=1024, next_offset=0)


def _time_index(tmp_path: pathlib.Path) -> index.TimeIndex:
    idx = index.TimeIndex(str(tmp_path / "00000000000000000100.timeindex"), 100, max_index_bytes=120)
    idx.reset()
    return idx


def test_time_index_appends_only_growing_timestamps_in_kafka_format(tmp_path: pathlib.Path) -> None:
    idx = _time_index(tmp_path)
    idx.maybe_append(1000, 103)
    idx.maybe_append(1000, 104)  # not above the last timestamp: skipped
    idx.maybe_append(900, 105)  # older: skipped
    idx.maybe_append(-1, 106)  # no timestamp: skipped
    idx.maybe_append(2000, 110)
    idx.write_pending()
    assert idx.entries() == [(1000, 103), (2000, 110)]
    assert pathlib.Path(idx.path).read_bytes() == struct.pack(">qiqi", 1000, 3, 2000, 10)
    with pytest.raises(InvariantViolation, match="goes back"):
        idx.maybe_append(3000, 105)


def test_time_index_lookup_and_truncate(tmp_path: pathlib.Path) -> None:
    idx = _time_index(tmp_path)
    idx.append_all([1000, 2000, 3000], [103, 110, 120])
    idx.write_pending()
    assert idx.lookup(999) == (-1, 100)
    assert idx.lookup(1000) == (1000, 103)
    assert idx.lookup(2500) == (2000, 110)
    assert idx.lookup(10**15) == (3000, 120)
    idx.truncate_to(110)
    assert idx.entries() == [(1000, 103)]
    assert idx.last_entry == (1000, 103)
    idx.close()
    loaded = index.TimeIndex.load(idx.path, 100, max_index_bytes=120, next_offset=111)
    assert loaded.entries() == [(1000, 103)]


def test_time_index_full_check_can_be_skipped_for_the_final_entry(tmp_path: pathlib.Path) -> None:
    idx = index.TimeIndex(str(tmp_path / "t.timeindex"), 0, max_index_bytes=12)
    idx.reset()
    idx.maybe_append(5, 1)
    assert idx.is_full
    with pytest.raises(InvariantViolation, match="full"):
        idx.maybe_append(6, 2)
    idx.maybe_append(6, 2, skip_full_check=True)
    assert idx.entries() == [(5, 1), (6, 2)]


@pytest.mark.parametrize(
    ("data", "next_offset", "complaint"),
    [
        (struct.pack(">qi", 1000, 3) + b"\x01", 200, "not a multiple"),
        (struct.pack(">qiqi", 1000, 3, 1000, 4), 200, "out of order"),
        (struct.pack(">qiqi", 1000, 5, 2000, 4), 200, "out of order"),
        (struct.pack(">qi", 1000, 50), 120, "segment ends before 120"),
    ],
    ids=["torn-entry", "repeated-timestamp", "offset-goes-back", "offset-past-segment-end"],
)
def test_time_index_load_detects_corruption(tmp_path: pathlib.Path, data: bytes, next_offset: int,
                                            complaint: str) -> None:
    path = tmp_path / "00000000000000000100.timeindex"
    path.write_bytes(data)
    with pytest.raises(CorruptFileError, match=complaint):
        index.TimeIndex.load(str(path), 100, max_index_bytes=1024, next_offset=next_offset)
