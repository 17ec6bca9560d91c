"""The stream reader's offset logic with the cluster faked (no SparkSession, no brokers).

``client_io.discover`` / ``partition_offsets`` are replaced by a table of
partitions with log start offsets and high watermarks, so the rules can be
checked exactly: maxOffsetsPerTrigger as a read limit, AvailableNow never
passing its target, new partitions read from their log start, and
failOnDataLoss when retention deleted offsets a micro-batch asks for.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[spark]')")
# With pyspark installed, a missing pyarrow is an import error, not a skip.

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from kraftlog.ids import TopicPartition
from kraftlog.pipeline import client_io, source
from kraftlog.pipeline.options import DataLossError, parse_read_options


def tp(partition: int) -> TopicPartition:
    return TopicPartition(topic="t", partition=partition)


class FakeCluster:
    def __init__(self) -> None:
        self.log_start: dict[TopicPartition, int] = {tp(0): 0, tp(1): 0}
        self.hw: dict[TopicPartition, int] = {tp(0): 100, tp(1): 300}


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCluster]:
    fake = FakeCluster()

    @contextlib.contextmanager
    def consumer(options: object) -> Iterator[None]:
        yield None

    monkeypatch.setattr(source, "_consumer", consumer)
    monkeypatch.setattr(client_io, "discover", lambda _c, _s: sorted(fake.hw))
    monkeypatch.setattr(client_io, "partition_offsets", lambda _c, tps: (
        client_io.PartitionOffsets(log_start={t: fake.log_start[t] for t in tps},
                                   high_watermark={t: fake.hw[t] for t in tps})))
    yield fake


def reader(**options: str) -> source.KraftlogStreamReader:
    return source.KraftlogStreamReader(parse_read_options(
        {"bootstrap": "127.0.0.1:1", "topic": "t", **options}, streaming=True))


def ranges(r: source.KraftlogStreamReader, start: dict[str, object], end: dict[str, object]
           ) -> list[tuple[int, int, int]]:
    return [(p.rng.partition, p.rng.from_offset, p.rng.until_offset)
            for p in r.partitions(start, end)]  # type: ignore[attr-defined]


def test_initial_offsets_and_rate_limit(cluster: FakeCluster) -> None:
    r = reader(startingOffsets="earliest", maxOffsetsPerTrigger="100")
    start = r.initialOffset()
    assert start == {"t": {"0": 0, "1": 0}}
    assert r.getDefaultReadLimit() == ReadMaxRows(100)
    end = r.latestOffset(start, ReadMaxRows(100))
    assert end == {"t": {"0": 25, "1": 75}}
    assert ranges(r, start, end) == [(0, 0, 25), (1, 0, 75)]
    assert r.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 100, "1": 300}}
    assert reader().initialOffset() == {"t": {"0": 100, "1": 300}}  # default: latest


def test_available_now_stops_at_its_target_and_new_partitions_start_at_log_start(
        cluster: FakeCluster) -> None:
    r = reader()
    r.prepareForTriggerAvailableNow()
    cluster.hw[tp(0)] = 150  # arrives after the target: not read by this run
    start = {"t": {"0": 90, "1": 300}}
    assert r.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 100, "1": 300}}
    # A later run sees a new partition and reads it from its log start.
    cluster.hw[tp(2)], cluster.log_start[tp(2)] = 40, 5
    later = reader()
    later.prepareForTriggerAvailableNow()
    end = later.latestOffset({"t": {"0": 100, "1": 300}}, ReadAllAvailable())
    assert end == {"t": {"0": 150, "1": 300, "2": 40}}
    assert ranges(later, {"t": {"0": 100, "1": 300}}, end) == [(0, 100, 150), (2, 5, 40)]


def test_fail_on_data_loss_when_retention_deleted_requested_offsets(
        cluster: FakeCluster) -> None:
    cluster.log_start[tp(0)] = 60
    start, end = {"t": {"0": 50, "1": 0}}, {"t": {"0": 100, "1": 10}}
    with pytest.raises(DataLossError, match=r"^failOnDataLoss: offsets 50\.\.59 of t-0 were "
                                            r"deleted \(log start offset is 60\)"):
        reader().partitions(start, end)
    lenient = reader(failOnDataLoss="false")
    assert ranges(lenient, start, end) == [(0, 60, 100), (1, 0, 10)]
    del cluster.hw[tp(1)], cluster.log_start[tp(1)]  # the topic lost a partition
    with pytest.raises(DataLossError, match=r"t-1 no longer exists"):
        reader().partitions({"t": {"0": 60, "1": 0}}, end)
    assert ranges(lenient, {"t": {"0": 60, "1": 0}}, end) == [(0, 60, 100)]
