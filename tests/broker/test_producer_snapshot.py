"""Producer state snapshots (``<offset>.snapshot``): written at close, used on open, dropped when stale."""

from __future__ import annotations

import os
import pathlib

import pytest

from kraftlog.broker import producer_snapshot
from kraftlog.broker import producer_state as ps
from kraftlog.broker.partition import Partition
from kraftlog.error_codes import ErrorCode
from kraftlog.errors import CorruptFileError
from kraftlog.storage import record_batch as rb
from kraftlog.storage.log_config import LogConfig
from tests.broker.harness import T0, TP, open_partition


def ibatch(seq: int, pid: int = 1, count: int = 1) -> bytes:
    return rb.build_batch([rb.RecordInput(value=b"v", timestamp_ms=T0)] * count, producer_id=pid,
                          producer_epoch=0, base_sequence=seq)


def open_leader(path: pathlib.Path, *, segment_bytes: int = 1 << 30, retention_bytes: int = -1) -> Partition:
    p: Partition = open_partition(path / TP.dir_name, 1, log_config=LogConfig(
        segment_index_bytes=64 * 1024, segment_bytes=segment_bytes, retention_bytes=retention_bytes))
    p.make_leader(leader_epoch=0, partition_epoch=0, replicas=(1,), isr=(1,), now_ms=T0)
    return p


def fill(p: Partition, pids: range, per_pid: int) -> None:
    for seq in range(per_pid):
        for pid in pids:
            assert p.append_records_to_leader(ibatch(2 * seq, pid, 2), required_acks=1,
                                              now_ms=T0).error is ErrorCode.NONE


def rebuilt_from_log(p: Partition) -> dict[int, ps.ProducerEntry]:
    from kraftlog.broker.partition import iter_log_headers
    fresh = ps.ProducerStateManager()
    fresh.rebuild(iter_log_headers(p.log))
    return dict(fresh.producers)


def test_the_codec_round_trips_and_rejects_damage(tmp_path: pathlib.Path) -> None:
    entries = [ps.ProducerEntry(producer_id=7, producer_epoch=3, batches=(
        ps.BatchMetadata(first_sequence=0, last_sequence=4, first_offset=10, last_offset=14),
        ps.BatchMetadata(first_sequence=5, last_sequence=5, first_offset=20, last_offset=20)))]
    data = producer_snapshot.encode(entries)
    assert producer_snapshot.decode("f", data) == entries
    with pytest.raises(CorruptFileError, match="CRC"):
        producer_snapshot.decode("f", data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(CorruptFileError, match="CRC"):
        producer_snapshot.decode("f", data[:-3])
    with pytest.raises(CorruptFileError, match="truncated"):
        producer_snapshot.decode("f", data[:3])
    with pytest.raises(CorruptFileError, match="version"):
        producer_snapshot.decode("f", b"\x00\x09" + data[2:])


def test_close_writes_a_snapshot_at_the_log_end_and_open_uses_it(tmp_path: pathlib.Path) -> None:
    p = open_leader(tmp_path)
    fill(p, range(1, 4), 7)
    before = dict(p.producers.producers)
    end = p.log_end_offset
    p.close()
    directory = str(tmp_path / TP.dir_name)
    assert producer_snapshot.list_offsets(directory) == [end]
    reopened = open_leader(tmp_path)
    assert dict(reopened.producers.producers) == before
    # The snapshot really is read: a producer only it knows appears after the next open.
    ghost = ps.ProducerEntry(producer_id=99, producer_epoch=0, batches=(
        ps.BatchMetadata(first_sequence=0, last_sequence=0, first_offset=0, last_offset=0),))
    reopened.log.close()
    producer_snapshot.write(directory, end, [*before.values(), ghost])
    assert open_leader(tmp_path).producers.entry(99) == ghost


def test_a_snapshot_plus_the_replay_of_later_batches_equals_a_full_rebuild(tmp_path: pathlib.Path) -> None:
    p = open_leader(tmp_path)
    fill(p, range(1, 3), 3)
    p.close()
    p = open_leader(tmp_path)
    fill(p, range(2, 5), 4)  # continues producer 2 past its snapshot batches
    p.log.flush()
    expected = dict(p.producers.producers)
    p.log.close_handlers()  # a crash: no new snapshot
    reopened = open_leader(tmp_path)
    assert dict(reopened.producers.producers) == expected == rebuilt_from_log(reopened)


def test_unreadable_or_out_of_range_snapshots_are_deleted_and_the_log_replayed(tmp_path: pathlib.Path) -> None:
    p = open_leader(tmp_path)
    fill(p, range(1, 3), 3)
    expected = dict(p.producers.producers)
    end = p.log_end_offset
    p.close()
    directory = str(tmp_path / TP.dir_name)
    path = os.path.join(directory, producer_snapshot.file_name(end))
    with open(path, "r+b") as f:
        f.seek(8)
        f.write(b"\xff\xff")
    producer_snapshot.write(directory, end + 50, [])  # beyond the log end (a lost tail)
    reopened = open_leader(tmp_path)
    assert dict(reopened.producers.producers) == expected
    assert producer_snapshot.list_offsets(directory) == []


def test_truncation_deletes_snapshots_above_the_cut(tmp_path: pathlib.Path) -> None:
    p = open_leader(tmp_path)
    fill(p, range(1, 2), 2)
    p.close()
    p = open_leader(tmp_path)
    for seq in (4, 6):
        assert p.append_records_to_leader(ibatch(seq, 1, 2), required_acks=1, now_ms=T0).error is ErrorCode.NONE
    p.close()
    directory = str(tmp_path / TP.dir_name)
    first, second = producer_snapshot.list_offsets(directory)
    p = open_partition(tmp_path / TP.dir_name, 1)
    p.make_follower(leader_id=2, leader_epoch=1, partition_epoch=1, replicas=(1, 2))
    assert p.truncate_to(first + 2) is True
    assert producer_snapshot.list_offsets(directory) == [first]
    assert dict(p.producers.producers) == rebuilt_from_log(p)
    entry = p.producers.entry(1)
    assert entry is not None and entry.last_sequence == 5 and entry.last_offset == first + 1
    p.truncate_fully_and_start_at(100)
    assert producer_snapshot.list_offsets(directory) == [] and len(p.producers) == 0
    assert second > first


def test_a_snapshot_below_the_log_start_is_dropped(tmp_path: pathlib.Path) -> None:
    p = open_leader(tmp_path, segment_bytes=300, retention_bytes=400)
    fill(p, range(1, 2), 1)
    p.close()
    p = open_leader(tmp_path, segment_bytes=300, retention_bytes=400)
    fill(p, range(2, 4), 5)
    assert p.delete_old_segments(T0) > 0
    expected = dict(p.producers.producers)
    p.log.flush()
    p.log.close_handlers()
    reopened = open_leader(tmp_path, segment_bytes=300, retention_bytes=400)
    assert reopened.log_start_offset > 2
    assert dict(reopened.producers.producers) == expected == rebuilt_from_log(reopened)
    assert producer_snapshot.list_offsets(str(tmp_path / TP.dir_name)) == []


def test_no_snapshot_of_an_unflushed_log(tmp_path: pathlib.Path) -> None:
    p = open_leader(tmp_path)
    fill(p, range(1, 2), 1)
    assert p.write_producer_snapshot() is False
    p.log.flush()
    assert p.write_producer_snapshot() is True
