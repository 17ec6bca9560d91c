"""Batching by batch.size and linger.ms, draining per partition, retries keep order.

Records are told apart by their timestamps (``put(..., i)`` appends a record stamped
``i``; :func:`ids` reads a batch's stamps back from its encoded bytes)."""

from __future__ import annotations

import itertools

import pytest

from kraftlog.client import accumulator as acc
from kraftlog.errors import InvariantViolation
from kraftlog.ids import TopicPartition
from kraftlog.storage import batch_header as bh
from kraftlog.storage import record_batch as rb

T0 = TopicPartition(topic="t", partition=0)
T1 = TopicPartition(topic="t", partition=1)


def accumulator(*, batch_size: int, linger_ms: int) -> acc.RecordAccumulator[int]:
    results = itertools.count()
    return acc.RecordAccumulator(batch_size=batch_size, linger_ms=linger_ms,
                                 new_result=lambda: next(results))


def put(a: acc.RecordAccumulator[int], tp: TopicPartition, size: int, stamp: int, *,
        now_ms: int = 0) -> acc.ProducerBatch[int]:
    return a.append(tp, None, b"x" * size, (), stamp, now_ms=now_ms)


def ids(batch: acc.ProducerBatch[int]) -> list[int]:
    [decoded] = rb.decode_batches(batch.builder.build())
    return [r.timestamp_ms for r in decoded.records]


def test_linger_then_ready() -> None:
    a = accumulator(batch_size=1000, linger_ms=5)
    put(a, T0, 10, 1, now_ms=100)
    assert a.ready(100, flushing=False) == ([], 105)
    assert a.ready(104, flushing=False) == ([], 105)
    assert a.ready(105, flushing=False) == ([T0], None)
    assert a.ready(100, flushing=True) == ([T0], None)


def test_batch_size_closes_a_batch_and_starts_another() -> None:
    a = accumulator(batch_size=250, linger_ms=1000)
    batches = [put(a, T0, 50, i) for i in range(4)]
    # 61 header + 2 x 71 = 203; a third record would pass 250, so it starts a new batch
    # and the first one is closed: ready at once, before linger.ms.
    assert [b.result for b in batches] == [0, 0, 1, 1]
    assert [b.builder.count for b in batches] == [2, 2, 2, 2]
    assert batches[0].closed and not batches[2].closed
    assert a.ready(0, flushing=False) == ([T0], None)
    drained = a.drain(T0, max_bytes=10_000)
    assert [ids(b) for b in drained] == [[0, 1], [2, 3]]
    assert a.pending_records == 4
    for batch in drained:
        a.complete(batch)
    assert a.pending_records == 0 and a.buffered_bytes == 0


def test_a_record_larger_than_batch_size_gets_its_own_batch() -> None:
    a = accumulator(batch_size=100, linger_ms=0)
    small = put(a, T0, 10, 0)
    big = put(a, T0, 500, 1)
    assert big is not small and big.closed and small.closed
    assert [ids(b) for b in a.drain(T0, max_bytes=100)] == [[0]]
    assert [ids(b) for b in a.drain(T0, max_bytes=100)] == [[1]]


def test_records_are_encoded_as_appended() -> None:
    """What a batch's builder holds is the record batch of what was appended, in order."""
    a = accumulator(batch_size=1 << 20, linger_ms=0)
    header = rb.Header(key="h", value=b"1")
    records = [rb.RecordInput(key=b"k", value=b"v1", timestamp_ms=10),
               rb.RecordInput(key=None, value=None, headers=(header,), timestamp_ms=7),
               rb.RecordInput(key=b"k" * 20000, value=b"v3", timestamp_ms=12)]
    for r in records:
        batch = a.append(T0, r.key, r.value, r.headers, r.timestamp_ms or 0, now_ms=0)
    assert batch.builder.build(producer_id=3, producer_epoch=1, base_sequence=9) == (
        rb.build_batch(records, producer_id=3, producer_epoch=1, base_sequence=9))
    assert batch.size_bytes == bh.HEADER_SIZE + sum(acc.estimate_fields(r.key, r.value, r.headers) for r in records)


def test_a_refused_record_leaves_nothing_behind() -> None:
    a = accumulator(batch_size=1000, linger_ms=0)
    with pytest.raises(ValueError, match="must be a Header"):
        a.append(T0, None, b"v", ("not a header",), 0, now_ms=0, size=30)  # type: ignore[arg-type]
    assert not a.has_queued() and a.pending_records == 0 and a.buffered_bytes == 0
    put(a, T0, 1, 5)
    with pytest.raises(ValueError):
        a.append(T0, None, b"v", ("not a header",), 0, now_ms=0, size=30)  # type: ignore[arg-type]
    [batch] = a.drain(T0, max_bytes=1000)
    assert ids(batch) == [5] and a.pending_records == 1


def test_drain_respects_max_bytes_and_muted_partitions() -> None:
    a = accumulator(batch_size=100, linger_ms=0)
    for i in range(6):
        put(a, T0, 40, i)
    put(a, T1, 40, 99)
    ready, _ = a.ready(0, flushing=False, muted=[T1])
    assert ready == [T0]
    first = a.drain(T0, max_bytes=250)
    assert sum(b.size_bytes for b in first) <= 250 and len(first) == 2
    assert ids(a.drain(T0, max_bytes=1)[0]) == [2]  # always at least one batch


def test_retry_goes_back_to_the_front_alone_after_backoff() -> None:
    a = accumulator(batch_size=100, linger_ms=0)
    for i in range(4):
        put(a, T0, 40, i)
    [sent] = a.drain(T0, max_bytes=100)
    sent.attempts = 1
    put(a, T0, 40, 4, now_ms=1)
    a.reenqueue([sent], retry_at_ms=50)
    assert a.ready(10, flushing=True) == ([], 50)
    assert a.ready(50, flushing=False)[0] == [T0]
    again = a.drain(T0, max_bytes=10_000)
    assert again == [sent] and ids(sent) == [0]  # a retry is never merged
    rest = a.drain(T0, max_bytes=10_000)
    assert [i for b in rest for i in ids(b)] == [1, 2, 3, 4]


def test_records_never_join_a_batch_that_was_sent() -> None:
    a = accumulator(batch_size=1000, linger_ms=0)
    put(a, T0, 1, 0)
    [sent] = a.drain(T0, max_bytes=1000)
    sent.attempts = 1
    a.reenqueue([sent], retry_at_ms=0)
    assert put(a, T0, 1, 1) is not sent and sent.builder.count == 1


def test_a_new_producer_id_renumbers_only_batches_in_no_log() -> None:
    a = accumulator(batch_size=10, linger_ms=0)
    written, unwritten = put(a, T0, 10, 0), put(a, T1, 10, 1)
    for batch, sequence in ((written, 7), (unwritten, 3)):
        [drained] = a.drain(batch.tp, max_bytes=100)
        drained.producer_id, drained.producer_epoch, drained.base_sequence = 4001, 0, sequence
        drained.encoded = b"built"
        drained.attempts = 1
    written.maybe_written = True  # e.g. its answer was lost
    a.reenqueue([written, unwritten], retry_at_ms=0)
    a.renumber_unwritten()
    assert (written.producer_id, written.base_sequence, written.encoded) == (4001, 7, b"built")
    assert (unwritten.producer_id, unwritten.producer_epoch, unwritten.base_sequence,
            unwritten.encoded) == (-1, -1, -1, None)
    with pytest.raises(InvariantViolation, match="keeps its identity"):
        written.forget_identity()


def test_expired_and_abort() -> None:
    a = accumulator(batch_size=100, linger_ms=0)
    put(a, T0, 1, 0)
    put(a, T1, 1, 1, now_ms=50)
    assert [ids(b) for b in a.expired(100, delivery_timeout_ms=100)] == [[0]]
    assert a.has_queued()
    assert [ids(b) for b in a.abort_all()] == [[1]]
    assert not a.has_queued()


def test_estimate_counts_key_value_and_headers() -> None:
    r = rb.RecordInput(key=b"kk", value=b"vvv", headers=(rb.Header(key="h", value=b"12"),))
    assert acc.estimate_fields(r.key, r.value, r.headers) == acc.RECORD_OVERHEAD_BYTES + 2 + 3 + 1 + 10 + 2
    encoded = rb.build_batch([r])
    assert len(encoded) - bh.HEADER_SIZE <= acc.estimate_fields(r.key, r.value, r.headers)
