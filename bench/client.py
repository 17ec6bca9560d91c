"""Producer and consumer throughput of the client library against a local 3+3 cluster.

Starts three ``kraftlog controller`` and three ``kraftlog broker`` processes on
loopback (or uses ``--bootstrap-server`` for a running cluster, e.g.
``scripts/run.sh``), creates a topic (3 partitions, replication factor 3,
min.insync.replicas=2), then times:

- produce: ``--records`` records of ``--record-bytes`` bytes each through
  :class:`kraftlog.client.Producer` (null keys, sticky partitioner), for each
  ``acks`` setting asked, until every future is acknowledged;
- consume: every record back from the beginning through
  :class:`kraftlog.client.Consumer` (all partitions, one consumer).

Prints records/s and MB/s (payload bytes: key + value) and one JSON line. No
anchor yet: the Spark data source bench will use this consumer as its anchor.
Everything is bounded by ``--max-seconds`` per phase.

``--micro`` starts no cluster: it prints the client's own CPU cost per record
(``thread_time`` / ``process_time``, min of repeats, so other processes disturb it
little): ``Producer.send`` with the topic's metadata cached, and the consumer turning
fetched bytes (4 batches of 256 x ``--record-bytes``) into ConsumerRecords.

    .venv/bin/python bench/client.py [--records 200000] [--record-bytes 100]
        [--acks all,1] [--batch-size 65536] [--linger-ms 5] [--compression none]
        [--max-in-flight 5]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile
import time
import uuid

import grpc

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from quorum_cluster import BROKERS, SESSION, Brokers, Cluster, wait_for  # noqa: E402

from kraftlog import client  # noqa: E402
from kraftlog.v1 import common_pb2, controller_pb2, controller_pb2_grpc  # noqa: E402

PARTITIONS = 3


def create_topic(controllers: list[str], name: str) -> bool | None:
    request = controller_pb2.CreateTopicsRequest(topics=[
        controller_pb2.CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=PARTITIONS, replication_factor=3,
            configs=[controller_pb2.CreateTopicsRequest.CreatableTopicConfig(
                name="min.insync.replicas", value="2")])], timeout_ms=5000)
    for target in controllers:
        try:
            with grpc.insecure_channel(target) as channel:
                answer = controller_pb2_grpc.ControllerServiceStub(channel).CreateTopics(
                    request, timeout=5)
        except grpc.RpcError:
            continue
        if answer.error.code == common_pb2.NONE:
            if answer.topics[0].error.code not in (common_pb2.NONE,
                                                   common_pb2.TOPIC_ALREADY_EXISTS):
                raise SystemExit(f"CreateTopics failed: {answer.topics[0].error}")
            return True
    return None


def wait_ready(bootstrap: tuple[str, ...], topic: str) -> None:
    config = client.ProducerConfig(bootstrap_servers=bootstrap, max_block_ms=5000)
    with client.Producer(config) as producer:
        def ready() -> bool | None:
            producer.metadata.request_update()
            try:
                parts = producer.partitions_for(topic, timeout_ms=2000)
            except client.ClientError:
                return None
            return True if len(parts) == PARTITIONS and all(
                len(p.isr) == 3 and p.leader_id >= 0 for p in parts) else None
        wait_for(ready, timeout_s=30, what=f"{topic}: 3 partitions with a full ISR")


def produce(bootstrap: tuple[str, ...], topic: str, args: argparse.Namespace, acks: str
            ) -> dict[str, float]:
    config = client.ProducerConfig(
        bootstrap_servers=bootstrap, acks=client.Acks.parse(acks), linger_ms=args.linger_ms,
        batch_size=args.batch_size, compression_type=args.compression,
        buffer_memory=64 * 1024 * 1024,
        max_in_flight_requests_per_connection=args.max_in_flight)
    value = b"v" * args.record_bytes
    deadline = time.monotonic() + args.max_seconds
    sent = 0
    with client.Producer(config) as producer:
        # Warm up: metadata and channels, outside the timing.
        producer.send(topic, value).result(timeout=10)
        started = time.perf_counter()
        futures = []
        while sent < args.records and time.monotonic() < deadline:
            futures.append(producer.send(topic, value))
            sent += 1
        producer.flush(int(args.max_seconds * 1000))
        elapsed = time.perf_counter() - started
        failed = sum(1 for f in futures if f.exception() is not None)
    if failed:
        raise SystemExit(f"{failed} of {sent} records failed")
    return {"records": sent, "seconds": elapsed, "records_per_s": sent / elapsed,
            "mb_per_s": sent * args.record_bytes / elapsed / 1e6}


def consume(bootstrap: tuple[str, ...], topic: str, expected: int, args: argparse.Namespace
            ) -> dict[str, float]:
    config = client.ConsumerConfig(bootstrap_servers=bootstrap,
                                   auto_offset_reset=client.OffsetReset.EARLIEST,
                                   max_partition_fetch_bytes=args.partition_fetch_bytes)
    with client.Consumer(config) as consumer:
        consumer.assign_topic(topic)
        consumer.seek_to_beginning()
        for tp in consumer.assignment():
            consumer.position(tp)
        deadline = time.monotonic() + args.max_seconds
        count = 0
        payload = 0
        started = time.perf_counter()
        while count < expected and time.monotonic() < deadline:
            for record in consumer.poll(max_records=10000, timeout_ms=1000):
                payload += len(record.value or b"") + len(record.key or b"")
            # ^ touches every record, as an application would
                count += 1
        elapsed = time.perf_counter() - started
    return {"records": count, "seconds": elapsed, "records_per_s": count / elapsed,
            "mb_per_s": payload / elapsed / 1e6}


def micro(args: argparse.Namespace) -> None:
    """CPU cost per record of send() and of the consumer's decode + buffer + drain."""
    from kraftlog.client import metadata_client as md
    from kraftlog.ids import TopicPartition
    from kraftlog.storage import record_batch as rb

    count = 30_000
    config = client.ProducerConfig(bootstrap_servers=("127.0.0.1:1",), batch_size=args.batch_size,
                                   linger_ms=args.linger_ms, buffer_memory=1 << 30,
                                   max_block_ms=1000)
    producer = client.Producer(config)
    parts = tuple(md.PartitionInfo(topic="t", partition=i, leader_id=-1, leader_epoch=0,
                                   replicas=(), isr=(), offline_replicas=()) for i in range(6))
    # A fresh cached topic, as after the first send (no broker answers here).
    producer.metadata._topics["t"] = md.TopicInfo(name="t", partitions=parts)
    producer.metadata._wanted.add("t")
    producer.metadata._updated_at = time.monotonic()
    producer.metadata._stale = False
    value = b"v" * args.record_bytes
    send_s = float("inf")
    for _ in range(3):
        started = time.thread_time()
        for _ in range(count):
            producer.send("t", value)
        send_s = min(send_s, time.thread_time() - started)
    producer.close(timeout_ms=0)

    records = [rb.RecordInput(value=value, timestamp_ms=10**12 + i // 16) for i in range(256)]
    data = b"".join(rb.build_batch(records, base_offset=256 * i) for i in range(4))
    tp = TopicPartition(topic="t", partition=0)
    consumer = client.Consumer(client.ConsumerConfig(bootstrap_servers=("127.0.0.1:1",)))
    consumer._assigned = [tp]
    consume_s = float("inf")
    for _ in range(30):
        consumer._buffers.clear()
        started = time.process_time()
        consumer._buffer(tp, 0, data)
        while consumer._drain_buffers(10_000):
            pass
        consume_s = min(consume_s, time.process_time() - started)
    consumer.close()
    print(f"CPU per record, {args.record_bytes}-byte values: send() "
          f"{send_s / count * 1e6:.2f} us, consumer decode+buffer+drain "
          f"{consume_s / 1024 * 1e6:.2f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-server", help="use a running cluster (HOST:PORT,...)")
    parser.add_argument("--bootstrap-controller", default="127.0.0.1:19091,127.0.0.1:19092,"
                        "127.0.0.1:19093", help="its controllers, for CreateTopics")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--acks", default="all,1")
    parser.add_argument("--batch-size", type=int, default=65536)
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--compression", default="none")
    parser.add_argument("--max-in-flight", type=int, default=5,
                        help="the producer's max.in.flight.requests.per.connection")
    parser.add_argument("--partition-fetch-bytes", type=int, default=1048576)
    parser.add_argument("--max-seconds", type=float, default=60.0)
    parser.add_argument("--micro", action="store_true",
                        help="no cluster: CPU per record of send() and of the consumer")
    args = parser.parse_args()
    if args.micro:
        micro(args)
        return

    with tempfile.TemporaryDirectory(prefix="kraftlog-bench-client-") as tmp:
        root = pathlib.Path(tmp)
        cluster = brokers = None
        try:
            if args.bootstrap_server:
                bootstrap = tuple(args.bootstrap_server.split(","))
                controllers = args.bootstrap_controller.split(",")
            else:
                cluster = Cluster(root / "controllers", extra=SESSION)
                brokers = Brokers(root, cluster)
                for node in cluster.ports:
                    cluster.start(node)
                for broker in BROKERS:
                    brokers.start(broker)
                wait_for(lambda: True if all(brokers.serving(b) for b in BROKERS) else None,
                         timeout_s=30, what="brokers serving")
                bootstrap = tuple(f"127.0.0.1:{brokers.ports[b]}" for b in BROKERS)
                controllers = [f"127.0.0.1:{p}" for p in cluster.ports.values()]
            results: dict[str, dict[str, float]] = {}
            for acks in args.acks.split(","):
                topic = f"bench-{uuid.uuid4().hex[:8]}"
                wait_for(lambda t=topic: create_topic(controllers, t), timeout_s=15,
                         what="topic created")
                wait_ready(bootstrap, topic)
                results[f"produce acks={acks}"] = produce(bootstrap, topic, args, acks)
                produced = int(results[f"produce acks={acks}"]["records"]) + 1
                results[f"consume (acks={acks} topic)"] = consume(bootstrap, topic, produced,
                                                                  args)
        finally:
            if brokers is not None:
                brokers.kill_all()
            if cluster is not None:
                cluster.kill_all()
    print(f"client throughput, {args.record_bytes}-byte records, batch.size={args.batch_size}, "
          f"linger.ms={args.linger_ms}, compression={args.compression}, "
          f"max.in.flight={args.max_in_flight}, 3 partitions RF 3")
    print(f"{'phase':32} {'records':>9} {'seconds':>8} {'records/s':>11} {'MB/s':>7}")
    for name, row in results.items():
        print(f"{name:32} {int(row['records']):>9} {row['seconds']:>8.2f} "
              f"{row['records_per_s']:>11,.0f} {row['mb_per_s']:>7.1f}")
    print(json.dumps({"bench": "client", "record_bytes": args.record_bytes,
                      "batch_size": args.batch_size, "linger_ms": args.linger_ms,
                      "compression": args.compression, "max_in_flight": args.max_in_flight,
                      "results": results}))


if __name__ == "__main__":
    main()
