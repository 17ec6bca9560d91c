"""ReplicaManager: replica states, produce/fetch fan-out with per-partition errors, purgatories, checkpoints."""

from __future__ import annotations

import pathlib

import pytest

from kraftlog.broker import purgatory
from kraftlog.broker import replica_manager as rm_mod
from kraftlog.broker.partition import FetchIsolation, LeaderAndIsr, PartitionConfig
from kraftlog.broker.replica_manager import ReplicaManager, ReplicaState
from kraftlog.error_codes import ErrorCode
from kraftlog.errors import InvariantViolation
from kraftlog.ids import TopicPartition
from kraftlog.storage import checkpoint
from tests.broker.harness import T0, TP, batch, open_partition

OTHER = TopicPartition(topic="u", partition=3)
MISSING = TopicPartition(topic="nope", partition=0)


def manager(tmp_path: pathlib.Path, *, isr: tuple[int, ...] = (1,), min_isr: int = 1,
            max_message_bytes: int = 1 << 20) -> ReplicaManager:
    rm = ReplicaManager(broker_id=1)
    config = PartitionConfig(min_insync_replicas=min_isr, max_message_bytes=max_message_bytes)
    for tp in (TP, OTHER):
        p = open_partition(tmp_path / tp.dir_name, 1, config=config, topic=tp.topic, index=tp.partition)
        rm.add_partition(p)
        rm.transition_replica(tp, ReplicaState.ONLINE_REPLICA)
        rm.make_leader(tp, leader_epoch=0, partition_epoch=0, replicas=(1, 2, 3), isr=isr, now_ms=T0)
    return rm


def consumer_fetch(rm: ReplicaManager, *tps: TopicPartition, offset: int = 0, max_wait_ms: int = 0,
                   min_bytes: int = 1, now_ms: int = T0, replica_id: int = -1) -> rm_mod.FetchOutcome:
    return rm.fetch_messages(
        purgatory.FetchParams(replica_id=replica_id, max_wait_ms=max_wait_ms, min_bytes=min_bytes),
        {tp: purgatory.FetchPartitionRequest(fetch_offset=offset, partition_max_bytes=1 << 20) for tp in tps},
        now_ms=now_ms)


# ---------------------------------------------------------------------------- replica states


def test_replica_state_machine_follows_kafkas_transitions(tmp_path: pathlib.Path) -> None:
    rm = ReplicaManager(broker_id=1)
    rm.add_partition(open_partition(tmp_path / "t-0", 1))
    assert rm.replica_state(TP) is ReplicaState.NEW_REPLICA
    for state in (ReplicaState.ONLINE_REPLICA, ReplicaState.OFFLINE_REPLICA, ReplicaState.REPLICA_DELETION_STARTED,
                  ReplicaState.REPLICA_DELETION_INELIGIBLE, ReplicaState.OFFLINE_REPLICA,
                  ReplicaState.REPLICA_DELETION_STARTED, ReplicaState.REPLICA_DELETION_SUCCESSFUL):
        rm.transition_replica(TP, state)
        assert rm.replica_state(TP) is state
    removed = rm.remove_partition(TP)
    assert removed.topic_partition == TP
    assert rm.get_partition(TP) is None and rm.replica_state(TP) is ReplicaState.NON_EXISTENT_REPLICA


def test_illegal_replica_transition_raises_with_context(tmp_path: pathlib.Path) -> None:
    rm = ReplicaManager(broker_id=1)
    rm.add_partition(open_partition(tmp_path / "t-0", 1))
    with pytest.raises(rm_mod.IllegalReplicaStateTransition) as info:
        rm.transition_replica(TP, ReplicaState.REPLICA_DELETION_STARTED)
    assert "NewReplica -> ReplicaDeletionStarted" in str(info.value) and "OfflineReplica" in str(info.value)
    with pytest.raises(rm_mod.IllegalReplicaStateTransition):
        rm.remove_partition(TP)
    with pytest.raises(InvariantViolation, match="already hosted"):
        rm.add_partition(open_partition(tmp_path / "again" / "t-0", 1))
    with pytest.raises(InvariantViolation, match="not hosted"):
        rm.transition_replica(MISSING, ReplicaState.ONLINE_REPLICA)


def test_every_state_lists_its_sources() -> None:
    assert set(rm_mod.VALID_PREVIOUS_STATES) == set(ReplicaState)
    assert [s.value for s in ReplicaState] == [
        "NewReplica", "OnlineReplica", "OfflineReplica", "ReplicaDeletionStarted", "ReplicaDeletionSuccessful",
        "ReplicaDeletionIneligible", "NonExistentReplica"]


# ---------------------------------------------------------------------------- produce


@pytest.mark.parametrize("acks", [2, -2, 5])
def test_invalid_acks_answers_invalid_required_acks_on_every_partition(tmp_path: pathlib.Path, acks: int) -> None:
    rm = manager(tmp_path)
    outcome = rm.append_records({TP: batch(b"a"), MISSING: batch(b"b")}, required_acks=acks, timeout_ms=100,
                                now_ms=T0)
    assert {tp: r.error for tp, r in outcome.responses.items()} == {
        TP: ErrorCode.INVALID_REQUIRED_ACKS, MISSING: ErrorCode.INVALID_REQUIRED_ACKS}
    partition = rm.get_partition(TP)
    assert partition is not None and partition.log_end_offset == 0


def test_produce_answers_an_error_per_partition(tmp_path: pathlib.Path) -> None:
    rm = manager(tmp_path, max_message_bytes=300)
    corrupt = bytearray(batch(b"z"))
    corrupt[-1] ^= 1
    outcome = rm.append_records({TP: batch(b"ok"), OTHER: bytes(corrupt), MISSING: batch(b"m")},
                                required_acks=1, timeout_ms=100, now_ms=T0)
    errors = {tp: r.error for tp, r in outcome.responses.items()}
    assert errors == {TP: ErrorCode.NONE, OTHER: ErrorCode.CORRUPT_MESSAGE,
                      MISSING: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert outcome.responses[TP].base_offset == 0 and outcome.responses[TP].log_start_offset == 0
    too_big = rm.append_records({TP: batch(b"x" * 400)}, required_acks=1, timeout_ms=100, now_ms=T0)
    assert too_big.responses[TP].error is ErrorCode.MESSAGE_TOO_LARGE


def test_produce_to_a_follower_answers_not_leader_with_the_leader(tmp_path: pathlib.Path) -> None:
    rm = manager(tmp_path)
    rm.make_follower(TP, leader_id=2, leader_epoch=1, partition_epoch=1, replicas=(1, 2, 3))
    response = rm.append_records({TP: batch(b"a")}, required_acks=1, timeout_ms=100, now_ms=T0).responses[TP]
    assert response.error is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (response.leader_id, response.leader_epoch) == (2, 1)


def test_offline_and_deleted_replicas_refuse_produce_and_fetch(tmp_path: pathlib.Path) -> None:
    rm = manager(tmp_path)
    rm.transition_replica(TP, ReplicaState.OFFLINE_REPLICA)
    produce = rm.append_records({TP: batch(b"a")}, required_acks=1, timeout_ms=100, now_ms=T0)
    assert produce.responses[TP].error is ErrorCode.KAFKA_STORAGE_ERROR
    fetched = consumer_fetch(rm, TP)
    assert fetched.responses is not None and fetched.responses[TP].error is ErrorCode.KAFKA_STORAGE_ERROR
    rm.transition_replica(TP, ReplicaState.REPLICA_DELETION_STARTED)
    produce = rm.append_records({TP: batch(b"a")}, required_acks=1, timeout_ms=100, now_ms=T0)
    assert produce.responses[TP].error is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert TP not in rm.high_watermarks() and OTHER in rm.high_watermarks()


def test_acks_all_below_min_isr_answers_not_enough_replicas_without_waiting(tmp_path: pathlib.Path) -> None:
    rm = manager(tmp_path, isr=(1,), min_isr=2)
    outcome = rm.append_records({TP: batch(b"a")}, required_acks=-1, timeout_ms=100, now_ms=T0)
    assert outcome.delayed_op_id is None and outcome.responses[TP].error is ErrorCode.NOT_ENOUGH_REPLICAS
    assert rm.waiting_produces == 0


def test_acks_all_waits_then_times_out(tmp_path: pathlib.Path) -> None:
    rm = manager(tmp_path, isr=(1, 2))
    outcome = rm.append_records({TP: batch(b"a"), MISSING: batch(b"b")}, required_acks=-1, timeout_ms=100,
                                now_ms=T0)
    assert outcome.delayed_op_id is not None and rm.waiting_produces == 1
    assert rm.next_deadline_ms() == T0 + 100
    rm.poll(T0 + 99)
    assert rm.take_completed() == rm_mod.Completed()
    rm.poll(T0 + 100)
    done = rm.take_completed().produces
    assert [c.op_id for c in done] == [outcome.delayed_op_id]
    assert done[0].responses[TP].error is ErrorCode.REQUEST_TIMED_OUT
    assert done[0].responses[MISSING].error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert rm.take_completed() == rm_mod.Completed(), "handed out once"


def test_acks_all_completes_when_the_follower_fetch_advances_the_hw(tmp_path: pathlib.Path) -> None:
    rm = manager(tmp_path, isr=(1, 2))
    outcome = rm.append_records({TP: batch(b"a", b"b")}, required_acks=-1, timeout_ms=1000, now_ms=T0)
    follower = purgatory.FetchParams(replica_id=2, max_wait_ms=0)
    rm.fetch_messages(follower, {TP: purgatory.FetchPartitionRequest(fetch_offset=2, partition_max_bytes=100)},
                      now_ms=T0)
    done = rm.take_completed().produces
    assert [c.op_id for c in done] == [outcome.delayed_op_id]
    assert done[0].responses[TP].error is ErrorCode.NONE and done[0].responses[TP].base_offset == 0


def test_losing_leadership_answers_waiting_produces_not_leader(tmp_path: pathlib.Path) -> None:
    rm = manager(tmp_path, isr=(1, 2))
    rm.append_records({TP: batch(b"a")}, required_acks=-1, timeout_ms=1000, now_ms=T0)
    rm.make_follower(TP, leader_id=2, leader_epoch=1, partition_epoch=1, replicas=(1, 2, 3))
    done = rm.take_completed().produces
    assert done[0].responses[TP].error is ErrorCode.NOT_LEADER_OR_FOLLOWER and rm.waiting_produces == 0


def test_isr_shrinking_below_min_isr_answers_not_enough_replicas_after_append(tmp_path: pathlib.Path) -> None:
    rm = manager(tmp_path, isr=(1, 2), min_isr=2)
    rm.append_records({TP: batch(b"a")}, required_acks=-1, timeout_ms=1000, now_ms=T0)
    # Broker 2 left the ISR (and stopped being caught up) before it fetched.
    rm.make_leader(TP, leader_epoch=0, partition_epoch=1, replicas=(1, 2, 3), isr=(1,), now_ms=T0 + 30_001)
    done = rm.take_completed().produces
    assert done[0].responses[TP].error is ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


# ---------------------------------------------------------------------------- fetch


def test_fetch_answers_an_error_per_partition_and_reads_the_rest(tmp_path: pathlib.Path) -> None:
    rm = manager(tmp_path)
    rm.append_records({TP: batch(b"a")}, required_acks=1, timeout_ms=100, now_ms=T0)
    outcome = consumer_fetch(rm, TP, MISSING)
    assert outcome.responses is not None
    assert outcome.responses[TP].error is ErrorCode.NONE and outcome.responses[TP].records
    assert outcome.responses[TP].high_watermark == 1
    assert outcome.responses[MISSING].error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_fetch_shares_max_bytes_but_always_returns_one_batch(tmp_path: pathlib.Path) -> None:
    rm = manager(tmp_path)
    data = batch(b"x" * 500)
    rm.append_records({TP: data, OTHER: data}, required_acks=1, timeout_ms=100, now_ms=T0)
    outcome = rm.fetch_messages(
        purgatory.FetchParams(max_bytes=100),
        {tp: purgatory.FetchPartitionRequest(fetch_offset=0, partition_max_bytes=100) for tp in (TP, OTHER)},
        now_ms=T0)
    assert outcome.responses is not None
    assert len(outcome.responses[TP].records) == len(data), "the first batch comes whole"
    assert outcome.responses[OTHER].records == b"", "the budget is spent"


def test_consumer_fetch_waits_for_min_bytes_and_is_completed_by_the_hw(tmp_path: pathlib.Path) -> None:
    rm = manager(tmp_path, isr=(1, 2))
    waiting = consumer_fetch(rm, TP, max_wait_ms=500, min_bytes=10)
    assert waiting.responses is None and waiting.delayed_op_id is not None and rm.waiting_fetches == 1
    rm.append_records({TP: batch(b"x" * 50)}, required_acks=1, timeout_ms=100, now_ms=T0)
    assert rm.take_completed().fetches == (), "appended, but not committed yet"
    rm.fetch_messages(purgatory.FetchParams(replica_id=2),
                      {TP: purgatory.FetchPartitionRequest(fetch_offset=1, partition_max_bytes=100)}, now_ms=T0)
    fetches = rm.take_completed().fetches
    assert [f.op_id for f in fetches] == [waiting.delayed_op_id]
    assert fetches[0].responses[TP].records and fetches[0].responses[TP].high_watermark == 1


def test_follower_fetch_waits_and_is_completed_by_an_append(tmp_path: pathlib.Path) -> None:
    rm = manager(tmp_path, isr=(1, 2))
    waiting = consumer_fetch(rm, TP, max_wait_ms=500, replica_id=2)
    assert waiting.delayed_op_id is not None
    rm.append_records({TP: batch(b"a")}, required_acks=1, timeout_ms=100, now_ms=T0)
    fetches = rm.take_completed().fetches
    assert [f.op_id for f in fetches] == [waiting.delayed_op_id] and fetches[0].responses[TP].records


def test_waiting_fetch_answers_empty_at_max_wait(tmp_path: pathlib.Path) -> None:
    rm = manager(tmp_path)
    waiting = consumer_fetch(rm, TP, max_wait_ms=500)
    rm.poll(T0 + 500)
    fetches = rm.take_completed().fetches
    assert [f.op_id for f in fetches] == [waiting.delayed_op_id]
    assert fetches[0].responses[TP].error is ErrorCode.NONE and fetches[0].responses[TP].records == b""


def test_waiting_fetch_answers_when_the_replica_goes_offline(tmp_path: pathlib.Path) -> None:
    rm = manager(tmp_path)
    consumer_fetch(rm, TP, max_wait_ms=500)
    rm.transition_replica(TP, ReplicaState.OFFLINE_REPLICA)
    fetches = rm.take_completed().fetches
    assert fetches[0].responses[TP].error is ErrorCode.KAFKA_STORAGE_ERROR


def test_fetch_with_an_error_or_a_divergence_answers_at_once(tmp_path: pathlib.Path) -> None:
    rm = manager(tmp_path)
    outcome = consumer_fetch(rm, TP, MISSING, max_wait_ms=500)
    assert outcome.responses is not None and outcome.delayed_op_id is None


def test_read_committed_consumers_read_to_the_high_watermark(tmp_path: pathlib.Path) -> None:
    rm = manager(tmp_path, isr=(1, 2))
    rm.append_records({TP: batch(b"a")}, required_acks=1, timeout_ms=100, now_ms=T0)
    outcome = rm.fetch_messages(purgatory.FetchParams(isolation=FetchIsolation.TXN_COMMITTED),
                                {TP: purgatory.FetchPartitionRequest(fetch_offset=0, partition_max_bytes=100)},
                                now_ms=T0)
    assert outcome.responses is not None and outcome.responses[TP].records == b""


# ---------------------------------------------------------------------------- ISR, checkpoint


def test_alter_partition_requests_are_collected_and_answers_routed(tmp_path: pathlib.Path) -> None:
    rm = manager(tmp_path, isr=(1, 2))
    rm.append_records({TP: batch(b"a")}, required_acks=1, timeout_ms=100, now_ms=T0)
    rm.fetch_messages(purgatory.FetchParams(replica_id=3),
                      {TP: purgatory.FetchPartitionRequest(fetch_offset=0, partition_max_bytes=100)}, now_ms=T0)
    requests = rm.take_alter_partition_requests()
    assert [(r.topic, r.partition_index, r.new_isr) for r in requests] == [("t", 0, (1, 2, 3))]
    assert rm.take_alter_partition_requests() == []
    outcome = rm.handle_alter_partition_response(
        requests[0], error=ErrorCode.NONE,
        result=LeaderAndIsr(leader_id=1, leader_epoch=0, isr=(1, 2, 3), partition_epoch=1), now_ms=T0)
    assert outcome.applied
    partition = rm.get_partition(TP)
    assert partition is not None and partition.isr == frozenset({1, 2, 3})


def test_alter_partition_requests_ready_says_when_a_proposal_waits_to_be_sent(tmp_path: pathlib.Path) -> None:
    # The server wakes the AlterPartition sender only when this is set: produces and fetches
    # that change no ISR leave it clear; an expansion, a shrink or a retryable error set it.
    rm = manager(tmp_path, isr=(1, 2))
    assert not rm.alter_partition_requests_ready
    rm.append_records({TP: batch(b"a")}, required_acks=1, timeout_ms=100, now_ms=T0)
    rm.fetch_messages(purgatory.FetchParams(replica_id=2),
                      {TP: purgatory.FetchPartitionRequest(fetch_offset=1, partition_max_bytes=100)}, now_ms=T0)
    consumer_fetch(rm, TP)
    rm.poll(T0 + 1)
    assert not rm.alter_partition_requests_ready  # an ISR member's progress proposes nothing
    rm.fetch_messages(purgatory.FetchParams(replica_id=3),
                      {TP: purgatory.FetchPartitionRequest(fetch_offset=1, partition_max_bytes=100)}, now_ms=T0)
    assert rm.alter_partition_requests_ready  # broker 3 caught up: expansion proposed
    [request] = rm.take_alter_partition_requests()
    assert not rm.alter_partition_requests_ready
    rm.poll(T0 + 2)
    assert not rm.alter_partition_requests_ready  # in flight: nothing more to send
    rm.handle_alter_partition_response(request, error=ErrorCode.REQUEST_TIMED_OUT, result=None, now_ms=T0)
    assert rm.alter_partition_requests_ready  # retried
    assert rm.take_alter_partition_requests() == [request]
    rm.handle_alter_partition_response(request, error=ErrorCode.NONE, now_ms=T0, result=LeaderAndIsr(
        leader_id=1, leader_epoch=0, isr=(1, 2, 3), partition_epoch=1))
    assert not rm.alter_partition_requests_ready
    rm.poll(T0 + 30_001)  # OTHER's followers never fetched: it shrinks (TP's hold its end)
    assert rm.alter_partition_requests_ready
    assert [(r.topic, r.new_isr) for r in rm.take_alter_partition_requests()] == [(OTHER.topic, (1,))]


def test_a_proposal_made_on_a_partition_directly_is_ready_after_the_next_poll(tmp_path: pathlib.Path) -> None:
    rm = manager(tmp_path, isr=(1, 2))
    partition = rm.get_partition(TP)
    assert partition is not None
    assert partition.maybe_shrink_isr(T0 + 30_001)
    assert partition.has_alter_partition_request_to_send and not rm.alter_partition_requests_ready
    rm.poll(T0 + 1)
    assert rm.alter_partition_requests_ready
    assert [r.new_isr for r in rm.take_alter_partition_requests()] == [(1,)]
    assert not partition.has_alter_partition_request_to_send


def test_poll_shrinks_the_isr_of_lagging_followers(tmp_path: pathlib.Path) -> None:
    rm = manager(tmp_path, isr=(1, 2))
    rm.poll(T0 + 30_001)
    assert [r.new_isr for r in rm.take_alter_partition_requests()] == [(1,), (1,)]


def test_high_watermarks_fill_the_replication_offset_checkpoint(tmp_path: pathlib.Path) -> None:
    rm = manager(tmp_path)
    rm.append_records({TP: batch(b"a", b"b"), OTHER: batch(b"c")}, required_acks=1, timeout_ms=100, now_ms=T0)
    assert rm.high_watermarks() == {TP: 2, OTHER: 1}
    path = tmp_path / "replication-offset-checkpoint"
    checkpoint.OffsetCheckpointFile(path).write(rm.high_watermarks())
    assert path.read_text() == "0\n2\nt 0 2\nu 3 1\n"
    reopened = open_partition(tmp_path / TP.dir_name, 1, high_watermark=checkpoint.OffsetCheckpointFile(path).read()[TP])
    assert reopened.high_watermark == 2


# ---------------------------------------------------------------------------- idle cost (issue 16)


def count_calls(monkeypatch: pytest.MonkeyPatch, rm: ReplicaManager, method: str) -> dict[TopicPartition, int]:
    """Wrap ``method`` of every hosted partition with a call counter."""
    calls: dict[TopicPartition, int] = {}
    for tp, partition in rm.partitions.items():
        original = getattr(partition, method)

        def counted(*args: object, _tp: TopicPartition = tp, _original: object = original,
                    **kwargs: object) -> object:
            calls[_tp] = calls.get(_tp, 0) + 1
            return _original(*args, **kwargs)  # type: ignore[operator]

        monkeypatch.setattr(partition, method, counted)
    return calls


def follower_fetch(rm: ReplicaManager, *, offset: int = 0, min_bytes: int = 1,
                   max_wait_ms: int = 500) -> rm_mod.FetchOutcome:
    return rm.fetch_messages(
        purgatory.FetchParams(replica_id=2, max_wait_ms=max_wait_ms, min_bytes=min_bytes),
        {tp: purgatory.FetchPartitionRequest(fetch_offset=offset, partition_max_bytes=1 << 20,
                                             current_leader_epoch=0)
         for tp in (TP, OTHER)}, now_ms=T0)


def test_a_reconcile_that_changes_nothing_wakes_no_waiting_fetch(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rm = manager(tmp_path, isr=(1, 2, 3))
    outcome = follower_fetch(rm)
    assert outcome.delayed_op_id is not None and rm.waiting_fetches == 1
    probes = count_calls(monkeypatch, rm, "bytes_available")
    for tp in (TP, OTHER):  # the periodic reconcile's make_leader of converged leaders
        rm.make_leader(tp, leader_epoch=0, partition_epoch=0, replicas=(1, 2, 3), isr=(1, 2, 3), now_ms=T0)
    assert probes == {} and rm.waiting_fetches == 1
    rm.make_leader(TP, leader_epoch=1, partition_epoch=1, replicas=(1, 2, 3), isr=(1, 2, 3), now_ms=T0)
    assert rm.waiting_fetches == 0  # a new epoch answers it (FENCED / re-read)
    assert probes == {TP: 1}


def test_an_idle_fetch_that_expires_answers_without_reading_its_partitions_again(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rm = manager(tmp_path, isr=(1, 2))
    rm.append_records({TP: batch(b"a"), OTHER: batch(b"b")}, required_acks=1, timeout_ms=100, now_ms=T0)
    assert follower_fetch(rm, offset=1, max_wait_ms=0).responses is not None  # HW -> 1
    outcome = follower_fetch(rm, offset=1)
    assert outcome.delayed_op_id is not None
    reads = count_calls(monkeypatch, rm, "read_records")
    rm.poll(T0 + 500)
    [done] = rm.take_completed().fetches
    assert reads == {}
    assert {tp: (r.error, r.records, r.high_watermark) for tp, r in done.responses.items()} == {
        TP: (ErrorCode.NONE, b"", 1), OTHER: (ErrorCode.NONE, b"", 1)}


def test_a_high_watermark_moved_by_the_waiting_fetch_itself_reaches_the_follower(
        tmp_path: pathlib.Path) -> None:
    rm = manager(tmp_path, isr=(1, 2))
    rm.append_records({TP: batch(b"a"), OTHER: batch(b"b")}, required_acks=1, timeout_ms=100, now_ms=T0)
    outcome = follower_fetch(rm, offset=1)  # its first read moves the HW to 1, then it waits
    assert outcome.delayed_op_id is not None
    rm.poll(T0 + 500)
    [done] = rm.take_completed().fetches
    assert {tp: r.high_watermark for tp, r in done.responses.items()} == {TP: 1, OTHER: 1}


def test_an_expiring_fetch_reads_again_only_the_partitions_that_changed(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rm = manager(tmp_path, isr=(1, 2, 3))
    outcome = follower_fetch(rm, min_bytes=1 << 20)
    assert outcome.delayed_op_id is not None
    reads = count_calls(monkeypatch, rm, "read_records")
    rm.append_records({TP: batch(b"new")}, required_acks=1, timeout_ms=100, now_ms=T0 + 10)
    assert rm.waiting_fetches == 1  # below min_bytes: it keeps waiting
    rm.poll(T0 + 500)
    [done] = rm.take_completed().fetches
    assert reads == {TP: 1}
    assert done.responses[TP].records and not done.responses[OTHER].records


def test_poll_checks_every_isr_only_every_half_lag_time(tmp_path: pathlib.Path) -> None:
    rm = manager(tmp_path, isr=(1, 2, 3))  # replica.lag.time.max.ms 30 s: a pass per 15 s
    for step in range(0, 15_000, 50):  # the server's 50 ms poll interval
        rm.poll(T0 + step)
    assert rm.isr_checks == 1
    rm.poll(T0 + 15_000)
    assert rm.isr_checks == 2
