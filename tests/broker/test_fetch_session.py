"""Incremental fetch sessions (KIP-227): the follower's builder and the leader's session fetches."""

from __future__ import annotations

import pathlib

import pytest

from kraftlog.broker import fetch_session as fs
from kraftlog.broker import purgatory
from kraftlog.broker.partition import PartitionConfig
from kraftlog.broker.replica_manager import ReplicaManager, ReplicaState
from kraftlog.error_codes import ErrorCode
from kraftlog.ids import TopicPartition
from tests.broker.harness import T0, TP, batch, open_partition

OTHER = TopicPartition(topic="u", partition=3)
FOLLOWER = 2
FOLLOWER_EPOCH = 7


def manager(tmp_path: pathlib.Path) -> ReplicaManager:
    rm = ReplicaManager(broker_id=1)
    for tp in (TP, OTHER):
        p = open_partition(tmp_path / tp.dir_name, 1, config=PartitionConfig(), topic=tp.topic,
                           index=tp.partition)
        rm.add_partition(p)
        rm.transition_replica(tp, ReplicaState.ONLINE_REPLICA)
        rm.make_leader(tp, leader_epoch=0, partition_epoch=0, replicas=(1, 2), isr=(1, 2), now_ms=T0)
    return rm


def params(max_wait_ms: int = 500) -> purgatory.FetchParams:
    return purgatory.FetchParams(replica_id=FOLLOWER, replica_epoch=FOLLOWER_EPOCH, max_wait_ms=max_wait_ms)


def requests(rm: ReplicaManager, *tps: TopicPartition) -> dict[TopicPartition, purgatory.FetchPartitionRequest]:
    out = {}
    for tp in tps:
        partition = rm.get_partition(tp)
        assert partition is not None
        out[tp] = purgatory.FetchPartitionRequest(
            fetch_offset=partition.log_end_offset, partition_max_bytes=1 << 20, current_leader_epoch=0)
    return out


def count_reads(monkeypatch: pytest.MonkeyPatch, rm: ReplicaManager) -> dict[TopicPartition, int]:
    calls: dict[TopicPartition, int] = {}
    for tp, partition in rm.partitions.items():
        original = partition.read_records

        def counted(*args: object, _tp: TopicPartition = tp, _original: object = original,
                    **kwargs: object) -> object:
            calls[_tp] = calls.get(_tp, 0) + 1
            return _original(*args, **kwargs)  # type: ignore[operator]

        monkeypatch.setattr(partition, "read_records", counted)
    return calls


def open_session(rm: ReplicaManager) -> int:
    outcome = rm.fetch_messages(params(max_wait_ms=0), requests(rm, TP, OTHER), now_ms=T0,
                                session=fs.SessionRequest(session_id=0, epoch=fs.INITIAL_EPOCH))
    assert outcome.responses is not None and set(outcome.responses) == {TP, OTHER}  # full answer
    assert outcome.session_id != 0
    return outcome.session_id


def test_an_idle_incremental_fetch_reads_nothing_and_answers_nothing(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rm = manager(tmp_path)
    session_id = open_session(rm)
    reads = count_reads(monkeypatch, rm)
    outcome = rm.fetch_messages(params(), {}, now_ms=T0,
                                session=fs.SessionRequest(session_id=session_id, epoch=1))
    assert outcome.delayed_op_id is not None and outcome.session_id == session_id
    assert rm.waiting_fetches == 0 and rm.waiting_session_fetches == 1  # no per-partition watch
    rm.poll(T0 + 500)
    [done] = rm.take_completed().fetches
    assert done.op_id == outcome.delayed_op_id and done.responses == {}
    assert reads == {}


def test_an_append_answers_a_waiting_incremental_fetch_with_that_partition_only(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rm = manager(tmp_path)
    session_id = open_session(rm)
    outcome = rm.fetch_messages(params(), {}, now_ms=T0,
                                session=fs.SessionRequest(session_id=session_id, epoch=1))
    assert outcome.delayed_op_id is not None
    reads = count_reads(monkeypatch, rm)
    rm.append_records({TP: batch(b"a")}, required_acks=1, timeout_ms=100, now_ms=T0 + 5)
    [done] = rm.take_completed().fetches
    assert set(done.responses) == {TP} and done.responses[TP].records
    assert reads == {TP: 1}
    # The follower names TP with its new fetch offset: read, and the new HW is news.
    outcome = rm.fetch_messages(params(max_wait_ms=0), requests(rm, TP), now_ms=T0 + 10,
                                session=fs.SessionRequest(session_id=session_id, epoch=2))
    assert outcome.responses == {}  # its read moved the HW; the answer carries the HW before it
    partition = rm.get_partition(TP)
    assert partition is not None and partition.high_watermark == 1
    answers = []
    for epoch in (3, 4):
        outcome = rm.fetch_messages(params(max_wait_ms=0), {}, now_ms=T0 + 10 * epoch,
                                    session=fs.SessionRequest(session_id=session_id, epoch=epoch))
        assert outcome.responses is not None
        answers.append({tp: r.high_watermark for tp, r in outcome.responses.items()})
    assert answers == [{TP: 1}, {}]  # the new HW reaches the follower once, then nothing


def test_forgotten_partitions_are_not_read_or_answered_any_more(tmp_path: pathlib.Path) -> None:
    rm = manager(tmp_path)
    session_id = open_session(rm)
    outcome = rm.fetch_messages(params(), {}, now_ms=T0, session=fs.SessionRequest(
        session_id=session_id, epoch=1, forgotten=(TP,)))
    assert outcome.delayed_op_id is not None
    rm.append_records({TP: batch(b"a")}, required_acks=1, timeout_ms=100, now_ms=T0 + 5)
    assert rm.take_completed().fetches == ()  # TP left the session: its append wakes nobody
    rm.append_records({OTHER: batch(b"b")}, required_acks=1, timeout_ms=100, now_ms=T0 + 6)
    [done] = rm.take_completed().fetches
    assert set(done.responses) == {OTHER}


def test_session_errors_name_the_problem(tmp_path: pathlib.Path) -> None:
    rm = manager(tmp_path)
    session_id = open_session(rm)
    unknown = rm.fetch_messages(params(), {}, now_ms=T0, session=fs.SessionRequest(session_id=999, epoch=1))
    assert unknown.error is ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    wrong = rm.fetch_messages(params(), {}, now_ms=T0, session=fs.SessionRequest(session_id=session_id, epoch=5))
    assert wrong.error is ErrorCode.INVALID_FETCH_SESSION_EPOCH
    restarted = purgatory.FetchParams(replica_id=FOLLOWER, replica_epoch=FOLLOWER_EPOCH + 1, max_wait_ms=0)
    other_incarnation = rm.fetch_messages(restarted, {}, now_ms=T0,
                                          session=fs.SessionRequest(session_id=session_id, epoch=1))
    assert other_incarnation.error is ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    # A full fetch naming the old session closes it and opens another.
    reopened = rm.fetch_messages(params(max_wait_ms=0), requests(rm, TP), now_ms=T0,
                                 session=fs.SessionRequest(session_id=session_id, epoch=fs.INITIAL_EPOCH))
    assert reopened.session_id not in (0, session_id) and len(rm.fetch_sessions) == 1


def test_a_consumer_fetch_never_gets_a_session(tmp_path: pathlib.Path) -> None:
    rm = manager(tmp_path)
    outcome = rm.fetch_messages(purgatory.FetchParams(max_wait_ms=0), requests(rm, TP), now_ms=T0,
                                session=fs.SessionRequest(session_id=0, epoch=fs.INITIAL_EPOCH))
    assert outcome.session_id == 0 and outcome.responses is not None and len(rm.fetch_sessions) == 0


# ---------------------------------------------------------------------------- the follower's builder


def test_builder_sends_everything_first_then_only_changes_and_forgotten() -> None:
    b = fs.FetchSessionBuilder()
    first = b.build({TP: 1, OTHER: 1})
    assert (first.session_id, first.epoch, set(first.send)) == (0, fs.INITIAL_EPOCH, {TP, OTHER})
    b.handle_response(error=ErrorCode.NONE, session_id=42)
    idle = b.build({TP: 1, OTHER: 1})
    assert (idle.session_id, idle.epoch, idle.send, idle.forgotten) == (42, 1, (), ())
    b.handle_response(error=ErrorCode.NONE, session_id=42)
    moved = b.build({TP: 2})
    assert (moved.epoch, moved.send, moved.forgotten) == (2, (TP,), (OTHER,))


def test_builder_starts_over_after_an_error_or_a_lost_answer_and_closes_the_old_session() -> None:
    b = fs.FetchSessionBuilder()
    b.build({TP: 1})
    b.handle_response(error=ErrorCode.NONE, session_id=42)
    b.build({TP: 1})
    b.reset()  # the answer was lost (cancelled call, transport error)
    again = b.build({TP: 1})
    assert (again.session_id, again.epoch, again.send) == (42, fs.INITIAL_EPOCH, (TP,))  # closes 42
    b.handle_response(error=ErrorCode.NONE, session_id=43)
    b.build({TP: 1})
    b.handle_response(error=ErrorCode.INVALID_FETCH_SESSION_EPOCH, session_id=0)
    assert b.build({TP: 1}).epoch == fs.INITIAL_EPOCH


def test_the_leader_cache_evicts_the_least_recently_used_session() -> None:
    cache = fs.FetchSessionCache(max_sessions=2)
    first = cache.create(replica_id=2, replica_epoch=1)
    second = cache.create(replica_id=3, replica_epoch=1)
    assert cache.get(first.session_id) is first  # used: second is now the oldest
    cache.create(replica_id=4, replica_epoch=1)
    assert cache.get(second.session_id) is None and cache.get(first.session_id) is first


def test_an_idle_follower_outside_the_isr_still_joins_it_once_eligible(tmp_path: pathlib.Path) -> None:
    # The leader keeps reading a session partition whose ISR lacks the follower (found by
    # tests/broker/test_process.py: a restarted broker fetched while still fenced, then sent
    # nothing new, and never came back into the ISR).
    rm = manager(tmp_path)
    partition = rm.get_partition(TP)
    assert partition is not None
    eligible = [False]
    partition._is_replica_isr_eligible = lambda _replica_id: eligible[0]  # KIP-841's predicate
    rm.make_leader(TP, leader_epoch=0, partition_epoch=1, replicas=(1, 2), isr=(1,), now_ms=T0)
    session_id = open_session(rm)
    assert FOLLOWER not in partition.isr and not partition.has_alter_partition_request_to_send
    eligible[0] = True  # unfenced now; the follower's fetch position did not change
    outcome = rm.fetch_messages(params(max_wait_ms=0), {}, now_ms=T0 + 10,
                                session=fs.SessionRequest(session_id=session_id, epoch=1))
    assert outcome.responses is not None
    assert [r.new_isr for r in rm.take_alter_partition_requests()] == [(1, 2)]


def test_an_idle_session_follower_is_not_shrunk_by_the_first_append_after_a_long_quiet(
        tmp_path: pathlib.Path) -> None:
    # Its partitions were not read for longer than replica.lag.time.max.ms (nothing changed),
    # yet the follower fetched at the log end all along: the append must not make it look
    # like one that stopped fetching 40 s ago.
    rm = manager(tmp_path)
    session_id = open_session(rm)  # at T0, both partitions at their log end
    quiet = T0 + 40_000
    outcome = rm.fetch_messages(params(max_wait_ms=0), {}, now_ms=quiet,
                                session=fs.SessionRequest(session_id=session_id, epoch=1))
    assert outcome.responses == {}
    rm.append_records({TP: batch(b"a")}, required_acks=1, timeout_ms=100, now_ms=quiet + 1)
    rm.poll(quiet + 2)  # the first poll runs the ISR pass
    assert rm.isr_checks == 1
    assert rm.take_alter_partition_requests() == []
    # A follower whose session went quiet too is shrunk as before.
    rm.poll(quiet + 30_003)
    assert [r.new_isr for r in rm.take_alter_partition_requests()] == [(1,)]


def test_builder_takes_the_same_mapping_again_as_an_idle_round_without_comparing() -> None:
    class NoCompare:
        """A request value that fails if compared: the idle round must not look at it."""

        def __eq__(self, other: object) -> bool:
            raise AssertionError("compared")

        __hash__ = object.__hash__

    requests = {TP: NoCompare(), OTHER: NoCompare()}
    b = fs.FetchSessionBuilder()
    b.build(requests)
    b.handle_response(error=ErrorCode.NONE, session_id=9)
    for epoch in (1, 2, 3):
        idle = b.build(requests)
        assert (idle.session_id, idle.epoch, idle.send, idle.forgotten) == (9, epoch, (), ())
        b.handle_response(error=ErrorCode.NONE, session_id=9)
    changed = dict(requests)
    changed[TP] = 5  # a new mapping: compared partition by partition (identity first)
    with pytest.raises(AssertionError, match="compared"):
        b.build(changed)


def test_a_change_under_a_waiting_fetch_reads_that_partition_not_every_dirty_one(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # OTHER's ISR lacks the follower, so OTHER stays dirty (read at every fetch of the
    # session). A change of TP while a fetch waits reads TP only: reading every dirty
    # partition per change made thousands of ISR answers cost millions of reads (issue 16).
    rm = manager(tmp_path)
    rm.make_leader(OTHER, leader_epoch=0, partition_epoch=1, replicas=(1, 2), isr=(1,), now_ms=T0)
    session_id = open_session(rm)
    outcome = rm.fetch_messages(params(), {}, now_ms=T0,
                                session=fs.SessionRequest(session_id=session_id, epoch=1))
    assert outcome.delayed_op_id is not None
    reads = count_reads(monkeypatch, rm)
    for n in range(5):
        rm.make_leader(TP, leader_epoch=0, partition_epoch=2 + n, replicas=(1, 2), isr=(1, 2),
                       now_ms=T0 + n)
    assert reads.get(OTHER, 0) == 0 and reads.get(TP, 0) >= 1


def test_a_new_leader_counts_a_waiting_session_follower_at_once(tmp_path: pathlib.Path) -> None:
    # Found by tests/broker/test_process.py (the leader kill): the surviving follower's session
    # fetch reached the new leader before its metadata made it leader, was refused, and its
    # next (idle) fetch waited there while the leadership arrived. That change was read
    # without counting the follower's position, and no later idle fetch read the partition,
    # so the new leader never learnt the follower held its whole log: the high watermark
    # stayed behind, and acknowledged records unreadable, until the next append.
    rm = manager(tmp_path)
    rm.append_records({TP: batch(b"a", b"b")}, required_acks=1, timeout_ms=100, now_ms=T0)
    partition = rm.get_partition(TP)
    assert partition is not None and partition.high_watermark == 0
    rm.make_follower(TP, leader_id=3, leader_epoch=1, partition_epoch=1, replicas=(3, 1, 2))
    at_end = {TP: purgatory.FetchPartitionRequest(
        fetch_offset=partition.log_end_offset, partition_max_bytes=1 << 20, current_leader_epoch=2)}
    opened = rm.fetch_messages(params(max_wait_ms=0), at_end, now_ms=T0,
                               session=fs.SessionRequest(session_id=0, epoch=fs.INITIAL_EPOCH))
    assert opened.responses is not None
    assert opened.responses[TP].error is ErrorCode.UNKNOWN_LEADER_EPOCH  # not its epoch yet
    waiting = rm.fetch_messages(params(), {}, now_ms=T0 + 100,
                                session=fs.SessionRequest(session_id=opened.session_id, epoch=1))
    assert waiting.delayed_op_id is not None
    rm.make_leader(TP, leader_epoch=2, partition_epoch=2, replicas=(3, 1, 2), isr=(1, 2),
                   now_ms=T0 + 150)
    assert partition.high_watermark == 0  # the follower's position is not known yet
    # The waiting fetch is answered now (not at its deadline), so the follower asks again...
    [done] = rm.take_completed().fetches
    assert done.op_id == waiting.delayed_op_id
    assert done.responses[TP].error is ErrorCode.NONE
    # ...and its next idle fetch counts its position: the high watermark reaches the log end.
    rm.fetch_messages(params(), {}, now_ms=T0 + 151,
                      session=fs.SessionRequest(session_id=opened.session_id, epoch=2))
    assert partition.high_watermark == partition.log_end_offset == 2
