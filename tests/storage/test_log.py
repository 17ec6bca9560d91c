"""The segmented Log: appends, reads, rolling, timestamps, truncation, retention, flush, config."""

from __future__ import annotations

import os
import pathlib

import pytest

from kraftlog.errors import (
    ConfigError,
    CorruptRecordError,
    InvariantViolation,
    OffsetOutOfRangeError,
    UnexpectedAppendOffsetError,
    UnsupportedCompressionTypeError,
)
from kraftlog.ids import TopicPartition
from kraftlog.storage import batch_header as bh
from kraftlog.storage import checkpoint
from kraftlog.storage import record_batch as rb
from kraftlog.storage.log import Log, OffsetAndTimestamp
from kraftlog.storage.log_config import LogConfig


class FakeEpochCache:
    """Records every call; keeps Kafka's entries so latest_epoch answers like the real cache."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, int]] = []
        self.calls: list[tuple[str, int, int | None]] = []

    def assign(self, epoch: int, start_offset: int) -> None:
        self.calls.append(("assign", epoch, start_offset))
        self.entries.append((epoch, start_offset))

    def truncate_from_end(self, end_offset: int) -> None:
        self.calls.append(("truncate_from_end", end_offset, None))
        self.entries = [(e, o) for e, o in self.entries if o < end_offset]

    def truncate_from_start(self, start_offset: int) -> None:
        self.calls.append(("truncate_from_start", start_offset, None))

    def latest_epoch(self) -> int | None:
        return self.entries[-1][0] if self.entries else None


def batch(n: int = 3, *, ts: int = 1000, value: bytes = b"v" * 40, base_offset: int = 0,
          epoch: int = -1) -> bytes:
    return rb.build_batch([rb.RecordInput(value=value, timestamp_ms=ts + i) for i in range(n)],
                          base_offset=base_offset, partition_leader_epoch=epoch)


def headers(data: bytes) -> list[tuple[int, int, int]]:
    return [(h.base_offset, h.last_offset, h.partition_leader_epoch) for h in bh.iter_batches(data)]


def open_log(path: pathlib.Path, **config: int | None) -> Log:
    return Log.open(path, LogConfig(**config), now_ms=0)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- append


def test_leader_append_assigns_consecutive_offsets_and_the_leader_epoch(tmp_path: pathlib.Path) -> None:
    cache = FakeEpochCache()
    log = Log.open(tmp_path, LogConfig(), now_ms=0, epoch_cache=cache)
    first = log.append_as_leader(batch(3) + batch(2), leader_epoch=4, now_ms=0)
    second = log.append_as_leader(bytearray(batch(1)), leader_epoch=5, now_ms=0)
    assert (first.first_offset, first.last_offset, first.batch_count, first.record_count) == (0, 4, 2, 5)
    assert (second.first_offset, second.last_offset) == (5, 5)
    assert log.log_end_offset == 6
    assert headers(log.read(0, 10_000).records) == [(0, 2, 4), (3, 4, 4), (5, 5, 5)]
    assert cache.entries == [(4, 0), (5, 5)]
    log.close()


def test_leader_append_patches_a_writable_buffer_in_place(tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(2), leader_epoch=1, now_ms=0)
    buf = bytearray(batch(1))
    log.append_as_leader(buf, leader_epoch=1, now_ms=0)
    assert bh.BatchHeader(buf).base_offset == 2
    log.close()


@pytest.mark.parametrize(
    "data",
    [b"", b"\x00" * 10, batch()[:-1], bytes(61)],
    ids=["empty", "short-garbage", "partial-batch", "zero-header"],
)
def test_leader_append_rejects_invalid_input_and_leaves_the_log_unchanged(tmp_path: pathlib.Path,
                                                                         data: bytes) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(), leader_epoch=0, now_ms=0)
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(data, leader_epoch=0, now_ms=0)
    assert log.log_end_offset == 3
    assert log.size_in_bytes == len(batch())
    log.close()


def test_leader_append_leaves_a_writable_buffer_unchanged_when_a_later_batch_is_bad(
        tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path)
    good = batch(2, base_offset=77, epoch=9)
    bad = bytearray(batch(1))
    bad[-1] ^= 0xFF
    buf = bytearray(good + good + bytes(bad))
    before = bytes(buf)
    with pytest.raises(CorruptRecordError, match=f"CRC.*at byte {2 * len(good)}|at byte {2 * len(good)}"):
        log.append_as_leader(buf, leader_epoch=3, now_ms=0)
    assert bytes(buf) == before  # the two good batches were stamped, then put back
    assert (log.log_end_offset, log.size_in_bytes) == (0, 0)
    log.close()


def test_leader_append_names_an_unknown_codec_id(tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path)
    data = bytearray(batch(1))
    data[bh.ATTRIBUTES_OFFSET + 1] |= 5  # codec id 5: not a Kafka codec
    data[bh.CRC_OFFSET:bh.ATTRIBUTES_OFFSET] = bh.BatchHeader(data).compute_crc().to_bytes(4, "big")
    with pytest.raises(UnsupportedCompressionTypeError, match="unknown compression codec id 5"):
        log.append_as_leader(data, leader_epoch=0, now_ms=0)
    assert log.log_end_offset == 0
    log.close()


def test_log_append_time_sets_max_timestamp_and_the_attribute_and_keeps_the_crc_valid(
        tmp_path: pathlib.Path) -> None:
    log = Log.open(tmp_path, LogConfig(message_timestamp_type=bh.TimestampType.LOG_APPEND_TIME,
                                       index_interval_bytes=0), now_ms=0)
    info = log.append_as_leader(batch(3, ts=1000) + batch(2, ts=5000), leader_epoch=1, now_ms=777_000)
    assert (info.max_timestamp, info.offset_of_max_timestamp, info.log_append_time_ms) == (777_000, 2, 777_000)
    data = log.read(0, 10_000).records
    for header in bh.iter_batches(data):
        header.validate()  # the CRC was recomputed over the patched fields
        assert header.timestamp_type is bh.TimestampType.LOG_APPEND_TIME
        assert header.max_timestamp == 777_000
    assert {r.timestamp_ms for b in rb.decode_batches(data) for r in b.records} == {777_000}
    assert log.offset_for_timestamp(777_000) == OffsetAndTimestamp(0, 777_000)
    assert log.offset_for_timestamp(6000) == OffsetAndTimestamp(0, 777_000)  # producer times are gone
    log.close()
    create_time = Log.open(tmp_path / "c", LogConfig(), now_ms=0)
    assert create_time.append_as_leader(batch(1, ts=1000), leader_epoch=1, now_ms=777_000).log_append_time_ms == -1
    assert bh.BatchHeader(create_time.read(0, 10_000).records).max_timestamp == 1000
    create_time.close()


def test_read_only_and_writable_buffers_append_the_same_bytes(tmp_path: pathlib.Path) -> None:
    # bytes are written as stamped prefixes + views (pwritev, no copy); a bytearray is
    # patched in place. Files must not differ, across rolls (which re-plan the index
    # from the unstamped bytes) and appends of more batches than one pwritev takes.
    appends = [b"".join(batch(n, ts=1000 + 7 * n) for n in (1, 5, 2, 9)),
               b"".join(batch(1, ts=3000 + i, value=b"s") for i in range(600)),
               batch(20, ts=5000), batch(3, ts=900)]
    config = {"segment_bytes": 60_000, "index_interval_bytes": 200}
    logs = {kind: open_log(tmp_path / kind, **config) for kind in ("bytes", "bytearray")}
    for data in appends * 3:
        a = logs["bytes"].append_as_leader(data, leader_epoch=2, now_ms=0)
        b = logs["bytearray"].append_as_leader(bytearray(data), leader_epoch=2, now_ms=0)
        assert a == b
    assert len(logs["bytes"].segments) > 1
    for log in logs.values():
        log.close()
    names = sorted(p.name for p in (tmp_path / "bytes").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "bytearray").iterdir())
    for name in names:
        assert (tmp_path / "bytes" / name).read_bytes() == (tmp_path / "bytearray" / name).read_bytes(), name
    reopened = open_log(tmp_path / "bytes", **config)
    assert [h[0] for h in headers(reopened.read(0, 10**7).records)][:5] == [0, 1, 6, 8, 17]
    reopened.close()


def test_leader_append_plans_the_index_entries_recovery_would_build(tmp_path: pathlib.Path) -> None:
    # The leader path plans index entries while it stamps (bh.stamp_range);
    # a recovery rebuilds them from a header walk. Both must agree, entry for entry.
    sizes = [1, 7, 2, 30, 1, 1, 12, 3, 9, 1, 2, 40, 5]
    log = open_log(tmp_path, index_interval_bytes=1500)
    for round_ in range(4):
        appended = b"".join(batch(n, ts=2000 + 100 * round_ + n * (-1) ** n) for n in sizes[round_:])
        log.append_as_leader(appended, leader_epoch=round_, now_ms=0)
    end = log.log_end_offset
    log.close_handlers()
    offset_index = (tmp_path / "00000000000000000000.index").read_bytes()
    time_index = (tmp_path / "00000000000000000000.timeindex").read_bytes()
    assert len(offset_index) >= 8 * 10 and len(time_index) >= 12 * 2
    for name in ("00000000000000000000.index", "00000000000000000000.timeindex"):
        (tmp_path / name).unlink()
    rebuilt = open_log(tmp_path, index_interval_bytes=1500)  # recovery point 0: full recovery scan
    assert rebuilt.log_end_offset == end
    rebuilt.close_handlers()
    assert (tmp_path / "00000000000000000000.index").read_bytes() == offset_index
    # The rebuild also appends the final (max timestamp) entry of an inactive segment.
    assert (tmp_path / "00000000000000000000.timeindex").read_bytes()[:len(time_index)] == time_index


def test_leader_append_rejects_a_batch_with_a_bad_crc(tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path)
    data = bytearray(batch())
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        log.append_as_leader(data, leader_epoch=0, now_ms=0)
    assert log.log_end_offset == 0
    log.close()


def test_follower_append_keeps_offsets_and_tracks_epochs(tmp_path: pathlib.Path) -> None:
    cache = FakeEpochCache()
    log = Log.open(tmp_path, LogConfig(), now_ms=0, epoch_cache=cache)
    data = batch(2, base_offset=0, epoch=1) + batch(3, base_offset=2, epoch=1) + batch(1, base_offset=5, epoch=3)
    info = log.append_as_follower(data, now_ms=0)
    assert (info.first_offset, info.last_offset, info.batch_count, info.record_count) == (0, 5, 3, 6)
    assert cache.entries == [(1, 0), (3, 5)]
    empty = log.append_as_follower(b"", now_ms=0)
    assert empty.batch_count == 0 and log.log_end_offset == 6
    assert log.read(0, 10_000).records == data
    log.close()


def test_follower_append_rejects_gaps_overlaps_and_corruption_naming_the_position(tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path)
    log.append_as_follower(batch(2, base_offset=0), now_ms=0)
    with pytest.raises(UnexpectedAppendOffsetError, match=r"log end offset is 2.*gap") as gap:
        log.append_as_follower(batch(1, base_offset=5) + batch(2, base_offset=6), now_ms=0)
    assert (gap.value.first_offset, gap.value.last_offset, gap.value.log_end_offset) == (5, 7, 2)
    with pytest.raises(UnexpectedAppendOffsetError, match="overlap"):
        log.append_as_follower(batch(1, base_offset=1), now_ms=0)
    # Still an OffsetOutOfRangeError for callers written before the subclass existed.
    with pytest.raises(OffsetOutOfRangeError):
        log.append_as_follower(batch(1, base_offset=0), now_ms=0)
    first = batch(1, base_offset=2)
    with pytest.raises(CorruptRecordError, match=f"gap.*at byte {len(first)}"):
        log.append_as_follower(first + batch(1, base_offset=9), now_ms=0)
    flipped = bytearray(first + batch(1, base_offset=3))
    flipped[len(first) + 70] ^= 1
    with pytest.raises(CorruptRecordError, match=f"CRC.*at byte {len(first)}"):
        log.append_as_follower(flipped, now_ms=0)
    assert log.log_end_offset == 2
    log.close()


# ---------------------------------------------------------------------------- segments and rolling


def test_segments_roll_by_size_and_are_named_by_20_digit_base_offset(tmp_path: pathlib.Path) -> None:
    one = len(batch())
    log = open_log(tmp_path, segment_bytes=2 * one + 10)
    for _ in range(5):
        log.append_as_leader(batch(), leader_epoch=0, now_ms=0)
    assert [s.base_offset for s in log.segments] == [0, 6, 12]
    assert [s.size_in_bytes for s in log.segments] == [2 * one, 2 * one, one]
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "00000000000000000006.log" in names
    assert "00000000000000000012.timeindex" in names
    assert "00000000000000000000.index" in names
    log.close()


def test_segments_roll_when_record_timestamps_pass_log_roll_ms(tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path, segment_ms=1000)
    log.append_as_leader(batch(1, ts=10_000), leader_epoch=0, now_ms=0)
    log.append_as_leader(batch(1, ts=10_900), leader_epoch=0, now_ms=0)
    assert len(log.segments) == 1
    log.append_as_leader(batch(1, ts=11_001), leader_epoch=0, now_ms=0)
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_segments_without_timestamps_roll_by_now_ms_since_creation(tmp_path: pathlib.Path) -> None:
    log = Log.open(tmp_path, LogConfig(segment_ms=1000), now_ms=5_000)
    log.append_as_leader(batch(1, ts=-1), leader_epoch=0, now_ms=5_000)
    log.append_as_leader(batch(1, ts=-1), leader_epoch=0, now_ms=6_000)
    assert len(log.segments) == 1
    log.append_as_leader(batch(1, ts=-1), leader_epoch=0, now_ms=6_001)
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_segments_roll_when_an_index_is_full(tmp_path: pathlib.Path) -> None:
    # 24 bytes hold 3 offset-index or 2 time-index entries; with an index
    # interval of 0 every batch but a segment's first is indexed.
    same_ts = open_log(tmp_path / "offset-index", index_interval_bytes=0, segment_index_bytes=24)
    for _ in range(9):
        same_ts.append_as_leader(batch(1, ts=1000), leader_epoch=0, now_ms=0)
    assert [s.base_offset for s in same_ts.segments] == [0, 4, 8]
    same_ts.close()
    growing_ts = open_log(tmp_path / "time-index", index_interval_bytes=0, segment_index_bytes=24)
    for i in range(7):
        growing_ts.append_as_leader(batch(1, ts=1000 + i), leader_epoch=0, now_ms=0)
    assert [s.base_offset for s in growing_ts.segments] == [0, 3, 6]
    growing_ts.close()


def test_explicit_roll_is_a_no_op_on_an_empty_active_segment(tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path)
    log.roll(now_ms=0)
    assert [s.base_offset for s in log.segments] == [0]
    log.append_as_leader(batch(), leader_epoch=0, now_ms=0)
    log.roll(now_ms=0)
    log.roll(now_ms=0)
    assert [s.base_offset for s in log.segments] == [0, 3]
    log.close()


def test_offset_index_is_sparse_every_index_interval_bytes(tmp_path: pathlib.Path) -> None:
    one = len(batch(3, value=b"x" * 200))
    log = open_log(tmp_path, index_interval_bytes=4 * one)
    for _ in range(20):
        log.append_as_leader(batch(3, value=b"x" * 200), leader_epoch=0, now_ms=0)
    index_size = (tmp_path / "00000000000000000000.index").stat().st_size
    # An entry after every > 4 batches' worth of bytes: batches 5, 10, 15 (0-based).
    assert index_size == 3 * 8
    log.close()


# ---------------------------------------------------------------------------- read


def _filled(tmp_path: pathlib.Path, *, batches: int = 10, **config: int) -> Log:
    log = open_log(tmp_path, **config)
    for i in range(batches):
        log.append_as_leader(batch(3, ts=1000 + 10 * i), leader_epoch=0, now_ms=0)
    return log


def test_read_returns_whole_batches_starting_with_the_one_holding_the_offset(tmp_path: pathlib.Path) -> None:
    one = len(batch(3))
    log = _filled(tmp_path, index_interval_bytes=one)
    data = log.read(7, 2 * one + 5)
    assert headers(data.records) == [(6, 8, 0), (9, 11, 0)]
    assert data.first_offset == 6 and data.next_offset == 12
    assert data.fetch_offset_metadata.message_offset == 7
    assert data.fetch_offset_metadata.relative_position_in_segment == 2 * one
    assert log.read(29, 10**6).records == log.read(27, 10**6).records
    log.close()


def test_read_at_log_end_is_empty_and_outside_the_log_raises(tmp_path: pathlib.Path) -> None:
    log = _filled(tmp_path, batches=2)
    end = log.read(6, 1000)
    assert end.records == b"" and end.first_offset is None and end.next_offset == 6
    with pytest.raises(OffsetOutOfRangeError, match=r"offset 7 is outside the log \[0, 6\]"):
        log.read(7, 1000)
    log.maybe_increment_log_start_offset(3)
    with pytest.raises(OffsetOutOfRangeError, match="offset 2"):
        log.read(2, 1000)
    log.close()


def test_read_returns_an_oversized_first_batch_whole_only_with_min_one_message(tmp_path: pathlib.Path) -> None:
    log = _filled(tmp_path, batches=3)
    one = len(batch(3))
    assert len(log.read(0, 10).records) == one
    assert log.read(0, 10, min_one_message=False).records == b""
    assert len(log.read(0, one).records) == one
    log.close()


def test_read_stops_before_max_offset(tmp_path: pathlib.Path) -> None:
    log = _filled(tmp_path, batches=4)
    assert headers(log.read(0, 10**6, max_offset=9).records) == [(0, 2, 0), (3, 5, 0), (6, 8, 0)]
    assert log.read(0, 10**6, max_offset=8).records != b""
    assert headers(log.read(0, 10**6, max_offset=8).records)[-1] == (3, 5, 0)
    assert log.read(9, 10**6, max_offset=9).records == b""
    assert log.read(0, 10**6, max_offset=0).records == b""
    log.close()


def test_read_crosses_into_the_next_segment_when_one_has_nothing_left(tmp_path: pathlib.Path) -> None:
    one = len(batch(3))
    log = _filled(tmp_path, batches=6, segment_bytes=2 * one)
    assert len(log.segments) == 3
    data = log.read(6, 10**6)
    assert headers(data.records) == [(6, 8, 0), (9, 11, 0)]
    assert data.fetch_offset_metadata.segment_base_offset == 6
    # A gap left by truncate_fully: reads at the new start work.
    log.truncate_fully_and_start_at(100)
    log.append_as_leader(batch(2), leader_epoch=1, now_ms=0)
    assert headers(log.read(100, 1000).records) == [(100, 101, 1)]
    log.close()


def test_sequential_reads_following_next_offset_return_every_batch_once(tmp_path: pathlib.Path) -> None:
    one = len(batch(3))
    log = _filled(tmp_path, batches=25, segment_bytes=7 * one, index_interval_bytes=one)
    seen: list[tuple[int, int, int]] = []
    offset = 0
    while offset < log.log_end_offset:
        data = log.read(offset, 3 * one - 1)
        seen.extend(headers(data.records))
        offset = data.next_offset
    assert seen == [(3 * i, 3 * i + 2, 0) for i in range(25)]
    log.close()


# ---------------------------------------------------------------------------- timestamps


def test_offset_for_timestamp_finds_the_first_record_at_or_after_it(tmp_path: pathlib.Path) -> None:
    one = len(batch(3))
    log = _filled(tmp_path, batches=10, segment_bytes=3 * one, index_interval_bytes=one)
    # batch i holds offsets 3i..3i+2 with timestamps 1000+10i .. 1000+10i+2
    assert log.offset_for_timestamp(0) == OffsetAndTimestamp(0, 1000)
    assert log.offset_for_timestamp(1041) == OffsetAndTimestamp(13, 1041)
    assert log.offset_for_timestamp(1043) == OffsetAndTimestamp(15, 1050)
    assert log.offset_for_timestamp(1092) == OffsetAndTimestamp(29, 1092)
    assert log.offset_for_timestamp(1093) is None
    assert log.offset_for_timestamp(-2) == OffsetAndTimestamp(0, -1)
    assert log.offset_for_timestamp(-1) == OffsetAndTimestamp(30, -1)
    assert log.offset_for_timestamp(-3) == OffsetAndTimestamp(29, 1092)
    log.close()
    reopened = open_log(tmp_path, segment_bytes=3 * one, index_interval_bytes=one)
    assert reopened.offset_for_timestamp(1041) == OffsetAndTimestamp(13, 1041)
    reopened.close()


def test_offset_for_timestamp_respects_log_start_and_out_of_order_timestamps(tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=0)
    for ts in (5000, 1000, 7000, 2000):
        log.append_as_leader(batch(1, ts=ts), leader_epoch=0, now_ms=0)
    assert log.offset_for_timestamp(1500) == OffsetAndTimestamp(0, 5000)
    assert log.offset_for_timestamp(6000) == OffsetAndTimestamp(2, 7000)
    log.maybe_increment_log_start_offset(1)
    assert log.offset_for_timestamp(1500) == OffsetAndTimestamp(2, 7000)
    log.close()


# ---------------------------------------------------------------------------- truncation


def test_truncate_to_removes_the_tail_and_later_segments(tmp_path: pathlib.Path) -> None:
    one = len(batch(3))
    cache = FakeEpochCache()
    log = Log.open(tmp_path, LogConfig(segment_bytes=2 * one), now_ms=0, epoch_cache=cache)
    for epoch in range(5):
        log.append_as_leader(batch(3), leader_epoch=epoch, now_ms=0)
    log.flush()
    assert log.truncate_to(7) is True
    assert log.log_end_offset == 6  # batches are never split: 6..8 goes whole
    assert [s.base_offset for s in log.segments] == [0, 6]
    assert log.recovery_point == 6
    assert ("truncate_from_end", 6, None) in cache.calls
    assert not (tmp_path / "00000000000000000012.log").exists()
    assert log.truncate_to(6) is False
    info = log.append_as_leader(batch(1), leader_epoch=9, now_ms=0)
    assert info.first_offset == 6
    # A read never spans segments (as in Kafka).
    assert headers(log.read(3, 10**6).records) == [(3, 5, 1)]
    assert headers(log.read(6, 10**6).records) == [(6, 6, 9)]
    log.close()


def test_truncate_below_the_first_segment_starts_the_log_over(tmp_path: pathlib.Path) -> None:
    log = _filled(tmp_path, batches=2)
    log.truncate_fully_and_start_at(50)
    log.append_as_leader(batch(1), leader_epoch=0, now_ms=0)
    assert log.truncate_to(10) is True
    assert (log.log_start_offset, log.log_end_offset) == (10, 10)
    with pytest.raises(OffsetOutOfRangeError):
        log.truncate_to(-1)
    log.close()


def test_truncate_fully_and_start_at(tmp_path: pathlib.Path) -> None:
    cache = FakeEpochCache()
    log = Log.open(tmp_path, LogConfig(), now_ms=0, epoch_cache=cache)
    log.append_as_leader(batch(3), leader_epoch=1, now_ms=0)
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (1000, 1000, 1000)
    assert [p.name for p in sorted(tmp_path.iterdir())] == [
        "00000000000000001000.index", "00000000000000001000.log", "00000000000000001000.timeindex"]
    assert ("truncate_from_end", 1000, None) in cache.calls
    log.append_as_follower(batch(2, base_offset=1000, epoch=2), now_ms=0)
    assert log.log_end_offset == 1002
    log.close()


# ---------------------------------------------------------------------------- retention


def test_maybe_increment_log_start_offset_deletes_whole_segments_below_it(tmp_path: pathlib.Path) -> None:
    one = len(batch(3))
    cache = FakeEpochCache()
    log = Log.open(tmp_path, LogConfig(segment_bytes=2 * one), now_ms=0, epoch_cache=cache)
    for _ in range(5):
        log.append_as_leader(batch(3), leader_epoch=0, now_ms=0)
    assert [s.base_offset for s in log.segments] == [0, 6, 12]
    assert log.maybe_increment_log_start_offset(7) is True
    assert [s.base_offset for s in log.segments] == [6, 12]
    assert log.log_start_offset == 7
    assert ("truncate_from_start", 7, None) in cache.calls
    assert log.maybe_increment_log_start_offset(5) is False
    with pytest.raises(OffsetOutOfRangeError, match="beyond the log end offset 15"):
        log.maybe_increment_log_start_offset(16)
    assert log.maybe_increment_log_start_offset(15) is True
    assert [s.base_offset for s in log.segments] == [12]  # the active segment stays
    log.close()


def test_retention_by_time_uses_each_segments_largest_timestamp(tmp_path: pathlib.Path) -> None:
    one = len(batch(3))
    log = open_log(tmp_path, segment_bytes=one, retention_ms=1000)
    for ts in (10_000, 20_000, 30_000):
        log.append_as_leader(batch(3, ts=ts), leader_epoch=0, now_ms=0)
    assert [s.base_offset for s in log.segments] == [0, 3, 6]
    assert log.delete_old_segments(now_ms=21_001) == 1
    assert [s.base_offset for s in log.segments] == [3, 6]
    assert log.log_start_offset == 3
    # Never past the high watermark.
    assert log.delete_old_segments(now_ms=10**9, high_watermark=6) == 1
    assert [s.base_offset for s in log.segments] == [6]
    # Deleting everything rolls a fresh empty active segment first; an empty one is kept.
    assert log.delete_old_segments(now_ms=10**9) == 1
    assert [s.base_offset for s in log.segments] == [9]
    assert (log.log_start_offset, log.log_end_offset) == (9, 9)
    assert log.delete_old_segments(now_ms=10**12) == 0
    log.close()


def test_retention_by_bytes_deletes_oldest_segments_until_under_the_limit(tmp_path: pathlib.Path) -> None:
    one = len(batch(3))
    log = open_log(tmp_path, segment_bytes=one, retention_bytes=2 * one + 1)
    for _ in range(5):
        log.append_as_leader(batch(3), leader_epoch=0, now_ms=0)
    assert log.delete_old_segments(now_ms=0) == 2
    assert [s.base_offset for s in log.segments] == [6, 9, 12]
    assert log.size_in_bytes == 3 * one
    log.close()


def test_retention_disabled_with_minus_one(tmp_path: pathlib.Path) -> None:
    one = len(batch(3))
    log = open_log(tmp_path, segment_bytes=one, retention_ms=-1, retention_bytes=-1)
    for _ in range(3):
        log.append_as_leader(batch(3, ts=1), leader_epoch=0, now_ms=0)
    assert log.delete_old_segments(now_ms=10**12) == 0
    log.close()


# ---------------------------------------------------------------------------- flush


def test_flush_advances_the_recovery_point(tmp_path: pathlib.Path) -> None:
    log = _filled(tmp_path, batches=3)
    assert log.recovery_point == 0
    log.flush(4)
    assert log.recovery_point == 4
    log.flush()
    assert log.recovery_point == 9
    log.close()


def test_maybe_flush_by_messages_and_by_time(tmp_path: pathlib.Path) -> None:
    log = Log.open(tmp_path, LogConfig(flush_interval_messages=5, flush_interval_ms=100), now_ms=0)
    log.append_as_leader(batch(3), leader_epoch=0, now_ms=0)
    assert log.recovery_point == 0
    assert log.maybe_flush(now_ms=50) is False
    log.append_as_leader(batch(3), leader_epoch=0, now_ms=60)  # 6 unflushed >= 5: flushed on append
    assert log.recovery_point == 6
    log.append_as_leader(batch(1), leader_epoch=0, now_ms=70)
    assert log.maybe_flush(now_ms=100) is False
    assert log.maybe_flush(now_ms=160) is True
    assert log.recovery_point == 7
    log.close()


def test_metadata_log_mode_fsyncs_every_append(tmp_path: pathlib.Path) -> None:
    log = Log.open(tmp_path, LogConfig.for_metadata_log(segment_bytes=4096), now_ms=0)
    for _ in range(3):
        log.append_as_leader(batch(2), leader_epoch=1, now_ms=0)
        assert log.recovery_point == log.log_end_offset
    log.close()


# ---------------------------------------------------------------------------- lifecycle and config


def test_close_and_reopen_keeps_everything(tmp_path: pathlib.Path) -> None:
    one = len(batch(3))
    log = _filled(tmp_path, batches=7, segment_bytes=2 * one, index_interval_bytes=one)
    before = log.read(0, 10**6).records
    segments = log.segments
    log.maybe_increment_log_start_offset(4)
    log.close()
    with pytest.raises(InvariantViolation, match="closed"):
        log.read(4, 100)
    reopened = Log.open(tmp_path, LogConfig(segment_bytes=2 * one, index_interval_bytes=one), now_ms=0,
                        recovery_point=21, log_start_offset=4)
    assert reopened.segments[1:] == segments[1:]
    assert reopened.log_start_offset == 4
    assert reopened.read(4, 10**6).records == before[one:]
    reopened.close()


def test_delete_records_mid_segment_survives_a_restart_only_through_the_checkpoint(
        tmp_path: pathlib.Path) -> None:
    # DeleteRecords moves the log start inside a segment: the segment stays, so only the
    # log-start-offset-checkpoint keeps offsets below it deleted after a restart.
    one = len(batch(3))
    config = LogConfig(segment_bytes=2 * one)
    log = Log.open(tmp_path / "t-0", config, now_ms=0)
    for _ in range(3):
        log.append_as_leader(batch(3), leader_epoch=0, now_ms=0)
    assert log.maybe_increment_log_start_offset(4) is True
    assert [s.base_offset for s in log.segments] == [0, 6]  # 4 lies inside the first
    tp = TopicPartition(topic="t", partition=0)
    file = checkpoint.OffsetCheckpointFile(tmp_path / "log-start-offset-checkpoint")
    file.write({tp: log.log_start_offset})
    log.flush()
    log.close()
    reopened = Log.open(tmp_path / "t-0", config, now_ms=0, recovery_point=9,
                        log_start_offset=file.read()[tp])
    assert reopened.log_start_offset == 4
    with pytest.raises(OffsetOutOfRangeError):
        reopened.read(3, 10**6)
    assert bh.BatchHeader(reopened.read(4, 10**6).records).base_offset == 3  # the whole batch
    reopened.close()
    forgotten = Log.open(tmp_path / "t-0", config, now_ms=0, recovery_point=9)
    assert forgotten.log_start_offset == 0, "without the checkpoint, 0..3 come back"
    forgotten.close()


def test_log_start_checkpoint_ahead_of_the_data_starts_an_empty_log_there(tmp_path: pathlib.Path) -> None:
    log = _filled(tmp_path, batches=2)
    log.close()
    reopened = Log.open(tmp_path, LogConfig(), now_ms=0, recovery_point=6, log_start_offset=40)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (40, 40)
    assert [s.base_offset for s in reopened.segments] == [40]
    reopened.close()


def test_log_config_validates_and_reads_kafka_property_names() -> None:
    config = LogConfig.from_properties({
        "log.segment.bytes": "1048576", "log.roll.hours": "2", "log.retention.ms": "-1",
        "log.retention.hours": "5", "log.index.interval.bytes": 100, "log.flush.interval.ms": "null",
        "unrelated.key": "x"})
    assert config.segment_bytes == 1048576
    assert config.segment_ms == 2 * 3600 * 1000
    assert config.retention_ms == -1  # the .ms form wins over .hours
    assert config.index_interval_bytes == 100
    assert config.flush_interval_ms is None
    assert LogConfig.for_metadata_log().flush_every_append
    with pytest.raises(ConfigError, match=r"log.segment.bytes"):
        LogConfig(segment_bytes=5)
    with pytest.raises(ConfigError, match=r"log.retention.bytes"):
        LogConfig(retention_bytes=-2)
    with pytest.raises(ConfigError, match=r"log.flush.interval.messages"):
        LogConfig(flush_interval_messages=0)
    with pytest.raises(ConfigError, match=r"config log.roll.ms must be an integer"):
        LogConfig.from_properties({"log.roll.ms": "soon"})
    assert config.message_timestamp_type is bh.TimestampType.CREATE_TIME
    assert LogConfig.from_properties({"log.message.timestamp.type": "LogAppendTime"}).message_timestamp_type \
        is bh.TimestampType.LOG_APPEND_TIME
    assert LogConfig.from_properties({"message.timestamp.type": "CreateTime"}).message_timestamp_type \
        is bh.TimestampType.CREATE_TIME
    with pytest.raises(ConfigError, match=r"message\.timestamp\.type must be one of CreateTime, LogAppendTime"):
        LogConfig.from_properties({"message.timestamp.type": "logappendtime"})


def test_read_rejects_negative_max_bytes(tmp_path: pathlib.Path) -> None:
    log = _filled(tmp_path, batches=1)
    with pytest.raises(ValueError, match="max_bytes"):
        log.read(0, -1)
    log.close()
    assert os.path.exists(tmp_path / "00000000000000000000.log")
