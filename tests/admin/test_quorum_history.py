"""``kraftlog quorum history``: epochs, leaders and leaderless gaps read from a metadata log
written by the real StorageRaftLog, snapshots' headers, torn tails, and the command's output."""

from __future__ import annotations

import json
import pathlib

import pytest

from kraftlog.admin import quorum_history
from kraftlog.admin.quorum_history import EpochSource
from kraftlog.raft import control_records as cr
from kraftlog.raft.messages import OffsetAndEpoch
from kraftlog.raft.snapshot import SnapshotWriter
from kraftlog.raft.storage_log import StorageRaftLog
from kraftlog.storage import batch_header as bh
from kraftlog.storage import record_batch as rb
from kraftlog.tools import cli, quorum_commands

BASE_MS = 1_763_900_000_000  # 2025-11-23, a wall-clock timestamp


def _leader_change(leader: int, granted: tuple[int, ...], at_ms: int) -> bytes:
    value = cr.encode_leader_change(cr.LeaderChangeMessage(
        leader_id=leader, voters=(1, 2, 3), granting_voters=granted))
    return rb.build_batch([rb.RecordInput(key=cr.encode_key(cr.ControlRecordType.LEADER_CHANGE),
                                          value=value, timestamp_ms=at_ms)],
                          now_ms=at_ms, is_control=True)


def _data(at_ms: int, count: int = 2) -> bytes:
    return rb.build_batch([rb.RecordInput(value=b"r%d" % i, timestamp_ms=at_ms)
                           for i in range(count)], now_ms=at_ms)


def _write_log(directory: pathlib.Path) -> pathlib.Path:
    """Epoch 1 led by 1 (offsets 0..4), epoch 4 led by 3 after a 2.5 s gap (offsets 5..7)."""
    part = directory / quorum_commands.METADATA_PARTITION_DIR
    log = StorageRaftLog.open(part, clock_ms=lambda: BASE_MS)
    try:
        log.append_as_leader(_leader_change(1, (1, 2), BASE_MS), 1)        # offset 0
        log.append_as_leader(_data(BASE_MS + 100), 1)                       # 1..2
        log.append_as_leader(_data(BASE_MS + 500), 1)                       # 3..4
        log.append_as_leader(_leader_change(3, (2, 3), BASE_MS + 3000), 4)  # 5
        log.append_as_leader(_data(BASE_MS + 3100), 4)                      # 6..7
        log.flush()
    finally:
        log.close()
    return part


def test_history_lists_each_epoch_with_leader_voters_and_the_leaderless_gap(
        tmp_path: pathlib.Path) -> None:
    _write_log(tmp_path)
    history = quorum_commands.read_history(tmp_path)
    assert [(e.epoch, e.leader_id, e.granting_voters) for e in history.epochs] == [
        (1, 1, (1, 2)), (4, 3, (2, 3))]
    first, second = history.epochs
    assert first.voters == (1, 2, 3) and first.source is EpochSource.LEADER_CHANGE
    assert (first.start_offset, first.last_offset) == (0, 4)
    assert first.leaderless_ms is None  # nothing before the first epoch
    assert (second.start_offset, second.last_offset, second.previous_epoch) == (5, 7, 1)
    # Last batch of epoch 1 at +500 ms, LeaderChange of epoch 4 at +3000 ms.
    assert second.leaderless_ms == 2500
    assert second.start_timestamp_ms == BASE_MS + 3000
    assert (history.log_start_offset, history.log_end_offset) == (0, 8)
    assert history.warnings == ()


def test_text_output_is_a_table_with_iso_times(tmp_path: pathlib.Path) -> None:
    _write_log(tmp_path)
    lines = quorum_history.format_text(quorum_commands.read_history(tmp_path))
    assert lines[0] == "Log offsets 0..8 (end exclusive), 2 epochs"
    assert lines[1].split() == ["Epoch", "Leader", "Voters", "GrantingVoters", "StartOffset",
                                "LeaderSince", "LeaderlessMs", "LastOffset", "LastBatchTime"]
    assert lines[2].split()[:7] == ["1", "1", "[1,2,3]", "[1,2]", "0",
                                    "2025-11-23T12:13:20.000Z", "-"]
    assert lines[3].split()[:7] == ["4", "3", "[1,2,3]", "[2,3]", "5",
                                    "2025-11-23T12:13:23.000Z", "2500"]
    assert lines[4] == "Leader changes: 1; longest leaderless gap: 2500 ms (before epoch 4)"


def test_cli_prints_json_for_scripts(tmp_path: pathlib.Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    _write_log(tmp_path)
    assert cli.main(["quorum", "history", "--metadata-dir", str(tmp_path), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [(e["epoch"], e["leaderId"], e["leaderlessMs"]) for e in payload["epochs"]] == [
        (1, 1, None), (4, 3, 2500)]
    assert payload["epochs"][1]["grantingVoters"] == [2, 3]


def test_a_torn_or_corrupt_tail_ends_the_scan_with_a_warning(tmp_path: pathlib.Path) -> None:
    part = _write_log(tmp_path)
    segment = next(part.glob("*.log"))
    original = segment.read_bytes()
    torn = original + _leader_change(2, (1, 2), BASE_MS + 9000)[:-7]  # a batch cut short
    history = quorum_history.build_history([(segment.name, torn)])
    assert [e.epoch for e in history.epochs] == [1, 4]
    assert history.log_end_offset == 8
    assert len(history.warnings) == 1 and segment.name in history.warnings[0]
    # A flipped byte inside the last batch (epoch 4's data): the CRC check stops before it.
    damaged_bytes = bytearray(original)
    damaged_bytes[-3] ^= 0xFF
    damaged = quorum_history.build_history([(segment.name, bytes(damaged_bytes))])
    assert [e.epoch for e in damaged.epochs] == [1, 4]
    assert damaged.log_end_offset == 6 and damaged.epochs[1].last_offset == 5
    assert damaged.warnings and "CRC" in damaged.warnings[0].upper()


def test_epochs_truncated_into_a_snapshot_show_as_unknown_leader_and_snapshots_are_listed(
        tmp_path: pathlib.Path) -> None:
    writer = SnapshotWriter(OffsetAndEpoch(offset=5, epoch=1),
                            last_contained_log_timestamp=BASE_MS + 500, now_ms=BASE_MS + 600)
    writer.append([b"state"])
    # The log kept only epoch 1's tail (no LeaderChange) and epoch 4.
    segments = [("00000000000000000003.log",
                 rb.build_batch([rb.RecordInput(value=b"x", timestamp_ms=BASE_MS + 500)],
                                base_offset=3, partition_leader_epoch=1, now_ms=BASE_MS + 500)
                 + _with(_leader_change(3, (2, 3), BASE_MS + 1500), base_offset=4, epoch=4))]
    history = quorum_history.build_history(segments, [(OffsetAndEpoch(offset=5, epoch=1),
                                                       writer.build())])
    assert [(e.epoch, e.leader_id, e.source) for e in history.epochs] == [
        (1, -1, EpochSource.BATCHES_ONLY), (4, 3, EpochSource.LEADER_CHANGE)]
    assert history.epochs[1].leaderless_ms == 1000
    (snapshot,) = history.snapshots
    assert snapshot.last_contained_log_timestamp_ms == BASE_MS + 500 and snapshot.error is None
    text = quorum_history.format_text(history)
    assert text[0].startswith("Snapshot  EndOffset: 5  Epoch: 1")
    assert text[3].split()[:4] == ["1", "?", "?", "?"]


def test_a_damaged_snapshot_is_reported_not_fatal() -> None:
    entry = quorum_history.snapshot_entry(OffsetAndEpoch(offset=5, epoch=1), b"\x00" * 80)
    assert entry.error is not None


def test_monotonic_timestamps_are_shown_raw() -> None:
    assert quorum_history.format_timestamp(123_456) == "123456ms(mono)"
    assert quorum_history.format_timestamp(-1) == "-"


def test_empty_log_and_wrong_directory(tmp_path: pathlib.Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / quorum_commands.METADATA_PARTITION_DIR).mkdir()
    assert quorum_history.format_text(quorum_commands.read_history(tmp_path)) == [
        "The metadata log holds no batches."]
    other = tmp_path / "elsewhere"
    other.mkdir()
    assert cli.main(["quorum", "history", "--metadata-dir", str(other)]) == cli.EXIT_ERROR
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "holds no __cluster_metadata-0" in err


def _with(batch: bytes, *, base_offset: int, epoch: int) -> bytes:
    """``batch`` with its offset and epoch patched as a leader's append does."""
    buf = bytearray(batch)
    header = bh.BatchHeader(buf)
    header.set_base_offset(base_offset)
    header.set_partition_leader_epoch(epoch)
    return bytes(buf)
