"""Offset ranges: what each Spark task reads, and how much one micro-batch takes.

Owns :class:`OffsetRange` (one input partition: ``[from_offset, until_offset)``
of one topic-partition), :func:`plan_ranges` (Spark's Kafka source rules: one
range per topic-partition, split into pieces of at most
``maxRecordsPerPartition`` records), :func:`rate_limit` (``maxOffsetsPerTrigger``
shared among partitions in proportion to what each has waiting, as
``KafkaMicroBatchStream.rateLimit`` does), and the streaming offset JSON
(``{"topic":{"0":23}}``) both ways. Called on the driver by
:mod:`kraftlog.pipeline.source`. Pure module: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from kraftlog.ids import TopicPartition


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetRange:
    """Records ``from_offset <= offset < until_offset`` of ``topic``-``partition``."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


def plan_ranges(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
                max_records_per_partition: int | None = None) -> list[OffsetRange]:
    """One range per partition in both maps with records to read, split by size.

    Partitions with ``start >= end`` give no range. Ordered by (topic, partition,
    from_offset) so task ids are stable across runs.
    """
    ranges: list[OffsetRange] = []
    for tp in sorted(set(start) & set(end)):
        begin, until = start[tp], end[tp]
        if begin >= until:
            continue
        step = until - begin if max_records_per_partition is None else max_records_per_partition
        for lo in range(begin, until, step):
            ranges.append(OffsetRange(topic=tp.topic, partition=tp.partition, from_offset=lo,
                                      until_offset=min(until, lo + step)))
    return ranges


def rate_limit(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               limit: int) -> dict[TopicPartition, int]:
    """End offsets taking at most about ``limit`` records in all, shared in proportion.

    Kafka's rule: a partition with ``size`` records waiting out of ``total`` gets
    ``limit * size / total``, rounded down (up when below one, so every partition
    with data makes progress). Partitions absent from ``start`` begin at their
    ``latest`` (nothing to read).
    """
    sizes = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(sizes.values())
    if total <= limit:
        return dict(latest)
    out: dict[TopicPartition, int] = {}
    for tp, until in latest.items():
        begin = start.get(tp, until)
        size = sizes[tp]
        if size == 0:
            out[tp] = until
            continue
        share = limit * size / total
        take = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(until, begin + take)
    return out


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """{TopicPartition: offset} -> ``{"topic": {"0": 23}}`` (Spark's Kafka offset JSON)."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return out


def offsets_from_json(document: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    """The inverse of :func:`offsets_to_json`."""
    return {TopicPartition(topic=topic, partition=int(p)): int(offset)
            for topic, parts in document.items() for p, offset in parts.items()}
