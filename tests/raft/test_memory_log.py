"""MemoryRaftLog: leader/follower appends, epoch cache, truncation rules, crash model, snapshots."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlog.errors import CorruptRecordError, InvariantViolation, OffsetOutOfRangeError
from kraftlog.raft.memory_log import MemoryRaftLog
from kraftlog.raft.messages import OffsetAndEpoch
from kraftlog.storage import record_batch as rb


def batch(*values: bytes) -> bytes:
    return rb.build_batch([rb.RecordInput(value=v) for v in values])


def test_leader_append_assigns_offsets_and_epoch() -> None:
    log = MemoryRaftLog()
    assert log.append_as_leader(batch(b"a", b"b"), 1).last_offset == 1
    info = log.append_as_leader(batch(b"c"), 3)
    assert (info.first_offset, info.last_offset) == (2, 2)
    decoded = rb.decode_batches(log.read(0, 1 << 20))
    assert [(b.base_offset, b.partition_leader_epoch) for b in decoded] == [(0, 1), (2, 3)]
    assert log.end_offset == 3 and log.last_fetched_epoch() == 3


def test_follower_append_checks_contiguity_and_epochs() -> None:
    leader = MemoryRaftLog()
    leader.append_as_leader(batch(b"a"), 2)
    leader.append_as_leader(batch(b"b"), 2)
    follower = MemoryRaftLog("f")
    with pytest.raises(CorruptRecordError, match="base offset 1, expected 0"):
        follower.append_as_follower(leader.read(1, 100))
    follower.append_as_follower(leader.read(0, 1 << 20))
    assert follower.end_offset == 2
    older = rb.build_batch([rb.RecordInput(value=b"x")], base_offset=2, partition_leader_epoch=1)
    with pytest.raises(CorruptRecordError, match="epoch 1 below the previous epoch 2"):
        follower.append_as_follower(older)
    with pytest.raises(CorruptRecordError, match="partial batch"):
        follower.append_as_follower(leader.read(1, 100)[:20])


def test_corrupt_crc_is_rejected_before_append() -> None:
    data = bytearray(batch(b"hello"))
    data[-1] ^= 0xFF
    log = MemoryRaftLog()
    with pytest.raises(CorruptRecordError):
        log.append_as_follower(bytes(data))
    assert log.end_offset == 0


def test_read_returns_whole_batches_and_at_least_one() -> None:
    log = MemoryRaftLog()
    for i in range(3):
        log.append_as_leader(batch(bytes([i]) * 50), 1)
    one = log.read(1, 10)
    assert [b.base_offset for b in rb.decode_batches(one)] == [1]
    assert log.read(3, 100) == b""
    with pytest.raises(OffsetOutOfRangeError, match="read at 4 outside"):
        log.read(4, 100)


def test_end_offset_for_epoch_uses_the_epoch_cache() -> None:
    log = MemoryRaftLog()
    log.append_as_leader(batch(b"a", b"b"), 1)
    log.append_as_leader(batch(b"c"), 3)
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(offset=2, epoch=1)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(offset=2, epoch=1)
    assert log.end_offset_for_epoch(5) == OffsetAndEpoch(offset=3, epoch=3)
    assert log.end_offset_for_epoch(0) == OffsetAndEpoch(offset=0, epoch=-1)


def test_truncation_never_below_high_watermark_or_inside_a_batch() -> None:
    log = MemoryRaftLog("n1 log")
    log.append_as_leader(batch(b"a", b"b"), 1)
    log.append_as_leader(batch(b"c"), 2)
    log.update_high_watermark(2)
    with pytest.raises(InvariantViolation, match="n1 log: truncation to 0 below the high "
                                                 "watermark 2"):
        log.truncate_to(0)
    log.truncate_to(2)
    assert log.end_offset == 2 and log.last_fetched_epoch() == 1
    log.append_as_leader(batch(b"d", b"e"), 4)
    with pytest.raises(OffsetOutOfRangeError, match="splits a batch"):
        log.truncate_to(3)


def test_crash_loses_only_the_unflushed_suffix() -> None:
    log = MemoryRaftLog()
    log.append_as_leader(batch(b"a"), 1)
    log.flush()
    log.append_as_leader(batch(b"b"), 2)
    log.update_high_watermark(2)
    log.crash()
    assert log.end_offset == 1 and log.high_watermark == 0 and log.last_fetched_epoch() == 1
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(offset=1, epoch=1)


def test_snapshot_advances_start_and_anchors_epochs() -> None:
    log = MemoryRaftLog()
    log.append_as_leader(batch(b"a", b"b"), 1)
    log.append_as_leader(batch(b"c"), 2)
    log.update_high_watermark(3)
    snap = OffsetAndEpoch(offset=2, epoch=1)
    log.write_snapshot(snap, b"snapshot-bytes")
    log.update_high_watermark(2)
    early = MemoryRaftLog()
    early.append_as_leader(batch(b"a", b"b"), 1)
    early.write_snapshot(snap, b"x")
    with pytest.raises(InvariantViolation, match="ends beyond the high watermark 0"):
        early.delete_before_snapshot(snap)
    assert log.delete_before_snapshot(snap)
    assert log.start_offset == 2 and log.latest_snapshot_id() == snap
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(offset=2, epoch=1)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 100)
    fresh = MemoryRaftLog()
    fresh.write_snapshot(snap, b"snapshot-bytes")
    fresh.reset_to_snapshot(snap)
    assert (fresh.start_offset, fresh.end_offset, fresh.last_fetched_epoch()) == (2, 2, 1)
    assert fresh.end_offset_for_epoch(7) == snap
    fresh.append_as_follower(log.read(2, 100))
    assert fresh.end_offset == 3


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["append", "flush", "crash", "truncate"]),
                          st.integers(1, 3)), max_size=30))
def test_log_matches_a_list_model(ops: list[tuple[str, int]]) -> None:
    """Against a list of (offset, epoch): durable prefix, truncation and epochs stay exact."""
    log = MemoryRaftLog()
    model: list[int] = []  # epoch per offset
    boundaries = [0]
    flushed = 0
    epoch = 1
    for op, n in ops:
        if op == "append":
            epoch += n % 2
            log.append_as_leader(batch(*[b"v"] * n), epoch)
            model.extend([epoch] * n)
            boundaries.append(len(model))
        elif op == "flush":
            log.flush()
            flushed = len(model)
        elif op == "crash":
            log.crash()
            del model[flushed:]
            boundaries = [b for b in boundaries if b <= flushed]
        elif op == "truncate" and boundaries:
            target = boundaries[max(0, len(boundaries) - 1 - n)]
            log.truncate_to(target)
            del model[target:]
            boundaries = [b for b in boundaries if b <= target]
            flushed = min(flushed, target)
        epoch = max([epoch, *model])
        assert log.end_offset == len(model)
        assert log.last_fetched_epoch() == (model[-1] if model else 0)
        for e in set(model):
            assert log.end_offset_for_epoch(e).offset == max(
                i for i, x in enumerate(model) if x <= e) + 1
