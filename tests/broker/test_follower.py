"""The follower's fetch state: requests it builds, and every kind of answer it handles."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

from kraftlog.broker import follower as follower_mod
from kraftlog.broker.follower import (
    FollowerAction,
    FollowerFetchResponse,
    FollowerFetchState,
    FollowerStatus,
    offset_truncation_state,
)
from kraftlog.broker.partition import EpochEndOffset, Partition
from kraftlog.error_codes import ErrorCode
from kraftlog.storage import record_batch as rb
from tests.broker.harness import T0, batch, open_partition, values_of


def leader_batch(base_offset: int, epoch: int, *values: bytes) -> bytes:
    return rb.build_batch([rb.RecordInput(value=v, timestamp_ms=T0) for v in values], base_offset=base_offset,
                          partition_leader_epoch=epoch)


def follower(tmp_path: pathlib.Path, *, leader_epoch: int = 3, backoff_ms: int = 100) -> tuple[Partition,
                                                                                                 FollowerFetchState]:
    p = open_partition(tmp_path / "t-0", 2)
    p.make_follower(leader_id=1, leader_epoch=leader_epoch, partition_epoch=1, replicas=(1, 2))
    return p, FollowerFetchState(p, leader_id=1, leader_epoch=leader_epoch, fetch_backoff_ms=backoff_ms)


def test_fetch_request_names_log_end_last_epoch_and_current_leader_epoch(tmp_path: pathlib.Path) -> None:
    p, state = follower(tmp_path)
    request = state.build_fetch_request(T0)
    assert request is not None
    assert (request.fetch_offset, request.last_fetched_epoch, request.current_leader_epoch) == (0, -1, 3)
    p.append_records_to_follower(leader_batch(0, 2, b"a", b"b"), now_ms=T0)
    request = state.build_fetch_request(T0)
    assert request is not None
    assert (request.fetch_offset, request.last_fetched_epoch, request.log_start_offset) == (2, 2, 0)


def test_records_are_appended_and_the_high_watermark_capped_by_the_log_end(tmp_path: pathlib.Path) -> None:
    p, state = follower(tmp_path)
    request = state.build_fetch_request(T0)
    assert request is not None
    outcome = state.handle_fetch_response(request, FollowerFetchResponse(
        error=ErrorCode.NONE, high_watermark=7, log_start_offset=0, records=leader_batch(0, 3, b"a", b"b")),
        now_ms=T0)
    assert outcome.action is FollowerAction.APPENDED and outcome.appended is not None
    assert outcome.high_watermark_changed and p.high_watermark == 2
    assert values_of(p) == [b"a", b"b"]


def test_an_answer_to_an_outdated_request_is_ignored(tmp_path: pathlib.Path) -> None:
    p, state = follower(tmp_path)
    old = state.build_fetch_request(T0)
    assert old is not None
    p.append_records_to_follower(leader_batch(0, 3, b"a"), now_ms=T0)
    outcome = state.handle_fetch_response(old, FollowerFetchResponse(
        error=ErrorCode.NONE, high_watermark=1, records=leader_batch(0, 3, b"a")), now_ms=T0)
    assert outcome.action is FollowerAction.IGNORED
    assert values_of(p) == [b"a"]


def test_diverging_epoch_truncates_to_the_common_point(tmp_path: pathlib.Path) -> None:
    p, state = follower(tmp_path)
    p.append_records_to_follower(leader_batch(0, 1, b"a", b"b") + leader_batch(2, 2, b"x", b"y"), now_ms=T0)
    request = state.build_fetch_request(T0)
    assert request is not None and request.last_fetched_epoch == 2
    outcome = state.handle_fetch_response(request, FollowerFetchResponse(
        error=ErrorCode.NONE, high_watermark=1, diverging_epoch=EpochEndOffset(epoch=1, end_offset=3)),
        now_ms=T0)
    # Our epoch 1 ends at 2, the leader's at 3: the logs agree up to 2.
    assert outcome.action is FollowerAction.TRUNCATED and outcome.truncated_to == 2
    assert p.log_end_offset == 2 and p.latest_epoch == 1


def test_fenced_leader_epoch_stops_fetching_until_metadata(tmp_path: pathlib.Path) -> None:
    _p, state = follower(tmp_path)
    request = state.build_fetch_request(T0)
    assert request is not None
    outcome = state.handle_fetch_response(request, FollowerFetchResponse(error=ErrorCode.FENCED_LEADER_EPOCH),
                                          now_ms=T0)
    assert outcome.action is FollowerAction.FENCED and state.status is FollowerStatus.FENCED
    assert state.build_fetch_request(T0 + 10**9) is None


@pytest.mark.parametrize("error", [ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                   ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.KAFKA_STORAGE_ERROR])
def test_other_errors_back_off_then_retry(tmp_path: pathlib.Path, error: ErrorCode) -> None:
    _p, state = follower(tmp_path, backoff_ms=100)
    request = state.build_fetch_request(T0)
    assert request is not None
    outcome = state.handle_fetch_response(request, FollowerFetchResponse(error=error), now_ms=T0)
    assert outcome.action is FollowerAction.BACKOFF and outcome.error is error
    assert state.build_fetch_request(T0 + 99) is None
    assert state.build_fetch_request(T0 + 100) is not None


def test_out_of_range_behind_the_leaders_log_start_restarts_the_log_there(tmp_path: pathlib.Path) -> None:
    p, state = follower(tmp_path)
    p.append_records_to_follower(leader_batch(0, 3, b"a"), now_ms=T0)
    request = state.build_fetch_request(T0)
    assert request is not None
    outcome = state.handle_fetch_response(request, FollowerFetchResponse(
        error=ErrorCode.OFFSET_OUT_OF_RANGE, high_watermark=50, log_start_offset=40), now_ms=T0)
    assert outcome.action is FollowerAction.RESET
    assert p.log_start_offset == 40 and p.log_end_offset == 40 and p.high_watermark == 40
    request = state.build_fetch_request(T0)
    assert request is not None and request.fetch_offset == 40


def test_out_of_range_ahead_asks_the_leaders_end_and_truncates_to_it(tmp_path: pathlib.Path) -> None:
    p, state = follower(tmp_path)
    p.append_records_to_follower(leader_batch(0, 3, b"a") + leader_batch(1, 3, b"b"), now_ms=T0)
    request = state.build_fetch_request(T0)
    assert request is not None
    outcome = state.handle_fetch_response(request, FollowerFetchResponse(
        error=ErrorCode.OFFSET_OUT_OF_RANGE, high_watermark=1, log_start_offset=0), now_ms=T0)
    assert outcome.action is FollowerAction.LIST_OFFSETS
    assert state.status is FollowerStatus.AWAITING_LEADER_END_OFFSET
    assert state.build_fetch_request(T0) is None
    truncated = state.handle_leader_end_offset(1, now_ms=T0)
    assert truncated.action is FollowerAction.TRUNCATED and p.log_end_offset == 1
    assert state.build_fetch_request(T0) is not None
    assert state.handle_leader_end_offset(0, now_ms=T0).action is FollowerAction.IGNORED, "not asked"


def test_a_bad_batch_from_the_leader_backs_off_instead_of_crashing(tmp_path: pathlib.Path) -> None:
    p, state = follower(tmp_path)
    request = state.build_fetch_request(T0)
    assert request is not None
    outcome = state.handle_fetch_response(request, FollowerFetchResponse(
        error=ErrorCode.NONE, high_watermark=1, records=leader_batch(5, 3, b"gap")), now_ms=T0)
    assert outcome.action is FollowerAction.BACKOFF and p.log_end_offset == 0


def test_the_leader_cannot_follow(tmp_path: pathlib.Path) -> None:
    p = open_partition(tmp_path / "t-0", 1)
    p.make_leader(leader_epoch=0, partition_epoch=0, replicas=(1,), isr=(1,), now_ms=T0)
    with pytest.raises(ValueError, match="cannot follow"):
        FollowerFetchState(p, leader_id=1, leader_epoch=0)


@pytest.mark.parametrize(("diverging", "ours", "log_end", "expected"), [
    # Same epoch on both sides: the smaller end wins.
    ((4, 10), (4, 12), 20, (10, True)),
    ((4, 12), (4, 10), 20, (10, True)),
    # We do not have the leader's epoch: back to our epoch below it, and ask again.
    ((4, 10), (3, 8), 20, (8, False)),
    # Undefined epoch from the leader: trust its end offset.
    ((-1, 6), (-1, -1), 20, (6, True)),
    # Never beyond our own end.
    ((4, 30), (4, 30), 20, (20, True)),
    # The leader could not say where the epoch ends: keep the log.
    ((4, -1), (4, 12), 20, (20, True)),
])
def test_offset_truncation_state(diverging: tuple[int, int], ours: tuple[int, int], log_end: int,
                                 expected: tuple[int, bool]) -> None:
    state = offset_truncation_state(diverging=EpochEndOffset(epoch=diverging[0], end_offset=diverging[1]),
                                    follower_end_for_epoch=EpochEndOffset(epoch=ours[0], end_offset=ours[1]),
                                    log_end_offset=log_end)
    assert (state.offset, state.truncation_completed) == expected


def test_module_defaults_are_kafkas() -> None:
    assert follower_mod.DEFAULT_REPLICA_FETCH_BACKOFF_MS == 1000
    assert follower_mod.DEFAULT_REPLICA_FETCH_MAX_BYTES == 1024 * 1024


def test_an_idle_answer_takes_the_fast_path_only_when_it_changes_nothing(tmp_path: pathlib.Path) -> None:
    # Issue 16: most answers an idle follower gets say nothing new; they must not go through
    # the append path, and anything that does say something new must not be swallowed.
    partition = open_partition(tmp_path / "t-0", 2)
    partition.make_follower(leader_id=1, leader_epoch=0, partition_epoch=0, replicas=(1, 2))
    partition.append_records_to_follower(batch(b"a", b"b"), now_ms=T0)
    partition.update_follower_high_watermark(2)
    state = FollowerFetchState(partition, leader_id=1, leader_epoch=0)
    request = state.build_fetch_request(T0)
    assert request is not None
    assert state.handle_idle_answer(request, high_watermark=2, log_start_offset=0)
    assert state.is_replica_in_sync
    # A new high watermark, a leader log start past ours, a stale request: the full path.
    assert not state.handle_idle_answer(request, high_watermark=1, log_start_offset=0)
    assert not state.handle_idle_answer(request, high_watermark=2, log_start_offset=1)
    stale = dataclasses.replace(request, fetch_offset=1)
    assert not state.handle_idle_answer(stale, high_watermark=2, log_start_offset=0)
    assert partition.high_watermark == 2
