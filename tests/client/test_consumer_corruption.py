"""A consumer meets batches that do not decode: it delivers every record
before the bad batch, then raises CorruptRecordBatchError naming the partition and
offset on the poll that reaches it, keeps its position there until a seek, and loses no
record of the other partitions (Kafka's CompletedFetch / FetchCollector).

The poisoned batches are written straight into the fake broker's log
(tests/client/conftest.py), which serves them as a broker that took them before the
leader validated batches (or whose disk flipped a bit) would.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from typing import Any

import crc32c
import pytest

from kraftlog import client
from kraftlog.error_codes import ErrorCode
from kraftlog.storage import batch_header as bh
from kraftlog.storage import record_batch as rb
from kraftlog.tools import cli

T0 = client.TopicPartition(topic="t", partition=0)
T1 = client.TopicPartition(topic="t", partition=1)


def good_batch(base_offset: int, count: int, *, prefix: str = "v") -> bytes:
    return rb.build_batch([rb.RecordInput(value=f"{prefix}{base_offset + i}".encode(),
                                          timestamp_ms=1000 + base_offset + i)
                           for i in range(count)], base_offset=base_offset,
                          partition_leader_epoch=0)


def _reseal(batch: bytearray) -> bytes:
    crc = crc32c.crc32c(bytes(batch[bh.ATTRIBUTES_OFFSET:]))
    struct.pack_into(">I", batch, bh.CRC_OFFSET, crc)
    return bytes(batch)


def garbage_records(base_offset: int, count: int) -> bytes:
    """CRC-valid, but the records section is not records."""
    batch = bytearray(good_batch(base_offset, count))
    size = len(batch) - bh.RECORDS_OFFSET
    batch[bh.RECORDS_OFFSET:] = (b"\xff\x13garbage" * size)[:size]
    return _reseal(batch)


def false_lz4(base_offset: int, count: int) -> bytes:
    """CRC-valid, flagged lz4, but the payload is plain records."""
    batch = bytearray(good_batch(base_offset, count))
    attributes = struct.unpack_from(">h", batch, bh.ATTRIBUTES_OFFSET)[0]
    struct.pack_into(">h", batch, bh.ATTRIBUTES_OFFSET,
                     (attributes & ~bh.COMPRESSION_CODEC_MASK) | int(rb.CompressionType.LZ4))
    return _reseal(batch)


def bit_flip(base_offset: int, count: int) -> bytes:
    """A byte of the records flipped after the CRC was computed."""
    batch = bytearray(good_batch(base_offset, count))
    batch[-3] ^= 0x40
    return bytes(batch)


KINDS: dict[str, Callable[[int, int], bytes]] = {"garbage_records": garbage_records, "false_lz4": false_lz4, "bit_flip": bit_flip}


def consumer_for(broker: Any, **overrides: Any) -> client.Consumer:
    settings: dict[str, Any] = {"bootstrap_servers": (f"127.0.0.1:{broker.port}",),
                                "retry_backoff_ms": 10, "fetch_max_wait_ms": 50,
                                "default_api_timeout_ms": 2000, "auto_offset_reset": "earliest"}
    settings.update(overrides)
    return client.Consumer(client.ConsumerConfig(**settings))


def poll_until_error(consumer: client.Consumer, polls: int = 40
                     ) -> tuple[list[client.ConsumerRecord], client.CorruptRecordBatchError]:
    got: list[client.ConsumerRecord] = []
    for _ in range(polls):
        try:
            got += consumer.poll(timeout_ms=100)
        except client.CorruptRecordBatchError as exc:
            return got, exc
    raise AssertionError(f"no CorruptRecordBatchError after {polls} polls; got {len(got)} records")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_records_before_a_bad_batch_come_then_the_error_names_partition_and_offset(
        fake_broker: Any, kind: str) -> None:
    fake_broker.logs[("t", 0)] = [good_batch(0, 5), KINDS[kind](5, 3), good_batch(8, 2)]
    with consumer_for(fake_broker) as consumer:
        consumer.assign([T0])
        got, error = poll_until_error(consumer)
        assert [r.offset for r in got] == [0, 1, 2, 3, 4]
        assert error.code is ErrorCode.CORRUPT_MESSAGE and not error.retriable
        assert (error.topic_partition, error.offset, error.next_offset) == (T0, 5, 8)
        assert str(error).startswith("CORRUPT_MESSAGE") and "t-0 at offset 5" in str(error)
        # The position stays at the bad batch, and every poll says so again.
        assert consumer.position(T0) == 5
        with pytest.raises(client.CorruptRecordBatchError, match="t-0 at offset 5"):
            consumer.poll(timeout_ms=100)
        consumer.seek(T0, error.next_offset)
        rest = []
        for _ in range(20):
            rest += consumer.poll(timeout_ms=100)
            if len(rest) >= 2:
                break
        assert [r.value for r in rest] == [b"v8", b"v9"]
        assert consumer.position(T0) == 10


def test_a_seek_inside_the_bad_batch_stops_at_that_offset(fake_broker: Any) -> None:
    fake_broker.logs[("t", 0)] = [good_batch(0, 2), garbage_records(2, 4), good_batch(6, 1)]
    with consumer_for(fake_broker) as consumer:
        consumer.assign([T0])
        consumer.seek(T0, 3)
        got, error = poll_until_error(consumer)
        assert got == []
        assert (error.offset, error.next_offset) == (3, 6)
        # offset + 1 lies in the same undecodable batch: still stopped, at that offset.
        consumer.seek(T0, 4)
        _got, again = poll_until_error(consumer)
        assert (again.offset, again.next_offset) == (4, 6)


def test_a_one_record_bad_batch_is_skipped_by_seeking_to_offset_plus_one(
        fake_broker: Any) -> None:
    fake_broker.logs[("t", 0)] = [good_batch(0, 669), garbage_records(669, 1),
                                  false_lz4(670, 1), good_batch(671, 3)]
    with consumer_for(fake_broker, max_poll_records=100) as consumer:
        consumer.assign([T0])
        got, error = poll_until_error(consumer)
        assert [r.offset for r in got] == list(range(669))
        assert error.offset == 669
        consumer.seek(T0, error.offset + 1)
        _none, second = poll_until_error(consumer)
        assert (second.offset, second.next_offset) == (670, 671)
        consumer.seek(T0, second.offset + 1)
        rest: list[client.ConsumerRecord] = []
        for _ in range(20):
            rest += consumer.poll(timeout_ms=100)
            if len(rest) >= 3:
                break
        assert [r.offset for r in rest] == [671, 672, 673]


def test_other_partitions_keep_their_records(fake_broker: Any) -> None:
    fake_broker.logs[("t", 0)] = [bit_flip(0, 2), good_batch(2, 2)]
    fake_broker.logs[("t", 1)] = [good_batch(0, 3, prefix="p1-"), good_batch(3, 3, prefix="p1-")]
    with consumer_for(fake_broker, max_partition_fetch_bytes=1) as consumer:
        consumer.assign([T0, T1])
        got: list[client.ConsumerRecord] = []
        errors: list[client.CorruptRecordBatchError] = []
        deadline = time.monotonic() + 5
        # A poll that reaches the stopped partition raises at once: the loop is bounded by
        # time, as the other partition's answers take a round trip to come.
        while time.monotonic() < deadline:
            try:
                got += consumer.poll(timeout_ms=100)
            except client.CorruptRecordBatchError as exc:
                errors.append(exc)
                time.sleep(0.01)
            if len([r for r in got if r.partition == 1]) >= 6 and errors:
                break
        assert [r.offset for r in got if r.partition == 1] == list(range(6))
        assert [r for r in got if r.partition == 0] == []
        assert errors and {(e.topic_partition, e.offset) for e in errors} == {(T0, 0)}
        assert consumer.position(T0) == 0 and consumer.position(T1) == 6


def test_a_header_too_damaged_to_name_its_end_still_names_the_offset(fake_broker: Any) -> None:
    bad = bytearray(good_batch(3, 2))
    bad[bh.MAGIC_OFFSET] = 7  # not a v2 batch: its other header fields mean nothing
    fake_broker.logs[("t", 0)] = [good_batch(0, 3), bytes(bad)]
    with consumer_for(fake_broker) as consumer:
        consumer.assign([T0])
        got, error = poll_until_error(consumer)
        assert [r.offset for r in got] == [0, 1, 2]
        assert (error.offset, error.next_offset) == (3, None)
        assert "seek past the batch" in str(error)


def test_the_console_consumer_prints_the_good_records_then_one_error_line(
        capsys: pytest.CaptureFixture[str], fake_broker: Any) -> None:
    fake_broker.logs[("t", 0)] = [good_batch(0, 3), garbage_records(3, 1), false_lz4(4, 1),
                                  good_batch(5, 1)]
    server = f"127.0.0.1:{fake_broker.port}"
    code = cli.main(["consume", "--bootstrap-server", server, "--topic", "t",
                     "--from-beginning", "--timeout-ms", "3000"])
    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == "v0\nv1\nv2\n"
    processed, error = captured.err.strip().splitlines()
    assert processed == "Processed a total of 3 messages"
    assert error.startswith("kraftlog: error: CORRUPT_MESSAGE") and "t-0 at offset 3" in error
    assert "seek to offset 4" in error
    # The operator's way past it: warn per bad batch and go on.
    code = cli.main(["consume", "--bootstrap-server", server, "--topic", "t",
                     "--from-beginning", "--skip-corrupt", "--max-messages", "4",
                     "--timeout-ms", "3000"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out == "v0\nv1\nv2\nv5\n"
    warnings = [line for line in captured.err.splitlines() if "warning" in line]
    assert [("offset 3" in w, "offset 4:" in w) for w in warnings] == [(True, False),
                                                                      (False, True)]


def test_a_length_field_past_the_answer_is_corruption_not_a_stall(fake_broker: Any) -> None:
    bad = bytearray(good_batch(2, 2))
    struct.pack_into(">i", bad, bh.LENGTH_OFFSET, 1 << 30)  # a flipped high bit of the length
    fake_broker.logs[("t", 0)] = [good_batch(0, 2), bytes(bad)]
    with consumer_for(fake_broker) as consumer:
        consumer.assign([T0])
        got, error = poll_until_error(consumer)
        assert [r.offset for r in got] == [0, 1]
        assert (error.offset, error.next_offset) == (2, None)
        assert "its length is corrupt" in str(error)
