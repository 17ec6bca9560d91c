"""The ``kraftlog`` Spark data source against a 3-controller + 3-broker dev cluster.

One ``kraftlog dev`` cluster and one local[2] SparkSession for the module (started
side by side):

1. a DataFrame of 100,000 rows is written over 6 partitions (acks=all) and read
   back with ranges split by maxRecordsPerPartition: the same keys, values,
   partitions and headers, offsets 0..n-1 in every partition, timestamps set;
2. a streaming read with ``trigger(availableNow=True)`` and maxOffsetsPerTrigger
   reads exactly what was there in several micro-batches; restarted from its
   checkpoint after more records and a new partition, it reads exactly the new
   records: nothing lost, nothing twice;
3. a streaming write (readStream -> writeStream, both ``kraftlog``) copies a topic
   exactly, and resumes from its checkpoint;
4. bad options (unknown topic, malformed offsets JSON, two of topic/topics) and
   a failed produce fail with messages naming the option or the broker's error
   (the other option checks are in test_options_planning.py, without Spark);
5. a batch that does not decode (served by the in-process fake broker of
   tests/client/conftest.py, as a broker holding one would): a task hands over the rows
   before it, then the query fails naming the topic, partition and offset; with
   failOnDataLoss=false the task skips the batch and reads the rest.

Skipped only when pyspark is not importable (Java or pyarrow missing: an error,
see conftest.py). Every wait is bounded; the cluster
is stopped in ``finally``.
"""

from __future__ import annotations

import importlib.util
import pathlib
import struct
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import crc32c
import grpc
import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[spark]')")
# With pyspark installed, a missing pyarrow or Java is an error, not a skip (conftest.py).

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from kraftlog import client
from kraftlog.pipeline import client_io, planning
from kraftlog.pipeline.options import DataLossError
from kraftlog.storage import batch_header as bh
from kraftlog.storage import record_batch as rb
from kraftlog.v1 import broker_pb2_grpc
from tests.dev_cluster import DevCluster

ROWS = 100_000
PARTITIONS = 6


class Env:
    def __init__(self, spark: SparkSession, cluster: DevCluster, tmp: pathlib.Path) -> None:
        self.spark = spark
        self.cluster = cluster
        self.tmp = tmp
        self.bootstrap = ",".join(cluster.broker(b) for b in (101, 102, 103))

    def create_topic(self, name: str, partitions: int) -> None:
        done = self.cluster.cli("topics", "create", "--topic", name, "--partitions",
                                str(partitions), "--replication-factor", "3",
                                "--config", "min.insync.replicas=2")
        assert done.returncode == 0, done.stdout + done.stderr

    def read(self, topic: str, **options: str) -> Any:
        reader = self.spark.read.format("kraftlog").option("bootstrap", self.bootstrap)
        if "topicPattern" not in options:
            reader = reader.option("topic", topic)
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
        ) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("spark")
    cluster = DevCluster(tmp / "cluster")
    started: list[BaseException | None] = []

    def up() -> None:
        try:
            cluster.up()
            started.append(None)
        except BaseException as exc:
            started.append(exc)

    thread = threading.Thread(target=up, daemon=True)
    thread.start()
    try:
        # The module's SparkSession (conftest.py: fails, not skips, without Java) starts
        # while the cluster comes up.
        spark: SparkSession = request.getfixturevalue("spark")
        thread.join(timeout=150)
        assert started, "kraftlog dev up did not finish within 150 s"
        if started[0] is not None:
            raise started[0]
        yield Env(spark, cluster, tmp)
    finally:
        thread.join(timeout=150)
        cluster.destroy()


def test_write_then_read_100k_records_over_6_partitions(env: Env) -> None:
    env.create_topic("events", PARTITIONS)
    rows = (env.spark.range(0, ROWS, 1, 2)
            .select(F.col("id").cast("string").cast("binary").alias("key"),
                    F.concat(F.lit("value-"), F.col("id").cast("string")).alias("value"),
                    (F.col("id") % PARTITIONS).cast("int").alias("partition"),
                    F.when(F.col("id") % 1000 == 0, F.array(F.struct(
                        F.lit("h").alias("key"), F.col("id").cast("string").cast("binary")
                        .alias("value")))).otherwise(F.array().cast(
                            "array<struct<key:string,value:binary>>")).alias("headers")))
    rows.write.format("kraftlog").option("bootstrap", env.bootstrap) \
        .option("topic", "events").mode("append").save()

    df = env.read("events", startingOffsets="earliest", maxRecordsPerPartition="10000")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>")
    # 100,000 / 6 ~ 16,667 records per partition: two ranges each.
    assert df.rdd.getNumPartitions() == 2 * PARTITIONS
    table = df.toArrow()
    assert table.num_rows == ROWS
    keys = table.column("key").to_pylist()
    values = table.column("value").to_pylist()
    parts = table.column("partition").to_pylist()
    offsets = table.column("offset").to_pylist()
    headers = table.column("headers").to_pylist()
    assert set(table.column("topic").to_pylist()) == {"events"}
    assert set(table.column("timestampType").to_pylist()) == {0}
    assert table.column("timestamp").null_count == 0
    seen: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    ids = set()
    for key, value, part, offset, hs in zip(keys, values, parts, offsets, headers, strict=True):
        n = int(key)
        ids.add(n)
        assert value == f"value-{n}".encode()
        assert part == n % PARTITIONS
        assert hs == ([{"key": "h", "value": str(n).encode()}] if n % 1000 == 0 else [])
        seen[part].append(offset)
    assert ids == set(range(ROWS))
    for part, got in seen.items():
        assert sorted(got) == list(range(len(got))), f"partition {part} has gaps or repeats"

    # endingOffsets JSON and a slice by offsets.
    # topicPattern, startingOffsets/endingOffsets JSON: a slice by offsets.
    sliced = env.read("", topicPattern="ev.nts",
                      startingOffsets='{"events":{"0":10,"1":-2,"2":-2,"3":-2,"4":-2,"5":-1}}',
                      endingOffsets='{"events":{"0":20,"1":5,"2":0,"3":0,"4":0,"5":-1}}')
    got = sorted((r.partition, r.offset) for r in sliced.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(10, 20)] + [(1, o) for o in range(5)]
    assert env.read("events", startingOffsets="latest").count() == 0  # no range at all


def produce(env: Env, topic: str, start: int, count: int, partitions: int) -> None:
    config = client.ProducerConfig(bootstrap_servers=tuple(env.bootstrap.split(",")),
                                   acks=client.Acks.ALL)
    with client.Producer(config) as producer:
        futures = [producer.send(topic, f"s-{n}".encode(), partition=n % partitions)
                   for n in range(start, start + count)]
        producer.flush(timeout_ms=60000)
        for future in futures:
            future.result(timeout=0)


def test_streaming_available_now_resumes_from_checkpoint(env: Env) -> None:
    env.create_topic("stream", 2)
    produce(env, "stream", 0, 500, 2)
    out, checkpoint = env.tmp / "out", env.tmp / "checkpoint"

    def run() -> list[Any]:
        stream = (env.spark.readStream.format("kraftlog").option("bootstrap", env.bootstrap)
                  .option("topic", "stream").option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", "250").load())
        query = (stream.select("value", "partition", "offset").writeStream.format("parquet")
                 .option("path", str(out)).option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(120), "availableNow query did not finish in 120 s"
        assert query.exception() is None, query.exception()
        return [p for p in query.recentProgress if p["numInputRows"] > 0]

    first = run()
    assert sum(p["numInputRows"] for p in first) == 500
    assert len(first) == 2, "maxOffsetsPerTrigger=250 should take 2 micro-batches for 500"
    assert max(p["numInputRows"] for p in first) == 250

    produce(env, "stream", 500, 300, 2)
    grown = env.cluster.cli("topics", "alter", "--topic", "stream", "--partitions", "3")
    assert grown.returncode == 0, grown.stdout + grown.stderr
    produce(env, "stream", 800, 30, 3)  # 10 land on the new partition 2
    second = run()
    assert sum(p["numInputRows"] for p in second) == 330

    rows = env.spark.read.parquet(str(out)).collect()
    assert len(rows) == 830
    assert {(r.partition, r.offset) for r in rows}.__len__() == 830
    assert sorted(int(r.value.decode()[2:]) for r in rows) == list(range(830))
    assert {r.partition for r in rows} == {0, 1, 2}


def test_streaming_write_round_trips_through_a_topic(env: Env) -> None:
    """readStream(kraftlog) -> writeStream(kraftlog): every record of the source topic lands
    once in the sink topic (acks=all), with its key and partition; a restart from the
    checkpoint writes only what arrived since."""
    env.create_topic("stream-in", 2)
    env.create_topic("stream-out", 2)
    produce(env, "stream-in", 0, 400, 2)
    checkpoint = env.tmp / "sink-checkpoint"

    def run() -> list[Any]:
        source = (env.spark.readStream.format("kraftlog").option("bootstrap", env.bootstrap)
                  .option("topic", "stream-in").option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", "150").load())
        query = (source.select(F.col("offset").cast("string").alias("key"), "value",
                               "partition").writeStream.format("kraftlog")
                 .option("bootstrap", env.bootstrap).option("topic", "stream-out")
                 .option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(120), "streaming write did not finish in 120 s"
        assert query.exception() is None, query.exception()
        return [p for p in query.recentProgress if p["numInputRows"] > 0]

    first = run()
    assert sum(p["numInputRows"] for p in first) == 400
    assert len(first) == 3  # maxOffsetsPerTrigger=150: 150 + 150 + 100
    produce(env, "stream-in", 400, 100, 2)
    assert sum(p["numInputRows"] for p in run()) == 100

    out = env.read("stream-out", startingOffsets="earliest").select(
        "key", "value", "partition").collect()
    assert len(out) == 500
    assert sorted(int(r.value.decode()[2:]) for r in out) == list(range(500))
    source_rows = env.read("stream-in", startingOffsets="earliest").select(
        "offset", "value", "partition").collect()
    expected = {(str(r.offset).encode(), r.value, r.partition) for r in source_rows}
    assert {(r.key, r.value, r.partition) for r in out} == expected


def test_streaming_write_bad_options_fail_clearly(env: Env) -> None:
    source = (env.spark.readStream.format("kraftlog").option("bootstrap", env.bootstrap)
              .option("topic", "stream-in").load())
    with pytest.raises(Exception) as failure:
        (source.select("value").writeStream.format("kraftlog")
         .option("bootstrap", env.bootstrap).option("topic", "stream-out")
         .option("kafka.acks", "1")
         .option("checkpointLocation", str(env.tmp / "bad-checkpoint")).start()
         .awaitTermination(60))
    assert "kafka.acks: the kraftlog sink always produces with acks=all" in str(failure.value)


@pytest.mark.parametrize(("options", "message"), [
    ({"topic": "no-such-topic"}, "topic: topic 'no-such-topic' does not exist"),
    ({"topic": "events", "startingOffsets": '{"events":{"0":1'},
     "startingOffsets: malformed JSON"),
    ({"topic": "events", "topics": "events"}, "topic/topics/topicPattern: give exactly one"),
])
def test_bad_read_options_fail_naming_the_option(env: Env, options: dict[str, str],
                                                  message: str) -> None:
    reader = env.spark.read.format("kraftlog").option("bootstrap", env.bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    with pytest.raises(Exception) as failure:
        reader.load().count()
    assert message in str(failure.value), str(failure.value)[-2000:]


def test_failed_produce_fails_the_task_with_the_broker_error(env: Env) -> None:
    rows = env.spark.createDataFrame([(b"v", 99)], "value binary, partition int")
    with pytest.raises(Exception) as failure:
        rows.write.format("kraftlog").option("bootstrap", env.bootstrap) \
            .option("topic", "events").mode("append").save()
    assert "UNKNOWN_TOPIC_OR_PARTITION" in str(failure.value)
    no_value = env.spark.createDataFrame([(b"k",)], "key binary")
    with pytest.raises(Exception) as failure:
        no_value.write.format("kraftlog").option("bootstrap", env.bootstrap) \
            .option("topic", "events").mode("append").save()
    assert "value: the DataFrame needs a 'value' column" in str(failure.value)


# -- 5. corrupt batches ---------------------------------------------------------------------------

def _fake_broker_module() -> Any:
    """tests/client/conftest.py's FakeBroker (an in-process BrokerService), loaded by path."""
    path = pathlib.Path(__file__).parents[1] / "client" / "conftest.py"
    spec = importlib.util.spec_from_file_location("client_fake_broker", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _batch(base_offset: int, count: int) -> bytes:
    return rb.build_batch([rb.RecordInput(value=f"v{base_offset + i}".encode(), timestamp_ms=5)
                           for i in range(count)], base_offset=base_offset)


def _garbage(base_offset: int, count: int) -> bytes:
    """A CRC-valid batch whose records section is not records."""
    batch = bytearray(_batch(base_offset, count))
    size = len(batch) - bh.RECORDS_OFFSET
    batch[bh.RECORDS_OFFSET:] = (b"\xff\x13garbage" * size)[:size]
    struct.pack_into(">I", batch, bh.CRC_OFFSET, crc32c.crc32c(bytes(batch[bh.ATTRIBUTES_OFFSET:])))
    return bytes(batch)


@pytest.fixture
def poisoned() -> Iterator[str]:
    """A fake broker whose t-0 holds offsets 0..4, a bad batch at 5..7, then 8..9."""
    broker = _fake_broker_module().FakeBroker()
    broker.topics = {"t": 1}
    broker.logs[("t", 0)] = [_batch(0, 5), _garbage(5, 3), _batch(8, 2)]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    broker_pb2_grpc.add_BrokerServiceServicer_to_server(broker, server)
    broker.port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{broker.port}"
    finally:
        server.stop(grace=None)


def test_a_task_hands_over_the_rows_before_a_corrupt_batch_then_fails_naming_it(
        poisoned: str) -> None:
    rng = planning.OffsetRange(topic="t", partition=0, from_offset=0, until_offset=10)
    handed: list[int] = []
    with pytest.raises(DataLossError) as failure:
        for batch in client_io.read_range((poisoned,), rng, fail_on_data_loss=True,
                                          poll_timeout_ms=5000):
            handed += batch.column("offset").to_pylist()
    assert handed == [0, 1, 2, 3, 4]
    message = str(failure.value)
    assert "CORRUPT_MESSAGE" in message and "t-0 at offset 5" in message
    assert "failOnDataLoss=false to skip the batch" in message
    skipped = [o for batch in client_io.read_range((poisoned,), rng, fail_on_data_loss=False,
                                                    poll_timeout_ms=5000)
               for o in batch.column("offset").to_pylist()]
    assert skipped == [0, 1, 2, 3, 4, 8, 9]


def test_spark_fails_the_query_on_a_corrupt_batch_naming_it(spark: SparkSession,
                                                             poisoned: str) -> None:
    # One Spark job (they cost 10-40 s here): failOnDataLoss=false's skip is the same
    # read_range as the test above, which the task runs.
    df = spark.read.format("kraftlog").option("bootstrap", poisoned).option("topic", "t").load()
    with pytest.raises(Exception) as failure:
        df.collect()
    message = str(failure.value)
    assert "CORRUPT_MESSAGE" in message and "t-0 at offset 5" in message, message[-2000:]
