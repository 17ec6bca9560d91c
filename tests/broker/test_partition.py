"""Partition: role changes, leader appends, high watermark, ISR proposals and reads, error path by error path."""

from __future__ import annotations

import pathlib
import struct

import crc32c
import pytest

from kraftlog.broker import partition as partition_mod
from kraftlog.broker.partition import FetchIsolation, Partition, PartitionConfig
from kraftlog.error_codes import ErrorCode
from kraftlog.errors import InvariantViolation
from kraftlog.metadata.records import LeaderRecoveryState
from kraftlog.storage import batch_header as bh
from kraftlog.storage import record_batch as rb
from kraftlog.storage.log_config import LogConfig
from tests.broker.harness import T0, TP, batch, open_partition, values_of

LAG_MS = partition_mod.DEFAULT_REPLICA_LAG_TIME_MAX_MS


def leader(tmp_path: pathlib.Path, *, isr: tuple[int, ...] = (1, 2, 3), min_isr: int = 1,
           max_message_bytes: int = partition_mod.DEFAULT_MAX_MESSAGE_BYTES, elr: bool = False,
           leader_epoch: int = 5) -> Partition:
    p = open_partition(tmp_path / TP.dir_name, 1, config=PartitionConfig(
        min_insync_replicas=min_isr, max_message_bytes=max_message_bytes, eligible_leader_replicas_enable=elr))
    p.make_leader(leader_epoch=leader_epoch, partition_epoch=10, replicas=(1, 2, 3), isr=isr, now_ms=T0)
    return p


def follower_fetch(p: Partition, replica_id: int, offset: int, now_ms: int = T0) -> partition_mod.ReadResult:
    return p.read_records(fetch_offset=offset, max_bytes=1 << 20, isolation=FetchIsolation.LOG_END, now_ms=now_ms,
                          replica_id=replica_id, current_leader_epoch=p.leader_epoch)


def append(p: Partition, *values: bytes, acks: int = 1) -> partition_mod.LeaderAppendResult:
    return p.append_records_to_leader(batch(*values), required_acks=acks, now_ms=T0)


# ---------------------------------------------------------------------------- role changes


def test_make_leader_records_the_epoch_start_offset_and_keeps_the_high_watermark(tmp_path: pathlib.Path) -> None:
    p = open_partition(tmp_path / "t-0", 1)
    p.make_leader(leader_epoch=0, partition_epoch=0, replicas=(1,), isr=(1,), now_ms=T0)
    p.append_records_to_leader(batch(b"a", b"b"), required_acks=1, now_ms=T0)
    assert p.high_watermark == 2
    p.make_follower(leader_id=2, leader_epoch=1, partition_epoch=1, replicas=(1, 2))
    assert p.make_leader(leader_epoch=2, partition_epoch=2, replicas=(1, 2), isr=(1, 2), now_ms=T0) is True
    assert p.leader_epoch_start_offset == 2
    assert p.end_offset_for_epoch(2) == partition_mod.EpochEndOffset(epoch=2, end_offset=2)
    assert p.end_offset_for_epoch(0) == partition_mod.EpochEndOffset(epoch=0, end_offset=2)
    assert p.high_watermark == 2, "kept, not reset, and not advanced (broker 2's end is unknown)"


def test_stale_role_changes_are_ignored(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path)
    assert p.make_follower(leader_id=2, leader_epoch=4, partition_epoch=11, replicas=(1, 2, 3)) is False
    assert p.make_follower(leader_id=2, leader_epoch=6, partition_epoch=9, replicas=(1, 2, 3)) is False
    assert p.is_leader and p.leader_epoch == 5 and p.partition_epoch == 10
    assert p.make_leader(leader_epoch=4, partition_epoch=12, replicas=(1, 2, 3), isr=(1,), now_ms=T0) is False
    assert p.isr == frozenset({1, 2, 3})


def test_make_follower_asks_for_a_fetcher_restart_only_on_a_new_epoch_or_leader(tmp_path: pathlib.Path) -> None:
    p = open_partition(tmp_path / "t-0", 1)
    assert p.make_follower(leader_id=2, leader_epoch=1, partition_epoch=1, replicas=(1, 2)) is True
    assert p.make_follower(leader_id=2, leader_epoch=1, partition_epoch=2, replicas=(1, 2)) is False
    assert p.make_follower(leader_id=2, leader_epoch=2, partition_epoch=3, replicas=(1, 2)) is True
    assert p.make_follower(leader_id=-1, leader_epoch=3, partition_epoch=4, replicas=(1, 2)) is False, \
        "no leader: nothing to fetch from"
    assert not p.is_leader and p.isr == frozenset()


def test_role_changes_naming_the_wrong_broker_are_invariant_violations(tmp_path: pathlib.Path) -> None:
    p = open_partition(tmp_path / "t-0", 1)
    with pytest.raises(InvariantViolation, match="do not include this broker"):
        p.make_leader(leader_epoch=1, partition_epoch=1, replicas=(2, 3), isr=(2, 3), now_ms=T0)
    with pytest.raises(InvariantViolation, match="naming this broker as leader"):
        p.make_follower(leader_id=1, leader_epoch=1, partition_epoch=1, replicas=(1, 2))


def test_unclean_leader_proposes_recovered_with_its_next_isr_change(tmp_path: pathlib.Path) -> None:
    p = open_partition(tmp_path / "t-0", 1)
    p.make_leader(leader_epoch=1, partition_epoch=1, replicas=(1, 2), isr=(1,), now_ms=T0,
                  leader_recovery_state=LeaderRecoveryState.RECOVERING)
    p.update_follower_fetch_state(2, fetch_offset=0, leader_end_offset=0, now_ms=T0)
    request = p.pending_alter_partition
    assert request is not None and request.leader_recovery_state is LeaderRecoveryState.RECOVERED


def test_checkpointed_high_watermark_is_clamped_to_the_log(tmp_path: pathlib.Path) -> None:
    p = open_partition(tmp_path / "t-0", 1, high_watermark=99)
    assert p.high_watermark == 0


# ---------------------------------------------------------------------------- produce


def test_leader_append_stamps_offsets_and_the_leader_epoch(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path)
    result = append(p, b"a", b"b")
    assert result.error is ErrorCode.NONE and result.info is not None
    assert (result.info.first_offset, result.info.last_offset) == (0, 1)
    header = next(bh.iter_batches(p.log.read(0, 1 << 20).records))
    assert header.partition_leader_epoch == 5


def test_append_on_a_follower_answers_not_leader(tmp_path: pathlib.Path) -> None:
    p = open_partition(tmp_path / "t-0", 1)
    p.make_follower(leader_id=2, leader_epoch=1, partition_epoch=1, replicas=(1, 2))
    result = append(p, b"a")
    assert result.error is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert p.log_end_offset == 0


def test_acks_all_below_min_insync_replicas_answers_not_enough_replicas(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path, isr=(1,), min_isr=2)
    assert append(p, b"a", acks=-1).error is ErrorCode.NOT_ENOUGH_REPLICAS
    assert p.log_end_offset == 0, "nothing written"
    assert append(p, b"a", acks=1).error is ErrorCode.NONE, "acks=1 does not need the ISR"
    assert append(p, b"a", acks=0).error is ErrorCode.NONE


def test_oversized_batch_answers_message_too_large(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path, max_message_bytes=200)
    assert append(p, b"small").error is ErrorCode.NONE
    result = append(p, b"x" * 300)
    assert result.error is ErrorCode.MESSAGE_TOO_LARGE and "max.message.bytes=200" in result.error_message
    assert p.log_end_offset == 1


def test_more_than_a_segment_answers_record_list_too_large(tmp_path: pathlib.Path) -> None:
    p = open_partition(tmp_path / "t-0", 1, log_config=LogConfig(segment_bytes=1024))
    p.make_leader(leader_epoch=0, partition_epoch=0, replicas=(1,), isr=(1,), now_ms=T0)
    data = batch(*(b"x" * 1000 for _ in range(3)))
    assert p.append_records_to_leader(data, required_acks=1, now_ms=T0).error is ErrorCode.RECORD_LIST_TOO_LARGE
    assert p.log_end_offset == 0


@pytest.mark.parametrize("damage", ["crc", "truncated", "magic"])
def test_corrupt_batches_answer_corrupt_message_and_write_nothing(tmp_path: pathlib.Path, damage: str) -> None:
    p = leader(tmp_path)
    data = bytearray(batch(b"hello", b"world"))
    if damage == "crc":
        data[-1] ^= 0xFF
    elif damage == "truncated":
        data = data[:-5]
    else:
        data[bh.MAGIC_OFFSET] = 1
    result = p.append_records_to_leader(bytes(data), required_acks=1, now_ms=T0)
    assert result.error is ErrorCode.CORRUPT_MESSAGE, result
    assert p.log_end_offset == 0


# ---------------------------------------------------------------------------- high watermark


def test_single_member_isr_commits_on_append(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path, isr=(1,))
    result = append(p, b"a", b"b")
    assert result.high_watermark_advanced and p.high_watermark == 2


def test_high_watermark_is_the_minimum_end_over_the_isr_and_never_decreases(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path)
    append(p, b"a", b"b", b"c")
    assert p.high_watermark == 0, "followers' ends are unknown after becoming leader"
    assert follower_fetch(p, 2, 2).error is ErrorCode.NONE
    assert p.high_watermark == 0
    follower_fetch(p, 3, 1)
    assert p.high_watermark == 1
    follower_fetch(p, 3, 3)
    assert p.high_watermark == 2
    # Broker 2 re-fetches from 1 (it truncated): the HW stays.
    p.update_follower_fetch_state(2, fetch_offset=1, leader_end_offset=3, now_ms=T0)
    assert p.high_watermark == 2


def test_high_watermark_does_not_move_under_min_isr_with_eligible_leader_replicas(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path, isr=(1,), min_isr=2, elr=True)
    append(p, b"a")
    assert p.high_watermark == 0
    q = leader(tmp_path / "other", isr=(1,), min_isr=2, elr=False)
    append(q, b"a")
    assert q.high_watermark == 1


def test_fetch_from_a_non_replica_does_not_count(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path, isr=(1, 2))
    append(p, b"a")
    assert p.update_follower_fetch_state(9, fetch_offset=1, leader_end_offset=1, now_ms=T0) is False
    assert p.replica_status(9) is None


# ---------------------------------------------------------------------------- ISR expansion / shrink


def test_expansion_waits_for_the_leader_epoch_start_and_is_pending_until_answered(tmp_path: pathlib.Path) -> None:
    p = open_partition(tmp_path / "t-0", 1)
    p.make_leader(leader_epoch=0, partition_epoch=0, replicas=(1, 2), isr=(1,), now_ms=T0)
    p.append_records_to_leader(batch(b"a", b"b"), required_acks=1, now_ms=T0)
    p.make_follower(leader_id=2, leader_epoch=1, partition_epoch=1, replicas=(1, 2))
    p.make_leader(leader_epoch=2, partition_epoch=2, replicas=(1, 2), isr=(1,), now_ms=T0)
    assert p.high_watermark == 2 and p.leader_epoch_start_offset == 2
    assert p.maybe_expand_isr(2, T0) is False, "no fetch yet"
    p.update_follower_fetch_state(2, fetch_offset=1, leader_end_offset=2, now_ms=T0)
    assert p.pending_alter_partition is None, "below the HW and the epoch start"
    p.update_follower_fetch_state(2, fetch_offset=2, leader_end_offset=2, now_ms=T0)
    request = p.pending_alter_partition
    assert request is not None
    assert (request.leader_id, request.leader_epoch, request.new_isr, request.partition_epoch) == (1, 2, (1, 2), 2)
    assert isinstance(p.state, partition_mod.PendingExpandIsr)
    assert p.isr == frozenset({1}) and p.maximal_isr == frozenset({1, 2})


def test_one_isr_change_at_a_time_and_handed_out_once(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path, isr=(1, 2))
    follower_fetch(p, 3, 0)
    request = p.pending_alter_partition
    assert request is not None and request.new_isr == (1, 2, 3)
    assert request.based_on_isr == (1, 2), "the committed ISR it expands (for the metrics)"
    assert p.take_alter_partition_request() == request
    assert p.take_alter_partition_request() is None, "in flight"
    assert p.maybe_shrink_isr(T0 + 10 * LAG_MS) is False, "a change is pending"
    outcome = p.handle_alter_partition_response(request, error=ErrorCode.REQUEST_TIMED_OUT, result=None, now_ms=T0)
    assert outcome.retry and not outcome.applied
    assert p.take_alter_partition_request() == request, "retried"


def test_accepted_expansion_commits_the_isr_and_partition_epoch(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path, isr=(1, 2))
    follower_fetch(p, 3, 0)
    request = p.take_alter_partition_request()
    assert request is not None
    result = partition_mod.LeaderAndIsr(leader_id=1, leader_epoch=5, isr=(1, 2, 3), partition_epoch=11)
    outcome = p.handle_alter_partition_response(request, error=ErrorCode.NONE, result=result, now_ms=T0)
    assert outcome.applied
    assert isinstance(p.state, partition_mod.CommittedPartitionState)
    assert p.isr == frozenset({1, 2, 3}) and p.partition_epoch == 11
    assert p.handle_alter_partition_response(request, error=ErrorCode.NONE, result=result, now_ms=T0) == \
        partition_mod.AlterPartitionOutcome(), "an answer to a settled proposal is ignored"


@pytest.mark.parametrize("error", [ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.INELIGIBLE_REPLICA])
def test_refused_proposal_reverts_to_the_committed_isr(tmp_path: pathlib.Path, error: ErrorCode) -> None:
    p = leader(tmp_path, isr=(1, 2))
    follower_fetch(p, 3, 0)
    request = p.take_alter_partition_request()
    assert request is not None
    outcome = p.handle_alter_partition_response(request, error=error, result=None, now_ms=T0)
    assert not outcome.retry and not outcome.applied
    assert isinstance(p.state, partition_mod.CommittedPartitionState) and p.isr == frozenset({1, 2})


@pytest.mark.parametrize("error", [ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.INVALID_UPDATE_VERSION,
                                   ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NEW_LEADER_ELECTED])
def test_stale_view_errors_keep_the_proposal_pending_until_metadata(tmp_path: pathlib.Path,
                                                                    error: ErrorCode) -> None:
    p = leader(tmp_path, isr=(1, 2))
    follower_fetch(p, 3, 0)
    request = p.take_alter_partition_request()
    assert request is not None
    outcome = p.handle_alter_partition_response(request, error=error, result=None, now_ms=T0)
    assert not outcome.retry
    assert p.pending_alter_partition == request and p.take_alter_partition_request() is None
    # The metadata log brings the truth (a newer partition epoch): the proposal is gone.
    p.make_leader(leader_epoch=5, partition_epoch=11, replicas=(1, 2, 3), isr=(1, 2, 3), now_ms=T0)
    assert p.pending_alter_partition is None and p.isr == frozenset({1, 2, 3})


def test_answer_from_another_leader_epoch_is_ignored(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path, isr=(1, 2))
    follower_fetch(p, 3, 0)
    request = p.take_alter_partition_request()
    assert request is not None
    stale = partition_mod.LeaderAndIsr(leader_id=1, leader_epoch=4, isr=(1, 2, 3), partition_epoch=11)
    assert not p.handle_alter_partition_response(request, error=ErrorCode.NONE, result=stale, now_ms=T0).applied
    assert isinstance(p.state, partition_mod.PendingExpandIsr)


def test_lagging_follower_is_proposed_out_after_the_lag_time(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path)
    append(p, b"a")
    follower_fetch(p, 2, 1, now_ms=T0 + 1)
    follower_fetch(p, 3, 0, now_ms=T0 + 1)  # behind, but caught up at becoming leader
    assert p.maybe_shrink_isr(T0 + LAG_MS) is False
    assert p.out_of_sync_replicas(T0 + LAG_MS + 1) == frozenset({3})
    assert p.maybe_shrink_isr(T0 + LAG_MS + 1) is True
    request = p.pending_alter_partition
    assert request is not None and request.new_isr == (1, 2)
    assert p.high_watermark == 0, "the maximal ISR still holds broker 3"
    result = partition_mod.LeaderAndIsr(leader_id=1, leader_epoch=5, isr=(1, 2), partition_epoch=11)
    outcome = p.handle_alter_partition_response(request, error=ErrorCode.NONE, result=result,
                                                now_ms=T0 + LAG_MS + 1)
    assert outcome.applied and outcome.high_watermark_advanced and p.high_watermark == 1


def test_follower_that_keeps_reaching_the_leaders_previous_end_stays_in_sync(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path)
    now = T0
    for i in range(10):  # a steady stream: the follower is always one fetch behind
        p.append_records_to_leader(batch(b"x"), required_acks=1, now_ms=now)
        follower_fetch(p, 2, i, now_ms=now)
        follower_fetch(p, 3, i + 1, now_ms=now)
        now += LAG_MS // 3
    assert 2 not in p.out_of_sync_replicas(now)


def test_check_enough_replicas_reach_offset(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path, isr=(1, 2), min_isr=2)
    append(p, b"a", acks=-1)
    assert p.check_enough_replicas_reach_offset(1) == (False, ErrorCode.NONE)
    follower_fetch(p, 2, 1)
    assert p.check_enough_replicas_reach_offset(1) == (True, ErrorCode.NONE)
    p.make_leader(leader_epoch=5, partition_epoch=11, replicas=(1, 2, 3), isr=(1,), now_ms=T0)
    assert p.check_enough_replicas_reach_offset(1) == (True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    p.make_follower(leader_id=2, leader_epoch=6, partition_epoch=12, replicas=(1, 2, 3))
    assert p.check_enough_replicas_reach_offset(1) == (False, ErrorCode.NOT_LEADER_OR_FOLLOWER)


# ---------------------------------------------------------------------------- reads


def test_read_fences_old_epochs_and_flags_unknown_newer_ones(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path)

    def read(epoch: int) -> partition_mod.ReadResult:
        return p.read_records(fetch_offset=0, max_bytes=100, isolation=FetchIsolation.HIGH_WATERMARK, now_ms=T0,
                              current_leader_epoch=epoch)

    fenced = read(4)
    assert fenced.error is ErrorCode.FENCED_LEADER_EPOCH and fenced.leader_id == 1 and fenced.leader_epoch == 5
    assert read(6).error is ErrorCode.UNKNOWN_LEADER_EPOCH
    assert read(5).error is ErrorCode.NONE
    assert read(-1).error is ErrorCode.NONE, "-1 skips the check"


def test_read_on_a_follower_answers_not_leader(tmp_path: pathlib.Path) -> None:
    p = open_partition(tmp_path / "t-0", 1)
    p.make_follower(leader_id=2, leader_epoch=3, partition_epoch=1, replicas=(1, 2))
    result = p.read_records(fetch_offset=0, max_bytes=100, isolation=FetchIsolation.HIGH_WATERMARK, now_ms=T0)
    assert result.error is ErrorCode.NOT_LEADER_OR_FOLLOWER and result.leader_id == 2


def test_fetch_from_a_broker_that_is_not_a_replica(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path)
    unknown = p.read_records(fetch_offset=0, max_bytes=100, isolation=FetchIsolation.LOG_END, now_ms=T0,
                             replica_id=7, current_leader_epoch=5)
    assert unknown.error is ErrorCode.UNKNOWN_LEADER_EPOCH, "same epoch: maybe a reassignment we did not see"
    no_epoch = p.read_records(fetch_offset=0, max_bytes=100, isolation=FetchIsolation.LOG_END, now_ms=T0,
                              replica_id=7)
    assert no_epoch.error is ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_read_outside_the_log_answers_offset_out_of_range(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path, isr=(1,), leader_epoch=5)
    append(p, b"a", b"b")
    above = p.read_records(fetch_offset=3, max_bytes=100, isolation=FetchIsolation.HIGH_WATERMARK, now_ms=T0)
    assert above.error is ErrorCode.OFFSET_OUT_OF_RANGE and above.log_end_offset == 2
    assert above.high_watermark == 2 and above.log_start_offset == 0
    p.log.maybe_increment_log_start_offset(1)
    below = p.read_records(fetch_offset=0, max_bytes=100, isolation=FetchIsolation.HIGH_WATERMARK, now_ms=T0)
    assert below.error is ErrorCode.OFFSET_OUT_OF_RANGE and below.log_start_offset == 1
    # Below the log start, a follower's epoch check does not matter: out of range first.
    below_follower = p.read_records(fetch_offset=0, max_bytes=100, isolation=FetchIsolation.LOG_END, now_ms=T0,
                                    replica_id=2, current_leader_epoch=5, last_fetched_epoch=5)
    assert below_follower.error is ErrorCode.OFFSET_OUT_OF_RANGE and below_follower.diverging_epoch is None


def test_consumers_read_only_up_to_the_high_watermark(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path, isr=(1, 2))
    append(p, b"a")
    follower_fetch(p, 2, 1)
    append(p, b"b")
    assert p.high_watermark == 1
    for isolation in (FetchIsolation.HIGH_WATERMARK, FetchIsolation.TXN_COMMITTED):
        result = p.read_records(fetch_offset=0, max_bytes=1 << 20, isolation=isolation, now_ms=T0)
        assert [r.value for b in rb.decode_batches(result.records) for r in b.records] == [b"a"]
        assert result.last_stable_offset == 1
        at_hw = p.read_records(fetch_offset=1, max_bytes=1 << 20, isolation=isolation, now_ms=T0)
        assert at_hw.error is ErrorCode.NONE and at_hw.records == b""
    assert values_of(p) == [b"a", b"b"]
    replica = follower_fetch(p, 2, 1)
    assert replica.records and replica.high_watermark == 1


def test_follower_with_a_diverged_epoch_gets_where_it_ends(tmp_path: pathlib.Path) -> None:
    p = open_partition(tmp_path / "t-0", 1)
    p.make_leader(leader_epoch=1, partition_epoch=1, replicas=(1, 2), isr=(1,), now_ms=T0)
    p.append_records_to_leader(batch(b"a", b"b"), required_acks=1, now_ms=T0)  # epoch 1: [0, 2)
    p.make_follower(leader_id=2, leader_epoch=2, partition_epoch=2, replicas=(1, 2))
    p.make_leader(leader_epoch=3, partition_epoch=3, replicas=(1, 2), isr=(1,), now_ms=T0)
    p.append_records_to_leader(batch(b"c"), required_acks=1, now_ms=T0)  # epoch 3: [2, 3)

    def fetch(offset: int, last_epoch: int) -> partition_mod.ReadResult:
        return p.read_records(fetch_offset=offset, max_bytes=1 << 20, isolation=FetchIsolation.LOG_END,
                              now_ms=T0, replica_id=2, current_leader_epoch=3, last_fetched_epoch=last_epoch)

    # Broker 2 led epoch 2 and wrote offsets 2..4 we never had.
    diverged = fetch(5, 2)
    assert diverged.error is ErrorCode.NONE and diverged.records == b""
    assert diverged.diverging_epoch == partition_mod.EpochEndOffset(epoch=1, end_offset=2)
    status = p.replica_status(2)
    assert status is not None and status.log_end_offset == -1, "a diverging answer is not progress"
    # It has epoch 1 up to offset 3 (one record more than we do).
    assert fetch(3, 1).diverging_epoch == partition_mod.EpochEndOffset(epoch=1, end_offset=2)
    # It has epoch 1 up to 2: consistent, it gets epoch 3's record.
    agreed = fetch(2, 1)
    assert agreed.diverging_epoch is None and agreed.records
    # Our latest epoch, but beyond our end.
    assert fetch(4, 3).diverging_epoch == partition_mod.EpochEndOffset(epoch=3, end_offset=3)
    # An epoch above all of ours: we cannot say where it ended.
    assert fetch(3, 9).error is ErrorCode.OFFSET_OUT_OF_RANGE


def test_bytes_available_for_a_waiting_fetch(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path, isr=(1, 2))
    first = follower_fetch(p, 2, 0)
    meta = first.fetch_offset_metadata
    assert meta is not None

    def available(isolation: FetchIsolation, epoch: int) -> int | None:
        return p.bytes_available(fetch_offset_metadata=meta, isolation=isolation, current_leader_epoch=epoch,
                                 last_fetched_epoch=-1)

    assert available(FetchIsolation.LOG_END, 5) == 0
    data = batch(b"x" * 100)
    p.append_records_to_leader(data, required_acks=1, now_ms=T0)
    assert available(FetchIsolation.LOG_END, 5) == len(data)
    assert available(FetchIsolation.HIGH_WATERMARK, -1) == 0, "not committed yet"
    follower_fetch(p, 2, 1)
    assert p.high_watermark == 1
    assert available(FetchIsolation.HIGH_WATERMARK, -1) == len(data)
    assert available(FetchIsolation.LOG_END, 4) is None, "fenced: answer now"
    p.make_follower(leader_id=2, leader_epoch=6, partition_epoch=11, replicas=(1, 2, 3))
    assert available(FetchIsolation.LOG_END, -1) is None, "no longer leader: answer now"


# ---------------------------------------------------------------------------- follower side


def test_follower_side_operations_refuse_to_run_on_the_leader(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path)
    with pytest.raises(InvariantViolation):
        p.append_records_to_follower(batch(b"a"), now_ms=T0)
    with pytest.raises(InvariantViolation):
        p.truncate_to(0)
    with pytest.raises(InvariantViolation):
        p.update_follower_high_watermark(0)
    with pytest.raises(InvariantViolation):
        p.truncate_fully_and_start_at(0)


def test_follower_high_watermark_is_capped_by_its_own_log_end(tmp_path: pathlib.Path) -> None:
    p = open_partition(tmp_path / "t-0", 1)
    p.make_follower(leader_id=2, leader_epoch=0, partition_epoch=0, replicas=(1, 2))
    p.append_records_to_follower(rb.build_batch([rb.RecordInput(value=b"a")], partition_leader_epoch=0),
                                 now_ms=T0)
    assert p.update_follower_high_watermark(5) is True and p.high_watermark == 1
    assert p.update_follower_high_watermark(5) is False
    assert p.truncate_to(0) is True and p.high_watermark == 0 and p.log_end_offset == 0


def test_config_rejects_impossible_values() -> None:
    with pytest.raises(ValueError, match=r"min\.insync\.replicas"):
        PartitionConfig(min_insync_replicas=0)
    with pytest.raises(ValueError, match=r"replica\.lag\.time\.max\.ms"):
        PartitionConfig(replica_lag_time_max_ms=-1)


@pytest.mark.parametrize("codec", [rb.CompressionType.NONE, rb.CompressionType.ZSTD])
def test_a_compacted_topic_refuses_records_without_a_key(tmp_path: pathlib.Path,
                                                         codec: rb.CompressionType) -> None:
    p = open_partition(tmp_path / TP.dir_name, 1, config=PartitionConfig(compacted=True))
    p.make_leader(leader_epoch=0, partition_epoch=0, replicas=(1,), isr=(1,), now_ms=T0)
    keyed = rb.build_batch([rb.RecordInput(key=b"k1", value=b"a", timestamp_ms=T0)], compression=codec)
    assert p.append_records_to_leader(keyed, required_acks=1, now_ms=T0).error is ErrorCode.NONE
    mixed = rb.build_batch([rb.RecordInput(key=b"k2", value=b"b", timestamp_ms=T0),
                            rb.RecordInput(key=None, value=b"c", timestamp_ms=T0)], compression=codec)
    refused = p.append_records_to_leader(mixed, required_acks=1, now_ms=T0)
    assert refused.error is ErrorCode.INVALID_RECORD
    assert "without a key" in refused.error_message and "record 1" in refused.error_message
    assert p.log_end_offset == 1, "nothing of the refused batch was written"
    # The same keyless batch is fine on a topic that is not compacted.
    plain = open_partition(tmp_path / "plain" / TP.dir_name, 1)
    plain.make_leader(leader_epoch=0, partition_epoch=0, replicas=(1,), isr=(1,), now_ms=T0)
    assert plain.append_records_to_leader(mixed, required_acks=1, now_ms=T0).error is ErrorCode.NONE


def _resealed(batch: bytes | bytearray) -> bytes:
    """``batch`` with its CRC recomputed after a test damaged it (a CRC-valid poison)."""
    crc = crc32c.crc32c(bytes(batch[bh.ATTRIBUTES_OFFSET:]))
    return bytes(batch[:bh.CRC_OFFSET]) + struct.pack(">I", crc) + bytes(batch[bh.CRC_OFFSET + 4:])


def _poisoned(kind: str) -> bytes:
    good = bytearray(batch(b"a", b"b", b"c"))
    if kind == "garbage_records":
        good[bh.RECORDS_OFFSET:] = bytes(range(100, 100 + len(good) - bh.RECORDS_OFFSET))
    elif kind == "lz4_flag_without_lz4":
        good[bh.ATTRIBUTES_OFFSET + 1] |= int(rb.CompressionType.LZ4)
    elif kind == "count_above_records":
        good[bh.RECORDS_COUNT_OFFSET + 3] += 1
        good[bh.LAST_OFFSET_DELTA_OFFSET + 3] += 1
    elif kind == "future_timestamp_flag":
        good[bh.ATTRIBUTES_OFFSET + 1] |= bh.TIMESTAMP_TYPE_MASK
    elif kind == "control_batch":
        good[bh.ATTRIBUTES_OFFSET + 1] |= bh.CONTROL_FLAG_MASK
    return _resealed(good)


@pytest.mark.parametrize(("kind", "error"), [
    ("garbage_records", ErrorCode.INVALID_RECORD),
    ("lz4_flag_without_lz4", ErrorCode.CORRUPT_MESSAGE),
    ("count_above_records", ErrorCode.INVALID_RECORD),
    ("future_timestamp_flag", ErrorCode.INVALID_TIMESTAMP),
    ("control_batch", ErrorCode.INVALID_RECORD),
])
def test_a_poisoned_batch_is_refused_whole_and_the_log_stays_readable(tmp_path: pathlib.Path, kind: str,
                                                                       error: ErrorCode) -> None:
    p = leader(tmp_path, isr=(1,))
    assert append(p, b"before").error is ErrorCode.NONE
    result = p.append_records_to_leader(batch(b"ok") + _poisoned(kind), required_acks=1, now_ms=T0)
    assert result.error is error and result.info is None
    assert "batch 1" in result.error_message, "the bad batch is named, not the good one before it"
    assert p.log_end_offset == 1, "nothing of the refused produce was written, not even its good batch"
    assert append(p, b"after").error is ErrorCode.NONE
    assert values_of(p) == [b"before", b"after"]


def test_timestamps_out_of_the_topics_bounds_are_invalid_timestamp(tmp_path: pathlib.Path) -> None:
    p = open_partition(tmp_path / TP.dir_name, 1, log_config=LogConfig(
        segment_index_bytes=64 * 1024, message_timestamp_before_max_ms=1000, message_timestamp_after_max_ms=10))
    p.make_leader(leader_epoch=0, partition_epoch=0, replicas=(1,), isr=(1,), now_ms=T0)
    late = rb.build_batch([rb.RecordInput(value=b"a", timestamp_ms=T0), rb.RecordInput(value=b"b", timestamp_ms=T0 + 11)])
    result = p.append_records_to_leader(late, required_acks=1, now_ms=T0)
    assert result.error is ErrorCode.INVALID_TIMESTAMP
    assert [e.batch_index for e in result.record_errors] == [1]
    assert p.log_end_offset == 0
    # The topic's configs reach the validator: LogAppendTime takes any producer timestamp.
    p.log.reconfigure(LogConfig(segment_index_bytes=64 * 1024, message_timestamp_type=bh.TimestampType.LOG_APPEND_TIME,
                                message_timestamp_before_max_ms=1000, message_timestamp_after_max_ms=10))
    assert p.append_records_to_leader(late, required_acks=1, now_ms=T0).error is ErrorCode.NONE


def test_validation_errors_are_answered_but_storage_errors_are_not_swallowed(tmp_path: pathlib.Path) -> None:
    p = leader(tmp_path, isr=(1,))
    p.log.close()
    # A closed log is our own state gone wrong: it must surface, not become CORRUPT_MESSAGE.
    with pytest.raises(InvariantViolation):
        append(p, b"x")
