"""``max.in.flight.requests.per.connection``: pipelined Produce requests per partition,
against the in-process fake broker (tests/client/conftest.py), which checks
idempotent sequences as a Kafka broker does.

A partition may have up to N requests unanswered; a retried batch is resent before
every batch created after it, with its sequence; a sequence error behind an
unwritten batch is a retry, not a new producer id; a lost answer is deduplicated.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from kraftlog import client
from kraftlog.client import accumulator as acc
from kraftlog.error_codes import ErrorCode
from kraftlog.errors import ConfigError
from kraftlog.storage import batch_header as bh
from kraftlog.storage import record_batch as rb

T0 = client.TopicPartition(topic="t", partition=0)


def producer_for(broker: Any, **overrides: Any) -> client.Producer:
    settings: dict[str, Any] = {"bootstrap_servers": (f"127.0.0.1:{broker.port}",),
                                "linger_ms": 0, "retry_backoff_ms": 10, "batch_size": 100,
                                "request_timeout_ms": 5000, "delivery_timeout_ms": 20000,
                                "max_block_ms": 2000}
    settings.update(overrides)
    return client.Producer(client.ProducerConfig(**settings))


def log_of(broker: Any, key: tuple[str, int] = ("t", 0)) -> list[tuple[int, int, int, list[bytes]]]:
    """(producer id, base sequence, base offset, values) of each stored batch."""
    out = []
    for raw in broker.logs.get(key, []):
        [batch] = rb.decode_batches(raw)
        out.append((batch.producer_id, batch.base_sequence, batch.base_offset,
                    [r.value for r in batch.records]))
    return out


def send_all(producer: client.Producer, count: int) -> list[client.RecordFuture]:
    futures = [producer.send("t", b"%04d" % i + b"x" * 40, partition=0) for i in range(count)]
    producer.flush(15000)
    return futures


def assert_written_once_in_order(broker: Any, futures: list[client.RecordFuture], count: int) -> None:
    offsets = [f.result(timeout=1).offset for f in futures]
    assert offsets == list(range(count))
    log = log_of(broker)
    values = [v for _pid, _seq, _off, batch_values in log for v in batch_values]
    assert values == [b"%04d" % i + b"x" * 40 for i in range(count)]
    sequences = [seq for _pid, seq, _off, _v in log]
    sizes = [len(v) for _pid, _seq, _off, v in log]
    assert sequences == [sum(sizes[:i]) for i in range(len(sizes))]


@pytest.mark.parametrize("window", [1, 3, 5])
def test_a_partition_has_at_most_max_in_flight_requests(fake_broker: Any, window: int) -> None:
    fake_broker.produce_delays[("t", 0)] = [0.05] * 30
    with producer_for(fake_broker, max_in_flight_requests_per_connection=window) as producer:
        futures = send_all(producer, 40)  # one record per 100-byte batch
    assert fake_broker.produce_most == window
    assert_written_once_in_order(fake_broker, futures, 40)
    for request in fake_broker.produce_requests:  # idempotent: one batch per partition
        assert len(list(bh.iter_batches(request.topic_data[0].partition_data[0].records))) == 1


REFUSALS = {ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID}


def test_a_failed_batch_is_resent_before_the_later_ones_with_its_sequence(fake_broker: Any) -> None:
    # The second batch is slow and fails (nothing written); the ones sent behind it reach
    # the broker first and are refused as out of order; all are resent, oldest first,
    # numbered as before.
    fake_broker.by_sequence[1] = [(0.2, ErrorCode.NOT_ENOUGH_REPLICAS)]
    with producer_for(fake_broker) as producer:
        futures = send_all(producer, 30)
    assert_written_once_in_order(fake_broker, futures, 30)
    assert {pid for pid, _seq, _off, _v in log_of(fake_broker)} == {4001}  # no new producer id
    assert ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER in fake_broker.answered_codes


def test_requests_that_overtake_a_new_producers_first_batch_are_retried(fake_broker: Any) -> None:
    # The first batch of a new producer id is slow: the next ones arrive first, and the
    # broker does not know the producer yet (UNKNOWN_PRODUCER_ID). Not a lost state.
    fake_broker.by_sequence[0] = [(0.2, ErrorCode.NONE)]
    with producer_for(fake_broker) as producer:
        futures = send_all(producer, 20)
    assert_written_once_in_order(fake_broker, futures, 20)
    assert ErrorCode.UNKNOWN_PRODUCER_ID in fake_broker.answered_codes
    assert fake_broker.next_producer_id == 4001


def test_requests_handled_in_any_order_are_written_in_order(fake_broker: Any) -> None:
    # Every request waits a little: the fake's threads handle them in any order.
    fake_broker.produce_delays[("t", 0)] = [0.01, 0.03, 0.0, 0.02, 0.04] * 10
    with producer_for(fake_broker) as producer:
        futures = send_all(producer, 50)
    assert_written_once_in_order(fake_broker, futures, 50)
    assert fake_broker.next_producer_id == 4001


def test_requests_are_pipelined_on_one_produce_stream(fake_broker: Any) -> None:
    # Five requests in flight per partition, all on one stream with correlation ids.
    fake_broker.produce_delays[("t", 0)] = [0.02] * 50
    with producer_for(fake_broker) as producer:
        futures = send_all(producer, 50)
    assert_written_once_in_order(fake_broker, futures, 50)
    assert fake_broker.produce_streams == 1
    assert fake_broker.stream_requests == len(fake_broker.produce_requests) >= 10
    assert fake_broker.produce_most > 1


def test_a_broker_without_produce_stream_gets_unary_produce(fake_broker: Any) -> None:
    fake_broker.stream_produce = False
    with producer_for(fake_broker) as producer:
        futures = send_all(producer, 20)
    assert_written_once_in_order(fake_broker, futures, 20)
    assert fake_broker.stream_requests == 0 and len(fake_broker.produce_requests) >= 4


def test_a_broken_stream_resends_its_batches_with_their_identity(fake_broker: Any) -> None:
    # The stream breaks after its third request was written but not answered: every
    # request on it is resent on a new stream with the same producer id and sequences,
    # and the written one is answered as a duplicate with its original offset.
    fake_broker.produce_delays[("t", 0)] = [0.05, 0.05, 0.05]
    fake_broker.break_stream_after = 3
    with producer_for(fake_broker) as producer:
        futures = send_all(producer, 30)
    assert_written_once_in_order(fake_broker, futures, 30)
    assert fake_broker.produce_streams == 2
    assert fake_broker.duplicates >= 1
    assert fake_broker.next_producer_id == 4001  # no new identity


def test_a_lost_answer_is_resent_and_answered_with_the_original_offset(fake_broker: Any) -> None:
    # Batch 1 is written but its answer is lost (REQUEST_TIMED_OUT after the append); the
    # next 4 batches are written meanwhile (a full window of 5), and the retry of batch 1
    # is still among the broker's last 5: recognised as a duplicate.
    fake_broker.by_sequence[1] = [(0.2, None)]
    with producer_for(fake_broker) as producer:
        futures = send_all(producer, 30)
    assert_written_once_in_order(fake_broker, futures, 30)
    assert fake_broker.duplicates == 1
    assert ErrorCode.REQUEST_TIMED_OUT in fake_broker.answered_codes


def test_a_retry_waits_for_the_window_even_when_it_comes_back_mid_round(
        fake_broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # The sender releases its lock between asking what is ready and draining it (for
    # metadata); an answer that puts a retry at the head meanwhile must not send it
    # behind the requests still in flight: if its answer is lost again, newer batches
    # would have pushed it out of the broker's last 5, and the producer would take a
    # new id and write it twice. Slow metadata checks widen that gap.
    fake_broker.by_sequence[1] = [(0.05, None), (0.05, None), (0.05, None)]
    with producer_for(fake_broker) as producer:
        refresh = producer.metadata.maybe_refresh

        def slow_refresh(**kwargs: Any) -> Any:
            time.sleep(0.01)
            return refresh(**kwargs)

        monkeypatch.setattr(producer.metadata, "maybe_refresh", slow_refresh)
        futures = send_all(producer, 60)
    assert_written_once_in_order(fake_broker, futures, 60)
    assert fake_broker.duplicates == 3
    assert fake_broker.next_producer_id == 4001


def test_a_sequence_error_at_the_oldest_unwritten_batch_takes_a_new_producer_id(
        fake_broker: Any) -> None:
    fake_broker.produce_errors[("t", 0)] = [ErrorCode.NONE, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER]
    with producer_for(fake_broker, batch_size=10_000) as producer:
        first = producer.send("t", b"a", partition=0)
        producer.flush(5000)
        second = producer.send("t", b"b", partition=0)
        producer.flush(5000)
    assert (first.result().offset, second.result().offset) == (0, 1)
    assert [(pid, seq) for pid, seq, _o, _v in log_of(fake_broker)] == [(4001, 0), (4002, 0)]


def test_max_in_flight_config_is_checked() -> None:
    servers = ("127.0.0.1:1",)
    with pytest.raises(ConfigError, match=r"max.in.flight.requests.per.connection=6 must be at most 5 "
                                          r"with enable.idempotence=true"):
        client.ProducerConfig(bootstrap_servers=servers, max_in_flight_requests_per_connection=6)
    with pytest.raises(ConfigError, match=r"max.in.flight.requests.per.connection=0 must be an integer >= 1"):
        client.ProducerConfig(bootstrap_servers=servers, max_in_flight_requests_per_connection=0)
    assert client.ProducerConfig(bootstrap_servers=servers).max_in_flight_requests_per_connection == 5
    # Without idempotence (turned off, or acks other than all) more is allowed, as in Kafka.
    assert client.ProducerConfig(bootstrap_servers=servers, enable_idempotence=False,
                                 max_in_flight_requests_per_connection=10)
    assert client.ProducerConfig(bootstrap_servers=servers, acks=client.Acks.LEADER,
                                 max_in_flight_requests_per_connection=10)
    parsed = client.ProducerConfig.from_properties({
        "bootstrap.servers": "127.0.0.1:1", "max.in.flight.requests.per.connection": "2"})
    assert parsed.max_in_flight_requests_per_connection == 2
    with pytest.raises(ConfigError, match="not an integer"):
        client.ProducerConfig.from_properties({
            "bootstrap.servers": "127.0.0.1:1", "max.in.flight.requests.per.connection": "many"})


def test_accumulator_resends_in_creation_order() -> None:
    results = iter(range(100))
    a: acc.RecordAccumulator[int] = acc.RecordAccumulator(
        batch_size=10, linger_ms=0, new_result=lambda: next(results))
    for i in range(4):
        a.append(T0, None, b"x" * 20, (), i, now_ms=0)
    first, second, third = (a.drain(T0, 10_000, max_batches=1) for _ in range(3))
    for batch in (*first, *second, *third):
        batch.attempts = 1
    # Answers come back out of order; the queue keeps creation order.
    a.reenqueue(third, retry_at_ms=0)
    a.reenqueue(first, retry_at_ms=0)
    a.reenqueue(second, retry_at_ms=0)
    assert [b.result for b in a._queues[T0]] == [0, 1, 2, 3]
    assert a.first(T0) is first[0]
    assert a.ready(0, flushing=False, muted=[T0]) == ([], None)
    assert a.ready(0, flushing=False) == ([T0], None)


# -- exactly once across a producer-id reset -----------------------------------------------------
#
# A batch that may already be in the log (an attempt ended without a definite refusal:
# a lost answer, NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT, a transport error)
# keeps its producer id, epoch and sequence until a broker resolves it, or it fails to
# the application. Only a batch every attempt of which was refused before the append
# may be renumbered under a new producer id (Kafka: TransactionManager's unresolved
# sequences; KIP-360).


def values_in(broker: Any, key: tuple[str, int]) -> list[bytes]:
    return [v for _pid, _seq, _off, values in log_of(broker, key) for v in values]


def test_a_reset_never_renumbers_a_batch_whose_answer_was_lost(fake_broker: Any) -> None:
    # One request carries both partitions: t-1's batch is written but its answer lost,
    # t-0's is refused as out of order at the head of its partition (the broker lost
    # the producer's state), so the producer takes a new id. t-1's batch must be resent
    # under its old identity (answered as a duplicate), not written again under the new.
    with producer_for(fake_broker, batch_size=10_000, linger_ms=50) as producer:
        producer.send("t", b"b0", partition=1).result(timeout=5)
        fake_broker.by_sequence[1] = [(0.0, None)]  # t-1's next batch: written, answer lost
        fake_broker.produce_errors[("t", 0)] = [ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER]
        a = producer.send("t", b"a", partition=0)
        b1 = producer.send("t", b"b1", partition=1)
        producer.flush(10_000)
        assert b1.result(timeout=1).offset == 1
        assert a.result(timeout=1).offset == 0
    assert values_in(fake_broker, ("t", 1)) == [b"b0", b"b1"]
    assert [(pid, seq) for pid, seq, _o, _v in log_of(fake_broker, ("t", 1))] == [(4001, 0),
                                                                                 (4001, 1)]
    assert [(pid, seq) for pid, seq, _o, _v in log_of(fake_broker, ("t", 0))] == [(4002, 0)]
    assert fake_broker.duplicates == 1


def test_expiry_then_a_reset_writes_nothing_twice(fake_broker: Any) -> None:
    # As seen under faults: a batch expires (delivery.timeout.ms) unwritten and leaves a
    # gap in its partition's sequence; the next batch there is refused as out of order
    # at the head of its partition and the producer takes a new id, while another
    # partition's batch is appended with its answer withheld, again and again. No value
    # may be in the log twice, and each acknowledgement names where its value is.
    with producer_for(fake_broker, batch_size=10_000, linger_ms=0, retry_backoff_ms=50,
                      request_timeout_ms=1000, delivery_timeout_ms=1500) as producer:
        producer.send("t", b"p1-0", partition=1).result(timeout=5)
        producer.send("t", b"p0-0", partition=0).result(timeout=5)
        fake_broker.produce_errors[("t", 0)] = [ErrorCode.NOT_ENOUGH_REPLICAS] * 1000
        doomed = producer.send("t", b"p0-1", partition=0)  # seq 1 of t-0, never written
        time.sleep(0.8)
        # t-1's seq 1: written, and its answer lost after 0.3 s, five times over.
        fake_broker.by_sequence[1] = [(0.3, None)] * 5
        held = producer.send("t", b"p1-1", partition=1)
        assert doomed.exception(timeout=5) is not None  # out of time: delivery.timeout.ms
        fake_broker.produce_errors[("t", 0)] = []
        after = producer.send("t", b"p0-2", partition=0)  # seq 2: the gap; a new id
        after.exception(timeout=5)
        held.exception(timeout=5)
        producer.flush(10_000)
    assert fake_broker.next_producer_id == 4002  # the reset happened while t-1 waited
    for key in (("t", 0), ("t", 1)):
        values = values_in(fake_broker, key)
        assert len(values) == len(set(values)), (key, log_of(fake_broker, key))
    for future, value in ((after, b"p0-2"), (held, b"p1-1")):
        if future.exception(timeout=0) is None:
            meta = future.result(timeout=0)
            assert values_in(fake_broker, ("t", meta.partition))[meta.offset] == value


def test_a_batch_that_may_be_written_fails_rather_than_take_a_new_identity(
        fake_broker: Any) -> None:
    # t-0's seq 1 is written but its answer lost; the broker then forgets the producer
    # (UNKNOWN_PRODUCER_ID for the resend at the head of the partition). Renumbering
    # it would write it twice: it fails to the application instead, and the next
    # record goes out under a new producer id.
    with producer_for(fake_broker, batch_size=10_000) as producer:
        producer.send("t", b"x0", partition=0).result(timeout=5)
        fake_broker.by_sequence[1] = [(0.0, None), (0.0, ErrorCode.UNKNOWN_PRODUCER_ID)]
        maybe = producer.send("t", b"x1", partition=0)
        error = maybe.exception(timeout=5)
        assert isinstance(error, client.KafkaApiError)
        assert error.code is ErrorCode.UNKNOWN_PRODUCER_ID
        assert "may already be written" in str(error)
        producer.send("t", b"x2", partition=0).result(timeout=5)
    assert values_in(fake_broker, ("t", 0)) == [b"x0", b"x1", b"x2"]
    assert [(pid, seq) for pid, seq, _o, _v in log_of(fake_broker)] == [
        (4001, 0), (4001, 1), (4002, 0)]
