"""Purgatory: delayed produce and fetch, completed by checks and expired by the injected clock."""

from __future__ import annotations

import pytest

from kraftlog.broker import purgatory
from kraftlog.broker.partition import FetchIsolation
from kraftlog.error_codes import ErrorCode
from kraftlog.storage.log import LogOffsetMetadata
from kraftlog.storage.topic_partition import TopicPartition

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
