"""Producer and consumer against the in-process fake broker (tests/client/conftest.py):
batching into one request, retries that keep order, errors named for Kafka's codes,
acks=0, compression, seeks, offset resets and offset lookups."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import pytest

from kraftlog import client
from kraftlog.client import partitioner
from kraftlog.client import producer as producer_mod
from kraftlog.error_codes import ErrorCode
from kraftlog.storage import batch_header as bh

T0 = client.TopicPartition(topic="t", partition=0)
T1 = client.TopicPartition(topic="t", partition=1)


def producer_for(broker: Any, **overrides: Any) -> client.Producer:
    settings: dict[str, Any] = {"bootstrap_servers": (f"127.0.0.1:{broker.port}",),
                                "linger_ms": 20, "retry_backoff_ms": 10,
                                "request_timeout_ms": 2000, "delivery_timeout_ms": 10000,
                                "max_block_ms": 2000}
    settings.update(overrides)
    return client.Producer(client.ProducerConfig(**settings))


def consumer_for(broker: Any, **overrides: Any) -> client.Consumer:
    settings: dict[str, Any] = {"bootstrap_servers": (f"127.0.0.1:{broker.port}",),
                                "retry_backoff_ms": 10, "fetch_max_wait_ms": 50,
                                "default_api_timeout_ms": 2000}
    settings.update(overrides)
    return client.Consumer(client.ConsumerConfig(**settings))


def read(consumer: client.Consumer, count: int) -> list[client.ConsumerRecord]:
    out: list[client.ConsumerRecord] = []
    for _ in range(50):
        out += consumer.poll(timeout_ms=100)
        if len(out) >= count:
            break
    return out


def test_one_request_carries_every_partition_and_offsets_follow(fake_broker: Any) -> None:
    with producer_for(fake_broker, linger_ms=100) as producer:
        futures = [producer.send("t", f"v{i}".encode(), partition=i % 2) for i in range(20)]
        producer.flush(5000)
        metas = [f.result(timeout=1) for f in futures]
    assert len(fake_broker.produce_requests) == 1
    [request] = fake_broker.produce_requests
    assert request.acks == -1
    assert sorted(p.index for t in request.topic_data for p in t.partition_data) == [0, 1]
    assert [m.offset for m in metas if m.partition == 0] == list(range(10))
    assert [m.offset for m in metas if m.partition == 1] == list(range(10))


def test_keyed_records_use_kafkas_partition_and_null_keys_stick(fake_broker: Any) -> None:
    with producer_for(fake_broker) as producer:
        keyed = [producer.send("t", b"v", key=b"foobar") for _ in range(3)]
        unkeyed = [producer.send("t", b"v") for _ in range(5)]
        producer.flush(5000)
        expected = partitioner.partition_for_key(b"foobar", 2)
        assert {f.result().partition for f in keyed} == {expected}
        assert len({f.result().partition for f in unkeyed}) == 1
    with producer_for(fake_broker, batch_size=1000) as producer:
        # 100 x ~121 bytes is about 12 batch.size worth: the sticky partition moves.
        spread = [producer.send("t", b"v" * 100) for _ in range(100)]
        producer.flush(5000)
        partitions = [f.result().partition for f in spread]
        assert set(partitions) == {0, 1}
        switches = sum(1 for a, b in itertools.pairwise(partitions) if a != b)
        assert 5 <= switches <= 15


def test_retriable_errors_are_retried_in_order_with_a_metadata_refresh(fake_broker: Any) -> None:
    fake_broker.produce_errors[("t", 0)] = [ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                            ErrorCode.NOT_ENOUGH_REPLICAS]
    with producer_for(fake_broker, batch_size=100) as producer:
        futures = [producer.send("t", f"v{i}".encode(), partition=0) for i in range(10)]
        producer.flush(5000)
        assert [f.result().offset for f in futures] == list(range(10))
    assert len(fake_broker.produce_requests) >= 3
    assert fake_broker.metadata_requests >= 2
    with consumer_for(fake_broker) as consumer:
        consumer.assign([T0])
        consumer.seek_to_beginning()
        assert [r.value for r in read(consumer, 10)] == [f"v{i}".encode() for i in range(10)]


def test_errors_surface_with_the_brokers_error_name(fake_broker: Any) -> None:
    fake_broker.produce_errors[("t", 0)] = [ErrorCode.NOT_ENOUGH_REPLICAS] * 10
    fake_broker.produce_errors[("t", 1)] = [ErrorCode.MESSAGE_TOO_LARGE]
    with producer_for(fake_broker, retries=2) as producer:
        retried = producer.send("t", b"x", partition=0)
        fatal = producer.send("t", b"y", partition=1)
        with pytest.raises(client.KafkaApiError) as info:
            retried.result(timeout=5)
        assert info.value.code is ErrorCode.NOT_ENOUGH_REPLICAS and info.value.retriable
        assert str(info.value).startswith("NOT_ENOUGH_REPLICAS")
        with pytest.raises(client.KafkaApiError, match=r"^MESSAGE_TOO_LARGE") as info:
            fatal.result(timeout=5)
        assert not info.value.retriable
    assert len(fake_broker.produce_errors[("t", 0)]) == 7  # one try + retries=2
    assert fake_broker.produce_errors[("t", 1)] == []


def test_send_checks_before_queueing(fake_broker: Any) -> None:
    with producer_for(fake_broker, max_block_ms=1000, max_request_size=1000) as producer:
        with pytest.raises(client.UnknownTopicError, match="UNKNOWN_TOPIC_OR_PARTITION"):
            producer.send("missing", b"x")
        with pytest.raises(client.UnknownTopicError, match="partition 5"):
            producer.send("t", b"x", partition=5)
        with pytest.raises(client.KafkaApiError, match=r"^MESSAGE_TOO_LARGE"):
            producer.send("t", b"x" * 2000)
        with pytest.raises(ValueError, match="value must be bytes"):
            producer.send("t", "text")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="key must be bytes"):
            producer.send("t", b"x", key=7)  # type: ignore[arg-type]
        for stamp in (-1, 1 << 63, 1.5, "now"):
            with pytest.raises(ValueError, match="timestamp_ms must be a non-negative int64"):
                producer.send("t", b"x", timestamp_ms=stamp)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="header"):
            producer.send("t", b"x", headers=[(1, b"v")])  # type: ignore[list-item]
        # Nothing of the refused sends was queued; bytes-like values are copied.
        assert producer.send("t", bytearray(b"ok"), key=memoryview(b"k"),
                             partition=0).result(timeout=5).offset >= 0
    with pytest.raises(client.ClientClosedError):
        producer.send("t", b"x")


def test_acks_zero_and_compression_round_trip(fake_broker: Any) -> None:
    with producer_for(fake_broker, acks=client.Acks.NONE, compression_type="zstd") as producer:
        futures = [producer.send("t", f"z{i}".encode(), key=b"k", partition=1,
                                 headers=[("h", b"1")], timestamp_ms=1000 + i)
                   for i in range(5)]
        producer.flush(5000)
        assert {f.result().offset for f in futures} == {-1}
    assert fake_broker.produce_requests[0].acks == 0
    with consumer_for(fake_broker) as consumer:
        consumer.assign([T1])
        consumer.seek(T1, 2)
        records = read(consumer, 3)
        assert [(r.offset, r.value, r.timestamp_ms) for r in records] == [
            (2, b"z2", 1002), (3, b"z3", 1003), (4, b"z4", 1004)]
        assert records[0].headers == (client.Header(key="h", value=b"1"),)
        assert consumer.position(T1) == 5
        assert consumer.offsets_for_times({T1: 1003}) == {
            T1: client.OffsetAndTimestamp(offset=3, timestamp_ms=1003)}
        assert consumer.offsets_for_times({T1: 5000}) == {T1: None}


def test_out_of_range_resets_by_policy(fake_broker: Any) -> None:
    with producer_for(fake_broker) as producer:
        for i in range(4):
            producer.send("t", f"r{i}".encode(), partition=0)
    with consumer_for(fake_broker, auto_offset_reset="earliest") as consumer:
        consumer.assign([T0])
        consumer.seek(T0, 100)
        assert [r.offset for r in read(consumer, 4)] == [0, 1, 2, 3]
        assert consumer.end_offsets([T0]) == {T0: 4}
        assert consumer.beginning_offsets([T0]) == {T0: 0}
    with consumer_for(fake_broker, auto_offset_reset="latest") as consumer:
        consumer.assign([T0])
        consumer.seek(T0, 100)
        assert consumer.poll(timeout_ms=200) == []
        assert consumer.position(T0) == 4
    with consumer_for(fake_broker, auto_offset_reset="none") as consumer:
        consumer.assign([T0])
        consumer.seek(T0, 100)
        with pytest.raises(client.OffsetOutOfRangeError, match=r"^OFFSET_OUT_OF_RANGE"):
            consumer.poll(timeout_ms=500)
        with pytest.raises(ValueError, match="non-negative"):
            consumer.seek(T0, -1)
        with pytest.raises(ValueError, match="not assigned"):
            consumer.seek(T1, 0)


def test_consumer_polls_several_partitions_and_bounds_max_records(fake_broker: Any) -> None:
    with producer_for(fake_broker) as producer:
        for i in range(30):
            producer.send("t", f"m{i}".encode(), partition=i % 2)
    with consumer_for(fake_broker, auto_offset_reset="earliest") as consumer:
        assert consumer.assign_topic("t") == [T0, T1]
        first = consumer.poll(max_records=7, timeout_ms=1000)
        second = consumer.poll(max_records=7, timeout_ms=1000)
        # One Fetch answer filled both buffers; polls take turns between partitions.
        assert [r.partition for r in first] == [0] * 7
        assert [r.partition for r in second] == [1] * 7
        rest = read(consumer, 16)
        records = first + second + rest
        assert len(records) == 30
        for tp in (T0, T1):
            assert [r.offset for r in records if r.partition == tp.partition] == list(range(15))


def _fetches(broker: Any, settle_s: float = 0.3) -> int:
    time.sleep(settle_s)  # a Fetch sent at the end of poll() reaches the fake a moment later
    with broker.lock:
        return len(broker.fetch_requests)


def test_the_next_fetch_is_in_flight_while_one_answer_is_buffered(fake_broker: Any) -> None:
    with producer_for(fake_broker) as producer:
        for _batch in range(4):
            for i in range(20):
                producer.send("t", f"m{i}".encode(), partition=0)
            producer.flush()
    # One batch (20 records) per answer; max.poll.records 5.
    with consumer_for(fake_broker, auto_offset_reset="earliest", max_poll_records=5,
                      max_partition_fetch_bytes=1) as consumer:
        consumer.assign([T0])
        assert len(consumer.poll(timeout_ms=1000)) == 5
        # 15 records buffered, one answer's worth or less: the second Fetch went out
        # with the first poll instead of waiting for the buffer to drain.
        assert _fetches(fake_broker) == 2
        assert len(consumer.poll(timeout_ms=1000)) == 5
        # Now 30 are buffered (two answers): no third Fetch until one answer's worth is read.
        assert _fetches(fake_broker) == 2
        assert len(consumer.poll(max_records=10, timeout_ms=1000)) == 10
        assert _fetches(fake_broker) == 3
        records = read(consumer, 60)
        assert [r.offset for r in records] == list(range(20, 80))
        assert {(r.topic, r.partition) for r in records} == {("t", 0)}


def test_a_caught_up_partition_does_not_hold_up_the_others_on_its_broker(
        fake_broker: Any) -> None:
    with producer_for(fake_broker) as producer:
        for _batch in range(4):
            for i in range(20):
                producer.send("t", f"m{i}".encode(), partition=0)
            producer.flush()
    # Partition 1 stays empty: once it is read to its high watermark the broker holds its
    # Fetch for the whole fetch.max.wait.ms (5 s here). Partition 0's batches keep coming.
    fake_broker.empty_fetch_hold_ms = 5000
    with consumer_for(fake_broker, auto_offset_reset="earliest", max_poll_records=5,
                      max_partition_fetch_bytes=1, fetch_max_wait_ms=5000) as consumer:
        consumer.assign([T0, T1])
        started = time.monotonic()
        records: list[client.ConsumerRecord] = []
        while len(records) < 80 and time.monotonic() - started < 10:
            records += consumer.poll(max_records=5, timeout_ms=1000)
            time.sleep(0.02)  # the application's work: answers arrive while records wait
        took = time.monotonic() - started
    assert [r.offset for r in records] == list(range(80))
    assert took < 3.5, f"partition 0 waited behind partition 1's long-poll: {took:.1f} s"


def test_unknown_topic_for_the_consumer(fake_broker: Any) -> None:
    with consumer_for(fake_broker, default_api_timeout_ms=1000) as consumer, pytest.raises(
            client.UnknownTopicError, match="UNKNOWN_TOPIC_OR_PARTITION"):
        consumer.assign_topic("missing")


def test_unreachable_brokers_are_named() -> None:
    from tests.quorum_cluster import free_ports
    ports = free_ports(2)
    config = client.ConsumerConfig(bootstrap_servers=[f"127.0.0.1:{p}" for p in ports])
    with client.Consumer(config) as consumer, pytest.raises(
            client.BrokersUnavailableError) as info:
        consumer.assign_topic("t")
    for port in ports:
        assert f"127.0.0.1:{port} (UNAVAILABLE)" in str(info.value)


def test_leader_hint_updates_the_cache_only_when_newer(fake_broker: Any) -> None:
    from kraftlog.client import metadata_client as md
    from kraftlog.v1 import common_pb2

    channels = md.BrokerChannels()
    try:
        cache = md.MetadataCache((f"127.0.0.1:{fake_broker.port}",), channels)
        cache.topic("t", deadline=time.monotonic() + 2)
        assert cache.leader(T0) == md.Leader(broker_id=1, address=f"127.0.0.1:{fake_broker.port}",
                                             leader_epoch=0)
        hint = common_pb2.LeaderHint(leader_id=7, leader_epoch=3, endpoint=common_pb2.Endpoint(
            host="10.0.0.7", port=9092))
        assert cache.apply_leader_hint(T0, hint)
        assert cache.leader(T0) == md.Leader(broker_id=7, address="10.0.0.7:9092",
                                             leader_epoch=3)
        stale = common_pb2.LeaderHint(leader_id=1, leader_epoch=2, endpoint=common_pb2.Endpoint(
            host="127.0.0.1", port=fake_broker.port))
        assert not cache.apply_leader_hint(T0, stale)
        assert not cache.apply_leader_hint(T1, common_pb2.LeaderHint(leader_id=-1,
                                                                     leader_epoch=9))
        assert cache.leader(T1) is not None and cache.leader(T1).broker_id == 1  # type: ignore[union-attr]
    finally:
        channels.close()


def test_record_future_waits_resolves_and_runs_callbacks() -> None:
    cond = threading.Condition()
    batch = producer_mod._BatchResult(cond)
    ok = [producer_mod.RecordFuture(batch, 0, 123), producer_mod.RecordFuture(batch, 1, 124)]
    failed = producer_mod._BatchResult(cond)
    bad = producer_mod.RecordFuture(failed, 0, 125)
    assert not ok[1].done()
    with pytest.raises(client.ClientTimeoutError):
        ok[1].result(timeout=0.01)
    calls: list[str] = []
    ok[1].add_done_callback(lambda f: calls.append(f"before {f.result().offset}"))
    ok[0].add_done_callback(lambda f: calls.append(f"before {f.result().offset}"))
    ack = producer_mod._Acknowledged("t", 0, 5, -1)
    error = client.KafkaApiError(ErrorCode.NOT_ENOUGH_REPLICAS, "x")
    threading.Timer(0.05, producer_mod._resolve, args=(batch, ack, None)).start()
    threading.Timer(0.05, producer_mod._resolve, args=(failed, None, error)).start()
    # Record i of the batch: base offset + i, its own CreateTime.
    assert ok[1].result(timeout=5) == producer_mod.RecordMetadata("t", 0, 6, 124)
    assert ok[0].result() == producer_mod.RecordMetadata("t", 0, 5, 123)
    assert ok[1].exception() is None
    assert bad.exception(timeout=5) is error
    with pytest.raises(client.KafkaApiError, match="NOT_ENOUGH_REPLICAS"):
        bad.result()
    ok[1].add_done_callback(lambda f: calls.append("after"))
    assert calls == ["before 6", "before 5", "after"]
    producer_mod._resolve(batch, None, error)  # a done batch stays as it was
    assert ok[1].result() == producer_mod.RecordMetadata("t", 0, 6, 124)
    assert calls == ["before 6", "before 5", "after"]
    # LogAppendTime replaces every record's time; acks=0 knows no offset.
    appended = producer_mod._BatchResult(cond)
    later = [producer_mod.RecordFuture(appended, 0, 1), producer_mod.RecordFuture(appended, 1, 2)]
    producer_mod._resolve(appended, producer_mod._Acknowledged("t", 1, -1, 777), None)
    assert [f.result() for f in later] == [producer_mod.RecordMetadata("t", 1, -1, 777)] * 2


def _headers_of(broker: Any, key: tuple[str, int]) -> list[tuple[int, int, int, int]]:
    """(producer id, epoch, base sequence, record count) of each batch in the fake's log."""
    out = []
    for raw in broker.logs.get(key, []):
        h = bh.BatchHeader(raw)
        out.append((h.producer_id, h.producer_epoch, h.base_sequence, h.last_offset_delta + 1))
    return out


def test_idempotent_batches_carry_a_producer_id_and_sequences_per_partition(
        fake_broker: Any) -> None:
    fake_broker.init_producer_id_errors = [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS]
    fake_broker.produce_errors[("t", 0)] = [ErrorCode.NOT_ENOUGH_REPLICAS]
    with producer_for(fake_broker, batch_size=100) as producer:
        futures = [producer.send("t", f"v{i}".encode(), partition=i % 2) for i in range(12)]
        producer.flush(5000)
        assert all(f.exception() is None for f in futures)
    for key in (("t", 0), ("t", 1)):
        batches = _headers_of(fake_broker, key)
        assert {(pid, epoch) for pid, epoch, _, _ in batches} == {(4001, 0)}
        sequences = [seq for _, _, seq, _ in batches]
        counts = [n for _, _, _, n in batches]
        assert sequences == [sum(counts[:i]) for i in range(len(counts))], batches
    # One batch per partition in every request, retries included.
    for request in fake_broker.produce_requests:
        for topic in request.topic_data:
            for data in topic.partition_data:
                assert len(list(bh.iter_batches(data.records))) == 1


def test_a_lost_producer_state_renumbers_under_a_new_id(fake_broker: Any) -> None:
    fake_broker.produce_errors[("t", 0)] = [ErrorCode.NONE, ErrorCode.UNKNOWN_PRODUCER_ID]
    with producer_for(fake_broker, batch_size=10_000) as producer:
        first = producer.send("t", b"a", partition=0)
        producer.flush(5000)
        second = producer.send("t", b"b", partition=0)
        producer.flush(5000)
        assert first.result().offset == 0 and second.result().offset == 1
    assert _headers_of(fake_broker, ("t", 0)) == [(4001, 0, 0, 1), (4002, 0, 0, 1)]


def test_idempotence_is_off_without_acks_all(fake_broker: Any) -> None:
    with producer_for(fake_broker, acks=client.Acks.LEADER) as producer:
        producer.send("t", b"x", partition=0).result(timeout=5)
    assert _headers_of(fake_broker, ("t", 0)) == [(-1, -1, -1, 1)]
    assert fake_broker.next_producer_id == 4000  # never asked


def test_a_broker_without_init_producer_id_gets_plain_batches(fake_broker: Any) -> None:
    fake_broker.init_producer_id_unimplemented = True
    with producer_for(fake_broker) as producer:
        assert producer.send("t", b"x", partition=0).result(timeout=5).offset == 0
    assert _headers_of(fake_broker, ("t", 0)) == [(-1, -1, -1, 1)]


def test_the_adaptive_partitioner_reads_the_producers_queues(fake_broker: Any) -> None:
    with producer_for(fake_broker, linger_ms=60_000, delivery_timeout_ms=120_000) as producer:
        producer.send("t", b"x", partition=0)
        # Partition 0 holds a lingering batch, partition 1 nothing (nor is known yet).
        assert producer._queue_sizes("t", 2) == [1, 0]
        assert producer._queue_sizes("t", 3) == [1, 0, 0]
        producer.flush(10_000)
        assert producer._queue_sizes("t", 2) == [0, 0]
