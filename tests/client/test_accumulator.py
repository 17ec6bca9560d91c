"""Batching by batch.size and linger.ms, draining per partition, retries keep order."""

from __future__ import annotations

from kraftlog.client import accumulator as acc
from kraftlog.storage import record_batch as rb
from kraftlog.storage.topic_partition import TopicPartition

T0 = TopicPartition(topic="t", partition=0)
T1 = TopicPartition(topic="t", partition=1)


def record(size: int) -> rb.RecordInput:
    return rb.RecordInput(value=b"x" * size, timestamp_ms=0)


def test_linger_then_ready() -> None:
    a: acc.RecordAccumulator[int] = acc.RecordAccumulator(batch_size=1000, linger_ms=5)
    a.append(T0, record(10), 1, now_ms=100)
    assert a.ready(100, flushing=False) == ([], 105)
    assert a.ready(104, flushing=False) == ([], 105)
    assert a.ready(105, flushing=False) == ([T0], None)
    assert a.ready(100, flushing=True) == ([T0], None)


def test_batch_size_closes_a_batch_and_starts_another() -> None:
    a: acc.RecordAccumulator[int] = acc.RecordAccumulator(batch_size=250, linger_ms=1000)
    results = [a.append(T0, record(50), i, now_ms=0) for i in range(4)]
    # 61 header + 2 x 71 = 203; a third record would pass 250, so it starts a new batch
    # and the first one is closed: ready at once, before linger.ms.
    assert [r.new_batch for r in results] == [True, False, True, False]
    assert [r.batch_full for r in results] == [False, False, True, False]
    assert a.ready(0, flushing=False) == ([T0], None)
    drained = a.drain(T0, max_bytes=10_000)
    assert [b.handles for b in drained] == [[0, 1], [2, 3]]
    assert a.pending_records == 4
    for batch in drained:
        a.complete(batch)
    assert a.pending_records == 0 and a.buffered_bytes == 0


def test_a_record_larger_than_batch_size_gets_its_own_batch() -> None:
    a: acc.RecordAccumulator[int] = acc.RecordAccumulator(batch_size=100, linger_ms=0)
    a.append(T0, record(10), 0, now_ms=0)
    big = a.append(T0, record(500), 1, now_ms=0)
    assert big.new_batch and big.batch_full
    assert [b.handles for b in a.drain(T0, max_bytes=100)] == [[0]]
    assert [b.handles for b in a.drain(T0, max_bytes=100)] == [[1]]


def test_drain_respects_max_bytes_and_muted_partitions() -> None:
    a: acc.RecordAccumulator[int] = acc.RecordAccumulator(batch_size=100, linger_ms=0)
    for i in range(6):
        a.append(T0, record(40), i, now_ms=0)
    a.append(T1, record(40), 99, now_ms=0)
    ready, _ = a.ready(0, flushing=False, muted=[T1])
    assert ready == [T0]
    first = a.drain(T0, max_bytes=250)
    assert sum(b.size_bytes for b in first) <= 250 and len(first) == 2
    assert a.drain(T0, max_bytes=1)[0].handles == [2]  # always at least one batch


def test_retry_goes_back_to_the_front_alone_after_backoff() -> None:
    a: acc.RecordAccumulator[int] = acc.RecordAccumulator(batch_size=100, linger_ms=0)
    for i in range(4):
        a.append(T0, record(40), i, now_ms=0)
    [sent] = a.drain(T0, max_bytes=100)
    sent.attempts = 1
    a.append(T0, record(40), 4, now_ms=1)
    a.reenqueue([sent], retry_at_ms=50)
    assert a.ready(10, flushing=True) == ([], 50)
    assert a.ready(50, flushing=False)[0] == [T0]
    again = a.drain(T0, max_bytes=10_000)
    assert [b.handles for b in again] == [sent.handles]  # a retry is never merged
    rest = a.drain(T0, max_bytes=10_000)
    assert [h for b in rest for h in b.handles] == [1, 2, 3, 4]


def test_records_never_join_a_batch_that_was_sent() -> None:
    a: acc.RecordAccumulator[int] = acc.RecordAccumulator(batch_size=1000, linger_ms=0)
    a.append(T0, record(1), 0, now_ms=0)
    [sent] = a.drain(T0, max_bytes=1000)
    sent.attempts = 1
    a.reenqueue([sent], retry_at_ms=0)
    assert a.append(T0, record(1), 1, now_ms=0).new_batch


def test_expired_and_abort() -> None:
    a: acc.RecordAccumulator[int] = acc.RecordAccumulator(batch_size=100, linger_ms=0)
    a.append(T0, record(1), 0, now_ms=0)
    a.append(T1, record(1), 1, now_ms=50)
    assert [b.handles for b in a.expired(100, delivery_timeout_ms=100)] == [[0]]
    assert a.has_queued()
    assert [b.handles for b in a.abort_all()] == [[1]]
    assert not a.has_queued()


def test_estimate_counts_key_value_and_headers() -> None:
    r = rb.RecordInput(key=b"kk", value=b"vvv", headers=(rb.Header(key="h", value=b"12"),))
    assert acc.estimate_size(r) == acc.RECORD_OVERHEAD_BYTES + 2 + 3 + 1 + 10 + 2
    encoded = rb.build_batch([r])
    assert len(encoded) - rb.HEADER_SIZE <= acc.estimate_size(r)

