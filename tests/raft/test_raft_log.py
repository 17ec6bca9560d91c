"""The RaftLog contract, run against MemoryRaftLog and StorageRaftLog alike (the parametrized
scenarios), then what only a disk has: reopen, torn tails, snapshot files, corruption, a 3-node cluster."""

from __future__ import annotations

import itertools
import os
import pathlib
from collections.abc import Callable, Iterator
from typing import Protocol

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from kraftlog.errors import (
    CorruptFileError,
    CorruptRecordError,
    InvariantViolation,
    OffsetOutOfRangeError,
)
from kraftlog.raft import snapshot as snap
from kraftlog.raft.memory_log import MemoryRaftLog
from kraftlog.raft.messages import OffsetAndEpoch
from kraftlog.raft.raft_log import RaftLog
from kraftlog.raft.storage_log import StorageRaftLog
from kraftlog.storage import checkpoint, log_config
from kraftlog.storage import record_batch as rb

_CLOCK = itertools.count(1_000_000)


def clock_ms() -> int:
    return next(_CLOCK)


def batch(*values: bytes) -> bytes:
    return rb.build_batch([rb.RecordInput(value=v) for v in values])


def read_all(log: RaftLog, start_offset: int) -> list[rb.DecodedBatch]:
    """Every batch from ``start_offset`` (one read may stop at a segment boundary)."""
    out: list[rb.DecodedBatch] = []
    while start_offset < log.end_offset:
        found = rb.decode_batches(log.read(start_offset, 1 << 20))
        out.extend(found)
        start_offset = found[-1].last_offset + 1
    return out


def snapshot_bytes(snapshot_id: OffsetAndEpoch, *values: bytes) -> bytes:
    writer = snap.SnapshotWriter(snapshot_id, last_contained_log_timestamp=-1, now_ms=0)
    writer.append(list(values))
    return writer.build()


def open_log(directory: pathlib.Path, **overrides: int | None) -> StorageRaftLog:
    config = log_config.LogConfig.for_metadata_log(**overrides) if overrides else None
    return StorageRaftLog.open(directory, clock_ms=clock_ms, config=config, name="storage log")


class NamedLog(RaftLog, Protocol):
    name: str


class Logs:
    """Makes logs of one kind and crashes them (memory: drop the unflushed suffix; storage:
    close the files without flushing and reopen the directory)."""

    def __init__(self, kind: str, root: pathlib.Path) -> None:
        self.kind = kind
        self._root = root
        self._count = itertools.count()
        self.opened: list[StorageRaftLog] = []

    def make(self, name: str = "log") -> NamedLog:
        if self.kind == "memory":
            return MemoryRaftLog(name)
        log = StorageRaftLog.open(self._root / f"{next(self._count)}" / "__cluster_metadata-0",
                                  clock_ms=clock_ms, name=name)
        self.opened.append(log)
        return log

    def crash(self, log: NamedLog) -> NamedLog:
        if isinstance(log, MemoryRaftLog):
            log.crash()
            return log
        assert isinstance(log, StorageRaftLog)
        log.abandon()
        reopened = StorageRaftLog.open(log.directory, clock_ms=clock_ms, name=log.name)
        self.opened.append(reopened)
        return reopened


@pytest.fixture(params=["memory", "storage"])
def logs(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Logs]:
    factory = Logs(request.param, tmp_path)
    yield factory
    for log in factory.opened:
        log.abandon()


# -- the MemoryRaftLog scenarios, against both ---------------------------------------------------

def test_leader_append_assigns_offsets_and_epoch(logs: Logs) -> None:
    log = logs.make()
    assert log.append_as_leader(batch(b"a", b"b"), 1).last_offset == 1
    info = log.append_as_leader(batch(b"c"), 3)
    assert (info.first_offset, info.last_offset) == (2, 2)
    decoded = read_all(log, 0)
    assert [(b.base_offset, b.partition_leader_epoch) for b in decoded] == [(0, 1), (2, 3)]
    assert log.end_offset == 3 and log.last_fetched_epoch() == 3
    with pytest.raises(CorruptRecordError, match="epoch 2 below the previous epoch 3"):
        log.append_as_leader(batch(b"d"), 2)


def test_follower_append_checks_contiguity_and_epochs(logs: Logs) -> None:
    leader = logs.make()
    leader.append_as_leader(batch(b"a"), 2)
    leader.append_as_leader(batch(b"b"), 2)
    follower = logs.make("f")
    with pytest.raises(CorruptRecordError, match="base offset 1, expected 0"):
        follower.append_as_follower(leader.read(1, 100))
    follower.append_as_follower(leader.read(0, 1 << 20))
    assert follower.end_offset == 2
    older = rb.build_batch([rb.RecordInput(value=b"x")], base_offset=2, partition_leader_epoch=1)
    with pytest.raises(CorruptRecordError, match="epoch 1 below the previous epoch 2"):
        follower.append_as_follower(older)
    with pytest.raises(CorruptRecordError, match="partial batch"):
        follower.append_as_follower(leader.read(1, 100)[:20])
    with pytest.raises(CorruptRecordError, match="empty follower append"):
        follower.append_as_follower(b"")
    assert follower.end_offset == 2


def test_corrupt_crc_is_rejected_before_append(logs: Logs) -> None:
    data = bytearray(batch(b"hello"))
    data[-1] ^= 0xFF
    log = logs.make()
    with pytest.raises(CorruptRecordError):
        log.append_as_follower(bytes(data))
    assert log.end_offset == 0


def test_read_returns_whole_batches_and_at_least_one(logs: Logs) -> None:
    log = logs.make()
    for i in range(3):
        log.append_as_leader(batch(bytes([i]) * 50), 1)
    one = log.read(1, 10)
    assert [b.base_offset for b in rb.decode_batches(one)] == [1]
    assert log.read(3, 100) == b""
    with pytest.raises(OffsetOutOfRangeError, match="read at 4 outside"):
        log.read(4, 100)


def test_end_offset_for_epoch_uses_the_epoch_cache(logs: Logs) -> None:
    log = logs.make()
    log.append_as_leader(batch(b"a", b"b"), 1)
    log.append_as_leader(batch(b"c"), 3)
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(offset=2, epoch=1)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(offset=2, epoch=1)
    assert log.end_offset_for_epoch(5) == OffsetAndEpoch(offset=3, epoch=3)
    assert log.end_offset_for_epoch(0) == OffsetAndEpoch(offset=0, epoch=-1)


def test_truncation_never_below_high_watermark_and_drops_whole_batches(logs: Logs) -> None:
    log = logs.make("n1 log")
    log.append_as_leader(batch(b"a", b"b"), 1)
    log.append_as_leader(batch(b"c"), 2)
    log.update_high_watermark(2)
    with pytest.raises(InvariantViolation, match="n1 log: truncation to 0 below the high "
                                                 "watermark 2"):
        log.truncate_to(0)
    log.truncate_to(2)
    assert log.end_offset == 2 and log.last_fetched_epoch() == 1
    log.append_as_leader(batch(b"d", b"e"), 4)
    with pytest.raises(OffsetOutOfRangeError, match="outside"):
        log.truncate_to(5)
    log.truncate_to(3)  # inside the batch d,e: the whole batch goes, as in Kafka
    assert log.end_offset == 2 and log.last_fetched_epoch() == 1
    log.append_as_leader(batch(b"f", b"g"), 5)
    log.update_high_watermark(3)
    with pytest.raises(InvariantViolation, match="below the high watermark 3"):
        log.truncate_to(3)  # would drop the batch at 2, which holds a committed entry


def test_crash_loses_only_the_unflushed_suffix(logs: Logs) -> None:
    log = logs.make()
    log.append_as_leader(batch(b"a"), 1)
    log.flush()
    log.append_as_leader(batch(b"b"), 2)
    log.update_high_watermark(2)
    durable = log.flushed_offset
    assert durable == 1  # raft flushes; the log does not fsync on append by itself
    log = logs.crash(log)
    # The memory log drops the unflushed suffix; a killed process keeps what reached the
    # page cache (the storage log's crash), so "b" may survive, but nothing flushed is lost.
    assert durable <= log.end_offset <= 2 and log.high_watermark == 0
    assert log.last_fetched_epoch() == (1 if log.end_offset == 1 else 2)
    assert log.end_offset_for_epoch(2).offset == log.end_offset


def test_snapshot_advances_start_and_anchors_epochs(logs: Logs) -> None:
    log = logs.make()
    log.append_as_leader(batch(b"a", b"b"), 1)
    log.append_as_leader(batch(b"c"), 2)
    log.update_high_watermark(3)
    snap_id = OffsetAndEpoch(offset=2, epoch=1)
    data = snapshot_bytes(snap_id, b"a", b"b")
    log.write_snapshot(snap_id, data)
    early = logs.make()
    early.append_as_leader(batch(b"a", b"b"), 1)
    early.write_snapshot(snap_id, data)
    with pytest.raises(InvariantViolation, match="ends beyond the high watermark 0"):
        early.delete_before_snapshot(snap_id)
    with pytest.raises(InvariantViolation, match="no snapshot"):
        log.delete_before_snapshot(OffsetAndEpoch(offset=1, epoch=1))
    assert log.delete_before_snapshot(snap_id)
    assert not log.delete_before_snapshot(snap_id)
    assert log.start_offset == 2 and log.latest_snapshot_id() == snap_id
    assert log.read_snapshot(snap_id) == data
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(offset=2, epoch=1)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 100)
    fresh = logs.make()
    fresh.write_snapshot(snap_id, data)
    fresh.reset_to_snapshot(snap_id)
    assert (fresh.start_offset, fresh.end_offset, fresh.last_fetched_epoch()) == (2, 2, 1)
    assert fresh.high_watermark == 2
    assert fresh.end_offset_for_epoch(7) == snap_id
    fresh.append_as_follower(log.read(2, 100))
    assert fresh.end_offset == 3


def test_snapshot_covering_the_whole_log_leaves_it_empty_at_the_snapshot(logs: Logs) -> None:
    log = logs.make()
    log.append_as_leader(batch(b"a"), 1)
    log.append_as_leader(batch(b"b"), 2)
    log.update_high_watermark(2)
    old = OffsetAndEpoch(offset=1, epoch=1)
    new = OffsetAndEpoch(offset=2, epoch=2)
    log.write_snapshot(old, snapshot_bytes(old, b"a"))
    assert log.delete_before_snapshot(old)
    log.write_snapshot(new, snapshot_bytes(new, b"a", b"b"))
    assert log.delete_before_snapshot(new)
    assert log.read_snapshot(old) is None and log.latest_snapshot_id() == new
    assert (log.start_offset, log.end_offset, log.last_fetched_epoch()) == (2, 2, 2)
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(offset=2, epoch=-1)
    assert log.end_offset_for_epoch(3) == new


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["append", "flush", "crash", "truncate", "hw"]),
                          st.integers(1, 3)), max_size=25))
def test_log_matches_a_list_model(logs: Logs, ops: list[tuple[str, int]]) -> None:
    """Against a list of epochs per offset: durable prefix, truncation and epochs stay exact."""
    log = logs.make()
    model: list[int] = []  # epoch per offset
    boundaries = [0]
    epoch = 1
    for op, n in ops:
        if op == "append":
            epoch += n % 2
            log.append_as_leader(batch(*[b"v"] * n), epoch)
            model.extend([epoch] * n)
            boundaries.append(len(model))
        elif op == "flush":
            log.flush()
        elif op == "crash":
            flushed, appended = log.flushed_offset, len(model)
            log = logs.crash(log)
            # Everything flushed survives; a killed process may also keep what reached the
            # page cache (the storage log), never more than was appended, at a batch edge.
            assert flushed <= log.end_offset <= appended
            assert log.end_offset in boundaries
            del model[log.end_offset:]
            boundaries = [b for b in boundaries if b <= log.end_offset]
        elif op == "truncate":
            target = boundaries[max(0, len(boundaries) - 1 - n)]
            if target >= log.high_watermark:
                log.truncate_to(target)
                del model[target:]
                boundaries = [b for b in boundaries if b <= target]
        elif op == "hw":
            log.update_high_watermark(log.high_watermark + n)
        epoch = max([epoch, *model])
        assert log.end_offset == len(model)
        assert log.flushed_offset <= log.end_offset
        assert log.high_watermark <= log.end_offset
        assert log.last_fetched_epoch() == (model[-1] if model else 0)
        for e in set(model):
            assert log.end_offset_for_epoch(e).offset == max(
                i for i, x in enumerate(model) if x <= e) + 1
        decoded = read_all(log, 0)
        assert [r.offset for b in decoded for r in b.records] == list(range(len(model)))


# -- what only the disk-backed log has ----------------------------------------------------------

def test_close_and_reopen_keeps_everything(tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(b"a", b"b"), 1)
    log.append_as_leader(batch(b"c"), 3)
    log.update_high_watermark(3)
    assert log.flushed_offset == 0  # raft flushes; appends alone do not fsync
    log.flush()
    assert log.flushed_offset == 3
    expected = log.read(0, 1 << 20)
    log.close()
    recovery = checkpoint.OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint")
    assert list(recovery.read().values()) == [3]
    epochs = checkpoint.LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint").read()
    assert [(e.epoch, e.start_offset) for e in epochs] == [(1, 0), (3, 2)]
    again = open_log(tmp_path)
    assert (again.start_offset, again.end_offset, again.flushed_offset) == (0, 3, 3)
    assert again.high_watermark == 0  # not persisted: the leader re-establishes it (KRaft)
    assert again.read(0, 1 << 20) == expected
    assert again.last_fetched_epoch() == 3
    assert again.end_offset_for_epoch(2) == OffsetAndEpoch(offset=2, epoch=1)
    again.close()


def test_torn_tail_after_a_crash_is_cut_at_the_last_whole_batch(tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(b"a"), 1)
    log.append_as_leader(batch(b"b", b"c"), 2)
    log.abandon()  # crash: no clean close, the recovery point stays at the last checkpoint (0)
    segment = tmp_path / "00000000000000000000.log"
    size = segment.stat().st_size
    second = rb.decode_batches(segment.read_bytes())[1]
    assert second.base_offset == 1
    with open(segment, "r+b") as f:
        f.truncate(size - 5)  # the second batch was half written when the power went
    again = open_log(tmp_path)
    assert again.end_offset == 1 and again.last_fetched_epoch() == 1
    assert again.end_offset_for_epoch(2) == OffsetAndEpoch(offset=1, epoch=1)
    again.append_as_leader(batch(b"d"), 4)
    assert [b.partition_leader_epoch for b in rb.decode_batches(again.read(0, 1 << 20))] == [1, 4]
    again.close()


def test_truncation_lowers_the_recovery_checkpoint_so_a_torn_tail_stays_recoverable(
        tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path, segment_bytes=200)
    for i in range(6):
        log.append_as_leader(batch(bytes([i]) * 40), 1)
    log.close()
    log = open_log(tmp_path, segment_bytes=200)
    log.truncate_to(2)
    recovery = checkpoint.OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint")
    assert list(recovery.read().values()) == [2]
    log.append_as_leader(batch(b"new"), 2)
    log.abandon()
    segments = sorted(tmp_path.glob("*.log"))
    last = segments[-1]
    with open(last, "r+b") as f:
        f.truncate(last.stat().st_size - 3)
    again = open_log(tmp_path, segment_bytes=200)
    assert again.end_offset == 2 and again.last_fetched_epoch() == 1
    again.close()


def test_snapshots_survive_reopen_and_the_log_start_follows_the_latest(tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path, segment_bytes=150)
    for i in range(6):
        log.append_as_leader(batch(bytes([i]) * 40), 1 + i // 3)
    log.update_high_watermark(6)
    first = OffsetAndEpoch(offset=2, epoch=1)
    second = OffsetAndEpoch(offset=4, epoch=2)
    log.write_snapshot(first, snapshot_bytes(first, b"s1"))
    assert log.delete_before_snapshot(first)
    segments_before = len(list(tmp_path.glob("*.log")))
    # A crash between writing the second snapshot and cleaning to it:
    log.write_snapshot(second, snapshot_bytes(second, b"s2"))
    assert sorted(p.name for p in tmp_path.glob("*.checkpoint")) == [
        "00000000000000000002-0000000001.checkpoint", "00000000000000000004-0000000002.checkpoint"]
    assert not list(tmp_path.glob("*.part"))
    log.abandon()
    (tmp_path / "00000000000000000009-0000000003.checkpoint.part").write_bytes(b"half")
    again = open_log(tmp_path, segment_bytes=150)
    assert again.latest_snapshot_id() == second and again.start_offset == 4
    assert again.read_snapshot(first) is None
    assert sorted(p.name for p in tmp_path.glob("*.checkpoint*")) == [
        "00000000000000000004-0000000002.checkpoint"]
    assert len(list(tmp_path.glob("*.log"))) <= segments_before
    reader = snap.read_snapshot_records(second, again.read_snapshot(second) or b"")
    assert list(reader) == [b"s2"]
    assert again.end_offset == 6 and again.last_fetched_epoch() == 2
    assert [b.base_offset for b in read_all(again, 4)] == [4, 5]
    with pytest.raises(OffsetOutOfRangeError):
        again.read(3, 100)
    again.close()


def test_a_snapshot_ahead_of_the_log_restarts_it_at_the_snapshot(tmp_path: pathlib.Path) -> None:
    """A follower crashed between storing a fetched snapshot and resetting its log to it."""
    log = open_log(tmp_path)
    log.append_as_leader(batch(b"a"), 1)
    fetched = OffsetAndEpoch(offset=10, epoch=3)
    log.write_snapshot(fetched, snapshot_bytes(fetched, b"state"))
    log.abandon()
    again = open_log(tmp_path)
    assert (again.start_offset, again.end_offset, again.last_fetched_epoch()) == (10, 10, 3)
    assert again.end_offset_for_epoch(5) == fetched
    again.close()


def test_a_snapshot_that_disagrees_with_the_log_restarts_it_at_the_snapshot(
        tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(b"a", b"b"), 1)  # our offsets 0-1 are epoch 1 ...
    fetched = OffsetAndEpoch(offset=2, epoch=2)  # ... the leader's offset 1 was epoch 2
    log.write_snapshot(fetched, snapshot_bytes(fetched, b"state"))
    log.abandon()
    again = open_log(tmp_path)
    assert (again.start_offset, again.end_offset, again.last_fetched_epoch()) == (2, 2, 2)
    again.close()


def test_reset_to_snapshot_survives_reopen(tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(b"a"), 1)
    fetched = OffsetAndEpoch(offset=7, epoch=2)
    log.write_snapshot(fetched, snapshot_bytes(fetched, b"x"))
    log.reset_to_snapshot(fetched)
    log.append_as_follower(rb.build_batch([rb.RecordInput(value=b"y")], base_offset=7,
                                          partition_leader_epoch=2))
    log.close()
    again = open_log(tmp_path)
    assert (again.start_offset, again.end_offset, again.last_fetched_epoch()) == (7, 8, 2)
    assert again.end_offset_for_epoch(1) == OffsetAndEpoch(offset=7, epoch=-1)
    assert again.end_offset_for_epoch(2) == OffsetAndEpoch(offset=8, epoch=2)
    again.close()


def test_corrupt_snapshot_file_is_reported_with_its_name(tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path)
    snap_id = OffsetAndEpoch(offset=0, epoch=0)
    log.write_snapshot(snap_id, snapshot_bytes(snap_id, b"bootstrap"))
    log.close()
    path = tmp_path / snap.snapshot_file_name(snap_id)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    again = open_log(tmp_path)
    with pytest.raises(CorruptRecordError, match=r"00000000000000000000-0000000000\.checkpoint"):
        again.read_snapshot(snap_id)
    path.write_bytes(bytes(data[:-7]))
    with pytest.raises(CorruptRecordError, match="checkpoint"):
        open_log(tmp_path).read_snapshot(snap_id)
    again.close()


def test_corrupt_leader_epoch_checkpoint_refuses_to_open(tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(b"a"), 1)
    log.close()
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n1\n1 zero\n")
    with pytest.raises(CorruptFileError, match="leader-epoch-checkpoint"):
        open_log(tmp_path)


def test_log_start_without_a_covering_snapshot_refuses_to_open(tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path, segment_bytes=100)
    for i in range(4):
        log.append_as_leader(batch(bytes([i]) * 40), 1)
    log.update_high_watermark(4)
    snap_id = OffsetAndEpoch(offset=3, epoch=1)
    log.write_snapshot(snap_id, snapshot_bytes(snap_id, b"s"))
    assert log.delete_before_snapshot(snap_id)
    log.close()
    os.unlink(tmp_path / snap.snapshot_file_name(snap_id))
    with pytest.raises(CorruptFileError, match="offsets below 3 are lost"):
        open_log(tmp_path, segment_bytes=100)


def test_storage_format_directory_opens_with_its_bootstrap_file(tmp_path: pathlib.Path) -> None:
    (tmp_path / "bootstrap-voters.json").write_text("{}")
    log = open_log(tmp_path)
    log.append_as_leader(batch(b"a"), 1)
    log.close()
    assert (tmp_path / "bootstrap-voters.json").read_text() == "{}"
    assert open_log(tmp_path).end_offset == 1


# -- the raft client over real directories ------------------------------------------------------

def test_three_node_cluster_elects_commits_and_restarts_on_disk(tmp_path: pathlib.Path) -> None:
    from tests.raft.harness import Node, leader_of, run

    def storage(node_id: int) -> StorageRaftLog:
        return StorageRaftLog.open(tmp_path / f"node-{node_id}" / "__cluster_metadata-0",
                                   clock_ms=clock_ms, name=f"node-{node_id} log")

    nodes = {n: Node(n, seed=n, log=storage(n)) for n in (1, 2, 3)}  # type: ignore[arg-type]
    run(nodes, 0, 600)
    leader = leader_of(nodes)
    leader.client.propose([b"one", b"two"], 600)
    leader.client.propose([b"three"], 602)
    run(nodes, 600, 700)
    for node in nodes.values():
        assert node.listener.values() == [b"one", b"two", b"three"]
        assert node.log.high_watermark == leader.log.high_watermark == leader.log.end_offset
    # Snapshot on the leader; its log start follows, on disk too.
    end = leader.client.listener_next_offset
    writer = leader.client.create_snapshot(end, now_ms=700)
    writer.append(leader.listener.values())
    snapshot_id = leader.client.freeze_snapshot(writer)
    assert leader.log.start_offset == end
    # Restart a follower from its directory: the data is there and it catches up.
    follower_id = next(n for n in nodes if n != leader.node_id)
    closer: Callable[[], None] = nodes[follower_id].log.close  # type: ignore[attr-defined]
    closer()
    restarted_log = storage(follower_id)
    assert restarted_log.end_offset == leader.log.end_offset
    nodes[follower_id] = Node(follower_id, seed=9, log=restarted_log,  # type: ignore[arg-type]
                              store=nodes[follower_id].store, now_ms=700)
    leader.client.propose([b"four"], 710)
    run(nodes, 700, 900)
    assert nodes[follower_id].listener.values()[-1:] == [b"four"]
    assert nodes[follower_id].log.end_offset == leader.log.end_offset
    leader_dir = tmp_path / f"node-{leader.node_id}" / "__cluster_metadata-0"
    assert (leader_dir / snap.snapshot_file_name(snapshot_id)).exists()
    for node in nodes.values():
        node.log.close()  # type: ignore[attr-defined]


def test_empty_follower_on_disk_fetches_the_snapshot_and_keeps_it(tmp_path: pathlib.Path) -> None:
    from tests.raft.harness import Node, leader_of, run

    def storage(node_id: int) -> StorageRaftLog:
        return StorageRaftLog.open(tmp_path / f"node-{node_id}" / "__cluster_metadata-0",
                                   clock_ms=clock_ms, name=f"node-{node_id} log")

    nodes = {n: Node(n, seed=n, log=storage(n)) for n in (1, 2)}  # type: ignore[arg-type]
    run(nodes, 0, 600)
    leader = leader_of(nodes)
    leader.client.propose([f"value-{i}".encode() for i in range(30)], 600)
    run(nodes, 600, 620)
    writer = leader.client.create_snapshot(leader.client.listener_next_offset, now_ms=620)
    writer.append(leader.listener.values())
    snapshot_id = leader.client.freeze_snapshot(writer)
    nodes[3] = Node(3, log=storage(3), now_ms=620)  # type: ignore[arg-type]
    run(nodes, 620, 900)
    fresh = nodes[3]
    assert [r.snapshot_id for r in fresh.listener.snapshots] == [snapshot_id]
    assert fresh.log.start_offset == snapshot_id.offset
    leader.client.propose([b"after"], 900)
    run(nodes, 900, 920)
    assert fresh.listener.values() == [b"after"]
    fresh.log.close()  # type: ignore[attr-defined]
    reopened = storage(3)
    assert reopened.latest_snapshot_id() == snapshot_id
    assert (reopened.start_offset, reopened.end_offset) == (snapshot_id.offset, leader.log.end_offset)
    data = reopened.read_snapshot(snapshot_id)
    assert data is not None and len(snap.read_snapshot_records(snapshot_id, data).records) == 30
    reopened.close()
    for node_id in (1, 2):
        nodes[node_id].log.close()  # type: ignore[attr-defined]


_OPS = st.lists(st.tuples(st.sampled_from(["append", "truncate", "hw", "snapshot", "restart"]),
                          st.integers(0, 3)), max_size=30)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_OPS)
@example([("append", 1), ("append", 2), ("append", 3), ("hw", 3), ("snapshot", 0),
          ("restart", 0), ("append", 1), ("append", 0), ("hw", 0), ("truncate", 0),
          ("append", 3), ("hw", 3), ("hw", 3), ("snapshot", 0), ("restart", 1), ("append", 2)])
@example([("append", 1), ("append", 1), ("append", 1), ("snapshot", 1), ("restart", 0)])
def test_storage_log_behaves_like_the_memory_log(tmp_path: pathlib.Path,
                                                 ops: list[tuple[str, int]]) -> None:
    """Differential: the same calls on both logs give the same observable state."""
    directory = tmp_path / f"diff-{next(_CLOCK)}"
    memory = MemoryRaftLog("log")
    disk = StorageRaftLog.open(directory, clock_ms=clock_ms, name="log",
                               config=log_config.LogConfig.for_metadata_log(segment_bytes=180))
    boundaries = [0]
    epoch = 1
    try:
        for op, n in ops:
            if op == "append":
                epoch += n % 2
                data = batch(*[bytes([n]) * 30] * (n + 1))
                assert memory.append_as_leader(data, epoch) == disk.append_as_leader(data, epoch)
                boundaries.append(memory.end_offset)
            elif op == "truncate":
                target = boundaries[max(0, len(boundaries) - 1 - n)]
                if memory.high_watermark <= target and target >= memory.start_offset:
                    memory.truncate_to(target)
                    disk.truncate_to(target)
                    boundaries = [b for b in boundaries if b <= target]
                    event("truncate")
            elif op == "hw":
                memory.update_high_watermark(memory.high_watermark + n + 1)
                disk.update_high_watermark(disk.high_watermark + n + 1)
            elif op == "snapshot":
                # Commit everything, then snapshot at one of the last batch boundaries.
                memory.update_high_watermark(memory.end_offset)
                disk.update_high_watermark(disk.end_offset)
                ends = [b for b in boundaries if memory.start_offset < b <= memory.high_watermark]
                if ends:
                    end = ends[max(0, len(ends) - 1 - n)]
                    snap_id = OffsetAndEpoch(offset=end, epoch=memory.epoch_of(end - 1))
                    assert disk.epoch_of(end - 1) == snap_id.epoch
                    data = snapshot_bytes(snap_id, b"state")
                    memory.write_snapshot(snap_id, data)
                    disk.write_snapshot(snap_id, data)
                    assert memory.delete_before_snapshot(snap_id)
                    assert disk.delete_before_snapshot(snap_id)
                    event("snapshot")
            elif op == "restart":
                event("restart after snapshot" if memory.latest_snapshot_id() else "restart")
                memory.flush()
                memory.crash()
                if n % 2:
                    disk.close()
                else:
                    disk.abandon()
                disk = StorageRaftLog.open(
                    directory, clock_ms=clock_ms, name="log",
                    config=log_config.LogConfig.for_metadata_log(segment_bytes=180))
            epoch = max(epoch, memory.last_fetched_epoch())
            assert (disk.start_offset, disk.end_offset, disk.high_watermark) == (
                memory.start_offset, memory.end_offset, memory.high_watermark)
            assert disk.last_fetched_epoch() == memory.last_fetched_epoch()
            assert disk.latest_snapshot_id() == memory.latest_snapshot_id()
            for e in range(epoch + 2):
                assert disk.end_offset_for_epoch(e) == memory.end_offset_for_epoch(e), e
            assert [(b.base_offset, b.partition_leader_epoch, b.records) for b in
                    read_all(disk, disk.start_offset)] == [
                (b.base_offset, b.partition_leader_epoch, b.records) for b in
                read_all(memory, memory.start_offset)]
    finally:
        disk.abandon()


def test_reads_of_the_recently_appended_tail_match_the_memory_log(tmp_path: pathlib.Path) -> None:
    """StorageRaftLog serves the batches it just appended from memory: at every offset and
    size, after leader and follower appends, a truncation, a snapshot and a reopen, a read is
    what MemoryRaftLog reads, or (from the files, which a read does not cross) a prefix of it
    of at least one whole batch."""
    leader = open_log(tmp_path / "leader", segment_bytes=400)
    follower = open_log(tmp_path / "follower", segment_bytes=400)
    leader.name, follower.name = "leader", "follower"
    memory = MemoryRaftLog("memory")

    def check() -> None:
        assert (leader.end_offset, follower.end_offset) == (memory.end_offset,) * 2
        for start in range(memory.start_offset, memory.end_offset + 1):
            for max_bytes in (1, 90, 200, 1 << 20):
                expected = memory.read(start, max_bytes)
                for log in (leader, follower):
                    got = log.read(start, max_bytes)
                    assert expected.startswith(got) and bool(got) == bool(expected), (
                        log.name, start, max_bytes)
                    if got:
                        assert rb.decode_batches(got)[-1].last_offset >= start
                if start >= memory.end_offset - 3:  # the tail: served from memory, exactly
                    assert leader.read(start, max_bytes) == expected

    try:
        for n in range(12):
            data = batch(*[bytes([n]) * 20] * (1 + n % 3))
            leader.append_as_leader(data, 1 + n // 6)
            memory.append_as_leader(data, 1 + n // 6)
            if n % 4 == 3:  # followers append what they fetched: several batches at once
                follower.append_as_follower(leader.read(follower.end_offset, 1 << 20))
        while follower.end_offset < leader.end_offset:
            follower.append_as_follower(leader.read(follower.end_offset, 1 << 20))
        check()
        for log in (leader, follower, memory):
            log.truncate_to(10)
            log.append_as_leader(batch(b"after truncation"), 3)
        check()
        end = memory.end_offset
        for log in (leader, follower, memory):
            log.update_high_watermark(end)
            snapshot_id = OffsetAndEpoch(offset=6, epoch=log.epoch_of(5))
            log.write_snapshot(snapshot_id, snapshot_bytes(snapshot_id, b"state"))
            assert log.delete_before_snapshot(snapshot_id)
        check()
        leader.close()
        leader = open_log(tmp_path / "leader", segment_bytes=400)
        leader.update_high_watermark(end)
        check()
    finally:
        leader.abandon()
        follower.abandon()


def test_two_step_flush_covers_what_was_appended_at_its_start(logs: Logs) -> None:
    log = logs.make()
    log.append_as_leader(batch(b"a", b"b"), 1)
    log.flush()
    assert log.flushed_offset == 2 and log.begin_flush() is None
    log.append_as_leader(batch(b"c"), 1)
    pending = log.begin_flush()
    if pending is None:  # the segmented log may flush synchronously (first flush of a segment)
        assert log.flushed_offset == 3
        log.append_as_leader(batch(b"c2"), 1)
        pending = log.begin_flush()
    assert pending is not None
    covered = pending.target
    assert covered == log.end_offset and log.flushed_offset == covered - 1
    log.append_as_leader(batch(b"d"), 1)
    assert log.flushed_offset == covered - 1  # nothing moves before completion
    pending.run()
    log.complete_flush(pending)
    assert log.flushed_offset == covered  # ...and then only up to its target
    log.flush()
    assert log.flushed_offset == log.end_offset


def test_a_truncation_lapses_a_flush_begun_before_it(logs: Logs) -> None:
    log = logs.make()
    log.append_as_leader(batch(b"a"), 1)
    log.flush()
    log.append_as_leader(batch(b"b"), 1)
    log.flush()
    log.append_as_leader(batch(b"c"), 1)
    log.append_as_leader(batch(b"d"), 1)
    pending = log.begin_flush()
    assert pending is not None and pending.target == 4
    log.truncate_to(2)
    assert log.flushed_offset == 2
    log.append_as_follower(rb.build_batch([rb.RecordInput(value=b"x"), rb.RecordInput(value=b"y")],
                                          base_offset=2, partition_leader_epoch=2))
    pending.run()
    log.complete_flush(pending)  # it covered the truncated c, d: says nothing about x, y
    assert log.end_offset == 4 and log.flushed_offset == 2


def test_fast_flush_survives_a_crash_and_reopen(tmp_path: pathlib.Path) -> None:
    """The fsync-only flush leaves the segmented log's recovery point behind; a crash (no
    close) then recovers from it and keeps every flushed entry."""
    log = open_log(tmp_path)
    for i in range(20):
        log.append_as_leader(batch(b"v%d" % i), 1)
        log.flush()
    assert log.flushed_offset == 20
    log.abandon()
    reopened = open_log(tmp_path)
    assert reopened.end_offset == 20
    assert [r.value for b in read_all(reopened, 0) for r in b.records] == \
        [b"v%d" % i for i in range(20)]
    reopened.close()


def test_a_roll_takes_the_full_flush_and_fsyncs_the_new_segment(tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path, segment_bytes=log_config.MIN_SEGMENT_BYTES)
    value = b"x" * 200
    while len(log._log.segments) < 3:
        log.append_as_leader(batch(value), 1)
        pending = log.begin_flush()
        if pending is not None:  # fast path: inside a segment already fully flushed into
            base = log._log.segments[-1].base_offset
            assert log._log.recovery_point > base
            pending.run()
            log.complete_flush(pending)
        assert log.flushed_offset == log.end_offset
    log.abandon()
    reopened = open_log(tmp_path)
    assert reopened.end_offset == log.end_offset
    reopened.close()


def test_a_replaced_active_segment_file_is_never_fsynced_through_the_old_descriptor(
        tmp_path: pathlib.Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(b"a"), 1)
    log.flush()
    log.append_as_leader(batch(b"b"), 1)
    log.flush()  # now the fast path holds a descriptor on the active segment
    assert log._sync_fd >= 0
    active = [f for f in os.listdir(log.directory) if f.endswith(".log")]
    assert len(active) == 1
    path = os.path.join(log.directory, active[0])
    # Something outside the raft layer unlinks and recreates the file (the descriptor now
    # names a deleted inode): the next flush takes the full path instead.
    with open(path, "rb") as src, open(path + ".copy", "wb") as dst:
        dst.write(src.read())
    os.replace(path + ".copy", path)
    log.append_as_leader(batch(b"c"), 1)
    assert log.begin_flush() is None  # flushed synchronously by the segmented log
    assert log.flushed_offset == log.end_offset == 3
    log.abandon()
