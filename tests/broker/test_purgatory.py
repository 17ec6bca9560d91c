"""Purgatory: delayed produce and fetch, completed by checks and expired by the injected clock."""

from __future__ import annotations

import pytest

from kraftlog.broker import purgatory
from kraftlog.broker.partition import FetchIsolation
from kraftlog.error_codes import ErrorCode
from kraftlog.ids import TopicPartition
from kraftlog.storage.log import LogOffsetMetadata

A = TopicPartition(topic="a", partition=0)
B = TopicPartition(topic="b", partition=0)


def produce(op_id: int, deadline_ms: int, **required: int) -> purgatory.DelayedProduce:
    statuses = {TopicPartition(topic=name, partition=0): purgatory.ProducePartitionStatus(
        required_offset=offset,
        response=purgatory.ProducePartitionResponse(error=ErrorCode.NONE, base_offset=offset - 1))
        for name, offset in required.items()}
    return purgatory.DelayedProduce(op_id=op_id, deadline_ms=deadline_ms, statuses=statuses)


class HighWatermarks:
    """A stand-in for the partitions' check_enough_replicas_reach_offset."""

    def __init__(self) -> None:
        self.hw: dict[TopicPartition, int] = {}
        self.errors: dict[TopicPartition, ErrorCode] = {}

    def __call__(self, tp: TopicPartition, required_offset: int) -> tuple[bool, ErrorCode]:
        if tp in self.errors:
            return False, self.errors[tp]
        return self.hw.get(tp, 0) >= required_offset, ErrorCode.NONE


def test_produce_completes_when_every_partition_reaches_its_offset() -> None:
    hws = HighWatermarks()
    p = purgatory.produce_purgatory(hws)
    op = produce(1, 1000, a=5, b=3)
    assert p.try_complete_else_watch(op) is False and len(p) == 1
    hws.hw[A] = 5
    assert p.check_and_complete(A) == []
    hws.hw[B] = 3
    assert p.check_and_complete(B) == [op]
    assert len(p) == 0 and p.check_and_complete(A) == []
    assert {tp: r.error for tp, r in op.responses().items()} == {A: ErrorCode.NONE, B: ErrorCode.NONE}


def test_produce_already_satisfied_completes_without_waiting() -> None:
    hws = HighWatermarks()
    hws.hw[A] = 10
    p = purgatory.produce_purgatory(hws)
    assert p.try_complete_else_watch(produce(1, 1000, a=5)) is True
    assert len(p) == 0 and p.next_deadline_ms() is None


def test_produce_partition_errors_complete_it_with_that_error() -> None:
    hws = HighWatermarks()
    p = purgatory.produce_purgatory(hws)
    op = produce(1, 1000, a=5)
    p.try_complete_else_watch(op)
    hws.errors[A] = ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert p.check_and_complete(A) == [op]
    response = op.responses()[A]
    assert response.error is ErrorCode.NOT_LEADER_OR_FOLLOWER and response.base_offset == 4


def test_produce_expires_with_request_timed_out_on_the_partitions_still_waiting() -> None:
    hws = HighWatermarks()
    p = purgatory.produce_purgatory(hws)
    op = produce(1, 1000, a=5, b=3)
    p.try_complete_else_watch(op)
    hws.hw[A] = 5
    p.check_and_complete(A)  # A is done, B still waits
    assert p.next_deadline_ms() == 1000
    assert p.expire(999) == []
    assert p.expire(1000) == [op]
    assert op.responses()[A].error is ErrorCode.NONE
    assert op.responses()[B].error is ErrorCode.REQUEST_TIMED_OUT
    assert len(p) == 0 and p.next_deadline_ms() is None
    hws.hw[B] = 3
    assert p.check_and_complete(B) == [], "an expired operation never completes twice"


def test_expiry_is_in_deadline_order_and_ids_are_unique() -> None:
    p = purgatory.produce_purgatory(HighWatermarks())
    late, early = produce(1, 300, a=1), produce(2, 100, a=1)
    p.try_complete_else_watch(late)
    p.try_complete_else_watch(early)
    with pytest.raises(ValueError, match="already waiting"):
        p.try_complete_else_watch(produce(1, 500, a=1))
    assert [op.op_id for op in p.expire(1000)] == [2, 1]


def fetch_op(op_id: int, *, min_bytes: int, deadline_ms: int = 500,
             partition_max_bytes: int = 1000) -> purgatory.DelayedFetch:
    meta = LogOffsetMetadata(message_offset=0, segment_base_offset=0, relative_position_in_segment=0)
    status = purgatory.FetchPartitionStatus(
        fetch_offset_metadata=meta,
        request=purgatory.FetchPartitionRequest(fetch_offset=0, partition_max_bytes=partition_max_bytes))
    return purgatory.DelayedFetch(op_id=op_id, deadline_ms=deadline_ms,
                                  params=purgatory.FetchParams(min_bytes=min_bytes, max_wait_ms=500),
                                  partitions={A: status, B: status})


def test_fetch_completes_once_min_bytes_are_available_over_its_partitions() -> None:
    available: dict[TopicPartition, int | None] = {A: 0, B: 0}
    p = purgatory.fetch_purgatory(lambda tp, _status, _params: available[tp])
    op = fetch_op(1, min_bytes=100)
    assert p.try_complete_else_watch(op) is False
    available[A] = 60
    assert p.check_and_complete(A) == []
    available[B] = 40
    assert p.check_and_complete(B) == [op]


def test_fetch_counts_at_most_partition_max_bytes_per_partition() -> None:
    p = purgatory.fetch_purgatory(lambda tp, _status, _params: 10_000 if tp == A else 0)
    assert p.try_complete_else_watch(fetch_op(1, min_bytes=1500, partition_max_bytes=1000)) is False


def test_fetch_completes_at_once_when_the_probe_says_so() -> None:
    p = purgatory.fetch_purgatory(lambda tp, _status, _params: None if tp == B else 0)
    assert p.try_complete_else_watch(fetch_op(1, min_bytes=10**9)) is True


def test_fetch_expires_at_max_wait() -> None:
    p = purgatory.fetch_purgatory(lambda _tp, _status, _params: 0)
    op = fetch_op(1, min_bytes=1, deadline_ms=500)
    p.try_complete_else_watch(op)
    assert p.expire(499) == [] and p.expire(500) == [op] and len(p) == 0


def test_fetch_params_isolation_of_followers_is_log_end() -> None:
    assert purgatory.FetchParams(replica_id=2).fetch_isolation is FetchIsolation.LOG_END
    consumer = purgatory.FetchParams(isolation=FetchIsolation.TXN_COMMITTED)
    assert consumer.fetch_isolation is FetchIsolation.TXN_COMMITTED and not consumer.is_from_follower


# ---------------------------------------------------------------------------- watch lists (issue 16)


class CountingProbe:
    """A fetch probe that counts its calls per partition."""

    def __init__(self) -> None:
        self.available: dict[TopicPartition, int | None] = {}
        self.calls: dict[TopicPartition, int] = {}

    def __call__(self, tp: TopicPartition, _status: purgatory.FetchPartitionStatus,
                 _params: purgatory.FetchParams) -> int | None:
        self.calls[tp] = self.calls.get(tp, 0) + 1
        return self.available.get(tp, 0)


def wide_fetch(op_id: int, tps: list[TopicPartition], *, min_bytes: int = 1) -> purgatory.DelayedFetch:
    meta = LogOffsetMetadata(message_offset=0, segment_base_offset=0, relative_position_in_segment=0)
    status = purgatory.FetchPartitionStatus(
        fetch_offset_metadata=meta,
        request=purgatory.FetchPartitionRequest(fetch_offset=0, partition_max_bytes=1 << 20))
    return purgatory.DelayedFetch(op_id=op_id, deadline_ms=500,
                                  params=purgatory.FetchParams(min_bytes=min_bytes, max_wait_ms=500),
                                  partitions=dict.fromkeys(tps, status))


def test_a_change_of_one_partition_evaluates_only_the_fetches_watching_it_and_only_it() -> None:
    many = [TopicPartition(topic="m", partition=i) for i in range(100)]
    probe = CountingProbe()
    p = purgatory.fetch_purgatory(probe)
    on_many = wide_fetch(1, many, min_bytes=50)
    only_b = wide_fetch(2, [B])
    assert not p.try_complete_else_watch(on_many) and not p.try_complete_else_watch(only_b)
    assert sum(probe.calls.values()) == 101  # the first check looks at every partition
    probe.calls.clear()
    probe.available[A] = 10
    assert p.check_and_complete(A) == []  # nobody watches A: no fetch is evaluated
    assert probe.calls == {}
    probe.available[many[7]] = 30
    assert p.check_and_complete(many[7]) == []
    assert probe.calls == {many[7]: 1}  # one probe, not 100
    probe.available[many[42]] = 30
    assert p.check_and_complete(many[42]) == [on_many]  # 30 + 30 >= 50
    assert probe.calls == {many[7]: 1, many[42]: 1}
    assert on_many.changed == {many[7], many[42]}
    assert p.watched_keys() == 1  # the completed fetch left every watch list at once


def test_a_bytes_estimate_that_shrinks_is_replaced_not_added() -> None:
    probe = CountingProbe()
    p = purgatory.fetch_purgatory(probe)
    op = wide_fetch(1, [A, B], min_bytes=100)
    assert not p.try_complete_else_watch(op)
    probe.available[A] = 60
    assert p.check_and_complete(A) == []
    probe.available[A] = 10  # e.g. truncated: the estimate goes down
    assert p.check_and_complete(A) == []
    probe.available[B] = 80
    assert p.check_and_complete(B) == []  # 10 + 80 < 100: A's old 60 no longer counts
    assert op.accumulated == 90


def test_an_expired_operation_leaves_the_watch_lists_of_its_keys_only() -> None:
    many = [TopicPartition(topic="m", partition=i) for i in range(50)]
    p = purgatory.fetch_purgatory(CountingProbe())
    first = wide_fetch(1, many)
    second = wide_fetch(2, many[:1])
    p.try_complete_else_watch(first)
    p.try_complete_else_watch(second)
    assert p.expire(500) == [first, second]
    assert p.watched_keys() == 0


def test_produce_check_of_one_partition_asks_only_about_it() -> None:
    asked: list[TopicPartition] = []
    hws = HighWatermarks()

    def check(tp: TopicPartition, required: int) -> tuple[bool, ErrorCode]:
        asked.append(tp)
        return hws(tp, required)

    p = purgatory.produce_purgatory(check)
    op = produce(1, 1000, a=5, b=3)
    assert p.try_complete_else_watch(op) is False
    asked.clear()
    hws.hw[A] = 5
    assert p.check_and_complete(A) == []
    assert asked == [A]
