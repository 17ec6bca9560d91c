"""Idempotent produce on partitions (KIP-98): duplicates answered with the original offsets, state kept by
followers across leader changes, rebuilt on recovery and truncation, trimmed by retention."""

from __future__ import annotations

import pathlib
import random

import pytest

from kraftlog.broker import partition as partition_mod
from kraftlog.broker.partition import Partition
from kraftlog.error_codes import ErrorCode
from kraftlog.storage import record_batch as rb
from kraftlog.storage.log_config import LogConfig
from tests.broker.harness import T0, TP, Cluster, open_partition, values_of

PID = 4000


def ibatch(*values: bytes, seq: int, pid: int = PID, epoch: int = 0) -> bytes:
    return rb.build_batch([rb.RecordInput(value=v, timestamp_ms=T0) for v in values], producer_id=pid,
                          producer_epoch=epoch, base_sequence=seq)


def plain(*values: bytes) -> bytes:
    return rb.build_batch([rb.RecordInput(value=v, timestamp_ms=T0) for v in values])


def leader(path: pathlib.Path, *, segment_bytes: int = 1 << 30, retention_bytes: int = -1) -> Partition:
    p: Partition = open_partition(path / TP.dir_name, 1, log_config=LogConfig(
        segment_index_bytes=64 * 1024, segment_bytes=segment_bytes, retention_bytes=retention_bytes))
    p.make_leader(leader_epoch=0, partition_epoch=0, replicas=(1,), isr=(1,), now_ms=T0)
    return p


def produce(p: Partition, data: bytes | bytearray, acks: int = 1) -> partition_mod.LeaderAppendResult:
    return p.append_records_to_leader(data, required_acks=acks, now_ms=T0)


def test_a_retried_batch_is_answered_with_its_original_offset_and_not_appended(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path)
    assert produce(p, plain(b"x")).error is ErrorCode.NONE
    first = produce(p, ibatch(b"a", b"b", seq=0))
    assert first.error is ErrorCode.NONE and first.info is not None and first.info.first_offset == 1
    produce(p, ibatch(b"c", seq=2))
    end = p.log_end_offset
    again = produce(p, ibatch(b"a", b"b", seq=0))
    assert again.error is ErrorCode.NONE and again.duplicate
    assert again.info is not None and (again.info.first_offset, again.info.last_offset) == (1, 2)
    assert p.log_end_offset == end and values_of(p) == [b"x", b"a", b"b", b"c"]
    # A bytearray buffer (patched in place on append) dedupes the same way.
    assert produce(p, bytearray(ibatch(b"c", seq=2))).duplicate


def test_out_of_order_and_fenced_batches_append_nothing(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path)
    produce(p, ibatch(b"a", seq=0, epoch=1))
    gap = produce(p, ibatch(b"b", seq=2, epoch=1))
    assert gap.error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and "does not follow" in gap.error_message
    fenced = produce(p, ibatch(b"b", seq=1, epoch=0))
    assert fenced.error is ErrorCode.INVALID_PRODUCER_EPOCH
    unknown = produce(p, ibatch(b"b", seq=3, pid=PID + 1))
    assert unknown.error is ErrorCode.UNKNOWN_PRODUCER_ID
    assert values_of(p) == [b"a"]
    assert produce(p, ibatch(b"b", seq=1, epoch=1)).error is ErrorCode.NONE
    assert values_of(p) == [b"a", b"b"]


def test_a_corrupt_retry_is_corrupt_not_a_duplicate(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path)
    data = ibatch(b"a", seq=0)
    produce(p, data)
    broken = bytearray(data)
    broken[-1] ^= 0xFF
    assert produce(p, bytes(broken)).error is ErrorCode.CORRUPT_MESSAGE
    assert produce(p, data[:-1] + data).error is ErrorCode.CORRUPT_MESSAGE


def test_acks_all_retry_waits_for_the_original_to_commit(tmp_path: pathlib.Path) -> None:
    cluster = Cluster(tmp_path, min_isr=2)
    data = ibatch(b"a", seq=0)
    first = cluster.leader_manager.append_records({TP: data}, required_acks=-1, timeout_ms=30_000,
                                                  now_ms=cluster.now_ms)
    assert first.delayed_op_id is not None
    retry = cluster.leader_manager.append_records({TP: data}, required_acks=-1, timeout_ms=30_000,
                                                  now_ms=cluster.now_ms)
    assert retry.delayed_op_id is not None, "the duplicate's offsets are not committed yet"
    cluster.catch_up(2)
    cluster.catch_up(3)
    done = cluster.completed_produces()
    assert {op: r[TP].base_offset for op, r in done.items()} == {first.delayed_op_id: 0, retry.delayed_op_id: 0}
    assert all(r[TP].error is ErrorCode.NONE for r in done.values())
    assert cluster.leader_partition.log_end_offset == 1


def test_five_pipelined_acks_all_requests_and_their_retries_all_answer_with_their_offsets(
        tmp_path: pathlib.Path) -> None:
    # A producer with five requests in flight per partition (max.in.flight.requests.per.connection
    # = 5): each waits in the purgatory; the retry of any of them, while waiting or after it
    # committed, gets the original offsets; nothing is written twice; a gap is refused.
    cluster = Cluster(tmp_path, min_isr=2)
    manager = cluster.leader_manager
    batches = [ibatch(b"%d" % (2 * i), b"%d" % (2 * i + 1), seq=2 * i) for i in range(5)]

    def send(data: bytes) -> int:
        outcome = manager.append_records({TP: data}, required_acks=-1, timeout_ms=30_000, now_ms=cluster.now_ms)
        assert outcome.delayed_op_id is not None and outcome.responses[TP].error is ErrorCode.NONE
        return outcome.delayed_op_id

    ops = {send(data): 2 * i for i, data in enumerate(batches)}
    ops |= {send(batches[1]): 2, send(batches[4]): 8}  # retries while the originals wait
    assert manager.waiting_produces == 7
    cluster.catch_up(2)
    cluster.catch_up(3)
    done = cluster.completed_produces()
    assert {op: r[TP].base_offset for op, r in done.items()} == ops
    assert all(r[TP].error is ErrorCode.NONE for r in done.values())
    assert values_of(cluster.leader_partition) == [b"%d" % i for i in range(10)]
    late = manager.append_records({TP: batches[0]}, required_acks=-1, timeout_ms=30_000, now_ms=cluster.now_ms)
    assert late.delayed_op_id is None and late.responses[TP].base_offset == 0  # committed already
    gap = manager.append_records({TP: ibatch(b"x", seq=12)}, required_acks=-1, timeout_ms=30_000,
                                 now_ms=cluster.now_ms)
    assert gap.delayed_op_id is None
    assert gap.responses[TP].error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert cluster.leader_partition.log_end_offset == 10


def test_a_follower_keeps_the_state_and_dedupes_once_it_leads(tmp_path: pathlib.Path) -> None:
    cluster = Cluster(tmp_path, min_isr=2)
    batches = [ibatch(b"a", b"b", seq=0), ibatch(b"c", seq=2), ibatch(b"d", seq=3)]
    for data in batches:
        cluster.leader_manager.append_records({TP: data}, required_acks=1, timeout_ms=0, now_ms=cluster.now_ms)
    cluster.catch_up(2)
    cluster.catch_up(3)
    assert dict(cluster.partitions[2].producers.producers) == dict(cluster.partitions[1].producers.producers)
    cluster.alive.discard(1)
    cluster.elect(2, isr=(2, 3))
    # The producer never saw the answers: it resends all three to the new leader.
    for data, offset in zip(batches, (0, 2, 3), strict=True):
        out = cluster.leader_manager.append_records({TP: data}, required_acks=1, timeout_ms=0,
                                                    now_ms=cluster.now_ms)
        assert out.responses[TP].error is ErrorCode.NONE and out.responses[TP].base_offset == offset
    assert values_of(cluster.partitions[2]) == [b"a", b"b", b"c", b"d"]
    out = cluster.leader_manager.append_records({TP: ibatch(b"e", seq=4)}, required_acks=1, timeout_ms=0,
                                                now_ms=cluster.now_ms)
    assert out.responses[TP].base_offset == 4


def test_truncation_rebuilds_the_state_of_what_is_left(tmp_path: pathlib.Path) -> None:
    cluster = Cluster(tmp_path, min_isr=1)
    produce_ = cluster.leader_manager.append_records
    produce_({TP: ibatch(b"a", seq=0)}, required_acks=1, timeout_ms=0, now_ms=cluster.now_ms)
    cluster.catch_up(2)
    # Broker 1 appends seq 1 alone, then loses leadership before anyone fetched it.
    produce_({TP: ibatch(b"b", seq=1)}, required_acks=1, timeout_ms=0, now_ms=cluster.now_ms)
    cluster.elect(2, isr=(2,))
    other = cluster.leader_manager.append_records({TP: plain(b"other")}, required_acks=1, timeout_ms=0,
                                                  now_ms=cluster.now_ms)
    assert other.responses[TP].base_offset == 1
    for _ in range(5):
        cluster.fetch(1)
    old = cluster.partitions[1]
    assert values_of(old) == [b"a", b"other"]
    entry = old.producers.entry(PID)
    assert entry is not None and entry.last_sequence == 0, "seq 1 was truncated away with its batch"
    # The client's retry of seq 1 is new data for the new leader (it never had it).
    retry = cluster.leader_manager.append_records({TP: ibatch(b"b", seq=1)}, required_acks=1, timeout_ms=0,
                                                  now_ms=cluster.now_ms)
    assert retry.responses[TP].error is ErrorCode.NONE and retry.responses[TP].base_offset == 2
    for _ in range(3):
        cluster.fetch(1)
    assert dict(old.producers.producers) == dict(cluster.partitions[2].producers.producers)


def test_recovery_rebuilds_the_state_from_the_log(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path, segment_bytes=300)  # several segments
    for seq in range(8):
        produce(p, ibatch(b"v%d" % seq, seq=seq))
        produce(p, plain(b"noise"))
    before = dict(p.producers.producers)
    assert len(p.log.segments) > 2
    p.log.close()
    reopened = leader(tmp_path, segment_bytes=300)
    assert dict(reopened.producers.producers) == before
    again = produce(reopened, ibatch(b"v7", seq=7))
    assert again.duplicate and again.info is not None and again.info.first_offset == 14
    assert produce(reopened, ibatch(b"v8", seq=8)).error is ErrorCode.NONE


def test_retention_forgets_producers_whose_batches_all_went(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path, segment_bytes=200, retention_bytes=250)
    produce(p, ibatch(b"old", seq=0, pid=1))
    for i in range(6):
        produce(p, ibatch(b"n%d" % i, seq=i, pid=2))
    assert p.delete_old_segments(T0) > 0
    assert p.log_start_offset > 0
    assert p.producers.entry(1) is None and p.producers.entry(2) is not None
    assert produce(p, ibatch(b"late", seq=1, pid=1)).error is ErrorCode.UNKNOWN_PRODUCER_ID
    assert produce(p, ibatch(b"fresh", seq=0, pid=1)).error is ErrorCode.NONE
    rebuilt = dict(p.producers.producers)
    p.log.close()
    assert dict(leader(tmp_path, segment_bytes=200, retention_bytes=250).producers.producers) == rebuilt


def _log_sequences(p: Partition) -> list[tuple[int, int]]:
    """(producer id, base sequence) of every idempotent batch in ``p``'s log, in offset order."""
    out = []
    for header in partition_mod.iter_log_headers(p.log):
        if header.producer_id >= 0:
            out.append((header.producer_id, header.base_sequence))
    return out


def _rebuilt(p: Partition) -> dict[int, object]:
    from kraftlog.broker import producer_state as ps
    fresh = ps.ProducerStateManager()
    fresh.rebuild(partition_mod.iter_log_headers(p.log))
    return dict(fresh.producers)


@pytest.mark.parametrize("seed", range(8))
def test_random_leader_changes_never_write_a_retried_batch_twice(tmp_path: pathlib.Path, seed: int) -> None:
    """A producer retries each batch until answered, across leader changes where the new leader may or may
    not have the batch; every replica's state always equals a rebuild from its log, and the log ends up
    holding every sequence exactly once, in order."""
    rng = random.Random(seed)
    cluster = Cluster(tmp_path, min_isr=1)
    next_seq = {PID: 0, PID + 1: 0}
    for _step in range(25):
        pid = rng.choice(list(next_seq))
        count = rng.randint(1, 3)
        data = ibatch(*[b"r"] * count, seq=next_seq[pid], pid=pid)
        if rng.random() < 0.3:
            cluster.leader_manager.append_records({TP: plain(b"p")}, required_acks=1, timeout_ms=0,
                                                  now_ms=cluster.now_ms)
        first = cluster.leader_manager.append_records({TP: data}, required_acks=1, timeout_ms=0,
                                                      now_ms=cluster.now_ms).responses[TP]
        assert first.error is ErrorCode.NONE, first
        if rng.random() < 0.5:
            # The answer is lost and the leader replaced; the new one may or may not hold the batch.
            for broker in rng.sample([b for b in cluster.broker_ids if b != cluster.leader], rng.randint(0, 1)):
                cluster.catch_up(broker)
            holders = [b for b in cluster.broker_ids if b != cluster.leader]
            cluster.elect(rng.choice(holders), isr=cluster.broker_ids)
            had_it = (pid, next_seq[pid]) in _log_sequences(cluster.leader_partition)
            end = cluster.leader_partition.log_end_offset
            retry = cluster.leader_manager.append_records({TP: data}, required_acks=1, timeout_ms=0,
                                                          now_ms=cluster.now_ms).responses[TP]
            assert retry.error is ErrorCode.NONE, retry
            if had_it:
                assert retry.base_offset == first.base_offset and cluster.leader_partition.log_end_offset == end
            else:
                assert retry.base_offset == end and cluster.leader_partition.log_end_offset == end + count
        next_seq[pid] += count
        for broker in cluster.broker_ids:
            if broker != cluster.leader:
                cluster.catch_up(broker)
        for broker in cluster.broker_ids:
            assert dict(cluster.partitions[broker].producers.producers) == _rebuilt(cluster.partitions[broker])
    leader_log = _log_sequences(cluster.leader_partition)
    for pid, end in next_seq.items():
        seqs = [seq for p, seq in leader_log if p == pid]
        assert len(seqs) == len(set(seqs)), f"pid {pid} has a sequence twice: {seqs}"
        assert seqs == sorted(seqs) and (not seqs or seqs[0] == 0)
        entry = cluster.leader_partition.producers.entry(pid)
        assert entry is None if end == 0 else entry is not None and entry.last_sequence == end - 1
    for broker in cluster.broker_ids:
        assert _log_sequences(cluster.partitions[broker]) == leader_log
