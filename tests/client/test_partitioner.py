"""murmur2 and the default partitioner match Kafka bit for bit; the sticky partitioner moves on."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftlog.client import partitioner

# org.apache.kafka.common.utils.UtilsTest#testMurmur2
KAFKA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("data", "expected"), sorted(KAFKA_MURMUR2.items()))
def test_murmur2_matches_kafka(data: bytes, expected: int) -> None:
    assert partitioner.murmur2(data) == expected


def test_partition_for_key_is_to_positive_mod() -> None:
    # toPositive clears the sign bit: -973932308 & 0x7fffffff = 1173551340.
    assert partitioner.to_positive(-973932308) == 1173551340
    assert partitioner.partition_for_key(b"21", 3) == 1173551340 % 3
    assert partitioner.partition_for_key(b"foobar", 7) == (-790332482 & 0x7FFFFFFF) % 7
    assert partitioner.to_positive(-(2**31)) == 0  # abs() would overflow in Java


def test_partition_for_key_rejects_no_partitions() -> None:
    with pytest.raises(ValueError, match="num_partitions"):
        partitioner.partition_for_key(b"k", 0)


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=1000))
def test_partition_in_range_and_int32(data: bytes, count: int) -> None:
    value = partitioner.murmur2(data)
    assert -(2**31) <= value < 2**31
    assert 0 <= partitioner.partition_for_key(data, count) < count


def test_sticky_partitioner_moves_after_batch_size_bytes() -> None:
    sticky = partitioner.StickyPartitioner(random.Random(7), batch_size=100)
    first = sticky.partition("t", 4)
    for _ in range(9):
        sticky.on_append("t", 4, first, 10)
        assert sticky.partition("t", 4) == first  # 90 bytes < batch.size
    sticky.on_append("t", 4, first, 10)
    second = sticky.partition("t", 4)
    assert second != first and 0 <= second < 4
    # Appends to another partition (explicit or keyed) do not count.
    sticky.on_append("t", 4, first, 1000)
    assert sticky.partition("t", 4) == second
    sticky.on_append("one", 1, sticky.partition("one", 1), 1000)
    assert sticky.partition("one", 1) == 0
    seen = set()
    for _ in range(50):
        current = sticky.partition("t", 4)
        seen.add(current)
        sticky.on_append("t", 4, current, 100)
    assert seen == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="batch_size"):
        partitioner.StickyPartitioner(random.Random(), batch_size=0)


@given(sizes=st.lists(st.integers(min_value=1, max_value=150), max_size=60),
       count=st.integers(min_value=1, max_value=5), seed=st.integers(0, 1000))
def test_take_is_partition_then_on_append(sizes: list[int], count: int, seed: int) -> None:
    one_call = partitioner.StickyPartitioner(random.Random(seed), batch_size=100,
                                             queue_sizes=lambda t, n: list(range(n)))
    two_calls = partitioner.StickyPartitioner(random.Random(seed), batch_size=100,
                                              queue_sizes=lambda t, n: list(range(n)))
    for size in sizes:
        expected = two_calls.partition("t", count)
        two_calls.on_append("t", count, expected, size)
        assert one_call.take("t", count, size) == expected
    assert one_call.partition("t", count) == two_calls.partition("t", count)


def test_adaptive_sticky_partitioner_favours_short_queues() -> None:
    queued = {"t": [0, 10, 10, 10]}
    asked: list[tuple[str, int]] = []

    def queue_sizes(topic: str, count: int) -> list[int]:
        asked.append((topic, count))
        return queued[topic]

    sticky = partitioner.StickyPartitioner(random.Random(3), batch_size=100,
                                           queue_sizes=queue_sizes)
    picks = []
    for _ in range(400):
        current = sticky.partition("t", 4)
        sticky.on_append("t", 4, current, 100)  # batch.size reached: switch
        picks.append(sticky.partition("t", 4))
        assert picks[-1] != current
    assert asked and set(asked) == {("t", 4)}  # asked only when switching
    assert len(asked) == 400
    # Weights max + 1 - queued among the other partitions: from 1, 2 or 3 partition 0 has
    # 11 of 13; from 0 the others are equal (uniform).
    from_loaded = [p for prev, p in itertools.pairwise(picks) if prev != 0]
    assert from_loaded.count(0) / len(from_loaded) > 0.75
    # Equal queues: uniform, every partition reached.
    queued["t"] = [5, 5, 5, 5]
    seen = set()
    for _ in range(60):
        current = sticky.partition("t", 4)
        sticky.on_append("t", 4, current, 100)
        seen.add(sticky.partition("t", 4))
    assert seen == {0, 1, 2, 3}


def test_producer_config_names_the_adaptive_switch() -> None:
    from kraftlog import client
    config = client.ProducerConfig.from_properties({
        "bootstrap.servers": "127.0.0.1:1", "partitioner.adaptive.partitioning.enable": "false"})
    assert config.partitioner_adaptive_partitioning_enable is False
    assert client.ProducerConfig(bootstrap_servers=("h:1",)).partitioner_adaptive_partitioning_enable
