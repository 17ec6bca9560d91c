"""Batch read through the ``kraftlog`` Spark data source vs the kraftlog Consumer directly.

Starts a ``kraftlog dev`` cluster (3 controllers + 3 brokers + admin on loopback,
in a temporary directory, stopped at the end), creates a topic
(``--partitions``, replication factor 3), produces ``--records`` records of
``--record-bytes`` bytes, then alternates, ``--rounds`` times:

- anchor: one :class:`kraftlog.client.Consumer` (the data source's consumer
  settings) reads every partition from the beginning until it has every record;
- spark: ``spark.read.format("kraftlog")...load()`` written to Spark's ``noop``
  sink (every column materialised in the JVM) with ``local[2]`` (two executor
  threads, two Python workers), one input partition per topic-partition.

Prints records/s and MB/s (key + value bytes) for each and the ratio
spark/anchor (median over rounds; target >= 0.8), then one JSON line. The
SparkSession is started (and warmed up with one read) before timing; the time
of an empty read (Spark's fixed cost per query) is printed beside the ratio.

    .venv/bin/python bench/spark.py [--records 200000] [--record-bytes 100]
        [--partitions 6] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time
import uuid

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from dev_cluster import DevCluster  # noqa: E402

from kraftlog import client, pipeline  # noqa: E402
from kraftlog.pipeline import client_io  # noqa: E402


def produce(bootstrap: tuple[str, ...], topic: str, records: int, record_bytes: int,
            partitions: int) -> None:
    value = b"x" * record_bytes
    config = client.ProducerConfig(bootstrap_servers=bootstrap, acks=client.Acks.LEADER,
                                   batch_size=262144, linger_ms=20)
    with client.Producer(config) as producer:
        for n in range(records):
            producer.send(topic, value, partition=n % partitions)
        producer.flush(timeout_ms=300_000)


def read_with_consumer(bootstrap: tuple[str, ...], topic: str, records: int,
                       max_seconds: float) -> tuple[float, int]:
    started = time.perf_counter()
    total = size = 0
    with client.Consumer(client_io.consumer_config(bootstrap)) as consumer:
        parts = consumer.assign_topic(topic)
        consumer.seek_to_beginning(parts)
        while total < records:
            if time.perf_counter() - started > max_seconds:
                raise SystemExit(f"anchor: only {total} of {records} records in {max_seconds} s")
            batch = consumer.poll(max_records=client_io.POLL_RECORDS, timeout_ms=1000)
            total += len(batch)
            size += sum(len(r.value or b"") + len(r.key or b"") for r in batch)
    return time.perf_counter() - started, size


def read_with_spark(spark: object, bootstrap: tuple[str, ...], topic: str,
                    starting: str = "earliest") -> float:
    started = time.perf_counter()
    (spark.read.format("kraftlog")  # type: ignore[attr-defined]
     .option("bootstrap", ",".join(bootstrap)).option("topic", topic)
     .option("startingOffsets", starting).load()
     .write.format("noop").mode("overwrite").save())
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-seconds", type=float, default=300)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="kraftlog-bench-spark-"))
    cluster = DevCluster(tmp / "cluster")
    spark = None
    try:
        cluster.up()
        bootstrap = tuple(cluster.broker(b) for b in (101, 102, 103))
        topic = f"bench-spark-{uuid.uuid4().hex[:8]}"
        done = cluster.cli("topics", "create", "--topic", topic, "--partitions",
                           str(args.partitions), "--replication-factor", "3")
        if done.returncode != 0:
            raise SystemExit(done.stderr.strip())
        t0 = time.perf_counter()
        produce(bootstrap, topic, args.records, args.record_bytes, args.partitions)
        print(f"produced {args.records} records in {time.perf_counter() - t0:.1f} s")
        spark = (SparkSession.builder.master("local[2]").appName("kraftlog-bench")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        pipeline.register(spark)
        read_with_spark(spark, bootstrap, topic)  # warm-up: Python workers, JIT
        anchors: list[float] = []
        sparks: list[float] = []
        size = 0
        for _ in range(args.rounds):
            elapsed, size = read_with_consumer(bootstrap, topic, args.records, args.max_seconds)
            anchors.append(elapsed)
            sparks.append(read_with_spark(spark, bootstrap, topic))
        # Spark's fixed cost per query (planning in a Python worker, task launch): an
        # empty read, for the note beside the ratio.
        empty_s = read_with_spark(spark, bootstrap, topic, starting="latest")
        ratios = [a / s for a, s in zip(anchors, sparks, strict=True)]
        mb = size / 1e6
        anchor_s, spark_s = statistics.median(anchors), statistics.median(sparks)
        ratio = statistics.median(ratios)
        print(f"{'path':<10} {'records/s':>12} {'MB/s':>8}")
        print(f"{'consumer':<10} {args.records / anchor_s:>12,.0f} {mb / anchor_s:>8.1f}")
        print(f"{'spark':<10} {args.records / spark_s:>12,.0f} {mb / spark_s:>8.1f}")
        print(f"ratio spark/consumer (median of {args.rounds}): {ratio:.2f} (target >= 0.8); "
              f"an empty Spark read takes {empty_s:.1f} s")
        print(json.dumps({"bench": "spark", "records": args.records,
                          "record_bytes": args.record_bytes, "partitions": args.partitions,
                          "consumer_records_per_s": round(args.records / anchor_s),
                          "spark_records_per_s": round(args.records / spark_s),
                          "consumer_mb_per_s": round(mb / anchor_s, 2),
                          "spark_mb_per_s": round(mb / spark_s, 2),
                          "ratios": [round(r, 3) for r in ratios], "ratio": round(ratio, 3),
                          "spark_empty_read_s": round(empty_s, 2),
                          "pass": ratio >= 0.8}))
        return 0
    finally:
        if spark is not None:
            spark.stop()
        cluster.destroy()


if __name__ == "__main__":
    sys.exit(main())
