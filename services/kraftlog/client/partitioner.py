"""Which partition a record goes to: Kafka's murmur2 for keyed records, sticky for the rest.

Owns :func:`murmur2` (``org.apache.kafka.common.utils.Utils.murmur2``, seed
0x9747b28c, bit for bit), :func:`partition_for_key` (``toPositive(murmur2(key)) %
numPartitions``, the ``BuiltInPartitioner`` rule, so a key lands on the same
partition as with a Java producer), and :class:`StickyPartitioner` for records
without a key (KIP-794: stay on one partition for ``batch.size`` bytes, then
move, so null-key records still form full batches).

Called by :mod:`kraftlog.client.producer`. Pure: randomness is an injected
``random.Random``; no I/O, no clock.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 of ``data`` as a signed int32 (what Java returns)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    whole = length - (length & 3)
    for i in range(0, whole, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k
    rest = length & 3
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(value: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``: abs(MIN_INT) overflows)."""
    return value & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null ``key``."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions


QueueSizes = Callable[[str, int], Sequence[int]]
"""``(topic, partition count) -> batches queued (not yet sent) per partition``."""


class StickyPartitioner:
    """Null-key records: one partition per topic until ``batch.size`` bytes went to it.

    The rule of Kafka's built-in partitioner (KIP-794, which replaced KIP-480's
    "switch on a new batch"): records without a key stick to one partition so they
    form full batches, and after ``batch_size`` bytes the next partition is picked
    at random among the others. ``partition(topic, n)`` gives the current one; the
    producer reports each append with :meth:`on_append`.

    Adaptive partitioning (KIP-794's ``partitioner.adaptive.partitioning.enable``): with
    ``queue_sizes``, the next partition is drawn with weight ``max + 1 - queued`` (batches
    waiting in the producer per partition), as Kafka's ``BuiltInPartitioner`` does, so
    partitions whose leaders keep up get more of the records and a backlog does not pile
    up on one partition while the others idle. Equal queues: uniform.
    """

    def __init__(self, rng: random.Random, *, batch_size: int,
                 queue_sizes: QueueSizes | None = None) -> None:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self._rng = rng
        self._batch_size = batch_size
        self._queue_sizes = queue_sizes
        self._current: dict[str, int] = {}
        self._produced: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int) -> int:
        current = self._current.get(topic)
        if current is None or current >= num_partitions:
            current = self._rng.randrange(num_partitions)
            self._current[topic] = current
            self._produced[topic] = 0
        return current

    def take(self, topic: str, num_partitions: int, size: int) -> int:
        """:meth:`partition`, then :meth:`on_append` of ``size`` bytes to it, in one call
        (the producer's: once per record without a key or partition)."""
        current = self._current.get(topic)
        if current is None or current >= num_partitions:
            current = self.partition(topic, num_partitions)
        produced = self._produced.get(topic, 0) + size
        if produced < self._batch_size:
            self._produced[topic] = produced
        else:
            self._produced[topic] = 0
            self._current[topic] = (0 if num_partitions <= 1
                                    else self._next(topic, num_partitions, current))
        return current

    def on_append(self, topic: str, num_partitions: int, partition: int, size: int) -> None:
        """``size`` bytes went to ``partition``; move on once the sticky one got batch.size."""
        if self._current.get(topic) == partition:
            self.take(topic, num_partitions, size)

    def _next(self, topic: str, num_partitions: int, current: int) -> int:
        """A partition other than ``current``: weighted by queue sizes when known and
        unequal, else uniform."""
        others = [p for p in range(num_partitions) if p != current]
        sizes = self._queue_sizes(topic, num_partitions) if self._queue_sizes else None
        if sizes is not None and len(sizes) == num_partitions:
            queued = [sizes[p] for p in others]
            if min(queued) != max(queued):
                top = max(queued) + 1
                return self._rng.choices(others, weights=[top - q for q in queued])[0]
        return others[self._rng.randrange(len(others))]
